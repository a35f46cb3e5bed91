"""The static side (``--help``, ``check``, ``fix --diff``, ``rule``) runs without torch.

Each command runs in one fresh interpreter that has not imported torch; afterwards torch
must still be absent from ``sys.modules``. The interpreter imports only graphmend, so it
starts in about the time Python itself does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from graphmend.cli import config
from graphmend.cli import main as cli_main

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "paper_figures.py"

_PROBE = textwrap.dedent(
    """
    import contextlib, io, json, sys, time
    started = time.perf_counter()
    from graphmend.cli.main import main
    with contextlib.redirect_stdout(io.StringIO()):
        main(["--help"])
    help_seconds = time.perf_counter() - started
    results = {"help_seconds": help_seconds, "after_help": sorted(m for m in sys.modules if m.startswith("graphmend"))}
    for argv in json.loads(sys.argv[1]):
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            code = main(argv)
        results[" ".join(argv)] = {"code": code, "torch": "torch" in sys.modules, "out": out.getvalue()}
    import graphmend
    graphmend.mend_source("print(1)\\n")
    results["mend_source"] = {"torch": "torch" in sys.modules}
    print(json.dumps(results))
    """
)


def _probe(commands: list[list[str]]) -> dict:
    environment = dict(os.environ)
    environment["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), environment.get("PYTHONPATH", "")])
    completed = subprocess.run(
        [sys.executable, "-c", _PROBE, json.dumps(commands)],
        capture_output=True, text=True, env=environment, cwd=ROOT, timeout=120,
    )
    assert completed.returncode == 0, completed.stderr
    return json.loads(completed.stdout)


def test_static_commands_leave_torch_unimported():
    commands = [
        ["check", str(EXAMPLE)],
        ["fix", "--diff", str(EXAMPLE)],
        ["rule"],
        *(["rule", code] for code in ("DC", "LC", "VG", "TI", "DS", "DO")),
        # a condition checked in the runtime: its documentation is read from the source
        ["rule", "G303"],
        ["check", "--help"],
        ["fix", "--help"],
        ["run", "--help"],
    ]
    results = _probe(commands)
    for argv in commands:
        result = results[" ".join(argv)]
        assert not result["torch"], f"graphmend {' '.join(argv)} imported torch"
    assert "VG validation guard" in results[f"check {EXAMPLE}"]["out"]
    assert "+++ " in results[f"fix --diff {EXAMPLE}"]["out"]
    assert "untaken arm" in results["rule G303"]["out"]
    assert not results["mend_source"]["torch"]


def test_help_loads_no_rule_and_answers_quickly():
    results = _probe([])
    # Only the package and the command picker: the rules and the rewriter load on use.
    assert results["after_help"] == ["graphmend", "graphmend.cli", "graphmend.cli.main"]
    # Measured inside the interpreter (its own start-up excluded); about 2 ms when idle.
    assert results["help_seconds"] < 0.5


def test_the_command_picker_exits_with_the_same_usage_code_as_the_commands():
    assert cli_main.USAGE_ERROR_EXIT_CODE == config.USAGE_ERROR_EXIT_CODE
