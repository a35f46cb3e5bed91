"""Names an adapter module re-exports from torch, each imported when first read."""

from __future__ import annotations

import importlib


def lazy_names(module_name: str, where: dict[str, str]):
    """A module ``__getattr__`` that reads each name of ``where`` (name -> torch module)
    from its torch module when it is asked for. A name this torch lacks raises
    AttributeError, which ``from ... import name`` turns into the ImportError that
    importing it from torch directly raises."""

    def __getattr__(name: str):
        source = where.get(name)
        if source is None:
            raise AttributeError(f"module {module_name!r} has no attribute {name!r}")
        try:
            return getattr(importlib.import_module(source), name)
        except AttributeError:
            raise AttributeError(f"module {source!r} has no attribute {name!r}") from None

    return __getattr__
