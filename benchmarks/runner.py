"""Run the suite: each model's two arms, original and graphmend, each in a fresh process.

For every model:

1. quick pass: one ``original`` then one ``graphmend`` worker (counts, break reasons,
   fullgraph capture, outputs, rewrite time); the outputs are compared here
   (left out with ``timing_only``).
2. with ``train``: one ``train`` worker per arm (training steps, uncompiled and compiled
   with each of ``train_backends``); their losses, gradients and parameters are compared
   here (``compare_training``). ``train_only`` runs this pass alone.
3. unless ``quick``: ``repeats`` rounds of timing workers in counterbalanced order,
   original, graphmend, graphmend, original, original, graphmend, ... (see
   ``timing_order``), so that a steady drift of the machine (thermal, other load) and
   any cost of going first or second in a round fall on both arms alike.

With ``interleave`` the quick passes of all models come first, then round 1 of every
model, round 2 of every model, and so on. A model's rounds are then spread over the whole
run: a quiet or a busy spell of the machine (on a shared 2-core machine, what the other
core is compiling) reaches a few rounds of every model, not all rounds of one, so each
model's min-max covers the spells a later run of the command meets too.

Every worker gets its own empty TorchInductor cache folder, with the FX-graph and
AOT-autograd caches off, ``OMP_NUM_THREADS=1`` and ``torch.set_num_threads(1)``
(recorded in the results), so that each cold start is really cold.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone

from benchmarks.suite import BenchModel
from benchmarks.training import TRAINING_BACKENDS, UNCOMPILED

# The folder that holds the `benchmarks` package (the repository's root).
CHECKOUT_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

ARMS = ("original", "graphmend")
# progress(message, done, total): a line about one step; done/total count the steps.
Progress = Callable[[str, int, int], None]


@dataclass
class RunOptions:
    quick: bool = False
    timing_only: bool = False
    repeats: int = 3
    iterations: int = 10
    steady_calls: int = 200
    device: str = "cpu"
    mode: str = "default"
    threads: int = 1
    timeout: float = 900.0
    # Time round 1 of every model, then round 2 of every model, ...: each model's
    # processes then spread over the whole run instead of a few minutes of it.
    interleave: bool = False
    # A training pass per model (benchmarks.training); with train_only, nothing else.
    train: bool = False
    train_only: bool = False
    train_backends: tuple[str, ...] = TRAINING_BACKENDS
    models: str = ""
    model_file: str | None = None
    python: str = field(default_factory=lambda: sys.executable)


def _stderr_progress(message: str, done: int = 0, total: int = 0) -> None:
    print(message, file=sys.stderr, flush=True)


class ProgressBar:
    """Progress on a terminal: each finished step's line scrolls up, and a bar with the
    step under way, the time spent and a rough time left stays on the last line."""

    WIDTH = 24

    def __init__(self, stream=None, clock=time.monotonic) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.clock = clock
        self.started = clock()

    def __call__(self, message: str, done: int = 0, total: int = 0) -> None:
        self.stream.write("\r\033[K")
        starting = message.endswith("...")
        if not starting:
            self.stream.write(message + "\n")
        if total:
            finished = done - 1 if starting else done
            self.stream.write(self.bar(finished, total, message if starting else ""))
        self.stream.flush()

    def bar(self, finished: int, total: int, current: str) -> str:
        filled = round(self.WIDTH * finished / total)
        elapsed = self.clock() - self.started
        left = ""
        if finished:
            left = f", about {_minutes(elapsed / finished * (total - finished))} left"
        label = current.split("] ", 1)[-1].removesuffix(" ...") if current else ""
        return (
            f"[{'#' * filled}{'.' * (self.WIDTH - filled)}] {finished}/{total} "
            f"{_minutes(elapsed)} spent{left}" + (f"  {label}" if label else "")
        )

    def close(self) -> None:
        self.stream.write("\r\033[K")
        self.stream.flush()


def _minutes(seconds: float) -> str:
    minutes, seconds = divmod(int(seconds), 60)
    return f"{minutes}:{seconds:02d}"


def worker_environment(scratch: str, options: RunOptions) -> dict[str, str]:
    """The environment of one worker: its own empty compiler caches, one thread."""
    environment = dict(os.environ)
    inductor_cache = tempfile.mkdtemp(prefix="inductor-", dir=scratch)
    environment.update(
        {
            "TORCHINDUCTOR_CACHE_DIR": inductor_cache,
            "TRITON_CACHE_DIR": os.path.join(inductor_cache, "triton"),
            "TORCHINDUCTOR_FX_GRAPH_CACHE": "0",
            "TORCHINDUCTOR_AUTOGRAD_CACHE": "0",
            "TORCHINDUCTOR_FORCE_DISABLE_CACHES": "1",
            "OMP_NUM_THREADS": str(options.threads),
            "MKL_NUM_THREADS": str(options.threads),
            "PYTHONUNBUFFERED": "1",
            "PYTHONDONTWRITEBYTECODE": "1",
        }
    )
    # The harness is not installed: it runs from the checkout, so each worker
    # (`python -m benchmarks.worker`) needs the checkout's root on its path.
    inherited = [entry for entry in environment.get("PYTHONPATH", "").split(os.pathsep) if entry]
    environment["PYTHONPATH"] = os.pathsep.join(dict.fromkeys([CHECKOUT_ROOT, *inherited]))
    # graphmend's rewritten-code cache (a folder of this run) honours
    # PYTHONDONTWRITEBYTECODE; without the cache every graphmend worker rewrites its
    # imports again. Rewriting happens at import, outside every timed call, either way.
    environment.pop("PYTHONDONTWRITEBYTECODE", None)
    if options.device == "cpu":
        # Two-core machines: parallel compile workers would compete with the timed process.
        environment.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
    return environment


def run_worker_process(
    model: BenchModel, arm: str, phase: str, options: RunOptions, scratch: str, hook_cache_dir: str
) -> dict:
    """Start one worker and return its JSON result (with ``worker_error`` if it died)."""
    tag = f"{model.name}-{arm}-{phase}-{time.monotonic_ns()}"
    result_path = os.path.join(scratch, tag + ".json")
    outputs_path = os.path.join(scratch, tag + ".pt")
    log_path = os.path.join(scratch, tag + ".log")
    command = [options.python, "-m", "benchmarks.worker"]
    command += ["--model-file", model.module_file] if model.module_file else ["--model", model.name]
    command += [
        "--arm",
        arm,
        "--phase",
        phase,
        "--device",
        options.device,
        "--mode",
        options.mode,
        "--iterations",
        str(options.iterations),
        "--steady-calls",
        str(options.steady_calls),
        "--threads",
        str(options.threads),
        "--train-backends",
        ",".join(options.train_backends),
        "--hook-cache-dir",
        hook_cache_dir,
        "--result",
        result_path,
        "--outputs",
        outputs_path,
    ]
    environment = worker_environment(scratch, options)
    start = time.perf_counter()
    with open(log_path, "w", encoding="utf-8") as log:
        try:
            completed = subprocess.run(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=environment,
                timeout=options.timeout,
                check=False,
            )
            exit_status: int | str = completed.returncode
        except subprocess.TimeoutExpired:
            exit_status = "timeout"
    shutil.rmtree(environment["TORCHINDUCTOR_CACHE_DIR"], ignore_errors=True)
    wall_seconds = time.perf_counter() - start
    try:
        with open(result_path, encoding="utf-8") as handle:
            result = json.load(handle)
    except (OSError, ValueError):
        with open(log_path, encoding="utf-8", errors="replace") as handle:
            tail = handle.read()[-2000:]
        result = {
            "model": model.name,
            "arm": arm,
            "phase": phase,
            "worker_error": f"worker exited with {exit_status} and wrote no result; log tail:\n{tail}",
        }
    result["wall_seconds"] = wall_seconds
    result["exit_status"] = exit_status
    return result


def _load_outputs(result: dict) -> dict:
    path = result.get("outputs_file")
    if not path or not os.path.exists(path):
        return {}
    import torch

    return torch.load(path, map_location="cpu", weights_only=True)


def compare_outputs(reference: dict, candidate: dict) -> dict:
    """torch.equal on every tensor the reference has; max |difference| where shapes match."""
    import torch

    different, missing = [], []
    largest = 0.0
    for name, expected in reference.items():
        actual = candidate.get(name)
        if actual is None:
            missing.append(name)
            continue
        if not torch.equal(expected, actual):
            different.append(name)
            if (
                expected.shape == actual.shape
                and expected.is_floating_point()
                and actual.is_floating_point()
            ):
                largest = max(largest, (expected.double() - actual.double()).abs().max().item())
            elif expected.shape != actual.shape:
                largest = float("inf")
    return {
        "equal": not different and not missing and bool(reference),
        "compared": len(reference),
        "different": different,
        "missing": missing,
        "max_abs_difference": largest,
    }


def compare_arms(original: dict, mended: dict) -> dict:
    """Compare what the two quick workers saved with the original model run eagerly."""
    original_outputs = _load_outputs(original)
    mended_outputs = _load_outputs(mended)
    reference = original_outputs.get("eager")
    comparison: dict = {"main_output": original.get("main_output"), "problems": []}
    if not reference:
        comparison["problems"].append("no eager output of the original model to compare with")
        comparison["bit_identical"] = None
        return comparison
    checks = {
        "original_compiled": original_outputs.get("compiled"),
        "graphmend_eager": mended_outputs.get("eager"),
        "graphmend_compiled": mended_outputs.get("compiled"),
        "graphmend_fullgraph": mended_outputs.get("fullgraph"),
    }
    for name, candidate in checks.items():
        comparison[name] = None if candidate is None else compare_outputs(reference, candidate)
    # The graphmend arm must match in eager and compiled runs; its fullgraph run counts
    # too where the capture succeeded.
    required = ("graphmend_eager", "graphmend_compiled")
    if any(comparison[name] is None for name in required):
        comparison["bit_identical"] = None
        comparison["problems"].append("the graphmend arm saved no output to compare")
        return comparison
    mended_checks = [
        name for name in (*required, "graphmend_fullgraph") if comparison[name] is not None
    ]
    comparison["bit_identical"] = all(comparison[name]["equal"] for name in mended_checks)
    for name in mended_checks:
        check = comparison[name]
        if not check["equal"]:
            comparison["problems"].append(
                f"{name} differs from the original eager output in "
                f"{check['different'] + check['missing']} "
                f"(max |difference| {check['max_abs_difference']:.3g})"
            )
    return comparison


def _training_parts(check: dict) -> dict:
    """Which of a run's losses, gradients and parameters differ (``compare_outputs`` of
    the tensors ``benchmarks.training.train_steps`` saved)."""
    differing = check["different"] + check["missing"]
    return {
        part: not any(name.startswith(prefix) for name in differing)
        for part, prefix in (("losses", "loss."), ("gradients", "grad."), ("parameters", "param."))
    }


def compare_training(original: dict, mended: dict) -> dict:
    """Compare the two train workers' saved runs bit for bit: the graphmend arm's
    uncompiled run with the original's, and its compiled run with each backend with the
    original's compiled run with that backend (the two arms' compiled runs go through the
    same backend, so any difference is the rewrite's). Whether the original's compiled
    runs match its uncompiled one is said too; it is not required."""
    original_outputs = _load_outputs(original)
    mended_outputs = _load_outputs(mended)
    runs = [UNCOMPILED, *(name for name in (original.get("train") or {}) if name != UNCOMPILED)]
    comparison: dict = {"runs": {}, "problems": []}
    for name in runs:
        reference, candidate = original_outputs.get(name), mended_outputs.get(name)
        if not reference or candidate is None:
            comparison["runs"][name] = None
            arm = "original" if not reference else "graphmend"
            comparison["problems"].append(f"{name}: the {arm} arm saved no training run")
            continue
        check = compare_outputs(reference, candidate)
        check.update(_training_parts(check))
        if name != UNCOMPILED and original_outputs.get(UNCOMPILED):
            check["original_matches_uncompiled"] = compare_outputs(
                original_outputs[UNCOMPILED], reference
            )["equal"]
        comparison["runs"][name] = check
        if not check["equal"]:
            comparison["problems"].append(
                f"{name}: the graphmend arm's training differs in "
                f"{len(check['different'] + check['missing'])} tensor(s), first "
                f"{(check['different'] + check['missing'])[0]} "
                f"(max |difference| {check['max_abs_difference']:.3g})"
            )
    checked = [check for check in comparison["runs"].values() if check is not None]
    comparison["identical"] = (
        all(check["equal"] for check in checked) if len(checked) == len(runs) else None
    )
    return comparison


def _brief(result: dict, phase: str) -> str:
    if result.get("skipped"):
        return "skipped: " + result["skipped"]
    for key in ("worker_error", "error"):
        if result.get(key):
            return (
                "FAILED: "
                + [line for line in result[key].strip().splitlines() if line.strip()][-1][:160]
            )
    if phase == "train":
        runs = result.get("train") or {}
        return " ".join(
            f"{name}: graphs={run.get('graphs')} breaks={run.get('breaks')}"
            + (" (FAILED)" if run.get("error") else "")
            for name, run in runs.items()
            if name != UNCOMPILED
        ) + (" (uncompiled FAILED)" if (runs.get(UNCOMPILED) or {}).get("error") else "")
    if phase == "quick":
        return (
            f"graphs={result.get('graphs')} breaks={result.get('breaks')} "
            f"fullgraph={result.get('fullgraph')}"
            + (" (count failed)" if result.get("count_error") else "")
        )
    if result.get("timing_error"):
        return "timing FAILED"
    cold, steady = result.get("cold_start_seconds"), result.get("steady_state_seconds")
    return (
        f"cold={cold:.3f}s steady={steady * 1000:.3f}ms"
        if cold is not None and steady is not None
        else "-"
    )


def round_arms(round_index: int) -> tuple[str, ...]:
    """The arms of one timing round: original first in even rounds, graphmend first in odd."""
    return ARMS if round_index % 2 == 0 else tuple(reversed(ARMS))


def timing_order(repeats: int) -> list[str]:
    """The order of a model's timing processes: rounds of one process per arm, the
    second round reversed (A B, B A, A B, ...). Plain alternation (A B A B ...) puts
    the graphmend process after its original one in every round, so a machine that
    grows slower or faster during the model's timings shifts every pair the same way,
    and the medians with it. Reversing every other round makes an even number of
    rounds cancel a linear drift in both the means and the medians of the positions."""
    return [arm for round_index in range(repeats) for arm in round_arms(round_index)]


def _timing_steps(options: RunOptions) -> int:
    return 0 if options.quick or options.train_only else 2 * options.repeats


def _training_steps(options: RunOptions) -> int:
    return 2 if options.train or options.train_only else 0


def _quick_steps(options: RunOptions) -> int:
    return 0 if options.timing_only or options.train_only else 2


def _steps_per_model(options: RunOptions) -> int:
    return _quick_steps(options) + _training_steps(options) + _timing_steps(options)


class Workers:
    """Starts the worker processes of one run and reports each as a numbered step."""

    def __init__(
        self, options: RunOptions, scratch: str, hook_cache_dir: str, progress: Progress, steps: int
    ) -> None:
        self.options = options
        self.scratch = scratch
        self.hook_cache_dir = hook_cache_dir
        self.progress = progress
        self.steps = steps
        self.done = 0

    def run(self, model: BenchModel, arm: str, phase: str) -> dict:
        self.done += 1
        prefix = f"[{self.done}/{self.steps}] {model.name} {arm} {phase}"
        self.progress(f"{prefix} ...", self.done, self.steps)
        result = run_worker_process(
            model, arm, phase, self.options, self.scratch, self.hook_cache_dir
        )
        self.progress(
            f"{prefix}: {_brief(result, phase)} ({result['wall_seconds']:.1f}s)",
            self.done,
            self.steps,
        )
        return result

    def skip(self, model: BenchModel, steps: int, reason: str) -> None:
        self.done += steps
        self.progress(f"[{model.name}] skipped: {reason}", self.done, self.steps)


def run_model(model: BenchModel, workers: Workers, with_timing: bool = True) -> dict:
    """One model's entry: its quick pass and, with ``with_timing``, all its timing rounds
    (an interleaved run times the models' rounds afterwards, see ``run_suite``)."""
    options = workers.options
    entry: dict = {
        "name": model.name,
        "paper_name": model.paper_name,
        "transformers_class": model.transformers_class,
        "notes": model.notes,
    }
    missing = [] if model.module_file else model.missing_requirements()
    if missing:
        entry["skipped"] = f"missing {', '.join(missing)}"
        workers.skip(model, _steps_per_model(options), entry["skipped"])
        return entry
    if _quick_steps(options):
        quick = {arm: workers.run(model, arm, "quick") for arm in ARMS}
        entry["quick"] = quick
        skipped = [result.get("skipped") for result in quick.values() if result.get("skipped")]
        if skipped:
            entry["skipped"] = skipped[0]
            workers.skip(
                model, _training_steps(options) + _timing_steps(options), "no training, no timings"
            )
            return entry
        entry["equality"] = compare_arms(quick["original"], quick["graphmend"])
    if _training_steps(options):
        train = {arm: workers.run(model, arm, "train") for arm in ARMS}
        entry["train"] = train
        skipped = [result.get("skipped") for result in train.values() if result.get("skipped")]
        if skipped:
            entry["skipped"] = skipped[0]
            workers.skip(model, _timing_steps(options), "no timings")
            return entry
        entry["train_equality"] = compare_training(train["original"], train["graphmend"])
    if _timing_steps(options):
        entry["timing"] = {arm: [] for arm in ARMS}
        entry["timing_order"] = timing_order(options.repeats)
        if with_timing:
            for round_index in range(options.repeats):
                time_round(model, entry, round_index, workers)
    return entry


def time_round(model: BenchModel, entry: dict, round_index: int, workers: Workers) -> None:
    for arm in round_arms(round_index):
        entry["timing"][arm].append(workers.run(model, arm, "timing"))


def git_commit() -> str | None:
    folder = os.path.dirname(os.path.abspath(__file__))
    try:
        completed = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=folder,
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return completed.stdout.strip() or None


def run_suite(
    models: Sequence[BenchModel], options: RunOptions, progress: Progress = _stderr_progress
) -> dict:
    """Run every model and return the whole run as a JSON-able dictionary."""
    import graphmend

    steps = len(models) * _steps_per_model(options)
    started = datetime.now(timezone.utc)
    entries = []
    scratch = tempfile.mkdtemp(prefix="graphmend-bench-")
    # One rewritten-code cache for all graphmend workers of this run: import-time
    # rewriting is paid once, and never inside a timed call.
    hook_cache_dir = os.path.join(scratch, "hook-cache")
    workers = Workers(options, scratch, hook_cache_dir, progress, steps)
    interleaved = options.interleave and _timing_steps(options) > 0
    try:
        for model in models:
            entries.append(run_model(model, workers, with_timing=not interleaved))
        if interleaved:
            timed = [(model, entry) for model, entry in zip(models, entries) if "timing" in entry]
            for round_index in range(options.repeats):
                for model, entry in timed:
                    time_round(model, entry, round_index, workers)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    environment = next(
        (
            arm["environment"]
            for entry in entries
            for pass_name in ("quick", "train")
            for arm in (entry.get(pass_name) or {}).values()
            if arm.get("environment")
        ),
        {},
    )
    for entry in entries:
        for pass_name in ("quick", "train"):
            for arm in (entry.get(pass_name) or {}).values():
                arm.pop("outputs_file", None)
        for runs in (entry.get("timing") or {}).values():
            for run in runs:
                run.pop("outputs_file", None)
    return {
        "meta": {
            "date": started.strftime("%Y-%m-%d %H:%M UTC"),
            "seconds": (datetime.now(timezone.utc) - started).total_seconds(),
            "graphmend_version": graphmend.__version__,
            "git_commit": git_commit(),
            "argv": sys.argv,
            "options": asdict(options),
            "environment": environment,
        },
        "models": entries,
    }
