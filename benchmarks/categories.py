"""Count graph breaks by the paper's categories (DC LC VG TI DS DO, else ``other``).

Each break's category is decided by ``graphmend.dynamo_records.break_category``, from
Dynamo's own graph-break type and the statement at the user's site; the benchmark
counts the category strings it gives.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from benchmarks.paper import CATEGORY_ORDER


def count_categories(categories: Iterable[str]) -> dict[str, int]:
    """Category -> number of breaks, in the legend's order, zero counts left out."""
    counts = Counter(categories)
    return {name: counts[name] for name in CATEGORY_ORDER if counts[name]}
