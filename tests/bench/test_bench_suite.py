"""The built-in suite, the registry, model files, and the paper's Table 2 figures."""

import pytest

from benchmarks import paper, suite
from benchmarks.suite import BenchModel, load_model_file, register, select_models

BUILTIN = [
    "t5",
    "flan-t5",
    "bart",
    "marian",
    "blenderbot",
    "pegasus-causal",
    "biogpt",
    "whisper",
    "phi3-longrope",
    "layoutlmv3",
    "longformer",
    "grounding-dino",
    "clap",
    "chronos-bolt",
    "florence2",
]
# Models past the paper's Table 2 (no paper row): their breaks need the Capture rule.
PAST_THE_PAPER = ["qwen2-audio", "mixtral", "qwen2-moe"]


@pytest.fixture
def registry(monkeypatch):
    """A copy of the registry that the test may change."""
    monkeypatch.setattr(suite, "REGISTRY", dict(suite.REGISTRY))
    return suite.REGISTRY


def test_the_suite_has_the_paper_models():
    assert list(suite.REGISTRY) == BUILTIN + PAST_THE_PAPER


@pytest.mark.parametrize("name", PAST_THE_PAPER)
def test_each_model_past_the_paper_names_its_class_and_no_paper_row(name):
    model = suite.REGISTRY[name]
    assert model.paper is None and model.transformers_class and callable(model.build)


@pytest.mark.parametrize("name", BUILTIN)
def test_each_builtin_model_names_a_paper_row_and_a_class(name):
    model = suite.REGISTRY[name]
    assert model.paper is paper.PAPER_ROWS[model.paper_name]
    assert model.transformers_class
    assert "transformers" in model.packages
    assert callable(model.build)


def test_register_adds_a_model_and_refuses_a_second_with_the_same_name(registry):
    model = BenchModel("mine", lambda: (None, {}), packages=("mine",), requires=())
    assert register(model) is model
    assert select_models("mine") == [model]
    with pytest.raises(ValueError, match="already registered"):
        register(BenchModel("mine", lambda: (None, {})))
    replacement = BenchModel("mine", lambda: (None, {}), notes="second")
    register(replacement, replace=True)
    assert registry["mine"] is replacement


def test_register_refuses_a_paper_name_not_in_table_2(registry):
    with pytest.raises(ValueError, match="Table 2"):
        register(BenchModel("other", lambda: (None, {}), paper_name="gpt-17"))


def test_select_models_keeps_the_order_asked_and_names_unknown_models():
    assert [m.name for m in select_models("bart, t5")] == ["bart", "t5"]
    assert [m.name for m in select_models("")] == BUILTIN + PAST_THE_PAPER
    with pytest.raises(KeyError, match="unknown bench model 'nope'"):
        select_models("t5,nope")


def test_a_missing_requirement_is_reported_not_raised():
    model = BenchModel("x", lambda: (None, {}), requires=("surely_not_an_installed_module",))
    assert model.missing_requirements() == ["surely_not_an_installed_module"]


def test_load_model_file_reads_name_without_importing(tmp_path):
    path = tmp_path / "my_bench_models.py"
    path.write_text('NAME = "my-model"\nraise SystemExit("imported")\n')
    model = load_model_file(str(path), import_module=False)
    assert model.name == "my-model"
    assert model.packages == ("my_bench_models",)
    assert model.module_file == str(path)


def test_load_model_file_reads_packages_without_importing(tmp_path):
    # The worker loads the file this way: the graphmend arm must still rewrite the
    # packages it names (florence2's file named transformers and got none).
    path = tmp_path / "my_bench_packages.py"
    path.write_text('NAME = "mine"\nPACKAGES = ("transformers", "helpers")\nraise SystemExit("imported")\n')
    model = load_model_file(str(path), import_module=False)
    assert model.packages == ("my_bench_packages", "transformers", "helpers")


def test_load_model_file_builds_from_the_file(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    path = tmp_path / "bench_file_two.py"
    path.write_text("PACKAGES = ['helpers']\ndef build():\n    return 'model', {'x': 1}\n")
    model = load_model_file(str(path))
    assert model.name == "bench_file_two"
    assert model.packages == ("bench_file_two", "helpers")
    assert model.build() == ("model", {"x": 1})


def test_table_2_adds_up_to_the_papers_totals():
    rows = paper.TABLE_2
    assert len(rows) == paper.PAPER_MODELS_TOTAL == 27
    assert sum(row.breaks for row in rows) == paper.PAPER_BREAKS_TOTAL == 147
    removed = sum(round(row.breaks * row.fixed_percent / 100) for row in rows)
    assert removed == paper.PAPER_BREAKS_REMOVED == 107
    assert sum(row.fixed_percent == 100 for row in rows) == paper.PAPER_MODELS_FULLY_FIXED == 21


def test_table_2_reasons_add_up_to_the_breaks_where_counted():
    for row in paper.TABLE_2:
        if row.reasons_text:  # stella: "DO + DS" without counts
            continue
        assert sum(row.reasons.values()) == row.breaks, row.model


def test_format_reasons_uses_the_legend_order():
    assert paper.format_reasons({"LC": 3, "DC": 4}) == "DC (4) + LC (3)"
    assert paper.format_reasons({}) == "-"
    assert paper.PAPER_ROWS["stella-en-400M-v5"].reasons_label() == "DO + DS"


@pytest.mark.slow  # builds every model of the suite with transformers
def test_builtin_models_build_with_transformers():
    pytest.importorskip("transformers")
    import torch

    torch.manual_seed(0)
    model, kwargs = suite.get_model("biogpt").build()
    output = model.eval()(**kwargs)
    assert output.logits.shape[:2] == kwargs["input_ids"].shape
