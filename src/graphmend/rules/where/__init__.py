"""Where: data-dependent two-way branches become a selection inside the graph.

Two passes, run in this order (``rewrite/pipeline.py``): ``branches`` (its plan and its
rewrite), and ``ranges`` (a comparison of a uniform draw that the draw's range decides,
taken while tracing); and two after every rule, on what the others left:
``written_back`` (a tensor attribute written back as its own conversion, left out
while tracing where that changes nothing) and ``fixed_values`` (a test or padding
computed from a module's fixed tensors, decided while tracing). The static legality
conditions of ``branches`` that read only the branch are in ``conditions``, which lists the rest and those of ``ranges``. A branch
no selection can keep because its arms choose which existing object an attribute holds
is planned by ``performed`` (from ``branches``, with its own conditions). What only
tracing can decide is in ``graphmend.runtime.selection``,
``graphmend.runtime.attribute_access``, ``graphmend.runtime.drawn_ranges``,
``graphmend.runtime.performed_choice``, ``graphmend.runtime.written_back`` and
``graphmend.runtime.fixed_values``.
"""
