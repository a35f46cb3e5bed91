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

# Set by Trap on the value it binds in place of an ``.item()`` it keeps in the graph:
# the line of that ``.item()``.
LIFTED_ITEM_LINE = "_graphmend_lifted_item_line"


def is_identity_test(expression: ast.AST) -> bool:
    """``labels is not None``, ``a is b``: which object a name holds, never what a tensor
    holds, so TorchDynamo answers it while tracing (the operands are plain references:
    an operand that computes could itself read tensor values)."""
    return (
        isinstance(expression, ast.Compare)
        and all(isinstance(op, (ast.Is, ast.IsNot)) for op in expression.ops)
        and all(
            isinstance(operand, (ast.Name, ast.Attribute, ast.Constant))
            for operand in (expression.left, *expression.comparators)
        )
    )


class DataDependence:
    """Answers ``is_data_dependent(expression, at_node)`` for one function."""

    def __init__(self, facts: FunctionFacts, items_are_python: bool = False, lifted_items_are_python: bool = False):
        self.facts = facts
        # ``.item()`` / ``.tolist()`` results are Python values: TorchDynamo breaks at
        # the call (under its default config), not where the value is used later.
        self.items_are_python = items_are_python
        # An ``.item()`` that Trap keeps as a tensor (``n = _gm_item_1`` on the compiled
        # path) is a Python value in the original program: with this, its value is one
        # too, and the lines of the ``.item()`` calls met are kept in ``lifted_items_met``.
        self.lifted_items_are_python = lifted_items_are_python
        self.lifted_items_met: set[int] = set()
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
        """Whether a definition that directly applies a value operation reaches
        ``expression`` at ``at`` through the definitions of the names it reads.

        That is reachability, so cycles (a loop's back edge) are cut by exploring each
        definition once per question. An answer is kept for later questions only when
        it is final: True for each definition on a path that found one; False, at the
        end of a question answered False, for every definition it explored (all they
        reach was explored too). A False met under a cut is never kept, so the answer
        does not depend on which statement was asked about first."""
        explored: set[Definition] = set()
        found = self._depends(expression, at, explored)
        if not found:
            for definition in explored:
                self._definition_cache[definition] = False
        return found

    def _depends(self, expression, at, explored: set) -> bool:
        if expression is None:
            return False
        lifted_from = getattr(expression, LIFTED_ITEM_LINE, None)
        if lifted_from is not None and self.lifted_items_are_python:
            self.lifted_items_met.add(lifted_from)
            return False
        if isinstance(expression, ast.Call):
            if self.items_are_python and self.first_item_call(expression) is expression:
                return False
            if self.is_value_operation(expression):
                return True
            qualified = self.facts.qualified_name_of(expression.func)
            if qualified in STATIC_BUILTINS:
                return False
            if isinstance(expression.func, ast.Attribute) and expression.func.attr in STATIC_METHODS:
                return False
        if isinstance(expression, ast.Attribute) and expression.attr in STATIC_ATTRIBUTES:
            return False
        if is_identity_test(expression):
            return False
        if isinstance(expression, ast.Name) and isinstance(expression.ctx, ast.Load):
            if at is None:
                return False
            return any(
                self._definition_depends(definition, explored)
                for definition in self.facts.reaching.reaching(at, expression.id)
            )
        if isinstance(expression, (ast.Lambda, ast.FunctionDef)):
            return False
        return any(self._depends(child, at, explored) for child in ast.iter_child_nodes(expression))

    def _definition_depends(self, definition: Definition, explored: set) -> bool:
        if definition.kind != ASSIGNED or definition.value is None:
            return False
        known = self._definition_cache.get(definition)
        if known is not None:
            return known
        if definition in explored:
            return False  # being explored, or explored in this question without a find
        explored.add(definition)
        if self._depends(definition.value, definition.node, explored):
            self._definition_cache[definition] = True
            return True
        return False

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
