"""A rewritten frame TorchDynamo fails to convert runs eagerly (graphmend.runtime.
conversion_failures): the long fuzz run's seed 41568, and the conditions one by one."""

from __future__ import annotations

import types
import warnings

import pytest
import torch

from helpers import original_and_mended
from graphmend.runtime import conversion_failures
from graphmend.rewrite.templates import RUNTIME_NAME

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


def test_a_frame_torchdynamo_fails_on_runs_eagerly_as_the_original():
    original, mended, _ = original_and_mended(SEED_41568)
    x = torch.tensor([0.9, 0.8, 0.7, 0.6])
    y = torch.tensor([0.1, 0.2, 0.3, 0.4])
    expected = _outcome(original.f, x, y)
    assert expected == ("UserWarning", "filtered")
    assert _outcome(torch.compile(original.f, backend="eager"), x, y) == expected
    conversion_failures.frames_run_eagerly.clear()
    assert _outcome(torch.compile(mended.f, backend="eager"), x, y) == expected
    assert any(name == "f" for _, _, name in conversion_failures.frames_run_eagerly)


class _Box:
    def __init__(self, error_on_graph_break):
        self.error_on_graph_break = error_on_graph_break


def _converter(error_on_graph_break=False):
    return types.SimpleNamespace(_inner_convert=types.SimpleNamespace(_box=_Box(error_on_graph_break)))


def _frame(rewritten=True):
    code = compile("pass", "<frame>", "exec")
    return types.SimpleNamespace(f_globals={RUNTIME_NAME: object()} if rewritten else {}, f_code=code)


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


def test_an_op_failing_while_traced_runs_the_frame_eagerly_for_that_call_only():
    from torch._dynamo.exc import TorchRuntimeError

    result = _failing(TorchRuntimeError("RuntimeError when making fake tensor call"))(_converter(), _frame())
    assert "graphmend" in result.skip_reason and result.apply_to_code is False


def test_fullgraph_keeps_torchdynamos_error_for_an_op_failing_while_traced():
    from torch._dynamo.exc import TorchRuntimeError

    with pytest.raises(TorchRuntimeError, match="fake tensor call"):
        failing = _failing(TorchRuntimeError("RuntimeError when making fake tensor call"))
        failing(_converter(error_on_graph_break=True), _frame())


# Where joins the branch, so TorchDynamo traces `y.mul_` in the mended frame on the first
# call; the original's resume function traced it too, but which of the original's frames
# TorchDynamo traces again depends on the calls before (long fuzz run seed 142378).
WRITES_AN_ARGUMENT_IN_PLACE = """
import torch
def f(x, y):
    if x.sum() > 0:
        z = x * 2
    else:
        z = x * 3
    y.mul_(0.5)
    return z + y
"""


def test_an_op_failing_while_traced_raises_the_users_own_error_and_the_next_call_compiles():
    from graphmend.counting import CountingBackend

    original, mended, result = original_and_mended(WRITES_AN_ARGUMENT_IN_PLACE, scope="all")
    assert result.changed
    leaf = torch.ones(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf Variable") as eager_error:
        original.f(torch.ones(3), leaf)
    torch._dynamo.reset()
    conversion_failures.frames_run_eagerly.clear()
    backend = CountingBackend()
    compiled = torch.compile(mended.f, backend=backend)
    with pytest.raises(RuntimeError) as mended_error:
        compiled(torch.ones(3), leaf)
    assert type(mended_error.value) is RuntimeError and str(mended_error.value) == str(eager_error.value)
    assert [name for file, _, name in conversion_failures.frames_run_eagerly if file == mended.__file__] == [
        "torch_dynamo_resume_in_f_at_4"
    ]
    assert backend.graphs == 1  # the frame up to the branch's break, as the original's
    not_a_leaf = torch.ones(3, requires_grad=True) * 1.0
    assert compiled(torch.ones(3), not_a_leaf).tolist() == [2.5, 2.5, 2.5]
    # The failed op refused Where's claim (claims._restart_trace_without_claims): the
    # frame keeps the original's break, and its resume function compiles on this call.
    assert backend.graphs == 2
