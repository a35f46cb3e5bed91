"""The checks of the whole trace (``graphmend.runtime.whole_trace_conditions``): a statement that lost
its break in a trace keeps it where the rest of the trace shows that joining the graphs
would change what the program does. One must-not-rewrite test per condition, each with
the case that is still rewritten beside it, compared with the original run eagerly and
compiled (values, gradients, the generator's state, printed text)."""

from __future__ import annotations

import contextlib
import io
import textwrap

import pytest
import torch
import torch.fx

from graphmend.core.legality import condition_id
from graphmend.runtime import graph_inspection, reset
from graphmend.runtime.store import store
from helpers import (
    breaks,
    graphs_and_breaks_under_aot_eager,
    graphs_and_outcomes_over_calls,
    original_and_mended,
)
from tools.fuzz.grammar import OWN_STREAM_DEFINITIONS


def _pair(body: str):
    original, mended, _ = original_and_mended("import torch\n" + textwrap.dedent(body))
    return original, mended


def _run(function, make_args, backend=None):
    """(value, gradients, generator state, printed text) of one call from a fixed seed."""
    torch._dynamo.reset()
    target = torch.compile(function, backend=backend, dynamic=False) if backend else function
    torch.manual_seed(0)
    args = make_args()
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        value = target(*args)
    gradients = None
    leaves = [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad]
    if leaves:
        value.sum().backward()
        gradients = [leaf.grad.clone() for leaf in leaves]
    return value.detach(), gradients, torch.get_rng_state(), printed.getvalue()


def _assert_bit_identical(first, second):
    value, gradients, rng, text = first
    other_value, other_gradients, other_rng, other_text = second
    assert torch.equal(value, other_value) and text == other_text
    assert torch.equal(rng, other_rng)
    assert (gradients is None) == (other_gradients is None)
    for mine, theirs in zip(gradients or (), other_gradients or ()):
        assert torch.equal(mine.view(torch.int32), theirs.view(torch.int32))


def _pieces(run):
    value, gradients, rng, text = run
    bits = None if gradients is None else [g.view(torch.int32) for g in gradients]
    return {"value and text": (value, text), "gradients": bits, "generator": rng}


def _same(first, second) -> bool:
    if isinstance(first, torch.Tensor):
        return isinstance(second, torch.Tensor) and torch.equal(first, second)
    if isinstance(first, (tuple, list)):
        return type(first) is type(second) and len(first) == len(second) and all(map(_same, first, second))
    return first == second


def _assert_same_as_original(original, mended, make_args, backends=("eager", "aot_eager")):
    """Mended eagerly is the original eagerly; compiled, each piece (value and printed
    text, gradients, generator) is the original's compiled with that backend or eager
    (mended code draws random numbers as eagerly: ``trace_hooks._check_the_compiled_graph``)."""
    eager = _run(original.f, make_args)
    _assert_bit_identical(_run(mended.f, make_args), eager)
    for backend in backends:
        observed = _pieces(_run(mended.f, make_args, backend))
        allowed = (_pieces(eager), _pieces(_run(original.f, make_args, backend)))
        for name, piece in observed.items():
            assert any(_same(piece, other[name]) for other in allowed), (backend, name)


@pytest.fixture(autouse=True)
def _fresh_declines():
    reset()
    yield
    reset()


# gradient_sums_keep_their_order -----------------------------------------------------------

GRADIENT_SUMMED_FROM_THREE_GRAPHS = """
    def f(x):
        a = x * 1.1
        b = a.sin() + a.cos()
        print("between")
        return b * a + a.exp() + a.tanh()
"""

# ``x`` receives two contributions before the print and one after.
INPUT_USED_ON_BOTH_SIDES = """
    def f(x):
        a = (x * x).sin()
        print("between")
        return a * x
"""


def test_gradient_sums_keep_their_order__a_tensor_made_in_the_graph_used_on_both_sides_is_joined():
    original, mended = _pair(GRADIENT_SUMMED_FROM_THREE_GRAPHS)
    make_args = lambda: (torch.linspace(-1.0, 1.0, 7, requires_grad=True),)  # noqa: E731
    assert breaks(original.f, *make_args()) == 1
    assert breaks(mended.f, *make_args()) == 0
    _assert_same_as_original(original, mended, make_args)


def test_gradient_sums_keep_their_order__an_input_used_twice_before_and_once_after():
    original, mended = _pair(INPUT_USED_ON_BOTH_SIDES)
    make_args = lambda: (torch.linspace(-1.0, 1.0, 7, requires_grad=True),)  # noqa: E731
    assert _graphs_under("aot_eager", mended.f, *make_args()) == _graphs_under("aot_eager", original.f, *make_args()) == 2
    assert any("contributions in 2 of the original's graphs" in reason for reason in store.trace_time_declines.values())
    _assert_same_as_original(original, mended, make_args)


def test_gradient_sums_keep_their_order__the_same_code_without_autograd_is_one_graph():
    original, mended = _pair(INPUT_USED_ON_BOTH_SIDES)
    make_args = lambda: (torch.linspace(-1.0, 1.0, 7),)  # noqa: E731
    assert _graphs_under("aot_eager", original.f, *make_args()) == 2
    assert _graphs_under("aot_eager", mended.f, *make_args()) == 1
    _assert_same_as_original(original, mended, make_args)


def test_gradient_sums_keep_their_order__a_refusal_under_grad_does_not_hold_under_no_grad():
    original, mended = _pair(INPUT_USED_ON_BOTH_SIDES)
    assert _graphs_under("aot_eager", mended.f, torch.ones(3, requires_grad=True)) == 2
    with torch.no_grad():
        assert _graphs_under("aot_eager", mended.f, torch.ones(3, requires_grad=True)) == 1


def _graphs_under(backend, function, *args) -> int:
    """Graphs compiled for one call under a backend named to TorchDynamo."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    with contextlib.redirect_stdout(io.StringIO()):
        torch.compile(function, backend=backend, dynamic=False)(*args)
    return counters["stats"]["unique_graphs"]


# random_draws_stay_on_their_side ------------------------------------------------------------


def test_random_draws_stay_on_their_side__draws_before_and_after_an_output():
    """Under a backend that runs the ops in order each draw is its own op, drawn from the
    one generator joined or not; under inductor one graph's seeds would serve both."""
    original, mended = _pair(
        """
        def f(x):
            a = x + torch.rand_like(x)
            print("between")
            return a + torch.rand_like(x)
        """
    )
    make_args = lambda: (torch.ones(5),)  # noqa: E731
    assert breaks(original.f, *make_args()) == 1
    assert breaks(mended.f, *make_args()) == 0
    assert graphs_and_breaks_under_aot_eager(mended.f, *make_args()) == (1, 0)
    store.trace_time_declines.clear()
    _assert_same_as_original(original, mended, make_args, backends=("eager", "aot_eager", "inductor"))
    assert any("both sides" in reason for reason in store.trace_time_declines.values())


def _claims_refused_under_a_backend_of_its_own(function, *args) -> set[str]:
    """The conditions that refused claims in one call compiled by a backend graphmend
    cannot tell keeps the graph's order (it wraps the graph's ``forward``)."""

    def backend(graph_module, example_inputs):
        run = graph_module.forward

        def compiled(*arguments):
            return run(*arguments)

        return compiled

    store.trace_time_declines.clear()
    torch._dynamo.reset()
    with contextlib.redirect_stdout(io.StringIO()):
        torch.compile(function, backend=backend)(*args)
    return {condition_id(reason) for reason in store.trace_time_declines.values()}


def test_random_draws_stay_on_their_side__an_input_first_read_after_the_output():
    """A claim's place was the count of the graph's nodes when it was made, and TorchDynamo
    puts an input it first reads later before every node: a draw just before the print
    then stood at the claim's place, not before it, and the draws on both sides shared one
    graph under a backend that may reorder them (inductor). Inputs are not counted now."""
    original, mended = _pair(
        """
        def f(x):
            a = torch.rand(3)
            print("drew", a.shape)
            return a + torch.rand(3) + x
        """
    )
    assert "G307" in _claims_refused_under_a_backend_of_its_own(mended.f, torch.ones(3))
    _assert_same_as_original(original, mended, lambda: (torch.ones(3),))


def test_random_draws_stay_on_their_side__draws_after_the_output_only_are_joined():
    original, mended = _pair(
        """
        def f(x):
            a = x * 2.0
            print("between")
            return a + torch.rand_like(x)
        """
    )
    make_args = lambda: (torch.ones(5),)  # noqa: E731
    assert breaks(original.f, *make_args()) == 1
    assert breaks(mended.f, *make_args()) == 0
    _assert_same_as_original(original, mended, make_args)


EAGER_LOOP_WITH_DRAWS = """
    def f(x):
        for step in range(2):
            print("step", step)
            x = torch.nn.functional.dropout(x * 1.5, 0.3) + torch.rand_like(x)
        return x
    """


def test_random_draws_stay_on_their_side__draws_the_original_ran_eagerly_join_in_order():
    """The original ran the loop eagerly: its draws are eager's. A backend that keeps the
    graph's order draws them from the one generator in the same order, and with
    autocast off ``aot_eager`` differentiates a dropout as eager does: joined."""
    original, mended = _pair(EAGER_LOOP_WITH_DRAWS)
    make_args = lambda: (torch.ones(5, requires_grad=True),)  # noqa: E731
    assert graphs_and_breaks_under_aot_eager(original.f, *make_args()) == (0, 1)
    assert graphs_and_breaks_under_aot_eager(mended.f, *make_args()) == (1, 0)
    _assert_same_as_original(original, mended, make_args)


def test_random_draws_stay_on_their_side__not_under_autocast_where_the_original_ran_eagerly():
    """Under autocast, ``aot_eager`` differentiates a dropout otherwise than eager does
    (TorchDynamo compiling such a layer whole, without graphmend, differs alike): draws
    the original ran eagerly keep the break there."""
    original, mended = _pair(EAGER_LOOP_WITH_DRAWS)
    make_args = lambda: (torch.ones(5, requires_grad=True),)  # noqa: E731
    store.trace_time_declines.clear()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        counts = graphs_and_breaks_under_aot_eager(mended.f, *make_args())
        original_counts = graphs_and_breaks_under_aot_eager(original.f, *make_args())
    assert counts == original_counts == (0, 1)
    assert any("reduced precision" in reason for reason in store.trace_time_declines.values())


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_random_draws_stay_on_their_side__not_in_reduced_precision_where_the_original_ran_eagerly(dtype):
    """Without autocast too: ``aot_eager``'s dropout backward on a bfloat16 or float16
    tensor rounds otherwise than eager's, so draws the original ran eagerly on such
    tensors keep the break."""
    original, mended = _pair(EAGER_LOOP_WITH_DRAWS)
    make_args = lambda: (torch.ones(6, dtype=dtype, requires_grad=True),)  # noqa: E731
    store.trace_time_declines.clear()
    assert graphs_and_breaks_under_aot_eager(mended.f, *make_args()) == (0, 1)
    assert graphs_and_breaks_under_aot_eager(original.f, *make_args()) == (0, 1)
    assert any("reduced precision" in reason for reason in store.trace_time_declines.values())
    _assert_same_as_original(original, mended, make_args)


# an unused random draw is kept ------------------------------------------------------------


def test_an_unused_draw_in_mended_code_is_kept_as_eagerly():
    """AOTAutograd drops an unused draw; which draws are unused depends on TorchDynamo's
    liveness at a break, which the rewritten code's jumps change (long fuzz run seeds
    7449, 13156). A graph from mended code that draws compiles with ``fallback_random``:
    the draw is kept and the generator advances as in the original run eagerly."""
    original, mended = _pair(
        """
        def f(x):
            a = x * 2.0
            print("between")
            torch.rand(1)
            return a
        """
    )
    make_args = lambda: (torch.ones(5),)  # noqa: E731
    assert breaks(original.f, *make_args()) == 1
    assert breaks(mended.f, *make_args()) == 0
    eager = _run(original.f, make_args)
    for backend in ("eager", "aot_eager", "inductor"):
        _assert_bit_identical(_run(mended.f, make_args, backend), eager)


def test_unused_draws_in_a_graph_that_records_autograd_are_kept_as_eagerly():
    """AOTAutograd's partition of a joint graph dropped one of two unused draws even
    under ``fallback_random`` (long fuzz run seed 182689: the generator stood where
    neither eager nor the original compiled left it). The draws are returned from the
    graph, so no backend drops them."""
    original, mended = _pair(
        """
        def f(x):
            if x.sum() > 100:
                print("large")
            y = x + 1.0
            for step in range(2):
                unused = x + torch.randn_like(x) * 0.1
            return y
        """
    )
    make_args = lambda: (torch.ones(5, requires_grad=True),)  # noqa: E731
    assert breaks(original.f, *make_args()) == 1
    assert breaks(mended.f, *make_args()) == 1
    eager = _run(original.f, make_args)
    for backend in ("eager", "aot_eager"):
        _assert_bit_identical(_run(mended.f, make_args, backend), eager)


HELPER_WITH_AN_UNUSED_DRAW_UNDER_A_GIVEN_UP_LOOP = """
def noisy(t):
    unused = t + torch.randn_like(t) * 0.1
    return t * 0.5

def f(x):
    x = x * 2.0
    print("between")
    x = x + torch.randn_like(x) * 0.0
    unused = torch.randn_like(x)
    for step in range(3):
        if x.sum().item() > 100.0:
            x = x - 1.0
        x = noisy(x)
    return x
"""


@pytest.mark.xfail(strict=True, reason="open: a helper's graph below a given-up mended frame drops its draws")
def test_unused_draws_of_a_helper_compiled_under_mended_code_are_kept_as_eagerly():
    """The loop's ``.item()`` makes TorchDynamo give up the mended frame, which then runs
    eagerly and calls the helper, compiled as a frame of its own. Its unused draw, kept
    in mended graphs alone, left the generator where neither eager nor the original
    compiled leaves it (fuzz seed 852012: one of four unused draws kept). Compiled below
    a mended frame, a graph should keep its draws too; keeping them in every graph
    compiled while mended code runs would also change graphs of code graphmend did not
    rewrite (a mended script's loop calling a compiled model), so it is open."""
    original, mended = _pair(HELPER_WITH_AN_UNUSED_DRAW_UNDER_A_GIVEN_UP_LOOP)
    make_args = lambda: (torch.ones(5),)  # noqa: E731
    eager = _run(original.f, make_args)
    for backend in ("eager", "aot_eager"):
        _assert_bit_identical(_run(mended.f, make_args, backend), eager)


def test_unused_draws_of_code_graphmend_left_alone_are_dropped_as_the_originals():
    """The must-not row: with nothing rewritten, the graphs are the original's, and
    AOTAutograd drops the unused draws as it does for the original compiled."""
    source = HELPER_WITH_AN_UNUSED_DRAW_UNDER_A_GIVEN_UP_LOOP.replace('    print("between")\n', "")
    original, mended, result = original_and_mended("import torch\n" + textwrap.dedent(source))
    assert not result.changed
    make_args = lambda: (torch.ones(5),)  # noqa: E731
    assert not _run(mended.f, make_args, "aot_eager")[2].equal(_run(original.f, make_args)[2])
    _assert_bit_identical(_run(mended.f, make_args, "aot_eager"), _run(original.f, make_args, "aot_eager"))


def test_random_numbers_of_mended_code_under_inductor_are_eagers():
    """Inductor's own random numbers depend on the graph they are compiled in, which
    joining graphs changes (long fuzz run seeds 20100, 20325): mended code draws eager's."""
    original, mended = _pair(
        """
        def f(x):
            a = x * 2.0
            print("between")
            return a + torch.rand_like(x) + torch.randn_like(x)
        """
    )
    make_args = lambda: (torch.ones(5),)  # noqa: E731
    assert breaks(mended.f, *make_args()) == 0
    _assert_bit_identical(_run(mended.f, make_args, "inductor"), _run(original.f, make_args))


# rest_of_eager_frame_compiles_whole -----------------------------------------------------------

GUARD_THEN_AN_ITEM = """
    def f(x):
        if (x < 0).any():
            raise ValueError("negative")
        y = x * 2.0
        n = int(y.sum().item())
        return y * n
"""


def test_rest_of_eager_frame_compiles_whole__guard_with_a_break_after_it():
    """After the original's guard fails once, TorchDynamo runs the rest of the frame
    eagerly on every call (long fuzz run seeds 2098, 7639); a break after the guard
    would leave that rest compiled in resumed frames that no check of this trace sees."""
    original, mended = _pair(GUARD_THEN_AN_ITEM)
    assert breaks(mended.f, torch.ones(3)) == breaks(original.f, torch.ones(3)) == 2
    assert any("rest of the original frame" in reason for reason in store.trace_time_declines.values())


def test_rest_of_eager_frame_compiles_whole__guard_in_a_frame_that_is_one_graph_is_lowered():
    original, mended = _pair(
        """
        def f(x):
            if (x < 0).any():
                raise ValueError("negative")
            return x * 2.0
        """
    )
    assert breaks(original.f, torch.ones(3)) == 1
    assert breaks(mended.f, torch.ones(3)) == 0
    _assert_same_as_original(original, mended, lambda: (torch.ones(3),))


# trace_checks_unavailable -----------------------------------------------------------------


def test_trace_checks_unavailable__no_claim_without_the_hooks(monkeypatch):
    original, mended = _pair(
        """
        def f(x):
            a = x * 2.0
            print("between")
            return a + 1.0
        """
    )
    assert breaks(mended.f, torch.ones(3)) == 0
    monkeypatch.setitem(store.hooks_installed, "check_before_compiling", False)
    assert breaks(mended.f, torch.ones(3)) == breaks(original.f, torch.ones(3)) == 1
    assert any("lacks" in reason for reason in store.trace_time_declines.values())


# draws_random_numbers: by the operators' ``nondeterministic_seeded`` tag -------------------


class _Draws(torch.nn.Module):
    def __init__(self, training_dropout: bool):
        super().__init__()
        self.training_dropout = training_dropout

    def forward(self, x):
        y = torch.nn.functional.dropout(x, 0.5, self.training_dropout)
        z = torch.nn.functional.dropout(x, 0.0, True)
        w = x.bernoulli_(0.5)
        q = x.reshape(1, 1, -1, 1)
        a = torch.nn.functional.scaled_dot_product_attention(q, q, q)
        b = torch.nn.functional.scaled_dot_product_attention(q, q, q, dropout_p=0.1)
        c = torch.nn.functional.scaled_dot_product_attention(q, q, q, None, 0.0)
        attended = (a + b + c).reshape(x.shape)
        return y + z + w + torch.sigmoid(x) + torch.randn_like(x) + attended


# Attention is seeded for its dropout: without ``dropout_p`` (or at 0) it draws nothing.
_ATTENTION_DRAWS = {
    "scaled_dot_product_attention": False,
    "scaled_dot_product_attention_1": True,
    "scaled_dot_product_attention_2": False,
}


@pytest.mark.parametrize(
    "training, expected",
    [
        (True, {"dropout": True, "dropout_1": False, "bernoulli_": True, "sigmoid": False, "randn_like": True}
         | _ATTENTION_DRAWS),
        (False, {"dropout": False, "dropout_1": False, "bernoulli_": True, "sigmoid": False, "randn_like": True}
         | _ATTENTION_DRAWS),
    ],
)
def test_draws_random_numbers_reads_the_operator_tags(training, expected):
    graph = torch.fx.symbolic_trace(_Draws(training)).graph
    found = {
        node.name: graph_inspection.draws_random_numbers(node)
        for node in graph.nodes
        if node.op in ("call_function", "call_method") and node.name in expected
    }
    assert found == expected


def test_joined_graph_records_no_autograd__parameters_read_under_no_grad_are_joined():
    """TorchDynamo's example value of ``weight.t()`` traced under ``torch.no_grad`` is a
    leaf that requires grad: it records nothing (layoutlmv3's relative position bias
    was refused, and its frame traced a hundred times)."""
    original, mended = _pair(
        """
        class Scale(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.weight = torch.nn.Parameter(torch.ones(3, 3))

            def forward(self, x):
                w = self.weight.t()
                print("between")
                return x @ w

        MODEL = Scale()

        def f(x):
            return MODEL(x)
        """
    )
    with torch.no_grad():
        assert breaks(original.f, torch.ones(2, 3)) >= 1
        assert breaks(mended.f, torch.ones(2, 3)) == 0


# outputs_share_no_graph_with_a_lowered_guard ---------------------------------------------

GUARD_IN_A_HELPER_THEN_OUTPUT = """
    def check(t):
        if t.sum() > 0:
            raise ValueError("positive")
        return t

    def f(x):
        x = check(x)
        print("checked")
        x.add_(1.0)
        return x + 0.25
"""


def _outcome(function, backend, *arguments):
    torch._dynamo.reset()
    target = torch.compile(function, backend=backend, dynamic=False) if backend else function
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        try:
            value = target(*[a.clone() for a in arguments])
        except Exception as error:  # noqa: BLE001 - the outcome is compared
            value = (type(error).__name__, str(error))
    return printed.getvalue(), value


def test_outputs_share_no_graph_with_a_lowered_guard__output_after_a_guard_in_a_helper():
    """Inductor ran the output before the fused assertion and then read freed buffers
    (UnboundLocalError), where the original raised first (long fuzz run seed 13150)."""
    original, mended = _pair(GUARD_IN_A_HELPER_THEN_OUTPUT)
    failing = torch.ones(4)
    assert _outcome(mended.f, "inductor", failing) == _outcome(original.f, None, failing)
    assert any("lowered guard shares the graph" in reason for reason in store.trace_time_declines.values())
    passing = -torch.ones(4)
    for backend in ("eager", "aot_eager"):
        printed, value = _outcome(mended.f, backend, passing)
        expected_printed, expected_value = _outcome(original.f, None, passing)
        assert printed == expected_printed and torch.equal(value, expected_value)


def test_outputs_share_no_graph_with_a_lowered_guard__output_alone_is_joined():
    original, mended = _pair(
        """
        def f(x):
            print("checked")
            return x + 0.25
        """
    )
    assert breaks(original.f, torch.ones(4)) == 1
    assert breaks(mended.f, torch.ones(4)) == 0


def test_no_input_written_in_place_before__output_after_an_input_is_updated():
    """Defer (graphmend.runtime.deferred): inductor freed an input it writes in place
    before the kernel that writes it ran, when an output operator without tensor
    operands followed the write (UnboundLocalError; long fuzz run seeds 20150, 20325)."""
    original, mended = _pair(
        """
        def scale(z):
            z.mul_(10.0)
            z = torch.tanh(z) * 3.0
            print("scaled")
            return z

        def f(x):
            return scale(x)
        """
    )
    x = torch.tensor([0.5, 1.0, 1.5])
    printed, value = _outcome(mended.f, "inductor", x)
    expected_printed, expected_value = _outcome(original.f, None, x)
    assert printed == expected_printed
    assert torch.allclose(value, expected_value)
    # a backend that runs the graph in order (the counting backend) frees nothing early
    assert breaks(original.f, x.clone()) >= 1
    assert breaks(mended.f, x.clone()) == 0


def test_no_input_written_in_place_before__output_before_the_update_is_joined():
    original, mended = _pair(
        """
        def f(x):
            print("scaling")
            x.mul_(10.0)
            return torch.tanh(x) * 3.0
        """
    )
    x = torch.tensor([0.5, 1.0, 1.5])
    assert breaks(original.f, x.clone()) == 1
    assert breaks(mended.f, x.clone()) == 0


def test_outputs_share_no_graph_with_an_input_written_in_place__write_after_the_output():
    """The same inductor fault with the write after the output (long fuzz run seed
    72075: ``torch.exp(y, out=h1)`` into an input after a deferred warning): the whole
    trace refuses the output's claim under a backend that may reorder, and keeps it
    under one that runs the graph in order."""
    original, mended = _pair(
        """
        def f(y, x):
            z = torch.abs(y * 0.25)
            print("copying")
            torch.exp(y, out=x)
            return x.sum(), z
        """
    )
    arguments = (torch.tensor([1.0, -2.0, 0.5]), torch.tensor([0.5, 1.0, 1.5]))
    assert breaks(original.f, *[a.clone() for a in arguments]) == 1
    assert breaks(mended.f, *[a.clone() for a in arguments]) == 0
    printed, value = _outcome(mended.f, "inductor", *arguments)
    expected_printed, expected_value = _outcome(original.f, None, *arguments)
    assert printed == expected_printed
    assert all(torch.allclose(v, e) for v, e in zip(value, expected_value, strict=True))


# The fuzz grammar's own stream (a ``write`` in Python appending to ``WRITTEN``).
STDOUT_SWAPPED_AROUND_A_PRINT = "import logging\nimport sys\n" + OWN_STREAM_DEFINITIONS + """
def f(x):
    y = x * 2.0
    saved = sys.stdout
    sys.stdout = OWN_STREAM
    print("swapped", y.sum())
    sys.stdout = saved
    return y + 1.0
"""


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_no_output_state_changed_in_trace__print_after_stdout_is_swapped(backend):
    """Defer (graphmend.runtime.deferred): TorchDynamo applies ``sys.stdout = stream``
    only after the graph, so a print performed inside the graph went to the stream the
    caller had, not the program's own (fuzz construct ``stdout-swapped``, seed 30017)."""
    original, mended = _pair(STDOUT_SWAPPED_AROUND_A_PRINT)
    x = torch.tensor([0.5, 1.0, 1.5])
    expected_printed, expected_value = _outcome(original.f, None, x)
    expected_written = list(original.WRITTEN)
    printed, value = _outcome(mended.f, backend, x)
    assert printed == expected_printed == ""
    assert mended.WRITTEN == expected_written == ["swapped", " ", "tensor(6.)", "\n"]
    assert torch.equal(value, expected_value)
    assert breaks(mended.f, x.clone()) == breaks(original.f, x.clone()) == 1


def test_no_output_state_changed_in_trace__print_before_the_swap_is_joined():
    original, mended = _pair(
        """
        import sys

        def f(x):
            y = x * 2.0
            print("first", y.sum())
            sys.stdout = sys.stdout
            return y + 1.0
        """
    )
    x = torch.tensor([0.5, 1.0, 1.5])
    assert _outcome(mended.f, "eager", x)[0] == _outcome(original.f, None, x)[0] == "first tensor(6.)\n"
    assert breaks(original.f, x.clone()) == 1
    assert breaks(mended.f, x.clone()) == 0


def test_no_earlier_output_in_graph__two_outputs_under_inductor():
    """Defer (graphmend.runtime.deferred): inductor ran each output operator when its
    operands were ready, so the prints of a loop's ``finally`` (their operand ready
    first) came before the prints above them (long fuzz run seed 42375, compared as the
    fuzzer compares it; it differed before the check). Where the backend may reorder,
    a graph holds one output."""
    from tools.fuzz.grammar import generate
    from tools.fuzz.observe import compare

    report = compare(generate(42375), modes=("compiled:inductor",), calls=1)
    assert report.modes_run == ["compiled:inductor"]
    assert not report.differences, [difference.describe() for difference in report.differences]


def test_no_earlier_output_in_graph__a_backend_that_keeps_order_holds_both():
    original, mended = _pair(
        """
        def f(x):
            y = torch.tanh(x) * 2.0
            print("late", y)
            print("early", x.sum())
            return y
        """
    )
    x = torch.tensor([0.5, 1.0, 1.5])
    assert _outcome(mended.f, "eager", x)[0] == _outcome(original.f, None, x)[0]
    with contextlib.redirect_stdout(io.StringIO()):
        assert (breaks(original.f, x.clone()), breaks(mended.f, x.clone())) == (2, 0)


# ordered_operators_share_no_graph_with_aliased_inputs_written_in_place -------------------

OUTPUT_THEN_A_WRITE_THROUGH_AN_ALIAS = """
    def f(x, flat):
        print("rows", flat.sum())
        x.sub_(1.0)
        return flat * 2.0
"""

GUARD_THEN_A_WRITE_THROUGH_AN_ALIAS = """
    def f(x, flat):
        if (flat < -100).any():
            raise ValueError("too small")
        x.sub_(1.0)
        return flat * 2.0
"""


def _aliased_outcome(function, backend):
    """(printed, value, x afterwards) of one call on ``x`` and a view of it."""
    torch._dynamo.reset()
    target = torch.compile(function, backend=backend, dynamic=False) if backend else function
    x = torch.arange(6.0).reshape(2, 3)
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        try:
            value = target(x, x.flatten()).tolist()
        except Exception as error:  # noqa: BLE001 - the outcome is compared
            value = (type(error).__name__, str(error))
    return printed.getvalue(), value, x.tolist()


@pytest.mark.parametrize("body", [OUTPUT_THEN_A_WRITE_THROUGH_AN_ALIAS, GUARD_THEN_A_WRITE_THROUGH_AN_ALIAS],
                         ids=["output", "lowered_guard"])
def test_ordered_operators_share_no_graph_with_aliased_inputs_written_in_place__under_aot_eager(body):
    """AOTAutograd's forward for a graph with an ordered operator and an input written
    in place that shares its memory with another input reads an effect token it was
    not given: StopIteration under aot_eager (long fuzz run seed 154090). The claim is
    refused and the statement keeps its break."""
    original, mended = _pair(body)
    expected = _aliased_outcome(original.f, None)
    assert _aliased_outcome(mended.f, "aot_eager") == expected
    assert any("shares its memory with another input" in reason for reason in store.trace_time_declines.values())


@pytest.mark.parametrize("body", [OUTPUT_THEN_A_WRITE_THROUGH_AN_ALIAS, GUARD_THEN_A_WRITE_THROUGH_AN_ALIAS],
                         ids=["output", "lowered_guard"])
def test_ordered_operators_share_no_graph_with_aliased_inputs_written_in_place__joined_as_written(body):
    """A backend that runs the graph as written (the counting backend, TorchDynamo's
    ``eager``) has no effect tokens: the statement is joined."""
    original, mended = _pair(body)
    x = torch.arange(6.0).reshape(2, 3)
    assert breaks(original.f, x, x.flatten()) == 1
    x = torch.arange(6.0).reshape(2, 3)
    assert breaks(mended.f, x, x.flatten()) == 0
    assert _aliased_outcome(mended.f, "eager") == _aliased_outcome(original.f, None)
    assert not store.trace_time_declines


# frame_was_not_given_up_while_tracing -----------------------------------------------------

OUTPUT_THEN_AN_ERROR_THE_CODE_RAISES = """
    def f(x, items):
        y = x * 2.0
        print("total", y.sum())
        z = y + 1.0
        return items[0] + z
"""


def test_frame_was_not_given_up_while_tracing__an_error_raised_after_an_output():
    """TorchDynamo gives up a frame whose trace an exception escapes and runs it eagerly
    from then on. The original compiled the graph before its print and gave up only the
    resume function after it; the mended frame, the print joined, was given up whole
    (no graph). The claim is refused and the frame traced again (seed 142378's class)."""
    original, mended = _pair(OUTPUT_THEN_AN_ERROR_THE_CODE_RAISES)
    x = torch.arange(4.0)
    calls = [(x, []), (x, [torch.ones(4)]), (x, [])]
    expected_graphs, expected = graphs_and_outcomes_over_calls(original.f, calls)
    assert expected_graphs == 1
    assert graphs_and_outcomes_over_calls(mended.f, calls) == (expected_graphs, expected)
    assert any("gave up on the frame" in reason for reason in store.trace_time_declines.values())


def test_frame_was_not_given_up_while_tracing__the_frame_traced_whole_keeps_the_output_joined():
    original, mended = _pair(OUTPUT_THEN_AN_ERROR_THE_CODE_RAISES)
    x = torch.arange(4.0)
    calls = [(x, [torch.ones(4)]), (x, [torch.ones(4)])]
    original_graphs, expected = graphs_and_outcomes_over_calls(original.f, calls)
    assert original_graphs == 2
    assert graphs_and_outcomes_over_calls(mended.f, calls) == (1, expected)
    assert not store.trace_time_declines


# --- not_inside_inference_mode -------------------------------------------------------
# The original breaks inside ``torch.inference_mode()`` and TorchDynamo runs the graph
# after the break inside the real mode, so its outputs are inference tensors that the
# program may not update in place outside it; joined with the code before the block,
# ``aot_eager`` computed them as ordinary tensors (long fuzz run seed 220496).

INFERENCE_MODE_PROGRAMS = {
    "defer_in_a_with_block": """
        import torch

        def helper(t, u):
            print("in helper")
            return u - u

        def f(x, y):
            h = x * 0.75
            with torch.inference_mode():
                h = helper(h, x)
            torch.tanh(h, out=h)
            return h
    """,
    "defer_in_a_decorated_function": """
        import torch

        @torch.inference_mode()
        def helper(t, u):
            print("in helper")
            return u - u

        def f(x, y):
            h = x * 0.75
            h = helper(h, x)
            torch.tanh(h, out=h)
            return h
    """,
    "trap_in_a_decorated_function": """
        import torch

        @torch.inference_mode()
        def checked(t):
            if (t < 0).any():
                raise ValueError("negative")
            return t * 2.0

        def f(x, y):
            h = x * 0.75
            h = checked(y)
            h.add_(1.0)
            return h
    """,
    "where_in_a_with_block": """
        import torch

        def f(x, y):
            h = x * 0.75
            with torch.inference_mode():
                if y.sum() > 0:
                    h = y * 2.0
                else:
                    h = y * 3.0
            h.add_(1.0)
            return h
    """,
}


def _inference_outcome(function, arguments, backend):
    torch._dynamo.reset()
    compiled = torch.compile(function, backend=backend, dynamic=False) if backend else function
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        try:
            value = compiled(*arguments)
            result = ("value", value.tolist(), value.is_inference())
        except Exception as error:  # noqa: BLE001 - the outcome compared
            result = ("error", type(error).__name__, str(error).splitlines()[0])
    return result, printed.getvalue()


@pytest.mark.parametrize("name", sorted(INFERENCE_MODE_PROGRAMS))
def test_not_inside_inference_mode__the_graph_after_the_break_keeps_inference_tensors(name):
    original, mended = _pair(INFERENCE_MODE_PROGRAMS[name])
    arguments = (torch.ones(3), torch.ones(3))
    eager = _inference_outcome(original.f, arguments, None)
    assert eager[0][0] == "error" and "inference tensor" in eager[0][2]
    for backend in ("eager", "aot_eager"):
        assert _inference_outcome(mended.f, arguments, backend) == _inference_outcome(original.f, arguments, backend), backend
    assert any("inference_mode" in reason for reason in store.trace_time_declines.values())


def test_joined_graph_enters_no_inference_mode__output_after_the_block_keeps_its_break():
    """The print follows the block. Joined, the block's graph would run the code after
    the print too: an in-place update of the block's inference tensor there fails inside
    that graph (losing the side effects TorchDynamo applies when a graph returns, long
    fuzz run seed 250224), or fails to compile under ``aot_eager`` where the original's
    separate graph lets it succeed. The print keeps its break."""
    source = """
        import torch

        def f(x, y):
            with torch.inference_mode():
                h = x * 0.75
            print("after the block")
            return y + 1.0
        """
    original, mended = _pair(source)
    arguments = (torch.ones(3), torch.ones(3))
    assert breaks(original.f, *arguments) == 1
    assert breaks(mended.f, *arguments) == 1
    assert any("inference_mode" in reason for reason in store.trace_time_declines.values())
    assert _inference_outcome(mended.f, arguments, "aot_eager") == _inference_outcome(original.f, arguments, None)
    updated = source.replace('return y + 1.0', 'h.add_(1.0)\n            return y + 1.0')
    original, mended = _pair(updated)
    for backend in ("eager", "aot_eager"):
        assert _inference_outcome(mended.f, arguments, backend) == _inference_outcome(original.f, arguments, backend), backend


def test_not_inside_inference_mode__a_call_made_inside_the_mode_keeps_its_rewrites():
    """Serving code (vLLM, SGLang) calls the compiled model inside ``inference_mode``:
    the mode is the call's, not entered in the trace, and every graph runs in it."""
    original, mended = _pair(
        """
        import torch

        def f(x, y):
            h = x * 0.75
            print("between")
            if y.sum() > 0:
                h = h * 2.0
            else:
                h = h * 3.0
            return h
        """
    )
    arguments = (torch.ones(3), torch.ones(3))
    with torch.inference_mode():
        assert breaks(original.f, *arguments) == 2
        assert breaks(mended.f, *arguments) == 0
        for backend in ("eager", "aot_eager"):
            mended_outcome = _inference_outcome(mended.f, arguments, backend)
            assert mended_outcome == _inference_outcome(original.f, arguments, None), backend
            assert mended_outcome[0][2] is True  # an inference tensor, as eagerly


def _graphs_and_outcome_under_aot_eager(function, arguments, inference_mode=False):
    """Graphs compiled under ``aot_eager`` (through a backend of its own, which graphmend
    cannot take for one that runs the graph as written), and the call's printed text and
    value (as a list, with its strides) or exception."""
    from torch._dynamo.backends.debugging import aot_eager

    graphs = []

    def counting_aot_eager(graph_module, example_inputs):
        graphs.append(graph_module)
        return aot_eager(graph_module, example_inputs)

    torch._dynamo.reset()
    compiled = torch.compile(function, backend=counting_aot_eager, dynamic=False)
    mode = torch.inference_mode() if inference_mode else contextlib.nullcontext()
    with contextlib.redirect_stdout(io.StringIO()) as printed, mode:
        try:
            value = compiled(*arguments)
            result = ("value", value.tolist(), value.stride())
        except Exception as error:  # noqa: BLE001 - the outcome compared
            result = ("error", type(error).__name__, str(error).splitlines()[0])
    return len(graphs), (printed.getvalue(), result)


def test_joined_graph_writes_through_no_out_keyword__a_read_after_the_write_keeps_its_break():
    """Under a functionalizing backend the tensor written through ``out=`` takes the
    op's result layout: read in the same graph, ``x * 2.0`` is laid out as the
    transposed ``y`` (long fuzz run seed 332062, joined by Capture). The branch keeps
    its break; written by ``copy_``, which keeps ``x``'s layout, it is still merged, and
    so it is under a backend that runs the graph as written."""
    source = """
        import torch

        def f(x, y):
            torch.tanh(y, out=x)
            if y.sum() > 0:
                z = x * 2.0
            else:
                z = x * 3.0
            return torch.tanh(z)
        """

    def arguments():
        return torch.arange(6.0).reshape(2, 3) / 7, (torch.arange(6.0).reshape(3, 2) / 5).t()

    original, mended = _pair(source)
    expected = _graphs_and_outcome_under_aot_eager(original.f, arguments())
    assert expected[0] == 2 and expected[1][1][2] == (3, 1)
    assert _graphs_and_outcome_under_aot_eager(mended.f, arguments()) == expected
    assert any("out=" in reason for reason in store.trace_time_declines.values())
    reset()
    assert breaks(mended.f, *arguments()) == 0
    original, mended = _pair(source.replace("torch.tanh(y, out=x)", "x.copy_(torch.tanh(y))"))
    graphs, outcome = _graphs_and_outcome_under_aot_eager(mended.f, arguments())
    assert graphs == 1 and outcome == _graphs_and_outcome_under_aot_eager(original.f, arguments())[1]


def _outcome_and_history(module, backend: str, arguments, inference_mode: bool = False) -> tuple:
    """A fresh compiled call's value, or the first line of the RuntimeError it raised,
    and ``HISTORY`` after it (printed text silenced), made inside ``torch.inference_mode()``
    where asked."""
    module.HISTORY.clear()
    torch._dynamo.reset()
    try:
        with torch.inference_mode() if inference_mode else contextlib.nullcontext(), contextlib.redirect_stdout(
            io.StringIO()
        ):
            value = torch.compile(module.f, backend=backend, dynamic=False)(*arguments())
        result = ("value", value.tolist())
    except RuntimeError as error:
        result = ("error", str(error).splitlines()[0])
    return result, list(module.HISTORY)


def _assert_failing_after_the_same_side_effects(original, mended, arguments, message: str) -> None:
    """Under ``eager`` and ``aot_eager``, the original fails with ``message`` after
    appending to ``HISTORY``, and the mended program does the same."""
    for backend in ("eager", "aot_eager"):
        expected = _outcome_and_history(original, backend, arguments)
        assert expected[1] == [1] and message in expected[0][1]
        assert _outcome_and_history(mended, backend, arguments) == expected, backend


def test_joined_graph_writes_no_inference_tensor_in_place__the_graph_before_returns_first():
    """``h`` comes from ``torch.inference_mode()`` and is written in place outside it: the
    write fails. In the original it fails in the graph after the branch, once the graph
    before has returned and TorchDynamo has appended to ``HISTORY``; joined, the one
    graph fails and the append is lost (long fuzz run seed 331080, where the lost effect
    was a print's order). The branch keeps its break; called inside the mode, where the
    write succeeds, it is merged."""
    source = """
        import torch
        HISTORY = []

        def f(h, y):
            HISTORY.append(1)
            if y.sum() > 0:
                z = y * 2.0
            else:
                z = y * 3.0
            h.add_(1.0)
            return z + h
        """

    def arguments():
        with torch.inference_mode():
            h = torch.ones(3)
        return h, torch.arange(3.0)

    original, mended = _pair(source)
    _assert_failing_after_the_same_side_effects(original, mended, arguments, "inference tensor")
    assert any("inference tensor" in reason for reason in store.trace_time_declines.values())
    reset()
    with torch.inference_mode():
        assert breaks(original.f, *arguments()) == 1
        assert breaks(mended.f, *arguments()) == 0
    assert _outcome_and_history(mended, "aot_eager", arguments, inference_mode=True) == _outcome_and_history(
        original, "aot_eager", arguments, inference_mode=True
    )


FALLBACK_RANDOM_BY_FUNCTION = """
import torch

def rewritten(x):
    print("drawing", x.shape)
    return x + torch.rand(3)

def as_written(x):
    return x + torch.rand(3)
"""


def test_only_a_trace_holding_rewritten_code_compiles_with_fallback_random():
    """A function of a mended module that no rule rewrote is the original's code: its
    graph compiles as the original's would, with inductor's own random numbers; only a
    trace holding rewritten code gets ``fallback_random`` (issue 46: the module is not
    the unit)."""
    import torch._inductor.config as inductor_config

    _, mended, result = original_and_mended(FALLBACK_RANDOM_BY_FUNCTION)
    assert result.changed
    seen = {}

    for name in ("rewritten", "as_written"):
        def backend(graph_module, example_inputs, name=name):
            seen[name] = inductor_config.fallback_random
            return graph_module.forward

        torch._dynamo.reset()
        torch.compile(getattr(mended, name), backend=backend)(torch.zeros(3))
    assert seen == {"rewritten": True, "as_written": inductor_config.fallback_random}
    assert inductor_config.fallback_random is False


def test_no_earlier_output_in_graph__inductor_keeps_outputs_in_order_in_one_graph():
    """Inductor orders graphmend's output operators by AOTAutograd's effect tokens:
    two outputs share the graph, and the later one, whose operand is ready first, still
    prints second (D204 holds under inductor)."""
    original, mended = _pair(
        """
        def f(x):
            y = (torch.tanh(x) * 2.0).exp().sum()
            print("late", y > 0)
            print("early", x.shape[0])
            for step in range(2):
                print("step", step)
            return x * 2
        """
    )
    x = torch.tensor([0.5, 1.0, 1.5])
    expected = _outcome(original.f, None, x)[0]
    assert _outcome(mended.f, "inductor", x)[0] == expected == "late tensor(True)\nearly 3\nstep 0\nstep 1\n"
    with contextlib.redirect_stdout(io.StringIO()):
        assert breaks(original.f, x.clone()) == 3
    torch._dynamo.reset()
    from torch._dynamo.utils import counters

    counters.clear()
    with contextlib.redirect_stdout(io.StringIO()):
        torch.compile(mended.f, backend="inductor")(x.clone())
    assert sum(counters["graph_break"].values()) == 0


# rest_of_eager_frame_guards_no_resumed_list ----------------------------------------------

# A loop over the experts a batch hit, taken to Python as a list, with a statement that
# breaks in the original inside it: TorchDynamo ran that frame (a resume function after
# `.tolist()`'s break) eagerly for good. Joined, its trace unrolls the loop and guards on
# the list, and compiles again for each list.
LOOP_OVER_THE_EXPERTS_HIT = """
def f(x, choice):
    counts = torch.bincount(choice, minlength=4)
    expert_hit = {hits}
    for e in expert_hit:
{body}
    return x
"""

_LOOP_BODIES = {
    "output": "        x = x * (e + 1)\n        print('expert', e)",
    "selection": "        h = x * (e + 1)\n        if h.sum() > 0:\n            x = x + h\n        else:\n            x = x - h",
}
_HIT_LIST = "(counts > 0).nonzero().squeeze(-1).tolist()"
_EXPERTS_X = torch.tensor([1.0, -2.0, 3.0])
# 1, 2, 3 and 4 experts hit, in turn.
_EXPERT_CHOICES = [torch.tensor(c) for c in ([2, 2, 2, 2], [0, 3, 0, 3], [1, 0, 2, 1], [3, 1, 0, 2])]


def _graphs_breaks_and_outcomes_over_the_choices(function):
    from graphmend.counting import CountingBackend, recording_graph_breaks

    torch._dynamo.reset()
    backend = CountingBackend()
    compiled = torch.compile(function, backend=backend, dynamic=False)
    outcomes = []
    with recording_graph_breaks() as records:
        for choice in _EXPERT_CHOICES:
            with contextlib.redirect_stdout(io.StringIO()) as printed:
                value = compiled(_EXPERTS_X, choice)
            outcomes.append((value.tolist(), printed.getvalue()))
    return (backend.graphs, len(records.breaks)), outcomes


def _eager_outcomes(function):
    outcomes = []
    for choice in _EXPERT_CHOICES:
        with contextlib.redirect_stdout(io.StringIO()) as printed:
            value = function(_EXPERTS_X, choice)
        outcomes.append((value.tolist(), printed.getvalue()))
    return outcomes


@pytest.mark.parametrize("body", sorted(_LOOP_BODIES))
def test_rest_of_eager_frame_guards_no_resumed_list__a_claim_in_a_loop_over_the_experts_hit(body):
    """Joined, 9 graphs and 6 breaks where the original's 5 and 7 ran the loop's frame
    eagerly; kept, the original's counts and outcomes."""
    original, mended = _pair(LOOP_OVER_THE_EXPERTS_HIT.format(hits=_HIT_LIST, body=_LOOP_BODIES[body]))
    counts, outcomes = _graphs_breaks_and_outcomes_over_the_choices(original.f)
    assert counts == (5, 7)
    assert _graphs_breaks_and_outcomes_over_the_choices(mended.f) == ((5, 7), outcomes)
    assert outcomes == _eager_outcomes(original.f) == _eager_outcomes(mended.f)
    assert "G318" in {condition_id(reason) for reason in store.trace_time_declines.values()}


@pytest.mark.parametrize("body", sorted(_LOOP_BODIES))
def test_rest_of_eager_frame_guards_no_resumed_list__a_loop_of_a_fixed_length_joins(body):
    """The same loop over `range(len(counts))`: the frame the original ran eagerly
    compiles once, whatever the experts hit."""
    original, mended = _pair(LOOP_OVER_THE_EXPERTS_HIT.format(hits="range(len(counts))", body=_LOOP_BODIES[body]))
    counts, outcomes = _graphs_breaks_and_outcomes_over_the_choices(original.f)
    assert counts == (0, 2)
    assert _graphs_breaks_and_outcomes_over_the_choices(mended.f) == ((1, 1), outcomes)
    assert outcomes == _eager_outcomes(original.f)
    assert "G318" not in {condition_id(reason) for reason in store.trace_time_declines.values()}


def test_joined_graph_records_no_autograd_on_an_inference_tensor__the_print_keeps_its_break():
    """``t`` comes from ``torch.inference_mode()``, and the layer's weight requires grad:
    outside the mode ``F.linear`` cannot save ``t`` for backward and fails. In the
    original the print broke first, and TorchDynamo had appended to ``HISTORY`` when the
    linear failed in the next graph; joined, the one graph failed with the append lost
    (fuzz seed 830026). The print keeps its break (G321); called inside the mode, where
    no autograd is recorded, it joins."""
    source = """
        import torch
        HISTORY = []
        LAYER = torch.nn.Linear(3, 3)

        def f(t):
            weight = LAYER.weight * 0.5
            HISTORY.append(1)
            print("layer input", t.shape)
            return torch.nn.functional.linear(t, weight, LAYER.bias)
        """

    def arguments():
        with torch.inference_mode():
            return (torch.ones(2, 3),)

    original, mended = _pair(source)
    _assert_failing_after_the_same_side_effects(original, mended, arguments, "Inference tensors")
    assert "G321" in {condition_id(reason) for reason in store.trace_time_declines.values()}
    reset()
    with torch.inference_mode():
        assert breaks(original.f, *arguments()) == 1
        assert breaks(mended.f, *arguments()) == 0


POSITIONS_PRINTED_THEN_ANOTHER_OUTPUT = """
def f(x):
    positions = (x > 10.0).nonzero()
    print("positions", positions.sum())
    print("then this")
    return x * 2, (x > 20.0).nonzero()
"""


def test_outputs_follow_no_output_of_a_data_dependent_size__printed_in_the_original_order():
    """Inductor wrote an output that reads a value computed from a captured size after
    a later output that reads none (fuzz seed 840188: a print and the warning after it,
    swapped), although effect tokens ordered them. D303 keeps the outputs' breaks."""
    original, mended = _pair(POSITIONS_PRINTED_THEN_ANOTHER_OUTPUT)
    x = torch.tensor([1.0, 20.0, 30.0])
    printed, value = _outcome(mended.f, "inductor", x)
    expected_printed, expected_value = _outcome(original.f, None, x)
    assert printed == expected_printed == "positions tensor(3)\nthen this\n"
    assert all(torch.equal(got, expected) for got, expected in zip(value, expected_value))
    assert any(condition_id(reason) == "D303" for reason in store.trace_time_declines.values())


def test_outputs_follow_no_output_of_a_data_dependent_size__joined_where_the_backend_keeps_the_order():
    """D303's must-not row: under ``aot_eager``, which runs the graph's ops in order,
    both outputs join the graph with the capture."""
    original, mended = _pair(POSITIONS_PRINTED_THEN_ANOTHER_OUTPUT)
    x = torch.tensor([1.0, 20.0, 30.0])
    assert _outcome(mended.f, "aot_eager", x)[0] == _outcome(original.f, None, x)[0]
    assert graphs_and_breaks_under_aot_eager(mended.f, x) == (1, 0)
    assert not any(condition_id(reason) == "D303" for reason in store.trace_time_declines.values())
