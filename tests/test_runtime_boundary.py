"""What mended code needs from its surroundings, and what ``torch.compile``'s wrapper and
``graphmend.mend`` accept: each against the original program, eager and compiled."""

from __future__ import annotations

import functools
import re
import types

import pytest
import torch
from torch._dynamo.testing import CompileCounter

import graphmend
from graphmend.runtime import compiled_calls
from helpers import original_and_mended

MENDED_SOURCE = """
import torch

def shift(x):
    print("shift", tuple(x.shape))
    if x.sum() > 0:
        y = x + 1
    else:
        y = x - 1
    return y * 2
"""


def _rebuilt(function):
    """``function`` rebuilt from its code object with globals of its own, as serialisers do."""
    namespace = {"torch": torch, "__builtins__": __builtins__}
    return types.FunctionType(function.__code__, namespace, function.__name__, function.__defaults__)


def test_a_function_rebuilt_from_mended_code_with_other_globals_runs_eagerly(capsys):
    original, mended, result = original_and_mended(MENDED_SOURCE)
    assert result.changed and "__graphmend__" in mended.shift.__code__.co_names
    outputs = []
    for module in (original, mended):
        x = torch.tensor([1.0, -3.0])
        outputs.append((_rebuilt(module.shift)(x), _rebuilt(module.shift)(-x), capsys.readouterr().out))
    (first, second, printed), (mended_first, mended_second, mended_printed) = outputs
    assert torch.equal(first, mended_first) and torch.equal(second, mended_second)
    assert printed == mended_printed == "shift (2,)\nshift (2,)\n"


def test_a_function_rebuilt_from_mended_code_with_other_globals_compiles(capsys):
    original, mended, _ = original_and_mended(MENDED_SOURCE)
    graphs = []
    for module in (original, mended):
        torch._dynamo.reset()
        counter = CompileCounter()
        compiled = torch.compile(_rebuilt(module.shift), backend=counter)
        values = [compiled(torch.tensor([1.0, -3.0])), compiled(torch.tensor([3.0, -1.0]))]
        graphs.append((values, counter.frame_count, capsys.readouterr().out))
    (values, original_graphs, printed), (mended_values, mended_graphs, mended_printed) = graphs
    assert all(torch.equal(a, b) for a, b in zip(values, mended_values))
    assert printed == mended_printed
    assert mended_graphs <= original_graphs


def test_the_runtime_in_the_builtins_cannot_be_called_like_any_module():
    import builtins

    from graphmend import runtime

    assert builtins.__graphmend__ is runtime
    with pytest.raises(TypeError, match="'module' object is not callable"):
        runtime()


def _compile_twice(compile_, function_or_module, x):
    torch._dynamo.reset()
    inner, outer = CompileCounter(), CompileCounter()
    once = compile_(function_or_module, backend=inner)
    twice = compile_(once, backend=outer)
    values = [twice(x), once(x)]
    return values, (inner.frame_count, outer.frame_count, inner.op_count, outer.op_count)


def _sine(x):
    return x.sin() + 1


@pytest.mark.parametrize("make", [lambda: _sine, lambda: torch.nn.Linear(2, 2)], ids=["function", "module"])
def test_compiling_a_compiled_function_behaves_as_without_graphmend(make):
    torch.manual_seed(0)
    subject = make()
    x = torch.ones(2)
    expected, expected_counts = _compile_twice(compiled_calls.original_compile(), subject, x)
    values, counts = _compile_twice(torch.compile, subject, x)
    assert all(torch.equal(a, b) for a, b in zip(expected, values))
    assert counts == expected_counts


def test_what_compile_returns_still_unwraps_to_the_users_function():
    from torch._dynamo.eval_frame import innermost_fn

    compiled = torch.compile(_sine, backend="eager")
    assert compiled_calls.has_boundary(compiled)
    assert innermost_fn(compiled) is _sine
    assert innermost_fn(compiled_calls.original_compile()(_sine, backend="eager")) is _sine


def test_mend_goes_through_a_partial():
    from tests_fixtures_for_api import gate_function

    partial = functools.partial(gate_function, y=torch.ones(5))
    mended = graphmend.mend(partial)
    assert isinstance(mended, functools.partial) and mended is not partial
    assert getattr(mended.func, "__graphmend_mended__", False)
    assert mended.args == partial.args and mended.keywords == partial.keywords
    x = torch.randn(5)
    assert torch.equal(mended(x), partial(x))
    counter = CompileCounter()
    torch._dynamo.reset()
    torch.compile(mended, backend=counter)(x)
    assert counter.frame_count == 1


class _Callable:
    def __call__(self, x):
        return x


def test_mend_returns_a_partial_of_what_it_does_not_change_as_it_is():
    partial = functools.partial(max, 3)
    assert graphmend.mend(partial) is partial
    odd = functools.partial(_Callable(), 1)
    assert graphmend.mend(odd) is odd


@pytest.mark.parametrize("builtin", [len, print, "".join, str.upper, object.__init__, dict.fromkeys])
def test_mend_returns_a_builtin_as_it_is(builtin):
    assert graphmend.mend(builtin) is builtin


# Names TorchDynamo writes into the globals of any module whose code it compiles.
_DYNAMO_NAMES = re.compile(r"__(compiled_fn|resume_at|builtins_dict|import)_")


def _namespace(module):
    return sorted(key for key in vars(module) if key not in ("__name__", "__file__"))


def test_a_mended_modules_namespace_is_the_originals_eagerly(capsys):
    original, mended, _ = original_and_mended(MENDED_SOURCE)
    assert "__graphmend__" not in vars(mended) and "__graphmend__" not in dir(mended)
    for module in (original, mended):
        module.shift(torch.ones(2))
    assert _namespace(mended) == _namespace(original)
    assert len(vars(mended)) == len(vars(original))


def test_what_a_mended_module_gains_when_compiled_is_only_torchdynamos_aliases(capsys):
    """TorchDynamo writes an alias into the compiled frame's globals for each module whose
    function it inlines and which reads that module's globals (``__import_torch_dot_...``
    for the original too); the runtime functions mended code calls add theirs, and
    those (and torch's, for the polyfills they reach) are all that a mended module holds
    beyond the original's."""
    original, mended, _ = original_and_mended(MENDED_SOURCE)
    for module in (original, mended):
        torch._dynamo.reset()
        compiled = torch.compile(module.shift, backend="eager")
        compiled(torch.ones(2))
        compiled(-torch.ones(2))

    def own(module):
        return [key for key in _namespace(module) if not _DYNAMO_NAMES.match(key)]

    assert own(mended) == own(original)
    extra = {key for key in vars(mended) if key.startswith("__import_")} - set(vars(original))
    assert any(key.startswith("__import_graphmend_dot_runtime") for key in extra)
    assert all(key.startswith(("__import_graphmend_dot_runtime", "__import_torch_dot_")) for key in extra)


def test_mend_writes_nothing_into_the_functions_globals():
    from tests_fixtures_for_api import gate_function

    before = dict(gate_function.__globals__)
    graphmend.mend(gate_function)
    assert gate_function.__globals__ == before


def test_mend_source_text_runs_alone_and_binds_no_name():
    text = graphmend.mend_source(MENDED_SOURCE)
    assert "__graphmend__." in text and "import graphmend.runtime as" not in text
    namespace = {}
    exec(compile(text, "<mended>", "exec"), namespace)  # noqa: S102
    assert sorted(namespace) == ["__builtins__", "shift", "torch"]
    assert graphmend.mend_source(text) == text  # already mended: left as it is
