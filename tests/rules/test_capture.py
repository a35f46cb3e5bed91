"""[Capture] positions of nonzero elements kept in the graph: must-rewrite cases with
graph and break counts, one named must-not case per legality condition, differential
runs (eager, aot_eager; inputs with no position at all among them), and the fallback
for a use of the positions' count the rule cannot see."""

from __future__ import annotations

import contextlib
import io
import textwrap
import warnings

import pytest
import torch

from graphmend.runtime import reset
from graphmend.runtime.store import store
from helpers import assert_equivalent, finding_reasons, original_and_mended
from helpers import graphs_and_breaks as counts

PRELUDE = """
import torch
import torch.nn.functional as F
"""


def program(body: str) -> str:
    return PRELUDE + textwrap.dedent(body)


MUST_REWRITE = {
    "where_with_one_argument": """
        def main(x, w):
            rows, cols = torch.where(x > 0)
            return w[rows, cols] * 2
    """,
    "nonzero_function": """
        def main(x, w):
            positions = torch.nonzero(x > 0)
            return w[positions[:, 0], positions[:, 1]].sum(0) + 1
    """,
    "nonzero_method_as_tuple": """
        def main(x, w):
            rows, _ = (x > 0).nonzero(as_tuple=True)
            return w[rows] - 1
    """,
    "argwhere": """
        def main(x, w):
            return w[torch.argwhere(x < 0)[:, 0]].exp()
    """,
    "mask_bound_to_a_name": """
        def main(x, w):
            chosen = (x > 0) & (w < 8)
            return w[chosen] * 2
    """,
    "mask_rebound_before_use": """
        def main(x, w):
            chosen = x.sum(-1)
            chosen = chosen > 0
            return w[chosen] * 2
    """,
    "mask_in_place": """
        def main(x, w):
            return w[~(x < 0)].sum(0, keepdim=True) + x[x > 1].sum()
    """,
    "routing_loop": """
        def main(x, w):
            choice = x.argmax(-1)
            mask = F.one_hot(choice, num_classes=3).permute(1, 0)
            out = torch.zeros_like(w)
            for expert in range(3):
                (tokens,) = torch.where(mask[expert])
                out.index_add_(0, tokens, w[tokens] * (expert + 1))
            return out
    """,
}

# Graphs and breaks of the original on a batch where every case has positions.
ORIGINAL_COUNTS = {
    "where_with_one_argument": (2, 1),
    "nonzero_function": (2, 1),
    "nonzero_method_as_tuple": (2, 1),
    "argwhere": (2, 1),
    "mask_bound_to_a_name": (2, 1),
    "mask_in_place": (3, 2),
    "mask_rebound_before_use": (2, 1),
    "routing_loop": (0, 1),  # a break in a loop: TorchDynamo runs the whole frame eagerly
}

X = torch.tensor([[1.0, -2.0, 3.0], [-1.0, 5.0, 0.5], [2.0, 2.5, -3.0], [0.0, -1.0, 4.0]])
W = torch.arange(12.0).reshape(4, 3)
INPUTS = {
    "some positions": (X, W),
    "no position": (-X.abs() - 1, W),
    "all positions": (X.abs() + 1, W),
}


@pytest.mark.parametrize("name", sorted(MUST_REWRITE))
def test_must_rewrite(name):
    original, mended, result = original_and_mended(program(MUST_REWRITE[name]))
    assert result.changed and not finding_reasons(result, "Capture"), result.findings
    assert counts(original.main, X, W) == ORIGINAL_COUNTS[name]
    assert counts(mended.main, X, W) == (1, 0)


@pytest.mark.default_tier_stride(5)
@pytest.mark.parametrize("name", sorted(MUST_REWRITE))
@pytest.mark.parametrize("inputs", sorted(INPUTS))
def test_differential(name, inputs):
    original, mended, _ = original_and_mended(program(MUST_REWRITE[name]))
    assert_equivalent(original.main, mended.main, *INPUTS[inputs], backends=("eager", "aot_eager"))


def test_positions_are_views_with_the_strides_where_gives():
    source = """
        def main(x):
            rows, cols = torch.where(x > 0)
            return rows, cols
    """
    original, mended, _ = original_and_mended(program(source))
    torch._dynamo.reset()
    compiled = torch.compile(mended.main, backend="aot_eager")(X)
    eager = original.main(X)
    for got, expected in zip(compiled, eager):
        assert torch.equal(got, expected) and got.stride() == expected.stride()


def test_a_copy_the_rule_cannot_see_keeps_the_break():
    """The positions go to a helper that copies them to Python: tracing fails on the
    captured size, so the capture is refused and the frame traced again with the
    original's break (not run eagerly: its callees would then compile alone, fuzz seed
    172051)."""
    source = """
        def copy_out(positions):
            return torch.tensor(positions.tolist()) * 2

        def main(x, w):
            positions = (x > 0).nonzero()
            return copy_out(positions) + w.sum()
    """
    original, mended, result = original_and_mended(program(source))
    assert result.changed
    store.frames_run_eagerly.clear()
    reset()
    assert_equivalent(original.main, mended.main, X, W, backends=("eager", "aot_eager"))
    assert store.frames_run_eagerly == {}
    assert any(reason.startswith("tracing needed a size it made on the host")
               for reason in store.trace_time_declines.values())


def test_other_objects_nonzero_is_called_as_written():
    source = """
        class Marks:
            def nonzero(self):
                return "marks"

        def main(x, w):
            return Marks().nonzero(), torch.where(x > 0)[0] + w.shape[0]
    """
    original, mended, result = original_and_mended(program(source))
    assert result.changed
    assert_equivalent(original.main, mended.main, X, W, backends=("eager", "aot_eager"))


# --------------------------------------------------------------------------------------
# Must not rewrite: one case per legality condition.

MUST_NOT_REWRITE = {
    "arguments_bind_plainly": (
        """
        def main(x, w):
            positions = torch.nonzero(x > 0, as_tuple=w.shape[0] > 2)
            return positions
        """,
        "not a constant `as_tuple`",
    ),
    "statement_is_simple": (
        """
        def main(x, w):
            total = w.sum()
            for row in (x > 0).nonzero():
                total = total + w[row[0], row[1]]
            return total
        """,
        "loop or branch header",
    ),
    "positions_stay_tensors_at_the_call": (
        """
        def main(x, w):
            hit = (x.sum(-1) > 0).nonzero(as_tuple=True)[0].tolist()
            return w[hit]
        """,
        "copied to Python (`.tolist()`)",
    ),
    "positions_stay_tensors_through_a_name": (
        """
        def main(x, w):
            (rows,) = torch.where(x.sum(-1) > 0)
            total = w.sum()
            for row in rows:
                total = total + w[row].sum()
            return total
        """,
        "`rows` is copied to Python (iterating over them)",
    ),
}


@pytest.mark.parametrize("name", sorted(MUST_NOT_REWRITE))
def test_must_not_rewrite(name):
    source, expected_reason = MUST_NOT_REWRITE[name]
    original, mended, result = original_and_mended(program(source))
    reasons = finding_reasons(result, "Capture")
    assert reasons and expected_reason in reasons[0], result.findings
    assert not result.changed
    assert_equivalent(original.main, mended.main, X, W, backends=("eager",))


def test_an_index_that_is_not_a_bool_mask_while_tracing_is_used_as_written():
    """``~`` of a long tensor is a long index (a gather, no break): the compiled path
    indexes with it as written."""
    source = """
        def main(x, w):
            index = ~(x.long() % 2) + 2
            return w[index[:, 0]] * 2
    """
    original, mended, result = original_and_mended(program(source))
    assert_equivalent(original.main, mended.main, X.abs(), W, backends=("eager", "aot_eager"))
    assert counts(mended.main, X.abs(), W) == counts(original.main, X.abs(), W) == (1, 0)


def test_a_name_bound_to_a_mask_on_one_path_only_is_no_candidate():
    source = """
        def main(x, w):
            chosen = x.sum(-1).long() % 4
            if w.shape[0] > 2:
                chosen = chosen > 0
            return w[chosen] * 2
    """
    _, _, result = original_and_mended(program(source))
    assert not [f for f in result.findings if f.rule == "Capture"]


def test_three_argument_where_is_no_candidate():
    source = """
        def main(x, w):
            return torch.where(x > 0, x, w)
    """
    _, _, result = original_and_mended(program(source))
    assert not [f for f in result.findings if f.rule == "Capture"]


def test_a_joined_graph_that_records_autograd_keeps_the_break():
    """Joined, the graph would give an input whose values the output does not use a zero
    gradient where the original leaves none (fuzz seed 80453): under autograd the claim
    on the break is refused while tracing, and the call keeps its break."""
    source = """
        def main(x, w):
            unused = w * 2.0
            (rows,) = torch.where(x.sum(-1) > 0)
            return x[rows].sum()
    """
    original, mended, result = original_and_mended(program(source))
    assert result.changed

    def gradients(function):
        x, w = X.clone().requires_grad_(), W.clone().requires_grad_()
        function(x, w).backward()
        return x.grad, w.grad

    torch._dynamo.reset()
    expected = gradients(original.main)
    got = gradients(torch.compile(mended.main, backend="aot_eager"))
    assert torch.equal(got[0], expected[0]) and expected[1] is None and got[1] is None
    x, w = X.clone().requires_grad_(), W.clone().requires_grad_()
    assert counts(mended.main, x, w) == counts(original.main, x, w)
    with torch.no_grad():  # the refusal holds while grad mode is on
        assert counts(mended.main, X, W) == (1, 0)


@pytest.mark.parametrize(
    "mask",
    [
        torch.tensor([1.0, 0.0, 2.0]),
        torch.tensor([[1.0, 0.0, 2.0], [0.0, 3.0, 0.0]]),
        torch.ones(2, 1, 3),
        torch.zeros(2, 3),
        torch.tensor([[0.0, 4.0], [0.0, 0.0]]),
    ],
    ids=["1-d", "2-d", "3-d", "no position", "one position"],
)
def test_the_positions_operator_agrees_with_its_trace(mask):
    """torch's own operator check: the positions traced have the sizes and strides the
    kernel gives (``torch.nonzero`` writes them column by column). Traced row by row,
    inductor rejected a 2-D mask's positions at run time (AssertionError)."""
    torch.library.opcheck(torch.ops.graphmend.nonzero.default, (mask,))


TWO_DIMENSIONAL_POSITIONS = """
    def main(x):
        flat = x.flatten()
        grid = torch.stack([flat, -flat])
        positions = torch.nonzero(grid > 0.0)
        total = torch.zeros_like(flat)
        total.index_add_(0, positions[:, 1], flat[positions[:, 1]] * 2.0)
        print("columns")
        return total, positions.t().reshape(-1) * 1
"""


@pytest.mark.slow
def test_positions_of_a_two_dimensional_mask_under_inductor():
    original, mended, result = original_and_mended(program(TWO_DIMENSIONAL_POSITIONS))
    assert result.changed
    assert_equivalent(original.main, mended.main, torch.tensor([1.0, -2.0, 0.5, 3.0, -1.0]),
                      backends=("eager", "aot_eager", "inductor"))


BATCH_NORM_OF_A_TRANSPOSE = """
    NORM = torch.nn.BatchNorm2d(4).eval()

    def main(x, flags):
        normed = NORM(x.transpose(1, 3)).transpose(1, 3)
        (rows,) = torch.where(flags > 0)
        return normed.reshape(2, 8, 24)[rows] * 2
"""


def test_a_batch_norm_of_a_tensor_that_is_not_contiguous_keeps_the_break_under_aot_eager():
    """torch traces the batch norm's output with its input's strides; the CPU kernel
    returns it contiguous. Joined with the ``reshape`` after the break, ``aot_eager``
    made it a ``view`` of the real tensor, which failed (CLAP's audio encoder). The claim
    is refused under backends that plan views and check strides by the trace; ``eager``
    joins."""
    original, mended, result = original_and_mended(program(BATCH_NORM_OF_A_TRANSPOSE))
    assert result.changed
    torch.manual_seed(0)
    inputs = (torch.randn(2, 8, 6, 4), torch.tensor([1.0, -1.0]))
    with torch.no_grad():
        assert counts(mended.main, *inputs) == (1, 0)  # first: a refusal holds for the site
        assert_equivalent(original.main, mended.main, *inputs, backends=("eager", "aot_eager"))
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch._dynamo.reset()
        from torch._dynamo.testing import CompileCounterWithBackend

        backend = CompileCounterWithBackend("aot_eager")
        with torch.no_grad():
            torch.compile(mended.main, backend=backend)(*inputs)
    assert backend.frame_count == 2  # the original's two graphs


def test_a_tensor_subclass_sees_the_operations_the_original_makes():
    """A subclass's ``__torch_function__`` runs for every operation on it: captured
    positions would show it ``detach``/``nonzero``/``unbind`` where the original calls
    ``where`` (``is_plain_tensor`` in ``dynamic_shapes``: the original call is kept)."""
    source = textwrap.dedent(
        """
        import torch
        OPS = []

        class Logged(torch.Tensor):
            @classmethod
            def __torch_function__(cls, func, types, args=(), kwargs=None):
                name = getattr(func, "__name__", "")
                if name in ("where", "nonzero", "detach", "unbind", "__getitem__", "mul", "gt"):
                    OPS.append(name)
                return super().__torch_function__(func, types, args, kwargs or {})

        def f(y):
            (idx,) = torch.where(y > 1.5)
            return y[idx] * 2
        """
    )
    original, mended, _ = original_and_mended(source)
    y_value = torch.arange(4.0)

    def run(module, compiled):
        del module.OPS[:]
        function = module.f
        if compiled:
            torch._dynamo.reset()
            function = torch.compile(function, backend="eager", dynamic=False)
        value = function(y_value.as_subclass(module.Logged))
        return type(value).__name__, value.tolist(), list(module.OPS)

    assert run(mended, compiled=True) == run(original, compiled=False)


def test_a_break_on_the_size_the_capture_made_keeps_the_original_break():
    """Traced with the capture, the graph would break at ``if len(rows) > 0:`` instead,
    on the size the capture made: no break removed, only the next graph's start moved,
    which can meet torch's own bugs the original's graphs do not (long fuzz run seed
    261872, ``whole_trace_conditions.captured_sizes_decide_no_break``). The capture is refused and the
    original's graphs come back."""
    source = """
        def main(x, w):
            (rows,) = torch.where(x.sum(-1) > 0)
            scaled = w * 2
            if len(rows) > 0:
                scaled = scaled + 1
            return scaled
    """
    reset()
    original, mended, result = original_and_mended(program(source))
    assert result.changed
    assert counts(mended.main, X, W) == counts(original.main, X, W) == (2, 1)
    declines = [reason for (filename, line), reason in store.trace_time_declines.items() if line == 6]
    assert declines == ["tracing needed the size the capture made on the host, so the capture removes no break"]
    assert_equivalent(original.main, mended.main, X, W, backends=("eager", "aot_eager"))


def test_a_later_break_elsewhere_keeps_the_capture():
    """The twin: the graph breaks later on something else (here TorchDynamo's own
    ``graph_break()``), with the positions used in the graph before it. The capture
    removed the original's break at ``torch.where`` and stands."""
    source = """
        def main(x, w):
            (rows,) = torch.where(x.sum(-1) > 0)
            picked = w[rows] * 2
            torch._dynamo.graph_break()
            return picked + 1
    """
    reset()
    original, mended, result = original_and_mended(program(source))
    assert result.changed
    assert counts(original.main, X, W) == (3, 2)
    assert counts(mended.main, X, W) == (2, 1)
    assert not [line for (_, line) in store.trace_time_declines if line == 6]
    assert_equivalent(original.main, mended.main, X, W, backends=("eager", "aot_eager"))


def test_a_branch_on_the_size_inside_a_helper_keeps_the_original_break():
    """The size is branched on inside a helper TorchDynamo inlines: it breaks the graph
    at the helper's call instead and traces the frame again, so the captured frame
    would compile 3 graphs with 2 breaks where the original has 2 and 1. Tracing's need
    for the size on the host refuses the capture
    (``trace_hooks._refuse_captures_whose_sizes_are_needed``), and the trace TorchDynamo
    starts again keeps the original call, from the first call on (the frame is not run
    eagerly for a trace that took another path)."""
    source = """
        def check(rows, w):
            if len(rows) > 0:
                return w + 1
            return w

        def main(x, w):
            (rows,) = torch.where(x.sum(-1) > 0)
            scaled = w * 2
            scaled = check(rows, scaled)
            return scaled * rows.numel()
    """
    reset()
    store.frames_run_eagerly.clear()
    original, mended, result = original_and_mended(program(source))
    assert result.changed
    assert counts(mended.main, X, W) == counts(original.main, X, W) == (2, 1)
    assert store.frames_run_eagerly == {}
    declines = [reason for (_, line), reason in store.trace_time_declines.items() if line == 11]
    assert declines == ["tracing needed the size the capture made on the host, so the capture removes no break"]
    assert_equivalent(original.main, mended.main, X, W, backends=("eager", "aot_eager"))


def _graph_operators(function, *args) -> list[str]:
    """The call targets of every graph compiling ``function`` makes, in order."""
    targets = []

    def backend(graph_module, example_inputs):
        targets.extend(str(node.target) for node in graph_module.graph.nodes if node.op == "call_function")
        return graph_module.forward

    torch._dynamo.reset()
    torch.compile(function, backend=backend)(*args)
    return targets


def test_torchdynamo_capturing_output_sizes_itself_keeps_the_original_call():
    """C208 ``torchdynamo_does_not_capture_it``: under ``capture_dynamic_output_shape_ops``
    TorchDynamo captures ``torch.nonzero`` with no break, and adds its own checks of the
    size it made. The statement is left as written: the graph holds torch's operator
    and checks, not graphmend's (three of PyTorch's own TorchDynamo tests count them)."""
    source = """
        def main(x, w):
            positions = torch.nonzero(x > 0)
            return w[positions[:, 0], positions[:, 1]].sum(0) + 1
    """
    original, mended, result = original_and_mended(program(source))
    assert result.changed
    with torch._dynamo.config.patch(capture_dynamic_output_shape_ops=True):
        assert counts(original.main, X, W) == counts(mended.main, X, W) == (1, 0)
        expected = _graph_operators(original.main, X, W)
        got = _graph_operators(mended.main, X, W)
        assert any("nonzero" in target for target in expected)
        assert got == expected
        assert_equivalent(original.main, mended.main, X, W, backends=("eager", "aot_eager"))
    # The flag is read while tracing: off again, the capture is graphmend's.
    assert counts(mended.main, X, W) == (1, 0)
    assert any("graphmend.nonzero" in target for target in _graph_operators(mended.main, X, W))
