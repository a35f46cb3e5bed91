"""A mended frame compiles no more graphs and records no more breaks than the original
(issue 46): a user's backend that runs its graph as given is recognised as keeping the
graph's order, and a frame in which a claim was refused while tracing is traced again
with every claim of that frame refused."""

from __future__ import annotations

import contextlib
import io

import pytest
import torch
from helpers import original_and_mended

from graphmend.runtime import claims

TWO_PRINTS = """
import torch

def f(x):
    y = x * 2
    print("first", y.shape)
    y = y + 1
    print("second", y.shape)
    return y.sin()
"""


def _graphs_and_printed(function, backend_for_counter):
    """Graphs the backend was given in one fresh compiled call, and the printed text."""
    counter = [0]
    backend = backend_for_counter(counter)
    torch._dynamo.reset()
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        torch.compile(function, backend=backend)(torch.ones(2))
    return counter[0], printed.getvalue()


def _returning_the_forward(counter):
    def backend(gm, example_inputs):
        counter[0] += 1
        return gm.forward

    return backend


def _returning_the_module(counter):
    def backend(graph_module, example_inputs):
        counter[0] += 1
        return graph_module

    return backend


class _CountingObject:
    def __init__(self, counter):
        self.counter = counter

    def __call__(self, gm, example_inputs):
        self.counter[0] += 1
        return gm.forward


def _wrapping_the_forward(counter):
    def backend(gm, example_inputs):
        counter[0] += 1
        forward = gm.forward
        return lambda *arguments: forward(*arguments)

    return backend


@pytest.mark.parametrize("backend_for_counter", [_returning_the_forward, _returning_the_module, _CountingObject])
def test_a_users_backend_that_returns_its_graph_keeps_two_outputs_in_one_graph(backend_for_counter):
    """The usual counting backend of a test runs the graph as ``eager`` does: the second
    output in a graph keeps no break (it did, as if the backend could reorder them)."""
    original, mended, _ = original_and_mended(TWO_PRINTS)
    before = _graphs_and_printed(original.f, backend_for_counter)
    after = _graphs_and_printed(mended.f, backend_for_counter)
    assert before == (3, "first torch.Size([2])\nsecond torch.Size([2])\n")
    assert after == (1, before[1])


def test_a_backend_that_wraps_the_graph_may_reorder_and_keeps_one_output_per_graph():
    original, mended, _ = original_and_mended(TWO_PRINTS)
    before = _graphs_and_printed(original.f, _wrapping_the_forward)
    after = _graphs_and_printed(mended.f, _wrapping_the_forward)
    assert (before[0], after[0]) == (3, 2)
    assert after[1] == before[1]


def _other(gm, example_inputs):
    return gm.forward


def _passes_it_on(gm, example_inputs):
    return _other(gm, example_inputs)


def _reads_its_graph(gm, example_inputs):
    gm.graph.lint()
    return gm.forward


def _replaces_it(gm, example_inputs):
    gm = example_inputs
    return gm.forward


def _keeps_it_in_a_closure(gm, example_inputs):
    return lambda *arguments: gm(*arguments)


@pytest.mark.parametrize(
    "backend", [_passes_it_on, _reads_its_graph, _replaces_it, _keeps_it_in_a_closure, len, "eager"]
)
def test_only_a_backend_that_returns_its_graph_unchanged_is_recognised(backend):
    assert not claims.returns_its_graph_unchanged(backend)


def test_returning_the_graph_or_its_forward_is_recognised():
    assert claims.returns_its_graph_unchanged(_other)
    assert claims.returns_its_graph_unchanged(lambda gm, example_inputs: gm)
    assert claims.returns_its_graph_unchanged(_CountingObject([0]))


# The print's claim is refused (``outputs_share_no_graph_with_a_lowered_guard`` under a
# backend that may reorder) and so is the guard's.
GUARD_THEN_PRINT = """
import torch

def f(x):
    y = x * 2
    print("a", y.shape)
    if (y > 1).any():
        raise ValueError("too big")
    print("b", y.shape)
    return y + 1
"""


class _Reordering:
    """Counts its graphs and wraps each: a backend graphmend cannot tell keeps order."""

    def __init__(self):
        self.graphs = 0

    def __call__(self, gm, example_inputs):
        self.graphs += 1
        forward = gm.forward
        return lambda *arguments: forward(*arguments)


def _counts(function, *arguments, backend_class=None):
    from torch._dynamo.utils import counters

    from graphmend.counting import CountingBackend, recording_graph_breaks

    torch._dynamo.reset()
    counters.clear()
    backend = (backend_class or CountingBackend)()
    with recording_graph_breaks() as records, contextlib.redirect_stdout(io.StringIO()) as printed:
        value = torch.compile(function, backend=backend)(*arguments)
    breaks = max(sum(counters["graph_break"].values()), len(records.breaks))
    return backend.graphs, breaks, records.frames_skipped, printed.getvalue(), value.tolist()


def test_a_frame_kept_as_written_compiles_as_the_original():
    claims.forget_refusals()
    original, mended, _ = original_and_mended(TWO_PRINTS)
    x = torch.ones(2)
    before = _counts(original.f, x)
    assert before[:3] == (3, 2, 0)
    assert _counts(mended.f, x)[:3] == (1, 0, 0)
    claims.keep_frame_as_written(mended.f.__code__)
    assert _counts(mended.f, x) == before


def test_a_claim_refused_while_tracing_keeps_its_frame_as_written():
    claims.forget_refusals()
    original, mended, _ = original_and_mended(GUARD_THEN_PRINT)
    x = torch.full((4,), 0.25)
    before = _counts(original.f, x, backend_class=_Reordering)
    after = _counts(mended.f, x, backend_class=_Reordering)
    assert after == before
    assert set(claims._frames_kept_as_written) == {(mended.f.__code__.co_filename, mended.f.__code__)}


def test_the_same_program_in_another_file_is_another_frame():
    claims.forget_refusals()
    _, first, _ = original_and_mended(TWO_PRINTS)
    _, second, _ = original_and_mended(TWO_PRINTS)
    assert first.f.__code__ == second.f.__code__  # equal code objects, files apart
    claims.keep_frame_as_written(first.f.__code__)
    assert _counts(second.f, torch.ones(2))[:2] == (1, 0)
    assert _counts(first.f, torch.ones(2))[:2] == (3, 2)


def test_a_frame_without_a_refused_claim_keeps_its_claims():
    claims.forget_refusals()
    original, mended, _ = original_and_mended(TWO_PRINTS)
    assert _counts(original.f, torch.ones(2))[:2] == (3, 2)
    assert _counts(mended.f, torch.ones(2))[:2] == (1, 0)
    assert claims._FRAME_KEPT_REASON not in claims.trace_time_declines.values()


def test_only_rewritten_code_is_kept_as_written_and_a_grad_refusal_holds_under_grad():
    claims.forget_refusals()
    original, mended, _ = original_and_mended(TWO_PRINTS)
    claims.keep_frame_as_written(original.f.__code__)
    assert claims._frames_kept_as_written == {}
    claims.keep_frame_as_written(mended.f.__code__, "grad")
    key = (mended.f.__code__.co_filename, mended.f.__code__)
    assert claims._frames_kept_as_written == {key: {"grad"}}
    claims.keep_frame_as_written(mended.f.__code__, "grad")
    assert claims._frames_kept_as_written == {key: {"grad", "always"}}
    claims.forget_refusals()
    assert claims._frames_kept_as_written == {}
