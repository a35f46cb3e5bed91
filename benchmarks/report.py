"""Summaries of a benchmark run: per-model figures, totals, Markdown, a terminal table, a plot.

Everything here works on the plain JSON-able dictionaries the runner collects, so a
saved ``--json`` file can be rendered again without running anything.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from benchmarks.paper import (
    CATEGORIES,
    CATEGORY_ORDER,
    PAPER_BREAKS_REMOVED,
    PAPER_BREAKS_TOTAL,
    PAPER_MODELS_FULLY_FIXED,
    PAPER_MODELS_TOTAL,
    PAPER_ROWS,
    format_reasons,
)


def spread(values: Sequence[float | None]) -> dict | None:
    """min / median / max / n of the measured values (None entries are left out)."""
    values = [value for value in values if value is not None]
    if not values:
        return None
    return {
        "min": min(values),
        "median": statistics.median(values),
        "max": max(values),
        "n": len(values),
    }


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or not denominator:
        return None
    return numerator / denominator


def display_categories(arm: dict) -> dict[str, int]:
    """Categories of an arm's breaks, as many as ``breaks``.

    Each logged break has a category. TorchDynamo logs a break once where it happens;
    the graph it also splits in each calling frame is counted by ``breaks`` but has no
    record of its own. When every logged break has the same category, the extra ones
    are of that category too; otherwise they are shown as ``unattributed``.
    """
    categories = dict(arm.get("categories") or {})
    breaks = arm.get("breaks") or 0
    extra = breaks - sum(categories.values())
    if extra > 0:
        if len(categories) == 1:
            only = next(iter(categories))
            categories[only] += extra
        else:
            categories["unattributed"] = extra
    return categories


def summarize_model(entry: dict) -> dict:
    """The figures of one model, from what the runner collected for it."""
    quick = entry.get("quick") or {}
    original = quick.get("original") or {}
    mended = quick.get("graphmend") or {}
    equality = entry.get("equality") or {}
    summary: dict = {
        "name": entry["name"],
        "paper_name": entry.get("paper_name"),
        "skipped": entry.get("skipped"),
        "errors": model_errors(entry),
        "graphs_before": original.get("graphs"),
        "graphs_after": mended.get("graphs"),
        "breaks_before": original.get("breaks"),
        "breaks_after": mended.get("breaks"),
        "categories_before": display_categories(original) if "breaks" in original else None,
        "categories_after": display_categories(mended) if "breaks" in mended else None,
        "fullgraph_before": original.get("fullgraph"),
        "fullgraph_after": mended.get("fullgraph"),
        "bit_identical": equality.get("bit_identical"),
        "rewrite_seconds": (mended.get("rewrite") or {}).get("seconds"),
    }
    before, after = summary["breaks_before"], summary["breaks_after"]
    if before is not None and after is not None:
        summary["breaks_removed"] = max(before - after, 0)
        summary["fixed_percent"] = 100.0 * summary["breaks_removed"] / before if before else None
        summary["fully_fixed"] = before > 0 and after == 0
    timing = entry.get("timing") or {}
    for arm in ("original", "graphmend"):
        runs = [
            run for run in timing.get(arm, []) if "timing_error" not in run and "error" not in run
        ]
        summary[f"cold_start_{arm}"] = spread([run.get("cold_start_seconds") for run in runs])
        summary[f"steady_state_{arm}"] = spread([run.get("steady_state_seconds") for run in runs])
        summary[f"steady_median_call_{arm}"] = spread([_median_steady_call(run) for run in runs])
        summary[f"time_to_last_call_{arm}"] = spread([_time_to_last_call(run) for run in runs])
        summary[f"calls_{arm}"] = max((len(run.get("call_seconds") or []) for run in runs), default=None)
        summary[f"graphs_compiled_{arm}"] = sorted(
            {run["dynamo_stats"]["unique_graphs"] for run in runs if "unique_graphs" in (run.get("dynamo_stats") or {})}
        )
    for kind in ("cold_start", "steady_state", "steady_median_call"):
        original_spread = summary[f"{kind}_original"]
        mended_spread = summary[f"{kind}_graphmend"]
        summary[f"{kind}_speedup"] = ratio(
            original_spread and original_spread["median"], mended_spread and mended_spread["median"]
        )
        summary[f"{kind}_speedup_range"] = speedup_range(original_spread, mended_spread)
    return summary


def speedup_range(original: dict | None, mended: dict | None) -> dict | None:
    """The least and greatest speedup any pair of processes could show: the slowest
    original over the fastest graphmend run and the other way round. A run of the same
    benchmark that lands inside it is within the spread this run measured."""
    if not original or not mended or not mended["min"] or not mended["max"]:
        return None
    return {"min": original["min"] / mended["max"], "max": original["max"] / mended["min"]}


def _time_to_last_call(run: dict) -> float | None:
    """Seconds from the first call's start to the last call's end (compilations and
    recompilations included): what a warm-up that compiles, then serves, waits."""
    calls = run.get("call_seconds") or []
    return sum(calls) if calls else None


def _graphs_compiled(values: list[int]) -> str:
    """Graphs TorchDynamo compiled over all the timed calls of a process (recompilations
    included), one figure per distinct value across the processes."""
    return "/".join(str(value) for value in values) if values else "-"


def _separate_steady_window(run: dict) -> bool:
    return run.get("steady_state_window") == "after the first N calls"


def _median_steady_call(run: dict) -> float | None:
    """The median of the steady-state calls: the steady state without a rare slow call
    (a recompilation) that the mean would carry. Runs before the steady-state window
    existed: calls 2..n."""
    if _separate_steady_window(run) and run.get("steady_state_median_seconds") is not None:
        return run["steady_state_median_seconds"]
    steady = (run.get("call_seconds") or [])[1:]
    return statistics.median(steady) if steady else None


def model_errors(entry: dict) -> list[str]:
    """One line per failed step of a model (empty when all went well)."""
    lines = []
    for phase in ("quick", "train", "timing"):
        arms = entry.get(phase) or {}
        for arm, results in arms.items():
            for result in results if isinstance(results, list) else [results]:
                for key in ("error", "count_error", "eager_error", "timing_error", "worker_error"):
                    if result.get(key):
                        lines.append(f"{phase}/{arm}: {key}: {_last_line(result[key])}")
                for run_name, run in (result.get("train") or {}).items():
                    if run.get("error"):
                        lines.append(f"train/{arm}/{run_name}: {_last_line(run['error'])}")
    for problem in (entry.get("equality") or {}).get("problems", []):
        lines.append(f"equality: {problem}")
    for problem in (entry.get("train_equality") or {}).get("problems", []):
        lines.append(f"training equality: {problem}")
    return lines


def _last_line(text: str) -> str:
    lines = [line for line in str(text).strip().splitlines() if line.strip()]
    return lines[-1][:240] if lines else ""


def totals(summaries: Sequence[dict]) -> dict:
    """Breaks removed over all breaks, and models fully fixed over models with breaks."""
    counted = [
        s
        for s in summaries
        if s.get("breaks_before") is not None and s.get("breaks_after") is not None
    ]
    with_breaks = [s for s in counted if s["breaks_before"] > 0]
    return {
        "models_counted": len(counted),
        "breaks_total": sum(s["breaks_before"] for s in counted),
        "breaks_removed": sum(s["breaks_removed"] for s in counted),
        "models_with_breaks": len(with_breaks),
        "models_fully_fixed": sum(1 for s in with_breaks if s["fully_fixed"]),
        "paper_breaks_removed": PAPER_BREAKS_REMOVED,
        "paper_breaks_total": PAPER_BREAKS_TOTAL,
        "paper_models_fully_fixed": PAPER_MODELS_FULLY_FIXED,
        "paper_models_total": PAPER_MODELS_TOTAL,
    }


# ---------------------------------------------------------------------------------
# Rendering
# ---------------------------------------------------------------------------------


def _number(value, digits: int = 0) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _yes_no(value) -> str:
    return {True: "yes", False: "no"}.get(value, "-")


def format_speedup(value) -> str:
    if value is None:
        return "-"
    return f"{value:.2f}x" if value >= 0.1 else f"{value:.2g}x"


def _milliseconds(spread_value: dict | None) -> str:
    if not spread_value:
        return "-"
    return _seconds(
        {key: value * 1000 if key != "n" else value for key, value in spread_value.items()}
    )


def _seconds(spread_value: dict | None) -> str:
    if not spread_value:
        return "-"
    return (
        f"{spread_value['median']:.4g} ({spread_value['min']:.4g}-{spread_value['max']:.4g}, "
        f"n={spread_value['n']})"
    )


def _speedup_with_range(value, value_range: dict | None) -> str:
    if value is None:
        return "-"
    if not value_range:
        return format_speedup(value)
    low, high = format_speedup(value_range["min"]), format_speedup(value_range["max"])
    return f"{format_speedup(value)} ({low.rstrip('x')}-{high})"


def _reasons(categories: dict | None) -> str:
    if categories is None:
        return "-"
    return format_reasons(categories)


def _percent(value) -> str:
    return f"{value:.0f}" if value is not None else "-"


def summary_rows(summaries: Sequence[dict]) -> list[list[str]]:
    """The main table: ours beside the paper's Table 2."""
    rows = []
    for s in summaries:
        paper = PAPER_ROWS.get(s.get("paper_name") or "")
        if s.get("skipped"):
            rows.append(
                [s["name"], s.get("paper_name") or "-", "skipped: " + s["skipped"]] + [""] * 9
            )
            continue
        rows.append(
            [
                s["name"],
                s.get("paper_name") or "-",
                _number(paper.breaks) if paper else "-",
                paper.reasons_label() if paper else "-",
                _number(paper.fixed_percent) if paper else "-",
                _number(s["breaks_before"]),
                _reasons(s["categories_before"]),
                _number(s["breaks_after"]),
                _reasons(s["categories_after"]),
                _percent(s.get("fixed_percent")),
                f"{_yes_no(s['fullgraph_before'])} / {_yes_no(s['fullgraph_after'])}",
                _yes_no(s["bit_identical"]),
            ]
        )
    return rows


SUMMARY_HEADER = [
    "model",
    "paper model",
    "paper breaks",
    "paper reasons",
    "paper fixed %",
    "breaks",
    "reasons",
    "breaks after",
    "reasons after",
    "fixed %",
    "fullgraph before / after",
    "bit-identical",
]

TIMING_HEADER = [
    "model",
    "rewrite ms",
    "cold start s original",
    "cold start s graphmend",
    "cold speedup",
    "steady ms original",
    "steady ms graphmend",
    "steady speedup",
    "steady speedup, median call",
    "graphs compiled over all calls original / graphmend",
    "time to the last call s original / graphmend",
    "paper H100 cold / steady",
]


REWRITE_HEADER = ["model", "modeling file", "lines", "rewrite ms", "modules the hook loaded"]


def rewrite_rows(entries: Sequence[dict]) -> list[list[str]]:
    rows = []
    for entry in entries:
        mended = (entry.get("quick") or {}).get("graphmend") or {}
        rewrite = mended.get("rewrite") or {}
        if rewrite.get("seconds") is None:
            continue
        path = rewrite.get("file") or "-"
        short = path.split("site-packages/")[-1]
        hook = mended.get("hook") or {}
        rows.append(
            [
                entry["name"],
                short,
                _number(rewrite.get("lines")),
                f"{rewrite['seconds'] * 1000:.0f}",
                (
                    f"{_number(hook.get('transform_calls'))} rewritten, "
                    f"{_number(hook.get('cache_hits'))} from the cache"
                ),
            ]
        )
    return rows


TRAINING_HEADER = [
    "model",
    "backend",
    "graphs",
    "breaks",
    "reasons",
    "graphs with graphmend",
    "breaks with graphmend",
    "reasons with graphmend",
    "recompilations original / graphmend",
    "declined while tracing (graphmend)",
    "whole with graphmend",
    "gradients identical",
    "losses and parameters identical",
]


def _training_run(entry: dict, arm: str, backend: str) -> dict:
    return (((entry.get("train") or {}).get(arm) or {}).get("train") or {}).get(backend) or {}


def training_backends(entries: Sequence[dict]) -> list[str]:
    """The compiled runs of the training pass, in the order they ran."""
    from benchmarks.training import UNCOMPILED

    names: dict[str, None] = {}
    for entry in entries:
        for result in (entry.get("train") or {}).values():
            names.update(dict.fromkeys(name for name in (result.get("train") or {}) if name != UNCOMPILED))
    return list(names)


def is_whole(run: dict) -> bool | None:
    """One graph, no break, no skipped frame, no error: the training step compiled whole."""
    if "graphs" not in run:
        return None
    return (
        not run.get("error")
        and run.get("graphs") == 1
        and run.get("breaks") == 0
        and not run.get("frames_skipped")
    )


def training_summary(entry: dict, backend: str) -> dict | None:
    """One model's training figures under ``backend`` (None where it had no training pass)."""
    if not entry.get("train"):
        return None
    original = _training_run(entry, "original", backend)
    mended = _training_run(entry, "graphmend", backend)
    check = ((entry.get("train_equality") or {}).get("runs") or {}).get(backend)
    return {
        "name": entry["name"],
        "backend": backend,
        "graphs_before": original.get("graphs"),
        "graphs_after": mended.get("graphs"),
        "breaks_before": original.get("breaks"),
        "breaks_after": mended.get("breaks"),
        "categories_before": display_categories(original) if "breaks" in original else None,
        "categories_after": display_categories(mended) if "breaks" in mended else None,
        "recompilations_before": len(original["recompilations"]) if "recompilations" in original else None,
        "recompilations_after": len(mended["recompilations"]) if "recompilations" in mended else None,
        "declined": _condition_counts(mended.get("declined")),
        "whole_before": is_whole(original),
        "whole_after": is_whole(mended),
        "failed": bool(original.get("error") or mended.get("error")),
        "gradients_identical": check.get("gradients") if check else None,
        "losses_and_parameters_identical": (
            check.get("losses") and check.get("parameters") if check else None
        ),
        "compiled_matches_uncompiled": check.get("original_matches_uncompiled") if check else None,
    }


def _condition_counts(declined: list[dict] | None) -> dict[str, int] | None:
    """How many sites each legality condition declined while tracing."""
    if declined is None:
        return None
    counts: dict[str, int] = {}
    for row in declined:
        condition = row.get("condition") or "no id"
        counts[condition] = counts.get(condition, 0) + 1
    return dict(sorted(counts.items()))


def _declined_text(counts: dict[str, int] | None) -> str:
    if counts is None:
        return "-"
    return ", ".join(f"{condition} ({count})" for condition, count in counts.items()) or "none"


def training_summaries(entries: Sequence[dict]) -> list[dict]:
    return [
        summary
        for backend in training_backends(entries)
        for entry in entries
        if (summary := training_summary(entry, backend)) is not None
    ]


def training_rows(summaries: Sequence[dict]) -> list[list[str]]:
    return [
        [
            s["name"],
            s["backend"],
            _number(s["graphs_before"]),
            _number(s["breaks_before"]),
            _reasons(s["categories_before"]),
            _number(s["graphs_after"]),
            _number(s["breaks_after"]),
            _reasons(s["categories_after"]),
            f"{_number(s['recompilations_before'])} / {_number(s['recompilations_after'])}",
            _declined_text(s["declined"]),
            _yes_no(s["whole_after"]) + (" (failed)" if s["failed"] else ""),
            _yes_no(s["gradients_identical"]),
            _yes_no(s["losses_and_parameters_identical"]),
        ]
        for s in summaries
    ]


def training_totals(summaries: Sequence[dict], backend: str) -> dict:
    counted = [
        s
        for s in summaries
        if s["backend"] == backend and s["breaks_before"] is not None and s["breaks_after"] is not None
    ]
    return {
        "models": len(counted),
        "breaks_total": sum(s["breaks_before"] for s in counted),
        "breaks_after": sum(s["breaks_after"] for s in counted),
        "whole_before": sum(1 for s in counted if s["whole_before"]),
        "whole_after": sum(1 for s in counted if s["whole_after"]),
        "identical": sum(
            1 for s in counted if s["gradients_identical"] and s["losses_and_parameters_identical"]
        ),
    }


# Options that say where results go, not what is measured.
_OUTPUT_OPTIONS = ("--json", "--markdown", "--plot", "--title")


def measuring_command(argv: Sequence[str]) -> str:
    """``graphmend bench`` with the run's arguments, less those naming output files."""
    kept, skip = [], False
    for argument in list(argv)[1:]:
        if skip:
            skip = False
        elif argument in _OUTPUT_OPTIONS:
            skip = True
        elif not argument.startswith(tuple(f"{option}=" for option in _OUTPUT_OPTIONS)):
            kept.append(argument)
    return " ".join(["graphmend bench", *kept])


def training_section(
    run: dict, section: str, title: str = "Training step", with_setup: bool = False
) -> list[str]:
    """The training pass as Markdown lines (none where the run has no training pass);
    ``with_setup`` says when and with what the run was made (for a page of several runs)."""
    from benchmarks.training import LEARNING_RATE, MOMENTUM, TRAINING_STEPS

    entries = run.get("models", [])
    summaries = training_summaries(entries)
    if not summaries:
        return []
    out = [f"{section} {title}", ""]
    if with_setup:
        meta = run.get("meta", {})
        environment = meta.get("environment") or {}
        command = measuring_command(meta.get("argv") or [])
        out += [
            f"- `{command}`: {meta.get('date', '-')}, {_number(meta.get('seconds'))} s; "
            f"graphmend {meta.get('graphmend_version', '-')} (commit {meta.get('git_commit') or '-'})",
            f"- torch {environment.get('torch', '-')}, transformers "
            f"{environment.get('transformers', '-')}, Python {environment.get('python', '-')}; "
            f"{environment.get('processor', '-')}, {environment.get('cpu_count', '-')} CPUs",
            "",
        ]
    out.append(
        f"Each arm, in a process of its own, puts the model in train mode (dropout active), "
        f"seeds torch, numpy and Python's random alike, and runs {TRAINING_STEPS} steps: "
        "forward, the sum of the main output (logits, last hidden state or boxes) as the "
        f"loss, backward, torch.optim.SGD(lr={LEARNING_RATE}, momentum={MOMENTUM}). It "
        "trains once uncompiled and once per backend compiled with a counting backend that "
        "wraps it (dynamic=False), each time from the same initial weights. Graphs, breaks "
        "(TorchDynamo's record of each) and recompilations are those of all steps; whole = "
        "one graph and no break. Declined while tracing counts the sites where the mended "
        "code kept its break at trace time, by legality condition (`graphmend rule ID` "
        "explains one). Identical compares the graphmend arm's losses, last "
        "gradients and final parameters with the original arm's under the same backend, "
        "bit for bit (torch.equal)."
    )
    out.append("")
    out.append(markdown_table(TRAINING_HEADER, training_rows(summaries)))
    out.append("")
    for backend in training_backends(entries):
        total = training_totals(summaries, backend)
        out.append(
            f"- {backend}: breaks {total['breaks_total']} -> {total['breaks_after']} over "
            f"{total['models']} models; whole {total['whole_before']} -> {total['whole_after']}; "
            f"gradients, losses and parameters identical in {total['identical']} / {total['models']}"
        )
    uncompiled = [
        ((entry.get("train_equality") or {}).get("runs") or {}).get("uncompiled")
        for entry in entries
        if entry.get("train_equality")
    ]
    if uncompiled:
        same = sum(1 for check in uncompiled if check and check.get("equal"))
        out.append(
            f"- uncompiled: the graphmend arm's training is identical to the original's in "
            f"{same} / {len(uncompiled)} models"
        )
    differing = [
        f"{s['name']} ({s['backend']})" for s in summaries if s["compiled_matches_uncompiled"] is False
    ]
    if differing:
        out.append(
            "- the original model compiled does not train bit for bit as it does uncompiled "
            f"(not required; both arms are compared under the same backend): {', '.join(differing)}"
        )
    return out


SLOW_CALL_FACTOR = 10
SLOW_CALL_SECONDS = 0.5  # below this, a slow call is timer noise, not a compilation


def slow_steady_calls(entries: Sequence[dict]) -> list[str]:
    """Notes on steady-state calls far slower than their process's median call: a
    recompilation (a guard that failed after the first call) lands in the mean."""
    notes = []
    for entry in entries:
        for arm, runs in (entry.get("timing") or {}).items():
            for number, run in enumerate(runs, 1):
                steady = (run.get("call_seconds") or [])[1:]
                if len(steady) < 2:
                    continue
                typical = statistics.median(steady)
                slow = [
                    (index, value)
                    for index, value in enumerate(steady, 2)
                    if value > SLOW_CALL_FACTOR * typical and value > SLOW_CALL_SECONDS
                ]
                if slow:
                    calls = ", ".join(f"call {index} took {value:.2f} s" for index, value in slow)
                    notes.append(
                        f"{entry['name']}, {arm} process {number}: {calls} against a median of "
                        f"{typical * 1000:.2f} ms for calls 2-{len(steady) + 1} (likely a recompilation); "
                        + (
                            "the time to the last call includes it"
                            if _separate_steady_window(run)
                            else "the steady-state mean includes it"
                        )
                    )
    return notes


def skipped_frame_notes(entries: Sequence[dict]) -> list[str]:
    """A frame TorchDynamo skips runs wholly eagerly: its break count understates it."""
    notes = []
    for entry in entries:
        for arm, result in (entry.get("quick") or {}).items():
            skipped = (result or {}).get("frames_skipped") or 0
            if skipped:
                notes.append(
                    f"{entry['name']}, {arm}: TorchDynamo skipped {skipped} frame(s) and ran "
                    "them eagerly, uncompiled (a break inside a loop does this); the break "
                    "count understates what is lost"
                )
    return notes


def timing_rows(summaries: Sequence[dict]) -> list[list[str]]:
    rows = []
    for s in summaries:
        if s.get("skipped"):
            continue
        paper = PAPER_ROWS.get(s.get("paper_name") or "")
        paper_speedups = "-"
        if paper and paper.cold_start:
            paper_speedups = f"{paper.cold_start['H100']:.2f}x / {paper.steady_state['H100']:.2f}x"
        rewrite = s.get("rewrite_seconds")
        rows.append(
            [
                s["name"],
                f"{rewrite * 1000:.0f}" if rewrite is not None else "-",
                _seconds(s["cold_start_original"]),
                _seconds(s["cold_start_graphmend"]),
                _speedup_with_range(s["cold_start_speedup"], s["cold_start_speedup_range"]),
                _milliseconds(s["steady_state_original"]),
                _milliseconds(s["steady_state_graphmend"]),
                _speedup_with_range(s["steady_state_speedup"], s["steady_state_speedup_range"]),
                format_speedup(s["steady_median_call_speedup"]),
                f"{_graphs_compiled(s.get('graphs_compiled_original') or [])} / "
                f"{_graphs_compiled(s.get('graphs_compiled_graphmend') or [])}",
                f"{_seconds(s.get('time_to_last_call_original'))} / {_seconds(s.get('time_to_last_call_graphmend'))}"
                + (f" ({s['calls_graphmend']} calls)" if s.get("calls_graphmend") else ""),
                paper_speedups,
            ]
        )
    return rows


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    def cell(text) -> str:
        return str(text).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(cell(h) for h in header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def render_markdown(run: dict, title: str = "graphmend benchmark", level: int = 2) -> str:
    """The whole report: setup, the table beside the paper's, totals, timings, failures.
    ``level`` is the Markdown heading level of the title; its sections are one deeper."""
    meta = run.get("meta", {})
    environment = meta.get("environment") or {}
    options = meta.get("options") or {}
    summaries = [summarize_model(entry) for entry in run.get("models", [])]
    total = totals(summaries)
    section = "#" * (level + 1)
    out = [f"{'#' * level} {title}", ""]
    out.append(
        f"- date: {meta.get('date', '-')}; graphmend {meta.get('graphmend_version', '-')}"
        f" (commit {meta.get('git_commit') or '-'})"
    )
    out.append(
        f"- torch {environment.get('torch', '-')}, transformers {environment.get('transformers', '-')},"
        f" Python {environment.get('python', '-')}"
    )
    machine = environment.get("gpu") or environment.get("processor", "-")
    out.append(
        f"- machine: {machine}; {environment.get('cpu_count', '-')} CPUs;"
        f" {environment.get('platform', '-')}"
    )
    out.append(
        f"- threads: torch.get_num_threads() = {environment.get('torch_threads', '-')}, "
        f"interop {environment.get('torch_interop_threads', '-')}; environment "
        f"{_environment_text(environment.get('thread_environment'))}"
    )
    loads = [
        arm["environment"]["load_average_1min"]
        for entry in run.get("models", [])
        for phase in ("quick", "train", "timing")
        for results in (entry.get(phase) or {}).values()
        for arm in (results if isinstance(results, list) else [results])
        if (arm.get("environment") or {}).get("load_average_1min") is not None
    ]
    if loads:
        out.append(
            f"- machine load (1-minute load average when each worker started): "
            f"{min(loads):.1f} to {max(loads):.1f}"
        )
    if not meta.get("merged_runs"):
        out.append(f"- options: {_options_text(options)}")
    for number, merged in enumerate(meta.get("merged_runs") or [], 1):
        out.append(
            f"- merged run {number}: {merged.get('date', '-')}, commit {merged.get('git_commit') or '-'}, "
            f"{_options_text(merged.get('options') or {})}"
        )
    if training_only(run):
        out.append("")
        out += training_section(run, section)
        out += _failures_and_notes(run, summaries, section)
        return "\n".join(out) + "\n"
    out.append(
        "- each arm runs in a fresh process; counts use a counting backend with dynamic=False; "
        'fullgraph uses backend="eager"; bit-identical compares every output tensor of the '
        "graphmend arm (eager and compiled) with the original model run eagerly in fp32 "
        "(torch.equal)"
    )
    out.append("")
    out.append(markdown_table(SUMMARY_HEADER, summary_rows(summaries)))
    out.append("")
    out.append(
        f"**Totals.** Breaks removed: {total['breaks_removed']} / {total['breaks_total']} "
        f"over {total['models_counted']} models (paper: {PAPER_BREAKS_REMOVED} / {PAPER_BREAKS_TOTAL} over "
        f"{PAPER_MODELS_TOTAL}). Models fully fixed: {total['models_fully_fixed']} / "
        f"{total['models_with_breaks']} models with breaks (paper: {PAPER_MODELS_FULLY_FIXED} / "
        f"{PAPER_MODELS_TOTAL})."
    )
    out.append("")
    out.append(
        "Categories: "
        + "; ".join(f"{name} = {text}" for name, text in CATEGORIES.items())
        + "; unattributed = breaks without a log record of their own in a model whose logged "
        "breaks have several categories."
    )
    skipped_frames = skipped_frame_notes(run.get("models", []))
    if skipped_frames:
        out.append("")
        out += [f"- {note}" for note in skipped_frames]
    timed = any(s.get("cold_start_original") or s.get("cold_start_graphmend") for s in summaries)
    if timed:
        out.append("")
        out.append(f"{section} Timings")
        out.append("")
        out.append(
            "Seconds as median (min-max, n processes); speedup = median original / median "
            "graphmend, with the range any pair of processes spans (slowest original / fastest "
            "graphmend to fastest original / slowest graphmend). Cold start is the first call, TorchInductor compilation included; steady "
            "state is the mean of the calls after the first N (the options' `steady_calls`; "
            "the calls right after compiling still warm up, by 2-4x on these small models, so "
            "the paper's mean of the next calls measures the warm-up); the median-call speedup "
            "compares the medians of those calls instead, which one slow call (a "
            "recompilation) does not move. Time to the last call counts the first N calls. "
            "Rewrite time is graphmend rewriting the model's modeling file."
        )
        out.append("")
        out.append(markdown_table(TIMING_HEADER, timing_rows(summaries)))
        slow_calls = slow_steady_calls(run.get("models", []))
        if slow_calls:
            out.append("")
            out += [f"- {note}" for note in slow_calls]
    elif any(s.get("rewrite_seconds") is not None for s in summaries):
        out.append("")
        out.append(f"{section} Rewrite time")
        out.append("")
        out.append(
            "Time for graphmend to rewrite the file that defines the model's class (once, in the "
            "graphmend arm's process), and the modules the import hook loaded in that process: "
            "rewritten, or taken from the rewritten-code cache that the run's graphmend processes "
            "share (off where PYTHONDONTWRITEBYTECODE was set for the whole run)."
        )
        out.append("")
        out.append(markdown_table(REWRITE_HEADER, rewrite_rows(run.get("models", []))))
    training = training_section(run, section)
    if training:
        out.append("")
        out += training
    out += _failures_and_notes(run, summaries, section)
    return "\n".join(out) + "\n"


def training_only(run: dict) -> bool:
    """Whether the run is a training pass alone (``--train-only``)."""
    entries = run.get("models", [])
    return any(entry.get("train") for entry in entries) and not any(
        entry.get("quick") or entry.get("timing") for entry in entries
    )


def _failures_and_notes(run: dict, summaries: Sequence[dict], section: str) -> list[str]:
    out = []
    failures = [(s["name"], s["errors"]) for s in summaries if s["errors"]]
    if failures:
        out.append("")
        out.append(f"{section} Failures")
        out.append("")
        for name, errors in failures:
            for error in errors:
                out.append(f"- {name}: {error}")
    notes = [
        (entry["name"], entry.get("notes")) for entry in run.get("models", []) if entry.get("notes")
    ]
    if notes:
        out.append("")
        out.append(f"{section} Model notes")
        out.append("")
        out += [f"- {name}: {note}" for name, note in notes]
    return out


def _environment_text(environment: dict | None) -> str:
    if not environment:
        return "-"
    return ", ".join(f"{key}={value}" for key, value in environment.items())


def _options_text(options: dict) -> str:
    keys = ("quick", "device", "mode", "repeats", "iterations", "steady_calls", "models")
    if options.get("train"):
        keys += ("train", "train_only", "train_backends")
    return ", ".join(f"{key}={_option_text(options[key])}" for key in keys if key in options) or "-"


def _option_text(value) -> str:
    return ",".join(value) if isinstance(value, (list, tuple)) else str(value)


def render_terminal(run: dict) -> str:
    """A plain-text table for the end of a run (``rich`` draws it when installed), and the
    training pass's table where the run has one."""
    training = training_terminal(run)
    if training_only(run):
        return training
    return _counts_terminal(run) + (("\n" + training) if training else "")


TRAINING_TERMINAL_HEADER = [
    "model", "backend", "graphs", "breaks", "graphs gm", "breaks gm", "whole gm", "gradients =",
]


def training_terminal(run: dict) -> str:
    entries = run.get("models", [])
    summaries = training_summaries(entries)
    if not summaries:
        return ""
    rows = [
        [
            s["name"],
            s["backend"],
            _number(s["graphs_before"]),
            _number(s["breaks_before"]),
            _number(s["graphs_after"]),
            _number(s["breaks_after"]),
            _yes_no(s["whole_after"]) + (" (failed)" if s["failed"] else ""),
            _yes_no(s["gradients_identical"] and s["losses_and_parameters_identical"]),
        ]
        for s in summaries
    ]
    footer = []
    for backend in training_backends(entries):
        total = training_totals(summaries, backend)
        footer.append(
            f"training, {backend}: breaks {total['breaks_total']} -> {total['breaks_after']}; "
            f"whole {total['whole_before']} -> {total['whole_after']} of {total['models']}; "
            f"identical {total['identical']}/{total['models']}"
        )
    return plain_table(TRAINING_TERMINAL_HEADER, rows) + "\n" + "\n".join(footer) + "\n"


def _counts_terminal(run: dict) -> str:
    summaries = [summarize_model(entry) for entry in run.get("models", [])]
    header = ["model", "breaks", "after", "fixed %", "fullgraph", "identical", "cold x", "steady x"]
    rows = []
    for s in summaries:
        if s.get("skipped"):
            rows.append([s["name"], "skipped", "", "", "", "", "", ""])
            continue
        rows.append(
            [
                s["name"],
                _number(s["breaks_before"]),
                _number(s["breaks_after"]),
                _percent(s.get("fixed_percent")),
                f"{_yes_no(s['fullgraph_before'])}/{_yes_no(s['fullgraph_after'])}",
                _yes_no(s["bit_identical"]),
                format_speedup(s["cold_start_speedup"]),
                format_speedup(s["steady_state_speedup"]),
            ]
        )
    total = totals(summaries)
    footer = (
        f"breaks removed {total['breaks_removed']}/{total['breaks_total']} "
        f"(paper {PAPER_BREAKS_REMOVED}/{PAPER_BREAKS_TOTAL}); fully fixed "
        f"{total['models_fully_fixed']}/{total['models_with_breaks']} "
        f"(paper {PAPER_MODELS_FULLY_FIXED}/{PAPER_MODELS_TOTAL})"
    )
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        return plain_table(header, rows) + "\n" + footer + "\n"
    table = Table(*header, caption=footer)
    for row in rows:
        table.add_row(*row)
    console = Console(record=True, width=120)
    with console.capture() as captured:
        console.print(table)
    return captured.get()


def plain_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *rows)]

    def line(cells) -> str:
        return "  ".join(str(cell).ljust(width) for cell, width in zip(cells, widths)).rstrip()

    return "\n".join([line(header), line("-" * width for width in widths), *map(line, rows)])


def write_plot(run: dict, path: str) -> bool:
    """Breaks before/after per model, and the speedups where timed. False without matplotlib."""
    return write_plot_of_runs([run], [None], path)


def write_plot_of_runs(runs: Sequence[dict], labels: Sequence[str | None], path: str) -> bool:
    """One column per run: breaks before/after per model, and below it the speedups
    where the run was timed. False without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    columns = [
        [s for s in map(summarize_model, run.get("models", [])) if not s.get("skipped")]
        for run in runs
    ]
    timed_columns = [
        [s for s in summaries if s["cold_start_speedup"] or s["steady_state_speedup"]]
        for summaries in columns
    ]
    panels = 2 if any(timed_columns) else 1
    widest = max((len(summaries) for summaries in columns), default=1)
    figure, axes = plt.subplots(
        panels,
        len(runs),
        figsize=(len(runs) * max(8, 0.7 * widest + 2), 4 * panels),
        squeeze=False,
    )
    for column, (summaries, timed, label) in enumerate(zip(columns, timed_columns, labels)):
        suffix = f" ({label})" if label else ""
        _draw_breaks(axes[0][column], summaries, "Graph breaks before and after graphmend" + suffix)
        if panels == 2:
            if timed:
                _draw_speedups(
                    axes[1][column], timed, "Speedup from graphmend (median of processes)" + suffix
                )
            else:
                axes[1][column].set_axis_off()
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return True


def _draw_bar_pairs(axis, names, first, second, labels) -> None:
    positions = range(len(names))
    width = 0.4
    axis.bar([p - width / 2 for p in positions], first, width, label=labels[0])
    axis.bar([p + width / 2 for p in positions], second, width, label=labels[1])
    axis.set_xticks(list(positions), names, rotation=45, ha="right")
    axis.legend()


def _draw_breaks(axis, summaries: Sequence[dict], title: str) -> None:
    _draw_bar_pairs(
        axis,
        [s["name"] for s in summaries],
        [s["breaks_before"] or 0 for s in summaries],
        [s["breaks_after"] or 0 for s in summaries],
        ("original", "graphmend"),
    )
    axis.set_ylabel("graph breaks")
    axis.set_title(title)


def _draw_speedups(axis, timed: Sequence[dict], title: str) -> None:
    _draw_bar_pairs(
        axis,
        [s["name"] for s in timed],
        [s["cold_start_speedup"] or 0 for s in timed],
        [s["steady_state_speedup"] or 0 for s in timed],
        ("cold start", "steady state"),
    )
    axis.axhline(1.0, color="gray", linewidth=0.8)
    axis.set_ylabel("speedup (original / graphmend)")
    axis.set_title(title)


__all__ = [
    "CATEGORY_ORDER",
    "display_categories",
    "format_speedup",
    "markdown_table",
    "model_errors",
    "plain_table",
    "ratio",
    "render_markdown",
    "render_terminal",
    "spread",
    "summarize_model",
    "totals",
    "write_plot",
    "write_plot_of_runs",
]
