"""One arm of one model, in this (fresh) process: ``python -m benchmarks.worker``.

The runner starts one worker per measurement so that nothing is shared between arms:
no imported (or rewritten) modules, no TorchDynamo or TorchInductor caches, no warm
allocator. The worker writes a JSON result (always, even when a step fails) and the
model's outputs with ``torch.save``; the runner compares outputs across processes.

Phases:

* ``quick``: graph and break counts under a counting backend (``dynamic=False``),
  Dynamo's record of each break (``graphmend.dynamo_records``) with its category, the
  recompilations and their reasons, a ``fullgraph=True`` capture with the eager backend,
  the outputs of an eager run and of the counted compiled run, and (graphmend arm) the
  time to rewrite the model's modeling file.
* ``timing``: ``torch.compile`` with TorchInductor; the first call (cold start,
  compilation included), each of the first ``--iterations`` calls (time to the N-th
  call), then the mean of ``--steady-calls`` further calls (steady state: the calls
  right after compiling are still warming up, by 2-4x on these small models).
* ``train``: a few training steps (train mode, SGD with momentum), uncompiled and
  compiled with each of ``--train-backends`` under a counting backend: graphs, breaks,
  recompilations, and the losses, gradients and parameters (``benchmarks.training``).

In the graphmend arm the import hook is installed before anything of the model's
packages is imported.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import json
import logging
import os
import platform
import re
import statistics
import sys
import time
import traceback
from collections import Counter

from benchmarks.training import TRAINING_BACKENDS, run_train, seed_every_generator

ARMS = ("original", "graphmend")
PHASES = ("quick", "timing", "train")


def _error_text(error: BaseException, limit: int = 2000) -> str:
    text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    return text[-limit:]


def _error_headline(error: BaseException) -> str:
    first = str(error).strip().splitlines()
    return f"{type(error).__name__}: {first[0] if first else ''}"[:300]


def clear_warning_once_caches() -> None:
    """transformers' ``logger.warning_once`` remembers what it said; forget it so each
    run takes the same path as a first run."""
    for method in (
        getattr(logging.Logger, "warning_once", None),
        getattr(logging.Logger, "info_once", None),
    ):
        if method is not None and hasattr(method, "cache_clear"):
            method.cache_clear()


def tensor_leaves(value, prefix: str = "output") -> dict:
    """Every tensor in a model output, by path (``output.logits``, ``output.0.1``).

    Model outputs are dataclass-like mappings, tuples or tensors; other objects (a
    ``Cache``, None) are left out.
    """
    import torch

    leaves = {}
    if isinstance(value, torch.Tensor):
        leaves[prefix] = value.detach().to("cpu")
    elif isinstance(value, dict) or (hasattr(value, "keys") and hasattr(value, "__getitem__")):
        for key in list(value.keys()):
            leaves.update(tensor_leaves(value[key], f"{prefix}.{key}"))
    elif isinstance(value, (tuple, list)):
        for index, item in enumerate(value):
            leaves.update(tensor_leaves(item, f"{prefix}.{index}"))
    return leaves


def main_output_name(leaves: dict) -> str | None:
    """The output compared first: ``logits`` where there is one, else the first tensor."""
    for name in leaves:
        if name.rsplit(".", 1)[-1] == "logits":
            return name
    return next(iter(leaves), None)


def _to_device(value, device: str):
    import torch

    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, dict):
        return {key: _to_device(item, device) for key, item in value.items()}
    return value


def _synchronize(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def environment_facts(device: str) -> dict:
    import torch

    facts = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "platform": platform.platform(),
        "processor": _processor_name(),
        "cpu_count": os.cpu_count(),
        # Other processes on the machine skew timings; the 1-minute load says how busy it was.
        "load_average_1min": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
        "torch_threads": torch.get_num_threads(),
        "torch_interop_threads": torch.get_num_interop_threads(),
        "thread_environment": {
            name: os.environ.get(name)
            for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "TORCHINDUCTOR_COMPILE_THREADS")
        },
        "inductor_environment": {
            name: os.environ.get(name)
            for name in (
                "TORCHINDUCTOR_CACHE_DIR",
                "TORCHINDUCTOR_FX_GRAPH_CACHE",
                "TORCHINDUCTOR_AUTOGRAD_CACHE",
            )
        },
    }
    try:
        import transformers

        facts["transformers"] = transformers.__version__
    except Exception:  # noqa: BLE001 - a model without transformers is fine
        facts["transformers"] = None
    if device.startswith("cuda") and torch.cuda.is_available():
        facts["gpu"] = torch.cuda.get_device_name()
        facts["cuda"] = torch.version.cuda
    return facts


def _processor_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _resolve_model(name: str | None, model_file: str | None):
    from benchmarks import suite

    if model_file:
        return suite.load_model_file(model_file, import_module=False)
    return suite.get_model(name)


REWRITE_REPEATS = 3


def _rewrite_seconds(model) -> dict:
    """Time ``mend_module_source`` on the module that defines the model's class (the
    fastest of a few runs: the first also pays for warming up the analyses)."""
    from graphmend.rewrite.pipeline import mend_module_source

    module = sys.modules.get(type(model).__module__)
    path = getattr(module, "__file__", None)
    if not path or not path.endswith(".py"):
        return {"file": path, "seconds": None}
    with open(path, encoding="utf-8") as handle:
        source = handle.read()
    runs = []
    for _ in range(REWRITE_REPEATS):
        start = time.perf_counter()
        result = mend_module_source(source, filename=path, module_name=module.__name__, scope="all")
        runs.append(time.perf_counter() - start)
    return {
        "file": path,
        "lines": source.count("\n") + 1,
        "seconds": min(runs),
        "all_seconds": runs,
        "changed": result.changed,
        "findings": len(result.findings),
    }


_GB_ID = re.compile(r"gb\d{4}")
# Dynamo's words for a break type, the same for every record of that type: its
# registry (or ``graphmend rule``) gives them back from the graph-break id.
_TEXT_OF_THE_TYPE = ("explanation", "hints", "reference")


def break_row(record) -> dict:
    """One break record as a result row: where it happened, its type, graph-break id and
    category (``GraphBreakRecord.summary`` without the texts its id stands for)."""
    row = record.summary()
    match = _GB_ID.search(row.get("reference") or "")
    row["gb_id"] = match.group(0) if match else None
    for key in _TEXT_OF_THE_TYPE:
        row.pop(key, None)
    return row


def count_fields(count) -> dict:
    """A break count as the result's fields: graphs, breaks, frames skipped, Dynamo's
    reasons and records of each break, their categories, the recompilations."""
    from benchmarks.categories import count_categories

    rows = [break_row(record) for record in count.records]
    return {
        "graphs": count.graphs,
        "breaks": count.breaks,
        "frames_skipped": count.frames_skipped,
        "dynamo_break_reasons": dict(Counter(record.gb_type for record in count.records)),
        "logged_breaks": rows,
        "categories": count_categories(row["category"] for row in rows),
        "recompilations": [item.to_json() for item in count.recompilations],
    }


def run_quick(model, example_kwargs, result: dict, outputs: dict) -> None:
    import torch

    from graphmend.counting import count_breaks

    # 1. Counting backend: graphs, breaks, and Dynamo's record of each break.
    clear_warning_once_caches()
    start = time.perf_counter()
    try:
        with torch.no_grad():
            compiled_output, count = count_breaks(model, **copy.deepcopy(example_kwargs))
        result.update(count_fields(count))
        outputs["compiled"] = tensor_leaves(compiled_output)
    except Exception as error:  # noqa: BLE001 - report and go on with the other steps
        result["count_error"] = _error_text(error)
    result["count_seconds"] = time.perf_counter() - start

    # 2. Eager run of this arm's (possibly rewritten) model.
    torch._dynamo.reset()
    clear_warning_once_caches()
    try:
        with torch.no_grad(), contextlib.redirect_stdout(io.StringIO()):
            outputs["eager"] = tensor_leaves(model(**copy.deepcopy(example_kwargs)))
    except Exception as error:  # noqa: BLE001
        result["eager_error"] = _error_text(error)

    # 3. fullgraph=True capture with the eager backend.
    torch._dynamo.reset()
    clear_warning_once_caches()
    try:
        whole = torch.compile(model, fullgraph=True, backend="eager", dynamic=False)
        with torch.no_grad(), contextlib.redirect_stdout(io.StringIO()):
            outputs["fullgraph"] = tensor_leaves(whole(**copy.deepcopy(example_kwargs)))
        result["fullgraph"] = True
    except Exception as error:  # noqa: BLE001
        result["fullgraph"] = False
        result["fullgraph_error"] = _error_headline(error)
    torch._dynamo.reset()


def _timed_calls(compiled, example_kwargs, device: str, count: int):
    """Seconds of each of ``count`` calls, and the last call's output."""
    seconds, output = [], None
    for _ in range(count):
        arguments = dict(example_kwargs)
        _synchronize(device)
        start = time.perf_counter()
        output = compiled(**arguments)
        _synchronize(device)
        seconds.append(time.perf_counter() - start)
    return seconds, output


def run_timing(
    model,
    example_kwargs,
    result: dict,
    outputs: dict,
    device: str,
    mode: str,
    iterations: int,
    steady_calls: int = 0,
) -> None:
    import torch

    clear_warning_once_caches()
    compile_mode = None if mode == "default" else mode
    try:
        compiled = torch.compile(model, backend="inductor", mode=compile_mode, dynamic=False)
        with torch.no_grad(), contextlib.redirect_stdout(io.StringIO()):
            seconds, output = _timed_calls(compiled, example_kwargs, device, iterations)
            steady, last = _timed_calls(compiled, example_kwargs, device, steady_calls)
            output = last if steady else output
        result["call_seconds"] = seconds
        result["cold_start_seconds"] = seconds[0]
        # Without a window of its own, calls 2..N stand for the steady state (as before).
        window = steady or seconds[1:]
        result["steady_state_calls"] = len(window)
        result["steady_state_window"] = "after the first N calls" if steady else "calls 2..N"
        result["steady_state_seconds"] = sum(window) / len(window) if window else None
        result["steady_state_median_seconds"] = statistics.median(window) if window else None
        if window:
            result["steady_state_min_seconds"] = min(window)
            result["steady_state_max_seconds"] = max(window)
        from torch._dynamo.utils import counters

        # A guard that fails on a later call recompiles inside the steady-state calls.
        result["dynamo_stats"] = dict(counters["stats"])
        outputs["inductor"] = tensor_leaves(output)
    except Exception as error:  # noqa: BLE001
        result["timing_error"] = _error_text(error)


def run_worker(args: argparse.Namespace) -> dict:
    result: dict = {
        "model": args.model,
        "arm": args.arm,
        "phase": args.phase,
        "device": args.device,
        "mode": args.mode,
        "pid": os.getpid(),
    }
    outputs: dict = {}
    process_start = time.perf_counter()
    try:
        bench_model = _resolve_model(args.model, args.model_file)
        result["model"] = bench_model.name
        missing = bench_model.missing_requirements()
        if missing:
            result["skipped"] = f"missing requirement(s): {', '.join(missing)}"
            return result
        hook = None
        if args.arm == "graphmend":
            import graphmend.hook

            hook = graphmend.hook.install(list(bench_model.packages), cache_dir=args.hook_cache_dir)
        import torch

        torch.set_num_threads(args.threads)
        # Both arms build the same weights and inputs; numpy and Python are seeded too,
        # for models that draw from them in training.
        seed_every_generator()
        start = time.perf_counter()
        model, example_kwargs = bench_model.build()
        if args.phase == "train" and bench_model.training_inputs is not None:
            example_kwargs = bench_model.training_inputs()
        model.eval()
        model.to(args.device)
        example_kwargs = _to_device(example_kwargs, args.device)
        result["build_seconds"] = time.perf_counter() - start
        result["environment"] = environment_facts(args.device)
        if hook is not None:
            stats = hook.stats
            result["hook"] = {
                "transform_calls": stats.transform_calls,
                "cache_hits": stats.cache_hits,
                "cache_writes": stats.cache_writes,
                "fallbacks": stats.fallbacks,
            }
        if args.phase == "quick":
            run_quick(model, example_kwargs, result, outputs)
            if args.arm == "graphmend":
                try:
                    result["rewrite"] = _rewrite_seconds(model)
                except Exception as error:  # noqa: BLE001
                    result["rewrite"] = {"error": _error_headline(error)}
        elif args.phase == "train":
            run_train(model, example_kwargs, result, outputs, args.train_backends)
        else:
            run_timing(
                model,
                example_kwargs,
                result,
                outputs,
                args.device,
                args.mode,
                args.iterations,
                args.steady_calls,
            )
    except Exception as error:  # noqa: BLE001 - the runner reads the error from the JSON
        result["error"] = _error_text(error)
    finally:
        result["process_seconds"] = time.perf_counter() - process_start
        if outputs and args.outputs:
            import torch

            torch.save(outputs, args.outputs)
            result["outputs_file"] = args.outputs
            if args.phase != "train":
                result["main_output"] = main_output_name(
                    outputs.get("eager") or next(iter(outputs.values()))
                )
    return result


def _backend_list(text: str) -> tuple[str, ...]:
    backends = tuple(name.strip() for name in text.split(",") if name.strip())
    unknown = [name for name in backends if name not in TRAINING_BACKENDS]
    if unknown or not backends:
        raise argparse.ArgumentTypeError(
            f"backends are {', '.join(TRAINING_BACKENDS)}; not {', '.join(unknown) or 'none'}"
        )
    return backends


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.worker")
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--model", help="a registered bench model")
    which.add_argument("--model-file", help="a Python file defining build()")
    parser.add_argument("--arm", choices=ARMS, required=True)
    parser.add_argument("--phase", choices=PHASES, default="quick")
    parser.add_argument("--device", default="cpu")
    parser.add_argument(
        "--mode", default="default", choices=("default", "reduce-overhead", "max-autotune")
    )
    parser.add_argument(
        "--iterations", type=int, default=10, help="timed calls: 1 cold + the rest (time to call N)"
    )
    parser.add_argument(
        "--steady-calls",
        type=int,
        default=0,
        help="further calls whose mean is the steady state (0: calls 2..N of --iterations)",
    )
    parser.add_argument(
        "--train-backends",
        type=_backend_list,
        default=TRAINING_BACKENDS,
        help=f"train phase: comma-separated backends (default {','.join(TRAINING_BACKENDS)})",
    )
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--hook-cache-dir", default=None)
    parser.add_argument("--result", required=True, help="where to write the JSON result")
    parser.add_argument("--outputs", default=None, help="where to torch.save the outputs")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    result = run_worker(args)
    with open(args.result, "w", encoding="utf-8") as handle:
        json.dump(result, handle, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
