"""The guards graphmend's runtime adds to a trace, and the sources they guard.

A decision made while tracing (``comptime``) that reads more than the values TorchDynamo
already guards on must hold on later calls too: the runtime guards the trace on what it
read, naming it by TorchDynamo's sources (where a value was found: an attribute of a
module, an item of a list) and guard kinds. Imported only where a guard is made (while
tracing).
"""

from __future__ import annotations

import functools

from torch._dynamo.guards import GuardBuilder, install_guard
from torch._dynamo.source import AttrSource, CallMethodItemSource, ImportSource, ListGetItemSource

# Guard kinds: the object itself, its type, its value (a constant), a sequence's length.
IDENTITY = GuardBuilder.ID_MATCH
TYPE = GuardBuilder.TYPE_MATCH
CONSTANT = GuardBuilder.CONSTANT_MATCH
LENGTH = GuardBuilder.SEQUENCE_LENGTH


EQUAL = GuardBuilder.EQUALS_MATCH


def item_source(base):
    """Where ``<base>.item()`` (the value of a one-element tensor) is found: guarded with
    ``EQUAL``, each call compares the tensor's value."""
    return CallMethodItemSource(base)


def absent_from_instance_dict(attribute: str):
    """The guard kind: ``attribute`` is not in the object's own ``__dict__``."""
    return functools.partial(GuardBuilder.NOT_PRESENT_IN_GENERIC_DICT, attr=attribute)


def attribute_source(base, attribute: str):
    """Where ``getattr(<base>, attribute)`` is found."""
    return AttrSource(base, attribute)


def module_source(module_name: str):
    """Where the imported module ``module_name`` is found."""
    return ImportSource(module_name)


def list_item_source(base, index: int):
    """Where ``<base>[index]`` of a list is found."""
    return ListGetItemSource(base, index)


def is_attribute_source(source) -> bool:
    """Whether ``source`` names an attribute (``source.base``, ``source.member``)."""
    return isinstance(source, AttrSource)


def install_guards(*guarded) -> None:
    """Guard the trace being made on each ``(source, kind)`` of ``guarded``: every guard
    is made first, then all are added together."""
    # skip=1: TorchDynamo's debug stack of each guard starts at the caller, as it would
    # had the caller added it.
    install_guard(*[source.make_guard(kind) for source, kind in guarded], skip=1)


def guarded_names(output) -> list[str]:
    """The sources (``L['self'].a``) of every guard the trace of ``output`` holds so far,
    each naming a value the trace read; a guard on an object's attribute made on the
    object itself (``hasattr``: ``HASATTR`` with ``attr=``) is named as that attribute."""
    names = []
    for guard in output.guards:
        attribute = getattr(guard.create_fn, "keywords", {}).get("attr")
        names.append(f"{guard.name}.{attribute}" if isinstance(attribute, str) else guard.name)
    return names


def source_name(variable) -> str | None:
    """The name of the source a TorchDynamo variable was read from, or None."""
    source = getattr(variable, "source", None)
    if source is None:
        return None
    # A property in later torches, a method before.
    name = source.name
    return name() if callable(name) else name


# Guard kinds on a value a program may change between calls: the value itself, or how
# many items a container holds.
_VALUE_KINDS = frozenset({
    "EQUALS_MATCH", "CONSTANT_MATCH", "SEQUENCE_LENGTH", "LIST_LENGTH", "TUPLE_ITERATOR_LEN",
    "DICT_LENGTH", "DICT_KEYS_MATCH", "DICT_CONTAINS", "DICT_VERSION",
})


def globals_written(output) -> set[str]:
    """The names of the module globals the trace rebinds (``global COUNT; COUNT += 1``)
    or whose object it changes (``HISTORY.append(...)``), as TorchDynamo's side effects
    record them."""
    from torch._dynamo.source import GlobalSource

    side_effects = getattr(output, "side_effects", None)
    if side_effects is None:
        return set()
    names = set()
    for variable, attributes in side_effects.store_attr_mutations.items():
        if isinstance(getattr(variable, "source", None), GlobalSource):
            names |= set(attributes)
    for variable in side_effects.id_to_variable.values():
        source = getattr(variable, "source", None)
        if isinstance(source, GlobalSource):
            try:
                modified = side_effects.is_modified(variable)
            except Exception:  # noqa: BLE001 - a variable whose mutation TorchDynamo does not track
                modified = False
            if modified:
                names.add(source.global_name)
    return names


def _value_guards(output):
    """(guard, source) of each of the trace's guards of a kind in ``_VALUE_KINDS``."""
    for guard in getattr(output, "guards", ()) or ():
        kind = getattr(getattr(guard, "create_fn", None), "__name__", "") or ""
        if kind in _VALUE_KINDS:
            yield guard, getattr(guard, "originating_source", None)


def _global_value_guards(output):
    """(guard, source) of the value guards on a module global itself; the module's own
    dunder names (``__name__``, which rewritten code passes to the runtime) are not the
    program's state."""
    from torch._dynamo.source import GlobalSource

    for guard, source in _value_guards(output):
        if isinstance(source, GlobalSource) and not source.global_name.startswith("__"):
            yield guard, source


def guarded_global_names(output) -> set[str]:
    """The module globals whose value or length the trace guards on, by name."""
    return {source.global_name for _guard, source in _global_value_guards(output)}


def _resume_function_locals(output) -> dict | None:
    """The locals a resume function of TorchDynamo's was called with, where the trace is
    of one; else None."""
    from graphmend.torch_adapter.tracing import resume_function_line

    root = getattr(output, "root_tx", None)
    code = getattr(root, "f_code", None)
    if code is None or resume_function_line(code) is None:
        return None
    return getattr(root, "f_locals", {}) or {}


def guarded_resumed_lists(output) -> list[str]:
    """Where the trace is of one of TorchDynamo's resume functions: the names of its guards
    on the length or an item of a local that holds a list of Python numbers (or of such
    lists), which the frame it resumes computed before its break (``hits =
    positions.tolist()``, a break of its own) and whose length and items may differ on
    every call (a loop over it is unrolled, and guarded, item by item)."""
    from torch._dynamo.source import GetItemSource, ListGetItemSource, LocalSource

    values = _resume_function_locals(output)
    if values is None:
        return []
    found = set()
    for guard, source in _value_guards(output):
        # An item's guard names the list it was read from as its base.
        while isinstance(source, (GetItemSource, ListGetItemSource)):
            source = source.base
        if not isinstance(source, LocalSource):
            continue
        if _is_list_of_numbers(values.get(source.local_name)):
            found.add(guard.name)
    return sorted(found)


def _is_list_of_numbers(value) -> bool:
    """A list of Python numbers, or of such lists (``.tolist()`` of a 2-D tensor)."""
    return type(value) is list and all(
        isinstance(item, (int, float)) or _is_list_of_numbers(item) for item in value
    )


_LENGTH_KINDS = frozenset({"SEQUENCE_LENGTH", "LIST_LENGTH", "TUPLE_ITERATOR_LEN", "DICT_LENGTH"})


def guarded_input_values(output) -> list[str]:
    """The names of the trace's guards on a value reached from a local of the traced frame
    (the local itself, an attribute or an item, at any depth) that holds a Python number
    (not a bool) or a string (``L['self'].index``, ``L['step']``), or on how many items
    such a value holds (``len(L['items'])``): a method's code is shared by every instance
    of its class, a function's by every call, and TorchDynamo compiles it again for each
    value among them. A bool (``self.training``) takes two values at most."""
    from torch._dynamo.source import (
        AttrSource,
        DictGetItemSource,
        GetItemSource,
        LocalSource,
        NNModuleSource,
    )

    root = getattr(output, "root_tx", None)
    values = getattr(root, "f_locals", None) or {}
    missing = object()

    def value_of(source):
        # An ``NNModuleSource`` names the same object as its base, read as a module.
        if isinstance(source, NNModuleSource):
            return value_of(source.base)
        if isinstance(source, AttrSource):
            base = value_of(source.base)
            return missing if base is missing else getattr(base, source.member, missing)
        if isinstance(source, (GetItemSource, DictGetItemSource)):
            index = source.index
            if getattr(source, "index_is_slice", False) or not isinstance(index, (int, str)):
                return missing
            base = value_of(source.base)
            if type(base) not in (list, tuple, dict):
                return missing
            try:
                return base[index]
            except (IndexError, KeyError, TypeError):
                return missing
        if isinstance(source, LocalSource):
            return values.get(source.local_name, missing)
        return missing

    found = set()
    for guard, source in _value_guards(output):
        try:
            value = value_of(source)
        except Exception:  # noqa: BLE001 - an attribute whose getter fails is not a number read
            continue
        kind = getattr(guard.create_fn, "__name__", "")
        if kind in _LENGTH_KINDS:
            if type(value) in (list, tuple, dict):
                found.add(f"len({guard.name})")
        elif isinstance(value, (int, float, str)) and not isinstance(value, bool):
            found.add(guard.name)
    return sorted(found)


def guarded_global_values(output) -> list[str]:
    """The names of the trace's guards on the value (or the length) of a module global
    itself (``G['COUNT']``, ``len(G['SEEN'])``), as TorchDynamo names them."""
    return sorted({guard.name for guard, _source in _global_value_guards(output)})
