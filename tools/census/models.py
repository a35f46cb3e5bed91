"""Which models a census runs, and how one is built with tiny sizes and given inputs.

A census entry is either one model class of the installed transformers (enumerated from
its auto mappings, without importing any modeling file), a model file defining
``build() -> (model, example_kwargs)`` (the benchmark suite's format), or a script.

Building a transformers class: its Config with the sizes below put over the defaults
(and over every nested sub-config), the model constructed after ``torch.manual_seed``,
then inputs made from the names ``forward`` takes, with the benchmark suite's makers.
A multimodal model gets an image in its text first (``tools/census/vision_inputs.py``).
"""

from __future__ import annotations

import inspect
import math
import os
from dataclasses import asdict, dataclass

# The model heads a census can take from transformers' auto mappings.
HEAD_MAPPINGS = {
    "base": "MODEL_MAPPING_NAMES",
    "causal-lm": "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES",
    "seq2seq-lm": "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES",
    "masked-lm": "MODEL_FOR_MASKED_LM_MAPPING_NAMES",
    "image-classification": "MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES",
}

DEFAULT_MAX_PARAMETERS = 20_000_000

VOCABULARY = 100
WIDTH = 32
# Config attribute -> tiny value; only attributes the config already has are set, and never
# above the config's own default.
TINY_SIZES = {
    **dict.fromkeys(("vocab_size", "entity_vocab_size", "n_words"), VOCABULARY),
    **dict.fromkeys(("hidden_size", "d_model", "n_embd", "dim", "embed_dim", "d_embed", "emb_dim"), WIDTH),
    **dict.fromkeys(("embedding_size", "projection_dim", "proj_size"), WIDTH),
    **dict.fromkeys(
        (
            "num_hidden_layers", "n_layer", "n_layers", "num_layers", "encoder_layers",
            "decoder_layers", "num_decoder_layers", "num_encoder_layers", "depth",
        ),
        2,
    ),
    **dict.fromkeys(
        (
            "num_attention_heads", "n_head", "n_heads", "encoder_attention_heads",
            "decoder_attention_heads", "num_encoder_attention_heads",
            "num_decoder_attention_heads", "num_heads",
        ),
        4,
    ),
    "num_key_value_heads": 2,
    **dict.fromkeys(
        (
            "intermediate_size", "ffn_dim", "encoder_ffn_dim", "decoder_ffn_dim", "d_ff",
            "d_inner", "hidden_dim", "n_inner", "moe_intermediate_size",
            "shared_expert_intermediate_size",
        ),
        64,
    ),
    **dict.fromkeys(
        ("head_dim", "d_kv", "kv_channels", "attention_head_size", "qk_rope_head_dim",
         "qk_nope_head_dim", "v_head_dim"),
        8,
    ),
    **dict.fromkeys(("kv_lora_rank", "q_lora_rank"), 16),
    **dict.fromkeys(("max_position_embeddings", "n_positions", "max_seq_len"), 128),
    **dict.fromkeys(("num_experts", "num_local_experts", "n_routed_experts"), 4),
    **dict.fromkeys(("image_size", "img_size"), 32),
    "patch_size": 8,
    "num_mel_bins": 16,
    # Audio codecs: channels double at each of their strides, from this many.
    "num_filters": 8,
    "codebook_size": 64,
    # Mamba mixers: expand x width = heads x head size (2 x 32 = 8 x 8).
    **dict.fromkeys(("mamba_n_heads", "mamba_d_head"), 8),
    **dict.fromkeys(("mamba_d_state", "mamba_chunk_size"), 16),
    # EfficientNet-style scaling of the per-stage lists below.
    "depth_coefficient": 1.0,
    "width_coefficient": 0.5,
}
# Per-stage lists (one value a stage): each value at most this (heads: two divide every
# stage's width).
TINY_STAGES = {
    "depths": 1, "num_block_repeats": 1, "hidden_sizes": WIDTH, "num_heads": 2, "num_attention_heads": 2,
}
# The attributes that set a model's width: another size equal to one of their defaults
# (in any config of the tree) is taken to be that width, and follows it.
WIDTH_KEYS = ("hidden_size", "d_model", "n_embd", "dim", "embed_dim", "d_embed", "emb_dim")
FOLLOWER_SUFFIXES = ("hidden_size", "groups", "_channels", "_dim")
LAYER_KEYS = (
    "num_hidden_layers", "n_layer", "n_layers", "num_layers", "encoder_layers", "decoder_layers",
    "num_decoder_layers", "num_encoder_layers", "depth",
)
# How many of a set are picked (top-k routing) -> the size of that set.
CHOSEN_OF = {
    "num_experts_per_tok": ("num_experts", "num_local_experts", "n_routed_experts"),
    "moe_topk": ("num_experts", "num_local_experts", "n_routed_experts"),
    "top_k": ("num_experts", "num_local_experts", "n_routed_experts"),
    "topk_group": ("n_group",),
}
# Groups that must divide a set, two members a group at least: expert groups.
GROUPS_OF = {"n_group": ("num_experts", "num_local_experts", "n_routed_experts")}
BATCH, LENGTH = 2, 8

# Sizes no general rule above keeps tied: config model type -> attribute -> value, each
# with its reason. Applied last, over everything else.
OVERRIDES = {
    # The image embedding is the vision tower's last stage, 320 channels x its
    # width_coefficient (0.5 once shrunk); the text projection must meet it.
    "align": {"projection_dim": 160},
    # Its position ids count the tokens that are not padding: it needs a padding id.
    "esm": {"pad_token_id": 1},
    # In training its axial position embeddings must factor the sequence length exactly.
    "reformer": {"axial_pos_shape": [2, LENGTH // 2]},
}
# Values some configs refuse to build without (no default): the value given.
REQUIRED_VALUES = {"prediction_length": 4, "vocab_size": VOCABULARY}
SPECIAL_TOKENS = ("pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id")



@dataclass(frozen=True)
class Entry:
    """One thing a census runs: ``kind`` is "transformers", "file" or "script"."""

    name: str
    kind: str
    model_type: str = ""
    class_name: str = ""
    path: str = ""

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> Entry:
        return cls(**data)


def transformers_entries(heads: tuple[str, ...] = ("base",)) -> list[Entry]:
    """Every model class the installed transformers maps a config to, for each head, in
    the mappings' order: ``model_type:ClassName``. Nothing of the models is imported."""
    from transformers.models.auto import modeling_auto

    entries, seen = [], set()
    for head in heads:
        mapping = getattr(modeling_auto, HEAD_MAPPINGS[head], {})
        for model_type, class_names in mapping.items():
            if isinstance(class_names, str):
                class_names = (class_names,)
            for class_name in class_names:
                name = f"{model_type}:{class_name}"
                if name not in seen:
                    seen.add(name)
                    entries.append(Entry(name, "transformers", model_type, class_name))
    return entries


def file_entry(path: str, kind: str) -> Entry:
    path = os.path.abspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no such file: {path}")
    return Entry(f"{kind}:{os.path.basename(path)}", kind, path=path)


def select(entries: list[Entry], names: str | None) -> list[Entry]:
    """``"gpt2,bart"``: the entries whose model type, class name or full name is listed, in
    the listed order; KeyError naming the first unknown one."""
    if not names:
        return entries
    chosen = []
    for wanted in (word.strip() for word in names.split(",")):
        if not wanted:
            continue
        matches = [e for e in entries if wanted in (e.name, e.model_type, e.class_name)]
        if not matches:
            raise KeyError(f"unknown model {wanted!r} (not a model type or class of this transformers)")
        chosen.extend(match for match in matches if match not in chosen)
    return chosen


# ---------------------------------------------------------------------------------
# Building (in the child process).
# ---------------------------------------------------------------------------------


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _sub_configs(config) -> dict:
    """Every attribute of ``config`` that is itself a config, whatever its name."""
    from transformers import PretrainedConfig

    return {key: value for key, value in vars(config).items() if isinstance(value, PretrainedConfig)}


def _shrunk_widths(config) -> dict[int, int]:
    """Default width -> tiny width, over ``config`` and every config nested in it."""
    widths = {}
    present = vars(config)
    for key in WIDTH_KEYS:
        if _is_int(present.get(key)) and present[key] > TINY_SIZES[key]:
            widths[present[key]] = TINY_SIZES[key]
    for sub in _sub_configs(config).values():
        widths.update(_shrunk_widths(sub))
    return widths


def _scaled_parts(parts, total: int) -> list[int]:
    """``parts`` scaled to sum to ``total``, each at least 1, in their proportions."""
    old = sum(parts)
    scaled = [max(1, part * total // old) for part in parts]
    scaled[-1] += total - sum(scaled)
    return scaled


def _keep_derived(present: dict, values: dict, widths: dict[int, int], multimodal: bool = False) -> None:
    """Adjust ``values`` so that what the defaults ``present`` tie together stays tied once
    shrunk: a size equal to a shrunk width follows it (across configs: a vision tower's
    output size is the text model's width); a list summing to a shrunk size still sums to
    it; a per-layer list keeps one entry a layer; top-k picks no more than there are, and
    groups divide what they group."""
    def now(key):
        return values.get(key, present.get(key))

    for key, value in present.items():
        if key in values or not _is_int(value):
            continue
        multiple = next(((times, width) for width in widths for times in (2, 4)
                         if value == times * width), None) if key.endswith("hidden_size") else None
        if key.endswith(FOLLOWER_SUFFIXES) and value in widths:
            values[key] = widths[value]
        elif multiple:
            # Twice the width (Zamba2's attention over the input and the residual together);
            # hidden sizes only: another size can be a sum of widths (XCodec's codebooks).
            values[key] = multiple[0] * widths[multiple[1]]
        elif key.endswith("hidden_size"):
            # Every width is shrunk to the same one: a width of its own (a vision tower's
            # output) then still meets the one it feeds.
            values[key] = min(value, WIDTH)
    shrunk = {present[key]: values[key] for key in values
              if _is_int(present.get(key)) and _is_int(values[key]) and values[key] < present[key]}
    layers = {present[key]: values[key] for key in LAYER_KEYS if key in values and _is_int(present.get(key))}
    kinds = {}
    for key, value in present.items():
        if key in values or not isinstance(value, (list, tuple)) or not value:
            continue
        if all(_is_int(part) and part > 0 for part in value) and sum(value) in shrunk and len(value) > 1:
            values[key] = type(value)(_scaled_parts(value, shrunk[sum(value)]))
        elif len(value) in layers and len(value) > layers[len(value)] and all(isinstance(e, str) for e in value):
            # Kinds of layer only: counts a layer (heads) are left to the config to derive
            # from the layer count, which it does when not given them.
            kinds[key] = value
    # A per-layer list of kinds keeps one layer of each (an all-convolution stack of a
    # hybrid model has no attention): the layer count grows to hold them, and every such
    # list takes the grown count.
    for key in LAYER_KEYS:
        if key not in values or not _is_int(present.get(key)):
            continue
        lists = {name: value for name, value in kinds.items() if len(value) == present[key]}
        values[key] = max([values[key], *(len(dict.fromkeys(value)) for value in lists.values())])
        for name, value in lists.items():
            values[name] = type(value)(_every_kind(value, values[key]))
    for chosen, sets in {**CHOSEN_OF, **GROUPS_OF}.items():
        size = next((now(key) for key in sets if _is_int(now(key))), None)
        if not _is_int(now(chosen)) or size is None:
            continue
        if chosen in GROUPS_OF:
            # Two experts a group at least: a group is scored by its best two.
            values[chosen] = math.gcd(now(chosen), max(1, size // 2))
        elif now(chosen) > size:
            values[chosen] = size
    _keep_rope_sections(present, values, multimodal)
    # A head size left to the model: some compute it, others read it as is.
    if "head_dim" in present and present["head_dim"] is None and _is_int(now("hidden_size")) \
            and _is_int(now("num_attention_heads")) and now("num_attention_heads"):
        values["head_dim"] = now("hidden_size") // now("num_attention_heads")
    # Multi-head attention stays multi-head (latent attention projects every head's keys);
    # no key-value heads named means as many as heads.
    heads, kv_heads = present.get("num_attention_heads"), present.get("num_key_value_heads")
    multi_head = heads == kv_heads or ("num_key_value_heads" in present and kv_heads is None)
    if _is_int(heads) and multi_head and "num_attention_heads" in values:
        values["num_key_value_heads"] = values["num_attention_heads"]
    # topk_group is chosen among the groups: fix it again once the groups are known.
    if _is_int(now("topk_group")) and _is_int(now("n_group")) and now("topk_group") > now("n_group"):
        values["topk_group"] = now("n_group")


def _every_kind(value, count: int) -> list:
    """The first ``count`` entries of a per-layer list (``count`` no fewer than its kinds),
    a layer of each kind they lack put in place of the last repeated one."""
    kept = list(value[:count])
    for kind in dict.fromkeys(value):
        if kind not in kept:
            repeated = max(index for index, entry in enumerate(kept) if kept.count(entry) > 1)
            kept[repeated] = kind
    return kept


def _keep_rope_sections(present: dict, values: dict, multimodal: bool) -> None:
    """Multimodal rotary sections (``rope_parameters["mrope_section"]``, one a position
    axis: time, height, width) split the rotary frequencies: half the rotary part of a
    head, once shrunk. A multimodal model's text config that names none gets them: its
    modeling code falls back to sections written for the full-size head."""
    rope = present.get("rope_parameters")
    if not isinstance(rope, dict):
        return
    sections = rope.get("mrope_section")
    if sections is None and multimodal:
        sections = (1, 1, 1)
    if not isinstance(sections, (list, tuple)):
        return
    width, heads = values.get("hidden_size", present.get("hidden_size")), values.get(
        "num_attention_heads", present.get("num_attention_heads"))
    head = values.get("head_dim", present.get("head_dim"))
    if not _is_int(head) and _is_int(width) and _is_int(heads) and heads:
        head = width // heads
    if not _is_int(head) or not all(_is_int(part) and part > 0 for part in sections):
        return
    partial = rope.get("partial_rotary_factor", present.get("partial_rotary_factor")) or 1.0
    frequencies = int(head * partial) // 2
    if frequencies >= len(sections) and sum(sections) != frequencies:
        values["rope_parameters"] = {**rope, "mrope_section": _scaled_parts(sections, frequencies)}


def _tiny_values(config, widths: dict[int, int] | None = None, multimodal: bool = False) -> dict:
    """The keyword arguments that shrink ``config``'s class, nested sub-configs too, keeping
    the sizes its defaults tie together tied (see ``_keep_derived``)."""
    if widths is None:
        widths = _shrunk_widths(config)
        # A multimodal model's text config built on its own (``qwen2_vl_text``).
        multimodal = multimodal or str(getattr(config, "model_type", "")).endswith("_text")
    values = {}
    present = config.to_dict()
    for key, value in TINY_SIZES.items():
        old = present.get(key)
        if isinstance(value, float) and isinstance(old, float):
            values[key] = min(old, value)
        elif _is_int(old) and _is_int(value):
            values[key] = min(old, value) if key not in ("max_position_embeddings",) else value
    stage_widths = {}
    for key, most in TINY_STAGES.items():
        old = present.get(key)
        if isinstance(old, (list, tuple)) and old and all(_is_int(part) for part in old):
            values[key] = type(old)(min(part, most) for part in old)
            if key == "hidden_sizes":
                # A stem's output is the first stage's width.
                stage_widths.update(zip(old, values[key]))
    stages = {len(present[key]) for key in TINY_STAGES if isinstance(present.get(key), (list, tuple))}
    for key in LAYER_KEYS:
        # A layer count as long as the per-stage lists counts stages: those keep their number.
        if key in values and present[key] in stages:
            del values[key]
    for key, value in REQUIRED_VALUES.items():
        if key in present and present[key] is None:
            values[key] = value
    for key in SPECIAL_TOKENS:
        token = present.get(key)
        if _is_int(token) and token >= VOCABULARY:
            values[key] = VOCABULARY - 1 - SPECIAL_TOKENS.index(key)
    _keep_derived(present, values, {**widths, **stage_widths}, multimodal)
    values.update(OVERRIDES.get(getattr(config, "model_type", ""), {}))
    subs = _sub_configs(config)
    with_vision = any("vision" in key for key in subs)
    for key, sub in subs.items():
        values[key] = {**sub.to_dict(), **_tiny_values(sub, widths, with_vision and "vision" not in key)}
    return values


def tiny_config(config_class):
    """``config_class`` with tiny sizes; its defaults when the sizes do not fit it (the
    parameter cap then tells)."""
    default = config_class()
    try:
        return config_class(**_tiny_values(default))
    except Exception:  # noqa: BLE001 - the sizes do not fit this class: its defaults then
        return default


class TooLarge(Exception):
    """The model would have more parameters than the cap: it was not built."""

    def __init__(self, parameters: int) -> None:
        super().__init__(parameters)
        self.parameters = parameters


def _meta_parameters(model_class, config) -> int | None:
    """The parameter count of ``model_class(config)`` built on the meta device (no memory);
    None when it cannot be built there."""
    import torch

    try:
        with torch.device("meta"):
            return parameter_count(model_class(config))
    except Exception:  # noqa: BLE001 - the real build then tells
        return None


def build_transformers_model(entry: Entry, max_parameters: int | None = None):
    """(model, config) for a transformers class, tiny and seeded. TooLarge, before any
    memory is taken, when it would hold more than ``max_parameters``: sizes that do not
    fit a config leave its full defaults, some of billions of parameters."""
    import torch
    import transformers
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    from tools.census.vision_inputs import FAMILIES, vision_config

    model_class = getattr(transformers, entry.class_name)
    config = tiny_config(CONFIG_MAPPING[entry.model_type])
    if entry.model_type in FAMILIES:
        vision_config(config)
    if max_parameters is not None:
        parameters = _meta_parameters(model_class, config)
        if parameters is not None and parameters > max_parameters:
            raise TooLarge(parameters)
    torch.manual_seed(0)
    return model_class(config), config


def parameter_count(model) -> int:
    return sum(parameter.numel() for parameter in model.parameters())


def _find(config, *names, default=None):
    for holder in (config, *_sub_configs(config).values()):
        for name in names:
            value = getattr(holder, name, None)
            if _is_int(value):
                return value
    return default


def _image(config):
    import torch

    channels = _find(config, "num_channels", default=3)
    size = _find(config, "image_size", "img_size", default=32)
    return torch.randn(BATCH, channels, size, size)


def _features(config):
    import torch

    bins = _find(config, "num_mel_bins", "feature_size", "input_feat_per_channel", default=16)
    frames = 2 * _find(config, "max_source_positions", default=16)
    return torch.randn(BATCH, bins, frames)


def _waveform(config):
    """Samples enough for the feature encoder to leave twice the SpecAugment mask's frames,
    which its training mode masks (fewer frames than a mask raise in both arms)."""
    import math

    import torch

    strides = getattr(config, "conv_stride", None) or (320,)
    kernels = getattr(config, "conv_kernel", None) or (0,)
    frames = max(16, 2 * _find(config, "mask_time_length", default=10) + 2)
    samples = max(1600, math.prod(strides) * frames + sum(kernels))
    return torch.randn(BATCH, samples)


def _vocabulary(config) -> int:
    """Token ids stay below the smallest vocabulary of the config tree (a text-to-speech
    model's characters can be fewer than the census's 100)."""
    sizes = [VOCABULARY]
    for holder in (config, *_sub_configs(config).values()):
        size = getattr(holder, "vocab_size", None)
        if _is_int(size) and size > 3:
            sizes.append(size)
    return min(sizes)


def _multichannel_waveform(config):
    """(batch, channels, samples): codecs (a config with a codebook or audio channels) take
    audio with its channels, mono unless it says; the samples a whole number of hops."""
    import torch

    channels = _find(config, "audio_channels", default=1)
    hop = math.prod(getattr(config, "upsampling_ratios", None) or (320,))
    return torch.randn(BATCH, channels, hop * 8)


def _spectrogram(config):
    """(batch, frames, mel bins): a spectrogram transformer's input, as long as it expects."""
    import torch

    bins = _find(config, "num_mel_bins", default=16)
    frames = _find(config, "max_length", default=128)
    return torch.randn(BATCH, frames, bins)


def _hidden_states(length):
    """(batch, length, width): what an encoder-decoder without pre-nets takes as values."""
    def make(config):
        import torch

        return torch.randn(BATCH, length, _find(config, "hidden_size", "d_model", default=WIDTH))
    return make


def _series_length(config, future: bool) -> int:
    if future:
        return _find(config, "prediction_length", default=4)
    lags = getattr(config, "lags_sequence", None) or (0,)
    return _find(config, "context_length", "prediction_length", default=4) + max(lags)


def _series(future: bool):
    """A time series' values, (batch, time) or (batch, time, inputs) as the config says."""
    def make(config):
        import torch

        # One variable is (batch, time), unless the model counts its channels.
        size = _find(config, "input_size", "num_input_channels", default=1)
        channels = size > 1 or _find(config, "num_input_channels") is not None
        shape = (BATCH, _series_length(config, future)) + ((size,) if channels else ())
        return torch.randn(shape)
    return make


def _time_features(future: bool):
    def make(config):
        import torch

        features = _find(config, "num_time_features", default=0) + _find(config, "num_dynamic_real_features", default=0)
        return torch.randn(BATCH, _series_length(config, future), features)
    return make


def _observed(config):
    import torch

    return torch.ones_like(_series(False)(config))


# name forward takes -> a maker of that input from the config. The token inputs are the
# benchmark suite's (seeded token ids, a padded mask).
def _input_makers():
    from benchmarks.suite import _padded_mask, _token_ids

    return {
        "input_ids": lambda config: _token_ids(BATCH, LENGTH, vocabulary=_vocabulary(config)),
        "attention_mask": lambda config: _padded_mask(BATCH, LENGTH),
        "decoder_input_ids": lambda config: _token_ids(BATCH, 6, vocabulary=_vocabulary(config)),
        "pixel_values": _image,
        "input_features": _features,
        "input_values": _waveform,
        "past_values": _series(False),
        "past_time_features": _time_features(False),
        "past_observed_mask": _observed,
        "future_values": _series(True),
        "future_time_features": _time_features(True),
    }


# Input sets whose names mean other shapes than the makers above: set -> name -> maker.
SET_MAKERS = {
    "multichannel-waveform": {"input_values": _multichannel_waveform},
    "spectrogram": {"input_values": _spectrogram},
    "frame-features": {"input_features": lambda config: _features(config).transpose(1, 2)},
    "hidden-states": {"input_values": _hidden_states(LENGTH), "decoder_input_values": _hidden_states(6)},
}


# The inputs tried in turn, first that the original model runs with wins: one modality,
# then all it takes together. Audio comes in several shapes under one name
# (``input_values``; ``input_features`` bins first or frames first): each is a set of its own.
INPUT_SETS = (
    # A multimodal model's vision path (tools/census/vision_inputs.py): one image in text.
    ("images-in-text", ("input_ids", "pixel_values")),
    ("text", ("input_ids", "attention_mask", "decoder_input_ids")),
    ("image", ("pixel_values",)),
    ("speech-features", ("input_features", "decoder_input_ids")),
    ("frame-features", ("input_features", "decoder_input_ids")),
    ("waveform", ("input_values",)),
    ("multichannel-waveform", ("input_values",)),
    ("spectrogram", ("input_values",)),
    ("hidden-states", ("input_values", "decoder_input_values")),
    ("time-series", ("past_values", "past_time_features", "past_observed_mask", "future_values",
                     "future_time_features")),
    ("text-and-image", ("input_ids", "attention_mask", "pixel_values", "decoder_input_ids")),
)


# Sets that only a config with this attribute (one of these) can take (another would try the same shape
# as a set before it, or one it cannot mean).
SET_NEEDS = {
    "multichannel-waveform": ("audio_channels", "codebook_size"),
    "spectrogram": "num_mel_bins",
    "time-series": "prediction_length",
}


def input_candidates(model, config) -> list[str]:
    """The names of the input sets ``model.forward`` can take, in the order tried."""
    parameters = inspect.signature(model.forward).parameters
    required = {
        name
        for name, parameter in parameters.items()
        if parameter.default is inspect.Parameter.empty
        and parameter.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    }
    candidates = []
    from tools.census.vision_inputs import FAMILIES

    for set_name, names in INPUT_SETS:
        if set_name == "images-in-text" and getattr(config, "model_type", None) not in FAMILIES:
            continue
        needs = SET_NEEDS.get(set_name)
        if needs and _find(config, *((needs,) if isinstance(needs, str) else needs)) is None:
            continue
        taken = [name for name in names if name in parameters]
        primary = names[0]
        if primary in parameters and required <= set(taken):
            candidates.append(set_name)
    return candidates


def make_inputs(model, config, set_name: str) -> dict:
    """The input set ``set_name`` for ``model``, seeded: the same tensors in every process."""
    import torch

    if set_name == "images-in-text":
        from tools.census.vision_inputs import census_image_size, image_inputs

        return image_inputs(model, config, census_image_size(config))
    parameters = inspect.signature(model.forward).parameters
    makers = {**_input_makers(), **SET_MAKERS.get(set_name, {})}
    torch.manual_seed(1)
    names = dict(INPUT_SETS)[set_name]
    inputs = {}
    for name in names:
        if name not in parameters:
            continue
        if name == "decoder_input_ids" and not getattr(config, "is_encoder_decoder", False):
            continue
        inputs[name] = makers[name](config)
    return inputs
