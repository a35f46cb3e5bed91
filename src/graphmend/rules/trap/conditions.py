"""Trap's static legality conditions (ids ``T101``-``T116`` in ``core/legality.py``).

Each check stays beside the pass that calls it, since it reads that pass's helpers;
this module gathers them so that every static condition of the rule is found in one
place. Each returns None when it holds or the reason it fails.
"""

from graphmend.rules.conditions import why_not_tensorizable  # T101, shared with Where (W101)
from graphmend.rules.trap.checks import (  # validation helper calls
    arguments_bind,  # T109
    message_calls_are_pure,  # T112
    message_holes_formattable,  # T111
    message_is_text,  # T110
)
from graphmend.rules.trap.guards import (  # guards and asserts
    exception_restorable,  # T102
    guard_body_only_raises,  # the candidate's shape: an `if` whose body is a lone `raise`
    message_free_of_effects,  # T105
    message_restorable,  # T104
    no_in_place_write_before_guard,  # T108
    not_called_inside_a_handler_in_this_module,  # T107
    not_caught_in_function,  # T106
    raised_name_may_be_a_class,  # T103
)
from graphmend.rules.trap.items import (  # `.item()` only checks read
    assigns_one_local,  # T113
    compared_with_integers,  # T116
    read_only_by_checks,  # T114
    reads_see_only_this_value,  # T115
)

__all__ = [
    "arguments_bind",
    "assigns_one_local",
    "compared_with_integers",
    "exception_restorable",
    "guard_body_only_raises",
    "message_calls_are_pure",
    "message_free_of_effects",
    "message_holes_formattable",
    "message_is_text",
    "message_restorable",
    "no_in_place_write_before_guard",
    "not_called_inside_a_handler_in_this_module",
    "not_caught_in_function",
    "raised_name_may_be_a_class",
    "read_only_by_checks",
    "reads_see_only_this_value",
    "why_not_tensorizable",
]
