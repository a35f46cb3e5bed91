"""``graphmend census`` without running a model: enumeration, usage errors, the results
file (resume, torn lines), the comparison and the summary."""

from __future__ import annotations

import json
import sys

import pytest

from graphmend.cli.main import main
from tools.census import runner
from tools.census.models import Entry, select, transformers_entries
from tools.census.runner import ResultsFile, Task, compare, pending
from tools.census.summary import summarise, text_report


def _cli(capsys, *argv):
    code = main(["census", *map(str, argv)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_enumeration_finds_every_base_class_of_transformers_4_52_4() -> None:
    transformers = pytest.importorskip("transformers")
    if transformers.__version__ != "4.52.4":
        pytest.skip("the count is that of transformers 4.52.4")
    entries = transformers_entries()
    # 319 model types; funnel maps to two base classes.
    assert len(entries) == 320
    assert len({entry.name for entry in entries}) == 320
    assert {"gpt2:GPT2Model", "bart:BartModel", "funnel:FunnelBaseModel"} <= {e.name for e in entries}
    with_heads = transformers_entries(("base", "causal-lm"))
    assert "gpt2:GPT2LMHeadModel" in {entry.name for entry in with_heads}
    assert len(with_heads) > len(entries)


def test_selection_by_model_type_or_class_in_the_given_order() -> None:
    entries = [Entry("gpt2:GPT2Model", "transformers", "gpt2", "GPT2Model"),
               Entry("bart:BartModel", "transformers", "bart", "BartModel")]
    assert select(entries, "BartModel,gpt2") == entries[::-1]
    with pytest.raises(KeyError, match="'nosuchmodel'"):
        select(entries, "gpt2,nosuchmodel")


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--models", "gpt2,nosuchmodel"], "unknown model 'nosuchmodel'"),
        (["--no-transformers", "--model-file", "/no/such/model.py"], "no such file: /no/such/model.py"),
        (["--no-transformers", "--script", "/no/such/script.py"], "no such file: /no/such/script.py"),
        (["--modes", "eval,inference"], "unknown mode 'inference'"),
        (["--heads", "base,decoder"], "unknown head 'decoder'"),
        (["--models", "gpt2", "--shard", "3/2"], "--shard '3/2'"),
        (["--models", "gpt2", "--jobs", "0"], "--jobs must be at least 1"),
    ],
)
def test_bad_input_is_a_one_line_error_and_exit_2(capsys, tmp_path, argv, message) -> None:
    results = tmp_path / "rows.jsonl"
    code, out, err = _cli(capsys, *argv, "--results", results)
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("graphmend census: error: ") and message in err, err
    assert out == "" and not results.exists()


def test_ray_address_without_ray_is_a_one_line_error(capsys, tmp_path, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    model = tmp_path / "model.py"
    model.write_text("def build(): pass\n")
    code, _, err = _cli(capsys, "--no-transformers", "--model-file", model, "--ray-address", "auto",
                        "--results", tmp_path / "rows.jsonl")
    assert code == 2 and err.count("\n") == 1 and "needs ray" in err


def _rows(name: str, mode: str = "eval", breaks=(2, 0), **mended) -> list[dict]:
    base = {"model": name, "mode": mode, "backend": "eager", "status": "ok", "graphs": 1}
    record = {"gb_type": "Data-dependent branching", "gb_id": "gb0170", "category": "DC",
              "file": "/x/transformers/models/m/modeling_m.py", "line": 7, "source": "if x:"}
    original = {**base, "arm": "original", "breaks": breaks[0], "graphs": breaks[0] + 1,
                "break_records": [record] * breaks[0], "fullgraph": breaks[0] == 0}
    graphmend = {**base, "arm": "graphmend", "breaks": breaks[1], "graphs": breaks[1] + 1,
                 "break_records": [record] * breaks[1], "fullgraph": breaks[1] == 0,
                 "identical": {"eager_outputs": True, "compiled_outputs": True}, **mended}
    return [original, graphmend]


def test_resume_runs_only_the_tasks_whose_rows_are_missing(capsys, tmp_path, monkeypatch) -> None:
    results = tmp_path / "rows.jsonl"
    ResultsFile(str(results)).append(_rows("gpt2:GPT2Model"))
    ran = []

    def fake_task(task, python=sys.executable):
        ran.append(task.entry.name)
        return _rows(task.entry.name, breaks=(1, 1))

    monkeypatch.setattr(runner, "run_task", fake_task)
    code, out, err = _cli(capsys, "--models", "gpt2,bart", "--results", results)
    assert code == 0, err
    assert ran == ["bart:BartModel"]
    assert "2 tasks, 1 already in" in err
    # A second run has nothing left to do.
    code, _, err = _cli(capsys, "--models", "gpt2,bart", "--results", results,
                        "--summary", tmp_path / "summary.json")
    assert code == 0 and ran == ["bart:BartModel"] and "0 to run" in err
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["totals"]["breaks_original"] == 3 and summary["totals"]["breaks_graphmend"] == 1
    assert [row["model"] for row in summary["models"]] == ["bart:BartModel", "gpt2:GPT2Model"]


def test_a_torn_last_line_is_ignored_and_the_next_task_starts_on_its_own_line(tmp_path) -> None:
    path = tmp_path / "rows.jsonl"
    results = ResultsFile(str(path))
    results.append(_rows("a"))
    with open(path, "a") as handle:
        handle.write('{"model": "b", "mode": "ev')  # killed while writing
    entry = Entry("b", "transformers", "b", "B")
    task = Task(entry, "eval", "eager", 10, 1.0)
    assert pending([task], results.finished()) == [task]
    results.append(_rows("b"))
    assert [row["model"] for row in results.rows()] == ["a", "a", "b", "b"]
    assert pending([task], results.finished()) == []


def test_comparison_names_the_differing_outputs_and_gradients() -> None:
    original = {"eager_outputs": {"output.logits": "aa"}, "compiled_gradients": {"w": "1", "b": "2"}}
    mended = {"eager_outputs": {"output.logits": "aa"}, "compiled_gradients": {"w": "1", "b": "3"}}
    assert compare(original, mended) == {
        "eager_outputs": True, "compiled_gradients": False, "compiled_gradients_differing": ["b"],
    }


def test_an_original_that_differs_from_call_to_call_is_not_compared() -> None:
    """A model seeding itself from the system's entropy (reformer's reversible layers in
    training) differs between two seeded calls of the original: its arms differ too,
    and that is no difference of graphmend's."""
    original = {"eager_outputs": {"output.logits": "aa"}, "varies_between_calls": True}
    mended = {"eager_outputs": {"output.logits": "bb"}}
    verdict = compare(original, mended)
    assert list(verdict) == ["not_comparable"]
    rows = _rows("a", breaks=(1, 1), identical=verdict)
    summary = summarise(rows)
    assert (summary["totals"]["differs"], summary["totals"]["not_comparable"]) == (0, 1)


def test_summary_counts_per_model_and_cause_and_flags_worse_and_differing() -> None:
    rows = (
        _rows("a", breaks=(2, 0))
        + _rows("b", breaks=(1, 2))
        + _rows("c", breaks=(1, 1), identical={"compiled_outputs": False})
        + [{"model": "d", "mode": "eval", "backend": "eager", "arm": arm, "status": "timeout"}
           for arm in ("original", "graphmend")]
    )
    summary = summarise(rows)
    totals = summary["totals"]
    assert (totals["tasks"], totals["counted"], totals["status_timeout"]) == (4, 3, 1)
    assert (totals["breaks_original"], totals["breaks_graphmend"]) == (4, 3)
    assert (totals["whole_original"], totals["whole_graphmend"], totals["made_whole"]) == (0, 1, 1)
    assert (totals["worse"], totals["differs"]) == (1, 1)
    [cause] = summary["causes"]
    assert cause["cause"] == "Data-dependent branching" and cause["gb_id"] == "gb0170"
    assert (cause["breaks_original"], cause["breaks_graphmend"]) == (4, 3)
    assert cause["models_graphmend"] == ["b", "c"] and cause["categories"] == ["DC"]
    assert summary["sites"][0]["site"] == "models/m/modeling_m.py:7"
    report = text_report(summary)
    assert "breaks 4 -> 3" in report and "WORSE: b" in report and "DIFFERS: c" in report


def test_a_waveform_leaves_the_feature_encoder_frames_for_two_specaugment_masks() -> None:
    # In training mode wav2vec2-style models mask spans of `mask_time_length` frames;
    # fewer frames than that raise in both arms, and the model is never counted.
    transformers = pytest.importorskip("transformers")
    import math

    from tools.census.models import _waveform, tiny_config

    config = tiny_config(transformers.HubertConfig)
    samples = _waveform(config).shape[-1]
    frames = samples // math.prod(config.conv_stride)
    assert frames >= 2 * config.mask_time_length


def test_an_arm_draws_the_same_numbers_from_numpy_and_python_in_each_process() -> None:
    # SpecAugment draws from numpy: unseeded, the two arms' processes computed other masks.
    numpy = pytest.importorskip("numpy")
    import random

    from benchmarks.training import seed_every_generator

    seed_every_generator()
    first = (numpy.random.rand(), random.random())
    seed_every_generator()
    assert (numpy.random.rand(), random.random()) == first


def test_the_page_renders_each_summary_with_its_command_models_and_causes(tmp_path) -> None:
    from tools.census import page

    rows = _rows("a", breaks=(2, 0)) + _rows("b", breaks=(1, 2)) + _rows("c", breaks=(0, 0))
    summary_path = tmp_path / "summary.json"
    summary_path.write_text(json.dumps(summarise(rows)))
    out = tmp_path / "census.md"
    command = "graphmend census --shard 0/12 --summary s.json"
    assert page.main([f"{command}={summary_path}", "--out", str(out)]) == 0
    text = out.read_text()
    assert f"`{command}`" in text
    assert "| 3 | 3 | 3 -> 2 | 2 -> 1 |" in text
    # Models that break in either arm, most breaks first; a model whole in both is left out.
    assert text.index("| a | eval | 2 -> 0 |") < text.index("| b | eval | 1 -> 2 |")
    assert "| c |" not in text
    assert "| Data-dependent branching | gb0170 | DC | 1 | 3 -> 2 |" in text


def test_the_page_refuses_a_file_that_is_not_a_summary(tmp_path, capsys) -> None:
    from tools.census import page

    bad = tmp_path / "rows.jsonl"
    bad.write_text('{"model": "a"}\n')
    assert page.main([f"graphmend census={bad}", "--out", str(tmp_path / "p.md")]) == 2
    assert "not a census summary" in capsys.readouterr().err
    assert not (tmp_path / "p.md").exists()


@pytest.mark.parametrize("name", ["eager", "aot_eager"])
def test_the_counting_backend_is_known_as_the_backend_it_counts_for(name) -> None:
    # Under autograd graphmend joins graphs only for backends it knows; an unknown
    # wrapper made the census measure less than a user of that backend gets.
    import types

    from graphmend.runtime.backends import backend_is
    from tools.census.child import CountingBackend

    output = types.SimpleNamespace(compiler_fn=CountingBackend(name))
    assert backend_is(output, (name,), None)
    assert not backend_is(output, ("inductor",), None)


# ---------------------------------------------------------------------------------
# Tiny configs: small fake configs, so these run with whichever transformers is installed.
# ---------------------------------------------------------------------------------


def _config(model_type: str = "fake", **attributes):
    """A config of a fresh class holding ``attributes`` (sub-configs among them)."""
    transformers = pytest.importorskip("transformers")

    class FakeConfig(transformers.PretrainedConfig):
        pass

    FakeConfig.model_type = model_type
    config = FakeConfig()
    for key, value in attributes.items():
        setattr(config, key, value)
    return config


def test_tiny_sizes_reach_a_nested_config_of_any_name() -> None:
    from tools.census.models import _tiny_values

    speech = _config(hidden_size=512, num_hidden_layers=12)
    values = _tiny_values(_config(hidden_size=768, speech_encoder_config=speech))
    assert values["hidden_size"] == 32
    assert values["speech_encoder_config"]["hidden_size"] == 32
    assert values["speech_encoder_config"]["num_hidden_layers"] == 2


def test_a_list_summing_to_a_shrunk_size_still_sums_to_it() -> None:
    # Reformer's axial position factors must sum to its width.
    from tools.census.models import _tiny_values

    values = _tiny_values(_config(hidden_size=256, axial_pos_embds_dim=(64, 192), axial_pos_shape=(64, 64)))
    assert sum(values["axial_pos_embds_dim"]) == values["hidden_size"] == 32
    assert values["axial_pos_embds_dim"] == (8, 24)
    assert "axial_pos_shape" not in values  # sums to nothing shrunk


def test_a_size_equal_to_a_width_follows_it_across_configs() -> None:
    # A codec's groups are its channels; a vision tower's output is the text model's width.
    from tools.census.models import _tiny_values

    codec = _tiny_values(_config(hidden_size=512, upsample_groups=512, codebook_dim=256))
    assert codec["upsample_groups"] == codec["hidden_size"] == 32
    assert "codebook_dim" not in codec
    vision = _config(hidden_size=1536, out_hidden_size=4096, depth=24, num_heads=12)
    values = _tiny_values(_config(text_config=_config(hidden_size=4096), vision_config=vision))
    assert values["vision_config"]["out_hidden_size"] == values["text_config"]["hidden_size"] == 32
    assert values["vision_config"]["depth"] == 2 and values["vision_config"]["num_heads"] == 4


def test_xlm_names_its_width_and_vocabulary_its_own_way() -> None:
    from tools.census.models import _tiny_values

    values = _tiny_values(_config(emb_dim=2048, n_words=30145))
    assert values["emb_dim"] == 32 and values["n_words"] == 100


def test_a_stem_follows_the_first_stage_width() -> None:
    # TextNet's stem feeds its first stage: both shrink together.
    from tools.census.models import _tiny_values

    values = _tiny_values(_config(hidden_sizes=[64, 64, 128, 256], stem_out_channels=64, depths=[3, 4, 4, 4]))
    assert values["hidden_sizes"] == [32] * 4 and values["stem_out_channels"] == 32
    assert values["depths"] == [1] * 4


def test_a_count_of_stages_keeps_its_stages_and_their_heads_divide_them() -> None:
    # Swin v2 names its stage count num_layers, with one entry a stage in each list.
    from tools.census.models import _tiny_values

    values = _tiny_values(_config(embed_dim=96, depths=[2, 2, 6, 2], num_heads=[3, 6, 12, 24], num_layers=4,
                                  pretrained_window_sizes=[0, 0, 0, 0]))
    assert "num_layers" not in values and "pretrained_window_sizes" not in values
    assert values["depths"] == [1] * 4 and values["num_heads"] == [2] * 4
    assert values["embed_dim"] % 2 == 0
    # SegFormer's per-stage heads go by the name of a count.
    values = _tiny_values(_config(hidden_sizes=[32, 64, 160, 256], num_attention_heads=[1, 2, 5, 8]))
    assert all(width % heads == 0 for width, heads in zip(values["hidden_sizes"], values["num_attention_heads"]))


def test_a_per_layer_list_keeps_one_entry_a_layer() -> None:
    from tools.census.models import _tiny_values

    values = _tiny_values(_config(num_hidden_layers=6, layer_types=["full", "sliding"] * 3))
    assert values["layer_types"] == ["full", "sliding"]
    # Counts a layer are the config's to derive from the layer count.
    values = _tiny_values(_config(num_hidden_layers=4, num_attention_heads=16, heads_per_layer=[16, 16, 8, 8]))
    assert "heads_per_layer" not in values


def test_a_per_layer_list_keeps_a_layer_of_each_kind_and_the_count_grows_to_hold_them() -> None:
    # A hybrid whose first two layers are convolutions still gets its attention layers.
    from tools.census.models import _tiny_values

    kinds = ["conv", "conv", "full_attention", "conv", "sliding_attention", "conv"]
    values = _tiny_values(_config(num_hidden_layers=6, layer_types=kinds))
    assert values["layer_types"] == ["conv", "sliding_attention", "full_attention"]
    assert values["num_hidden_layers"] == 3
    # Every per-layer list of kinds takes the grown count.
    values = _tiny_values(_config(num_hidden_layers=6, layer_types=kinds, mlp_layer_types=["dense"] + ["sparse"] * 5))
    assert len(values["layer_types"]) == len(values["mlp_layer_types"]) == values["num_hidden_layers"] == 3
    assert values["mlp_layer_types"] == ["dense", "sparse", "sparse"]


def test_twice_a_width_stays_twice_it() -> None:
    from tools.census.models import _tiny_values

    values = _tiny_values(_config(hidden_size=2560, attention_hidden_size=5120))
    assert values["attention_hidden_size"] == 2 * values["hidden_size"] == 64
    # Another size four times a width is a sum of widths, not a multiple (XCodec).
    assert "codebook_dim" not in _tiny_values(_config(hidden_size=256, codebook_dim=1024))


def test_a_mamba_mixer_keeps_expand_times_width_equal_to_heads_times_head_size() -> None:
    from tools.census.models import _tiny_values

    values = _tiny_values(_config(hidden_size=4096, mamba_expand=2, mamba_n_heads=128, mamba_d_head=64))
    assert 2 * values["hidden_size"] == values["mamba_n_heads"] * values["mamba_d_head"]


def test_a_model_over_the_cap_is_counted_without_being_built() -> None:
    # Sizes that do not fit a config leave its defaults, some of billions of parameters:
    # counted on the meta device, such a model takes no memory.
    pytest.importorskip("transformers")
    from tools.census.models import Entry, TooLarge, build_transformers_model

    entry = Entry("gpt2:GPT2Model", "transformers", "gpt2", "GPT2Model")
    with pytest.raises(TooLarge) as raised:
        build_transformers_model(entry, max_parameters=1000)
    model, _ = build_transformers_model(entry, max_parameters=raised.value.parameters)
    assert sum(parameter.numel() for parameter in model.parameters()) == raised.value.parameters
    assert next(model.parameters()).device.type == "cpu"


def test_routing_picks_no_more_experts_than_there_are_in_groups_of_two_at_least() -> None:
    from tools.census.models import _tiny_values

    values = _tiny_values(_config(n_routed_experts=256, num_experts_per_tok=8, n_group=8, topk_group=4))
    assert values["n_routed_experts"] == 4 and values["num_experts_per_tok"] == 4
    assert values["n_routed_experts"] // values["n_group"] >= 2
    assert values["topk_group"] <= values["n_group"]


def test_multi_head_attention_stays_multi_head() -> None:
    from tools.census.models import _tiny_values

    assert _tiny_values(_config(num_attention_heads=64, num_key_value_heads=64))["num_key_value_heads"] == 4
    assert _tiny_values(_config(num_attention_heads=32, num_key_value_heads=8))["num_key_value_heads"] == 2
    assert _tiny_values(_config(num_attention_heads=32, num_key_value_heads=None))["num_key_value_heads"] == 4


def test_a_head_size_left_unset_is_the_width_over_the_heads() -> None:
    from tools.census.models import _tiny_values

    assert _tiny_values(_config(hidden_size=4096, num_attention_heads=32, head_dim=None))["head_dim"] == 8
    assert _tiny_values(_config(vocab_size=None))["vocab_size"] == 100


def test_rotary_sections_split_the_shrunk_heads_frequencies() -> None:
    from tools.census.models import _tiny_values

    rope = {"rope_type": "default", "mrope_section": [16, 24, 24]}
    values = _tiny_values(_config(hidden_size=4096, num_attention_heads=32, rope_parameters=rope))
    assert values["rope_parameters"]["mrope_section"] == [1, 1, 2]  # head 32 / 4 = 8: 4 frequencies
    # A multimodal model's text config naming no sections gets them; a text-only one does not.
    text = _config(hidden_size=4096, num_attention_heads=32, rope_parameters={"rope_type": "default"})
    values = _tiny_values(_config(text_config=text, vision_config=_config(hidden_size=64)))
    assert sum(values["text_config"]["rope_parameters"]["mrope_section"]) == 4
    assert "rope_parameters" not in _tiny_values(text)
    # That text config built on its own is still a multimodal model's.
    alone = _config("fake_vl_text", hidden_size=4096, num_attention_heads=32, rope_parameters={"rope_type": "default"})
    assert sum(_tiny_values(alone)["rope_parameters"]["mrope_section"]) == 4


def test_a_value_a_config_cannot_default_is_given() -> None:
    from tools.census.models import _tiny_values

    assert _tiny_values(_config(prediction_length=None))["prediction_length"] == 4
    assert "prediction_length" not in _tiny_values(_config(prediction_length=24))


def test_an_override_names_its_model_type_and_wins() -> None:
    from tools.census.models import OVERRIDES, _tiny_values

    assert _tiny_values(_config("align", projection_dim=640))["projection_dim"] == OVERRIDES["align"]["projection_dim"]
    assert _tiny_values(_config("other", projection_dim=640))["projection_dim"] == 32


# ---------------------------------------------------------------------------------
# Inputs sized from the config.
# ---------------------------------------------------------------------------------


class _Forward:
    """A model whose forward takes the given names, all optional."""

    def __init__(self, *names: str) -> None:
        import inspect

        parameters = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None) for name in names]
        self.forward = lambda **kwargs: None
        self.forward.__signature__ = inspect.Signature(parameters)


def test_token_ids_stay_below_the_smallest_vocabulary() -> None:
    from tools.census.models import make_inputs

    config = _config(vocab_size=38)
    ids = make_inputs(_Forward("input_ids"), config, "text")["input_ids"]
    assert int(ids.max()) < 38


def test_each_audio_shape_is_a_set_of_its_own_sized_from_the_config() -> None:
    from tools.census.models import input_candidates, make_inputs

    model = _Forward("input_values", "decoder_input_values")
    codec = _config(audio_channels=2, upsampling_ratios=[8, 5, 4, 2])
    assert input_candidates(model, codec) == ["waveform", "multichannel-waveform", "hidden-states"]
    assert tuple(make_inputs(model, codec, "multichannel-waveform")["input_values"].shape) == (2, 2, 320 * 8)
    # A codec that names no channels is mono, still (batch, channels, samples).
    mono = make_inputs(model, _config(codebook_size=1024), "multichannel-waveform")["input_values"]
    assert mono.shape[:2] == (2, 1)
    spectrogram = _config(max_length=64, num_mel_bins=16)
    assert "spectrogram" in input_candidates(model, spectrogram)
    assert tuple(make_inputs(model, spectrogram, "spectrogram")["input_values"].shape) == (2, 64, 16)
    states = make_inputs(model, _config(hidden_size=32), "hidden-states")
    assert states["input_values"].shape[-1] == states["decoder_input_values"].shape[-1] == 32


def test_a_time_series_covers_its_context_and_lags() -> None:
    from tools.census.models import input_candidates, make_inputs

    names = ("past_values", "past_time_features", "past_observed_mask", "future_values", "future_time_features")
    model = _Forward(*names)
    config = _config(prediction_length=4, context_length=6, lags_sequence=[1, 2, 7], num_time_features=1)
    assert input_candidates(model, config) == ["time-series"]
    inputs = make_inputs(model, config, "time-series")
    assert tuple(inputs["past_values"].shape) == (2, 13) == tuple(inputs["past_observed_mask"].shape)
    assert tuple(inputs["past_time_features"].shape) == (2, 13, 1)
    assert tuple(inputs["future_values"].shape) == (2, 4)


def test_speech_features_come_bins_first_or_frames_first() -> None:
    from tools.census.models import input_candidates, make_inputs

    model = _Forward("input_features")
    config = _config(num_mel_bins=16, max_source_positions=8)
    assert input_candidates(model, config) == ["speech-features", "frame-features"]
    assert tuple(make_inputs(model, config, "speech-features")["input_features"].shape) == (2, 16, 16)
    assert tuple(make_inputs(model, config, "frame-features")["input_features"].shape) == (2, 16, 16)
    config = _config(num_mel_bins=16, max_source_positions=4)
    assert tuple(make_inputs(model, config, "frame-features")["input_features"].shape) == (2, 8, 16)


def test_a_series_of_counted_channels_has_a_channel_axis() -> None:
    from tools.census.models import make_inputs

    model = _Forward("past_values")
    config = _config(prediction_length=4, context_length=32, num_input_channels=1)
    assert tuple(make_inputs(model, config, "time-series")["past_values"].shape) == (2, 32, 1)


@pytest.mark.parametrize("model_type", ["qwen2_vl", "llava_next", "mistral3"])
def test_a_multimodal_model_is_fed_an_image_with_as_many_image_tokens_as_features(model_type) -> None:
    """The vision path runs: the image set comes first, and the model takes it (its own
    check that image tokens and features agree raises otherwise)."""
    import torch
    transformers = pytest.importorskip("transformers")
    from tools.census.models import Entry, build_transformers_model, input_candidates, make_inputs
    from tools.census.vision_inputs import IMAGE_TOKEN

    mapping = transformers.models.auto.modeling_auto.MODEL_MAPPING_NAMES
    if model_type not in mapping:
        pytest.skip(f"{model_type} is not in this transformers")
    if model_type == "qwen2_vl" and int(transformers.__version__.split(".")[0]) < 5:
        pytest.skip("before transformers 5 its config names no rotary sections: text alone fails too")
    entry = Entry(model_type, "transformers", model_type, mapping[model_type])
    model, config = build_transformers_model(entry)
    assert input_candidates(model, config)[0] == "images-in-text"
    inputs = make_inputs(model, config, "images-in-text")
    assert set(inputs) >= {"input_ids", "pixel_values"}
    assert int((inputs["input_ids"] == IMAGE_TOKEN).sum()) > 0
    with torch.no_grad():
        output = model.eval()(**inputs)
    assert output.last_hidden_state.shape[1] == inputs["input_ids"].shape[1]
    again = make_inputs(model, config, "images-in-text")
    assert all(torch.equal(inputs[name], again[name]) for name in inputs)


@pytest.mark.parametrize("model_type", ["qwen2_vl", "mistral3"])
def test_several_images_of_different_sizes_each_get_their_own_image_tokens(model_type) -> None:
    """Two images in one text: the vision path splits the features by each image's size."""
    import torch
    transformers = pytest.importorskip("transformers")
    from tools.census.models import Entry, build_transformers_model
    from tools.census.vision_inputs import IMAGE_TOKEN, image_inputs

    if int(transformers.__version__.split(".")[0]) < 5:
        pytest.skip("before transformers 5 the image features come back unsplit")
    mapping = transformers.models.auto.modeling_auto.MODEL_MAPPING_NAMES
    model, config = build_transformers_model(Entry(model_type, "transformers", model_type, mapping[model_type]))
    one, other = (image_inputs(model, config, size) for size in ((16, 32), (32, 32)))
    both = image_inputs(model, config, ((16, 32), (32, 32)))
    tokens = [int((inputs["input_ids"] == IMAGE_TOKEN).sum()) for inputs in (one, other, both)]
    assert tokens[2] == tokens[0] + tokens[1] and tokens[0] != tokens[1]
    with torch.no_grad():
        model.eval()(**both)
