"""Where: data-dependent two-way branches become a selection inside the graph.

Two passes, run in this order (``rewrite/pipeline.py``): ``branches`` (its plan and its
rewrite), and ``ranges`` (a comparison of a uniform draw that the draw's range decides,
taken while tracing). The static legality conditions of ``branches`` that read only
the branch are in ``conditions``, which lists the rest and those of ``ranges``. What
only tracing can decide is in ``graphmend.runtime.selection``,
``graphmend.runtime.attribute_access`` and ``graphmend.runtime.drawn_ranges``.
"""
