"""Test tiers: the default tier leaves out tests marked ``slow``; ``--full`` runs them too.

Slow tests build transformers models, compile with TorchInductor, run most of the
generated-program differential seeds, or start fresh interpreters; each carries
``@pytest.mark.slow`` (or its module ``pytestmark``), with the reason beside it.
``.ci/run`` runs the full tier. The many-case differential tests carry
``@pytest.mark.default_tier_stride(k)``: the default tier keeps cases 0, k, 2k, ... of
them, in collection order (k prime to the parameter lists' lengths spreads the cases over
all of them), and every rule's must-rewrite and must-not tests stay whole. The default
tier must run in under 3 minutes on 2 cores.
"""

from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--full",
        action="store_true",
        help="run the full tier: the tests marked slow as well (what .ci/run runs)",
    )


def _stride(item: pytest.Item) -> int | None:
    marker = item.get_closest_marker("default_tier_stride")
    return marker.args[0] if marker is not None and hasattr(item, "callspec") else None


@pytest.hookimpl(tryfirst=True)  # mark before -m or -k selects
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    cases_seen: dict[tuple[str, str], int] = {}
    for item in items:
        stride = _stride(item)
        if stride is not None:
            key = (str(item.path), getattr(item, "originalname", item.name))
            index = cases_seen.get(key, 0)
            cases_seen[key] = index + 1
            if index % stride:
                item.add_marker(pytest.mark.slow)
    # --full runs everything; an explicit -m expression (e.g. `-m slow`) chooses on its own.
    if config.getoption("--full") or config.getoption("markexpr"):
        return
    slow = [item for item in items if item.get_closest_marker("slow")]
    if slow:
        config.hook.pytest_deselected(items=slow)
        items[:] = [item for item in items if not item.get_closest_marker("slow")]
