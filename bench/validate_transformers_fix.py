"""Validate ``graphmend check`` and ``graphmend fix`` on a copy of the transformers package.

    PYTHONPATH=src .scratch/venv-tf452/bin/python bench/validate_transformers_fix.py \
        [--work /tmp/tfcopy] [--models t5,bart,...] [--json results.json]

Run it with the Python of a virtual environment that has torch and transformers (the
one of issue 4 is ``.scratch/venv-tf452``, transformers 4.52.4); graphmend comes from
this checkout's ``src`` (put it on PYTHONPATH, or install graphmend). Steps:

1. **Recall of check.** Copy the environment's ``transformers`` package to
   ``WORK/transformers`` (and ``git init`` it), run ``graphmend check --all --format
   json`` on the copy, then run each suite model under Dynamo (the counting backend)
   with the ORIGINAL transformers and collect every break site in transformers code.
   A site of category DC, LC or VG (from Dynamo's reason and the source line, not
   from check) is *recalled* when check has a finding in that file within the span
   of the statement at that line.
2. **fix.** Run ``graphmend fix --write --all`` on the copy. Every finding check marked
   fixable must lie in a rewritten statement that changed; every changed hunk of
   ``git diff`` must be a rewritten statement (a block with its ``# graphmend:``
   comment, or an output call whose callee changed in place), the runtime import, or
   the module's appended registrations. Then, with the copy first
   on PYTHONPATH, each model is built (same seed), run eagerly and compiled: 0 breaks
   (one graph) and outputs bit-identical (``torch.equal``) to the original
   transformers' eager outputs, saved to ``WORK/reference/<model>.pt``.
3. (``graphmend explain`` is checked by hand; see docs/check_fix_validation.md.)

Exit status 0 when recall is 100%, every fixable site changed, every hunk is
explained, and every model has 0 breaks and identical outputs after the fix.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOURCE = os.path.join(ROOT, "src")
DEFAULT_MODELS = "t5,bart,marian,blenderbot,pegasus-causal,biogpt,whisper,layoutlmv3,phi3-longrope"
# Models with breaks no rule can fix (.item(), nonzero): their DC/LC/VG sites count for
# recall; after the fix they must give identical outputs and no more breaks, not zero.
DEFAULT_EXTRA = "longformer,grounding-dino"
TARGET_CATEGORIES = ("DC", "LC", "VG")
_HEADER = re.compile(r"^Graph break(?: \(.*?\))? in user code at (?P<file>.*):(?P<line>\d+)\s*$")


# --- the worker: one model, one transformers, in its own interpreter --------------------


def worker(arguments) -> int:
    """Build, run eagerly, compile with the counting backend; print one JSON line."""
    import logging

    import torch
    import transformers
    from torch._dynamo.utils import counters

    from benchmarks.suite import get_model, main_output
    from graphmend.counting import BreakCount, CountingBackend

    messages: list[str] = []

    class Recorder(logging.Handler):
        def emit(self, record):
            messages.append(record.getMessage())

    torch.manual_seed(0)
    model, inputs = get_model(arguments.model).build()
    model.eval()
    with torch.no_grad():
        eager = main_output(model(**inputs))

    torch._dynamo.reset()
    counters.clear()
    backend = CountingBackend()
    dynamo_logger = logging.getLogger("torch._dynamo")
    saved = dynamo_logger.handlers[:], dynamo_logger.propagate
    torch._logging.set_logs(graph_breaks=True)
    dynamo_logger.handlers, dynamo_logger.propagate = [Recorder(logging.DEBUG)], False
    try:
        with torch.no_grad():
            compiled = main_output(torch.compile(model, backend=backend, dynamic=False)(**inputs))
    finally:
        dynamo_logger.handlers, dynamo_logger.propagate = saved
        torch._logging.set_logs()

    records = []
    for message in messages:
        lines = message.splitlines()
        header = _HEADER.match(lines[0]) if lines else None
        if header:
            records.append(
                {
                    "file": os.path.abspath(header["file"]),
                    "line": int(header["line"]),
                    "text": message.split("\nUser code traceback:")[0],
                }
            )
    count = BreakCount(backend.graphs, dict(counters["graph_break"]), [None] * len(records))

    reference_path = os.path.join(arguments.reference, f"{arguments.model}.pt")
    if arguments.mode == "original":
        os.makedirs(arguments.reference, exist_ok=True)
        torch.save(eager, reference_path)
        reference = eager
    else:
        reference = torch.load(reference_path)
    print(
        json.dumps(
            {
                "model": arguments.model,
                "mode": arguments.mode,
                "transformers_file": transformers.__file__,
                "transformers_dir": os.path.dirname(os.path.abspath(transformers.__file__)),
                "graphs": backend.graphs,
                "breaks": count.breaks,
                "records": records,
                "eager_identical_to_reference": bool(torch.equal(eager, reference)),
                "compiled_identical_to_reference": bool(torch.equal(compiled, reference)),
            }
        )
    )
    return 0


# --- the driver -------------------------------------------------------------------------


def _environment(first: str | None = None) -> dict:
    environment = dict(os.environ)
    # ROOT: the worker imports the benchmark harness (`benchmarks`), which is not installed.
    paths = [path for path in (first, SOURCE, ROOT) if path]
    environment["PYTHONPATH"] = os.pathsep.join(paths)
    return environment


def _run(command: list[str], environment: dict | None = None, **options):
    return subprocess.run(
        command,
        env=environment or _environment(),
        text=True,
        check=False,
        capture_output=True,
        **options,
    )


def run_worker(mode: str, model: str, work: str) -> dict:
    environment = _environment(work if mode == "fixed" else None)
    command = [
        sys.executable,
        os.path.abspath(__file__),
        "--worker",
        mode,
        "--model",
        model,
        "--reference",
        os.path.join(work, "reference"),
    ]
    started = time.time()
    done = _run(command, environment, timeout=900)
    for line in reversed(done.stdout.splitlines()):
        if line.startswith("{"):
            result = json.loads(line)
            result["seconds"] = round(time.time() - started, 1)
            return result
    return {"model": model, "mode": mode, "error": (done.stderr or done.stdout)[-3000:]}


def transformers_location() -> str:
    done = _run(
        [
            sys.executable,
            "-c",
            "import os, transformers; print(os.path.dirname(transformers.__file__))",
        ]
    )
    if done.returncode:
        sys.exit(f"cannot import transformers with {sys.executable}: {done.stderr[-500:]}")
    return done.stdout.strip()


def copy_package(source: str, work: str) -> str:
    target = os.path.join(work, "transformers")
    if os.path.exists(work):
        shutil.rmtree(work)
    os.makedirs(work)
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    git = ["git", "-C", work, "-c", "user.name=validate", "-c", "user.email=validate@localhost"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "original"], check=True)
    return target


def graphmend(*arguments: str) -> subprocess.CompletedProcess:
    return _run([sys.executable, "-m", "graphmend", *arguments])


# --- statements and spans ---------------------------------------------------------------


class Statements:
    """Per file: the statements, to find the one a line belongs to."""

    def __init__(self) -> None:
        self.cache: dict[str, list[ast.stmt]] = {}

    def _all(self, path: str, text: str | None = None) -> list[ast.stmt]:
        if path not in self.cache:
            if text is None:
                with open(path, encoding="utf-8") as file:
                    text = file.read()
            tree = ast.parse(text)
            self.cache[path] = [node for node in ast.walk(tree) if isinstance(node, ast.stmt)]
        return self.cache[path]

    @staticmethod
    def header_end(statement: ast.stmt) -> int:
        """A compound statement's header ends where its body begins."""
        body = getattr(statement, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.stmt):
            return max(statement.lineno, body[0].lineno - 1)
        return statement.end_lineno

    def span(self, path: str, line: int, text: str | None = None) -> tuple[int, int]:
        """The lines of the innermost statement (header only, for a compound one) at line."""
        best = None
        for statement in self._all(path, text):
            first, last = statement.lineno, self.header_end(statement)
            if first <= line <= last and (best is None or last - first < best[1] - best[0]):
                best = (first, last)
        return best or (line, line)

    def boundaries(self, path: str, text: str) -> tuple[set[int], set[int]]:
        statements = self._all(path, text)
        return ({s.lineno for s in statements}, {s.end_lineno for s in statements})


# --- classifying a break without graphmend's help ---------------------------------------


def classify(text: str, source_line: str) -> str:
    reason = text.lower()
    code = source_line.strip()
    if "data-dependent branching" in reason or "jump with tensorvariable" in reason:
        return "DC"
    if re.match(r"(assert\b|raise\b)", code) or "assertionerror" in reason:
        return "VG"
    if (
        "logging.logger" in reason
        or "warnings.warn" in reason
        or "`print`" in reason
        or re.match(r"(logger\.|logging\.|warnings\.warn|print\()", code)
    ):
        return "LC"
    if ".item()" in reason:
        return "TI"
    if "dynamic shape operator" in reason or "nonzero" in reason:
        return "DS"
    if "data dependent operator" in reason or "data-dependent operator" in reason:
        return "DO"
    return "other"


# --- diff hunks -------------------------------------------------------------------------

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


def diff_hunks(work: str) -> dict[str, list[dict]]:
    """``git diff -U0`` of the copy: per file, hunks with their old range and new lines."""
    text = subprocess.run(
        ["git", "-C", work, "diff", "-U0", "--no-color"], text=True, capture_output=True, check=True
    ).stdout
    hunks: dict[str, list[dict]] = {}
    current = None
    for line in text.splitlines():
        if line.startswith(("diff --git ", "--- ", "index ")):
            current = None if line.startswith("diff --git ") else current
        elif line.startswith("+++ b/"):
            current = hunks.setdefault(line[len("+++ b/") :], [])
        elif line.startswith("@@") and current is not None:
            match = _HUNK.match(line)
            old_start, old_count = int(match[1]), int(match[2] if match[2] is not None else 1)
            current.append(
                {"old_start": old_start, "old_count": old_count, "added": [], "removed": []}
            )
        elif current and line.startswith("+"):
            current[-1]["added"].append(line[1:])
        elif current and line.startswith("-"):
            current[-1]["removed"].append(line[1:])
    return hunks


def original_text(work: str, relative: str) -> str:
    return subprocess.run(
        ["git", "-C", work, "show", f"HEAD:{relative}"], text=True, capture_output=True, check=True
    ).stdout


def planned_edits(path: str, text: str):
    from graphmend.cli.check import module_name_for
    from graphmend.rewrite.pipeline import mend_module_source

    module_name, is_package = module_name_for(path)
    return mend_module_source(
        text, filename=path, module_name=module_name, is_package=is_package, scope="all",
        output_calls_in_place=True,
    )


def classify_hunks(work: str, hunks: dict, fixable: list[dict]) -> dict:
    """Each hunk: 'import', 'rewrite' (inside a planned edit), 'appended', or unexplained."""
    from graphmend.rewrite.pipeline import RUNTIME_IMPORT

    summary = {
        "files": len(hunks),
        "hunks": 0,
        "import": 0,
        "rewrite": 0,
        "appended": 0,
        "rewrite_comments": 0,
        "dropped_comment_lines": [],
        "edits": 0,
        "edits_on_statement_boundaries": 0,
        "unexplained": [],
        "fixable_unchanged": [],
    }
    fixable_by_file: dict[str, list[dict]] = {}
    for finding in fixable:
        relative = os.path.relpath(finding["path"], work)
        fixable_by_file.setdefault(relative, []).append(finding)
    statements = Statements()
    for relative in sorted(set(hunks) | set(fixable_by_file)):
        path = os.path.join(work, relative)
        text = original_text(work, relative)
        result = planned_edits(path, text)
        # A statement written as a block, or an output call whose callee changed in place
        edits = [(edit.first_line, edit.last_line) for edit in result.edits]
        edits += [(edit.line, edit.line) for edit in result.callee_edits]
        starts, ends = statements.boundaries(path, text)
        summary["edits"] += len(edits)
        summary["edits_on_statement_boundaries"] += sum(
            first in starts and last in ends for first, last in edits
        )
        file_lines = len(text.splitlines())
        changed_edits = set()
        for hunk in hunks.get(relative, []):
            summary["hunks"] += 1
            first = hunk["old_start"]
            last = first + hunk["old_count"] - 1
            added = [line.strip() for line in hunk["added"]]
            comments = sum(line.startswith("# graphmend: ") for line in added)
            # Consecutive rewritten statements make one hunk: every old line of it must
            # lie in a planned edit (an insertion, next to one).
            inside = {
                index
                for index, (a, b) in enumerate(edits)
                if (hunk["old_count"]
                and a <= last
                and first <= b)
                or (not hunk["old_count"]
                and a - 1 <= first <= b)
            }
            covered = all(
                any(edits[index][0] <= line <= edits[index][1] for index in inside)
                for line in range(first, last + 1)
            )
            inside = inside if covered else set()
            if hunk["old_count"] == 0 and RUNTIME_IMPORT in added and len(added) <= 2:
                summary["import"] += 1
            elif inside:
                summary["rewrite"] += 1
                summary["rewrite_comments"] += comments
                # A rewritten statement is unparsed: comments inside it do not survive.
                summary["dropped_comment_lines"] += [
                    f"{relative}:{first + index}: {line.strip()}"
                    for index, line in enumerate(hunk["removed"])
                    if line.strip().startswith("#") and line.strip() not in added
                ]
                changed_edits.update(inside)
            elif hunk["old_count"] == 0 and first >= file_lines - 1:
                summary["appended"] += 1
            else:
                summary["unexplained"].append({"file": relative, **hunk})
        for finding in fixable_by_file.get(relative, []):
            hit = [index for index, (a, b) in enumerate(edits) if a <= finding["line"] <= b]
            if not hit or not changed_edits.intersection(hit):
                summary["fixable_unchanged"].append(f"{relative}:{finding['line']}")
    return summary


# --- main -------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", default="/tmp/tfcopy")
    parser.add_argument("--models", default=DEFAULT_MODELS)
    parser.add_argument(
        "--extra", default=DEFAULT_EXTRA, help="models that keep unfixable breaks ('' for none)"
    )
    parser.add_argument("--json", help="write every result here")
    parser.add_argument("--worker", choices=("original", "fixed"), help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    parser.add_argument("--reference", help=argparse.SUPPRESS)
    arguments = parser.parse_args(argv)
    if arguments.worker:
        arguments.mode = arguments.worker
        return worker(arguments)

    work = os.path.abspath(arguments.work)
    required = [name.strip() for name in arguments.models.split(",") if name.strip()]
    extra = [name.strip() for name in arguments.extra.split(",") if name.strip()]
    models = required + [name for name in extra if name not in required]
    results: dict = {"python": sys.executable, "models": required, "extra_models": extra}

    print(f"copying transformers from {transformers_location()} to {work}", flush=True)
    copy = copy_package(transformers_location(), work)

    started = time.time()
    done = graphmend("check", "--all", "--format", "json", copy)
    check = json.loads(done.stdout)
    results["check"] = {
        "exit": done.returncode,
        "seconds": round(time.time() - started, 1),
        "summary": check["summary"],
        "errors": check["errors"],
    }
    print(f"check: {check['summary']} in {results['check']['seconds']}s", flush=True)
    findings_by_file: dict[str, list[dict]] = {}
    for finding in check["findings"]:
        findings_by_file.setdefault(os.path.relpath(finding["path"], work), []).append(finding)

    # 1. recall over the original run's break sites.
    original = {model: run_worker("original", model, work) for model in models}
    results["original"] = original
    statements = Statements()
    sites: dict[tuple[str, int], dict] = {}
    for model, run in original.items():
        if "error" in run:
            print(f"{model}: original run failed:\n{run['error']}", flush=True)
            continue
        base = os.path.dirname(run["transformers_dir"])
        print(f"{model}: original: {run['graphs']} graphs, {run['breaks']} breaks", flush=True)
        for record in run["records"]:
            if not record["file"].startswith(run["transformers_dir"] + os.sep):
                continue
            relative = os.path.relpath(record["file"], base)
            key = (relative, record["line"])
            site = sites.setdefault(
                key, {"file": relative, "line": record["line"], "models": [], "texts": []}
            )
            if model not in site["models"]:
                site["models"].append(model)
            site["texts"].append(record["text"])
    recalled, missed, other = [], [], []
    for (relative, line), site in sorted(sites.items()):
        path = os.path.join(work, relative)
        with open(path, encoding="utf-8") as file:
            source_lines = file.read().splitlines()
        source_line = source_lines[line - 1] if line <= len(source_lines) else ""
        category = next(
            (c for c in (classify(t, source_line) for t in site["texts"]) if c != "other"),
            "other",
        )
        first, last = statements.span(path, line)
        matches = [f for f in findings_by_file.get(relative, []) if first <= f["line"] <= last]
        entry = {
            "site": f"{relative}:{line}",
            "models": site["models"],
            "category": category,
            "source": source_line.strip(),
            "span": [first, last],
            "check": [f"{f['line']}:{f['code']} {f['outcome']}" for f in matches],
        }
        if category not in TARGET_CATEGORIES:
            other.append(entry)
        elif matches:
            recalled.append(entry)
        else:
            missed.append(entry)
    target = len(recalled) + len(missed)
    results["recall"] = {
        "sites": target,
        "recalled": len(recalled),
        "recall": (len(recalled) / target) if target else None,
        "recalled_sites": recalled,
        "missed": missed,
        "other_sites": other,
    }
    print(f"recall: {len(recalled)}/{target} DC/LC/VG break sites", flush=True)
    for entry in recalled + missed + other:
        print(
            f"  {entry['site']} [{entry['category']}] {','.join(entry['models'])}: "
            f"{'; '.join(entry['check']) or ('MISSED' if entry in missed else 'no finding')}",
            flush=True,
        )

    # 2. fix the copy, check the diff, run the models on it.
    fixable = [finding for finding in check["findings"] if finding["fixed"]]
    done = graphmend("fix", "--write", "--all", copy)
    results["fix"] = {
        "exit": done.returncode,
        "tally": done.stderr.strip().splitlines()[-1:],
        "problems": [line for line in done.stderr.splitlines() if not line.startswith("fixed ")][
            :-1
        ],
    }
    print(f"fix: exit {done.returncode}: {results['fix']['tally']}", flush=True)
    for line in results["fix"]["problems"]:
        print(f"  {line}", flush=True)
    hunks = diff_hunks(work)
    results["diff"] = classify_hunks(work, hunks, fixable)
    results["diff"]["fixable_findings"] = len(fixable)
    diff = results["diff"]
    print(
        f"diff: {diff['files']} files, {diff['hunks']} hunks: {diff['rewrite']} rewrites "
        f"({diff['rewrite_comments']} '# graphmend:' comments), {diff['import']} runtime "
        f"imports, {diff['appended']} appended registrations, "
        f"{len(diff['unexplained'])} unexplained; "
        f"{len(diff['dropped_comment_lines'])} comment lines inside rewritten statements "
        f"dropped; {diff['edits_on_statement_boundaries']}/"
        f"{diff['edits']} planned edits on statement boundaries; "
        f"{len(fixable) - len(diff['fixable_unchanged'])}/{len(fixable)} fixable findings "
        f"changed",
        flush=True,
    )
    for item in diff["unexplained"][:20]:
        print(f"  unexplained hunk {item['file']}:{item['old_start']}", flush=True)
    for item in diff["dropped_comment_lines"][:20]:
        print(f"  dropped comment {item}", flush=True)
    for item in diff["fixable_unchanged"][:20]:
        print(f"  fixable but unchanged: {item}", flush=True)

    fixed = {model: run_worker("fixed", model, work) for model in models}
    results["fixed"] = fixed
    ok = bool(target) and not missed and not diff["unexplained"] and not diff["fixable_unchanged"]
    print("model: breaks before -> after, identical (eager, compiled)", flush=True)
    for model in models:
        before, after = original[model], fixed[model]
        if "error" in after or "error" in before:
            ok = False
            print(f"  {model}: FAILED\n{after.get('error') or before.get('error')}", flush=True)
            continue
        loaded_copy = after["transformers_dir"].startswith(work + os.sep)
        if model in required:
            fewer = after["breaks"] == 0 and after["graphs"] == 1
        else:
            fewer = after["breaks"] <= before["breaks"]
        good = (
            loaded_copy
            and fewer
            and after["eager_identical_to_reference"]
            and after["compiled_identical_to_reference"]
        )
        ok = ok and good
        print(
            f"  {model}: {before['breaks']} -> {after['breaks']} breaks "
            f"({after['graphs']} graph{'s' if after['graphs'] != 1 else ''}), identical "
            f"{'yes' if after['eager_identical_to_reference'] else 'NO'}/"
            f"{'yes' if after['compiled_identical_to_reference'] else 'NO'}"
            f"{'' if loaded_copy else ' (NOT the fixed copy: ' + after['transformers_file'] + ')'}"
            f"{'' if model in required else ' (extra: unfixable breaks may remain)'}",
            flush=True,
        )
    results["ok"] = ok
    if arguments.json:
        with open(arguments.json, "w", encoding="utf-8") as file:
            json.dump(results, file, indent=1)
    print("OK" if ok else "NOT OK", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
