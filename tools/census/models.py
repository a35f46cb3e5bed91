"""Which models a census runs, and how one is built with tiny sizes and given inputs.

A census entry is either one model class of the installed transformers (enumerated from
its auto mappings, without importing any modeling file), a model file defining
``build() -> (model, example_kwargs)`` (the benchmark suite's format), or a script.

Building a transformers class: its Config with the sizes below put over the defaults
(and over every nested sub-config), the model constructed after ``torch.manual_seed``,
then inputs made from the names ``forward`` takes, with the benchmark suite's makers.
"""

from __future__ import annotations

import inspect
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
# Config attribute -> tiny value; only attributes the config already has are set.
TINY_SIZES = {
    "vocab_size": VOCABULARY,
    **dict.fromkeys(("hidden_size", "d_model", "n_embd", "dim", "embed_dim", "d_embed"), 32),
    **dict.fromkeys(("embedding_size", "projection_dim", "proj_size"), 32),
    **dict.fromkeys(
        (
            "num_hidden_layers", "n_layer", "n_layers", "num_layers", "encoder_layers",
            "decoder_layers", "num_decoder_layers", "num_encoder_layers",
        ),
        2,
    ),
    **dict.fromkeys(
        (
            "num_attention_heads", "n_head", "n_heads", "encoder_attention_heads",
            "decoder_attention_heads", "num_encoder_attention_heads",
            "num_decoder_attention_heads",
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
    **dict.fromkeys(("head_dim", "d_kv", "kv_channels", "attention_head_size"), 8),
    **dict.fromkeys(("max_position_embeddings", "n_positions", "max_seq_len"), 128),
    **dict.fromkeys(("num_experts", "num_local_experts", "n_routed_experts"), 4),
    **dict.fromkeys(("image_size", "img_size"), 32),
    "patch_size": 8,
    "num_mel_bins": 16,
}
SPECIAL_TOKENS = ("pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id")
SUB_CONFIGS = ("text_config", "vision_config", "audio_config", "encoder", "decoder", "backbone_config")

BATCH, LENGTH = 2, 8


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


def _tiny_values(config) -> dict:
    """The keyword arguments that shrink ``config``'s class (nested sub-configs too)."""
    from transformers import PretrainedConfig

    values = {}
    present = config.to_dict()
    for key, value in TINY_SIZES.items():
        if key in present and isinstance(present[key], int) and not isinstance(present[key], bool):
            values[key] = min(present[key], value) if key not in ("max_position_embeddings",) else value
    for key in SPECIAL_TOKENS:
        token = present.get(key)
        if isinstance(token, int) and token >= VOCABULARY:
            values[key] = VOCABULARY - 1 - SPECIAL_TOKENS.index(key)
    for key in SUB_CONFIGS:
        sub = getattr(config, key, None)
        if isinstance(sub, PretrainedConfig):
            values[key] = {**sub.to_dict(), **_tiny_values(sub)}
    return values


def tiny_config(config_class):
    default = config_class()
    try:
        return config_class(**_tiny_values(default))
    except Exception:  # noqa: BLE001 - the sizes do not fit this class: its defaults then
        return default


def build_transformers_model(entry: Entry):
    """(model, config) for a transformers class, tiny and seeded."""
    import torch
    import transformers
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    model_class = getattr(transformers, entry.class_name)
    config = tiny_config(CONFIG_MAPPING[entry.model_type])
    torch.manual_seed(0)
    return model_class(config), config


def parameter_count(model) -> int:
    return sum(parameter.numel() for parameter in model.parameters())


def _find(config, *names, default=None):
    for holder in (config, *(getattr(config, key, None) for key in SUB_CONFIGS)):
        for name in names:
            value = getattr(holder, name, None) if holder is not None else None
            if isinstance(value, int) and not isinstance(value, bool):
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


# name forward takes -> a maker of that input from the config. The token inputs are the
# benchmark suite's (seeded token ids, a padded mask).
def _input_makers():
    from benchmarks.suite import _padded_mask, _token_ids

    return {
        "input_ids": lambda config: _token_ids(BATCH, LENGTH, vocabulary=VOCABULARY),
        "attention_mask": lambda config: _padded_mask(BATCH, LENGTH),
        "decoder_input_ids": lambda config: _token_ids(BATCH, 6, vocabulary=VOCABULARY),
        "pixel_values": _image,
        "input_features": _features,
        "input_values": _waveform,
    }


# The inputs tried in turn, first that the original model runs with wins: one modality,
# then all it takes together.
INPUT_SETS = (
    ("text", ("input_ids", "attention_mask", "decoder_input_ids")),
    ("image", ("pixel_values",)),
    ("speech-features", ("input_features", "decoder_input_ids")),
    ("waveform", ("input_values",)),
    ("text-and-image", ("input_ids", "attention_mask", "pixel_values", "decoder_input_ids")),
)


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
    for set_name, names in INPUT_SETS:
        taken = [name for name in names if name in parameters]
        primary = names[0]
        if primary in parameters and required <= set(taken):
            candidates.append(set_name)
    return candidates


def make_inputs(model, config, set_name: str) -> dict:
    """The input set ``set_name`` for ``model``, seeded: the same tensors in every process."""
    import torch

    parameters = inspect.signature(model.forward).parameters
    makers = _input_makers()
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
