"""``graphmend rule``: what a break category means and what graphmend does about it.

    graphmend rule          list the categories
    graphmend rule CODE     explain one (DC, LC, VG, TI, DS, DO), as ``ruff rule`` does

For a category a rule rewrites, the text is the rule's own documentation (its rewrite
and its legality conditions, each a named predicate in the rule's file), then the
checks every rule's rewrite passes while TorchDynamo traces.
"""

from __future__ import annotations

import importlib
import inspect
import sys

from graphmend.cli.config import ConfigError, OneLineErrorParser, usage_error
from graphmend.rewrite.findings import (
    CATEGORY_TITLES,
    DATA_DEPENDENT_CONTROL_FLOW,
    DATA_DEPENDENT_OPERATOR,
    DYNAMIC_SHAPE_OPERATOR,
    LOGGER_CALL,
    TENSOR_ITEM,
    VALIDATION_GUARD,
)

PROGRAM = "graphmend rule"

# category -> the module of the rule that rewrites it
_RULE_MODULES = {
    DATA_DEPENDENT_CONTROL_FLOW: "graphmend.rules.where",
    LOGGER_CALL: "graphmend.rules.defer",
    VALIDATION_GUARD: "graphmend.rules.trap",
    DYNAMIC_SHAPE_OPERATOR: "graphmend.rules.capture",
}
# Further files of the same rule, documented after its main one.
_MORE_RULE_MODULES = {
    VALIDATION_GUARD: ("graphmend.rules.trap_checks",),
    DYNAMIC_SHAPE_OPERATOR: ("graphmend.rules.capture_loops", "graphmend.rules.capture_merges"),
}

_UNFIXED = {
    TENSOR_ITEM: (
        "`tensor.item()` (and `.tolist()`) copies a tensor value into a Python number.\n"
        "TorchDynamo breaks the graph there unless `torch._dynamo.config.capture_scalar_outputs`\n"
        "is set, which changes other programs' behaviour. One whose value only a known\n"
        "validation check reads stays a tensor (Trap, below); any other is reported, not\n"
        "rewritten, so that its cost is visible."
    ),
    DATA_DEPENDENT_OPERATOR: (
        "An operator TorchDynamo reports as data dependent: its result (not only its shape)\n"
        "cannot be traced from the shapes of its inputs. No graphmend rule rewrites it."
    ),
}

# Categories reported in general, of which one rule rewrites a narrow case.
_PARTLY_REWRITTEN_BY = {TENSOR_ITEM: "graphmend.rules.trap_items"}

# What a category holds beyond what its rule rewrites.
_NOT_REWRITTEN_BY_THE_RULE = {
    DYNAMIC_SHAPE_OPERATOR: (
        "Other operators whose output shape depends on tensor values (`unique`,\n"
        "`unique_consecutive`, `masked_select`) are reported, not rewritten."
    ),
}

_WHOLE_TRACE_CHECKS = """\
Checked over the whole trace, for every rule (graphmend.runtime.claims): before
TorchDynamo compiles a graph in which a statement lost its break, the break is kept
and the frame traced again where
  - an op after it fails while TorchDynamo traces it (no_later_op_failed_while_tracing);
  - TorchDynamo gives up on the frame after it and would run it all eagerly
    (frame_was_not_given_up_while_tracing);
  - the joined graph enters torch.inference_mode() (joined_graph_enters_no_inference_mode),
    or writes in place an inference tensor it is given
    (joined_graph_writes_no_inference_tensor_in_place);
  - under autograd: the joined graph holds a selection or a capture
    (joined_graph_records_no_autograd); the backend neither runs the graph as written
    nor is aot_eager (backend_differentiates_as_written); under aot_eager, a graph
    input receives gradient contributions in more than one of the original's graphs,
    or a tensor made in the graph two or more in a later graph of the original that is
    not the last to contribute (gradient_sums_keep_their_order), or a tensor made
    before it is an output of the joined graph (earlier_tensors_stay_in_the_graph);
  - the joined graph writes through out=, under a backend that does not run the graph
    as written (joined_graph_writes_through_no_out_keyword);
  - random draws sit on both sides of it (random_draws_stay_on_their_side);
  - a batch norm reads a tensor that is not contiguous, under a backend that plans
    views by the traced strides (batch_norms_read_contiguous_tensors);
  - TorchDynamo broke the graph at a merged branch's torch.cond (merged_branches_were_traced);
  - output shares the graph with a lowered guard (outputs_share_no_graph_with_a_lowered_guard)
    or, under a backend that may reorder, with an input written in place
    (outputs_share_no_graph_with_an_input_written_in_place);
  - an ordered operator (output, lowered guard) shares the graph with an input written
    in place that shares its memory with another input, under a backend that does
    not run the graph as written (ordered_operators_share_no_graph_with_aliased_inputs_written_in_place);
  - the rest of the original frame ran eagerly and the mended frame still breaks later
    (rest_of_eager_frame_compiles_whole);
  - for Trap's kept .item(): no check that reads the value is lowered in the same
    graph (items_stay_with_lowered_checks);
  - for Capture: the graph breaks on the size the capture made, or tracing needs that
    size on the host, in the frame or in a function it calls (captured_sizes_decide_no_break):
    the capture would remove no break.
`graphmend explain` names the check for a break kept this way. No statement loses its
break inside torch.inference_mode() (not_inside_inference_mode)."""


def _category_list() -> str:
    lines = []
    for code, title in CATEGORY_TITLES.items():
        module = _RULE_MODULES.get(code)
        handled = f"rewritten by {module.rsplit('.', 1)[1].capitalize()}" if module else "reported, not rewritten"
        lines.append(f"  {code}  {title:<36} {handled}")
    return "\n".join(lines)


def explain_category(code: str) -> str:
    """The text ``graphmend rule CODE`` prints."""
    title = CATEGORY_TITLES[code]
    module_name = _RULE_MODULES.get(code)
    if module_name is None:
        text = f"{code}: {title}\n\n{_UNFIXED[code]}"
        partly = _PARTLY_REWRITTEN_BY.get(code)
        if partly is not None:
            text += "\n\n" + inspect.cleandoc(importlib.import_module(partly).__doc__ or "")
        return text
    module = importlib.import_module(module_name)
    rule_name = module_name.rsplit(".", 1)[1].capitalize()
    parts = [inspect.cleandoc(module.__doc__ or "")]
    for more in _MORE_RULE_MODULES.get(code, ()):
        parts.append(inspect.cleandoc(importlib.import_module(more).__doc__ or ""))
    documentation = "\n\n".join(parts)
    others = _NOT_REWRITTEN_BY_THE_RULE.get(code)
    documentation += f"\n\n{others}" if others else ""
    return f"{code}: {title}, rewritten by {rule_name}\n\n{documentation}\n\n{_WHOLE_TRACE_CHECKS}"


def build_parser() -> OneLineErrorParser:
    parser = OneLineErrorParser(
        prog=PROGRAM,
        description="Explain a graph-break category and what graphmend does about it.",
    )
    parser.add_argument("code", nargs="?", help=f"one of {', '.join(CATEGORY_TITLES)}; none to list them")
    return parser


def rule_command(argv: list[str]) -> int:
    try:
        arguments = build_parser().parse_args(argv)
    except ConfigError as error:
        return usage_error(PROGRAM, str(error))
    if arguments.code is None:
        print("graph-break categories (graphmend rule CODE explains one):")
        print(_category_list())
        return 0
    code = arguments.code.upper()
    if code not in CATEGORY_TITLES:
        return usage_error(PROGRAM, f"unknown category {arguments.code!r}; choose from {', '.join(CATEGORY_TITLES)}")
    sys.stdout.write(explain_category(code) + "\n")
    return 0
