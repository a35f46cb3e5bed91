"""The benchmark's training pass (``graphmend bench --train``): the worker's ``train``
phase, the runner's bit-for-bit comparison of the arms' training, and its tables.

Fast tests run the phase in this process on tiny_train_model.py (dropout, a print, a
data-dependent if) or on saved tensors; the end-to-end run through worker processes is
slow, as the quick pass's is.
"""

import json
import os

import pytest
import torch

from benchmarks import report, runner
from benchmarks.page import PageRun, render_page
from benchmarks.runner import RunOptions, compare_training, run_suite
from benchmarks.suite import load_model_file
from benchmarks.training import UNCOMPILED, run_train, train_steps, training_loss

HERE = os.path.dirname(__file__)
TINY_TRAIN_MODEL = os.path.join(HERE, "tiny_train_model.py")


def _tiny_model():
    torch.manual_seed(0)
    return load_model_file(TINY_TRAIN_MODEL).build()


def test_the_train_phase_counts_each_backend_and_trains_from_the_same_weights():
    model, inputs = _tiny_model()
    initial = {name: value.clone() for name, value in model.state_dict().items()}
    result, outputs = {}, {}
    run_train(model, inputs, result, outputs, backends=("aot_eager", "eager"))
    assert model.training  # dropout active
    assert list(result["train"]) == [UNCOMPILED, "aot_eager", "eager"]
    for backend in ("aot_eager", "eager"):
        run = result["train"][backend]
        assert "error" not in run, run
        # The print and the if break each compiled step; the same graphs serve all steps.
        assert run["graphs"] >= 3 and run["breaks"] >= 2
        assert run["categories"] == {"DC": 1, "LC": 1}
        assert run["recompilations"] == []
        assert len(run["losses"]) == result["train_steps"] == 3
    saved = outputs[UNCOMPILED]
    assert sorted(name for name in saved if name.startswith("loss.")) == ["loss.0", "loss.1", "loss.2"]
    assert {name for name in saved if name.startswith("grad.")} == {
        f"grad.{name}" for name, _ in model.named_parameters()
    }
    # Each run starts from the initial weights: the same first loss, and weights that moved.
    assert all(torch.equal(outputs[name]["loss.0"], saved["loss.0"]) for name in outputs)
    assert not torch.equal(saved["param.linear.weight"], initial["linear.weight"])
    # TorchDynamo's eager backend runs the traced ops as written: bit for bit the same.
    for name, tensor in saved.items():
        assert torch.equal(outputs["eager"][name], tensor), name


def test_the_mended_model_says_what_it_declined_while_tracing_under_each_backend():
    from graphmend.runtime.store import store
    from helpers import original_and_mended

    with open(TINY_TRAIN_MODEL, encoding="utf-8") as handle:
        _, mended, result = original_and_mended(handle.read())
    assert result.changed
    torch.manual_seed(0)
    model, inputs = mended.build()
    # A decline left from another program: each backend's run must start without it.
    store.trace_time_declines[("<elsewhere>", 1)] = "an earlier program's decline"
    outcome, outputs = {}, {}
    run_train(model, inputs, outcome, outputs, backends=("aot_eager", "eager"))
    aot_eager, eager = outcome["train"]["aot_eager"], outcome["train"]["eager"]
    for run in (aot_eager, eager):
        assert "<elsewhere>" not in {row["file"] for row in run["declined"]}
    # Under aot_eager the print's join declines (its tensor would leave the joined
    # backward) and so does the if's (both arms require grad), each with its reason.
    declined = {row["line"]: row for row in aot_eager["declined"]}
    assert set(declined) == {18, 19}, aot_eager["declined"]
    assert declined[18]["condition"] and "require grad" in declined[19]["reason"]
    assert (aot_eager["graphs"], aot_eager["breaks"]) == (4, 3)
    # Under eager the print joins: the eager run must not take aot_eager's decline again.
    assert 18 not in {row["line"] for row in eager["declined"]}
    assert (eager["graphs"], eager["breaks"]) == (3, 2)


def test_the_original_arm_imports_no_graphmend_runtime():
    import subprocess
    import sys

    code = (
        "import sys, benchmarks.training as t, torch\n"
        "model = torch.nn.Linear(2, 1)\n"
        "result, outputs = {}, {}\n"
        "t.run_train(model, {'input': torch.ones(1, 2)}, result, outputs, backends=('eager',))\n"
        "assert 'declined' not in result['train']['eager'], result\n"
        "print('graphmend.runtime' in sys.modules)\n"
    )
    completed = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert completed.stdout.strip() == "False"


def test_every_generator_is_seeded_before_the_steps_so_dropout_draws_alike():
    first_model, inputs = _tiny_model()
    second_model, _ = _tiny_model()
    first = train_steps(first_model, first_model, inputs)
    torch.rand(5)  # a draw between the runs must not change the second
    second = train_steps(second_model, second_model, inputs)
    assert first.keys() == second.keys()
    assert all(torch.equal(first[name], second[name]) for name in first)


def test_the_loss_is_the_models_own_where_it_computed_one():
    class Output(dict):
        pass

    logits = torch.ones(2, 3, requires_grad=True)
    output = Output(logits=logits)
    assert training_loss(output).item() == 6.0
    output.loss = (logits * 2).mean()
    assert training_loss(output).item() == 2.0
    with pytest.raises(RuntimeError, match="no loss"):
        training_loss({"logits": torch.ones(2, 3)})


def _saved(tmp_path, name, runs, backends=("aot_eager",)):
    path = tmp_path / f"{name}.pt"
    torch.save(runs, path)
    return {"outputs_file": str(path), "train": {run: {} for run in (UNCOMPILED, *backends)}}


def _training_tensors(gradient=1.0, loss=2.0):
    return {
        "loss.0": torch.tensor(loss),
        "grad.weight": torch.tensor([gradient, 0.5]),
        "param.weight": torch.tensor([0.25, 0.5]),
    }


def test_compare_training_says_which_of_losses_gradients_and_parameters_differ(tmp_path):
    original = _saved(
        tmp_path, "original", {UNCOMPILED: _training_tensors(), "aot_eager": _training_tensors()}
    )
    same = _saved(tmp_path, "same", {UNCOMPILED: _training_tensors(), "aot_eager": _training_tensors()})
    result = compare_training(original, same)
    assert result["identical"] is True and result["problems"] == []
    assert result["runs"]["aot_eager"]["original_matches_uncompiled"] is True

    nudged = _saved(
        tmp_path,
        "nudged",
        {UNCOMPILED: _training_tensors(), "aot_eager": _training_tensors(gradient=1.0 + 1e-6)},
    )
    result = compare_training(original, nudged)
    assert result["identical"] is False
    check = result["runs"]["aot_eager"]
    assert (check["gradients"], check["losses"], check["parameters"]) == (False, True, True)
    assert result["problems"][0].startswith("aot_eager: the graphmend arm's training differs")
    assert result["runs"][UNCOMPILED]["equal"] is True


def test_compare_training_without_the_graphmend_run_is_undecided(tmp_path):
    original = _saved(
        tmp_path, "original", {UNCOMPILED: _training_tensors(), "aot_eager": _training_tensors()}
    )
    crashed = _saved(tmp_path, "crashed", {UNCOMPILED: _training_tensors()})
    result = compare_training(original, crashed)
    assert result["identical"] is None
    assert result["runs"]["aot_eager"] is None
    assert result["problems"] == ["aot_eager: the graphmend arm saved no training run"]


def _train_entry(name, before, after, identical=True):
    def arm(graphs, breaks):
        return {
            "train": {
                UNCOMPILED: {"losses": [1.0]},
                "aot_eager": {
                    "graphs": graphs,
                    "breaks": breaks,
                    "frames_skipped": 0,
                    "logged_breaks": [{"category": "DC"}] * breaks,
                    "categories": {"DC": breaks} if breaks else {},
                    "recompilations": [],
                    "declined": [{"condition": "W207"}] * breaks,
                },
            }
        }

    check = {
        "equal": identical,
        "different": [] if identical else ["grad.weight"],
        "missing": [],
        "losses": True,
        "gradients": identical,
        "parameters": True,
        "original_matches_uncompiled": True,
    }
    return {
        "name": name,
        "train": {"original": arm(*before), "graphmend": arm(*after)},
        "train_equality": {
            "runs": {UNCOMPILED: dict(check, equal=True), "aot_eager": check},
            "problems": [] if identical else ["aot_eager: differs"],
            "identical": identical,
        },
    }


def _train_run():
    return {
        "meta": {
            "date": "2026-01-01 00:00 UTC",
            "seconds": 60.0,
            "argv": ["graphmend", "--train-only", "--train-backends", "aot_eager"],
            "options": {"train": True, "train_only": True, "train_backends": ["aot_eager"]},
        },
        "models": [_train_entry("whole", (3, 2), (1, 0)), _train_entry("broken", (2, 1), (2, 1), False)],
    }


def test_the_training_table_shows_both_arms_and_whether_the_gradients_are_identical():
    text = report.render_markdown(_train_run())
    assert "### Training step" in text
    assert "| whole | aot_eager | 3 | 2 | DC (2) | 1 | 0 | - | 0 / 0 | none | yes | yes | yes |" in text
    assert "| broken | aot_eager | 2 | 1 | DC (1) | 2 | 1 | DC (1) | 0 / 0 | W207 (1) | no | no | yes |" in text
    assert "- aot_eager: breaks 3 -> 1 over 2 models; whole 0 -> 1; gradients, losses and " \
        "parameters identical in 1 / 2" in text
    # A training pass alone has no eval-mode counts: no table of dashes for them.
    assert "paper breaks" not in text
    assert "train_backends=aot_eager" in text
    assert "training equality: aot_eager: differs" in text
    terminal = report.render_terminal(_train_run())
    assert "training, aot_eager: breaks 3 -> 1; whole 0 -> 1 of 2; identical 1/2" in terminal


def test_a_run_without_a_training_pass_renders_as_before():
    run = {"meta": {}, "models": [{"name": "m", "quick": {"original": {}, "graphmend": {}}}]}
    text = report.render_markdown(run)
    assert "Training step" not in text and "paper breaks" in text
    assert "training" not in report.render_terminal(run)


def test_the_results_page_shows_each_training_run_with_its_command():
    page = render_page(
        [PageRun("transformers 4.52.4", {"meta": {}, "models": []})],
        training_runs=[("transformers 4.52.4", _train_run())],
    )
    assert "## Training step, transformers 4.52.4" in page
    assert "`graphmend bench --train-only --train-backends aot_eager`: 2026-01-01 00:00 UTC, 60 s" in page
    assert "| whole | aot_eager |" in page


def test_the_command_on_the_page_leaves_out_where_the_results_went():
    argv = ["benchmarks", "--train-only", "--json", "/tmp/r.json", "--markdown=r.md", "--models", "t5"]
    assert report.measuring_command(argv) == "graphmend bench --train-only --models t5"


def _fake_workers(monkeypatch, started, **extra):
    def fake_worker(model, arm, phase, options, scratch, hook_cache_dir):
        started.append((arm, phase))
        return {"arm": arm, "wall_seconds": 0.0, **extra}

    monkeypatch.setattr(runner, "run_worker_process", fake_worker)


def test_a_training_run_runs_the_train_phase_of_both_arms_after_the_quick_pass(monkeypatch):
    started, steps = [], []
    _fake_workers(monkeypatch, started)
    model = load_model_file(TINY_TRAIN_MODEL, import_module=False)
    options = RunOptions(quick=True, train=True)
    run = run_suite([model], options, progress=lambda message, done, total: steps.append((done, total)))
    assert started == [
        ("original", "quick"),
        ("graphmend", "quick"),
        ("original", "train"),
        ("graphmend", "train"),
    ]
    (entry,) = run["models"]
    assert entry["train_equality"]["identical"] is None  # the fakes saved nothing
    assert steps[-1] == (4, 4)


def test_train_only_runs_the_train_phase_alone(monkeypatch):
    started, steps = [], []
    _fake_workers(monkeypatch, started)
    model = load_model_file(TINY_TRAIN_MODEL, import_module=False)
    options = RunOptions(train=True, train_only=True)
    run_suite([model], options, progress=lambda message, done, total: steps.append((done, total)))
    assert started == [("original", "train"), ("graphmend", "train")]
    assert steps[-1] == (2, 2)


def test_a_model_skipped_in_training_counts_its_timing_steps_as_done(monkeypatch):
    started, steps = [], []
    _fake_workers(monkeypatch, started, skipped="missing requirement(s): chronos")
    model = load_model_file(TINY_TRAIN_MODEL, import_module=False)
    options = RunOptions(timing_only=True, train=True, repeats=2)
    run = run_suite([model], options, progress=lambda message, done, total: steps.append((done, total)))
    assert started == [("original", "train"), ("graphmend", "train")]
    assert run["models"][0]["skipped"].startswith("missing")
    assert steps[-1] == (6, 6)


def test_the_runner_passes_the_training_backends_to_each_worker(monkeypatch, tmp_path):
    commands = []

    def fake_run(command, **_):
        commands.append(command)
        raise runner.subprocess.TimeoutExpired(command, 1)

    monkeypatch.setattr(runner.subprocess, "run", fake_run)
    model = load_model_file(TINY_TRAIN_MODEL, import_module=False)
    options = RunOptions(train=True, train_backends=("aot_eager",))
    result = runner.run_worker_process(model, "original", "train", options, str(tmp_path), str(tmp_path))
    assert "worker_error" in result
    (command,) = commands
    assert command[command.index("--phase") + 1] == "train"
    assert command[command.index("--train-backends") + 1] == "aot_eager"


def test_an_unknown_training_backend_is_a_usage_error(capsys):
    from benchmarks.cli import bench_command

    assert bench_command(["--train-only", "--train-backends", "inductor", "--models", "t5"]) == 2
    assert "--train-backends: not one of aot_eager, eager: inductor" in capsys.readouterr().err


@pytest.mark.slow  # worker processes for both arms, the graphmend one with the import hook
def test_both_arms_train_bit_for_bit_alike(tmp_path):
    model = load_model_file(TINY_TRAIN_MODEL, import_module=False)
    options = RunOptions(train=True, train_only=True, timeout=300)
    run = run_suite([model], options, progress=lambda *_: None)
    (entry,) = run["models"]
    for arm in ("original", "graphmend"):
        result = entry["train"][arm]
        assert "error" not in result and "worker_error" not in result, result
        for name, backend_run in result["train"].items():
            assert "error" not in backend_run, (arm, name, backend_run)
    assert entry["train"]["graphmend"]["hook"]["transform_calls"] + entry["train"]["graphmend"][
        "hook"
    ]["cache_hits"] >= 1
    assert entry["train_equality"]["identical"] is True, entry["train_equality"]
    assert set(entry["train_equality"]["runs"]) == {UNCOMPILED, "aot_eager", "eager"}
    json.dumps(run)


@pytest.mark.slow  # a transformers model, both arms in worker processes
def test_a_suite_model_trains_alike_in_both_arms():
    pytest.importorskip("transformers")
    from benchmarks.suite import get_model

    options = RunOptions(train=True, train_only=True, train_backends=("aot_eager",), timeout=600)
    run = run_suite([get_model("biogpt")], options, progress=lambda *_: None)
    (entry,) = run["models"]
    assert entry["train_equality"]["identical"] is True, entry["train_equality"]
    for arm in ("original", "graphmend"):
        assert entry["train"][arm]["train"]["aot_eager"]["graphs"] >= 1


def test_the_train_phase_takes_a_models_training_inputs(tmp_path):
    # A batch norm needs more than one value per channel in train mode: CLAP's fusion
    # saw one long row with the suite's inputs and failed even uncompiled.
    from benchmarks import worker
    from benchmarks.suite import REGISTRY, BenchModel, register

    def build():
        model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4))
        return model, {"input": torch.randn(1, 3)}

    def training_inputs():
        return {"input": torch.randn(2, 3)}

    register(BenchModel("batch-norm-model", build, requires=(), training_inputs=training_inputs))
    try:
        args = worker.build_parser().parse_args(
            ["--model", "batch-norm-model", "--arm", "original", "--phase", "train",
             "--train-backends", "eager", "--result", str(tmp_path / "result.json")]
        )
        result = worker.run_worker(args)
    finally:
        del REGISTRY["batch-norm-model"]
    assert "error" not in result, result
    for run in result["train"].values():
        assert "error" not in run, run
