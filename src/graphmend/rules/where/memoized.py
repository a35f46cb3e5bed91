"""[Where] the test of a memoized initialization, ``if not hasattr(object, "name"):``,
which both the selection (``branches.py``) and the performed choice (``performed.py``)
allow in an arm."""

from __future__ import annotations

import ast


def attribute_missing_test(test: ast.expr) -> tuple[ast.expr, str] | None:
    """(object, name) of a memoized initialization's test ``not hasattr(object, "name")``,
    or None for any other test."""
    if not (
        isinstance(test, ast.UnaryOp)
        and isinstance(test.op, ast.Not)
        and isinstance(test.operand, ast.Call)
        and isinstance(test.operand.func, ast.Name)
        and test.operand.func.id == "hasattr"
        and len(test.operand.args) == 2
        and not test.operand.keywords
        and isinstance(test.operand.args[1], ast.Constant)
        and isinstance(test.operand.args[1].value, str)
    ):
        return None
    return test.operand.args[0], test.operand.args[1].value
