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
(``guards.py``'s conditions, on the guard the call stands for), so a failing check
raises the helper's own ``error_type`` and message under ``torch.compile``, where
the original raised TorchDynamo's RuntimeError (or broke the graph).

A message whose f-string holes hold tensor values (``f"tokens: {n_tokens}"``) is
rendered inside the graph when the check fails (``graphmend::check_message``), from
the values at the call, as the f-string formats them; a hole's tensor must then be a
0-d plain tensor (checked while tracing), whose text is its number.

A call that is not lowered (a condition below fails, or one checked while tracing)
stays a call with its break, made through ``checks.call_eagerly`` outside TorchDynamo
when the callee is a known helper (``_kept_call``): it raises what it raises eagerly,
where the helper traced by TorchDynamo raises RuntimeError, and a caught failure is
caught as eagerly (a failing check inside the program's own ``try``).

Legality conditions (each a function, returning the reason it fails):
``arguments_bind``, ``message_is_text``, ``message_holes_formattable``,
``message_calls_are_pure`` here; ``why_not_tensorizable``, ``exception_restorable``,
``raised_name_may_be_a_class``, ``message_restorable``, ``not_caught_in_function``,
``not_called_inside_a_handler_in_this_module`` and ``no_in_place_write_before_guard``
from Trap. While tracing,
``graphmend.runtime.checks.check_lowerable`` checks that the callee is the known
helper itself (identity and signature), that its checks are enabled and that
``error_type`` is an Exception class, then Trap's trace-time conditions.
"""

from __future__ import annotations

import ast
import copy

from graphmend.analysis.tensor_values import ITEM_METHODS, STATIC_METHODS, VALUE_METHODS
from graphmend.core.legality import failed
from graphmend.core.runtime_names import KNOWN_CHECK_NAMES
from graphmend.rewrite.findings import VALIDATION_GUARD
from graphmend.rewrite.templates import (
    RUNTIME_NAME,
    compiled_or_original,
    expression,
    place,
    statements,
)
from graphmend.rules.base import FunctionContext, first_failure, rewrite_statements
from graphmend.rules.conditions import why_not_tensorizable
from graphmend.rules.trap.guards import (
    MESSAGE_SAFE_METHODS,
    RULE,
    exception_restorable,
    first_call_with_effects,
    message_restorable,
    no_in_place_write_before_guard,
    not_called_inside_a_handler_in_this_module,
    not_caught_in_function,
    raised_name_may_be_a_class,
)

_PARAMETERS = ("cond", "msg", "error_type")
_KEPT_AS_A_CALL = "; kept as a call, made eagerly under torch.compile so that it raises its own error type"


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


def message_holes_formattable(context: FunctionContext, message: ast.expr, node) -> str | None:
    """A message with tensor values is rendered inside the graph when the check fails:
    it must be an f-string whose holes each format one value with a constant spec
    (no ``!r``/``!s``/``!a``: a tensor's text would then carry its autograd history)."""
    if not isinstance(message, ast.JoinedStr):
        return "the message depends on tensor values, and is not an f-string"
    for value in message.values:
        if not isinstance(value, ast.FormattedValue):
            continue
        if value.conversion != -1:
            return "a tensor value in the message is converted (`!r`, `!s` or `!a`)"
        spec = value.format_spec
        if spec is not None and not all(isinstance(part, ast.Constant) for part in spec.values):
            return "a format spec in the message is computed"
    return None


_PURE_TENSOR_METHODS = (VALUE_METHODS - ITEM_METHODS) | STATIC_METHODS


def message_calls_are_pure(context: FunctionContext, message: ast.expr) -> str | None:
    """The original evaluates the message on every call, as an argument: so does the
    lowered check, but its holes twice (to decide, then to render), so every call in
    it must be free of effects: builtins that only read, text methods, and tensor
    methods that read values or metadata."""
    return first_call_with_effects(
        context, message, MESSAGE_SAFE_METHODS | _PURE_TENSOR_METHODS,
        binds="the message binds or suspends", runs="which may have effects",
    )


def _message_pieces(message: ast.JoinedStr) -> tuple[ast.Tuple, ast.Tuple]:
    """(pieces, holes): ``("text", (value, "spec"), ...)`` and ``(value, ...)``."""
    pieces, holes = [], []
    for value in message.values:
        if isinstance(value, ast.FormattedValue):
            spec = "".join(part.value for part in value.format_spec.values) if value.format_spec else ""
            hole = copy.deepcopy(value.value)
            holes.append(hole)
            pieces.append(ast.Tuple(elts=[copy.deepcopy(hole), ast.Constant(spec)], ctx=ast.Load()))
        else:
            pieces.append(ast.Constant(value.value))
    return ast.Tuple(elts=pieces, ctx=ast.Load()), ast.Tuple(elts=holes, ctx=ast.Load())


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


def _kept_call(context: FunctionContext, statement: ast.Expr, call: ast.Call) -> list[ast.stmt]:
    """The check call as the helper makes it eagerly:

        if __graphmend__.is_compiling():
            (CALLEE, __graphmend__.checks.eager_call_of(CALLEE))[
                __graphmend__.checks.runs_eagerly(CALLEE, (_gm_cond_1 := COND))
            ](_gm_cond_1, ...)
        elif __graphmend__.checks.called_outside_torchdynamo(CALLEE):
            __graphmend__.checks.call_eagerly(CALLEE, ...)
        else:
            CALLEE(...)

    While tracing, a known helper's call of a tensor condition is made outside
    TorchDynamo, keeping its break, so that a failing check raises what it raises
    eagerly (the helper traced by TorchDynamo raises RuntimeError instead of its
    ``error_type``); a Python condition (a count whose ``.item()`` kept its break) is
    checked by the helper traced, as in the original, which breaks nowhere. So is a
    call in a frame TorchDynamo runs eagerly, which would compile the helper's own
    frame. Anywhere else (not compiled at all, another callee, ``fullgraph=True``)
    the original statement runs as written: the frames of its exceptions and the
    place a warning in the helper names (``stacklevel=2``) are the original's. The
    condition is evaluated once, first among the arguments, as in the call. One
    statement, with no jump between the condition and the call: where the helper
    traced breaks where TorchDynamo cannot resume, it compiles the frame up to the
    last point the stack was empty, which is then the statement's start, as in the
    original (a point after the condition made it a graph of its own, guarded on the
    sizes it read)."""
    eager_call = copy.deepcopy(call)
    eager_call.func = expression(f"{RUNTIME_NAME}.checks.call_eagerly")
    eager_call.args = [copy.deepcopy(call.func), *eager_call.args]
    made = [ast.Expr(value=eager_call)]
    place(made, statement)
    guard = compiled_or_original(made, [statement], f"{RULE}: original check call")
    guard.test = expression(
        f"{RUNTIME_NAME}.checks.called_outside_torchdynamo(CALLEE)", CALLEE=copy.deepcopy(call.func)
    )
    place(guard.test, statement)
    arguments = bound_arguments(call)
    if arguments is None:
        return [guard]
    temporary = f"_gm_cond_{context.module.fresh_suffix()}"
    traced_call = _with_condition(call, ast.Name(id=temporary, ctx=ast.Load()))
    traced_call.func = expression(
        f"(CALLEE, {RUNTIME_NAME}.checks.eager_call_of(CALLEE))"
        f"[{RUNTIME_NAME}.checks.runs_eagerly(CALLEE, ({temporary} := COND))]",
        CALLEE=copy.deepcopy(call.func), COND=copy.deepcopy(arguments["cond"]),
    )
    traced = [ast.Expr(value=traced_call)]
    place(traced, statement)
    kept = statements(f"if {RUNTIME_NAME}.is_compiling():\n    TRACED\nelse:\n    KEPT", TRACED=traced, KEPT=[guard])[0]
    place(kept.test, statement)
    kept.lineno, kept.col_offset = guard.lineno, guard.col_offset
    kept.end_lineno, kept.end_col_offset = guard.end_lineno, guard.end_col_offset
    return [kept]


def _with_condition(call: ast.Call, condition: ast.expr) -> ast.Call:
    """``call`` with its ``cond`` argument (bound as ``bound_arguments`` binds it) replaced."""
    replaced = copy.deepcopy(call)
    if replaced.args:
        replaced.args[0] = condition
    else:
        for keyword in replaced.keywords:
            if keyword.arg == "cond":
                keyword.value = condition
    return replaced


def _kept_as_a_call(context: FunctionContext, statement: ast.Expr, call: ast.Call) -> list[ast.stmt]:
    context.module.uses_runtime = True
    return _kept_call(context, statement, call)


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
                    f"validation check `{ast.unparse(call.func)}(...)`", RULE, failed("T109", arguments_bind(call)) + _KEPT_AS_A_CALL,
                )
                return _kept_as_a_call(context, statement, call)
            return None
        condition = arguments.get("cond")
        if condition is None or not context.data.is_data_dependent(condition, node):
            return None  # a Python condition: TorchDynamo checks it while tracing
        if context.depends_only_through_items(condition, node):
            return None  # a Python value from ``.item()``: the break is at that call
        lifted = context.lifted_items_read(condition, node)
        follows = (
            f"the `.item()` at line {', '.join(map(str, lifted))} is kept in the graph" if lifted else None
        )
        # Without an error_type the helper's default is a builtin: stand it in for the
        # source checks, which look only at its shape.
        error_type = arguments.get("error_type", ast.Name(id="ValueError", ctx=ast.Load()))
        guard = _as_guard(call, arguments, error_type)
        raise_statement = guard.body[0]
        message = arguments["msg"]
        rendered = context.data.is_data_dependent(message, node)
        reason = first_failure(
            lambda: failed("T110", message_is_text(message)),
            lambda: failed("T101", why_not_tensorizable(context, condition, node)),
            lambda: failed("T102", exception_restorable(context, raise_statement)),
            lambda: failed("T103", raised_name_may_be_a_class(context, raise_statement)),
            lambda: (
                failed("T111", message_holes_formattable(context, message, node)) if rendered
                else failed("T104", message_restorable(context, raise_statement, node))
            ),
            lambda: failed("T112", message_calls_are_pure(context, message)),
            lambda: failed("T106", not_caught_in_function(context, statement)),
            lambda: failed("T107", not_called_inside_a_handler_in_this_module(context)),
            lambda: failed("T108", no_in_place_write_before_guard(context, statement)),
        )
        if reason is not None:
            reason += _KEPT_AS_A_CALL
        finding = context.module.report(
            context.facts, statement, VALIDATION_GUARD,
            f"validation check `{ast.unparse(call.func)}({ast.unparse(condition)}, ...)`", RULE, reason, follows,
        )
        if not finding.fixed:
            return _kept_as_a_call(context, statement, call)
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
        if rendered:
            pieces, holes = _message_pieces(message)
            assertion = statements(
                f"{RUNTIME_NAME}.checks.assert_check({RUNTIME_NAME}.checks.check_holds(COND), "
                f"{RUNTIME_NAME}.checks.check_site(CALLEE, ERROR, LINE, FUNCTION), LINE, FUNCTION, PIECES)",
                COND=copy.deepcopy(condition),
                PIECES=pieces,
                **site,
            )
        else:
            holes = ast.Tuple(elts=[], ctx=ast.Load())
            assertion = statements(
                f"{RUNTIME_NAME}.assert_guard({RUNTIME_NAME}.checks.check_holds(COND), "
                f"{RUNTIME_NAME}.traps.site_message("
                f"{RUNTIME_NAME}.checks.check_site(CALLEE, ERROR, LINE, FUNCTION), LINE, FUNCTION, MESSAGE))",
                COND=copy.deepcopy(condition),
                MESSAGE=copy.deepcopy(message),
                **site,
            )
        place(assertion, statement)
        for lowered in assertion:
            lowered._graphmend_trap = True
        lowerable = expression(
            f"{RUNTIME_NAME}.checks.check_lowerable(CALLEE, ERROR, LINE, FUNCTION, HOLES)" if holes.elts
            else f"{RUNTIME_NAME}.checks.check_lowerable(CALLEE, ERROR, LINE, FUNCTION)",
            HOLES=holes, **site,
        )
        wrapped = compiled_or_original(assertion, [statement], f"{RULE}: original check call", also=lowerable)
        wrapped.orelse = _kept_call(context, statement, call)
        wrapped._graphmend_trap = True
        return [wrapped]

    rewrite_statements(context.facts.function, rewrite)
