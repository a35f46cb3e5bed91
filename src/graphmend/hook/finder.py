"""The meta-path finder that routes targeted modules to the mending loader.

Decide from the module *name* first: most imports in a process (the standard
library, torch, every untargeted package) cost one string comparison and never
touch the file system. Only a targeted name is looked up, with the normal
``PathFinder``; only a plain ``.py`` source module gets our loader. Everything else
(extension modules, bytecode-only modules, namespace packages, zip imports) is left
to the rest of ``sys.meta_path`` untouched.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys
import warnings
from collections.abc import Iterable, Sequence

from graphmend.hook.loader import GraphmendWarning, HookStats, MendingLoader, MendOptions

# Rewriting these would rewrite the compiler, or the rewriter, while it runs.
NEVER_REWRITTEN = ("torch", "graphmend")

# transformers imports trust_remote_code models as top-level modules of this package
# (from its HF_MODULES_CACHE folder); they belong to transformers as far as users care.
REMOTE_CODE_PACKAGES = {"transformers": ("transformers_modules",)}


def _is_in_package(fullname: str, package: str) -> bool:
    return fullname == package or fullname.startswith(package + ".")


def _is_never_rewritten(fullname: str) -> bool:
    return any(_is_in_package(fullname, package) for package in NEVER_REWRITTEN)


def check_package_name(name: str) -> str:
    if not name or not all(part.isidentifier() for part in name.split(".")):
        raise ValueError(f"not a module name: {name!r}")
    if _is_never_rewritten(name):
        raise ValueError(f"graphmend never rewrites {name!r} (torch and graphmend are excluded)")
    return name


class MendingFinder:
    """Finds targeted source modules and hands them to ``MendingLoader``."""

    def __init__(
        self,
        packages: Sequence[str],
        options: MendOptions,
        stats: HookStats,
        main_directory: str | None = None,
        main_names: Iterable[str] = (),
    ):
        targets = list(packages)
        for package in packages:
            targets.extend(REMOTE_CODE_PACKAGES.get(package, ()))
        self.packages = tuple(dict.fromkeys(targets))
        self.options = options
        self.stats = stats
        # include_main: top-level modules that live in the main script's folder.
        self.main_directory = main_directory
        self.main_names = frozenset(main_names)

    def is_targeted(self, fullname: str) -> bool:
        """The name-only decision; no file system access."""
        if _is_never_rewritten(fullname):
            return False
        if fullname.partition(".")[0] in self.main_names:
            return True
        return any(_is_in_package(fullname, package) for package in self.packages)

    def find_spec(self, fullname, path=None, target=None):
        if not self.is_targeted(fullname):
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if (
            spec is None
            or not isinstance(spec.loader, importlib.machinery.SourceFileLoader)
            or not spec.origin
            or not spec.origin.endswith(".py")
        ):
            return None
        if not self.accepts(fullname, spec.origin):
            return None
        loader = MendingLoader(fullname, spec.origin, self.options, self.stats)
        return _plain_spec_from_file_location(
            fullname,
            spec.origin,
            loader=loader,
            submodule_search_locations=spec.submodule_search_locations,
        )

    def accepts(self, fullname: str, origin: str) -> bool:
        if any(_is_in_package(fullname, package) for package in self.packages):
            return True
        # Targeted only through include_main: a same-named module found elsewhere on
        # sys.path (site-packages, say) is not the user's own code.
        directory = self.main_directory
        return directory is not None and os.path.abspath(origin).startswith(
            os.path.join(directory, "")
        )

    def invalidate_caches(self) -> None:
        """Nothing cached in memory; present because importlib calls it on finders."""

    def __repr__(self) -> str:
        return f"<MendingFinder packages={list(self.packages)!r} rules={self.options.rules!r}>"


def main_directory_modules() -> tuple[str | None, list[str]]:
    """The folder of ``__main__.__file__`` and the top-level module names found in it."""
    main_file = getattr(sys.modules.get("__main__"), "__file__", None)
    if not main_file:
        return None, []
    directory = os.path.dirname(os.path.abspath(main_file))
    try:
        entries = os.listdir(directory)
    except OSError:
        return directory, []
    names = []
    main_stem = os.path.splitext(os.path.basename(main_file))[0]
    for entry in entries:
        stem, extension = os.path.splitext(entry)
        if extension == ".py" and stem.isidentifier() and stem != main_stem:
            names.append(stem)
        elif (
            not extension
            and entry.isidentifier()
            and os.path.isfile(os.path.join(directory, entry, "__init__.py"))
        ):
            names.append(entry)
    return directory, names


def warn_about_imported_modules(finder: MendingFinder, stacklevel: int) -> None:
    """One warning naming the targeted modules that are already imported.

    They stay as they are: the import system will not load them again, so they run
    un-mended. Modules an earlier graphmend hook already loaded are not mentioned.
    """
    already_imported = sorted(
        name
        for name, module in list(sys.modules.items())
        if finder.is_targeted(name)
        and not isinstance(
            getattr(getattr(module, "__spec__", None), "loader", None), MendingLoader
        )
    )
    if not already_imported:
        return
    shown = ", ".join(already_imported[:5])
    if len(already_imported) > 5:
        shown += f" and {len(already_imported) - 5} more"
    warnings.warn(
        GraphmendWarning(
            f"graphmend cannot rewrite modules imported before the hook was installed: "
            f"{shown}; install the hook before importing them"
        ),
        stacklevel=stacklevel + 1,
    )


_plain_spec_from_file_location = importlib.util.spec_from_file_location


def _spec_from_file_location(name, *args, **kwargs):
    """``importlib.util.spec_from_file_location``, mending targeted source modules.

    transformers loads remote code (``transformers_modules.*``) with
    ``spec_from_file_location`` and ``exec_module``, never asking ``sys.meta_path``;
    while a graphmend finder is installed, such a spec gets the mending loader.
    """
    spec = _plain_spec_from_file_location(name, *args, **kwargs)
    if (
        spec is None
        or type(spec.loader) is not importlib.machinery.SourceFileLoader
        or not (spec.origin or "").endswith(".py")
    ):
        return spec
    for finder in sys.meta_path:
        if isinstance(finder, MendingFinder) and finder.is_targeted(name) and finder.accepts(name, spec.origin):
            spec.loader = MendingLoader(name, spec.origin, finder.options, finder.stats)
            break
    return spec


def route_file_location_specs() -> None:
    """Install the ``spec_from_file_location`` route once; it is inert without a finder."""
    if importlib.util.spec_from_file_location is not _spec_from_file_location:
        importlib.util.spec_from_file_location = _spec_from_file_location
