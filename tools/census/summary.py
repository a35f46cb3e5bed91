"""What a census's rows add up to: per model and per break cause, before and after.

The summary JSON (``--summary``) is what the results page reads:

* ``totals``: models run, built, breaks original and mended, whole (fullgraph captures)
  in each arm, models worse mended, models whose outputs or gradients differ;
* ``models``: one row per model and mode: both arms' breaks, graphs, fullgraph, status,
  and the comparison;
* ``causes``: per TorchDynamo graph-break type (with its gb id) and graphmend's category,
  the breaks and models in each arm;
* ``sites``: the same per user-code line (the break's place in transformers or the model).
"""

from __future__ import annotations

import os
from collections import defaultdict

from tools.census.runner import row_key


def _pairs(rows: list[dict]) -> list[tuple[dict, dict]]:
    """(original, graphmend) rows of each task, the last written when a task ran twice."""
    latest = {row_key(row): row for row in rows}
    pairs = []
    for (model, mode, backend, arm), row in latest.items():
        if arm == "original":
            mended = latest.get((model, mode, backend, "graphmend"))
            if mended is not None:
                pairs.append((row, mended))
    return pairs


def _counted(row: dict) -> bool:
    return row.get("status") == "ok" and row.get("breaks") is not None


def differs(mended: dict) -> bool:
    return any(value is False for value in (mended.get("identical") or {}).values())


def worse(original: dict, mended: dict) -> bool:
    """Mended records more breaks or graphs, or gives up on more frames, or stops
    capturing whole, or fails where the original ran."""
    if _counted(original) and not _counted(mended):
        return True
    if not (_counted(original) and _counted(mended)):
        return False
    return bool(
        mended["breaks"] > original["breaks"]
        or mended.get("graphs", 0) > original.get("graphs", 0)
        or mended.get("frames_skipped", 0) > original.get("frames_skipped", 0)
        or (original.get("fullgraph") and not mended.get("fullgraph"))
    )


def _site(record: dict) -> str:
    file = record.get("file") or "?"
    marker = f"{os.sep}transformers{os.sep}"
    short = file.split(marker, 1)[1] if marker in file else os.path.basename(file)
    return f"{short}:{record.get('line')}"


def _cause(record: dict) -> str:
    return record.get("gb_type") or "?"


def summarise(rows: list[dict]) -> dict:
    totals = defaultdict(int)
    models = []
    causes: dict = {}
    sites: dict = {}
    for original, mended in sorted(_pairs(rows), key=lambda pair: row_key(pair[0])):
        totals["tasks"] += 1
        both = _counted(original) and _counted(mended)
        entry = {
            "model": original["model"],
            "mode": original["mode"],
            "backend": original["backend"],
            "status": [original.get("status"), mended.get("status")],
            "reason": original.get("reason") or mended.get("reason"),
            "input_set": original.get("input_set"),
            "breaks": [original.get("breaks"), mended.get("breaks")],
            "graphs": [original.get("graphs"), mended.get("graphs")],
            "fullgraph": [original.get("fullgraph"), mended.get("fullgraph")],
            "identical": mended.get("identical"),
            "differs": differs(mended),
            "worse": worse(original, mended),
            "seconds": [original.get("seconds"), mended.get("seconds")],
        }
        models.append(entry)
        status = original.get("status")
        totals[f"status_{status}"] += 1
        if not both:
            continue
        totals["counted"] += 1
        totals["not_comparable"] += "not_comparable" in (mended.get("identical") or {})
        totals["breaks_original"] += original["breaks"]
        totals["breaks_graphmend"] += mended["breaks"]
        totals["breaking_original"] += original["breaks"] > 0
        totals["breaking_graphmend"] += mended["breaks"] > 0
        totals["whole_original"] += bool(original.get("fullgraph"))
        totals["whole_graphmend"] += bool(mended.get("fullgraph"))
        totals["made_whole"] += bool(mended.get("fullgraph")) and not original.get("fullgraph")
        totals["worse"] += entry["worse"]
        totals["differs"] += entry["differs"]
        for arm, row in (("original", original), ("graphmend", mended)):
            for record in row.get("break_records") or ():
                for table, key, extra in (
                    (causes, _cause(record), {"gb_id": record.get("gb_id")}),
                    (sites, _site(record), {"source": record.get("source"), "gb_type": _cause(record)}),
                ):
                    item = table.setdefault(
                        key, {"breaks_original": 0, "breaks_graphmend": 0,
                              "models_original": set(), "models_graphmend": set(),
                              "categories": set(), **extra},
                    )
                    item[f"breaks_{arm}"] += 1
                    item[f"models_{arm}"].add(row["model"])
                    item["categories"].add(record.get("category") or "other")
    return {
        "totals": dict(totals),
        "models": models,
        "causes": _table(causes, "cause"),
        "sites": _table(sites, "site"),
        "versions": next((row.get("versions") for row in rows if row.get("versions")), None),
    }


def _table(table: dict, name: str) -> list[dict]:
    rows = []
    for key, item in table.items():
        row = {name: key, **item}
        for field in ("models_original", "models_graphmend", "categories"):
            row[field] = sorted(row[field])
        rows.append(row)
    # Ranked by how many models still break there once mended, then by breaks.
    return sorted(rows, key=lambda r: (-len(r["models_graphmend"]), -r["breaks_graphmend"], -r["breaks_original"]))


def text_report(summary: dict, top: int = 10) -> str:
    totals = summary["totals"]
    lines = [
        f"tasks {totals.get('tasks', 0)}, counted in both arms {totals.get('counted', 0)}; "
        + ", ".join(f"{key[7:]} {value}" for key, value in sorted(totals.items()) if key.startswith("status_")),
        f"breaks {totals.get('breaks_original', 0)} -> {totals.get('breaks_graphmend', 0)}; "
        f"models that break {totals.get('breaking_original', 0)} -> {totals.get('breaking_graphmend', 0)}; "
        f"whole {totals.get('whole_original', 0)} -> {totals.get('whole_graphmend', 0)} "
        f"(made whole {totals.get('made_whole', 0)}); worse {totals.get('worse', 0)}; "
        f"output/gradient differences {totals.get('differs', 0)}"
        f" (not comparable: {totals.get('not_comparable', 0)})",
    ]
    for model in summary["models"]:
        if model["differs"] or model["worse"]:
            lines.append(f"  {'DIFFERS' if model['differs'] else 'WORSE'}: {model['model']} {model['mode']} "
                         f"breaks {model['breaks']} graphs {model['graphs']} identical {model['identical']}")
    lines.append("top causes after graphmend (models, breaks original -> graphmend):")
    for cause in summary["causes"][:top]:
        lines.append(f"  {len(cause['models_graphmend']):3d}  {cause['breaks_original']:4d} -> "
                     f"{cause['breaks_graphmend']:4d}  {cause['cause']} ({cause.get('gb_id') or '-'}; "
                     f"{'/'.join(cause['categories'])})")
    return "\n".join(lines)
