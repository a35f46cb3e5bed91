"""``graphmend census`` end to end: children in fresh interpreters (slow tier)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from graphmend.cli.main import main
from tools.census.runner import CHECKOUT, child_environment

pytestmark = pytest.mark.slow

TINY_MODEL = Path(__file__).parents[1] / "bench" / "tiny_model.py"


def _census(capsys, *argv) -> tuple[int, str]:
    code = main(["census", *map(str, argv)])
    return code, capsys.readouterr().err


def _rows(path: Path, mode: str = "eval") -> dict:
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    return {(row["model"], row["arm"]): row for row in rows if row["mode"] == mode}


DIRECT = textwrap.dedent(
    """
    import json
    from graphmend.counting import count_breaks
    from tools.census import child, models

    counts = {}
    for name in ("gpt2:GPT2Model", "bart:BartModel"):
        entry = models.select(models.transformers_entries(), name)[0]
        model, config = models.build_transformers_model(entry)
        inputs = child._choose_inputs(model, config, {})
        model.eval()
        with __import__("torch").no_grad():
            _, count = count_breaks(model, **inputs)
        counts[name] = [count.breaks, count.graphs]
    print("COUNTS", json.dumps(counts))
    """
)


def _direct_counts(tmp_path: Path, mended: bool) -> dict:
    """Breaks and graphs measured with graphmend.counting in a plain process, or one
    started as `graphmend run --package transformers`."""
    script = tmp_path / "direct.py"
    script.write_text(DIRECT)
    prefix = ["-m", "graphmend", "run", "--package", "transformers"] if mended else []
    done = subprocess.run([sys.executable, *prefix, str(script)], cwd=CHECKOUT, env=child_environment(),
                          capture_output=True, text=True, timeout=900)
    line = next(line for line in done.stdout.splitlines() if line.startswith("COUNTS "))
    return json.loads(line[len("COUNTS "):])


def test_two_models_rows_match_a_direct_measurement(capsys, tmp_path) -> None:
    results = tmp_path / "rows.jsonl"
    code, err = _census(capsys, "--models", "gpt2,bart", "--results", results,
                        "--summary", tmp_path / "summary.json")
    assert code == 0, err
    rows = _rows(results)
    assert set(rows) == {(model, arm) for model in ("gpt2:GPT2Model", "bart:BartModel")
                         for arm in ("original", "graphmend")}
    for row in rows.values():
        assert row["status"] == "ok" and row["mode"] == "eval" and row["backend"] == "eager", row
        assert row["input_set"] == "text"
        assert row["breaks"] == len(row["break_records"]) or row["breaks"] >= len(row["break_records"])
    for arm, mended in (("original", False), ("graphmend", True)):
        direct = _direct_counts(tmp_path, mended)
        for model, (breaks, graphs) in direct.items():
            assert [rows[model, arm]["breaks"], rows[model, arm]["graphs"]] == [breaks, graphs], (model, arm)
    bart = rows["bart:BartModel", "original"]
    assert bart["breaks"] > 0 and not bart["fullgraph"]
    assert {record["gb_id"] for record in bart["break_records"]} == {"gb0291"}  # logger.warning_once
    for model in ("gpt2:GPT2Model", "bart:BartModel"):
        assert rows[model, "graphmend"]["identical"] == {"eager_outputs": True, "compiled_outputs": True}
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["totals"]["counted"] == 2 and summary["totals"]["differs"] == 0


CRASHING = "import os\n\ndef build():\n    os._exit(3)\n"
HANGING = "import time\n\ndef build():\n    time.sleep(600)\n"
SCRIPT = textwrap.dedent(
    """
    import torch

    def step(x):
        print("step")
        return x * 2

    print(torch.compile(step, backend="eager")(torch.ones(2)).tolist())
    """
)


def test_a_crash_or_timeout_in_one_child_is_recorded_and_the_census_goes_on(capsys, tmp_path) -> None:
    (tmp_path / "crashing.py").write_text(CRASHING)
    (tmp_path / "hanging.py").write_text(HANGING)
    (tmp_path / "printing.py").write_text(SCRIPT)
    results = tmp_path / "rows.jsonl"
    code, err = _census(capsys, "--no-transformers", "--model-file", tmp_path / "crashing.py",
                        "--model-file", tmp_path / "hanging.py", "--model-file", TINY_MODEL,
                        "--script", tmp_path / "printing.py", "--modes", "eval,train",
                        "--timeout", 90, "--jobs", 2, "--results", results)
    assert code == 0, err
    rows = _rows(results)
    for arm in ("original", "graphmend"):
        assert rows["file:crashing.py", arm]["status"] == "crash"
        assert rows["file:crashing.py", arm]["exit_code"] == 3
        assert rows["file:hanging.py", arm]["status"] == "timeout"
        assert rows["file:tiny_model.py", arm]["status"] == "ok"
        assert rows["script:printing.py", arm]["status"] == "ok"
    # Two modes for the model files, one run for the script.
    assert len(results.read_text().splitlines()) == 2 * (2 * 3 + 1)
    tiny, script = rows["file:tiny_model.py", "graphmend"], rows["script:printing.py", "graphmend"]
    assert (rows["file:tiny_model.py", "original"]["breaks"], tiny["breaks"]) == (2, 0)
    assert tiny["identical"] == {"eager_outputs": True, "compiled_outputs": True}
    trained = _rows(results, "train")["file:tiny_model.py", "graphmend"]
    assert trained["identical"] == {"eager_outputs": True, "compiled_outputs": True,
                                    "eager_gradients": True, "compiled_gradients": True}
    assert rows["script:printing.py", "original"]["breaks"] == 1 and script["breaks"] == 0
    assert script["identical"] == {"stdout": True}


def test_ray_local_cluster_runs_the_tasks(capsys, tmp_path) -> None:
    pytest.importorskip("ray")
    results = tmp_path / "rows.jsonl"
    code, err = _census(capsys, "--no-transformers", "--model-file", TINY_MODEL, "--modes", "eval,train",
                        "--ray-address", "local", "--results", results)
    assert code == 0, err
    rows = _rows(results)
    assert len(rows) == 2 and len(results.read_text().splitlines()) == 4
    for arm in ("original", "graphmend"):
        assert rows["file:tiny_model.py", arm]["status"] == "ok"
        assert rows["file:tiny_model.py", arm]["pid"] != os.getpid()
