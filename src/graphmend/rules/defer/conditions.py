"""Defer's static legality conditions (ids ``D101``-``D109`` in ``core/legality.py``).

Each returns None when it holds or the reason it fails; ``outputs.py`` calls them on
every output call it finds and marks each reason with its id. What only tracing can
decide is in ``graphmend.runtime.output_decisions`` and
``graphmend.runtime.output_call_arguments``.
"""

from __future__ import annotations

import ast

from graphmend.analysis.reaching import ASSIGNED
from graphmend.analysis.tensor_values import STATIC_ATTRIBUTES, STATIC_METHODS
from graphmend.rules.base import FunctionContext, enclosing_statements

LOG_KEYWORDS_THAT_NEED_THE_CALLER = frozenset({"exc_info", "stack_info", "stacklevel"})
OUTPUT_REDIRECTING_CONTEXTS = "a `with` block may redirect or capture the output"


def callee_is_real(context: FunctionContext, call: ast.Call, kind: str) -> str | None:
    facts = context.facts
    callee = call.func
    if kind == "print":
        if facts.is_local(callee.id):
            return "`print` is bound locally in this function"
        if not context.module.bindings.is_unbound_builtin("print"):
            return "`print` is rebound in this module"
        return None
    if kind == "warn":
        return None  # qualified_name_of already proved the binding
    receiver = callee.value.id
    if facts.is_local(receiver):
        return f"`{receiver}` is a local name, not provably a logging.Logger"
    if receiver not in context.module.bindings.loggers:
        return f"`{receiver}` is not provably a logging.Logger (bound once by getLogger/get_logger)"
    return None


def keywords_supported(call: ast.Call, kind: str) -> str | None:
    names = {keyword.arg for keyword in call.keywords}
    if kind == "log":
        if isinstance(call.func, ast.Attribute) and call.func.attr == "exception":
            return "`exception()` logs the active exception, which is gone after the graph"
        needs_caller = names & LOG_KEYWORDS_THAT_NEED_THE_CALLER
        if needs_caller:
            return f"`{sorted(needs_caller)[0]}=` depends on the call stack at the call"
        if None in names:
            return "`**kwargs` may carry `stacklevel=` or `exc_info=`"
    if kind == "warn":
        for keyword in call.keywords:
            if keyword.arg is None:
                return "`**kwargs` may carry `stacklevel=`"
            if keyword.arg == "stacklevel" and not (
                isinstance(keyword.value, ast.Constant) and keyword.value.value == 1
            ):
                return "`stacklevel=` names a caller's location, unknown here"
            if keyword.arg == "skip_file_prefixes":
                return "`skip_file_prefixes=` depends on the call stack"
        if len(call.args) > 2:
            return "`stacklevel` passed positionally names a caller's location"
    return None


def not_deprecated_logger_warn(call: ast.Call, kind: str) -> str | None:
    """``Logger.warn`` also issues a DeprecationWarning attributed to the caller's line,
    which a rebuilt record would not."""
    if kind == "log" and isinstance(call.func, ast.Attribute) and call.func.attr == "warn":
        return "`Logger.warn` also issues a DeprecationWarning from the caller's line"
    return None


def callee_on_one_line(call: ast.Call, kind: str) -> str | None:
    """A log record's or warning's line is the line the running call reports, which
    is not the statement's first line when the callee's attribute chain spans lines."""
    if kind == "print":
        return None
    if call.func.lineno != call.func.end_lineno:
        return (
            f"`{ast.unparse(call.func)}` spans lines {call.func.lineno}-{call.func.end_lineno}; "
            "the line the record or warning would name is not known here"
        )
    return None


def warning_not_caught_here(context: FunctionContext, statement: ast.stmt, kind: str) -> str | None:
    """A warning turned into an exception inside the graph leaves the whole compiled
    region: a ``try`` around it in this function would no longer catch it. (The runtime
    performs eagerly a warning that the filters turn into an error when traced.)"""
    if kind != "warn":
        return None
    for outer in enclosing_statements(context.facts.function, statement):
        if isinstance(outer, (ast.Try, ast.TryStar)) and any(
            statement is inner or statement in ast.walk(inner) for inner in outer.body
        ):
            return "inside a `try`: a warnings filter set to `error` would raise past its handlers"
    return None


def not_inside_with(context: FunctionContext, statement: ast.stmt) -> str | None:
    for outer in enclosing_statements(context.facts.function, statement):
        if isinstance(outer, (ast.With, ast.AsyncWith)):
            return OUTPUT_REDIRECTING_CONTEXTS
    return None


def _reads_config(expression: ast.expr) -> bool:
    """``self.config.x`` / ``config.x``: model configurations hold plain Python values
    (a documented assumption, as transformers' ``PretrainedConfig`` does)."""
    while isinstance(expression, ast.Attribute):
        if expression.attr == "config":
            return True
        expression = expression.value
    return isinstance(expression, ast.Name) and expression.id == "config"


# Attributes that name things: ``self.__class__.__name__`` is a string, never tensor data.
_NAME_ATTRIBUTES = frozenset({"__name__", "__qualname__", "__module__", "__class__"})


def _is_static_value(context: FunctionContext, expression: ast.expr, node, seen=frozenset()) -> bool:
    """Not a tensor: constants, shapes, dtypes, sizes, lengths, ``range`` indices,
    configuration values, and arithmetic of them."""
    if isinstance(expression, ast.Constant):
        return True
    if isinstance(expression, ast.Attribute):
        return (
            expression.attr in STATIC_ATTRIBUTES
            or expression.attr in _NAME_ATTRIBUTES
            or _reads_config(expression.value)
        )
    if isinstance(expression, ast.UnaryOp):  # ``shape[-1]``
        return _is_static_value(context, expression.operand, node, seen)
    if isinstance(expression, ast.IfExp):
        return _is_static_value(context, expression.body, node, seen) and _is_static_value(
            context, expression.orelse, node, seen
        )
    if isinstance(expression, ast.Subscript):
        return _is_static_value(context, expression.value, node, seen) and _is_static_value(
            context, expression.slice, node, seen
        )
    if isinstance(expression, (ast.Tuple, ast.List)):
        return all(_is_static_value(context, e, node, seen) for e in expression.elts)
    if isinstance(expression, ast.BinOp):
        return _is_static_value(context, expression.left, node, seen) and _is_static_value(
            context, expression.right, node, seen
        )
    if isinstance(expression, ast.Call):
        callee = expression.func
        if isinstance(callee, ast.Attribute) and callee.attr in STATIC_METHODS:
            return True
        if (
            isinstance(callee, ast.Attribute)
            and callee.attr == "join"
            and isinstance(callee.value, ast.Constant)
            and isinstance(callee.value.value, str)
        ):
            return True  # ``"/".join(parts)`` is a string (a tensor part raises eagerly too)
        qualified = context.facts.qualified_name_of(callee)
        if qualified in ("builtins.len", "builtins.range", "builtins.type", "builtins.id"):
            return True
        if qualified in (
            "builtins.tuple", "builtins.str", "builtins.int", "builtins.max", "builtins.min"
        ) and expression.args:
            return all(_is_static_value(context, a, node, seen) for a in expression.args)
        return False
    if isinstance(expression, ast.Name) and node is not None:
        definitions = context.facts.reaching.reaching(node, expression.id)
        if not definitions or any(d.kind != ASSIGNED or d.value is None for d in definitions):
            return False
        return all(
            d in seen or _is_static_value(context, d.value, d.node, seen | {d}) for d in definitions
        )
    return False


def _formatted_values(call: ast.Call):
    """Each value an argument formats or converts at the call, with the form that does:
    an f-string's ``{value}``, the right side of ``"..." % value``, the arguments of
    ``"...".format(...)``, as ``(form, value, part)``; and every other call as
    ``("call", None, call)``, for the caller to tell ``str``/``repr``/``format``/``int``/
    ``float`` and ``.item()`` apart."""
    for argument in list(call.args) + [k.value for k in call.keywords]:
        for part in ast.walk(argument):
            if isinstance(part, ast.FormattedValue):
                yield "fstring", part.value, part
            elif (
                isinstance(part, ast.BinOp)
                and isinstance(part.op, ast.Mod)
                and isinstance(part.left, (ast.Constant, ast.JoinedStr))
            ):
                yield "percent", part.right, part
            elif isinstance(part, ast.Call) and isinstance(part.func, ast.Attribute) and part.func.attr == "format":
                for value in part.args + [k.value for k in part.keywords]:
                    yield "format", value, part
            elif isinstance(part, ast.Call):
                yield "call", None, part


_CONVERSIONS = ("builtins.str", "builtins.repr", "builtins.format", "builtins.float", "builtins.int")


def _may_hold_tensor_data(context: FunctionContext, value: ast.expr, node) -> bool:
    """The analysis finds a value operation (``.sum()``, ``torch.equal``) or an
    ``.item()`` in what ``value`` is computed from: a tensor, or a number read from one."""
    return not _is_static_value(context, value, node) and (
        context.data.is_data_dependent(value, node) or context.data.first_item_call(value) is not None
    )


def arguments_do_not_format_tensor_values(context: FunctionContext, call: ast.Call, node) -> str | None:
    """A value computed from tensor data, formatted or converted at the call, is a
    tensor (an f-string of it is a format TorchDynamo applies when the graph ends) or
    a number an ``.item()`` read, which broke the graph there: declined here. Any other
    value the analysis cannot type (a parameter, a number derived from one, an
    attribute) is left to the check while tracing (``message_formatted_at_the_call``,
    ``values_formatted_while_tracing``): the formatting runs in the trace before the
    call, in the original as in the rewritten code, so a plain Python value there is
    text made at the call. An ``.item()`` read the runtime makes when the graph runs
    (``item_reads``) is not formatting at the call."""
    deferred = {id(read) for read, _ in item_reads(call)}
    for form, value, part in _formatted_values(call):
        if form == "call":
            if id(part) in deferred:
                continue
            if context.data.first_item_call(part) is not None:
                return "an argument calls `.item()`, which syncs and breaks the graph at the call"
            if context.facts.qualified_name_of(part.func) in _CONVERSIONS and any(
                _may_hold_tensor_data(context, a, node) for a in part.args
            ):
                return f"an argument converts a value computed from tensor data with `{ast.unparse(part.func)}`"
            continue
        if id(value) in deferred or not _may_hold_tensor_data(context, value, node):
            continue
        if form == "fstring":
            return f"an argument formats `{ast.unparse(value)}`, computed from tensor data, at the call"
        if form == "percent":
            return "an argument %-formats a value computed from tensor data at the call"
        return "an argument `.format()`s a value computed from tensor data at the call"
    return None


def values_formatted_while_tracing(context: FunctionContext, call: ast.Call, node) -> list[str]:
    """The values the call formats or converts at the call that the analysis cannot
    show are not tensors (as source text, once each, in order): whether each is text
    made at the call is decided while tracing (``message_formatted_at_the_call``), so
    ``check`` says the fix holds if they are not tensors then."""
    deferred = {id(read) for read, _ in item_reads(call)}
    values: list[str] = []
    for form, value, part in _formatted_values(call):
        if form == "call":
            if context.facts.qualified_name_of(part.func) not in _CONVERSIONS:
                continue
            candidates = part.args
        else:
            candidates = [value]
        for candidate in candidates:
            if id(candidate) in deferred or _is_static_value(context, candidate, node):
                continue
            if isinstance(candidate, (ast.Tuple, ast.List)):
                texts = [ast.unparse(e) for e in candidate.elts if not _is_static_value(context, e, node)]
            else:
                texts = [ast.unparse(candidate)]
            values += [text for text in texts if text not in values]
    return values


def _is_item_read(expression: ast.expr) -> bool:
    """``name.item()``."""
    return (
        isinstance(expression, ast.Call)
        and isinstance(expression.func, ast.Attribute)
        and expression.func.attr == "item"
        and isinstance(expression.func.value, ast.Name)
        and not expression.args
        and not expression.keywords
    )


def item_reads(call: ast.Call) -> list[tuple[ast.Call, ast.FormattedValue | None]]:
    """The ``name.item()`` reads the runtime makes when the graph runs, in place of the
    call: an argument that is one, or one an f-string argument formats directly (with
    that ``FormattedValue``). A logged loss (``print(f"loss {loss.item():.4f}")``,
    ``logger.info("loss %.4f", loss.item())``) then prints from inside the graph the
    number the call printed, where ``.item()`` at the call broke the graph."""
    reads = []
    for argument in call.args:
        if _is_item_read(argument):
            reads.append((argument, None))
        elif isinstance(argument, ast.JoinedStr):
            reads += [
                (part.value, part) for part in argument.values
                if isinstance(part, ast.FormattedValue) and _is_item_read(part.value)
            ]
    return reads


def _made_of_names(expression: ast.expr) -> bool:
    """Names, constants, ``name.item()`` and f-strings of them with constant specs:
    evaluated again, the same values, and nothing runs that could change anything."""
    if isinstance(expression, (ast.Constant, ast.Name)) or _is_item_read(expression):
        return True
    if isinstance(expression, ast.JoinedStr):
        for part in expression.values:
            if isinstance(part, ast.Constant):
                continue
            if not (isinstance(part, ast.FormattedValue) and _made_of_names(part.value)):
                return False
            spec = part.format_spec
            if spec is not None and not all(isinstance(piece, ast.Constant) for piece in spec.values):
                return False
        return True
    return False


def item_reads_made_again_unchanged(context: FunctionContext, call: ast.Call, kind: str) -> str | None:
    """Where the runtime hands a call with ``.item()`` reads back (the tensor is not one
    plain element, the format does not apply), the rewritten code makes the original
    call again, so that ``.item()`` breaks the graph and fails as the original did: its
    arguments must then read what they read the first time, which names, constants and
    f-strings of them do. A warning's filters match its message text, which such a
    call only has when the graph runs."""
    if not item_reads(call):
        return None
    if context.module.output_calls_in_place:
        return "an argument calls `.item()`, which the form `graphmend fix` writes cannot defer"
    if kind == "warn":
        return "a warning's message formats `.item()`, which its filters would match only when the graph runs"
    arguments = list(call.args) + [k.value for k in call.keywords]
    if any(isinstance(argument, ast.Starred) for argument in call.args) or not all(map(_made_of_names, arguments)):
        return "a call that reads `.item()` has an argument other than names, constants and f-strings of them"
    return None


def _first_reachable_statement(context: FunctionContext, statement: ast.stmt, matches) -> ast.AST | None:
    """The first statement after ``statement`` on some path of the CFG that ``matches``."""
    node = context.facts.node_for(statement)
    if node is None:
        return None
    seen, frontier = set(), list(node.successors)
    while frontier:
        current = frontier.pop()
        if current in seen:
            continue
        seen.add(current)
        if current.statement is not None and matches(current.statement):
            return current.statement
        frontier.extend(current.successors)
    return None


def no_trap_after(context: FunctionContext, statement: ast.stmt) -> str | None:
    """The effect operator runs before a failing lowered guard that follows it under
    the eager and aot_eager backends; inductor may schedule the guard first, which
    would drop this output, so this stays declined."""
    trap = _first_reachable_statement(
        context, statement, lambda reached: getattr(reached, "_graphmend_trap", False)
    )
    if trap is None:
        return None
    return (
        f"a lowered validation guard follows at line {trap.lineno}; "
        "its failure inside the graph could drop this output"
    )
