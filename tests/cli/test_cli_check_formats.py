"""``graphmend check --format github|sarif``: the forms CI services read."""

from __future__ import annotations

import json

import graphmend
from graphmend.rewrite.findings import CATEGORY_TITLES


def test_github_annotations_one_command_per_finding(cli, write, compiled_module):
    write("model.py", compiled_module)
    result = cli("check", "--format", "github", "model.py")
    assert result.code == 1
    lines = result.out.splitlines()
    assert lines[0] == "::notice file=model.py,line=6,col=5,title=LC print/logging/warnings call::`print(...)` call (fixed by Defer)"
    assert lines[1].startswith("::notice file=model.py,line=7,col=5,title=DC data-dependent control flow::")
    assert lines[2].startswith("::warning file=model.py,line=11,col=9,title=TI tensor.item() call::")
    assert lines[3] == "Found 3 break candidates in 1 file (2 fixable, 1 not fixable); 1 file checked."
    assert len(lines) == 4


def test_github_annotations_escape_what_would_end_a_field(cli, write):
    # A message holding ":" and "," inside a property, "%" and newlines in the data
    write("a,b:c.py", "import torch\n\n@torch.compile\ndef f(x):\n    print('100%')\n    return x\n")
    result = cli("check", "--format", "github", "a,b:c.py")
    assert result.out.splitlines()[0].startswith("::notice file=a%2Cb%3Ac.py,line=5,col=5,")


def test_github_file_that_cannot_be_checked_is_an_error_annotation(cli, write):
    write("broken.py", "def f(:\n")
    result = cli("check", "--format", "github", "--all", "broken.py")
    assert result.code == 1
    first = result.out.splitlines()[0]
    assert first.startswith("::error file=broken.py,title=graphmend could not check this file::")


def test_sarif_log_names_each_category_and_locates_each_finding(cli, write, compiled_module):
    write("model.py", compiled_module)
    write("broken.py", "def f(:\n")
    result = cli("check", "--format", "sarif", "--all", "model.py", "broken.py")
    assert result.code == 1
    log = json.loads(result.out)
    assert log["version"] == "2.1.0"
    (run,) = log["runs"]
    driver = run["tool"]["driver"]
    assert (driver["name"], driver["version"]) == ("graphmend", graphmend.__version__)
    assert [rule["id"] for rule in driver["rules"]] == list(CATEGORY_TITLES)
    assert all(rule["shortDescription"]["text"] and rule["name"].isalnum() for rule in driver["rules"])
    results = run["results"]
    assert [(r["ruleId"], r["level"]) for r in results] == [("LC", "note"), ("DC", "note"), ("TI", "warning")]
    location = results[2]["locations"][0]["physicalLocation"]
    assert location == {"artifactLocation": {"uri": "model.py"}, "region": {"startLine": 11, "startColumn": 9}}
    assert results[2]["message"]["text"].startswith("`y.sum().item()` copies a tensor value to Python")
    (invocation,) = run["invocations"]
    assert invocation["executionSuccessful"] is False
    (notification,) = invocation["toolExecutionNotifications"]
    assert notification["level"] == "error"
    assert notification["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == "broken.py"
    assert run["properties"]["summary"]["break_candidates"] == 3


def test_sarif_with_nothing_found_is_a_successful_empty_run(cli, write):
    write("clean.py", "import torch\n\n@torch.compile\ndef f(x):\n    return x + 1\n")
    result = cli("check", "--format", "sarif", "clean.py")
    assert result.code == 0
    (run,) = json.loads(result.out)["runs"]
    assert run["results"] == []
    assert run["invocations"][0]["executionSuccessful"] is True


def test_unknown_format_is_a_one_line_usage_error(cli, write):
    write("clean.py", "x = 1\n")
    result = cli("check", "--format", "xml", "clean.py")
    assert result.code == 2
    assert len(result.err.strip().splitlines()) == 1 and "xml" in result.err
