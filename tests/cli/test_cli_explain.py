"""``graphmend explain``: reading Dynamo's break log, classifying, and one real run."""

from __future__ import annotations

import importlib.util
import os

import pytest

from graphmend.cli.config import Settings
from graphmend.cli.explain import (
    GraphBreak,
    StaticView,
    category_from_reason,
    explain_breaks,
    parse_break_record,
    split_script_arguments,
)

# Found as explain finds it: the parent process need not import torch.
TORCH_DIRECTORY = importlib.util.find_spec("torch").submodule_search_locations[0]
TORCH_FILE = os.path.join(TORCH_DIRECTORY, "nn", "modules", "module.py")

# As torch 2.13 logs it, cut down; the innermost frame is inside torch.
FULL_RECORD = f'''\
Graph break in user code at {TORCH_FILE}:1775
Graph Break Reason: Encountered graph break when attempting to trace CALL: a function call, e.g. f(x, y):

Failed to trace builtin operator
  Explanation: Dynamo does not know how to trace builtin operator `print` with argument types ['str'] (has_kwargs False)
  Hint: Avoid calling builtin `print` with argument types ['str'].

User code traceback:
  File "<frozen runpy>", line 88, in _run_code
  File "/work/user/train.py", line 13, in <module>
    g(torch.randn(4))
  File "/work/user/model.py", line 4, in forward
    print("step")
  File "{TORCH_FILE}", line 1775, in _call_impl
    return forward_call(*args, **kwargs)
'''

DUPLICATE_RECORD = """\
Graph break (user stack suppressed due to duplicate graph break) in user code at /work/user/model.py:5
Graph Break Reason: Data-dependent branching
  Explanation: Detected data-dependent branching (e.g. `if my_tensor.sum() > 0:`)."""


def test_innermost_user_frame_and_reason():
    graph_break = parse_break_record(FULL_RECORD)
    assert graph_break.location == ("/work/user/model.py", 4)
    assert graph_break.reason == "Failed to trace builtin operator"
    assert graph_break.explanation.startswith("Dynamo does not know how to trace builtin operator")


def test_a_duplicate_break_without_its_stack_still_counts():
    graph_break = parse_break_record(DUPLICATE_RECORD)
    assert graph_break.location == ("/work/user/model.py", 5)
    assert graph_break.reason == "Data-dependent branching"


def test_records_that_are_not_breaks_are_skipped():
    assert parse_break_record("Restarting analysis due to ...") is None
    assert parse_break_record("") is None


@pytest.mark.parametrize(
    "reason, category",
    [
        ("Data-dependent branching: Detected data-dependent branching", "DC"),
        ("Failed to trace builtin operator: ... builtin operator `print` ...", "LC"),
        ("Unsupported Tensor.item() call with capture_scalar_outputs=False", "TI"),
        ("Dynamic shape operator: aten.nonzero.default", "DS"),
        ("Data dependent operator: aten._local_scalar_dense", "DO"),
        ("Unsupported context manager", "other"),
    ],
)
def test_category_from_the_reason(reason, category):
    assert category_from_reason(reason) == category


@pytest.mark.parametrize(
    "argv, ours, theirs",
    [
        (["-p", "lib", "s.py", "--flag", "-p"], ["-p", "lib", "s.py"], ["--flag", "-p"]),
        (["--rules=where", "s.py"], ["--rules=where", "s.py"], []),
        (["--", "-s.py", "x"], ["--", "-s.py"], ["x"]),
    ],
)
def test_the_script_arguments_are_the_scripts(argv, ours, theirs):
    assert split_script_arguments(argv) == (ours, theirs)


SCRIPT = """\
import torch
items = []


@torch.compile(backend="eager")
def step(x):
    print("step")
    if x.sum() > 0:
        y = x + 1
    else:
        y = x - 1
    if x.mean() > 0:
        items.append(x)
    return y * y.sum().item()


def helper(x):
    if x.sum() > 0:
        x = x + 1
    return x
"""


def test_each_original_break_is_explained(tmp_path):
    script = tmp_path / "script.py"
    script.write_text(SCRIPT)
    path = str(script)
    original = [
        GraphBreak(path, 7, "Failed to trace builtin operator", "builtin operator `print`"),
        GraphBreak(path, 8, "Data-dependent branching"),
        GraphBreak(path, 12, "Data-dependent branching"),
        GraphBreak(path, 12, "Data-dependent branching"),
        GraphBreak(path, 14, "Unsupported Tensor.item() call with capture_scalar_outputs=False"),
        GraphBreak(path, 18, "Data-dependent branching"),
        GraphBreak(path, 20, "Unsupported context manager"),
    ]
    mended = [
        GraphBreak(path, 8, "Data-dependent branching"),
        GraphBreak(path, 12, "Data-dependent branching"),
        GraphBreak(path, 14, "Unsupported Tensor.item() call with capture_scalar_outputs=False"),
        GraphBreak(path, 30, "Something new"),
    ]
    lines = explain_breaks(original, mended, StaticView(Settings(), path))
    text = "\n".join(lines)
    name = os.path.relpath(path)
    assert lines[0] == "original run: 7 graph breaks"
    assert f'  {name}:7: LC print/logging/warnings call\n      print("step")\n' in text
    assert "    graphmend: fixed by Defer\n" in text
    assert f"  {name}:8: DC data-dependent control flow\n" in text
    assert "    graphmend: rewritten by Where, but the mended run still breaks here\n" in text
    assert f"  {name}:12: DC data-dependent control flow (x2)\n" in text
    assert "    graphmend: Where declined: line 13: the call `items.append` is not known to be free" in text
    assert f"  {name}:14: TI tensor.item() call\n" in text
    assert "    graphmend: not fixable: the value leaves the graph" in text
    # helper() is outside the compiled scope, and Where would decline it anyway (it
    # rebinds its parameter, which the caller may still hold).
    assert "    graphmend: Where declined: `x` holds an object that existed before the branch" in text
    assert f"  {name}:20: other unclassified\n      return x\n" in text
    assert "    graphmend: no graphmend rule covers this line" in text
    assert lines[-3:] == [
        "new in the mended run: 1 graph break",
        f"  {name}:30: Something new",
        "breaks: 7 -> 4",
    ]


def test_a_missing_script_is_a_usage_error(cli):
    result = cli("explain", "missing.py")
    assert result.code == 2
    assert result.err == "graphmend explain: error: can't open file 'missing.py': no such file\n"


def test_a_script_named_like_an_option_comes_after_a_double_dash(cli):
    result = cli("explain", "--", "-missing.py")
    assert result.code == 2
    assert result.err == "graphmend explain: error: can't open file '-missing.py': no such file\n"


RUN_SCRIPT = """\
import sys
import torch
import mylib


@torch.compile(backend="eager")
def step(x):
    print("step")
    if x.sum() > 0:
        y = x + 1
    else:
        y = x - 1
    y = mylib.scale(y)
    return y * y.sum().item()


step(torch.ones(3))
print("the script's own error output", file=sys.stderr)
sys.exit(3 if sys.argv[1:] == ["--flag", "x"] else 4)
"""


def test_explain_runs_the_script_both_ways(cli, write):
    """One real run (two interpreters, at once): breaks before the first graph count too."""
    write("script.py", RUN_SCRIPT)
    write("mylib/__init__.py", 'def scale(x):\n    print("scaling")\n    return x * 2\n')
    result = cli("explain", "--package", "mylib", "script.py", "--flag", "x")
    assert result.code == 1  # the script itself failed
    assert result.err.splitlines() == [
        "graphmend explain: the original run exited with status 3",
        "  the script's own error output",
        "graphmend explain: the mended run exited with status 3",
        "  the script's own error output",
    ]
    lines = result.out.splitlines()
    assert lines[0].startswith("original run: ")
    assert lines[1:5] == [
        "  script.py:8: LC print/logging/warnings call",
        '      print("step")',
        (
            "    reason: Failed to trace builtin operator: Dynamo does not know how to trace "
            "builtin operator `print` with argument types ['str'] (has_kwargs False)"
        ),
        "    graphmend: fixed by Defer",
    ]
    assert "  script.py:9: DC data-dependent control flow" in lines
    assert "    graphmend: fixed by Where" in lines
    package_break = next(i for i, line in enumerate(lines) if line.startswith("  mylib"))
    assert lines[package_break].startswith(
        f"  {os.path.join('mylib', '__init__.py')}:2: LC print/logging/warnings call"
    )
    assert lines[package_break + 3] == "    graphmend: fixed by Defer"
    assert "  script.py:14: TI tensor.item() call" in lines
    breaks = int(lines[0].split()[2])
    assert breaks >= 4
    assert lines[-1] == f"breaks: {breaks} -> 1"
