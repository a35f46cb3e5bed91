"""[Where] a comparison of a uniform draw that the draw's range decides.

    dropout_probability = torch.rand([])
    if dropout_probability < self.layerdrop:
        continue
becomes
    dropout_probability = torch.rand([])
    if not __graphmend__.is_compiling():
        if dropout_probability < self.layerdrop:      # the original, run eagerly
            continue
    else:
        if (_gm_decided_1 if (_gm_decided_1 := __graphmend__.drawn_ranges.decided(
                dropout_probability, _gm_other_1 := self.layerdrop, 'lt', True)) is not None
                else dropout_probability < _gm_other_1):
            continue

``torch.rand`` and ``torch.rand_like`` draw from ``[0, 1)``, so ``draw < p`` with
``p <= 0`` is False for every value the draw can take (``p > draw``, ``draw >= p`` and
the rest alike; ``p`` NaN makes every comparison False). TorchDynamo breaks the graph at
the branch on the 0-d tensor (in a loop it gives up the whole frame); with ``p`` known
while tracing the branch is taken without reading the tensor. The draw stays in the
graph, so the generator advances as in the original (a draw nothing reads is kept by
``runtime/trace_hooks.py``). Where the range does not decide the comparison for the
value met while tracing (``0 < p < 1``: truly random), ``decided`` answers None and
the original comparison runs, with its break. The other operand is evaluated once, where
the original evaluates it; ``is_compiling()`` false runs the original statement.

A candidate is a comparison with one operator (``<``, ``<=``, ``>``, ``>=``) one side of
which is a local name a ``torch.rand``/``torch.rand_like`` assignment reaches. Legality
conditions (each a function, returning the reason it fails):
- ``draw_is_the_only_definition`` (W115): the name's only reaching definition is
  ``NAME = torch.rand(...)`` or ``torch.rand_like(...)`` (no ``out=``, no ``**``), so
  the name is bound, to a fresh draw, wherever the comparison runs.
- ``draw_read_only_by_comparisons`` (W116): every read of the name that definition
  reaches is a side of an ordering comparison: no write, in-place method call, alias
  or escape of the draw can change it before it is compared.
- ``comparison_only_tested`` (W117): the comparison's value is only tested for truth
  (an ``if``/``while``/``assert``/conditional-expression test, an operand of ``not``,
  or an operand of ``and``/``or`` that is itself only tested): the rewrite gives a
  Python bool where the original had a 0-d tensor, so that value must never be seen.
- ``comparison_rewritable_in_place`` (W118): the comparison is in the function's own
  scope (not in a lambda or comprehension) and its other side binds no name and does
  not suspend, so it can be evaluated once into a local.

While tracing (``runtime/drawn_ranges.py``): W208 ``draw_made_by_uniform_op``, W209
``draw_has_one_floating_element``, W210 ``other_operand_decides``.

``check`` reports such a comparison as fixed when the other operand is decided while
tracing: whether it is depends on its value then.
"""

from __future__ import annotations

import ast
import copy

from graphmend.analysis.scopes import parent_map
from graphmend.core.legality import failed
from graphmend.rewrite.findings import DATA_DEPENDENT_CONTROL_FLOW
from graphmend.rewrite.templates import RUNTIME_NAME, compiled_or_original, expression, place
from graphmend.rules.base import FunctionContext, first_failure, rewrite_statements

RULE = "Where"
UNIFORM_DRAWS = frozenset({"torch.rand", "torch.rand_like"})
_OPERATORS = {ast.Lt: "lt", ast.LtE: "le", ast.Gt: "gt", ast.GtE: "ge"}
WHEN_DECIDED = "if the other operand is decided while tracing [W210 other_operand_decides]"
_SCOPES = (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp,
           ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def calls_uniform_draw(function: ast.AST) -> bool:
    """Whether a function may hold a candidate: it calls something named ``rand`` or
    ``rand_like`` (the pipeline runs this pass only there)."""
    for node in ast.walk(function):
        if isinstance(node, ast.Call):
            callee = node.func
            name = callee.attr if isinstance(callee, ast.Attribute) else getattr(callee, "id", None)
            if name in ("rand", "rand_like"):
                return True
    return False


def _statement_of(node: ast.AST, parents) -> ast.stmt | None:
    current = node
    while current is not None and not isinstance(current, ast.stmt):
        current = parents.get(id(current))
    return current


def _is_draw(context: FunctionContext, value: ast.expr | None) -> bool:
    return isinstance(value, ast.Call) and context.facts.qualified_name_of(value.func) in UNIFORM_DRAWS


def candidate_sides(context: FunctionContext, compare: ast.Compare, node) -> tuple[ast.Name, ast.expr] | None:
    """(the drawn name, the other side) of a comparison this pass considers: one
    ordering operator, a side a uniform draw's assignment reaches."""
    if len(compare.ops) != 1 or type(compare.ops[0]) not in _OPERATORS or node is None:
        return None
    for side, other in ((compare.left, compare.comparators[0]), (compare.comparators[0], compare.left)):
        if isinstance(side, ast.Name) and any(
            _is_draw(context, definition.value) for definition in context.facts.reaching.reaching(node, side.id)
        ):
            return side, other
    return None


def draw_is_the_only_definition(context: FunctionContext, name: str, node) -> str | None:
    """The compared name is bound, wherever the comparison runs, by one plain local
    assignment of ``torch.rand(...)``/``torch.rand_like(...)`` that writes into no
    ``out=`` tensor (which could be changed through another name)."""
    definitions = context.facts.reaching.reaching(node, name)
    if len(definitions) != 1:
        return f"another binding of `{name}` (or none) also reaches the comparison"
    definition = definitions[0]
    statement = definition.node.statement if definition.node is not None else None
    if not (
        isinstance(statement, ast.Assign) and len(statement.targets) == 1
        and isinstance(statement.targets[0], ast.Name) and statement.value is definition.value
    ):
        return f"`{name}` is not bound by a plain assignment of the draw"
    call = definition.value
    if any(keyword.arg in (None, "out") for keyword in call.keywords) or any(
        isinstance(argument, ast.Starred) for argument in call.args
    ):
        return "the draw writes into `out=` or passes unpacked arguments"
    if name in context.facts.declared_global:
        return f"`{name}` is global or nonlocal"
    return None


def draw_read_only_by_comparisons(context: FunctionContext, name: str, node, parents) -> str | None:
    """Every read of the name the draw's definition reaches is a side of an ordering
    comparison (whose other side does not read it): no in-place method call, alias,
    augmented assignment or call it is passed to can change the draw before the
    comparison reads it, so its values stay in the range."""
    definition = context.facts.reaching.reaching(node, name)[0]
    for read in ast.walk(context.facts.function):
        if not (isinstance(read, ast.Name) and read.id == name):
            continue
        if not isinstance(read.ctx, ast.Load):
            continue  # a rebinding: W115 holds, so none reaches the comparison
        statement = _statement_of(read, parents)
        read_node = context.facts.node_for(statement) if statement is not None else None
        if read_node is None:
            return f"a read of `{name}` (line {read.lineno}) cannot be placed"
        if isinstance(statement, ast.AugAssign):
            return f"`{name}` is updated (line {read.lineno})"
        if definition not in context.facts.reaching.reaching(read_node, name):
            continue
        compare = parents.get(id(read))
        if not (
            isinstance(compare, ast.Compare) and len(compare.ops) == 1 and type(compare.ops[0]) in _OPERATORS
            and read in (compare.left, compare.comparators[0])
            and (compare.left is not read or compare.comparators[0] is not read)
        ):
            return f"the draw `{name}` is read other than as a side of a comparison (line {read.lineno})"
        other = compare.comparators[0] if compare.left is read else compare.left
        if any(isinstance(part, ast.Name) and part.id == name for part in ast.walk(other)):
            return f"the draw `{name}` is read other than as a side of a comparison (line {read.lineno})"
    for part in ast.walk(context.facts.function):
        if isinstance(part, ast.AugAssign) and isinstance(part.target, ast.Name) and part.target.id == name:
            return f"`{name}` is updated (line {part.lineno})"
    return None


def _tested_somewhere(compare: ast.expr, statement: ast.stmt, parents) -> bool:
    """Whether the comparison sits in a test, or in ``and``/``or``/``not``, so that its
    truth may be read there: only then is it a break candidate."""
    if isinstance(statement, (ast.If, ast.While, ast.Assert)):
        return True
    current = parents.get(id(compare))
    while current is not None and current is not statement:
        if isinstance(current, (ast.IfExp, ast.BoolOp, ast.UnaryOp, ast.comprehension)):
            return True
        current = parents.get(id(current))
    return False


def comparison_only_tested(compare: ast.expr, parents) -> str | None:
    """The comparison's value is only tested for truth: a test of ``if``, ``while``,
    ``assert``, a conditional expression or a comprehension's ``if``, an operand of
    ``not``, or an operand of ``and``/``or`` that is itself only tested. The rewrite
    gives a Python bool where the original had a 0-d tensor; where the value is kept
    (``drop = p > 0 and draw < p``) the tensor would be seen."""
    child, parent = compare, parents.get(id(compare))
    while True:
        if isinstance(parent, ast.UnaryOp) and isinstance(parent.op, ast.Not):
            return None  # ``not`` gives a bool for a tensor as for a bool
        if isinstance(parent, (ast.If, ast.While, ast.IfExp, ast.Assert)) and parent.test is child:
            return None
        if isinstance(parent, ast.comprehension) and child in parent.ifs:
            return None
        if isinstance(parent, ast.BoolOp):
            child, parent = parent, parents.get(id(parent))
            continue
        return "the comparison's value is used, not only tested for truth (its tensor would become a bool)"


def comparison_rewritable_in_place(compare: ast.Compare, other: ast.expr, statement: ast.stmt, parents) -> str | None:
    """The rewrite evaluates the other side once into a local (``:=``), where the
    original evaluates it: only in the function's own scope (a lambda or comprehension
    has its own), and only for an expression that binds no name and does not suspend."""
    current = parents.get(id(compare))
    while current is not None and current is not statement:
        if isinstance(current, _SCOPES):
            return "the comparison is inside a lambda or comprehension"
        current = parents.get(id(current))
    if any(isinstance(part, (ast.NamedExpr, ast.Yield, ast.YieldFrom, ast.Await, ast.Lambda)) for part in ast.walk(other)):
        return "the other side binds a name, suspends or defines a function"
    return None


def apply(context: FunctionContext) -> None:
    if not calls_uniform_draw(context.facts.function):
        return
    parents = parent_map(context.facts.function)

    def rewrite(statement: ast.stmt, _enclosing) -> list[ast.stmt] | None:
        if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            return None
        node = context.facts.node_for(statement)
        plans = []
        for compare in _own_comparisons(statement):
            sides = candidate_sides(context, compare, node)
            if sides is None or not _tested_somewhere(compare, statement, parents):
                continue  # ``mask = draw < p`` keeps a tensor and breaks nothing
            drawn, other = sides
            reason = _why_not_decidable(context, statement, node, compare, drawn, other, parents)
            finding = context.module.report(
                context.facts, compare, DATA_DEPENDENT_CONTROL_FLOW,
                f"comparison of a uniform draw `{ast.unparse(compare)}`", RULE, reason,
                while_tracing=WHEN_DECIDED,
            )
            if finding.fixed:
                plans.append((compare, drawn, other))
        if not plans:
            return None
        context.module.uses_runtime = True
        compiled = copy.deepcopy(statement)
        replacements = {id(compare): (drawn, other) for compare, drawn, other in plans}
        _replace_comparisons(context, statement, compiled, replacements)
        place([compiled], statement)
        return [compiled_or_original([compiled], [statement], f"{RULE}: original comparison of a draw",
                                     compiled_last=True)]

    rewrite_statements(context.facts.function, rewrite)


def _why_not_decidable(context: FunctionContext, statement, node, compare, drawn, other, parents) -> str | None:
    return first_failure(
        lambda: failed("W115", draw_is_the_only_definition(context, drawn.id, node)),
        lambda: failed("W116", draw_read_only_by_comparisons(context, drawn.id, node, parents)),
        lambda: failed("W117", comparison_only_tested(compare, parents)),
        lambda: failed("W118", comparison_rewritable_in_place(compare, other, statement, parents)),
    )


def _own_comparisons(statement: ast.stmt) -> list[ast.Compare]:
    """The comparisons a statement evaluates itself: in its expressions, not in the
    statements it holds (each offered on its own)."""
    found = []
    pending = [child for child in ast.iter_child_nodes(statement) if not isinstance(child, ast.stmt)]
    while pending:
        node = pending.pop()
        if isinstance(node, ast.Compare):
            found.append(node)
        pending.extend(child for child in ast.iter_child_nodes(node) if not isinstance(child, ast.stmt))
    return found


def _replace_comparisons(context: FunctionContext, original: ast.stmt, compiled: ast.stmt, replacements) -> None:
    """In ``compiled`` (a copy of ``original``), replace each planned comparison with
    its decided form; copies are matched to originals by walking both in step."""
    pairs = list(zip(ast.walk(original), ast.walk(compiled)))
    swap = {}
    for source, copied in pairs:
        if id(source) in replacements:
            drawn, other = replacements[id(source)]
            swap[id(copied)] = _decided_form(context, source, drawn, other)
    if not swap:
        return

    class Swap(ast.NodeTransformer):
        def visit_Compare(self, node):
            if id(node) in swap:
                return ast.copy_location(swap[id(node)], node)
            return self.generic_visit(node)

    Swap().visit(compiled)


def _decided_form(context: FunctionContext, compare: ast.Compare, drawn: ast.Name, other: ast.expr) -> ast.expr:
    suffix = context.module.fresh_suffix()
    decided, kept = f"_gm_decided_{suffix}", f"_gm_other_{suffix}"
    drawn_on_left = compare.left is drawn
    operator = ast.unparse(ast.Compare(left=ast.Name("a"), ops=[type(compare.ops[0])()], comparators=[ast.Name("b")]))[2:-2]
    left, right = (drawn.id, f"({kept} := OTHER)") if drawn_on_left else (f"({kept} := OTHER)", drawn.id)
    fallback = f"{drawn.id} {operator} {kept}" if drawn_on_left else f"{kept} {operator} {drawn.id}"
    return expression(
        f"({decided} if ({decided} := {RUNTIME_NAME}.drawn_ranges.decided({left}, {right}, "
        f"{_OPERATORS[type(compare.ops[0])]!r}, {drawn_on_left})) is not None else {fallback})",
        OTHER=other,
    )
