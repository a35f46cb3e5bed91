"""Count graphs and graph breaks the way the brief defines them.

``breaks`` is ``graphs - 1`` under a counting backend, cross-checked with
``torch._dynamo.utils.counters["graph_break"]``: a break before the first graph
produces no graph, so the larger of the two is taken.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class BreakCount:
    graphs: int = 0
    reasons: dict[str, int] = field(default_factory=dict)

    @property
    def counted_breaks(self) -> int:
        return sum(self.reasons.values())

    @property
    def breaks(self) -> int:
        return max(self.graphs - 1, self.counted_breaks, 0)


class CountingBackend:
    """A ``torch.compile`` backend that counts the graphs it is given and runs them as is."""

    def __init__(self) -> None:
        self.graphs = 0

    def __call__(self, graph_module, example_inputs):
        self.graphs += 1
        return graph_module.forward


def count_breaks(function, *args, fullgraph: bool = False, **kwargs):
    """Compile ``function`` fresh, call it once, and return (result, BreakCount)."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    backend = CountingBackend()
    compiled = torch.compile(function, backend=backend, dynamic=False, fullgraph=fullgraph)
    result = compiled(*args, **kwargs)
    count = BreakCount(backend.graphs, dict(counters["graph_break"]))
    return result, count
