"""Can an expression be evaluated where the original program would not evaluate it?

Safe means it cannot raise and writes nothing observable: constants, bound names,
attribute reads, elementwise arithmetic (not division, modulo or matmul), a small set
of pointwise torch functions and tensor methods, and calls of functions of the same
module or class that the purity analysis validates. Indexing, unpacking and anything
unresolved are not safe.

Not modelled (documented assumption): elementwise arithmetic is taken not to raise;
a broadcasting error between operand shapes would surface while tracing.
"""

from __future__ import annotations

import ast

from graphmend.analysis.cfg import CfgNode
from graphmend.analysis.purity import is_known_pure
from graphmend.rules.base import FunctionContext, first_failure

SAFE_BINARY_OPERATORS = (ast.Add, ast.Sub, ast.Mult, ast.Pow, ast.BitAnd, ast.BitOr, ast.BitXor)
SAFE_UNARY_OPERATORS = (ast.USub, ast.UAdd, ast.Invert)
SAFE_COMPARISONS = (ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.Eq, ast.NotEq, ast.Is, ast.IsNot)
POINTWISE_TORCH = frozenset(
    f"torch.{name}"
    for name in (
        "relu", "sigmoid", "tanh", "exp", "sin", "cos", "abs", "neg", "maximum", "minimum",
        "where", "zeros_like", "ones_like", "full_like", "logical_not", "logical_and",
        "logical_or", "square", "sign", "erf", "exp2", "expm1", "isinf", "isnan",
        "isfinite", "isneginf", "isposinf",
    )
) | frozenset(
    f"torch.nn.functional.{name}" for name in ("relu", "gelu", "silu", "sigmoid", "tanh", "elu")
)
SAFE_METHODS = frozenset(
    {"to", "float", "double", "half", "bfloat16", "clone", "detach", "contiguous", "type_as",
     "abs", "exp", "relu", "sigmoid", "tanh", "neg", "sin", "cos", "square", "sign",
     "any", "all", "sum", "isinf", "isnan", "isfinite"}
)


class ExpressionSafety:
    """Safety of expressions evaluated at one program point of one function."""

    def __init__(self, context: FunctionContext, node: CfgNode | None):
        self.context = context
        self.node = node
        # Names bound earlier in the same (hoisted) arm: defined by the time they are read.
        self.bound_names: set[str] = set()

    def expression_is_safe(self, expression: ast.expr | None) -> str | None:
        """None when evaluating ``expression`` cannot raise or write anything."""
        if expression is None:
            return None
        facts = self.context.facts
        if isinstance(expression, ast.Constant):
            return None
        if isinstance(expression, ast.Name):
            if expression.id in self.bound_names:
                return None
            if facts.is_local(expression.id):
                if not facts.reaching.definitely_assigned(self.node, expression.id):
                    return f"`{expression.id}` may be unbound"
                return None
            bindings = self.context.module.bindings
            if bindings.binding_counts[expression.id] or bindings.is_unbound_builtin(expression.id):
                return None
            return f"`{expression.id}` is not defined in this module"
        if isinstance(expression, ast.Attribute):
            return self.expression_is_safe(expression.value)
        if isinstance(expression, ast.BinOp):
            if not isinstance(expression.op, SAFE_BINARY_OPERATORS):
                symbol = ast.unparse(expression)
                return f"`{symbol}` may raise (division, modulo and matmul can fail at run time)"
            return self.expression_is_safe(expression.left) or self.expression_is_safe(expression.right)
        if isinstance(expression, ast.UnaryOp):
            if not isinstance(expression.op, SAFE_UNARY_OPERATORS):
                return f"`{ast.unparse(expression)}` takes the truth value of a tensor"
            return self.expression_is_safe(expression.operand)
        if isinstance(expression, ast.Compare):
            if not all(isinstance(op, SAFE_COMPARISONS) for op in expression.ops):
                return f"`{ast.unparse(expression)}` may raise"
            return first_failure(
                *[lambda e=e: self.expression_is_safe(e) for e in [expression.left] + expression.comparators]
            )
        if isinstance(expression, (ast.Tuple, ast.List)):
            return first_failure(*[lambda e=e: self.expression_is_safe(e) for e in expression.elts])
        if isinstance(expression, ast.Call):
            return self.call_is_safe(expression)
        if isinstance(expression, ast.Subscript):
            return f"`{ast.unparse(expression)}` indexes, which may raise"
        return f"`{ast.unparse(expression)}` is not known to be free of exceptions"

    def call_is_safe(self, call: ast.Call) -> str | None:
        facts = self.context.facts
        if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
            return f"`{ast.unparse(call)}` unpacks its arguments"
        arguments_reason = first_failure(
            *[lambda e=e: self.expression_is_safe(e) for e in call.args + [k.value for k in call.keywords]]
        )
        if arguments_reason:
            return arguments_reason
        qualified = facts.qualified_name_of(call.func)
        if qualified in POINTWISE_TORCH:
            return None
        callee = call.func
        if isinstance(callee, ast.Attribute) and callee.attr in SAFE_METHODS and qualified is None:
            return self.expression_is_safe(callee.value)
        purity = self.context.module.purity
        if isinstance(callee, ast.Name) and not facts.is_local(callee.id) and callee.id in purity.functions:
            impurity = purity.function_impurity(
                purity.functions[callee.id], [k.arg for k in call.keywords]
            )
            return f"the call `{ast.unparse(callee)}` is impure: {impurity}" if impurity else None
        method = self._same_class_method(callee)
        if method is not None:
            impurity = purity.function_impurity(method, [k.arg for k in call.keywords])
            return f"the call `{ast.unparse(callee)}` is impure: {impurity}" if impurity else None
        if qualified is not None and is_known_pure(qualified) and qualified not in (
            "torch.matmul", "torch.mm", "torch.bmm", "torch.cat", "torch.stack"
        ):
            return None
        return f"the call `{ast.unparse(call.func)}` cannot be resolved and validated"

    def _same_class_method(self, callee: ast.expr):
        facts = self.context.facts
        if not (
            isinstance(callee, ast.Attribute)
            and isinstance(callee.value, ast.Name)
            and callee.value.id == facts.self_name
            and facts.enclosing_class is not None
        ):
            return None
        for statement in facts.enclosing_class.body:
            if isinstance(statement, ast.FunctionDef) and statement.name == callee.attr:
                if statement.decorator_list:
                    return None
                return statement
        return None
