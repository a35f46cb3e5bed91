"""What rewritten code checks while tracing before it reads or writes an attribute the
original code might not have touched: that the access runs none of the program's code.

Where's compiled form evaluates both arms of a branch, and leaves out writes it has shown
change nothing. Reading ``owner.a`` on the untaken path is unobservable only when the
read is a plain lookup: no ``__getattribute__`` or ``__getattr__`` of the program, no
property or other descriptor; leaving out ``owner.a = value`` is exact only when the
write would not have run a ``__setattr__`` or a property setter either. A call
``self.helper(...)`` that the analysis read in the enclosing class must reach that
function, not a subclass's override or a wrapper.

Each check is decided while TorchDynamo traces, from the real object behind the traced
value (``trace_decisions.decide_in_trace``), as a constant of the trace; TorchDynamo guards the
owner's type wherever the traced code reads its attributes. Anything unknown answers
False: the compiled form keeps the original branch.
"""

from __future__ import annotations

import types

import torch

from graphmend.core.legality import failed
from graphmend.runtime import claims, trace_decisions
from graphmend.runtime.selection import PLAIN_TENSOR_TYPES
from graphmend.torch_adapter.tracing import comptime, realized

_MISSING = object()

# ``__getattribute__`` of libraries that only map an alias to the attribute's real name
# (``attribute_map``) and then read it plainly: transformers' configurations.
_ALIASING_GETATTRIBUTE = {
    ("transformers.configuration_utils", "PretrainedConfig.__getattribute__"),
    ("transformers.configuration_utils", "PreTrainedConfig.__getattribute__"),
}
_PLAIN_SETATTR = (object.__setattr__, torch.nn.Module.__setattr__)


class _InstanceOf:
    """A traced tensor or builtin container: only its Python type is known (a tensor is
    fake while tracing, a list is TorchDynamo's model of it)."""

    def __init__(self, python_type):
        self.python_type = python_type


# Descriptors implemented in C by the interpreter: reading through one runs no Python code.
_C_DESCRIPTORS = (
    types.MethodDescriptorType, types.WrapperDescriptorType, types.ClassMethodDescriptorType,
    types.GetSetDescriptorType, types.MemberDescriptorType, types.BuiltinFunctionType,
)


def _class_lookup(cls, name: str):
    for klass in cls.__mro__:
        if name in vars(klass):
            return vars(klass)[name]
    return _MISSING


def _is_data_descriptor(value) -> bool:
    kind = type(value)
    return hasattr(kind, "__set__") or hasattr(kind, "__delete__")


def _instance_dict(owner) -> dict:
    try:
        found = object.__getattribute__(owner, "__dict__")
    except AttributeError:
        return {}
    return found if isinstance(found, dict) else {}


def why_reading_runs_code(owner, name: str) -> str | None:
    """None when ``owner.name`` exists and reading it runs none of the program's code."""
    if isinstance(owner, _InstanceOf):
        kind = owner.python_type
        if not (kind in PLAIN_TENSOR_TYPES or kind.__module__ == "builtins"):
            return f"a `{kind.__name__}` may define its attributes in Python"
        return None if hasattr(kind, name) else f"a `{kind.__name__}` has no attribute `{name}`"
    cls = type(owner)
    if isinstance(owner, (type, types.ModuleType)):
        return "an attribute of a class or module"
    getattribute = _class_lookup(cls, "__getattribute__")
    if not isinstance(getattribute, types.WrapperDescriptorType):  # the interpreter's own lookup, in C
        if (getattr(getattribute, "__module__", None), getattr(getattribute, "__qualname__", None)) not in (
            _ALIASING_GETATTRIBUTE
        ):
            return f"`{cls.__name__}` defines `__getattribute__`"
        aliases = _class_lookup(cls, "attribute_map")
        if isinstance(aliases, dict):
            name = aliases.get(name, name)
    found = _class_lookup(cls, name)
    if found is not _MISSING and _is_data_descriptor(found) and not isinstance(found, _C_DESCRIPTORS):
        return f"`{cls.__name__}.{name}` is a property or another descriptor"
    instance = _instance_dict(owner)
    if name in instance:
        return None
    if found is not _MISSING:
        if isinstance(found, (types.FunctionType, staticmethod, classmethod, *_C_DESCRIPTORS)) or not hasattr(
            type(found), "__get__"
        ):
            return None
        return f"`{cls.__name__}.{name}` is a descriptor"
    getattr_hook = _class_lookup(cls, "__getattr__")
    if getattr_hook is torch.nn.Module.__getattr__:
        for registry in ("_parameters", "_buffers", "_modules"):
            if name in instance.get(registry, {}):
                return None
        return f"`{name}` does not exist"
    if getattr_hook is not _MISSING:
        return f"`{cls.__name__}.__getattr__` would run"
    return f"`{name}` does not exist"


def why_writing_runs_code(owner, name: str) -> str | None:
    """None when ``owner.name = value`` runs no ``__setattr__`` or setter of the program."""
    if isinstance(owner, (_InstanceOf, type, types.ModuleType)):
        return "not an attribute of an object"
    cls = type(owner)
    if _class_lookup(cls, "__setattr__") not in _PLAIN_SETATTR:
        return f"`{cls.__name__}` defines `__setattr__`"
    found = _class_lookup(cls, name)
    if found is not _MISSING and _is_data_descriptor(found):
        return f"`{cls.__name__}.{name}` is a property or another descriptor"
    return None


def why_not_the_method(owner, name: str, qualified_name: str, module: str) -> str | None:
    """None when ``owner.name`` is the function ``module.qualified_name`` itself (no
    override in a subclass, no instance attribute in its place, no wrapper)."""
    reason = why_reading_runs_code(owner, name)
    if reason is not None:
        return reason
    if name in _instance_dict(owner):
        return f"an instance attribute stands in for the method `{name}`"
    found = _class_lookup(type(owner), name)
    if not (
        isinstance(found, types.FunctionType)
        and found.__qualname__ == qualified_name
        and found.__module__ == module
        and not hasattr(found, "__wrapped__")
    ):
        return f"`{name}` is not `{qualified_name}` on this object"
    return None


def _traced_object(variable):
    """The object a TorchDynamo variable stands for, or the type of a traced tensor."""
    from graphmend.torch_adapter.tracing import TensorVariable

    variable = realized(variable)
    if isinstance(variable, TensorVariable):
        return _InstanceOf(variable.python_type())
    if variable.is_python_constant():
        return variable.as_python_constant()
    try:
        python_type = variable.python_type()
    except Exception:  # noqa: BLE001 - not every variable knows its type
        python_type = None
    if python_type is not None and python_type.__module__ == "builtins" and python_type is not type:
        return _InstanceOf(python_type)
    if hasattr(variable, "value"):
        return variable.value
    return variable.as_python_constant()


def reads_plainly(owner, name) -> bool:
    """While TorchDynamo traces: ``owner.name`` exists and reading it runs none of the
    program's code (``why_reading_runs_code``). False when not tracing."""
    plain = False
    comptime(_decide_read)
    return plain


def _decided(reason_for, what: str, condition: str):
    """A ``decide`` for ``trace_decisions.decide_in_trace`` that records why it answers False
    (``condition``: the id of the condition it decides)."""

    def decide(translator, *arguments) -> bool:
        reason = reason_for(*arguments)
        if reason is not None:
            claims.decline_at_user_site(translator, failed(condition, f"{what}: {reason}"))
        return reason is None

    return decide


def _decide_read(context) -> None:
    trace_decisions.decide_in_trace(
        context, "plain", ("owner", "name"), _decided(why_reading_runs_code, "reading an attribute runs code", "W203"),
        read=_traced_object,
    )


def writes_plainly(owner, name) -> bool:
    """While TorchDynamo traces: ``owner.name = value`` runs none of the program's code."""
    plain = False
    comptime(_decide_write)
    return plain


def _decide_write(context) -> None:
    trace_decisions.decide_in_trace(
        context, "plain", ("owner", "name"), _decided(why_writing_runs_code, "a write left out would run code", "W204"),
        read=_traced_object,
    )


def is_the_method(owner, name, qualified_name, module) -> bool:
    """While TorchDynamo traces: ``owner.name`` is the analysed function
    ``module.qualified_name`` (``why_not_the_method``)."""
    same = False
    comptime(_decide_method)
    return same


def _decide_method(context) -> None:
    trace_decisions.decide_in_trace(
        context, "same", ("owner", "name", "qualified_name", "module"),
        _decided(why_not_the_method, "the method called is not the one analysed", "W205"),
        read=_traced_object,
    )
