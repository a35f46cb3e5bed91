"""Torch's private operator, shape, autograd and module internals the runtime reads.

Not TorchDynamo's: what torch itself keeps private about its operators (ATen packets,
effect ordering, ``_assert_async``), its fake sizes, its print options, the autograd
sequence number and the base classes of its dropout and batch-norm modules. Importing
this module imports torch and nothing private of it; each function imports what it reads.
"""

from __future__ import annotations

import torch


def is_op_overload_packet(value) -> bool:
    """Whether ``value`` is an operator of ``torch.ops`` with its overloads (``torch.ops.aten.add``)."""
    return isinstance(value, torch._ops.OpOverloadPacket)


def register_ordered_effect(qualified_name: str) -> None:
    """Make the operator ``qualified_name`` (``namespace::name``) an ordered side effect:
    kept although it returns nothing, and never moved past another ordered one."""
    torch.library._register_effectful_op(qualified_name, torch.library.EffectType.ORDERED)


# ``assert_async(holds, message)``: fail with ``message`` when the tensor ``holds`` is
# false, without copying it to the host. Traced code calls it: the very function, so
# that TorchDynamo and an eager traceback see no frame of graphmend's around it.
assert_async = torch._assert_async


def aten_gelu():
    """The ATen ``gelu`` that ``torch.nn.functional.gelu`` is (``torch._C._nn.gelu``)."""
    return torch._C._nn.gelu


def parse_to_arguments(*args, **kwargs) -> tuple:
    """(device, dtype, non_blocking, memory_format) that ``tensor.to(*args, **kwargs)``
    reads from its arguments (``torch._C._nn._parse_to``); raises what ``to`` raises."""
    return torch._C._nn._parse_to(*args, **kwargs)


def fake_shape_env():
    """The shape environment of the fake kernel now running (``torch.library.get_ctx()``)."""
    return torch.library.get_ctx()._shape_env


def allocate_data_dependent_size(shape_env, **bounds):
    """A fresh size symbol of ``shape_env`` (``min_val=``...), known only when the
    operator runs, as ``ctx.new_dynamic_size()`` makes one without asking for the flag
    that allows it."""
    from torch._library.fake_impl import allocate_size

    return allocate_size(shape_env, **bounds)


def tensor_leaves(value) -> list:
    """The leaves of a nested structure of tuples, lists and dicts (``torch.utils._pytree``)."""
    return torch.utils._pytree.tree_leaves(value)


def print_options():
    """The object ``torch.set_printoptions`` writes (``torch._tensor_str.PRINT_OPTS``), or None."""
    return getattr(torch._tensor_str, "PRINT_OPTS", None)


def inductor_draws_as_eager():
    """A context in which TorchInductor compiles random-number ops to eager's own
    (``fallback_random``)."""
    import torch._inductor.config as inductor_config

    return inductor_config.patch(fallback_random=True)


def autograd_sequence_number() -> int:
    """The sequence number the next autograd node made in this thread gets."""
    return torch.autograd._get_sequence_nr()


def dropout_module_types() -> tuple[type, ...]:
    """The base class of torch's dropout modules (``Dropout``, ``Dropout2d``, ...)."""
    return (torch.nn.modules.dropout._DropoutNd,)


def batch_norm_module_types() -> tuple[type, ...]:
    """The base class of torch's batch-norm modules (``BatchNorm1d``, ...)."""
    return (torch.nn.modules.batchnorm._BatchNorm,)
