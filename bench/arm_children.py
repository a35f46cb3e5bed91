"""Run a child script once per arm (original, graphmend) in a fresh interpreter, from
the checkout, and print the JSON line each child prints last (or its error)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

CHECKOUT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ARMS = ("original", "graphmend")

# What every child starts with: its arm and model from argv, the model built (seeded,
# eval mode) after the graphmend arm installed the import hook for its packages; the
# child's own arguments follow in ``sys.argv[3:]``.
BUILD_IN_ARM = r"""
import sys
arm, name = sys.argv[1], sys.argv[2]
from benchmarks.suite import get_model
bench_model = get_model(name)
if arm == "graphmend":
    import graphmend.hook
    graphmend.hook.install(list(bench_model.packages))
import torch
torch.manual_seed(0)
model, example_kwargs = bench_model.build()
model.eval()
"""


def run_per_arm(child: str, model: str, *arguments: str) -> int:
    """``python -c BUILD_IN_ARM+child ARM MODEL ARGUMENTS...`` for each arm; the number
    that failed."""
    environment = dict(os.environ)
    environment["PYTHONPATH"] = os.pathsep.join(
        [CHECKOUT, os.path.join(CHECKOUT, "src"), environment.get("PYTHONPATH", "")]
    ).rstrip(os.pathsep)
    failed = 0
    for arm in ARMS:
        completed = subprocess.run(
            [sys.executable, "-c", BUILD_IN_ARM + child, arm, model, *arguments],
            capture_output=True, text=True, env=environment,
        )
        lines = [line for line in completed.stdout.splitlines() if line.startswith("{")]
        if completed.returncode != 0 or not lines:
            failed += 1
            last = (completed.stderr.strip().splitlines() or ["no output"])[-1]
            print(json.dumps({"arm": arm, "model": model, "error": last}), flush=True)
        else:
            print(lines[-1], flush=True)
    return failed
