"""What Where's rewritten code calls: the selection and the checks made while tracing.

Every function here is traced by TorchDynamo and decides only from facts it knows
statically (types, shapes, dtypes, devices, grad mode, ``requires_grad``, and the
graph captured so far), so calling one costs no graph break.
"""

from __future__ import annotations

import torch

from graphmend.core.legality import failed
from graphmend.runtime import claims, graph_inspection, trace_decisions
from graphmend.torch_adapter.tracing import comptime, translator_of

# Tensors whose operations run none of the program's Python code: a subclass's
# ``__torch_function__`` (or dispatch) would see the untaken arm's operations and the
# selection's ``torch.where``, which the original never calls.
PLAIN_TENSOR_TYPES = (torch.Tensor, torch.nn.Parameter)


def is_plain_tensor(value) -> bool:
    """``value`` is a tensor of no subclass. Traced, decided from TorchDynamo's variable
    (``type(value)`` in traced code would make TorchDynamo store the class as a global
    of the user's module)."""
    if not torch.compiler.is_compiling():
        return type(value) in PLAIN_TENSOR_TYPES
    plain = False
    comptime(_decide_plain)
    return plain


def _decide_plain(context) -> None:
    trace_decisions.decide_in_trace(
        context, "plain", ("value",), lambda _tracer, kind: kind in PLAIN_TENSOR_TYPES,
        read=lambda variable: variable.python_type(),
    )


def select(predicate, value_if_true, value_if_false):
    """Pick between the values two branch arms computed, inside the graph when possible.

    ``torch.where`` is used only when it returns exactly what the taken arm computed:
    two plain tensors (no subclass) of one shape, dtype, device, layout and strides, and
    no autograd through them. ``torch.where`` lays its result out as its first tensor
    operand, whichever arm is taken: arms laid out differently (an input transposed by
    the caller, ``x * 2`` against ``y + 1``) would change what ``stride()``,
    ``is_contiguous()`` and ``view`` see. Under autograd the backward of
    ``torch.where`` multiplies the untaken arm's derivative by zero, and an infinite
    derivative there (``sqrt`` at 0, ``log`` at 0, a division) turns the gradient into
    NaN; the plain Python choice then keeps the original behaviour (and its graph
    break).

    A ``torch.where`` between values that require no grad (a mask, a scale chosen from
    the input) is noted on the statement's claim (``claims.note_selection``): where the
    statement recorded nothing for autograd, it may join a graph that records autograd
    elsewhere (``whole_trace_conditions.joins_under_grad``).
    """
    if value_if_true is value_if_false:
        return value_if_true
    exact = (
        is_plain_tensor(value_if_true)
        and is_plain_tensor(value_if_false)
        and is_plain_tensor(predicate)
        and predicate.dtype == torch.bool
        and predicate.dim() == 0
        and value_if_true.shape == value_if_false.shape
        and value_if_true.dtype == value_if_false.dtype
        and value_if_true.device == value_if_false.device
        and predicate.device == value_if_true.device
        and value_if_true.layout == torch.strided
        and value_if_false.layout == torch.strided
        and value_if_true.stride() == value_if_false.stride()
    )
    differentiable = exact and (value_if_true.requires_grad or value_if_false.requires_grad)
    if exact and not differentiable:
        selected = torch.where(predicate, value_if_true, value_if_false)
        if torch.compiler.is_compiling():
            comptime(_note_selection)
        return selected
    if isinstance(predicate, torch.Tensor) and torch.compiler.is_compiling():
        # Choosing in Python would break the graph here, inside the runtime, as well as
        # at the call: worse than the original's one break at its ``if``. Values that
        # only autograd keeps apart are refused only while grad mode is on.
        if differentiable:
            comptime(_refuse_python_choice_under_grad)
        else:
            comptime(_refuse_python_choice)
    return value_if_true if predicate else value_if_false


def _note_selection(context) -> None:
    claims.note_selection(translator_of(context))


def _refuse_python_choice_under_grad(context) -> None:
    claims.refuse_claim_at_user_site(
        translator_of(context),
        failed("W207", "the arms cannot be selected inside the graph: they require grad, and autograd "
               "would differentiate the untaken arm too"),
        claims.UNDER_GRAD,
    )


def _refuse_python_choice(context) -> None:
    claims.refuse_claim_at_user_site(
        translator_of(context),
        failed("W207", "the arms cannot be selected inside the graph: they are not two plain tensors "
               "of one shape, dtype, device and strides with no autograd"),
    )


def _is_number(value) -> bool:
    return type(value) in (int, float, bool)


def _has_kind(value, kind: str) -> bool:
    if isinstance(value, torch.Tensor):
        if not is_plain_tensor(value):
            return False
        if value.is_complex() or value.layout != torch.strided:
            return False
        if kind in ("number", "tensor"):
            return True
        if kind == "not_bool":
            return value.dtype != torch.bool
        if kind == "floating":
            return value.is_floating_point()
        if kind == "integral":
            return value.dtype == torch.bool or not (value.is_floating_point())
        return False
    if kind == "tensor" or not _is_number(value):
        return False
    if kind == "not_bool":
        return type(value) is not bool
    if kind == "integral":
        return type(value) in (int, bool)
    return True


def _note_graph_so_far(context) -> None:
    """Run by TorchDynamo while it traces ``graph_so_far_may_continue`` (``comptime``):
    bind that function's local ``may_continue`` to whether the graph captured so far
    draws no random numbers (and, if so, make the claim). Anything unexpected leaves it
    False: the original branch is kept."""
    trace_decisions.decide_in_trace(context, "may_continue", (), _may_continue)


def _may_continue(tracer) -> bool:
    output = tracer.output
    if any(graph_inspection.draws_random_numbers(node, output) for node in graph_inspection.computed_nodes(output)):
        return False
    return claims.claim_break_at_user_site(tracer)


def graph_so_far_may_continue() -> bool:
    """While TorchDynamo traces: True when the graph captured up to here draws no
    random numbers (False when not tracing); the claim on the branch's break is then
    made.

    The graph so far is the original's graph up to this branch, where the original
    breaks. Joining it to the code after the branch changes what AOTAutograd does
    with it: a random draw whose value ends up unused is dropped (the generator's
    stream would not advance). What joining changes under autograd is judged once the
    trace is complete: a selection that records autograd itself is refused
    (``whole_trace_conditions.joined_graph_records_no_autograd``), the gradients must
    be summed as the original's graphs summed them, and a tensor saved for backward
    and updated in place after the branch, which fails AOTAutograd's compile where the
    original only fails if backward runs, keeps the break
    (``whole_trace_conditions.backend_compiles_the_joined_graph``).
    The answer is a constant of the trace: no guard, no global written.
    """
    may_continue = False
    comptime(_note_graph_so_far)
    return may_continue


def operands_combine(*operands) -> bool:
    """True when elementwise code over these ``(value, kind)`` pairs cannot raise,
    and the graph captured so far may continue past the branch
    (``graph_so_far_may_continue``). Values that require grad may be combined: where
    the arms' values require grad, ``select`` refuses the claim while grad mode is on
    (autograd would differentiate the untaken arm), and where the arms record autograd
    on the way to values that do not, the whole trace refuses it
    (``whole_trace_conditions.joined_graph_records_no_autograd``).

    Each value must be of its kind (see ``graphmend.analysis.safety``), all tensors on
    one device, and their shapes must broadcast together: then so does every value
    computed from them by elementwise operations and full reductions. Tensors of more
    than one dimension must be laid out alike (all contiguous, all channels-last, or
    all of one shape and strides): elementwise results keep their operands' layout, and
    arms laid out differently are selected outside the graph (``select``), a break
    inside the runtime where the original branch breaks in the program.
    """
    if not graph_so_far_may_continue():
        return False
    shapes = []
    device = None
    for value, kind in operands:
        if not _has_kind(value, kind):
            return False
        if isinstance(value, torch.Tensor):
            if device is None:
                device = value.device
            elif value.device != device and value.dim() != 0:
                return False
            shapes.append(tuple(value.shape))
    if not _laid_out_alike([value for value, _ in operands if isinstance(value, torch.Tensor)]):
        return False
    longest = 0
    for shape in shapes:
        if len(shape) > longest:
            longest = len(shape)
    for position in range(1, longest + 1):
        size = 1
        for shape in shapes:
            if len(shape) >= position:
                dimension = shape[-position]
                if dimension != 1:
                    if size != 1 and dimension != size:
                        return False
                    size = dimension
    return True


def _laid_out_alike(tensors) -> bool:
    # Compared with ``==``, not hashed: under dynamic shapes sizes and strides are
    # symbolic, which TorchDynamo cannot put in a set without a break.
    first = None
    for tensor in tensors:
        if tensor.dim() < 2:
            continue
        if tensor.is_contiguous():
            layout = ("contiguous",)
        elif tensor.dim() == 4 and tensor.is_contiguous(memory_format=torch.channels_last):
            layout = ("channels_last",)
        else:
            layout = ("strided", tuple(tensor.shape), tuple(tensor.stride()))
        if first is None:
            first = layout
        elif layout != first:
            return False
    return True


def moves_nothing(tensor, destination) -> bool:
    """``tensor.to(destination)`` returns ``tensor`` itself: a device move that moves nothing."""
    if not isinstance(tensor, torch.Tensor):
        return False
    if isinstance(destination, str):
        destination = torch.device(destination)
    if not isinstance(destination, torch.device):
        return False
    return destination == tensor.device
