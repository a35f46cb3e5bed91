"""A held-out battery of small training programs, as users write them, with adversarial
variants: each is trained three steps (SGD with momentum) original and mended, eagerly
and compiled under ``eager`` and ``aot_eager``, comparing printed text, warnings,
exceptions, outputs, losses, gradients, parameters, momentum, what hooks recorded and
the generator's state bit for bit, with exact graph and break counts.

Selections (Where, ``whole_trace_conditions.joins_under_grad``) and LayerDrop's decided
draws (``rules/where/ranges.py``) are the mechanisms under attack; a mended count above
the original's, or any difference in what the loop observes, is a finding."""

from __future__ import annotations

import contextlib
import io
import warnings

import pytest
import torch
from torch._dynamo.utils import counters

from graphmend.counting import recording_graph_breaks
from graphmend.runtime import reset
from helpers import original_and_mended


@pytest.fixture(autouse=True)
def _fresh_declines():
    reset()
    yield
    reset()


def _bits(tensor):
    if tensor is None:
        return None
    tensor = tensor.detach()
    views = {torch.float32: torch.int32, torch.bfloat16: torch.int16, torch.float64: torch.int64}
    return tensor.view(views[tensor.dtype]).clone() if tensor.dtype in views else tensor.clone()


def _train(module, backend, steps=3, micro_batches=1, autocast=False, second_backward=False, poison_step=None):
    """Everything the loop observes over ``steps`` steps, and (graphs, breaks) compiling
    took. ``module.step(model, x)``, when defined, is the compiled training step giving
    the loss; otherwise the model is compiled and the loss is its output's mean square.
    ``poison_step``: that step's input holds an infinity."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = module.Model()
    model.train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    step = getattr(module, "step", None)
    if step is None:
        def step(m, x):
            return m(x).float().pow(2).mean()
        target = torch.compile(model, backend=backend, dynamic=False) if backend else model
    else:
        target = model
        step = torch.compile(step, backend=backend, dynamic=False) if backend else step
    counters.clear()
    gradients, losses, errors = [], [], []
    with contextlib.redirect_stdout(io.StringIO()) as printed, recording_graph_breaks() as records, \
            warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter("always")
        for index in range(steps):
            optimizer.zero_grad()
            try:
                for _ in range(micro_batches):
                    x = module.batch() if hasattr(module, "batch") else torch.randn(8, 16)
                    if index == poison_step:
                        x[0, 0] = float("inf")
                    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                        loss = step(target, x)
                    losses.append(_bits(loss))
                    loss.backward(retain_graph=second_backward)
                    if second_backward:
                        loss.backward()
            except Exception as raised:  # noqa: BLE001 - what the loop raised is the observation
                errors.append((index, type(raised).__name__, str(raised).split(" is at version")[0][:200]))
                continue
            gradients.append([_bits(p.grad) for p in model.parameters()])
            optimizer.step()
    graphs = counters["stats"]["unique_graphs"]
    breaks = max(graphs - 1, sum(counters["graph_break"].values()), len(records.breaks), 0)
    observed = {
        "printed": printed.getvalue(),
        "warned": [(str(w.message), w.category.__name__, w.lineno) for w in warned if "graphmend" not in str(w.filename)],
        "errors": errors,
        "losses": losses,
        "gradients": gradients,
        "parameters": [_bits(p) for p in model.parameters()],
        "momentum": [_bits(optimizer.state[p]["momentum_buffer"]) for p in model.parameters() if p in optimizer.state],
        "recorded": [_bits(t) for t in getattr(model, "records", [])],
        "generator": torch.get_rng_state(),
    }
    return observed, (graphs, breaks)


def _same(first, second) -> list[str]:
    """The names of the observables that differ."""
    differing = []
    for name in first:
        mine, theirs = first[name], second[name]
        if isinstance(mine, torch.Tensor):
            same = torch.equal(mine, theirs)
        elif name in ("losses", "parameters", "momentum", "recorded", "gradients"):
            flat_mine = _flat(mine)
            flat_theirs = _flat(theirs)
            same = len(flat_mine) == len(flat_theirs) and all(
                (a is None and b is None) or (a is not None and b is not None and torch.equal(a, b))
                for a, b in zip(flat_mine, flat_theirs)
            )
        else:
            same = mine == theirs
        if not same:
            differing.append(name)
    return differing


def _flat(values):
    return [v for group in values for v in (group if isinstance(group, list) else [group])]


def _measure(source, backend, **options):
    """(original's counts, mended's counts, observables differing eagerly, compiled)."""
    original, mended, _ = original_and_mended(source)
    eager, _ = _train(original, None, **options)
    reset()
    eager_differs = _same(_train(mended, None, **options)[0], eager)
    reset()
    compiled, original_counts = _train(original, backend, **options)
    reset()
    mended_compiled, mended_counts = _train(mended, backend, **options)
    compiled_differs = _same(mended_compiled, compiled)
    return original_counts, mended_counts, eager_differs, compiled_differs


HEADER = """
import warnings
import torch
from torch import nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(16, 16)
        self.fc2 = nn.Linear(16, 4)
        self.records = []
{init}
    def forward(self, x):
        h = torch.relu(self.fc1(x))
{body}
        return self.fc2(h)
"""


def _program(body, init="", tail=""):
    return HEADER.format(init=init, body=body) + tail


# ``h.sum() > 25`` is false at the first step and true after (seed 0): both arms are taken.
MASK = "        if h.sum() > 25:\n            m = (h > 0.1) * 1.0\n        else:\n            m = (h > 0.2) * 1.0\n"

PROGRAMS = {
    "print of an int": _program("        print('hidden width', 32)\n"),
    "loss.item() logged in the step": _program(
        "", tail="\n\ndef step(model, x):\n    loss = model(x).pow(2).mean()\n"
        "    print(f\"loss {loss.item():.4f}\")\n    return loss\n"
    ),
    "warnings.warn": _program("        warnings.warn('forward of 8 rows')\n"),
    "mask selected after the first layer": _program(MASK + "        h = h * m\n"),
    "scale (Python float) selected": _program(
        "        if h.sum() > 25:\n            s = 0.5\n        else:\n            s = 2.0\n        h = h * s\n"
    ),
    "arms requiring grad": _program(
        "        if h.sum() > 25:\n            h = h * 2.0\n        else:\n            h = h * 0.5\n"
    ),
    "selected parameters": _program(
        "        if h.sum() > 25:\n            b = self.fc1.bias\n        else:\n            b = self.fc2.weight[0]\n"
        "        h = h + b\n"
    ),
    "isfinite guard": _program(
        "        if not torch.isfinite(h).all():\n            raise ValueError('non-finite activations')\n"
    ),
    "predicate reads a parameter": _program(
        "        if self.fc1.weight.sum() > 0.5:\n            m = (h > 0.1) * 1.0\n        else:\n"
        "            m = (h > 0.2) * 1.0\n        h = h * m\n"
    ),
    "no_grad block around the branch": _program(
        "        with torch.no_grad():\n            if h.sum() > 25:\n                m = (h > 0.1) * 1.0\n"
        "            else:\n                m = (h > 0.2) * 1.0\n        h = h * m\n"
    ),
    "forward hook near the selection": _program(
        MASK + "        h = self.mid(h) * m\n",
        init="        self.mid = nn.Linear(16, 16)\n        self.mid.register_forward_hook(self.record)\n\n"
        "    def record(self, module, args, out):\n        self.records.append(out.detach().clone())\n",
    ),
    "saved for backward, written in place after the branch": _program(MASK + "        h.mul_(m)\n"),
    "written in place before the branch": _program("        h = h * 1.0\n        h.add_(1.0)\n" + MASK + "        h = h * m\n"),
}

# Adversarial selections: an arm that draws random numbers, arms of different shapes
# or dtypes, an arm with a side effect on a buffer or an attribute.
PROGRAMS["dropout drawn in one arm"] = _program(
    "        if h.sum() > 25:\n            m = torch.nn.functional.dropout(torch.ones_like(h), 0.5)\n"
    "        else:\n            m = torch.ones_like(h)\n        h = h * m\n"
)
PROGRAMS["arms of different shapes"] = _program(
    "        if h.sum() > 25:\n            m = (h[:, :1] > 0.1) * 1.0\n        else:\n            m = (h > 0.2) * 1.0\n"
    "        h = h * m + m.sum(dim=1, keepdim=True)\n"
)
PROGRAMS["arms of different dtypes"] = _program(
    "        if h.sum() > 25:\n            m = (h > 0.1).sum(dim=1, keepdim=True)\n        else:\n"
    "            m = (h > 0.2).float().sum(dim=1, keepdim=True)\n        h = h * (m // 3)\n"
)
PROGRAMS["buffer written in one arm"] = _program(
    "        if h.sum() > 25:\n            self.hits.add_(1)\n            m = (h > 0.1) * 1.0\n        else:\n"
    "            m = (h > 0.2) * 1.0\n        h = h * m + self.hits\n",
    init="        self.register_buffer('hits', torch.zeros(()))\n",
)
PROGRAMS["attribute counted in one arm"] = _program(
    "        if h.sum() > 25:\n            self.calls = self.calls + 1\n            m = (h > 0.1) * 1.0\n        else:\n"
    "            m = (h > 0.2) * 1.0\n        h = h * m * self.calls\n",
    init="        self.calls = 1\n",
)
PROGRAMS["mask then dropout"] = _program(MASK + "        h = self.drop(h * m)\n", init="        self.drop = nn.Dropout(0.1)\n")
PROGRAMS["print between dropouts"] = _program(
    "        h = self.drop(h)\n        print('width', 16)\n        h = self.drop(h)\n", init="        self.drop = nn.Dropout(0.1)\n"
)
PROGRAMS["arm calls a layer (detached)"] = _program(
    "        if h.sum() > 25:\n            m = self.fc1(x).detach() > 0\n        else:\n            m = x > 0\n        h = h * m\n"
)
PROGRAMS["selection then loss.item() print"] = _program(
    MASK + "        h = h * m\n",
    tail="\n\ndef step(model, x):\n    loss = model(x).pow(2).mean()\n    print(f\"loss {loss.item():.4f}\")\n    return loss\n",
)

TIED = """
import torch
from torch import nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(32, 16)
        self.body = nn.Linear(16, 16)
        self.head = nn.Linear(16, 32, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, ids):
        h = torch.relu(self.body(self.embed(ids)))
{selection}
        return self.head(h)


def batch():
    return torch.randint(0, 32, (8, 6))
"""

PROGRAMS["tied weights, mask selected"] = TIED.format(
    selection="        if h.sum() > 100:\n            m = (h > 0.1) * 1.0\n        else:\n            m = (h > 0.2) * 1.0\n"
    "        h = h * m"
)
PROGRAMS["tied weights, the tied weight selected"] = TIED.format(
    selection="        if h.sum() > 100:\n            w = self.embed.weight\n        else:\n            w = self.head.weight * 1.0\n"
    "        h = h + w[:1]"
)

LAYERDROP = """
import torch
from torch import nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Sequential(nn.Linear(16, 16), nn.Dropout(0.1)) for _ in range(3)])
        self.head = nn.Linear(16, 4)
        self.layerdrop = {p}

    def forward(self, x):
        for layer in self.layers:
            if self.training:
                dropout_probability = torch.rand([])
                if dropout_probability < self.layerdrop:
                    continue
            x = torch.relu(layer(x))
        return self.head(x)
"""
PROGRAMS["LayerDrop 0.0 with dropout"] = LAYERDROP.format(p=0.0)
PROGRAMS["LayerDrop 0.1 with dropout"] = LAYERDROP.format(p=0.1)
PROGRAMS["LayerDrop -0.5 (never drops)"] = LAYERDROP.format(p=-0.5)
PROGRAMS["LayerDrop 0.0, one layer shared"] = LAYERDROP.format(p=0.0).replace(
    "nn.ModuleList([nn.Sequential(nn.Linear(16, 16), nn.Dropout(0.1)) for _ in range(3)])",
    "nn.ModuleList([nn.Sequential(nn.Linear(16, 16), nn.Dropout(0.1))] * 3)",
)
PROGRAMS["LayerDrop 0.0, print in the loop"] = LAYERDROP.format(p=0.0).replace(
    "            x = torch.relu(layer(x))", "            x = torch.relu(layer(x))\n            print('layer', 1)"
)
PROGRAMS["LayerDrop 0.0, draw inline in the test"] = LAYERDROP.format(p=0.0).replace(
    "                dropout_probability = torch.rand([])\n                if dropout_probability < self.layerdrop:",
    "                if torch.rand([]) < self.layerdrop:",
)
PROGRAMS["LayerDrop 0.0 compared with <="] = LAYERDROP.format(p=0.0).replace(
    "dropout_probability < self.layerdrop", "dropout_probability <= self.layerdrop"
)
PROGRAMS["LayerDrop 1.0 kept by >="] = LAYERDROP.format(p=1.0).replace(
    "dropout_probability < self.layerdrop", "dropout_probability >= self.layerdrop"
)
PROGRAMS["LayerDrop 0.0 drawn in bfloat16"] = LAYERDROP.format(p=0.0).replace(
    "torch.rand([])", "torch.rand([], dtype=torch.bfloat16)"
)
PROGRAMS["LayerDrop 1.0 drawn in bfloat16, kept by >="] = LAYERDROP.format(p=1.0).replace(
    "torch.rand([])", "torch.rand([], dtype=torch.bfloat16)"
).replace("dropout_probability < self.layerdrop", "dropout_probability >= self.layerdrop")

# (program, options) -> {backend: (original's (graphs, breaks), mended's)}; the
# counts are the same under eager eagerly run and compiled unless the backend is named.
J = ((2, 1), (1, 0))
JOINED_THREE = ((3, 2), (1, 0))
EXPECTED = {
    ("print of an int", ""): J,
    ("print of an int", "micro_batches=2"): J,
    ("print of an int", "autocast"): J,
    ("print of an int", "second_backward"): J,
    # Each step's ``loss.item()`` and print broke the step's frame (four breaks, one graph).
    ("loss.item() logged in the step", ""): ((1, 4), (1, 0)),
    # warnings.warn is not mended: its break stays.
    ("warnings.warn", ""): ((2, 1), (2, 1)),
    ("mask selected after the first layer", ""): JOINED_THREE,
    ("mask selected after the first layer", "micro_batches=2"): JOINED_THREE,
    ("mask selected after the first layer", "autocast"): JOINED_THREE,
    ("mask selected after the first layer", "second_backward"): JOINED_THREE,
    # A selection of Python floats is no tensor selection: its breaks stay.
    ("scale (Python float) selected", ""): ((3, 2), (3, 2)),
    ("arms requiring grad", ""): ((3, 2), (3, 2)),
    ("selected parameters", ""): ((3, 2), (3, 2)),
    ("isfinite guard", ""): J,
    # The poisoned step raises ValueError in both; the original broke twice to get there.
    ("isfinite guard", "poison_step=1"): ((2, 2), (1, 0)),
    ("isfinite guard", "autocast"): J,
    ("predicate reads a parameter", ""): J,
    ("no_grad block around the branch", ""): JOINED_THREE,
    # The hook's call still breaks (its list append); the selection's breaks go.
    ("forward hook near the selection", ""): ((4, 3), (3, 2)),
    # backward() raises at every step, joined or not; under aot_eager the joined graph
    # fails to compile (G314) and keeps its breaks.
    ("saved for backward, written in place after the branch", ""): {
        "eager": JOINED_THREE, "aot_eager": ((3, 2), (3, 2))},
    ("written in place before the branch", ""): J,
    # Under aot_eager the tied weight receives contributions on both sides (G312).
    ("tied weights, mask selected", ""): {"eager": JOINED_THREE, "aot_eager": ((3, 2), (3, 2))},
    ("tied weights, the tied weight selected", ""): ((2, 1), (2, 1)),
    # The draw's break in the loop made TorchDynamo skip the frame: nothing compiled.
    ("LayerDrop 0.0 with dropout", ""): ((0, 1), (1, 0)),
    ("LayerDrop 0.1 with dropout", ""): ((0, 1), (0, 1)),
    ("LayerDrop -0.5 (never drops)", ""): ((0, 1), (1, 0)),
    # One layer three times: its weight's three contributions, added one by one
    # eagerly, would reach the engine as one sum from aot_eager's backward.
    ("LayerDrop 0.0, one layer shared", ""): {"eager": ((0, 1), (1, 0)), "aot_eager": ((0, 1), (0, 1))},
    ("LayerDrop 0.0, print in the loop", ""): ((0, 1), (1, 0)),
    ("LayerDrop 0.0 with dropout", "micro_batches=2"): ((0, 1), (1, 0)),
    # Under autocast aot_eager differentiates a dropout otherwise than eager (G307).
    ("LayerDrop 0.0 with dropout", "autocast"): {"eager": ((0, 1), (1, 0)), "aot_eager": ((0, 1), (0, 1))},
    ("LayerDrop 0.0 with dropout", "second_backward"): ((0, 1), (1, 0)),
    # Not a candidate: the draw is not bound to a name (the break stays, as it was).
    ("LayerDrop 0.0, draw inline in the test", ""): ((0, 1), (0, 1)),
    # A draw of float32 can be 0.0: ``<= 0.0`` is not decided (W210).
    ("LayerDrop 0.0 compared with <=", ""): ((0, 1), (0, 1)),
    ("LayerDrop 1.0 kept by >=", ""): ((0, 1), (1, 0)),
    # A draw in bfloat16 the original ran eagerly stays refused under aot_eager (G307).
    ("LayerDrop 0.0 drawn in bfloat16", ""): {"eager": ((0, 1), (1, 0)), "aot_eager": ((0, 1), (0, 1))},
    # A draw of bfloat16 may round to 1.0: ``>= 1.0`` is not decided.
    ("LayerDrop 1.0 drawn in bfloat16, kept by >=", ""): ((0, 1), (0, 1)),
    # Selections that must keep their breaks.
    ("dropout drawn in one arm", ""): ((3, 2), (3, 2)),
    ("arms of different shapes", ""): ((3, 2), (3, 2)),
    ("arms of different dtypes", ""): ((3, 2), (3, 2)),
    ("buffer written in one arm", ""): ((3, 2), (3, 2)),
    ("attribute counted in one arm", ""): ((4, 3), (4, 3)),
    # Dropout compiled by aot_eager on both sides: bfloat16 gradients agree.
    ("mask then dropout", ""): JOINED_THREE,
    ("mask then dropout", "autocast"): JOINED_THREE,
    ("print between dropouts", "autocast"): J,
    # The arm records autograd before ``detach`` (G303).
    ("arm calls a layer (detached)", "autocast"): ((3, 2), (3, 2)),
    # loss.item() and the print broke each step twice; the selection twice more.
    ("selection then loss.item() print", ""): ((4, 6), (1, 0)),
}

OPTIONS = {
    "": {},
    "micro_batches=2": {"micro_batches": 2},
    "autocast": {"autocast": True},
    "second_backward": {"second_backward": True},
    "poison_step=1": {"poison_step": 1},
}


def _cases():
    for name, options in EXPECTED:
        for backend in ("eager", "aot_eager"):
            yield pytest.param(name, options, backend, id=f"{name}-{options}-{backend}")


@pytest.mark.parametrize(("name", "options", "backend"), list(_cases()))
def test_training_battery(name, options, backend):
    expected = EXPECTED[name, options]
    expected = expected[backend] if isinstance(expected, dict) else expected
    original_counts, mended_counts, eager_differs, compiled_differs = _measure(
        PROGRAMS[name], backend, **OPTIONS[options]
    )
    assert (original_counts, mended_counts) == expected
    assert eager_differs == []
    assert compiled_differs == []
    # Never worse: no more breaks, and no more graphs (one where the original's break
    # made TorchDynamo skip the frame and compile none).
    assert mended_counts[0] <= max(original_counts[0], 1) and mended_counts[1] <= original_counts[1]


def test_every_program_is_in_the_table():
    assert {name for name, _ in EXPECTED} == set(PROGRAMS)


SAVED_THEN_WRITTEN_IN_PLACE = """
import torch


def f(y):
    y = torch.relu(y)
    print("clamped")
    y.mul_(2.0)
    return y * 3.0
"""


def _warnings_and_error(function):
    torch._dynamo.reset()
    y = torch.tensor([1.5, -0.5, 2.0], requires_grad=True)
    error = None
    with warnings.catch_warnings(record=True) as warned, contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("always")
        out = torch.compile(function, backend="aot_eager")(y)
        try:
            out.sum().backward()
        except RuntimeError as raised:
            error = type(raised).__name__
    return [(str(w.message), w.category.__name__) for w in warned], error


def test_a_failed_join_warns_nothing():
    """The claim is refused (G314) and the breaks kept, counts and backward()'s error
    as the original's; AOTAutograd's anomaly-mode warning from the failed compile of
    the joined graph (``Error detected in ReluBackward0``) is dropped with it."""
    original, mended, _ = original_and_mended(SAVED_THEN_WRITTEN_IN_PLACE)
    expected = _warnings_and_error(original.f)
    assert expected == ([], "RuntimeError")
    reset()
    assert _warnings_and_error(mended.f) == expected


PRINT_BETWEEN = """
import torch


def f(y):
    y = torch.relu(y)
    print("between")
    return y * 2.0
"""


def test_a_joined_graph_that_compiles_shows_its_compile_warnings():
    """What the backend warns while it compiles a joined graph is held (a failed compile's
    warnings are dropped), then shown when the graph compiled, in its order."""
    _, mended, _ = original_and_mended(PRINT_BETWEEN)
    aot_eager = torch._dynamo.lookup_backend("aot_eager")
    compiled = []

    def warning_backend(graph_module, example_inputs):
        compiled.append(graph_module)
        warnings.warn("compiling one", UserWarning, stacklevel=1)
        warnings.warn("compiling two", DeprecationWarning, stacklevel=1)
        return aot_eager(graph_module, example_inputs)

    warning_backend.__wrapped__ = aot_eager  # graphmend joins under grad by the backend it names
    reset()
    torch._dynamo.reset()
    with warnings.catch_warnings(record=True) as warned, contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("always")
        torch.compile(mended.f, backend=warning_backend)(torch.ones(3, requires_grad=True)).sum().backward()
    assert [(str(w.message), w.category) for w in warned] == [
        ("compiling one", UserWarning), ("compiling two", DeprecationWarning)
    ]
    assert len(compiled) == 1  # joined: the held path


ONE_DROPPED_LAYER = """
import torch
from torch import nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Sequential(nn.Linear(16, 16), nn.Dropout(0.1))])
        self.layerdrop = 0.0

    def forward(self, x):
        for layer in self.layers:
            dropout_probability = torch.rand([])
            if dropout_probability < self.layerdrop:
                continue
            x = layer(x)
        return x
"""


def test_a_decided_layerdrop_under_bfloat16_autocast_differentiates_as_eagerly():
    """One step, one Linear and Dropout(0.1) layer. The original's frame ran eagerly;
    joined into one aot_eager graph, dropout's backward under bfloat16 autocast would
    round otherwise than eager's (TorchDynamo compiling the layer whole under aot_eager,
    with no graphmend, differs from eager alike): G307 keeps the break there."""
    original, mended, _ = original_and_mended(ONE_DROPPED_LAYER)
    expected, original_counts = _train(original, "aot_eager", steps=1, autocast=True)
    reset()
    got, mended_counts = _train(mended, "aot_eager", steps=1, autocast=True)
    assert (original_counts, mended_counts) == ((0, 1), (0, 1))
    assert _same(got, expected) == []
