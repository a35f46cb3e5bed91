"""[Defer] output calls that read ``name.item()``: the read is made when the graph runs,
from the tensor at the call (``defer.item_reads``, ``output_operands._split_item_reads``).
Must-rewrite cases with counts, one named must-not case per condition, and
differential runs eagerly and compiled, with gradients where autograd records."""

from __future__ import annotations

import contextlib
import io
import textwrap

import pytest
import torch

import helpers
from graphmend.core.legality import condition_id
from graphmend.runtime import reset
from graphmend.runtime.store import store
from helpers import assert_equivalent, graphs_and_breaks, mend, original_and_mended


@pytest.fixture(autouse=True)
def comparison_handler_only_records(monkeypatch):
    monkeypatch.setattr(helpers._Records, "graphmend_output_only", True, raising=False)
    reset()
    yield
    reset()


PRELUDE = """
import logging
import warnings
import torch
logger = logging.getLogger(__name__)
"""


def _program(body: str) -> str:
    return PRELUDE + textwrap.dedent(body)


MUST_REWRITE = {
    "print_fstring": """
        def f(x):
            loss = (x * x).mean()
            print(f"loss {loss.item():.4f}")
            return loss * 2
    """,
    "print_argument": """
        def f(x):
            loss = (x * x).mean()
            print("loss", loss.item(), sep=": ")
            return loss * 2
    """,
    "log_percent_format": """
        def f(x):
            loss = (x * x).mean()
            logger.warning("loss %.4f (%s)", loss.item(), loss.item())
            return loss * 2
    """,
    "log_fstring_with_python_value_and_repr": """
        def f(x, step=3):
            loss = (x * x).mean()
            logger.warning(f"step {step}: loss {loss.item()!r} / {loss.item():>12.3e}")
            return loss * 2
    """,
    "integer_and_bool_reads": """
        def f(x):
            count = (x > 0).sum()
            seen = (x > 0).any()
            print(f"{count.item():d} positive, any: {seen.item()}")
            logger.warning("count %d", count.item())
            return x + count
    """,
}


@pytest.mark.parametrize("name", list(MUST_REWRITE))
def test_item_reads_in_output_calls_lose_their_breaks(name):
    original, mended, result = original_and_mended(_program(MUST_REWRITE[name]))
    assert [f for f in result.findings if f.rule == "Defer" and not f.fixed] == []
    assert not [f for f in result.findings if f.category == "TI"]
    x = torch.tensor([0.5, -1.25, 2.0])
    assert graphs_and_breaks(original.f, x)[1] >= 1
    assert graphs_and_breaks(mended.f, x) == (1, 0)
    assert_equivalent(original.f, mended.f, x, backends=("eager", "aot_eager"))


# Static: one case per reason of ``item_reads_made_again_unchanged`` (D109).
MUST_NOT_STATIC = {
    "warning": """
        def f(x):
            loss = (x * x).mean()
            warnings.warn(f"loss {loss.item():.4f}")
            return loss
    """,
    "argument_with_a_call": """
        def f(x):
            loss = (x * x).mean()
            print(f"loss {loss.item():.4f}", len(str(x.shape)))
            return loss
    """,
    "format_spec_from_a_value": """
        def f(x, digits=4):
            loss = (x * x).mean()
            print(f"loss {loss.item():.{digits}f}")
            return loss
    """,
}


@pytest.mark.parametrize("name", list(MUST_NOT_STATIC))
def test_item_reads_made_again_unchanged__declines(name):
    result = mend(_program(MUST_NOT_STATIC[name]))
    (finding,) = [f for f in result.findings if f.rule == "Defer"]
    assert not finding.fixed and condition_id(finding.reason) == "D109"


def test_item_reads_made_again_unchanged__the_form_graphmend_fix_writes_declines():
    from graphmend import mend_module_source

    result = mend_module_source(_program(MUST_REWRITE["print_fstring"]), output_calls_in_place=True)
    (finding,) = [f for f in result.findings if f.rule == "Defer"]
    assert not finding.fixed and condition_id(finding.reason) == "D109"


def test_an_attribute_receiver_is_no_item_read():
    """``self.loss.item()`` reads an attribute (a property may run code): it stays a
    formatting of a tensor value at the call (D107)."""
    result = mend(_program("""
        class Box:
            loss = None

        def f(x, box=Box()):
            box.loss = x.mean()
            print(f"loss {box.loss.item():.4f}")
            return x
    """))
    (finding,) = [f for f in result.findings if f.rule == "Defer"]
    assert not finding.fixed and condition_id(finding.reason) == "D107"


# While tracing, a read the runtime hands back: the original call is made again, with
# its break, and fails or prints as the original did.
HANDED_BACK = {
    # ``.item()`` of more than one element raises RuntimeError at the call.
    "more_than_one_element": """
        def f(x):
            total = x * 2
            try:
                print(f"total {total.item():.4f}")
            except RuntimeError as error:
                print("caught", type(error).__name__)
            return total
    """,
    # ``format(float, "d")`` raises ValueError for every float (D207).
    "format_that_does_not_apply": """
        def f(x):
            loss = x.mean()
            try:
                print(f"loss {loss.item():d}")
            except ValueError as error:
                print("caught", error)
            return loss
    """,
    # ``%d`` of a float fails for NaN and infinities (D207): made by the original call.
    "percent_d_of_a_float": """
        def f(x):
            loss = x.mean()
            logger.warning("loss %d", loss.item())
            return loss
    """,
    # ``c`` overflows for a large integer (D207).
    "c_of_an_integer": """
        def f(x):
            count = (x > 0).sum()
            print(f"{count.item():c}")
            return x
    """,
}


@pytest.mark.parametrize("name", list(HANDED_BACK))
def test_a_read_handed_back_is_the_original_call_made_again(name):
    """Compiled, the original's record after the break at ``.item()`` is made in
    TorchDynamo's resume function (its ``funcName``): the mended run is compared with
    the original compiled, and eagerly with the original."""
    original, mended, result = original_and_mended(_program(HANDED_BACK[name]))
    assert [f for f in result.findings if f.rule == "Defer" and "item()" in f.message] == []
    assert all(f.fixed for f in result.findings if f.rule == "Defer")
    x = torch.tensor([0.5, -1.25, 2.0]) if name != "c_of_an_integer" else torch.tensor([1.0, 2.0])
    assert graphs_and_breaks(mended.f, x) == graphs_and_breaks(original.f, x)
    helpers.observe(mended.f, x).assert_same_as(helpers.observe(original.f, x))
    for backend in ("eager", "aot_eager"):
        reset()
        before = helpers.observe(original.f, x, compiled=True, backend=backend)
        helpers.observe(mended.f, x, compiled=True, backend=backend).assert_same_as(before)


COMPUTE_LOSS = """
import torch

def compute_loss(model, x, target):
    loss = torch.nn.functional.mse_loss(model(x), target)
    print(f"loss {loss.item():.4f}")
    return loss
"""


def _loss_printed_and_gradient(function, backend):
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    x, target = torch.randn(3, 4), torch.randn(3, 2)
    torch._dynamo.reset()
    step = torch.compile(function, backend=backend) if backend else function
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        loss = step(model, x, target)
    loss.backward()
    return printed.getvalue(), loss.detach().view(torch.int32).item(), [
        p.grad.view(torch.int32).tolist() for p in model.parameters()
    ]


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_a_loss_printed_while_autograd_records(backend):
    """The loss printed last in a compiled step: nothing after the print records
    autograd, so the joined backward is the original first graph's
    (``earlier_tensors_stay_in_the_graph``), and the gradients are bit-identical."""
    original, mended, _ = original_and_mended(COMPUTE_LOSS)
    eager = _loss_printed_and_gradient(original.compute_loss, None)
    assert _loss_printed_and_gradient(original.compute_loss, backend) == eager
    assert _loss_printed_and_gradient(mended.compute_loss, backend) == eager
    assert not store.trace_time_declines
    torch.manual_seed(0)
    arguments = (torch.nn.Linear(4, 2), torch.randn(3, 4), torch.randn(3, 2))
    assert graphs_and_breaks(original.compute_loss, *arguments)[1] == 2
    assert graphs_and_breaks(mended.compute_loss, *arguments) == (1, 0)
