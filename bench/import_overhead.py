"""How much the import hook adds to importing a targeted module.

Each measurement is a fresh interpreter that imports torch and graphmend first (not
timed: rewritten code needs graphmend.runtime, which needs torch, and we want the
hook's cost, not torch's), then times one import of the target:

* plain: no hook (Python's own .pyc cache warm);
* cold: hook installed, empty graphmend cache: every module is rewritten;
* warm: hook installed, cache filled by an earlier run.

    python bench/import_overhead.py                  # synthetic package, and T5 if found
    python bench/import_overhead.py --repeat 1 --modules 20
    python bench/import_overhead.py --transformers-python .scratch/venv-tf452/bin/python

Times are medians over --repeat runs, in milliseconds.
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

REPOSITORY_SOURCE = Path(__file__).resolve().parent.parent / "src"
DEFAULT_TRANSFORMERS_PYTHON = (
    Path(__file__).resolve().parent.parent / ".scratch" / "venv-tf452" / "bin" / "python"
)

MEASURE = textwrap.dedent(
    """
    import importlib, json, sys, time
    mode, package, target, cache_dir = sys.argv[1:5]
    import torch
    import graphmend.hook
    try:
        import graphmend.runtime
    except Exception:
        pass
    handle = None
    if mode != "plain":
        handle = graphmend.hook.install([package], cache_dir=cache_dir)
    start = time.perf_counter()
    importlib.import_module(target)
    seconds = time.perf_counter() - start
    stats = vars(handle.stats) if handle else {}
    print(json.dumps({"seconds": seconds, "stats": stats}))
    """
)

SYNTHETIC_MODULE = textwrap.dedent(
    '''
    """Synthetic model code, module {index}."""
    import logging
    import torch

    logger = logging.getLogger(__name__)


    class Block{index}(torch.nn.Module):
        def __init__(self, width):
            super().__init__()
            self.linear = torch.nn.Linear(width, width)

        def forward(self, hidden):
            hidden = self.linear(hidden)
            if hidden.sum() > 0:
                logger.info("positive activations in block {index}")
                hidden = hidden * 0.5
            if not torch.isfinite(hidden).all():
                raise ValueError("non-finite activations")
            return torch.relu(hidden)
    '''
)


def write_synthetic_package(root: Path, name: str, modules: int, functions: int) -> str:
    package = root / name
    package.mkdir(parents=True)
    imports = "\n".join(f"from {name} import block_{index}" for index in range(modules))
    (package / "__init__.py").write_text(imports + "\n")
    for index in range(modules):
        text = SYNTHETIC_MODULE.format(index=index)
        for function in range(functions):
            text += (
                f"\n\ndef helper_{function}(x, scale={function}):\n"
                f"    y = x * scale\n"
                f"    if y.mean() > {function}:\n"
                f"        print('large', {function})\n"
                f"    return y + {function}\n"
            )
        (package / f"block_{index}.py").write_text(text)
    return name


def measure(python: str, mode: str, package: str, target: str, cache_dir: str, paths) -> dict:
    environment = dict(os.environ)
    environment.pop("PYTHONDONTWRITEBYTECODE", None)  # the cache must be allowed to write
    environment.pop("GRAPHMEND_CACHE_DIR", None)
    environment["PYTHONPATH"] = os.pathsep.join([*map(str, paths), str(REPOSITORY_SOURCE)])
    completed = subprocess.run(
        [python, "-c", MEASURE, mode, package, target, cache_dir],
        env=environment,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    if completed.returncode != 0:
        raise RuntimeError(f"{mode} import of {target} failed:\n{completed.stderr[-3000:]}")
    return json.loads(completed.stdout.strip().splitlines()[-1])


def benchmark(python: str, package: str, target: str, repeat: int, paths) -> dict:
    with tempfile.TemporaryDirectory(prefix="graphmend-bench-") as scratch:
        measure(python, "plain", package, target, scratch, paths)  # warm Python's own .pyc
        plain = [measure(python, "plain", package, target, scratch, paths) for _ in range(repeat)]
        cold = []
        for run in range(repeat):
            cold.append(measure(python, "hook", package, target, f"{scratch}/cold{run}", paths))
        warm_dir = f"{scratch}/warm"
        measure(python, "hook", package, target, warm_dir, paths)  # fill the cache
        warm = [measure(python, "hook", package, target, warm_dir, paths) for _ in range(repeat)]
    return {
        "plain": statistics.median(result["seconds"] for result in plain),
        "cold": statistics.median(result["seconds"] for result in cold),
        "warm": statistics.median(result["seconds"] for result in warm),
        "rewritten": cold[0]["stats"].get("transform_calls", 0),
        "warm_hits": warm[0]["stats"].get("cache_hits", 0),
        "warm_rewrites": warm[0]["stats"].get("transform_calls", 0),
    }


def print_table(rows: list[tuple[str, dict]]) -> None:
    header = (
        f"{'target':<40} {'modules':>7} {'plain ms':>9} {'cold ms':>9} {'warm ms':>9}"
        f" {'cold/plain':>10} {'warm/plain':>10}"
    )
    print(header)
    print("-" * len(header))
    for label, result in rows:
        plain, cold, warm = (result[mode] * 1000 for mode in ("plain", "cold", "warm"))
        print(
            f"{label:<40} {result['rewritten']:>7} {plain:>9.1f} {cold:>9.1f} {warm:>9.1f}"
            f" {cold / plain:>10.2f} {warm / plain:>10.2f}"
        )
        if result["warm_rewrites"]:
            print(
                f"  note: the warm run still rewrote {result['warm_rewrites']} modules: were "
                "graphmend's analysis/rules/rewrite/runtime files edited during the run? "
                "(they are part of the cache key)"
            )


def transformers_available(python: str) -> bool:
    if not Path(python).exists():
        return False
    probe = subprocess.run(
        [python, "-c", "import transformers, torch"],
        capture_output=True,
        check=False,
        timeout=300,
    )
    return probe.returncode == 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs per mode (median)")
    parser.add_argument("--modules", type=int, default=40, help="synthetic package size")
    parser.add_argument("--functions", type=int, default=10, help="helpers per module")
    parser.add_argument(
        "--transformers-python",
        default=None,
        help="interpreter with transformers installed (default: this one, else "
        ".scratch/venv-tf452); graphmend is put on its PYTHONPATH from src/",
    )
    parser.add_argument("--skip-transformers", action="store_true")
    arguments = parser.parse_args(argv)

    rows = []
    with tempfile.TemporaryDirectory(prefix="graphmend-bench-site-") as site:
        package = write_synthetic_package(
            Path(site), "graphmend_bench_synthetic", arguments.modules, arguments.functions
        )
        result = benchmark(sys.executable, package, package, arguments.repeat, [site])
        rows.append((f"synthetic ({arguments.modules} modules)", result))

    if not arguments.skip_transformers:
        candidates = (
            [arguments.transformers_python]
            if arguments.transformers_python
            else [sys.executable, str(DEFAULT_TRANSFORMERS_PYTHON)]
        )
        python = next((c for c in candidates if transformers_available(c)), None)
        if python is None:
            print("transformers not importable; skipping modeling_t5", file=sys.stderr)
        else:
            target = "transformers.models.t5.modeling_t5"
            result = benchmark(python, "transformers", target, arguments.repeat, [])
            rows.append((target, result))

    print_table(rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
