"""``graphmend rule``: what a break category means, what graphmend does about it, and
the legality conditions of its rewrite.

    graphmend rule          list the categories and every legality condition
    graphmend rule CODE     explain a category (DC, LC, VG, TI, DS, DO), as ``ruff rule``
                            does, or one condition by id (W103) or name

For a category a rule rewrites, the text is the rule's own documentation, then its
legality conditions by phase and those every rule passes, all from the registry
(``graphmend.core.legality``). None of it imports torch: a condition's check is
described from its source.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import os
import sys

import graphmend
from graphmend.cli.config import ConfigError, OneLineErrorParser, usage_error
from graphmend.core.legality import (
    CONDITIONS,
    EVERY_RULE,
    PHASES,
    WHOLE_TRACE,
    Condition,
    conditions_of,
)
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

# category -> the main module of the rule that rewrites it (graphmend.rules.RULE.PASS)
_RULE_MODULES = {
    DATA_DEPENDENT_CONTROL_FLOW: "graphmend.rules.where.branches",
    LOGGER_CALL: "graphmend.rules.defer.outputs",
    VALIDATION_GUARD: "graphmend.rules.trap.guards",
    DYNAMIC_SHAPE_OPERATOR: "graphmend.rules.capture.positions",
}
# Further files of the same rule, documented after its main one.
_MORE_RULE_MODULES = {
    DATA_DEPENDENT_CONTROL_FLOW: (
        "graphmend.rules.where.ranges", "graphmend.rules.where.written_back", "graphmend.rules.where.fixed_values",
    ),
    VALIDATION_GUARD: ("graphmend.rules.trap.checks",),
    DYNAMIC_SHAPE_OPERATOR: ("graphmend.rules.capture.loops", "graphmend.rules.capture.merges"),
}

_UNFIXED = {
    TENSOR_ITEM: (
        "`tensor.item()` (and `.tolist()`) copies a tensor value into a Python number.\n"
        "TorchDynamo breaks the graph there unless `torch._dynamo.config.capture_scalar_outputs`\n"
        "is set, which changes other programs' behaviour. One whose value only a known\n"
        "validation check reads stays a tensor (Trap, below); a list of integers only\n"
        "handed on whole (split sizes) is read in the graph (Capture, below); any other\n"
        "is reported, not rewritten, so that its cost is visible."
    ),
    DATA_DEPENDENT_OPERATOR: (
        "An operator TorchDynamo reports as data dependent: its result (not only its shape)\n"
        "cannot be traced from the shapes of its inputs. It is reported, not rewritten, but\n"
        "for a padding computed from a module's fixed tensors (Where, below)."
    ),
}

# Categories reported in general, of which one rule rewrites a narrow case.
_PARTLY_REWRITTEN_BY = {
    TENSOR_ITEM: ("graphmend.rules.trap.items", "graphmend.rules.capture.values"),
    DATA_DEPENDENT_OPERATOR: ("graphmend.rules.where.fixed_values",),
}

# What a category holds beyond what its rule rewrites.
_NOT_REWRITTEN_BY_THE_RULE = {
    DYNAMIC_SHAPE_OPERATOR: (
        "Other operators whose output shape depends on tensor values (`unique`,\n"
        "`unique_consecutive`, `masked_select`) are reported, not rewritten."
    ),
}

_PHASE_TITLES = {
    "static": "Static, when the source is rewritten (a failure leaves the source as it was)",
    "while tracing": "While tracing, at the statement (a failure runs the original statement)",
    WHOLE_TRACE: (
        "Whole trace, before the graph is compiled (graphmend.runtime.whole_trace_conditions:\n"
        "a failure traces the frame again with the statement's break kept)"
    ),
}


def _condition_lines(conditions: list[Condition]) -> list[str]:
    return [f"  {condition.id}  {condition.name}: {condition.doc}" for condition in conditions]


def conditions_text(rule: str) -> str:
    """The legality conditions of ``rule`` by phase, then those every rule passes."""
    parts = [f"Legality conditions of {rule} (`graphmend rule ID` explains one):"]
    for phase in PHASES:
        own = conditions_of(rule, phase)
        if own:
            parts.append(f"{_PHASE_TITLES[phase]}:")
            parts.extend(_condition_lines(own))
    parts.append("Passed by every rule's rewrite:")
    for phase in PHASES:
        shared = conditions_of(EVERY_RULE, phase)
        if shared:
            parts.append(f"{_PHASE_TITLES[phase]}:")
            parts.extend(_condition_lines(shared))
    parts.append(
        "`graphmend check` and `graphmend explain` print the id of the condition a rewrite failed."
    )
    return "\n".join(parts)


def _check_documentation(check: str) -> str:
    """The docstring of ``module:qualified.name``, read from the source (no import)."""
    module_name, _, qualified_name = check.partition(":")
    # Found by path: importlib.util.find_spec would import the parent package, and
    # graphmend.runtime imports torch.
    package, *parts = module_name.split(".")
    path = os.path.join(os.path.dirname(graphmend.__file__), *parts) + ".py"
    if package != "graphmend":
        return ""
    try:
        with open(path, encoding="utf-8") as file:
            node: ast.AST = ast.parse(file.read())
    except (OSError, SyntaxError, ValueError):
        return ""
    for part in qualified_name.split("."):
        node = next(
            (
                child
                for child in getattr(node, "body", [])
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and child.name == part
            ),
            None,
        )
        if node is None:
            return ""
    return ast.get_docstring(node) or ""  # type: ignore[arg-type]


def explain_condition(condition: Condition) -> str:
    """The text ``graphmend rule ID`` prints."""
    lines = [
        f"{condition.id} {condition.name}",
        f"rule: {condition.rule}",
        f"phase: {condition.phase}",
        f"holds when: {condition.doc}",
        f"check: {condition.check}",
    ]
    documentation = _check_documentation(condition.check)
    if documentation:
        lines += ["", documentation]
    return "\n".join(lines)


def _conditions_named(code: str) -> list[Condition]:
    found = CONDITIONS.get(code.upper())
    if found is not None:
        return [found]
    return [condition for condition in CONDITIONS.values() if condition.name == code]


def _condition_list() -> str:
    return "\n".join(
        f"  {condition.id}  {condition.rule:<10} {condition.phase:<13} {condition.name}"
        for condition in CONDITIONS.values()
    )


def _rule_name(module_name: str) -> str:
    """``Trap`` for ``graphmend.rules.trap.guards``: the rule is the module's package."""
    return module_name.split(".")[2].capitalize()


def _category_list() -> str:
    lines = []
    for code, title in CATEGORY_TITLES.items():
        module = _RULE_MODULES.get(code)
        handled = f"rewritten by {_rule_name(module)}" if module else "reported, not rewritten"
        lines.append(f"  {code}  {title:<36} {handled}")
    return "\n".join(lines)


def explain_category(code: str) -> str:
    """The text ``graphmend rule CODE`` prints."""
    title = CATEGORY_TITLES[code]
    module_name = _RULE_MODULES.get(code)
    if module_name is None:
        text = f"{code}: {title}\n\n{_UNFIXED[code]}"
        for partly in _PARTLY_REWRITTEN_BY.get(code, ()):
            text += "\n\n" + inspect.cleandoc(importlib.import_module(partly).__doc__ or "")
        return text
    module = importlib.import_module(module_name)
    rule_name = _rule_name(module_name)
    parts = [inspect.cleandoc(module.__doc__ or "")]
    for more in _MORE_RULE_MODULES.get(code, ()):
        parts.append(inspect.cleandoc(importlib.import_module(more).__doc__ or ""))
    documentation = "\n\n".join(parts)
    others = _NOT_REWRITTEN_BY_THE_RULE.get(code)
    documentation += f"\n\n{others}" if others else ""
    return f"{code}: {title}, rewritten by {rule_name}\n\n{documentation}\n\n{conditions_text(rule_name)}"


def build_parser() -> OneLineErrorParser:
    parser = OneLineErrorParser(
        prog=PROGRAM,
        description="Explain a graph-break category and what graphmend does about it, or one legality condition.",
    )
    parser.add_argument(
        "code", nargs="?",
        help=f"one of {', '.join(CATEGORY_TITLES)}, or a condition's id or name; none to list them",
    )
    return parser


def rule_command(argv: list[str]) -> int:
    try:
        arguments = build_parser().parse_args(argv)
    except ConfigError as error:
        return usage_error(PROGRAM, str(error))
    if arguments.code is None:
        print("graph-break categories (graphmend rule CODE explains one):")
        print(_category_list())
        print()
        print("legality conditions (graphmend rule ID explains one):")
        print(_condition_list())
        return 0
    code = arguments.code.upper()
    if code in CATEGORY_TITLES:
        sys.stdout.write(explain_category(code) + "\n")
        return 0
    conditions = _conditions_named(arguments.code)
    if not conditions:
        return usage_error(
            PROGRAM,
            f"unknown category {arguments.code!r}; choose from {', '.join(CATEGORY_TITLES)}, "
            "or a condition's id or name (graphmend rule lists them)",
        )
    sys.stdout.write("\n\n".join(explain_condition(condition) for condition in conditions) + "\n")
    return 0
