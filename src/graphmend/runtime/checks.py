"""Validation helpers whose contract graphmend knows, lowered like guards (``traps``).

A library's check helper (transformers' ``torch_compilable_check(cond, msg,
error_type)``) raises ``error_type(msg)`` when ``cond`` is false, eagerly; traced by
TorchDynamo it breaks the graph (``torch._check_tensor_all`` reads the value on the
host) or, under ``fullgraph=True``, fails, and a failing check then raises
TorchDynamo's RuntimeError instead of ``error_type``. A lowered call asserts the
condition inside the graph with a trap site naming ``error_type`` and ``msg``, so the
compiled-call boundary raises exactly what the eager helper raises.

The rewrite recognises a call by the helper's name; whether the callee really is a
known helper is decided while tracing, by identity with the function its module
holds and by its signature (``check_lowerable``). An unknown callee keeps the
original call (and its break).
"""

from __future__ import annotations

import functools
import inspect
import operator
import sys

import torch

from graphmend.core.legality import failed
from graphmend.core.runtime_names import KNOWN_CHECK_FUNCTIONS, KNOWN_CHECK_NAMES, CheckFunction  # noqa: F401
from graphmend.runtime import claims, operators, trace_decisions, traps
from graphmend.runtime.store import store
from graphmend.torch_adapter.tracing import (
    comptime,
    eval_frame_callback,
    run_outside_dynamo,
    translator_of,
)


def known_check_function(callee) -> CheckFunction | None:
    """The known helper ``callee`` is (the very function its module holds, with the
    expected signature), or None. Never imports a module."""
    for check in KNOWN_CHECK_FUNCTIONS:
        module = sys.modules.get(check.module)
        if module is None or getattr(module, check.name, None) is not callee:
            continue
        try:
            parameters = inspect.signature(callee).parameters
        except (TypeError, ValueError):
            continue
        names = tuple(parameters)
        if names != check.parameters:
            continue
        if parameters[check.parameters[-1]].default is not check.default_error_type:
            continue
        return check
    return None


# ---------------------------------------------------------------------------
# Legality while tracing. Each condition returns None when it holds, or the reason.


def callee_is_known_check(callee, check: CheckFunction | None) -> str | None:
    """The rewrite saw only a name: the function called must be the known helper
    (``check``, from ``known_check_function(callee)``)."""
    if check is None:
        name = getattr(callee, "__qualname__", type(callee).__name__)
        return failed("T206", f"`{name}` is not a validation helper graphmend knows the contract of")
    return None


def checks_enabled(check: CheckFunction) -> str | None:
    """A disabled helper checks nothing (transformers: TRANSFORMERS_DISABLE_TORCH_CHECK=1)."""
    if check.disabled():
        return failed("T207", "the helper's checks are disabled in this process")
    return None


def error_type_raisable(error_type) -> str | None:
    """``torch._check_with`` raises an AssertionError of its own for an ``error_type``
    that is not an Exception class, or that is a Warning."""
    if not (isinstance(error_type, type) and issubclass(error_type, Exception)) or issubclass(
        error_type, Warning
    ):
        return failed("T209", f"`{error_type!r}` is not an Exception class the helper can raise")
    return None


def _resolved_error_type(check: CheckFunction | None, error_type):
    if error_type is None:
        return check.default_error_type if check is not None else None
    return error_type


def check_lowerable(callee, error_type, line: int, function_name: str, holes: tuple = ()) -> bool:
    """Whether the check call being traced may become a graph assertion (``error_type``
    None: the helper's default; ``holes``: the values of the message's f-string holes
    where some depend on tensor data). A constant of the trace; not tracing, False."""
    lowerable = False
    comptime(_decide_lowerable)
    return lowerable


def _decide_lowerable(context) -> None:
    try:
        translator = translator_of(context)
        holes = translator.symbolic_locals["holes"]
        reason = holes_renderable(holes)
    except Exception:  # noqa: BLE001 - TorchDynamo internals changed: keep the call
        return
    trace_decisions.decide_in_trace(
        context, "lowerable", ("callee", "error_type", "line", "function_name"),
        lambda tracer, *arguments: _lowerable(tracer.parent, *arguments, holes_reason=reason),
    )


def holes_renderable(holes) -> str | None:
    """A hole of the message is rendered when the check fails, from the tensor's value
    then: exactly as the f-string formats it only for a 0-d plain tensor (its number);
    any other value must be a constant of the trace, formatted while tracing."""
    from graphmend.torch_adapter.tracing import SymNodeVariable, TensorVariable

    for item in holes.unpack_var_sequence(None) if hasattr(holes, "unpack_var_sequence") else holes.items:
        if isinstance(item, TensorVariable):
            example = item.as_proxy().node.meta.get("example_value")
            if item.python_type() is not torch.Tensor or example is None or example.dim() != 0:
                return failed("T208", "a tensor in the message is not a 0-d plain tensor, whose text is its number")
        elif isinstance(item, SymNodeVariable) and item.python_type() is int:
            continue  # a size known only while running (a captured count): rendered as a 0-d tensor
        elif not item.is_python_constant():
            # A symbolic size (dynamic shapes) among them: not rendered yet.
            return failed("T208", "a value in the message is neither a 0-d tensor nor a constant of the trace")
    return None


def _lowerable(translator, callee, error_type, line: int, function_name: str, holes_reason=None) -> bool:
    if translator is None:
        return False
    site = (translator.f_code.co_filename, translator.lineno)
    check = known_check_function(callee)
    reason = callee_is_known_check(callee, check) or checks_enabled(check) or holes_reason
    error_type = _resolved_error_type(check, error_type)
    reason = reason or error_type_raisable(error_type)
    if reason is not None:
        store.trace_time_declines[site] = reason
        return False
    if not traps._lowerable(translator, error_type, line, function_name):
        return False
    claims.mark_check_lowered(translator, line, site)
    return True


def runs_eagerly(callee, *condition) -> bool:
    """While tracing, whether ``call_eagerly`` makes its call outside TorchDynamo:
    ``callee`` is a known helper, the trace may break (under ``fullgraph=True`` the
    original call's own error is kept), and the ``condition`` it checks, where the
    rewritten code passes it, is not a Python value of the trace. A constant of the
    trace; not tracing, False."""
    eagerly = False
    comptime(_decide_runs_eagerly)
    return eagerly


def _decide_runs_eagerly(context) -> None:
    try:
        from graphmend.torch_adapter.tracing import SymNodeVariable

        given = translator_of(context).symbolic_locals["condition"].items
        python_value = len(given) == 1 and (given[0].is_python_constant() or isinstance(given[0], SymNodeVariable))
    except Exception:  # noqa: BLE001 - TorchDynamo internals changed: decide by the callee alone
        python_value = False

    def decide(tracer, callee):
        user = trace_decisions.user_translator(tracer)
        check = known_check_function(callee)
        if check is None or check.disabled():
            return False  # a disabled helper's traced call checks nothing and keeps the graph whole
        if python_value:
            # condition_is_a_tensor: the helper traced checks a Python value while
            # tracing (``torch._check``), with no break; made eagerly, its call would
            # add one (a count kept a tensor, then refused, is a Python int again).
            return False
        if user is None:
            # Only graphmend's runtime is traced: TorchDynamo compiles
            # ``called_outside_torchdynamo`` as a frame of its own, called from a user
            # frame it runs eagerly, where it would compile the helper's frame too.
            return True
        root = user.output.root_tx
        return not (getattr(root, "one_graph", False) or getattr(root, "error_on_graph_break", False))

    trace_decisions.decide_in_trace(context, "eagerly", ("callee",), decide)


def called_outside_torchdynamo(callee) -> bool:
    """Whether the rewritten code makes a kept check call through ``call_eagerly``:
    while tracing, where ``runs_eagerly(callee)`` says so; not tracing, only for a known
    helper called where TorchDynamo would compile the helper's own frame (a frame it
    runs eagerly inside a compiled call). Code run with no compiled call around it makes
    the original call."""
    if torch.compiler.is_compiling():
        return runs_eagerly(callee)
    return known_check_function(callee) is not None and _torchdynamo_compiles_called_frames()


def _torchdynamo_compiles_called_frames() -> bool:
    """Whether TorchDynamo's frame callback is set in this thread (inside a compiled
    call, also in the frames it runs eagerly). Where torch no longer offers the query,
    the call is made outside TorchDynamo, which is exact under a compiled call."""
    try:
        callback = eval_frame_callback()
    except Exception:  # noqa: BLE001 - the private query changed: assume a compiled call
        return True
    return callback is not None and callback is not False


def _call(callee, *args, **kwargs):
    return callee(*args, **kwargs)


# Calls a known helper as eager code does, outside TorchDynamo (which breaks the graph
# at this call, as it does at the helper's own ``torch._check_tensor_all``): a failing
# check raises the helper's ``error_type`` and message, where the helper traced by
# TorchDynamo raises RuntimeError (a check raising ``IndexError``, which the program
# caught, became an uncaught RuntimeError). Also where TorchDynamo runs the caller's
# frame eagerly, it would compile the helper's own frame. Rewritten code calls it while
# tracing only when ``runs_eagerly(callee)``. ``operator.call`` (Python 3.11) is C
# code: a failing check's traceback shows the helper's frames and torch's wrapper,
# none of graphmend's.
call_eagerly = run_outside_dynamo(getattr(operator, "call", _call))


def eager_call_of(callee):
    """``callee`` called through ``call_eagerly``, with the call's own arguments."""
    return functools.partial(call_eagerly, callee)


def keeps_item_tensor(value, check_lines: tuple = ()) -> bool:
    """While tracing, whether ``value.item()`` may stay ``value`` for the checks at
    ``check_lines`` (original lines) that read it (``rules/trap/items.py``): a plain 0-d
    int64 or bool tensor, which compares with integers in int64's range and formats
    exactly as its Python int does (a narrower integer dtype could not hold the integer
    it is compared with); and a claim that stands only where one of those checks is
    lowered in the same graph (``whole_trace_conditions.items_stay_with_lowered_checks``). A constant of
    the trace; not tracing, False."""
    return (
        torch.compiler.is_compiling()
        and type(value) is torch.Tensor
        and value.dim() == 0
        and value.layout == torch.strided
        and value.dtype in (torch.int64, torch.bool)
        and _item_claimed(value, check_lines)
    )


def _item_claimed(value, check_lines: tuple) -> bool:
    claimed = False
    comptime(_decide_item_claimed)
    return claimed


def _decide_item_claimed(context) -> None:
    def claim(tracer, value, check_lines):
        claimed = claims.claim_item_for_checks(tracer, tuple(check_lines.as_python_constant()))
        if claimed:
            # What ``original_condition_kind`` reads: a comparison of this tensor with
            # integers was a Python bool in the original, where it was an int.
            try:
                value.as_proxy().node.meta[_KEPT_ITEM] = True
            except Exception:  # noqa: BLE001 - no node to mark: a failing check calls the helper with a tensor
                pass
        return claimed

    trace_decisions.decide_in_trace(context, "claimed", ("value", "check_lines"), claim, read=lambda variable: variable)


_KEPT_ITEM = "graphmend_kept_item"
_COMPARISONS = frozenset({operator.eq, operator.ne, operator.lt, operator.le, operator.gt, operator.ge})
_CONDITION_KIND = "_graphmend_check_condition_kind"


def original_condition_kind(variable) -> str | None:
    """While tracing, what the condition a check call is given was in the original:
    "tensor", "bool", or None where that is not known (a callable condition). A kept
    ``.item()`` is a tensor here, an int there: its comparison with integers was a bool."""
    from graphmend.torch_adapter.tracing import SymNodeVariable, TensorVariable

    if isinstance(variable, TensorVariable):
        node = variable.as_proxy().node
        tensors = [
            argument for argument in node.args
            if isinstance(argument, torch.fx.Node) and isinstance(argument.meta.get("example_value"), torch.Tensor)
        ]
        if node.target in _COMPARISONS and tensors and all(argument.meta.get(_KEPT_ITEM) for argument in tensors):
            return "bool"
        return "tensor"
    if isinstance(variable, SymNodeVariable) or (variable.is_python_constant() and type(variable.as_python_constant()) is bool):
        return "bool"
    return None


def _note_condition_kind(cond) -> None:
    comptime(_decide_condition_kind)


def _decide_condition_kind(context) -> None:
    try:
        translator = translator_of(context)
        setattr(translator.output, _CONDITION_KIND, original_condition_kind(translator.symbolic_locals["cond"]))
    except Exception:  # noqa: BLE001 - TorchDynamo internals changed: the kind stays unknown
        pass


def check_site(callee, error_type, line: int, function_name: str) -> int:
    """The trap site of the check call being traced (a constant of the trace)."""
    number = -1
    comptime(_decide_site)
    return number


def _decide_site(context) -> None:
    def number_of(tracer, callee, error_type, line, function_name):
        check = known_check_function(callee)
        # Noted by ``check_holds``, evaluated just before in the same call.
        kind = getattr(tracer.output, _CONDITION_KIND, None)
        setattr(tracer.output, _CONDITION_KIND, None)
        helper = callee if check is not None and check.parameters == ("cond", "msg", "error_type") else None
        return traps.site_number_in_trace(
            tracer, _resolved_error_type(check, error_type), line, function_name, helper, kind
        )

    trace_decisions.decide_in_trace(
        context, "number", ("callee", "error_type", "line", "function_name"), number_of
    )


def check_holds(cond):
    """The truth the helper checks, as a 0-d bool tensor for a tensor condition.

    As ``torch._check_tensor_all_with`` and ``torch._check_with`` do eagerly: a tensor
    must have dtype bool and holds when all of it is true (an empty one holds); any
    other condition must be a bool. The TypeErrors are theirs, word for word. A
    callable condition is called first, as the helper does (the message it was given
    is free of effects, so calling it before the message is built changes nothing)."""
    _note_condition_kind(cond)
    if callable(cond) and not isinstance(cond, torch.Tensor):
        cond = cond()
    if isinstance(cond, torch.Tensor):
        if cond.dtype != torch.bool:
            raise TypeError(f"cond tensor must have dtype torch.bool, but got {cond.dtype}")
        return cond.all()
    if not isinstance(cond, (bool, torch.SymBool)):
        raise TypeError(f"cond must be a bool, but got {type(cond)}")
    return cond


# ---------------------------------------------------------------------------
# Messages with tensor values: rendered inside the graph when the check fails.



def assert_check(holds, site_number: int, line: int, function_name: str, pieces: tuple) -> None:
    """``assert_guard`` for a message given as ``pieces``: text, and ``(value, spec)`` for
    each f-string hole. A tensor hole is an operand of ``graphmend::check_message``,
    which renders the message from the values when the check fails; the assertion then
    names the rendered message, which the boundary raises."""
    texts = []
    tensors = []
    for piece in pieces:
        if isinstance(piece, str):
            texts.append((piece,))
            continue
        value, spec = piece
        if _is_traced_size(value):
            value = torch.scalar_tensor(value, dtype=torch.int64)  # formats as the int does
        if isinstance(value, torch.Tensor):
            texts.append(spec)
            tensors.append(value)
        else:
            texts.append((format(value, spec),))
    template = _template_number(tuple(texts))
    if isinstance(holds, torch.Tensor):
        holds = torch.ops.graphmend.check_message(holds, template, tensors)
    traps.assert_guard(holds, traps.site_message(site_number, line, function_name, traps.RENDERED_MESSAGE))


def _is_traced_size(value) -> bool:
    """While tracing, whether ``value`` is a symbolic int (a size known only when the
    graph runs, such as a captured count). A constant of the trace."""
    symbolic = False
    comptime(_decide_traced_size)
    return symbolic


def _decide_traced_size(context) -> None:
    from graphmend.torch_adapter.tracing import SymNodeVariable

    trace_decisions.decide_in_trace(
        context, "symbolic", ("value",), lambda _tracer, symbolic: symbolic,
        read=lambda variable: isinstance(variable, SymNodeVariable) and variable.python_type() is int,
    )


def _template_number(template: tuple) -> int:
    """The number of a message template (a constant of the trace)."""
    number = -1
    comptime(_decide_template)
    return number


def _decide_template(context) -> None:
    store.check_templates.decide(context, "template")


def render(template_number: int, values: list) -> str:
    """The message: a 1-tuple is text (literal, or a value formatted while tracing); a
    str in place of a hole is the format spec the f-string applied to the next tensor
    (``Tensor.__format__``)."""
    remaining = iter(values)
    text = []
    for piece in store.check_templates.values[template_number]:
        if isinstance(piece, tuple):
            text.append(piece[0])
        else:
            text.append(format(next(remaining), piece))
    return "".join(text)


def _check_message(holds: torch.Tensor, template: int, values: list[torch.Tensor]) -> torch.Tensor:
    """``holds`` itself; when it is false, first render the message for the boundary."""
    if not bool(holds):
        traps.render_failed_message(render(template, values))
    return holds.clone()


def _check_message_while_tracing(holds: torch.Tensor, template: int, values: list[torch.Tensor]) -> torch.Tensor:
    return torch.empty_like(holds)


check_message = operators.define(
    "check_message(Tensor holds, int template, Tensor[] values) -> Tensor", _check_message, _check_message_while_tracing
)
