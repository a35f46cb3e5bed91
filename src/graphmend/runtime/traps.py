"""Graph-native validation guards and the restoration of the exceptions they stand for.

A lowered guard calls the ordered operator ``graphmend::fail_unless(condition,
message number)``; the message (numbered while tracing) carries a marker naming a
*trap site*: the exception class of the original ``raise`` (the object itself, found
while tracing) and the file, line and function of that ``raise``. When the condition
is false the operator raises the original class with the original message, from a
frame that carries the user's file, line and function name, inside the graph, so the
exception leaves the compiled frame as itself. The compiled-call boundary still maps a
RuntimeError with such a message (a graph compiled with ``torch._assert_async`` by an
earlier version, or a site not known in this process).

Whether a guard may be lowered at all is decided while tracing, by
``trap_lowerable`` (which TorchDynamo calls for real and folds to a constant): the
static rule cannot see the callers of a function, nor what the traced region did
before the guard. Each condition it checks is a function below returning the
reason it fails; a refused guard keeps the original ``if`` (and its graph break).
Where TorchDynamo could not resume after the original's break (in a loop) it ran the
frame eagerly (``original_break_keeps_frame_compiled``): the claim is then one whose
frame ran eagerly, as every guard's is (after a failed guard, TorchDynamo runs the
rest of the frame eagerly), and the whole-trace checks decide it (``claims``).
A lowered guard is a claim on its break (``graphmend.runtime.claims``): facts found
later in the same trace (an op that fails while traced, a graph that records
autograd) make TorchDynamo trace the frame again with the original ``if`` kept.
"""

from __future__ import annotations

import builtins
import dis
import os
import sys
import types
from dataclasses import dataclass

import torch

from graphmend.core.legality import failed
from graphmend.runtime import claims, graph_inspection, operators, restored_frames, trace_decisions
from graphmend.runtime.claims import original_break_keeps_frame_compiled
from graphmend.runtime.store import store
from graphmend.runtime.whole_trace_conditions import (
    frame_was_not_given_up_while_tracing,
    no_later_op_failed_while_tracing,
)
from graphmend.torch_adapter import ops
from graphmend.torch_adapter.tracing import (
    comptime,
    frame_callback_unset,
    frame_code_of,
    translator_of,
)

TRAP_MARKER = "[graphmend-trap "
_FIELD_SEPARATOR = "|"


class TrapFailure(RuntimeError):
    """Raised in place of an original exception whose class could not be found again."""


def trap_message(module_name: str, exception_path: str, message) -> str:
    """An assertion message naming the class by module and dotted path.

    Kept for code rewritten by earlier versions; rewritten code now names a trap site
    (``site_message``), which holds the class object itself."""
    has_message = "0" if message is None else "1"
    text = "" if message is None else str(message)
    return (
        f"{TRAP_MARKER}{module_name}{_FIELD_SEPARATOR}{exception_path}"
        f"{_FIELD_SEPARATOR}{has_message}] {text}"
    )


def equal_as_tensor(left, right):
    """``torch.equal(left, right)`` as a 0-d bool tensor, with no data-dependent Python bool.

    Shapes are static while tracing, so checking them first costs no graph break and
    keeps broadcasting from calling a [4] and a [1, 4] tensor equal. Like
    ``torch.equal``, values of different dtypes compare after promotion. Anything
    else (different devices, non-tensors) goes to ``torch.equal`` itself.
    """
    if not (isinstance(left, torch.Tensor) and isinstance(right, torch.Tensor)) or (
        left.device != right.device
    ):
        return torch.equal(left, right)
    if left.shape != right.shape:
        return torch.zeros((), dtype=torch.bool, device=left.device)
    return (left == right).all()


def _parse(error_text: str):
    start = error_text.find(TRAP_MARKER)
    if start < 0:
        return None
    rest = error_text[start + len(TRAP_MARKER) :]
    header, separator, message = rest.partition("] ")
    if not separator:
        header, _, message = rest.partition("]")
    module_name, _, rest_of_header = header.partition(_FIELD_SEPARATOR)
    exception_path, _, has_message = rest_of_header.partition(_FIELD_SEPARATOR)
    return module_name, exception_path, message if has_message == "1" else None


def _resolve(module_name: str, exception_path: str):
    module = sys.modules.get(module_name)
    namespace = vars(module) if module is not None else {}
    head, *attributes = exception_path.split(".")
    if head in namespace:
        value = namespace[head]
    elif hasattr(builtins, head):
        value = getattr(builtins, head)
    else:
        return None
    for attribute in attributes:
        value = getattr(value, attribute, None)
    if isinstance(value, type) and issubclass(value, BaseException):
        return value
    return None


def raise_original_for_trap_failure(error: BaseException) -> None:
    """Raise the original exception if ``error`` is a failed lowered guard; else return.

    Called in the boundary's ``except RuntimeError`` block, for an assertion of a graph
    compiled before guards failed inside the graph (``fail_unless``) or whose site was
    not known there. The exception is raised from a frame with the user's file, line
    and function name; its ``__context__`` is what the user's ``raise`` would have
    chained (the exception being handled around the compiled call, which ``error``
    chained when it was raised), not ``error``.
    """
    _raise_for_message(str(error), error.__context__, error)


def _raise_for_message(text: str, context, error: BaseException | None) -> None:
    """Raise the original exception a failed guard's message names; return if it names
    none. ``context``: what the user's ``raise`` would have chained."""
    site_and_message = _parse_site(text)
    if site_and_message is not None:
        site, message = site_and_message
        if message == RENDERED_MESSAGE:
            message = getattr(store.rendered, "message", None)
            store.rendered.message = None
            if message is None:
                raise TrapFailure(text) from error
        # Made in the call, not held in a local: this frame stays reachable from the
        # raising frame (its ``f_back``), which the exception's traceback holds.
        _raise_at_site(
            site.exception_class() if message is None else site.exception_class(message), site, context, message
        )
    parsed = _parse(text)
    if parsed is None:
        return
    module_name, exception_path, message = parsed
    exception_class = _resolve(module_name, exception_path)
    if exception_class is None:
        raise TrapFailure(message) from error
    if message is not None:
        raise exception_class(message) from None
    raise exception_class() from None


# The message of a lowered check whose text holds tensor values: the graph renders it
# when the check fails (``checks.check_message``), just before the assertion fails.
RENDERED_MESSAGE = "<rendered when the check failed>"


def render_failed_message(text: str) -> None:
    store.rendered.message = text


def guard_holds(value, expected_truth: bool):
    """Whether ``bool(value) == expected_truth``, as a 0-d bool tensor when ``value`` is one.

    Only facts TorchDynamo knows statically (type, element count, dtype) pick the
    form, so this costs no graph break; a value that is not a one-element tensor
    is tested with ``bool()`` exactly as the original ``if`` did. Where it tests the
    branch of a Where selection, where the original's graph ended, the selection's
    claim notes it (``claims.note_test_evaluated``).
    """
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        if torch.compiler.is_compiling():
            comptime(_note_test_evaluated)
        truth = value if value.dtype == torch.bool else value != 0
        truth = truth.reshape(())
        return truth if expected_truth else torch.logical_not(truth)
    return bool(value) == expected_truth


def _note_test_evaluated(context) -> None:
    claims.note_test_evaluated(translator_of(context))


def assert_guard(holds, message: str) -> None:
    """Fail with ``message`` unless ``holds``: inside the graph when ``holds`` is a tensor.

    The check always runs on the CPU: on CUDA a failed device-side assertion is fatal
    to the process (every later CUDA call fails), where the original raised an
    exception the program could catch. Copying the truth value to the host is the
    synchronisation the original's ``if`` paid too."""
    if isinstance(holds, torch.Tensor):
        if holds.device.type != "cpu":
            holds = holds.cpu()
        number = _message_number(message)
        if number < 0:
            ops.assert_async(holds, message)  # the boundary restores it
        else:
            torch.ops.graphmend.fail_unless(holds, number)
    elif not holds:
        raise RuntimeError(message)


def _message_number(message: str) -> int:
    """The number of a guard's message (a constant of the trace): the graph names the
    message by number, so its code shows no marker text (a traceback prints that line)."""
    number = -1
    comptime(_decide_message_number)
    return number


def _decide_message_number(context) -> None:
    store.trap_messages.decide(context, "message")


def _fail_unless(holds: torch.Tensor, message: int) -> None:
    """Raise the original exception where the graph reaches a guard that fails.

    Raised inside the graph, the user's exception leaves the compiled frame as itself:
    an eager caller's ``try`` between the graph and the compiled-call boundary sees
    what the original raised (a graph is reused under callers its trace never saw)."""
    if not bool(holds):
        if not 0 <= message < len(store.trap_messages.values):
            raise TrapFailure(f"a lowered guard failed; its message {message} is not known in this process")
        text = store.trap_messages.values[message]
        _raise_for_message(text, sys.exc_info()[1], None)
        raise RuntimeError(text)


def _fail_unless_while_tracing(holds: torch.Tensor, message: int) -> None:
    return None


# Ordered: kept although it returns nothing, and never moved past an output effect.
fail_unless = operators.define(
    "fail_unless(Tensor holds, int message) -> ()", _fail_unless, _fail_unless_while_tracing, ordered=True
)


def _combine(values, deciding_truth: bool, combine):
    """Fold truth values: a plain bool equal to ``deciding_truth`` decides at once (as
    Python's short-circuit would); tensor truths are combined inside the graph."""
    tensors = []
    for value in values:
        truth = guard_holds(value, True)
        if isinstance(truth, torch.Tensor):
            tensors.append(truth)
        elif truth == deciding_truth:
            return deciding_truth
    if not tensors:
        return not deciding_truth
    combined = tensors[0]
    for truth in tensors[1:]:
        combined = combine(combined, truth)
    return combined


def all_of(*values):
    """``v1 and v2 and ...`` as a truth value, every operand evaluated (they are safe)."""
    return _combine(values, False, torch.logical_and)


def any_of(*values):
    """``v1 or v2 or ...`` as a truth value, every operand evaluated (they are safe)."""
    return _combine(values, True, torch.logical_or)


# ---------------------------------------------------------------------------
# Trap sites: what the boundary needs to raise the original exception exactly.

SITE_MARKER = "[graphmend-trap-site "
_TORCH_DIRECTORY = os.path.dirname(torch.__file__) + os.sep
_RUNTIME_DIRECTORY = os.path.dirname(os.path.abspath(__file__))
_RAISED_NAME = "__graphmend_restored_exception__"


@dataclass(frozen=True)
class TrapSite:
    """The ``raise`` a lowered guard stands for, and the frames it was raised through:
    ``places``, from the frame TorchDynamo compiles (outermost) to the ``raise``."""

    exception_class: type
    filename: str
    line: int
    function_name: str
    places: tuple[restored_frames.FramePlace, ...] = ()
    # A lowered check call: the known helper, and whether the condition the original
    # passed it was a tensor ("tensor") or a Python bool ("bool").
    helper: object = None
    condition_kind: str | None = None


def _register_site(site: TrapSite) -> int:
    with store.trap_sites_lock:
        number = store.trap_site_numbers.get(site)
        if number is None:
            number = len(store.trap_sites)
            store.trap_sites.append(site)
            store.trap_site_numbers[site] = number
        return number


def site_message(site_number: int, line: int, function_name: str, message) -> str:
    """The assertion message for a lowered guard (built while tracing, so it is a constant).

    Besides the site's number it names the site's line and function: a graph compiled
    in another process (a cache of compiled graphs) whose numbering differs is then
    not mistaken for another site's failure. (TorchDynamo traces this function, so it
    must not read the site list, which grows while tracing.)"""
    has_message = "0" if message is None else "1"
    text = "" if message is None else str(message)
    return (
        f"{SITE_MARKER}{site_number}{_FIELD_SEPARATOR}{line}{_FIELD_SEPARATOR}"
        f"{function_name}{_FIELD_SEPARATOR}{has_message}] {text}"
    )


def _parse_site(error_text: str):
    start = error_text.find(SITE_MARKER)
    if start < 0:
        return None
    header, separator, message = error_text[start + len(SITE_MARKER) :].partition("] ")
    fields = header.split(_FIELD_SEPARATOR)
    if not separator or len(fields) != 4 or not fields[0].isdigit() or not fields[1].isdigit():
        return None
    number, line, function_name, has_message = fields
    if int(number) >= len(store.trap_sites):
        return None
    site = store.trap_sites[int(number)]
    if site.line != int(line) or site.function_name != function_name:
        return None
    return site, (message if has_message == "1" else None)


def _raise_code(site: TrapSite) -> types.CodeType:
    """A code object that raises ``__graphmend_restored_exception__`` from the user's
    line, in a frame named after the user's function (a site whose frames were not
    read while tracing)."""
    key = (site.filename, site.line, site.function_name)
    code = store.raise_codes.get(key)
    if code is None:
        source = "\n" * (max(site.line, 1) - 1) + f"raise {_RAISED_NAME}\n"
        code = compile(source, site.filename, "exec", dont_inherit=True)
        names = {"co_name": site.function_name}
        if hasattr(code, "co_qualname"):  # Python 3.11 and later
            names["co_qualname"] = site.function_name
        code = code.replace(**names)
        store.raise_codes[key] = code
    return code


def _raise_at_site(exception: BaseException, site: TrapSite, context, message=None) -> None:
    """Raise ``exception`` from the user's frames. No frame on the way keeps it in a
    variable: the traceback holds the raising frames and, through ``f_back``, this one,
    and a cycle would keep the exception and every frame's values alive until the
    garbage collector runs, where the original's are freed as soon as it is dropped.

    A lowered check's site calls its helper instead, with a failing condition of the
    kind the original passed, the message and the error type: the helper raises from
    its own frames (and torch's) as it did eagerly."""
    try:
        if site.places and site.helper is not None and message is not None:
            _call_the_helper(site, message)
        if site.places:
            restored_frames.raise_from(exception, site.places)
        namespace = {"__builtins__": builtins, _RAISED_NAME: exception}
        try:
            exec(_raise_code(site), namespace)  # noqa: S102
        finally:
            del namespace[_RAISED_NAME]
    except BaseException as restored:
        # The raise inside the boundary's handler chained the RuntimeError; the
        # user's raise chained only what was being handled around the call.
        restored.__context__ = context
        restored.__suppress_context__ = False
        del exception
        raise


def _call_the_helper(site: TrapSite, message: str) -> None:
    """Returns only where the helper did not raise (its checks disabled since). The
    helper runs outside TorchDynamo: the boundary may run inside a graph, or under a
    compiled caller, whose frame callback would trace it."""
    condition = torch.tensor(False) if site.condition_kind == "tensor" else False
    with frame_callback_unset():
        restored_frames.call_from(site.places, site.helper, (condition, message, site.exception_class))


# ---------------------------------------------------------------------------
# Legality while tracing. Each condition returns None when it holds, or the reason.


def raised_class_is_exception(exception_class) -> str | None:
    """`raise some_instance` re-raises that very object, and `raise factory(msg)` raises
    whatever the call returns: only an exception class can be rebuilt at the boundary."""
    if not (isinstance(exception_class, type) and issubclass(exception_class, BaseException)):
        return failed("T201", f"the raised `{type(exception_class).__name__}` is not an exception class")
    return None


def no_handler_in_traced_frames(translator) -> str | None:
    """A failed assertion aborts the whole compiled region: a `try` or `with` around the
    guard in any traced frame (the function or a caller inlined into the same graph)
    would have caught, cleaned up after or suppressed the original exception."""
    frame = translator
    while frame is not None:
        instruction = frame.current_instruction
        if instruction is not None and getattr(instruction, "exn_tab_entry", None) is not None:
            return failed("T202", f"`{frame.f_code.co_name}` calls it inside a `try` or `with` block")
        frame = frame.parent
    return None


def _has_active_handler(frame: types.FrameType) -> bool:
    # ``store.handler_ranges`` is keyed by ``id``: a code object hashes its constants,
    # and code that TorchDynamo generates (resume functions) can hold unhashable ones.
    # The code is kept beside its ranges, so the id cannot be reused while the entry exists.
    code = frame.f_code
    known = store.handler_ranges.get(id(code))
    if known is None or known[0] is not code:
        ranges = tuple((entry.start, entry.end) for entry in dis.Bytecode(code).exception_entries)
        known = store.handler_ranges[id(code)] = (code, ranges)
    return any(start <= frame.f_lasti < end for start, end in known[1])


def no_handler_in_eager_callers() -> str | None:
    """The traced frame may itself be called from Python running eagerly inside the
    compiled call (a caller TorchDynamo skipped or broke out of): a failed guard's
    exception passes through those frames before the boundary gives it the user's
    frames, so none of them may be inside a `try` or `with`; and a compiled-call
    boundary must be there (``compiled_calls``)."""
    from graphmend.runtime.compiled_calls import is_boundary

    frame = sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename
        if is_boundary(frame):
            return None
        if not filename.startswith(_TORCH_DIRECTORY) and os.path.dirname(filename) != _RUNTIME_DIRECTORY:
            if _has_active_handler(frame):
                return failed("T203", f"`{frame.f_code.co_name}` calls it eagerly inside a `try` or `with` block")
        frame = frame.f_back
    return failed("T203", "no compiled-call boundary (a wrapped `torch.compile`) would restore the exception")


def no_input_mutated_before_guard(translator) -> str | None:
    """Under a functionalizing backend (aot_eager, inductor) in-place writes to a graph
    input are applied after the graph runs, so a failed assertion would lose a write
    the original made before raising."""
    written = graph_inspection.input_written_in_place_so_far(translator)
    if written is not None:
        return failed("T204", f"the input `{written}` is written in place before the guard")
    return None


def no_pending_side_effect_before_guard(translator) -> str | None:
    """Writes to existing Python objects (attributes, lists, dicts, globals, cells) are
    replayed after the graph runs: a failed assertion would drop those the original
    made before raising. graphmend's own deferred effects are not the user's writes."""
    side_effects = translator.output.side_effects
    for variable in side_effects._get_modified_vars():
        source = getattr(variable, "source", None)
        if source is None:
            continue  # an object created inside the region: nobody else sees it
        name = _source_name(source)
        if "PENDING_EFFECTS" in name:
            continue
        if _stores_put_back_what_is_there(side_effects, variable):
            continue
        return failed("T205", f"`{name}` is changed before the guard")
    return None


_MISSING = object()


def _stores_put_back_what_is_there(side_effects, variable) -> bool:
    """Whether every pending write to an existing object's attributes stores the very
    constant the attribute holds now (set, then reset in a ``finally``: transformers'
    output collector). Dropping such writes leaves the object as the original left it.

    The trace is guarded on each such attribute holding that constant when a call
    starts: traced code that only writes it reads no value TorchDynamo would guard on,
    and a program that changes it between calls would otherwise run a graph whose
    failing guard drops a write that is no longer a no-op."""
    from graphmend import torch_adapter
    from graphmend.torch_adapter import guards
    from graphmend.torch_adapter.tracing import UserDefinedObjectVariable

    if not isinstance(variable, UserDefinedObjectVariable):
        return False
    try:
        if torch_adapter.contents_modified(side_effects, variable):
            return False
        stores = side_effects.store_attr_mutations.get(variable)
        if not stores:
            return False
        for attribute, stored in stores.items():
            if not stored.is_python_constant():
                return False
            value = stored.as_python_constant()
            current = getattr(variable.value, attribute, _MISSING)
            if type(current) is not type(value) or not (current is value or current == value):
                return False
            if not isinstance(value, (type(None), bool, int, float, str)):
                return False
        for attribute in stores:
            guards.install_guards((guards.attribute_source(variable.source, attribute), guards.CONSTANT))
    except Exception:  # noqa: BLE001 - TorchDynamo internals changed: count it as a change
        return False
    return True


def _source_name(source) -> str:
    """A readable name for where TorchDynamo found an object.

    Not every source has one: the cell of a closure variable that a resumed frame
    receives (``LocalCellSource``) raises NotImplementedError from ``name``, which
    made compiling fail with InternalTorchDynamoError. Such a cell is still a change
    the original made before raising, so it is named, never skipped."""
    local_name = getattr(source, "local_name", None)
    try:
        name = source.name
        name = name if isinstance(name, str) else name()
    except Exception:  # noqa: BLE001 - any source TorchDynamo cannot name
        name = None
    if isinstance(name, str):
        return name
    if isinstance(local_name, str):
        return f"{local_name} (a closure cell)"
    return type(source).__name__


# The original's ``raise``, traced once (when the guard first fails), has no handler in
# the compiled region: TorchDynamo gives up on the frame it resumed at the guard and
# runs it eagerly on every later call.
_AFTER_A_FAILED_GUARD = "once the guard fails, TorchDynamo runs the rest of the original frame eagerly"


def trap_lowerable(exception_class, line: int, function_name: str) -> bool:
    """Whether the guard being traced may become a graph assertion.

    Decided while TorchDynamo traces this function (``trace_decisions.decide_in_trace``), as a
    constant of the trace: no guard on it (the answer depends only on the code traced,
    and on the eager callers checked by ``no_handler_in_eager_callers``). Not tracing,
    the answer is False: the original ``if`` runs.
    """
    lowerable = False
    comptime(_decide_lowerable)
    return lowerable


def _decide_lowerable(context) -> None:
    trace_decisions.decide_in_trace(
        context, "lowerable", ("exception_class", "line", "function_name"),
        lambda tracer, *arguments: _lowerable(tracer.parent, *arguments),
    )


def _lowerable(translator, exception_class, line: int, function_name: str) -> bool:
    """``trap_lowerable``'s answer; ``translator``: the frame of the guard's ``if``."""
    if translator is None:
        return False
    # Keyed by the line of the guard's ``if``, where the original breaks (``line`` is
    # the ``raise``'s, which names the trap site).
    site = (translator.f_code.co_filename, translator.lineno)
    code = frame_code_of(translator)
    reason = (
        raised_class_is_exception(exception_class)
        or no_later_op_failed_while_tracing(site)
        or frame_was_not_given_up_while_tracing(site, code)
        or claims.refused_reason(site, code)
        or claims.trace_checks_unavailable()
        or claims.not_inside_inference_mode(translator)
        or no_handler_in_traced_frames(translator)
        or no_handler_in_eager_callers()
        or no_input_mutated_before_guard(translator)
        or no_pending_side_effect_before_guard(translator)
    )
    if reason is None:
        # Where the original's break was in a loop, TorchDynamo ran the whole frame
        # eagerly; after a failed guard it runs the rest so. Either way the claim is
        # checked against the whole trace as one whose rest ran eagerly.
        rest_ran_eagerly = original_break_keeps_frame_compiled(translator) or _AFTER_A_FAILED_GUARD
        claims.record_claim(translator, site, rest_ran_eagerly=rest_ran_eagerly, kind=claims.GUARD)
        return True
    store.trace_time_declines[site] = reason
    return False


def trap_site(exception_class, line: int, function_name: str) -> int:
    """The number of the trap site for the guard being traced (a constant of the trace)."""
    number = -1
    comptime(_decide_site)
    return number


def _decide_site(context) -> None:
    trace_decisions.decide_in_trace(context, "number", ("exception_class", "line", "function_name"), site_number_in_trace)


def site_number_in_trace(
    tracer, exception_class, line: int, function_name: str, helper=None, condition_kind: str | None = None
) -> int:
    """The number of the trap site in the user's frame that called the traced runtime
    function ``tracer``; ``helper`` and ``condition_kind`` for a lowered check call
    (see ``TrapSite``), whose innermost place is the call."""
    user = tracer.parent
    if user is None:
        return _register_site(TrapSite(exception_class, "<unknown>", line, function_name))
    if helper is None or condition_kind is None:
        helper = condition_kind = None
        innermost = restored_frames.raise_in(user.f_code, line)
    else:
        innermost = restored_frames.call_in(user.f_code, line)
    places = restored_frames.callers_while_tracing(user) + (innermost,)
    site = TrapSite(exception_class, user.f_code.co_filename, line, function_name, places, helper, condition_kind)
    return _register_site(site)
