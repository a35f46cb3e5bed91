"""Programs reduced from PyTorch's own TorchDynamo tests whose outcome changed under
``graphmend run`` for a reason other than counting graphs or breaks
(``tools/upstream_tests``), each kept as the regression test of its fix."""

from __future__ import annotations

import traceback

import pytest
import torch

from graphmend import torch_adapter
from graphmend.runtime import compiled_calls
from helpers import assert_equivalent, original_and_mended


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


# test_misc's test_default_dtype_change: a tensor made from a Python number inside the
# compiled function is a constant to TorchDynamo's and AOTAutograd's fake tensors, and
# they run an operator whose operands are all constants for real while tracing; the
# print that Defer put into the graph was printed once per trace and once more when
# the graph ran.
PRINTS_A_TENSOR_IT_MADE = """
import torch


def prints_a_tensor_it_made(x):
    made = torch.tensor(1)
    print("made", made, 1.0)
    return x + 1


def prints_nothing_but_made_tensors():
    print("made", torch.tensor(2), torch.ones(1))
"""


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
@pytest.mark.parametrize(
    "function, args",
    [("prints_a_tensor_it_made", (torch.ones(2),)), ("prints_nothing_but_made_tensors", ())],
    ids=["with_an_input", "without_inputs"],
)
def test_a_deferred_print_of_a_constant_tensor_is_printed_once_per_call(function, args, backend):
    original, mended, result = original_and_mended(PRINTS_A_TENSOR_IT_MADE)
    assert result.changed
    assert_equivalent(getattr(original, function), getattr(mended, function), *args, backends=(backend,))


def test_graphmends_operators_are_no_random_draws():
    """Tagged ``nondeterministic_seeded`` so that fake tensors never run them while
    traced, graphmend's operators still draw no random numbers: a graph holding one
    keeps inductor's random kernels, and the draw conditions do not count it."""
    import torch.fx

    from graphmend.runtime import operators  # noqa: F401 - defines the operators
    from graphmend.runtime.graph_inspection import draws_random_numbers

    graph = torch.fx.Graph()
    for target in (torch.ops.graphmend.emit_effect, torch.ops.graphmend.emit_effect.default):
        node = graph.call_function(target, (0, [], []))
        assert not draws_random_numbers(node)
    assert draws_random_numbers(graph.call_function(torch.ops.aten.rand.default, ([2],)))


@pytest.fixture
def graphmends_patches():
    """graphmend's patches of torch on, as ``graphmend run`` has them, for one test."""
    was_active = torch_adapter.active()
    torch_adapter.activate()
    try:
        torch._dynamo.reset()
        yield
    finally:
        torch._dynamo.reset()
        if not was_active:
            torch_adapter.deactivate()


def _doubled(x, c=None):
    if c is None:
        c = 2
    return c * x


def _compiles_inside(x):
    return torch.compile(_doubled, backend="eager")(x)


def test_a_compiled_function_that_calls_torch_compile_compiles_whole(graphmends_patches):
    """test_repros's test_torch_compile_in_compile_frame: TorchDynamo finds its rule for
    a call of ``torch.compile`` by the function's identity; graphmend's ``torch.compile``
    had none, and TorchDynamo traced into it and failed (``fullgraph=True``: an error
    where the original compiled)."""
    x = torch.randn(4)
    result = torch.compile(_compiles_inside, backend="eager", fullgraph=True)(x)
    assert torch.equal(result, _compiles_inside(x))


@torch._dynamo.disable(recursive=False)
def _not_traced_itself(x):
    return x + (1 if torch.compiler.is_compiling() else 2)


def _calls_a_nonrecursively_disabled_function(x):
    return _not_traced_itself(x)


def test_a_nonrecursively_disabled_function_runs_uncompiled(graphmends_patches):
    """test_repros's test_listcomp: TorchDynamo leaves a frame uncompiled when its caller
    is the wrapper of ``torch._dynamo.disable(recursive=False)``, found by walking up
    past its own frames; graphmend's frame around ``ConvertFrame.__call__`` hid the
    wrapper, and the function was compiled (``is_compiling()`` answered True)."""
    result = torch.compile(_calls_a_nonrecursively_disabled_function, backend="eager")(torch.zeros(2))
    assert torch.equal(result, torch.full((2,), 2.0))
