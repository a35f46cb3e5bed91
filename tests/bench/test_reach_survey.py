"""bench/reach_survey.py: the model files it writes are loadable bench models, and its
table reports what a saved run holds (counts, equality, and why a model was not counted)."""

from __future__ import annotations

import ast
import importlib.util
import json
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).parents[2] / "bench" / "reach_survey.py"


@pytest.fixture(scope="module")
def survey():
    spec = importlib.util.spec_from_file_location("reach_survey", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_model_file_names_its_model_and_defines_build(survey, tmp_path) -> None:
    paths = survey.write_model_files(list(survey.MODEL_BUILDS), str(tmp_path))
    assert len(paths) == len(survey.MODEL_BUILDS)
    for name, path in zip(survey.MODEL_BUILDS, paths):
        tree = ast.parse(Path(path).read_text(), filename=path)
        assignments = {
            node.targets[0].id: ast.literal_eval(node.value)
            for node in tree.body
            if isinstance(node, ast.Assign) and node.targets[0].id in {"NAME", "PACKAGES"}
        }
        assert assignments == {"NAME": name, "PACKAGES": ("transformers",)}, path
        assert any(isinstance(node, ast.FunctionDef) and node.name == "build" for node in tree.body), path


def _arm(breaks=None, graphs=None, fullgraph=True, **extra) -> dict:
    return {"breaks": breaks, "graphs": graphs, "fullgraph": fullgraph,
            "environment": {"transformers": "4.52.4"}, **extra}


def test_the_table_shows_counts_equality_and_why_a_model_was_not_counted(survey, tmp_path) -> None:
    run = {"meta": {}, "models": [
        {"name": "olmoe", "quick": {"original": _arm(10, 11), "graphmend": _arm(0, 1)},
         "equality": {"bit_identical": True}},
        {"name": "dbrx", "quick": {
            "original": _arm(7, 8, False),
            "graphmend": _arm(7, 8, False, logged_breaks=[{"file": "/x/modeling_dbrx.py", "line": 677}] * 6)},
         "equality": {"bit_identical": True}},
        {"name": "gemma2", "quick": {
            "original": _arm(count_error="Traceback ...\nAssertionError: forbidden | callable\n\nSet TORCHDYNAMO_VERBOSE=1"),
            "graphmend": _arm()},
         "equality": {"bit_identical": None}},
    ]}
    saved = tmp_path / "batch-0.json"
    saved.write_text(json.dumps(run))
    rows = survey.summary_rows([str(saved)])
    assert rows[2] == "| olmoe | 4.52.4 | 10 -> 0 | 11 -> 1 | yes | yes / yes |  |"
    assert rows[3] == "| dbrx | 4.52.4 | 7 -> 7 | 8 -> 8 | yes | no / no | modeling_dbrx.py:677 (6) |"
    assert rows[4] == "| gemma2 | 4.52.4 | not counted: AssertionError: forbidden / callable | | | | |"


def test_an_unknown_model_is_a_one_line_error(tmp_path) -> None:
    import subprocess

    done = subprocess.run([sys.executable, str(SCRIPT), "--models", "gpt2,nope", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1].startswith("reach_survey.py: error: unknown model 'nope'")
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("content", [None, "{}", "not json"], ids=["missing", "no-models", "not-json"])
def test_a_saved_run_it_cannot_read_is_a_one_line_error(tmp_path, content) -> None:
    import subprocess

    saved = tmp_path / "run.json"
    if content is not None:
        saved.write_text(content)
    done = subprocess.run([sys.executable, str(SCRIPT), "--summarise", str(saved)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert lines[-1].startswith("reach_survey.py: error: cannot read a saved run: "), done.stderr
    assert "Traceback" not in done.stderr
