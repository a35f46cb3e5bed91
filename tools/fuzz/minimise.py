"""Shrink a program that behaves differently once mended to a small reproducer.

First whole compound statements (a line ending a header and the block under it) are
tried for removal, then delta debugging over the program's lines (Zeller's ddmin): remove chunks of lines,
halving the chunk size when no chunk can go, and keep a smaller program whenever it
still parses and still shows the same kind of difference (same mode, same observable
part). A last pass tries each remaining line alone, and, where removing a line leaves
a block empty, replaces it with ``pass``.
"""

from __future__ import annotations

import ast
import dataclasses
import re
import time
from collections.abc import Callable

from .grammar import Program
from .observe import Difference, compare

RUNTIME_CALL = re.compile(r"__graphmend__\.(\w+)")
RULE_OF_RUNTIME_FUNCTION = {
    "select": "Where",
    "defer_print": "Defer",
    "defer_log": "Defer",
    "defer_warning": "Defer",
    "capture": "Defer",
    "flush_pending_effects": "Defer",
    "assert_guard": "Trap",
    "trap_message": "Trap",
    "all_of": "Trap",
    "any_of": "Trap",
    "equal_as_tensor": "Trap",
}


def parses(source: str) -> bool:
    try:
        ast.parse(source)
    except SyntaxError:
        return False
    return True


def still_differs(program: Program, difference: Difference, **comparison) -> Callable[[str], bool]:
    """The test of ddmin: does this source still show the same kind of difference?
    ``comparison``: ``compare``'s options the difference was found with."""

    def test(source: str) -> bool:
        candidate = dataclasses.replace(program, source=source)
        try:
            report = compare(candidate, modes=(difference.mode,), calls=difference.call + 1, **comparison)
        except Exception:  # noqa: BLE001 - a candidate the harness cannot run does not reproduce
            return False
        return any(found.signature == difference.signature for found in report.differences)

    return test


def ddmin_lines(lines: list[str], test: Callable[[str], bool], deadline: float) -> list[str]:
    def source_of(candidate: list[str]) -> str:
        return "\n".join(candidate) + "\n"

    def accepts(candidate: list[str]) -> bool:
        return time.monotonic() < deadline and parses(source_of(candidate)) and test(source_of(candidate))

    # whole compound statements first (a header line and the block under it): big cuts that parse
    index = 0
    while index < len(lines) and time.monotonic() < deadline:
        depth = _indentation(lines[index])
        end = index + 1
        while end < len(lines) and _indentation(lines[end]) > depth:
            end += 1
        if end - index > 1 and accepts(lines[:index] + lines[end:]):
            lines = lines[:index] + lines[end:]
        else:
            index += 1
    granularity = 2
    while len(lines) >= 2 and time.monotonic() < deadline:
        size = max(1, len(lines) // granularity)
        reduced = False
        start = 0
        while start < len(lines):
            candidate = lines[:start] + lines[start + size:]
            if candidate and accepts(candidate):
                lines = candidate
                granularity = max(granularity - 1, 2)
                reduced = True
            else:
                start += size
        if not reduced:
            if size == 1:
                break
            granularity = min(len(lines), granularity * 2)
    # one line at a time, with ``pass`` standing in where a block would be left empty
    index = 0
    while index < len(lines) and time.monotonic() < deadline:
        line = lines[index]
        indent = line[: len(line) - len(line.lstrip())]
        for replacement in ([], [indent + "pass"]):
            candidate = lines[:index] + replacement + lines[index + 1:]
            if line.strip() != "pass" and accepts(candidate):
                lines = candidate
                break
        else:
            index += 1
            continue
        if not replacement:
            continue
        index += 1
    return lines


def minimise(program: Program, difference: Difference, budget_s: float = 120.0, **comparison) -> Program:
    """The smallest program found within the budget that still shows ``difference``'s kind."""
    lines = program.source.split("\n")
    while lines and not lines[-1].strip():
        lines.pop()
    # blank lines and comments never matter: drop them first
    lines = [line for line in lines if line.strip()]
    test = still_differs(program, difference, **comparison)
    if not test("\n".join(lines) + "\n"):
        return program
    lines = ddmin_lines(lines, test, time.monotonic() + budget_s)
    return dataclasses.replace(program, source="\n".join(lines) + "\n")


def rules_involved(mended_source: str) -> list[str]:
    """Which rules' runtime functions the mended reproducer calls."""
    calls = RUNTIME_CALL.findall(mended_source)
    return sorted({RULE_OF_RUNTIME_FUNCTION[name] for name in calls if name in RULE_OF_RUNTIME_FUNCTION})


def _indentation(line: str) -> int:
    return len(line) - len(line.lstrip())
