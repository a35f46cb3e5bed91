"""A tensor's integers, copied to a Python list, kept inside the graph (the Capture rule,
``rules/capture/values.py``).

``sizes = counts.tolist()`` copies a tensor's values to Python numbers, which TorchDynamo
does not read while tracing: it breaks the graph there unless the global flag
``capture_scalar_outputs`` is set (which changes every ``.item()`` of the program). A
mixture of experts counts the tokens each expert got and splits the sorted tokens by
those counts (``inputs.split(sizes)``): the numbers only size the pieces, and never have
to be known while tracing. On the compiled path, once ``may_capture(counts)`` claimed the
statement's break, ``captured_values(counts)`` traces ``counts.tolist()`` with the fake tensors allowed to give each number an unbacked size,
for this call alone; the graph reads the numbers with the operator the original calls
(``aten._local_scalar_dense``, one per element) and the list holds the same Python ints
when it reaches the program. Eagerly the original ``.tolist()`` runs.

Kept in the graph only when (while tracing, each registered in
``graphmend.core.legality``):

- ``C210 values_are_integers_of_a_static_count``: the tensor is a plain tensor of one
  dimension (or none) of a static length of at most ``MOST_VALUES``, of an integer
  dtype (TorchDynamo reads no other), on a device that holds values.
- the claim on the break (``graphmend.runtime.claims``, a VALUES claim): the checks of
  the whole trace refuse it where joining the graphs would change what the program
  does. Under autograd it joins as an ``.item()`` kept for a check does: integers put
  nothing differentiable in the graph, and the operators that read them are the
  program's own, differentiated as the original's graphs did where the backend's
  backward is known (``whole_trace_conditions.joins_under_grad``).

A number that tracing then needs on the host (a branch on it, an index of a module list)
makes the conversion fail with ``GuardOnDataDependentSymNode``; the frame is then traced
again with the original ``.tolist()`` and its break
(``graphmend.runtime.conversion_failures``). Where the graph breaks with such a number
on TorchDynamo's stack, the capture removed no break and is refused
(``whole_trace_conditions.captured_sizes_decide_no_break``).
"""

from __future__ import annotations

import torch

from graphmend.core.legality import failed
from graphmend.runtime import claims, dynamic_shapes, trace_decisions
from graphmend.runtime.graph_inspection import unbacked_symbols
from graphmend.runtime.selection import is_plain_tensor
from graphmend.runtime.store import store
from graphmend.torch_adapter.tracing import (
    allow_tensor_numbers,
    comptime,
    reads_tensor_numbers,
    realized,
    translator_of,
)

# A list longer than this is not captured: each number is an operator of the graph.
MOST_VALUES = 256
# On the trace's output graph: whether its fake tensors gave numbers before the capture.
_ALLOWED_BEFORE = "_graphmend_numbers_allowed_before"
_INTEGER_DTYPES = frozenset({torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8})


def may_capture(tensor) -> bool:
    """While tracing: whether ``tensor.tolist()`` may keep its numbers in the graph (a
    claim on the statement's break). Not tracing, False."""
    claimed = False
    if torch.compiler.is_compiling() and is_plain_tensor(tensor):
        comptime(_decide)
    return claimed


def captured_values(tensor):
    """``tensor.tolist()``, its numbers read in the graph (once ``may_capture`` claimed it)."""
    comptime(_allow_numbers)
    values = tensor.tolist()
    comptime(_made_numbers)
    return values


def _decide(context) -> None:
    trace_decisions.decide_in_trace(context, "claimed", ("tensor",), _claim_values, read=realized)


def why_not_values_of_a_static_count(tensor) -> str | None:
    """C210: one dimension or none, a static length of at most ``MOST_VALUES``, an
    integer dtype, on a device that holds values."""
    if not isinstance(tensor, torch.Tensor) or tensor.dim() > 1:
        return failed("C210", "values_are_integers_of_a_static_count: not a tensor of one dimension")
    if not all(type(size) is int for size in tensor.shape) or tensor.numel() > MOST_VALUES:
        return failed(
            "C210", f"values_are_integers_of_a_static_count: not a static count of at most {MOST_VALUES} values"
        )
    if tensor.dtype not in _INTEGER_DTYPES or tensor.device.type == "meta":
        return failed("C210", "values_are_integers_of_a_static_count: not integers on a device that holds values")
    return None


def _claim_values(translator, variable) -> bool:
    from graphmend.torch_adapter.tracing import TensorVariable

    if type(variable) is not TensorVariable:
        return False
    fake = variable.as_proxy().node.meta.get("example_value")
    reason = why_not_values_of_a_static_count(fake)
    if reason is not None:
        claims.decline_at_user_site(translator, reason)
        return False
    if reads_tensor_numbers(translator):
        # No break to remove (``fullgraph=True``, ``capture_scalar_outputs``): the call
        # stays as written.
        return False
    if not claims.claim_break_at_user_site(translator, kind=claims.VALUES):
        return False
    user = trace_decisions.user_translator(translator)
    dynamic_shapes.captures_claimed().append((user.f_code.co_filename, user.lineno))
    return True


def _allow_numbers(context) -> None:
    translator = translator_of(context)
    setattr(translator.output, _ALLOWED_BEFORE, allow_tensor_numbers(translator, True))


def _made_numbers(context) -> None:
    translator = translator_of(context)
    allow_tensor_numbers(translator, getattr(translator.output, _ALLOWED_BEFORE, False))
    shape_env = translator.output.shape_env
    site = dynamic_shapes.captures_claimed()[-1]
    for item in getattr(translator.symbolic_locals.get("values"), "items", ()):
        number = getattr(item, "sym_num", None)
        if number is not None and unbacked_symbols(number):
            claims.record_size_made(shape_env, number, site)
    store.captures.sizes_made = dynamic_shapes.sizes_made() + 1
