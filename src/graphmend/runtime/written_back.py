"""Where's tensor attribute written back as its own conversion
(``rules/where/written_back.py``).

``self.pos_encoding = self.pos_encoding.to(device=device, dtype=x.dtype)`` keeps a
tensor a module holds on the input's device and dtype. Where it is there already,
``to`` returns the tensor itself and the write puts back the object the attribute holds:
nothing changes. TorchDynamo breaks the graph at the write all the same (a buffer's
registration reads the tensor's Python attributes, which it does not model).

``converts_nothing(owner, name, *args, **kwargs)`` answers, while traced, whether the
write may be left out: True only when the conversion returns the tensor itself and the
write runs no code of the program or of torch that would change anything. The answer
is a constant of the trace; the decision reads the attribute as the original statement
does, so TorchDynamo guards on the tensor's type, device and dtype (and on the
arguments' values), and a call where the conversion would move it, or where the
attribute holds something else, traces again. A
write left out is a DECIDED claim on its break (``graphmend.runtime.claims``), which the
checks of the whole trace may refuse. Not traced: False (the original write runs).

Left out only when (each registered in ``graphmend.core.legality``):

- ``W219 conversion_returns_the_tensor``: the attribute holds a plain tensor, and
  ``to(*args, **kwargs)`` names its own device and dtype (or none), no memory format and
  no copy; the trace reads the attribute as a tensor, guarding its type, device and
  dtype (``attribute_guarded_as_read``), so a later call where the program moved,
  converted or replaced it traces again;
- ``W220 writing_it_back_changes_nothing``: the owner is an ``nn.Module`` whose class
  keeps torch's ``__getattr__``, ``__getattribute__``, ``__setattr__`` and
  ``register_buffer``, no property of that name (reading or writing the attribute runs
  none of the program's code, which the write left out would not run); for a
  buffer, no global buffer-registration hook is set (the trace is guarded on there
  being none, so one registered later makes the next call trace again) and the
  buffer's persistence would be registered as it is; a plain attribute is not a tensor marked as a buffer (writing
  it would register one);
- ``W221 attribute_not_written_in_the_trace``: the trace has not changed the owner
  before the write (TorchDynamo makes such writes after the graph, so the object read
  now would not be the one the original writes back).
"""

from __future__ import annotations

import torch

from graphmend.core.legality import failed
from graphmend.runtime import claims, trace_decisions
from graphmend.runtime.attribute_access import _traced_object
from graphmend.torch_adapter import ops
from graphmend.torch_adapter.tracing import comptime, realized


def converts_nothing(owner, name, *args, **kwargs) -> bool:
    """While traced: whether ``owner.name = owner.name.to(*args, **kwargs)`` changes
    nothing and may be left out. Not traced: False."""
    unchanged = False
    if torch.compiler.is_compiling():
        comptime(_decide)
    return unchanged


def _decide(context) -> None:
    trace_decisions.decide_in_trace(
        context, "unchanged", ("owner", "name", "args", "kwargs"), _unchanged, read=realized,
    )


def _unchanged(translator, owner_variable, name, args, kwargs) -> bool:
    owner = _traced_object(owner_variable)
    name = name.as_python_constant()
    args, kwargs = args.as_python_constant(), kwargs.as_python_constant()
    reason = (
        conversion_returns_the_tensor(owner, name, args, kwargs)
        or writing_it_back_changes_nothing(owner, name)
        or attribute_not_written_in_the_trace(translator, owner_variable)
        or attribute_guarded_as_read(translator, owner_variable, name)
    )
    if reason is not None:
        claims.decline_at_user_site(translator, reason)
        return False
    if not claims.claim_break_at_user_site(translator, claims.DECIDED):
        return False
    if name in owner._buffers:
        _guard_no_buffer_registration_hook()
    return True


def _guard_no_buffer_registration_hook() -> None:
    """Guard the trace on there being no global buffer-registration hook, as when it
    was decided: a hook registered later runs at every write the original makes."""
    from graphmend.torch_adapter import guards

    # ``__import__`` of a dotted name gives the top package: the source walks down from it.
    source = guards.module_source("torch")
    for attribute in ("nn", "modules", "module", "_global_buffer_registration_hooks"):
        source = guards.attribute_source(source, attribute)
    guards.install_guards((source, guards.LENGTH))


def _held(owner, name):
    if not isinstance(owner, torch.nn.Module):
        return None
    buffers = owner.__dict__.get("_buffers", {})
    return buffers[name] if name in buffers else owner.__dict__.get(name)


def conversion_returns_the_tensor(owner, name: str, args: tuple, kwargs: dict) -> str | None:
    """W219: ``owner.name`` is a plain tensor that ``to(*args, **kwargs)`` returns itself."""
    tensor = _held(owner, name)
    if type(tensor) is not torch.Tensor:
        return failed("W219", f"conversion_returns_the_tensor: `{name}` does not hold a plain tensor")
    if kwargs.get("copy", False) or set(kwargs) - {"device", "dtype", "non_blocking", "copy"}:
        return failed("W219", "conversion_returns_the_tensor: the conversion copies or names a memory format")
    try:
        device, dtype, _non_blocking, memory_format = ops.parse_to_arguments(*args, **kwargs)
    except Exception:  # noqa: BLE001 - arguments the original's call rejects: it raises there
        return failed("W219", "conversion_returns_the_tensor: the conversion's arguments are not understood")
    if memory_format is not None:
        return failed("W219", "conversion_returns_the_tensor: the conversion names a memory format")
    if device is not None and torch.device(device) != tensor.device:
        return failed("W219", f"conversion_returns_the_tensor: `{name}` is moved to another device")
    if dtype is not None and dtype != tensor.dtype:
        return failed("W219", f"conversion_returns_the_tensor: `{name}` is converted to another dtype")
    return None


def attribute_guarded_as_read(translator, owner_variable, name: str) -> str | None:
    """W219, for later calls: the trace reads ``owner.name`` as the original's statement
    does, so its guards (the tensor's type, device and dtype) hold the decision to the
    tensor it was made for. Without them a call after the program moved, converted or
    replaced the attribute would run this trace and leave out a write (or the error of
    ``to`` on a value that is not a tensor) the original makes."""
    from graphmend.torch_adapter.tracing import TensorVariable, read_attribute

    try:
        read = read_attribute(translator, owner_variable, name)
    except Exception:  # noqa: BLE001 - a read TorchDynamo cannot make here
        read = None
    if type(read) is not TensorVariable:
        return failed("W219", f"conversion_returns_the_tensor: the trace cannot guard `{name}` as a tensor it reads")
    return None


def writing_it_back_changes_nothing(owner, name: str) -> str | None:
    """W220: reading the tensor runs torch's own ``__getattr__`` (and
    ``__getattribute__``), writing it back torch's own ``__setattr__`` and
    ``register_buffer``, and the write leaves the module as it was."""
    from torch.nn.modules import module as module_module

    cls = type(owner)
    if getattr(cls, "__setattr__", None) is not torch.nn.Module.__setattr__:
        return failed("W220", f"writing_it_back_changes_nothing: `{cls.__name__}` defines `__setattr__`")
    for reader in ("__getattr__", "__getattribute__"):
        # The original statement reads the attribute, and a reader of the program's own
        # runs there (a log of the names read); the write left out reads nothing.
        if getattr(cls, reader, None) is not getattr(torch.nn.Module, reader):
            return failed("W220", f"writing_it_back_changes_nothing: `{cls.__name__}` defines `{reader}`")
    if getattr(cls, "register_buffer", None) is not torch.nn.Module.register_buffer:
        return failed("W220", f"writing_it_back_changes_nothing: `{cls.__name__}` defines `register_buffer`")
    if hasattr(cls, name):
        return failed("W220", f"writing_it_back_changes_nothing: `{cls.__name__}.{name}` is a class attribute")
    tensor = _held(owner, name)
    marked_buffer = getattr(tensor, "_is_buffer", False)
    if name in owner._buffers:
        if getattr(module_module, "_global_buffer_registration_hooks", None):
            return failed("W220", "writing_it_back_changes_nothing: a global buffer-registration hook is set")
        persistent = tensor.persistent if marked_buffer else name not in owner._non_persistent_buffers_set
        if persistent != (name not in owner._non_persistent_buffers_set):
            return failed("W220", f"writing_it_back_changes_nothing: `{name}` would be registered with another persistence")
    elif marked_buffer:
        return failed("W220", f"writing_it_back_changes_nothing: writing `{name}` back would register it as a buffer")
    return None


def attribute_not_written_in_the_trace(translator, owner_variable) -> str | None:
    """W221: the trace has changed nothing of the owner before the write."""
    from graphmend import torch_adapter
    from graphmend.torch_adapter import guards

    root = guards.source_name(realized(owner_variable))
    if root is None:
        return failed("W221", "attribute_not_written_in_the_trace: the owner is not an object the trace can name")
    if torch_adapter.pending_write_under(translator.output, root):
        return failed("W221", "attribute_not_written_in_the_trace: the trace changed the owner before the write")
    return None
