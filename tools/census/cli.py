"""``graphmend census``: graph breaks of every model class of the installed transformers
(and of model files and scripts you name), original against mended, each in fresh
processes. Rows go to a JSONL file as tasks finish; run the same command again to resume.

    graphmend census --models gpt2,bart --results census.jsonl --summary census.json
    graphmend census --jobs 4 --modes eval,train --backend aot_eager
    graphmend census --ray-address auto          # spread over a Ray cluster
    graphmend census --model-file my_model.py --script train.py --no-transformers
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from tools.census import models as census_models
from tools.census.runner import (
    BACKENDS,
    MODES,
    RAY_MISSING,
    ResultsFile,
    Task,
    pending,
    run_local,
    run_ray,
)
from tools.census.summary import summarise, text_report

USAGE_ERROR = 2


class UsageError(Exception):
    pass


def _comma_list(text: str, allowed: tuple[str, ...], what: str) -> tuple[str, ...]:
    chosen = tuple(word.strip() for word in text.split(",") if word.strip())
    for word in chosen:
        if word not in allowed:
            raise UsageError(f"unknown {what} {word!r}; choose from {', '.join(allowed)}")
    return chosen


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="graphmend census", description=__doc__.splitlines()[0])
    parser.add_argument("--models", help="model types or classes, comma-separated (default: all)")
    parser.add_argument("--heads", default="base",
                        help=f"which classes per model type: {', '.join(census_models.HEAD_MAPPINGS)} (default base)")
    parser.add_argument("--no-transformers", action="store_true",
                        help="only the model files and scripts named")
    parser.add_argument("--model-file", action="append", default=[], metavar="PATH",
                        help="a Python file defining build() -> (model, example_kwargs); repeatable")
    parser.add_argument("--script", action="append", default=[], metavar="PATH",
                        help="a script run whole, plain and as `graphmend run --package transformers`")
    parser.add_argument("--modes", default="eval", help="eval, train or eval,train (default eval)")
    parser.add_argument("--backend", default="eager", choices=BACKENDS)
    parser.add_argument("--jobs", type=int, default=1, help="tasks at once on this machine (default 1)")
    parser.add_argument("--ray-address", help="run the tasks on this Ray cluster ('local' starts one here)")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per arm (default 600)")
    parser.add_argument("--max-parameters", type=int, default=census_models.DEFAULT_MAX_PARAMETERS,
                        help="skip models with more parameters once tiny (default %(default)s)")
    parser.add_argument("--shard", default=None, metavar="I/K",
                        help="every K-th entry from the I-th (0-based): a stratified sample or a share")
    parser.add_argument("--results", default="graphmend-census.jsonl", help="the JSONL rows (resumed)")
    parser.add_argument("--summary", help="write the per-model and per-cause summary JSON here")
    parser.add_argument("--list", action="store_true", help="list the entries and exit")
    return parser


def _entries(options) -> list:
    entries = []
    if not options.no_transformers:
        heads = _comma_list(options.heads, tuple(census_models.HEAD_MAPPINGS), "head")
        try:
            entries = census_models.select(census_models.transformers_entries(heads), options.models)
        except KeyError as error:
            raise UsageError(error.args[0]) from None
    elif options.models:
        raise UsageError("--models names transformers classes; it cannot go with --no-transformers")
    for paths, kind in ((options.model_file, "file"), (options.script, "script")):
        for path in paths:
            try:
                entries.append(census_models.file_entry(path, kind))
            except FileNotFoundError as error:
                raise UsageError(str(error)) from None
    if options.shard:
        try:
            index, count = (int(part) for part in options.shard.split("/"))
            if not 0 <= index < count:
                raise ValueError
        except ValueError:
            raise UsageError(f"--shard {options.shard!r}: expected I/K with 0 <= I < K") from None
        entries = entries[index::count]
    return entries


def _progress(total: int):
    """A tqdm bar on a terminal; else nothing (a log file does not want its redraws)."""
    if not sys.stderr.isatty():
        return None
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(total=total, unit="task", file=sys.stderr)


def census_command(argv: list[str]) -> int:
    parser = build_parser()
    options = parser.parse_args(argv)
    try:
        modes = _comma_list(options.modes, MODES, "mode")
        if options.jobs < 1:
            raise UsageError("--jobs must be at least 1")
        entries = _entries(options)
    except UsageError as error:
        print(f"graphmend census: error: {error}", file=sys.stderr)
        return USAGE_ERROR
    if options.list:
        print("\n".join(entry.name for entry in entries))
        return 0
    if options.ray_address:
        try:
            import ray  # noqa: F401
        except ImportError:
            print(RAY_MISSING, file=sys.stderr)
            return USAGE_ERROR

    results = ResultsFile(options.results)
    tasks = [
        Task(entry, mode, options.backend, options.max_parameters, options.timeout)
        for entry in entries
        for mode in modes
        if not (entry.kind == "script" and mode != modes[0])
    ]
    todo = pending(tasks, results.finished())
    print(f"graphmend census: {len(tasks)} tasks, {len(tasks) - len(todo)} already in {options.results}, "
          f"{len(todo)} to run", file=sys.stderr)
    bar = _progress(len(todo))
    start = time.perf_counter()

    def on_done(rows: list[dict]) -> None:
        results.append(rows)
        if bar is not None:
            bar.update(1)
            bar.set_postfix_str(rows[0].get("model", ""))

    try:
        if options.ray_address:
            run_ray(todo, options.ray_address, on_done)
        else:
            run_local(todo, options.jobs, on_done)
    finally:
        if bar is not None:
            bar.close()
    print(f"graphmend census: ran {len(todo)} tasks in {time.perf_counter() - start:.0f} s", file=sys.stderr)

    summary = summarise(results.rows())
    if options.summary:
        temporary = options.summary + ".tmp"
        with open(temporary, "w", encoding="utf-8") as handle:
            json.dump(summary, handle, indent=1, default=str)
        os.replace(temporary, options.summary)
    print(text_report(summary))
    return 0
