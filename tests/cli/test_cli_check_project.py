"""``graphmend check`` on a project (issue 16, "Honest static answers"): compilation is
followed across the files given, model code is looked at wherever it is, and an
answer limited by the scope says which scope it used and how to widen it."""

from __future__ import annotations

import json

import pytest

# The step lives in model.py; nothing there compiles it.
MODEL = """\
import torch


def step(x):
    print("step")
    if x.sum() > 0:
        return x + 1
    return x - 1


def never_compiled(x):
    print("not compiled")
    return x
"""

# nn.Module code, compiled from somewhere out of sight (a training framework, say).
LIBRARY_MODEL = """\
import torch


def shift(x):
    if x.mean() > 0:
        return x - 1
    return x + 1


class Block(torch.nn.Module):
    def forward(self, x):
        print("block")
        return shift(x)


def unrelated(x):
    print("unrelated")
    return x
"""

MAINS = {
    "call": "import torch\nfrom model import step\ncompiled = torch.compile(step)\n",
    "decorator_alias": "import torch\nimport model\nc = torch.compile\nfast = c(model.step)\n",
    "dynamo_optimize": "import torch\nfrom model import step\nfast = torch._dynamo.optimize('eager')(step)\n",
}


def finding_functions(out: str) -> list[tuple[str, str]]:
    document = json.loads(out)
    return sorted({(f["path"], f["function"]) for f in document["findings"]})


@pytest.mark.parametrize("spelling", sorted(MAINS))
def test_compilation_in_one_file_is_followed_into_another(cli, write, spelling):
    write("project/model.py", MODEL)
    write("project/main.py", MAINS[spelling])
    result = cli("check", "--format", "json", "project")
    assert result.code == 1
    assert finding_functions(result.out) == [("project/model.py", "step")]
    # model.py alone: nothing compiles step in sight, and the answer says so.
    alone = cli("check", "project/model.py")
    assert alone.code == 0
    assert alone.out.splitlines()[0] == "No break candidates found; 1 file checked."
    assert "use --all to check every function" in alone.out.splitlines()[1]


def test_a_compiling_helper_in_a_third_file_is_followed(cli, write):
    write("project/model.py", MODEL)
    write("project/utils.py", "import torch\n\ndef compile_fn(fn, backend='eager'):\n    return torch.compile(fn, backend=backend)\n")
    write("project/main.py", "from model import step\nfrom utils import compile_fn\nfast = compile_fn(step)\n")
    result = cli("check", "--format", "json", "project")
    assert finding_functions(result.out) == [("project/model.py", "step")]


def test_packages_are_followed_by_their_dotted_names(cli, write):
    write("project/app/__init__.py", "")
    write("project/app/model.py", MODEL)
    write("project/app/train.py", "import torch\nfrom .model import step\nfast = torch.compile(step)\n")
    result = cli("check", "--format", "json", "project")
    assert finding_functions(result.out) == [("project/app/model.py", "step")]


def test_library_code_with_no_compile_call_still_reports_its_model_code(cli, write):
    write("lib/blocks.py", LIBRARY_MODEL)
    result = cli("check", "lib")
    assert result.code == 1
    lines = result.out.splitlines()
    assert any(line.startswith("lib/blocks.py:12:9: LC") for line in lines)  # print in forward
    assert any(line.startswith("lib/blocks.py:5:5: DC") for line in lines)  # the branch in shift
    assert not any("unrelated" in line for line in lines)
    assert "No break candidates" not in result.out
    assert not lines[-1].startswith("Scope:")  # the one file had model code: all of it looked at


def test_the_scope_line_counts_only_files_with_nothing_in_scope(cli, write):
    write("lib/blocks.py", LIBRARY_MODEL)
    write("lib/utils.py", "def helper(x):\n    print(x)\n    return x\n")
    result = cli("check", "--format", "json", "lib")
    summary = json.loads(result.out)["summary"]
    assert (summary["scope"], summary["files_without_compiled_code"]) == ("entry", 1)
    everything = json.loads(cli("check", "--all", "--format", "json", "lib").out)["summary"]
    assert (everything["scope"], everything["files_without_compiled_code"]) == ("all", 0)


def test_the_file_that_compiles_a_model_defined_elsewhere_is_not_reported_as_out_of_scope(cli, write):
    write("project/model.py", LIBRARY_MODEL)
    write("project/main.py", "import torch\nfrom model import Block\nmodel = torch.compile(Block())\n")
    result = cli("check", "project")
    assert result.code == 1
    assert result.out.splitlines()[-1].startswith("Found ")  # no scope line: nothing left out
