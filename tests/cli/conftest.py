"""Fixtures for the command-line tests: run ``graphmend`` in-process and capture its output."""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

from graphmend.cli.main import main


@dataclass
class Outcome:
    code: int
    out: str
    err: str


@pytest.fixture
def cli(capsys):
    """``cli(*argv)``: run ``graphmend *argv`` -> Outcome(code, out, err)."""

    def run(*argv: str) -> Outcome:
        code = main([str(word) for word in argv])
        captured = capsys.readouterr()
        return Outcome(code, captured.out, captured.err)

    return run


@pytest.fixture
def write(tmp_path: Path):
    """``write("name.py", source)`` writes dedented text (or bytes as is) under tmp_path."""

    def write_file(name: str, content: str | bytes) -> Path:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(textwrap.dedent(content), encoding="utf-8")
        return path

    return write_file


@pytest.fixture(autouse=True)
def in_tmp_path(tmp_path: Path, monkeypatch):
    """Run in tmp_path so that no pyproject.toml above the test decides the settings."""
    monkeypatch.chdir(tmp_path)


# A compiled function with one break Defer fixes, one Where fixes, one nobody can fix.
COMPILED_MODULE = """\
import torch


@torch.compile
def step(x):
    print("step")
    if x.sum() > 0:
        y = x + 1
    else:
        y = x - 1
    n = y.sum().item()
    return y * n
"""

# The same body, but nothing compiles it: only ``--all`` looks at it.
LIBRARY_MODULE = COMPILED_MODULE.replace("@torch.compile\n", "")


@pytest.fixture
def compiled_module() -> str:
    return COMPILED_MODULE


@pytest.fixture
def library_module() -> str:
    return LIBRARY_MODULE
