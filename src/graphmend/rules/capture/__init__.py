"""Capture: operators whose output size depends on tensor values stay in the graph.

Three passes, run in this order (``rewrite/pipeline.py``): ``loops`` (a loop over the
experts a batch chose runs over every expert), ``positions`` (``torch.where``, ``nonzero``,
``argwhere`` and boolean mask indexing kept in the graph) and ``merges`` (a branch
on whether positions are empty becomes a ``torch.cond``). Every static legality
condition of the rule is listed in ``conditions``; what only tracing can decide is in
``graphmend.runtime.dynamic_shapes`` and ``graphmend.runtime.expert_calls``.
"""
