"""[Trap] calls to a known validation helper become graph-native assertions.

    torch_compilable_check(x.sum() == n, "sizes differ")
becomes
    if __graphmend__.is_compiling() and __graphmend__.checks.check_lowerable(
            torch_compilable_check, None, 12, 'f'):
        __graphmend__.assert_guard(
            __graphmend__.checks.check_holds(x.sum() == n),
            __graphmend__.traps.site_message(
                __graphmend__.checks.check_site(torch_compilable_check, None, 12, 'f'),
                12, 'f', "sizes differ"))
    else:
        torch_compilable_check(x.sum() == n, "sizes differ")

A known helper (``graphmend.runtime.checks.KNOWN_CHECK_FUNCTIONS``) means
``if not cond: raise error_type(msg)``, with ``error_type`` the helper's default when
the call gives none: the call is checked and lowered as that guard would be
(``trap.py``'s conditions, on the guard the call stands for), so a failing check
raises the helper's own ``error_type`` and message under ``torch.compile``, where
the original raised TorchDynamo's RuntimeError (or broke the graph).

Legality conditions (each a function, returning the reason it fails):
``arguments_bind``, ``message_is_text`` here; ``why_not_tensorizable``,
``exception_restorable``, ``raised_name_may_be_a_class``, ``message_restorable``,
``message_free_of_effects``, ``not_caught_in_function`` and
``no_in_place_write_before_guard`` from Trap. While tracing,
``graphmend.runtime.checks.check_lowerable`` checks that the callee is the known
helper itself (identity and signature), that its checks are enabled and that
``error_type`` is an Exception class, then Trap's trace-time conditions.
"""

from __future__ import annotations

import ast
import copy

from graphmend.rewrite.findings import VALIDATION_GUARD
from graphmend.rewrite.templates import RUNTIME_NAME, compiled_or_original, expression, place, statements
from graphmend.rules.base import FunctionContext, first_failure, rewrite_statements
from graphmend.rules.conditions import why_not_tensorizable
from graphmend.rules.trap import (
    RULE,
    exception_restorable,
    message_free_of_effects,
    message_restorable,
    no_in_place_write_before_guard,
    not_caught_in_function,
    raised_name_may_be_a_class,
)
from graphmend.runtime.checks import KNOWN_CHECK_NAMES

_PARAMETERS = ("cond", "msg", "error_type")


def check_call_of(statement: ast.stmt) -> ast.Call | None:
    """The call of a statement ``helper(...)`` whose callee is named like a known helper."""
    if not isinstance(statement, ast.Expr) or not isinstance(statement.value, ast.Call):
        return None
    callee = statement.value.func
    name = callee.id if isinstance(callee, ast.Name) else getattr(callee, "attr", None)
    return statement.value if name in KNOWN_CHECK_NAMES else None


def bound_arguments(call: ast.Call) -> dict[str, ast.expr] | None:
    if any(isinstance(a, ast.Starred) for a in call.args) or len(call.args) > len(_PARAMETERS):
        return None
    bound = dict(zip(_PARAMETERS, call.args))
    for keyword in call.keywords:
        if keyword.arg not in _PARAMETERS or keyword.arg in bound:
            return None
        bound[keyword.arg] = keyword.value
    return bound if "cond" in bound and "msg" in bound else None


def arguments_bind(call: ast.Call) -> str | None:
    """Each argument must be seen for what it is: the condition, the message, the class."""
    if bound_arguments(call) is None:
        return "the call's arguments do not bind plainly to (cond, msg, error_type)"
    return None


def message_is_text(message: ast.expr) -> str | None:
    """A message given as a function is called only when the check fails; a lowered
    check builds its message while tracing, every time."""
    if isinstance(message, ast.Lambda):
        return "the message is a function, called only when the check fails"
    return None


def _as_guard(call: ast.Call, arguments: dict[str, ast.expr], error_type: ast.expr) -> ast.If:
    """The guard the call stands for: ``if not cond: raise error_type(msg)``."""
    exception = ast.Call(func=copy.deepcopy(error_type), args=[copy.deepcopy(arguments["msg"])], keywords=[])
    guard = ast.If(
        test=ast.UnaryOp(op=ast.Not(), operand=copy.deepcopy(arguments["cond"])),
        body=[ast.Raise(exc=exception, cause=None)],
        orelse=[],
    )
    for node in ast.walk(guard):
        ast.copy_location(node, call)
    return guard


def apply(context: FunctionContext) -> None:
    if not context.may_depend_on_tensor_values():
        return

    def rewrite(statement: ast.stmt, _enclosing) -> list[ast.stmt] | None:
        call = check_call_of(statement)
        if call is None:
            return None
        node = context.facts.node_for(statement)
        arguments = bound_arguments(call)
        if arguments is None:
            if any(context.data.is_data_dependent(a, node) for a in ast.walk(call) if isinstance(a, ast.expr)):
                context.module.report(
                    context.facts, statement, VALIDATION_GUARD,
                    f"validation check `{ast.unparse(call.func)}(...)`", RULE, arguments_bind(call),
                )
            return None
        condition = arguments.get("cond")
        if condition is None or not context.data.is_data_dependent(condition, node):
            return None  # a Python condition: TorchDynamo checks it while tracing
        if context.depends_only_through_items(condition, node):
            return None  # a Python value from ``.item()``: the break is at that call
        # Without an error_type the helper's default is a builtin: stand it in for the
        # source checks, which look only at its shape.
        error_type = arguments.get("error_type", ast.Name(id="ValueError", ctx=ast.Load()))
        guard = _as_guard(call, arguments, error_type)
        raise_statement = guard.body[0]
        reason = first_failure(
            lambda: message_is_text(arguments["msg"]),
            lambda: why_not_tensorizable(context, condition, node),
            lambda: exception_restorable(context, raise_statement),
            lambda: raised_name_may_be_a_class(context, raise_statement),
            lambda: message_restorable(context, raise_statement, node),
            lambda: message_free_of_effects(context, raise_statement),
            lambda: not_caught_in_function(context, statement),
            lambda: no_in_place_write_before_guard(context, statement),
        )
        finding = context.module.report(
            context.facts, statement, VALIDATION_GUARD,
            f"validation check `{ast.unparse(call.func)}({ast.unparse(condition)}, ...)`", RULE, reason,
        )
        if not finding.fixed:
            return None
        context.module.uses_runtime = True
        given_error_type = arguments.get("error_type")
        site = dict(
            CALLEE=copy.deepcopy(call.func),
            ERROR=copy.deepcopy(given_error_type) if given_error_type is not None else ast.Constant(None),
            LINE=ast.Constant(statement.lineno),
            FUNCTION=ast.Constant(context.facts.function.name),
        )
        for hole in site.values():
            for name in ast.walk(hole):
                if hasattr(name, "ctx"):
                    name.ctx = ast.Load()
        assertion = statements(
            f"{RUNTIME_NAME}.assert_guard({RUNTIME_NAME}.checks.check_holds(COND), "
            f"{RUNTIME_NAME}.traps.site_message("
            f"{RUNTIME_NAME}.checks.check_site(CALLEE, ERROR, LINE, FUNCTION), LINE, FUNCTION, MESSAGE))",
            COND=copy.deepcopy(condition),
            MESSAGE=copy.deepcopy(arguments["msg"]),
            **site,
        )
        place(assertion, statement)
        for lowered in assertion:
            lowered._graphmend_trap = True
        lowerable = expression(f"{RUNTIME_NAME}.checks.check_lowerable(CALLEE, ERROR, LINE, FUNCTION)", **site)
        wrapped = compiled_or_original(assertion, [statement], f"{RULE}: original check call", also=lowerable)
        wrapped._graphmend_trap = True
        return [wrapped]

    rewrite_statements(context.facts.function, rewrite)
