"""The registry of legality conditions: every condition a rewrite must pass, by id.

A rewrite is legal only when every one of its conditions holds. A condition is decided
in one of three phases:

- ``static``: from the source, when a rule plans the rewrite (``graphmend/rules/``); a
  failure leaves the source as it was and ``graphmend check`` reports it;
- ``while tracing``: from the values TorchDynamo holds at the statement
  (``graphmend/runtime/``); a failure runs the original statement, with its break;
- ``whole trace``: from the graph TorchDynamo is about to compile
  (``graphmend/runtime/whole_trace_conditions.py``); a failure traces the frame again with the
  statement's break kept.

Ids are ``<rule letter><phase digit><two digits>``: the letter is the rule's initial
(``T`` Trap, ``W`` Where, ``D`` Defer, ``C`` Capture) or ``G`` for a condition every rule
passes; the digit is the phase (``1`` static, ``2`` while tracing, ``3`` whole trace).
An id is never reused or renumbered: a condition that goes away leaves a gap.

A failing check returns its reason marked with the id (``failed(ID, reason)``), so the
id travels with the reason to findings, ``graphmend check`` and ``graphmend explain``.
This module must not import torch: the static side runs without it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Self

STATIC = "static"
WHILE_TRACING = "while tracing"
WHOLE_TRACE = "whole trace"
PHASES = (STATIC, WHILE_TRACING, WHOLE_TRACE)

EVERY_RULE = "every rule"
RULES = ("Trap", "Where", "Defer", "Capture", EVERY_RULE)

_RULE_LETTERS = {"Trap": "T", "Where": "W", "Defer": "D", "Capture": "C", EVERY_RULE: "G"}
_PHASE_DIGITS = {STATIC: "1", WHILE_TRACING: "2", WHOLE_TRACE: "3"}


@dataclass(frozen=True)
class Condition:
    """One legality condition. ``check`` is ``module:function``, the function that
    decides it (named as text so that reading the registry imports neither the rules
    nor the runtime, which needs torch)."""

    id: str
    rule: str
    phase: str
    name: str
    doc: str
    check: str

    @property
    def label(self) -> str:
        return f"{self.id} {self.name}"


class Reason(str):
    """Why a condition failed, in words a user can act on, marked with its id.

    A ``str``: every place that shows, stores or compares reasons keeps working; the id
    is lost only where the text is rebuilt, which is why a site that rebuilds it marks
    the result again."""

    condition: str

    def __new__(cls, text: str, condition: str = "") -> Self:
        reason = super().__new__(cls, text)
        reason.condition = condition
        return reason

    def __reduce__(self):
        return (Reason, (str(self), self.condition))

    # ``reason + "; kept as a call"`` and ``"line 3: " + reason`` keep the id.
    def __add__(self, other: str) -> Reason:
        return Reason(str(self) + other, self.condition)

    def __radd__(self, other: str) -> Reason:
        return Reason(other + str(self), self.condition)


def failed(condition_id: str, reason: str | None) -> Reason | None:
    """``reason`` marked as the failure of condition ``condition_id``; None (the
    condition holds) stays None. An id already on ``reason`` is replaced: the outer
    condition is the one the user sees decline."""
    if not reason:
        return None
    return Reason(str(reason), condition_id)


def restated(reason: str, text: str) -> Reason:
    """``text`` (a sentence that quotes ``reason``) marked with ``reason``'s id."""
    return Reason(text, condition_id(reason) or "")


def condition_id(reason: str | None) -> str | None:
    """The id ``reason`` is marked with, if any."""
    return getattr(reason, "condition", None) or None


_T = "Trap"
_W = "Where"
_D = "Defer"
_C = "Capture"
_G = EVERY_RULE

_CONDITIONS = (
    # Trap, static (rules/trap/conditions.py): guards and asserts (rules/trap/guards.py),
    # validation helper calls (rules/trap/checks.py), `.item()` only checks read
    # (rules/trap/items.py).
    (_T, STATIC, "T101", "condition_is_tensorizable", "graphmend.rules.conditions:why_not_tensorizable",
     "the guard's condition is a tensor value with no `.item()`, and every `and`/`or` operand is safe to evaluate"),
    (_T, STATIC, "T102", "exception_restorable", "graphmend.rules.trap.guards:exception_restorable",
     "the raise names a module-level exception class with at most one message argument, no `from`"),
    (_T, STATIC, "T103", "raised_name_may_be_a_class", "graphmend.rules.trap.guards:raised_name_may_be_a_class",
     "the raised name may be an exception class (not a value, a function or another class)"),
    (_T, STATIC, "T104", "message_restorable", "graphmend.rules.trap.guards:message_restorable",
     "the message is a string expression that does not depend on tensor values"),
    (_T, STATIC, "T105", "message_free_of_effects", "graphmend.rules.trap.guards:message_free_of_effects",
     "building the message has no effects, since the lowered guard builds it even when it holds"),
    (_T, STATIC, "T106", "not_caught_in_function", "graphmend.rules.trap.guards:not_caught_in_function",
     "no enclosing `try` or `with` in the function may catch or suppress the exception"),
    (_T, STATIC, "T107", "not_called_inside_a_handler_in_this_module",
     "graphmend.rules.trap.guards:not_called_inside_a_handler_in_this_module",
     "no function of the module calls this one inside a `try` or `with` block"),
    (_T, STATIC, "T108", "no_in_place_write_before_guard", "graphmend.rules.trap.guards:no_in_place_write_before_guard",
     "nothing the caller can see is written in place before the guard (a failed assertion would lose it)"),
    (_T, STATIC, "T109", "arguments_bind", "graphmend.rules.trap.checks:arguments_bind",
     "a validation helper's arguments bind plainly to (cond, msg, error_type)"),
    (_T, STATIC, "T110", "message_is_text", "graphmend.rules.trap.checks:message_is_text",
     "a validation helper's message is text, not a function called only on failure"),
    (_T, STATIC, "T111", "message_holes_formattable", "graphmend.rules.trap.checks:message_holes_formattable",
     "a message that depends on tensor values is an f-string with plain holes"),
    (_T, STATIC, "T112", "message_calls_are_pure", "graphmend.rules.trap.checks:message_calls_are_pure",
     "every call in a validation helper's message is pure"),
    (_T, STATIC, "T113", "assigns_one_local", "graphmend.rules.trap.items:assigns_one_local",
     "the `.item()` value is bound to a local that no nested scope reads"),
    (_T, STATIC, "T114", "read_only_by_checks", "graphmend.rules.trap.items:read_only_by_checks",
     "the `.item()` value is read only in validation checks' conditions and messages"),
    (_T, STATIC, "T115", "reads_see_only_this_value", "graphmend.rules.trap.items:reads_see_only_this_value",
     "every read of the name sees only the `.item()` binding"),
    (_T, STATIC, "T116", "compared_with_integers", "graphmend.rules.trap.items:compared_with_integers",
     "the `.item()` value is compared only with integers, which a tensor compares alike"),
    # Trap, while tracing (runtime/traps.py, runtime/checks.py).
    (_T, WHILE_TRACING, "T201", "raised_class_is_exception", "graphmend.runtime.traps:raised_class_is_exception",
     "the raised name holds an exception class while tracing"),
    (_T, WHILE_TRACING, "T202", "no_handler_in_traced_frames", "graphmend.runtime.traps:no_handler_in_traced_frames",
     "no handler in the frames TorchDynamo traces would catch the exception"),
    (_T, WHILE_TRACING, "T203", "no_handler_in_eager_callers", "graphmend.runtime.traps:no_handler_in_eager_callers",
     "a compiled-call boundary exists, where the exception is restored for eager callers"),
    (_T, WHILE_TRACING, "T204", "no_input_mutated_before_guard", "graphmend.runtime.traps:no_input_mutated_before_guard",
     "the traced region writes no input in place before the guard"),
    (_T, WHILE_TRACING, "T205", "no_pending_side_effect_before_guard",
     "graphmend.runtime.traps:no_pending_side_effect_before_guard",
     "the traced region has no pending side effect before the guard"),
    (_T, WHILE_TRACING, "T206", "callee_is_known_check", "graphmend.runtime.checks:callee_is_known_check",
     "the called helper is the known validation helper, not a name bound to another function"),
    (_T, WHILE_TRACING, "T207", "checks_enabled", "graphmend.runtime.checks:checks_enabled",
     "the validation helper's checks are not disabled"),
    (_T, WHILE_TRACING, "T208", "holes_renderable", "graphmend.runtime.checks:holes_renderable",
     "each tensor in the message is a 0-d plain tensor and every other value a constant of the trace"),
    (_T, WHILE_TRACING, "T209", "error_type_raisable", "graphmend.runtime.checks:error_type_raisable",
     "the helper's error type is an exception class"),
    # Trap, whole trace (runtime/whole_trace_conditions.py).
    (_T, WHOLE_TRACE, "T301", "items_stay_with_lowered_checks", "graphmend.runtime.whole_trace_conditions:items_stay_with_lowered_checks",
     "a kept `.item()` shares its graph with a lowered check that reads it"),
    # Where, static (rules/where/conditions.py; the rest in rules/where/branches.py,
    # with analysis/aliasing.py and analysis/safety.py).
    (_W, STATIC, "W101", "condition_is_tensorizable", "graphmend.rules.conditions:why_not_tensorizable",
     "the branch's condition is a tensor value with no `.item()`, and every `and`/`or` operand is safe to evaluate"),
    (_W, STATIC, "W102", "static_part_guards_no_else_arm", "graphmend.rules.where.branches:apply",
     "a static `and` part of the condition guards no branch with an else arm"),
    (_W, STATIC, "W103", "arms_leave_only_at_their_end", "graphmend.rules.where.conditions:arms_leave_only_at_their_end",
     "no `return`, `break`, `continue` or `raise` inside an arm"),
    (_W, STATIC, "W104", "arms_end_alike", "graphmend.rules.where.conditions:arms_end_alike",
     "both arms return, or neither does"),
    (_W, STATIC, "W105", "returned_value_is_not_none", "graphmend.rules.where.conditions:returned_value_is_not_none",
     "an arm that returns returns a value, not None"),
    (_W, STATIC, "W106", "setup_statement_runs_on_both_paths",
     "graphmend.rules.where.branches:WhereRewrite.setup_statement_runs_on_both_paths",
     "each statement of an arm binds locals to expressions that cannot raise, write or draw random numbers"),
    (_W, STATIC, "W107", "arm_results_run_on_both_paths", "graphmend.rules.where.branches:WhereRewrite.analyse_arm",
     "a returned value or a shared call's callee and arguments cannot raise, write or draw random numbers"),
    (_W, STATIC, "W108", "writes_no_outer_name", "graphmend.rules.where.conditions:writes_no_outer_name",
     "no name an arm binds is global or nonlocal, and the function reads no locals by name"),
    (_W, STATIC, "W109", "bound_on_both_paths", "graphmend.rules.where.conditions:bound_on_both_paths",
     "a name read after the branch is bound on both paths"),
    (_W, STATIC, "W110", "selected_value_is_fresh", "graphmend.rules.where.branches:WhereRewrite.selected_value_is_fresh",
     "each value the selection picks is a new object the arm computed, not an existing one"),
    (_W, STATIC, "W111", "carried_value_is_the_only_reference",
     "graphmend.rules.where.branches:WhereRewrite.carried_value_is_the_only_reference",
     "an earlier value an arm carries into another name is not read after the branch and is passed on once"),
    (_W, STATIC, "W112", "nothing_updated_in_place_while_selected_is_read",
     "graphmend.rules.where.branches:WhereRewrite.nothing_updated_in_place_while_selected_is_read",
     "a selected existing object is only consumed, and nothing updates a tensor in place before it is read"),
    (_W, STATIC, "W113", "selected_names_hold_distinct_objects",
     "graphmend.rules.where.conditions:selected_names_hold_distinct_objects",
     "an arm does not make two selected names one object"),
    (_W, STATIC, "W114", "merged_call_means_one_callee", "graphmend.rules.where.conditions:merged_call_means_one_callee",
     "the arms' shared call has one callee and the same keywords, reading no name an arm binds"),
    # Where, static: a comparison of a uniform draw its range decides (rules/where/ranges.py).
    (_W, STATIC, "W115", "draw_is_the_only_definition", "graphmend.rules.where.ranges:draw_is_the_only_definition",
     "the compared name's only reaching definition is `NAME = torch.rand(...)` or `torch.rand_like(...)`, no `out=`"),
    (_W, STATIC, "W116", "draw_read_only_by_comparisons", "graphmend.rules.where.ranges:draw_read_only_by_comparisons",
     "every read of the draw is a side of an ordering comparison: nothing writes, aliases or passes it on"),
    (_W, STATIC, "W117", "comparison_only_tested", "graphmend.rules.where.ranges:comparison_only_tested",
     "the comparison's value is only tested for truth, never kept, so a bool may stand for its 0-d tensor"),
    (_W, STATIC, "W118", "comparison_rewritable_in_place", "graphmend.rules.where.ranges:comparison_rewritable_in_place",
     "the comparison is in the function's own scope, and its other side binds no name and does not suspend"),
    # Where's performed choice, static (rules/where/performed.py).
    (_W, STATIC, "W119", "arms_end_writing_one_attribute", "graphmend.rules.where.performed:arms_end_writing_one_attribute",
     "both arms end by writing another attribute's object to one attribute of one receiver (`R.a = R.b`)"),
    (_W, STATIC, "W120", "arms_write_only_the_receiver", "graphmend.rules.where.performed:arms_write_only_the_receiver",
     "every other statement of the arms writes the receiver's attributes, calls its methods, or memoizes one"),
    (_W, STATIC, "W121", "arms_bind_no_name_read_after", "graphmend.rules.where.performed:arms_bind_no_name_read_after",
     "no name an arm binds is read after the branch"),
    (_W, STATIC, "W122", "arms_read_bound_locals", "graphmend.rules.where.performed:arms_read_bound_locals",
     "each local the arms read is bound on every path to the branch"),
    (_W, STATIC, "W123", "arguments_are_plain_reads", "graphmend.rules.where.written_back:arguments_are_plain_reads",
     "a tensor attribute written back as its own `to(...)` converts by names, constants, `.dtype` or `.device`"),
    # Where, while tracing (runtime/selection.py, runtime/attribute_access.py,
    # runtime/drawn_ranges.py, runtime/performed_choice.py, runtime/fixed_values.py,
    # runtime/written_back.py).
    (_W, WHILE_TRACING, "W201", "operands_combine", "graphmend.runtime.selection:operands_combine",
     "every outside value the hoisted code combines has the kind it needs, and all broadcast together"),
    (_W, WHILE_TRACING, "W202", "graph_so_far_may_continue", "graphmend.runtime.selection:graph_so_far_may_continue",
     "the graph captured up to the branch draws no random numbers"),
    (_W, WHILE_TRACING, "W203", "reads_plainly", "graphmend.runtime.attribute_access:reads_plainly",
     "an attribute both arms read exists and reading it runs none of the program's code"),
    (_W, WHILE_TRACING, "W204", "writes_plainly", "graphmend.runtime.attribute_access:writes_plainly",
     "a licensed write left out would have run no `__setattr__` or setter"),
    (_W, WHILE_TRACING, "W205", "is_the_method", "graphmend.runtime.attribute_access:is_the_method",
     "a call `self.m(...)` reaches the method read in the class, no override or wrapper"),
    (_W, WHILE_TRACING, "W206", "moves_nothing", "graphmend.runtime.selection:moves_nothing",
     "a licensed device move `self.a = self.a.to(d)` finds the tensor on `d` already"),
    (_W, WHILE_TRACING, "W207", "values_select_exactly", "graphmend.runtime.selection:select",
     "both values are plain tensors of one shape, dtype, device and strides that require no grad"),
    (_W, WHILE_TRACING, "W208", "draw_made_by_uniform_op", "graphmend.runtime.drawn_ranges:draw_made_by_uniform_op",
     "the compared draw is a plain tensor the graph made by `torch.rand` or `torch.rand_like`, no `out=`"),
    (_W, WHILE_TRACING, "W209", "draw_has_one_floating_element",
     "graphmend.runtime.drawn_ranges:draw_has_one_floating_element",
     "the draw has exactly one element, by a static size, a floating dtype and a value (not meta)"),
    (_W, WHILE_TRACING, "W210", "other_operand_decides", "graphmend.runtime.drawn_ranges:other_operand_decides",
     "the other operand is a Python int or float constant for which the draw's range decides the comparison"),
    (_W, WHILE_TRACING, "W211", "arms_read_values_fixed_in_trace", "graphmend.runtime.performed_choice:why_not_fixed_in_trace",
     "the performed arms read only constants of the trace and objects it is guarded on by identity, no tensor"),
    (_W, WHILE_TRACING, "W212", "chosen_attribute_is_a_plain_buffer", "graphmend.runtime.performed_choice:why_not_a_plain_buffer",
     "the attribute the performed choice writes is a plain strided tensor that requires no grad"),
    (_W, WHILE_TRACING, "W213", "arms_record_no_autograd", "graphmend.runtime.performed_choice:why_arms_may_record_autograd",
     "with grad mode on, the objects the performed arms read hold no tensor that requires grad"),
    (_W, WHILE_TRACING, "W214", "arms_read_nothing_the_trace_wrote",
     "graphmend.runtime.performed_choice:arms_read_nothing_the_trace_wrote",
     "before the branch the trace wrote nothing to the receiver, an argument or an object reached through one"),
    (_W, WHILE_TRACING, "W215", "chosen_objects_share_the_layout", "graphmend.runtime.performed_choice:chosen_objects_share_the_layout",
     "every existing object an arm may choose has the attribute's shape, strides, dtype and device"),
    (_W, WHILE_TRACING, "W216", "value_computed_from_fixed_tensors",
     "graphmend.runtime.fixed_values:why_not_a_fixed_tensor",
     "a test or padding is one element computed from static sizes and a module's non-persistent integer buffers"),
    (_W, WHILE_TRACING, "W217", "computed_by_pure_operators", "graphmend.runtime.fixed_values:why_not_computed_again",
     "every operator between those tensors and the value is arithmetic, a comparison, a rounding or a conversion"),
    (_W, WHILE_TRACING, "W218", "fixed_tensors_not_written", "graphmend.runtime.fixed_values:why_written_or_changed",
     "no fixed tensor is written in place in the trace (through a view too), changed value since an earlier "
     "trace read it, or meets a frame traced again with a value no earlier trace read at the statement "
     "(unless each such trace had inputs of other static sizes, which trace again in the original too), "
     "and no other live module of the class, which the frame may be called with, holds another value; "
     "no method of the module's class (but `__init__`) writes it"),
    (_W, WHILE_TRACING, "W219", "conversion_returns_the_tensor",
     "graphmend.runtime.written_back:conversion_returns_the_tensor",
     "the attribute holds a plain tensor that `to(...)` returns itself (its device and dtype, no copy), "
     "guarded as the trace reads it"),
    (_W, WHILE_TRACING, "W220", "writing_it_back_changes_nothing",
     "graphmend.runtime.written_back:writing_it_back_changes_nothing",
     "reading and writing the tensor back run torch's own `__getattr__` and `__setattr__`, no buffer hook, "
     "and keep its persistence"),
    (_W, WHILE_TRACING, "W221", "attribute_not_written_in_the_trace",
     "graphmend.runtime.written_back:attribute_not_written_in_the_trace",
     "the trace has not changed the owner before the write"),
    # Where, whole trace (runtime/performed_choice.py).
    (_W, WHOLE_TRACE, "W301", "stand_in_leaves_only_as_the_attribute",
     "graphmend.runtime.performed_choice:keep_stand_ins_out_of_replay",
     "the copy the graph reads for the chosen attribute is held by nothing but that attribute"),
    (_W, WHOLE_TRACE, "W302", "trace_reads_nothing_else_written",
     "graphmend.runtime.performed_choice:trace_reads_nothing_else_written",
     "the trace reads none of the other attributes the performed arms write"),
    (_W, WHOLE_TRACE, "W303", "fixed_tensors_not_written_later",
     "graphmend.runtime.whole_trace_conditions:fixed_tensors_not_written_later",
     "the graph writes none of the fixed tensors a decided test or padding read, after it either"),
    # Defer, static (rules/defer/conditions.py; the pass is rules/defer/outputs.py).
    (_D, STATIC, "D101", "callee_is_real", "graphmend.rules.defer.conditions:callee_is_real",
     "the callee is provably `print`, a `logging.Logger` method or `warnings.warn`"),
    (_D, STATIC, "D102", "keywords_supported", "graphmend.rules.defer.conditions:keywords_supported",
     "no keyword depends on the call stack at the call (`stacklevel=`, `exc_info=`, `**kwargs`)"),
    (_D, STATIC, "D103", "not_deprecated_logger_warn", "graphmend.rules.defer.conditions:not_deprecated_logger_warn",
     "the call is not `Logger.warn`, which warns from the caller's line"),
    (_D, STATIC, "D104", "callee_on_one_line", "graphmend.rules.defer.conditions:callee_on_one_line",
     "the callee is spelled on one line, where the record's location points"),
    (_D, STATIC, "D105", "not_inside_with", "graphmend.rules.defer.conditions:not_inside_with",
     "the call is not inside a `with` block that may redirect or suppress its output"),
    (_D, STATIC, "D106", "warning_not_caught_here", "graphmend.rules.defer.conditions:warning_not_caught_here",
     "a warning is not inside a `try`, where a filter set to `error` would raise past its handlers"),
    (_D, STATIC, "D107", "arguments_do_not_format_tensor_values",
     "graphmend.rules.defer.conditions:arguments_do_not_format_tensor_values",
     "no argument formats or converts a value computed from tensor data at the call (others are decided while tracing, D208)"),
    (_D, STATIC, "D108", "no_trap_after", "graphmend.rules.defer.conditions:no_trap_after",
     "no lowered guard follows the output in the function"),
    (_D, STATIC, "D109", "item_reads_made_again_unchanged", "graphmend.rules.defer.conditions:item_reads_made_again_unchanged",
     "a print or log call that reads `name.item()` is built of names, constants and f-strings of them"),
    # Defer, while tracing (runtime/output_decisions.py, runtime/output_call_arguments.py).
    (_D, WHILE_TRACING, "D201", "no_input_written_in_place_before", "graphmend.runtime.output_decisions:no_input_written_in_place_before",
     "the traced region writes no input in place before the output"),
    (_D, WHILE_TRACING, "D202", "no_output_state_changed_in_trace", "graphmend.runtime.output_decisions:no_output_state_changed_in_trace",
     "the trace changes no state the output reads (the logger, its handlers, filters, `sys.stdout`)"),
    (_D, WHILE_TRACING, "D203", "no_print_options_changed_in_trace", "graphmend.runtime.output_decisions:no_print_options_changed_in_trace",
     "the trace does not change torch's print options before the output"),
    (_D, WHILE_TRACING, "D204", "no_earlier_output_in_graph", "graphmend.runtime.output_decisions:no_earlier_output_in_graph",
     "no earlier output in the graph would be shown out of order"),
    (_D, WHILE_TRACING, "D205", "nothing_lost_if_the_warning_raises", "graphmend.runtime.output_decisions:nothing_lost_if_the_warning_raises",
     "a warning that a filter turns into an error loses nothing the graph did before it"),
    (_D, WHILE_TRACING, "D206", "exact_in_graph", "graphmend.runtime.output_decisions:why_not_exact_in_graph",
     "the logger, handlers, filters and warning filters allow the exact text inside the graph"),
    (_D, WHILE_TRACING, "D207", "call_does_not_fail", "graphmend.runtime.output_decisions:why_the_call_fails",
     "the call's arguments are those the callee accepts (separators, level, message, `extra`)"),
    (_D, WHILE_TRACING, "D208", "message_formatted_at_the_call", "graphmend.runtime.output_decisions:text_fixed_at_the_call",
     "every value an argument formats or converts is text TorchDynamo made at the call, not a format it applies when the graph ends (a tensor's, an object's own)"),
    (_D, WHILE_TRACING, "D209", "listed_values_read_before_the_call", "graphmend.runtime.output_operands:elements_unread",
     "every number or string in a list or tuple argument is a value the frame read before the call, so printing it guards on no new value; "
     "the list is not empty in a frame's first compilation (a later call's might hold such values)"),
    # Defer, whole trace (runtime/whole_trace_conditions.py).
    (_D, WHOLE_TRACE, "D301", "outputs_share_no_graph_with_a_lowered_guard",
     "graphmend.runtime.whole_trace_conditions:outputs_share_no_graph_with_a_lowered_guard",
     "output shares no graph with a lowered guard, unless the backend keeps the graph's order"),
    (_D, WHOLE_TRACE, "D302", "outputs_share_no_graph_with_an_input_written_in_place",
     "graphmend.runtime.whole_trace_conditions:outputs_share_no_graph_with_an_input_written_in_place",
     "output shares no graph with an input written in place, unless the backend keeps the graph's order"),
    (_D, WHOLE_TRACE, "D303", "outputs_follow_no_output_of_a_data_dependent_size",
     "graphmend.runtime.whole_trace_conditions:outputs_follow_no_output_of_a_data_dependent_size",
     "no output follows, in one graph, an output that reads a value of a size only the graph knows, "
     "unless the backend keeps the graph's order"),
    # Capture, static (rules/capture/conditions.py: rules/capture/positions.py, loops.py,
    # merges.py).
    (_C, STATIC, "C101", "arguments_bind_plainly", "graphmend.rules.capture.positions:arguments_bind_plainly",
     "the call passes only the tensor positionally and at most a constant `as_tuple`"),
    (_C, STATIC, "C102", "statement_is_simple", "graphmend.rules.capture.positions:statement_is_simple",
     "the positions are not computed in a loop or branch header"),
    (_C, STATIC, "C103", "positions_stay_tensors", "graphmend.rules.capture.positions:positions_stay_tensors",
     "the positions are never copied to Python, which needs their count on the host"),
    (_C, STATIC, "C104", "hits_are_classes_in_order", "graphmend.rules.capture.loops:hits_are_classes_in_order",
     "the loop iterates the chosen classes, computed just before it from a mask"),
    (_C, STATIC, "C105", "hits_read_only_by_the_loop", "graphmend.rules.capture.loops:hits_read_only_by_the_loop",
     "the list of chosen classes is read only by the loop, which has no `else`"),
    (_C, STATIC, "C106", "body_does_nothing_for_an_unchosen_expert",
     "graphmend.rules.capture.loops:body_does_nothing_for_an_unchosen_expert",
     "the body computes from one expert's positions and ends by adding its values there"),
    (_C, STATIC, "C107", "loop_names_stay_in_the_loop", "graphmend.rules.capture.loops:loop_names_stay_in_the_loop",
     "no name the loop binds is bound or read outside it"),
    (_C, STATIC, "C108", "destination_is_bound_at_the_loop", "graphmend.rules.capture.loops:destination_is_bound_at_the_loop",
     "the tensor the loop adds into is bound before the loop"),
    (_C, STATIC, "C109", "tests_whether_positions_are_empty",
     "graphmend.rules.capture.merges:tests_whether_positions_are_empty",
     "the branch tests whether a name's positions are empty, with no `else`"),
    (_C, STATIC, "C110", "ends_by_writing_rows_at_the_positions",
     "graphmend.rules.capture.merges:ends_by_writing_rows_at_the_positions",
     "the branch's body ends by writing rows at the positions"),
    (_C, STATIC, "C111", "body_only_binds_names", "graphmend.rules.capture.merges:body_only_binds_names",
     "the body only binds names, as a `torch.cond` branch can"),
    (_C, STATIC, "C112", "body_reads_its_names_after_binding_them",
     "graphmend.rules.capture.merges:body_reads_its_names_after_binding_them",
     "the body reads the names it binds only after binding them, and none is global"),
    (_C, STATIC, "C113", "body_names_stay_in_the_body", "graphmend.rules.capture.merges:body_names_stay_in_the_body",
     "no name the body binds is read or updated after the branch"),
    (_C, STATIC, "C114", "body_reads_only_bound_names", "graphmend.rules.capture.merges:body_reads_only_bound_names",
     "every outside name the body reads is bound at the branch"),
    (_C, STATIC, "C115", "destination_is_bound_at_the_branch",
     "graphmend.rules.capture.merges:destination_is_bound_at_the_branch",
     "the tensor the branch writes rows into is bound at the branch"),
    (_C, STATIC, "C116", "hit_rows_unpacked_as_classes", "graphmend.rules.capture.loops:hit_rows_unpacked_as_classes",
     "a loop over the rows of `nonzero()` takes each row's class first (`e = e[0]`) or reads the row only as an index"),
    (_C, STATIC, "C117", "skip_tests_only_the_class_count",
     "graphmend.rules.capture.loops:skip_tests_only_the_class_count",
     "a leading `if e == E: continue` compares the class with the mask's own number of classes"),
    (_C, STATIC, "C120", "assigns_one_local", "graphmend.rules.capture.values:assigns_one_local",
     "`NAME = EXPR.tolist()` binds a plain local, not global or read by a nested function"),
    (_C, STATIC, "C121", "numbers_only_handed_on", "graphmend.rules.capture.values:numbers_only_handed_on",
     "every read of the list hands it on whole: a call's argument, what is returned, `len()`"),
    # Capture, while tracing (runtime/dynamic_shapes.py, runtime/expert_calls.py,
    # runtime/captured_values.py).
    (_C, WHILE_TRACING, "C201", "experts_are_a_module_list", "graphmend.runtime.dynamic_shapes:why_not_run_empty_exactly",
     "the experts are a torch `ModuleList` or `Sequential` with an expert for every class"),
    (_C, WHILE_TRACING, "C202", "no_module_hooks", "graphmend.runtime.expert_calls:global_hooks",
     "no global module hook (forward, pre-forward, backward) is set"),
    (_C, WHILE_TRACING, "C203", "no_expert_gradients", "graphmend.runtime.dynamic_shapes:why_not_run_empty_exactly",
     "no gradient is recorded for an expert's parameters"),
    (_C, WHILE_TRACING, "C204", "expert_calls_are_known", "graphmend.runtime.expert_calls:why_call_not_known",
     "each expert's whole call is known to do nothing on no rows"),
    (_C, WHILE_TRACING, "C205", "destination_is_unseen", "graphmend.runtime.dynamic_shapes:why_destination_may_be_seen",
     "the tensor written with no rows is one this graph made, that nothing has read or saved"),
    (_C, WHILE_TRACING, "C206", "body_keeps_its_captures", "graphmend.runtime.dynamic_shapes:body_keeps_its_captures",
     "the loop body's capture of positions may be made in this trace"),
    (_C, WHILE_TRACING, "C207", "expert_tensors_cover_every_class",
     "graphmend.runtime.dynamic_shapes:why_not_run_empty_exactly",
     "each tensor stacking the experts is a plain parameter or buffer, read with no code, with a row for every class"),
    (_C, WHILE_TRACING, "C208", "torchdynamo_does_not_capture_it", "graphmend.runtime.dynamic_shapes:torchdynamo_captures_it",
     "TorchDynamo is not told to capture data-dependent output sizes itself (`capture_dynamic_output_shape_ops`)"),
    (_C, WHILE_TRACING, "C210", "values_are_integers_of_a_static_count",
     "graphmend.runtime.captured_values:why_not_values_of_a_static_count",
     "the tensor has one dimension (or none), a static count of at most 256 values, an integer dtype"),
    # Capture, whole trace (runtime/whole_trace_conditions.py).
    (_C, WHOLE_TRACE, "C301", "captured_sizes_decide_no_break", "graphmend.runtime.whole_trace_conditions:captured_sizes_decide_no_break",
     "the graph does not break on a size a capture made, and tracing never needs it on the host"),
    (_C, WHOLE_TRACE, "C302", "merged_branches_were_traced", "graphmend.runtime.whole_trace_conditions:merged_branches_were_traced",
     "TorchDynamo did not break the graph at a merged branch's `torch.cond`"),
    # Every rule, static (rewrite/suppressions.py).
    (_G, STATIC, "G101", "not_suppressed", "graphmend.rewrite.suppressions:is_suppressed",
     "no `# graphmend: ignore` comment names the statement's category"),
    # Every rule, while tracing (runtime/claims.py).
    (_G, WHILE_TRACING, "G201", "trace_checks_available", "graphmend.runtime.claims:trace_checks_unavailable",
     "this torch has the TorchDynamo functions the whole-trace checks wrap"),
    (_G, WHILE_TRACING, "G202", "not_inside_inference_mode", "graphmend.runtime.claims:not_inside_inference_mode",
     "the statement is not traced inside `torch.inference_mode()`"),
    (_G, WHILE_TRACING, "G203", "no_global_value_guarded_before_the_first_op",
     "graphmend.runtime.claims:no_global_value_guarded_before_the_first_op",
     "where the frame computes nothing before the statement, its trace guards on no module global's value "
     "or length, nor on a number or string reached from a local (`self.index`, an argument) or the length of "
     "a container reached so (`len(items)`), nor, in a resume function, "
     "on a number the frame computed before its break (which, changing, would compile the mended frame's "
     "whole graph where the original's had none)"),
    (_G, WHILE_TRACING, "G204", "no_other_path_reaches_it_before_the_first_op",
     "graphmend.runtime.claims:no_other_path_reaches_it_before_the_first_op",
     "where the frame is a resume function that computes nothing before the statement, no other path of "
     "the function reaches the statement (the original shared the code after it between the paths, "
     "compiled once)"),
    (_G, WHILE_TRACING, "G205", "no_earlier_compile_of_the_frame_before_the_first_op",
     "graphmend.runtime.claims:no_earlier_compile_of_the_frame_before_the_first_op",
     "where the frame computes nothing before the statement, TorchDynamo compiles the frame for the first "
     "time or made no resume function at its line yet (else the original's frame broke there with no graph "
     "and ran the resume function an earlier compilation made)"),
    # Every rule, whole trace (runtime/whole_trace_conditions.py).
    (_G, WHOLE_TRACE, "G301", "no_later_op_failed_while_tracing", "graphmend.runtime.whole_trace_conditions:no_later_op_failed_while_tracing",
     "no op after the statement fails while TorchDynamo traces it"),
    (_G, WHOLE_TRACE, "G302", "frame_was_not_given_up_while_tracing",
     "graphmend.runtime.whole_trace_conditions:frame_was_not_given_up_while_tracing",
     "TorchDynamo does not give up on the frame after the statement (refused in that frame's code only)"),
    (_G, WHOLE_TRACE, "G303", "joined_graph_records_no_autograd", "graphmend.runtime.whole_trace_conditions:joined_graph_records_no_autograd",
     "a joined graph with a capture, or a selection that records autograd itself, records no autograd"),
    (_G, WHOLE_TRACE, "G304", "joined_graph_enters_no_inference_mode",
     "graphmend.runtime.whole_trace_conditions:joined_graph_enters_no_inference_mode",
     "the joined graph does not enter `torch.inference_mode()`"),
    (_G, WHOLE_TRACE, "G305", "joined_graph_writes_no_inference_tensor_in_place",
     "graphmend.runtime.whole_trace_conditions:joined_graph_writes_no_inference_tensor_in_place",
     "the joined graph writes no inference tensor it is given in place"),
    (_G, WHOLE_TRACE, "G321", "joined_graph_records_no_autograd_on_an_inference_tensor",
     "graphmend.runtime.whole_trace_conditions:joined_graph_records_no_autograd_on_an_inference_tensor",
     "no op of the joined graph that records autograd reads an inference tensor the graph is given"),
    (_G, WHOLE_TRACE, "G306", "joined_graph_writes_through_no_out_keyword",
     "graphmend.runtime.whole_trace_conditions:joined_graph_writes_through_no_out_keyword",
     "the joined graph writes through no `out=`, unless the backend runs the graph as written"),
    (_G, WHOLE_TRACE, "G307", "random_draws_stay_on_their_side", "graphmend.runtime.whole_trace_conditions:random_draws_stay_on_their_side",
     "random draws do not sit on both sides of the statement"),
    (_G, WHOLE_TRACE, "G308", "batch_norms_read_contiguous_tensors",
     "graphmend.runtime.whole_trace_conditions:batch_norms_read_contiguous_tensors",
     "every batch norm reads a contiguous tensor, unless the backend runs the graph as written"),
    (_G, WHOLE_TRACE, "G309", "ordered_operators_share_no_graph_with_aliased_inputs_written_in_place",
     "graphmend.runtime.whole_trace_conditions:ordered_operators_share_no_graph_with_aliased_inputs_written_in_place",
     "output and lowered guards share no graph with an input written in place that aliases another input"),
    (_G, WHOLE_TRACE, "G310", "rest_of_eager_frame_compiles_whole",
     "graphmend.runtime.whole_trace_conditions:rest_of_eager_frame_compiles_whole",
     "where the rest of the original frame ran eagerly, the mended frame compiles to its end in one graph"),
    (_G, WHOLE_TRACE, "G311", "backend_differentiates_as_written",
     "graphmend.runtime.whole_trace_conditions:backend_differentiates_as_written",
     "under autograd, the backend runs the graph as written or is aot_eager"),
    (_G, WHOLE_TRACE, "G312", "gradient_sums_keep_their_order",
     "graphmend.runtime.whole_trace_conditions:gradient_sums_keep_their_order",
     "under aot_eager, every tensor's gradient contributions are summed in the original's order"),
    (_G, WHOLE_TRACE, "G313", "earlier_tensors_stay_in_the_graph",
     "graphmend.runtime.whole_trace_conditions:earlier_tensors_stay_in_the_graph",
     "under aot_eager, no tensor that autograd records, made before the statement, leaves the joined graph"),
    (_G, WHOLE_TRACE, "G314", "backend_compiles_the_joined_graph",
     "graphmend.runtime.whole_trace_conditions:backend_compiles_the_joined_graph",
     "the backend compiles the joined graph (else the frame is traced again with the breaks)"),
    (_G, WHOLE_TRACE, "G315", "graph_holds_an_op_of_the_program",
     "graphmend.runtime.whole_trace_conditions:graph_holds_an_op_of_the_program",
     "the joined graph computes something of the program's own, not only graphmend's operators "
     "(a graph of those alone is one the original did not compile)"),
    (_G, WHOLE_TRACE, "G316", "inlined_claims_guard_no_global_the_trace_writes",
     "graphmend.runtime.whole_trace_conditions:inlined_claims_guard_no_global_the_trace_writes",
     "a statement inside an inlined call joins where the trace guards on no module global it also writes "
     "(else the caller compiles again on every call)"),
    (_G, WHOLE_TRACE, "G320", "claims_precede_no_guard_on_a_global_the_trace_writes",
     "graphmend.runtime.whole_trace_conditions:claims_precede_no_guard_on_a_global_the_trace_writes",
     "a statement with ops before it and none after joins where the trace guards on no module global it "
     "also writes, first guarded after the statement (else those ops compile again on every call)"),
    (_G, WHOLE_TRACE, "G317", "break_resumes_in_the_order_of_an_earlier_resume_function",
     "graphmend.runtime.whole_trace_conditions:break_resumes_in_the_order_of_an_earlier_resume_function",
     "a trace with claims that breaks where TorchDynamo made a resume function already takes the frame's "
     "names in that function's order (else it makes another, and compiles the code after the break again)"),
    (_G, WHOLE_TRACE, "G318", "rest_of_eager_frame_guards_no_resumed_list",
     "graphmend.runtime.whole_trace_conditions:rest_of_eager_frame_guards_no_resumed_list",
     "where the rest of the original frame ran eagerly (a break in a loop), the mended frame, a resume "
     "function, guards on no list of numbers its frame computed before the break (`.tolist()` of the "
     "experts hit: else it compiles again for each new list, where the original's ran eagerly with no graph)"),
    (_G, WHOLE_TRACE, "G319", "values_join_where_the_graph_runs_as_written",
     "graphmend.runtime.whole_trace_conditions:values_join_where_the_graph_runs_as_written",
     "under autograd, a graph that reads a tensor's integers as sizes (`.tolist()`) is joined only where the "
     "backend runs the graph as written"),
)


def _build(entries) -> dict[str, Condition]:
    conditions: dict[str, Condition] = {}
    for rule, phase, id_, name, check, doc in entries:
        conditions[id_] = Condition(id=id_, rule=rule, phase=phase, name=name, doc=doc, check=check)
    return conditions


CONDITIONS: dict[str, Condition] = _build(_CONDITIONS)


def expected_prefix(rule: str, phase: str) -> str:
    """The two characters every id of ``rule`` in ``phase`` begins with."""
    return _RULE_LETTERS[rule] + _PHASE_DIGITS[phase]


def conditions_of(rule: str | None = None, phase: str | None = None) -> list[Condition]:
    """The registered conditions of ``rule`` (None: all; ``EVERY_RULE``: those every rule
    passes) in ``phase`` (None: all), in id order within each phase."""
    return [
        condition
        for condition in CONDITIONS.values()
        if (rule is None or condition.rule == rule) and (phase is None or condition.phase == phase)
    ]


def label_of(reason: str | None) -> str | None:
    """``"W103 arms_leave_only_at_their_end"`` for a reason marked with a registered id."""
    condition = CONDITIONS.get(condition_id(reason) or "")
    return condition.label if condition is not None else None


def declined(rule: str, reason: str | None) -> str:
    """``Where declined [W103 arms_leave_only_at_their_end]: <reason>`` (no brackets for a
    reason without an id)."""
    label = label_of(reason)
    return f"{rule} declined [{label}]: {reason}" if label else f"{rule} declined: {reason}"
