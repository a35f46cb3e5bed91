"""``graphmend explain``: run a script as is and mended, and explain each graph break.

    graphmend explain [--package NAME]... [--rules RULES] [--show-output] script.py [args...]

The script runs twice, each time in a fresh interpreter: first as ``python script.py``
would run it, then as ``graphmend run`` would (with the same ``--package`` options).
Both runs record every TorchDynamo graph break through Dynamo's own ``graph_breaks``
log, which fires for a break before the first graph too. Each break of the original
run is then printed with its place in user code, the source line, its category and
what graphmend did about it, followed by ``breaks: N -> M``.

A break's category comes from graphmend's static finding at that line when there is
one, else from Dynamo's reason. What graphmend did comes from the same finding, from
the analysis ``graphmend run`` applies to that file (entry points for the script,
every function for a package), checked against the mended run.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import linecache
import logging
import os
import re
import subprocess
import sys
import tempfile
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
from graphmend.rewrite.findings import CATEGORY_TITLES, Finding
from graphmend.rewrite.pipeline import ALL_RULES

PROGRAM = "graphmend explain"
SCRIPT_FAILED_EXIT_CODE = 1
LOG_ENVIRONMENT_VARIABLE = "GRAPHMEND_EXPLAIN_BREAK_LOG"
ORIGINAL, MENDED = "original", "mended"
OTHER_CATEGORY = "other"

# Each child interpreter starts here: record breaks, then run the script one way or the other.
_CHILD_PROGRAM = (
    "import sys\n"
    "from graphmend.cli.explain import run_and_record_breaks\n"
    "sys.exit(run_and_record_breaks(sys.argv[1:]))\n"
)

# Frames in graphmend's own runtime are never "the user's code" a break is reported at.
_GRAPHMEND_DIRECTORY = os.path.dirname(os.path.abspath(graphmend.__file__)) + os.sep

# --- in the child interpreter -----------------------------------------------------------


class _BreakRecorder(logging.Handler):
    """Appends each graph-break log record to a JSON-lines file, flushed at once.

    Flushed per record so that breaks logged before a crash or ``os._exit`` still count.
    """

    def __init__(self, path: str) -> None:
        super().__init__(logging.DEBUG)
        self.file = open(path, "a", encoding="utf-8")  # noqa: SIM115 - lives as long as the process

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.file.write(json.dumps({"message": record.getMessage()}) + "\n")
            self.file.flush()
        except Exception:  # noqa: BLE001 - logging must never break the user's script
            self.handleError(record)


def install_break_recorder(path: str) -> None:
    """Send TorchDynamo's ``graph_breaks`` artifact log to ``path``, and not to stderr."""
    import torch
    import torch._dynamo.symbolic_convert  # registers the graph_breaks loggers

    torch._logging.set_logs(graph_breaks=True)
    recorder = _BreakRecorder(path)
    for name in list(logging.root.manager.loggerDict):
        if name.endswith(".__graph_breaks"):
            logger = logging.getLogger(name)
            logger.addHandler(recorder)
            logger.propagate = False


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

_BREAK_LOCATION = re.compile(
    r"^Graph break(?: \(.*?\))? in user code at (?P<file>.*):(?P<line>\d+)\s*$"
)
_FRAME = re.compile(r'^\s*File "(?P<file>.+)", line (?P<line>\d+), in (?P<function>.+)$')
_REASON = "Graph Break Reason: "
# Dynamo's first reason line is sometimes only the bytecode it was tracing.
_GENERIC_REASON = re.compile(r"^Encountered graph break when attempting to trace")


@dataclass
class GraphBreak:
    file: str
    line: int
    reason: str
    explanation: str = ""

    @property
    def location(self) -> tuple[str, int]:
        return (self.file, self.line)

    def summary(self) -> str:
        return f"{self.reason}: {self.explanation}" if self.explanation else self.reason


def _is_user_file(path: str) -> bool:
    if path.startswith("<"):
        return False
    absolute = os.path.abspath(path)
    if absolute.startswith(_GRAPHMEND_DIRECTORY):
        return False
    return not any(absolute.startswith(directory) for directory in _torch_directories())


@functools.cache
def _torch_directories() -> tuple[str, ...]:
    """Where torch lives, found without importing it (this process may never need it)."""
    spec = importlib.util.find_spec("torch")
    locations = spec.submodule_search_locations if spec is not None else None
    return tuple(os.path.abspath(location) + os.sep for location in locations or ())


def parse_break_record(message: str) -> GraphBreak | None:
    """One ``graph_breaks`` log message -> where (innermost user frame) and why."""
    lines = message.splitlines()
    if not lines:
        return None
    located = _BREAK_LOCATION.match(lines[0])
    if located is None:
        return None
    file, line = located["file"], int(located["line"])
    reason_lines: list[str] = []
    frames: list[tuple[str, int]] = []
    in_traceback = False
    for text in lines[1:]:
        if text.startswith("User code traceback:"):
            in_traceback = True
        elif in_traceback:
            frame = _FRAME.match(text)
            if frame:
                frames.append((frame["file"], int(frame["line"])))
        elif text.startswith(_REASON):
            reason_lines.append(text[len(_REASON) :].strip())
        elif reason_lines:
            reason_lines.append(text.strip())
    user_frames = [frame for frame in frames if _is_user_file(frame[0])]
    if user_frames:
        file, line = user_frames[-1]
    meaningful = [text for text in reason_lines if text and not _GENERIC_REASON.match(text)]
    reason = (
        meaningful[0] if meaningful else (reason_lines[0] if reason_lines else "unknown reason")
    )
    explanation = next(
        (
            text[len("Explanation:") :].strip()
            for text in meaningful
            if text.startswith("Explanation:")
        ),
        "",
    )
    return GraphBreak(os.path.abspath(file), line, reason.rstrip(":"), explanation)


def read_break_log(path: str) -> list[GraphBreak]:
    breaks = []
    try:
        with open(path, encoding="utf-8") as file:
            for text in file:
                try:
                    message = json.loads(text)["message"]
                except (ValueError, KeyError, TypeError):
                    continue  # a line cut short by a crash
                parsed = parse_break_record(message)
                if parsed is not None:
                    breaks.append(parsed)
    except OSError:
        pass
    return breaks


# --- classifying and explaining ---------------------------------------------------------

_CATEGORY_PATTERNS = (
    ("TI", re.compile(r"Tensor\.item\(\)|\.item\(\)|capture_scalar_outputs", re.IGNORECASE)),
    (
        "DS",
        re.compile(
            r"dynamic[ -]shape operator|nonzero|capture_dynamic_output_shape", re.IGNORECASE
        ),
    ),
    ("DO", re.compile(r"data[ -]dependent operator", re.IGNORECASE)),
    (
        "DC",
        re.compile(
            r"data[ -]dependent branch|dynamic control flow|jump with TensorVariable", re.IGNORECASE
        ),
    ),
    ("LC", re.compile(r"`print`|\bprint\b|logging|logger|warnings?\.warn", re.IGNORECASE)),
    ("VG", re.compile(r"\bassert|raise|exception", re.IGNORECASE)),
)


def category_from_reason(text: str) -> str:
    for category, pattern in _CATEGORY_PATTERNS:
        if pattern.search(text):
            return category
    return OTHER_CATEGORY


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
    """Whether the mended run rewrites ``path`` as one of its ``--package`` modules."""
    module = module_of(path)
    return any(module == name or module.startswith(name + ".") for name in packages)


def what_graphmend_did(
    graph_break: GraphBreak,
    finding: Finding | None,
    remaining: set,
    wider: Finding | None,
    not_a_package: bool = False,
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
            return f"{wider.rule} declined: {wider.reason}"
        if graph_break.location in remaining:
            return "no graphmend rule covers this break"
        return "no graphmend rule covers this line, yet the mended run does not break here"
    if finding.fixed:
        if graph_break.location in remaining:
            return f"rewritten by {finding.rule}, but the mended run still breaks here"
        return f"fixed by {finding.rule}"
    if finding.rule:
        return f"{finding.rule} declined: {finding.reason}"
    return f"not fixable: {finding.reason}" if finding.reason else "not fixable"


def _display_path(path: str) -> str:
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
) -> list[str]:
    """``packages``: the mended run's ``--package`` names (None: not known, assume rewritten)."""
    lines = [f"original run: {_plural(len(original), 'graph break')}"]
    remaining = {graph_break.location for graph_break in mended}
    for (file, line), group in _count_by_location(original).items():
        graph_break = group[0]
        findings = static.findings_at(file, line)
        category_hint = category_from_reason(graph_break.summary())
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
        lines.append(f"    reason: {graph_break.summary()}")
        not_a_package = (
            packages is not None and file != static.script and not is_mended(file, packages)
        )
        did = what_graphmend_did(graph_break, finding, remaining, wider, not_a_package)
        lines.append(f"    graphmend: {did}")
    original_locations = {graph_break.location for graph_break in original}
    new = [b for b in mended if b.location not in original_locations]
    if new:
        lines.append(f"new in the mended run: {_plural(len(new), 'graph break')}")
        for (file, line), group in _count_by_location(new).items():
            lines.append(f"  {_display_path(file)}:{line}: {group[0].summary()}")
    lines.append(f"breaks: {len(original)} -> {len(mended)}")
    return lines


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
    """One run of the script in its own interpreter, its breaks logged to a file."""

    mode: str
    arguments: list[str]
    show_output: bool
    status: int = 0
    breaks: list[GraphBreak] = field(default_factory=list)
    errors: str = ""

    def start(self) -> None:
        descriptor, self.log_path = tempfile.mkstemp(prefix="graphmend-explain-", suffix=".jsonl")
        os.close(descriptor)
        environment = dict(os.environ)
        environment[LOG_ENVIRONMENT_VARIABLE] = self.log_path
        # The child must import this very graphmend, installed or not.
        source_root = os.path.dirname(os.path.dirname(graphmend.__file__))
        environment["PYTHONPATH"] = os.pathsep.join(
            [source_root, *filter(None, [environment.get("PYTHONPATH")])]
        )
        command = [sys.executable, "-c", _CHILD_PROGRAM, self.mode, *self.arguments]
        # A file, not a pipe, so that a chatty script never blocks on a full pipe.
        self.error_file = None
        if not self.show_output:
            self.error_file = tempfile.TemporaryFile("w+b")  # noqa: SIM115 - closed in finish()
        self.process = subprocess.Popen(
            command,
            env=environment,
            stdout=None if self.show_output else subprocess.DEVNULL,
            stderr=self.error_file,
        )

    def finish(self) -> None:
        try:
            self.status = self.process.wait()
            if self.error_file is not None:
                self.error_file.seek(0)
                self.errors = self.error_file.read().decode("utf-8", "replace")
                self.error_file.close()
            self.breaks = read_break_log(self.log_path)
        finally:
            os.unlink(self.log_path)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def run_both(original: _ChildRun, mended: _ChildRun) -> None:
    """Run the two at once (they are independent) unless their output is to be shown."""
    runs = (original, mended)
    try:
        if original.show_output:
            for run in runs:
                run.start()
                run.finish()
        else:
            for run in runs:
                run.start()
            for run in runs:
                run.finish()
    finally:
        for run in runs:
            if hasattr(run, "process"):
                run.stop()


# torch's own log lines (``W1129 09:37:22.456000 21865 path:line] ...``): not the script's words.
_TORCH_LOG_LINE = re.compile(r"^[DIVWEC]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ ")


def _report_failure(mode: str, status: int, errors: str) -> None:
    print(f"{PROGRAM}: the {mode} run exited with status {status}", file=sys.stderr)
    script_lines = [
        line for line in errors.splitlines() if line.strip() and not _TORCH_LOG_LINE.match(line)
    ]
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
    print("\n".join(explain_breaks(original.breaks, mended.breaks, static, packages)))
    return SCRIPT_FAILED_EXIT_CODE if original.status or mended.status else 0
