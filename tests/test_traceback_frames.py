"""The traceback of an exception out of a compiled call is the program's own.

A lowered guard raises the user's exception from inside a graph, where the helpers it
stood in were inlined: their frames do not exist. The user still sees every frame of
the original, with its file, line, function and source line; no frame of graphmend's
runtime or of its compiled-call boundary appears, for any exception.

The original compiled program's frames are partly TorchDynamo's: a frame that broke at
a guard's ``if`` is resumed in ``torch_dynamo_resume_in_<function>_at_<line>``. Its
user frames are read with the resumed frame folded into the frame it resumes (the
function's line is then the resumed one), which is what the program runs eagerly."""

from __future__ import annotations

import os
import re
import sys
import textwrap
import traceback
from pathlib import Path

import pytest
import torch

import graphmend
from graphmend.runtime import compiled_calls
from helpers import load_module

TORCH_DIRECTORY = os.path.dirname(torch.__file__) + os.sep
GRAPHMEND_DIRECTORY = os.path.dirname(os.path.abspath(graphmend.__file__)) + os.sep
_RESUME_NAME = re.compile(r"^torch_dynamo_resume_in_(\w+?)_at_\d+$")

NESTED_GUARD = """
import torch


def check(x, n):
    if x.sum() > n:
        raise ValueError(f"too large: {n}")
    return x


def middle(x, n):
    y = check(x, n)
    return y + 1


def outer(x, n):
    z = middle(x * 2, n)
    return z * 3


def main(x, n):
    w = outer(x, n)
    return w - 1
"""

GUARD_IN_THE_FUNCTION = """
import torch


def main(x, n):
    y = x * 2
    if y.sum() > n:
        raise IndexError("too large")
    return y + 1
"""

GUARD_IN_A_MODULES_METHOD = """
import torch


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(3, 3).requires_grad_(False)

    def validate(self, x, n):
        if x.abs().sum() > n:
            raise ValueError("activations too large")

    def forward(self, x, n):
        h = self.linear(x)
        self.validate(h, n)
        return h.relu()


torch.manual_seed(0)
model = Block()


def main(x, n):
    return model(x, n)
"""

GUARD_AFTER_A_BREAK = """
import torch


def check(x, n):
    if x.sum() > n:
        raise ValueError("too large")


def main(x, n):
    y = x + 1
    torch._dynamo.graph_break()
    check(y, n)
    return y * 2
"""

GUARD_IN_A_COMPILED_CALLEE = """
import torch


def check(x, n):
    if x.sum() > n:
        raise ValueError("too large")
    return x


@torch.compile(backend="eager")
def inner(x, n):
    return check(x * 2, n) + 1


def main(x, n):
    return inner(x, n) - 1
"""

PASSING, FAILING = (torch.ones(3), 100.0), (torch.ones(3), 0.0)


def _original_and_mended(tmp_path, source: str):
    """Both versions of a program from one real file, so that a traceback reads the
    source lines back (``linecache``) as a user's does."""
    path = tmp_path / "program.py"
    source = textwrap.dedent(source)
    path.write_text(source)
    result = graphmend.mend_module_source(source, filename=str(path), scope="all")
    assert result.changed
    return load_module(source, "original", str(path)), load_module(result.tree, "mended", str(path))


def _raised(function, *arguments, backend=None, compile_=None):
    target = function
    if backend is not None:
        torch._dynamo.reset()
        target = (compile_ or torch.compile)(function, backend=backend)
    try:
        target(*arguments)
    except Exception as error:  # noqa: BLE001 - the exception is the observation
        return error
    raise AssertionError("no exception")


def user_frames(error: BaseException) -> list[tuple]:
    """(file, function, line, source line) of each frame that is not torch's, innermost
    last, with TorchDynamo's resumed frames folded into the frames they resume; a frame
    of graphmend's own is kept as ``("graphmend", function)``, so that it fails a
    comparison."""
    frames: list[tuple] = []
    for frame in traceback.extract_tb(error.__traceback__):
        path = os.path.abspath(frame.filename)
        if path.startswith(GRAPHMEND_DIRECTORY):
            frames.append(("graphmend", frame.name))
            continue
        if path.startswith(TORCH_DIRECTORY):
            continue
        name = frame.name
        resumed = _RESUME_NAME.match(name)
        if resumed is not None and frames and frames[-1][:2] == (frame.filename, resumed.group(1)):
            name = frames.pop()[1]
        frames.append((frame.filename, name, frame.lineno, frame.line))
    return frames


def _breaks(function, *arguments) -> int:
    from helpers import breaks

    return breaks(function, *arguments)


@pytest.mark.parametrize("source", [NESTED_GUARD, GUARD_IN_THE_FUNCTION, GUARD_IN_A_MODULES_METHOD],
                         ids=["nested_helpers", "in_the_function", "module_method"])
def test_a_lowered_guard_run_eagerly_keeps_the_original_frames(tmp_path, source):
    original, mended = _original_and_mended(tmp_path, source)
    assert user_frames(_raised(mended.main, *FAILING)) == user_frames(_raised(original.main, *FAILING))


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
@pytest.mark.parametrize("source", [NESTED_GUARD, GUARD_IN_THE_FUNCTION, GUARD_IN_A_MODULES_METHOD,
                                    GUARD_AFTER_A_BREAK, GUARD_IN_A_COMPILED_CALLEE],
                         ids=["nested_helpers", "in_the_function", "module_method", "after_a_break",
                              "compiled_callee"])
def test_a_lowered_guard_keeps_every_user_frame_compiled(tmp_path, source, backend):
    """The helpers the graph inlined were lost, the compiled function's frame named its
    ``def`` line, and the raise came after three frames of graphmend's runtime."""
    original, mended = _original_and_mended(tmp_path, source)
    assert _breaks(mended.main, *PASSING) < _breaks(original.main, *PASSING)  # the guard is lowered
    eager = user_frames(_raised(original.main, *FAILING))
    compiled = user_frames(_raised(original.main, *FAILING, backend=backend))
    assert compiled == eager
    assert user_frames(_raised(mended.main, *FAILING, backend=backend)) == compiled


def _without_torch_frames(error: BaseException) -> str:
    """The printed traceback, each of torch's frames (two lines with its source) left out."""
    lines = "".join(traceback.format_exception(error)).splitlines()
    kept, skipping = [], False
    for line in lines:
        if line.startswith('  File "'):
            skipping = line[len('  File "'):].startswith(TORCH_DIRECTORY)
        elif not line.startswith("    "):
            skipping = False
        if not skipping:
            kept.append(line)
    return "\n".join(kept)


@pytest.mark.parametrize("source", [NESTED_GUARD, GUARD_IN_THE_FUNCTION], ids=["nested_helpers", "in_the_function"])
def test_a_lowered_guards_printed_traceback_is_the_eager_one(tmp_path, source):
    """Printed, with source lines and the carets under each call, the traceback reads
    as the original's run eagerly (torch's frames aside)."""
    original, mended = _original_and_mended(tmp_path, source)
    expected = _without_torch_frames(_raised(original.main, *FAILING))
    assert _without_torch_frames(_raised(mended.main, *FAILING, backend="eager")) == expected


def test_pytest_shows_each_frame_of_a_lowered_guard_with_its_function(tmp_path):
    """pytest prints each frame with its function's source up to the failing line: a
    frame made for an inlined helper starts at the helper's ``def``, not at line 1."""
    from _pytest._code import ExceptionInfo

    original, mended = _original_and_mended(tmp_path, NESTED_GUARD)

    def entries(error):
        info = ExceptionInfo.from_exception(error)
        return [(entry.name, entry.lineno, str(entry.getsource()).strip())
                for entry in info.traceback if str(entry.path) == str(tmp_path / "program.py")]

    expected = entries(_raised(original.main, *FAILING))
    assert [name for name, _, _ in expected] == ["main", "outer", "middle", "check"]
    assert entries(_raised(mended.main, *FAILING, backend="eager")) == expected


def test_a_user_catching_and_reraising_a_lowered_guards_exception_sees_its_frames(tmp_path):
    original, mended = _original_and_mended(tmp_path, NESTED_GUARD)

    def catch_and_reraise(function):
        def run(*arguments):
            try:
                return function(*arguments)
            except ValueError as error:
                assert sys.exc_info()[1] is error and sys.exc_info()[2] is error.__traceback__
                raise

        return run

    results = []
    for module in (original, mended):
        torch._dynamo.reset()
        compiled = torch.compile(module.main, backend="eager")
        results.append(user_frames(_raised(catch_and_reraise(compiled), *FAILING)))
    assert results[1] == results[0]


# --------------------------------------------------------------------------------------
# No rewrite at all: the frames are exactly those without graphmend.

UNREWRITTEN = """
import torch


def lookup(table, key):
    return table[key]


def main(x, key):
    y = x.sin()
    return lookup({"a": y}, key)


def chained(x, key):
    y = x.cos()
    try:
        return {"a": y}[key]
    except KeyError as missing:
        raise LookupError(f"no entry {key!r}") from missing
"""


def _all_frames(error: BaseException) -> list[tuple]:
    return [(frame.filename, frame.name, frame.lineno, frame.line)
            for frame in traceback.extract_tb(error.__traceback__)]


def _unrewritten(tmp_path):
    path = tmp_path / "plain.py"
    path.write_text(textwrap.dedent(UNREWRITTEN))
    return load_module(path.read_text(), "plain", str(path))


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_an_exception_out_of_a_compiled_function_has_exactly_torchs_frames(tmp_path, backend):
    """Every exception out of a compiled call had two more frames, graphmend's
    ``call_compiled`` and ``run_compiled``."""
    module = _unrewritten(tmp_path)
    arguments = (torch.ones(2), "b")
    without = _raised(module.main, *arguments, backend=backend, compile_=compiled_calls.original_compile())
    through = _raised(module.main, *arguments, backend=backend)
    assert type(through) is type(without) and str(through) == str(without)
    assert _all_frames(through) == _all_frames(without)
    assert not any(frame[0].startswith(GRAPHMEND_DIRECTORY) for frame in _all_frames(through))


def test_a_raise_from_chain_out_of_a_compiled_function_is_unchanged(tmp_path):
    module = _unrewritten(tmp_path)
    arguments = (torch.ones(2), "b")
    without = _raised(module.chained, *arguments, backend="eager", compile_=compiled_calls.original_compile())
    through = _raised(module.chained, *arguments, backend="eager")
    assert type(through) is type(without) is LookupError
    assert type(through.__cause__) is KeyError and through.__suppress_context__
    assert _all_frames(through) == _all_frames(without)
    assert _all_frames(through.__cause__) == _all_frames(without.__cause__)
    printed = "".join(traceback.format_exception(through))
    assert "The above exception was the direct cause" in printed
    assert str(Path(graphmend.__file__).parent) not in printed


def test_a_compiled_modules_exception_has_exactly_torchs_frames(tmp_path):
    class Failing(torch.nn.Module):
        def forward(self, x):
            return x @ torch.ones(5, 5)

    raised = []
    for compile_ in (compiled_calls.original_compile(), torch.compile):
        torch._dynamo.reset()
        model = compile_(Failing(), backend="eager")
        with pytest.raises(RuntimeError) as caught:
            model(torch.ones(3, 3))
        raised.append(caught.value)
    assert _all_frames(raised[1]) == _all_frames(raised[0])


def test_an_assertion_compiled_by_an_earlier_version_still_raises_the_users_exception():
    """A graph that asserts with a trap message (as graphs compiled before guards failed
    inside the graph did) fails with TorchDynamo's RuntimeError: the boundary, now a hook
    of torch's own compile wrapper, still raises the exception the message names."""
    from graphmend.runtime.traps import trap_message

    message = trap_message("builtins", "OverflowError", "too many")

    def asserting(x):
        torch._assert_async((x < 0).all(), message)
        return x + 1

    torch._dynamo.reset()
    compiled = torch.compile(asserting, backend="eager")
    assert torch.equal(compiled(-torch.ones(2)), torch.zeros(2))
    with pytest.raises(OverflowError, match="too many"):
        compiled(torch.ones(2))
    assert torch.equal(compiled(-torch.ones(2)), torch.zeros(2))


def test_the_frames_of_a_lowered_guard_show_no_names_of_graphmends(tmp_path):
    """A traceback's locals (``capture_locals``, pytest's ``--showlocals``): the compiled
    function's frame has its arguments, as the original's; no frame shows graphmend's
    names (the made frames ran with the runtime's names as their locals)."""
    original, mended = _original_and_mended(tmp_path, NESTED_GUARD)

    def locals_by_function(error):
        summary = traceback.TracebackException.from_exception(error, capture_locals=True)
        return {frame.name: frame.locals or {} for frame in summary.stack if frame.filename == str(tmp_path / "program.py")}

    expected = locals_by_function(_raised(original.main, *FAILING))
    seen = locals_by_function(_raised(mended.main, *FAILING, backend="eager"))
    assert list(seen) == list(expected)
    assert seen["main"] == expected["main"]
    assert not any(name.startswith("__graphmend") for names in seen.values() for name in names)


def test_a_lowered_guards_exception_is_freed_when_the_program_lets_go_of_it(tmp_path):
    """The frame made to raise it held the exception in its globals, and the exception
    that frame in its traceback: a cycle that only the garbage collector freed, with
    the frames and their values. The original's is freed at once."""
    import gc
    import weakref

    source = NESTED_GUARD.replace('raise ValueError(f"too large: {n}")', 'raise TooLarge(f"too large: {n}")')
    source += "\n\nclass TooLarge(ValueError):\n    pass\n"
    original, mended = _original_and_mended(tmp_path, source)
    for function, backend in ((original.main, None), (original.main, "eager"), (mended.main, "eager"),
                              (mended.main, "aot_eager")):
        gc.collect()
        gc.disable()
        try:
            error = _raised(function, *FAILING, backend=backend)
            assert type(error).__name__ == "TooLarge"
            freed = weakref.ref(error)
            del error
            assert freed() is None, (function.__module__, backend)
        finally:
            gc.enable()
