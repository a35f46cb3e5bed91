"""What TorchDynamo's guards cost on every call of a mended function with output in its graph.

graphmend's runtime code (``print_in_graph``, ``log_in_graph``, ``warn_in_graph``) is
traced with the user's, so the frame's guards also check what that code read: its module
globals, the stream, the logger chain. Each case below is compiled once mended (the
output in the graph, one frame) and once without its output statement (the break-free
function a user would write by hand); the figure is the time of one check of the frame's
guards (``GuardManager.check``, the minimum over rounds) and the number of leaf guards.

    python bench/guard_cost.py [--rounds 15] [--checks 20000]
"""

from __future__ import annotations

import argparse
import io
import logging
import sys
import time
import warnings

import torch
from torch._dynamo.eval_frame import _debug_get_cache_entry_list

import graphmend

LOGGER = logging.getLogger("graphmend_guard_cost")


def _quiet(logger: logging.Logger) -> None:
    # In a function: an attribute written at module level makes Defer take ``LOGGER`` for
    # rebound, not provably a logger (graphmend check says so).
    logger.addHandler(logging.StreamHandler(io.StringIO()))
    logger.setLevel(logging.INFO)
    logger.propagate = False


_quiet(LOGGER)


def break_free(x):
    y = x * 2
    return y + 1


def with_print(x):
    y = x * 2
    print("value", y.sum())
    return y + 1


def with_print_to_stderr(x):
    y = x * 2
    print("value", y.sum(), file=sys.stderr)
    return y + 1


def with_logger_call(x):
    y = x * 2
    LOGGER.info("value %s", y.sum())
    return y + 1


def with_warning(x):
    y = x * 2
    warnings.warn("careful")  # noqa: B028 - the benchmark's program warns as user code does
    return y + 1


CASES = [
    ("break-free (no output)", break_free),
    ("print", with_print),
    ("print(file=sys.stderr)", with_print_to_stderr),
    ("logger.info", with_logger_call),
    ("warnings.warn", with_warning),
]


def leaf_guards(manager) -> int:
    return len(manager.get_leaf_guards()) + sum(leaf_guards(child) for child in manager.get_child_managers())


def guard_check(function, x, rounds: int, checks: int) -> tuple[float, int, int]:
    """(ns per check, leaf guards, graphs) of the frame ``function`` compiled to."""
    from graphmend.counting import CountingBackend

    torch._dynamo.reset()
    counter = CountingBackend()
    compiled = torch.compile(function, backend=counter, dynamic=False)
    compiled(x)
    compiled(x)
    entries = _debug_get_cache_entry_list(function.__code__)
    manager = entries[0].guard_manager
    frame_locals = {"x": x}
    assert manager.check(frame_locals), "the guards fail on the call's own locals"
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(checks):
            manager.check(frame_locals)
        best = min(best, (time.perf_counter() - start) / checks)
    return best * 1e9, leaf_guards(manager.root), counter.graphs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--checks", type=int, default=20000)
    options = parser.parse_args()
    x = torch.ones(8)
    rows = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sys.stderr, saved = io.StringIO(), sys.stderr
        sys.stdout, saved_out = io.StringIO(), sys.stdout
        try:
            for label, function in CASES:
                mended = function if function is break_free else graphmend.mend(function)
                if function is not break_free and mended is function:
                    raise SystemExit(f"graphmend did not rewrite {function.__name__}")
                rows.append((label, *guard_check(mended, x, options.rounds, options.checks)))
        finally:
            sys.stderr, sys.stdout = saved, saved_out
    print(f"torch {torch.__version__}; backend eager; min of {options.rounds} rounds of {options.checks} checks")
    print("| function | guard check per call (ns) | leaf guards | graphs over 2 calls |")
    print("|---|---|---|---|")
    for label, nanoseconds, guards, graphs in rows:
        print(f"| {label} | {nanoseconds:.0f} | {guards} | {graphs} |")


if __name__ == "__main__":
    main()
