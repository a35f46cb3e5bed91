"""Shared by the per-model examples: build, run eagerly, compile, count, compare."""

from __future__ import annotations

import os
import sys

import torch

# The model suite lives in the checkout's benchmark harness (`benchmarks`), which is
# not installed with graphmend.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from benchmarks.suite import get_model, main_output
from graphmend.counting import count_breaks


def run_model(name: str) -> None:
    torch.manual_seed(0)
    model, inputs = get_model(name).build()
    model.eval()
    with torch.no_grad():
        eager = main_output(model(**inputs))
        compiled_output, count = count_breaks(model, **inputs)
    identical = torch.equal(main_output(compiled_output), eager)
    torch._dynamo.reset()
    try:
        with torch.no_grad():
            torch.compile(model, fullgraph=True, backend="eager")(**inputs)
        fullgraph = "captured"
    except Exception as error:  # noqa: BLE001 - the example reports what Dynamo said
        fullgraph = f"fails ({type(error).__name__})"
    print(f"{name}: graphs {count.graphs}, graph breaks {count.breaks}")
    for site in count.sites:
        location = site.filename.split("site-packages/")[-1]
        print(f"  break at {location}:{site.line}: {site.reason[:90]}")
    print(f"{name}: output identical to eager: {'yes' if identical else 'NO'}")
    print(f"{name}: torch.compile(fullgraph=True, backend='eager'): {fullgraph}")
