"""Run the rules over a module, in the paper's order: Trap, then Where, then Defer;
then Capture, which only changes calls inside statements and loops it keeps whole.

Trap runs first because a branch-local ``raise`` would otherwise stop [Where];
Where runs next because it restructures branches and returns; Defer runs last,
once the final control flow is known. Where's tensor attributes written back as their
own conversion and tests and paddings decided from fixed tensors
(``rules/where/written_back.py``, ``fixed_values.py``) run after every rule, on what is
left. Facts
are recomputed from the current tree before each rule, never patched by hand.
"""

from __future__ import annotations

import ast
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from graphmend.analysis.bindings import ModuleBindings
from graphmend.analysis.compile_state import mark_never_compiled
from graphmend.analysis.entry_points import (
    EntryPoints,
    find_entry_points,
    method_decorators,
    model_classes,
    reachable_functions,
)
from graphmend.analysis.purity import PurityAnalysis
from graphmend.analysis.scopes import iter_functions
from graphmend.analysis.tensor_values import (
    DYNAMIC_SHAPE_FUNCTIONS,
    DYNAMIC_SHAPE_METHODS,
    VALUE_METHODS,
    DataDependence,
)
from graphmend.rewrite.edits import CalleeEdit
from graphmend.rewrite.findings import DYNAMIC_SHAPE_OPERATOR, TENSOR_ITEM, Finding
from graphmend.rewrite.suppressions import suppressions_in
from graphmend.rewrite.templates import (
    ORIGINAL_MARK,
    RUNTIME_IMPORT,
    RUNTIME_LOAD,
    RUNTIME_NAME,
    is_guard,
    is_original,
    statements,
)
from graphmend.rules.base import FunctionContext, ModuleContext
from graphmend.rules.capture import loops as capture_loops
from graphmend.rules.capture import merges as capture_merges
from graphmend.rules.capture import positions as capture_positions
from graphmend.rules.capture import values as capture_values
from graphmend.rules.defer import outputs as defer_outputs
from graphmend.rules.trap import checks as trap_checks
from graphmend.rules.trap import guards as trap_guards
from graphmend.rules.trap import items as trap_items
from graphmend.rules.where import branches as where_branches
from graphmend.rules.where import fixed_values as where_fixed_values
from graphmend.rules.where import ranges as where_ranges
from graphmend.rules.where import written_back as where_written_back

ALL_RULES = ("trap", "where", "defer", "capture")
# Each rule's passes, in order; facts are recomputed before each pass.
RULES = {
    "trap": (trap_guards.apply, trap_items.apply, trap_checks.apply),
    "where": (where_branches.apply, where_ranges.apply),
    "defer": (defer_outputs.apply,),
    "capture": (capture_loops.apply, capture_positions.apply, capture_merges.apply, capture_values.apply),
}
SCOPES = ("entry", "all")


@dataclass
class Edit:
    """Replace source lines ``first_line..last_line`` (1-based, inclusive) with ``text``.

    ``text`` is unindented; the statement it replaces gives the indentation.
    """

    first_line: int
    last_line: int
    text: str


class MendResult:
    """The outcome of mending one module.

    ``tree`` keeps every original statement's line number (compile it to run the
    result); ``source`` is its text, produced on first use (line numbers move there).
    """

    def __init__(
        self,
        source: str | None = None,
        changed: bool = False,
        findings: list[Finding] | None = None,
        edits: list[Edit] | None = None,
        runtime_import: str | None = None,
        tree: ast.Module | None = None,
        entry_points: EntryPoints | None = None,
        callee_edits: list[CalleeEdit] | None = None,
    ) -> None:
        self._source = source
        self.callee_edits = callee_edits if callee_edits is not None else []
        # With scope="entry": the entry points found (model classes included), else None.
        self.entry_points = entry_points
        self.changed = changed
        self.findings = findings if findings is not None else []
        self.edits = edits if edits is not None else []
        self.runtime_import = runtime_import
        self.tree = tree

    @property
    def source(self) -> str:
        if self._source is None:
            self._source = ast.unparse(self.tree) + "\n"
        return self._source

    def __repr__(self) -> str:
        return f"MendResult(changed={self.changed}, findings={len(self.findings)}, edits={len(self.edits)})"


def parse_rules(rules: Sequence[str] | str) -> tuple[str, ...]:
    if isinstance(rules, str):
        rules = [r.strip() for r in rules.split(",") if r.strip()]
    unknown = [r for r in rules if r not in RULES]
    if unknown:
        raise ValueError(f"unknown rule {unknown[0]!r}; choose from {', '.join(ALL_RULES)}")
    return tuple(r for r in ALL_RULES if r in rules)


def _entry_scope(
    tree: ast.Module,
    bindings: ModuleBindings,
    known_helpers: Mapping[str, int] | None,
    compiled_elsewhere: Iterable[str],
) -> tuple[set[int], EntryPoints]:
    """What ``scope="entry"`` looks at: what the module's compile calls (any spelling),
    the compile calls of other modules (``compiled_elsewhere``) and ``nn.Module`` code
    reach. Model classes are always in: they are what gets compiled from out of sight;
    so are the decorators that wrap their methods."""
    entry = find_entry_points(tree, bindings, known_helpers, compiled_elsewhere)
    entry.classes |= model_classes(tree, bindings)
    entry.functions |= method_decorators(tree)
    if not entry.found:
        return set(), entry
    return {id(node) for node in reachable_functions(tree, entry)}, entry


@dataclass
class _FunctionSummary:
    """What one walk of the module tells about a function before any analysis runs."""

    applies_value_operation: bool = False
    calls_output_function: bool = False
    unfixable_calls: list = field(default_factory=list)
    # A comparison, ``~``, ``&``, ``|`` or ``^`` used as an index or bound to a name: a
    # boolean mask may select rows (the Capture rule).
    makes_masks: bool = False
    # ``if len(P) > 0:`` and its kin: a branch on whether positions are empty.
    tests_emptiness: bool = False
    # Calls something named ``rand`` or ``rand_like``: a comparison of a uniform draw
    # may be decided by its range (Where's ``ranges`` pass).
    draws_uniform: bool = False


_OUTPUT_METHODS = frozenset(defer_outputs.STANDARD_LOG_LEVELS) | defer_outputs.ONCE_METHODS | {"log", "exception", "warn"}
_UNFIXABLE_METHODS = DYNAMIC_SHAPE_METHODS | {"item", "tolist", "where"}


def _summarise_functions(tree: ast.Module) -> dict[int, _FunctionSummary]:
    """One walk of the tree, each node credited to its innermost function."""
    summaries: dict[int, _FunctionSummary] = {}
    stack: list[tuple[ast.AST, _FunctionSummary | None]] = [(tree, None)]
    while stack:
        node, summary = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            summary = summaries.setdefault(id(node), _FunctionSummary())
        elif summary is not None and isinstance(node, (ast.Subscript, ast.Assign)) and not summary.makes_masks:
            summary.makes_masks = capture_positions.makes_mask(node.slice if isinstance(node, ast.Subscript) else node.value)
        elif summary is not None and isinstance(node, ast.If) and not summary.tests_emptiness:
            summary.tests_emptiness = capture_merges.may_test_emptiness(node.test)
        if summary is not None and isinstance(node, ast.Call):
            callee = node.func
            name = callee.attr if isinstance(callee, ast.Attribute) else getattr(callee, "id", None)
            if name in VALUE_METHODS:
                summary.applies_value_operation = True
            if name in ("rand", "rand_like"):
                summary.draws_uniform = True
            if name == "print" or name in _OUTPUT_METHODS:
                summary.calls_output_function = True
            if name in _UNFIXABLE_METHODS or name in _DYNAMIC_SHAPE_NAMES:
                summary.unfixable_calls.append(node)
        stack.extend((child, summary) for child in ast.iter_child_nodes(node))
    return summaries


_DYNAMIC_SHAPE_NAMES = frozenset(name.rsplit(".", 1)[1] for name in DYNAMIC_SHAPE_FUNCTIONS)


def _report_unfixable(
    context: ModuleContext, in_scope, summaries, capturing: bool = False, trapping: bool = False
) -> list:
    """``.item()`` and dynamic-shape operators no rule keeps in the graph (with
    ``capturing``, the positions operators are the Capture rule's to report; with
    ``trapping``, an ``.item()`` a check reads is Trap's). Returns the ``.item()``
    findings with their calls: one an output call reads, which Defer then performs in
    the graph, is withdrawn once the rules ran (``_withdraw_deferred_items``)."""
    items = []
    for facts in iter_functions(context.tree, context.bindings):
        if in_scope is not None and id(facts.function) not in in_scope:
            continue
        summary = summaries.get(id(facts.function))
        if summary is None or not summary.unfixable_calls:
            continue
        data = DataDependence(facts)
        assigned_lists = capture_values.assigned_tolist_calls(facts.function) if capturing else set()
        for node in summary.unfixable_calls:
            if is_original(node):
                continue
            if capturing and capture_loops.is_list_of_chosen_classes(node):
                continue  # the Capture rule reports the statement
            if id(node) in assigned_lists:
                continue  # the Capture rule reports it
            if data.first_item_call(node) is node and not (trapping and trap_items.is_lifted_item(facts, node)):
                items.append((context.report(
                    facts, node, TENSOR_ITEM, f"`{ast.unparse(node.func)}()` copies a tensor value to Python",
                    None, "the value leaves the graph; no source rewrite keeps it inside",
                ), node))
            qualified = facts.qualified_name_of(node.func)
            method = node.func.attr if isinstance(node.func, ast.Attribute) else None
            if capturing and capture_positions.captured_helper(facts, node) is not None:
                continue
            if qualified in DYNAMIC_SHAPE_FUNCTIONS or (qualified is None and method in DYNAMIC_SHAPE_METHODS) or (
                qualified == "torch.where" and len(node.args) == 1 and not node.keywords
            ):
                context.report(
                    facts, node, DYNAMIC_SHAPE_OPERATOR,
                    f"`{ast.unparse(node.func)}` has a data-dependent output shape",
                    None, "the output shape depends on tensor values",
                )
    return items


def _withdraw_deferred_items(context: ModuleContext, items: list) -> None:
    """Drop the ``.item()`` findings of calls that are now only in the original output
    call Defer keeps for eager code (its graph form reads the value when the graph runs:
    ``defer.conditions.item_reads``)."""
    deferred = {
        id(finding) for finding, node in items
        if str(getattr(node, ORIGINAL_MARK, "")).startswith(f"{defer_outputs.RULE}:")
    }
    if deferred:
        context.findings[:] = [finding for finding in context.findings if id(finding) not in deferred]


def _insert_runtime_import(tree: ast.Module, binding: bool) -> None:
    """Insert the runtime import after the docstring and ``__future__`` imports: with
    ``binding``, the line ``graphmend fix`` writes; else one that binds no name."""
    index = 0
    body = tree.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) and isinstance(
        body[0].value.value, str
    ):
        index = 1
    while index < len(body) and isinstance(body[index], ast.ImportFrom) and body[index].module == "__future__":
        index += 1
    node = statements(RUNTIME_IMPORT if binding else RUNTIME_LOAD)[0]
    neighbour = body[index] if index < len(body) else (body[-1] if body else None)
    if neighbour is not None:
        ast.copy_location(node, neighbour)
    ast.fix_missing_locations(node)
    tree.body.insert(index, node)


def _collect_edits(tree: ast.Module) -> list[Edit]:
    edits: list[Edit] = []

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if is_guard(child):
                edits.append(Edit(child.lineno, child.end_lineno, ast.unparse(child)))
                continue
            visit(child)

    visit(tree)
    return edits


_OTHER_FRAMEWORKS = ("tensorflow", "jax", "flax", "keras")


# transformers names each TensorFlow and Flax file so, whatever it imports: the models
# (``modeling_tf_t5.py``), their auto classes (``modeling_tf_auto.py``, which imports no
# framework) and the weight converters between them and torch (``modeling_tf_pytorch_utils.py``).
_OTHER_FRAMEWORK_FILE_PREFIXES = ("modeling_tf_", "modeling_flax_")


def is_other_frameworks_code(bindings: ModuleBindings, filename: str = "<string>") -> bool:
    """A module that imports TensorFlow, JAX, Flax or Keras and not torch is not torch
    code: torch.compile never traces it, so it has no break candidates
    (``modeling_tf_t5.py``, ``modeling_flax_t5.py``); nor is a file transformers names as
    another framework's."""
    if os.path.basename(filename).startswith(_OTHER_FRAMEWORK_FILE_PREFIXES) and filename.endswith(".py"):
        return True
    targets = [target.split(".", 1)[0] for target in bindings.imports.values()]
    return "torch" not in targets and any(target in _OTHER_FRAMEWORKS for target in targets)


def mend_module_source(
    source: str,
    *,
    filename: str = "<string>",
    module_name: str | None = None,
    rules: Sequence[str] | str = ALL_RULES,
    scope: str = "all",
    is_package: bool = False,
    compiled_elsewhere: Iterable[str] = (),
    known_helpers: Mapping[str, int] | None = None,
    output_calls_in_place: bool = False,
) -> MendResult:
    """Rewrite one module's source. Raises SyntaxError for text that does not parse.

    ``output_calls_in_place``: Defer writes each output call as a call of graphmend's
    runtime in place of the callee (``__graphmend__.print(...)``), the form ``graphmend
    fix`` writes into files (``graphmend.runtime.fixed_calls``), and lists the text
    changes in ``MendResult.callee_edits``.

    ``scope="all"`` (the default) rewrites every function: any of them may run under
    ``torch.compile``, compiled from this module or from any other, and every rewrite
    is exact when not compiling, so a function never compiled costs only rewrite time.
    ``scope="entry"`` looks only at what is compiled in sight: what the module's own
    entry points (every spelling, see ``analysis.entry_points``), the names other
    modules compile (``compiled_elsewhere``, with ``known_helpers`` naming other
    modules' compiling helpers) and its ``nn.Module`` classes reach; ``graphmend
    check`` uses it to report what matters.
    """
    if scope not in SCOPES:
        raise ValueError(f"unknown scope {scope!r}; choose from {', '.join(SCOPES)}")
    selected = parse_rules(rules)
    tree = ast.parse(source, filename=filename)
    bindings = ModuleBindings(tree, module_name, is_package)
    if RUNTIME_NAME in bindings.binding_counts or any(
        isinstance(node, ast.Name) and node.id == RUNTIME_NAME for node in ast.walk(tree)
    ):
        # Already rewritten (or the name is taken): rewriting again could not be exact.
        return MendResult(source=source, changed=False, tree=tree)
    if is_other_frameworks_code(bindings, filename):
        return MendResult(source=source, changed=False, tree=tree)
    context = ModuleContext(
        tree=tree,
        bindings=bindings,
        purity=PurityAnalysis(tree, bindings),
        filename=filename,
        module_name=module_name,
        suppressions=suppressions_in(source),
        output_calls_in_place=output_calls_in_place,
    )
    mark_never_compiled(tree, bindings)
    in_scope = entry = None
    if scope == "entry":
        in_scope, entry = _entry_scope(tree, bindings, known_helpers, compiled_elsewhere)
    summaries = _summarise_functions(tree)
    items = _report_unfixable(context, in_scope, summaries, capturing="capture" in selected, trapping="trap" in selected)
    for rule_name in selected:
        for rule_pass in RULES[rule_name]:
            for facts in iter_functions(tree, bindings):
                if in_scope is not None and id(facts.function) not in in_scope:
                    continue
                summary = summaries.get(id(facts.function))
                needed = summary is not None and (
                    summary.calls_output_function if rule_name == "defer"
                    else bool(summary.unfixable_calls) or summary.makes_masks or summary.tests_emptiness
                    if rule_name == "capture"
                    else summary.draws_uniform if rule_pass is where_ranges.apply
                    else summary.applies_value_operation
                )
                if needed:
                    rule_pass(FunctionContext(facts, context))
    if "where" in selected:
        # Last: a test or call another rule rewrites (Capture's emptiness tests and
        # expert skips, Trap's guards) is its own; these passes take what is left.
        late_passes = [where_written_back.apply]
        fixed_scopes = where_fixed_values.fixed_tensor_scopes(tree)
        if fixed_scopes:
            late_passes.append(where_fixed_values.apply)
        for late_pass in late_passes:
            for facts in iter_functions(tree, bindings):
                if (in_scope is None or id(facts.function) in in_scope) and (
                    late_pass is not where_fixed_values.apply or fixed_scopes.covers(facts.function)
                ):
                    late_pass(FunctionContext(facts, context))
    _withdraw_deferred_items(context, items)
    context.findings.sort(key=lambda f: (f.line, f.col))
    edits = _collect_edits(tree)
    if not context.uses_runtime:
        return MendResult(source=source, changed=False, findings=context.findings, tree=tree, entry_points=entry)
    _insert_runtime_import(tree, binding=output_calls_in_place)
    ast.fix_missing_locations(tree)
    return MendResult(
        changed=True,
        findings=context.findings,
        edits=edits,
        runtime_import=RUNTIME_IMPORT if context.uses_runtime else None,
        tree=tree,
        entry_points=entry,
        callee_edits=context.callee_edits,
    )
