"""Abandoning a trace: TorchDynamo traces the frame again, those who listen to abandoned
attempts are told (``graphmend.dynamo_records``), and TorchDynamo's graph-break counters
go back to what they were when the frame's compilation began.
"""

from __future__ import annotations

from graphmend import torch_adapter
from graphmend.runtime.store import store


def restart(output, reason: str):
    """The exception that makes TorchDynamo trace the frame of ``output`` again (for the
    caller to raise), once the attempt is forgotten: its break counts put back, and each
    listener told."""
    from graphmend.torch_adapter.errors import restart_the_trace

    _forget_break_counts_of_the_attempt()
    for listener in list(store.abandoned_trace_listeners):
        try:
            listener(output)
        except Exception:  # noqa: BLE001 - a listener must never change what TorchDynamo does
            pass
    return restart_the_trace(f"graphmend: {reason}")


def _compile_key():
    return torch_adapter.current_compile_key()


def note_break_counts_at_compile_start() -> None:
    """Keep TorchDynamo's graph-break counters (``counters["graph_break"]``, the count
    tests and users read) as they are when the compilation of a frame begins: keyed by
    its frame and compile ids, the same over the attempts TorchDynamo restarts. The first
    attempt always notes them afresh: after ``torch._dynamo.reset()`` the ids start again
    from 0, and the counts noted for an earlier compilation with the same ids would be
    put back."""
    try:
        counters = torch_adapter.graph_break_counters()
        key = _compile_key()
        if key is not None and (
            key not in store.break_counts_at_compile_start or torch_adapter.current_compile_attempt() == 0
        ):
            store.break_counts_at_compile_start.clear()
            store.break_counts_at_compile_start[key] = dict(counters["graph_break"])
    except Exception:  # noqa: BLE001 - counting must never change what TorchDynamo does
        return


def _forget_break_counts_of_the_attempt() -> None:
    """A trace graphmend abandons compiled nothing, and the next attempt counts the
    breaks that remain: TorchDynamo counts a break in the attempt that finds it, so the
    breaks the abandoned attempts found would count twice, and a mended program whose
    claim was refused would count more breaks than the original (a count kept a tensor
    for a check, refused where an unchanged ``print`` broke the graph first: 3 where the
    original counts 2). The counters go back to what they were when the frame's
    compilation began, as ``graphmend.dynamo_records`` forgets its records."""
    try:
        counters = torch_adapter.graph_break_counters()
        saved = store.break_counts_at_compile_start.get(_compile_key())
        if saved is not None:
            counts = counters["graph_break"]
            counts.clear()
            counts.update(saved)
    except Exception:  # noqa: BLE001 - counting must never change what TorchDynamo does
        return
