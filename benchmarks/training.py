"""A training step per model: forward, a loss, backward and an optimizer step, compiled.

The ``train`` phase of the worker runs the model in train mode (dropout active) for
``TRAINING_STEPS`` steps of ``torch.optim.SGD`` with momentum, once uncompiled and once
compiled with each asked backend (``aot_eager``: the autograd path TorchInductor takes,
without its code generation; ``eager``), each run from the same initial weights and with
every random generator seeded alike. It counts graphs, breaks (TorchDynamo's own record
of each) and recompilations, and keeps each run's losses, last gradients and final
parameters, which the runner compares bit for bit across the arms.

The census (``tools/census``) measures train mode with the same counting backend and
seeding; both take them from here.
"""

from __future__ import annotations

import contextlib
import copy
import io
import time

TRAINING_STEPS = 3
TRAINING_BACKENDS = ("aot_eager", "eager")
LEARNING_RATE = 0.01
MOMENTUM = 0.9
# The key of the uncompiled run among a worker's saved training tensors.
UNCOMPILED = "uncompiled"


class CountingBackend:
    """Counts the graphs TorchDynamo hands over, and compiles each with ``backend``.

    It names the backend it wraps as ``__wrapped__``: graphmend decides some joins by the
    backend (under autograd, ``eager`` and ``aot_eager`` are known to differentiate as
    written), and a benchmark measures what a user of that backend gets, not what an
    unknown wrapper would."""

    def __init__(self, backend: str) -> None:
        from torch._dynamo import lookup_backend

        self.graphs = 0
        self.compile = lookup_backend(backend)
        self.__wrapped__ = self.compile

    def __call__(self, graph_module, example_inputs):
        self.graphs += 1
        return self.compile(graph_module, example_inputs)


def seed_every_generator() -> None:
    """Seed torch's, Python's and numpy's generators: training code draws from all three
    (SpecAugment masks from numpy, LayerDrop from torch), and the two arms run in
    processes of their own."""
    import random

    import torch

    torch.manual_seed(0)
    random.seed(0)
    try:
        import numpy
    except ImportError:
        return
    numpy.random.seed(0)


def main_tensor(output):
    """The tensor a training step's loss is taken from: the model's ``loss`` when it
    computed one, else its main output (``benchmarks.suite.main_output``)."""
    import torch

    from benchmarks.suite import main_output

    loss = getattr(output, "loss", None)
    if isinstance(loss, torch.Tensor):
        return loss
    tensor = main_output(output)
    if isinstance(tensor, dict):
        tensor = tensor.get("logits", next(iter(tensor.values()), None))
    if isinstance(tensor, (tuple, list)):
        tensor = next((item for item in tensor if isinstance(item, torch.Tensor)), None)
    return tensor if isinstance(tensor, torch.Tensor) else None


def training_loss(output):
    """A scalar to backpropagate: the sum of the main tensor, in float32."""
    tensor = main_tensor(output)
    if tensor is None or not tensor.is_floating_point() or not tensor.requires_grad:
        raise RuntimeError("the main output is no float tensor that requires grad: no loss")
    # float32 at least: a half-precision sum of many logits loses the gradient's scale.
    return tensor.float().sum()


def train_steps(function, model, example_kwargs, steps: int = TRAINING_STEPS) -> dict:
    """Run ``steps`` training steps of ``function`` (the model, compiled or not) on
    ``model``'s parameters; the tensors to compare: ``loss.N`` per step, ``grad.NAME``
    (the last step's gradients) and ``param.NAME`` (after the last step)."""
    import torch

    from benchmarks.worker import clear_warning_once_caches

    optimizer = torch.optim.SGD(model.parameters(), lr=LEARNING_RATE, momentum=MOMENTUM)
    saved: dict = {}
    seed_every_generator()
    for step in range(steps):
        clear_warning_once_caches()
        optimizer.zero_grad(set_to_none=True)
        with contextlib.redirect_stdout(io.StringIO()):
            output = function(**copy.deepcopy(example_kwargs))
        loss = training_loss(output)
        loss.backward()
        optimizer.step()
        saved[f"loss.{step}"] = loss.detach().to("cpu")
    for name, parameter in model.named_parameters():
        if parameter.grad is not None:
            saved[f"grad.{name}"] = parameter.grad.detach().to("cpu").clone()
    for name, parameter in model.named_parameters():
        saved[f"param.{name}"] = parameter.detach().to("cpu").clone()
    return saved


def _restore(model, initial_state: dict) -> None:
    import torch

    with torch.no_grad():
        model.load_state_dict(initial_state)
    model.zero_grad(set_to_none=True)


def run_train(model, example_kwargs, result: dict, outputs: dict, backends=TRAINING_BACKENDS) -> None:
    """The ``train`` phase: an uncompiled run, then a counted compiled run per backend,
    each from the model's initial weights (``result["train"]``, ``outputs``)."""
    import torch
    from torch._dynamo.utils import counters

    from benchmarks.worker import _error_text, count_fields
    from graphmend.counting import break_count_so_far, recording_graph_breaks

    model.train()
    initial_state = copy.deepcopy(model.state_dict())
    result["train_steps"] = TRAINING_STEPS
    result["train_optimizer"] = f"SGD(lr={LEARNING_RATE}, momentum={MOMENTUM})"
    runs: dict = {}
    result["train"] = runs

    start = time.perf_counter()
    uncompiled: dict = {}
    runs[UNCOMPILED] = uncompiled
    try:
        outputs[UNCOMPILED] = train_steps(model, model, example_kwargs)
        uncompiled["losses"] = _losses(outputs[UNCOMPILED])
    except Exception as error:  # noqa: BLE001 - the compiled runs still tell something
        uncompiled["error"] = _error_text(error)
    uncompiled["seconds"] = time.perf_counter() - start

    for backend in backends:
        _restore(model, initial_state)
        torch._dynamo.reset()
        counters.clear()
        # The mended code's runtime remembers what it declined while tracing, and an
        # earlier backend's decline would be taken again here without a trace of its own.
        _forget_trace_time_declines()
        run: dict = {}
        runs[backend] = run
        counting = CountingBackend(backend)
        compiled = torch.compile(model, backend=counting, dynamic=False)
        start = time.perf_counter()
        with recording_graph_breaks() as records:
            try:
                outputs[backend] = train_steps(compiled, model, example_kwargs)
                run["losses"] = _losses(outputs[backend])
            except Exception as error:  # noqa: BLE001
                run["error"] = _error_text(error)
        run["seconds"] = time.perf_counter() - start
        run.update(count_fields(break_count_so_far(counting, records)))
        declined = trace_time_declines()
        if declined is not None:
            run["declined"] = declined
    torch._dynamo.reset()


def _mended_runtime():
    """graphmend's runtime where this process runs mended code (the graphmend arm), else
    None: the original arm must not import it."""
    import sys

    return sys.modules.get("graphmend.runtime")


def _forget_trace_time_declines() -> None:
    runtime = _mended_runtime()
    if runtime is not None:
        runtime.reset()


def trace_time_declines() -> list[dict] | None:
    """What the mended code declined to join while TorchDynamo traced it: each site, the
    reason and its condition id (None in a process that runs no mended code)."""
    if _mended_runtime() is None:
        return None
    from graphmend.core.legality import condition_id
    from graphmend.runtime.store import store

    return [
        {"file": file, "line": line, "reason": reason, "condition": condition_id(reason)}
        for (file, line), reason in sorted(store.trace_time_declines.items())
    ]


def _losses(saved: dict) -> list[float]:
    return [saved[name].item() for name in sorted(k for k in saved if k.startswith("loss."))]
