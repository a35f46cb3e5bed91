"""The meta-path finder that routes targeted modules to the mending loader.

Decide from the module *name* first: most imports in a process (the standard
library, torch, every untargeted package) cost one string comparison and never
touch the file system. Only a targeted name is looked up, with the normal
``PathFinder``; only a plain ``.py`` source module gets our loader. Everything else
(extension modules, bytecode-only modules, namespace packages, zip imports) is left
to the rest of ``sys.meta_path`` untouched.

With ``user_code`` the finder also mends the user's own code: any module whose file
is not part of the standard library or of an installed distribution (see
``LibraryLocations``). That decision needs one file-system lookup per top-level
name; it is remembered, so ``numpy.linalg`` after ``numpy`` costs a dictionary
lookup, and names of the standard library (``sys.stdlib_module_names``) are never
looked up at all.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import site
import sys
import sysconfig
import warnings
from collections.abc import Iterable, Sequence

from graphmend.hook.loader import GraphmendWarning, HookStats, MendingLoader, MendOptions

# Rewriting these would rewrite the compiler, or the rewriter, while it runs.
NEVER_REWRITTEN = ("torch", "graphmend")
# The running program: never imported through a finder (``graphmend run`` mends it).
MAIN_MODULE_NAMES = frozenset({"__main__", "__mp_main__"})

# transformers imports trust_remote_code models as top-level modules of this package
# (from its HF_MODULES_CACHE folder); they belong to transformers as far as users care.
REMOTE_CODE_PACKAGES = {"transformers": ("transformers_modules",)}


def _is_in_package(fullname: str, package: str) -> bool:
    return fullname == package or fullname.startswith(package + ".")


def _is_never_rewritten(fullname: str) -> bool:
    if fullname in MAIN_MODULE_NAMES:
        return True
    return any(_is_in_package(fullname, package) for package in NEVER_REWRITTEN)


def check_package_name(name: str) -> str:
    if not name or not all(part.isidentifier() for part in name.split(".")):
        raise ValueError(f"not a module name: {name!r}")
    if _is_never_rewritten(name):
        raise ValueError(f"graphmend never rewrites {name!r} (torch and graphmend are excluded)")
    return name


class LibraryLocations:
    """Where installed code lives: everything else on ``sys.path`` is the user's own.

    Installed code is the standard library and every distribution: the interpreter's
    library folders (``sysconfig`` paths of ``sys.prefix`` and ``sys.base_prefix``),
    every ``site-packages`` / ``dist-packages`` folder, and the folders that ``.pth``
    files in them add to ``sys.path`` (editable installs).
    """

    _MARKERS = ("site-packages", "dist-packages")

    def __init__(self) -> None:
        roots: set[str] = set()
        for prefix in {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}:
            variables = {"base": prefix, "platbase": prefix, "installed_base": prefix, "installed_platbase": prefix}
            paths = sysconfig.get_paths(vars=variables)
            roots.update(paths[key] for key in ("stdlib", "platstdlib", "purelib", "platlib"))
        site_folders = list(getattr(site, "getsitepackages", list)())
        user_site = getattr(site, "getusersitepackages", lambda: None)()
        if user_site:
            site_folders.append(user_site)
        roots.update(site_folders)
        for folder in site_folders:
            roots.update(_pth_entries(folder))
        self.roots = tuple(sorted({os.path.join(_real(root), "") for root in roots if root}))

    def is_installed(self, path: str) -> bool:
        real = _real(path)
        parts = real.split(os.sep)
        if any(marker in parts for marker in self._MARKERS):
            return True
        return any(real.startswith(root) for root in self.roots)


def _real(path: str) -> str:
    return os.path.normcase(os.path.realpath(path))


def _pth_entries(folder: str) -> list[str]:
    """The folders ``.pth`` files in ``folder`` put on ``sys.path``; a bad file adds none."""
    entries = []
    try:
        names = sorted(name for name in os.listdir(folder) if name.endswith(".pth"))
    except OSError:
        return entries
    for name in names:
        try:
            with open(os.path.join(folder, name), encoding="utf-8", errors="replace") as file:
                lines = file.read().splitlines()
        except OSError:
            continue
        for line in lines:
            line = line.strip()
            if line and not line.startswith(("#", "import ", "import\t")):
                entries.append(os.path.join(folder, line))
    return entries


class MendingFinder:
    """Finds targeted source modules and hands them to ``MendingLoader``."""

    def __init__(
        self,
        packages: Sequence[str],
        options: MendOptions,
        stats: HookStats,
        main_directory: str | None = None,
        main_names: Iterable[str] = (),
        user_code: bool = False,
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
        # user_code: the user's own modules, found by where their files are.
        self.user_code = user_code
        self._library_locations: LibraryLocations | None = None
        # Top-level name -> whether it is the user's own code, once looked up.
        self._top_level_is_user_code: dict[str, bool] = {}

    @property
    def library_locations(self) -> LibraryLocations:
        if self._library_locations is None:
            self._library_locations = LibraryLocations()
        return self._library_locations

    def is_targeted(self, fullname: str) -> bool:
        """The name-only decision; no file system access."""
        if _is_never_rewritten(fullname):
            return False
        top_level = fullname.partition(".")[0]
        if top_level in self.main_names:
            return True
        if any(_is_in_package(fullname, package) for package in self.packages):
            return True
        if self.user_code and top_level not in sys.stdlib_module_names:
            decided = self._top_level_is_user_code.get(top_level)
            if decided is None and top_level != fullname:
                decided = self._decide_from_imported(top_level)
            # Unknown yet, or known to be the user's: look at the file.
            return decided is not False
        return False

    def _decide_from_imported(self, top_level: str) -> bool | None:
        """A package imported already (before the hook, say): decided by its file."""
        module = sys.modules.get(top_level)
        origin = getattr(module, "__file__", None) if module is not None else None
        if not origin:
            return None
        decided = self.is_user_code(origin)
        self._top_level_is_user_code[top_level] = decided
        return decided

    def is_named(self, fullname: str) -> bool:
        """Targeted by name (a named package, or include_main), not only as user code."""
        if _is_never_rewritten(fullname):
            return False
        if fullname.partition(".")[0] in self.main_names:
            return True
        return any(_is_in_package(fullname, package) for package in self.packages)

    def is_user_code(self, origin: str) -> bool:
        """Whether ``origin`` is the user's own code; when that cannot be decided (a
        broken ``sysconfig``, an unreadable path), it is not: the import goes on unmended."""
        try:
            return not self.library_locations.is_installed(origin)
        except Exception:  # noqa: BLE001 - an import must never fail over our decision
            return False

    def find_spec(self, fullname, path=None, target=None):
        if not self.is_targeted(fullname):
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if self.user_code and "." not in fullname and spec is not None and spec.origin and spec.has_location:
            self._top_level_is_user_code[fullname] = self.is_user_code(spec.origin)
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
        if self.user_code and origin and self.is_user_code(origin):
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
        own = " user_code" if self.user_code else ""
        return f"<MendingFinder packages={list(self.packages)!r}{own} rules={self.options.rules!r}>"


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
    Modules of the named packages come first; then the user's own code, by top-level
    name, most recently imported first (those are the ones a late ``install`` misses).
    """
    named: list[str] = []
    own: list[str] = []
    for name, module in list(sys.modules.items()):
        if not finder.is_targeted(name) or isinstance(
            getattr(getattr(module, "__spec__", None), "loader", None), MendingLoader
        ):
            continue
        if finder.is_named(name):
            named.append(name)
        elif _accepts_imported(finder, name, module):
            own.append(name.partition(".")[0])
    parts = []
    if named:
        parts.append(_first_five(sorted(named)))
    if own:
        own_top_levels = list(dict.fromkeys(reversed(own)))
        parts.append(f"{'of your own code: ' if named else ''}{_first_five(own_top_levels)}")
    if not parts:
        return
    warnings.warn(
        GraphmendWarning(
            f"graphmend cannot rewrite modules imported before the hook was installed: "
            f"{'; '.join(parts)}; install the hook before importing them"
        ),
        stacklevel=stacklevel + 1,
    )


def _first_five(names: list[str]) -> str:
    shown = ", ".join(names[:5])
    if len(names) > 5:
        shown += f" and {len(names) - 5} more"
    return shown


def _accepts_imported(finder: MendingFinder, name: str, module) -> bool:
    """An imported module the finder would have mended: a source file it accepts."""
    origin = getattr(module, "__file__", None)
    return bool(origin) and origin.endswith(".py") and finder.accepts(name, origin)


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
