"""``graphmend fix``: write graphmend's rewrites into the files themselves.

    graphmend fix PATH... [--diff | --write] [--rules trap,where,defer] [--all]

Only the statements a rule rewrote change, each with a comment above it saying why;
comments that were inside a rewritten statement move to their own lines above it (the
rewritten statement is generated code, with no place for them); every other byte (comments, blank lines, formatting, line endings, the encoding and
its cookie) is kept. The result is parsed again and must be, statement for statement,
what the rules planned (``MendResult.source``); a file where it is not is left alone.
Files are replaced atomically (a temporary file in the same folder, then
``os.replace``), keep their mode, and are written only when they change.

``--diff`` (the default) prints a unified diff and writes nothing. Exit status: with
``--diff``, 1 when a file would change; with ``--write``, 0 when every file was
written or needed nothing. Either way 1 when a file could not be read, parsed or
fixed, and 2 on usage errors.
"""

from __future__ import annotations

import ast
import difflib
import io
import os
import re
import stat
import sys
import tempfile
import tokenize
from dataclasses import dataclass

from graphmend.cli.check import (
    SourceFile,
    add_analysis_options,
    iter_python_files,
    mend_file,
)
from graphmend.cli.config import (
    USAGE_ERROR_EXIT_CODE,
    ConfigError,
    OneLineErrorParser,
    apply_overrides,
    load_settings,
    print_warnings,
    usage_error,
)
from graphmend.rewrite.edits import CalleeEdit
from graphmend.rewrite.findings import Finding
from graphmend.rewrite.pipeline import Edit, MendResult

PROGRAM = "graphmend fix"
CHANGED_OR_FAILED_EXIT_CODE = 1
COMMENT_PREFIX = "# graphmend: "
# PEP 263: a coding declaration on line 1 or 2 must stay there.
CODING_COOKIE = re.compile(r"^[ \t\f]*#.*?coding[:=][ \t]*[-\w.]+")
_ELIF = re.compile(r"^[ \t\f]*elif\b")


class FixError(Exception):
    """The rules' plan cannot be written into the file exactly; the file is left alone."""


def split_lines(text: str) -> list[str]:
    """Lines with their own endings (``\\n``, ``\\r\\n`` or ``\\r``), as Python counts lines."""
    return io.StringIO(text, newline="").readlines()


def _line_ending(line: str, default: str) -> str:
    for ending in ("\r\n", "\n", "\r"):
        if line.endswith(ending):
            return ending
    return default


def _indentation(line: str) -> str:
    return line[: len(line) - len(line.lstrip(" \t\f"))]


def why_comment(edit: Edit, findings: list[Finding]) -> str:
    """``# graphmend: Where removes a graph break (DC); eager path unchanged``."""
    fixed = []
    for finding in findings:
        label = f"{finding.rule} ({finding.category})"
        if (
            finding.fixed
            and edit.first_line <= finding.line <= edit.last_line
            and label not in fixed
        ):
            fixed.append(label)
    if not fixed:
        return f"{COMMENT_PREFIX}rewritten to remove a graph break; eager path unchanged"
    if len(fixed) == 1:
        rule, category = fixed[0].split(" ", 1)
        return f"{COMMENT_PREFIX}{rule} removes a graph break {category}; eager path unchanged"
    return f"{COMMENT_PREFIX}{', '.join(fixed)} remove graph breaks; eager path unchanged"


def _import_position(tree: ast.Module, lines: list[str]) -> int:
    """The 0-based line before which the runtime import goes.

    After the docstring and ``from __future__`` imports, as the pipeline puts it; at
    the top of a module without them, after a shebang or coding line (which must stay
    first) and above any comment block directly over the first statement.
    """
    body = tree.body
    index = 0
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        index = int(isinstance(body[0].value.value, str))
    while (
        index < len(body)
        and isinstance(body[index], ast.ImportFrom)
        and body[index].module == "__future__"
    ):
        index += 1
    if index:
        return body[index - 1].end_lineno
    first = body[0]
    position = min([first.lineno, *(d.lineno for d in getattr(first, "decorator_list", []))]) - 1
    while position > 0 and lines[position - 1].lstrip().startswith("#"):
        position -= 1
    while position < min(2, len(lines)) and (
        lines[position].startswith("#!") or CODING_COOKIE.match(lines[position])
    ):
        position += 1
    return position


def _splice(line: str, edit: CalleeEdit) -> str:
    """The line with the edit's columns (UTF-8 bytes, as ``ast`` counts them) changed."""
    encoded = line.encode("utf-8")
    head = encoded[: edit.start].decode("utf-8")
    middle = encoded[edit.start : edit.end].decode("utf-8")
    tail = encoded[edit.end :].decode("utf-8")
    if edit.replacement is not None:
        middle = edit.replacement
    return head + edit.before + middle + edit.after + tail


def comments_by_line(text: str) -> dict[int, list[str]]:
    """Every comment of ``text``, by the line it is on."""
    comments: dict[int, list[str]] = {}
    try:
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            if token.type == tokenize.COMMENT:
                comments.setdefault(token.start[0], []).append(token.string)
    except (tokenize.TokenError, SyntaxError):
        return {}
    return comments


def rewrite_text(source: SourceFile, result: MendResult) -> str:
    """Apply ``result.edits`` and the runtime import to the original text, keeping the rest."""
    lines = split_lines(source.text)
    comments = comments_by_line(source.text)
    default_newline = _line_ending(lines[0], "\n") if lines else "\n"
    original_tree = ast.parse(source.text, filename=source.path)
    planned = ast.parse(result.source)

    # Right to left within a line, so that each edit's columns are still the original's.
    for callee_edit in sorted(result.callee_edits, key=lambda edit: (edit.line, edit.start), reverse=True):
        lines[callee_edit.line - 1] = _splice(lines[callee_edit.line - 1], callee_edit)

    replaced_until = len(lines) + 1
    for edit in sorted(result.edits, key=lambda e: e.first_line, reverse=True):
        if not 1 <= edit.first_line <= edit.last_line < replaced_until:
            raise FixError(f"edit of lines {edit.first_line}-{edit.last_line} overlaps another")
        first = lines[edit.first_line - 1]
        indent = _indentation(first)
        newline = _line_ending(first, default_newline)
        last_newline = _line_ending(lines[edit.last_line - 1], "")
        kept = [
            comment
            for number in range(edit.first_line, edit.last_line + 1)
            for comment in comments.get(number, [])
        ]
        new_lines = [why_comment(edit, result.findings), *kept, *edit.text.splitlines()]
        statement = 1 + len(kept)
        if _ELIF.match(first) and new_lines[statement].startswith("if "):
            # The statement is an ``elif`` clause (an ``if`` alone in the ``orelse`` of
            # the one above): written as ``if`` it would end that chain.
            new_lines[statement] = "el" + new_lines[statement]
        block = newline.join(indent + line if line else line for line in new_lines) + last_newline
        lines[edit.first_line - 1 : edit.last_line] = [block]
        replaced_until = edit.first_line

    import_line = result.runtime_import
    if import_line is not None:
        position = _import_position(original_tree, split_lines("".join(lines)))
        lines = split_lines("".join(lines))
        if position and not lines[position - 1].endswith(("\n", "\r")):
            lines[position - 1] += default_newline
        lines.insert(position, import_line + default_newline)
    text = "".join(lines)
    return text + _appended_statements(text, planned, default_newline)


def _appended_statements(text: str, planned: ast.Module, newline: str) -> str:
    """Module-level statements the pipeline appended (pure-function registrations).

    They are not among ``result.edits``; they are the planned module's last statements
    when everything before them already matches.
    """
    try:
        current = ast.parse(text).body
    except SyntaxError:
        return ""  # verify() reports it
    extra = planned.body[len(current) :]
    if not extra or any(ast.dump(a) != ast.dump(b) for a, b in zip(current, planned.body)):
        return ""
    ending = "" if not text or text.endswith(("\n", "\r")) else newline
    return ending + "".join(ast.unparse(statement) + newline for statement in extra)


def verify(text: str, result: MendResult, path: str) -> None:
    """The written text must parse to exactly what the rules planned."""
    try:
        written = ast.parse(text, filename=path)
    except SyntaxError as exc:
        raise FixError(
            f"the rewritten text would not parse ({exc.msg}, line {exc.lineno})"
        ) from None
    if ast.dump(written) != ast.dump(ast.parse(result.source)):
        raise FixError("the rewritten text would differ from what the rules planned")


def write_atomically(path: str, data: bytes) -> None:
    """Replace ``path``'s contents all at once, keeping its mode; on failure leave it alone."""
    target = os.path.realpath(path)  # replace a symlink's target, not the link
    mode = stat.S_IMODE(os.stat(target).st_mode)
    directory, name = os.path.split(target)
    descriptor, temporary = tempfile.mkstemp(dir=directory, prefix=f".{name}.", suffix=".graphmend")
    try:
        with os.fdopen(descriptor, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.chmod(temporary, mode)
        os.replace(temporary, target)
    except BaseException:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        raise


def unified_diff(path: str, old: str, new: str) -> str:
    old_lines, new_lines = split_lines(old), split_lines(new)
    for lines in (old_lines, new_lines):
        if lines and not lines[-1].endswith(("\n", "\r")):
            lines[-1] += "\n\\ No newline at end of file\n"
    return "".join(difflib.unified_diff(old_lines, new_lines, f"a/{path}", f"b/{path}"))


@dataclass
class Tally:
    changed: int = 0
    unchanged: int = 0
    failed: int = 0
    missing_paths: int = 0

    def line(self, write: bool) -> str:
        verb = "rewritten" if write else "would be rewritten"
        text = f"{self.changed} {_files(self.changed)} {verb}, {self.unchanged} left unchanged"
        if self.failed:
            text += f", {self.failed} could not be fixed"
        return text + "."


def _files(count: int) -> str:
    return "file" if count == 1 else "files"


def fix_file(path: str, settings, write: bool, tally: Tally) -> None:
    report = mend_file(path, settings, output_calls_in_place=True)
    if report.error is not None:
        tally.failed += 1
        print(f"{path}: {report.error}", file=sys.stderr)
        return
    result, source = report.result, report.source
    if not result.changed:
        tally.unchanged += 1
        return
    try:
        new_text = rewrite_text(source, result)
        verify(new_text, result, path)
        data = new_text.encode(source.encoding)
    except FixError as exc:
        tally.failed += 1
        print(f"{path}: not fixed: {exc}; please report this", file=sys.stderr)
        return
    except UnicodeEncodeError as exc:
        tally.failed += 1
        print(
            f"{path}: not fixed: the rewrite cannot be encoded as {source.encoding} ({exc.reason})",
            file=sys.stderr,
        )
        return
    if new_text == source.text:
        tally.unchanged += 1
        return
    if not write:
        sys.stdout.write(unified_diff(path, source.text, new_text))
        tally.changed += 1
        return
    try:
        write_atomically(path, data)
    except OSError as exc:
        tally.failed += 1
        print(f"{path}: cannot write: {exc.strerror or exc}", file=sys.stderr)
        return
    tally.changed += 1
    fixed = sum(finding.fixed for finding in result.findings)
    print(
        f"fixed {path} ({fixed} graph-break {'candidate' if fixed == 1 else 'candidates'})",
        file=sys.stderr,
    )


def build_parser() -> OneLineErrorParser:
    parser = OneLineErrorParser(
        prog=PROGRAM,
        description="Rewrite files so their TorchDynamo graph breaks are mended.",
    )
    parser.add_argument("paths", nargs="+", metavar="PATH", help="files or folders to fix")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument(
        "--diff", action="store_true", help="print a unified diff, write nothing (default)"
    )
    mode.add_argument("--write", action="store_true", help="rewrite the files in place")
    add_analysis_options(parser)
    return parser


def fix_command(argv: list[str]) -> int:
    try:
        arguments = build_parser().parse_args(argv)
        settings = apply_overrides(
            load_settings(arguments.paths), rules=arguments.rules, all_functions=arguments.all
        )
    except ConfigError as exc:
        return usage_error(PROGRAM, str(exc))
    except SystemExit as exc:  # --help
        return int(exc.code or 0)
    print_warnings(settings, PROGRAM)

    tally = Tally()

    def report_walk_error(path: str, message: str) -> None:
        tally.failed += 1
        print(f"{path}: {message}", file=sys.stderr)

    for path in arguments.paths:
        if not os.path.exists(path):
            tally.missing_paths += 1
            print(f"{path}: no such file or directory", file=sys.stderr)
            continue
        for file_path in iter_python_files(path, report_walk_error, settings.excludes):
            fix_file(file_path, settings, arguments.write, tally)
    sys.stdout.flush()
    print(tally.line(arguments.write), file=sys.stderr)
    if tally.missing_paths:
        return USAGE_ERROR_EXIT_CODE
    if tally.failed or (tally.changed and not arguments.write):
        return CHANGED_OR_FAILED_EXIT_CODE
    return 0
