"""graphmend: remove TorchDynamo graph breaks by rewriting Python source."""

from __future__ import annotations

__version__ = "0.1.0"

from graphmend.rewrite.pipeline import ALL_RULES, MendResult, mend_module_source


def mend_source(text: str, **options) -> str:
    """Rewrite a whole module's source text; see ``mend_module_source`` for options."""
    return mend_module_source(text, **options).source


__all__ = ["ALL_RULES", "MendResult", "__version__", "mend_module_source", "mend_source"]
