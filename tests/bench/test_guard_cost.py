"""bench/guard_cost.py: each output case is mended into one graph, and its guard check is
measured against the break-free function's."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).parents[2] / "bench" / "guard_cost.py"


@pytest.mark.slow
def test_guard_cost_measures_every_output_case_in_one_graph() -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--rounds", "2", "--checks", "200"],
        capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [line.split("|")[1:-1] for line in done.stdout.splitlines() if line.startswith("| ") and "---" not in line]
    table = {cells[0].strip(): [cell.strip() for cell in cells[1:]] for cells in rows[1:]}
    assert set(table) == {"break-free (no output)", "print", "print(file=sys.stderr)", "logger.info", "warnings.warn"}
    for label, (nanoseconds, guards, graphs) in table.items():
        assert float(nanoseconds) > 0 and int(guards) > 0, label
        assert graphs == "1", label
