"""``graphmend bench``: run the benchmark suite and write its results.

    graphmend bench --quick                          # break counts, equality, fullgraph
    graphmend bench --models t5,bart --repeats 3     # and TorchInductor timings
    graphmend bench --model-file my_models.py --quick
    graphmend bench --quick --train                  # and a training step per model
    graphmend bench --train-only --train-backends aot_eager
    graphmend bench --json r.json --markdown r.md --plot r.png
    graphmend bench --render r.json --markdown r.md  # render a saved run again
    graphmend bench --render a.json --render b.json --json ab.json   # merge runs
    graphmend bench --render new.json --compare-to old.json  # did new.json reproduce old.json?

Progress goes to stderr, one line per step (on a terminal, with a progress bar under
the lines); a table is printed at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from benchmarks import report, reproduction
from benchmarks.runner import ProgressBar, RunOptions, run_suite
from benchmarks.suite import REGISTRY, load_model_file, select_models
from benchmarks.training import TRAINING_BACKENDS
from graphmend.cli.config import ConfigError, OneLineErrorParser, usage_error

PROGRAM = "graphmend bench"


def build_parser() -> argparse.ArgumentParser:
    # Usage errors are one line (the CLI's shared parser), not argparse's usage block.
    parser = OneLineErrorParser(
        prog=PROGRAM,
        description="Measure graph breaks, correctness and compile/run time of models, "
        "original against graphmend, each arm in a fresh process.",
    )
    parser.add_argument(
        "--models", default="", help=f"comma-separated; default all: {', '.join(REGISTRY)}"
    )
    parser.add_argument(
        "--model-file",
        action="append",
        default=[],
        metavar="FILE",
        help="a Python file with def build() -> (model, example_kwargs); repeatable",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="break counts, equality and fullgraph only (eager backend, 1 process per arm)",
    )
    parser.add_argument(
        "--timing-only", action="store_true", help="timings only: no quick pass (counts, equality)"
    )
    parser.add_argument(
        "--train",
        action="store_true",
        help="also a training pass per model: 3 SGD steps in train mode, uncompiled and "
        "compiled under each --train-backends; graphs, breaks, and losses, gradients and "
        "parameters compared bit for bit across the arms",
    )
    parser.add_argument(
        "--train-only", action="store_true", help="the training pass alone: no counts, no timings"
    )
    parser.add_argument(
        "--train-backends",
        default=",".join(TRAINING_BACKENDS),
        help=f"comma-separated backends of the training pass, of {', '.join(TRAINING_BACKENDS)} "
        f"(default {','.join(TRAINING_BACKENDS)})",
    )
    parser.add_argument(
        "--repeats", type=int, default=3, help="timing processes per arm (default 3)"
    )
    parser.add_argument(
        "--interleave",
        action="store_true",
        help="time round 1 of every model, then round 2, ...: each model's processes spread "
        "over the whole run (steadier ranges on a busy machine; results only at the end)",
    )
    parser.add_argument(
        "--iterations",
        type=int,
        default=10,
        help="timed calls per process: 1 cold start + the rest, for the time to each call "
        "(default 10)",
    )
    parser.add_argument(
        "--steady-calls",
        type=int,
        default=200,
        help="calls after those whose mean is the steady state (default 200; 0: calls 2..N)",
    )
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--mode", default="default", choices=("default", "reduce-overhead"))
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per worker process")
    parser.add_argument("--json", metavar="FILE", help="write the full results as JSON")
    parser.add_argument("--markdown", metavar="FILE", help="write the report as Markdown")
    parser.add_argument(
        "--plot", metavar="FILE.png", help="plot breaks and speedups (needs matplotlib)"
    )
    parser.add_argument(
        "--title", default="graphmend benchmark", help="heading of the Markdown report"
    )
    parser.add_argument(
        "--render",
        action="append",
        default=[],
        metavar="FILE",
        help="render saved --json file(s) instead of running; several are merged in order",
    )
    parser.add_argument(
        "--compare-to",
        metavar="FILE",
        help="check this run against the figures of another --json file: break counts, "
        "fullgraph and bit-identity must match, speedups must fall inside its ranges; exit 1 "
        "if not",
    )
    parser.add_argument("--list", action="store_true", help="list the suite's models and exit")
    return parser


def _list_models() -> str:
    lines = []
    for model in REGISTRY.values():
        missing = model.missing_requirements()
        state = f"  (missing {', '.join(missing)})" if missing else ""
        lines.append(
            f"{model.name:16} {model.transformers_class or '-':34} {model.paper_name or '-'}{state}"
        )
    return "\n".join(lines)


def bench_command(argv: list[str]) -> int:
    """Run ``graphmend bench`` with ``argv`` (the arguments after ``bench``); the exit status."""
    try:
        return _bench(argv)
    except ConfigError as error:
        return usage_error(PROGRAM, str(error))


def _bench(argv: list[str]) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.list:
        print(_list_models())
        return 0
    if args.repeats < 1 or args.iterations < 2:
        parser.error("--repeats must be at least 1 and --iterations at least 2")
    if args.steady_calls < 0:
        parser.error("--steady-calls must be 0 or more")
    train_backends = tuple(name.strip() for name in args.train_backends.split(",") if name.strip())
    unknown = [name for name in train_backends if name not in TRAINING_BACKENDS]
    if unknown or not train_backends:
        parser.error(
            f"--train-backends: not one of {', '.join(TRAINING_BACKENDS)}: "
            f"{', '.join(unknown) or 'none given'}"
        )
    reference = None
    if args.compare_to:
        reference = _read_json_or_fail(parser, "--compare-to", args.compare_to)
    if args.render:
        run = merge_runs([_read_json_or_fail(parser, "--render", path) for path in args.render])
    else:
        try:
            models = [] if args.model_file and not args.models else select_models(args.models)
        except KeyError as error:
            parser.error(str(error.args[0]))
        for path in args.model_file:
            if not os.path.exists(path):
                parser.error(f"--model-file {path}: no such file")
            models.append(load_model_file(path, import_module=False))
        if args.device == "cuda" and args.mode == "reduce-overhead" and args.quick:
            print(f"{PROGRAM}: --mode applies to timings only; --quick runs none", file=sys.stderr)
        options = RunOptions(
            quick=args.quick,
            timing_only=args.timing_only and not args.quick,
            train=args.train or args.train_only,
            train_only=args.train_only,
            train_backends=train_backends,
            repeats=1 if args.quick else args.repeats,
            iterations=args.iterations,
            steady_calls=args.steady_calls,
            device=args.device,
            mode=args.mode,
            timeout=args.timeout,
            interleave=args.interleave,
            models=",".join(model.name for model in models),
        )
        if sys.stderr.isatty():
            bar = ProgressBar()
            try:
                run = run_suite(models, options, bar)
            finally:
                bar.close()
        else:
            run = run_suite(models, options)
    if args.json:
        # Compact: the results pages keep these runs in docs/, where size counts.
        _write(args.json, json.dumps(run, separators=(",", ":"), default=str) + "\n")
    if args.markdown:
        _write(args.markdown, report.render_markdown(run, title=args.title))
    if args.plot and report.training_only(run):
        # The plot draws eval-mode breaks and speedups; a training pass has neither.
        print(f"{PROGRAM}: a training pass alone has no plot; none written", file=sys.stderr)
    elif args.plot and not report.write_plot(run, args.plot):
        print(f"{PROGRAM}: matplotlib is not installed; no plot written", file=sys.stderr)
    print(report.render_terminal(run))
    if reference is not None:
        return _print_reproduction(reference, run)
    return 0


def _print_reproduction(reference: dict, run: dict) -> int:
    checks = reproduction.compare_runs(reference, run)
    if not checks:
        print(f"{PROGRAM}: --compare-to: no model was measured in both runs", file=sys.stderr)
        return 1
    print(
        report.plain_table(reproduction.PER_MODEL_HEADER, reproduction.per_model_rows(checks))
    )
    for check in reproduction.failed_checks(checks):
        print(
            f"not reproduced: {check.model} {check.measure}: reference {check.reference}, "
            f"this run {check.candidate}"
        )
    print(reproduction.summary_line(checks))
    return 1 if reproduction.failed_checks(checks) else 0


def _read_json(path: str) -> dict:
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def _read_json_or_fail(parser: argparse.ArgumentParser, option: str, path: str) -> dict:
    try:
        run = _read_json(path)
    except OSError as error:
        parser.error(f"{option} {path}: {error.strerror or error}")
    except ValueError as error:
        parser.error(f"{option} {path}: not a JSON file ({error})")
    if not isinstance(run, dict) or not isinstance(run.get("models"), list):
        parser.error(f"{option} {path}: not a graphmend bench --json file")
    return run


def merge_runs(runs: list[dict]) -> dict:
    """One run from several (models in order); the first run's metadata is kept."""
    merged = {"meta": dict(runs[0].get("meta", {})), "models": []}
    for run in runs:
        merged["models"] += run.get("models", [])
    if len(runs) > 1:
        merged["meta"]["merged_runs"] = [
            {key: run.get("meta", {}).get(key) for key in ("date", "git_commit", "options")}
            for run in runs
        ]
    return merged


def _write(path: str, text: str) -> None:
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)


def main() -> int:
    return bench_command(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
