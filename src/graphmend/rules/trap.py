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

``torch.equal`` keeps its meaning: shapes and dtypes are compared statically first.
The message always reaches ``torch._assert_async`` (inductor drops an assertion
without one), and the compiled-call boundary raises the original class with the
original message.
"""

from __future__ import annotations

import ast
import copy

from graphmend.rewrite.findings import VALIDATION_GUARD
from graphmend.rewrite.templates import RUNTIME_NAME, compiled_or_original, place, statements
from graphmend.rules.base import FunctionContext, enclosing_statements, first_failure, rewrite_statements

RULE = "Trap"


def guard_body_only_raises(statement: ast.If) -> str | None:
    if len(statement.body) != 1 or not isinstance(statement.body[0], ast.Raise):
        return "the guard's body does more than raise"
    return None


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


def condition_tensorizable(context: FunctionContext, condition: ast.expr, node) -> str | None:
    if not context.data.is_data_dependent(condition, node):
        return "the condition does not depend on tensor values"
    if context.data.first_item_call(condition) is not None:
        return "the condition calls `.item()`, which needs the value on the host"
    if isinstance(condition, ast.BoolOp):
        return "a data-dependent `and`/`or` short-circuits on a tensor value"
    for part in ast.walk(condition):
        if isinstance(part, (ast.NamedExpr, ast.Await, ast.Yield, ast.Lambda)):
            return "the condition binds a name or suspends"
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


def _tensor_condition(context: FunctionContext, condition: ast.expr) -> tuple[ast.expr, bool]:
    """(expression, holds_when_truthy) with ``not`` peeled and ``torch.equal`` replaced."""
    holds_when_truthy = False  # the guard raises when the condition is truthy
    while isinstance(condition, ast.UnaryOp) and isinstance(condition.op, ast.Not):
        condition = condition.operand
        holds_when_truthy = not holds_when_truthy

    class ReplaceEqual(ast.NodeTransformer):
        def visit_Call(self, call: ast.Call):
            self.generic_visit(call)
            if context.facts.qualified_name_of(call.func) == "torch.equal" and len(call.args) == 2:
                return ast.copy_location(
                    ast.Call(
                        func=ast.Attribute(
                            value=ast.Name(id=RUNTIME_NAME, ctx=ast.Load()),
                            attr="equal_as_tensor",
                            ctx=ast.Load(),
                        ),
                        args=call.args,
                        keywords=[],
                    ),
                    call,
                )
            return call

    rewritten = ReplaceEqual().visit(copy.deepcopy(condition))
    return rewritten, holds_when_truthy


def apply(context: FunctionContext) -> None:
    if not context.may_depend_on_tensor_values():
        return
    def rewrite(statement: ast.stmt, _enclosing) -> list[ast.stmt] | None:
        if not isinstance(statement, ast.If):
            return None
        node = context.facts.node_for(statement)
        if not context.data.is_data_dependent(statement.test, node):
            return None
        if guard_body_only_raises(statement) is not None:
            return None  # not a validation guard: [Where] considers it
        raise_statement = statement.body[0]
        static_prefix, dynamic = split_static_prefix(context, statement.test, node)
        reason = first_failure(
            lambda: condition_tensorizable(context, dynamic, node),
            lambda: exception_restorable(context, raise_statement),
            lambda: message_restorable(context, raise_statement, node),
            lambda: not_caught_in_function(context, statement),
        )
        context.module.report(
            context.facts, statement, VALIDATION_GUARD,
            f"validation guard `if {ast.unparse(statement.test)}: raise`", RULE, reason,
        )
        if reason:
            return None
        context.module.uses_runtime = True
        condition, holds_when_truthy = _tensor_condition(context, dynamic)
        exception = raise_statement.exc
        message = exception.args[0] if isinstance(exception, ast.Call) and exception.args else None
        exception_path = dotted_path(exception.func if isinstance(exception, ast.Call) else exception)
        assertion = statements(
            f"{RUNTIME_NAME}.assert_guard({RUNTIME_NAME}.guard_holds(CONDITION, HOLDS), "
            f"{RUNTIME_NAME}.trap_message(__name__, PATH, MESSAGE))",
            CONDITION=condition,
            HOLDS=ast.Constant(holds_when_truthy),
            PATH=ast.Constant(exception_path),
            MESSAGE=message if message is not None else ast.Constant(None),
        )
        if static_prefix:
            prefix = static_prefix[0] if len(static_prefix) == 1 else ast.BoolOp(
                op=ast.And(), values=static_prefix
            )
            assertion = statements("if PREFIX:\n    BODY", PREFIX=prefix, BODY=assertion)
        place(assertion, statement)
        for lowered in assertion:
            lowered._graphmend_trap = True
        compiled = assertion + copy.deepcopy(statement.orelse)
        guard = compiled_or_original(compiled, [statement], f"{RULE}: original guard")
        guard._graphmend_trap = True
        return [guard]

    rewrite_statements(context.facts.function, rewrite)
