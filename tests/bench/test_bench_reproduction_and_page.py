"""Checking a run against an earlier one, and the results page built from several runs."""

import copy
import json
import os
import subprocess
import sys

import pytest

from bench_samples import synthetic_run
from benchmarks import page, report, reproduction
from benchmarks.cli import bench_command

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _with_logged_breaks(run):
    t5 = run["models"][0]["quick"]["original"]
    t5["logged_breaks"] = [
        {
            "file": "/venv/lib/python3.11/site-packages/transformers/models/t5/modeling_t5.py",
            "line": 1019,
            "source": "logger.warning_once(",
            "category": "LC",
        }
    ] * 2
    return run


def test_speedup_range_spans_every_pair_of_processes():
    summary = report.summarize_model(synthetic_run()["models"][0])
    # original cold starts 30-32 s, graphmend 9-11 s
    assert summary["cold_start_speedup_range"] == pytest.approx({"min": 30 / 11, "max": 32 / 9})
    assert report.speedup_range(None, {"min": 1, "max": 2}) is None


def test_timing_table_shows_the_speedup_range():
    text = report.render_markdown(synthetic_run())
    assert "| 3.10x (2.73-3.56x) |" in text


def test_an_identical_run_reproduces_every_check():
    run = synthetic_run()
    checks = reproduction.compare_runs(run, copy.deepcopy(run))
    assert checks and not reproduction.failed_checks(checks)
    measures = {check.measure for check in checks if check.model == "t5"}
    assert measures == {
        "breaks before",
        "breaks after",
        "fullgraph before",
        "fullgraph after",
        "bit-identical",
        "cold-start speedup",
        "steady-state speedup",
    }


def test_a_different_break_count_is_not_reproduced():
    earlier, later = synthetic_run(), synthetic_run()
    later["models"][0]["quick"]["graphmend"]["breaks"] = 1
    failed = reproduction.failed_checks(reproduction.compare_runs(earlier, later))
    assert [(c.model, c.measure, c.reference, c.candidate) for c in failed] == [
        ("t5", "breaks after", "0", "1")
    ]


def test_a_speedup_outside_the_earlier_range_is_not_reproduced():
    earlier, later = synthetic_run(), synthetic_run()
    for run in later["models"][0]["timing"]["graphmend"]:
        run["cold_start_seconds"] = 31.0  # speedup 1.0x, earlier range 2.73x-3.56x
    failed = reproduction.failed_checks(reproduction.compare_runs(earlier, later))
    assert [(c.model, c.measure, c.candidate) for c in failed] == [
        ("t5", "cold-start speedup", "1x")
    ]


def test_page_checks_its_speedups_against_an_earlier_runs_ranges_too():
    earlier, later = synthetic_run(), synthetic_run()
    for run in later["models"][0]["timing"]["graphmend"]:
        run["cold_start_seconds"] = 31.0  # later 1.0x (0.94-1.07x); earlier 3.10x (2.73-3.56x)
    page_run = page.PageRun("transformers 4.52.4", later, other_runs=(("earlier.json", earlier),))
    outside = reproduction.failed_checks(page.speedups_inside_other_run(page_run, earlier))
    assert [(c.model, c.measure, c.candidate) for c in outside] == [("t5", "cold-start speedup", "1x")]
    section = "\n".join(page.reproduction_section(page_run))
    assert "this page's speedups inside the ranges earlier.json reported: 1 of 2:" in section
    assert "- outside: t5 cold-start speedup: earlier.json 3.1x (2.73-3.56x), this page 1x" in section


def test_models_only_one_run_measured_are_not_compared():
    earlier, later = synthetic_run(), synthetic_run()
    later["models"] = later["models"][:1]
    assert {c.model for c in reproduction.compare_runs(earlier, later)} == {"t5"}


def test_cli_compare_to_exits_1_when_a_count_differs(tmp_path, capsys):
    earlier, later = synthetic_run(), synthetic_run()
    later["models"][0]["quick"]["original"]["breaks"] = 4
    (tmp_path / "earlier.json").write_text(json.dumps(earlier))
    (tmp_path / "later.json").write_text(json.dumps(later))
    status = bench_command(
        ["--render", str(tmp_path / "later.json"), "--compare-to", str(tmp_path / "earlier.json")]
    )
    out = capsys.readouterr().out
    assert status == 1
    assert "not reproduced: t5 breaks before: reference 3, this run 4" in out
    assert bench_command(
        ["--render", str(tmp_path / "earlier.json"), "--compare-to", str(tmp_path / "earlier.json")]
    ) == 0


@pytest.mark.parametrize(
    "content, message",
    [(None, "No such file"), ("{not json", "not a JSON file"), ("[1]", "not a graphmend bench")],
)
def test_cli_compare_to_a_bad_file_is_one_line(tmp_path, capsys, content, message):
    saved = tmp_path / "run.json"
    saved.write_text(json.dumps(synthetic_run()))
    other = tmp_path / "other.json"
    if content is not None:
        other.write_text(content)
    assert bench_command(["--render", str(saved), "--compare-to", str(other)]) == 2
    error_lines = capsys.readouterr().err.strip().splitlines()
    assert len(error_lines) == 1 and message in error_lines[0]
    assert error_lines[0].startswith("graphmend bench: error: --compare-to ")


def test_break_sites_name_each_source_line_once():
    run = _with_logged_breaks(synthetic_run())
    assert page.break_sites(run["models"][0]["quick"]["original"]) == [
        "LC at transformers/models/t5/modeling_t5.py:1019 (`logger.warning_once(`), 2 records"
    ]


def test_page_sums_up_each_run_and_keeps_the_prose_in_order():
    older = _with_logged_breaks(synthetic_run())
    newer = copy.deepcopy(older)
    newer["meta"]["environment"]["transformers"] = "5.0.0"
    text = page.render_page(
        [
            page.PageRun(
                "transformers 4.52.4", older, other_runs=(("again.json", copy.deepcopy(older)),)
            ),
            page.PageRun("transformers 5.0.0", newer),
        ],
        intro="INTRO TEXT",
        notes="## Notes\n\nNOTES TEXT",
        method="## Method\n\nMETHOD TEXT",
        generated_by="a test",
    )
    order = [
        "# Benchmark results",
        "Generated by a test",
        "INTRO TEXT",
        "\n## Summary",
        "- **transformers 4.52.4** (graphmend commit abc1234",
        "- **transformers 5.0.0**",
        "\n## Where the original models break",
        "\n## Notes",
        "\n## Does a second run reproduce these figures?",
        "\n## transformers 4.52.4",
        "\n## transformers 5.0.0",
        "\n## Method",
    ]
    positions = [text.index(marker) for marker in order]
    assert positions == sorted(positions)
    assert "graphmend removed **13 of 24** graph breaks in 2 models" in text
    assert "fully fixed **1 of 2** models that break" in text
    assert "bit-identical to the original (fp32, eager): 1 of 3 models; **different: grounding-dino**" in text
    assert "Not measured (requirements missing): chronos-bolt." in text
    assert "| t5 | 3 | LC (3) | 0 | LC at transformers/models/t5/modeling_t5.py:1019" in text
    assert "checks reproduced" in text
    assert (
        "Other runs (1; below): break counts, fullgraph and bit-identity equal in 12 of 12 "
        "checks; speedups inside this page's ranges in 2 of 2; this page's speedups inside "
        "the other runs' ranges in 2 of 2." in text
    )
    assert "The other way round, this page's speedups inside the ranges again.json reported: 2 of 2." in text
    # only the run given a reference is checked
    assert text.count(
        "**again.json** (2026-11-29 10:00 UTC, commit abc1234, 3 processes per arm, "
        "arms alternated (A B, A B, ...); 3 models)"
    ) == 1


def test_timing_rounds_says_whether_the_run_counterbalanced_its_rounds():
    older = {"models": [{"name": "t5", "timing": {"original": [], "graphmend": []}}]}
    newer = {"models": [{"name": "t5", "timing_order": ["original", "graphmend"]}]}
    assert page.timing_rounds(older) == "arms alternated (A B, A B, ...)"
    assert page.timing_rounds(newer) == "rounds counterbalanced (A B, B A, ...)"
    interleaved = dict(newer, meta={"options": {"interleave": True}})
    assert page.timing_rounds(interleaved) == (
        "rounds counterbalanced (A B, B A, ...) and interleaved across models"
    )


def test_render_results_script_writes_the_page(tmp_path):
    saved = tmp_path / "run.json"
    saved.write_text(json.dumps(synthetic_run()))
    out = tmp_path / "results.md"
    completed = subprocess.run(
        [
            sys.executable,
            os.path.join(ROOT, "bench", "render_results.py"),
            "--out",
            str(out),
            "--run",
            "transformers 4.52.4",
            str(saved),
            "--other-run",
            "transformers 4.52.4",
            str(saved),
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": os.path.join(ROOT, "src")},
    )
    assert completed.returncode == 0, completed.stderr
    text = out.read_text()
    assert text.startswith("# Benchmark results\n")
    assert "## What is measured" in text  # bench/results_method.md
    assert "## Notes on the comparison with the paper" in text  # bench/results_notes.md
    assert "results-tf452-timing.json" in text  # bench/results_intro.md


def test_plot_of_several_runs(tmp_path):
    path = tmp_path / "runs.png"
    written = report.write_plot_of_runs(
        [synthetic_run(), synthetic_run()], ["a", "b"], str(path)
    )
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert written is False
    else:
        assert written and path.read_bytes().startswith(b"\x89PNG")


def test_a_skipped_frame_is_noted_under_the_table():
    run = synthetic_run()
    run["models"][1]["quick"]["original"]["frames_skipped"] = 2
    text = report.render_markdown(run)
    assert "- grounding-dino, original: TorchDynamo skipped 2 frame(s) and ran them eagerly" in text
    assert "frame(s)" not in report.render_markdown(synthetic_run())


def test_progress_bar_keeps_finished_lines_and_redraws_the_bar():
    import io

    from benchmarks.runner import ProgressBar

    times = iter([0.0, 60.0, 120.0])
    stream = io.StringIO()
    bar = ProgressBar(stream, clock=lambda: next(times))
    bar("[1/4] t5 original quick ...", 1, 4)
    bar("[1/4] t5 original quick: graphs=4 breaks=3 (60.0s)", 1, 4)
    bar.close()
    text = stream.getvalue()
    assert "[........................] 0/4 1:00 spent  t5 original quick" in text
    assert "[1/4] t5 original quick: graphs=4 breaks=3 (60.0s)\n" in text
    assert "[######..................] 1/4 2:00 spent, about 6:00 left" in text
    assert text.endswith("\r\033[K")
