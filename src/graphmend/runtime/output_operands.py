"""An output call's arguments as a constant template and the operands a graph passes.

While tracing, the arguments of ``print``, a logger call or ``warnings.warn`` are split
(``split_arguments``): tensors, integers and sizes at the top level are operands of the
output operator, with their values at the call (a symbolic size or integer is not
specialised by printing it); everything else is a constant of the template, where its
text cannot change after the call (``has_fixed_text``). ``slots`` say where each operand
goes back when the graph runs (``graphmend.runtime.output_effects``).
"""

from __future__ import annotations

import torch

from graphmend.core.legality import failed
from graphmend.runtime import output_call_arguments as arguments
from graphmend.runtime.claims import decline_at_user_site
from graphmend.runtime.trace_decisions import decide_in_trace
from graphmend.torch_adapter.tracing import (
    comptime,
    first_compilation_of_the_frame,
    holds_no_items,
    holds_unread_items,
)

_ELEMENTS_UNREAD_REASON = failed(
    "D209",
    "a list or tuple argument holds a value the frame has not read:"
    " the graph would guard on it, the original's break did not"
)
# A list empty in a frame's first compilation (``.tolist()`` of a tensor with no
# elements) may hold numbers the frame never reads on a later call, which keeps the
# break there; the code after it would then be compiled anew, where the original's
# later compilation reuses the code its first one compiled after the same break. In a
# later compilation that code exists already (G205 decides there).
_EMPTY_REASON = failed(
    "D209",
    "a list or tuple argument is empty here: a later call's may hold values the frame never reads,"
    " keeping the break there, after a first compilation that made none"
)

# Values whose text cannot change after the call: printing them later in the graph,
# or from a registry snapshot, shows what printing them at the call would show.
# A mutable object (a list the program changes, a user object with ``__repr__``)
# is printed eagerly instead.
_FIXED_TEXT_TYPES = (
    type(None), bool, int, float, complex, str, bytes, torch.Size, torch.dtype, torch.device,
    type,  # a class, such as a warning category: shown by its name
)


def has_fixed_text(value) -> bool:
    """Whether ``value``'s text cannot change after the call (a constant of a fixed type)."""
    if type(value) in _FIXED_TEXT_TYPES:
        return True
    if type(value) is tuple or type(value) is frozenset:
        return all(has_fixed_text(item) for item in value)
    return False


def _plain_tensor(value) -> bool:
    """A tensor whose printed text inside the graph is its text at the call.

    Autograd history (``grad_fn=``, ``requires_grad=True``), ``Parameter containing:``
    and subclasses print differently inside a graph, so those are printed eagerly."""
    return (
        type(value) is torch.Tensor
        and not value.requires_grad
        and value.layout == torch.strided
    )


TENSOR, INT, SIZE = "tensor", "int", "size"
LIST, TUPLE, CONSTANT = "list", "tuple", "constant"
# ``.item()`` of a tensor operand, made when the graph runs: an argument that is one
# (its extent the value's kind), or an f-string's pieces with reads among them (its
# extent, per read, the kind, conversion and format spec).
ITEM, TEXT = "item", "text"


def _item_kind(value) -> str | None:
    """The kind of Python number ``value.item()`` gives (``output_call_arguments``), where
    it gives one for every value of the tensor: one element of a plain strided tensor,
    its number of elements known while tracing. Else None."""
    if not (isinstance(value, torch.Tensor) and type(value) is torch.Tensor and value.layout == torch.strided):
        return None
    if value.is_quantized:
        return None
    elements = value.numel()
    if type(elements) is not int or elements != 1:
        return None
    if value.dtype.is_complex:
        return arguments.COMPLEX_ITEM
    if value.dtype.is_floating_point:
        return arguments.FLOAT_ITEM
    return arguments.INTEGER_ITEM


def _split_item_reads(value, formats, tensors: list):
    """For an argument the rewritten code marked as read with ``.item()`` (``formats``
    None) or as an f-string's pieces (``formats``: per read, its piece's index,
    conversion and spec): (template entry, slot kind, extent), or None."""
    if formats is None:
        kind = _item_kind(value)
        if kind is None:
            return None
        tensors.append(value)
        return None, ITEM, kind
    if type(value) is not tuple:
        return None
    read_at = {index: (conversion, spec) for index, conversion, spec in formats}
    text, reads = [], []
    for index, piece in enumerate(value):
        if index in read_at:
            kind = _item_kind(piece)
            if kind is None:
                return None
            text.append(None)
            reads.append((kind, *read_at[index]))
            tensors.append(piece)
        elif type(piece) is str:
            text.append(piece)
        else:
            return None
    return tuple(text), TEXT, tuple(reads)


def item_text(value, conversion: str, spec: str) -> str:
    """What an f-string's ``{t.item()!conversion:spec}`` gives."""
    if conversion:
        value = {"s": str, "r": repr, "a": ascii}[conversion](value)
    return format(value, spec)


def elements_unread(value) -> bool:
    """While traced: whether the list or tuple holds an element the frame has not read.
    The original's output call breaks the graph without reading them (a print of a list
    from ``.tolist()``, made before the break, is guarded on the list's length); printed
    in the graph, each would be guarded on its value, and the frame compiled again for
    each new value. Such a call keeps its break."""
    unread = False
    comptime(_decide_elements_unread)
    return unread


def _decide_elements_unread(context) -> None:
    decide_in_trace(context, "unread", ("value",), _unread_and_declined, read=lambda variable: variable)


def _unread_and_declined(translator, variable) -> bool:
    if holds_unread_items(variable):
        decline_at_user_site(translator, _ELEMENTS_UNREAD_REASON)
        return True
    if holds_no_items(variable) and first_compilation_of_the_frame(translator):
        decline_at_user_site(translator, _EMPTY_REASON)
        return True
    return False


def _split_sequence(value, tensors: list, integers: list):
    """The elements of a list or tuple as slots (one level deep), or None."""
    elements = []
    for item in value:
        if isinstance(item, torch.Tensor):
            if not _plain_tensor(item):
                return None
            elements.append((TENSOR,))
            tensors.append(item)
        elif type(item) is int:
            elements.append((INT,))
            integers.append(item)
        elif has_fixed_text(item):
            elements.append((CONSTANT, item))
        else:
            return None
    return tuple(elements)


def split_arguments(args: tuple, kwargs: dict, item_reads: tuple = ()):
    """(template, slots, tensors, integers), or None when some argument must be
    printed eagerly. Runs while tracing: every test here is static for TorchDynamo.

    Tensors, integers and sizes at the top level are operands of the effect operator
    (``slots`` says where each goes back): their values are those at the call, and a
    symbolic size or integer is not specialised by printing it. Everything else is a
    constant of the template. ``item_reads`` (from the rewritten code: position and
    formats) marks the arguments whose tensors are read with ``.item()`` when the graph
    runs (``_split_item_reads``)."""
    template, slots, tensors, integers = [], [], [], []
    read_formats = dict(item_reads)
    for index, value in enumerate(args):
        if index in read_formats:
            split = _split_item_reads(value, read_formats[index], tensors)
            if split is None:
                return None
            entry, slot_kind, extent = split
            template.append(entry)
            slots.append((index, slot_kind, extent))
        elif isinstance(value, torch.Tensor):
            if not _plain_tensor(value):
                return None
            template.append(None)
            slots.append((index, TENSOR, 1))
            tensors.append(value)
        elif type(value) is int:
            template.append(None)
            slots.append((index, INT, 1))
            integers.append(value)
        elif type(value) is torch.Size:
            template.append(None)
            slots.append((index, SIZE, len(value)))
            integers.extend(value)
        elif has_fixed_text(value):
            template.append(value)
        elif type(value) is list or type(value) is tuple:
            # Its elements as they are at the call (TorchDynamo follows the list's
            # contents while tracing); a tensor in it is an operand like any other.
            if elements_unread(value):
                return None
            elements = _split_sequence(value, tensors, integers)
            if elements is None:
                return None
            template.append(None)
            slots.append((index, LIST if type(value) is list else TUPLE, elements))
        else:
            return None
    for value in kwargs.values():
        if isinstance(value, torch.Tensor):
            return None
    return tuple(template), tuple(slots), tensors, integers
