"""[Defer] print / logging / warnings calls: performed inside the graph, at the call.

    print(a, b, sep=s)
becomes
    if not __graphmend__.is_compiling():
        print(a, b, sep=s)
    else:
        _gm_eager_1 = __graphmend__.print_in_graph((a, b), {"sep": s})
        if _gm_eager_1 is not None:
            print(_gm_eager_1[0][0], _gm_eager_1[0][1], sep=_gm_eager_1[1]["sep"])

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

Legality conditions (``conditions.py``): ``callee_is_real`` (the builtin ``print``, a
logger bound once by ``getLogger``/``get_logger``, ``warnings.warn``; never shadowed
or rebound), ``keywords_supported`` (nothing that depends on the call stack:
``stacklevel``, ``exc_info``, ``stack_info``), ``not_deprecated_logger_warn``
(``Logger.warn`` also warns from the caller's line), ``callee_on_one_line`` (a
record's or warning's line is where the call's attribute ends), ``not_inside_with`` (a
context manager may redirect or capture output), ``warning_not_caught_here`` (a
warning an ``error`` filter raises inside a graph would escape this function's
``try``), ``arguments_do_not_format_tensor_values`` (a value computed from tensor
data, formatted or converted at the call, would be read later, or break there) and
``no_trap_after`` (whether inductor keeps a failing lowered guard after the output is
not established).

An argument may format or convert a value the analysis cannot type (a parameter, a
number derived from one, an attribute), in an f-string, with ``%``, ``.format()``, or
with ``str``/``repr``/``format``/``int``/``float``: it is accepted here unless the value
depends on tensor data, and decided while tracing (``message_formatted_at_the_call``,
``runtime/output_decisions.py``); ``check`` says the fix holds if the values are not
tensors while tracing. The rewritten code evaluates the arguments as the original
does, in the trace before the call, so TorchDynamo does the same with them in both:
it formats a Python value into a constant it guards on (a symbolic size too, which it
specialises in the original as well), holds an f-string or ``.format()`` of a tensor
as a format applied when the graph ends (that call is handed back and keeps its
break, as the original had it), and breaks the graph at ``str``, ``int`` or ``float``
of a tensor, where the original broke too; a ``__format__`` or ``__str__`` it traces
runs there, in both, with its output and its exception.
"""

from __future__ import annotations

import ast
import copy

from graphmend.core.legality import CONDITIONS, failed
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
    first_failure,
    rewrite_statements,
)
from graphmend.rules.defer.conditions import (
    arguments_do_not_format_tensor_values,
    callee_is_real,
    callee_on_one_line,
    item_reads,
    item_reads_made_again_unchanged,
    keywords_supported,
    no_trap_after,
    not_deprecated_logger_warn,
    not_inside_with,
    values_formatted_while_tracing,
    warning_not_caught_here,
)

RULE = "Defer"
STANDARD_LOG_LEVELS = LOGGER_METHOD_LEVELS
# transformers adds these to logging.Logger; replaying the method keeps its
# once-only cache and the caller location the original record had.
ONCE_METHODS = frozenset({"warning_once", "info_once"})


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
        fallback = statements(f"if {eager} is not None:\n    CALL", CALL=_call_with_handed_back_arguments(call, eager))
    else:
        # Handed back, the original call is made again (``item_reads_made_again_unchanged``).
        again = ast.Expr(value=copy.deepcopy(call))
        for node in ast.walk(again):
            setattr(node, ORIGINAL_MARK, f"{RULE}: the original call, made again")
        fallback = statements(f"if {eager} is not None:\n    AGAIN", AGAIN=[place([again], call)[0]])
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


def _call_with_handed_back_arguments(call: ast.Call, eager: str) -> ast.Call:
    """The original callee called with the arguments the runtime handed back, each taken
    out of the pair by its position or name (``EAGER[0][1]``, ``sep=EAGER[1]["sep"]``),
    not unpacked with ``*``: TorchDynamo keeps a list argument on the stack at the
    call's break by where it came from, where an unpacked tuple it builds again from
    its values, and reading a number the list holds guards on its value (a print of
    ``.tolist()`` compiled its frame again for every new value, where the original's
    guarded on the list's length). A call that unpacks arguments itself is made as
    the runtime received them."""
    callee = copy.deepcopy(call.func)
    if any(isinstance(argument, ast.Starred) for argument in call.args) or any(
        keyword.arg is None for keyword in call.keywords
    ):
        return ast.Call(
            func=callee,
            args=[ast.Starred(value=_handed_back(eager, 0), ctx=ast.Load())],
            keywords=[ast.keyword(arg=None, value=_handed_back(eager, 1))],
        )
    return ast.Call(
        func=callee,
        args=[_handed_back(eager, 0, position) for position in range(len(call.args))],
        keywords=[ast.keyword(arg=keyword.arg, value=_handed_back(eager, 1, keyword.arg)) for keyword in call.keywords],
    )


def _handed_back(eager: str, *keys) -> ast.expr:
    node: ast.expr = ast.Name(id=eager, ctx=ast.Load())
    for key in keys:
        node = ast.Subscript(value=node, slice=ast.Constant(key), ctx=ast.Load())
    return node


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


def formatted_while_tracing(context: FunctionContext, statement: ast.Expr) -> str | None:
    """What ``check`` adds to "fixed" for a call that formats values the analysis cannot
    show are not tensors: the fix holds where they are not, while tracing
    (``message_formatted_at_the_call``); a tensor there keeps the call's break."""
    values = values_formatted_while_tracing(context, statement.value, context.facts.node_for(statement))
    if not values:
        return None
    names = [f"`{value}`" for value in values]
    subject = names[0] if len(names) == 1 else ", ".join(names[:-1]) + f" and {names[-1]}"
    verb = "is not a tensor" if len(names) == 1 else "are not tensors"
    return f"if {subject} {verb} while tracing [{CONDITIONS['D208'].label}]"


_REORDERING = "under eager or aot_eager; under inductor, the default, it keeps its break where"


def kept_under_a_reordering_backend(
    context: FunctionContext, statement: ast.stmt, earlier_outputs: list[int], in_a_loop: bool
) -> str | None:
    """What ``check`` must add to "fixed" for an output the run may keep as a break:
    under a backend that may move a lowered guard (inductor), no output shares a graph
    with one (``whole_trace_conditions.outputs_share_no_graph_with_a_lowered_guard``),
    checked while tracing. Statically: a guard Trap lowered before it in the function.
    Outputs share a graph with each other under inductor too, which keeps them in order
    (``output_decisions.no_earlier_output_in_graph``). None where no guard may."""
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
            while_tracing=None if reason is not None else formatted_while_tracing(context, statement),
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
