"""``graphmend explain`` on a break no rule can fix: ``.item()`` (no transformers needed)."""

from __future__ import annotations

import os
import shutil

import pytest

from graphmend.cli.config import Settings
from graphmend.cli.explain import GraphBreak, StaticView, explain_breaks

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLE = os.path.join(ROOT, "examples", "item_break.py")
ITEM_REASON = "Unsupported Tensor.item() call with capture_scalar_outputs=False"
NOT_FIXABLE = (
    "    graphmend: not fixable: the value leaves the graph; no source rewrite keeps it inside"
)

IF_ITEM = """\
import torch


@torch.compile(backend="eager")
def f(x):
    if x.sum().item() > 0:
        return x + 1
    return x - 1
"""


def _explain(path: str, line: int) -> list[str]:
    breaks = [GraphBreak(path, line, ITEM_REASON)]
    return explain_breaks(breaks, list(breaks), StaticView(Settings(), path))


def test_an_item_assignment_is_explained_as_not_fixable(tmp_path):
    script = tmp_path / "item_break.py"
    shutil.copy(EXAMPLE, script)
    line = next(
        number
        for number, text in enumerate(script.read_text().splitlines(), 1)
        if "int(x.max().item())" in text
    )
    lines = _explain(str(script), line)
    name = os.path.relpath(script)
    assert lines[1:5] == [
        f"  {name}:{line}: TI tensor.item() call",
        "      n = int(x.max().item())  # a Python int: Dynamo stops the graph here",
        f"    reason: {ITEM_REASON}",
        NOT_FIXABLE,
    ]
    assert lines[-1] == "breaks: 1 -> 1"


def test_an_item_in_a_condition_is_the_item_break_not_a_fixable_branch(tmp_path):
    """check finds a DC branch (Where declines it) and the TI call; the break is the TI."""
    script = tmp_path / "if_item.py"
    script.write_text(IF_ITEM)
    lines = _explain(str(script), 6)
    name = os.path.relpath(script)
    assert lines[1] == f"  {name}:6: TI tensor.item() call"
    assert lines[4] == NOT_FIXABLE


@pytest.mark.slow  # runs a script in two fresh interpreters
def test_the_example_script_end_to_end(cli, monkeypatch):
    """The real thing: two interpreters, Dynamo's own log (a few seconds, CPU only)."""
    pytest.importorskip("torch")
    monkeypatch.chdir(ROOT)
    outcome = cli("explain", "examples/item_break.py")
    assert outcome.code == 0, outcome.err
    lines = outcome.out.splitlines()
    assert lines[0] == "original run: 1 graph break"
    assert lines[1] == "  examples/item_break.py:13: TI tensor.item() call"
    assert lines[3].startswith(f"    reason: {ITEM_REASON}")
    # Dynamo's own hint and its page for this break type come with it.
    assert lines[4] == (
        "    hint: Set `torch._dynamo.config.capture_scalar_outputs = True` or "
        "`export TORCHDYNAMO_CAPTURE_SCALAR_OUTPUTS=1` to include these operations in the "
        "captured graph."
    )
    assert lines[5].startswith("    see: https://meta-pytorch.github.io/compile-graph-break-site/gb/")
    assert lines[6] == NOT_FIXABLE
    assert lines[-1] == "breaks: 1 -> 1"
