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

This module is the entry Defer's rewritten code calls; the rest is in the modules named
by their job:

- ``output_operands``: the call's arguments as a constant template and operands;
- ``output_decisions``: whether the output can happen inside the graph exactly
  (Defer's conditions while tracing) and its registration;
- ``output_guards``: the guards the trace takes on what that decision read;
- ``output_effects``: the ``graphmend::emit_effect`` operator, the registered effects it
  performs, and performing one (``perform``).
"""

from __future__ import annotations

import sys

import torch

from graphmend.core.runtime_names import LOGGER_METHOD_LEVELS  # noqa: F401 - read by fixed_calls
from graphmend.runtime.output_decisions import (
    refused_where_traced,
    register,
    text_fixed_at_the_call,
)
from graphmend.runtime.output_effects import LOG_METHOD, LOG_RECORD, PRINT, WARNING, perform
from graphmend.runtime.output_guards import (
    drop_held_guards,
    hold_guards_until_decided,
    identity_guarded_on,
    install_held_guards,
    log_chain_guarded,
    print_receiver,
    warning_display_guarded,
)
from graphmend.runtime.output_operands import split_arguments
from graphmend.runtime.trace_decisions import decide_in_trace
from graphmend.torch_adapter.tracing import comptime, run_outside_dynamo

# What an output call that went into the graph hands back; otherwise the arguments, a
# pair. Told apart with ``is None``: TorchDynamo compares a pair with ``is ()`` by its
# contents, and reading a number a list argument holds guards on its value (a print of
# ``.tolist()`` that kept its break compiled its frame again for each new value, where
# the original's guarded on the list's length).
_IN_GRAPH = None


def _record(kind: str, target, detail: tuple, args: tuple, kwargs: dict, item_reads: tuple = ()):
    """Put the effect into the graph: ``None``; or hand it back, ``(args, kwargs)``, for
    the rewritten code to make the original call itself (TorchDynamo then breaks the
    graph there, as it did at the original call)."""
    if refused_where_traced():
        return args, kwargs
    split = split_arguments(args, kwargs, item_reads)
    if split is not None and not text_fixed_at_the_call(split[0], kwargs):
        split = None
    if split is not None:
        template, slots, tensors, integers = split
        # The receiver by identity (guarded on), or by name where the call reads it as
        # ``sys.stdout`` or ``sys.stderr``: it cannot be handed to a trace-time function
        # as an object; ``output_decisions._resolve_target`` finds it again.
        target_id = None if target is None else print_receiver(target) if kind == PRINT else identity_guarded_on(target)
        key = register(kind, target_id, detail, template, slots, kwargs)
        if key >= 0:
            if not tensors:
                device = _graph_device()
                if device is not None:
                    tensors = [torch.empty(0, device=device)]
            torch.ops.graphmend.emit_effect(key, tensors, integers)
            return _IN_GRAPH
    return args, kwargs


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
    decide_in_trace(context, "device", (), _device_of_traced_tensors)


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


def _settle_held_guards(recorded):
    """``recorded`` (what ``_record`` gave), after installing the guards the decision held
    where the call went into the graph, or dropping them where it keeps its break."""
    if recorded is _IN_GRAPH:
        install_held_guards()
    else:
        drop_held_guards()
    return recorded


def print_in_graph(args: tuple, kwargs: dict, item_reads: tuple = ()):
    """``print(*args, **kwargs)`` inside the graph: ``None``, or ``(args, kwargs)`` to call
    ``print`` with eagerly (or, with ``item_reads``, to make the original call again)."""
    printed = dict(kwargs)
    target = printed.pop("file", None)
    hold_guards_until_decided()
    if _settle_held_guards(_record(PRINT, target, (), args, printed, item_reads)) is _IN_GRAPH:
        if target is None:
            # Read while traced, so that TorchDynamo guards on the type of ``sys.stdout``:
            # whether the stream's ``write`` is code traced code may also write through is
            # decided on it, and a program may swap the stream between calls.
            type(sys.stdout)
        return _IN_GRAPH
    return args, kwargs


def log_in_graph(logger, method_name: str, level, location: tuple, args: tuple, kwargs: dict, item_reads: tuple = ()):
    """A logger call inside the graph: ``None``, or ``(args, kwargs)`` to call the method
    with eagerly.

    ``level`` is the numeric level for the standard methods (the record is built at
    ``location``, so it names the original file, line and function), or ``None`` for
    methods such as transformers' ``warning_once``, which are performed by calling
    the method itself so that their own once-only bookkeeping stays what it was.
    """
    hold_guards_until_decided()
    if not log_chain_guarded(logger, method_name):
        drop_held_guards()
        return args, kwargs
    if level is None:
        return _settle_held_guards(_record(LOG_METHOD, logger, (method_name,), args, kwargs, item_reads))
    return _settle_held_guards(_record(LOG_RECORD, logger, (level, location), args, kwargs, item_reads))


def warn_in_graph(location: tuple, args: tuple, kwargs: dict):
    """``warnings.warn`` at ``location`` inside the graph: ``None``, or ``(args, kwargs)``
    to call it with eagerly."""
    hold_guards_until_decided()
    if not warning_display_guarded():
        drop_held_guards()
        return args, kwargs
    return _settle_held_guards(_record(WARNING, None, location, args, kwargs))


# Code that an earlier ``graphmend fix`` wrote into users' files calls these three,
# and ``flush_pending_effects`` on its eager path; what the graph cannot hold is
# performed at the call, outside the graph.

@run_outside_dynamo
def _perform_eagerly(kind: str, target, detail: tuple, args: tuple, kwargs: dict) -> None:
    perform(kind, target, detail, args, kwargs)


def defer_print(args: tuple, kwargs: dict) -> None:
    if print_in_graph(args, kwargs) is not _IN_GRAPH:
        _perform_eagerly(PRINT, None, (), args, kwargs)


def defer_log(logger, method_name: str, level, location: tuple, args: tuple, kwargs: dict) -> None:
    if log_in_graph(logger, method_name, level, location, args, kwargs) is not _IN_GRAPH:
        if level is None:
            _perform_eagerly(LOG_METHOD, logger, (method_name,), args, kwargs)
        else:
            _perform_eagerly(LOG_RECORD, logger, (level, location), args, kwargs)


def defer_warning(location: tuple, args: tuple, kwargs: dict) -> None:
    if warn_in_graph(location, args, kwargs) is not _IN_GRAPH:
        _perform_eagerly(WARNING, None, location, args, kwargs)


def flush_pending_effects() -> None:
    """Nothing is ever pending: effects happen at their call, inside or outside a graph."""


def pending_effect_count() -> int:
    """Always 0 (see ``flush_pending_effects``)."""
    return 0
