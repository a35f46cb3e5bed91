"""[Trap] data-dependent validation guards become graph-native assertions.

    if not torch.equal(mask, expected):
        raise ValueError("unsupported attention mask")
becomes
    if __graphmend__.is_compiling():
        __graphmend__.assert_guard(
            __graphmend__.guard_holds(__graphmend__.equal_as_tensor(mask, expected), True),
            __graphmend__.trap_message(__name__, 'ValueError', "unsupported attention mask"))
    else:
        <the original if>

``torch.equal`` keeps its meaning: shapes are compared statically first (so
broadcasting cannot call a [4] and a [1, 4] tensor equal), values after dtype
promotion. The message always reaches ``torch._assert_async`` (inductor drops an
assertion without one), and the compiled-call boundary raises the original class
with the original message. ``assert C, msg`` is lowered the same way, under
``__debug__``.

Legality conditions (each a function below, returning the reason it fails):
``guard_body_only_raises``, ``why_not_tensorizable`` (conditions.py),
``exception_restorable``, ``message_restorable``, ``not_caught_in_function``.
"""

from __future__ import annotations

import ast
import copy

from graphmend.rewrite.findings import VALIDATION_GUARD
from graphmend.rewrite.templates import RUNTIME_NAME, compiled_or_original, place, statements
from graphmend.rules.base import FunctionContext, enclosing_statements, first_failure, rewrite_statements
from graphmend.rules.conditions import (
    conjunction,
    holds_expression,
    split_static_prefix,
    why_not_tensorizable,
)

RULE = "Trap"


def guard_body_only_raises(statement: ast.If) -> str | None:
    if len(statement.body) != 1 or not isinstance(statement.body[0], ast.Raise):
        return "the guard's body does more than raise"
    return None


def not_caught_in_function(context: FunctionContext, statement: ast.stmt) -> str | None:
    for outer in enclosing_statements(context.facts.function, statement):
        if isinstance(outer, ast.Try) or type(outer).__name__ == "TryStar":
            if statement_in(outer.body, statement):
                return "the raise may be caught by an enclosing `try`"
        if isinstance(outer, (ast.With, ast.AsyncWith)):
            return "a `with` block may suppress the exception"
    return None


def statement_in(statements, target) -> bool:
    return any(target is node for statement in statements for node in ast.walk(statement))


def exception_restorable(context: FunctionContext, raise_statement: ast.Raise) -> str | None:
    if raise_statement.exc is None:
        return "a bare `raise` re-raises the active exception"
    if raise_statement.cause is not None:
        return "`raise ... from ...` chains an exception that cannot be restored"
    exception = raise_statement.exc
    if isinstance(exception, ast.Call):
        if exception.keywords or len(exception.args) > 1:
            return "the exception takes more than one message argument"
        if any(isinstance(a, ast.Starred) for a in exception.args):
            return "the exception's arguments are unpacked"
        exception = exception.func
    path = dotted_path(exception)
    if path is None:
        return "the exception class is not a plain name or attribute"
    head = path.split(".")[0]
    if context.facts.is_local(head):
        return f"the exception class `{path}` is a local name, unknown at the compiled call"
    return None


def message_restorable(context: FunctionContext, raise_statement: ast.Raise, node) -> str | None:
    exception = raise_statement.exc
    if not isinstance(exception, ast.Call) or not exception.args:
        return None
    message = exception.args[0]
    if not is_string_expression(message):
        return "the message is not a string expression"
    if context.data.is_data_dependent(message, node):
        return "the message depends on tensor values"
    return None


def is_string_expression(expression: ast.expr) -> bool:
    if isinstance(expression, ast.Constant):
        return isinstance(expression.value, str)
    if isinstance(expression, ast.JoinedStr):
        return True
    if isinstance(expression, ast.BinOp):
        if isinstance(expression.op, ast.Add):
            return is_string_expression(expression.left) and is_string_expression(expression.right)
        if isinstance(expression.op, ast.Mod):
            return is_string_expression(expression.left)
    if (
        isinstance(expression, ast.Call)
        and isinstance(expression.func, ast.Attribute)
        and expression.func.attr == "format"
    ):
        return is_string_expression(expression.func.value)
    return False


def dotted_path(expression: ast.expr) -> str | None:
    parts = []
    while isinstance(expression, ast.Attribute):
        parts.append(expression.attr)
        expression = expression.value
    if not isinstance(expression, ast.Name):
        return None
    return ".".join([expression.id] + list(reversed(parts)))


def _as_guard(statement: ast.Assert) -> ast.If:
    """``assert C, msg`` is ``if not C: raise AssertionError(msg)`` (under ``__debug__``)."""
    exception = ast.Name(id="AssertionError", ctx=ast.Load())
    if statement.msg is not None:
        exception = ast.Call(func=exception, args=[statement.msg], keywords=[])
    guard = ast.If(
        test=ast.UnaryOp(op=ast.Not(), operand=statement.test),
        body=[ast.Raise(exc=exception, cause=None)],
        orelse=[],
    )
    for node in ast.walk(guard):
        ast.copy_location(node, statement)
    return guard


def apply(context: FunctionContext) -> None:
    if not context.may_depend_on_tensor_values():
        return

    def rewrite(statement: ast.stmt, _enclosing) -> list[ast.stmt] | None:
        if isinstance(statement, ast.Assert):
            guard = _as_guard(statement)
        elif isinstance(statement, ast.If):
            guard = statement
        else:
            return None
        node = context.facts.node_for(statement)
        if not context.data.is_data_dependent(guard.test, node):
            return None
        if guard_body_only_raises(guard) is not None:
            return None  # not a validation guard: [Where] considers it
        raise_statement = guard.body[0]
        static_prefix, dynamic = split_static_prefix(context, guard.test, node)
        reason = first_failure(
            lambda: why_not_tensorizable(context, dynamic, node),
            lambda: exception_restorable(context, raise_statement),
            lambda: message_restorable(context, raise_statement, node),
            lambda: not_caught_in_function(context, statement),
        )
        shown = f"assert {ast.unparse(statement.test)}" if isinstance(statement, ast.Assert) else (
            f"if {ast.unparse(statement.test)}: raise"
        )
        context.module.report(
            context.facts, statement, VALIDATION_GUARD, f"validation guard `{shown}`", RULE, reason
        )
        if reason:
            return None
        context.module.uses_runtime = True
        exception = raise_statement.exc
        message = exception.args[0] if isinstance(exception, ast.Call) and exception.args else None
        exception_path = dotted_path(exception.func if isinstance(exception, ast.Call) else exception)
        # The guard raises when the condition is truthy; the assertion must hold otherwise.
        assertion = statements(
            f"{RUNTIME_NAME}.assert_guard(HOLDS, {RUNTIME_NAME}.trap_message(__name__, PATH, MESSAGE))",
            HOLDS=holds_expression(context, dynamic, False),
            PATH=ast.Constant(exception_path),
            MESSAGE=message if message is not None else ast.Constant(None),
        )
        if static_prefix:
            assertion = statements("if PREFIX:\n    BODY", PREFIX=conjunction(static_prefix), BODY=assertion)
        if isinstance(statement, ast.Assert):
            assertion = statements("if __debug__:\n    BODY", BODY=assertion)
        place(assertion, statement)
        for lowered in assertion:
            lowered._graphmend_trap = True
        compiled = assertion + copy.deepcopy(guard.orelse)
        wrapped = compiled_or_original(compiled, [statement], f"{RULE}: original guard")
        wrapped._graphmend_trap = True
        return [wrapped]

    rewrite_statements(context.facts.function, rewrite)
