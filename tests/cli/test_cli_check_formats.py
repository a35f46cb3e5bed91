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


# The positions are made in `main` (a break in the original program, at `torch.where`);
# the branch on whether they are empty is a break only once Capture keeps them in the graph.
FOLLOW_ON_MODULE = """\
import torch

LINEAR = torch.nn.Linear(3, 3)


def fuse(x, idx):
    merged = x - 1
    if len(idx) > 0:
        merged[idx] = LINEAR(x[idx].contiguous())
    return merged


@torch.compile
def main(x, flags):
    (idx,) = torch.where(flags > 0)
    return fuse(x, idx) * 2
"""


def test_a_follow_on_site_is_listed_but_not_counted_as_a_candidate(cli, write):
    write("model.py", FOLLOW_ON_MODULE)
    result = cli("check", "model.py")
    assert result.code == 1
    lines = result.out.splitlines()
    assert lines[0] == (
        "model.py:8:5: DS branch on whether positions `idx` are empty (a data-dependent size), "
        "a break only once the positions `idx` are kept in the graph (fixed by Capture)"
    )
    assert lines[1].startswith("model.py:15:14: DS `torch.where` has a data-dependent output shape")
    assert lines[2] == (
        "Found 1 break candidate in 1 file (1 fixable, 0 not fixable); 1 file checked. 1 follow-on site "
        "(a break only once graphmend keeps an earlier value in the graph) listed too, not counted."
    )


def test_a_file_with_only_a_follow_on_site_has_no_candidates(cli, write):
    write("fuse.py", FOLLOW_ON_MODULE.split("\n\n@torch.compile")[0] + "\n")
    result = cli("check", "--all", "fuse.py")
    assert result.code == 0
    assert result.out.splitlines()[-1].startswith("No break candidates found; 1 file checked. 1 follow-on site")


def test_follow_on_sites_in_json_sarif_and_github(cli, write):
    write("model.py", FOLLOW_ON_MODULE)
    document = json.loads(cli("check", "--format", "json", "model.py").out)
    follows = [finding["follows"] for finding in document["findings"]]
    assert follows == ["the positions `idx` are kept in the graph", None]
    assert (document["summary"]["break_candidates"], document["summary"]["follow_ons"]) == (1, 1)
    (run,) = json.loads(cli("check", "--format", "sarif", "model.py").out)["runs"]
    first, second = run["results"]
    assert (first["level"], first["kind"], first["properties"]["follows"]) == (
        "note", "informational", "the positions `idx` are kept in the graph",
    )
    assert "kind" not in second
    annotations = cli("check", "--format", "github", "model.py").out.splitlines()
    assert annotations[0].startswith("::notice file=model.py,line=8,")
