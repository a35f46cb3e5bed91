"""Rewrite the user's own code, and chosen packages, as they are imported.

    import graphmend
    graphmend.install()              # your own modules are mended on import from now on

    import graphmend.hook
    with graphmend.hook.install(["transformers"]):
        import transformers          # transformers.* is mended on import too

    handle = graphmend.hook.install(["mypkg"], rules=("trap", "defer"))
    ...
    handle.uninstall()

How it behaves (after pytest's assertion rewriting, which is careful and boring):

* The finder goes first on ``sys.meta_path`` and decides from the module name: a
  targeted package ``pkg`` covers ``pkg`` and ``pkg.*`` (and ``transformers_modules.*``,
  transformers' remote-code modules, when ``transformers`` is targeted). ``torch.*``
  and ``graphmend.*`` are never rewritten. Only plain ``.py`` modules found by the
  normal ``PathFinder`` are rewritten, with ``scope="all"``.
* With ``user_code=True`` (the default) the user's own modules are mended too:
  every module whose file is not in the standard library or an installed
  distribution (site-packages, the interpreter's library folders, editable installs
  named by ``.pth`` files). The standard library is recognised by name, without a
  file-system lookup; each other top-level name is looked up once.
* Modules already imported when ``install`` is called stay as they are; one
  ``GraphmendWarning`` names them.
* If the rewriter fails on a module (or its output does not compile), the original
  module is loaded and one ``GraphmendWarning`` says which and why. A module with a
  real syntax error raises Python's own ``SyntaxError``.
* Rewritten code objects are cached (see ``graphmend.hook.cache``) in the module's
  ``__pycache__`` (or under ``sys.pycache_prefix``), in ``cache_dir``, or in
  ``$GRAPHMEND_CACHE_DIR``. Under ``sys.dont_write_bytecode`` (``PYTHONDONTWRITEBYTECODE``)
  nothing is written next to a module: without a cache folder the files go to the
  user's cache directory (``$XDG_CACHE_HOME/graphmend``, ``hook.cache.user_cache_dir``).
* Module attributes are those of a plain import: ``__file__``, ``__path__``,
  ``__spec__.origin``, ``__cached__`` (where plain Python's ``.pyc`` would be; we never
  write that file); ``importlib.resources`` works; ``__loader__.get_source`` returns
  the original source.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from graphmend.hook.cache import CACHE_DIR_ENVIRONMENT_VARIABLE, cache_enabled, cache_folder
from graphmend.hook.finder import (
    MendingFinder,
    check_package_name,
    main_directory_modules,
    route_file_location_specs,
    warn_about_imported_modules,
)
from graphmend.hook.loader import (
    GraphmendWarning,
    HookStats,
    MendingLoader,
    MendOptions,
    normalize_rules,
)
from graphmend.hook.progress import Progress, describe_cache
from graphmend.rewrite.pipeline import ALL_RULES

ALL = ALL_RULES

__all__ = [
    "ALL",
    "CACHE_DIR_ENVIRONMENT_VARIABLE",
    "GraphmendWarning",
    "HookStats",
    "InstallHandle",
    "MendingFinder",
    "MendingLoader",
    "install",
    "uninstall_all",
]


class InstallHandle:
    """An installed hook. Use it as a context manager, or call ``uninstall()``."""

    def __init__(self, finder: MendingFinder):
        self.finder = finder

    @property
    def stats(self) -> HookStats:
        """Transform calls, cache hits and writes, and fallbacks so far."""
        return self.finder.stats

    @property
    def installed(self) -> bool:
        return self.finder in sys.meta_path

    def uninstall(self) -> None:
        """Remove the finder from ``sys.meta_path``. Modules it already loaded stay
        loaded (and mended). Calling it twice is harmless."""
        while self.finder in sys.meta_path:
            sys.meta_path.remove(self.finder)
        if self.finder.stats.progress is not None:
            self.finder.stats.progress.finish()

    def __enter__(self) -> InstallHandle:  # noqa: PYI034 - typing.Self needs 3.11
        return self

    def __exit__(self, *exc_info) -> None:
        self.uninstall()

    def __repr__(self) -> str:
        state = "installed" if self.installed else "uninstalled"
        return f"<InstallHandle {state} {self.finder!r}>"


def install(
    packages: Sequence[str] | str = (),
    *,
    rules: Sequence[str] | str = ALL,
    cache_dir: str | os.PathLike[str] | None = None,
    include_main: bool = False,
    cache: bool = True,
    user_code: bool = True,
    progress: bool = False,
) -> InstallHandle:
    """Rewrite the user's own modules and ``packages`` (with their submodules) when
    they are imported from now on.

    ``user_code`` (default True): mend every module that is not part of the standard
    library or of an installed distribution; ``packages`` adds installed ones.

    ``rules``: which rules to run, a sequence or ``"trap,defer"``; ValueError for an
    unknown one. ``cache_dir``: one folder for all cache files (default:
    ``$GRAPHMEND_CACHE_DIR``, else next to each module). ``cache=False`` turns the
    cache off. ``include_main``: also rewrite the top-level modules and packages in
    the folder of the running ``__main__`` script (the user's own helpers), as found
    when ``install`` is called. ``progress``: on a terminal, show how many modules are
    rewritten, of which package, and where they are cached (``hook.progress``); the
    totals are shown when the handle is uninstalled.
    """
    if isinstance(packages, str):
        packages = [packages]
    packages = [check_package_name(name) for name in packages]
    if cache_dir is None:
        cache_dir = os.environ.get(CACHE_DIR_ENVIRONMENT_VARIABLE) or None
    options = MendOptions(
        rules=normalize_rules(rules, ALL_RULES),
        scope="all",
        use_cache=cache,
        cache_dir=os.fspath(cache_dir) if cache_dir is not None else None,
    )
    main_directory, main_names = main_directory_modules() if include_main else (None, [])
    stats = HookStats()
    if progress:
        use_cache = options.use_cache and cache_enabled()
        stats.progress = Progress(describe_cache(use_cache, cache_folder(options.cache_dir)))
    finder = MendingFinder(packages, options, stats, main_directory, main_names, user_code=user_code)
    from graphmend import torch_adapter

    # Under a torch graphmend does not support, one warning, and nothing is mended: a
    # handle whose finder was never put on ``sys.meta_path``.
    if torch_adapter.warn_if_unsupported(stacklevel=2):
        return InstallHandle(finder)
    warn_about_imported_modules(finder, stacklevel=2)
    # Patch torch.compile before any user code binds it (``from torch import compile``),
    # so every compiled call restores trapped exceptions; the runtime activates the rest.
    import graphmend.runtime  # noqa: F401

    torch_adapter.activate()
    sys.meta_path.insert(0, finder)
    route_file_location_specs()
    return InstallHandle(finder)


def uninstall_all() -> None:
    """Remove every graphmend finder from ``sys.meta_path`` and undo graphmend's patches
    of torch (``graphmend.torch_adapter.deactivate``). Modules already mended stay loaded,
    and run as their original code where they needed a patch."""
    for finder in [finder for finder in sys.meta_path if isinstance(finder, MendingFinder)]:
        sys.meta_path.remove(finder)
        if finder.stats.progress is not None:
            finder.stats.progress.finish()
    if "graphmend.torch_adapter" in sys.modules:
        sys.modules["graphmend.torch_adapter"].deactivate()
