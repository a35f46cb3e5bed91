"""tensorize(C): a condition as a value whose truth TorchDynamo can keep in the graph.

``truth_expression(C)`` builds an expression that evaluates to a 0-d bool tensor
(or, where the operands are not one-element tensors, a plain bool) with the truth
value of ``C``: ``not`` becomes ``guard_holds(..., False)``, ``and``/``or`` of
data-dependent operands become ``all_of``/``any_of``, and ``torch.equal`` becomes
``equal_as_tensor`` (shape checked statically first). ``and``/``or`` evaluate every
operand, so each operand after the first must be safe to evaluate unconditionally
(``ExpressionSafety``). What only tracing can show (operand types and broadcasting,
see analysis/safety.py) is recorded in the caller's ``ExpressionSafety`` when it passes
one (Where checks it while tracing); without one, an operand that needs such a check
declines.

Shared by two rules: Trap lowers a guard's condition and Where selects on a branch's
with it, so ``why_not_tensorizable`` is both ``T101`` and ``W101`` (each rule's
``conditions.py`` imports it from here). A rule's own conditions live in its package.
"""

from __future__ import annotations

import ast
import copy

from graphmend.analysis.safety import ExpressionSafety
from graphmend.rewrite.templates import RUNTIME_NAME, runtime
from graphmend.rules.base import FunctionContext, first_failure


def _call(name: str, *arguments: ast.expr) -> ast.Call:
    return ast.Call(func=runtime(name), args=list(arguments), keywords=[])


def why_not_tensorizable(
    context: FunctionContext, condition: ast.expr, node, safety: ExpressionSafety | None = None
) -> str | None:
    if not context.data.is_data_dependent(condition, node):
        return "the condition does not depend on tensor values"
    if context.data.first_item_call(condition) is not None:
        return "the condition calls `.item()`, which needs the value on the host"
    for part in ast.walk(condition):
        if isinstance(part, (ast.NamedExpr, ast.Await, ast.Yield, ast.Lambda)):
            return "the condition binds a name or suspends"
    checked_later = safety is not None
    safety = safety if safety is not None else ExpressionSafety(context, node)
    reason = _why_not_short_circuit_free(context, condition, node, safety)
    # Without a check while tracing, accept one outside value compared or combined
    # with constants only (nothing to broadcast against), as a number or a tensor.
    distinct = {ast.dump(operand) for operand, _ in safety.operands}
    if reason is None and not checked_later and (
        len(distinct) > 1 or safety.attributes or safety.methods or any(kind not in ("number", "tensor") for _, kind in safety.operands)
    ):
        return (
            "`and`/`or` evaluates every operand, and whether one raises (operand types, "
            "broadcasting) is known only while tracing"
        )
    return reason


def _why_not_short_circuit_free(
    context: FunctionContext, condition: ast.expr, node, safety: ExpressionSafety
) -> str | None:
    while isinstance(condition, ast.UnaryOp) and isinstance(condition.op, ast.Not):
        condition = condition.operand
    if not isinstance(condition, ast.BoolOp):
        return None
    for operand in condition.values:
        if not context.data.is_data_dependent(operand, node):
            return (
                f"`{ast.unparse(operand)}` is static but `and`/`or` with a tensor value would "
                "evaluate what it guards"
            )
    for index, operand in enumerate(condition.values):
        inner = operand
        while isinstance(inner, ast.UnaryOp) and isinstance(inner.op, ast.Not):
            inner = inner.operand
        if isinstance(inner, ast.BoolOp):
            reason = _why_not_short_circuit_free(context, inner, node, safety)
            if reason:
                return reason
            if index > 0:
                # Every operand of the nested and/or now runs unconditionally.
                reason = first_failure(*[lambda v=v: safety.expression_is_safe(v) for v in inner.values])
        elif index > 0:
            reason = safety.expression_is_safe(inner)
        else:
            reason = None
        if reason:
            return f"`and`/`or` short-circuits, and its operand may raise: {reason}"
    return None


def truth_expression(context: FunctionContext, condition: ast.expr) -> ast.expr:
    """An expression with the truth value of ``condition`` that keeps tensors as tensors."""
    if isinstance(condition, ast.UnaryOp) and isinstance(condition.op, ast.Not):
        return _call("guard_holds", truth_expression(context, condition.operand), ast.Constant(False))
    if isinstance(condition, ast.BoolOp):
        combine = "all_of" if isinstance(condition.op, ast.And) else "any_of"
        return _call(combine, *[truth_expression(context, value) for value in condition.values])

    class ReplaceEqual(ast.NodeTransformer):
        def visit_Call(self, call: ast.Call):
            self.generic_visit(call)
            if context.facts.qualified_name_of(call.func) == "torch.equal" and len(call.args) == 2:
                return ast.copy_location(_call("equal_as_tensor", *call.args), call)
            return call

    return ReplaceEqual().visit(copy.deepcopy(condition))


def holds_expression(context: FunctionContext, condition: ast.expr, expected_truth: bool) -> ast.expr:
    """``guard_holds(truth(C), expected)``: true exactly when ``bool(C) == expected_truth``."""
    while isinstance(condition, ast.UnaryOp) and isinstance(condition.op, ast.Not):
        condition, expected_truth = condition.operand, not expected_truth
    return _call("guard_holds", truth_expression(context, condition), ast.Constant(expected_truth))


def split_static_prefix(context: FunctionContext, test: ast.expr, node) -> tuple[list, ast.expr]:
    """``a is not None and (a == b).all()`` -> ([a is not None], (a == b).all())."""
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        static = []
        for index, value in enumerate(test.values):
            if context.data.is_data_dependent(value, node):
                rest = test.values[index:]
                dynamic = rest[0] if len(rest) == 1 else ast.BoolOp(op=ast.And(), values=rest)
                return static, dynamic
            static.append(value)
    return [], test


def conjunction(values: list[ast.expr]) -> ast.expr:
    return values[0] if len(values) == 1 else ast.BoolOp(op=ast.And(), values=values)


__all__ = [
    "RUNTIME_NAME",
    "conjunction",
    "holds_expression",
    "split_static_prefix",
    "truth_expression",
    "why_not_tensorizable",
]
