"""Count graphs and graph breaks.

Three witnesses are taken and the largest count wins: ``graphs - 1`` under a
counting backend (misses a break before the first graph),
``torch._dynamo.utils.counters["graph_break"]`` (misses data-dependent jumps), and
TorchDynamo's own record of each break (``graphmend.dynamo_records``), which names
the user-code line, Dynamo's explanation, hints and reference.

A break count alone flatters a frame TorchDynamo gives up on (a break inside a loop
makes it skip the whole frame and run it eagerly: no graph, counted as one break).
Such frames are counted apart, and ``BreakCount.cost`` orders results by skipped
frames first, then breaks.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

import torch

from graphmend.dynamo_records import DynamoRecords, GraphBreakRecord, Recompilation, recording


@dataclass
class BreakSite:
    filename: str
    line: int
    reason: str


@dataclass
class BreakCount:
    graphs: int = 0
    reasons: dict[str, int] = field(default_factory=dict)
    sites: list[BreakSite] = field(default_factory=list)
    frames_skipped: int = 0  # frames TorchDynamo started and then ran eagerly, uncompiled
    records: list[GraphBreakRecord] = field(default_factory=list)
    recompilations: list[Recompilation] = field(default_factory=list)

    @property
    def cost(self) -> tuple[int, int]:
        """Compare two counts with this: a frame run wholly eagerly is worse than any
        number of breaks in frames that compiled."""
        return (self.frames_skipped, self.breaks)

    @property
    def counted_breaks(self) -> int:
        return sum(self.reasons.values())

    @property
    def breaks(self) -> int:
        return max(self.graphs - 1, self.counted_breaks, len(self.sites), 0)


class CountingBackend:
    """A ``torch.compile`` backend that counts the graphs it is given and runs them as is."""

    # It runs each graph's ops in the graph's order, on the real tensors, as traced
    # (see graphmend.runtime.backends).
    keeps_graph_order = True
    runs_the_graph_as_written = True

    def __init__(self) -> None:
        self.graphs = 0

    def __call__(self, graph_module, example_inputs):
        self.graphs += 1
        return graph_module.forward


@contextlib.contextmanager
def recording_graph_breaks():
    """Record TorchDynamo's graph breaks, graphs and recompilations while the block runs
    (yields ``DynamoRecords``). The records are read as data through
    ``graphmend.dynamo_records``; no Dynamo log artifact is turned on, and nothing here
    reads the text Dynamo logs."""
    with recording() as records:
        yield records


def count_breaks(function, *args, fullgraph: bool = False, **kwargs):
    """Compile ``function`` fresh, call it once, and return (result, BreakCount)."""
    from graphmend.torch_adapter import graph_break_counters, reset_dynamo

    reset_dynamo()
    graph_break_counters().clear()
    backend = CountingBackend()
    compiled = torch.compile(function, backend=backend, dynamic=False, fullgraph=fullgraph)
    with recording_graph_breaks() as records:
        result = compiled(*args, **kwargs)
    return result, break_count_so_far(backend, records)


def break_count_so_far(backend: CountingBackend, records: DynamoRecords) -> BreakCount:
    """What ``backend``, TorchDynamo's counters and its ``records`` have seen since the
    counters were cleared and recording began."""
    from graphmend.torch_adapter import graph_break_counters

    counters = graph_break_counters()

    sites = []
    for record in records.breaks:
        frame = record.frame
        file, line = (frame.file, frame.line) if frame else ("", 0)
        sites.append(BreakSite(file, line, record.headline))
    return BreakCount(
        graphs=backend.graphs,
        reasons=dict(counters["graph_break"]),
        sites=sites,
        frames_skipped=records.frames_skipped,
        records=list(records.breaks),
        recompilations=list(records.recompilations),
    )
