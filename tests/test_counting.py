"""graphmend.counting: breaks, and frames TorchDynamo gives up on."""

import torch

from graphmend.counting import BreakCount, count_breaks


def branch_in_a_loop(x):
    h = x * 1.0
    for _ in range(2):
        if x.sum() > 0:
            h = h * 0.5
    return h


def branch_free_loop(x):
    h = x * 1.0
    for _ in range(2):
        h = torch.where(x.sum() > 0, h * 0.5, h)
    return h


def one_item_break(x):
    y = x * 2
    return y + y.sum().item()


def test_a_frame_skipped_for_a_break_in_a_loop_is_counted_apart():
    result, count = count_breaks(branch_in_a_loop, torch.ones(3))
    assert torch.equal(result, torch.full((3,), 0.25))
    assert (count.graphs, count.frames_skipped, count.breaks) == (0, 1, 1)


def test_a_compiled_frame_skips_nothing():
    _, whole = count_breaks(branch_free_loop, torch.ones(3))
    _, split = count_breaks(one_item_break, torch.ones(3))
    assert (whole.graphs, whole.frames_skipped, whole.breaks) == (1, 0, 0)
    assert (split.frames_skipped, split.breaks) == (0, 1)


def test_cost_puts_a_skipped_frame_above_any_number_of_breaks():
    skipped = BreakCount(graphs=0, frames_skipped=1, reasons={"loop": 1})
    many_breaks = BreakCount(graphs=6)
    assert many_breaks.breaks == 5
    assert many_breaks.cost < skipped.cost


def identity_of_tuples(a, b):
    if a is b:
        return a
    return a[0] + b[0]


def test_a_frame_skipped_at_its_first_step_counts_as_its_break_alone():
    """Dynamo skips a frame whose first traced step breaks (nothing to resume from); it
    loses only what the rest would have compiled, not a loop's worth: one break, no
    skipped frame (as Where's ``select`` helper meets it with tuples)."""
    result, count = count_breaks(identity_of_tuples, (torch.ones(2),), (torch.ones(2),))
    assert torch.equal(result, torch.full((2,), 2.0))
    assert [record.skips_frame for record in count.records] == [True]
    assert (count.frames_skipped, count.breaks) == (0, 1)


def test_break_counts_noted_before_a_reset_are_not_put_back():
    """After ``torch._dynamo.reset()`` TorchDynamo numbers frames from 0 again: the
    counts noted when an earlier compilation with the same ids began must not be put back
    when graphmend abandons an attempt of the new one (a test of counts run after others
    counted the earlier compilation's breaks: 4 breaks where the program had 1)."""
    from torch._guards import CompileContext, CompileId, compile_context

    from graphmend.runtime.trace_restarts import (
        _forget_break_counts_of_the_attempt,
        note_break_counts_at_compile_start,
    )
    from graphmend.torch_adapter import graph_break_counters

    counters = graph_break_counters()
    counters.clear()
    counters["graph_break"]["found by an earlier program"] = 4
    with compile_context(CompileContext(CompileId(frame_id=0, frame_compile_id=0))):
        note_break_counts_at_compile_start()
    torch._dynamo.reset()
    counters.clear()
    with compile_context(CompileContext(CompileId(frame_id=0, frame_compile_id=0))):
        note_break_counts_at_compile_start()
        counters["graph_break"]["found by the abandoned attempt"] += 1
        _forget_break_counts_of_the_attempt()
    assert dict(counters["graph_break"]) == {}
