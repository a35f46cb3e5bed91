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
