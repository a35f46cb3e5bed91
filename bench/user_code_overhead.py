"""What mending a project's own modules by default costs at import (issue 16).

Reuses ``bench/import_overhead.py``'s synthetic package (model blocks with logging,
branches and raises, plus helper functions) as the project's own code, in a folder
outside site-packages, and times importing it in fresh interpreters that imported
torch and graphmend first (not timed):

* plain: no hook (Python's own .pyc cache warm);
* cold: ``graphmend.install()`` with no arguments (the default reach), empty cache;
* warm: the same, cache filled by an earlier run.

It also times importing an installed library (``sympy`` by default, hundreds of
modules) with and without the hook, to show what the default reach's per-import
decision costs code it does not mend.

    python bench/user_code_overhead.py --repeat 5 --modules 40
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from import_overhead import REPOSITORY_SOURCE, write_synthetic_package

MEASURE = textwrap.dedent(
    """
    import importlib, json, sys, time
    mode, target, cache_dir = sys.argv[1:4]
    import torch
    import graphmend
    import graphmend.runtime
    handle = graphmend.install(cache_dir=cache_dir) if mode != "plain" else None
    start = time.perf_counter()
    importlib.import_module(target)
    seconds = time.perf_counter() - start
    print(json.dumps({"seconds": seconds, "stats": vars(handle.stats) if handle else {}}))
    """
)


def measure(mode: str, target: str, cache_dir: str, project: str) -> dict:
    environment = dict(os.environ)
    environment.pop("PYTHONDONTWRITEBYTECODE", None)
    environment.pop("GRAPHMEND_CACHE_DIR", None)
    environment["PYTHONPATH"] = os.pathsep.join([project, str(REPOSITORY_SOURCE)])
    completed = subprocess.run(
        [sys.executable, "-c", MEASURE, mode, target, cache_dir],
        env=environment, capture_output=True, text=True, check=False, timeout=600,
    )
    if completed.returncode != 0:
        raise RuntimeError(f"{mode} import of {target} failed:\n{completed.stderr[-3000:]}")
    return json.loads(completed.stdout.strip().splitlines()[-1])


def benchmark(target: str, repeat: int, project: str) -> dict:
    with tempfile.TemporaryDirectory(prefix="graphmend-bench-") as scratch:
        measure("plain", target, scratch, project)  # warm Python's own .pyc
        plain = [measure("plain", target, scratch, project) for _ in range(repeat)]
        cold = [measure("hook", target, f"{scratch}/cold{run}", project) for run in range(repeat)]
        measure("hook", target, f"{scratch}/warm", project)  # fill the cache
        warm = [measure("hook", target, f"{scratch}/warm", project) for _ in range(repeat)]
    return {
        "plain_ms": 1000 * statistics.median(r["seconds"] for r in plain),
        "cold_ms": 1000 * statistics.median(r["seconds"] for r in cold),
        "warm_ms": 1000 * statistics.median(r["seconds"] for r in warm),
        "rewritten": cold[0]["stats"].get("transform_calls", 0),
        "warm_hits": warm[0]["stats"].get("cache_hits", 0),
        "warm_rewrites": warm[0]["stats"].get("transform_calls", 0),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--modules", type=int, default=40)
    parser.add_argument("--functions", type=int, default=10)
    parser.add_argument("--library", default="sympy", help="an installed library ('' to skip)")
    arguments = parser.parse_args(argv)
    rows = {}
    with tempfile.TemporaryDirectory(prefix="graphmend-bench-project-") as project:
        package = write_synthetic_package(
            Path(project), "graphmend_bench_own_code", arguments.modules, arguments.functions
        )
        rows[f"own code ({arguments.modules} modules)"] = benchmark(package, arguments.repeat, project)
        if arguments.library:
            rows[f"installed library {arguments.library}"] = benchmark(
                arguments.library, arguments.repeat, project
            )
    for label, row in rows.items():
        print(
            f"{label:<36} plain {row['plain_ms']:8.1f} ms  cold {row['cold_ms']:8.1f} ms  "
            f"warm {row['warm_ms']:8.1f} ms  (rewritten {row['rewritten']}, warm cache hits "
            f"{row['warm_hits']}, warm rewrites {row['warm_rewrites']})"
        )
    print(json.dumps(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
