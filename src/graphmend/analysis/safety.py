"""Can an expression be evaluated where the original program would not evaluate it?

Safe means it cannot raise, writes nothing observable and draws no random numbers:
constants, bound names, attribute reads, elementwise arithmetic (not division,
modulo or matmul), a small set of pointwise torch functions and tensor methods, and
calls of functions of the same module or class whose bodies are safe by the same
rules. Indexing, unpacking, reductions over a dimension, shape-changing functions
and anything unresolved are not safe.

Elementwise arithmetic raises when its operands do not broadcast, when they are of
a type or dtype the operator rejects (``None + x``, ``-bool_tensor``,
``float_tensor & 1``), and when an attribute it reads is missing. Those facts are
known while TorchDynamo traces, not before, so every value an expression reads
from outside the hoisted code (a parameter, an earlier local, an attribute) is
recorded in ``operands`` with the kind of value the operation needs, and the rule
checks them while tracing (``__graphmend__.operands_combine``), keeping the original
code when they do not hold. Values computed inside the hoisted code inherit the
requirement: arithmetic passes it to its operands, and a requirement the analysis
cannot pass on (a bool-rejecting operation on a name bound in the arm) declines.

Legality predicates (each returns None when it holds, or the reason it fails):
``writes_through_keyword`` (``out=``, ``inplace=``), ``updates_in_place`` (a method
named with a trailing underscore), ``draws_random_numbers``, and
``ExpressionSafety.expression_is_safe`` / ``call_is_safe`` built from them.
"""

from __future__ import annotations

import ast
import copy

from graphmend.analysis.cfg import CfgNode
from graphmend.rules.base import FunctionContext, first_failure

SAFE_BINARY_OPERATORS = (ast.Add, ast.Sub, ast.Mult, ast.Pow, ast.BitAnd, ast.BitOr, ast.BitXor)
SAFE_COMPARISONS = (ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.Eq, ast.NotEq, ast.Is, ast.IsNot)

# Kinds of value an operation needs from an operand (checked while tracing):
NUMBER = "number"      # a tensor of any dtype, or a Python number
NOT_BOOL = "not_bool"  # ... but not a bool tensor or bool (``-``, ``abs``, ``relu``, ``**``)
FLOATING = "floating"  # a floating-point tensor, or a Python number (``gelu``, ``silu``, ``elu``)
INTEGRAL = "integral"  # a bool or integer tensor, or a Python int/bool (``&``, ``|``, ``^``, ``~``)
TENSOR = "tensor"      # a tensor (the receiver of a tensor method)

# Pointwise torch functions that cannot raise on operands of the stated kind that
# broadcast: name -> (kind of each tensor operand, positional arity range, keywords).
_UNARY_FLOAT_RESULT = ("sigmoid", "tanh", "exp", "sin", "cos", "erf", "exp2", "expm1")
POINTWISE_TORCH: dict[str, tuple[str, tuple[int, int], frozenset]] = {
    **{f"torch.{name}": (NUMBER, (1, 1), frozenset()) for name in _UNARY_FLOAT_RESULT},
    **{f"torch.{name}": (NUMBER, (1, 1), frozenset())
       for name in ("square", "sign", "isinf", "isnan", "isfinite", "isneginf", "isposinf",
                    "logical_not", "zeros_like", "ones_like")},
    **{f"torch.{name}": (NOT_BOOL, (1, 1), frozenset()) for name in ("relu", "abs", "neg")},
    **{f"torch.{name}": (NUMBER, (2, 2), frozenset())
       for name in ("maximum", "minimum", "logical_and", "logical_or")},
    "torch.where": (NUMBER, (3, 3), frozenset()),
    "torch.full_like": (NUMBER, (2, 2), frozenset()),
    "torch.nn.functional.relu": (NOT_BOOL, (1, 1), frozenset()),
    "torch.nn.functional.sigmoid": (NUMBER, (1, 1), frozenset()),
    "torch.nn.functional.tanh": (NUMBER, (1, 1), frozenset()),
    "torch.nn.functional.gelu": (FLOATING, (1, 1), frozenset()),
    "torch.nn.functional.silu": (FLOATING, (1, 1), frozenset()),
    "torch.nn.functional.elu": (FLOATING, (1, 1), frozenset()),
}
# Tensor methods taking no argument that cannot raise on a tensor receiver, by the kind
# the receiver needs. ``to``, ``type_as`` and reductions with arguments are not here:
# their arguments can make them raise.
SAFE_METHODS: dict[str, str] = {
    **dict.fromkeys(
        ("float", "double", "half", "bfloat16", "clone", "detach", "contiguous", "exp", "sigmoid",
         "tanh", "sin", "cos", "square", "sign", "any", "all", "sum", "isinf", "isnan", "isfinite"),
        TENSOR,
    ),
    **dict.fromkeys(("abs", "relu", "neg"), NOT_BOOL),
}
# Calls whose value is a floating-point tensor whatever their operands' dtype.
FLOAT_RESULT = frozenset(_UNARY_FLOAT_RESULT) | frozenset(
    {"gelu", "silu", "elu", "float", "double", "half", "bfloat16"}
)
# Calls whose value is a bool tensor: they cannot feed an operation that rejects bools.
BOOL_RESULT = frozenset({"isinf", "isnan", "isfinite", "isneginf", "isposinf", "logical_not",
                         "logical_and", "logical_or", "any", "all"})
RANDOM_WORDS = ("rand", "dropout", "bernoulli", "multinomial", "normal", "poisson", "uniform",
                "exponential", "geometric", "cauchy", "gumbel", "rrelu", "sample", "seed",
                "random", "shuffle", "choice")


def writes_through_keyword(call: ast.Call) -> str | None:
    """``torch.exp(x, out=buf)``, ``F.relu(x, inplace=True)``: the call writes its argument."""
    for keyword in call.keywords:
        if keyword.arg == "out":
            return f"`{ast.unparse(call)}` writes through `out=`"
        if keyword.arg == "inplace" and not (
            isinstance(keyword.value, ast.Constant) and keyword.value.value is False
        ):
            return f"`{ast.unparse(call)}` may update its argument in place (`inplace=`)"
    return None


def updates_in_place(call: ast.Call) -> str | None:
    """``x.add_(1)``, ``torch.nn.init.zeros_(w)``: PyTorch names in-place updates with ``_``."""
    callee = call.func
    name = callee.attr if isinstance(callee, ast.Attribute) else getattr(callee, "id", "")
    if name.endswith("_") and not name.endswith("__"):
        return f"`{ast.unparse(callee)}` updates a tensor in place"
    return None


def draws_random_numbers(call: ast.Call, qualified: str | None) -> str | None:
    """A draw on the untaken path would shift the generator's stream."""
    names = [qualified or ""]
    callee = call.func
    if isinstance(callee, ast.Attribute):
        names.append(callee.attr)
    elif isinstance(callee, ast.Name):
        names.append(callee.id)
    for name in names:
        last = name.rsplit(".", 1)[-1].lower()
        if any(word in last for word in RANDOM_WORDS):
            return f"`{ast.unparse(callee)}` may draw random numbers"
    return None


def _produces_bool(expression: ast.expr) -> bool:
    if isinstance(expression, ast.Compare):
        return True
    if isinstance(expression, ast.BoolOp):
        return True
    if isinstance(expression, ast.UnaryOp) and isinstance(expression.op, ast.Not):
        return True
    if isinstance(expression, ast.Call):
        callee = expression.func
        name = callee.attr if isinstance(callee, ast.Attribute) else getattr(callee, "id", "")
        return name in BOOL_RESULT
    if isinstance(expression, ast.Constant):
        return isinstance(expression.value, bool)
    return False


class ExpressionSafety:
    """Safety of expressions evaluated at one program point of one function."""

    def __init__(self, context: FunctionContext, node: CfgNode | None):
        self.context = context
        self.node = node
        # Names bound earlier in the same (hoisted) arm: defined by the time they are read.
        self.bound_names: set[str] = set()
        # Outside values the hoisted code combines, with the kind each must be:
        # checked while tracing (``operands_combine``), since only then are types known.
        self.operands: list[tuple[ast.expr, str]] = []
        # Attribute chains read from outside values (``self.w``): their existence is
        # checked while tracing too.
        self.attributes: list[ast.Attribute] = []
        # Calls ``self.m(...)`` analysed as the enclosing class's ``m`` (its qualified
        # name): that the object's ``m`` is that function is checked while tracing too.
        self.methods: list[tuple[ast.Attribute, str]] = []
        self._helpers: list[str] = []
        # Inside a helper: parameter name -> argument expression in the caller's terms,
        # and the helper's own locals (values it computed).
        self._parameters: dict[str, ast.expr] | None = None
        self._helper_locals: set[str] = set()
        # Names bound in the arm -> their value in terms of outside values only.
        self.definitions: dict[str, ast.expr] = {}

    def define(self, name: str, value: ast.expr) -> None:
        """Record ``name = value`` (bound in the arm) so requirements pass through ``name``."""
        definitions = self.definitions
        bound = self.bound_names

        class Expand(ast.NodeTransformer):
            def visit_Name(self, node: ast.Name):
                if node.id in bound and node.id in definitions:
                    return copy.deepcopy(definitions[node.id])
                return node

        expanded = Expand().visit(copy.deepcopy(value))
        if sum(1 for _ in ast.walk(expanded)) <= 400:
            definitions[name] = expanded
        else:
            definitions.pop(name, None)

    # the requirement an operation puts on an operand ---------------------------------

    def _require(self, expression: ast.expr, kind: str) -> str | None:
        """Record that ``expression`` must be of ``kind``, or say why that cannot be shown."""
        if isinstance(expression, ast.Constant):
            value = expression.value
            if isinstance(value, bool):
                ok = kind in (NUMBER, INTEGRAL)
            elif isinstance(value, int):
                ok = kind in (NUMBER, NOT_BOOL, FLOATING, INTEGRAL)
            elif isinstance(value, float):
                ok = kind in (NUMBER, NOT_BOOL, FLOATING)
            else:
                ok = False
            return None if ok else f"`{ast.unparse(expression)}` is not a {kind} operand"
        if isinstance(expression, ast.Name) and self._parameters is not None:
            if expression.id in self._helper_locals:
                if kind == NUMBER:
                    return None
                return f"cannot show that `{expression.id}` is a {kind} operand"
            if expression.id in self._parameters:
                argument = self._parameters[expression.id]
                saved, self._parameters = self._parameters, None
                try:
                    return self._require(argument, kind)
                finally:
                    self._parameters = saved
        if self._is_outside_value(expression):
            self.operands.append((expression, kind))
            return None
        if isinstance(expression, ast.Name):
            if expression.id in self.definitions:
                saved, self.bound_names = self.bound_names, set()
                try:
                    return self._require(self.definitions[expression.id], kind)
                finally:
                    self.bound_names = saved
            if kind == NUMBER:
                return None  # a value computed by safe arithmetic is a tensor or a number
            return f"cannot show that `{expression.id}` is a {kind} operand"
        if isinstance(expression, ast.BinOp):
            if isinstance(expression.op, (ast.BitAnd, ast.BitOr, ast.BitXor)):
                if kind in (NUMBER, INTEGRAL):
                    return None  # its own operands were required integral
                return f"`{ast.unparse(expression)}` may be a bool tensor"
            if kind == INTEGRAL:
                return f"`{ast.unparse(expression)}` may not be integral"
            if kind == TENSOR:
                # A tensor when one operand is; with a constant, the other one must be.
                if isinstance(expression.left, ast.Constant):
                    return self._require(expression.right, TENSOR)
                return self._require(expression.left, TENSOR)
            return self._require(expression.left, kind) or self._require(expression.right, kind)
        if _produces_bool(expression):
            if kind in (NUMBER, INTEGRAL):
                return None
            if kind == TENSOR and isinstance(expression, ast.Compare):
                return self._require(expression.left, TENSOR)  # a tensor compared gives a tensor
            if kind == TENSOR and isinstance(expression, ast.Call):
                return None  # the pointwise functions and methods here return tensors
            return f"`{ast.unparse(expression)}` is a bool value, which `-`, `abs` or `**` reject"
        if isinstance(expression, ast.UnaryOp):
            return self._require(expression.operand, kind)
        if isinstance(expression, ast.Call):
            return self._require_of_call(expression, kind)
        return f"cannot show that `{ast.unparse(expression)}` is a {kind} operand"

    def _require_of_call(self, call: ast.Call, kind: str) -> str | None:
        """The dtype of a safe call's value follows from its operands' (see the tables)."""
        callee = call.func
        qualified = self.context.facts.qualified_name_of(callee) if self._parameters is None else None
        if qualified in POINTWISE_TORCH:
            name, operands = qualified.rsplit(".", 1)[-1], list(call.args)
            if name == "where":
                operands = operands[1:]
            elif name == "full_like":
                operands = operands[:1]
        elif isinstance(callee, ast.Attribute) and callee.attr in SAFE_METHODS and qualified is None:
            name, operands = callee.attr, [callee.value]
        else:
            if kind == NUMBER:
                return None  # a safe helper computes a tensor or a number
            purity = self.context.module.purity
            function, receiver = None, None
            if self._parameters is None and isinstance(callee, ast.Name) and callee.id in purity.functions:
                function = purity.functions[callee.id]
            elif self._parameters is None and self._same_class_method(callee) is not None:
                function, receiver = self._same_class_method(callee), callee.value
            value = self._helper_value(function, call, receiver) if function is not None else None
            if value is not None:
                return self._require(value, kind)  # the helper's value, in the caller's terms
            return f"cannot show that `{ast.unparse(call)}` is a {kind} operand"
        if name in FLOAT_RESULT:
            if kind == INTEGRAL:
                return f"`{ast.unparse(call)}` is a floating-point value"
            return None
        if kind in (NUMBER, TENSOR):
            return None  # these functions and methods return tensors
        if name == "sum" and kind == NOT_BOOL:
            return None  # a sum of bools is an integer tensor
        return first_failure(*[lambda e=e: self._require(e, kind) for e in operands])

    def _is_outside_value(self, expression: ast.expr) -> bool:
        """A value read from outside the hoisted code: a parameter, an earlier local, an attribute."""
        head = expression
        while isinstance(head, ast.Attribute):
            head = head.value
        if not isinstance(head, ast.Name) or self._parameters is not None:
            return False
        if head.id in self.bound_names:
            return False
        return self.context.facts.qualified_name_of(expression) is None or not isinstance(expression, ast.Attribute)

    # expressions --------------------------------------------------------------------

    def expression_is_safe(self, expression: ast.expr | None) -> str | None:
        """None when evaluating ``expression`` cannot raise, write or draw random numbers."""
        if expression is None:
            return None
        facts = self.context.facts
        if isinstance(expression, ast.Constant):
            return None
        if isinstance(expression, ast.Name):
            if self._parameters is not None:
                if expression.id in self._parameters or expression.id in self._helper_locals:
                    return None
                return self._helper_global(expression.id)
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
            reason = self.expression_is_safe(expression.value)
            if reason:
                return reason
            if self._parameters is not None:
                return f"`{ast.unparse(expression)}` reads an attribute inside a helper"
            if self._is_outside_value(expression) and facts.qualified_name_of(expression) is None:
                self.attributes.append(expression)
            return None
        if isinstance(expression, ast.BinOp):
            return self._binary_is_safe(expression)
        if isinstance(expression, ast.UnaryOp):
            if isinstance(expression.op, ast.Not):
                return f"`{ast.unparse(expression)}` takes the truth value of a tensor"
            if isinstance(expression.op, ast.UAdd):
                kind = NUMBER
            elif isinstance(expression.op, ast.USub):
                kind = NOT_BOOL
            else:
                kind = INTEGRAL
            return self.expression_is_safe(expression.operand) or self._require(expression.operand, kind)
        if isinstance(expression, ast.Compare):
            if not all(isinstance(op, SAFE_COMPARISONS) for op in expression.ops):
                return f"`{ast.unparse(expression)}` may raise"
            operands = [expression.left] + expression.comparators
            reason = first_failure(*[lambda e=e: self.expression_is_safe(e) for e in operands])
            if reason:
                return reason
            if all(isinstance(op, (ast.Is, ast.IsNot)) for op in expression.ops):
                return None  # identity never raises nor broadcasts
            if all(isinstance(op, (ast.Eq, ast.NotEq)) for op in expression.ops) and any(
                isinstance(e, ast.Attribute) and facts.qualified_name_of(e) is not None for e in operands
            ):
                return None  # ``x.dtype == torch.float16``: equality with a module constant
            return first_failure(*[lambda e=e: self._require(e, NUMBER) for e in operands])
        if isinstance(expression, (ast.Tuple, ast.List)):
            return first_failure(*[lambda e=e: self.expression_is_safe(e) for e in expression.elts])
        if isinstance(expression, ast.Call):
            return self.call_is_safe(expression)
        if isinstance(expression, ast.Subscript):
            return f"`{ast.unparse(expression)}` indexes, which may raise"
        return f"`{ast.unparse(expression)}` is not known to be free of exceptions"

    def _binary_is_safe(self, expression: ast.BinOp) -> str | None:
        if not isinstance(expression.op, SAFE_BINARY_OPERATORS):
            symbol = ast.unparse(expression)
            return f"`{symbol}` may raise (division, modulo and matmul can fail at run time)"
        for operand in (expression.left, expression.right):
            if isinstance(operand, (ast.Tuple, ast.List, ast.Dict, ast.Set)):
                return f"`{ast.unparse(expression)}` combines a container"
        reason = self.expression_is_safe(expression.left) or self.expression_is_safe(expression.right)
        if reason:
            return reason
        if isinstance(expression.op, ast.Pow):
            exponent = expression.right
            if not (
                isinstance(exponent, ast.Constant)
                and type(exponent.value) in (int, float)
                and (isinstance(exponent.value, float) or exponent.value >= 0)
            ):
                # ``int_tensor ** -1`` and ``0 ** -1`` raise.
                return f"`{ast.unparse(expression)}`: only constant non-negative or float exponents are known not to raise"
            return self._require(expression.left, NOT_BOOL)
        if isinstance(expression.op, ast.Sub):
            kind = NOT_BOOL
        elif isinstance(expression.op, (ast.BitAnd, ast.BitOr, ast.BitXor)):
            kind = INTEGRAL
        else:
            kind = NUMBER
        return self._require(expression.left, kind) or self._require(expression.right, kind)

    # calls --------------------------------------------------------------------------

    def call_is_safe(self, call: ast.Call) -> str | None:
        facts = self.context.facts
        if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
            return f"`{ast.unparse(call)}` unpacks its arguments"
        qualified = None if self._parameters is not None and self._head_is_parameter(call.func) else (
            facts.qualified_name_of(call.func)
        )
        reason = first_failure(
            lambda: writes_through_keyword(call),
            lambda: updates_in_place(call),
            lambda: draws_random_numbers(call, qualified),
        )
        if reason:
            return reason
        arguments_reason = first_failure(
            *[lambda e=e: self.expression_is_safe(e) for e in call.args + [k.value for k in call.keywords]]
        )
        if arguments_reason:
            return arguments_reason
        if qualified in POINTWISE_TORCH:
            kind, (fewest, most), keywords = POINTWISE_TORCH[qualified]
            if not fewest <= len(call.args) <= most or any(k.arg not in keywords for k in call.keywords):
                return f"`{ast.unparse(call)}`: only the plain positional form is known not to raise"
            operands = call.args[:1] if qualified == "torch.full_like" else call.args
            if qualified == "torch.full_like" and not isinstance(call.args[1], ast.Constant):
                return f"`{ast.unparse(call)}`: the fill value must be a constant"
            if qualified == "torch.where":
                # The condition must be a bool tensor; the values tensors or numbers.
                if not _produces_bool(call.args[0]) or isinstance(call.args[0], ast.Constant):
                    return f"`{ast.unparse(call)}`: the condition is not known to be a bool tensor"
                return first_failure(
                    lambda: self._require(call.args[0], TENSOR),
                    *[lambda e=e: self._require(e, NUMBER) for e in call.args[1:]],
                )
            # torch functions reject Python numbers: every operand must be a tensor too.
            return first_failure(
                *[lambda e=e: self._require(e, TENSOR) for e in operands],
                *[lambda e=e: self._require(e, kind) for e in operands if kind != NUMBER],
            )
        callee = call.func
        if isinstance(callee, ast.Attribute) and callee.attr in SAFE_METHODS and qualified is None:
            if call.args or call.keywords:
                return f"`{ast.unparse(call)}`: only the method without arguments is known not to raise"
            return (
                self.expression_is_safe(callee.value)
                or self._require(callee.value, TENSOR)
                or self._require(callee.value, SAFE_METHODS[callee.attr])
            )
        purity = self.context.module.purity
        if isinstance(callee, ast.Name) and callee.id in purity.functions and not (
            facts.is_local(callee.id) or (self._parameters is not None and callee.id in self._parameters)
        ):
            return self._helper_is_safe(purity.functions[callee.id], call, receiver=None)
        method = self._same_class_method(callee) if self._parameters is None else None
        if method is not None:
            return self._helper_is_safe(method, call, receiver=callee.value)
        return f"the call `{ast.unparse(call.func)}` is not known to be free of exceptions and effects"

    def _head_is_parameter(self, expression: ast.expr) -> bool:
        head = expression
        while isinstance(head, ast.Attribute):
            head = head.value
        return isinstance(head, ast.Name) and self._parameters is not None and head.id in self._parameters

    def _helper_global(self, name: str) -> str | None:
        """Inside a helper, a global may be read only as a function or module it calls."""
        return f"a helper reads the global `{name}`, which the analysis does not follow"

    def _helper_is_safe(self, function: ast.FunctionDef, call: ast.Call, receiver: ast.expr | None) -> str | None:
        """A helper is safe when its body only binds locals and returns, all safe expressions.

        The analysis runs the helper's expressions with its parameters standing for the
        caller's argument expressions, so requirements land on the caller's values.
        """
        name = function.name
        if name in self._helpers or len(self._helpers) > 8:
            return f"`{name}` is recursive"
        if isinstance(function, ast.AsyncFunctionDef) or function.decorator_list:
            return f"`{name}` is decorated or a coroutine"
        bound = self._bind_arguments(function, call, receiver)
        if isinstance(bound, str):
            return bound
        if self._parameters is not None:
            # A helper calling a helper: its arguments are in this helper's terms.
            bound = {key: self._in_caller_terms(value) for key, value in bound.items()}
        inner = ExpressionSafety(self.context, self.node)
        inner._helpers = self._helpers + [name]
        inner.bound_names = set(self.bound_names)
        inner._parameters = bound
        body = function.body
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            body = body[1:]
        if not body or not isinstance(body[-1], ast.Return) or body[-1].value is None:
            return f"`{name}` does not end by returning a value"
        helper_locals: set[str] = set()
        for statement in body:
            if isinstance(statement, ast.Assign) and len(statement.targets) == 1 and isinstance(
                statement.targets[0], ast.Name
            ):
                inner._helper_locals = set(helper_locals)
                reason = inner.expression_is_safe(statement.value)
                if reason:
                    return f"in `{name}`: {reason}"
                helper_locals.add(statement.targets[0].id)
                if statement.targets[0].id in bound:
                    return f"`{name}` rebinds its parameter `{statement.targets[0].id}`"
                continue
            if isinstance(statement, ast.Return) and statement is body[-1]:
                inner._helper_locals = set(helper_locals)
                reason = inner.expression_is_safe(statement.value)
                if reason:
                    return f"in `{name}`: {reason}"
                continue
            return f"`{name}` contains a `{type(statement).__name__}` statement, which may raise or write"
        self.operands.extend(inner.operands)
        self.attributes.extend(inner.attributes)
        self.methods.extend(inner.methods)
        return None

    def _bind_arguments(self, function: ast.FunctionDef, call: ast.Call, receiver: ast.expr | None):
        """The helper's parameters mapped to the caller's expressions, or why they cannot be."""
        name = function.name
        arguments = function.args
        if arguments.vararg or arguments.kwarg or arguments.posonlyargs:
            return f"`{name}` takes `*args`, `**kwargs` or positional-only parameters"
        parameters = [a.arg for a in arguments.args]
        if receiver is not None:
            if not parameters:
                return f"`{name}` takes no `self`"
            supplied = [receiver] + list(call.args)
        else:
            supplied = list(call.args)
        if len(supplied) > len(parameters):
            return f"`{ast.unparse(call)}` passes too many arguments"
        bound = dict(zip(parameters, supplied))
        defaults = dict(zip(parameters[len(parameters) - len(arguments.defaults):], arguments.defaults))
        kwonly_defaults = {
            a.arg: d for a, d in zip(arguments.kwonlyargs, arguments.kw_defaults) if d is not None
        }
        for keyword in call.keywords:
            if keyword.arg in bound or keyword.arg not in set(parameters) | {a.arg for a in arguments.kwonlyargs}:
                return f"`{ast.unparse(call)}` passes an unexpected keyword"
            bound[keyword.arg] = keyword.value
        for parameter in parameters + [a.arg for a in arguments.kwonlyargs]:
            if parameter not in bound:
                default = defaults.get(parameter, kwonly_defaults.get(parameter))
                if not isinstance(default, ast.Constant):
                    return f"`{ast.unparse(call)}` leaves `{parameter}` to a default that is not a constant"
                bound[parameter] = default
        return bound

    def _helper_value(self, function: ast.FunctionDef, call: ast.Call, receiver: ast.expr | None):
        """The helper's returned expression in the caller's terms (None when not expressible)."""
        bound = self._bind_arguments(function, call, receiver)
        if isinstance(bound, str):
            return None
        if self._parameters is not None:
            bound = {key: self._in_caller_terms(value) for key, value in bound.items()}
        values = dict(bound)

        class Substitute(ast.NodeTransformer):
            def visit_Name(self, node: ast.Name):
                if node.id in values:
                    return copy.deepcopy(values[node.id])
                return node

        for statement in function.body:
            if isinstance(statement, ast.Assign) and isinstance(statement.targets[0], ast.Name):
                values[statement.targets[0].id] = Substitute().visit(copy.deepcopy(statement.value))
            elif isinstance(statement, ast.Return) and statement.value is not None:
                expanded = Substitute().visit(copy.deepcopy(statement.value))
                return expanded if sum(1 for _ in ast.walk(expanded)) <= 400 else None
        return None

    def _in_caller_terms(self, expression: ast.expr) -> ast.expr:
        """``expression`` (in this helper's terms) with parameters replaced by their arguments;
        a value the helper computed becomes an opaque call (a tensor or number)."""
        parameters, helper_locals = self._parameters or {}, self._helper_locals

        class Substitute(ast.NodeTransformer):
            def visit_Name(self, node: ast.Name):
                if node.id in parameters:
                    return copy.deepcopy(parameters[node.id])
                if node.id in helper_locals:
                    return ast.Call(func=ast.Name(id="__graphmend_value__", ctx=ast.Load()), args=[], keywords=[])
                return node

        return Substitute().visit(copy.deepcopy(expression))

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
                    return None  # a decorator may put other code in the method's place
                qualified_name = facts.qualified_name.rsplit(".", 1)[0] + "." + statement.name
                if (callee, qualified_name) not in self.methods:
                    self.methods.append((callee, qualified_name))
                return statement
        return None
