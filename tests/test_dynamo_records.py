"""graphmend.dynamo_records: TorchDynamo's own records of breaks, graphs and recompilations."""

from __future__ import annotations

import importlib.util
import logging
import sys

import pytest
import torch
from torch._dynamo.exc import get_gbid_documentation_link

import graphmend.dynamo_records as dynamo_records
from graphmend.counting import CountingBackend, count_breaks
from graphmend.dynamo_records import UserFrame, break_category, recording

PROGRAMS = '''\
import warnings

import torch


def print_then_branch(x):
    y = x + 1
    print("step")
    if y.sum() > 0:
        y = y * 2
    return y - 1


def whole(x):
    return torch.relu(x) * 2


def branch_in_a_loop(x):
    h = x * 1.0
    for _ in range(2):
        if x.sum() > 0:
            h = h * 0.5
    return h


def guard(x):
    if x.sum() < 0:
        raise ValueError("negative")
    return x + 1


def scalar(x):
    return x * x.sum().item()


def scale(x, n):
    return x * n
'''


@pytest.fixture
def programs(tmp_path):
    """The programs above as a module with a real file, so each break has a real line."""
    path = tmp_path / "records_programs.py"
    path.write_text(PROGRAMS)
    spec = importlib.util.spec_from_file_location("records_programs", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    yield module
    del sys.modules[spec.name]


def line_of(text: str) -> int:
    return PROGRAMS.splitlines().index(text) + 1


def test_exact_breaks_and_graphs_under_the_counting_backend(programs):
    _, count = count_breaks(programs.print_then_branch, torch.ones(3))
    assert (count.graphs, count.breaks, count.frames_skipped) == (3, 2, 0)
    assert [record.gb_type for record in count.records] == [
        "Failed to trace builtin operator",
        "Data-dependent branching",
    ]
    assert [(site.filename, site.line) for site in count.sites] == [
        (programs.__file__, line_of('    print("step")')),
        (programs.__file__, line_of("    if y.sum() > 0:")),
    ]


def test_a_whole_function_is_one_graph_and_no_record(programs):
    _, count = count_breaks(programs.whole, torch.ones(3))
    assert (count.graphs, count.breaks, count.records, count.recompilations) == (1, 0, [], [])


def test_a_print_break_keeps_dynamos_explanation_hints_and_reference(programs):
    _, count = count_breaks(programs.print_then_branch, torch.ones(3))
    record = count.records[0]
    assert "`print`" in record.explanation
    assert any(hint.startswith("Avoid calling builtin `print`") for hint in record.hints)
    assert record.reference == get_gbid_documentation_link("Failed to trace builtin operator")
    assert record.reference.startswith("https://")
    print_line = line_of('    print("step")')
    assert record.user_frame == UserFrame(programs.__file__, print_line, "print_then_branch")
    assert break_category(record) == "LC"
    row = record.summary()
    assert (row["line"], row["source"], row["category"]) == (print_line, 'print("step")', "LC")
    assert (row["hints"], row["reference"]) == (record.hints, record.reference)


def test_a_data_dependent_branch_keeps_its_hint_and_reference(programs):
    _, count = count_breaks(programs.print_then_branch, torch.ones(3))
    record = count.records[1]
    assert record.explanation.startswith("Detected data-dependent branching")
    assert "Use `torch.cond` to express dynamic control flow." in record.hints
    assert record.reference == get_gbid_documentation_link("Data-dependent branching")
    # Dynamo resumes after the print in a function it generates; the user's name is kept
    assert record.user_frame == UserFrame(
        programs.__file__, line_of("    if y.sum() > 0:"), "print_then_branch"
    )
    assert break_category(record) == "DC"


def test_a_break_in_a_loop_skips_the_frame_and_names_its_cause(programs):
    _, count = count_breaks(programs.branch_in_a_loop, torch.ones(3))
    assert (count.graphs, count.frames_skipped, count.breaks) == (0, 1, 1)
    (record,) = count.records
    assert record.gb_type == "graph break in loop"
    assert record.skips_frame
    assert record.cause is not None and record.cause.gb_type == "Data-dependent branching"
    assert record.user_frame.line == line_of("        if x.sum() > 0:")
    assert break_category(record) == "DC"


@pytest.mark.parametrize(
    "name, category",
    [("guard", "VG"), ("scalar", "TI"), ("print_then_branch", "LC")],
)
def test_the_category_comes_from_dynamos_break_type_and_the_site(programs, name, category):
    _, count = count_breaks(getattr(programs, name), torch.ones(3))
    assert break_category(count.records[0]) == category


def test_a_recompilation_is_reported_with_its_guard_failure(programs):
    torch._dynamo.reset()
    compiled = torch.compile(programs.scale, backend=CountingBackend(), dynamic=False)
    with recording() as records:
        compiled(torch.ones(3), 2)
        compiled(torch.ones(4), 2)
    (recompilation,) = records.recompilations
    assert (recompilation.function, recompilation.file, recompilation.first_line) == (
        "scale",
        programs.__file__,
        line_of("def scale(x, n):"),
    )
    (reason,) = recompilation.reasons
    assert "size mismatch at index 0. expected 3, actual 4" in reason
    assert records.graphs == 2
    assert records.breaks == []


def test_records_survive_a_json_round_trip(programs):
    _, count = count_breaks(programs.branch_in_a_loop, torch.ones(3))
    record = count.records[0]
    again = dynamo_records.GraphBreakRecord.from_json(record.to_json())
    assert again == record


def test_nested_recordings_both_see_each_break_and_nothing_is_left_wrapped(programs):
    from torch._dynamo.symbolic_convert import InstructionTranslatorBase
    from torch._logging._internal import trace_log

    format_message = torch._dynamo.exc.format_graph_break_message
    log_graph_break = InstructionTranslatorBase.log_graph_break
    torch._dynamo.reset()
    compiled = torch.compile(programs.print_then_branch, backend=CountingBackend())
    with recording() as outer, recording() as inner:
        compiled(torch.ones(3))
    assert len(outer.breaks) == len(inner.breaks) == 2
    assert outer.graphs == inner.graphs == 3
    assert torch._dynamo.exc.format_graph_break_message is format_message
    assert InstructionTranslatorBase.log_graph_break is log_graph_break
    left = [h for h in trace_log.handlers if isinstance(h, dynamo_records._TraceHandler)]
    assert left == []


def test_nothing_is_printed_by_recording(programs, capfd):
    torch._dynamo.reset()
    compiled = torch.compile(programs.print_then_branch, backend=CountingBackend())
    logging.getLogger("torch._dynamo").setLevel(logging.WARNING)
    with recording():
        compiled(torch.ones(3))
    captured = capfd.readouterr()
    assert captured.out == "step\n"
    assert "Graph break" not in captured.err


def test_no_regex_over_dynamos_log_text_is_left_in_the_readers():
    import graphmend.cli.explain
    import graphmend.counting

    for module in (dynamo_records, graphmend.counting, graphmend.cli.explain):
        with open(module.__file__, encoding="utf-8") as file:
            assert "import re\n" not in file.read(), module.__name__
