"""The built-in benchmark suite: tiny, seeded versions of the paper's Table 2 models.

No model hub is reached: each model is built from its ``transformers`` Config class
with tiny sizes, after ``torch.manual_seed(0)`` (the worker seeds before ``build``),
so both arms of a benchmark get bit-identical weights and inputs.

Adding a model takes a few lines::

    from benchmarks.suite import BenchModel, register

    def build_mine():
        model = MyModel(MyConfig(hidden_size=32))
        return model, {"input_ids": torch.randint(0, 100, (2, 8))}

    register(BenchModel("mine", build_mine, packages=("my_package",)))

or put ``def build(): return model, example_kwargs`` in a file and pass
``--model-file my_models.py`` (see ``load_model_file``).
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field

from benchmarks.paper import PAPER_ROWS, PaperRow

BuildFunction = Callable[[], "tuple[object, dict]"]


@dataclass(frozen=True)
class BenchModel:
    """One benchmark model.

    ``build()`` returns ``(model, example_kwargs)``; the model is called as
    ``model(**example_kwargs)``. ``packages`` are rewritten on import in the graphmend
    arm; ``requires`` are the modules that must import for the model to be built (a
    model whose requirement is missing is skipped, not failed).
    """

    name: str
    build: BuildFunction
    paper_name: str | None = None
    transformers_class: str | None = None
    packages: tuple[str, ...] = ("transformers",)
    requires: tuple[str, ...] = ("transformers",)
    notes: str = ""
    module_file: str | None = field(default=None, compare=False)
    # Inputs for the training pass where ``build``'s do not train (drawn after ``build``).
    training_inputs: Callable[[], dict] | None = field(default=None, compare=False)

    @property
    def paper(self) -> PaperRow | None:
        return PAPER_ROWS.get(self.paper_name) if self.paper_name else None

    def missing_requirements(self) -> list[str]:
        return [name for name in self.requires if importlib.util.find_spec(name) is None]


REGISTRY: dict[str, BenchModel] = {}


def register(model: BenchModel, *, replace: bool = False) -> BenchModel:
    """Add a model to the suite; a second model with the same name is an error unless
    ``replace``."""
    if model.name in REGISTRY and not replace:
        raise ValueError(f"a bench model named {model.name!r} is already registered")
    if model.paper_name is not None and model.paper_name not in PAPER_ROWS:
        raise ValueError(f"{model.paper_name!r} is not a model of the paper's Table 2")
    REGISTRY[model.name] = model
    return model


def get_model(name: str) -> BenchModel:
    try:
        return REGISTRY[name]
    except KeyError:
        known = ", ".join(REGISTRY)
        raise KeyError(f"unknown bench model {name!r}; known: {known}") from None


def select_models(names: str | None) -> list[BenchModel]:
    """``"a,b"`` -> those models in that order; ``None`` or ``""`` -> the whole suite."""
    if not names:
        return list(REGISTRY.values())
    return [get_model(name.strip()) for name in names.split(",") if name.strip()]


def model_file_module_name(path: str) -> str:
    return os.path.splitext(os.path.basename(path))[0]


def _declared_constants(path: str) -> dict:
    """The file's top-level ``NAME = "..."`` and ``PACKAGES = (...)`` (strings), read
    without importing the file."""
    try:
        with open(path, encoding="utf-8") as handle:
            tree = ast.parse(handle.read(), filename=path)
    except (OSError, SyntaxError, ValueError):
        return {}
    declared = {}
    for node in tree.body:
        if not isinstance(node, ast.Assign):
            continue
        for target in node.targets:
            if isinstance(target, ast.Name) and target.id in ("NAME", "PACKAGES"):
                try:
                    declared[target.id] = ast.literal_eval(node.value)
                except ValueError:
                    pass
    name = declared.get("NAME")
    packages = declared.get("PACKAGES")
    return {
        "NAME": name if isinstance(name, str) else None,
        "PACKAGES": tuple(packages)
        if isinstance(packages, (tuple, list)) and all(isinstance(item, str) for item in packages)
        else (),
    }


def load_model_file(path: str, *, import_module: bool = True) -> BenchModel:
    """A bench model from a Python file defining ``build()`` (and optionally ``NAME``,
    ``PACKAGES``): the file is imported as a top-level module from its folder, so the
    graphmend arm rewrites it (and ``PACKAGES``) on import.

    With ``import_module=False`` the file is not imported (the parent process only
    needs the name); ``build`` then imports it when called.
    """
    path = os.path.abspath(path)
    module_name = model_file_module_name(path)
    folder = os.path.dirname(path)

    def import_user_module():
        if folder not in sys.path:
            sys.path.insert(0, folder)
        return importlib.import_module(module_name)

    module = import_user_module() if import_module else None

    def build():
        user_module = module or import_user_module()
        return user_module.build()

    # The worker reads the file without importing it: its name and the packages it names
    # (to be rewritten in the graphmend arm) come from the text then.
    declared = _declared_constants(path) if module is None else {}
    name = getattr(module, "NAME", None) or declared.get("NAME") or module_name
    packages = tuple(getattr(module, "PACKAGES", ())) if module else declared.get("PACKAGES", ())
    return BenchModel(
        name=name,
        build=build,
        packages=(module_name, *packages),
        requires=(),
        notes=f"from {path}",
        module_file=path,
    )


# ---------------------------------------------------------------------------------
# The built-in models. Configs and inputs are as small as the classes allow; where a
# model has several code paths, the one that shows the paper's breaks is chosen and
# the choice is said in ``notes``.
# ---------------------------------------------------------------------------------


def _token_ids(batch: int, length: int, vocabulary: int = 100, lowest: int = 3):
    import torch

    return torch.randint(lowest, vocabulary, (batch, length))


def _padded_mask(batch: int, length: int, padding: int = 2, left: bool = False):
    """All ones, with ``padding`` zeros at the end (or start) of the last row."""
    import torch

    mask = torch.ones(batch, length, dtype=torch.long)
    if left:
        mask[-1, :padding] = 0
    else:
        mask[-1, -padding:] = 0
    return mask


def _sequence_to_sequence_inputs(batch: int = 2, source: int = 8, target: int = 6) -> dict:
    return {
        "input_ids": _token_ids(batch, source),
        "attention_mask": _padded_mask(batch, source),
        "decoder_input_ids": _token_ids(batch, target),
    }


def _causal_inputs(batch: int = 2, length: int = 8) -> dict:
    return {
        "input_ids": _token_ids(batch, length),
        "attention_mask": _padded_mask(batch, length, left=True),
    }


BART_LIKE_CONFIG = {
    "vocab_size": 100,
    "d_model": 32,
    "encoder_layers": 2,
    "decoder_layers": 2,
    "encoder_attention_heads": 4,
    "decoder_attention_heads": 4,
    "encoder_ffn_dim": 64,
    "decoder_ffn_dim": 64,
    "max_position_embeddings": 64,
    "pad_token_id": 1,
    "bos_token_id": 0,
    "eos_token_id": 2,
    "decoder_start_token_id": 2,
}

T5_CONFIG = {
    "vocab_size": 100,
    "d_model": 32,
    "d_kv": 8,
    "d_ff": 64,
    "num_layers": 2,
    "num_decoder_layers": 2,
    "num_heads": 4,
    "pad_token_id": 0,
    "eos_token_id": 1,
    "decoder_start_token_id": 0,
}


def build_t5():
    from transformers import T5Config, T5ForConditionalGeneration

    return T5ForConditionalGeneration(T5Config(**T5_CONFIG)), _sequence_to_sequence_inputs()


def build_flan_t5():
    from transformers import T5Config, T5ForConditionalGeneration

    # T5 v1.1 / Flan-T5 shape: gated-GELU feed-forward, untied output embeddings.
    config = T5Config(**T5_CONFIG, feed_forward_proj="gated-gelu", tie_word_embeddings=False)
    return T5ForConditionalGeneration(config), _sequence_to_sequence_inputs()


def build_bart():
    from transformers import BartConfig, BartForConditionalGeneration

    return BartForConditionalGeneration(
        BartConfig(**BART_LIKE_CONFIG)
    ), _sequence_to_sequence_inputs()


def build_marian():
    from transformers import MarianConfig, MarianMTModel

    config = MarianConfig(**{**BART_LIKE_CONFIG, "pad_token_id": 99, "decoder_start_token_id": 99})
    return MarianMTModel(config), _sequence_to_sequence_inputs()


def build_blenderbot():
    from transformers import BlenderbotConfig, BlenderbotForConditionalGeneration

    model = BlenderbotForConditionalGeneration(BlenderbotConfig(**BART_LIKE_CONFIG))
    return model, _sequence_to_sequence_inputs()


def build_pegasus_causal():
    from transformers import PegasusConfig, PegasusForCausalLM

    config = PegasusConfig(**{**BART_LIKE_CONFIG, "pad_token_id": 0})
    return PegasusForCausalLM(config), _causal_inputs()


def build_biogpt():
    from transformers import BioGptConfig, BioGptForCausalLM

    config = BioGptConfig(
        vocab_size=100,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=64,
        pad_token_id=1,
        bos_token_id=0,
        eos_token_id=2,
    )
    return BioGptForCausalLM(config), _causal_inputs()


MIXTURE_OF_EXPERTS_SIZES = {
    "vocab_size": 100,
    "hidden_size": 32,
    "intermediate_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 64,
    "num_experts_per_tok": 2,
    "pad_token_id": 1,
    "bos_token_id": 0,
    "eos_token_id": 2,
}


def _few_tokens_inputs() -> dict:
    """Three tokens choosing 2 of 8 experts each: at least two experts get none."""
    return _causal_inputs(batch=1, length=3)


def build_mixtral():
    from transformers import MixtralConfig, MixtralForCausalLM

    config = MixtralConfig(num_local_experts=8, **MIXTURE_OF_EXPERTS_SIZES)
    return MixtralForCausalLM(config), _few_tokens_inputs()


def build_qwen2_moe():
    from transformers import Qwen2MoeConfig, Qwen2MoeForCausalLM

    config = Qwen2MoeConfig(
        num_experts=8, moe_intermediate_size=16, shared_expert_intermediate_size=16, **MIXTURE_OF_EXPERTS_SIZES
    )
    return Qwen2MoeForCausalLM(config), _few_tokens_inputs()


def build_qwen2_audio():
    import torch
    from transformers import Qwen2AudioConfig, Qwen2AudioForConditionalGeneration

    audio = {
        "num_mel_bins": 16, "encoder_layers": 1, "encoder_attention_heads": 2, "encoder_ffn_dim": 16,
        "d_model": 16, "max_source_positions": 8,
    }
    text = {
        "vocab_size": 100, "hidden_size": 32, "intermediate_size": 32, "num_hidden_layers": 1,
        "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64,
    }
    config = Qwen2AudioConfig(audio_config=audio, text_config=text, audio_token_index=7)
    # 16 mel frames: the encoder's stride-2 convolution and pooling leave 4 audio tokens.
    input_ids = torch.tensor([[1, 2] + [7] * 4 + [3, 4]])
    inputs = {
        "input_ids": input_ids,
        "input_features": torch.randn(1, 16, 16),
        "feature_attention_mask": torch.ones(1, 16, dtype=torch.long),
        "attention_mask": torch.ones_like(input_ids),
    }
    return Qwen2AudioForConditionalGeneration(config), inputs


def build_whisper():
    import torch
    from transformers import WhisperConfig, WhisperForConditionalGeneration

    config = WhisperConfig(
        vocab_size=100,
        num_mel_bins=8,
        d_model=32,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        max_source_positions=16,
        max_target_positions=32,
        pad_token_id=1,
        bos_token_id=0,
        eos_token_id=2,
        decoder_start_token_id=3,
        suppress_tokens=None,
        begin_suppress_tokens=None,
    )
    # input frames = 2 * max_source_positions
    inputs = {"input_features": torch.randn(2, 8, 32), "decoder_input_ids": _token_ids(2, 6)}
    return WhisperForConditionalGeneration(config), inputs


def build_phi3_longrope():
    from transformers import Phi3Config, Phi3ForCausalLM

    hidden_size, heads = 32, 4
    half_head = hidden_size // heads // 2
    config = Phi3Config(
        vocab_size=100,
        hidden_size=hidden_size,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        max_position_embeddings=128,
        original_max_position_embeddings=32,
        # Phi-4-mini's rotary embedding: LongRoPE, which picks short or long factors
        # from the sequence length at run time (the paper's Figure 3).
        rope_scaling={
            "type": "longrope",
            "short_factor": [1.0] * half_head,
            "long_factor": [2.0] * half_head,
        },
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )
    return Phi3ForCausalLM(config), _causal_inputs()


def build_layoutlmv3():
    import torch
    from transformers import LayoutLMv3Config, LayoutLMv3Model

    # 4 * coordinate_size + 2 * shape_size must equal hidden_size.
    config = LayoutLMv3Config(
        vocab_size=100,
        hidden_size=48,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=64,
        coordinate_size=8,
        shape_size=8,
        input_size=32,
        patch_size=16,
        pad_token_id=1,
        bos_token_id=0,
        eos_token_id=2,
    )
    batch, length = 2, 8
    left = torch.randint(0, 500, (batch, length, 1))
    top = torch.randint(0, 500, (batch, length, 1))
    right = left + torch.randint(1, 400, (batch, length, 1))
    bottom = top + torch.randint(1, 400, (batch, length, 1))
    inputs = {
        "input_ids": _token_ids(batch, length),
        "attention_mask": torch.ones(batch, length, dtype=torch.long),
        "bbox": torch.cat([left, top, right, bottom], -1),
    }
    return LayoutLMv3Model(config), inputs


def build_longformer():
    import torch
    from transformers import LongformerConfig, LongformerModel

    config = LongformerConfig(
        vocab_size=100,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        attention_window=[8, 8],
        max_position_embeddings=64,
        pad_token_id=1,
        bos_token_id=0,
        eos_token_id=2,
    )
    # 13 tokens: padded to the attention window (a logger call); no global attention
    # mask, as in a plain forward of longformer-base-4096.
    batch, length = 2, 13
    inputs = {
        "input_ids": _token_ids(batch, length),
        "attention_mask": torch.ones(batch, length, dtype=torch.long),
    }
    return LongformerModel(config), inputs


def build_grounding_dino():
    import torch
    from transformers import GroundingDinoConfig, GroundingDinoForObjectDetection, SwinConfig

    backbone = SwinConfig(
        window_size=7,
        embed_dim=8,
        depths=[1, 1, 1, 1],
        num_heads=[1, 1, 1, 1],
        image_size=98,
        out_indices=[2, 3, 4],
    )
    text = {
        "hidden_size": 8,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "intermediate_size": 8,
        "max_position_embeddings": 8,
        "model_type": "bert",
        "vocab_size": 100,
    }
    config = GroundingDinoConfig(
        backbone_config=backbone,
        d_model=32,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=8,
        decoder_ffn_dim=8,
        num_queries=2,
        num_labels=3,
        num_feature_levels=4,
        encoder_n_points=2,
        decoder_n_points=6,
        use_timm_backbone=False,
        use_pretrained_backbone=False,
        max_text_len=7,
        text_config=text,
    )
    inputs = {
        "pixel_values": torch.randn(1, 3, 98, 98),
        "pixel_mask": torch.ones(1, 98, 98, dtype=torch.long),
        "input_ids": _token_ids(1, 7),
    }
    return GroundingDinoForObjectDetection(config), inputs


def build_clap():
    from transformers import ClapConfig, ClapModel

    text = {
        "vocab_size": 100,
        "hidden_size": 32,
        "projection_dim": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "intermediate_size": 37,
        "max_position_embeddings": 64,
        "pad_token_id": 1,
    }
    # clap-htsat-fused: the audio encoder fuses long inputs (enable_fusion), which
    # selects the long rows with torch.where(is_longer == 1), a dynamic-shape operator.
    audio = {
        "spec_size": 64,
        "num_mel_bins": 16,
        "window_size": 4,
        "patch_size": 2,
        "patch_stride": 2,
        "hidden_size": 32,
        "patch_embeds_hidden_size": 16,
        "projection_dim": 32,
        "depths": [1, 1],
        "num_attention_heads": [2, 2],
        "intermediate_size": 37,
        "enable_fusion": True,
    }
    config = ClapConfig(text_config=text, audio_config=audio, projection_dim=32)
    return ClapModel(config), _clap_inputs([True, False])


def _clap_inputs(longer: list[bool]) -> dict:
    """One row per ``longer`` flag. time = spec_size * (spec_size // num_mel_bins) = 256
    frames of num_mel_bins = 16; 4 channels: the fused input (global view + 3 local crops)."""
    import torch

    batch = len(longer)
    return {
        "input_ids": _token_ids(batch, 8),
        "attention_mask": _padded_mask(batch, 8),
        "input_features": torch.randn(batch, 4, 256, 16),
        "is_longer": torch.tensor([[flag] for flag in longer]),
    }


def clap_training_inputs() -> dict:
    """Two long rows and a short one: the fusion's BatchNorm sees the long rows alone, and
    in train mode it needs more than one value per channel (one long row fails eagerly)."""
    return _clap_inputs([True, False, True])


def build_chronos_bolt():
    import torch
    from chronos.chronos_bolt import ChronosBoltModelForForecasting
    from transformers import T5Config

    config = T5Config(
        **{**T5_CONFIG, "vocab_size": 2},
        chronos_config={
            "context_length": 32,
            "prediction_length": 8,
            "input_patch_size": 4,
            "input_patch_stride": 4,
            "quantiles": [0.1, 0.5, 0.9],
            "use_reg_token": True,
        },
    )
    model = ChronosBoltModelForForecasting(config)
    return model, {"context": torch.randn(2, 32)}


def build_florence2():
    import torch
    from transformers import Florence2Config, Florence2ForConditionalGeneration

    vision = {
        "depths": [1, 1, 1, 1],
        "embed_dim": [16, 16, 16, 16],
        "num_heads": [1, 1, 1, 1],
        "num_groups": [1, 1, 1, 1],
        "window_size": 2,
        "projection_dim": 16,
        "max_temporal_embeddings": 4,
        "max_position_embeddings": 8,
        "drop_path_rate": 0.0,
    }
    text = {
        "model_type": "bart",
        "vocab_size": 100,
        "d_model": 16,
        "encoder_layers": 1,
        "decoder_layers": 1,
        "encoder_attention_heads": 2,
        "decoder_attention_heads": 2,
        "encoder_ffn_dim": 16,
        "decoder_ffn_dim": 16,
        "max_position_embeddings": 64,
    }
    config = Florence2Config(vision_config=vision, text_config=text, image_token_id=7)
    # A 64x64 image leaves 5 image features (4 patches and the pooled one): the prompt
    # holds 5 image tokens, which the placeholder check counts against them.
    input_ids = torch.tensor([[7] * 5 + [3, 4, 5]])
    inputs = {
        "input_ids": input_ids,
        "pixel_values": torch.randn(1, 3, 64, 64),
        "attention_mask": torch.ones_like(input_ids),
        "decoder_input_ids": torch.tensor([[2, 3, 4]]),
    }
    return Florence2ForConditionalGeneration(config), inputs


def _register_builtin_models() -> None:
    T5_NOTE = "t5-base and t5-3b are the same class with bigger sizes"
    builtin = (
        BenchModel("t5", build_t5, "t5-small", "T5ForConditionalGeneration", notes=T5_NOTE),
        BenchModel(
            "flan-t5",
            build_flan_t5,
            "flan-t5-large",
            "T5ForConditionalGeneration",
            notes="gated-GELU feed-forward (T5 v1.1 shape; it5 is the same shape)",
        ),
        BenchModel(
            "bart",
            build_bart,
            "bart-base",
            "BartForConditionalGeneration",
            notes="bart-large-cnn and rebel-large are the same class",
        ),
        BenchModel("marian", build_marian, "opus-mt-fr-en", "MarianMTModel"),
        BenchModel(
            "blenderbot",
            build_blenderbot,
            "blenderbot-400M-distill",
            "BlenderbotForConditionalGeneration",
        ),
        BenchModel(
            "pegasus-causal",
            build_pegasus_causal,
            "tiny-random-PegasusForCausalLM",
            "PegasusForCausalLM",
        ),
        BenchModel("biogpt", build_biogpt, "biogpt", "BioGptForCausalLM"),
        BenchModel(
            "whisper",
            build_whisper,
            "whisper-base",
            "WhisperForConditionalGeneration",
            notes="whisper-small and whisper-large-v3 are the same class",
        ),
        BenchModel(
            "phi3-longrope",
            build_phi3_longrope,
            "Phi-4-mini-instruct",
            "Phi3ForCausalLM",
            notes="LongRoPE rotary embedding, as Phi-4-mini",
        ),
        BenchModel(
            "layoutlmv3",
            build_layoutlmv3,
            "layoutlmv3-base",
            "LayoutLMv3Model",
            notes="text and boxes, no image",
        ),
        BenchModel(
            "longformer",
            build_longformer,
            "longformer-base-4096",
            "LongformerModel",
            notes="13 tokens (padded to the window), no global attention mask",
        ),
        BenchModel(
            "grounding-dino",
            build_grounding_dino,
            "grounding-dino-tiny",
            "GroundingDinoForObjectDetection",
            notes="Swin backbone, random weights",
        ),
        BenchModel(
            "clap",
            build_clap,
            "clap-htsat-fused",
            "ClapModel",
            notes="audio enable_fusion=True with is_longer; trained on 3 rows, 2 of them longer",
            training_inputs=clap_training_inputs,
        ),
        BenchModel(
            "chronos-bolt",
            build_chronos_bolt,
            "chronos-bolt-small",
            "ChronosBoltModelForForecasting",
            packages=("transformers", "chronos"),
            requires=("transformers", "chronos"),
            notes="needs the chronos-forecasting package; skipped without it",
        ),
        BenchModel(
            "florence2",
            build_florence2,
            "Florence-2-large",
            "Florence2ForConditionalGeneration",
            requires=("transformers", "transformers.models.florence2"),
            notes="transformers 5's own class (the paper ran the hub's remote code); skipped where transformers lacks it",
        ),
        # Past the paper: models whose breaks the paper's rules do not reach.
        BenchModel(
            "qwen2-audio",
            build_qwen2_audio,
            None,
            "Qwen2AudioForConditionalGeneration",
            notes="one clip of 16 mel frames, 4 audio tokens in the prompt",
        ),
        BenchModel(
            "mixtral",
            build_mixtral,
            None,
            "MixtralForCausalLM",
            notes="8 experts, 2 per token, 3 tokens: some expert gets none",
        ),
        BenchModel(
            "qwen2-moe",
            build_qwen2_moe,
            None,
            "Qwen2MoeForCausalLM",
            notes="8 experts and a shared expert, 2 per token, 3 tokens: some expert gets none",
        ),
    )
    for model in builtin:
        register(model)


_register_builtin_models()


def main_output(output):
    """The tensor a model's output is judged by: logits, last hidden state, boxes, or the first."""
    import torch

    for name in ("logits", "last_hidden_state", "pred_boxes"):
        value = getattr(output, name, None)
        if isinstance(value, torch.Tensor):
            return value
    if isinstance(output, (tuple, list)):
        return output[0]
    return output
