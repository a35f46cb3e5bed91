"""Whether an output call can happen inside the graph exactly as it would eagerly,
decided while tracing, on the real objects (Defer's conditions ``D201``..``D209``).

An effect is registered (``register``) only where its text is fixed at the call
(``text_fixed_at_the_call``), the call would not fail (``why_the_call_fails``), the
stream, logger, handlers and warnings filters allow the exact output inside the graph
(``why_not_exact_in_graph``), the traced code changed nothing the output reads, torch's
print options included (``no_output_state_changed_in_trace``,
``no_print_options_changed_in_trace``), and the backend keeps it in its place
(``no_input_written_in_place_before``, ``no_earlier_output_in_graph``,
``nothing_lost_if_the_warning_raises``); then the statement claims its break
(``graphmend.runtime.claims``), which the checks of the whole trace may still refuse.
"""

from __future__ import annotations

import builtins
import io
import logging
import sys
import types
import warnings

import torch

from graphmend.core.legality import failed
from graphmend.runtime import claims, traps
from graphmend.runtime import output_call_arguments as arguments
from graphmend.runtime.backends import backend_keeps_effects_in_order, backend_keeps_graph_order
from graphmend.runtime.graph_inspection import input_written_in_place_so_far
from graphmend.runtime.output_effects import (
    LOG_METHOD,
    LOG_RECORD,
    PRINT,
    STANDARD_STREAMS,
    WARNING,
    register_effect,
)
from graphmend.runtime.output_operands import INT, ITEM, TEXT, has_fixed_text
from graphmend.runtime.trace_decisions import decide_in_trace, user_translator
from graphmend.torch_adapter import ops
from graphmend.torch_adapter.tracing import comptime, reorders_logging_calls

# Handlers that only write text somewhere: running them inside the graph cannot
# change a value the traced function reads afterwards (a user handler could append
# to a list the function then reads; that read was fixed while tracing).
_WRITING_HANDLER_TYPES = (
    logging.StreamHandler, logging.FileHandler, logging.NullHandler, type(logging.lastResort),
)
# pytest's capture handlers keep records for the test report, which the code under
# test does not read.
_REPORTING_HANDLER_NAMES = frozenset({
    "_pytest.logging.LogCaptureHandler",
    "_pytest.logging._LiveLoggingNullHandler",
    "_pytest.logging._LiveLoggingStreamHandler",
    "_pytest.logging._FileHandler",
})
# A handler (class or instance) may declare that it only records output, for a test
# or a report, and touches nothing the compiled code reads: ``graphmend_output_only = True``.
OUTPUT_ONLY_MARK = "graphmend_output_only"


def _marked_output_only(thing) -> bool:
    return getattr(thing, OUTPUT_ONLY_MARK, False) is True


def _opaque_to_tracing(function) -> bool:
    """Whether TorchDynamo cannot trace into ``function``, and so cannot hold its own
    view of what it changes.

    When traced code writes to a stream whose ``write`` is Python code, TorchDynamo
    runs that code symbolically and, after the graph, replays the changes it saw (a
    list the stream appends to is set to the contents it expects). Output the graph
    itself wrote into the same object is then overwritten. A builtin ``write`` (a real
    file, ``io.StringIO``) makes TorchDynamo break the graph instead, and so does a
    function under ``torch._dynamo.disable``."""
    if isinstance(function, (types.BuiltinFunctionType, types.MethodWrapperType,
                             types.WrapperDescriptorType, types.MethodDescriptorType)):
        # A builtin bound to a list or dict (``records.append``) changes an object
        # TorchDynamo models; one bound to a file or a module does not.
        owner = getattr(function, "__self__", None)
        return owner is None or isinstance(owner, (io.IOBase, types.ModuleType))
    function = getattr(function, "__func__", function)
    return getattr(function, "_torchdynamo_disable", False) is True or _marked_output_only(function)


def _is_from_warnings(function) -> bool:
    return getattr(function, "__module__", None) == "warnings"


def _stream_is_opaque(stream) -> bool:
    return _marked_output_only(stream) or _opaque_to_tracing(getattr(stream, "write", None))


def _only_writes(handler: logging.Handler) -> bool:
    handler_type = type(handler)
    qualified = f"{handler_type.__module__}.{handler_type.__qualname__}"
    if handler.filters:
        return False
    if qualified in _REPORTING_HANDLER_NAMES or _marked_output_only(handler):
        return True
    if handler_type not in _WRITING_HANDLER_TYPES:
        return False
    stream = getattr(handler, "stream", None)  # the last-resort handler's is sys.stderr
    return stream is None or _stream_is_opaque(stream)


# Logger methods whose behaviour the emission reproduces; a Logger subclass that
# overrides any of them (``logging.setLoggerClass``) is logged eagerly.
REPRODUCED_LOGGER_METHODS = (
    "debug", "info", "warning", "error", "critical", "fatal", "log", "_log",
    "makeRecord", "handle", "callHandlers", "isEnabledFor", "getEffectiveLevel", "filter",
)


def register(
    kind: str, target_id, detail: tuple, template: tuple, slots: tuple, kwargs: dict
) -> int:
    """Record an effect found while tracing; its key, or -1 to perform it eagerly.
    Decided while TorchDynamo traces this function, as a constant of the trace
    (``decide_in_trace``); not tracing, -1."""
    key = -1
    comptime(_decide_register)
    return key


def _decide_register(context) -> None:
    decide_in_trace(
        context, "key", ("kind", "target_id", "detail", "template", "slots", "kwargs"), _registered_key
    )


def _registered_key(translator, kind, target_id, detail, template, slots, kwargs) -> int:
    target = _resolve_target(kind, target_id)
    if target_id is not None and target is None:
        return -1
    if why_not_exact_in_graph(kind, target, detail, template, kwargs) is not None:
        return -1
    if why_the_call_fails(kind, detail, template, slots, kwargs) is not None:
        return -1
    reason = (
        no_input_written_in_place_before(translator)
        or no_output_state_changed_in_trace(translator, kind, target)
        or no_print_options_changed_in_trace(translator)
        or no_earlier_output_in_graph(translator)
        or (nothing_lost_if_the_warning_raises(translator) if kind == WARNING else None)
    )
    if reason is not None:
        claims.decline_at_user_site(translator, reason)
        return -1
    if not claims.claim_break_at_user_site(translator, claims.OUTPUT):
        return -1
    # A standard stream named at the call is kept by its name, and found when the
    # effect is performed: the stream ``sys`` holds then, as the original call read it.
    return register_effect(kind, target_id if isinstance(target_id, str) else target, detail, template, slots, kwargs)


def refused_where_traced() -> bool:
    """While traced: whether an earlier trace refused the output call's claim here, so
    that it keeps its break without its arguments read first. Reading a number a list
    holds guards on its value, and a call that keeps its break must guard on nothing
    the original's did not (a print of ``.tolist()`` in a resume function: the frame
    compiled again for every new position, where the original's guarded on the length)."""
    refused = False
    comptime(_decide_refused_where_traced)
    return refused


def _decide_refused_where_traced(context) -> None:
    decide_in_trace(context, "refused", (), claims.refused_at_user_site)


def _resolve_target(kind: str, target_id):
    """The object whose ``id`` is ``target_id``, among those an effect may target: the
    standard streams for ``print(file=)``, loggers ``logging.getLogger`` knows; or, for
    ``target_id`` a name of ``STANDARD_STREAMS``, that stream as ``sys`` holds it now."""
    if target_id is None:
        return None
    if isinstance(target_id, str):
        return getattr(sys, target_id) if kind == PRINT and target_id in STANDARD_STREAMS else None
    if kind == PRINT:
        candidates = [sys.stdout, sys.stderr]
    else:
        candidates = [logging.root, *logging.Logger.manager.loggerDict.values()]
    for candidate in candidates:
        if id(candidate) == target_id:
            return candidate
    return None


def no_input_written_in_place_before(translator) -> str | None:
    """Inductor frees a graph input it writes in place too early when an output
    operator without tensor operands follows the write: the kernel that writes it then
    reads a deleted name (UnboundLocalError). A
    backend that runs the graph's ops in order (``backends.backend_keeps_graph_order``)
    frees nothing early."""
    if backend_keeps_graph_order(translator.output):
        return None
    written = input_written_in_place_so_far(translator)
    if written is not None:
        return failed("D201", f"the input `{written}` is written in place before the output")
    return None


def nothing_lost_if_the_warning_raises(translator) -> str | None:
    """The warnings filters are read while tracing, not guarded: a program that turns
    warnings into errors between calls (``warnings.simplefilter("error")``) has the
    warning raise inside the graph, as a failed lowered guard does. So a warning in
    the graph needs what a lowered guard needs: no ``try`` or ``with`` around it in a
    traced frame (it would catch the error), no input written in place before it (a
    functionalizing backend writes it back only when the graph ends) and no write to an
    existing object before it (replayed only when the graph ends)."""
    user = user_translator(translator)
    reason = (
        traps.no_handler_in_traced_frames(user)
        or traps.no_input_mutated_before_guard(user)
        or traps.no_pending_side_effect_before_guard(user)
    )
    if reason is not None:
        return failed("D205", f"{reason.replace('the guard', 'the warning')} (a filter set later may make it raise)")
    return None


def no_earlier_output_in_graph(translator) -> str | None:
    """A backend that schedules a graph's operators by their operands alone could run a
    later output before an earlier one (the prints of a loop's ``finally``, their operand
    ready first, before the prints above them). A backend that runs the graph's ops in
    order, or inductor, which orders the output operators by AOTAutograd's effect tokens
    (``backends.backend_keeps_effects_in_order``), keeps them; under any other a graph
    holds at most one output, and a later one keeps its break."""
    if backend_keeps_effects_in_order(translator.output):
        return None
    for node in translator.output.graph.nodes:
        if node.op == "call_function" and node.target in (
            torch.ops.graphmend.emit_effect, torch.ops.graphmend.emit_effect.default
        ):
            return failed("D204", "an earlier output is in this graph, and the backend may reorder the two")
    return None


def loggers_reached(logger):
    """The loggers a record made by ``logger`` reaches: ``logger``, then each parent
    while the logger before it propagates."""
    while isinstance(logger, logging.Logger):
        yield logger
        logger = logger.parent if logger.propagate else None


def _objects_an_output_reads(kind: str, target) -> list:
    """The objects whose state decides where an effect goes and whether it happens."""
    objects = [sys, builtins, sys.stdout, sys.stderr]
    if kind == PRINT:
        return objects + ([] if target is None else [target])
    if kind == WARNING:
        return objects + [warnings, warnings.filters, getattr(warnings, "_filters_mutated", None)]
    objects += [logging, logging.Logger.manager, logging.root]
    for current in loggers_reached(target):
        objects += [current, current.handlers, current.filters]
        for handler in current.handlers:
            objects += [handler, handler.filters, getattr(handler, "stream", None)]
    return objects


def no_output_state_changed_in_trace(translator, kind: str, target) -> str | None:
    """Whether the code traced so far changed something this effect reads: TorchDynamo
    applies such a change (``sys.stdout = stream``, ``logger.disabled = True``, a
    handler added, a warnings filter inserted) only after the graph has run, so the
    real objects the decision saw, and the graph's effect would use, are not the ones
    the original call sees."""
    side_effects = translator.output.side_effects
    for thing in _objects_an_output_reads(kind, target):
        if thing is None or thing not in side_effects:
            continue
        tracked = side_effects[thing]
        try:
            modified = side_effects.is_modified(tracked)
        except Exception:  # noqa: BLE001 - an object Dynamo cannot say about: assume changed
            modified = True
        if modified:
            return failed("D202", f"the traced code changed {type(thing).__name__} {getattr(thing, '__name__', '')}".rstrip() + \
                ", which TorchDynamo applies only after the graph")
    return None


def no_print_options_changed_in_trace(translator) -> str | None:
    """Whether the code traced so far changed torch's print options
    (``torch.set_printoptions`` writes the attributes of ``torch._tensor_str.PRINT_OPTS``):
    TorchDynamo replays those writes only after the graph has run, so a tensor rendered
    inside the graph would show the options of before the call (``tensor([1.1235])``
    where the original printed ``tensor([1.12])``). Options changed outside the compiled
    code need nothing: the graph renders with the options in force when it runs, as the
    original call does."""
    side_effects = translator.output.side_effects
    options = ops.print_options()
    if options is None or options not in side_effects:
        return None
    try:
        modified = side_effects.is_modified(side_effects[options])
    except Exception:  # noqa: BLE001 - TorchDynamo internals changed: assume changed
        modified = True
    if modified:
        return failed("D203", "the traced code changed torch's print options, which TorchDynamo applies only after the graph")
    return None


def why_not_exact_in_graph(
    kind: str, target, detail: tuple, template: tuple, kwargs: dict
) -> str | None:
    """Why performing this effect inside the graph could differ from the eager call.

    Decided on the real objects while tracing. None when it cannot differ."""
    if not all(has_fixed_text(value) for value in template):
        return "an argument's text may change after the call"
    if reorders_logging_calls():
        return "TorchDynamo reorders some output calls to the end of the graph"
    if kind == PRINT:
        for name, value in kwargs.items():
            if name not in ("sep", "end", "flush") or not has_fixed_text(value):
                return f"`{name}=` may write somewhere the function reads"
        if target is not None and target is not sys.stdout and target is not sys.stderr:
            return "`file=` is not the standard output or error stream"
        if not _stream_is_opaque(sys.stdout if target is None else target):
            return "the stream's `write` is Python code that traced code may also write through"
        return None
    if kind in (LOG_RECORD, LOG_METHOD):
        return _why_not_exact_log(target, detail, template, kwargs, _methods_called(kind, detail))
    if kind == WARNING:
        return _why_not_exact_warning(detail, template, kwargs)
    return f"unknown effect {kind!r}"


def why_the_call_fails(kind: str, detail: tuple, template: tuple, slots: tuple, kwargs: dict) -> str | None:
    """Why the call's own arguments would make it fail at the call, where a graph
    cannot fail in its place (``graphmend.runtime.output_call_arguments``)."""
    reason = arguments.item_reads_format(slots, TEXT)
    if reason is not None:
        return reason
    if kind == PRINT:
        return arguments.print_separators_are_strings(kwargs)
    if kind == WARNING:
        return arguments.warning_arguments_given_once(template, kwargs)
    operands = arguments.operand_kinds(template, slots, ITEM)
    if kind == LOG_RECORD and detail[0] == "log":
        reason = arguments.log_level_is_an_integer(operands, INT)
        if reason is not None:
            return reason
        operands = operands[1:]
    return (
        arguments.log_message_is_given(operands)
        or arguments.extra_names_no_record_attribute(kwargs)
        or arguments.log_message_formats(operands, INT)
    )


def _methods_called(kind: str, detail: tuple) -> tuple:
    """The logger methods the original call runs: those a record's emission reproduces,
    and a method performed by calling it (``LOG_METHOD``)."""
    return REPRODUCED_LOGGER_METHODS + (detail if kind == LOG_METHOD else ())


def _why_not_exact_log(logger, detail: tuple, template: tuple, kwargs: dict, methods: tuple) -> str | None:
    if not isinstance(logger, logging.Logger):
        return "the receiver is not a logging.Logger"
    for name in REPRODUCED_LOGGER_METHODS:
        if getattr(type(logger), name, None) is not getattr(logging.Logger, name):
            return f"the logger's class overrides `{name}`"
    replaced = [name for name in methods if name in vars(logger)]
    if replaced:
        # ``mock.patch.object(logger, "warning")``: the original call runs the
        # replacement; a record made in its place would not.
        return f"the logger's `{replaced[0]}` is replaced on the logger itself"
    if logging.getLogRecordFactory() is not logging.LogRecord:
        return "a custom log record factory may read program state"
    if set(kwargs) - {"extra"}:
        return "a keyword other than `extra=`"
    extra = kwargs.get("extra")
    if extra is not None and not (
        type(extra) is dict and all(has_fixed_text(value) for value in extra.values())
    ):
        return "`extra=` may carry a value whose text changes"
    handled = False
    for current in loggers_reached(logger):
        if current.filters:
            return f"logger `{current.name}` has filters, which may read or change program state"
        for handler in current.handlers:
            handled = True
            if not _only_writes(handler):
                return f"handler {handler!r} may change state the function reads"
    if not handled and logging.lastResort is not None and not _only_writes(logging.lastResort):
        return "without handlers the record goes to `sys.stderr`, whose `write` is Python code"
    return None


def _why_not_exact_warning(detail: tuple, template: tuple, kwargs: dict) -> str | None:
    module_name, lineno, _ = detail
    message = template[0] if template else kwargs.get("message")
    category = template[1] if len(template) > 1 else kwargs.get("category", UserWarning)
    if category is None:
        category = UserWarning
    if not (isinstance(category, type) and issubclass(category, Warning)):
        return "the category is not a Warning subclass (the call raises TypeError)"
    if not isinstance(message, str):
        return "the message is not a string"
    if set(kwargs) - {"message", "category", "stacklevel"} or kwargs.get("stacklevel", 1) != 1:
        return "a keyword other than `message=`, `category=` and `stacklevel=1`"
    for action, text, filter_category, module, filter_lineno in warnings.filters:  # noqa: B007 - read after the loop
        if (
            (text is None or text.match(message))
            and issubclass(category, filter_category)
            and (module is None or module.match(module_name))
            and (filter_lineno == 0 or filter_lineno == lineno)
        ):
            break
    else:
        action = warnings.defaultaction
    if action == "error":
        return "a warnings filter turns this warning into an exception"
    if action == "ignore":
        return None
    # The trace is guarded on what is decided on here (``deferred.warn_in_graph``): the identity
    # of ``showwarning``, the type of the error stream, the module of the function that
    # shows warnings by default (of no other is it known what it reads).
    if warnings.showwarning is warnings._showwarning_orig:
        if _is_from_warnings(warnings._showwarnmsg_impl):
            if not _stream_is_opaque(sys.stderr):
                return "the error stream's `write` is Python code that traced code may also write through"
        else:  # ``catch_warnings(record=True)``'s list
            return "warnings are recorded into an object that traced code may also change"
    elif not _opaque_to_tracing(warnings.showwarning):
        return "`warnings.showwarning` is replaced by code that may change state the function reads"
    return None


MESSAGE_FORMATTED_AT_THE_CALL = (
    "message_formatted_at_the_call: a formatted argument holds a value TorchDynamo formats "
    "only when the graph ends (a tensor, an object with a `__format__` of its own), not its text at the call"
)


def text_fixed_at_the_call(template: tuple, kwargs: dict) -> bool:
    """``message_formatted_at_the_call``, while traced: every constant argument (an
    f-string's text among them, a ``%``, ``.format()`` or ``str()`` of a value) is text
    TorchDynamo made at the call. An f-string or ``.format()`` that formats a tensor, or
    an object whose ``__format__`` TorchDynamo does not trace, is held as a format to
    apply when the graph's outputs exist, so its text would show the tensor as the graph
    ends, after any later in-place write, and run the ``__format__`` (its output, its
    exception) after the graph's; such a call keeps its break, where the original formats
    it the same way, after its graph. Not traced, False.

    The arguments are evaluated in the trace before the call, as the original's are, so
    TorchDynamo does with them what it does in the original: a symbolic size formatted
    into text is specialised in both (and not refused here), ``str``/``int``/``float`` of
    a tensor breaks the graph at the conversion in both."""
    fixed = False
    comptime(_decide_text_fixed_at_the_call)
    return fixed


def _decide_text_fixed_at_the_call(context) -> None:
    decide_in_trace(
        context, "fixed", ("template", "kwargs"), _is_text_of_the_call, read=lambda variable: variable
    )


def _is_text_of_the_call(translator, template_variable, kwargs_variable) -> bool:
    if _formats_later(template_variable) or _formats_later(kwargs_variable):
        claims.decline_at_user_site(translator, failed("D208", MESSAGE_FORMATTED_AT_THE_CALL))
        return False
    return True


def _formats_later(variable) -> bool:
    """A string TorchDynamo holds as a format to apply after the graph, in ``variable``
    or in the tuples, lists and dicts it holds."""
    from graphmend.torch_adapter.tracing import BaseListVariable, ConstDictVariable

    if variable.is_python_constant():
        return False
    if variable.python_type() is str:
        return True
    if isinstance(variable, BaseListVariable):
        return any(_formats_later(item) for item in variable.items)
    if isinstance(variable, ConstDictVariable):
        return any(_formats_later(item) for item in variable.items.values())
    return False
