"""Graphs compiled over N identical calls of each suite model, original and graphmend.

A rewrite that adds a recompilation shows up here as a graph on a later call, where a
cold-start or steady-state figure could hide it (issue 18). Each model and arm runs in
a fresh interpreter, with the suite's seeded weights, in eval mode, under a backend that
counts the graphs it is given and runs them eagerly.

    python bench/graphs_over_calls.py t5,bart,phi3-longrope --calls 10   # from the checkout

Prints one JSON line per model and arm: the graphs compiled in all, and per call.
"""

from __future__ import annotations

import argparse
import sys

from arm_children import run_per_arm

_CHILD = r"""
import contextlib, copy, io, json
calls = int(sys.argv[3])
graphs = []

def counting_backend(graph_module, example_inputs):
    graphs.append(len(graph_module.graph.nodes))
    return graph_module.forward

counting_backend.runs_the_graph_as_written = True  # on the real tensors (graphmend.runtime.backends)
compiled = torch.compile(model, backend=counting_backend, dynamic=False)
per_call = []
with torch.no_grad(), contextlib.redirect_stdout(io.StringIO()):
    for _ in range(calls):
        before = len(graphs)
        compiled(**copy.deepcopy(example_kwargs))
        per_call.append(len(graphs) - before)
print(json.dumps({"arm": arm, "model": name, "graphs_total": len(graphs), "per_call": per_call}))
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", help="comma-separated suite model names")
    parser.add_argument("--calls", type=int, default=10)
    options = parser.parse_args(argv)
    failed = sum(run_per_arm(_CHILD, name, str(options.calls)) for name in options.models.split(","))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
