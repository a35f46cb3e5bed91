"""transformers 4.52.4's Phi-3 with LongRoPE over calls that switch its rotary buffers
(tests/programs/phi3_longrope_calls.py), plainly and under ``graphmend run``: mended, one
graph and no break over 10 calls, bit-identical logits, and after every call the same
objects in ``inv_freq`` and ``long_inv_freq`` as an eager twin."""

import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).parent.parent
PROGRAM = pathlib.Path(__file__).parent / "programs" / "phi3_longrope_calls.py"


def run(*arguments: str) -> str:
    completed = subprocess.run(
        [sys.executable, *arguments], capture_output=True, text=True, timeout=600, cwd=ROOT, env=dict(os.environ)
    )
    assert completed.returncode == 0, completed.stderr[-2000:]
    return completed.stdout.splitlines()[-1]


@pytest.mark.slow  # two fresh interpreters per backend; needs transformers
@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_phi3_longrope_one_graph_over_calls_switching_buffers(backend):
    pytest.importorskip("transformers")
    plain = run(str(PROGRAM), backend)
    mended = run("-m", "graphmend", "run", "--package", "transformers", str(PROGRAM), backend, "--fullgraph")
    assert "graph breaks 0" not in plain and "bit-identical True; same objects True" in plain
    assert mended == f"{backend}: graphs 1, graph breaks 0 over 10 calls; bit-identical True; same objects True"
