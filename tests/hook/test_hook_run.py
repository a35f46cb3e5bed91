"""``graphmend run``: the script runs as python would run it, mended, with the same
exit status; bad input is one line on stderr and exit code 2."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from graphmend.cli.run import run_command, split_script_arguments
from graphmend.hook import MendingFinder
from hook.hook_helpers import subprocess_environment

REPORTING_SCRIPT = textwrap.dedent(
    """
    import json, sys
    report = {
        "name": __name__,
        "argv": sys.argv,
        "path0": sys.path[0],
        "file": __file__,
        "mended": globals().get("__mended_by_test__", False),
        "main_is_me": sys.modules["__main__"].__dict__ is globals(),
    }
    print(json.dumps(report))
    """
)


@pytest.fixture
def script(tmp_path):
    def write(text: str, name: str = "script.py"):
        path = tmp_path / "scripts" / name
        path.parent.mkdir(exist_ok=True)
        path.write_text(textwrap.dedent(text))
        return path

    return write


def last_json_line(text: str) -> dict:
    return json.loads(text.strip().splitlines()[-1])


def test_script_runs_as_main_with_its_own_argv(script, capsys, fake_rewriter):
    path = script(REPORTING_SCRIPT)
    fake_rewriter.output = "__mended_by_test__ = True\n" + REPORTING_SCRIPT
    saved_argv, saved_path, saved_main = list(sys.argv), list(sys.path), sys.modules["__main__"]

    assert run_command(["--no-cache", str(path), "a", "--flag", "--", "-p"]) == 0

    report = last_json_line(capsys.readouterr().out)
    assert report == {
        "name": "__main__",
        "argv": [str(path), "a", "--flag", "--", "-p"],
        "path0": str(path.parent),
        "file": str(path),
        "mended": True,
        "main_is_me": True,
    }
    # The script is mended like every module of the user's: any function may be compiled.
    assert fake_rewriter.calls[0]["scope"] == "all"
    assert fake_rewriter.calls[0]["module_name"] == "__main__"
    assert fake_rewriter.calls[0]["filename"] == str(path)
    # the interpreter's state is given back
    assert (sys.argv, sys.path, sys.modules["__main__"]) == (saved_argv, saved_path, saved_main)


def test_named_packages_are_mended_on_import(
    script, make_package, capsys, fake_rewriter, monkeypatch
):
    package = make_package({"mod.py": "X = 1\n"})
    path = script(
        f"""
        import {package.name}.mod as mod
        print(mod.__mended_by_test__, type(mod.__spec__.loader).__name__)
        """
    )
    monkeypatch.syspath_prepend(str(path.parent))  # sys.path[0], which the script's folder replaces
    assert run_command(["--package", package.name, "--rules", "trap", "--no-cache", str(path)]) == 0
    assert capsys.readouterr().out.split() == ["True", "MendingLoader"]
    assert {call["rules"] for call in fake_rewriter.calls} == {("trap",)}
    assert {call["scope"] for call in fake_rewriter.calls if call["module_name"] != "__main__"} == {
        "all"
    }
    assert not any(isinstance(finder, MendingFinder) for finder in sys.meta_path)


@pytest.mark.parametrize(
    ("body", "code", "stderr_part"),
    [
        ("pass", 0, ""),
        ("raise SystemExit", 0, ""),
        ("import sys; sys.exit(3)", 3, ""),
        ("import sys; sys.exit('fatal: no data')", 1, "fatal: no data"),
        ("def f():\n    1 / 0\nf()", 1, "ZeroDivisionError: division by zero"),
    ],
    ids=["finishes", "bare-exit", "exit-code", "exit-message", "uncaught-exception"],
)
def test_exit_status_is_the_scripts(script, capsys, body, code, stderr_part):
    path = script(body)
    assert run_command(["--no-cache", str(path)]) == code
    stderr = capsys.readouterr().err
    assert stderr_part in stderr


def test_uncaught_exception_traceback_starts_at_the_script(script, capsys):
    path = script("def f():\n    1 / 0\nf()\n")
    assert run_command(["--no-cache", str(path)]) == 1
    stderr = capsys.readouterr().err
    assert stderr.startswith("Traceback (most recent call last):\n")
    assert f'File "{path}", line 3, in <module>' in stderr
    assert "graphmend" not in stderr.replace(str(path), "")


def test_torchdynamos_user_stacks_begin_at_the_script(script, capsys):
    """The "user code traceback" of TorchDynamo's graph-break logs is the stack above its
    own frames: it begins at the script, as under ``python script.py``, not at graphmend's
    launcher (a finding of PyTorch's test_error_messages under ``graphmend run``)."""
    path = script(
        """
        import torch._dynamo.exc

        def where():
            return [frame.name for frame in torch._dynamo.exc.get_stack_above_dynamo()]

        print(where())
        """
    )
    assert run_command(["--no-cache", str(path)]) == 0
    assert capsys.readouterr().out.strip() == "['<module>', 'where', 'get_stack_above_dynamo']"


def test_script_with_a_syntax_error_shows_pythons_message(script, capsys):
    path = script("def f(:\n    pass\n")
    assert run_command([str(path)]) == 1
    stderr = capsys.readouterr().err
    assert f'File "{path}", line 1' in stderr
    assert "SyntaxError" in stderr and "Traceback" not in stderr


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "required: script"),
        (["/nonexistent/script.py"], "can't open file '/nonexistent/script.py'"),
        (["--rules", "trap,bogus", "x.py"], "unknown rule 'bogus'"),
        (["--package", "torch", "x.py"], "never rewrites 'torch'"),
        (["--package"], "expected one argument"),
        (["--unknown", "x.py"], "unrecognized arguments: --unknown"),
    ],
    ids=[
        "no-script",
        "missing-script",
        "unknown-rule",
        "torch",
        "package-without-name",
        "unknown-option",
    ],
)
def test_bad_input_is_one_line_and_exit_code_2(capsys, argv, message):
    assert run_command(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("graphmend run: error: ") and message in lines[0]


def test_help_exits_zero(capsys):
    assert run_command(["--help"]) == 0
    assert "usage: graphmend run" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "ours", "theirs"),
    [
        (["s.py"], ["s.py"], []),
        (
            ["-p", "x", "--no-cache", "s.py", "-p", "y"],
            ["-p", "x", "--no-cache", "s.py"],
            ["-p", "y"],
        ),
        (["--package=x", "s.py", "--", "z"], ["--package=x", "s.py"], ["--", "z"]),
        (["--", "s.py", "a"], ["--", "s.py"], ["a"]),
    ],
)
def test_everything_after_the_script_belongs_to_the_script(argv, ours, theirs):
    assert split_script_arguments(argv) == (ours, theirs)


@pytest.mark.slow  # fresh interpreter
def test_end_to_end_in_a_fresh_interpreter(script, make_package, tmp_path):
    package = make_package({"mod.py": "X = 41\n"})
    path = script(
        f"""
        import sys
        import {package.name}.mod as mod
        print(__name__, sys.argv[1:], mod.X + 1, type(mod.__spec__.loader).__name__)
        sys.exit(int(sys.argv[1]))
        """
    )
    command = [sys.executable, "-m", "graphmend.cli.run", "-p", package.name, str(path), "5"]
    completed = subprocess.run(
        command,
        check=False,
        env=subprocess_environment(package.root),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert completed.returncode == 5, completed.stderr
    assert completed.stdout.split() == ["__main__", "['5']", "42", "MendingLoader"]
    assert completed.stderr == ""
    assert list((path.parent / "__pycache__").glob("__main__.*.graphmend-*.all.*.pyc"))


@pytest.mark.slow  # fresh interpreter
def test_end_to_end_uncaught_exception(script, tmp_path):
    path = script("raise ValueError('bad value')\n")
    completed = subprocess.run(
        [
            sys.executable,
            "-c",
            (
                "import sys; from graphmend.cli.run import run_command; "
                "raise SystemExit(run_command(sys.argv[1:]))"
            ),
            str(path),
        ],
        check=False,
        env=subprocess_environment(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert completed.returncode == 1
    assert completed.stderr.splitlines() == [
        "Traceback (most recent call last):",
        f'  File "{path}", line 1, in <module>',
        "    raise ValueError('bad value')",
        "ValueError: bad value",
    ]


# What a script can see of itself and its interpreter; python and graphmend run must agree.
SELF_DESCRIBING_SCRIPT = textwrap.dedent(
    """
    import builtins, json, sys

    def describe(value):
        if value is None or isinstance(value, (str, dict)):
            return value
        return {"type": type(value).__name__, "name": getattr(value, "name", None),
                "path": getattr(value, "path", None)}

    # A mended script's globals are python's: mended code finds the runtime in the builtins.
    namespace = {key: describe(value) for key, value in globals().items() if key.startswith("__")}
    namespace["__builtins__"] = globals()["__builtins__"] is builtins
    report = {
        "keys": list(globals()),
        "namespace": namespace,
        "argv": sys.argv,
        "path0": sys.path[0],
        "main_is_me": sys.modules["__main__"].__dict__ is globals(),
    }

    def shows(x):  # something a rule rewrites, so the script is really mended
        print("shows", x)

    shows(1)
    print(json.dumps(report))
    """
)


@pytest.mark.slow  # fresh interpreter
def test_the_scripts_main_is_the_one_python_gives_it(script, tmp_path):
    path = script(SELF_DESCRIBING_SCRIPT)
    reports = []
    for command in (
        [sys.executable, "scripts/script.py", "a", "-x"],
        [sys.executable, "-m", "graphmend.cli.run", "--no-cache", "scripts/script.py", "a", "-x"],
    ):
        completed = subprocess.run(
            command, check=False, env=subprocess_environment(), cwd=tmp_path,
            capture_output=True, text=True, timeout=120,
        )
        assert completed.returncode == 0, completed.stderr
        assert completed.stdout.splitlines()[0] == "shows 1"
        reports.append(last_json_line(completed.stdout))
    python, graphmend_run = reports
    assert graphmend_run == python
    assert python["keys"][:9] == [
        "__name__", "__doc__", "__package__", "__loader__", "__spec__",
        "__annotations__", "__builtins__", "__file__", "__cached__",
    ]
    assert python["argv"] == ["scripts/script.py", "a", "-x"]
    assert python["namespace"]["__file__"] == str(path)


@pytest.mark.parametrize(
    ("argv", "ours", "theirs"),
    [
        (["-m", "pkg.mod", "a", "-m", "x"], ["-m", "pkg.mod"], ["a", "-m", "x"]),
        (["--no-cache", "-mpkg", "--flag"], ["--no-cache", "-mpkg"], ["--flag"]),
        (["-p", "lib", "-m", "app"], ["-p", "lib", "-m", "app"], []),
    ],
)
def test_everything_after_the_module_belongs_to_the_module(argv, ours, theirs):
    assert split_script_arguments(argv) == (ours, theirs)


def test_dash_m_in_process_restores_the_interpreter(tmp_path, monkeypatch, capsys):
    (tmp_path / "gm_run_m_module.py").write_text(
        "import sys\nprint(__name__, __spec__.name, sys.argv[1:], sys.argv[0] == __file__, sys.path[0])\n"
    )
    monkeypatch.chdir(tmp_path)
    saved_argv, saved_path, saved_main = list(sys.argv), list(sys.path), sys.modules["__main__"]
    try:
        assert run_command(["--no-cache", "-m", "gm_run_m_module", "a", "--b"]) == 0
    finally:
        sys.modules.pop("gm_run_m_module", None)
    assert capsys.readouterr().out == f"__main__ gm_run_m_module ['a', '--b'] True {tmp_path}\n"
    assert (sys.argv, sys.path, sys.modules["__main__"]) == (saved_argv, saved_path, saved_main)

