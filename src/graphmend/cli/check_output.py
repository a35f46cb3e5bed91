"""The forms ``graphmend check`` writes its findings in (``--format``).

- ``text``: one ``path:line:col: CODE message (outcome)`` line per finding, then a summary;

A follow-on site (``Finding.follows``: a break only once graphmend keeps an earlier
value in the graph) is listed with the others, saying so, and counted apart: it is no
candidate of its own. GitHub and SARIF give it the lowest level (notice, note).
- ``json``: one document, written as findings arrive;
- ``github``: GitHub Actions workflow commands, which the runner turns into annotations
  on the pull request's lines (``::warning file=...,line=...::...``);
- ``sarif``: one SARIF 2.1.0 log, which code-scanning services (GitHub's
  ``upload-sarif``) read.

Each output gets the findings one by one (``finding``), files that could not be
checked (``error``) and the summary at the end (``finish``).
"""

from __future__ import annotations

import json
import os
import re
import sys

from graphmend import __version__
from graphmend.rewrite.findings import CATEGORY_TITLES, Finding

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def format_finding(finding: Finding) -> str:
    return f"{finding.path}:{finding.line}:{finding.col}: {finding.category} {finding.describe()}"


def finding_as_json(finding: Finding) -> dict:
    return {
        "path": finding.path,
        "line": finding.line,
        "col": finding.col,
        "code": finding.category,
        "title": CATEGORY_TITLES.get(finding.category, ""),
        "message": finding.message,
        "function": finding.function,
        "rule": finding.rule,
        "fixed": finding.fixed,
        "reason": finding.reason,
        "condition": finding.condition,
        "outcome": finding.outcome(),
        "follows": finding.follows,
        "caveat": finding.caveat,
        "while_tracing": finding.while_tracing,
    }


class TextOutput:
    def finding(self, finding: Finding) -> None:
        print(format_finding(finding), flush=False)

    def error(self, path: str, message: str) -> None:
        sys.stdout.flush()
        print(f"{path}: {message}", file=sys.stderr, flush=True)

    def finish(self, summary) -> None:
        if summary.nothing_to_check():
            return  # every path was missing: its error line says so
        print(summary.line())
        scope = summary.scope_line()
        if scope is not None:
            print(scope)


class JsonOutput:
    """One JSON document, written as the findings arrive."""

    def __init__(self) -> None:
        self.first = True
        self.errors: list[dict] = []
        sys.stdout.write('{"findings": [')

    def finding(self, finding: Finding) -> None:
        sys.stdout.write(("\n  " if self.first else ",\n  ") + json.dumps(finding_as_json(finding)))
        self.first = False

    def error(self, path: str, message: str) -> None:
        self.errors.append({"path": path, "error": message})

    def finish(self, summary) -> None:
        sys.stdout.write("\n],\n" if not self.first else "],\n")
        sys.stdout.write(f' "errors": {json.dumps(self.errors)},\n')
        sys.stdout.write(f' "summary": {json.dumps(summary.as_json())}}}\n')


def _escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


def _github_command(level: str, message: str, **properties) -> str:
    fields = ",".join(f"{name}={_escape_property(str(value))}" for name, value in properties.items())
    return f"::{level} {fields}::{_escape_data(message)}" if fields else f"::{level}::{_escape_data(message)}"


class GithubOutput:
    """Workflow commands: a break graphmend removes at run time is a notice, one it
    leaves is a warning, a file it could not check is an error. The summary is a
    plain line (the runner shows it in the log)."""

    def finding(self, finding: Finding) -> None:
        level = "notice" if finding.fixed or finding.follows else "warning"
        title = f"{finding.category} {CATEGORY_TITLES.get(finding.category, '')}".rstrip()
        print(
            _github_command(
                level, finding.describe(), file=finding.path, line=finding.line, col=finding.col, title=title
            ),
            flush=False,
        )

    def error(self, path: str, message: str) -> None:
        print(_github_command("error", message, file=path, title="graphmend could not check this file"), flush=False)

    def finish(self, summary) -> None:
        if summary.nothing_to_check():
            return  # every path was missing: its error line says so
        print(summary.line())
        scope = summary.scope_line()
        if scope is not None:
            print(scope)


def _artifact_uri(path: str) -> str:
    """A path relative to the working folder where it lies under it (code scanning
    resolves those against the checkout), else an absolute ``file://`` URI."""
    absolute = os.path.abspath(path)
    relative = os.path.relpath(absolute)
    if not relative.startswith(os.pardir):
        return relative.replace(os.sep, "/")
    return "file://" + absolute.replace(os.sep, "/")


class SarifOutput:
    """One SARIF 2.1.0 log with one run. Each category is a reporting rule (its id is
    the code ``graphmend rule CODE`` explains); each finding a result at its line and
    column, level ``note`` when graphmend removes the break at run time and ``warning``
    when it stays; files that could not be checked are tool notifications."""

    def __init__(self) -> None:
        self.results: list[dict] = []
        self.notifications: list[dict] = []

    def finding(self, finding: Finding) -> None:
        self.results.append({
            "ruleId": finding.category,
            "level": "note" if finding.fixed or finding.follows else "warning",
            **({"kind": "informational"} if finding.follows else {}),
            "message": {"text": finding.describe()},
            "locations": [{
                "physicalLocation": {
                    "artifactLocation": {"uri": _artifact_uri(finding.path)},
                    "region": {"startLine": finding.line, "startColumn": finding.col},
                },
                "logicalLocations": [{"name": finding.function, "kind": "function"}],
            }],
            "properties": {
                "rule": finding.rule, "fixed": finding.fixed, "reason": finding.reason, "condition": finding.condition,
                "follows": finding.follows,
            },
        })

    def error(self, path: str, message: str) -> None:
        self.notifications.append({
            "level": "error",
            "message": {"text": message},
            "locations": [{"physicalLocation": {"artifactLocation": {"uri": _artifact_uri(path)}}}],
        })

    def finish(self, summary) -> None:
        rules = [
            {
                "id": code,
                "name": "".join(word.capitalize() for word in re.findall(r"[A-Za-z]+", title)),
                "shortDescription": {"text": title},
                "help": {"text": f"graphmend rule {code}"},
            }
            for code, title in CATEGORY_TITLES.items()
        ]
        log = {
            "$schema": SARIF_SCHEMA,
            "version": "2.1.0",
            "runs": [{
                "tool": {"driver": {
                    "name": "graphmend", "version": __version__, "rules": rules,
                }},
                "invocations": [{
                    "executionSuccessful": not summary.errors and not summary.missing_paths,
                    "toolExecutionNotifications": self.notifications,
                }],
                "results": self.results,
                "properties": {"summary": summary.as_json()},
            }],
        }
        json.dump(log, sys.stdout, indent=1)
        sys.stdout.write("\n")


OUTPUT_FORMATS = {"text": TextOutput, "json": JsonOutput, "github": GithubOutput, "sarif": SarifOutput}
