"""``graphmend census``: find the census harness (``tools/census`` of a checkout of
graphmend's repository, not installed) and run it.

Nothing here imports torch or transformers: the harness imports them in the processes
that measure, and in the parent only when it lists transformers' model classes.
"""

from __future__ import annotations

import sys
from pathlib import Path

from graphmend.cli.bench_harness import harness_root

NOT_FOUND = (
    "graphmend census: the census harness is not installed with graphmend; run it from a "
    "checkout of graphmend's repository (its tools/census/ folder), or put a checkout on PYTHONPATH"
)


def _census_root() -> Path | None:
    """The checkout holding both ``tools/census`` and the benchmark harness it reuses."""
    root = harness_root()
    if root is not None and (root / "tools" / "census" / "cli.py").is_file():
        return root
    return None


def census_command(argv: list[str]) -> int:
    root = _census_root()
    if root is None:
        print(NOT_FOUND, file=sys.stderr)
        return 2
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    from tools.census.cli import census_command as run_census

    return run_census(argv)


# What ``graphmend --help`` says, and the handler: ``cli/main.py`` registers this pair.
