"""``graphmend explain`` end to end: the two runs one after the other, standard input to
the first only, and recompilations with Dynamo's guard failures."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import graphmend

pytestmark = pytest.mark.slow  # runs scripts in fresh interpreters

SCRIPT = """\
import os
import sys
import time

import torch

TRACE = os.environ["EXPLAIN_TEST_TRACE"]


def note(text):
    with open(TRACE, "a", encoding="utf-8") as file:
        file.write(text + "\\n")


@torch.compile(backend="eager", dynamic=False)
def step(x):
    print("step")
    return x * 2


note("start " + repr(sys.stdin.read()))
time.sleep(0.5)  # a run started meanwhile would write between start and end
step(torch.ones(3))
step(torch.ones(4))
note("end")
"""


@pytest.fixture(scope="module")
def explain_run(tmp_path_factory):
    """One real ``graphmend explain`` (two interpreters), shared by the tests below."""
    tmp_path = tmp_path_factory.mktemp("explain_runs")
    script = tmp_path / "reads_stdin.py"
    script.write_text(SCRIPT)
    trace = tmp_path / "trace.txt"
    environment = dict(os.environ, EXPLAIN_TEST_TRACE=str(trace))
    source_root = os.path.dirname(os.path.dirname(graphmend.__file__))
    paths = [source_root, environment.get("PYTHONPATH")]
    environment["PYTHONPATH"] = os.pathsep.join(filter(None, paths))
    result = subprocess.run(
        [sys.executable, "-m", "graphmend", "explain", str(script)],
        input="hello\n",
        capture_output=True,
        text=True,
        env=environment,
        cwd=tmp_path,
        timeout=300,
    )
    return result, trace.read_text().splitlines()


def test_the_runs_follow_each_other_and_only_the_first_reads_stdin(explain_run):
    result, trace = explain_run
    assert result.returncode == 0, result.stderr
    assert trace == ["start 'hello\\n'", "end", "start ''", "end"]


def test_recompilations_are_reported_with_their_guard_failures(explain_run):
    result, _ = explain_run
    lines = result.stdout.splitlines()
    assert lines[0] == "original run: 1 graph break"
    start = lines.index("recompilations in the original run: 1")
    assert lines[start + 1].startswith("  reads_stdin.py:")
    assert " step (compilation " in lines[start + 1]  # the user's function, not Dynamo's resume
    assert lines[start + 2].startswith("    guard failed: ")
    assert "size mismatch at index 0. expected 3, actual 4" in lines[start + 2]
    assert "recompilations in the mended run: 1" in lines
    assert lines[-1] == "breaks: 1 -> 0"


def test_help_says_what_standard_input_each_run_gets(cli):
    result = cli("explain", "--help")
    assert result.code == 0
    text = " ".join(result.out.split())
    assert "one run after the other" in text
    assert "Standard input goes to the first run only" in text


TRAINING_SCRIPT = """\
import torch


@torch.compile(backend="aot_eager", dynamic=False)
def step(x):
    y = x.sin() * x
    print("step")
    return (y * x).sum()


step(torch.ones(3, requires_grad=True)).backward()
"""


def test_a_rewrite_kept_while_tracing_is_explained(tmp_path):
    """Under aot_eager, with ``x`` receiving gradient contributions before the print
    and after it, the print keeps its break (``gradient_sums_keep_their_order``):
    explain says so, with the reason the trace gave."""
    script = tmp_path / "training.py"
    script.write_text(TRAINING_SCRIPT)
    environment = dict(os.environ)
    source_root = os.path.dirname(os.path.dirname(graphmend.__file__))
    environment["PYTHONPATH"] = os.pathsep.join(filter(None, [source_root, environment.get("PYTHONPATH")]))
    result = subprocess.run(
        [sys.executable, "-m", "graphmend", "explain", str(script)],
        capture_output=True, text=True, env=environment, cwd=tmp_path, timeout=600,
    )
    assert result.returncode == 0, result.stderr
    assert (
        "rewritten by Defer; kept its break while tracing [G312 gradient_sums_keep_their_order]: "
        "the graph input `l_x_` receives gradient contributions in 2"
    ) in result.stdout
    assert "breaks: 1 -> 1" in result.stdout
