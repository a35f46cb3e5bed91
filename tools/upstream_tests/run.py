"""Run pytest files twice, plainly and under ``graphmend run``, and list changed outcomes.

    python tools/upstream_tests/run.py [--timeout S] [--json OUT] [--python PY]
                                       [--assert-plain-both] FILE [FILE ...] [-- PYTEST_ARGS]

Each file runs in two fresh processes, one at a time:

    plain:   PY -m pytest FILE -p no:cacheprovider -p upstream_shims --junitxml=...
             -o junit_logging=system-out
    mended:  PY -m graphmend run --no-cache -m pytest FILE --assert=plain -p no:cacheprovider
             -p upstream_shims --junitxml=... -o junit_logging=system-out

The mended arm needs ``--assert=plain``: pytest's own assertion rewriting would load the
test module itself, and graphmend's import hook would never see it. That leaves one
difference between the arms that is not graphmend's (assertion rewriting of ``assert``
statements that TorchDynamo then traces); ``--assert-plain-both`` gives the plain arm
``--assert=plain`` too, to rule it out (with torch 2.13 it accounts for five tests that
otherwise fail differently: a rewritten ``assert`` is a data-dependent branch to
TorchDynamo). The mended arm imports graphmend from this
checkout's ``src`` (``PYTHONPATH``) and never reads or writes the rewritten-code cache,
so that it runs the code of this tree.

Both arms load ``plugins/upstream_shims.py``: stand-ins for the few names that stored test
files of other torch versions import and the installed torch lacks.

The two JUnit XML reports are compared test by test. A test whose outcome (passed,
failed, error, skipped, xfailed) differs is listed with the message of each arm. A file
whose arm runs past ``--timeout`` writes no report; it is listed as timed out. Only the
standard library is used, so the tool runs with any interpreter that has pytest.

The reports also hold what each test printed to standard output (pytest's
``junit_logging=system-out``): a test with the same outcome in both arms whose printed
text differs is listed too (``printing_differently``), since what a program prints is
part of its behaviour and most of PyTorch's tests never assert on it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from xml.etree import ElementTree

CHECKOUT = Path(__file__).resolve().parents[2]
SOURCE = CHECKOUT / "src"
# Holds the pytest plugin both arms load (-p upstream_shims), and nothing else, so that
# putting it on sys.path shadows no module of the tests.
PLUGINS = Path(__file__).resolve().parent / "plugins"
ARMS = ("plain", "mended")
# Kept per message so that a JSON report of hundreds of changes stays readable.
MESSAGE_LIMIT = 2000


@dataclass(frozen=True)
class CaseOutcome:
    outcome: str  # passed, failed, error, skipped, xfailed
    message: str = ""
    stdout: str = ""  # what the test printed, as pytest captured it


@dataclass
class ArmRun:
    command: list[str]
    returncode: int | None
    seconds: float
    timed_out: bool
    report_found: bool
    counts: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class ChangedOutcome:
    test: str
    plain: str
    mended: str
    plain_message: str
    mended_message: str
    # The same lines in another order: often a set or dict printed in hash order.
    lines_reordered_only: bool = False


def parse_junit(text: str) -> dict[str, CaseOutcome]:
    """``classname::name`` -> outcome, from a pytest JUnit XML report."""
    root = ElementTree.fromstring(text)
    outcomes: dict[str, CaseOutcome] = {}
    for case in root.iter("testcase"):
        test = f"{case.get('classname', '')}::{case.get('name', '')}"
        outcome = _case_outcome(case)
        printed = case.find("system-out")
        if printed is not None and printed.text:
            outcome = replace(outcome, stdout=_shorten(printed.text))
        outcomes[test] = outcome
    return outcomes


def _case_outcome(case: ElementTree.Element) -> CaseOutcome:
    # A test that fails and then errors in teardown has both children; the failure is
    # what the test itself did, so it is read first.
    for tag in ("failure", "error", "skipped"):
        child = case.find(tag)
        if child is None:
            continue
        message = child.get("message") or ""
        body = (child.text or "").strip()
        if body and body not in message:
            message = f"{message}\n{body}" if message else body
        outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[tag]
        if tag == "skipped" and child.get("type") == "pytest.xfail":
            outcome = "xfailed"
        return CaseOutcome(outcome, _shorten(message))
    return CaseOutcome("passed")


def _shorten(message: str) -> str:
    if len(message) <= MESSAGE_LIMIT:
        return message
    half = MESSAGE_LIMIT // 2
    return f"{message[:half]}\n[...]\n{message[-half:]}"


def compare(plain: dict[str, CaseOutcome], mended: dict[str, CaseOutcome]) -> list[ChangedOutcome]:
    """Every test whose outcome differs between the arms, in the plain arm's order; a test
    that one arm did not report at all counts as ``missing`` there."""
    missing = CaseOutcome("missing")
    changed = []
    for test in [*plain, *(name for name in mended if name not in plain)]:
        before, after = plain.get(test, missing), mended.get(test, missing)
        if before.outcome != after.outcome:
            changed.append(
                ChangedOutcome(test, before.outcome, after.outcome, before.message, after.message)
            )
    return changed


def failing_differently(
    plain: dict[str, CaseOutcome], mended: dict[str, CaseOutcome]
) -> list[ChangedOutcome]:
    """Tests that fail (or error) in both arms with another message: the outcome is the
    same, but graphmend may still have changed what the test saw. Numbers and addresses
    are ignored, since they differ between any two runs."""
    differing = []
    for test, before in plain.items():
        after = mended.get(test)
        if after is None or before.outcome != after.outcome:
            continue
        if before.outcome not in ("failed", "error"):
            continue
        plain_lines = _comparable(before.message).splitlines()
        mended_lines = _comparable(after.message).splitlines()
        if plain_lines != mended_lines:
            reordered = sorted(plain_lines) == sorted(mended_lines)
            differing.append(
                ChangedOutcome(
                    test, before.outcome, after.outcome, before.message, after.message, reordered
                )
            )
    return differing


def printing_differently(
    plain: dict[str, CaseOutcome], mended: dict[str, CaseOutcome]
) -> list[ChangedOutcome]:
    """Tests with the same outcome in both arms that printed other text (addresses
    ignored; the messages hold what each arm printed). Unlike ``failing_differently``,
    numbers are compared: a value printed differently may differ in nothing else."""
    differing = []
    for test, before in plain.items():
        after = mended.get(test)
        if after is None or before.outcome != after.outcome:
            continue
        if _without_addresses(before.stdout) != _without_addresses(after.stdout):
            differing.append(
                ChangedOutcome(test, before.outcome, after.outcome, before.stdout, after.stdout)
            )
    return differing


def _without_addresses(text: str) -> str:
    return re.sub(r"0x[0-9a-fA-F]+", "0x", text)


def _comparable(message: str) -> str:
    return re.sub(r"0x[0-9a-fA-F]+|\d+(?:\.\d+)?", "N", message)


def count_outcomes(outcomes: dict[str, CaseOutcome]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for result in outcomes.values():
        counts[result.outcome] = counts.get(result.outcome, 0) + 1
    return dict(sorted(counts.items()))


def arm_command(
    arm: str,
    python: str,
    test_file: str,
    report: Path,
    assert_plain_both: bool,
    pytest_args: list[str],
) -> list[str]:
    common = [
        "-p",
        "no:cacheprovider",
        "-p",
        "upstream_shims",
        f"--junitxml={report}",
        "-o",
        "junit_logging=system-out",
        *pytest_args,
    ]
    if arm == "plain":
        extra = ["--assert=plain"] if assert_plain_both else []
        return [python, "-m", "pytest", test_file, *extra, *common]
    return [
        python,
        "-m",
        "graphmend",
        "run",
        "--no-cache",
        "-m",
        "pytest",
        test_file,
        "--assert=plain",
        *common,
    ]


def arm_environment(arm: str) -> dict[str, str]:
    environment = dict(os.environ)
    paths = [str(SOURCE), str(PLUGINS)] if arm == "mended" else [str(PLUGINS)]
    inherited = environment.get("PYTHONPATH")
    environment["PYTHONPATH"] = os.pathsep.join(filter(None, [*paths, inherited]))
    return environment


def run_arm(
    arm: str,
    python: str,
    test_file: Path,
    report: Path,
    timeout: float,
    assert_plain_both: bool,
    pytest_args: list[str],
    log: Path,
) -> tuple[ArmRun, dict[str, CaseOutcome]]:
    # Run from the test file's folder so that both arms import it under the same name.
    command = arm_command(arm, python, test_file.name, report, assert_plain_both, pytest_args)
    started = time.monotonic()
    timed_out = False
    with open(log, "wb") as output:
        try:
            completed = subprocess.run(
                command,
                cwd=test_file.parent,
                env=arm_environment(arm),
                stdout=output,
                stderr=subprocess.STDOUT,
                timeout=timeout,
                check=False,
            )
            returncode: int | None = completed.returncode
        except subprocess.TimeoutExpired:
            timed_out, returncode = True, None
    seconds = round(time.monotonic() - started, 1)
    outcomes: dict[str, CaseOutcome] = {}
    if report.exists():
        outcomes = parse_junit(report.read_text(encoding="utf-8"))
    run = ArmRun(command, returncode, seconds, timed_out, report.exists(), count_outcomes(outcomes))
    return run, outcomes


def static_summary(python: str, test_file: Path, timeout: float) -> dict:
    """What ``graphmend check --all`` says of the file: how many break candidates it has
    and how many graphmend rewrites. A file with nothing rewritten tests only that the
    import hook and the compile boundary change nothing."""
    command = [python, "-m", "graphmend", "check", "--all", "--format", "json", str(test_file)]
    try:
        completed = subprocess.run(
            command,
            env=arm_environment("mended"),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        return json.loads(completed.stdout)["summary"]
    except (subprocess.TimeoutExpired, ValueError, KeyError) as error:
        return {"error": f"{type(error).__name__}: {error}"}


def run_file(
    test_file: Path,
    python: str,
    timeout: float,
    assert_plain_both: bool,
    pytest_args: list[str],
    work: Path,
) -> dict:
    arms: dict[str, ArmRun] = {}
    outcomes: dict[str, dict[str, CaseOutcome]] = {}
    for arm in ARMS:
        report = work / f"{test_file.stem}.{arm}.xml"
        report.unlink(missing_ok=True)
        log = work / f"{test_file.stem}.{arm}.log"
        arms[arm], outcomes[arm] = run_arm(
            arm, python, test_file, report, timeout, assert_plain_both, pytest_args, log
        )
    changed = compare(outcomes["plain"], outcomes["mended"])
    return {
        "file": str(test_file),
        "check": static_summary(python, test_file, timeout),
        "tests": len(set(outcomes["plain"]) | set(outcomes["mended"])),
        "arms": {arm: asdict(run) for arm, run in arms.items()},
        "changed": [asdict(change) for change in changed],
        "failing_differently": [
            asdict(change) for change in failing_differently(outcomes["plain"], outcomes["mended"])
        ],
        "printing_differently": [
            asdict(change) for change in printing_differently(outcomes["plain"], outcomes["mended"])
        ],
    }


def text_report(results: list[dict]) -> str:
    lines = []
    for result in results:
        lines.append(f"{result['file']}: {result['tests']} tests, {len(result['changed'])} changed")
        check = result.get("check", {})
        if "fixable" in check:
            lines.append(
                f"  graphmend check --all: {check['break_candidates']} break candidates, "
                f"{check['fixable']} rewritten, {check['declined']} declined"
            )
        for arm in ARMS:
            run = result["arms"][arm]
            state = "timed out" if run["timed_out"] else f"exit {run['returncode']}"
            lines.append(f"  {arm:6} {state}, {run['seconds']} s, {run['counts']}")
        for change in result["changed"]:
            lines.append(f"  {change['test']}: {change['plain']} -> {change['mended']}")
            failing = change["mended_message"] or change["plain_message"]
            if failing:
                lines.append(f"    {failing.splitlines()[0][:200]}")
        differing = result.get("failing_differently", [])
        if differing:
            lines.append(f"  failing in both arms with another message: {len(differing)}")
            for change in differing:
                reordered = " (the same lines in another order)" * change["lines_reordered_only"]
                lines.append(f"    {change['test']}{reordered}")
        printing = result.get("printing_differently", [])
        if printing:
            lines.append(f"  printing other text in the two arms: {len(printing)}")
            for change in printing:
                lines.append(f"    {change['test']}")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="+", type=Path, help="pytest files to run")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per file and arm")
    parser.add_argument("--json", type=Path, help="write the full results here")
    parser.add_argument(
        "--python", default=sys.executable, help="interpreter with torch and pytest"
    )
    parser.add_argument(
        "--work", type=Path, help="folder for the reports and logs (default: a temporary one)"
    )
    parser.add_argument(
        "--assert-plain-both",
        action="store_true",
        help="give the plain arm --assert=plain too",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    pytest_args: list[str] = []
    if "--" in argv:
        split = argv.index("--")
        argv, pytest_args = argv[:split], argv[split + 1 :]
    arguments = build_parser().parse_args(argv)
    work = arguments.work or Path(tempfile.mkdtemp(prefix="upstream-tests-"))
    work.mkdir(parents=True, exist_ok=True)
    results = []
    for test_file in arguments.files:
        results.append(
            run_file(
                test_file.resolve(),
                arguments.python,
                arguments.timeout,
                arguments.assert_plain_both,
                pytest_args,
                work,
            )
        )
        if arguments.json is not None:  # after every file, so a long batch leaves what it has
            arguments.json.write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    print(text_report(results))
    print(f"reports and logs: {work}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
