"""How often a break candidate ``graphmend check`` reports is a real graph break.

    PYTHONPATH=src:. python bench/check_precision.py [--models t5,bart,...] [--json OUT]

For each model of the benchmark suite (built from its Config, tiny, seeded; as
``benchmarks.suite`` builds it):

1. the files of its modules' classes (the modeling files) are checked as
   ``graphmend check FILE`` checks them (default scope: entry points and ``nn.Module``
   classes), giving the reported findings;
2. the model's forward runs once eagerly under a line tracer, giving the lines of those
   files that ran on the suite's inputs;
3. the original model runs once under ``torch.compile(backend="eager")`` while
   ``graphmend.dynamo_records`` records TorchDynamo's own break records, each with the
   user stack it was traced in.

A finding on a line that ran is *confirmed* when a break record has that line in its
stack (the statement broke the graph, or a call it makes did), and *not a break* when
none has: that is the precision figure, over the findings the run decides. A finding
that names its own condition (``, a break only when `x.dtype == torch.float16```) and
did not break is counted apart: the run did not meet the condition. A finding
whose line sits in a frame TorchDynamo gave up on (a break record there with
``skips_frame``) cannot break by itself; it is counted apart, as is every finding on a
line that did not run (another head of the same file, an option the inputs do not
take): the run says nothing about those.

The script prints one table and, with ``--json``, writes every finding with its
verdict, so the figure can be checked by reading.
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import io
import json
import os
import sys
import threading
from collections import Counter

import torch

from benchmarks.suite import select_models
from graphmend import dynamo_records
from graphmend.cli.check import mend_file
from graphmend.cli.config import Settings

CONFIRMED = "confirmed"
NOT_A_BREAK = "not a break"
IN_EAGER_FRAME = "in a frame Dynamo ran eagerly"
NOT_RUN = "line did not run"
CONDITION_NOT_MET = "its stated condition did not hold"
STATED_CONDITION = ", a break only when `"


VERDICTS = (CONFIRMED, NOT_A_BREAK, CONDITION_NOT_MET, IN_EAGER_FRAME, NOT_RUN)


def modeling_files(model: torch.nn.Module) -> list[str]:
    files = set()
    for module in model.modules():
        path = inspect.getsourcefile(type(module))
        if path and "transformers" in path.split(os.sep):
            files.add(os.path.realpath(path))
    return sorted(files)


def executed_lines(model, kwargs, files: set[str]) -> set[tuple[str, int]]:
    ran: set[tuple[str, int]] = set()

    def tracer(frame, event, arg):
        filename = os.path.realpath(frame.f_code.co_filename)
        if filename not in files:
            return None

        def local(frame, event, arg):
            if event == "line":
                ran.add((filename, frame.f_lineno))
            return local

        ran.add((filename, frame.f_lineno))
        return local

    sys.settrace(tracer)
    threading.settrace(tracer)
    try:
        with torch.no_grad(), contextlib.redirect_stdout(io.StringIO()):
            model(**kwargs)
    finally:
        sys.settrace(None)
        threading.settrace(None)
    return ran


def break_records(model, kwargs) -> list[dynamo_records.GraphBreakRecord]:
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="eager")
    with dynamo_records.recording() as records, torch.no_grad(), contextlib.redirect_stdout(io.StringIO()):
        compiled(**kwargs)
    torch._dynamo.reset()
    return list(records.breaks)


def verdicts(findings, ran, records) -> list[tuple[object, str]]:
    broke_at: set[tuple[str, int]] = set()
    eager_functions: set[tuple[str, str]] = set()
    for record in records:
        chain = record
        while chain is not None:
            for frame in chain.frames:
                broke_at.add((os.path.realpath(frame.file), frame.line))
            if chain.skips_frame and chain.frames:
                innermost = chain.frames[-1]
                eager_functions.add((os.path.realpath(innermost.file), innermost.function))
            chain = chain.cause
    result = []
    for finding in findings:
        where = (os.path.realpath(finding.path), finding.line)
        if where not in ran:
            verdict = NOT_RUN
        elif where in broke_at:
            verdict = CONFIRMED
        elif (where[0], finding.function.rsplit(".", 1)[-1]) in eager_functions:
            verdict = IN_EAGER_FRAME
        elif STATED_CONDITION in finding.message:
            verdict = CONDITION_NOT_MET
        else:
            verdict = NOT_A_BREAK
        result.append((finding, verdict))
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", help="comma-separated suite model names (default: every model that builds)")
    parser.add_argument("--json", help="write every finding with its verdict here")
    options = parser.parse_args(argv)

    import transformers

    torch.manual_seed(0)
    totals: Counter = Counter()
    by_category: dict[str, Counter] = {}
    rows = []
    seen: set[tuple[str, int]] = set()  # a file shared by two models is counted once per finding
    for bench_model in select_models(options.models):
        if bench_model.missing_requirements():
            continue
        try:
            model, kwargs = bench_model.build()
        except Exception as error:  # noqa: BLE001 - a model this transformers lacks
            print(f"{bench_model.name}: not built ({type(error).__name__}: {str(error)[:80]})")
            continue
        model.eval()
        files = modeling_files(model)
        findings = []
        for path in files:
            report = mend_file(path, Settings())
            findings += report.findings
        ran = executed_lines(model, kwargs, set(files))
        records = break_records(model, kwargs)
        counts: Counter = Counter()
        for finding, verdict in verdicts(findings, ran, records):
            key = (os.path.realpath(finding.path), finding.line)
            if key in seen:
                continue
            seen.add(key)
            counts[verdict] += 1
            totals[verdict] += 1
            by_category.setdefault(finding.category, Counter())[verdict] += 1
            rows.append({
                "model": bench_model.name, "path": os.path.relpath(finding.path, os.path.dirname(transformers.__file__)),
                "line": finding.line, "category": finding.category, "message": finding.message,
                "fixed": finding.fixed, "verdict": verdict,
            })
        print(
            f"{bench_model.name:16} files {len(files):2}  findings {sum(counts.values()):4}  "
            + "  ".join(f"{name}: {counts[name]}" for name in VERDICTS),
            flush=True,
        )
    decided = totals[CONFIRMED] + totals[NOT_A_BREAK]
    print(f"\ntransformers {transformers.__version__}, torch {torch.__version__}")
    print("category  " + "  ".join(f"{name[:14]:>14}" for name in VERDICTS))
    for category, counts in sorted(by_category.items()):
        print(f"{category:8}  " + "  ".join(f"{counts[name]:14}" for name in VERDICTS))
    if decided:
        print(f"precision over the findings the runs decide: {totals[CONFIRMED]}/{decided} = {totals[CONFIRMED] / decided:.1%}")
    if options.json:
        with open(options.json, "w") as out:
            json.dump({
                "transformers": transformers.__version__, "torch": torch.__version__,
                "totals": dict(totals), "findings": rows,
            }, out, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
