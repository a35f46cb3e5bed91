"""What one call of each of graphmend's per-call operators costs, against the same
operator defined with ``torch.library.custom_op`` (how they were defined before).

Each operator is called as a graph compiled with the ``eager`` backend calls it (the
``OpOverload`` itself), on a guard that holds, a deferred output that does nothing and a
check message that is not rendered, so the figure is the operator's own cost.

    python bench/operator_overhead.py                  # 20000 calls a round, 7 rounds

Times are medians over rounds of the mean call, in microseconds.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from graphmend.runtime import checks, output_effects, output_operands, traps
from graphmend.runtime.store import store


def _as_custom_op(name: str, schema: str, kernel, fake):
    """The same kernel as a ``torch.library.custom_op`` of a namespace of this script."""
    operator = torch.library.custom_op(f"graphmend_bench::{name}", mutates_args=(), schema=schema)(kernel)
    operator.register_fake(fake)
    return getattr(torch.ops.graphmend_bench, name).default


def _cases():
    holds = torch.tensor(True)
    effect_key = _nothing_effect()
    return [
        (
            "fail_unless",
            lambda op: op(holds, 0),
            torch.ops.graphmend.fail_unless.default,
            _as_custom_op("fail_unless", "(Tensor holds, int message) -> ()",
                          traps._fail_unless, traps._fail_unless_while_tracing),
        ),
        (
            "emit_effect",
            lambda op: op(effect_key, [holds], []),
            torch.ops.graphmend.emit_effect.default,
            _as_custom_op("emit_effect", "(int key, Tensor[] tensors, SymInt[] integers) -> ()",
                          output_effects._emit_effect, output_effects._emit_effect_while_tracing),
        ),
        (
            "check_message",
            lambda op: op(holds, 0, [holds]),
            torch.ops.graphmend.check_message.default,
            _as_custom_op("check_message", "(Tensor holds, int template, Tensor[] values) -> Tensor",
                          checks._check_message, checks._check_message_while_tracing),
        ),
    ]


def _nothing_effect() -> int:
    """The key of an effect of a kind ``output_effects.perform`` does nothing for."""
    key = -1 - len(store.output_effects)
    store.output_effects[key] = ("nothing", None, (), (None,), ((0, output_operands.TENSOR, None),), {})
    return key


def mean_call_us(call, operator, calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        call(operator)
    return (time.perf_counter() - start) / calls * 1e6


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=7)
    options = parser.parse_args(argv)
    if options.calls < 1 or options.rounds < 1:
        parser.error("--calls and --rounds must be at least 1")
    print(f"{'operator':<15}{'graphmend (us)':>16}{'custom_op (us)':>16}")
    for name, call, registered, custom in _cases():
        mean_call_us(call, registered, 1000)
        mean_call_us(call, custom, 1000)
        ours, theirs = [], []
        for _ in range(options.rounds):
            ours.append(mean_call_us(call, registered, options.calls))
            theirs.append(mean_call_us(call, custom, options.calls))
        print(f"{name:<15}{statistics.median(ours):>16.2f}{statistics.median(theirs):>16.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
