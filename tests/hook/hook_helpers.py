"""Helpers for the import-hook tests: throwaway packages, a fake rewriter, subprocesses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

import graphmend.hook
from graphmend.rewrite.pipeline import MendResult

# Appended by the fake rewriter, so a test can see that mended code really ran.
MENDED_MARKER = "\n__mended_by_test__ = True\n"

# Used by subprocess tests: installs the fake rewriter, imports the named modules
# under the hook, and prints the hook's counters as JSON on the last line.
SUBPROCESS_DRIVER = textwrap.dedent(
    """
    import importlib, json, sys
    import graphmend.hook, graphmend.hook.loader
    from graphmend.rewrite.pipeline import MendResult

    def fake_mend(source, **options):
        return MendResult(source + {marker!r}, True, [])

    graphmend.hook.loader.mend_module_source = fake_mend
    package, *modules = sys.argv[1:]
    with graphmend.hook.install([package]) as handle:
        mended = [getattr(importlib.import_module(name), "__mended_by_test__", False)
                  for name in modules]
    stats = handle.stats
    print(json.dumps({{"transform_calls": stats.transform_calls, "cache_hits": stats.cache_hits,
                      "cache_writes": stats.cache_writes, "fallbacks": stats.fallbacks,
                      "mended": mended}}))
    """
).format(marker=MENDED_MARKER)


@dataclass
class FakeRewriter:
    """Stands in for mend_module_source; records every call."""

    calls: list[dict] = field(default_factory=list)
    error: BaseException | None = None
    output: str | None = None

    def __call__(self, source: str, **options) -> MendResult:
        self.calls.append({"source": source, **options})
        if self.error is not None:
            raise self.error
        text = self.output if self.output is not None else source + MENDED_MARKER
        return MendResult(source=text, changed=True, findings=[])

    @property
    def module_names(self) -> list[str]:
        return [call["module_name"] for call in self.calls]


@dataclass
class GeneratedPackage:
    name: str
    root: Path  # the sys.path entry that holds the package

    @property
    def directory(self) -> Path:
        return self.root / self.name

    def write(self, relative: str, text: str | bytes) -> Path:
        path = self.directory / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(text, bytes):
            path.write_bytes(text)
        else:
            path.write_text(textwrap.dedent(text), encoding="utf-8")
        return path


def subprocess_environment(*extra_paths: Path, **variables: str) -> dict[str, str]:
    environment = dict(os.environ)
    environment.pop("PYTHONDONTWRITEBYTECODE", None)
    environment.pop(graphmend.hook.CACHE_DIR_ENVIRONMENT_VARIABLE, None)
    python_path = [str(path) for path in extra_paths]
    if environment.get("PYTHONPATH"):
        python_path.append(environment["PYTHONPATH"])
    environment["PYTHONPATH"] = os.pathsep.join(python_path)
    environment.update(variables)
    return environment


def run_driver(package: GeneratedPackage, *modules: str, **variables: str) -> dict:
    """Import ``modules`` under the hook in a fresh interpreter; return its counters."""
    completed = subprocess.run(
        [sys.executable, "-c", SUBPROCESS_DRIVER, package.name, *modules],
        check=False,
        env=subprocess_environment(package.root, **variables),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert completed.returncode == 0, completed.stderr
    return json.loads(completed.stdout.strip().splitlines()[-1])
