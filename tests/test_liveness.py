"""``torch_adapter.liveness``: a resume function of mended code takes the locals some
path reads, as the original's did, though graphmend's branches stand before their writes."""

from __future__ import annotations

import contextlib
import io
import logging
import types

import pytest
import torch

from graphmend.counting import CountingBackend
from graphmend.dynamo_records import recording
from graphmend.torch_adapter import liveness
from helpers import original_and_mended

# ``h`` is bound on one arm and rebound before any read: dead at the second ``if``. The
# logging call becomes graphmend's branch, a jump before ``h = torch.relu(x)``, and keeps
# its break (its handler writes to a stream whose ``write`` is Python code).
ONE_ARM_BINDS = """
import logging
import sys
import torch

logger = logging.getLogger("graphmend-test-liveness")

def f(x, y):
    if (x > 0).all():
        h = torch.sigmoid(x)
        sys.stdout.write("arm\\n")
    if x.sum() > y.sum():
        x = x + 1
    logger.warning("between")
    h = torch.relu(x)
    return h * 2
"""


class _TextList:
    def __init__(self):
        self.texts = []

    def write(self, text):
        self.texts.append(text)


@pytest.fixture(autouse=True)
def _log_to_a_stream_of_its_own():
    logger = logging.getLogger("graphmend-test-liveness")
    handler = logging.StreamHandler(_TextList())
    logger.propagate = False
    logger.addHandler(handler)
    yield
    logger.removeHandler(handler)
    logger.propagate = True


def _graphs_and_breaks_over_calls(function, calls) -> tuple[int, int]:
    torch._dynamo.reset()
    backend = CountingBackend()
    compiled = torch.compile(function, backend=backend, dynamic=False)
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()), recording() as records:
        for arguments in calls:
            compiled(*arguments)
    return backend.graphs, len(records.breaks)


def test_a_local_bound_on_one_arm_compiles_no_resume_function_more():
    """Fuzz 840628: both arms of the first ``if`` reach the second's break; with ``h``
    live on one path and unbound on the other, the mended frame compiled two resume
    functions for the break where the original compiled one (a graph and a break more)."""
    original, mended, _result = original_and_mended(ONE_ARM_BINDS)
    ones = torch.ones(2, 3)
    calls = [(ones, ones.clone()), (-ones, ones.clone()), (ones * 2, ones.clone())]
    before = _graphs_and_breaks_over_calls(original.f, calls)
    after = _graphs_and_breaks_over_calls(mended.f, calls)
    assert after[0] <= before[0] and after[1] <= before[1], (before, after)


def _instructions(function: types.FunctionType):
    from torch._dynamo.bytecode_transformation import cleaned_instructions

    return cleaned_instructions(function.__code__)


def _dynamo_live_names(instructions, place) -> set[str]:
    from torch._dynamo.bytecode_analysis import livevars_analysis

    return livevars_analysis(instructions, place)


def test_a_local_written_after_a_jump_before_its_read_is_not_live():
    _original, mended, _result = original_and_mended(ONE_ARM_BINDS)
    instructions = _instructions(mended.f)
    line = ONE_ARM_BINDS.splitlines().index("    if x.sum() > y.sum():") + 1
    second_if = next(i for i in instructions if i.opname.startswith("POP_JUMP") and i.positions.lineno == line)
    place = second_if.target
    assert "h" in _dynamo_live_names(instructions, place)  # TorchDynamo's walk: read after a jump
    assert "h" not in liveness.exact_live_names(instructions, place)
    assert "x" in liveness.exact_live_names(instructions, place)


def _corpus():
    """graphmend's runtime functions, and the mended functions of grammar programs
    (branches, loops, ``try``, ``with``, handlers, closures)."""
    import graphmend
    import graphmend.runtime.checks as checks
    import graphmend.runtime.traps as traps
    from tools.fuzz.grammar import generate

    for module in (checks, traps):
        for value in vars(module).values():
            if isinstance(value, types.FunctionType) and value.__module__ == module.__name__:
                yield value
    for seed in range(840000, 840016):
        source = generate(seed, programs=True, drawn_ranges=True, later_kinds=True).source
        tree = graphmend.mend_module_source(source, filename=f"<liveness_{seed}>", scope="all").tree
        for code in compile(tree, f"<liveness_{seed}>", "exec").co_consts:
            if isinstance(code, types.CodeType):
                yield types.FunctionType(code, {}, f"{code.co_name}_of_{seed}")


@pytest.mark.parametrize("function", list(_corpus()), ids=lambda function: function.__name__)
def test_exact_names_are_torchdynamos_less_some_and_keep_each_read_before_a_write(function):
    """The patched analysis is never wider than TorchDynamo's; and every local the
    straight-line code from a place reads before writing it (before any jump or handler)
    stays live in it, and in the exact set (which may be wider than TorchDynamo's: a
    handler reads a local that the code it covers writes after the place, which
    TorchDynamo counts as written first)."""
    from torch._dynamo.bytecode_analysis import livevars_analysis

    patched = liveness.exact_for_mended_code(livevars_analysis)
    instructions = _instructions(function)
    exact_sets = liveness.live_sets(instructions)
    for index, place in enumerate(instructions):
        exact = patched(instructions, place)
        assert exact <= _dynamo_live_names(instructions, place)
        written = set()
        for instruction in instructions[index:]:
            if instruction.opname in ("LOAD_FAST", "DELETE_FAST") and instruction.argval not in written:
                assert instruction.argval in exact, (function.__name__, index, instruction)
                assert instruction.argval in exact_sets[index]
            elif instruction.opname == "STORE_FAST":
                written.add(instruction.argval)
            if "JUMP" in instruction.opname or instruction.opname in ("RETURN_VALUE", "RAISE_VARARGS", "RERAISE", "FOR_ITER"):
                break
