"""A rewritten frame TorchDynamo fails to convert runs eagerly (graphmend.runtime.
conversion_failures): the long fuzz run's seed 41568, and the conditions one by one."""

from __future__ import annotations

import types
import warnings

import pytest
import torch

from graphmend.rewrite.templates import RUNTIME_NAME
from graphmend.runtime import conversion_failures, graph_inspection
from graphmend.runtime.store import store
from helpers import original_and_mended

# TorchDynamo raised "exception table entry start instruction has no offset" building
# the resume function after the branch break on line 5, for the rewritten code only.
SEED_41568 = """
import sys
import warnings

def f(x, y):
    if (x > 0).all():
        x = x[0] + x
        warnings.simplefilter("error")
        if x.sum() > y.sum():
            warnings.warn("filtered")
    try:
        for i in range(3):
            print("to stderr", x, file=sys.stderr)
            if x.sum() > y.sum():
                pass
            try:
                if (y > 0).all():
                    pass
            except UserWarning as error:
                pass
    except ValueError as error:
        pass
    return x
"""


def _outcome(function, x, y):
    torch._dynamo.reset()
    with warnings.catch_warnings():
        try:
            return function(x.clone(), y.clone()).tolist()
        except Exception as error:  # noqa: BLE001 - compared
            return type(error).__name__, str(error)


def test_a_rewritten_frame_whose_resume_function_failed_to_assemble_compiles():
    """Seed 41568 ran its rewritten frame eagerly (the conversion failed); the failure was
    TorchDynamo's offsets of replaced ``EXTENDED_ARG`` prefixes, now repaired for
    rewritten frames, and the frame compiles."""
    original, mended, _ = original_and_mended(SEED_41568)
    x = torch.tensor([0.9, 0.8, 0.7, 0.6])
    y = torch.tensor([0.1, 0.2, 0.3, 0.4])
    expected = _outcome(original.f, x, y)
    assert expected == ("UserWarning", "filtered")
    assert _outcome(torch.compile(original.f, backend="eager"), x, y) == expected
    store.frames_run_eagerly.clear()
    assert _outcome(torch.compile(mended.f, backend="eager"), x, y) == expected
    assert store.frames_run_eagerly == {}


# A break, then a handler long enough that the jump over it takes an ``EXTENDED_ARG``
# prefix, inside ``try``/``finally``: the exception table entry of that jump. Each
# print is rewritten (Defer), which makes the handler longer still.
LONG_HANDLER = """
import torch

def f(x):
    n = x.sum().item()
    try:
        try:
            y = x * n
        except ValueError as error:
""" + "".join(f"            print('failed {i}', error, x.shape, n)\n" for i in range(12)) + """            y = x
    finally:
        pass
    return y
"""


def test_a_resume_function_through_a_long_handler_compiles():
    from graphmend.counting import CountingBackend

    original, mended, result = original_and_mended(LONG_HANDLER)
    assert result.changed
    x = torch.ones(3)
    torch._dynamo.reset()
    store.frames_run_eagerly.clear()
    backend = CountingBackend()
    assert torch.equal(torch.compile(mended.f, backend=backend)(x), original.f(x))
    assert store.frames_run_eagerly == {}
    assert backend.graphs == 2  # before the break at `.item()`, and the resume function's


def test_a_frame_that_was_not_rewritten_keeps_torchdynamos_assembly_error():
    """``_offsets_of_replaced_extended_args`` repairs only frames of rewritten modules:
    the original's frame fails as it does without graphmend (TorchDynamo 2.13)."""
    original, _, _ = original_and_mended(LONG_HANDLER)
    torch._dynamo.reset()
    with pytest.raises(Exception, match="exception table entry start instruction has no offset"):
        torch.compile(original.f, backend="eager")(torch.ones(3))


def test_the_offsets_are_given_again_only_for_a_rewritten_frame():
    calls = []

    def failing_once(instructions):
        calls.append(list(instructions))
        if len(calls) == 1:
            raise AssertionError("exception table entry start instruction has no offset")
        return "table"

    repaired = conversion_failures._offsets_of_replaced_extended_args(failing_once, lambda instructions: None)
    store.converting.rewritten = False
    with pytest.raises(AssertionError):
        repaired([])
    calls.clear()
    store.converting.rewritten = True
    try:
        assert repaired([]) == "table" and len(calls) == 2
    finally:
        store.converting.rewritten = False


class _Box:
    def __init__(self, error_on_graph_break):
        self.error_on_graph_break = error_on_graph_break


def _converter(error_on_graph_break=False):
    return types.SimpleNamespace(_inner_convert=types.SimpleNamespace(_box=_Box(error_on_graph_break)))


def _frame(rewritten=True):
    code = compile(f"{RUNTIME_NAME}.is_compiling()" if rewritten else "pass", "<frame>", "exec")
    return types.SimpleNamespace(f_globals={}, f_code=code)


def _failing(error):
    def convert(self, frame, *args, **kwargs):
        raise error

    return conversion_failures._run_eagerly_on_internal_error(convert)


def test_an_internal_error_on_a_rewritten_frame_becomes_a_skip():
    result = _failing(AssertionError("internal"))(_converter(), _frame())
    assert "graphmend" in result.skip_reason


def test_a_frame_that_was_not_rewritten_keeps_torchdynamos_error():
    with pytest.raises(AssertionError, match="internal"):
        _failing(AssertionError("internal"))(_converter(), _frame(rewritten=False))


def test_fullgraph_keeps_torchdynamos_error():
    with pytest.raises(AssertionError, match="internal"):
        _failing(AssertionError("internal"))(_converter(error_on_graph_break=True), _frame())


def test_an_error_of_the_users_code_is_not_an_internal_error():
    with pytest.raises(ValueError, match="user"):
        _failing(ValueError("user"))(_converter(), _frame())


def test_a_frame_of_a_mended_module_that_was_not_rewritten_keeps_torchdynamos_error():
    """The frame's own code decides, not its module: ``_frame(rewritten=False)`` has the
    runtime in its globals, as every function of a mended module does."""
    with pytest.raises(AssertionError, match="internal"):
        _failing(AssertionError("internal"))(_converter(), _frame(rewritten=False))


# ``g`` is rewritten (Defer's print); ``f``, in the same module, is not, and TorchDynamo
# fails to assemble its resume function as it does without graphmend.
MODULE_WITH_ONE_REWRITTEN_FUNCTION = """
import torch

def g(x):
    print("g", x.shape)
    return x + 1

def f(x):
    n = x.sum().item()
    try:
        try:
            y = x * n
        except ValueError as error:
""" + "".join(f"            y = x.reshape(-1, {i + 1}) * {i} + x.cos() * {i}\n" for i in range(12)) + """            y = x
    finally:
        pass
    return y
"""


def test_an_internal_error_in_a_function_that_was_not_rewritten_is_the_originals():
    """Issue 46 (8): TorchDynamo's internal error in a function graphmend did not rewrite
    was swallowed (the function ran uncompiled) because another function of its module
    was rewritten; the program now sees the original's error."""
    original, mended, result = original_and_mended(MODULE_WITH_ONE_REWRITTEN_FUNCTION)
    assert result.changed
    assert graph_inspection.is_rewritten_code(mended.g.__code__)
    assert not graph_inspection.is_rewritten_code(mended.f.__code__)
    outcomes = []
    for module in (original, mended):
        torch._dynamo.reset()
        store.frames_run_eagerly.clear()
        with pytest.raises(Exception, match="exception table entry start instruction has no offset") as caught:
            torch.compile(module.f, backend="eager")(torch.ones(3))
        outcomes.append(type(caught.value))
        assert store.frames_run_eagerly == {}
    assert outcomes[0] is outcomes[1]
