"""graphmend: remove TorchDynamo graph breaks by rewriting Python source.

Importing this package imports neither torch nor the rewriter, and changes nothing in
torch: the rewriter loads on first use, and TorchDynamo is patched only by the ways in
that run mended code (``install``, ``mend``, ``graphmend run``, mended source executed;
see ``graphmend.torch_adapter``).
"""

from __future__ import annotations

__version__ = "0.1.0"

# Loaded on first access (PEP 562): ``graphmend --help`` and the static commands should
# not pay for what they do not use.
_LAZY = {
    "ALL_RULES": "graphmend.rewrite.pipeline",
    "MendResult": "graphmend.rewrite.pipeline",
    "mend_module_source": "graphmend.rewrite.pipeline",
    "GraphmendWarning": "graphmend.hook.loader",
}


def mend_source(text: str, **options) -> str:
    """Rewrite a whole module's source text; see ``mend_module_source`` for options."""
    from graphmend.rewrite.pipeline import mend_module_source

    return mend_module_source(text, **options).source


def mend(obj, **options):
    """Mend a function, a class or an ``nn.Module`` instance; see ``graphmend.api.mend``."""
    from graphmend.api import mend as mend_object

    return mend_object(obj, **options)


def explain(function, **options):
    """``graphmend.explain(fn)(*args)``: the graph breaks, graphs and recompilations of
    ``fn`` as it is and as mended; see ``graphmend.api.explain``."""
    from graphmend.api import explain as explain_function

    return explain_function(function, **options)


def install(*args, **kwargs):
    """Rewrite chosen packages on import; see ``graphmend.hook.install``."""
    from graphmend.hook import install as install_hook

    return install_hook(*args, **kwargs)


def uninstall() -> None:
    """Undo every ``install()``: remove the import hooks and restore what graphmend
    patched in torch. Modules already mended stay loaded."""
    from graphmend.hook import uninstall_all

    uninstall_all()


def __getattr__(name: str):
    module_name = _LAZY.get(name)
    if module_name is None:
        raise AttributeError(f"module 'graphmend' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module_name), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "ALL_RULES",
    "GraphmendWarning",
    "MendResult",
    "__version__",
    "explain",
    "install",
    "mend",
    "mend_module_source",
    "mend_source",
    "uninstall",
]
