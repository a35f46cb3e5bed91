"""``graphmend`` itself: picking the command, --version, delegation to run and bench."""

from __future__ import annotations

import subprocess
import sys
import types

import pytest

import graphmend
from graphmend.cli import bench_harness


def test_version(cli):
    result = cli("--version")
    assert (result.code, result.out) == (0, f"graphmend {graphmend.__version__}\n")


def test_help_lists_the_commands(cli):
    result = cli("--help")
    assert result.code == 0
    for command in ("run", "check", "fix", "explain", "bench"):
        assert f"\n  {command} " in result.out


def test_no_command_is_a_usage_error(cli):
    result = cli()
    assert result.code == 2 and "usage: graphmend" in result.err


def test_unknown_command_is_a_usage_error_in_one_line(cli):
    result = cli("mend", "x.py")
    assert result.code == 2
    assert result.err == (
        "graphmend: error: unknown command 'mend'; choose from run, check, fix, explain, rule, bench, census\n"
    )


def test_each_command_has_help(cli):
    for command in ("check", "fix", "explain"):
        result = cli(command, "--help")
        assert result.code == 0 and f"usage: graphmend {command}" in result.out


def test_run_is_delegated_with_the_script_arguments(cli, write):
    write("script.py", "import sys\nsys.exit(3 if sys.argv[1:] == ['--flag', 'x'] else 4)\n")
    assert cli("run", "script.py", "--flag", "x").code == 3


def test_bench_without_the_harness(cli, monkeypatch):
    monkeypatch.setattr(bench_harness, "harness_root", lambda: None)
    result = cli("bench", "--quick")
    assert result.code == 2
    assert result.err == bench_harness.NOT_FOUND + "\n"


def test_bench_is_delegated_to_the_harness(cli, monkeypatch):
    calls = []
    fake = types.ModuleType("benchmarks.cli")
    fake.bench_command = lambda argv: calls.append(argv) or 5
    monkeypatch.setitem(sys.modules, "benchmarks.cli", fake)
    assert cli("bench", "--quick").code == 5
    assert calls == [["--quick"]]


@pytest.mark.slow  # fresh interpreter
def test_python_dash_m_graphmend():
    completed = subprocess.run(
        [sys.executable, "-m", "graphmend", "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (completed.returncode, completed.stdout) == (0, f"graphmend {graphmend.__version__}\n")
