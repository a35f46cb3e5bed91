"""One arm of one census entry in one mode, in this fresh process:
``python -m tools.census.child TASK_JSON RESULT_PATH``.

The graphmend arm installs the import hook (transformers and the user's own code)
before anything of the model is imported. The result is written as JSON even when a step
fails; tensors are not written, only a SHA-256 of each one's bytes, dtype and shape, so
two arms compare bit for bit wherever they ran.

Steps, each after seeding torch, Python and numpy, and with fresh TorchDynamo state:
1. eager call (eval: under ``no_grad``; train: backward of the main output's sum);
2. compiled call with the asked backend, counted: graphs, and each break as TorchDynamo
   records it (``graphmend.counting``, ``graphmend.dynamo_records``);
3. ``fullgraph=True`` capture (eager backend: capture is TorchDynamo's, whatever compiles).
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import io
import json
import os
import sys
import time
import traceback

from benchmarks.training import CountingBackend, seed_every_generator
from benchmarks.training import main_tensor as _main_tensor
from tools.census.models import (
    Entry,
    TooLarge,
    build_transformers_model,
    input_candidates,
    make_inputs,
    parameter_count,
)


def _headline(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0] if lines else ''}"[:300]


def _digest(tensor) -> str:
    tensor = tensor.detach().to("cpu").contiguous()
    hasher = hashlib.sha256(f"{tensor.dtype}{tuple(tensor.shape)}".encode())
    if tensor.numel():
        hasher.update(tensor.reshape(-1).view(dtype=__import__("torch").uint8).numpy().tobytes())
    return hasher.hexdigest()[:24]


def digests(value) -> dict:
    from benchmarks.worker import tensor_leaves

    return {name: _digest(tensor) for name, tensor in tensor_leaves(value).items()}


def gradient_digests(model) -> dict:
    return {
        name: _digest(parameter.grad)
        for name, parameter in model.named_parameters()
        if parameter.grad is not None
    }


def _call(function, model, inputs: dict, mode: str, result: dict, prefix: str) -> None:
    """Call ``function(**inputs)`` as ``mode`` says; the outputs' (and gradients') digests."""
    import torch

    from benchmarks.worker import clear_warning_once_caches

    clear_warning_once_caches()
    model.zero_grad(set_to_none=True)
    seed_every_generator()
    with contextlib.redirect_stdout(io.StringIO()):
        if mode == "eval":
            with torch.no_grad():
                output = function(**copy.deepcopy(inputs))
        else:
            output = function(**copy.deepcopy(inputs))
            main = _main_tensor(output)
            if main is None or not main.requires_grad:
                raise RuntimeError("the main output does not require grad: nothing to backpropagate")
            main.sum().backward()
    result[f"{prefix}_outputs"] = digests(output)
    if mode == "train":
        result[f"{prefix}_gradients"] = gradient_digests(model)


def break_rows(count) -> list[dict]:
    from benchmarks.worker import break_row

    return [break_row(record) for record in count.records]


def measure_model(model, inputs: dict, mode: str, backend: str, result: dict) -> None:
    import torch
    from torch._dynamo.utils import counters

    from graphmend.counting import break_count_so_far, recording_graph_breaks

    try:
        _call(model, model, inputs, mode, result, "eager")
        # A model that seeds itself from the operating system's entropy (reformer's
        # reversible layers call ``torch.seed()`` in training) differs from call to call:
        # its arms cannot be compared bit for bit.
        again: dict = {}
        _call(model, model, inputs, mode, again, "eager")
        if any(again.get(kind) != result.get(kind) for kind in ("eager_outputs", "eager_gradients")):
            result["varies_between_calls"] = True
    except Exception as error:  # noqa: BLE001 - the compiled steps still tell something
        result["eager_error"] = _headline(error)

    torch._dynamo.reset()
    counters.clear()
    counting = CountingBackend(backend)
    compiled = torch.compile(model, backend=counting, dynamic=False)
    start = time.perf_counter()
    with recording_graph_breaks() as records:
        try:
            _call(compiled, model, inputs, mode, result, "compiled")
        except Exception as error:  # noqa: BLE001
            result["compiled_error"] = _headline(error)
    result["compile_seconds"] = time.perf_counter() - start
    count = break_count_so_far(counting, records)
    result["graphs"] = count.graphs
    result["breaks"] = count.breaks
    result["frames_skipped"] = count.frames_skipped
    result["break_records"] = break_rows(count)
    result["recompilations"] = len(count.recompilations)

    torch._dynamo.reset()
    try:
        whole = torch.compile(model, backend="eager", fullgraph=True, dynamic=False)
        probe: dict = {}
        _call(whole, model, inputs, mode, probe, "fullgraph")
        result["fullgraph"] = True
    except Exception as error:  # noqa: BLE001
        result["fullgraph"] = False
        result["fullgraph_error"] = _headline(error)
    torch._dynamo.reset()


def _build(entry: Entry, max_parameters: int, result: dict):
    """(model, inputs) or None with ``result["status"]`` saying why not."""
    import torch

    if entry.kind == "file":
        from benchmarks.suite import load_model_file

        torch.manual_seed(0)
        model, inputs = load_model_file(entry.path).build()
        result["input_set"] = "build()"
        return model, inputs, None
    try:
        model, config = build_transformers_model(entry, max_parameters)
        result["parameters"] = parameter_count(model)
    except TooLarge as too_large:
        result["parameters"] = too_large.parameters
    if result["parameters"] > max_parameters:
        result["status"] = "skipped"
        result["reason"] = f"{result['parameters']} parameters > the cap of {max_parameters}"
        return None
    return model, None, config


def _choose_inputs(model, config, result: dict):
    """The first input set the (eval) model runs with eagerly, made afresh after the try."""
    import torch

    from benchmarks.worker import clear_warning_once_caches

    candidates = input_candidates(model, config)
    if not candidates:
        result["status"] = "skipped"
        result["reason"] = "forward takes none of the inputs a census makes"
        return None
    tried = []
    for set_name in candidates:
        try:
            inputs = make_inputs(model, config, set_name)
            was_training = model.training
            model.eval()
            with torch.no_grad(), contextlib.redirect_stdout(io.StringIO()):
                model(**inputs)
            model.train(was_training)
        except Exception as error:  # noqa: BLE001
            tried.append(f"{set_name}: {_headline(error)}")
            continue
        clear_warning_once_caches()
        torch._dynamo.reset()
        result["input_set"] = set_name
        return make_inputs(model, config, set_name)
    result["status"] = "build_error"
    result["reason"] = "no input set runs: " + " | ".join(tried)
    return None


def run_script(entry: Entry, arm: str, result: dict) -> None:
    """A user's script run whole, original or as ``graphmend run --package transformers``."""
    import runpy

    from torch._dynamo.utils import counters

    from graphmend.counting import recording_graph_breaks

    stdout = io.StringIO()
    counters.clear()
    with recording_graph_breaks() as records, contextlib.redirect_stdout(stdout):
        try:
            if arm == "graphmend":
                from graphmend.cli.run import run_command

                code = run_command(["--package", "transformers", entry.path])
            else:
                saved = list(sys.argv)
                sys.argv = [entry.path]
                try:
                    runpy.run_path(entry.path, run_name="__main__")
                    code = 0
                except SystemExit as exit_:
                    code = exit_.code if isinstance(exit_.code, int) else 1
                finally:
                    sys.argv = saved
            result["exit_code"] = code
        except Exception as error:  # noqa: BLE001
            result["error"] = _headline(error)
    result["graphs"] = records.graphs
    result["breaks"] = max(len(records.breaks), sum(counters["graph_break"].values()))
    result["frames_skipped"] = records.frames_skipped
    from graphmend.counting import BreakCount

    result["break_records"] = break_rows(BreakCount(records=list(records.breaks)))
    result["stdout_digest"] = hashlib.sha256(stdout.getvalue().encode()).hexdigest()[:24]
    result["status"] = "error" if "error" in result else "ok"


def run_arm(task: dict) -> dict:
    entry = Entry.from_json(task["entry"])
    arm, mode, backend = task["arm"], task["mode"], task["backend"]
    result: dict = {"model": entry.name, "mode": mode, "arm": arm, "backend": backend, "pid": os.getpid()}
    start = time.perf_counter()
    # The harness's own modules are imported first: the hook below would mend them as the
    # user's code.
    import benchmarks.suite
    import benchmarks.worker  # noqa: F401

    try:
        if arm == "graphmend":
            import graphmend

            graphmend.install(["transformers"], user_code=True)
        import torch

        torch.set_num_threads(1)
        result["versions"] = _versions()
        if entry.kind == "script":
            run_script(entry, arm, result)
            return result
        try:
            built = _build(entry, task["max_parameters"], result)
        except Exception as error:  # noqa: BLE001
            result["status"] = "build_error"
            result["reason"] = _headline(error)
            return result
        if built is None:
            return result
        model, inputs, config = built
        if inputs is None:
            inputs = _choose_inputs(model, config, result)
            if inputs is None:
                return result
        model.train(mode == "train")
        measure_model(model, inputs, mode, backend, result)
        failed = [key for key in ("eager_error", "compiled_error") if key in result]
        result["status"] = "error" if failed else "ok"
    except Exception as error:  # noqa: BLE001
        result["status"] = "error"
        result["reason"] = _headline(error)
        result["traceback"] = traceback.format_exc()[-2000:]
    finally:
        result["seconds"] = time.perf_counter() - start
    return result


def _versions() -> dict:
    import torch

    versions = {"python": sys.version.split()[0], "torch": torch.__version__}
    try:
        import transformers

        versions["transformers"] = transformers.__version__
    except ImportError:
        versions["transformers"] = None
    return versions


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    task_text, result_path = argv
    result = run_arm(json.loads(task_text))
    temporary = result_path + ".tmp"
    with open(temporary, "w", encoding="utf-8") as handle:
        json.dump(result, handle, default=str)
    os.replace(temporary, result_path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
