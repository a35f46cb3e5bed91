"""[Defer] print / logging / warnings calls: performed inside the graph, at the call.

    print(a, b, sep=s)
becomes
    if not __graphmend__.is_compiling():
        print(a, b, sep=s)
    else:
        _gm_eager_1 = __graphmend__.print_in_graph((a, b), {"sep": s})
        if _gm_eager_1:
            print(*_gm_eager_1[0], **_gm_eager_1[1])

While tracing, ``print_in_graph`` puts an ordered effect operator into the graph where
the call was; it prints when the graph runs, with tensors as they are at that point
(``graphmend.runtime.deferred``). What the runtime cannot show exactly there (a
tensor with autograd history, a mutable object, a user handler or Logger subclass,
a warning a filter turns into an exception, a call its own arguments make fail such
as ``print(end=5)`` or a message they do not format: ``output_call_arguments.py``)
it hands back, and the original callee
is called with the same argument values in this frame, with the original call's
graph break. The eager path is the original call. The compiled form comes last, so
that a call handed back falls through to the next statement with no jump between
(TorchDynamo takes every local read after a jump as live at the break).

Legality conditions: ``callee_is_real`` (the builtin ``print``, a logger bound once
by ``getLogger``/``get_logger``, ``warnings.warn``; never shadowed or rebound),
``keywords_supported`` (nothing that depends on the call stack: ``stacklevel``,
``exc_info``, ``stack_info``), ``not_deprecated_logger_warn`` (``Logger.warn`` also
warns from the caller's line), ``callee_on_one_line`` (a record's or warning's line
is where the call's attribute ends), ``not_inside_with`` (a context manager may
redirect or capture output), ``warning_not_caught_here`` (a warning an ``error``
filter raises inside a graph would escape this function's ``try``),
``arguments_do_not_format_tensor_values`` (formatting at the call would read a tensor
later, or break there) and ``no_trap_after`` (whether inductor keeps a failing lowered
guard after the output is not established).

An f-string may format a value the analysis cannot type (a parameter, a number derived
from one): it is accepted here unless the value depends on tensor data, and decided
while tracing (``message_formatted_at_the_call``, ``runtime/deferred.py``). TorchDynamo
formats a Python value at the call, into a constant it guards on, but holds an f-string
that formats a tensor as a format applied when the graph ends; that call is handed back
and keeps its break, as the original had it.
"""

from __future__ import annotations

import ast
import copy

from graphmend.analysis.reaching import ASSIGNED
from graphmend.analysis.tensor_values import STATIC_ATTRIBUTES, STATIC_METHODS
from graphmend.core.legality import failed
from graphmend.core.runtime_names import LOGGER_METHOD_LEVELS
from graphmend.rewrite.edits import CalleeEdit
from graphmend.rewrite.findings import LOGGER_CALL
from graphmend.rewrite.templates import (
    ORIGINAL_MARK,
    RUNTIME_NAME,
    compiled_or_original,
    place,
    statements,
)
from graphmend.rules.base import (
    FunctionContext,
    enclosing_statements,
    first_failure,
    rewrite_statements,
)

RULE = "Defer"
STANDARD_LOG_LEVELS = LOGGER_METHOD_LEVELS
# transformers adds these to logging.Logger; replaying the method keeps its
# once-only cache and the caller location the original record had.
ONCE_METHODS = frozenset({"warning_once", "info_once"})
LOG_KEYWORDS_THAT_NEED_THE_CALLER = frozenset({"exc_info", "stack_info", "stacklevel"})
OUTPUT_REDIRECTING_CONTEXTS = "a `with` block may redirect or capture the output"


def classify_effect_call(context: FunctionContext, call: ast.Call) -> tuple[str, str] | None:
    """("print"|"log"|"warn", detail) when ``call`` looks like an output call."""
    facts = context.facts
    callee = call.func
    if isinstance(callee, ast.Name) and callee.id == "print":
        return "print", "print"
    qualified = facts.qualified_name_of(callee)
    if qualified == "warnings.warn":
        return "warn", "warnings.warn"
    if isinstance(callee, ast.Attribute) and isinstance(callee.value, ast.Name):
        method = callee.attr
        if method in STANDARD_LOG_LEVELS or method in ONCE_METHODS or method in (
            "log", "exception"
        ):
            return "log", f"{callee.value.id}.{method}"
    return None


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
    """Not a tensor: constants, shapes, dtypes, sizes, lengths, ``range`` indices, and
    configuration values."""
    if isinstance(expression, ast.Constant):
        return True
    if isinstance(expression, ast.Attribute):
        return (
            expression.attr in STATIC_ATTRIBUTES
            or expression.attr in _NAME_ATTRIBUTES
            or _reads_config(expression.value)
        )
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


def arguments_do_not_format_tensor_values(context: FunctionContext, call: ast.Call, node) -> str | None:
    """Formatting runs at the call; a tensor formatted there is read when the effect is
    replayed (after later in-place updates), or breaks the graph at the call. An
    f-string's value that is not a tensor value by analysis is left to the check while
    tracing (``message_formatted_at_the_call``): a plain Python value there is text.
    An ``.item()`` read the runtime makes when the graph runs (``item_reads``) is not
    formatting at the call."""
    deferred = {id(read) for read, _ in item_reads(call)}
    for argument in list(call.args) + [k.value for k in call.keywords]:
        for part in ast.walk(argument):
            if id(part) in deferred or (isinstance(part, ast.FormattedValue) and id(part.value) in deferred):
                continue
            if isinstance(part, ast.FormattedValue) and not _is_static_value(context, part.value, node) and (
                context.data.is_data_dependent(part.value, node) or context.data.first_item_call(part.value)
            ):
                return f"an argument formats `{ast.unparse(part.value)}`, which may be a tensor, at the call"
            if (
                isinstance(part, ast.BinOp)
                and isinstance(part.op, ast.Mod)
                and isinstance(part.left, (ast.Constant, ast.JoinedStr))
                and not _is_static_value(context, part.right, node)
            ):
                return "an argument %-formats a value that may be a tensor at the call"
            if (
                isinstance(part, ast.Call)
                and isinstance(part.func, ast.Attribute)
                and part.func.attr == "format"
                and not all(_is_static_value(context, a, node) for a in part.args + [k.value for k in part.keywords])
            ):
                return "an argument `.format()`s a value that may be a tensor at the call"
            if isinstance(part, ast.Call) and context.data.first_item_call(part) is not None:
                return "an argument calls `.item()`, which syncs and breaks the graph at the call"
            if isinstance(part, ast.Call) and context.facts.qualified_name_of(part.func) in (
                "builtins.str", "builtins.repr", "builtins.format", "builtins.float", "builtins.int"
            ) and not all(_is_static_value(context, a, node) for a in part.args):
                return f"an argument converts a value that may be a tensor with `{ast.unparse(part.func)}`"
    return None


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


def _tuple_of(expressions: list[ast.expr]) -> ast.Tuple:
    return ast.Tuple(elts=list(expressions), ctx=ast.Load())


def _dict_of(keywords: list[ast.keyword]) -> ast.Dict:
    return ast.Dict(
        keys=[ast.Constant(k.arg) if k.arg is not None else None for k in keywords],
        values=[k.value for k in keywords],
    )


def _recording_call(context: FunctionContext, call: ast.Call, kind: str) -> list[ast.stmt]:
    """``EAGER = <kind>_in_graph(...)`` and, when the runtime hands the arguments back,
    the original callee called with them, in this frame."""
    eager = f"_gm_eager_{context.module.fresh_suffix()}"
    arguments, items = _arguments_and_item_reads(call)
    if items is None:
        fallback = statements(
            f"if {eager}:\n    CALLEE(*{eager}[0], **{eager}[1])", CALLEE=copy.deepcopy(call.func)
        )
    else:
        # Handed back, the original call is made again (``item_reads_made_again_unchanged``).
        again = ast.Expr(value=copy.deepcopy(call))
        for node in ast.walk(again):
            setattr(node, ORIGINAL_MARK, f"{RULE}: the original call, made again")
        fallback = statements(f"if {eager}:\n    AGAIN", AGAIN=[place([again], call)[0]])
    keywords = _dict_of(call.keywords)
    if kind == "print":
        return statements(
            f"{eager} = {RUNTIME_NAME}.print_in_graph(ARGS, KWARGS{', ITEMS' if items else ''})",
            ARGS=arguments, KWARGS=keywords, ITEMS=items,
        ) + fallback
    # The location names the module: its file is looked up when the effect is performed,
    # so a fixed file that moves stays right. The file name given to the rewriter is
    # only the fallback for code run without ``__file__`` (exec'd text).
    location_line = ast.Constant(call.lineno)
    filename = ast.Constant(context.module.filename)
    if kind == "warn":
        return statements(
            f"{eager} = {RUNTIME_NAME}.warn_in_graph((__name__, LINE, FILE), ARGS, KWARGS)",
            LINE=location_line, FILE=filename, ARGS=arguments, KWARGS=keywords,
        ) + fallback
    method = call.func.attr
    level = "log" if method == "log" else STANDARD_LOG_LEVELS.get(method)
    return statements(
        f"{eager} = {RUNTIME_NAME}.log_in_graph("
        f"LOGGER, METHOD, LEVEL, (__name__, LINE, FUNCTION, FILE), ARGS, KWARGS{', ITEMS' if items else ''})",
        LOGGER=call.func.value,
        METHOD=ast.Constant(method),
        LEVEL=ast.Constant(level),
        LINE=location_line,
        FILE=filename,
        FUNCTION=ast.Constant(context.facts.name),
        ARGS=arguments,
        KWARGS=keywords,
        ITEMS=items,
    ) + fallback


def _arguments_and_item_reads(call: ast.Call) -> tuple[ast.Tuple, ast.expr | None]:
    """The arguments to hand the runtime, and where the ``.item()`` reads it makes when
    the graph runs are (``deferred.ITEM_READS``), or None without any: a read argument
    becomes its tensor; an f-string that formats reads becomes a tuple of its pieces,
    the text between reads as f-strings TorchDynamo makes at the call, and each read's
    tensor, with its conversion and format spec."""
    reads = {id(read) for read, _ in item_reads(call)}
    if not reads:
        return _tuple_of(call.args), None
    arguments, items = [], []
    for position, argument in enumerate(call.args):
        if id(argument) in reads:
            arguments.append(copy.deepcopy(argument.func.value))
            items.append(ast.Tuple(elts=[ast.Constant(position), ast.Constant(None)], ctx=ast.Load()))
            continue
        if not (isinstance(argument, ast.JoinedStr) and any(
            isinstance(part, ast.FormattedValue) and id(part.value) in reads for part in argument.values
        )):
            arguments.append(argument)
            continue
        pieces, formats, text = [], [], []
        for part in argument.values:
            if isinstance(part, ast.FormattedValue) and id(part.value) in reads:
                if text:
                    pieces.append(ast.JoinedStr(values=text))
                    text = []
                conversion = "" if part.conversion == -1 else chr(part.conversion)
                spec = "" if part.format_spec is None else "".join(piece.value for piece in part.format_spec.values)
                formats.append(ast.Tuple(
                    elts=[ast.Constant(len(pieces)), ast.Constant(conversion), ast.Constant(spec)], ctx=ast.Load()
                ))
                pieces.append(copy.deepcopy(part.value.func.value))
            else:
                text.append(part)
        if text:
            pieces.append(ast.JoinedStr(values=text))
        arguments.append(ast.Tuple(elts=pieces, ctx=ast.Load()))
        items.append(ast.Tuple(elts=[ast.Constant(position), ast.Tuple(elts=formats, ctx=ast.Load())], ctx=ast.Load()))
    return _tuple_of(arguments), ast.Tuple(elts=items, ctx=ast.Load())


def _runtime_attribute(name: str) -> ast.Attribute:
    return ast.Attribute(value=ast.Name(id=RUNTIME_NAME, ctx=ast.Load()), attr=name, ctx=ast.Load())


def _call_in_place(context: FunctionContext, statement: ast.Expr, kind: str) -> ast.Expr:
    """The statement with only its callee changed (``graphmend.runtime.fixed_calls``):
    ``print`` / ``warnings.warn`` become ``__graphmend__.print`` / ``.warn``, and a
    logger ``L.method`` becomes ``__graphmend__.log(L).method``."""
    written = copy.deepcopy(statement)
    callee = statement.value.func
    if kind == "log":
        receiver = callee.value
        written.value.func.value = ast.Call(func=_runtime_attribute("log"), args=[copy.deepcopy(receiver)], keywords=[])
        edit = CalleeEdit(receiver.lineno, receiver.col_offset, receiver.end_col_offset,
                          before=f"{RUNTIME_NAME}.log(", after=")")
    else:
        name = "print" if kind == "print" else "warn"
        written.value.func = _runtime_attribute(name)
        edit = CalleeEdit(callee.lineno, callee.col_offset, callee.end_col_offset, replacement=f"{RUNTIME_NAME}.{name}")
    context.module.callee_edits.append(edit)
    return place([written], statement)[0]


def _output_calls(context: FunctionContext) -> list[tuple[ast.Expr, str, str]]:
    calls = []
    for node in context.facts.nodes:
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
            classified = classify_effect_call(context, node.value)
            if classified is not None:
                calls.append((node, *classified))
    return calls


def _refusal(context: FunctionContext, statement: ast.Expr, kind: str) -> str | None:
    call = statement.value
    node = context.facts.node_for(statement)
    return first_failure(
        lambda: failed("D101", callee_is_real(context, call, kind)),
        lambda: failed("D102", keywords_supported(call, kind)),
        lambda: failed("D103", not_deprecated_logger_warn(call, kind)),
        lambda: failed("D104", callee_on_one_line(call, kind)),
        lambda: failed("D105", not_inside_with(context, statement)),
        lambda: failed("D106", warning_not_caught_here(context, statement, kind)),
        lambda: failed("D109", item_reads_made_again_unchanged(context, call, kind)),
        lambda: failed("D107", arguments_do_not_format_tensor_values(context, call, node)),
        lambda: failed("D108", no_trap_after(context, statement)),
    )

_REORDERING = "under eager or aot_eager; under inductor, the default, it keeps its break where"


def kept_under_a_reordering_backend(
    context: FunctionContext, statement: ast.stmt, earlier_outputs: list[int], in_a_loop: bool
) -> str | None:
    """What ``check`` must add to "fixed" for an output the run may keep as a break:
    under a backend that may reorder a graph's ops (inductor), a graph holds at most one
    output (``deferred.no_earlier_output_in_graph``) and none beside a lowered guard
    (``claims.outputs_share_no_graph_with_a_lowered_guard``), checked while tracing.
    Statically: an earlier output of the function rewritten too, the same statement in a
    loop (each pass is another output in one graph), or a guard Trap lowered before it
    may share its graph. None where the output is the only one that may."""
    if earlier_outputs:
        return f"{_REORDERING} the output at line {earlier_outputs[-1]} shares its graph"
    if in_a_loop:
        return f"{_REORDERING} an earlier pass of its loop shares its graph"
    for finding in context.module.findings:
        if (
            finding.rule == "Trap" and finding.fixed and finding.function == context.facts.qualified_name
            and finding.line < statement.lineno
        ):
            return f"{_REORDERING} the guard lowered at line {finding.line} shares its graph"
    return None


def _statements_in_loops(function: ast.AST) -> set[int]:
    """ids of the statements inside a ``for`` or ``while`` of ``function`` (not of a
    function nested in it)."""
    inside: set[int] = set()

    def visit(node: ast.AST, looped: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
                continue
            if looped and isinstance(child, ast.stmt):
                inside.add(id(child))
            visit(child, looped or isinstance(child, (ast.For, ast.AsyncFor, ast.While)))

    visit(function, False)
    return inside


def apply(context: FunctionContext) -> None:
    candidates = _output_calls(context)
    if not candidates:
        return
    # Output that stays eager needs no condition here: the deferred output happens
    # inside the graph, which runs before the eager code after a graph break.
    reasons = {id(statement): _refusal(context, statement, kind) for statement, kind, _ in candidates}
    details = {id(statement): (kind, detail) for statement, kind, detail in candidates}
    in_loops = _statements_in_loops(context.facts.function)
    fixed_lines: list[int] = []

    def rewrite(statement: ast.stmt, _enclosing) -> list[ast.stmt] | None:
        if id(statement) not in details:
            return None
        kind, detail = details[id(statement)]
        reason = reasons[id(statement)]
        finding = context.module.report(
            context.facts, statement, LOGGER_CALL, f"`{detail}(...)` call", RULE, reason,
            caveat=kept_under_a_reordering_backend(context, statement, fixed_lines, id(statement) in in_loops),
        )
        if not finding.fixed:
            return None
        fixed_lines.append(statement.lineno)
        context.module.uses_runtime = True
        call = statement.value
        if context.module.output_calls_in_place:
            return [_call_in_place(context, statement, kind)]
        recording = place(_recording_call(context, call, kind), statement)
        return [compiled_or_original(recording, [statement], f"{RULE}: original call", compiled_last=True)]

    rewrite_statements(context.facts.function, rewrite)
