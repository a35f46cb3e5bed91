"""The results page: several saved runs (one per transformers version) on one page.

Everything on the page that is a number comes from the runs' JSON files; the prose
that explains the method and the comparison with the paper is read from files a
person writes, so the page can be produced again, unchanged, from the same runs.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

from benchmarks import reproduction
from benchmarks.paper import (
    PAPER_BREAKS_REMOVED,
    PAPER_BREAKS_TOTAL,
    PAPER_MODELS_FULLY_FIXED,
    PAPER_MODELS_TOTAL,
    format_reasons,
)
from benchmarks.report import (
    format_speedup,
    markdown_table,
    render_markdown,
    summarize_model,
    totals,
    training_section,
)


@dataclass(frozen=True)
class PageRun:
    """One run on the page: its label (for example ``transformers 4.52.4``), the run,
    and other runs of the same measurements (``(name, run)``, earlier or later, all or
    some of the models) checked against it."""

    label: str
    run: dict
    other_runs: tuple[tuple[str, dict], ...] = ()

    @cached_property
    def checked_other_runs(self) -> tuple[CheckedRun, ...]:
        """Each other run checked both ways, once for the summary and the section."""
        return tuple(
            CheckedRun(
                name,
                other,
                against_page=reproduction.compare_runs(self.run, other),
                page_against_it=speedups_inside_other_run(self, other),
            )
            for name, other in self.other_runs
        )


@dataclass(frozen=True)
class CheckedRun:
    """Another run of the page's measurements: its figures against the page's
    (``against_page``) and, the other way round, the page's speedups against the
    ranges it reported (``page_against_it``)."""

    name: str
    run: dict
    against_page: list[reproduction.Check]
    page_against_it: list[reproduction.Check]


def _short_path(path: str) -> str:
    return path.split("site-packages/")[-1]


def break_sites(arm: dict) -> list[str]:
    """Where an arm's logged breaks happen, once per source line:
    ``category at file:line (`source`)``."""
    seen: dict[tuple, int] = {}
    described: dict[tuple, str] = {}
    for record in arm.get("logged_breaks") or []:
        key = (record.get("file"), record.get("line"))
        seen[key] = seen.get(key, 0) + 1
        if key not in described:
            source = (record.get("source") or "").strip()
            described[key] = (
                f"{record.get('category', 'other')} at {_short_path(str(key[0]))}:{key[1]}"
                + (f" (`{source}`)" if source else "")
            )
    return [
        described[key] + (f", {count} records" if count > 1 else "") for key, count in seen.items()
    ]


def _speedup_range_text(values: Sequence[float]) -> str:
    if not values:
        return "-"
    return (
        f"{format_speedup(min(values))} to {format_speedup(max(values))} (median over models "
        f"{format_speedup(statistics.median(values))})"
    )


def summary_lines(page_run: PageRun) -> list[str]:
    """The bullet points that sum up one run."""
    run = page_run.run
    summaries = [summarize_model(entry) for entry in run.get("models", [])]
    measured = [s for s in summaries if not s.get("skipped")]
    total = totals(summaries)
    meta = run.get("meta", {})
    lines = [
        f"**{page_run.label}** (graphmend commit {meta.get('git_commit') or '-'}, "
        f"{meta.get('date', '-')}): graphmend removed **{total['breaks_removed']} of "
        f"{total['breaks_total']}** graph breaks in {total['models_counted']} models "
        f"(paper: {PAPER_BREAKS_REMOVED} of {PAPER_BREAKS_TOTAL} over {PAPER_MODELS_TOTAL}) and "
        f"fully fixed **{total['models_fully_fixed']} of {total['models_with_breaks']}** models "
        f"that break (paper: {PAPER_MODELS_FULLY_FIXED} of {PAPER_MODELS_TOTAL})."
    ]
    skipped = [s["name"] for s in summaries if s.get("skipped")]
    if skipped:
        lines.append("Not measured (requirements missing): " + ", ".join(skipped) + ".")
    identical = [s["name"] for s in measured if s.get("bit_identical")]
    different = [s["name"] for s in measured if s.get("bit_identical") is False]
    unknown = [s["name"] for s in measured if s.get("bit_identical") is None]
    text = f"Outputs bit-identical to the original (fp32, eager): {len(identical)} of {len(measured)} models"
    if different:
        text += "; **different: " + ", ".join(different) + "**"
    if unknown:
        text += "; not compared: " + ", ".join(unknown)
    lines.append(text + ".")
    captured_before = [s["name"] for s in measured if s.get("fullgraph_before")]
    captured_after = [s["name"] for s in measured if s.get("fullgraph_after")]
    lines.append(
        f"`fullgraph=True` captures {len(captured_before)} of {len(measured)} models originally, "
        f"{len(captured_after)} with graphmend."
    )
    cold = [s["cold_start_speedup"] for s in measured if s.get("cold_start_speedup")]
    steady = [s["steady_state_speedup"] for s in measured if s.get("steady_state_speedup")]
    if cold or steady:
        lines.append(
            f"Timed models: {len(cold)}. Cold-start speedup {_speedup_range_text(cold)}; "
            f"steady-state speedup {_speedup_range_text(steady)}."
        )
    checks = [check for checked in page_run.checked_other_runs for check in checked.against_page]
    if checks:
        exact_reproduced, exact, timed_reproduced, timed = reproduction.tally(checks)
        text = (
            f"Other runs ({len(page_run.other_runs)}; below): break counts, fullgraph and "
            f"bit-identity equal in {exact_reproduced} of {exact} checks; "
            f"speedups inside this page's ranges in {timed_reproduced} of {timed}"
        )
        reverse = [
            check for checked in page_run.checked_other_runs for check in checked.page_against_it
        ]
        if reverse:
            text += (
                f"; this page's speedups inside the other runs' ranges in "
                f"{sum(check.reproduced for check in reverse)} of {len(reverse)}"
            )
        lines.append(text + ".")
    still_breaking = [
        f"{s['name']} ({format_reasons(s['categories_before'] or {})})"
        for s in measured
        if (s.get("breaks_before") or 0) > 0
    ]
    if still_breaking:
        lines.append(
            "Models that break without graphmend: " + ", ".join(still_breaking) + " (where: below)."
        )
    else:
        lines.append("No model breaks without graphmend.")
    return lines


SITES_HEADER = ["model", "breaks", "reasons", "breaks with graphmend", "logged at (original)"]


def sites_rows(run: dict) -> list[list[str]]:
    """Where each model that breaks without graphmend breaks, from Dynamo's log."""
    rows = []
    for entry in run.get("models", []):
        s = summarize_model(entry)
        if s.get("skipped") or not s.get("breaks_before"):
            continue
        original = (entry.get("quick") or {}).get("original") or {}
        rows.append(
            [
                s["name"],
                str(s["breaks_before"]),
                format_reasons(s["categories_before"] or {}),
                str(s["breaks_after"]) if s.get("breaks_after") is not None else "-",
                "; ".join(break_sites(original)) or "-",
            ]
        )
    return rows


def speedups_inside_other_run(page_run: PageRun, other: dict) -> list[reproduction.Check]:
    """The other way round: this page's speedups against the ranges another run reported
    (what "run the command again" asks of an earlier page)."""
    return [check for check in reproduction.compare_runs(other, page_run.run) if check.is_speedup]


def timing_rounds(run: dict) -> str:
    """How a timed run ordered its processes: runs made before ``timing_order`` was
    recorded alternated the arms in the same order every round."""
    if not any(entry.get("timing_order") for entry in run.get("models", [])):
        return "arms alternated (A B, A B, ...)"
    if (run.get("meta", {}).get("options") or {}).get("interleave"):
        return "rounds counterbalanced (A B, B A, ...) and interleaved across models"
    return "rounds counterbalanced (A B, B A, ...)"


def reproduction_section(page_run: PageRun) -> list[str]:
    """Each other run checked against this page's figures: equal break counts,
    fullgraph and bit-identity; speedups inside this page's ranges."""
    out: list[str] = []
    for checked in page_run.checked_other_runs:
        name, other, checks = checked.name, checked.run, checked.against_page
        if not checks:
            continue
        meta = other.get("meta", {})
        options = meta.get("options") or {}
        kind = "quick mode, no timings" if options.get("quick") else (
            f"{options.get('repeats', '-')} processes per arm, {timing_rounds(other)}"
        )
        out += [
            f"**{name}** ({meta.get('date', '-')}, commit {meta.get('git_commit') or '-'}, "
            f"{kind}; {len(reproduction.models_compared(page_run.run, other))} models): "
            + reproduction.summary_line(checks, "this page's")
            + ".",
            "",
            markdown_table(
                reproduction.per_model_header("this page's", candidate="the other run"),
                reproduction.per_model_rows(checks),
            ),
            "",
        ]
        failed = reproduction.failed_checks(checks)
        if failed:
            out += [
                f"- not reproduced: {c.model} {c.measure}: this page {c.reference}, "
                f"{name} {c.candidate}"
                for c in failed
            ]
            out.append("")
        reverse = checked.page_against_it
        if reverse:
            outside = reproduction.failed_checks(reverse)
            out.append(
                f"The other way round, this page's speedups inside the ranges {name} reported: "
                f"{len(reverse) - len(outside)} of {len(reverse)}" + (":" if outside else ".")
            )
            out.append("")
            if outside:
                out += [
                    f"- outside: {c.model} {c.measure}: {name} {c.reference}, this page {c.candidate}"
                    for c in outside
                ]
                out.append("")
    return out


def render_page(
    runs: Sequence[PageRun],
    intro: str = "",
    notes: str = "",
    method: str = "",
    title: str = "Benchmark results",
    generated_by: str = "",
    training_runs: Sequence[tuple[str, dict]] = (),
) -> str:
    """The page; ``training_runs`` (``(label, run)`` of ``graphmend bench --train-only``
    runs) add a section with each run's training-step table."""
    out = [f"# {title}", ""]
    if generated_by:
        out += [
            f"<!-- Generated by {generated_by}; edit the intro and notes files it reads, "
            "not this page. -->",
            "",
        ]
    if intro.strip():
        out += [intro.strip(), ""]
    out += ["## Summary", ""]
    for page_run in runs:
        lines = summary_lines(page_run)
        out.append(f"- {lines[0]}")
        out += [f"  - {line}" for line in lines[1:]]
    out.append("")
    out += ["## Where the original models break", ""]
    for page_run in runs:
        rows = sites_rows(page_run.run)
        out += [f"### {page_run.label}", ""]
        out += [markdown_table(SITES_HEADER, rows) if rows else "No model breaks.", ""]
    if notes.strip():
        out += [notes.strip(), ""]
    reproduced = [(page_run, reproduction_section(page_run)) for page_run in runs]
    if any(section for _, section in reproduced):
        out += [
            "## Does a second run reproduce these figures?",
            "",
            "Other runs of the same measurements on this machine, checked against the figures "
            "on this page with `graphmend bench --render OTHER.json --compare-to THIS.json`: "
            "break counts, fullgraph capture and bit-identity must be equal; a speedup "
            "reproduces when it lies inside the range this page gives for it. The other way "
            "round, each timed run's ranges are checked against this page's speedups: when the "
            "other run is this command's previous page, that is what running the command "
            "again promises.",
            "",
        ]
        for page_run, section in reproduced:
            if section:
                out += [f"### {page_run.label}", ""] + section
    for label, training_run in training_runs:
        out += training_section(
            training_run, "##", title=f"Training step, {label}", with_setup=True
        )
        out.append("")
    for page_run in runs:
        out.append(render_markdown(page_run.run, title=page_run.label, level=2).rstrip())
        out.append("")
    if method.strip():
        out += [method.strip(), ""]
    return "\n".join(out).rstrip() + "\n"


__all__ = [
    "CheckedRun",
    "PageRun",
    "break_sites",
    "render_page",
    "speedups_inside_other_run",
    "summary_lines",
]
