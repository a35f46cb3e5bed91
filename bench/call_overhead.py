"""What graphmend's compile boundary adds to each call of a compiled model.

graphmend adds a hook to the TorchDynamo context of what ``torch.compile`` returns,
run when each compiled call ends (``runtime.compiled_calls``): it gives a failed
lowered guard's exception the user's frames, and maps a RuntimeError of a graph
compiled without ``graphmend::fail_unless`` back to the user's exception.
This times two compiled objects of one model, without and with that hook, alternating
in rounds so that drift hits both, and prints the difference per call.

    python bench/call_overhead.py                     # a small MLP, backend="eager"
    python bench/call_overhead.py --backend inductor --calls 2000 --rounds 7

Times are medians over rounds of the mean call, in microseconds.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from graphmend.runtime.compiled_calls import has_boundary, install_boundary


def build(width: int) -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(width, width), torch.nn.GELU(), torch.nn.Linear(width, width)
    ).eval()


def mean_call_seconds(call, argument, calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        call(argument)
    return (time.perf_counter() - start) / calls


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="eager")
    parser.add_argument("--calls", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--width", type=int, default=32)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    model = build(args.width)
    # torch._dynamo's own torch.compile, not graphmend's patched one
    compiled = torch._dynamo.optimize(args.backend)(model)
    wrapped = install_boundary(torch._dynamo.optimize(args.backend)(model))
    assert has_boundary(wrapped) and not has_boundary(compiled)
    argument = torch.randn(4, args.width)

    with torch.no_grad():
        for call in (compiled, wrapped):
            mean_call_seconds(call, argument, 50)  # compile and warm up
        direct, through = [], []
        for _ in range(args.rounds):
            direct.append(mean_call_seconds(compiled, argument, args.calls))
            through.append(mean_call_seconds(wrapped, argument, args.calls))
    plain, boundary = statistics.median(direct) * 1e6, statistics.median(through) * 1e6
    print(f"backend={args.backend} calls={args.calls} rounds={args.rounds}")
    print(f"compiled call, direct:            {plain:8.2f} us")
    print(f"compiled call, graphmend boundary: {boundary:8.2f} us")
    print(f"added per call:                    {boundary - plain:8.2f} us")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
