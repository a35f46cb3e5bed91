"""Console, log and warning output from inside a graph, at the point of the call.

A rewritten ``print`` / logger call / ``warnings.warn`` calls ``print_in_graph`` /
``log_in_graph`` / ``warn_in_graph`` while TorchDynamo traces. Those put one
``graphmend::emit_effect`` operator into the graph where the call was. The operator
is registered as an ordered effect, so neither TorchDynamo, AOTAutograd nor inductor
drops it or moves it past another effect, and when the graph runs it performs the
output then and there, in the thread that runs the graph. So:

- output is never pending: nothing to flush when a compiled call returns, whatever
  entry compiled it (``torch.compile``, ``torch._dynamo.optimize``, a ``compile``
  bound before graphmend loaded, a compiled object an engine keeps), nothing left
  at interpreter exit, and no graphmend state that TorchDynamo reads (so none it
  guards on or recompiles for);
- concurrent threads and asyncio tasks each see their own output, as in eager code;
- output before an operation that fails (a lowered guard, an index out of range)
  has happened, output after it has not, exactly as in eager code;
- output in a graph comes before eager code that follows a graph break.

Everything about an effect except its tensors, integers and sizes is fixed while
tracing: it is put in a registry under an integer key that the graph passes to the
operator, with those as operands (their values at the call). The registration runs at trace
time (``trace_decisions.decide_in_trace``, a constant of the trace) and decides whether the
effect can happen inside the graph exactly as it would eagerly
(``why_not_exact_in_graph``, ``why_the_call_fails``, ``no_input_written_in_place_before``,
``no_output_state_changed_in_trace``, ``no_earlier_output_in_graph``, then the checks of
the whole trace in ``graphmend.runtime.whole_trace_conditions``); when it cannot, the arguments go
back to the rewritten code, which makes the original call with them in the user's own
frame, at the cost of the graph break the original call had.
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
from graphmend.core.runtime_names import LOGGER_METHOD_LEVELS  # noqa: F401 - read by fixed_calls
from graphmend.runtime import backends, claims, graph_inspection, operators, trace_decisions, traps
from graphmend.runtime import output_call_arguments as arguments
from graphmend.runtime.store import store
from graphmend.torch_adapter import ops
from graphmend.torch_adapter.tracing import (
    comptime,
    disable_wrapper_code,
    reorders_logging_calls,
    run_outside_dynamo,
)

_PRINT = "print"
_LOG_RECORD = "log"
_LOG_METHOD = "log method"
_WARNING = "warn"

# Values whose text cannot change after the call: printing them later in the graph,
# or from a registry snapshot, shows what printing them at the call would show.
# A mutable object (a list the program changes, a user object with ``__repr__``)
# is printed eagerly instead.
_FIXED_TEXT_TYPES = (
    type(None), bool, int, float, complex, str, bytes, torch.Size, torch.dtype, torch.device,
    type,  # a class, such as a warning category: shown by its name
)
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
_REPRODUCED_LOGGER_METHODS = (
    "debug", "info", "warning", "error", "critical", "fatal", "log", "_log",
    "makeRecord", "handle", "callHandlers", "isEnabledFor", "getEffectiveLevel", "filter",
)



def _has_fixed_text(value) -> bool:
    if type(value) in _FIXED_TEXT_TYPES:
        return True
    if type(value) is tuple or type(value) is frozenset:
        return all(_has_fixed_text(item) for item in value)
    return False


def _plain_tensor(value) -> bool:
    """A tensor whose printed text inside the graph is its text at the call.

    Autograd history (``grad_fn=``, ``requires_grad=True``), ``Parameter containing:``
    and subclasses print differently inside a graph, so those are printed eagerly."""
    return (
        type(value) is torch.Tensor
        and not value.requires_grad
        and value.layout == torch.strided
    )


_TENSOR, _INT, _SIZE = "tensor", "int", "size"
_LIST, _TUPLE, _CONSTANT = "list", "tuple", "constant"
# ``.item()`` of a tensor operand, made when the graph runs: an argument that is one
# (its extent the value's kind), or an f-string's pieces with reads among them (its
# extent, per read, the kind, conversion and format spec).
_ITEM, _TEXT = "item", "text"


def _item_kind(value) -> str | None:
    """The kind of Python number ``value.item()`` gives (``output_call_arguments``), where
    it gives one for every value of the tensor: one element of a plain strided tensor,
    its number of elements known while tracing. Else None."""
    if not (isinstance(value, torch.Tensor) and type(value) is torch.Tensor and value.layout == torch.strided):
        return None
    if value.is_quantized:
        return None
    elements = value.numel()
    if type(elements) is not int or elements != 1:
        return None
    if value.dtype.is_complex:
        return arguments.COMPLEX_ITEM
    if value.dtype.is_floating_point:
        return arguments.FLOAT_ITEM
    return arguments.INTEGER_ITEM


def _split_item_reads(value, formats, tensors: list):
    """For an argument the rewritten code marked as read with ``.item()`` (``formats``
    None) or as an f-string's pieces (``formats``: per read, its piece's index,
    conversion and spec): (template entry, slot kind, extent), or None."""
    if formats is None:
        kind = _item_kind(value)
        if kind is None:
            return None
        tensors.append(value)
        return None, _ITEM, kind
    if type(value) is not tuple:
        return None
    read_at = {index: (conversion, spec) for index, conversion, spec in formats}
    text, reads = [], []
    for index, piece in enumerate(value):
        if index in read_at:
            kind = _item_kind(piece)
            if kind is None:
                return None
            text.append(None)
            reads.append((kind, *read_at[index]))
            tensors.append(piece)
        elif type(piece) is str:
            text.append(piece)
        else:
            return None
    return tuple(text), _TEXT, tuple(reads)


def _item_text(value, conversion: str, spec: str) -> str:
    """What an f-string's ``{t.item()!conversion:spec}`` gives."""
    if conversion:
        value = {"s": str, "r": repr, "a": ascii}[conversion](value)
    return format(value, spec)


def _split_sequence(value, tensors: list, integers: list):
    """The elements of a list or tuple as slots (one level deep), or None."""
    elements = []
    for item in value:
        if isinstance(item, torch.Tensor):
            if not _plain_tensor(item):
                return None
            elements.append((_TENSOR,))
            tensors.append(item)
        elif type(item) is int:
            elements.append((_INT,))
            integers.append(item)
        elif _has_fixed_text(item):
            elements.append((_CONSTANT, item))
        else:
            return None
    return tuple(elements)


def _split_arguments(args: tuple, kwargs: dict, item_reads: tuple = ()):
    """(template, slots, tensors, integers), or None when some argument must be
    printed eagerly. Runs while tracing: every test here is static for TorchDynamo.

    Tensors, integers and sizes at the top level are operands of the effect operator
    (``slots`` says where each goes back): their values are those at the call, and a
    symbolic size or integer is not specialised by printing it. Everything else is a
    constant of the template. ``item_reads`` (from the rewritten code: position and
    formats) marks the arguments whose tensors are read with ``.item()`` when the graph
    runs (``_split_item_reads``)."""
    template, slots, tensors, integers = [], [], [], []
    read_formats = dict(item_reads)
    for index, value in enumerate(args):
        if index in read_formats:
            split = _split_item_reads(value, read_formats[index], tensors)
            if split is None:
                return None
            entry, slot_kind, extent = split
            template.append(entry)
            slots.append((index, slot_kind, extent))
        elif isinstance(value, torch.Tensor):
            if not _plain_tensor(value):
                return None
            template.append(None)
            slots.append((index, _TENSOR, 1))
            tensors.append(value)
        elif type(value) is int:
            template.append(None)
            slots.append((index, _INT, 1))
            integers.append(value)
        elif type(value) is torch.Size:
            template.append(None)
            slots.append((index, _SIZE, len(value)))
            integers.extend(value)
        elif _has_fixed_text(value):
            template.append(value)
        elif type(value) is list or type(value) is tuple:
            # Its elements as they are at the call (TorchDynamo follows the list's
            # contents while tracing); a tensor in it is an operand like any other.
            elements = _split_sequence(value, tensors, integers)
            if elements is None:
                return None
            template.append(None)
            slots.append((index, _LIST if type(value) is list else _TUPLE, elements))
        else:
            return None
    for value in kwargs.values():
        if isinstance(value, torch.Tensor):
            return None
    return tuple(template), tuple(slots), tensors, integers


def _register(
    kind: str, target_id, detail: tuple, template: tuple, slots: tuple, kwargs: dict
) -> int:
    """Record an effect found while tracing; its key, or -1 to perform it eagerly.
    Decided while TorchDynamo traces this function, as a constant of the trace
    (``trace_decisions.decide_in_trace``); not tracing, -1."""
    key = -1
    comptime(_decide_register)
    return key


def _decide_register(context) -> None:
    trace_decisions.decide_in_trace(
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
        or (nothing_lost_if_the_warning_raises(translator) if kind == _WARNING else None)
    )
    if reason is not None:
        claims.decline_at_user_site(translator, reason)
        return -1
    if not claims.claim_break_at_user_site(translator, claims.OUTPUT):
        return -1
    with store.output_effects_lock:
        key = next(store.output_effect_keys)
        # A standard stream named at the call is kept by its name, and found when the
        # effect is performed: the stream ``sys`` holds then, as the original call read it.
        store.output_effects[key] = (kind, target_id if isinstance(target_id, str) else target, detail, template, slots, dict(kwargs))
    return key


def _resolve_target(kind: str, target_id):
    """The object whose ``id`` is ``target_id``, among those an effect may target: the
    standard streams for ``print(file=)``, loggers ``logging.getLogger`` knows; or, for
    ``target_id`` a name of ``STANDARD_STREAMS``, that stream as ``sys`` holds it now."""
    if target_id is None:
        return None
    if isinstance(target_id, str):
        return getattr(sys, target_id) if kind == _PRINT and target_id in STANDARD_STREAMS else None
    if kind == _PRINT:
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
    if backends.backend_keeps_graph_order(translator.output):
        return None
    written = graph_inspection.input_written_in_place_so_far(translator)
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
    user = trace_decisions.user_translator(translator)
    reason = (
        traps.no_handler_in_traced_frames(user)
        or traps.no_input_mutated_before_guard(user)
        or traps.no_pending_side_effect_before_guard(user)
    )
    if reason is not None:
        return failed("D205", f"{reason.replace('the guard', 'the warning')} (a filter set later may make it raise)")
    return None


def no_earlier_output_in_graph(translator) -> str | None:
    """Inductor does not keep two output operators of one graph in their order: it
    runs each when its operands are ready (the prints of a
    loop's ``finally`` came before the prints above them). A backend that runs the
    graph's ops in order (``backends.backend_keeps_graph_order``) keeps them; elsewhere a
    graph holds at most one output, and a later one keeps its break."""
    if backends.backend_keeps_graph_order(translator.output):
        return None
    for node in translator.output.graph.nodes:
        if node.op == "call_function" and node.target in (
            torch.ops.graphmend.emit_effect, torch.ops.graphmend.emit_effect.default
        ):
            return failed("D204", "an earlier output is in this graph, and the backend may reorder the two")
    return None


def _loggers_reached(logger):
    """The loggers a record made by ``logger`` reaches: ``logger``, then each parent
    while the logger before it propagates."""
    while isinstance(logger, logging.Logger):
        yield logger
        logger = logger.parent if logger.propagate else None


def _objects_an_output_reads(kind: str, target) -> list:
    """The objects whose state decides where an effect goes and whether it happens."""
    objects = [sys, builtins, sys.stdout, sys.stderr]
    if kind == _PRINT:
        return objects + ([] if target is None else [target])
    if kind == _WARNING:
        return objects + [warnings, warnings.filters, getattr(warnings, "_filters_mutated", None)]
    objects += [logging, logging.Logger.manager, logging.root]
    for current in _loggers_reached(target):
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
    if not all(_has_fixed_text(value) for value in template):
        return "an argument's text may change after the call"
    if reorders_logging_calls():
        return "TorchDynamo reorders some output calls to the end of the graph"
    if kind == _PRINT:
        for name, value in kwargs.items():
            if name not in ("sep", "end", "flush") or not _has_fixed_text(value):
                return f"`{name}=` may write somewhere the function reads"
        if target is not None and target is not sys.stdout and target is not sys.stderr:
            return "`file=` is not the standard output or error stream"
        if not _stream_is_opaque(sys.stdout if target is None else target):
            return "the stream's `write` is Python code that traced code may also write through"
        return None
    if kind in (_LOG_RECORD, _LOG_METHOD):
        return _why_not_exact_log(target, detail, template, kwargs, _methods_called(kind, detail))
    if kind == _WARNING:
        return _why_not_exact_warning(detail, template, kwargs)
    return f"unknown effect {kind!r}"


def why_the_call_fails(kind: str, detail: tuple, template: tuple, slots: tuple, kwargs: dict) -> str | None:
    """Why the call's own arguments would make it fail at the call, where a graph
    cannot fail in its place (``graphmend.runtime.output_call_arguments``)."""
    reason = arguments.item_reads_format(slots, _TEXT)
    if reason is not None:
        return reason
    if kind == _PRINT:
        return arguments.print_separators_are_strings(kwargs)
    if kind == _WARNING:
        return arguments.warning_arguments_given_once(template, kwargs)
    operands = arguments.operand_kinds(template, slots, _ITEM)
    if kind == _LOG_RECORD and detail[0] == "log":
        reason = arguments.log_level_is_an_integer(operands, _INT)
        if reason is not None:
            return reason
        operands = operands[1:]
    return (
        arguments.log_message_is_given(operands)
        or arguments.extra_names_no_record_attribute(kwargs)
        or arguments.log_message_formats(operands, _INT)
    )


def _methods_called(kind: str, detail: tuple) -> tuple:
    """The logger methods the original call runs: those a record's emission reproduces,
    and a method performed by calling it (``_LOG_METHOD``)."""
    return _REPRODUCED_LOGGER_METHODS + (detail if kind == _LOG_METHOD else ())


def _why_not_exact_log(logger, detail: tuple, template: tuple, kwargs: dict, methods: tuple) -> str | None:
    if not isinstance(logger, logging.Logger):
        return "the receiver is not a logging.Logger"
    for name in _REPRODUCED_LOGGER_METHODS:
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
        type(extra) is dict and all(_has_fixed_text(value) for value in extra.values())
    ):
        return "`extra=` may carry a value whose text changes"
    handled = False
    for current in _loggers_reached(logger):
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
    # The trace is guarded on what is decided on here (``warn_in_graph``): the identity
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


def _emit_effect(key: int, tensors: list[torch.Tensor], integers: list[int]) -> None:
    """Perform the registered effect ``key`` with its operands in their places."""
    kind, target, detail, template, slots, kwargs = store.output_effects[key]
    args = list(template)
    tensor_values, integer_values = iter(tensors), iter(integers)
    for position, slot_kind, extent in slots:
        if slot_kind == _TENSOR:
            args[position] = next(tensor_values)
        elif slot_kind == _INT:
            args[position] = next(integer_values)
        elif slot_kind == _SIZE:
            args[position] = torch.Size([next(integer_values) for _ in range(extent)])
        elif slot_kind == _ITEM:
            args[position] = next(tensor_values).item()
        elif slot_kind == _TEXT:
            reads = iter(extent)
            args[position] = "".join(
                piece if piece is not None else _item_text(next(tensor_values).item(), *next(reads)[1:])
                for piece in template[position]
            )
        else:
            items = [
                next(tensor_values) if element[0] == _TENSOR
                else next(integer_values) if element[0] == _INT
                else element[1]
                for element in extent
            ]
            args[position] = items if slot_kind == _LIST else tuple(items)
    perform(kind, target, detail, tuple(args), kwargs)


def _emit_effect_while_tracing(key: int, tensors: list[torch.Tensor], integers: list[int]) -> None:
    return None


# Ordered: kept although it returns nothing, and never moved past another effect.
emit_effect = operators.define(
    "emit_effect(int key, Tensor[] tensors, SymInt[] integers) -> ()",
    _emit_effect, _emit_effect_while_tracing, ordered=True,
)


_IN_GRAPH = ()


def _record(kind: str, target, detail: tuple, args: tuple, kwargs: dict, item_reads: tuple = ()):
    """Put the effect into the graph: ``()``; or hand it back, ``(args, kwargs)``, for
    the rewritten code to make the original call itself (TorchDynamo then breaks the
    graph there, as it did at the original call)."""
    split = _split_arguments(args, kwargs, item_reads)
    if split is not None and not _text_fixed_at_the_call(split[0], kwargs):
        split = None
    if split is not None:
        template, slots, tensors, integers = split
        # The receiver by identity (guarded on), or by name where the call reads it as
        # ``sys.stdout`` or ``sys.stderr``: it cannot be handed to a trace-time function
        # as an object; ``_resolve_target`` finds it again.
        target_id = None if target is None else _print_receiver(target) if kind == _PRINT else _identity(target)
        key = _register(kind, target_id, detail, template, slots, kwargs)
        if key >= 0:
            if not tensors:
                device = _graph_device()
                if device is not None:
                    tensors = [torch.empty(0, device=device)]
            torch.ops.graphmend.emit_effect(key, tensors, integers)
            return _IN_GRAPH
    return args, kwargs


MESSAGE_FORMATTED_AT_THE_CALL = (
    "message_formatted_at_the_call: a formatted argument holds a value TorchDynamo formats "
    "only when the graph ends (a tensor), not its text at the call"
)


def _text_fixed_at_the_call(template: tuple, kwargs: dict) -> bool:
    """``message_formatted_at_the_call``, while traced: every constant argument (an
    f-string's text among them) is text TorchDynamo made at the call. An f-string that
    formats a tensor is held as a format to apply when the graph's outputs exist, so its
    text would show the tensor as the graph ends, after any later in-place write; such a
    call keeps its break, where the original formats it the same way. Not traced, False."""
    fixed = False
    comptime(_decide_text_fixed_at_the_call)
    return fixed


def _decide_text_fixed_at_the_call(context) -> None:
    trace_decisions.decide_in_trace(
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


STANDARD_STREAMS = ("stdout", "stderr")
_NOT_A_STANDARD_STREAM = "elsewhere"


def _print_receiver(target):
    """For ``print(file=target)``: the name of the standard stream ``target`` is read as
    at the call, ``_NOT_A_STANDARD_STREAM`` (the print keeps its call), or else its
    identity (``_identity``).

    ``print(..., file=sys.stderr)`` writes to whatever ``sys.stderr`` is when it runs. A
    program may swap it before every call (``contextlib.redirect_stderr`` around each
    call): guarded on the stream's identity, the function compiled again on every call,
    where the original compiled once. Named, the trace is guarded on ``sys`` itself and on
    the stream's type (what the decision read), and the effect finds the stream when it
    is performed. A stream that is not a standard one is not guarded on at all: its
    print keeps its call, which is right for any stream a later call passes."""
    receiver = None
    comptime(_decide_print_receiver)
    if receiver is not None:
        return receiver
    return _identity(target)


def _decide_print_receiver(context) -> None:
    trace_decisions.decide_in_trace(context, "receiver", ("target",), _print_receiver_read, read=lambda variable: variable)


def _print_receiver_read(translator, variable) -> str | None:
    """``"stdout"`` or ``"stderr"`` where TorchDynamo read ``variable`` as that attribute
    of the ``sys`` module (its source names where it was read, and evaluates as its guards
    do to the module itself), with the trace guarded on it; ``_NOT_A_STANDARD_STREAM``
    where its value is neither standard stream now; else None."""
    from graphmend.torch_adapter import guards

    value = getattr(variable, "value", _NO_VALUE)
    if value is _NO_VALUE:
        return None
    if value is not sys.stdout and value is not sys.stderr:
        return _NOT_A_STANDARD_STREAM
    source = getattr(variable, "source", None)
    if not guards.is_attribute_source(source) or source.member not in STANDARD_STREAMS:
        return None
    root = translator.output.root_tx
    try:
        holder = eval(source.base.name, {"G": root.f_globals, "L": root.f_locals, "__builtins__": {}})  # noqa: S307
    except Exception:  # noqa: BLE001 - a source TorchDynamo names otherwise: keep the identity
        return None
    if holder is not sys or value is not getattr(sys, source.member):
        return None
    guards.install_guards((source.base, guards.IDENTITY), (source, guards.TYPE))
    return source.member


def _identity(target) -> int:
    """``id(target)``, the trace guarded on the object.

    TorchDynamo before torch 2.13 cannot trace ``id`` of a logger ("id() with unsupported
    args" for ``LoggingLoggerVariable``): a break of its own before the logging call's,
    one more than the original had (t5 under torch 2.11: 3 breaks, mended 4). There the
    identity is read from TorchDynamo's variable while traced, with the identity guard
    its own ``id`` installs."""
    identity = None
    comptime(_decide_identity)
    if identity is None:
        identity = id(target)
    return identity


def _decide_identity(context) -> None:
    trace_decisions.decide_in_trace(context, "identity", ("target",), _identity_read_while_traced, read=lambda variable: variable)


def _identity_read_while_traced(translator, variable) -> int | None:
    """The identity of the object ``variable`` stands for, guarded on; None where
    TorchDynamo traces ``id`` of any object itself, or the object has no source to guard."""
    from graphmend.torch_adapter import guards

    if hasattr(variable, "get_id"):
        return None
    value = getattr(variable, "value", _NO_VALUE)
    source = getattr(variable, "source", None)
    if value is _NO_VALUE or source is None:
        return None
    guards.install_guards((source, guards.IDENTITY))
    return id(value)


_NO_VALUE = object()


def _graph_device() -> str | None:
    """The device of the graph's tensors so far, for an effect with no tensor operand
    of its own: inductor gives an operator without tensors no device, and then does
    not emit the kernels pending before it first (a kernel fused from code on both
    sides of the effect ran after buffers it uses were freed: bart and marian under
    transformers 4.52.4). An empty tensor on that device gives the operator one."""
    device = None
    comptime(_decide_graph_device)
    return device


def _decide_graph_device(context) -> None:
    trace_decisions.decide_in_trace(context, "device", (), _device_of_traced_tensors)


def _device_of_traced_tensors(translator) -> str | None:
    """An accelerator the graph computes on, before the CPU: a CPU tensor in a CUDA
    graph would keep inductor from recording it as a CUDA graph (reduce-overhead)."""
    devices = []
    for node in translator.output.graph.nodes:
        example = node.meta.get("example_value")
        if isinstance(example, torch.Tensor) and example.device not in devices:
            devices.append(example.device)
    accelerators = [device for device in devices if device.type != "cpu"]
    chosen = (accelerators or devices or [torch.get_default_device()])[0]
    return str(chosen)


def print_in_graph(args: tuple, kwargs: dict, item_reads: tuple = ()):
    """``print(*args, **kwargs)`` inside the graph: ``()``, or ``(args, kwargs)`` to call
    ``print`` with eagerly (or, with ``item_reads``, to make the original call again)."""
    printed = dict(kwargs)
    target = printed.pop("file", None)
    if target is None:
        # Read while traced, so that TorchDynamo guards on the type of ``sys.stdout``:
        # whether the stream's ``write`` is code traced code may also write through is
        # decided on it, and a program may swap the stream between calls.
        type(sys.stdout)
    if _record(_PRINT, target, (), args, printed, item_reads) is _IN_GRAPH:
        return _IN_GRAPH
    return args, kwargs


def log_in_graph(logger, method_name: str, level, location: tuple, args: tuple, kwargs: dict, item_reads: tuple = ()):
    """A logger call inside the graph: ``()``, or ``(args, kwargs)`` to call the method
    with eagerly.

    ``level`` is the numeric level for the standard methods (the record is built at
    ``location``, so it names the original file, line and function), or ``None`` for
    methods such as transformers' ``warning_once``, which are performed by calling
    the method itself so that their own once-only bookkeeping stays what it was.
    """
    if not _log_chain_guarded(logger, method_name):
        return args, kwargs
    if level is None:
        return _record(_LOG_METHOD, logger, (method_name,), args, kwargs, item_reads)
    return _record(_LOG_RECORD, logger, (level, location), args, kwargs, item_reads)


def _log_chain_guarded(logger, method_name: str) -> bool:
    """While traced: whether the trace is now guarded on what decides a record's place in
    the graph (``_why_not_exact_log``): the record factory, that the logger's methods
    the call runs are not replaced on the logger itself, and along the loggers a
    record reaches, their filters, handlers and ``propagate``, each handler's filters and
    the type of its stream (without handlers, the last-resort handler and the type of
    ``sys.stderr``). A program may add a handler between calls, or point one at a stream
    whose ``write`` is Python code, or patch a method of the logger for a call; a graph
    that read what it writes first, or made a record in the patch's place, must not run
    then. Not traced, or a logger TorchDynamo found nowhere it can guard, False."""
    guarded = False
    comptime(_decide_log_chain_guarded)
    return guarded


def _decide_log_chain_guarded(context) -> None:
    trace_decisions.decide_in_trace(
        context, "guarded", ("logger", "method_name"), _guard_on_the_log_chain, read=lambda variable: variable
    )


def _guard_on_the_log_chain(translator, variable, method_variable) -> bool:
    from graphmend.torch_adapter import guards as dynamo
    from graphmend.torch_adapter.guards import attribute_source, module_source

    logger = getattr(variable, "value", None)
    source = getattr(variable, "source", None)
    if source is None or not isinstance(logger, logging.Logger):
        return False
    guards = [(attribute_source(module_source("logging"), "_logRecordFactory"), dynamo.IDENTITY)]
    # A method replaced on the logger now makes the call keep its break, right whatever
    # later calls find; one not replaced now is guarded on staying so.
    for name in dict.fromkeys((*_REPRODUCED_LOGGER_METHODS, method_variable.as_python_constant())):
        if name not in vars(logger):
            guards.append((source, dynamo.absent_from_instance_dict(name)))
    handled = False
    for depth, current in enumerate(_loggers_reached(logger)):
        if depth:
            source = attribute_source(source, "parent")
            guards.append((source, dynamo.IDENTITY))
        handlers = attribute_source(source, "handlers")
        guards += [(attribute_source(source, "filters"), dynamo.LENGTH),
                   (handlers, dynamo.LENGTH)]
        for index, handler in enumerate(current.handlers):
            handled = True
            each = dynamo.list_item_source(handlers, index)
            guards += [*_decided_by_type(each, handler, dynamo),
                       (attribute_source(each, "filters"), dynamo.LENGTH)]
            if "stream" in vars(handler):
                guards += _decided_by_type(attribute_source(each, "stream"), handler.stream, dynamo)
        guards.append((attribute_source(source, "propagate"), dynamo.CONSTANT))
    if not handled:
        guards += [(attribute_source(module_source("logging"), "lastResort"), dynamo.IDENTITY),
                   (attribute_source(module_source("sys"), "stderr"), dynamo.TYPE)]
    for guarded in guards:
        dynamo.install_guards(guarded)
    return True


def _decided_by_type(source, thing, dynamo) -> list:
    """Guards that keep true what ``_only_writes`` decided on a handler or its stream:
    its type and whether the object itself carries the output-only mark. A program (or
    pytest's log capture) that adds a new handler of the same kind for each call reuses
    the graph; guarding on the handler's identity recompiled every call, where the
    original, breaking at the call, compiled once."""
    if OUTPUT_ONLY_MARK in getattr(thing, "__dict__", {}):
        return [(source, dynamo.IDENTITY)]
    guards = [(source, dynamo.TYPE)]
    if hasattr(thing, "__dict__"):
        guards.append((source, dynamo.absent_from_instance_dict(OUTPUT_ONLY_MARK)))
    return guards


def warn_in_graph(location: tuple, args: tuple, kwargs: dict):
    """``warnings.warn`` at ``location`` inside the graph: ``()``, or ``(args, kwargs)``
    to call it with eagerly."""
    if not _warning_display_guarded():
        return args, kwargs
    return _record(_WARNING, None, location, args, kwargs)


def _warning_display_guarded() -> bool:
    """While traced: whether the trace is now guarded on what decides the warning's
    place in the graph (``_why_not_exact_warning``), which a program may replace between
    calls: ``warnings.showwarning`` (its identity: a Python function's type says nothing
    of what it does), the type of ``sys.stderr``, and the module of the function that
    shows warnings by default (``warnings._showwarnmsg_impl``); not traced, False.

    The latter is guarded on by its module alone: ``catch_warnings(record=True)`` makes
    it a new list's ``append`` each time, and TorchDynamo drops a graph guarded on an
    object once the object is freed (a graph compiled on every call, where the original
    compiled once). Its module is all the decision reads of it."""
    guarded = False
    comptime(_decide_warning_display_guarded)
    return guarded


def _decide_warning_display_guarded(context) -> None:
    trace_decisions.decide_in_trace(context, "guarded", (), _guard_on_the_warning_display)


def _is_a_disable_wrapper(function) -> bool:
    code = disable_wrapper_code()
    return (
        code is not None
        and isinstance(function, types.FunctionType)
        and function.__code__ is code
        and getattr(function, "_torchdynamo_disable", False) is True
    )


def _guard_on_the_warning_display(translator) -> bool:
    from graphmend.torch_adapter import guards as dynamo
    from graphmend.torch_adapter.guards import attribute_source, install_guards

    module = dynamo.module_source("warnings")
    shown = attribute_source(module, "showwarning")
    if _is_a_disable_wrapper(warnings.showwarning):
        # Every function with this code is a ``torch._dynamo.disable`` wrapper, of which
        # the decision reads no more (``_opaque_to_tracing``): guarded on the code, a
        # recorder made anew for each call (a test's ``catch_warnings`` that sets its own
        # ``showwarning``) keeps the graph, where a guard on the function dropped it once
        # the function was freed, and the frame compiled again on every call, recording
        # its breaks each time (the original compiled once).
        install_guards((attribute_source(shown, "__code__"), dynamo.IDENTITY))
        install_guards((attribute_source(shown, "_torchdynamo_disable"), dynamo.CONSTANT))
    else:
        install_guards((shown, dynamo.IDENTITY))
    install_guards((attribute_source(dynamo.module_source("sys"), "stderr"), dynamo.TYPE))
    display = attribute_source(attribute_source(module, "_showwarnmsg_impl"), "__module__")
    install_guards((display, dynamo.CONSTANT))
    return True


# Code that an earlier ``graphmend fix`` wrote into users' files calls these three,
# and ``flush_pending_effects`` on its eager path; what the graph cannot hold is
# performed at the call, outside the graph.

@run_outside_dynamo
def _perform_eagerly(kind: str, target, detail: tuple, args: tuple, kwargs: dict) -> None:
    perform(kind, target, detail, args, kwargs)


def defer_print(args: tuple, kwargs: dict) -> None:
    if print_in_graph(args, kwargs) is not _IN_GRAPH:
        _perform_eagerly(_PRINT, None, (), args, kwargs)


def defer_log(logger, method_name: str, level, location: tuple, args: tuple, kwargs: dict) -> None:
    if log_in_graph(logger, method_name, level, location, args, kwargs) is not _IN_GRAPH:
        if level is None:
            _perform_eagerly(_LOG_METHOD, logger, (method_name,), args, kwargs)
        else:
            _perform_eagerly(_LOG_RECORD, logger, (level, location), args, kwargs)


def defer_warning(location: tuple, args: tuple, kwargs: dict) -> None:
    if warn_in_graph(location, args, kwargs) is not _IN_GRAPH:
        _perform_eagerly(_WARNING, None, location, args, kwargs)


def flush_pending_effects() -> None:
    """Nothing is ever pending: effects happen at their call, inside or outside a graph."""


def pending_effect_count() -> int:
    """Always 0 (see ``flush_pending_effects``)."""
    return 0


def perform(kind: str, target, detail: tuple, args: tuple, kwargs: dict) -> None:
    """Do what the original call did."""
    if kind == _PRINT:
        if isinstance(target, str):
            target = getattr(sys, target)
        if target is not None:
            kwargs = {**kwargs, "file": target}
        print(*args, **kwargs)
    elif kind == _LOG_RECORD:
        level, location = detail
        _emit_log_record(target, level, location, args, kwargs)
    elif kind == _LOG_METHOD:
        (method_name,) = detail
        getattr(target, method_name)(*args, **kwargs)
    elif kind == _WARNING:
        _emit_warning(detail, args, kwargs)


def _source_file(module_name: str, fallback: str) -> str:
    """The file a module's code was compiled from, as ``co_filename`` would name it."""
    module = sys.modules.get(module_name)
    return getattr(module, "__file__", None) or fallback


def _emit_log_record(logger: logging.Logger, level, location: tuple, args: tuple, kwargs: dict):
    """Do what ``Logger._log`` does, with the caller location fixed at the original call."""
    if level == "log":
        level, *args = args
        args = tuple(args)
    if not isinstance(level, int):
        if logging.raiseExceptions:
            raise TypeError("level must be an integer")
        return
    if not logger.isEnabledFor(level):
        return
    msg, *msg_args = args
    module_name, lineno, function_name, fallback_file = location
    pathname = _source_file(module_name, fallback_file)
    record = logger.makeRecord(
        logger.name,
        level,
        pathname,
        lineno,
        msg,
        tuple(msg_args),
        None,
        function_name,
        kwargs.get("extra"),
        None,
    )
    logger.handle(record)


def _emit_warning(location: tuple, args: tuple, kwargs: dict) -> None:
    """Do what ``warnings.warn`` does for a call at ``location`` with stacklevel 1."""
    module_name, lineno, fallback_file = location
    filename = _source_file(module_name, fallback_file)
    message, *rest = args if args else (kwargs.get("message"),)
    category = rest[0] if rest else kwargs.get("category")
    source = kwargs.get("source")
    if isinstance(message, Warning):
        category = message.__class__
    if category is None:
        category = UserWarning
    if not (isinstance(category, type) and issubclass(category, Warning)):
        raise TypeError(
            f"category must be a Warning subclass, not '{type(category).__name__}'"
        )
    module = sys.modules.get(module_name)
    module_globals = vars(module) if module is not None else {"__name__": module_name}
    registry = module_globals.setdefault("__warningregistry__", {})
    # No module_globals, as warnings.warn itself does: with them, warn_explicit reads
    # the module's whole source through its loader on every call, shown or not.
    warnings.warn_explicit(message, category, filename, lineno, module_name, registry, None, source)
