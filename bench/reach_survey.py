"""Graph breaks in transformers models outside the benchmark suite, original and graphmend.

The suite holds the paper's models and a few of today's; users compile many more. This
writes one model file per architecture below (the real class, built from its Config with
tiny sizes and seeded weights, ``PACKAGES = ("transformers",)`` so the graphmend arm
rewrites transformers on import) and runs ``graphmend bench --quick`` on them in batches:
per arm, breaks and graphs under the eager backend, fullgraph capture, and whether the
mended model's output is bit-identical to the original's.

    python bench/reach_survey.py                          # every model, this interpreter
    python bench/reach_survey.py --models olmoe,dbrx --out /tmp/survey
    python bench/reach_survey.py --summarise /tmp/survey/batch-*.json

A model whose class this transformers version lacks, or that fails to build, is reported
by ``graphmend bench`` as an error of both arms; the table says so.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap

MODEL_FILE_TEMPLATE = '''"""{name}: written by bench/reach_survey.py."""

NAME = "{name}"
PACKAGES = ("transformers",)

# The suite's own input makers (``graphmend bench`` puts the checkout on the workers' path).
from benchmarks.suite import _causal_inputs as causal  # noqa: E402
from benchmarks.suite import _padded_mask, _token_ids  # noqa: E402
from benchmarks.suite import _sequence_to_sequence_inputs as sequence_to_sequence  # noqa: E402

SPECIAL_TOKENS = dict(pad_token_id=1, bos_token_id=0, eos_token_id=2)
DECODER = dict(vocab_size=100, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
               num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
               **SPECIAL_TOKENS)
BART_LIKE = dict(vocab_size=100, d_model=32, encoder_layers=2, decoder_layers=2,
                 encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64,
                 decoder_ffn_dim=64, max_position_embeddings=64, decoder_start_token_id=2,
                 **SPECIAL_TOKENS)


def few_tokens():
    # Mixture-of-experts routing: with 3 tokens some experts get none, the case whose
    # loops over experts break.
    return causal(1, 3)


def encoder(batch=2, length=8):
    return {{"input_ids": _token_ids(batch, length), "attention_mask": _padded_mask(batch, length)}}


def images(batch=2, size=32):
    import torch
    return {{"pixel_values": torch.randn(batch, 3, size, size)}}


def build():
    import torch
    import transformers as T
    torch.manual_seed(0)
{body}
'''

# Each body returns (model, example_kwargs); it runs inside build() above.
MODEL_BUILDS = {
    # Decoder language models.
    "gpt2": "config = T.GPT2Config(vocab_size=100, n_embd=32, n_layer=2, n_head=4, n_positions=64, **SPECIAL_TOKENS)\n"
            "return T.GPT2LMHeadModel(config), causal()",
    "llama": "return T.LlamaForCausalLM(T.LlamaConfig(**DECODER)), causal()",
    "mistral": "return T.MistralForCausalLM(T.MistralConfig(**DECODER)), causal()",
    "qwen2": "return T.Qwen2ForCausalLM(T.Qwen2Config(**DECODER)), causal()",
    "qwen3": "return T.Qwen3ForCausalLM(T.Qwen3Config(head_dim=8, **DECODER)), causal()",
    "gemma": "return T.GemmaForCausalLM(T.GemmaConfig(head_dim=8, **DECODER)), causal()",
    # Under 4.52.4 the default HybridCache cannot be compiled in either arm (torch 2.13:
    # "Attempt to trace forbidden callable mark_static_address"), hence use_cache=False.
    "gemma2": "inputs = causal(); inputs['use_cache'] = False\n"
              "return T.Gemma2ForCausalLM(T.Gemma2Config(head_dim=8, sliding_window=4, **DECODER)), inputs",
    "gemma3-text": "inputs = causal(); inputs['use_cache'] = False\n"
                   "return T.Gemma3ForCausalLM(T.Gemma3TextConfig(head_dim=8, sliding_window=4, **DECODER)), inputs",
    "phi": "config = dict(DECODER); config.pop('num_key_value_heads')\n"
           "return T.PhiForCausalLM(T.PhiConfig(**config)), causal()",
    "phi3": "return T.Phi3ForCausalLM(T.Phi3Config(**DECODER)), causal()",
    "opt": "config = T.OPTConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, ffn_dim=64, num_attention_heads=4,"
           " max_position_embeddings=64, word_embed_proj_dim=32, **SPECIAL_TOKENS)\n"
           "return T.OPTForCausalLM(config), causal()",
    "gpt-neox": "config = dict(DECODER); config.pop('num_key_value_heads')\n"
                "return T.GPTNeoXForCausalLM(T.GPTNeoXConfig(**config)), causal()",
    "falcon": "config = T.FalconConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,"
              " max_position_embeddings=64, **SPECIAL_TOKENS)\n"
              "return T.FalconForCausalLM(config), causal()",
    "bloom": "config = T.BloomConfig(vocab_size=100, hidden_size=32, n_layer=2, n_head=4, **SPECIAL_TOKENS)\n"
             "return T.BloomForCausalLM(config), causal()",
    "gptj": "config = T.GPTJConfig(vocab_size=100, n_embd=32, n_layer=2, n_head=4, rotary_dim=4, n_positions=64,"
            " **SPECIAL_TOKENS)\n"
            "return T.GPTJForCausalLM(config), causal()",
    "stablelm": "return T.StableLmForCausalLM(T.StableLmConfig(**DECODER)), causal()",
    "olmo": "return T.OlmoForCausalLM(T.OlmoConfig(**DECODER)), causal()",
    # Mixtures of experts.
    "olmoe": "config = dict(DECODER, intermediate_size=32)\n"
             "return T.OlmoeForCausalLM(T.OlmoeConfig(num_experts=8, num_experts_per_tok=2, **config)), few_tokens()",
    "granitemoe": "config = dict(DECODER, intermediate_size=32)\n"
                  "return T.GraniteMoeForCausalLM(T.GraniteMoeConfig(num_local_experts=8, num_experts_per_tok=2,"
                  " **config)), few_tokens()",
    "jetmoe": "config = T.JetMoeConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_key_value_heads=2,"
              " kv_channels=8, intermediate_size=32, num_local_experts=4, num_experts_per_tok=2,"
              " max_position_embeddings=64, **SPECIAL_TOKENS)\n"
              "return T.JetMoeForCausalLM(config), few_tokens()",
    "dbrx": "config = T.DbrxConfig(d_model=32, n_heads=4, n_layers=2, max_seq_len=64, vocab_size=100,"
            " attn_config={'kv_n_heads': 2}, ffn_config={'ffn_hidden_size': 32, 'moe_num_experts': 4, 'moe_top_k': 2},"
            " **SPECIAL_TOKENS)\n"
            "return T.DbrxForCausalLM(config), few_tokens()",
    "qwen3-moe": "config = dict(DECODER, intermediate_size=32)\n"
                 "return T.Qwen3MoeForCausalLM(T.Qwen3MoeConfig(head_dim=8, num_experts=8, num_experts_per_tok=2,"
                 " moe_intermediate_size=16, **config)), few_tokens()",
    "deepseek-v3": "config = dict(DECODER, num_key_value_heads=4)\n"
                   "config = T.DeepseekV3Config(moe_intermediate_size=16, n_shared_experts=1, n_routed_experts=8,"
                   " num_experts_per_tok=2, n_group=2, topk_group=1, kv_lora_rank=16, q_lora_rank=16,"
                   " qk_rope_head_dim=8, v_head_dim=8, qk_nope_head_dim=8, first_k_dense_replace=1, **config)\n"
                   "return T.DeepseekV3ForCausalLM(config), few_tokens()",
    "switch-transformers": "config = T.SwitchTransformersConfig(vocab_size=100, d_model=32, d_kv=8, d_ff=64, num_layers=2,"
                           " num_decoder_layers=2, num_heads=4, num_experts=4, expert_capacity=4, encoder_sparse_step=1,"
                           " decoder_sparse_step=1, decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)\n"
                           "return T.SwitchTransformersForConditionalGeneration(config), sequence_to_sequence()",
    "nllb-moe": "config = T.NllbMoeConfig(num_experts=4, expert_capacity=4, encoder_sparse_step=1, decoder_sparse_step=1,"
                " **BART_LIKE)\n"
                "return T.NllbMoeForConditionalGeneration(config), sequence_to_sequence()",
    # Encoders.
    "bert": "config = T.BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,"
            " intermediate_size=64, max_position_embeddings=64)\n"
            "return T.BertModel(config), encoder()",
    "roberta": "config = T.RobertaConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,"
               " intermediate_size=64, max_position_embeddings=66, pad_token_id=1)\n"
               "return T.RobertaModel(config), encoder()",
    "distilbert": "config = T.DistilBertConfig(vocab_size=100, dim=32, n_layers=2, n_heads=4, hidden_dim=64,"
                  " max_position_embeddings=64)\n"
                  "return T.DistilBertModel(config), encoder()",
    "albert": "config = T.AlbertConfig(vocab_size=100, embedding_size=16, hidden_size=32, num_hidden_layers=2,"
              " num_attention_heads=4, intermediate_size=64, max_position_embeddings=64)\n"
              "return T.AlbertModel(config), encoder()",
    "electra": "config = T.ElectraConfig(vocab_size=100, embedding_size=16, hidden_size=32, num_hidden_layers=2,"
               " num_attention_heads=4, intermediate_size=64, max_position_embeddings=64)\n"
               "return T.ElectraModel(config), encoder()",
    "deberta-v2": "config = T.DebertaV2Config(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,"
                  " intermediate_size=64, max_position_embeddings=64, relative_attention=True, position_buckets=16,"
                  " norm_rel_ebd='layer_norm', share_att_key=True, pos_att_type=['p2c', 'c2p'],"
                  " max_relative_positions=-1, position_biased_input=False)\n"
                  "return T.DebertaV2Model(config), encoder()",
    "xlnet": "config = T.XLNetConfig(vocab_size=100, d_model=32, n_layer=2, n_head=4, d_inner=64, **SPECIAL_TOKENS)\n"
             "return T.XLNetModel(config), encoder()",
    "reformer": "config = T.ReformerConfig(vocab_size=100, hidden_size=32, num_attention_heads=4, attention_head_size=8,"
                " attn_layers=['local', 'lsh'], axial_pos_shape=(2, 4), axial_pos_embds_dim=(16, 16),"
                " max_position_embeddings=8, local_attn_chunk_length=4, lsh_attn_chunk_length=4, num_buckets=2,"
                " feed_forward_size=64, is_decoder=False, pad_token_id=1, eos_token_id=2)\n"
                "return T.ReformerModel(config), encoder()",
    "bigbird": "config = T.BigBirdConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,"
               " intermediate_size=64, max_position_embeddings=128, attention_type='block_sparse', block_size=2,"
               " num_random_blocks=2)\n"
               "return T.BigBirdModel(config), encoder(2, 24)",
    # Vision, speech, multimodal.
    "vit": "config = T.ViTConfig(image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,"
           " intermediate_size=64)\n"
           "return T.ViTModel(config), images()",
    "swin": "config = T.SwinConfig(image_size=32, patch_size=4, embed_dim=16, depths=[1, 1], num_heads=[2, 2],"
            " window_size=4)\n"
            "return T.SwinModel(config), images()",
    "convnext": "config = T.ConvNextConfig(num_stages=2, hidden_sizes=[8, 16], depths=[1, 1], image_size=32)\n"
                "return T.ConvNextModel(config), images()",
    "clip": "config = T.CLIPConfig(text_config=dict(vocab_size=100, hidden_size=32, intermediate_size=64,"
            " num_hidden_layers=2, num_attention_heads=4, max_position_embeddings=64), vision_config=dict(image_size=32,"
            " patch_size=8, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4),"
            " projection_dim=16)\n"
            "return T.CLIPModel(config), {**encoder(), **images()}",
    "wav2vec2": "config = T.Wav2Vec2Config(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,"
                " intermediate_size=64, conv_dim=(8, 8), conv_stride=(5, 2), conv_kernel=(10, 3),"
                " num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4, feat_extract_norm='layer',"
                " do_stable_layer_norm=True)\n"
                "mask = torch.ones(2, 400, dtype=torch.long); mask[-1, -100:] = 0\n"
                "return T.Wav2Vec2Model(config), {'input_values': torch.randn(2, 400), 'attention_mask': mask}",
    # Sequence to sequence.
    "mbart": "return T.MBartForConditionalGeneration(T.MBartConfig(**BART_LIKE)), sequence_to_sequence()",
    "m2m100": "return T.M2M100ForConditionalGeneration(T.M2M100Config(**BART_LIKE)), sequence_to_sequence()",
    "pegasus": "return T.PegasusForConditionalGeneration(T.PegasusConfig(**BART_LIKE)), sequence_to_sequence()",
    "led": "config = dict(BART_LIKE); config.pop('max_position_embeddings')\n"
           "config = T.LEDConfig(max_encoder_position_embeddings=64, max_decoder_position_embeddings=64,"
           " attention_window=4, **config)\n"
           "return T.LEDForConditionalGeneration(config), sequence_to_sequence()",
    "longt5": "config = T.LongT5Config(vocab_size=100, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=2,"
              " num_heads=4, local_radius=2, global_block_size=4, encoder_attention_type='transient-global',"
              " decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)\n"
              "return T.LongT5ForConditionalGeneration(config), sequence_to_sequence()",
    "prophetnet": "config = T.ProphetNetConfig(vocab_size=100, hidden_size=32, encoder_ffn_dim=64, decoder_ffn_dim=64,"
                  " num_encoder_layers=2, num_decoder_layers=2, num_encoder_attention_heads=4,"
                  " num_decoder_attention_heads=4, max_position_embeddings=64, ngram=2, num_buckets=8,"
                  " relative_max_distance=16, decoder_start_token_id=0, pad_token_id=0, eos_token_id=2)\n"
                  "return T.ProphetNetForConditionalGeneration(config), sequence_to_sequence()",
}


def model_file_text(name: str) -> str:
    return MODEL_FILE_TEMPLATE.format(name=name, body=textwrap.indent(MODEL_BUILDS[name], "    "))


def write_model_files(names: list[str], folder: str) -> list[str]:
    os.makedirs(folder, exist_ok=True)
    paths = []
    for name in names:
        path = os.path.join(folder, "survey_" + name.replace("-", "_") + ".py")
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(model_file_text(name))
        paths.append(path)
    return paths


def run_batches(paths: list[str], folder: str, batch_size: int) -> list[str]:
    """``graphmend bench --quick`` over the model files, a batch per command; the JSON files."""
    outputs = []
    for start in range(0, len(paths), batch_size):
        output = os.path.join(folder, f"batch-{start // batch_size}.json")
        command = [sys.executable, "-m", "graphmend", "bench", "--quick", "--json", output]
        for path in paths[start:start + batch_size]:
            command += ["--model-file", path]
        print("+", " ".join(command), file=sys.stderr, flush=True)
        done = subprocess.run(command, check=False, stdout=subprocess.DEVNULL)
        if os.path.exists(output):
            outputs.append(output)
        else:
            print(f"this batch wrote no JSON (exit status {done.returncode}); its models are not in the table",
                  file=sys.stderr)
    return outputs


def _break_sites(arm: dict) -> str:
    sites: dict[str, int] = {}
    for record in arm.get("logged_breaks", []):
        site = f"{os.path.basename(record.get('file') or '?')}:{record.get('line')}"
        sites[site] = sites.get(site, 0) + 1
    return ", ".join(f"{site} ({count})" for site, count in sorted(sites.items(), key=lambda item: -item[1]))


def _error_line(error) -> str:
    """The traceback's last line that names an error (TorchDynamo ends its own with advice)."""
    lines = [line.strip() for line in str(error or "no count").strip().splitlines() if line.strip()]
    named = [line for line in lines if "Error" in line or "Exception" in line]
    return (named or lines)[-1][:120].replace("|", "/")


def summary_rows(json_paths: list[str]) -> list[str]:
    rows = [
        "| model | transformers | breaks original -> graphmend | graphs | bit-identical | fullgraph original / graphmend"
        " | graphmend's breaks at (records) |",
        "|---|---|---|---|---|---|---|",
    ]
    for path in json_paths:
        with open(path, encoding="utf-8") as handle:
            run = json.load(handle)
        for model in run["models"]:
            quick = model.get("quick", {})
            original, mended = quick.get("original", {}), quick.get("graphmend", {})
            version = original.get("environment", {}).get("transformers", "?")
            error = original.get("error") or mended.get("error") or original.get("count_error")
            if error or original.get("breaks") is None:
                rows.append(f"| {model['name']} | {version} | not counted: {_error_line(error)} | | | | |")
                continue
            identical = model.get("equality", {}).get("bit_identical")
            rows.append(
                f"| {model['name']} | {version} | {original['breaks']} -> {mended.get('breaks')} "
                f"| {original.get('graphs')} -> {mended.get('graphs')} "
                f"| {'yes' if identical else 'no' if identical is False else '?'} "
                f"| {'yes' if original.get('fullgraph') else 'no'} / {'yes' if mended.get('fullgraph') else 'no'} "
                f"| {_break_sites(mended)} |"
            )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", help=f"comma-separated; default all: {', '.join(MODEL_BUILDS)}")
    parser.add_argument("--out", help="folder for the model files and JSON (default: a new temporary folder)")
    parser.add_argument("--batch", type=int, default=8, help="model files per `graphmend bench` command")
    parser.add_argument("--summarise", nargs="+", metavar="JSON", help="print the table of saved runs and exit")
    options = parser.parse_args()
    if options.summarise:
        try:
            rows = summary_rows(options.summarise)
        except (OSError, ValueError, KeyError, TypeError) as error:
            parser.error(f"cannot read a saved run: {type(error).__name__}: {error}")
        print("\n".join(rows))
        return
    names = options.models.split(",") if options.models else list(MODEL_BUILDS)
    unknown = [name for name in names if name not in MODEL_BUILDS]
    if unknown:
        parser.error(f"unknown model {unknown[0]!r}; known: {', '.join(MODEL_BUILDS)}")
    folder = options.out or tempfile.mkdtemp(prefix="graphmend-reach-survey-")
    outputs = run_batches(write_model_files(names, folder), folder, options.batch)
    print(f"model files and JSON in {folder}", file=sys.stderr)
    print("\n".join(summary_rows(outputs)))


if __name__ == "__main__":
    main()
