"""Is a call free of observable effects? Unknown means impure.

A callee is side-effect free when it resolves (a function of the same module, a
method of the same class, or a known-pure torch/math/builtin function) and its body
is shown to write nothing outside its own locals, print or log nothing, consume no
random numbers (``out=`` and ``inplace=`` keywords count as writes) and contain no
reachable ``raise`` nor an operation that commonly raises: division, modulo and
matrix products (``ZeroDivisionError``, shape errors) and indexing.

What is *not* modelled, and documented as such: attribute reads on the arguments,
and the remaining arithmetic, are taken not to raise. Code that runs where the
original would not (Where's untaken arm) is held to the stricter rules of
``graphmend.analysis.safety``, which checks operand types and shapes while tracing.
"""

from __future__ import annotations

import ast

from graphmend.analysis.bindings import ModuleBindings

PURE_BUILTINS = frozenset(
    f"builtins.{name}"
    for name in (
        "len", "int", "float", "bool", "str", "abs", "min", "max", "range", "tuple", "list",
        "dict", "isinstance", "hasattr", "getattr", "round", "sum", "any", "all", "zip",
        "enumerate", "sorted", "reversed", "set", "frozenset", "type", "divmod", "pow",
    )
)
IMPURE_TORCH = frozenset(
    f"torch.{name}"
    for name in (
        "manual_seed", "seed", "save", "load", "rand", "randn", "randint", "randperm",
        "rand_like", "randn_like", "randint_like", "normal", "bernoulli", "multinomial",
        "poisson", "empty", "empty_like", "empty_strided", "set_default_dtype",
        "set_default_device", "set_grad_enabled", "use_deterministic_algorithms",
        "_assert_async", "set_printoptions",
    )
)
PURE_METHODS = frozenset(
    {
        "get", "keys", "values", "items", "copy", "float", "double", "half", "bfloat16",
        "int", "long", "bool", "to", "type_as", "view", "view_as", "reshape", "unsqueeze",
        "squeeze", "transpose", "permute", "contiguous", "clone", "detach", "expand",
        "expand_as", "size", "dim", "numel", "sum", "mean", "max", "min", "abs", "exp",
        "log", "sqrt", "rsqrt", "pow", "neg", "sin", "cos", "tanh", "sigmoid", "relu",
        "softmax", "flatten", "matmul", "masked_fill", "split", "chunk", "repeat",
        "all", "any", "startswith", "endswith", "format", "join", "lower", "upper",
        "strip", "replace",
    }
)


def is_known_pure(qualified: str | None) -> bool:
    if qualified is None:
        return False
    if qualified in PURE_BUILTINS:
        return True
    if qualified.startswith("math."):
        return True
    if qualified.startswith(("torch.", "torch.nn.functional.")):
        last = qualified.rsplit(".", 1)[-1]
        return (
            qualified not in IMPURE_TORCH
            and not last.endswith("_")
            and "dropout" not in last
            and not last.startswith(("rand", "manual_seed"))
            and ".cuda." not in qualified
            and ".distributed." not in qualified
        )
    return False


class PurityAnalysis:
    """Purity of a module's own functions and of calls made from its code."""

    def __init__(self, tree: ast.Module, module: ModuleBindings):
        self.module = module
        self.functions: dict[str, ast.FunctionDef] = {
            node.name: node
            for node in tree.body
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and module.bound_once(node.name)
        }
        self._verdicts: dict[int, str | None] = {}

    def function_impurity(self, function: ast.FunctionDef, calling_keywords=None) -> str | None:
        """None when the body is pure; else the reason it is not."""
        key = id(function)
        if calling_keywords is None and key in self._verdicts:
            return self._verdicts[key]
        if calling_keywords is None:
            self._verdicts[key] = f"`{function.name}` is recursive"
        reason = _BodyChecker(self, function, calling_keywords).reason()
        if calling_keywords is None:
            self._verdicts[key] = reason
        return reason


class _BodyChecker:
    def __init__(self, purity: PurityAnalysis, function: ast.FunctionDef, calling_keywords):
        self.purity = purity
        self.function = function
        arguments = function.args
        self.kwargs_name = arguments.kwarg.arg if arguments.kwarg else None
        self.calling_keywords = calling_keywords
        named = {a.arg for a in arguments.args + arguments.kwonlyargs}
        # The ``**kwargs`` of a call that passes only named parameters is empty.
        self.kwargs_empty = calling_keywords is not None and set(calling_keywords) <= named
        self.locals = {
            node.id
            for node in ast.walk(function)
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store)
        } | {a.arg for a in arguments.posonlyargs + arguments.args + arguments.kwonlyargs}

    def reason(self) -> str | None:
        if isinstance(self.function, ast.AsyncFunctionDef):
            return f"`{self.function.name}` is a coroutine"
        return self._statements(self.function.body)

    def _statements(self, statements) -> str | None:
        for statement in statements:
            reason = self._statement(statement)
            if reason:
                return reason
        return None

    def _is_empty_kwargs_guard(self, test: ast.expr) -> bool:
        if not (self.kwargs_empty and self.kwargs_name):
            return False
        if isinstance(test, ast.Name) and test.id == self.kwargs_name:
            return True
        return (
            isinstance(test, ast.Compare)
            and isinstance(test.left, ast.Call)
            and isinstance(test.left.func, ast.Name)
            and test.left.func.id == "len"
            and len(test.left.args) == 1
            and isinstance(test.left.args[0], ast.Name)
            and test.left.args[0].id == self.kwargs_name
            and len(test.ops) == 1
            and isinstance(test.ops[0], ast.Gt)
            and isinstance(test.comparators[0], ast.Constant)
            and test.comparators[0].value == 0
        )

    def _statement(self, statement: ast.stmt) -> str | None:
        name = self.function.name
        if isinstance(statement, (ast.Pass, ast.Break, ast.Continue)):
            return None
        if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant):
            return None
        if isinstance(statement, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
            for target in targets:
                for node in ast.walk(target):
                    if isinstance(node, (ast.Attribute, ast.Subscript)):
                        return f"`{name}` writes to `{ast.unparse(node)}`"
            return self._expression(statement.value)
        if isinstance(statement, ast.Return):
            return self._expression(statement.value)
        if isinstance(statement, ast.If):
            if self._is_empty_kwargs_guard(statement.test):
                return self._statements(statement.orelse)
            return (
                self._expression(statement.test)
                or self._statements(statement.body)
                or self._statements(statement.orelse)
            )
        if isinstance(statement, ast.For):
            return (
                self._expression(statement.iter)
                or self._statements(statement.body)
                or self._statements(statement.orelse)
            )
        if isinstance(statement, ast.Raise):
            return f"`{name}` may raise (line {statement.lineno})"
        if isinstance(statement, (ast.Global, ast.Nonlocal)):
            return f"`{name}` declares a global"
        return f"`{name}` contains a `{type(statement).__name__}` statement"

    def _expression(self, expression: ast.AST | None) -> str | None:
        if expression is None:
            return None
        for node in ast.walk(expression):
            if isinstance(node, (ast.Yield, ast.YieldFrom, ast.Await)):
                return f"`{self.function.name}` yields"
            if isinstance(node, ast.NamedExpr):
                return f"`{self.function.name}` uses an assignment expression"
            if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Div, ast.FloorDiv, ast.Mod, ast.MatMult)):
                return f"`{self.function.name}` may raise: `{ast.unparse(node)}`"
            if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
                return f"`{self.function.name}` may raise: `{ast.unparse(node)}` indexes"
            if isinstance(node, ast.Call):
                reason = self._call(node)
                if reason:
                    return reason
        return None

    def _call(self, call: ast.Call) -> str | None:
        for keyword in call.keywords:
            if keyword.arg == "out":
                return "a call writes through `out=`"
            if keyword.arg == "inplace" and not (
                isinstance(keyword.value, ast.Constant) and keyword.value.value is False
            ):
                return "a call may write through `inplace=`"
        callee = call.func
        if isinstance(callee, ast.Name) and callee.id in self.locals:
            return f"`{self.function.name}` calls the local `{callee.id}`"
        if isinstance(callee, ast.Name) and callee.id in self.purity.functions:
            if callee.id == self.function.name:
                return f"`{callee.id}` is recursive"
            return self.purity.function_impurity(self.purity.functions[callee.id])
        head = callee
        while isinstance(head, ast.Attribute):
            head = head.value
        local_head = isinstance(head, ast.Name) and head.id in self.locals
        qualified = None if local_head else self.purity.module.qualified_name(callee)
        if qualified is not None:
            if is_known_pure(qualified):
                return None
            return f"`{ast.unparse(callee)}` is not known to be pure"
        if isinstance(callee, ast.Attribute) and callee.attr in PURE_METHODS:
            return None
        return f"`{ast.unparse(callee)}` cannot be resolved"

