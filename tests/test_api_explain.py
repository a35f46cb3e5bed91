"""The Python form of explain: ``graphmend.explain(fn)(*args)``."""

from __future__ import annotations

import importlib.util
import sys

import pytest
import torch

import graphmend

SOURCE = '''\
import torch


def step(x, seen):
    print("step")
    if x.sum() > 0:
        y = x + 1
    else:
        y = x - 1
    seen.append(1)
    return y * 2
'''


@pytest.fixture
def step(tmp_path):
    path = tmp_path / "explain_program.py"
    path.write_text(SOURCE)
    spec = importlib.util.spec_from_file_location("explain_program", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    yield module.step
    del sys.modules[spec.name]


def test_the_original_and_the_mended_function_are_reported(step, capsys):
    seen = []
    report = graphmend.explain(step)(torch.ones(3), seen)
    original, mended = report.original, report.mended
    # print breaks before the first graph: two breaks, two graphs
    assert (original.graphs, original.break_count) == (2, 2)
    assert (mended.graphs, mended.break_count) == (1, 0)
    assert [record.gb_type for record in original.breaks] == [
        "Failed to trace builtin operator",
        "Data-dependent branching",
    ]
    lines = [record.user_frame.line for record in original.breaks]
    assert lines == [5, 6]
    assert all(record.reference and record.hints for record in original.breaks)
    assert mended.breaks == [] and mended.recompilations == [] == original.recompilations
    assert torch.equal(original.result, mended.result)
    assert torch.equal(original.result, torch.full((3,), 4.0))
    # each call printed once, in order; each had its own copy of the arguments
    assert capsys.readouterr().out == "step\nstep\n"
    assert seen == []
    assert "original: 2 graphs, 2 breaks" in str(report)
    assert "mended: 1 graphs, 0 breaks" in str(report)


def test_only_functions_and_methods_are_explained():
    with pytest.raises(TypeError, match="a function or a method"):
        graphmend.explain(torch.nn.Linear(2, 2))
