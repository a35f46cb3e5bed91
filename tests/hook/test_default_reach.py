"""Default reach (issue 16): with no flags, ``graphmend run`` and ``graphmend.install()``
mend the user's own modules, whichever module calls ``torch.compile`` and however it
is spelled; ``-m`` runs a module as ``python -m`` does.

Each program runs twice in a fresh interpreter, under ``python`` and under ``graphmend
run``: the printed lines must be the same, and a counting backend must see one graph
and no break per compiled entry under graphmend (and breaks in the original).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from hook.hook_helpers import subprocess_environment

# The model lives in one file; nothing there names torch.compile.
MODEL = """\
import torch


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        # Inference weights, as a serving engine runs them: under autograd Where declines
        # while tracing (torch.where would give an untaken arm's inputs zero gradients).
        self.linear = torch.nn.Linear(4, 4).requires_grad_(False)

    def forward(self, x):
        y = self.linear(x)
        print("forward", tuple(y.shape))
        if y.sum() > 0:
            z = y * 2
        else:
            z = y - 1
        return torch.relu(z)


def gate(x):
    print("gate", x.shape[0])
    if x.sum() > 0:
        return x * 3
    return x + 1
"""

# A small compile utility in a third file, as training frameworks have.
HELPERS = """\
import torch


def compile_model(model, **options):
    return torch.compile(model, **options)
"""

DECORATED = """\
import torch

from counted import backend
from model import gate


@torch.compile(backend=backend)
def step(x):
    return gate(x) - 1
"""

COUNTED = """\
from graphmend.counting import CountingBackend

backend = CountingBackend()
"""

# Every spelling of compilation, each compiling code from model.py.
MAIN = """\
import json
import sys
import torch
from torch import compile as aliased_compile

import counted
from graphmend.counting import CountingBackend, break_count_so_far, recording_graph_breaks
from helpers import compile_model
from model import Model, gate


def fresh():
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    counted.backend.graphs = 0
    return counted.backend


def call(backend):
    return torch.compile(Model(), backend=backend)


def alias(backend):
    return aliased_compile(Model(), backend=backend)


def module_compile(backend):
    model = Model()
    model.compile(backend=backend)
    return model


def dynamo_optimize(backend):
    return torch._dynamo.optimize(backend)(gate)


def helper_in_another_module(backend):
    return compile_model(Model(), backend=backend)


def decorator_in_another_module(backend):
    import decorated

    return decorated.step


SPELLINGS = [call, alias, module_compile, dynamo_optimize, helper_in_another_module,
             decorator_in_another_module]
CHOSEN = sys.argv[1:]

for spelling in SPELLINGS:
    if spelling.__name__ not in CHOSEN:
        continue
    torch.manual_seed(0)
    backend = fresh()
    compiled = spelling(backend)
    x = torch.randn(3, 4)
    with recording_graph_breaks() as sites:
        first = compiled(x)
        second = compiled(-x)
    print(spelling.__name__, first.tolist(), second.tolist())
    count = break_count_so_far(backend, sites)
    print("COUNT", json.dumps({"spelling": spelling.__name__, "graphs": backend.graphs,
                               "breaks": count.breaks, "recorded": len(count.sites)}))
"""


def write_project(root: Path, files: dict[str, str]) -> None:
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")


def run(command: list[str], cwd: Path) -> subprocess.CompletedProcess:
    completed = subprocess.run(
        command,
        check=False,
        cwd=cwd,
        env=subprocess_environment(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert completed.returncode == 0, completed.stderr
    return completed


def split_output(stdout: str) -> tuple[list[str], dict[str, dict]]:
    lines, counts = [], {}
    for line in stdout.splitlines():
        if line.startswith("COUNT "):
            count = json.loads(line[len("COUNT ") :])
            counts[count.pop("spelling")] = count
        else:
            lines.append(line)
    return lines, counts


GRAPHMEND_RUN = [sys.executable, "-m", "graphmend.cli.run"]


def run_spellings(tmp_path: Path, spellings: list[str], exact_counts: bool = True):
    project = tmp_path / "project"
    write_project(
        project,
        {"model.py": MODEL, "helpers.py": HELPERS, "decorated.py": DECORATED, "counted.py": COUNTED,
         "main.py": MAIN},
    )
    original = run([sys.executable, "main.py", *spellings], project)
    mended = run([*GRAPHMEND_RUN, "--no-cache", "main.py", *spellings], project)
    assert "GraphmendWarning" not in mended.stderr
    original_lines, original_counts = split_output(original.stdout)
    mended_lines, mended_counts = split_output(mended.stdout)
    assert list(mended_counts) == spellings
    for spelling in spellings:
        assert original_counts[spelling]["recorded"] >= 1, (spelling, original_counts)
        # No graph break recorded: the model module was mended.
        assert mended_counts[spelling]["recorded"] == 0, (spelling, mended_counts)
        if exact_counts:
            assert mended_counts[spelling] == {"graphs": 1, "breaks": 0, "recorded": 0}, (spelling, mended_counts)
    return original_lines, mended_lines, mended_counts


@pytest.mark.slow  # fresh interpreters
def test_two_file_layout_every_spelling_one_graph_no_break_same_output(tmp_path):
    spellings = ["call", "alias", "module_compile", "helper_in_another_module",
                 "decorator_in_another_module"]
    original_lines, mended_lines, _ = run_spellings(tmp_path, spellings)
    assert mended_lines == original_lines


@pytest.mark.slow  # fresh interpreters
def test_torch_dynamo_optimize_reaches_the_model_module(tmp_path):
    original_lines, mended_lines, counts = run_spellings(tmp_path, ["dynamo_optimize"], exact_counts=False)
    # Output is performed inside the graph, so every entry prints exactly and compiles once.
    assert mended_lines == original_lines
    assert counts["dynamo_optimize"]["graphs"] == 1, counts


PACKAGE_MAIN = """\
import json
import sys

import torch

from graphmend.counting import CountingBackend, break_count_so_far, recording_graph_breaks

from .model import Model

torch.manual_seed(0)
backend = CountingBackend()
model = torch.compile(Model(), backend=backend)
x = torch.randn(3, 4)
with recording_graph_breaks() as sites:
    result = model(x)
print(__name__, __package__, __spec__.name, sys.argv[1:], sys.argv[0] == __file__)
print(sorted(key for key in globals() if key.startswith("__")))
print(result.tolist())
print("COUNT", json.dumps({"spelling": "m", "graphs": backend.graphs,
                           "breaks": break_count_so_far(backend, sites).breaks}))
"""


@pytest.mark.slow  # fresh interpreters
def test_dash_m_runs_a_package_as_python_dash_m_does(tmp_path):
    project = tmp_path / "project"
    write_project(project, {"app/__init__.py": "", "app/model.py": MODEL, "app/__main__.py": PACKAGE_MAIN})
    original = run([sys.executable, "-m", "app", "a", "--flag"], project)
    mended = run([*GRAPHMEND_RUN, "--no-cache", "-m", "app", "a", "--flag"], project)
    original_lines, original_counts = split_output(original.stdout)
    mended_lines, mended_counts = split_output(mended.stdout)
    assert mended_lines == original_lines
    assert "__main__ app app.__main__ ['a', '--flag'] True" in mended_lines
    assert original_counts["m"]["breaks"] >= 1
    assert mended_counts["m"] == {"graphs": 1, "breaks": 0}


@pytest.mark.slow  # fresh interpreters
def test_dash_m_with_a_module_that_is_not_there_exits_1_in_one_line(tmp_path):
    completed = subprocess.run(
        [*GRAPHMEND_RUN, "-m", "no_such_module_here"],
        check=False, cwd=tmp_path, env=subprocess_environment(), capture_output=True, text=True,
        timeout=120,
    )
    assert completed.returncode == 1
    assert completed.stderr.strip().splitlines() == ["graphmend run: No module named no_such_module_here"]


INSTALLING_MAIN = """\
import graphmend
graphmend.install()

import json
import torch
from graphmend.counting import CountingBackend, break_count_so_far, recording_graph_breaks
from model import Model

torch.manual_seed(0)
backend = CountingBackend()
model = torch.compile(Model(), backend=backend)
with recording_graph_breaks() as sites:
    model(torch.randn(3, 4))
print(json.dumps({"graphs": backend.graphs, "breaks": break_count_so_far(backend, sites).breaks}))
"""


@pytest.mark.slow  # fresh interpreters
def test_install_with_no_arguments_mends_the_users_own_modules(tmp_path):
    project = tmp_path / "project"
    write_project(project, {"model.py": MODEL, "main.py": INSTALLING_MAIN})
    completed = run([sys.executable, "main.py"], project)
    assert json.loads(completed.stdout.splitlines()[-1]) == {"graphs": 1, "breaks": 0}
    assert completed.stderr == ""
