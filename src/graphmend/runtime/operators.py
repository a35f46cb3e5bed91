"""graphmend's per-call operators, registered on a plain ``torch.library.Library``.

``torch.library.custom_op`` wraps every call in Python layers (its autograd function and
dispatch checks): about 7 us a call on this CPU, paid by each deferred output
(``graphmend::emit_effect``), lowered guard (``graphmend::fail_unless``) and check
message (``graphmend::check_message``) on every call of a compiled model. None of them
takes part in autograd (an output call, a guard and a message have no gradient; their
tensor operands are read, never differentiated), so their kernels are registered
directly as ``CompositeExplicitAutograd``, for every device: about 1.7 us a call
(``bench/operator_overhead.py``). Their fake kernels and ordering are registered as
custom_op's would be.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from graphmend.torch_adapter import ops

NAMESPACE = "graphmend"

# Kept for the life of the process: dropping a Library object removes its registrations.
_LIBRARY = torch.library.Library(NAMESPACE, "FRAGMENT")


def define(schema: str, kernel: Callable, fake: Callable, *, ordered: bool = False):
    """Define ``graphmend::<schema>`` with ``kernel`` and its trace-time ``fake``; an
    ``ordered`` operator is kept although it returns nothing and is never moved past
    another ordered one. Returns the operator (``torch.ops.graphmend.<name>``)."""
    name = schema.split("(", 1)[0]
    # Every operator here does its work when the graph runs (prints, raises, renders a
    # message), never while it is traced. Fake tensors run an operator whose tensor
    # operands are all constants (``torch.tensor(1)`` in the traced code) for real,
    # unless it is tagged as seeded nondeterministic: TorchDynamo's trace and
    # AOTAutograd's would each have performed the effect once more. The tag also keeps
    # inductor from folding the operator into a constant and keeps calls in order.
    _LIBRARY.define(schema, tags=(torch.Tag.nondeterministic_seeded,))
    _LIBRARY.impl(name, kernel, "CompositeExplicitAutograd")
    torch.library.register_fake(f"{NAMESPACE}::{name}", fake, lib=_LIBRARY)
    if ordered:
        ops.register_ordered_effect(f"{NAMESPACE}::{name}")
    return getattr(torch.ops.graphmend, name)
