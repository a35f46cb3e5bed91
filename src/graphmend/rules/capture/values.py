"""[Capture] a tensor's integers copied to a list stay inside the graph, where only
sizes read them.

    expert_size = expert_size.tolist()
becomes
    if not __graphmend__.is_compiling():
        expert_size = expert_size.tolist()
    else:
        _gm_values_1 = expert_size
        if __graphmend__.captured_values.may_capture(_gm_values_1):
            expert_size = __graphmend__.captured_values.captured_values(_gm_values_1)
        else:
            expert_size = _gm_values_1.tolist()

``.tolist()`` copies a tensor's values to Python; TorchDynamo breaks the graph there
(unless a global flag makes every ``.item()`` of the program an unbacked number). A
mixture of experts counts the tokens routed to each expert and splits them by those
counts: the numbers size tensors and never have to be known while tracing. On the
compiled path the list's numbers are read in the graph, for this call alone
(``graphmend.runtime.captured_values``, which names what is decided while tracing); the
eager path is the original statement. Declined while tracing, the compiled path calls
``.tolist()`` at the statement's line, where the original breaks.

Legality conditions (each a function, returning the reason it fails):
- ``C120 assigns_one_local``: ``NAME = EXPR.tolist()``, ``NAME`` a plain local (no
  ``global``/``nonlocal``, not read by a nested function or class).
- ``C121 numbers_only_handed_on``: every read of ``NAME`` the assignment reaches hands
  the list on whole: an argument of a call (not of a builtin that copies or formats it,
  ``int``, ``list``, ``print``, ``str``...), an item of a tuple or list that is itself
  returned or passed, what the function returns, or ``len(NAME)``. A subscript, a
  loop, a comparison, arithmetic or formatting reads the numbers on the host.
A callee that reads a number on the host (a branch on it) makes tracing fail on the
number; the frame is then traced again with the original call and its break
(``graphmend.runtime.conversion_failures``).

A limit: where the numbers make the operator that reads them fail (negative split
sizes, sizes that do not add up to the dimension), the mended graph raises torch's
runtime assertion on the number (a ``RuntimeError``), where the original compiled
program raises TorchDynamo's ``TorchRuntimeError`` and eager code the operator's own
``RuntimeError``, each with its own message.
"""

from __future__ import annotations

import ast
import copy

from graphmend.analysis.scopes import parent_map
from graphmend.core.legality import failed
from graphmend.rewrite.findings import TENSOR_ITEM
from graphmend.rewrite.templates import RUNTIME_NAME, compiled_or_original, place, statements
from graphmend.rules.base import FunctionContext, first_failure, rewrite_statements
from graphmend.rules.trap.items import assigned_method_call, assigns_one_local, reads_reached

RULE = "Capture"
WHEN_DECIDED = "if the tensor holds a static count of integers [C210 values_are_integers_of_a_static_count]"
# Builtins that copy, convert or format what they are given: the numbers reach Python.
_READING_BUILTINS = frozenset({
    "int", "float", "bool", "str", "repr", "format", "print", "list", "tuple", "set", "dict", "sorted",
    "reversed", "enumerate", "zip", "iter", "next", "sum", "min", "max", "any", "all", "map", "filter",
    "range", "hash", "id", "isinstance", "type",
})


def tolist_call_of(statement: ast.stmt) -> ast.Call | None:
    """The ``EXPR.tolist()`` call of ``NAME = EXPR.tolist()``, the shape this pass handles."""
    return assigned_method_call(statement, "tolist")


def assigned_tolist_calls(function: ast.AST) -> set[int]:
    """The ids of the ``.tolist()`` calls this pass reports (``NAME = EXPR.tolist()``)."""
    found = set()
    for node in ast.walk(function):
        if isinstance(node, ast.stmt):
            call = tolist_call_of(node)
            if call is not None:
                found.add(id(call))
    return found


def _hands_on(read: ast.Name, parents: dict[int, ast.AST]) -> bool:
    """Whether ``read`` passes the list on whole (see ``numbers_only_handed_on``)."""
    child, parent = read, parents.get(id(read))
    while isinstance(parent, (ast.Tuple, ast.List)) and isinstance(parent.ctx, ast.Load):
        child, parent = parent, parents.get(id(parent))
    if isinstance(parent, ast.Return):
        return True
    if isinstance(parent, ast.keyword):
        parent = parents.get(id(parent))
        return isinstance(parent, ast.Call) and not _reads_numbers(parent)
    if isinstance(parent, ast.Call) and child is not parent.func and child in parent.args:
        if isinstance(parent.func, ast.Name) and parent.func.id == "len" and child is read:
            return True
        return not _reads_numbers(parent)
    return False


def _reads_numbers(call: ast.Call) -> bool:
    return isinstance(call.func, ast.Name) and call.func.id in _READING_BUILTINS


def numbers_only_handed_on(context: FunctionContext, statement: ast.Assign, name: str) -> str | None:
    reached = reads_reached(context, statement, name)
    if reached is None:
        return f"a read of `{name}` cannot be placed"
    if not reached:
        return f"nothing reads `{name}`"
    parents = parent_map(context.facts.function)
    for read, _cfg_node, _definitions in reached:
        if not isinstance(read, ast.Name) or not _hands_on(read, parents):
            return f"`{name}` is read at line {read.lineno} other than handed on whole, which reads its numbers on the host"
    return None


def apply(context: FunctionContext) -> None:
    def rewrite(statement: ast.stmt, _enclosing) -> list[ast.stmt] | None:
        call = tolist_call_of(statement)
        if call is None:
            return None
        name = statement.targets[0].id
        reason = first_failure(
            lambda: failed("C120", assigns_one_local(context, name)),
            lambda: failed("C121", numbers_only_handed_on(context, statement, name)),
        )
        finding = context.module.report(
            context.facts, call, TENSOR_ITEM, f"`{ast.unparse(call.func)}()` copies a tensor value to Python",
            RULE, reason,
            while_tracing=WHEN_DECIDED,
        )
        if not finding.fixed:
            return None
        temporary = f"_gm_values_{context.module.fresh_suffix()}"
        compiled = statements(
            f"{temporary} = VALUE\n"
            f"if {RUNTIME_NAME}.captured_values.may_capture({temporary}):\n"
            f"    {name} = {RUNTIME_NAME}.captured_values.captured_values({temporary})\n"
            f"else:\n"
            f"    {name} = {temporary}.tolist()\n",
            VALUE=copy.deepcopy(call.func.value),
        )
        place(compiled, statement)
        context.module.uses_runtime = True
        # The compiled form comes last: where it keeps its break, nothing jumps after it.
        return [compiled_or_original(compiled, [statement], f"{RULE}: original `.tolist()`", compiled_last=True)]

    rewrite_statements(context.facts.function, rewrite)
