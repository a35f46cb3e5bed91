"""[Trap] a ``.item()`` value that only a known check reads stays a tensor.

    n = (ids == token).sum().item()
    torch_compilable_check(n == m, f"tokens: {n}, features: {m}")
becomes
    _gm_item_1 = (ids == token).sum()
    if __graphmend__.is_compiling() and __graphmend__.checks.keeps_item_tensor(_gm_item_1, (3,)):
        n = _gm_item_1
    else:
        n = _gm_item_1.item()
    torch_compilable_check(n == m, f"tokens: {n}, features: {m}")

after which the check call is lowered (``checks.py``): the comparison is a bool
tensor inside the graph, and the message renders the tensor's number when the check
fails, as the f-string formats the Python int (``Tensor.__format__`` of a 0-d tensor
is its item's). ``.item()`` breaks the graph; the check is then all that reads the
value. Exact only for a 0-d int64 (or bool) tensor compared with integers in int64's
range: a Python int and an int64 tensor compare alike, while a float's ``.item()`` is a
double that compares with Python floats in double precision (the tensor in float32),
and a narrower integer dtype cannot hold every integer it may be compared with, which
``keeps_item_tensor`` checks while tracing (with a plain 0-d tensor type). ``(3,)`` are
the lines of the checks that read the value: the ``.item()`` stays a tensor only in a
graph where one of them is lowered (``whole_trace_conditions.items_stay_with_lowered_checks``, checked
while tracing); where none is, the ``.item()`` keeps its break, as in the original.

``check`` reports the ``.item()`` (the break of the original program); the check it
keeps a tensor for is listed as a follow-on ("a break only once the ``.item()`` at line
N is kept in the graph"), not a candidate of its own.

Legality conditions (each a function, returning the reason it fails):
- ``assigns_one_local``: ``NAME = EXPR.item()``, ``NAME`` a plain local (no
  ``global``/``nonlocal``, not read by a nested function).
- ``read_only_by_checks``: every read the assignment reaches is in a known check
  call (``checks.check_call_of``): an operand of the comparison (one operator)
  that is its whole condition, or an f-string hole (no ``!r``/``!s``/``!a``) of its
  message.
- ``reads_see_only_this_value``: no other binding of ``NAME`` reaches those reads.
- ``compared_with_integers``: the comparison's other operands are integers: int
  constants in int64's range, tensor sizes (``.shape[i]``, ``.size(i)``, ``len(...)``
  with the builtin ``len``, ``.numel()``, ``.dim()``), or locals bound only to those.
"""

from __future__ import annotations

import ast

from graphmend.analysis.scopes import parent_map
from graphmend.analysis.tensor_values import LIFTED_ITEM_LINE
from graphmend.core.legality import failed
from graphmend.rewrite.findings import TENSOR_ITEM
from graphmend.rewrite.templates import RUNTIME_NAME, compiled_or_original, place, statements
from graphmend.rules.base import FunctionContext, first_failure, rewrite_statements
from graphmend.rules.trap.checks import bound_arguments, check_call_of

RULE = "Trap"
_SIZE_METHODS = frozenset({"size", "numel", "dim", "ndimension", "nelement"})


def assigned_method_call(statement: ast.stmt, method: str) -> ast.Call | None:
    """The ``EXPR.method()`` call (no arguments) of ``NAME = EXPR.method()``."""
    if not (isinstance(statement, ast.Assign) and len(statement.targets) == 1):
        return None
    if not isinstance(statement.targets[0], ast.Name):
        return None
    call = statement.value
    if (
        isinstance(call, ast.Call)
        and isinstance(call.func, ast.Attribute)
        and call.func.attr == method
        and not call.args
        and not call.keywords
    ):
        return call
    return None


def item_of(statement: ast.stmt) -> ast.Call | None:
    """The ``EXPR.item()`` call of ``NAME = EXPR.item()``, the shape this rule handles."""
    return assigned_method_call(statement, "item")


def assigns_one_local(context: FunctionContext, name: str) -> str | None:
    facts = context.facts
    if name in facts.declared_global:
        return f"`{name}` is global or nonlocal"
    for node in ast.walk(facts.function):
        if node is facts.function:
            continue
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            if any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(node)):
                return f"a nested function or class reads `{name}`"
    return None


def reads_reached(context: FunctionContext, statement: ast.Assign, name: str):
    """The reads of ``name`` this assignment reaches, each with its CFG node; None when
    a reach cannot be placed (a read the analysis has no node for). Computed once per
    assignment: three conditions ask."""
    cache = context.__dict__.setdefault("_trap_items_reads_reached", {})
    key = (id(statement), name)
    if key not in cache:
        cache[key] = _findreads_reached(context, statement, name)
    return cache[key]


def _findreads_reached(context: FunctionContext, statement: ast.Assign, name: str):
    facts = context.facts
    reads = []
    for node in ast.walk(facts.function):
        if not (isinstance(node, ast.Name) and node.id == name and not isinstance(node.ctx, ast.Store)):
            if isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name) and node.target.id == name:
                reads.append((node.target, node))
            continue
        reads.append((node, None))
    placed = []
    parents = parent_map(facts.function)
    for read, owner in reads:
        cfg_node = _cfg_node_of(context, owner or read, parents)
        if cfg_node is None:
            return None
        definitions = facts.reaching.reaching(cfg_node, name)
        if any(d.node.statement is statement for d in definitions):
            placed.append((read, cfg_node, definitions))
    return placed


def _cfg_node_of(context: FunctionContext, node: ast.AST, parents: dict[int, ast.AST]):
    """The CFG node of the statement holding ``node``."""
    facts = context.facts
    current = node
    while current is not None:
        if isinstance(current, ast.stmt):
            return facts.node_for(current)
        current = parents.get(id(current))
    return None


def read_only_by_checks(context: FunctionContext, statement: ast.Assign, name: str) -> str | None:
    reached = reads_reached(context, statement, name)
    if reached is None:
        return f"a read of `{name}` cannot be placed"
    if not reached:
        return f"nothing reads `{name}`"
    parents = parent_map(context.facts.function)
    for read, _cfg_node, _definitions in reached:
        if _check_reading(read, parents) is None:
            return f"`{name}` is read outside a validation check's condition and message (line {read.lineno})"
    return None


def _check_reading(read: ast.Name, parents: dict[int, ast.AST]) -> tuple[ast.Call, str] | None:
    """The check call reading ``read`` where a tensor reads as the int would: (call,
    "cond") for an operand of the comparison that is the condition, (call, "msg") for
    a plain hole of the message f-string; else None."""
    parent = parents.get(id(read))
    if isinstance(parent, ast.Compare) and len(parent.ops) == 1:
        # One operator: a chained comparison is an ``and`` of tensors, which reads
        # their truth on the host.
        call = parents.get(id(parent))
        if isinstance(call, ast.Call) and _argument(call, "cond") is parent:
            return (call, "cond") if _is_check_statement(call, parents) else None
        return None
    if isinstance(parent, ast.FormattedValue) and parent.value is read and parent.conversion == -1:
        joined = parents.get(id(parent))
        call = parents.get(id(joined))
        if isinstance(call, ast.Call) and _argument(call, "msg") is joined:
            return (call, "msg") if _is_check_statement(call, parents) else None
    return None


def _argument(call: ast.Call, parameter: str) -> ast.expr | None:
    bound = bound_arguments(call)
    return None if bound is None else bound.get(parameter)


def _is_check_statement(call: ast.Call, parents: dict[int, ast.AST]) -> bool:
    statement = parents.get(id(call))
    return isinstance(statement, ast.Expr) and check_call_of(statement) is call


def reads_see_only_this_value(context: FunctionContext, statement: ast.Assign, name: str) -> str | None:
    for read, _cfg_node, definitions in reads_reached(context, statement, name) or []:
        if any(d.node.statement is not statement for d in definitions):
            return f"another binding of `{name}` also reaches its read (line {read.lineno})"
    return None


def compared_with_integers(context: FunctionContext, statement: ast.Assign, name: str) -> str | None:
    parents = parent_map(context.facts.function)
    for read, cfg_node, _definitions in reads_reached(context, statement, name) or []:
        comparison = parents.get(id(read))
        if not isinstance(comparison, ast.Compare):
            continue
        for operand in [comparison.left, *comparison.comparators]:
            if operand is read:
                continue
            if not _is_integer(context, operand, cfg_node, set()):
                return f"`{ast.unparse(operand)}` may not be an integer, which a tensor compares as the int would"
    return None


def _is_integer(context: FunctionContext, expression: ast.expr, cfg_node, seen: set[str]) -> bool:
    if isinstance(expression, ast.Constant):
        return type(expression.value) is int and -(2**63) <= expression.value < 2**63
    if isinstance(expression, ast.Subscript):
        # ``t.shape[i]`` / ``t.size()[i]``
        base = expression.value
        return isinstance(expression.slice, ast.Constant) and type(expression.slice.value) is int and (
            (isinstance(base, ast.Attribute) and base.attr == "shape")
            or (isinstance(base, ast.Call) and isinstance(base.func, ast.Attribute) and base.func.attr == "size"
                and not base.args)
        )
    if isinstance(expression, ast.Call):
        func = expression.func
        if (
            isinstance(func, ast.Name) and func.id == "len" and not context.facts.is_local("len")
            and context.module.bindings.is_unbound_builtin("len")
        ):
            return len(expression.args) == 1 and not expression.keywords
        if isinstance(func, ast.Attribute) and func.attr in _SIZE_METHODS:
            return func.attr != "size" or len(expression.args) == 1
        return False
    if isinstance(expression, ast.Name) and expression.id not in seen and cfg_node is not None:
        facts = context.facts
        definitions = facts.reaching.reaching(cfg_node, expression.id)
        if not definitions or expression.id not in facts.reaching.local_names:
            return False
        seen = seen | {expression.id}
        for definition in definitions:
            node = definition.node
            value = definition.value
            statement = node.statement if node is not None else None
            if value is None or not (isinstance(statement, ast.Assign) and statement.value is value):
                return False
            if not _is_integer(context, value, node, seen):
                return False
        return True
    return False


def apply(context: FunctionContext) -> None:
    if not context.may_depend_on_tensor_values():
        return

    def rewrite(statement: ast.stmt, _enclosing) -> list[ast.stmt] | None:
        call = item_of(statement)
        if call is None:
            return None
        name = statement.targets[0].id
        if not is_lifted_item(context.facts, call):
            return None  # not this rule's: the ``.item()`` is reported as it stands
        reason = first_failure(
            lambda: failed("T113", assigns_one_local(context, name)),
            lambda: failed("T114", read_only_by_checks(context, statement, name)),
            lambda: failed("T115", reads_see_only_this_value(context, statement, name)),
            lambda: failed("T116", compared_with_integers(context, statement, name)),
        )
        finding = context.module.report(
            context.facts, call, TENSOR_ITEM,
            f"`{ast.unparse(call.func)}()` copies a tensor value to Python", RULE,
            reason or None,
        )
        if not finding.fixed:
            return None
        context.module.uses_runtime = True
        temporary = f"_gm_item_{context.module.fresh_suffix()}"
        computed = statements(f"{temporary} = VALUE", VALUE=call.func.value)
        kept = statements(f"{name} = {temporary}")
        setattr(kept[0].value, LIFTED_ITEM_LINE, call.lineno)
        copied = statements(f"{name} = {temporary}.item()")
        place(computed + kept + copied, statement)
        keeps = statements(
            f"{RUNTIME_NAME}.checks.keeps_item_tensor({temporary}, CHECK_LINES)",
            CHECK_LINES=ast.Tuple(elts=[ast.Constant(line) for line in _check_lines(context, statement, name)],
                                  ctx=ast.Load()),
        )[0].value
        guard = compiled_or_original(kept, copied, f"{RULE}: original .item()", also=keeps)
        return computed + [guard]

    rewrite_statements(context.facts.function, rewrite)


def _check_lines(context: FunctionContext, statement: ast.Assign, name: str) -> list[int]:
    """The lines of the check calls that read ``name`` (where ``read_only_by_checks``
    holds, every read is in one)."""
    parents = parent_map(context.facts.function)
    lines = set()
    for read, _cfg_node, _definitions in reads_reached(context, statement, name) or []:
        reading = _check_reading(read, parents)
        if reading is not None:
            lines.add(parents[id(reading[0])].lineno)
    return sorted(lines)


def is_lifted_item(facts, call: ast.Call, parents: dict[int, ast.AST] | None = None) -> bool:
    """Whether ``call`` is the ``.item()`` of a statement this rule reports (so the
    pipeline does not report it as a plain ``.item()``): one whose value a known check
    reads."""
    parents = parents if parents is not None else parent_map(facts.function)
    statement = parents.get(id(call))
    if statement is None or item_of(statement) is not call:
        return False
    name = statement.targets[0].id
    for node in ast.walk(facts.function):
        if isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Load):
            if _check_reading(node, parents) is not None:
                return True
    return False
