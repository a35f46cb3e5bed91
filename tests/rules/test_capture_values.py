"""[Capture] a tensor's integers copied to a list kept in the graph where only sizes
read them (``rules/capture/values.py``): must-rewrite cases with graph and break counts
over calls of other numbers, one named must-not case per legality condition, and
differential runs (eager, aot_eager)."""

from __future__ import annotations

import textwrap

import pytest
import torch

from graphmend.runtime import reset
from graphmend.runtime.store import store
from helpers import (
    assert_equivalent,
    finding_reasons,
    graphs_and_outcomes_over_calls,
    original_and_mended,
)
from helpers import graphs_and_breaks as counts

PRELUDE = """
import torch
import torch.nn.functional as F

WEIGHTS = torch.arange(60.0).reshape(4, 5, 3) / 10
"""


def program(body: str) -> str:
    return PRELUDE + textwrap.dedent(body)


MUST_REWRITE = {
    # The experts' token counts size the split of the sorted tokens (JetMoE's routing).
    "split_by_counts": """
        def main(x, choice):
            counts = torch.zeros(x.size(0), 4).scatter(1, choice, 1).long().sum(0)
            sizes = counts.tolist()
            _, order = choice.flatten().sort(0)
            pieces = x[order // choice.size(1)].split(sizes, dim=0)
            return torch.cat([F.linear(pieces[i], WEIGHTS[i]) for i in range(4)], 0)
    """,
    # Returned from the router, handed to the experts: both calls inlined in one frame.
    "handed_through_calls": """
        def route(x, choice):
            counts = torch.zeros(x.size(0), 4).scatter(1, choice, 1).long().sum(0)
            sizes = counts.tolist()
            _, order = choice.flatten().sort(0)
            return order // choice.size(1), sizes

        def experts(inputs, sizes):
            pieces = inputs.split(sizes, dim=0)
            return torch.cat([F.linear(pieces[i], WEIGHTS[i]) for i in range(len(sizes))], 0)

        def main(x, choice):
            rows, sizes = route(x, choice)
            return experts(x[rows], sizes=sizes), sizes
    """,
}

ORIGINAL_COUNTS = {"split_by_counts": (2, 1), "handed_through_calls": (3, 2)}


def _choices(seed: int) -> tuple:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(6, 3, generator=generator)
    return x, torch.randn(6, 4, generator=generator).topk(2, dim=1).indices


@pytest.mark.parametrize("name", sorted(MUST_REWRITE))
def test_must_rewrite(name):
    original, mended, result = original_and_mended(program(MUST_REWRITE[name]))
    assert result.changed and not finding_reasons(result, "Capture"), result.findings
    assert counts(original.main, *_choices(0)) == ORIGINAL_COUNTS[name]
    assert counts(mended.main, *_choices(0)) == (1, 0)


def test_other_numbers_reuse_the_graph():
    """The numbers are unbacked: no guard on them, so calls routing other counts run
    the one graph, where the original's graph after the break is traced again."""
    original, mended, _ = original_and_mended(program(MUST_REWRITE["split_by_counts"]))
    calls = [_choices(seed) for seed in range(4)]
    original_graphs, original_outcomes = graphs_and_outcomes_over_calls(original.main, calls)
    mended_graphs, mended_outcomes = graphs_and_outcomes_over_calls(mended.main, calls)
    assert mended_graphs == 1 and original_graphs >= 2
    assert mended_outcomes == original_outcomes


@pytest.mark.parametrize("name", sorted(MUST_REWRITE))
@pytest.mark.parametrize("seed", [0, 3])
def test_differential(name, seed):
    original, mended, _ = original_and_mended(program(MUST_REWRITE[name]))
    assert_equivalent(original.main, mended.main, *_choices(seed), backends=("eager", "aot_eager"))


def test_the_list_reaches_python_as_ints():
    original, mended, _ = original_and_mended(program(MUST_REWRITE["handed_through_calls"]))
    torch._dynamo.reset()
    _, sizes = torch.compile(mended.main, backend="eager")(*_choices(1))
    assert sizes == original.main(*_choices(1))[1] and all(type(size) is int for size in sizes)


def test_a_number_read_on_the_host_by_a_callee_keeps_the_break():
    """A callee the rule cannot see branches on a number: tracing fails on it, and the
    frame is traced again with the original ``.tolist()`` (not run eagerly)."""
    source = """
        def first_is_large(sizes):
            return sizes[0] > 2

        def main(x, choice):
            counts = torch.zeros(x.size(0), 4).scatter(1, choice, 1).long().sum(0)
            sizes = counts.tolist()
            return x * 2 if first_is_large(sizes) else x - 1
    """
    original, mended, result = original_and_mended(program(source))
    assert result.changed
    store.frames_run_eagerly.clear()
    reset()
    assert_equivalent(original.main, mended.main, *_choices(2), backends=("eager", "aot_eager"))
    assert store.frames_run_eagerly == {}
    assert any("on the host" in reason for reason in store.trace_time_declines.values()), store.trace_time_declines
    assert counts(mended.main, *_choices(2)) == counts(original.main, *_choices(2))


# --------------------------------------------------------------------------------------
# Must not rewrite: one case per legality condition.

MUST_NOT_REWRITE = {
    "assigns_one_local": (
        """
        SIZES = []

        def main(x, choice):
            global SIZES
            SIZES = choice.sum(0).tolist()
            return x * len(SIZES)
        """,
        "is global or nonlocal",
    ),
    "numbers_only_handed_on_subscript": (
        """
        def main(x, choice):
            sizes = choice.sum(0).tolist()
            return x * sizes[0]
        """,
        "other than handed on whole",
    ),
    "numbers_only_handed_on_loop": (
        """
        def main(x, choice):
            sizes = choice.sum(0).tolist()
            for size in sizes:
                x = x + size
            return x
        """,
        "other than handed on whole",
    ),
    "numbers_only_handed_on_formatted": (
        """
        def main(x, choice):
            sizes = choice.sum(0).tolist()
            return x, str(sizes)
        """,
        "other than handed on whole",
    ),
}


@pytest.mark.parametrize("name", sorted(MUST_NOT_REWRITE))
def test_must_not_rewrite(name):
    source, reason = MUST_NOT_REWRITE[name]
    original, mended, result = original_and_mended(program(source))
    reasons = finding_reasons(result, "Capture")
    assert any(reason in text for text in reasons), reasons
    assert counts(original.main, *_choices(0)) == counts(mended.main, *_choices(0))


def test_values_of_a_float_tensor_keep_the_break():
    """C210: TorchDynamo reads only integers; a float tensor's list keeps its break."""
    source = """
        def main(x, choice):
            scales = x.sum(0).tolist()
            return helper(x, scales)

        def helper(x, scales):
            return x * len(scales)
    """
    original, mended, result = original_and_mended(program(source))
    assert result.changed
    reset()
    assert counts(mended.main, *_choices(0)) == counts(original.main, *_choices(0))
    assert any("values_are_integers_of_a_static_count" in reason for reason in store.trace_time_declines.values())
    assert_equivalent(original.main, mended.main, *_choices(0), backends=("eager",))


def test_numbers_the_reading_operator_refuses_raise_torchs_runtime_assertion():
    """A limit, stated in the rule's documentation: negative split sizes fail eagerly in
    ``split`` and, compiled, in TorchDynamo's fake run of the graph after the original's
    break (``TorchRuntimeError``); mended, in the graph's runtime assertion on the number.
    Each is a ``RuntimeError``; the messages differ."""
    source = """
        def main(x, choice):
            sizes = (choice.sum(0) - 9).tolist()
            return x.split(sizes, dim=0)
    """
    original, mended, _ = original_and_mended(program(source))
    x, choice = _choices(0)
    for function, expected in ((original.main, "when making fake tensor call"), (mended.main, "Runtime assertion failed")):
        torch._dynamo.reset()
        with pytest.raises(RuntimeError, match=expected):
            torch.compile(function, backend="eager")(x, choice)


@pytest.mark.slow  # compiles with TorchInductor
def test_under_inductor_one_graph_serves_other_counts_with_eagers_values():
    original, mended, _ = original_and_mended(program(MUST_REWRITE["split_by_counts"]))
    calls = [_choices(seed) for seed in range(3)]
    torch._dynamo.reset()
    from torch._dynamo.utils import counters

    counters.clear()
    compiled = torch.compile(mended.main)
    for arguments in calls:
        assert torch.equal(compiled(*arguments), original.main(*arguments))
    assert counters["stats"]["unique_graphs"] == 1
    assert sum(counters["graph_break"].values()) == 0
