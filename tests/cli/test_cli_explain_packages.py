"""``explain`` says when a fixable break is in a package the mended run does not rewrite."""

from __future__ import annotations

import os

from graphmend.cli.config import Settings
from graphmend.cli.explain import GraphBreak, StaticView, explain_breaks, is_mended

LIBRARY = """\
import torch


def rope(x, limit):
    if x.max() > limit:
        y = x * 2
    else:
        y = x + 1
    return y
"""


def _library(tmp_path):
    """An installed package (under a site-packages folder) and a script importing it."""
    installed = tmp_path / "site-packages"
    (installed / "mylib").mkdir(parents=True)
    (installed / "mylib" / "__init__.py").write_text("")
    path = installed / "mylib" / "rope.py"
    path.write_text(LIBRARY)
    script = tmp_path / "script.py"
    script.write_text("import mylib.rope\n")
    return str(path), str(script)


def _own_module(tmp_path):
    """A module of the user's own, beside the script: ``graphmend run`` mends it unasked."""
    path = tmp_path / "mymodel.py"
    path.write_text(LIBRARY)
    script = tmp_path / "train.py"
    script.write_text("import mymodel\n")
    return str(path), str(script)


def test_is_mended_by_dotted_prefix(tmp_path):
    library, script = _library(tmp_path)
    assert is_mended(library, ["mylib"])
    assert is_mended(library, ["mylib.rope"])
    assert not is_mended(library, ["mylibrary", "other"])
    assert is_mended(script, ["script"])


def test_the_users_own_module_is_mended_without_a_package_option(tmp_path):
    own, _ = _own_module(tmp_path)
    assert is_mended(own, [])
    library, _ = _library(tmp_path)
    assert not is_mended(library, [])


def test_a_break_the_mended_run_removed_in_the_users_own_module_is_fixed(tmp_path):
    own, script = _own_module(tmp_path)
    breaks = [GraphBreak(own, 5, "Data-dependent branching")]
    static = StaticView(Settings(), script)
    text = "\n".join(explain_breaks(breaks, [], static, packages=[]))
    assert "    graphmend: fixed by Where" in text
    assert "--package" not in text


def test_a_package_left_out_is_named_not_blamed_on_the_rule(tmp_path):
    library, script = _library(tmp_path)
    breaks = [GraphBreak(library, 5, "Data-dependent branching")]
    static = StaticView(Settings(), script)
    text = "\n".join(explain_breaks(breaks, list(breaks), static, packages=[]))
    assert f"  {os.path.relpath(library)}:5: DC data-dependent control flow\n" in text
    assert (
        "    graphmend: not rewritten: mylib is not a --package of this run "
        "(Where would fix it with --package mylib before the script name)"
    ) in text
    text = "\n".join(explain_breaks(breaks, [], static, packages=["mylib"]))
    assert "    graphmend: fixed by Where" in text


def test_a_package_option_after_the_script_gets_a_note(cli, write, monkeypatch):
    from graphmend.cli import explain

    write("script.py", "print('hi')\n")
    monkeypatch.setattr(explain, "run_both", lambda original, mended: None)
    outcome = cli("explain", "script.py", "--package", "transformers")
    assert (
        "graphmend explain: note: '--package transformers' comes after the script, so it is "
        "the script's argument; put it before the script to rewrite that package in the "
        "mended run"
    ) in outcome.err
    assert outcome.out.splitlines()[-1] == "breaks: 0 -> 0"
