"""``graphmend explain``: run a script as is and mended, and explain each graph break.

    graphmend explain [--package NAME]... [--rules RULES] [--show-output] script.py [args...]

The script runs twice, each time in a fresh interpreter, one run after the other:
first as ``python script.py`` would run it, then as ``graphmend run`` would (with the
same ``--package`` options). Standard input goes to the first run only; the mended run
reads an empty one. Both runs record TorchDynamo's own records of each graph break and
recompilation (``graphmend.dynamo_records``), which see a break before the first graph
too. Each break of the original run is then printed with its place in user code, the
source line, its category, Dynamo's reason, hints and reference, and what graphmend did
about it; then each recompilation with Dynamo's guard failures; then ``breaks: N -> M``.

A break's category comes from graphmend's static finding at that line when there is
one, else from Dynamo's reason. What graphmend did comes from the same finding, from
the analysis ``graphmend run`` applies to that file (entry points for the script,
every function for a package), checked against the mended run.
"""

from __future__ import annotations

import functools
import json
import linecache
import logging
import os
import subprocess
import sys
import tempfile
import textwrap
from dataclasses import dataclass, field

import graphmend
from graphmend.cli import config
from graphmend.cli.check import mend_file, module_name_for
from graphmend.cli.config import (
    ConfigError,
    OneLineErrorParser,
    Settings,
    apply_overrides,
    load_settings,
    print_warnings,
    usage_error,
)
from graphmend.core.legality import Reason, condition_id, declined, label_of
from graphmend.dynamo_records import (
    ForgottenBreaks,
    GraphBreakRecord,
    Recompilation,
    category_for,
    start_recording,
)
from graphmend.rewrite.findings import CATEGORY_TITLES, Finding
from graphmend.rewrite.pipeline import ALL_RULES

PROGRAM = "graphmend explain"
SCRIPT_FAILED_EXIT_CODE = 1
LOG_ENVIRONMENT_VARIABLE = "GRAPHMEND_EXPLAIN_BREAK_LOG"
# Where a child whose output is hidden sends torch's own log lines, so that a failure
# report shows the script's last words and not torch's.
TORCH_LOG_ENVIRONMENT_VARIABLE = "GRAPHMEND_EXPLAIN_TORCH_LOG"
ORIGINAL, MENDED = "original", "mended"

# Each child interpreter starts here: record breaks, then run the script one way or the other.
_CHILD_PROGRAM = (
    "import sys\n"
    "from graphmend.cli.explain import run_and_record_breaks\n"
    "sys.exit(run_and_record_breaks(sys.argv[1:]))\n"
)

# --- in the child interpreter -----------------------------------------------------------


class _RecordFile:
    """Appends each of Dynamo's records to a JSON-lines file, flushed at once.

    Flushed per record so that breaks recorded before a crash or ``os._exit`` still count.
    """

    def __init__(self, path: str) -> None:
        self.file = open(path, "a", encoding="utf-8")  # noqa: SIM115 - lives as long as the process

    def __call__(self, record: GraphBreakRecord | Recompilation | ForgottenBreaks) -> None:
        try:
            if isinstance(record, ForgottenBreaks):
                for forgotten in record.breaks:
                    self.file.write(json.dumps({"forgotten": forgotten.to_json()}) + "\n")
            else:
                kind = "break" if isinstance(record, GraphBreakRecord) else "recompilation"
                self.file.write(json.dumps({kind: record.to_json()}) + "\n")
            self.file.flush()
        except Exception:  # noqa: BLE001 - recording must never break the user's script
            pass


def install_break_recorder(path: str) -> None:
    """Record Dynamo's breaks and recompilations into ``path`` until the process ends,
    and at its end the rewrites that kept their breaks while tracing (with why)."""
    import atexit

    import torch  # noqa: F401 - torch sets up its log handlers on import

    records = _RecordFile(path)
    start_recording(records)
    atexit.register(_record_trace_time_declines, records)
    torch_log = os.environ.get(TORCH_LOG_ENVIRONMENT_VARIABLE)
    if torch_log:
        # lives as long as the process
        stream = open(torch_log, "a", encoding="utf-8")  # noqa: SIM115
        torch_loggers = [
            logging.getLogger(name)
            for name in list(logging.root.manager.loggerDict)
            if name == "torch" or name.startswith("torch.")
        ]
        for logger in torch_loggers:
            for handler in logger.handlers:
                if isinstance(handler, logging.StreamHandler) and handler.stream is sys.stderr:
                    handler.setStream(stream)


def _record_trace_time_declines(records: _RecordFile) -> None:
    from graphmend.runtime.store import store

    for (file, line), reason in list(store.trace_time_declines.items()):
        try:
            records.file.write(json.dumps({"declined": [file, line, reason, condition_id(reason)]}) + "\n")
            records.file.flush()
        except Exception:  # noqa: BLE001 - recording must never break the user's script
            pass


def run_and_record_breaks(argv: list[str]) -> int:
    """Child entry point: ``original script.py args...`` or ``mended <graphmend run args>``."""
    install_break_recorder(os.environ[LOG_ENVIRONMENT_VARIABLE])
    mode, rest = argv[0], argv[1:]
    if mode == MENDED:
        from graphmend.cli.run import run_command

        return run_command(rest)
    import runpy

    script, script_arguments = rest[0], rest[1:]
    sys.argv = [script, *script_arguments]
    sys.path[0] = os.path.dirname(os.path.realpath(script))
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            return exc.code or 0
        print(exc.code, file=sys.stderr)
        return 1
    return 0


# --- reading the records ----------------------------------------------------------------


@dataclass
class GraphBreak:
    """One break as explain reports it: where in user code, and what Dynamo says."""

    file: str
    line: int
    reason: str  # Dynamo's graph-break type
    explanation: str = ""
    hints: list[str] = field(default_factory=list)
    reference: str | None = None
    cause: str = ""  # the type of the break this one was raised while handling

    @classmethod
    def from_record(cls, record: GraphBreakRecord) -> GraphBreak:
        frame = record.user_frame
        root = record.root
        return cls(
            os.path.abspath(frame.file) if frame else "",
            frame.line if frame else 0,
            record.gb_type,
            record.explanation,
            list(record.hints),
            record.reference,
            root.gb_type if root is not record else "",
        )

    @property
    def location(self) -> tuple[str, int]:
        return (self.file, self.line)

    @property
    def category(self) -> str:
        return category_for(self.cause or self.reason, self.file, self.line)

    def summary(self) -> str:
        return f"{self.reason}: {self.explanation}" if self.explanation else self.reason


def read_records(path: str) -> tuple[list[GraphBreak], list[Recompilation], dict[tuple[str, int], str]]:
    """The breaks, recompilations and rewrites kept while tracing (by file and line,
    with the reason) that a child wrote to ``path``."""
    breaks: list[GraphBreak] = []
    recompilations: list[Recompilation] = []
    declines: dict[tuple[str, int], str] = {}
    try:
        with open(path, encoding="utf-8") as file:
            for text in file:
                try:
                    item = json.loads(text)
                    if "break" in item:
                        record = GraphBreakRecord.from_json(item["break"])
                        breaks.append(GraphBreak.from_record(record))
                    elif "forgotten" in item:
                        # a break of a trace attempt graphmend abandoned: the latest of its kind goes
                        forgotten = GraphBreak.from_record(GraphBreakRecord.from_json(item["forgotten"]))
                        for index in range(len(breaks) - 1, -1, -1):
                            if breaks[index] == forgotten:
                                del breaks[index]
                                break
                    elif "recompilation" in item:
                        recompilations.append(Recompilation.from_json(item["recompilation"]))
                    elif "declined" in item:
                        file, line, reason, *condition = item["declined"]
                        declines[(file, int(line))] = Reason(str(reason), (condition or [""])[0] or "")
                except (ValueError, KeyError, TypeError):
                    continue  # a line cut short by a crash
    except OSError:
        pass
    return breaks, recompilations, declines


# --- classifying and explaining ---------------------------------------------------------


@dataclass
class StaticView:
    """graphmend's findings per file, from the analysis ``graphmend run`` applies to it."""

    settings: Settings
    script: str
    cache: dict = field(default_factory=dict)

    def findings_at(self, file: str, line: int, scope: str | None = None) -> list[Finding]:
        scope = scope or ("entry" if file == self.script else "all")
        key = (file, scope)
        if key not in self.cache:
            report = mend_file(file, self.settings, scope=scope)
            self.cache[key] = report.result.findings if report.result is not None else []
        return [finding for finding in self.cache[key] if finding.line == line]


def _best_finding(findings: list[Finding], category: str) -> Finding | None:
    for finding in findings:
        if finding.category == category:
            return finding
    return findings[0] if findings else None


def module_of(path: str) -> str:
    """The dotted name ``path`` is imported under (a loose file: its stem)."""
    name, _ = module_name_for(path)
    return name or os.path.splitext(os.path.basename(path))[0]


def is_mended(path: str, packages: list[str]) -> bool:
    """Whether the mended run rewrites ``path``: as one of its ``--package`` modules, or
    as the user's own code, which ``graphmend run`` mends unasked (any file outside the
    standard library and the installed distributions, as its import hook decides)."""
    module = module_of(path)
    if any(module == name or module.startswith(name + ".") for name in packages):
        return True
    return not _library_locations().is_installed(path)


@functools.lru_cache(maxsize=1)
def _library_locations():
    from graphmend.hook.finder import LibraryLocations

    return LibraryLocations()


def what_graphmend_did(
    graph_break: GraphBreak,
    finding: Finding | None,
    remaining: set,
    wider: Finding | None,
    not_a_package: bool = False,
    declined_while_tracing: str | None = None,
) -> str:
    if finding is not None and finding.fixed and not_a_package:
        top = module_of(graph_break.file).split(".")[0]
        return (
            f"not rewritten: {top} is not a --package of this run "
            f"({finding.rule} would fix it with --package {top} before the script name)"
        )
    if finding is None:
        if wider is not None and wider.fixed:
            return (
                f"not rewritten: not reached from a torch.compile entry point in this file "
                f"({wider.rule} would fix it with --all, or as a --package)"
            )
        if wider is not None and wider.rule and wider.reason:
            return declined(wider.rule, wider.reason)
        if graph_break.location in remaining and declined_while_tracing:
            # A pass that reports no candidate (Where's fixed values, written-back
            # attributes) rewrote the statement, and the trace declined it.
            label = label_of(declined_while_tracing)
            kept = f" [{label}]" if label else ""
            return f"rewritten; kept its break while tracing{kept}: {declined_while_tracing}"
        if graph_break.location in remaining:
            return "no graphmend rule covers this break"
        return "no graphmend rule covers this line, yet the mended run does not break here"
    if finding.fixed:
        if graph_break.location in remaining and declined_while_tracing:
            label = label_of(declined_while_tracing)
            kept = f" [{label}]" if label else ""
            return f"rewritten by {finding.rule}; kept its break while tracing{kept}: {declined_while_tracing}"
        if graph_break.location in remaining:
            return f"rewritten by {finding.rule}, but the mended run still breaks here"
        return f"fixed by {finding.rule}"
    if finding.rule:
        return declined(finding.rule, finding.reason)
    return f"not fixable: {finding.reason}" if finding.reason else "not fixable"


def _display_path(path: str) -> str:
    if not path:
        # TorchDynamo names no file for some frames (a resume function's, a generated one's).
        return "<unknown file>"
    relative = os.path.relpath(path)
    return path if relative.startswith(os.pardir) else relative


def _count_by_location(breaks: list[GraphBreak]) -> dict[tuple[str, int], list[GraphBreak]]:
    grouped: dict[tuple[str, int], list[GraphBreak]] = {}
    for graph_break in breaks:
        grouped.setdefault(graph_break.location, []).append(graph_break)
    return grouped


def explain_breaks(
    original: list[GraphBreak],
    mended: list[GraphBreak],
    static: StaticView,
    packages: list[str] | None = None,
    recompilations: dict[str, list[Recompilation]] | None = None,
    declines: dict[tuple[str, int], str] | None = None,
) -> list[str]:
    """``packages``: the mended run's ``--package`` names (None: not known, assume rewritten).
    ``recompilations``: each run's (by ``ORIGINAL``/``MENDED``), when known.
    ``declines``: the mended run's rewrites that kept their breaks while tracing."""
    lines = [f"original run: {_plural(len(original), 'graph break')}"]
    remaining = {graph_break.location for graph_break in mended}
    for (file, line), group in _count_by_location(original).items():
        graph_break = group[0]
        findings = static.findings_at(file, line)
        category_hint = graph_break.category
        finding = _best_finding(findings, category_hint)
        wider = None
        if finding is None and file == static.script:
            wider = _best_finding(static.findings_at(file, line, scope="all"), category_hint)
        category = finding.category if finding else category_hint
        title = CATEGORY_TITLES.get(category, "unclassified")
        times = f" (x{len(group)})" if len(group) > 1 else ""
        source_line = linecache.getline(file, line).strip()
        lines.append(f"  {_display_path(file)}:{line}: {category} {title}{times}")
        if source_line:
            lines.append(f"      {source_line}")
        lines.append(_indented("    reason: ", graph_break.summary()))
        if graph_break.cause:
            lines.append(f"    raised while handling: {graph_break.cause}")
        lines.extend(_indented("    hint: ", hint) for hint in graph_break.hints)
        if graph_break.reference:
            lines.append(f"    see: {graph_break.reference}")
        not_a_package = (
            packages is not None and file != static.script and not is_mended(file, packages)
        )
        did = what_graphmend_did(
            graph_break, finding, remaining, wider, not_a_package, (declines or {}).get((file, line))
        )
        lines.append(f"    graphmend: {did}")
    original_locations = {graph_break.location for graph_break in original}
    new = [b for b in mended if b.location not in original_locations]
    if new:
        lines.append(f"new in the mended run: {_plural(len(new), 'graph break')}")
        for (file, line), group in _count_by_location(new).items():
            lines.append(f"  {_display_path(file)}:{line}: {group[0].summary()}")
            kept = _best_finding(static.findings_at(file, line), None)
            if kept is not None and kept.rule and not kept.fixed:
                # A call kept with its break where the original broke inside the callee
                # (a validation helper made outside TorchDynamo): the same break, moved.
                lines.append(f"    graphmend: {declined(kept.rule, kept.reason)}")
    for mode, found in (recompilations or {}).items():
        if found:
            lines.append(f"recompilations in the {mode} run: {len(found)}")
            for recompilation in found:
                lines.append(
                    f"  {_display_path(recompilation.file)}:{recompilation.first_line}: "
                    f"{recompilation.function} (compilation {recompilation.compile_id})"
                )
                lines.extend(
                    _indented("    guard failed: ", reason) for reason in recompilation.reasons
                )
    lines.append(f"breaks: {len(original)} -> {len(mended)}")
    return lines


def _indented(label: str, text: str) -> str:
    """``label`` then ``text``, its later (non-blank) lines lined up under its first."""
    first, _, rest = text.strip().partition("\n")
    later = [line.rstrip() for line in textwrap.dedent(rest).splitlines() if line.strip()]
    text_lines = [first, *later]
    return label + ("\n" + " " * len(label)).join(text_lines)


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


# --- the command ------------------------------------------------------------------------

_OPTIONS_WITH_A_SEPARATE_VALUE = frozenset({"--package", "-p", "--rules"})


def split_script_arguments(argv: list[str]) -> tuple[list[str], list[str]]:
    return config.split_script_arguments(argv, _OPTIONS_WITH_A_SEPARATE_VALUE)


def build_parser() -> OneLineErrorParser:
    parser = OneLineErrorParser(
        prog=PROGRAM,
        allow_abbrev=False,  # split_script_arguments knows only the full option names
        description="Run a script with and without graphmend and explain each graph break.",
        epilog=(
            "The script runs twice, one run after the other: first as is, then mended. "
            "Standard input goes to the first run only; the mended run reads an empty "
            "standard input, so a script that reads its input may take another path there."
        ),
    )
    parser.add_argument(
        "--package",
        "-p",
        action="append",
        default=[],
        metavar="NAME",
        help="also rewrite this package on import in the mended run; repeatable",
    )
    parser.add_argument("--rules", help=f"comma-separated rules (default: {','.join(ALL_RULES)})")
    parser.add_argument(
        "--show-output", action="store_true", help="let the script's own output through"
    )
    parser.add_argument("script", help="the Python script to run, then its own arguments")
    return parser


@dataclass
class _ChildRun:
    """One run of the script in its own interpreter, its records written to a file."""

    mode: str
    arguments: list[str]
    show_output: bool
    status: int = 0
    breaks: list[GraphBreak] = field(default_factory=list)
    recompilations: list[Recompilation] = field(default_factory=list)
    declines: dict = field(default_factory=dict)
    errors: str = ""

    def run(self, stdin) -> None:
        """Run to the end; ``stdin``: what the script reads (a file, or DEVNULL)."""
        with tempfile.TemporaryDirectory(prefix="graphmend-explain-") as directory:
            log_path = os.path.join(directory, "records.jsonl")
            environment = dict(os.environ)
            environment[LOG_ENVIRONMENT_VARIABLE] = log_path
            if not self.show_output:
                environment[TORCH_LOG_ENVIRONMENT_VARIABLE] = os.path.join(directory, "torch.log")
            # The child must import this very graphmend, installed or not.
            source_root = os.path.dirname(os.path.dirname(graphmend.__file__))
            environment["PYTHONPATH"] = os.pathsep.join(
                [source_root, *filter(None, [environment.get("PYTHONPATH")])]
            )
            command = [sys.executable, "-c", _CHILD_PROGRAM, self.mode, *self.arguments]
            # A file, not a pipe, so that a chatty script never blocks on a full pipe.
            with tempfile.TemporaryFile("w+b") as error_file:
                process = subprocess.Popen(
                    command,
                    env=environment,
                    stdin=stdin,
                    stdout=None if self.show_output else subprocess.DEVNULL,
                    stderr=None if self.show_output else error_file,
                )
                try:
                    self.status = process.wait()
                finally:
                    if process.poll() is None:
                        process.kill()
                        process.wait()
                error_file.seek(0)
                self.errors = error_file.read().decode("utf-8", "replace")
            self.breaks, self.recompilations, self.declines = read_records(log_path)


def run_both(original: _ChildRun, mended: _ChildRun) -> None:
    """Run the original, then the mended one; only the original reads our standard input."""
    original.run(stdin=None)
    mended.run(stdin=subprocess.DEVNULL)


def _report_failure(mode: str, status: int, errors: str) -> None:
    print(f"{PROGRAM}: the {mode} run exited with status {status}", file=sys.stderr)
    script_lines = [line for line in errors.splitlines() if line.strip()]
    for line in script_lines[-5:]:
        print(f"  {line}", file=sys.stderr)


def _note_options_after_the_script(script_arguments: list[str]) -> None:
    """``explain script.py --package x`` hands ``--package x`` to the script; say so."""
    for index, word in enumerate(script_arguments):
        if word in ("--package", "-p") and index + 1 < len(script_arguments):
            given = f"{word} {script_arguments[index + 1]}"
        elif word.startswith("--package="):
            given = word
        else:
            continue
        print(
            f"{PROGRAM}: note: {given!r} comes after the script, so it is the script's "
            "argument; put it before the script to rewrite that package in the mended run",
            file=sys.stderr,
        )
        return


def explain_command(argv: list[str]) -> int:
    try:
        ours, script_arguments = split_script_arguments(list(argv))
        arguments = build_parser().parse_args(ours)
        settings = apply_overrides(load_settings([arguments.script]), rules=arguments.rules)
    except ConfigError as exc:
        return usage_error(PROGRAM, str(exc))
    except SystemExit as exc:  # --help
        return int(exc.code or 0)
    print_warnings(settings, PROGRAM)
    script = os.path.abspath(arguments.script)
    if not os.path.isfile(script):
        return usage_error(PROGRAM, f"can't open file {arguments.script!r}: no such file")
    packages = [
        name.strip()
        for option in [*settings.packages, *arguments.package]
        for name in option.split(",")
        if name.strip()
    ]
    _note_options_after_the_script(script_arguments)

    mended_arguments = [f"--package={name}" for name in packages]
    mended_arguments += [f"--rules={','.join(settings.rules)}", script, *script_arguments]
    original = _ChildRun(ORIGINAL, [script, *script_arguments], arguments.show_output)
    mended = _ChildRun(MENDED, mended_arguments, arguments.show_output)
    run_both(original, mended)
    for run in (original, mended):
        if run.status != 0:
            _report_failure(run.mode, run.status, run.errors)

    static = StaticView(settings, script)
    recompilations = {ORIGINAL: original.recompilations, MENDED: mended.recompilations}
    report = explain_breaks(
        original.breaks, mended.breaks, static, packages, recompilations, mended.declines
    )
    print("\n".join(report))
    return SCRIPT_FAILED_EXIT_CODE if original.status or mended.status else 0
