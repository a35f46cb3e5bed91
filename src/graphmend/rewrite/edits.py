"""Text changes a rule plans, for ``graphmend fix`` to write into the file."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class CalleeEdit:
    """Replace the text of ``line`` from ``start`` to ``end`` (0-based UTF-8 byte columns,
    as ``ast`` counts them) with ``before + <that text> + after``, or with ``replacement``
    when one is given: Defer's output calls as ``graphmend fix`` writes them."""

    line: int
    start: int
    end: int
    replacement: str | None = None
    before: str = ""
    after: str = ""
