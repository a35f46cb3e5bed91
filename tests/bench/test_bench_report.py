"""Aggregating results, ratios, and rendering, on synthetic runs."""

import json

import pytest

from bench_samples import synthetic_run
from benchmarks import report
from benchmarks.cli import bench_command


def test_spread_and_ratio():
    assert report.spread([3.0, None, 1.0, 2.0]) == {"min": 1.0, "median": 2.0, "max": 3.0, "n": 3}
    assert report.spread([None]) is None
    assert report.ratio(3.0, 1.5) == 2.0
    assert report.ratio(None, 1.0) is None
    assert report.ratio(1.0, 0.0) is None


def test_display_categories_attributes_unlogged_breaks():
    assert report.display_categories({"breaks": 3, "categories": {"LC": 2}}) == {"LC": 3}
    assert report.display_categories({"breaks": 5, "categories": {"DS": 2, "DO": 1}}) == {
        "DS": 2,
        "DO": 1,
        "unattributed": 2,
    }
    assert report.display_categories({"breaks": 0, "categories": {}}) == {}


def test_summarize_model_computes_fixes_and_speedups_from_medians():
    summary = report.summarize_model(synthetic_run()["models"][0])
    assert summary["breaks_before"] == 3 and summary["breaks_after"] == 0
    assert summary["categories_before"] == {"LC": 3}
    assert summary["fixed_percent"] == 100.0 and summary["fully_fixed"]
    assert summary["cold_start_original"] == {"min": 30.0, "median": 31.0, "max": 32.0, "n": 3}
    assert summary["cold_start_speedup"] == pytest.approx(31.0 / 10.0)
    assert summary["steady_state_speedup"] == pytest.approx(0.011 / 0.010)
    assert summary["rewrite_seconds"] == 0.5
    assert summary["errors"] == []


def test_partial_fix_and_failures():
    summaries = [report.summarize_model(entry) for entry in synthetic_run()["models"]]
    dino, clap, chronos = summaries[1:]
    assert dino["breaks_removed"] == 10 and not dino["fully_fixed"]
    assert dino["fixed_percent"] == pytest.approx(100 * 10 / 21)
    assert dino["categories_before"] == {"DS": 3, "DO": 2, "VG": 10, "TI": 1, "unattributed": 5}
    assert dino["errors"] == ["equality: graphmend_compiled differs from the original eager output"]
    assert clap["breaks_after"] is None
    assert clap["errors"] == ["quick/graphmend: error: RuntimeError: boom"]
    assert chronos["skipped"] == "missing chronos"


def test_totals_count_only_models_measured_in_both_arms():
    totals = report.totals([report.summarize_model(entry) for entry in synthetic_run()["models"]])
    assert totals["models_counted"] == 2
    assert (totals["breaks_removed"], totals["breaks_total"]) == (13, 24)
    assert (totals["models_fully_fixed"], totals["models_with_breaks"]) == (1, 2)
    assert (totals["paper_breaks_removed"], totals["paper_breaks_total"]) == (107, 147)


def test_markdown_puts_ours_beside_the_papers():
    text = report.render_markdown(synthetic_run(), title="synthetic")
    assert text.startswith("## synthetic\n")
    assert "torch 2.13.0+cpu, transformers 4.52.4" in text
    assert "OMP_NUM_THREADS=1" in text and "torch.get_num_threads() = 1" in text
    assert (
        "| t5 | t5-small | 3 | LC (3) | 100 | 3 | LC (3) | 0 | - | 100 | no / yes | yes |" in text
    )
    assert (
        "| grounding-dino | grounding-dino-tiny | 17 | DC (11) + DS (3) + DO (3) | 58 | 21 |"
        in text
    )
    assert "Breaks removed: 13 / 24 over 2 models (paper: 107 / 147 over 27)" in text
    assert "Models fully fixed: 1 / 2 models with breaks (paper: 21 / 27)" in text
    assert "| t5 | 500 | 31 (30-32, n=3) | 10 (9-11, n=3) | 3.10x (2.73-3.56x) |" in text
    assert "| 1.10x (1.00-1.33x) | - | - / - | - / - | 6.23x / 1.10x |" in text
    assert "6.23x / 1.10x" in text  # the paper's H100 figures for t5-small
    assert "- clap: quick/graphmend: error: RuntimeError: boom" in text
    assert "skipped: missing chronos" in text


def test_timing_shows_graphs_compiled_over_all_calls_and_time_to_the_last_call():
    """Issue 18: a recompilation can no longer hide inside a mean."""
    run = synthetic_run()
    entry = run["models"][0]
    entry["timing"] = {
        "original": [
            {"cold_start_seconds": 3.0, "steady_state_seconds": 0.5, "call_seconds": [3.0, 0.5, 0.5],
             "dynamo_stats": {"unique_graphs": 4}},
        ],
        "graphmend": [
            {"cold_start_seconds": 2.0, "steady_state_seconds": 1.0, "call_seconds": [2.0, 1.5, 0.5],
             "dynamo_stats": {"unique_graphs": 2}},
            {"cold_start_seconds": 2.0, "steady_state_seconds": 1.0, "call_seconds": [2.0, 1.5, 0.5],
             "dynamo_stats": {"unique_graphs": 1}},
        ],
    }
    summary = report.summarize_model(entry)
    assert summary["graphs_compiled_original"] == [4]
    assert summary["graphs_compiled_graphmend"] == [1, 2]
    assert summary["time_to_last_call_graphmend"]["median"] == 4.0
    row = report.timing_rows([summary])[0]
    assert "4 / 1/2" in row
    assert "4 (4-4, n=1) / 4 (4-4, n=2) (3 calls)" in row


def test_quick_run_markdown_has_no_timing_table():
    run = synthetic_run()
    for entry in run["models"]:
        entry.pop("timing", None)
        for arm in (entry.get("quick") or {}).values():
            arm.pop("rewrite", None)
    assert "### Timings" not in report.render_markdown(run)


def test_terminal_table_is_plain_text_without_rich(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_rich(name, *args, **kwargs):
        if name.startswith("rich"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_rich)
    text = report.render_terminal(synthetic_run())
    lines = text.splitlines()
    assert lines[0].split() == [
        "model",
        "breaks",
        "after",
        "fixed",
        "%",
        "fullgraph",
        "identical",
        "cold",
        "x",
        "steady",
        "x",
    ]
    assert lines[2].split()[:4] == ["t5", "3", "0", "100"]
    assert "breaks removed 13/24 (paper 107/147)" in lines[-1]


def test_plot_is_written_when_matplotlib_is_there(tmp_path):
    path = tmp_path / "plot.png"
    written = report.write_plot(synthetic_run(), str(path))
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert written is False and not path.exists()
    else:
        assert written and path.read_bytes().startswith(b"\x89PNG")


def test_cli_renders_a_saved_run(tmp_path, capsys):
    saved = tmp_path / "run.json"
    saved.write_text(json.dumps(synthetic_run()))
    markdown = tmp_path / "out" / "report.md"
    assert (
        bench_command(["--render", str(saved), "--markdown", str(markdown), "--title", "again"])
        == 0
    )
    assert markdown.read_text().startswith("## again\n")
    assert "t5" in capsys.readouterr().out


def test_cli_lists_the_suite(capsys):
    assert bench_command(["--list"]) == 0
    assert "grounding-dino" in capsys.readouterr().out


def test_cli_refuses_unknown_models(capsys):
    assert bench_command(["--models", "nope", "--quick"]) == 2
    error_lines = capsys.readouterr().err.strip().splitlines()
    assert len(error_lines) == 1 and "unknown bench model 'nope'" in error_lines[0]


def test_a_recompilation_among_the_steady_calls_is_noted():
    run = synthetic_run()
    calls = [30.0, 0.010, 17.5, 0.010, 0.011, 0.009, 0.010, 0.010, 0.010, 0.010]
    run["models"][0]["timing"]["graphmend"][0]["call_seconds"] = calls
    notes = report.slow_steady_calls(run["models"])
    assert notes == [
        (
            "t5, graphmend process 1: call 3 took 17.50 s against a median of 10.00 ms for calls 2-10 "
            "(likely a recompilation); the steady-state mean includes it"
        )
    ]
    assert "- " + notes[0] in report.render_markdown(run)


def test_with_a_steady_window_a_slow_early_call_counts_in_the_time_to_the_last_call():
    run = synthetic_run()
    process = run["models"][0]["timing"]["graphmend"][0]
    process["call_seconds"] = [30.0, 0.010, 17.5, 0.010, 0.011, 0.009, 0.010, 0.010, 0.010, 0.010]
    process["steady_state_window"] = "after the first N calls"
    notes = report.slow_steady_calls(run["models"])
    assert len(notes) == 1 and notes[0].endswith("the time to the last call includes it")


def test_the_median_call_is_the_steady_windows_median_where_there_is_one():
    windowed = {
        "call_seconds": [30.0, 0.004, 0.003],
        "steady_state_window": "after the first N calls",
        "steady_state_median_seconds": 0.001,
    }
    assert report._median_steady_call(windowed) == 0.001
    older = {"call_seconds": [30.0, 0.004, 0.003], "steady_state_median_seconds": 0.001}
    assert report._median_steady_call(older) == pytest.approx(0.0035)


def test_a_slow_call_below_half_a_second_is_noise():
    run = synthetic_run()
    calls = [30.0, 0.001, 0.05, 0.001, 0.001, 0.001, 0.001, 0.001, 0.001, 0.001]
    run["models"][0]["timing"]["graphmend"][0]["call_seconds"] = calls
    assert report.slow_steady_calls(run["models"]) == []


def test_merged_runs_keep_every_models_and_name_each_run(tmp_path):
    first, second = synthetic_run(), synthetic_run()
    second["meta"]["git_commit"] = "def5678"
    second["models"] = second["models"][:1]
    paths = []
    for index, run in enumerate((first, second)):
        path = tmp_path / f"run{index}.json"
        path.write_text(json.dumps(run))
        paths += ["--render", str(path)]
    merged_path = tmp_path / "merged.json"
    markdown = tmp_path / "merged.md"
    assert bench_command([*paths, "--json", str(merged_path), "--markdown", str(markdown)]) == 0
    merged = json.loads(merged_path.read_text())
    assert [entry["name"] for entry in merged["models"]] == [
        "t5",
        "grounding-dino",
        "clap",
        "chronos-bolt",
        "t5",
    ]
    text = markdown.read_text()
    assert "- merged run 2: 2026-11-29 10:00 UTC, commit def5678," in text
