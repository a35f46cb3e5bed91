"""``graphmend check``: list graph-break candidates and what graphmend would do, statically.

    graphmend check PATH... [--all] [--format text|json|github|sarif] [--select CODES] [--ignore CODES]
                            [--rules trap,where,defer]

Each PATH is a file or a folder (searched for ``*.py``, skipping hidden folders,
``__pycache__`` and virtual environments). Files are read and checked one at a time
and each result is printed as soon as it is known, so a large tree streams.

What is looked at (without ``--all``): code reachable from ``torch.compile`` entry
points in any spelling, followed across the files given (``torch.compile(Model())`` in
``main.py`` reaches ``Model`` in ``model.py``; so does a compiling helper defined in
one file and called in another), and every ``nn.Module`` class with what it reaches,
since a model is usually compiled from somewhere out of sight, and so is every
decorator that wraps a method (``dynamic_rope_update``: its wrapper runs whenever the
model method it is put on does). A first, quick walk
over the files finds the compile calls (only files that mention ``compile`` or
``optimize`` are parsed); the second checks each file. When some files hold none of
that code, a last line says so and how to widen the scope (``--all``): "no break
candidates" is then an answer about the scope, and the line says which.

Exit status: 0 when every file was checked and nothing was found; 1 when something
was found or a file could not be checked (each such file gets one line and the
batch goes on); 2 on usage errors (bad flags, a PATH that does not exist).
"""

from __future__ import annotations

import ast
import os
import sys
import tokenize
from collections.abc import Iterator
from dataclasses import dataclass, field

from graphmend.analysis.bindings import ModuleBindings
from graphmend.analysis.entry_points import ProjectEntryPoints
from graphmend.cli.check_output import OUTPUT_FORMATS, plural
from graphmend.cli.config import (
    USAGE_ERROR_EXIT_CODE,
    ConfigError,
    OneLineErrorParser,
    Settings,
    apply_overrides,
    load_settings,
    print_warnings,
    usage_error,
)
from graphmend.rewrite.findings import Finding
from graphmend.rewrite.pipeline import ALL_RULES, MendResult, mend_module_source

PROGRAM = "graphmend check"
FOUND_EXIT_CODE = 1

# Folders that hold someone else's code or none at all.
SKIPPED_DIRECTORY_NAMES = frozenset({"__pycache__", "node_modules", "site-packages"})


class SourceError(Exception):
    """A file that cannot be read, decoded or parsed; one line, then the batch goes on."""


@dataclass
class SourceFile:
    path: str
    text: str
    encoding: str  # as tokenize.detect_encoding names it; "utf-8-sig" keeps a BOM


@dataclass
class FileReport:
    path: str
    findings: list[Finding] = field(default_factory=list)
    error: str | None = None
    result: MendResult | None = None
    source: SourceFile | None = None
    suppressed: int = 0  # findings left out for a ``# graphmend: ignore`` comment
    # Sites that are a break only once graphmend keeps an earlier value in the graph
    # (``Finding.follows``): rewritten with that value, no candidates of their own.
    follow_ons: list[Finding] = field(default_factory=list)

    def listed(self) -> list[Finding]:
        """The candidates and follow-on sites, in line order."""
        return sorted(self.findings + self.follow_ons, key=lambda f: (f.line, f.col))

    @property
    def nothing_in_scope(self) -> bool:
        """Checked with scope "entry", no code of the file was in it, and the file
        compiles nothing itself (a file that compiles only what others define, such as
        a ``main.py``, was looked at in full)."""
        entry = self.result.entry_points if self.result is not None else None
        return entry is not None and not entry.found and not entry.lines


def _is_skipped_directory(parent: str, name: str) -> bool:
    if name.startswith(".") or name in SKIPPED_DIRECTORY_NAMES:
        return True
    # A virtual environment, whatever its name.
    return os.path.isfile(os.path.join(parent, name, "pyvenv.cfg"))


def iter_python_files(path: str, on_error, excluded=lambda path: False) -> Iterator[str]:
    """``path`` itself if it is a file, else the ``*.py`` files under it, in sorted order,
    leaving out the files and folders ``excluded`` names (``exclude`` in the settings).

    Folders are listed one at a time as the walk reaches them, never all up front.
    """
    if not os.path.isdir(path):
        yield path
        return

    def report_walk_error(exc: OSError) -> None:
        on_error(exc.filename or path, f"cannot read folder: {exc.strerror}")

    for directory, subdirectories, files in os.walk(path, onerror=report_walk_error):
        subdirectories[:] = sorted(
            name for name in subdirectories
            if not _is_skipped_directory(directory, name) and not excluded(os.path.join(directory, name))
        )
        for name in sorted(files):
            file_path = os.path.normpath(os.path.join(directory, name))
            if name.endswith(".py") and not excluded(file_path):
                yield file_path


def read_source(path: str) -> SourceFile:
    """Read ``path`` as Python does: PEP 263 coding cookie or BOM, else UTF-8."""
    try:
        with open(path, "rb") as file:
            data = file.read()
    except FileNotFoundError:
        raise SourceError("no such file or directory") from None
    except IsADirectoryError:
        raise SourceError("is a directory") from None
    except OSError as exc:
        raise SourceError(f"cannot read: {exc.strerror or exc}") from None
    lines = iter(data.splitlines(keepends=True))
    try:
        encoding, _ = tokenize.detect_encoding(lambda: next(lines, b""))
    except SyntaxError as exc:
        # Also raised for bytes that are not UTF-8 in the first two lines, with no cookie.
        encoding = "utf-8"
        if "invalid or missing encoding declaration" not in str(exc):
            raise SourceError(f"cannot decode: {exc.msg}") from None  # an unknown codec
    try:
        text = data.decode(encoding)
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        shown = encoding.replace("-sig", "").upper()
        raise SourceError(
            f"cannot decode: not valid {shown} (byte 0x{data[exc.start]:02x} on line {line})"
        ) from None
    return SourceFile(path, text, encoding)


def module_name_for(path: str) -> tuple[str | None, bool]:
    """``(dotted module name, is_package)`` for a file inside a package, as import names it.

    The package is found by walking up the folders that hold an ``__init__.py``, so
    ``.../transformers/models/t5/modeling_t5.py`` is ``transformers.models.t5.modeling_t5``
    and its relative imports (``from ...utils import logging``) resolve as they do
    when ``graphmend run --package`` rewrites it on import. A file outside any package
    gets ``None``: it can have no relative imports.
    """
    absolute = os.path.abspath(path)
    folder, name = os.path.split(absolute)
    stem, extension = os.path.splitext(name)
    is_package = name == "__init__.py"
    if extension != ".py" or not os.path.isfile(os.path.join(folder, "__init__.py")):
        return None, False
    parts = [] if is_package else [stem]
    while os.path.isfile(os.path.join(folder, "__init__.py")):
        folder, package = os.path.split(folder)
        if not package.isidentifier():
            return None, False
        parts.append(package)
    if not parts or not all(part.isidentifier() for part in parts):
        return None, False
    return ".".join(reversed(parts)), is_package


def import_name_for(path: str) -> tuple[str | None, bool]:
    """The name other files import ``path`` by: its package's dotted name, else (a file
    outside any package, found through its folder on ``sys.path``) its stem."""
    module_name, is_package = module_name_for(path)
    if module_name is None:
        stem, extension = os.path.splitext(os.path.basename(path))
        if extension == ".py" and stem.isidentifier():
            return stem, False
    return module_name, is_package


# Files that cannot compile anything are not parsed by the first walk.
_COMPILATION_WORDS = (b"compile", b"optimize")


def collect_project_entry_points(paths: list[str], excluded=lambda path: False) -> ProjectEntryPoints:
    """The first walk: compile calls and compiling helpers in every file given.

    Problems are ignored here: the second walk reports each file's own.
    """
    project = ProjectEntryPoints()
    candidates: list[tuple[str, str | None]] = []
    for path in paths:
        if not os.path.exists(path):
            continue
        for file_path in iter_python_files(path, lambda *_: None, excluded):
            parsed = _parse_if_it_may_compile(file_path)
            if parsed is None:
                continue
            tree, bindings, import_name = parsed
            project.add_module(import_name, tree, bindings)
            candidates.append((file_path, import_name))
    if project.helpers:
        for file_path, _ in candidates:
            parsed = _parse_if_it_may_compile(file_path)
            if parsed is not None:
                project.add_calls_to_helpers(parsed[0], parsed[1])
    return project


def _parse_if_it_may_compile(path: str):
    try:
        with open(path, "rb") as file:
            data = file.read()
        if not any(word in data for word in _COMPILATION_WORDS):
            return None
        text = read_source(path).text
        module_name, is_package = module_name_for(path)
        import_name, _ = import_name_for(path)
        tree = ast.parse(text, filename=path)
        return tree, ModuleBindings(tree, module_name, is_package), import_name
    except (OSError, SourceError, SyntaxError, ValueError, RecursionError):
        return None


def mend_file(
    path: str, settings: Settings, scope: str | None = None, project: ProjectEntryPoints | None = None,
    output_calls_in_place: bool = False,
) -> FileReport:
    """Read and analyse one file; every problem becomes ``FileReport.error``, never a raise.

    ``project``: entry points found across the files being checked (scope "entry").
    ``output_calls_in_place``: the form ``graphmend fix`` writes (``mend_module_source``).
    """
    report = FileReport(path)
    try:
        report.source = read_source(path)
        module_name, is_package = module_name_for(path)
        import_name, _ = import_name_for(path)
        report.result = mend_module_source(
            report.source.text,
            filename=path,
            module_name=module_name,
            is_package=is_package,
            rules=settings.rules,
            scope=scope or settings.scope,
            compiled_elsewhere=project.compiled_in(import_name) if project else (),
            known_helpers=project.helpers if project else None,
            output_calls_in_place=output_calls_in_place,
        )
    except SourceError as exc:
        report.error = str(exc)
    except SyntaxError as exc:
        where = f" (line {exc.lineno})" if exc.lineno else ""
        report.error = f"cannot parse: {exc.msg}{where}"
    except ValueError as exc:  # e.g. null bytes, which some Python versions reject this way
        report.error = f"cannot parse: {exc}"
    except RecursionError:
        report.error = "cannot parse: too deeply nested for graphmend's analysis"
    except Exception as exc:  # noqa: BLE001 - one file's failure must not stop the batch
        report.error = (
            f"graphmend failed on this file ({type(exc).__name__}: {exc}); please report it"
        )
    else:
        reported = [f for f in report.result.findings if settings.reports(f.category)]
        shown = [f for f in reported if not f.suppressed]
        report.suppressed = len(reported) - len(shown)
        report.findings = [f for f in shown if f.follows is None]
        report.follow_ons = [f for f in shown if f.follows is not None]
    return report


@dataclass
class Summary:
    files_checked: int = 0
    files_with_findings: int = 0
    break_candidates: int = 0
    fixable: int = 0
    declined: int = 0
    not_fixable: int = 0
    errors: int = 0
    missing_paths: int = 0
    scope: str = "entry"
    files_without_compiled_code: int = 0
    suppressed: int = 0
    follow_ons: int = 0
    # Fixable under eager and aot_eager only (``Finding.caveat``).
    fixable_in_order_only: int = 0

    def add(self, report: FileReport) -> None:
        if report.error is not None:
            self.errors += 1
            return
        self.files_checked += 1
        if report.nothing_in_scope:
            self.files_without_compiled_code += 1
        self.suppressed += report.suppressed
        self.follow_ons += len(report.follow_ons)
        if report.findings:
            self.files_with_findings += 1
        for finding in report.findings:
            self.break_candidates += 1
            if finding.fixed:
                self.fixable += 1
                self.fixable_in_order_only += finding.caveat is not None
            elif finding.rule:
                self.declined += 1
            else:
                self.not_fixable += 1

    def nothing_to_check(self) -> bool:
        """Whether every path given was missing, so no file was read."""
        return self.files_checked == 0 and self.missing_paths > 0 and not self.errors

    def line(self) -> str:
        files = plural(self.files_checked, "file")
        if self.break_candidates:
            parts = [f"{self.fixable} fixable"]
            if self.fixable_in_order_only:
                parts[0] += f", {self.fixable_in_order_only} of them only under eager or aot_eager"
            if self.declined:
                parts.append(f"{self.declined} declined")
            parts.append(f"{self.not_fixable} not fixable")
            text = (
                f"Found {plural(self.break_candidates, 'break candidate')} in "
                f"{plural(self.files_with_findings, 'file')} ({', '.join(parts)}); "
                f"{files} checked."
            )
        else:
            text = f"No break candidates found; {files} checked."
        if self.follow_ons:
            text += (
                f" {plural(self.follow_ons, 'follow-on site')} (a break only once graphmend keeps an "
                f"earlier value in the graph) listed too, not counted."
            )
        if self.suppressed:
            text += f" {self.suppressed} suppressed by `# graphmend: ignore` comments."
        if self.errors:
            text += f" {plural(self.errors, 'file')} could not be checked."
        return text

    def scope_line(self) -> str | None:
        """Which code was looked at, when some files had none of it: then "no break
        candidates" says nothing about them, and the user must know how to widen it."""
        if self.scope != "entry" or not self.files_without_compiled_code:
            return None
        count = self.files_without_compiled_code
        files = plural(count, "file")
        verb = "has" if count == 1 else "have"
        return (
            f"Scope: code reachable from torch.compile calls in the files given, nn.Module "
            f"classes and method decorators; {files} of those checked {verb} none of it and {'was' if count == 1 else 'were'} "
            f"not looked at. Pass the files that compile them too, or use --all to check "
            f"every function."
        )

    def as_json(self) -> dict:
        fields = dict(vars(self))
        fields.pop("missing_paths")
        return fields


def build_parser() -> OneLineErrorParser:
    parser = OneLineErrorParser(
        prog=PROGRAM,
        description="List TorchDynamo graph-break candidates and what graphmend does about each.",
    )
    parser.add_argument("paths", nargs="+", metavar="PATH", help="files or folders to check")
    add_analysis_options(parser)
    parser.add_argument(
        "--format", choices=tuple(OUTPUT_FORMATS), default="text",
        help="text (default), json, github (workflow annotations) or sarif (code scanning)",
    )
    parser.add_argument(
        "--select", metavar="CODES", help="report only these categories, e.g. DC,LC"
    )
    parser.add_argument(
        "--ignore", metavar="CODES", help="never report these categories, e.g. TI,DS"
    )
    return parser


def add_analysis_options(parser: OneLineErrorParser) -> None:
    parser.add_argument(
        "--all",
        action="store_true",
        help="look at every function, not only code reachable from torch.compile entry points",
    )
    parser.add_argument(
        "--rules", metavar="RULES", help=f"comma-separated rules (default: {','.join(ALL_RULES)})"
    )


def check_command(argv: list[str]) -> int:
    try:
        arguments = build_parser().parse_args(argv)
        settings = apply_overrides(
            load_settings(arguments.paths),
            rules=arguments.rules,
            select=arguments.select,
            ignore=arguments.ignore,
            all_functions=arguments.all,
        )
    except ConfigError as exc:
        return usage_error(PROGRAM, str(exc))
    except SystemExit as exc:  # --help
        return int(exc.code or 0)
    print_warnings(settings, PROGRAM)

    output = OUTPUT_FORMATS[arguments.format]()
    summary = Summary(scope=settings.scope)
    project = (
        collect_project_entry_points(arguments.paths, settings.excludes) if settings.scope == "entry" else None
    )

    def report_error(path: str, message: str) -> None:
        summary.errors += 1
        output.error(path, message)

    for path in arguments.paths:
        if not os.path.exists(path):
            summary.missing_paths += 1
            output.error(path, "no such file or directory")
            continue
        for file_path in iter_python_files(path, report_error, settings.excludes):
            report = mend_file(file_path, settings, project=project)
            summary.add(report)
            if report.error is not None:
                output.error(report.path, report.error)
            for finding in report.listed():
                output.finding(finding)
    output.finish(summary)
    sys.stdout.flush()
    if summary.missing_paths:
        return USAGE_ERROR_EXIT_CODE
    return FOUND_EXIT_CODE if summary.break_candidates or summary.errors else 0
