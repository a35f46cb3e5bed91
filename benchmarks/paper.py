"""The figures of the GraphMend paper's Table 2, to print beside ours.

Each row: the model's Hugging Face name, its graph breaks, their causes (category ->
count), the share of breaks GraphMend fixed, and the forward-pass speedups on RTX 3090,
A40 and H100 (cold start, then steady state; ``None`` where the paper says N/A).
The paper measured pretrained checkpoints on GPUs with PyTorch 2.12 and Transformers
4.52.4; our suite builds the same classes from tiny configs with random weights, so
only the break counts are directly comparable.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# Category abbreviations, as in the paper's Table 2 legend.
CATEGORIES = {
    "DC": "data-dependent control flow",
    "LC": "logger / print / warnings call",
    "VG": "validation guard (data-dependent if whose body is a lone raise, or assert)",
    "TI": "tensor.item() call",
    "DS": "dynamic-shape operator",
    "DO": "data-dependent operator",
    "other": "anything else",
}
CATEGORY_ORDER = tuple(CATEGORIES)
# Categories that no source rewrite can remove (paper, section 3).
UNFIXABLE_CATEGORIES = ("TI", "DS", "DO")

GPUS = ("3090", "A40", "H100")


@dataclass(frozen=True)
class PaperRow:
    model: str
    breaks: int
    reasons: dict[str, int]
    fixed_percent: int
    cold_start: dict[str, float] | None = None
    steady_state: dict[str, float] | None = None
    reasons_text: str = field(default="", compare=False)

    def reasons_label(self) -> str:
        return self.reasons_text or format_reasons(self.reasons)


def format_reasons(reasons: dict[str, int]) -> str:
    """``{"DC": 4, "LC": 3}`` -> ``"DC (4) + LC (3)"``, in the legend's order."""
    parts = [f"{name} ({reasons[name]})" for name in CATEGORY_ORDER if reasons.get(name)]
    parts += [f"{name} ({count})" for name, count in reasons.items() if name not in CATEGORIES]
    return " + ".join(parts) if parts else "-"


def _row(model, breaks, reasons, fixed, cold=None, steady=None, text=""):
    return PaperRow(
        model,
        breaks,
        reasons,
        fixed,
        dict(zip(GPUS, cold)) if cold else None,
        dict(zip(GPUS, steady)) if steady else None,
        text,
    )


# stella-en-400M-v5 is listed as "DO + DS" without counts; its 4 breaks are kept whole.
TABLE_2: tuple[PaperRow, ...] = (
    _row("clap-htsat-fused", 4, {"DS": 4}, 0),
    _row("chronos-bolt-small", 6, {"LC": 6}, 100, (4.64, 4.68, 5.12), (1.09, 1.10, 1.15)),
    _row("whisper-large-v3", 3, {"LC": 3}, 100, (3.06, 3.34, 3.23), (1.08, 1.07, 1.18)),
    _row("t5-small", 3, {"LC": 3}, 100, (3.49, 3.40, 6.23), (1.08, 1.06, 1.10)),
    _row("bart-large-cnn", 7, {"DC": 4, "LC": 3}, 100, (21.07, 20.22, 24.1), (1.13, 1.11, 1.17)),
    _row("t5-base", 3, {"LC": 3}, 100, (2.27, 3.35, 3.2), (1.09, 1.06, 1.13)),
    _row("whisper-small", 3, {"LC": 3}, 100, (3.09, 3.08, 3.42), (1.08, 1.07, 1.09)),
    _row(
        "inclusively-reformulation-it5", 3, {"LC": 3}, 100, (3.02, 2.80, 3.98), (1.07, 1.05, 1.07)
    ),
    _row("whisper-base", 3, {"LC": 3}, 100, (2.49, 2.61, 5.08), (1.09, 1.10, 1.08)),
    _row("stella-en-400M-v5", 4, {"DO": 0, "DS": 0}, 0, text="DO + DS"),
    _row("bart-base", 7, {"DC": 4, "LC": 3}, 100, (11.87, 11.39, 11.5), (1.15, 1.14, 1.19)),
    _row("MoLFormer-XL-both-10pct", 5, {"VG": 5}, 100, (24.71, 24.25, 25.92), (1.13, 1.11, 1.13)),
    _row("rebel-large", 7, {"DC": 4, "LC": 3}, 100, (19.86, 21.90, 23.20), (1.12, 1.14, 1.14)),
    _row("layoutlmv3-base", 2, {"LC": 2}, 100, (6.78, 6.59, 6.48), (1.06, 1.07, 1.05)),
    _row("t5-3b", 3, {"LC": 3}, 100, (3.01, 2.88, 2.59), (1.08, 1.09, 1.12)),
    _row(
        "grounding-dino-tiny",
        17,
        {"DS": 3, "DO": 3, "DC": 11},
        58,
        (5.20, 5.19, 5.50),
        (1.08, 1.06, 1.07),
    ),
    _row("opus-mt-fr-en", 6, {"DC": 3, "LC": 3}, 100, (13.16, 12.80, 14.80), (1.10, 1.12, 1.12)),
    _row("Florence-2-large", 7, {"DC": 7}, 100, (20.95, 19.55, 4.39), (1.19, 1.21, 1.23)),
    _row(
        "grounding-dino-base",
        17,
        {"DS": 3, "DO": 3, "DC": 11},
        58,
        (5.17, 5.36, 5.60),
        (1.06, 1.05, 1.07),
    ),
    _row("Phi-4-mini-instruct", 5, {"DC": 5}, 100, (3.60, 3.90, 4.33), (1.13, 1.14, 1.13)),
    _row("Qwen-Audio-Chat", 2, {"DC": 2}, 100, (2.76, 3.27, 2.60), (1.15, 1.16, 1.18)),
    _row("biogpt", 2, {"DC": 2}, 100, (2.63, 2.86, 3.58), (1.11, 1.14, 1.16)),
    _row("blenderbot-400M-distill", 3, {"LC": 3}, 100, (3.21, 3.85, 4.17), (1.12, 1.09, 1.10)),
    _row("flan-t5-large", 3, {"LC": 3}, 100, (3.27, 3.27, 3.51), (1.06, 1.09, 1.12)),
    _row(
        "tiny-random-PegasusForCausalLM", 2, {"LC": 2}, 100, (2.72, 4.09, 5.29), (1.34, 1.37, 1.39)
    ),
    _row("longformer-base-4096", 5, {"LC": 3, "TI": 2}, 40, (2.53, 1.95, 1.80), (1.05, 1.07, 1.06)),
    _row("moe-minicpm-x4-base", 15, {"DS": 15}, 0),
)

PAPER_ROWS = {row.model: row for row in TABLE_2}

# The paper's own totals (section 5.1), checked against TABLE_2 by the tests.
PAPER_BREAKS_REMOVED = 107
PAPER_BREAKS_TOTAL = 147
PAPER_MODELS_FULLY_FIXED = 21
PAPER_MODELS_TOTAL = 27
