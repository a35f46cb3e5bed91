"""Does a benchmark run reproduce an earlier one?

Break counts, fullgraph capture and bit-identity are deterministic and must match
exactly. Timings are not: a speedup reproduces when it lands inside the range the
earlier run's own processes spanned (``report.speedup_range``), the spread that run
reported beside its median.
"""

from __future__ import annotations

from dataclasses import dataclass

from benchmarks.report import summarize_model

EXACT_MEASURES = (
    ("breaks before", "breaks_before"),
    ("breaks after", "breaks_after"),
    ("fullgraph before", "fullgraph_before"),
    ("fullgraph after", "fullgraph_after"),
    ("bit-identical", "bit_identical"),
)

SPEEDUP_MEASURES = (
    ("cold-start speedup", "cold_start"),
    ("steady-state speedup", "steady_state"),
)
SPEEDUP_LABELS = frozenset(label for label, _ in SPEEDUP_MEASURES)


@dataclass(frozen=True)
class Check:
    model: str
    measure: str
    reference: str
    candidate: str
    reproduced: bool

    @property
    def is_speedup(self) -> bool:
        return self.measure in SPEEDUP_LABELS


def _summaries(run: dict) -> dict[str, dict]:
    return {
        entry["name"]: summarize_model(entry)
        for entry in run.get("models", [])
        if not entry.get("skipped")
    }


def _text(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def compare_runs(reference: dict, candidate: dict) -> list[Check]:
    """One check per measure of every model both runs measured."""
    earlier, later = _summaries(reference), _summaries(candidate)
    checks: list[Check] = []
    for name, before in earlier.items():
        after = later.get(name)
        if after is None:
            continue
        for label, key in EXACT_MEASURES:
            if before.get(key) is None and after.get(key) is None:
                continue
            checks.append(
                Check(
                    name,
                    label,
                    _text(before.get(key)),
                    _text(after.get(key)),
                    before.get(key) == after.get(key),
                )
            )
        for label, kind in SPEEDUP_MEASURES:
            spread = before.get(f"{kind}_speedup_range")
            value = after.get(f"{kind}_speedup")
            if spread is None or value is None:
                continue
            checks.append(
                Check(
                    name,
                    label,
                    f"{before[f'{kind}_speedup']:.3g}x ({spread['min']:.3g}-{spread['max']:.3g}x)",
                    f"{value:.3g}x",
                    spread["min"] <= value <= spread["max"],
                )
            )
    return checks


def models_compared(reference: dict, candidate: dict) -> list[str]:
    later = _summaries(candidate)
    return [name for name in _summaries(reference) if name in later]


def tally(checks: list[Check]) -> tuple[int, int, int, int]:
    """(exact checks reproduced, exact checks, speedups reproduced, speedups)."""
    exact = [check for check in checks if not check.is_speedup]
    timed = [check for check in checks if check.is_speedup]
    return (
        sum(c.reproduced for c in exact),
        len(exact),
        sum(c.reproduced for c in timed),
        len(timed),
    )


def summary_line(checks: list[Check], whose_range: str = "the reference's") -> str:
    exact_reproduced, exact, timed_reproduced, timed = tally(checks)
    return (
        f"{exact_reproduced + timed_reproduced} of {len(checks)} checks reproduced: "
        f"{exact_reproduced} / {exact} exact (breaks, fullgraph, bit-identical), "
        f"{timed_reproduced} / {timed} speedups inside {whose_range} range"
    )


def per_model_rows(checks: list[Check]) -> list[list[str]]:
    """One row per model: exact measures reproduced, and each speedup now against the
    earlier run's median and range."""
    rows: dict[str, dict[str, str]] = {}
    exact: dict[str, list[Check]] = {}
    for check in checks:
        row = rows.setdefault(check.model, {})
        if check.is_speedup:
            mark = "" if check.reproduced else " NOT reproduced"
            row[check.measure] = f"{check.candidate} (against {check.reference}){mark}"
        else:
            exact.setdefault(check.model, []).append(check)
    table = []
    for model, row in rows.items():
        model_exact = exact.get(model, [])
        wrong = [c.measure for c in model_exact if not c.reproduced]
        exact_text = f"{len(model_exact) - len(wrong)} / {len(model_exact)}"
        if wrong:
            exact_text += " (differs: " + ", ".join(wrong) + ")"
        table.append(
            [
                model,
                exact_text,
                row.get("cold-start speedup", "-"),
                row.get("steady-state speedup", "-"),
            ]
        )
    return table


def per_model_header(whose_range: str = "the reference's", candidate: str = "") -> list[str]:
    """The header of ``per_model_rows``: whose median and range each speedup is set
    against, and (when given) whose speedup it is."""
    of = f" of {candidate}" if candidate else ""
    return [
        "model",
        "breaks, fullgraph, bit-identical equal",
        *(
            f"{label}{of} (against {whose_range} median and range)"
            for label, _ in SPEEDUP_MEASURES
        ),
    ]


PER_MODEL_HEADER = per_model_header()


def failed_checks(checks: list[Check]) -> list[Check]:
    return [check for check in checks if not check.reproduced]


__all__ = [
    "PER_MODEL_HEADER",
    "Check",
    "compare_runs",
    "failed_checks",
    "models_compared",
    "per_model_header",
    "per_model_rows",
    "summary_line",
    "tally",
]
