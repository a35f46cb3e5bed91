"""Capture's static legality conditions (ids ``C101``-``C117``, ``C120``-``C121`` in ``core/legality.py``).

Each check stays beside the pass that calls it, since it reads that pass's helpers
(the loop body's shape, the branch's positions); this module gathers them so that
every static condition of the rule is found in one place. Each returns None when it
holds or the reason it fails (some return it with what the later checks read).
"""

from graphmend.rules.capture.loops import (  # a loop over the experts a batch chose
    body_does_nothing_for_an_unchosen_expert,  # C106
    destination_is_bound_at_the_loop,  # C108
    hit_rows_unpacked_as_classes,  # C116
    hits_are_classes_in_order,  # C104
    hits_read_only_by_the_loop,  # C105
    loop_names_stay_in_the_loop,  # C107
    skip_tests_only_the_class_count,  # C117
)
from graphmend.rules.capture.merges import (  # a branch on whether positions are empty
    body_names_stay_in_the_body,  # C113
    body_only_binds_names,  # C111
    body_reads_its_names_after_binding_them,  # C112
    body_reads_only_bound_names,  # C114
    destination_is_bound_at_the_branch,  # C115
    ends_by_writing_rows_at_the_positions,  # C110
    tests_whether_positions_are_empty,  # C109
)
from graphmend.rules.capture.positions import (  # positions of nonzero elements
    arguments_bind_plainly,  # C101
    positions_stay_tensors,  # C103
    statement_is_simple,  # C102
)
from graphmend.rules.capture.values import (  # a tensor's integers copied to a list
    assigns_one_local,  # C120
    numbers_only_handed_on,  # C121
)

__all__ = [
    "arguments_bind_plainly",
    "assigns_one_local",
    "body_does_nothing_for_an_unchosen_expert",
    "body_names_stay_in_the_body",
    "body_only_binds_names",
    "body_reads_its_names_after_binding_them",
    "body_reads_only_bound_names",
    "destination_is_bound_at_the_branch",
    "destination_is_bound_at_the_loop",
    "ends_by_writing_rows_at_the_positions",
    "hit_rows_unpacked_as_classes",
    "hits_are_classes_in_order",
    "hits_read_only_by_the_loop",
    "loop_names_stay_in_the_loop",
    "numbers_only_handed_on",
    "positions_stay_tensors",
    "skip_tests_only_the_class_count",
    "statement_is_simple",
    "tests_whether_positions_are_empty",
]
