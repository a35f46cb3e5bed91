"""Where's comparisons of a uniform draw that its range decides (``rules/where/ranges.py``).

``torch.rand`` and ``torch.rand_like`` draw from ``[0, 1)``: ``draw < p`` with ``p <= 0``
is False whatever the draw, so TorchDynamo need not read the tensor to take the branch.
``decided(left, right, operator, drawn_on_left)`` answers, while traced, with the
comparison's truth where the range decides it for every value the draw may take, and
None where it does not (the rewritten code then evaluates the original comparison, with
its break). The answer is a constant of the trace (``comptime``): the other operand is
a constant TorchDynamo guards on, so a later call with another value traces again. A
decided comparison is a DECIDED claim on the original's break
(``graphmend.runtime.claims``): the checks of the whole trace may refuse it (under
``aot_eager``, where joining the graphs would sum a tensor's gradient contributions in
another order), and the comparison then keeps its break.

Decided only when (each registered in ``graphmend.core.legality``):

- ``W208 draw_made_by_uniform_op``: the drawn value is a plain tensor the graph made by
  ``torch.rand``/``torch.rand_like`` with no ``out=`` (its values then lie in the range);
- ``W209 draw_has_one_floating_element``: it has exactly one element (a static size)
  and a floating dtype, and holds a value (strided, not on the meta device), so its
  truth is read as the original reads it;
- ``W210 other_operand_decides``: the other operand is a Python int or float constant
  (not a tensor, not a symbolic float) for which the range decides the result. The
  comparison is made in the draw's dtype: the operand is decided as given and as
  rounded to that dtype, and both must agree. The draw may be 1.0 in a dtype narrower
  than float32 (a value just below 1 rounds up), so only float32 and float64 draws
  have an upper bound below 1.
"""

from __future__ import annotations

import math

import torch

from graphmend.core.legality import failed
from graphmend.runtime import claims, trace_decisions
from graphmend.torch_adapter.tracing import comptime, realized

# Dtypes whose draws stay below 1.0.
_BELOW_ONE = (torch.float32, torch.float64)
_UNIFORM_OPS = (torch.rand, torch.rand_like)
_FLIPPED = {"lt": "gt", "le": "ge", "gt": "lt", "ge": "le"}


def decided(left, right, operator_name: str, drawn_on_left: bool):
    """While tracing: the truth of ``left OP right`` (a Python bool) where the draw's
    range decides it, else None. Not tracing: None."""
    answer = None
    if torch.compiler.is_compiling():
        comptime(_decide)
    return answer


def _decide(context) -> None:
    trace_decisions.decide_in_trace(
        context, "answer", ("left", "right", "operator_name", "drawn_on_left"), _answer, read=realized,
    )


def _answer(translator, left, right, operator_name, drawn_on_left):
    operator_name = operator_name.as_python_constant()
    drawn_on_left = drawn_on_left.as_python_constant()
    drawn, other = (left, right) if drawn_on_left else (right, left)
    if not drawn_on_left:
        operator_name = _FLIPPED[operator_name]  # ``p > draw`` is ``draw < p``
    example = _drawn_example(drawn)
    reason = (
        draw_made_by_uniform_op(drawn, example)
        or draw_has_one_floating_element(example)
        or other_operand_decides(example, other, operator_name)
    )
    if reason is not None:
        claims.decline_at_user_site(translator, reason)
        return None
    # The claim lets the checks of the whole trace (``whole_trace_conditions``) refuse
    # the joined graph, which then keeps the original break; an earlier refusal stands.
    if not claims.claim_break_at_user_site(translator, claims.DECIDED):
        return None
    return _outcome(example[1].dtype, other.as_python_constant(), operator_name)


def _drawn_example(drawn):
    from graphmend.torch_adapter.tracing import TensorVariable

    if type(drawn) is not TensorVariable or drawn.python_type() is not torch.Tensor:
        return None
    node = drawn.as_proxy().node
    example = node.meta.get("example_value")
    return (node, example) if isinstance(example, torch.Tensor) else None


def draw_made_by_uniform_op(drawn, example) -> str | None:
    """The drawn value is a plain tensor the graph made by ``torch.rand`` or
    ``torch.rand_like`` without ``out=``: its values lie in ``[0, 1)`` (``[0, 1]`` below
    float32)."""
    if example is None:
        return failed("W208", "the drawn value is not a plain tensor of the graph")
    node, _value = example
    if node.op != "call_function" or node.target not in _UNIFORM_OPS or "out" in node.kwargs:
        return failed("W208", "the drawn value is not made by `torch.rand` or `torch.rand_like` in this graph")
    return None


def draw_has_one_floating_element(example) -> str | None:
    """One element, by a static size, of a floating dtype, held in memory: the
    original's truth test reads it (more elements, or a meta tensor's missing value,
    raise there, and keep raising)."""
    _node, value = example
    if not all(type(size) is int for size in value.shape) or math.prod(value.shape) != 1:
        return failed("W209", "the draw does not have exactly one element (by its static size)")
    if not value.dtype.is_floating_point:
        return failed("W209", f"the draw's dtype {value.dtype} is not a floating dtype")
    if value.device.type == "meta" or value.layout != torch.strided:
        return failed("W209", "the draw holds no values to read (a meta or non-strided tensor)")
    return None


def other_operand_decides(example, other, operator_name: str) -> str | None:
    """The other operand is a Python int or float constant of the trace for which the
    draw's range decides ``draw OP other`` (as given and as rounded to its dtype)."""
    from graphmend.torch_adapter.tracing import ConstantVariable

    if type(other) is not ConstantVariable or type(other.as_python_constant()) not in (int, float):
        return failed("W210", "the other operand is not a Python int or float known while tracing")
    if _outcome(example[1].dtype, other.as_python_constant(), operator_name) is None:
        return failed("W210", "the draw's range does not decide the comparison for this value")
    return None


def _outcome(dtype, value, operator_name: str):
    """``draw OP value`` for every draw of ``dtype``, or None where that differs by draw."""
    if type(value) is int and not -(2**63) <= value < 2**63:
        return None
    try:
        rounded = torch.tensor(value, dtype=dtype).item()
    except Exception:  # noqa: BLE001 - not representable: leave the comparison as written
        return None
    outcomes = {_outcome_of(dtype, float(value), operator_name), _outcome_of(dtype, rounded, operator_name)}
    return outcomes.pop() if len(outcomes) == 1 else None


def _outcome_of(dtype, value: float, operator_name: str):
    if math.isnan(value):
        return False  # every comparison with NaN is False
    below_one = dtype in _BELOW_ONE
    if operator_name == "lt":
        return False if value <= 0 else True if below_one and value >= 1 else None
    if operator_name == "le":
        return False if value < 0 else True if below_one and value >= 1 else None
    if operator_name == "gt":
        return True if value < 0 else False if below_one and value >= 1 else None
    if operator_name == "ge":
        return True if value <= 0 else False if below_one and value >= 1 else None
    return None
