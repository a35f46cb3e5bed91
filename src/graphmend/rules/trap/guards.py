"""[Trap] data-dependent validation guards become graph-native assertions.

    if not torch.equal(mask, expected):
        raise ValueError("unsupported attention mask")
becomes
    if __graphmend__.is_compiling() and __graphmend__.traps.trap_lowerable(ValueError, 12, 'f'):
        __graphmend__.assert_guard(
            __graphmend__.guard_holds(__graphmend__.equal_as_tensor(mask, expected), True),
            __graphmend__.traps.site_message(
                __graphmend__.traps.trap_site(ValueError, 12, 'f'), 12, 'f',
                "unsupported attention mask"))
    else:
        <the original if>

``torch.equal`` keeps its meaning: shapes are compared statically first (so
broadcasting cannot call a [4] and a [1, 4] tensor equal), values after dtype
promotion. A failed guard raises the original class with the original message
inside the graph (the ordered operator ``graphmend::fail_unless``), from a frame
showing the user's file, line and function, so it leaves the compiled frame as
itself and any eager caller's handler sees it. ``assert C, msg`` is lowered the same
way, under ``__debug__``.

Legality conditions (each a function below, returning the reason it fails):
``guard_body_only_raises``, ``why_not_tensorizable`` (rules/conditions.py),
``exception_restorable``, ``raised_name_may_be_a_class``, ``message_restorable``,
``message_free_of_effects``, ``not_caught_in_function``,
``not_called_inside_a_handler_in_this_module``, ``no_in_place_write_before_guard``.
What the source cannot show (the callers, what the traced region wrote before the
guard, what the raised name holds) is checked while tracing by
``graphmend.runtime.traps.trap_lowerable``; a guard it refuses keeps the original
``if``. It also keeps the original ``if`` where TorchDynamo would have run the original
frame eagerly (a break in a loop), and when an op after the guard fails while
TorchDynamo traces the frame (the trace is restarted).
"""

from __future__ import annotations

import ast
import builtins
import copy

from graphmend.core.legality import failed
from graphmend.rewrite.findings import VALIDATION_GUARD
from graphmend.rewrite.templates import (
    RUNTIME_NAME,
    compiled_or_original,
    expression,
    place,
    statements,
)
from graphmend.rules.base import (
    FunctionContext,
    enclosing_statements,
    first_failure,
    rewrite_statements,
)
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


def not_called_inside_a_handler_in_this_module(context: FunctionContext) -> str | None:
    """The graph of a lowered guard is cached without a guard on its callers: once
    compiled where nothing catches (straight from the compiled call), TorchDynamo
    reuses it when the function is later entered from a caller running eagerly inside
    a `try`, which would then see the assertion's RuntimeError instead of the original
    exception. So a function this module calls inside a `try` (or a `with` whose
    context manager is not torch's) keeps its guard. Callers in other modules are
    checked only while tracing (``traps.no_handler_in_eager_callers``)."""
    name = context.facts.function.name
    callers = _called_inside_a_handler(context.module)
    if name in callers:
        return f"`{callers[name]}` calls `{name}` inside a `try` or `with` block, maybe eagerly"
    return None


def _called_inside_a_handler(module) -> dict[str, str]:
    """Names called (``f(...)``, ``obj.f(...)``) inside a ``try`` body or a ``with`` body
    that may suppress, each with the function that calls it so (or ``<module>``)."""
    if "trap: called inside a handler" in module.memo:
        return module.memo["trap: called inside a handler"]
    found: dict[str, str] = {}

    def visit(node: ast.AST, function: str, inside: bool) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            function, inside = getattr(node, "name", "<lambda>"), False
        if isinstance(node, ast.Call) and inside:
            callee = node.func
            name = callee.id if isinstance(callee, ast.Name) else getattr(callee, "attr", None)
            if name is not None:
                found.setdefault(name, function)
        protected: list[ast.AST] = []
        if isinstance(node, ast.Try) or type(node).__name__ == "TryStar":
            protected = list(node.body)
        elif isinstance(node, (ast.With, ast.AsyncWith)) and not _only_torch_context_managers(module, node):
            protected = list(node.body)
        for child in ast.iter_child_nodes(node):
            visit(child, function, inside or any(child is statement for statement in protected))

    visit(module.tree, "<module>", False)
    module.memo["trap: called inside a handler"] = found
    return found


def _only_torch_context_managers(module, statement: ast.With | ast.AsyncWith) -> bool:
    """torch's context managers (``no_grad``, ``autocast``, ...) never suppress."""
    for item in statement.items:
        manager = item.context_expr.func if isinstance(item.context_expr, ast.Call) else item.context_expr
        qualified = module.bindings.qualified_name(manager)
        if qualified is None or not qualified.startswith("torch."):
            return False
    return True


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


def raised_name_may_be_a_class(context: FunctionContext, raise_statement: ast.Raise) -> str | None:
    """`raise ERROR` with a module-level instance re-raises that very object, and
    `raise make_error(msg)` raises what a function returns: the boundary can only
    rebuild an exception from its class (checked again while tracing)."""
    exception = raise_statement.exc
    name = exception.func if isinstance(exception, ast.Call) else exception
    if not isinstance(name, ast.Name):
        return None
    module = context.facts.module
    if name.id in module.module_values:
        value = module.module_values[name.id]
        if not isinstance(value, (ast.Name, ast.Attribute)):
            return f"`{name.id}` is bound to a value, not provably an exception class"
    for statement in ast.walk(module.tree):
        if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) and (
            getattr(statement, "name", None) == name.id
        ):
            return f"`{name.id}` is a function: the raised object is whatever it returns"
    if module.is_unbound_builtin(name.id):
        builtin = getattr(builtins, name.id)
        if not (isinstance(builtin, type) and issubclass(builtin, BaseException)):
            return f"`{name.id}` is not an exception class"
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


# Calls a message may make: they cannot print, write or draw random numbers, and the
# message is built while tracing, so their cost is paid once per compilation.
MESSAGE_SAFE_FUNCTIONS = frozenset(
    {"len", "str", "repr", "tuple", "list", "int", "float", "bool", "type", "min", "max", "round",
     "abs", "sorted", "isinstance"}
)
MESSAGE_SAFE_METHODS = frozenset(
    {"format", "size", "dim", "numel", "join", "lower", "upper", "strip"}
)


def message_free_of_effects(context: FunctionContext, raise_statement: ast.Raise) -> str | None:
    """The lowered guard builds its message whether or not the guard fails (the original
    only when it does): a call in it with effects would run on every call, and an
    expensive one would be paid always. Only names, attributes, constants, formatting
    and a few builtins and metadata methods may appear."""
    exception = raise_statement.exc
    if not isinstance(exception, ast.Call) or not exception.args:
        return None
    return first_call_with_effects(
        context, exception.args[0], MESSAGE_SAFE_METHODS,
        binds="the message binds or suspends, and would be evaluated even when the guard holds",
        runs="which would run even when the guard holds",
    )


def first_call_with_effects(context: FunctionContext, message: ast.expr, safe_methods, binds: str, runs: str):
    """Why a call in ``message`` may have effects (``binds`` for a binding or suspending
    expression, a call outside the readers' builtins and ``safe_methods`` ``runs``), or None."""
    for node in ast.walk(message):
        if isinstance(node, (ast.NamedExpr, ast.Await, ast.Yield, ast.YieldFrom, ast.Lambda)):
            return binds
        if not isinstance(node, ast.Call):
            continue
        function = node.func
        if isinstance(function, ast.Name) and function.id in MESSAGE_SAFE_FUNCTIONS:
            module = context.facts.module
            if context.facts.is_local(function.id) or not module.is_unbound_builtin(function.id):
                return f"the message calls `{function.id}`, which is not the builtin here"
            continue
        if isinstance(function, ast.Attribute) and function.attr in safe_methods:
            continue
        return f"the message calls `{ast.unparse(function)}`, {runs}"
    return None


def no_in_place_write_before_guard(context: FunctionContext, statement: ast.stmt) -> str | None:
    """Under a functionalizing backend (aot_eager, inductor) a write into an input is
    applied after the graph runs: a failed assertion loses a write the original made
    before raising. Writes through a parameter or a global/outer name before the guard
    (or anywhere in a loop around it) decline here; writes the source cannot attribute
    (aliases, callers) are checked while tracing."""
    function = context.facts.function
    parameters = {a.arg for a in ast.walk(function.args) if isinstance(a, ast.arg)}
    loops = [
        outer
        for outer in enclosing_statements(function, statement)
        if isinstance(outer, (ast.For, ast.AsyncFor, ast.While))
    ]

    def precedes(node: ast.AST) -> bool:
        if node.lineno < statement.lineno:
            return True
        return any(statement_in([loop], node) for loop in loops)

    def shared(target: ast.expr) -> str | None:
        root = target
        while isinstance(root, (ast.Attribute, ast.Subscript, ast.Call)):
            root = root.func if isinstance(root, ast.Call) else root.value
        if not isinstance(root, ast.Name):
            return ast.unparse(target)
        if root.id in parameters or not context.facts.is_local(root.id):
            return root.id
        return None

    for node in ast.walk(function):
        if not hasattr(node, "lineno") or not precedes(node) or statement_in([statement], node):
            continue
        written = None
        if isinstance(node, ast.Call):
            function_node = node.func
            if (
                isinstance(function_node, ast.Attribute)
                and function_node.attr.endswith("_")
                and not function_node.attr.endswith("__")
            ):
                written = shared(function_node.value)
            for keyword in node.keywords:
                if keyword.arg == "out":
                    written = written or shared(keyword.value)
                if (
                    keyword.arg == "inplace"
                    and not (
                        isinstance(keyword.value, ast.Constant) and keyword.value.value is False
                    )
                    and node.args
                ):
                    written = written or shared(node.args[0])
        elif isinstance(node, ast.AugAssign):
            written = shared(node.target)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if isinstance(target, (ast.Subscript, ast.Attribute)):
                    written = written or shared(target)
        if written:
            return f"`{written}` may be written in place before the guard"
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
        if context.depends_only_through_items(guard.test, node):
            return None  # a Python value from ``.item()``: the break is at that call
        if guard_body_only_raises(guard) is not None:
            return None  # not a validation guard: [Where] considers it
        raise_statement = guard.body[0]
        static_prefix, dynamic = split_static_prefix(context, guard.test, node)
        reason = first_failure(
            lambda: failed("T101", why_not_tensorizable(context, dynamic, node)),
            lambda: failed("T102", exception_restorable(context, raise_statement)),
            lambda: failed("T103", raised_name_may_be_a_class(context, raise_statement)),
            lambda: failed("T104", message_restorable(context, raise_statement, node)),
            lambda: failed("T105", message_free_of_effects(context, raise_statement)),
            lambda: failed("T106", not_caught_in_function(context, statement)),
            lambda: failed("T107", not_called_inside_a_handler_in_this_module(context)),
            lambda: failed("T108", no_in_place_write_before_guard(context, statement)),
        )
        shown = f"assert {ast.unparse(statement.test)}" if isinstance(statement, ast.Assert) else (
            f"if {ast.unparse(statement.test)}: raise"
        )
        finding = context.module.report(
            context.facts, statement, VALIDATION_GUARD, f"validation guard `{shown}`", RULE, reason
        )
        if not finding.fixed:
            return None
        context.module.uses_runtime = True
        exception = raise_statement.exc
        message = exception.args[0] if isinstance(exception, ast.Call) and exception.args else None
        raised = exception.func if isinstance(exception, ast.Call) else exception
        exception_class = copy.deepcopy(raised)
        for name in ast.walk(exception_class):
            if hasattr(name, "ctx"):
                name.ctx = ast.Load()
        site = dict(
            EXCEPTION=exception_class,
            LINE=ast.Constant(raise_statement.lineno),
            FUNCTION=ast.Constant(context.facts.function.name),
        )
        # The guard raises when the condition is truthy; the assertion must hold otherwise.
        assertion = statements(
            f"{RUNTIME_NAME}.assert_guard(HOLDS, {RUNTIME_NAME}.traps.site_message("
            f"{RUNTIME_NAME}.traps.trap_site(EXCEPTION, LINE, FUNCTION),"
            " LINE, FUNCTION, MESSAGE))",
            HOLDS=holds_expression(context, dynamic, False),
            MESSAGE=message if message is not None else ast.Constant(None),
            **site,
        )
        if static_prefix:
            assertion = statements("if PREFIX:\n    BODY", PREFIX=conjunction(static_prefix), BODY=assertion)
        if isinstance(statement, ast.Assert):
            assertion = statements("if __debug__:\n    BODY", BODY=assertion)
        place(assertion, statement)
        for lowered in assertion:
            lowered._graphmend_trap = True
        compiled = assertion + copy.deepcopy(guard.orelse)
        # Decided while tracing: the callers, what ran before, what the name holds.
        lowerable = expression(
            f"{RUNTIME_NAME}.traps.trap_lowerable(EXCEPTION, LINE, FUNCTION)", **site
        )
        wrapped = compiled_or_original(
            compiled, [statement], f"{RULE}: original guard", also=lowerable
        )
        wrapped._graphmend_trap = True
        return [wrapped]

    rewrite_statements(context.facts.function, rewrite)
