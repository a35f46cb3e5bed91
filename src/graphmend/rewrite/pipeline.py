"""Run the rules over a module, in the paper's order: Trap, then Where, then Defer."""

from __future__ import annotations

import ast
from collections.abc import Sequence
from dataclasses import dataclass, field

from graphmend.rewrite.findings import Finding

ALL_RULES = ("trap", "where", "defer")
SCOPES = ("entry", "all")


@dataclass
class MendResult:
    source: str
    changed: bool
    findings: list[Finding] = field(default_factory=list)


def mend_module_source(
    source: str,
    *,
    filename: str = "<string>",
    module_name: str | None = None,
    rules: Sequence[str] = ALL_RULES,
    scope: str = "entry",
) -> MendResult:
    """Rewrite one module's source. Raises SyntaxError for text that does not parse."""
    ast.parse(source, filename=filename)
    return MendResult(source=source, changed=False, findings=[])
