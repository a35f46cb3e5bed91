"""Inline suppressions: ``# graphmend: ignore`` or ``# graphmend: ignore[LC,DC]``.

A comment on any line of a statement (for an ``if``, ``while`` or ``assert``, the lines
of its header) makes graphmend leave that statement as it is, for every category or for
the ones named: no rule rewrites it, wherever graphmend runs (``run``, the import hook,
``mend``, ``fix``), and ``check`` does not report it. Comments are found with
``tokenize``, so the text inside a string never counts.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize

_COMMENT = re.compile(r"#\s*graphmend:\s*ignore(?:\[(?P<codes>[^\]]*)\])?", re.IGNORECASE)
ALL = None


def suppressions_in(source: str) -> dict[int, frozenset[str] | None]:
    """Line -> the category codes suppressed there (``ALL``: every category)."""
    found: dict[int, frozenset[str] | None] = {}
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return found
    for token in tokens:
        if token.type != tokenize.COMMENT:
            continue
        match = _COMMENT.search(token.string)
        if match is None:
            continue
        line = token.start[0]
        codes = match.group("codes")
        if codes is None or found.get(line, frozenset()) is ALL:
            found[line] = ALL
        else:
            named = frozenset(code.strip().upper() for code in codes.split(",") if code.strip())
            found[line] = (found.get(line) or frozenset()) | named
    return found


def statement_lines(node: ast.AST) -> range:
    """The lines a suppression comment for ``node`` may sit on."""
    last = getattr(node, "end_lineno", None) or node.lineno
    if isinstance(node, (ast.If, ast.While, ast.Assert)):
        last = getattr(node.test, "end_lineno", None) or node.lineno
    return range(node.lineno, last + 1)


def is_suppressed(suppressions: dict[int, frozenset[str] | None], node: ast.AST, category: str) -> bool:
    for line in statement_lines(node):
        if line in suppressions:
            codes = suppressions[line]
            if codes is ALL or category in codes:
                return True
    return False
