"""Graphs compiled over N identical calls of suite models, under a counting backend.

    python -m benchmarks.graphs_over_calls --arm graphmend --calls 10 qwen2-audio grounding-dino

A model whose first call compiles one graph may still compile more on later calls (a
guard that fails, state a rewrite created): this counts every graph TorchDynamo hands
the backend over all calls, in seconds rather than an inductor run's minutes. The
``graphmend`` arm rewrites the model's packages on import, as ``graphmend bench`` does.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import warnings


def graphs_over_calls(name: str, arm: str, calls: int) -> int:
    from benchmarks.suite import get_model

    bench_model = get_model(name)
    if arm == "graphmend":
        import graphmend.hook

        graphmend.hook.install(list(bench_model.packages))
    import torch

    from graphmend.counting import CountingBackend

    torch.manual_seed(0)
    model, example_kwargs = bench_model.build()
    model.eval()
    torch._dynamo.reset()
    backend = CountingBackend()
    compiled = torch.compile(model, backend=backend, dynamic=False)
    with torch.no_grad(), contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(calls):
            compiled(**dict(example_kwargs))
    return backend.graphs


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="+")
    parser.add_argument("--arm", choices=("original", "graphmend"), default="graphmend")
    parser.add_argument("--calls", type=int, default=10)
    arguments = parser.parse_args(argv)
    for name in arguments.models:
        graphs = graphs_over_calls(name, arguments.arm, arguments.calls)
        print(f"{name}\t{arguments.arm}\tgraphs over {arguments.calls} calls: {graphs}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
