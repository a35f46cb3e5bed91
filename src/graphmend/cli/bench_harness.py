"""Find the benchmark harness for ``graphmend bench``; it is not installed with graphmend.

The harness (the model suite, the worker processes, the reports and the paper's table)
is the top-level ``benchmarks`` package of graphmend's repository, run from a checkout.
``graphmend bench`` finds it, in this order, where ``benchmarks`` is already importable
(the checkout is on ``sys.path``, e.g. through ``PYTHONPATH``), in the checkout whose
``src`` graphmend itself was imported from (an editable install), or in the current
directory.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable, Iterable
from pathlib import Path

import graphmend

HARNESS_PACKAGE = "benchmarks"
# Files that tell graphmend's harness apart from any other package named ``benchmarks``.
HARNESS_FILES = ("__init__.py", "cli.py", "suite.py", "worker.py", "paper.py")
NOT_FOUND = (
    "graphmend bench: the benchmark harness is not installed with graphmend; run it from a "
    "checkout of graphmend's repository (its benchmarks/ folder), or put a checkout on PYTHONPATH"
)

BenchCommand = Callable[[list[str]], int]


def is_harness(folder: Path) -> bool:
    """Whether ``folder`` is graphmend's ``benchmarks`` package."""
    return all((folder / name).is_file() for name in HARNESS_FILES)


def _importable_root() -> Path | None:
    """The folder on ``sys.path`` that holds the harness, if ``benchmarks`` is importable."""
    try:
        spec = importlib.util.find_spec(HARNESS_PACKAGE)
    except (ImportError, ValueError):
        return None
    if spec is None or spec.origin is None:
        return None
    package = Path(spec.origin).parent
    return package.parent if is_harness(package) else None


def _checkout_roots() -> Iterable[Path]:
    # graphmend imported from CHECKOUT/src/graphmend: an editable install or PYTHONPATH=src.
    yield Path(graphmend.__file__).resolve().parents[2]
    yield Path.cwd()


def harness_root() -> Path | None:
    """The folder that holds graphmend's ``benchmarks`` package, or None when none is found."""
    importable = _importable_root()
    if importable is not None:
        return importable
    return next((root for root in _checkout_roots() if is_harness(root / HARNESS_PACKAGE)), None)


def find_bench_command() -> BenchCommand | None:
    """The harness's ``bench_command``, its checkout put on ``sys.path``; None if not found."""
    root = harness_root()
    if root is None:
        return None
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    from benchmarks.cli import bench_command

    return bench_command
