"""graphmend: remove TorchDynamo graph breaks by rewriting Python source."""

from __future__ import annotations

__version__ = "0.1.0"

from graphmend.rewrite.pipeline import ALL_RULES, MendResult, mend_module_source


def mend_source(text: str, **options) -> str:
    """Rewrite a whole module's source text; see ``mend_module_source`` for options."""
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


def __getattr__(name: str):
    if name == "GraphmendWarning":
        from graphmend.hook import GraphmendWarning

        return GraphmendWarning
    raise AttributeError(f"module 'graphmend' has no attribute {name!r}")


__all__ = ["GraphmendWarning", "ALL_RULES", "MendResult", "__version__", "explain", "install", "mend", "mend_module_source", "mend_source"]
