"""What ``graphmend run`` shows while it rewrites modules: on a terminal only."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import textwrap

import pytest

from graphmend.hook.progress import Progress, describe_cache
from hook.hook_helpers import subprocess_environment


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_counts_per_package_and_ends_its_line_when_the_import_returns():
    terminal = _Terminal()
    progress = Progress("cached in /somewhere", stream=terminal)
    progress.import_started()
    progress.rewrote("transformers")
    progress.import_started()  # transformers imports its submodules
    progress.rewrote("transformers.models.bert")
    progress.rewrote("mine")
    progress.import_ended()
    assert "rewrote" not in terminal.getvalue()  # the outermost import is still running
    progress.import_ended()
    progress.finish()  # nothing left open: nothing more is written
    text = terminal.getvalue()
    assert text.count("cached in /somewhere") == 1
    assert "graphmend: rewriting transformers: 1 module" in text
    assert text.endswith("\r\x1b[Kgraphmend: rewrote 3 modules (transformers 2, mine 1)\n")


def test_a_later_import_gets_a_line_of_its_own_and_the_cache_is_named_once():
    terminal = _Terminal()
    progress = Progress("cached in /somewhere", stream=terminal)
    for name in ("first", "second"):
        progress.import_started()
        progress.rewrote(name)
        progress.import_ended()
    text = terminal.getvalue()
    assert text.count("cached in /somewhere") == 1
    assert "rewrote 1 module (first 1)\n" in text and "rewrote 1 module (second 1)\n" in text
    assert progress.rewritten == {"first": 1, "second": 1}


def test_nothing_is_shown_where_stderr_is_not_a_terminal():
    stream = io.StringIO()
    progress = Progress("cached in /somewhere", stream=stream)
    progress.import_started()
    progress.rewrote("transformers")
    progress.import_ended()
    progress.finish()
    assert stream.getvalue() == ""
    assert progress.rewritten == {"transformers": 1}


def test_the_cache_is_described_as_configured(tmp_path):
    assert describe_cache(False, str(tmp_path)) == "not cached (--no-cache)"
    assert describe_cache(True, str(tmp_path)) == f"cached in {tmp_path}"
    if not sys.pycache_prefix:
        assert describe_cache(True, None) == "cached in each module's __pycache__ folder"


def _run_on_a_terminal(command, environment, cwd) -> tuple[str, str]:
    """Run ``command`` with its stderr a pseudo-terminal; its stdout and stderr."""
    pty = pytest.importorskip("pty")
    primary, secondary = pty.openpty()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=secondary, env=environment, cwd=cwd)
    os.close(secondary)
    chunks = []
    while True:
        try:
            chunk = os.read(primary, 4096)
        except OSError:  # the terminal's other end closed with the process
            break
        if not chunk:
            break
        chunks.append(chunk)
    stdout, _ = process.communicate(timeout=300)
    os.close(primary)
    assert process.returncode == 0, b"".join(chunks).decode(errors="replace")
    return stdout.decode(), b"".join(chunks).decode(errors="replace")


@pytest.mark.skipif(sys.platform in ("win32", "darwin"), reason="a pseudo-terminal and the XDG cache folder")
def test_a_first_run_on_a_terminal_shows_progress_and_a_second_reads_the_cache(make_package, tmp_path):
    modules = {f"m{index}.py": f"def f{index}(x):\n    return x + {index}\n" for index in range(3)}
    modules["__init__.py"] = "from . import m0, m1, m2\n"
    package = make_package(modules)
    script = tmp_path / "main.py"
    script.write_text(textwrap.dedent(f"import {package.name}\nprint({package.name}.m2.f2(40))\n"))
    user_cache = tmp_path / "user-cache"
    environment = subprocess_environment(package.root, PYTHONDONTWRITEBYTECODE="1", XDG_CACHE_HOME=str(user_cache))
    command = [sys.executable, "-m", "graphmend", "run", "--package", package.name, str(script)]

    first_out, first_err = _run_on_a_terminal(command, environment, tmp_path)
    files = sorted(path.name for path in (user_cache / "graphmend").iterdir())
    second_out, second_err = _run_on_a_terminal(command, environment, tmp_path)

    assert first_out == second_out == "42\n"
    assert first_err.count(f"cached in {user_cache / 'graphmend'}") == 1
    assert f"graphmend: rewriting {package.name}: " in first_err
    assert f"graphmend: rewrote 4 modules ({package.name} 4)" in first_err
    assert len(files) == 5  # the script and the package's four modules
    assert "graphmend" not in second_err  # every module came from the cache
    assert sorted(path.name for path in (user_cache / "graphmend").iterdir()) == files
    assert not (package.directory / "__pycache__").exists()
