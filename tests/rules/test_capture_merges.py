"""Capture's branch on whether positions are empty (``rules/capture/merges.py``)."""

from __future__ import annotations

import contextlib
import textwrap
import warnings

import pytest
import torch

from graphmend.runtime.store import store
from helpers import assert_equivalent, finding_reasons, original_and_mended
from helpers import graphs_and_breaks as counts

PRELUDE = """
import torch

LINEAR = torch.nn.Linear(3, 3)
NORM = torch.nn.BatchNorm1d(3).eval()
"""


def program(body: str) -> str:
    return PRELUDE + textwrap.dedent(body)


def mended_pair(source: str):
    """Both versions, each module's weights drawn from the same seed."""
    state = torch.random.get_rng_state()
    with _seeded_loads():
        original, mended, result = original_and_mended(program(source))
    torch.random.set_rng_state(state)
    return original, mended, result


@contextlib.contextmanager
def _seeded_loads():
    import helpers

    load = helpers.load_module

    def seeded(*args, **kwargs):
        torch.manual_seed(0)
        return load(*args, **kwargs)

    helpers.load_module = seeded
    try:
        yield
    finally:
        helpers.load_module = load


MUST_REWRITE = {
    "len_greater_than_zero": """
        def main(x, flags):
            (idx,) = torch.where(flags > 0)
            merged = x * 2
            if len(idx) > 0:
                rows = x[idx] + 1
                rows = LINEAR(rows)
                merged[idx] = rows * 3
            return merged + 1
    """,
    "numel_not_zero": """
        def main(x, flags):
            idx = (flags > 0).nonzero(as_tuple=True)[0]
            merged = x.clone()
            if idx.numel() != 0:
                merged[idx] = torch.tanh(x[idx]) - merged[idx]
            return merged
    """,
    "shape_at_least_one_with_a_batch_norm": """
        def main(x, flags):
            (idx,) = torch.where(flags > 0)
            merged = x * 1.5
            if idx.shape[0] >= 1:
                normed = NORM(x[idx])
                merged[idx] = normed + merged[idx]
            return merged
    """,
    "positions_from_the_caller": """
        def fuse(x, idx):
            merged = x - 1
            if len(idx) > 0:
                local = x[idx].contiguous()
                batch, width = local.shape
                local = local.view(batch * width).view(batch, width)
                merged[idx] = LINEAR(local)
            return merged

        def main(x, flags):
            (idx,) = torch.where(flags > 0)
            return fuse(x, idx) * 2
    """,
}

X = torch.tensor([[1.0, -2.0, 3.0], [-1.0, 5.0, 0.5], [2.0, 2.5, -3.0], [0.0, -1.0, 4.0]])
FLAGS = {
    "some rows": torch.tensor([1.0, -1.0, 1.0, -1.0]),
    "no row": torch.tensor([-1.0, -1.0, -1.0, -1.0]),
    "every row": torch.tensor([1.0, 1.0, 1.0, 1.0]),
    "one row": torch.tensor([-1.0, -1.0, -1.0, 2.0]),
}


@pytest.mark.parametrize("name", sorted(MUST_REWRITE))
def test_must_rewrite(name):
    original, mended, result = mended_pair(MUST_REWRITE[name])
    assert result.changed and not finding_reasons(result, "Capture"), result.findings
    assert any("are empty" in f.message and f.fixed for f in result.findings)
    with torch.no_grad():
        original_graphs, original_breaks = counts(original.main, X, FLAGS["some rows"])
        assert original_breaks >= 1
        assert counts(mended.main, X, FLAGS["some rows"]) == (1, 0)


@pytest.mark.parametrize("name", sorted(MUST_REWRITE))
def test_one_graph_over_calls_with_and_without_rows(name):
    """The branch is in the graph, not in a guard: calls with rows, without, with one,
    compile nothing more."""
    _, mended, _ = mended_pair(MUST_REWRITE[name])
    from graphmend.counting import CountingBackend

    backend = CountingBackend()
    torch._dynamo.reset()
    compiled = torch.compile(mended.main, backend=backend, fullgraph=True)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for flags in FLAGS.values():
            compiled(X, flags)
    assert backend.graphs == 1


@pytest.mark.default_tier_stride(3)
@pytest.mark.parametrize("name", sorted(MUST_REWRITE))
@pytest.mark.parametrize("rows", sorted(FLAGS))
def test_differential(name, rows):
    original, mended, _ = mended_pair(MUST_REWRITE[name])
    with torch.no_grad():
        assert_equivalent(original.main, mended.main, X, FLAGS[rows], backends=("eager", "aot_eager"))


def test_differential_under_autograd():
    """Under autograd the joined graph would record it: the claim is refused and the
    branch keeps its break, with the original's gradients."""
    original, mended, _ = mended_pair(MUST_REWRITE["len_greater_than_zero"])
    for flags in FLAGS.values():
        assert_equivalent(original.main, mended.main, X.clone().requires_grad_(), flags,
                          backends=("eager", "aot_eager"))


MUST_NOT_REWRITE = {
    # tests_whether_positions_are_empty
    "branch_has_an_else": ("""
        def main(x, flags):
            (idx,) = torch.where(flags > 0)
            merged = x * 2
            if len(idx) > 0:
                merged[idx] = x[idx] * 3
            else:
                merged = merged + 1
            return merged
    """, "the branch has an `else`"),
    # body_only_binds_names
    "body_appends_to_a_list": ("""
        def main(x, flags):
            (idx,) = torch.where(flags > 0)
            merged = x * 2
            seen = []
            if len(idx) > 0:
                seen.append(x[idx].sum())
                merged[idx] = x[idx] * 3
            return merged, len(seen)
    """, "does more than bind names"),
    "body_prints": ("""
        def main(x, flags):
            (idx,) = torch.where(flags > 0)
            merged = x * 2
            if len(idx) > 0:
                print("rows", x[idx].sum())
                merged[idx] = x[idx] * 3
            return merged
    """, "the body holds another rule's rewrite"),
    "body_calls_super": ("""
        def main(x, flags):
            (idx,) = torch.where(flags > 0)
            merged = x * 2
            if len(idx) > 0:
                rows = vars()
                merged[idx] = x[idx] * 3
            return merged
    """, "reads the enclosing frame"),
    # body_reads_its_names_after_binding_them
    "body_reads_a_name_before_binding_it": ("""
        def main(x, flags):
            (idx,) = torch.where(flags > 0)
            rows = x + 1
            merged = x * 2
            if len(idx) > 0:
                rows = rows[idx] * 2
                merged[idx] = rows
            return merged
    """, "reads `rows` before binding it"),
    "body_binds_the_positions": ("""
        def main(x, flags):
            (idx,) = torch.where(flags > 0)
            merged = x * 2
            if len(idx) > 0:
                idx = idx.flip(0)
                merged[idx] = x[idx] * 3
            return merged
    """, "the body binds `idx`"),
    # body_names_stay_in_the_body
    "name_read_after_the_branch": ("""
        def main(x, flags):
            (idx,) = torch.where(flags > 0)
            merged = x * 2
            rows = x
            if len(idx) > 0:
                rows = x[idx] * 3
                merged[idx] = rows
            return merged + rows.sum()
    """, "is read after the branch"),
    # body_reads_only_bound_names
    "name_maybe_unbound_at_the_branch": ("""
        def main(x, flags):
            if x.shape[0] > 100:
                scale = 2.0
            (idx,) = torch.where(flags > 0)
            merged = x * 2
            if len(idx) > 0:
                merged[idx] = x[idx] * scale
            return merged
    """, "may be unbound at the branch"),
    # destination_is_bound_at_the_branch
    "destination_not_defined_in_the_module": ("""
        def main(x, flags):
            (idx,) = torch.where(flags > 0)
            if len(idx) > 0:
                never_defined[idx] = x[idx] * 3
            return x
    """, "the destination `never_defined` is not defined in this module"),
}


@pytest.mark.parametrize("name", sorted(MUST_NOT_REWRITE))
def test_must_not_rewrite(name):
    source, reason = MUST_NOT_REWRITE[name]
    original, mended, result = mended_pair(source)
    reasons = [f.reason for f in result.findings if "are empty" in f.message and not f.fixed]
    assert reasons and reason in reasons[0], result.findings
    with torch.no_grad():
        for flags in FLAGS.values():
            assert_equivalent(original.main, mended.main, X, flags, backends=("eager",))


def test_the_branch_is_reported_as_following_the_positions():
    # The original breaks where the positions are made (`torch.where`, reported
    # there); the branch is a break only once Capture keeps them in the graph.
    _, _, result = mended_pair(MUST_REWRITE["positions_from_the_caller"])
    (branch,) = [f for f in result.findings if f.message.startswith("branch on whether positions")]
    (where,) = [f for f in result.findings if "torch.where" in f.message]
    assert branch.follows == "the positions `idx` are kept in the graph"
    assert where.follows is None


def test_a_body_that_does_not_end_by_writing_rows_is_no_candidate():
    """ends_by_writing_rows_at_the_positions: a branch on a list's length or a count
    that does not write rows back is not this break."""
    _, _, result = mended_pair("""
        def main(x, flags):
            (idx,) = torch.where(flags > 0)
            merged = x * 2
            if len(idx) > 0:
                merged[idx] = x[idx] * 3
                merged = merged + 1
            return merged
    """)
    assert not [f for f in result.findings if "are empty" in f.message]


def test_a_test_of_another_count_is_no_candidate():
    _, _, result = mended_pair("""
        def main(x, flags):
            (idx,) = torch.where(flags > 0)
            merged = x * 2
            if len(idx) > 1:
                merged[idx] = x[idx] * 3
            return merged
    """)
    assert not [f for f in result.findings if "are empty" in f.message]


def test_positions_of_a_known_size_keep_the_branch_as_written():
    """Positions whose size tracing knows do not break the original: the branch is
    traced as written (checked while tracing)."""
    original, mended, result = mended_pair("""
        def main(x, flags):
            idx = torch.arange(2)
            merged = x * 2
            if len(idx) > 0:
                merged[idx] = x[idx] * 3
            return merged
    """)
    assert result.changed
    with torch.no_grad():
        assert counts(mended.main, X, FLAGS["some rows"]) == counts(original.main, X, FLAGS["some rows"]) == (1, 0)
        assert_equivalent(original.main, mended.main, X, FLAGS["some rows"], backends=("eager", "aot_eager"))


HOOKED = """
    CALLS = []
    HOOKED = torch.nn.Linear(3, 3)
    HOOKED.register_forward_hook(lambda module, inputs, output: CALLS.append(output.shape[0]))

    def main(x, flags):
        (idx,) = torch.where(flags > 0)
        merged = x * 2
        if len(idx) > 0:
            rows = HOOKED(x[idx])
            merged[idx] = rows
        return merged
"""


def test_a_body_cond_cannot_capture_is_traced_again_as_written():
    """A forward hook appends to a list: ``torch.cond`` cannot capture that branch, and
    tracing fails (UncapturedHigherOrderOpError) where the original broke the graph.
    The frame is traced again with the branch as written: the hook runs as often as
    eagerly, the results are the original's."""
    original, mended, result = mended_pair(HOOKED)
    assert result.changed
    with torch.no_grad():
        expected = [original.main(X, flags) for flags in FLAGS.values()]
        expected_calls = list(original.CALLS)
        torch._dynamo.reset()
        compiled = torch.compile(mended.main, backend="eager")
        got = [compiled(X, flags) for flags in FLAGS.values()]
    assert all(torch.equal(a, b) for a, b in zip(got, expected))
    assert expected_calls == mended.CALLS
    site_reasons = [reason for reason in store.trace_time_declines.values() if "torch.cond could not capture" in reason]
    assert site_reasons


def test_a_batch_norm_that_updates_its_statistics_is_traced_again_as_written():
    """In training mode the norm updates its running statistics, which a ``torch.cond``
    branch may not: traced again as written, the statistics are the original's."""
    original, mended, _ = mended_pair("""
        TRAINING = torch.nn.BatchNorm1d(3)

        def main(x, flags):
            (idx,) = torch.where(flags > 0)
            merged = x * 2
            if len(idx) > 0:
                merged[idx] = TRAINING(x[idx])
            return merged
    """)
    with torch.no_grad():
        expected = original.main(X, FLAGS["some rows"])
        torch._dynamo.reset()
        got = torch.compile(mended.main, backend="eager")(X, FLAGS["some rows"])
    assert torch.equal(got, expected)
    assert torch.equal(mended.TRAINING.running_mean, original.TRAINING.running_mean)
    assert torch.equal(mended.TRAINING.running_var, original.TRAINING.running_var)


RANDOM_IN_THE_BODY = """
    def main(x, flags):
        (idx,) = torch.where(flags > 0)
        merged = x * 2
        if len(idx) > 0:
            noise = torch.rand_like(x[idx])
            merged[idx] = x[idx] + noise
        return merged
"""


def seeded_run(function, flags, backend=None):
    """The value and the generator's state after, from the same seed."""
    torch._dynamo.reset()
    run = function if backend is None else torch.compile(function, backend=backend)
    torch.manual_seed(1)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        value = run(X, flags)
    return value, torch.random.get_rng_state()


def assert_same_draws(original, mended, flags):
    expected_value, expected_state = seeded_run(original.main, flags)
    for backend in (None, "eager", "aot_eager"):
        value, state = seeded_run(mended.main, flags, backend)
        assert torch.equal(value, expected_value) and torch.equal(state, expected_state), backend


def test_random_draws_in_the_body_draw_the_originals_numbers():
    """The draws run in the branch only when it is taken, from the same generator."""
    original, mended, _ = mended_pair(RANDOM_IN_THE_BODY)
    with torch.no_grad():
        assert counts(mended.main, X, FLAGS["some rows"]) == (1, 0)
    for flags in FLAGS.values():
        assert_same_draws(original, mended, flags)


def test_random_draws_on_both_sides_of_the_branch_keep_its_break():
    """A draw before the branch and one in it would share one graph's seeds under
    inductor, where the original's graphs drew apart; under backends that run the ops in
    order each draw is its own op, from the one generator: joined, drawing the same."""
    original, mended, _ = mended_pair(RANDOM_IN_THE_BODY.replace(
        "merged = x * 2", "merged = x * 2 + torch.rand_like(x)"
    ))
    with torch.no_grad():
        assert counts(mended.main, X, FLAGS["some rows"])[1] < counts(original.main, X, FLAGS["some rows"])[1]
    assert_same_draws(original, mended, FLAGS["some rows"])


# --------------------------------------------------------------------------------------
# ``destination_is_unseen``: without positions the merged form still writes ``D[P] = V``
# (no rows), which bumps ``D``'s version counter; the original writes nothing.

DESTINATION_FROM_THE_CALLER = """
    def main(x, flags, merged):
        (idx,) = torch.where(flags > 0)
        if len(idx) > 0:
            rows = LINEAR(x[idx])
            merged[idx] = rows * 3
        return x + 1
"""


def _saved_destination_call(function, flags, backend):
    """Autograd saves the destination before the call; the backward after it."""
    run = function
    if backend is not None:
        torch._dynamo.reset()
        run = torch.compile(function, backend=backend)
    base = torch.randn(4, 3, requires_grad=True, generator=torch.Generator().manual_seed(5))
    destination = base * 1
    weight = torch.randn(4, 3, requires_grad=True, generator=torch.Generator().manual_seed(6))
    saved = destination * weight
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        value = run(X, flags, destination)
    try:
        saved.sum().backward()
        error = None
    except RuntimeError as exception:
        error = str(exception).splitlines()[0]
    return value, destination.detach().clone(), destination._version, error, base.grad, weight.grad


@pytest.mark.parametrize("backend", [None, "eager", "aot_eager"])
def test_a_destination_autograd_saved_is_not_written_without_rows(backend):
    original, mended, result = mended_pair(DESTINATION_FROM_THE_CALLER)
    assert result.changed and not finding_reasons(result, "Capture")
    expected = _saved_destination_call(original.main, FLAGS["no row"], None)
    assert expected[3] is None and expected[2] == 0
    got = _saved_destination_call(mended.main, FLAGS["no row"], backend)
    assert got[3] is None, got[3]
    assert got[2] == expected[2]  # the version counter
    for ours, theirs in zip(got[:2] + got[4:], expected[:2] + expected[4:]):
        assert torch.equal(ours, theirs)
    if backend is not None:
        assert any(
            "destination_is_unseen" in r and "comes from outside the graph" in r
            for r in store.trace_time_declines.values()
        ), store.trace_time_declines


@pytest.mark.parametrize("rows", sorted(FLAGS))
def test_a_destination_from_the_caller_keeps_the_branch_and_its_counts(rows):
    original, mended, _ = mended_pair(DESTINATION_FROM_THE_CALLER)
    with torch.no_grad():
        assert counts(mended.main, X, FLAGS[rows], X * 2) == counts(original.main, X, FLAGS[rows], X * 2)

        def on_a_fresh_destination(module):
            def main():
                destination = X * 2
                return module.main(X, FLAGS[rows], destination), destination
            return main

        assert_equivalent(
            on_a_fresh_destination(original), on_a_fresh_destination(mended), backends=("eager", "aot_eager")
        )


def test_must_not_rewrite_while_tracing_a_destination_read_before_the_branch():
    """A read before the branch could have been saved by autograd."""
    original, mended, result = mended_pair("""
        def main(x, flags):
            (idx,) = torch.where(flags > 0)
            merged = x * 2
            total = merged.sum()
            if len(idx) > 0:
                merged[idx] = LINEAR(x[idx])
            return merged + total
    """)
    assert result.changed and not finding_reasons(result, "Capture")
    with torch.no_grad():
        assert counts(mended.main, X, FLAGS["some rows"]) == counts(original.main, X, FLAGS["some rows"])
        assert any(
            "destination_is_unseen" in r and "reads the destination" in r for r in store.trace_time_declines.values()
        ), store.trace_time_declines
        for flags in FLAGS.values():
            assert_equivalent(original.main, mended.main, X, flags, backends=("eager", "aot_eager"))


def test_must_not_rewrite_while_tracing_a_destination_that_is_a_view():
    original, mended, _ = mended_pair("""
        def main(x, flags):
            (idx,) = torch.where(flags > 0)
            whole = x * 2
            merged = whole[:, :2]
            if len(idx) > 0:
                merged[idx] = LINEAR(x[idx])[:, :2]
            return whole
    """)
    with torch.no_grad():
        assert counts(mended.main, X, FLAGS["some rows"]) == counts(original.main, X, FLAGS["some rows"])
        assert any(
            "destination_is_unseen" in r and "is a view" in r for r in store.trace_time_declines.values()
        ), store.trace_time_declines
        for flags in FLAGS.values():
            assert_equivalent(original.main, mended.main, X, flags, backends=("eager", "aot_eager"))
