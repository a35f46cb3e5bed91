"""Positions of nonzero elements, kept inside the graph (the Capture rule).

``torch.nonzero(x)``, ``x.nonzero()``, ``torch.where(x)`` and ``torch.argwhere(x)`` give
as many positions as ``x`` has nonzero elements: an output size that depends on tensor
data, which TorchDynamo captures only under ``capture_dynamic_output_shape_ops`` (a
global flag that changes other code too) and otherwise breaks the graph at. Rewritten
code calls the functions here on its compiled path only: each computes the positions
with ``graphmend::nonzero``, an operator that runs ``torch.nonzero`` itself and, while
tracing, gives its output a fresh size for the one call (an unbacked size), so only the
rewritten calls are captured and the positions are the same numbers. The tuple forms
unbind the positions as ``torch.where`` does (``nonzero().unbind(1)``), so they are views
with the same strides.

A size made here that TorchDynamo must later know on the host (``.tolist()`` of the
positions, a shape that reaches Python) makes tracing fail with
``GuardOnDataDependentSymNode`` where the original broke the graph. The rule declines
the uses it can see; for any other, the frame runs eagerly as its original would
(``conversion_failures``), the frame being converted before any of it runs.
"""

from __future__ import annotations

import threading

import torch

_state = threading.local()


def sizes_made() -> int:
    """How many sizes ``graphmend::nonzero`` made on this thread while tracing."""
    return getattr(_state, "sizes_made", 0)


@torch.library.custom_op("graphmend::nonzero", mutates_args=())
def _nonzero(x: torch.Tensor) -> torch.Tensor:
    return torch.nonzero(x)


@_nonzero.register_fake
def _nonzero_while_tracing(x: torch.Tensor) -> torch.Tensor:
    # ``ctx.new_dynamic_size()`` refuses unless the global flag is set; the size is made
    # the way it makes it, for this operator alone.
    from torch._library.fake_impl import allocate_size

    count = allocate_size(torch.library.get_ctx()._shape_env)
    _state.sizes_made = sizes_made() + 1
    return x.new_empty((count, x.dim()), dtype=torch.long)


def _captured(x) -> bool:
    # Eagerly (``graphmend fix`` may write these calls on the one path) the original op.
    return torch.compiler.is_compiling() and isinstance(x, torch.Tensor) and x.dim() > 0 and not x.is_sparse


def captured_nonzero(x, *args, **kwargs):
    """``torch.nonzero(x, as_tuple=...)``, captured."""
    if not _captured(x) or args or set(kwargs) - {"as_tuple"}:
        return torch.nonzero(x, *args, **kwargs)
    positions = _nonzero(x.detach())
    return positions.unbind(1) if kwargs.get("as_tuple", False) else positions


def captured_nonzero_method(x, *args, **kwargs):
    """``x.nonzero(as_tuple=...)``, captured (any other object's ``nonzero`` is called)."""
    if not _captured(x) or args or set(kwargs) - {"as_tuple"}:
        return x.nonzero(*args, **kwargs)
    positions = _nonzero(x.detach())
    return positions.unbind(1) if kwargs.get("as_tuple", False) else positions


def captured_where(x, *args, **kwargs):
    """``torch.where(x)`` with the one argument, captured."""
    if not _captured(x) or args or kwargs:
        return torch.where(x, *args, **kwargs)
    return _nonzero(x.detach()).unbind(1)


def captured_argwhere(x, *args, **kwargs):
    """``torch.argwhere(x)``, captured."""
    if not _captured(x) or args or kwargs:
        return torch.argwhere(x, *args, **kwargs)
    return _nonzero(x.detach())
