"""The runtime: every torch.compile spelling prints mended output exactly and restores traps."""

import textwrap

import pytest
import torch

import graphmend.runtime as runtime
from helpers import load_module, mend

SOURCE = textwrap.dedent(
    """
    import torch

    class GuardError(Exception):
        pass

    def body(x):
        print("body saw", x.shape)
        if (x < 0).any():
            raise GuardError("negative input")
        return x * 2

    @torch.compile
    def bare_decorator(x):
        return body(x)

    @torch.compile(backend="eager", dynamic=False)
    def decorator_with_arguments(x):
        return body(x)

    def plain(x):
        return body(x)

    called = torch.compile(plain, backend="eager")

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.scale = torch.nn.Parameter(torch.ones(()))

        def forward(self, x):
            return body(x) * self.scale
    """
)


@pytest.fixture(scope="module")
def module():
    result = mend(SOURCE)
    assert result.changed
    return load_module(result.tree, "runtime_spellings")


def spellings(module):
    compiled_model = torch.compile(module.Model(), backend="eager")
    method_model = module.Model()
    method_model.compile(backend="eager")
    return {
        "decorator_with_arguments": module.decorator_with_arguments,
        "call": module.called,
        "compiled_module": compiled_model,
        "module_compile_method": method_model,
    }


@pytest.mark.parametrize(
    "spelling", ["decorator_with_arguments", "call", "compiled_module", "module_compile_method"]
)
def test_every_spelling_prints_and_restores(module, spelling, capsys):
    torch._dynamo.reset()
    compiled = spellings(module)[spelling]
    assert torch.equal(compiled(torch.ones(3)), torch.full((3,), 2.0))
    assert capsys.readouterr().out == "body saw torch.Size([3])\n"
    with pytest.raises(module.GuardError, match="negative input"):
        compiled(-torch.ones(3))
    assert capsys.readouterr().out == "body saw torch.Size([3])\n"
    assert runtime.pending_effect_count() == 0


def test_compiled_module_keeps_its_attributes(module):
    model = module.Model()
    compiled = torch.compile(model, backend="eager")
    assert isinstance(compiled, torch.nn.Module)
    assert compiled.scale is model.scale
    assert set(compiled.state_dict()) == {"_orig_mod.scale"}


def test_unrelated_runtime_errors_propagate_unchanged():
    """The compiled-call boundary hands on an error that is not a failed lowered guard
    as torch raised it: the same class and message as without the boundary. (The
    message names the user's file, so "graphmend" may well be in it: a clone's folder.)"""
    from graphmend import torch_adapter
    from graphmend.runtime import compiled_calls
    from graphmend.runtime.traps import TRAP_MARKER

    assert torch_adapter.activate()
    assert torch.compile is not compiled_calls.original_compile()

    def broken(x):
        return x @ torch.ones(5, 5)

    raised = []
    for compile_ in (compiled_calls.original_compile(), torch.compile):
        torch._dynamo.reset()
        with pytest.raises(Exception) as caught:
            compile_(broken, backend="eager")(torch.ones(3, 3))
        raised.append(caught.value)
    without_boundary, through_it = raised
    assert type(through_it) is type(without_boundary)
    assert str(through_it) == str(without_boundary)
    assert TRAP_MARKER not in str(through_it)


def test_trap_whose_class_cannot_be_found_raises_trap_failure():
    message = runtime.trap_message("no.such.module", "MissingError", "lost class")
    with pytest.raises(runtime.TrapFailure, match="lost class"):
        runtime.raise_original_for_trap_failure(RuntimeError(message))


def test_trap_message_round_trips_without_a_message():
    message = runtime.trap_message("builtins", "OverflowError", None)
    with pytest.raises(OverflowError) as caught:
        runtime.raise_original_for_trap_failure(RuntimeError(message))
    assert caught.value.args == ()


def test_select_uses_where_only_for_matching_tensors():
    taken = torch.tensor(True)
    assert torch.equal(runtime.select(taken, torch.ones(2), torch.zeros(2)), torch.ones(2))
    assert runtime.select(torch.tensor(False), 1, 2) == 2
    mismatched = runtime.select(taken, torch.ones(2), torch.zeros(1, 2))
    assert mismatched.shape == (2,)
    # torch.where would lay the result out as the first arm: the taken arm's own object.
    transposed, contiguous = torch.ones(3, 3).t() * 2, torch.zeros(3, 3)
    assert runtime.select(torch.tensor(False), transposed, contiguous) is contiguous
    assert runtime.select(taken, contiguous, transposed) is contiguous


def test_bare_decorator_ends_at_the_boundary(module):
    from graphmend.runtime import compiled_calls

    assert compiled_calls.has_boundary(module.bare_decorator)


def test_decisions_made_while_tracing_write_no_global_into_the_users_module():
    """The trace-time decisions (a guard lowered, an output kept in the graph, a
    selection) are constants of the trace bound by ``comptime``; with
    ``assume_constant_result`` TorchDynamo wrote each answer into the user's module as
    a global (``trap_lowerable``, ``sub_register``). TorchDynamo's own globals (dunder
    names, as for any compiled function) are all that may appear."""
    from helpers import original_and_mended

    source = """
        import torch

        def check(x):
            if (x < 0).any():
                raise ValueError("negative")
            return x

        def f(x):
            print("shape", x.shape)
            x = check(x)
            if x.sum() > 0:
                y = x * 2
            else:
                y = x * 3
            return y
    """
    original, mended, result = original_and_mended(source)
    assert result.changed
    for module in (original, mended):
        before = set(vars(module))
        torch._dynamo.reset()
        torch.compile(module.f, backend="eager", dynamic=False)(torch.ones(3))
        added = {name for name in set(vars(module)) - before if not name.startswith("__")}
        assert added == set(), (module.__name__, added)
