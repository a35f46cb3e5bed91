"""Sort graph breaks into the paper's categories (DC LC VG TI DS DO, else ``other``).

The evidence is what TorchDynamo logs for each break (its ``graph_breaks`` artifact:
the reason text and the user-code site) plus the source line at that site. The
reason decides where it is specific (a logger call, ``Tensor.item()``, a dynamic-shape
or data-dependent operator); the source decides between a validation guard (a
data-dependent ``if`` whose body is a lone ``raise``, or an ``assert``) and other
data-dependent control flow.
"""

from __future__ import annotations

import ast
import functools
import linecache
import re
from collections import Counter
from dataclasses import dataclass

from benchmarks.paper import CATEGORY_ORDER

_SITE = re.compile(r"in user code at (?P<file>.+?):(?P<line>\d+)\s*$", re.MULTILINE)
_REASON = re.compile(r"Graph Break Reason: (?P<reason>.*?)(?:\nUser code traceback:|\Z)", re.DOTALL)
_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<function>.+)$')

_LOGGING_SOURCE = re.compile(
    r"\b(logger|logging|log|_logger|LOGGER)\.(warning_once|warning|warn|info|debug|error|"
    r"critical|exception|info_once|log)\(|\bwarnings\.warn\(|(^|[^\w.])print\("
)
_LOGGING_REASON = re.compile(
    r"logging\.Logger|builtin `_warnings\.warn`|warnings\.warn|`print`|builtins\.print|"
    r"function `print`",
    re.IGNORECASE,
)
_ITEM_REASON = re.compile(r"Tensor\.item\(\)|Tensor\.tolist\(\)", re.IGNORECASE)
_DYNAMIC_SHAPE_REASON = re.compile(r"dynamic shape operator|output shape depends on", re.IGNORECASE)
_DYNAMIC_SHAPE_SOURCE = re.compile(
    r"\bnonzero\(|masked_select\(|\.unique\(|torch\.unique\(|repeat_interleave\("
)
_DATA_DEPENDENT_OPERATOR_REASON = re.compile(r"data[- ]dependent operator", re.IGNORECASE)
_BRANCH_REASON = re.compile(
    r"data-dependent branching|dynamic control flow|list_richcompare_nonconst|"
    r"generic_jump",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class GraphBreak:
    """One logged graph break: where it happened and why, and its category."""

    file: str | None
    line: int | None
    reason: str
    source: str
    category: str
    duplicate: bool = False

    def to_json(self) -> dict:
        return {
            "file": self.file,
            "line": self.line,
            "reason": short_reason(self.reason),
            "source": self.source,
            "category": self.category,
            "duplicate": self.duplicate,
        }


def short_reason(reason: str) -> str:
    """The reason's headline (and its Explanation line), without debug context."""
    lines = [line.strip() for line in reason.splitlines() if line.strip()]
    if not lines:
        return ""
    head = lines[0]
    if head.startswith("Encountered graph break when attempting to trace") and len(lines) > 1:
        head = lines[1]
    explanation = next((line for line in lines if line.startswith("Explanation:")), "")
    text = f"{head} | {explanation}" if explanation and explanation not in head else head
    return text[:300]


@functools.lru_cache(maxsize=64)
def _parsed_file(path: str) -> ast.Module | None:
    try:
        with open(path, encoding="utf-8") as handle:
            return ast.parse(handle.read(), filename=path)
    except (OSError, SyntaxError, ValueError, UnicodeDecodeError):
        return None


def is_validation_guard(path: str | None, line: int | None) -> bool:
    """True when ``line`` lies in an ``assert``, or in the test of an ``if`` whose body
    is a lone ``raise`` and which has no ``else``."""
    if not path or not line:
        return False
    tree = _parsed_file(path)
    if tree is None:
        return False
    for node in ast.walk(tree):
        if isinstance(node, ast.Assert) and node.lineno <= line <= (node.end_lineno or node.lineno):
            return True
        if isinstance(node, ast.If) and node.test.lineno <= line <= (node.test.end_lineno or line):
            return len(node.body) == 1 and isinstance(node.body[0], ast.Raise) and not node.orelse
    return False


def categorize(
    reason: str, source: str = "", path: str | None = None, line: int | None = None
) -> str:
    """The paper's category of one graph break, from its reason text and source line."""
    reason = reason or ""
    source = source or ""
    if _LOGGING_REASON.search(reason) or _LOGGING_SOURCE.search(source):
        return "LC"
    if _ITEM_REASON.search(reason) or ".item()" in source and "_local_scalar_dense" in reason:
        return "TI"
    if _DYNAMIC_SHAPE_REASON.search(reason) or _DYNAMIC_SHAPE_SOURCE.search(source):
        return "DS"
    if _DATA_DEPENDENT_OPERATOR_REASON.search(reason):
        return "DO"
    if is_validation_guard(path, line):
        return "VG"
    if _BRANCH_REASON.search(reason):
        return "DC"
    return "other"


def parse_graph_break_log(message: str) -> GraphBreak | None:
    """One ``graph_breaks`` artifact message -> a GraphBreak (None if it is not one)."""
    if "Graph break" not in message and "Graph Break Reason" not in message:
        return None
    site = _SITE.search(message.split("\n", 1)[0])
    path = site.group("file") if site else None
    line = int(site.group("line")) if site else None
    match = _REASON.search(message)
    reason = match.group("reason").strip() if match else message
    source = linecache.getline(path, line).strip() if path and line else ""
    if not source and "User code traceback:" in message:
        frames = message.split("User code traceback:", 1)[1].splitlines()
        for index, text in enumerate(frames):
            frame = _FRAME.match(text)
            if frame and index + 1 < len(frames):
                path, line, source = (
                    frame.group("file"),
                    int(frame.group("line")),
                    frames[index + 1].strip(),
                )
    return GraphBreak(
        file=path,
        line=line,
        reason=reason,
        source=source,
        category=categorize(reason, source, path, line),
        duplicate="suppressed due to duplicate" in message,
    )


def count_categories(breaks) -> dict[str, int]:
    """Category -> number of breaks, in the legend's order, zero counts left out."""
    counts = Counter(item.category for item in breaks)
    return {name: counts[name] for name in CATEGORY_ORDER if counts[name]}
