"""Shared by the per-model examples: build, run eagerly, compile, count, compare."""

from __future__ import annotations

import torch

from graphmend.bench.suite import get_model
from graphmend.counting import count_breaks


def _main_output(output):
    for name in ("logits", "last_hidden_state", "pred_boxes"):
        value = getattr(output, name, None)
        if isinstance(value, torch.Tensor):
            return value
    if isinstance(output, (tuple, list)):
        return output[0]
    return output


def run_model(name: str) -> None:
    torch.manual_seed(0)
    model, inputs = get_model(name).build()
    model.eval()
    with torch.no_grad():
        eager = _main_output(model(**inputs))
        compiled_output, count = count_breaks(model, **inputs)
    identical = torch.equal(_main_output(compiled_output), eager)
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
