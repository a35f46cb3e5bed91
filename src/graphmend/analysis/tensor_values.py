"""Which expressions depend on tensor *values* (not shapes, dtypes or flags).

An expression is data-dependent when it applies an operation whose result depends
on tensor contents (``.sum()``, ``torch.equal``, ...), or when a definition of a name
it reads reaches it and is data-dependent. Parameters are not assumed
data-dependent: static checks on them (``hasattr``, ``is None``, shapes) stay static.
"""

from __future__ import annotations

import ast

from graphmend.analysis.cfg import CfgNode
from graphmend.analysis.reaching import ASSIGNED, Definition
from graphmend.analysis.scopes import FunctionFacts

VALUE_METHODS = frozenset(
    {
        "sum", "any", "all", "max", "min", "mean", "amax", "amin", "prod", "norm",
        "std", "var", "argmax", "argmin", "count_nonzero", "median", "nansum",
        "logsumexp", "equal", "allclose", "item", "tolist", "cumsum",
    }
)
TORCH_VALUE_FUNCTIONS = frozenset(
    f"torch.{name}"
    for name in (
        "sum", "any", "all", "max", "min", "mean", "amax", "amin", "prod", "norm",
        "std", "var", "argmax", "argmin", "count_nonzero", "median", "nansum",
        "logsumexp", "equal", "allclose", "is_nonzero", "cumsum",
    )
)
STATIC_ATTRIBUTES = frozenset(
    {"shape", "dtype", "device", "ndim", "is_cuda", "requires_grad", "layout", "is_sparse"}
)
STATIC_METHODS = frozenset(
    {"size", "dim", "numel", "ndimension", "is_floating_point", "is_contiguous", "nelement",
     "element_size", "get_device", "is_complex"}
)
STATIC_BUILTINS = frozenset(
    {"builtins.len", "builtins.isinstance", "builtins.hasattr", "builtins.type",
     "builtins.callable", "builtins.id", "builtins.issubclass"}
)
ITEM_METHODS = frozenset({"item", "tolist"})
DYNAMIC_SHAPE_METHODS = frozenset({"nonzero", "unique", "unique_consecutive", "masked_select"})
DYNAMIC_SHAPE_FUNCTIONS = frozenset(
    f"torch.{name}" for name in ("nonzero", "unique", "unique_consecutive", "masked_select", "argwhere")
)


class DataDependence:
    """Answers ``is_data_dependent(expression, at_node)`` for one function."""

    def __init__(self, facts: FunctionFacts):
        self.facts = facts
        self._definition_cache: dict[Definition, bool] = {}

    def is_value_operation(self, node: ast.AST) -> bool:
        if not isinstance(node, ast.Call):
            return False
        qualified = self.facts.qualified_name_of(node.func)
        if qualified in TORCH_VALUE_FUNCTIONS:
            return True
        if isinstance(node.func, ast.Attribute) and node.func.attr in VALUE_METHODS:
            # ``torch.max`` is caught above; a method call on any other object is a
            # tensor-value method unless the object is a known module.
            receiver = self.facts.qualified_name_of(node.func.value)
            return receiver is None or not receiver.startswith(("builtins.", "math."))
        return False

    def is_data_dependent(self, expression: ast.AST | None, at: CfgNode | None) -> bool:
        return self._depends(expression, at, frozenset())

    def _depends(self, expression, at, visiting: frozenset) -> bool:
        if expression is None:
            return False
        if isinstance(expression, ast.Call):
            if self.is_value_operation(expression):
                return True
            qualified = self.facts.qualified_name_of(expression.func)
            if qualified in STATIC_BUILTINS:
                return False
            if isinstance(expression.func, ast.Attribute) and expression.func.attr in STATIC_METHODS:
                return False
        if isinstance(expression, ast.Attribute) and expression.attr in STATIC_ATTRIBUTES:
            return False
        if isinstance(expression, ast.Name) and isinstance(expression.ctx, ast.Load):
            if at is None:
                return False
            for definition in self.facts.reaching.reaching(at, expression.id):
                if definition in visiting:
                    continue
                if self._definition_depends(definition, visiting | {definition}):
                    return True
            return False
        if isinstance(expression, (ast.Lambda, ast.FunctionDef)):
            return False
        for child in ast.iter_child_nodes(expression):
            if self._depends(child, at, visiting):
                return True
        return False

    def _definition_depends(self, definition: Definition, visiting: frozenset) -> bool:
        if definition.kind != ASSIGNED or definition.value is None:
            return False
        if definition in self._definition_cache:
            return self._definition_cache[definition]
        result = self._depends(definition.value, definition.node, visiting)
        self._definition_cache[definition] = result
        return result

    def first_item_call(self, expression: ast.AST) -> ast.Call | None:
        for node in ast.walk(expression):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ITEM_METHODS
                and not node.args
            ):
                return node
        return None
