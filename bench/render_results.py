"""Render docs/results.md and its plot from saved `graphmend bench --json` runs.

    python bench/render_results.py --out docs/results.md --plot docs/results.png \
        --run "transformers 4.52.4" docs/results-tf452-timing.json \
        --other-run "transformers 4.52.4" docs/results-tf452-timing.previous.json

Every figure on the page comes from the runs; the method and the notes on the paper
are read from bench/results_intro.md, results_notes.md and results_method.md.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

# The harness (`benchmarks`) is not installed: it is imported from this checkout.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.page import PageRun, render_page
from benchmarks.report import write_plot_of_runs

HERE = os.path.dirname(os.path.abspath(__file__))


def _read(path: str) -> str:
    with open(path, encoding="utf-8") as handle:
        return handle.read()


def _write_atomically(path: str, text: str) -> None:
    folder = os.path.dirname(os.path.abspath(path))
    descriptor, temporary = tempfile.mkstemp(dir=folder, prefix=".results-")
    with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.replace(temporary, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", nargs=2, action="append", default=[], metavar=("LABEL", "JSON"))
    parser.add_argument(
        "--other-run",
        nargs=2,
        action="append",
        default=[],
        metavar=("LABEL", "JSON"),
        help="another run of the same measurements (all or some models), checked against "
        "the figures of the run with that label; repeatable",
    )
    parser.add_argument(
        "--train-run",
        nargs=2,
        action="append",
        default=[],
        metavar=("LABEL", "JSON"),
        help="a `graphmend bench --train-only` run whose training-step table the page shows; "
        "repeatable",
    )
    parser.add_argument("--out", required=True)
    parser.add_argument("--plot")
    parser.add_argument("--intro", default=os.path.join(HERE, "results_intro.md"))
    parser.add_argument("--notes", default=os.path.join(HERE, "results_notes.md"))
    parser.add_argument("--method", default=os.path.join(HERE, "results_method.md"))
    args = parser.parse_args(argv)
    if not args.run:
        parser.error("give at least one --run LABEL JSON")
    try:
        others: dict[str, list[tuple[str, dict]]] = {}
        for label, path in args.other_run:
            others.setdefault(label, []).append((os.path.basename(path), json.loads(_read(path))))
        page_runs = [
            PageRun(label, json.loads(_read(path)), tuple(others.get(label, ())))
            for label, path in args.run
        ]
        training_runs = [(label, json.loads(_read(path))) for label, path in args.train_run]
        intro = _read(args.intro) if os.path.exists(args.intro) else ""
        notes = _read(args.notes) if os.path.exists(args.notes) else ""
        method = _read(args.method) if os.path.exists(args.method) else ""
    except (OSError, ValueError) as error:
        print(f"render_results: {error}", file=sys.stderr)
        return 1
    generated_by = "bench/reproduce.sh (bench/render_results.py) from " + ", ".join(
        os.path.basename(path) for _, path in args.run + args.train_run
    )
    page = render_page(
        page_runs, intro, notes, method, generated_by=generated_by, training_runs=training_runs
    )
    _write_atomically(args.out, page)
    print(f"wrote {args.out}")
    if args.plot:
        runs = [page_run.run for page_run in page_runs]
        if write_plot_of_runs(runs, [page_run.label for page_run in page_runs], args.plot):
            print(f"wrote {args.plot}")
        else:
            print("render_results: matplotlib is not installed; no plot written", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
