"""``graphmend bench`` finds the benchmark harness of a checkout; it is not installed."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from graphmend.cli import bench_harness

CHECKOUT = Path(__file__).resolve().parents[2]


def _fake_harness(root: Path, files=bench_harness.HARNESS_FILES) -> Path:
    package = root / "benchmarks"
    package.mkdir(parents=True)
    for name in files:
        (package / name).write_text("")
    return root


def test_the_checkouts_benchmarks_folder_is_the_harness():
    assert bench_harness.is_harness(CHECKOUT / "benchmarks")


def test_another_package_named_benchmarks_is_not_the_harness(tmp_path):
    _fake_harness(tmp_path, files=("__init__.py", "cli.py"))
    assert not bench_harness.is_harness(tmp_path / "benchmarks")


def test_found_in_the_current_directory(tmp_path, monkeypatch):
    _fake_harness(tmp_path)
    monkeypatch.setattr(bench_harness, "_importable_root", lambda: None)
    monkeypatch.setattr(bench_harness.graphmend, "__file__", str(tmp_path / "x/y/z/__init__.py"))
    monkeypatch.chdir(tmp_path)
    assert bench_harness.harness_root() == tmp_path


def test_found_beside_graphmends_own_source(tmp_path, monkeypatch):
    monkeypatch.setattr(bench_harness, "_importable_root", lambda: None)
    monkeypatch.chdir(tmp_path)
    assert bench_harness.harness_root() == CHECKOUT  # graphmend is imported from CHECKOUT/src


def test_not_found_anywhere(tmp_path, monkeypatch):
    monkeypatch.setattr(bench_harness, "_importable_root", lambda: None)
    monkeypatch.setattr(bench_harness.graphmend, "__file__", str(tmp_path / "a/b/c/__init__.py"))
    monkeypatch.chdir(tmp_path)
    assert bench_harness.harness_root() is None


def _graphmend(arguments: list[str], python_path: Path, cwd: Path) -> subprocess.CompletedProcess:
    environment = {**os.environ, "PYTHONPATH": str(python_path)}
    return subprocess.run(
        [sys.executable, "-m", "graphmend", *arguments],
        cwd=cwd,
        env=environment,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.mark.slow
def test_installed_without_a_checkout_says_how_to_get_it_in_one_line(tmp_path):
    # graphmend copied on its own, as a wheel installs it, and run outside any checkout.
    site = tmp_path / "site"
    shutil.copytree(CHECKOUT / "src" / "graphmend", site / "graphmend")
    completed = _graphmend(["bench", "--list"], site, tmp_path)
    assert completed.returncode == 2
    assert completed.stderr == bench_harness.NOT_FOUND + "\n"


@pytest.mark.slow
def test_runs_from_a_checkout_outside_its_folder(tmp_path):
    completed = _graphmend(["bench", "--list"], CHECKOUT / "src", tmp_path)
    assert completed.returncode == 0, completed.stderr
    assert "t5" in completed.stdout
