"""Mending programs while autograd records (``claims.backend_differentiates_as_written``,
``claims.gradient_sums_keep_their_order``): a training step's output and guards join
its graphs under backends whose gradients are then bit-identical to the original's,
and keep their breaks elsewhere. Each case trains the original and the mended model
for three steps (SGD with momentum) and compares printed text, logged records,
gradients, parameters and optimizer state bit for bit, with graph and break counts."""

from __future__ import annotations

import contextlib
import io
import logging
import textwrap

import pytest
import torch
from helpers import original_and_mended
from torch._dynamo.utils import counters

from graphmend.counting import recording_graph_breaks
from graphmend.runtime import claims


@pytest.fixture(autouse=True)
def _fresh_declines():
    claims.forget_refusals()
    yield
    claims.forget_refusals()


class _Records(logging.Handler):
    graphmend_output_only = True

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records = []

    def emit(self, record):
        if record.name == "training_program":
            self.records.append((record.levelname, record.getMessage(), record.lineno))


def _bits(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.detach().view(torch.int32) if tensor.dtype == torch.float32 else tensor.detach()


def _train(module, backend, steps=3, micro_batches=1, autocast=False, grad=True):
    """Everything a training loop can observe of ``steps`` steps, and the graphs and
    breaks compiling the model took (``backend`` None: the model runs eagerly)."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = module.Model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    step = torch.compile(model, backend=backend, dynamic=False) if backend else model
    handler = _Records()
    logger = logging.getLogger("training_program")
    logger.addHandler(handler)
    logger.propagate = False
    gradients = []
    counters.clear()
    try:
        with contextlib.redirect_stdout(io.StringIO()) as printed, recording_graph_breaks() as records:
            for _ in range(steps):
                optimizer.zero_grad()
                for _ in range(micro_batches):
                    x = torch.randn(8, 16)
                    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast), torch.set_grad_enabled(grad):
                        loss = step(x).float().pow(2).mean()
                    if grad:
                        loss.backward()
                if grad:
                    gradients.append([_bits(p.grad) for p in model.parameters()])
                    optimizer.step()
    finally:
        logger.removeHandler(handler)
        logger.propagate = True
    graphs = counters["stats"]["unique_graphs"]
    breaks = max(graphs - 1, sum(counters["graph_break"].values()), len(records.breaks), 0)
    observed = {
        "printed": printed.getvalue(),
        "logged": handler.records,
        "gradients": gradients,
        "parameters": [_bits(p) for p in model.parameters()],
        "momentum": [_bits(optimizer.state[p]["momentum_buffer"]) for p in model.parameters() if p in optimizer.state],
        "loss": _bits(loss),
    }
    return observed, (graphs, breaks)


def _assert_same(first, second):
    assert first.keys() == second.keys()
    for name in first:
        mine, theirs = first[name], second[name]
        if isinstance(mine, torch.Tensor):
            assert torch.equal(mine, theirs), name
        elif isinstance(mine, list) and mine and not isinstance(mine[0], tuple):
            assert len(_flat(mine)) == len(_flat(theirs)), name
            assert all(map(torch.equal, _flat(mine), _flat(theirs))), name
        else:
            assert mine == theirs, name


def _flat(values: list) -> list:
    return [v for group in values for v in (group if isinstance(group, list) else [group])]


def _counts_and_same_behaviour(source, backend, **options):
    """(original's graphs and breaks, mended's), having checked that the mended model
    behaves as the original, eagerly and compiled with ``backend``."""
    original, mended, result = original_and_mended(source)
    assert result.changed
    eager, _ = _train(original, None, **options)
    _assert_same(_train(mended, None, **options)[0], eager)
    compiled, original_counts = _train(original, backend, **options)
    claims.forget_refusals()
    mended_compiled, mended_counts = _train(mended, backend, **options)
    _assert_same(mended_compiled, compiled)
    return original_counts, mended_counts


LINEAR_RELU_LINEAR = """
import logging
import torch

logger = logging.getLogger("training_program")


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(16, 32)
        self.fc2 = torch.nn.Linear(32, 4)

    def forward(self, x):
        h = torch.relu(self.fc1(x))
{statement}
        return self.fc2(h)
"""

STATEMENTS = {
    "print of a Python int": "        print('hidden width', 32)",
    "guard": "        if not torch.isfinite(h).all():\n            raise ValueError('non-finite activations')",
    "logging": "        logger.warning('forward of %d rows', 8)",
}


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
@pytest.mark.parametrize("statement", list(STATEMENTS))
def test_a_training_step_loses_its_break(statement, backend):
    source = LINEAR_RELU_LINEAR.format(statement=STATEMENTS[statement])
    assert _counts_and_same_behaviour(source, backend) == ((2, 1), (1, 0))
    assert not claims.trace_time_declines


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_gradient_accumulation_over_two_micro_batches(backend):
    source = LINEAR_RELU_LINEAR.format(statement=STATEMENTS["print of a Python int"])
    assert _counts_and_same_behaviour(source, backend, micro_batches=2) == ((2, 1), (1, 0))


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_autocast_to_bfloat16_on_the_cpu(backend):
    source = LINEAR_RELU_LINEAR.format(statement=STATEMENTS["guard"])
    assert _counts_and_same_behaviour(source, backend, autocast=True) == ((2, 1), (1, 0))


TIED_WEIGHTS = """
import torch


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Linear(16, 16, bias=False)
        self.mix = torch.nn.Linear(16, 16)

    def forward(self, x):
        h = torch.relu(self.embed(x))
        h = h + torch.relu(self.embed(h))
        print('tied', 1)
        return torch.nn.functional.linear(self.mix(h), self.embed.weight)
"""


def test_tied_weights_are_joined_where_the_backend_runs_the_graph_as_written():
    assert _counts_and_same_behaviour(TIED_WEIGHTS, "eager") == ((2, 1), (1, 0))


def test_gradient_sums_keep_their_order__tied_weight_used_twice_before_and_once_after():
    """Joined, AOTAutograd's one backward adds the weight's three contributions one by
    one, where the original added the first graph's two before adding the second's:
    the last bit differs (seen, with the rule allowed, on this model)."""
    assert _counts_and_same_behaviour(TIED_WEIGHTS, "aot_eager") == ((2, 1), (2, 1))
    (reason,) = claims.trace_time_declines.values()
    assert "`l_self_modules_embed_parameters_weight_` receives 2 gradient contributions before it and 1 after" in reason


def test_backend_differentiates_as_written__a_backend_that_reads_its_graph_keeps_the_break():
    def reads_its_graph(graph_module, example_inputs):
        graph_module.graph.lint()
        return graph_module.forward

    source = LINEAR_RELU_LINEAR.format(statement=STATEMENTS["print of a Python int"])
    assert _counts_and_same_behaviour(source, reads_its_graph) == ((2, 1), (2, 1))
    (reason,) = set(claims.trace_time_declines.values())
    assert "the backend compiles its backward in an order graphmend cannot check" in reason


def test_backend_differentiates_as_written__under_no_grad_the_same_backend_joins():
    def reads_its_graph(graph_module, example_inputs):
        graph_module.graph.lint()
        return graph_module.forward

    source = LINEAR_RELU_LINEAR.format(statement=STATEMENTS["print of a Python int"])
    assert _counts_and_same_behaviour(source, reads_its_graph, grad=False) == ((2, 1), (1, 0))


def test_joined_graph_records_no_autograd__a_branch_under_grad_keeps_its_break():
    """Where stays refused under autograd: ``torch.where`` differentiates the arm not
    taken too (zero gradients where the original gave none, NaN from zero times an
    infinite derivative)."""
    branch = "        if h.sum() > 0:\n            h = h * 2.0\n        else:\n            h = h * 0.5"
    source = LINEAR_RELU_LINEAR.format(statement=branch)
    original_counts, mended_counts = _counts_and_same_behaviour(source, "aot_eager")
    assert mended_counts == original_counts == (2, 1)


# The condition, case by case: a weight used `before` times before a print and `after`
# times after it, in the frame compiled or in a function TorchDynamo inlines.

def _uses(count: int, weight: str = "w") -> str:
    return "".join(f"    h = torch.tanh(h @ {weight})\n" for _ in range(count))


def _function(before: int, after: int) -> str:
    return "import torch\n\ndef f(w, x):\n    h = x\n" + _uses(before) + "    print('between', 1)\n" + _uses(after) + "    return h\n"


def _gradient_and_graphs(function, backend):
    torch._dynamo.reset()
    counters.clear()
    torch.manual_seed(0)
    w, x = torch.randn(8, 8, requires_grad=True), torch.randn(4, 8)
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        out = torch.compile(function, backend=backend, dynamic=False)(w, x)
    out.sum().backward()
    return (_bits(w.grad), printed.getvalue()), counters["stats"]["unique_graphs"]


@pytest.mark.parametrize("after", [1, 2])
@pytest.mark.parametrize("before", [1, 2, 3])
def test_gradient_sums_keep_their_order__differential(before, after):
    original, mended, _ = original_and_mended(_function(before, after))
    expected, original_graphs = _gradient_and_graphs(original.f, "aot_eager")
    claims.forget_refusals()
    got, mended_graphs = _gradient_and_graphs(mended.f, "aot_eager")
    assert torch.equal(got[0], expected[0]) and got[1] == expected[1]
    assert original_graphs == 2
    assert mended_graphs == (2 if before >= 2 else 1)


def test_gradient_sums_keep_their_order__a_single_operator_can_contribute_twice():
    source = "import torch\n\ndef f(w, x):\n    h = torch.tanh(x @ (w * w))\n    print('between', 1)\n    return h @ w\n"
    original, mended, _ = original_and_mended(source)
    expected, _ = _gradient_and_graphs(original.f, "aot_eager")
    got, graphs = _gradient_and_graphs(mended.f, "aot_eager")
    assert torch.equal(got[0], expected[0]) and graphs == 2


INLINED = """
import torch

def f(w0, x):
    w = w0 * 2.0
    return helper(w, x)

def helper(w, x):
    h = torch.tanh(x @ w)
    h = torch.tanh(h @ w)
    print('between', 1)
    return torch.tanh(h @ w)
"""


def test_gradient_sums_keep_their_order__a_tensor_made_before_an_inlined_call():
    """The original broke at the call of ``helper``: ``w``, made in the frame before it,
    was an input of the helper's two graphs, which summed its gradient apart (seen,
    before the tensors made in the graph were counted too)."""
    original, mended, _ = original_and_mended(INLINED)
    expected, original_graphs = _gradient_and_graphs(original.f, "aot_eager")
    claims.forget_refusals()
    got, mended_graphs = _gradient_and_graphs(mended.f, "aot_eager")
    assert torch.equal(got[0], expected[0])
    assert original_graphs == mended_graphs == 3
    (reason,) = claims.trace_time_declines.values()
    assert "gradient contributions before it" in reason
    claims.forget_refusals()
    got, mended_graphs = _gradient_and_graphs(mended.f, "eager")
    assert torch.equal(got[0], _gradient_and_graphs(original.f, "eager")[0][0]) and mended_graphs == 1


def test_a_tensor_made_in_the_graph_used_on_both_sides_is_joined():
    """The original's later graph handed the earlier one the sum of its contributions,
    which the earlier one started from: the joined backward adds them in that order."""
    source = textwrap.dedent(
        """
        import torch

        def f(w, x):
            t = torch.tanh(x @ w)
            a = t.sin() + t.cos()
            print('between', 1)
            return a * t + t.exp() + t.tanh()
        """
    )
    original, mended, _ = original_and_mended(source)
    expected, original_graphs = _gradient_and_graphs(original.f, "aot_eager")
    got, mended_graphs = _gradient_and_graphs(mended.f, "aot_eager")
    assert torch.equal(got[0], expected[0]) and (original_graphs, mended_graphs) == (2, 1)
