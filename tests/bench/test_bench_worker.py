"""The worker protocol end to end, on a plain-torch model (no transformers needed).

tiny_model.py prints and branches on a tensor value: two graph breaks (LC, DC). Each
arm runs in its own process, as in a real benchmark, in quick mode.
"""

import dataclasses
import json
import os
import statistics
import subprocess
import sys

import pytest
import torch

from benchmarks import runner
from benchmarks.runner import RunOptions, compare_outputs, run_suite, worker_environment
from benchmarks.suite import load_model_file

TINY_MODEL = os.path.join(os.path.dirname(__file__), "tiny_model.py")


@pytest.fixture(scope="module")
def quick_run():
    model = load_model_file(TINY_MODEL, import_module=False)
    messages = []
    run = run_suite([model], RunOptions(quick=True, timeout=300), progress=lambda message, *_: messages.append(message))
    return run, messages


@pytest.mark.slow  # the module's quick run starts worker processes for both arms
def test_quick_run_counts_and_categorizes_the_original_breaks(quick_run):
    run, _ = quick_run
    (entry,) = run["models"]
    assert entry["name"] == "tiny-model"
    original = entry["quick"]["original"]
    assert "error" not in original and "count_error" not in original, original
    assert original["graphs"] >= 2 and original["breaks"] >= 2
    assert original["categories"] == {"DC": 1, "LC": 1}
    assert {item["line"] for item in original["logged_breaks"]} == {15, 16}
    assert original["fullgraph"] is False and original["fullgraph_error"]
    assert original["environment"]["torch_threads"] == 1
    assert original["environment"]["thread_environment"]["OMP_NUM_THREADS"] == "1"
    assert original["environment"]["inductor_environment"]["TORCHINDUCTOR_FX_GRAPH_CACHE"] == "0"
    assert "timing" not in entry


@pytest.mark.slow  # the module's quick run starts worker processes for both arms
def test_graphmend_arm_preserves_the_outputs(quick_run):
    run, _ = quick_run
    (entry,) = run["models"]
    mended = entry["quick"]["graphmend"]
    assert "error" not in mended and "count_error" not in mended, mended
    assert mended["breaks"] <= entry["quick"]["original"]["breaks"]
    assert mended["rewrite"]["seconds"] is not None and mended["rewrite"]["file"] == TINY_MODEL
    assert entry["equality"]["bit_identical"] is True, entry["equality"]
    assert entry["equality"]["original_compiled"]["equal"] is True


@pytest.mark.slow  # the module's quick run starts worker processes for both arms
def test_progress_and_metadata(quick_run):
    run, messages = quick_run
    assert [m for m in messages if m.endswith("...")] == [
        "[1/2] tiny-model original quick ...",
        "[2/2] tiny-model graphmend quick ...",
    ]
    assert run["meta"]["options"]["quick"] is True
    assert run["meta"]["environment"]["torch"] == torch.__version__
    json.dumps(run)  # the whole run is JSON-able


def test_each_worker_gets_its_own_empty_inductor_cache(tmp_path):
    options = RunOptions()
    first, second = (
        worker_environment(str(tmp_path), options),
        worker_environment(str(tmp_path), options),
    )
    assert first["TORCHINDUCTOR_CACHE_DIR"] != second["TORCHINDUCTOR_CACHE_DIR"]
    assert os.listdir(first["TORCHINDUCTOR_CACHE_DIR"]) == []
    assert first["TORCHINDUCTOR_FX_GRAPH_CACHE"] == "0" and first["OMP_NUM_THREADS"] == "1"


@pytest.mark.slow  # fresh interpreter
def test_a_worker_that_fails_still_writes_a_result(tmp_path):
    broken = tmp_path / "broken_model.py"
    broken.write_text("def build():\n    raise RuntimeError('no model today')\n")
    result_path = tmp_path / "result.json"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.worker",
            "--model-file",
            str(broken),
            "--arm",
            "original",
            "--result",
            str(result_path),
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    result = json.loads(result_path.read_text())
    assert "RuntimeError: no model today" in result["error"]


def test_compare_outputs():
    reference = {"output.logits": torch.tensor([1.0, 2.0]), "output.mask": torch.tensor([1, 0])}
    assert compare_outputs(reference, dict(reference))["equal"]
    nudged = dict(reference, **{"output.logits": torch.tensor([1.0, 2.5])})
    result = compare_outputs(reference, nudged)
    assert not result["equal"] and result["different"] == ["output.logits"]
    assert result["max_abs_difference"] == pytest.approx(0.5)
    result = compare_outputs(reference, {"output.logits": reference["output.logits"]})
    assert not result["equal"] and result["missing"] == ["output.mask"]
    assert not compare_outputs({}, {})["equal"]


def test_compare_arms_checks_every_graphmend_output_against_the_original_eager(tmp_path):
    from benchmarks.runner import compare_arms

    logits = torch.tensor([1.0, 2.0])

    def saved(name, **outputs):
        path = tmp_path / f"{name}.pt"
        torch.save({key: {"output.logits": value} for key, value in outputs.items()}, path)
        return {"outputs_file": str(path), "main_output": "output.logits"}

    original = saved("original", eager=logits, compiled=logits.clone())
    same = saved("same", eager=logits.clone(), compiled=logits.clone(), fullgraph=logits.clone())
    result = compare_arms(original, same)
    assert result["bit_identical"] is True and result["problems"] == []
    assert result["graphmend_fullgraph"]["compared"] == 1

    off = saved("off", eager=logits.clone(), compiled=logits.clone(), fullgraph=logits + 1e-6)
    result = compare_arms(original, off)
    assert result["bit_identical"] is False
    assert result["problems"][0].startswith("graphmend_fullgraph differs")

    result = compare_arms(original, {"error": "crashed"})
    assert result["bit_identical"] is None
    assert result["problems"] == ["the graphmend arm saved no output to compare"]


def test_timing_order_reverses_every_other_round_so_drift_reaches_both_arms():
    assert runner.timing_order(1) == ["original", "graphmend"]
    assert runner.timing_order(4) == ["original", "graphmend", "graphmend", "original"] * 2
    for repeats in (2, 4, 6):
        order = runner.timing_order(repeats)
        positions = {arm: [i for i, a in enumerate(order) if a == arm] for arm in runner.ARMS}
        assert [len(p) for p in positions.values()] == [repeats, repeats]
        # A linear drift adds the same to both arms' means and medians.
        assert sum(positions["original"]) == sum(positions["graphmend"])
        assert statistics.median(positions["original"]) == statistics.median(positions["graphmend"])


def _fake_workers(monkeypatch, started):
    def fake_worker(model, arm, phase, options, scratch, hook_cache_dir):
        started.append((model.name, arm, phase))
        return {"arm": arm, "wall_seconds": 0.0, "cold_start_seconds": 1.0, "steady_state_seconds": 0.001}

    monkeypatch.setattr(runner, "run_worker_process", fake_worker)


def test_run_model_times_the_arms_in_counterbalanced_order(monkeypatch, tmp_path):
    model = load_model_file(TINY_MODEL, import_module=False)
    started = []
    _fake_workers(monkeypatch, started)
    options = RunOptions(timing_only=True, repeats=4)
    workers = runner.Workers(options, str(tmp_path), str(tmp_path), lambda *_: None, 8)
    entry = runner.run_model(model, workers)
    assert [arm for _, arm, _ in started] == runner.timing_order(4)
    assert entry["timing_order"] == runner.timing_order(4)
    assert [len(entry["timing"][arm]) for arm in runner.ARMS] == [4, 4]
    assert workers.done == 8


def _two_models():
    first = load_model_file(TINY_MODEL, import_module=False)
    return [first, dataclasses.replace(first, name="tiny-second")]


def test_interleaved_run_times_round_one_of_every_model_before_round_two(monkeypatch):
    started = []
    _fake_workers(monkeypatch, started)
    steps = []
    models = _two_models()
    options = RunOptions(timing_only=True, repeats=2, interleave=True)
    run = run_suite(models, options, progress=lambda message, done, total: steps.append((done, total)))
    assert started == [
        ("tiny-model", "original", "timing"),
        ("tiny-model", "graphmend", "timing"),
        ("tiny-second", "original", "timing"),
        ("tiny-second", "graphmend", "timing"),
        ("tiny-model", "graphmend", "timing"),
        ("tiny-model", "original", "timing"),
        ("tiny-second", "graphmend", "timing"),
        ("tiny-second", "original", "timing"),
    ]
    for entry in run["models"]:
        assert entry["timing_order"] == runner.timing_order(2)
        assert [len(entry["timing"][arm]) for arm in runner.ARMS] == [2, 2]
    assert run["meta"]["options"]["interleave"] is True
    assert steps[-1] == (8, 8)


def test_plain_run_times_each_model_in_full_before_the_next(monkeypatch):
    started = []
    _fake_workers(monkeypatch, started)
    run_suite(_two_models(), RunOptions(timing_only=True, repeats=2), progress=lambda *_: None)
    assert [name for name, _, _ in started] == ["tiny-model"] * 4 + ["tiny-second"] * 4


def test_a_model_skipped_in_its_quick_pass_counts_its_timing_steps_as_done(monkeypatch):
    started = []

    def skipping_worker(model, arm, phase, options, scratch, hook_cache_dir):
        started.append((model.name, arm, phase))
        return {"arm": arm, "wall_seconds": 0.0, "skipped": "no chronos"}

    monkeypatch.setattr(runner, "run_worker_process", skipping_worker)
    steps = []
    options = RunOptions(repeats=2, interleave=True)
    run = run_suite(_two_models(), options, progress=lambda message, done, total: steps.append((done, total)))
    assert [phase for _, _, phase in started] == ["quick"] * 4
    assert all(entry["skipped"] == "no chronos" for entry in run["models"])
    assert steps[-1] == (12, 12)


class _Clock:
    """A ``time.perf_counter`` that only the model's calls move: each call of the first
    ``warm_calls`` takes 1 s, each later one 0.25 s."""

    def __init__(self, warm_calls):
        self.now, self.calls, self.warm_calls = 0.0, 0, warm_calls

    def __call__(self):
        return self.now

    def model(self, **_):
        self.calls += 1
        self.now += 1.0 if self.calls <= self.warm_calls else 0.25
        return torch.zeros(1)


def _time_with_clock(monkeypatch, iterations, steady_calls):
    from benchmarks import worker

    clock = _Clock(warm_calls=iterations)
    monkeypatch.setattr(worker.time, "perf_counter", clock)
    monkeypatch.setattr(torch, "compile", lambda model, **_: model)
    result, outputs = {}, {}
    worker.run_timing(clock.model, {}, result, outputs, "cpu", "default", iterations, steady_calls)
    return clock, result


def test_the_steady_state_is_measured_over_calls_after_the_first_n(monkeypatch):
    clock, result = _time_with_clock(monkeypatch, iterations=10, steady_calls=200)
    assert "timing_error" not in result, result.get("timing_error")
    assert clock.calls == 210
    assert result["call_seconds"] == [1.0] * 10
    assert result["cold_start_seconds"] == 1.0
    assert result["steady_state_calls"] == 200
    assert result["steady_state_window"] == "after the first N calls"
    assert result["steady_state_seconds"] == pytest.approx(0.25)
    assert result["steady_state_median_seconds"] == pytest.approx(0.25)
    assert result["steady_state_max_seconds"] == pytest.approx(0.25)


def test_without_a_steady_window_calls_two_to_n_are_the_steady_state(monkeypatch):
    clock, result = _time_with_clock(monkeypatch, iterations=10, steady_calls=0)
    assert clock.calls == 10
    assert result["steady_state_calls"] == 9
    assert result["steady_state_window"] == "calls 2..N"
    assert result["steady_state_seconds"] == pytest.approx(1.0)


def test_the_runner_passes_the_steady_window_to_each_timing_worker(monkeypatch, tmp_path):
    commands = []

    def fake_run(command, **_):
        commands.append(command)
        raise subprocess.TimeoutExpired(command, 1)

    monkeypatch.setattr(runner.subprocess, "run", fake_run)
    model = load_model_file(TINY_MODEL, import_module=False)
    result = runner.run_worker_process(
        model, "original", "timing", RunOptions(steady_calls=37), str(tmp_path), str(tmp_path)
    )
    assert result["exit_status"] == "timeout"
    command = commands[0]
    assert command[command.index("--steady-calls") + 1] == "37"


def test_a_break_row_keeps_the_place_type_and_id_not_the_texts_of_the_type():
    from benchmarks.worker import break_row

    class Record:
        def summary(self):
            return {
                "file": "m.py", "line": 3, "function": "f", "source": "print(x)",
                "gb_type": "Unsupported builtin", "explanation": "long text",
                "hints": ["a hint"], "reference": "https://example/gb/gb0123.html",
                "cause": None, "skips_frame": False, "category": "LC",
            }

    assert break_row(Record()) == {
        "file": "m.py", "line": 3, "function": "f", "source": "print(x)",
        "gb_type": "Unsupported builtin", "gb_id": "gb0123",
        "cause": None, "skips_frame": False, "category": "LC",
    }
