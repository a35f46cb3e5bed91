"""Where: data-dependent two-way branches become a selection inside the graph.

One pass, ``branches`` (its plan and its rewrite); the static legality conditions that
read only the branch are in ``conditions``, which lists the rest. What only tracing can
decide is in ``graphmend.runtime.selection`` and ``graphmend.runtime.attribute_access``.
"""
