"""Count graphs and graph breaks.

Three witnesses are taken and the largest count wins: ``graphs - 1`` under a
counting backend (misses a break before the first graph),
``torch._dynamo.utils.counters["graph_break"]`` (misses data-dependent jumps), and
TorchDynamo's own ``graph_breaks`` log records, one per break, each naming the
user-code line.

A break count alone flatters a frame TorchDynamo gives up on (a break inside a loop
makes it skip the whole frame and run it eagerly: no graph, counted as one break).
Such frames are counted apart, and ``BreakCount.cost`` orders results by skipped
frames first, then breaks.
"""

from __future__ import annotations

import contextlib
import logging
import re
from dataclasses import dataclass, field

import torch

# Repeats read "Graph break (user stack suppressed due to duplicate graph break) in ...".
_BREAK_RECORD = re.compile(
    r"Graph break(?: \([^)]*\))? in user code at (?P<file>.*?):(?P<line>\d+)\s*\n"
    r"Graph Break Reason: (?P<reason>.*)",
    re.S,
)


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

    def __init__(self) -> None:
        self.graphs = 0

    def __call__(self, graph_module, example_inputs):
        self.graphs += 1
        return graph_module.forward


class _BreakRecords(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.sites: list[BreakSite] = []

    def emit(self, record: logging.LogRecord) -> None:
        match = _BREAK_RECORD.search(record.getMessage())
        if match:
            reason = match.group("reason").strip().splitlines()[0] if match.group("reason").strip() else ""
            self.sites.append(BreakSite(match.group("file"), int(match.group("line")), reason))


@contextlib.contextmanager
def recording_graph_breaks():
    """Collect TorchDynamo's graph-break records without printing them."""
    handler = _BreakRecords()
    dynamo_logger = logging.getLogger("torch._dynamo")
    saved_propagate = dynamo_logger.propagate
    torch._logging.set_logs(graph_breaks=True)
    saved_handlers = dynamo_logger.handlers[:]
    dynamo_logger.handlers = [handler]
    dynamo_logger.propagate = False
    try:
        yield handler.sites
    finally:
        dynamo_logger.handlers = saved_handlers
        dynamo_logger.propagate = saved_propagate
        torch._logging.set_logs()


def count_breaks(function, *args, fullgraph: bool = False, **kwargs):
    """Compile ``function`` fresh, call it once, and return (result, BreakCount)."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    backend = CountingBackend()
    compiled = torch.compile(function, backend=backend, dynamic=False, fullgraph=fullgraph)
    with recording_graph_breaks() as sites:
        result = compiled(*args, **kwargs)
    return result, break_count_so_far(backend, sites)


def break_count_so_far(backend: CountingBackend, sites: list[BreakSite]) -> BreakCount:
    """What ``backend``, TorchDynamo's counters and the recorded ``sites`` have seen since
    the counters were cleared."""
    from torch._dynamo.utils import counters

    return BreakCount(
        backend.graphs, dict(counters["graph_break"]), list(sites), frames_skipped_so_far()
    )


def frames_skipped_so_far() -> int:
    """Frames TorchDynamo gave up on because of a graph break (one inside a loop) and ran
    wholly eagerly, since its counters were cleared. Frames it skips for other reasons
    (nothing to compile, skip-listed files) are not counted: they lose nothing."""
    from torch._dynamo.utils import counters

    return sum(
        count
        for reason, count in counters["unimplemented"].items()
        if "frame skipped:" in reason or "Skipping the frame" in reason
    )
