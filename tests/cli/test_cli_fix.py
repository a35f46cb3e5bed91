"""``graphmend fix``: only rewritten statements change; diff, write, atomicity, exit codes."""

from __future__ import annotations

import ast
import os
import stat

import pytest
import torch

import graphmend.cli.check
import graphmend.cli.fix
from graphmend.rewrite.pipeline import Edit
from helpers import load_module

# Comments, odd spacing and blank lines everywhere: all of it must survive.
FORMATTED = '''\
"""A model file with comments and odd formatting."""
from __future__ import annotations

import torch   # torch itself

# a comment above the function


@torch.compile
def step(x):
    # comment before the print
    print("step", x.shape)
    y  =  x * 2     # spacing kept
    if x.sum() > 0:
        y = y + 1
    return y


def untouched( a,b ):  # not compiled
    print(a)
    return a+b
'''

EXPECTED = '''\
"""A model file with comments and odd formatting."""
from __future__ import annotations
import graphmend.runtime as __graphmend__

import torch   # torch itself

# a comment above the function


@torch.compile
def step(x):
    # comment before the print
    __graphmend__.print("step", x.shape)
    y  =  x * 2     # spacing kept
    # graphmend: Where removes a graph break (DC); eager path unchanged
    if __graphmend__.is_compiling() and __graphmend__.operands_combine((y, 'number')):
        _gm_taken_1 = __graphmend__.guard_holds(x.sum() > 0, True)
        y__gm_true_1 = y + 1
        y = __graphmend__.select(_gm_taken_1, y__gm_true_1, y)
    elif x.sum() > 0:
        y = y + 1
    return y


def untouched( a,b ):  # not compiled
    print(a)
    return a+b
'''


def test_write_changes_only_the_rewritten_statements(cli, write):
    path = write("model.py", FORMATTED)
    result = cli("fix", "--write", "model.py")
    assert result.code == 0
    assert path.read_text(encoding="utf-8") == EXPECTED
    assert result.err.splitlines() == [
        "fixed model.py (2 graph-break candidates)",
        "1 file rewritten, 0 left unchanged.",
    ]


def test_diff_is_the_default_and_writes_nothing(cli, write):
    path = write("model.py", FORMATTED)
    result = cli("fix", "model.py")
    assert result.code == 1
    assert path.read_text(encoding="utf-8") == FORMATTED
    assert result.out.startswith("--- a/model.py\n+++ b/model.py\n@@ ")
    assert "+import graphmend.runtime as __graphmend__\n" in result.out
    assert '-    print("step", x.shape)\n' in result.out
    assert " def untouched( a,b ):  # not compiled\n" not in result.out  # too far from any change
    assert result.err == "1 file would be rewritten, 0 left unchanged.\n"
    assert cli("fix", "--diff", "model.py").out == result.out


def test_nothing_to_change_exits_0_and_leaves_the_file_alone(cli, write):
    path = write("clean.py", "import torch\n\n@torch.compile\ndef f(x):\n    return x + 1\n")
    before = os.stat(path)
    for mode in ("--diff", "--write"):
        result = cli("fix", mode, "clean.py")
        assert (result.code, result.out) == (0, "")
    after = os.stat(path)
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)


def test_fixing_twice_changes_nothing_the_second_time(cli, write):
    path = write("model.py", FORMATTED)
    assert cli("fix", "--write", "model.py").code == 0
    assert cli("fix", "--diff", "model.py").code == 0
    assert path.read_text(encoding="utf-8") == EXPECTED


def test_crlf_line_endings_are_kept(cli, write):
    path = write("model.py", FORMATTED.replace("\n", "\r\n").encode())
    assert cli("fix", "--write", "model.py").code == 0
    data = path.read_bytes()
    assert data == EXPECTED.replace("\n", "\r\n").encode()
    assert b"\n" not in data.replace(b"\r\n", b"")


def test_encoding_cookie_shebang_and_latin1_bytes_are_kept(cli, write):
    source = (
        "#!/usr/bin/env python\n"
        "# -*- coding: latin-1 -*-\n"
        "import torch\n"
        "@torch.compile\n"
        "def f(x):\n"
        "    print('caf\xe9')\n"
        "    return x\n"
    )
    path = write("script.py", source.encode("latin-1"))
    assert cli("fix", "--write", "script.py").code == 0
    lines = path.read_bytes().decode("latin-1").splitlines()
    assert lines[:4] == [
        "#!/usr/bin/env python",
        "# -*- coding: latin-1 -*-",
        "import graphmend.runtime as __graphmend__",
        "import torch",
    ]
    assert "    __graphmend__.print('caf\xe9')" in lines


def test_a_utf8_bom_is_kept(cli, write):
    path = write(
        "bom.py", "\ufeffimport torch\n@torch.compile\ndef f(x):\n    print(1)\n    return x\n"
    )
    assert cli("fix", "--write", "bom.py").code == 0
    data = path.read_bytes()
    assert data.startswith(b"\xef\xbb\xbfimport graphmend.runtime as __graphmend__\nimport torch\n")


def test_no_newline_at_end_of_file(cli, write):
    path = write("model.py", "import torch\n@torch.compile\ndef f(x):\n    print(1)")
    result = cli("fix", "model.py")
    assert "\\ No newline at end of file\n" in result.out
    assert cli("fix", "--write", "model.py").code == 0
    ast.parse(path.read_text())  # still one statement per line


def test_nothing_is_appended_after_the_last_function(cli, write, library_module):
    source = library_module + "\n\ndef helper(x):\n    return x * 2\n"
    path = write("library.py", source)
    assert cli("fix", "--write", "--all", "library.py").code == 0
    text = path.read_text()
    assert text.startswith("import graphmend.runtime as __graphmend__\nimport torch\n")
    assert text.endswith("def helper(x):\n    return x * 2\n")


def test_the_rewritten_file_runs_like_the_original_eagerly(cli, write, library_module, capsys):
    import torch

    path = write("library.py", library_module)
    original = load_module(library_module, "original", str(path))
    assert cli("fix", "--write", "--all", "library.py").code == 0
    fixed = load_module(path.read_text(), "fixed", str(path))
    for value in (torch.ones(3), -torch.ones(3)):
        expected = original.step(value)
        expected_output = capsys.readouterr().out
        assert torch.equal(fixed.step(value), expected)
        assert capsys.readouterr().out == expected_output == "step\n"


def test_mode_is_kept_and_a_symlink_stays_a_symlink(cli, write, tmp_path):
    path = write("real/model.py", FORMATTED)
    os.chmod(path, 0o754)
    link = tmp_path / "link.py"
    link.symlink_to(path)
    assert cli("fix", "--write", "link.py").code == 0
    assert link.is_symlink()
    assert path.read_text(encoding="utf-8") == EXPECTED
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o754


def _planting_edit(monkeypatch, text: str) -> None:
    """Make the pipeline plan ``text`` for the print statement of FORMATTED."""
    real_mend = graphmend.cli.check.mend_module_source

    def planted(source, **options):
        result = real_mend(source, **options)
        result.edits[0] = Edit(result.edits[0].first_line, result.edits[0].last_line, text)
        return result

    monkeypatch.setattr(graphmend.cli.check, "mend_module_source", planted)


@pytest.mark.parametrize(
    "planted_text, message",
    [
        ("if (:\n    pass", "the rewritten text would not parse"),
        ("print('something else')", "the rewritten text would differ from what the rules planned"),
    ],
)
def test_a_result_that_is_not_the_plan_is_never_written(
    cli, write, monkeypatch, planted_text, message
):
    path = write("model.py", FORMATTED)
    other = write("other.py", FORMATTED)
    _planting_edit(monkeypatch, planted_text)
    result = cli("fix", "--write", "model.py")
    assert result.code == 1
    assert path.read_text(encoding="utf-8") == FORMATTED
    assert result.err.startswith(f"model.py: not fixed: {message}")
    assert sorted(os.listdir(path.parent)) == ["model.py", "other.py"]
    assert other.read_text(encoding="utf-8") == FORMATTED


def test_an_output_call_sharing_its_line_changes_in_place(cli, write):
    # Only the callee's columns change (counted as ast counts them, in UTF-8 bytes, so a
    # non-ASCII character before the call on the line is no trouble).
    source = "import torch\n\n@torch.compile\ndef f(x):\n    y = '\xe9'; print('hi', y)\n    return x\n"
    path = write("semicolon.py", source)
    result = cli("fix", "--write", "semicolon.py")
    assert result.code == 0
    assert path.read_text(encoding="utf-8").splitlines()[5] == "    y = '\xe9'; __graphmend__.print('hi', y)"


def test_a_text_that_would_not_be_the_plan_is_refused_not_written(cli, write, monkeypatch):
    # The written text is parsed again and compared with what the rules planned.
    import graphmend.cli.fix as fix

    monkeypatch.setattr(fix, "_splice", lambda line, edit: line)
    source = "import torch\n\n@torch.compile\ndef f(x):\n    y = 1; print('hi')\n    return x + y\n"
    path = write("semicolon.py", source)
    result = cli("fix", "--write", "semicolon.py")
    assert result.code == 1
    assert "semicolon.py: not fixed: " in result.err
    assert path.read_text() == source


def test_a_failed_write_leaves_the_file_and_no_temporary_behind(cli, write, monkeypatch):
    path = write("model.py", FORMATTED)

    def refuse(source, destination):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(graphmend.cli.fix.os, "replace", refuse)
    result = cli("fix", "--write", "model.py")
    assert result.code == 1
    assert result.err.splitlines()[0] == "model.py: cannot write: Permission denied"
    assert path.read_text(encoding="utf-8") == FORMATTED
    assert os.listdir(path.parent) == ["model.py"]


def test_bad_files_are_reported_and_the_batch_goes_on(cli, write):
    write("a_bad.py", "def f(:\n")
    write("b_binary.py", b"\xff\xfe\x00garbage")
    path = write("c_model.py", FORMATTED)
    result = cli("fix", "--write", ".", "missing.py")
    assert result.code == 2  # a missing path is a usage error
    assert result.err.splitlines() == [
        "a_bad.py: cannot parse: invalid syntax (line 1)",
        "b_binary.py: cannot decode: not valid UTF-8 (byte 0xff on line 1)",
        "fixed c_model.py (2 graph-break candidates)",
        "missing.py: no such file or directory",
        "1 file rewritten, 0 left unchanged, 2 could not be fixed.",
    ]
    assert path.read_text(encoding="utf-8") == EXPECTED


def test_diff_and_write_together_is_a_usage_error(cli, write):
    write("model.py", FORMATTED)
    result = cli("fix", "--diff", "--write", "model.py")
    assert result.code == 2
    assert "not allowed with argument" in result.err


INNER_COMMENTS = '''\
import torch


@torch.compile
def step(x):
    y = x * 1
    if x.sum() > 0:  # only for positive inputs
        # shift up
        y = y + 1  # by one
    return y
'''


def test_comments_inside_a_rewritten_statement_move_above_it(cli, write):
    path = write("model.py", INNER_COMMENTS)
    assert cli("fix", "--write", "model.py").code == 0
    text = path.read_text(encoding="utf-8")
    for comment in ("# only for positive inputs", "# shift up", "# by one"):
        assert text.count(comment) == 1
    lines = text.splitlines()
    why = next(i for i, line in enumerate(lines) if line.startswith("    # graphmend: Where"))
    assert lines[why + 1 : why + 4] == [
        "    # only for positive inputs",
        "    # shift up",
        "    # by one",
    ]
    # The guard may add checks made while tracing (``and __graphmend__.operands_combine(...)``).
    assert lines[why + 4].startswith("    if __graphmend__.is_compiling()")
    module = load_module(text)
    ones = torch.ones(2)
    assert torch.equal(module.step(ones), ones + 1)


FIXED_TENSOR_PADDER = """\
import torch


class Padder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("padding", torch.tensor(3), persistent=False)

    def forward(self, x):
        if self.padding > 0:  # pad only when there is padding
            x = torch.nn.functional.pad(x, (0,
                                             int(self.padding)))
        return x * 2


padder = torch.compile(Padder(), backend="eager")
"""


def test_a_test_and_a_padding_read_from_fixed_tensors_are_listed_and_written(cli, write):
    """Where's fixed-values pass wrote its rewrite into the tree alone: ``check`` listed
    nothing and ``fix`` refused the file (the text would differ from the plan). Each is
    now a finding, and ``fix`` writes two insertions around the original text: the
    padding spread over two lines keeps its lines and the comment stays."""
    path = write("padder.py", FIXED_TENSOR_PADDER)
    listed = cli("check", "padder.py")
    assert [line.split(" ", 2)[:2] for line in listed.out.splitlines()[:2]] == [["padder.py:10:12:", "DC"], ["padder.py:11:44:", "DO"]]
    assert cli("fix", "--write", "padder.py").code == 0
    written = path.read_text(encoding="utf-8")
    assert "  # pad only when there is padding\n" in written
    assert "                                             int(self.padding)))" in written
    original = load_module(FIXED_TENSOR_PADDER, "original", str(path))
    fixed = load_module(written, "fixed", str(path))
    x = torch.arange(4.0)
    assert torch.equal(fixed.padder(x), original.Padder()(x))
    assert cli("fix", "--diff", "padder.py").code == 0
