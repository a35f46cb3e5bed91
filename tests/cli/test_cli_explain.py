"""``graphmend explain``: reading Dynamo's break log, classifying, and one real run."""

from __future__ import annotations

import os

import pytest

from graphmend.cli.config import Settings
from graphmend.cli.explain import GraphBreak, StaticView, explain_breaks, split_script_arguments
from graphmend.core.legality import failed
from tests.test_never_worse import PRINT_BEFORE_A_HOOK_THAT_COUNTS_ITS_CALLS


@pytest.mark.parametrize(
    "gb_type, category",
    [
        ("Data-dependent branching", "DC"),
        ("logging.Logger method not supported for non-export cases", "LC"),
        ("Unsupported Tensor.item() call with capture_scalar_outputs=False", "TI"),
        ("Dynamic shape operator", "DS"),
        ("Data dependent operator", "DO"),
        ("Unsupported context manager", "other"),
    ],
)
def test_category_from_dynamos_break_type(gb_type, category):
    assert GraphBreak("/nowhere.py", 1, gb_type).category == category


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
    assert "    graphmend: Where declined [W106 setup_statement_runs_on_both_paths]: line 13: the call `items.append` is not known to be free" in text
    assert f"  {name}:14: TI tensor.item() call\n" in text
    assert "    graphmend: not fixable: the value leaves the graph" in text
    # helper() is outside the compiled scope, and Where would decline it anyway (it
    # rebinds its parameter, which the caller may still hold).
    assert "    graphmend: Where declined [W110 selected_value_is_fresh]: `x` holds an object that existed before the branch" in text
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


@pytest.mark.slow  # runs a script in two fresh interpreters
def test_explain_runs_the_script_both_ways(cli, write):
    """One real run (two interpreters, one after the other): breaks before the first graph count too."""
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
    assert lines[1:4] == [
        "  script.py:8: LC print/logging/warnings call",
        '      print("step")',
        (
            "    reason: Failed to trace builtin operator: Dynamo does not know how to trace "
            "builtin operator `print` with argument types ['str'] (has_kwargs False)"
        ),
    ]
    assert lines[4].startswith("    hint: Avoid calling builtin `print`")
    graphmend_line = next(i for i in range(4, len(lines)) if lines[i].startswith("    graphmend:"))
    assert lines[graphmend_line - 1] == (
        "    see: https://meta-pytorch.github.io/compile-graph-break-site/gb/gb0059.html"
    )
    assert lines[graphmend_line] == "    graphmend: fixed by Defer"
    assert "  script.py:9: DC data-dependent control flow" in lines
    assert "    graphmend: fixed by Where" in lines
    package_break = next(i for i, line in enumerate(lines) if line.startswith("  mylib"))
    assert lines[package_break].startswith(
        f"  {os.path.join('mylib', '__init__.py')}:2: LC print/logging/warnings call"
    )
    package_action = next(
        i for i in range(package_break, len(lines)) if lines[i].startswith("    graphmend:")
    )
    assert lines[package_action] == "    graphmend: fixed by Defer"
    assert "  script.py:14: TI tensor.item() call" in lines
    breaks = int(lines[0].split()[2])
    assert breaks >= 4
    assert lines[-1] == f"breaks: {breaks} -> 1"


KEPT_CHECK_SCRIPT = """\
import torch
from transformers.utils.import_utils import torch_compilable_check


@torch.compile(backend="eager")
def step(x):
    try:
        torch_compilable_check((x > 0).all(), "positive", IndexError)
    except IndexError:
        pass
    return x * 2
"""


def test_a_break_new_where_a_call_is_kept_names_the_decline(tmp_path):
    """A check call kept with its break (a ``try`` catches it) breaks at the call in the
    mended run, where the original broke inside the helper: the new break says why."""
    script = tmp_path / "script.py"
    script.write_text(KEPT_CHECK_SCRIPT)
    path = str(script)
    original = [GraphBreak("/site-packages/transformers/utils/import_utils.py", 1993, "Data-dependent branching")]
    mended = [GraphBreak(path, 8, "Skip calling `torch.compiler.disable()`d function")]
    text = "\n".join(explain_breaks(original, mended, StaticView(Settings(), path)))
    assert f"  {os.path.relpath(path)}:8: Skip calling" in text
    assert "    graphmend: Trap declined [T106 not_caught_in_function]: the raise may be caught by an enclosing `try`; kept as a call" in text


def test_a_break_declined_while_tracing_with_no_static_finding_says_why(tmp_path):
    """Where's late passes report no candidate; the trace's reason still reaches the user."""
    script = tmp_path / "script.py"
    script.write_text("import torch\n\n\ndef f(x):\n    return x\n")
    path = str(script)
    graph_break = GraphBreak(path, 5, "Data-dependent branching")
    reason = failed("W216", "value_computed_from_fixed_tensors: the value reads a size that is not static")
    text = "\n".join(
        explain_breaks([graph_break], [graph_break], StaticView(Settings(), path), declines={(path, 5): reason})
    )
    assert f"    graphmend: rewritten; kept its break while tracing [W216 value_computed_from_fixed_tensors]: {reason}" in text


def test_a_recompilation_with_no_file_is_shown_without_failing(tmp_path):
    from graphmend.dynamo_records import Recompilation

    script = tmp_path / "script.py"
    script.write_text("x = 1\n")
    recompilation = Recompilation(function="", file="", first_line=0, compile_id="7/8", reasons=["7/7: guard"])
    lines = explain_breaks([], [], StaticView(Settings(), str(script)), recompilations={"original": [recompilation]})
    assert "  <unknown file>:0:  (compilation 7/8)" in lines


def test_breaks_of_an_abandoned_trace_attempt_are_forgotten_in_the_log(tmp_path):
    """The child streams each break to the log as TorchDynamo records it; a trace attempt
    graphmend abandons (a claim refused when the trace is complete) recorded breaks the
    next attempt records again, and the log says which were dropped."""
    from graphmend.cli.explain import _RecordFile, read_records
    from graphmend.dynamo_records import ForgottenBreaks, GraphBreakRecord, UserFrame

    def at(line: int) -> GraphBreakRecord:
        return GraphBreakRecord(gb_type="Failed to trace builtin operator", frames=[UserFrame("s.py", line, "f")])

    path = str(tmp_path / "records.jsonl")
    log = _RecordFile(path)
    for record in (at(3), at(5)):
        log(record)
    log(ForgottenBreaks([at(5)]))
    log(at(5))
    log.file.close()
    breaks, _, _ = read_records(path)
    assert [graph_break.line for graph_break in breaks] == [3, 5]


# G320's program, with an explicit break after the hooked module, compiled and called.
PRINT_REFUSED_AFTER_ITS_TRACE = PRINT_BEFORE_A_HOOK_THAT_COUNTS_ITS_CALLS.replace(
    "    return PROBE(y)\n", "    y = PROBE(y)\n    torch._dynamo.graph_break()\n    return y\n"
) + """

compiled = torch.compile(f, backend="eager")
for _ in range(3):
    compiled(torch.ones(3))
"""


@pytest.mark.slow  # runs a script in two fresh interpreters
def test_a_claim_refused_when_its_trace_is_complete_counts_its_break_once(cli, write):
    """G320 refuses the print when the trace reaches the explicit break, and TorchDynamo
    traces the frame again: the break the abandoned attempt recorded there is not
    counted twice."""
    write("script.py", PRINT_REFUSED_AFTER_ITS_TRACE)
    result = cli("explain", "script.py")
    assert result.code == 0, result.err
    assert "G320" in result.out
    assert result.out.splitlines()[-1] == "breaks: 4 -> 4"
