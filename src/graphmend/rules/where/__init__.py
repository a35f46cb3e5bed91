"""Where: data-dependent two-way branches become a selection inside the graph.

Two passes, run in this order (``rewrite/pipeline.py``): ``branches`` (its plan and its
rewrite), and ``ranges`` (a comparison of a uniform draw that the draw's range decides,
taken while tracing). The static legality conditions of ``branches`` that read only
the branch are in ``conditions``, which lists the rest and those of ``ranges``. A branch
no selection can keep because its arms choose which existing object an attribute holds
is planned by ``performed`` (from ``branches``, with its own conditions). What only
tracing can decide is in ``graphmend.runtime.selection``,
``graphmend.runtime.attribute_access``, ``graphmend.runtime.drawn_ranges`` and
``graphmend.runtime.performed_choice``.
"""
