"""[Capture] positions of nonzero elements stay inside the graph.

    idx, top_x = torch.where(expert_mask[expert_idx])
becomes
    if __graphmend__.is_compiling() and __graphmend__.dynamic_shapes.may_capture():
        idx, top_x = __graphmend__.dynamic_shapes.captured_where(expert_mask[expert_idx])
    else:
        idx, top_x = torch.where(expert_mask[expert_idx])

``torch.where(x)`` (one argument), ``torch.nonzero``, ``x.nonzero()`` and
``torch.argwhere`` return as many positions as ``x`` has nonzero elements, and ``t[mask]``
selects as many rows as a boolean mask holds; TorchDynamo breaks the graph at them
unless a global flag is set. (An index is taken for a mask when it is a comparison,
``~``, ``&``, ``|`` or ``^``, or a local bound only to those; while tracing, only a bool
tensor of ``t``'s leading shape is captured, any other index is used as written.) On the compiled path the call
computes the same positions with an operator whose output size is captured for that
call alone (``graphmend.runtime.dynamic_shapes``); the eager path is the original
statement. What follows may use the positions as indices, in arithmetic and in
``index_add_``-style updates: their count never has to reach Python.

Legality conditions (each a function, returning the reason it fails):
- ``arguments_bind_plainly``: the tensor alone, and for ``nonzero`` a constant
  ``as_tuple``; other arguments keep the call.
- ``statement_is_simple``: an assignment, an expression or a ``return``; a loop or
  branch header would iterate or test the positions on the host.
- ``positions_stay_tensors``: neither the call's value nor a name the statement binds
  from it is copied to Python (``.tolist()``, ``.item()``, ``.numpy()``, ``int()``,
  ``list()``...) or iterated over, which would need the count on the host.
A use the rule cannot see (a helper that calls ``.tolist()`` on what it is given)
makes tracing fail on the captured size; that frame then runs eagerly, as its
original would (``graphmend.runtime.conversion_failures``). A capture that would remove
no break (the graph breaks on its size, or tracing needs its size on the host, as a
branch on ``len(positions)`` in a helper does) is refused while tracing and the frame
traced again with the original call (``graphmend.runtime.whole_trace_conditions.captured_sizes_decide_no_break``).
"""

from __future__ import annotations

import ast
import copy

from graphmend.analysis.reaching import statement_bindings
from graphmend.core.legality import failed
from graphmend.rewrite.findings import DYNAMIC_SHAPE_OPERATOR
from graphmend.rewrite.templates import RUNTIME_NAME, compiled_or_original, expression, place
from graphmend.rules.base import FunctionContext, first_failure, rewrite_statements

RULE = "Capture"

# What each captured callee becomes on the compiled path.
CAPTURED_FUNCTIONS = {
    "torch.where": "captured_where",
    "torch.nonzero": "captured_nonzero",
    "torch.argwhere": "captured_argwhere",
}
CAPTURED_METHOD = ("nonzero", "captured_nonzero_method")
# ``t[mask]`` with a boolean mask: the positions of the mask's nonzero elements.
CAPTURED_MASK_INDEX = "captured_mask_index"
# Calls and methods that need the positions (or their count) as Python values.
COPYING_METHODS = frozenset({"tolist", "item", "numpy", "__len__", "__iter__"})
COPYING_BUILTINS = frozenset({"int", "float", "bool", "list", "tuple", "set", "sorted", "enumerate", "zip", "iter", "dict"})
_SIMPLE_STATEMENTS = (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.Expr, ast.Return)


def captured_helper(facts, call: ast.Call) -> str | None:
    """The runtime function a call of a positions operator becomes, or None."""
    qualified = facts.qualified_name_of(call.func)
    if qualified in CAPTURED_FUNCTIONS:
        if qualified == "torch.where" and (len(call.args) != 1 or call.keywords):
            return None  # the three-argument ``where`` selects; its shape is static
        return CAPTURED_FUNCTIONS[qualified]
    if qualified is None and isinstance(call.func, ast.Attribute) and call.func.attr == CAPTURED_METHOD[0]:
        return CAPTURED_METHOD[1]
    return None


def arguments_bind_plainly(call: ast.Call, helper: str) -> str | None:
    if len(call.args) != (0 if helper == CAPTURED_METHOD[1] else 1):
        return "the call passes more than the tensor positionally"
    if any(isinstance(a, ast.Starred) for a in call.args):
        return "the call unpacks its arguments"
    for keyword in call.keywords:
        if keyword.arg != "as_tuple" or not isinstance(keyword.value, ast.Constant):
            return f"the call passes `{ast.unparse(keyword)}`, not a constant `as_tuple`"
    return None


def statement_is_simple(statement: ast.stmt) -> str | None:
    if not isinstance(statement, _SIMPLE_STATEMENTS):
        return "the positions are computed in a loop or branch header, which iterates or tests them on the host"
    return None


def _contains(expression: ast.AST, target: ast.AST) -> bool:
    return any(node is target for node in ast.walk(expression))


def _copies(node: ast.AST, reads) -> str | None:
    """How ``node`` copies a value ``reads(expression)`` finds to Python, if it does."""
    if isinstance(node, ast.Call):
        if isinstance(node.func, ast.Attribute) and node.func.attr in COPYING_METHODS and reads(node.func.value):
            return f"`.{node.func.attr}()`"
        if isinstance(node.func, ast.Name) and node.func.id in COPYING_BUILTINS and any(reads(a) for a in node.args):
            return f"`{node.func.id}()`"
    if isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)) and reads(node.iter):
        return "iterating over them"
    if isinstance(node, ast.Starred) and reads(node.value):
        return "unpacking them"
    return None


def positions_stay_tensors(context: FunctionContext, statement: ast.stmt, call: ast.Call) -> str | None:
    for node in ast.walk(statement):
        how = _copies(node, lambda expression: _contains(expression, call))
        if how:
            return f"the positions are copied to Python ({how}), which needs their count on the host"
    bound = {name for name, _ in statement_bindings(statement, "statement")}
    if not bound:
        return None

    def reads_bound(expression: ast.AST) -> bool:
        return any(isinstance(n, ast.Name) and n.id in bound and isinstance(n.ctx, ast.Load) for n in ast.walk(expression))

    for node in ast.walk(context.facts.function):
        how = _copies(node, reads_bound)
        if how:
            names = ", ".join(f"`{name}`" for name in sorted(bound))
            return f"{names} is copied to Python ({how}) at line {node.lineno if hasattr(node, 'lineno') else node.iter.lineno}, which needs the count on the host"
    return None


_MASK_OPERATORS = (ast.BitAnd, ast.BitOr, ast.BitXor)


def makes_mask(expression: ast.expr) -> bool:
    """A comparison, ``~m``, ``a & b``...: what indexes by a boolean mask."""
    if isinstance(expression, ast.Compare):
        return True
    if isinstance(expression, ast.UnaryOp) and isinstance(expression.op, ast.Invert):
        return True
    return isinstance(expression, ast.BinOp) and isinstance(expression.op, _MASK_OPERATORS)


def may_be_a_mask(context: FunctionContext, index: ast.expr, statement: ast.stmt | None = None) -> bool:
    """``index`` is a mask-making expression, or a local every definition of which that
    reaches ``statement`` is one."""
    if makes_mask(index):
        return True
    if not isinstance(index, ast.Name) or not context.facts.is_local(index.id) or statement is None:
        return False
    node = context.facts.node_for(statement)
    if node is None:
        return False
    definitions = context.facts.reaching.reaching(node, index.id)
    return bool(definitions) and all(d.value is not None and makes_mask(d.value) for d in definitions)


def _candidate_calls(context: FunctionContext, statement: ast.stmt) -> list[tuple[ast.expr, str]]:
    found = []
    stack = [statement]
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Lambda, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node is not statement:
            continue  # runs when called, maybe eagerly and outside this statement
        if isinstance(node, ast.Call):
            helper = captured_helper(context.facts, node)
            if helper is not None:
                found.append((node, helper))
        if (isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load)
                and may_be_a_mask(context, node.slice, statement)):
            found.append((node, CAPTURED_MASK_INDEX))
        if isinstance(node, ast.stmt) and node is not statement:
            continue  # a nested statement is offered on its own
        stack.extend(ast.iter_child_nodes(node))
    return found


class _ReplaceCalls(ast.NodeTransformer):
    def __init__(self, replacements: dict[int, ast.expr]):
        self.replacements = replacements

    def visit_Call(self, node: ast.Call):
        self.generic_visit(node)
        return self.replacements.get(getattr(node, "_graphmend_key", None), node)

    visit_Subscript = visit_Call


def _refusal(context: FunctionContext, statement: ast.stmt, call: ast.Call, helper: str) -> str | None:
    return first_failure(
        lambda: None if helper == CAPTURED_MASK_INDEX else failed("C101", arguments_bind_plainly(call, helper)),
        lambda: failed("C102", statement_is_simple(statement)),
        lambda: failed("C103", positions_stay_tensors(context, statement, call)),
    )


def apply(context: FunctionContext) -> None:
    def rewrite(statement: ast.stmt, _enclosing) -> list[ast.stmt] | None:
        if getattr(statement, "_graphmend_loop_reported", False):
            return None  # a list of chosen classes: loops.py reported it
        candidates = _candidate_calls(context, statement)
        if not candidates:
            return None
        captured = []
        for call, helper in candidates:
            masked = helper == CAPTURED_MASK_INDEX
            reason = _refusal(context, statement, call, helper)
            shown = (
                f"`{ast.unparse(call)}` selects by a boolean mask, with a data-dependent output shape" if masked
                else f"`{ast.unparse(call.func)}` has a data-dependent output shape"
            )
            finding = context.module.report(context.facts, call, DYNAMIC_SHAPE_OPERATOR, shown, RULE, reason)
            if finding.fixed:
                captured.append((call, helper))
        if not captured:
            return None
        context.module.uses_runtime = True
        for key, (call, _helper) in enumerate(captured):
            call._graphmend_key = key
        compiled = copy.deepcopy(statement)
        replacements = {}
        for key, (call, helper) in enumerate(captured):
            if helper == CAPTURED_MASK_INDEX:
                arguments, keywords = [copy.deepcopy(call.value), copy.deepcopy(call.slice)], []
            elif helper == CAPTURED_METHOD[1]:
                arguments, keywords = [copy.deepcopy(call.func.value)], [copy.deepcopy(k) for k in call.keywords]
            else:
                arguments, keywords = [copy.deepcopy(a) for a in call.args], [copy.deepcopy(k) for k in call.keywords]
            replacement = ast.Call(
                func=ast.Attribute(
                    value=ast.Attribute(value=ast.Name(id=RUNTIME_NAME, ctx=ast.Load()), attr="dynamic_shapes", ctx=ast.Load()),
                    attr=helper, ctx=ast.Load(),
                ),
                args=arguments, keywords=keywords,
            )
            place(replacement, call)
            replacements[key] = replacement
        compiled = _ReplaceCalls(replacements).visit(compiled)
        for _key, (call, _helper) in enumerate(captured):
            del call._graphmend_key
        claimed = expression(f"{RUNTIME_NAME}.dynamic_shapes.may_capture()")
        return [compiled_or_original([compiled], [statement], f"{RULE}: original call", also=claimed)]

    rewrite_statements(context.facts.function, rewrite)
