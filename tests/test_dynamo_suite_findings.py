"""Programs reduced from PyTorch's own TorchDynamo tests whose outcome changed under
``graphmend run`` for a reason other than counting graphs or breaks
(``tools/upstream_tests``), each kept as the regression test of its fix."""

from __future__ import annotations

import traceback

import pytest
import torch

from graphmend import torch_adapter
from graphmend.runtime import compiled_calls


def _frames_below_the_call(compiled) -> list[tuple[str, str]]:
    """(file name, function) of each traceback entry under the caller of ``compiled``."""
    try:
        compiled(torch.ones(2))
    except Exception as error:  # noqa: BLE001 - whatever it raises is what is compared
        entries = traceback.extract_tb(error.__traceback__)[1:]
        return [(entry.filename.rsplit("/", 1)[-1], entry.name) for entry in entries]
    raise AssertionError("the compiled call did not raise")


def _breaks_the_graph(x):
    torch._dynamo.graph_break()
    return x + 1


def _raises(x):
    raise ValueError("from the user's function")


@pytest.mark.parametrize(
    "function", [_breaks_the_graph, _raises], ids=["fullgraph_break", "user_error"]
)
def test_an_exception_out_of_a_compiled_function_has_the_frames_it_has_without_graphmend(function):
    was_active = torch_adapter.active()
    torch_adapter.activate()
    try:
        torch._dynamo.reset()
        bare = compiled_calls.original_compile()(function, backend="eager", fullgraph=True)
        through_the_boundary = torch.compile(function, backend="eager", fullgraph=True)
        assert _frames_below_the_call(through_the_boundary) == _frames_below_the_call(bare)
    finally:
        if not was_active:
            torch_adapter.deactivate()
