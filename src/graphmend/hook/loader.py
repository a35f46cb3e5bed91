"""Turn a module's source bytes into mended code, with the cache and the fail-safe.

``mended_code`` is shared by the import hook's loader and by ``graphmend run`` (for
the user's script). It never lets a rewriter problem break the user's program: if
the rewriter raises, or its output does not compile, the original source is compiled
instead and one ``GraphmendWarning`` says why. A source file with a real syntax
error raises Python's own ``SyntaxError``, exactly as a plain import would.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import types
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field

from graphmend.hook import cache
from graphmend.rewrite.pipeline import mend_module_source

__all__ = ["GraphmendWarning", "HookStats", "MendOptions", "MendingLoader", "mended_code"]


class GraphmendWarning(UserWarning):
    """Something graphmend could not do; the program runs on without it."""


@dataclass
class HookStats:
    """What the hook did in this process; tests and the benchmark read it."""

    transform_calls: int = 0
    cache_hits: int = 0
    cache_writes: int = 0
    fallbacks: int = 0
    # Shows the modules rewritten on a terminal (``graphmend run``): hook.progress.Progress.
    progress: object | None = field(default=None, repr=False, compare=False)


@dataclass(frozen=True)
class MendOptions:
    """How to rewrite: the options that go into the cache key, and where the cache is."""

    rules: tuple[str, ...]
    scope: str = "all"
    use_cache: bool = True
    # None: next to the module, in __pycache__ (or under sys.pycache_prefix).
    cache_dir: str | None = None


def mended_code(
    source_bytes: bytes,
    path: str,
    module_name: str,
    options: MendOptions,
    stats: HookStats,
    *,
    warning_stacklevel: int = 2,
) -> types.CodeType:
    """The code object to execute for one module: cached, freshly rewritten, or original.

    ``warning_stacklevel`` counts from the caller of this function, as for
    ``warnings.warn``; importlib's own frames are skipped by the warnings module.
    """
    key = cache_path = None
    if options.use_cache and cache.cache_enabled():
        key = cache.make_key(module_name, path, source_bytes, options.rules, options.scope)
        cache_path = cache.cache_file_path(key, options.cache_dir)
        code = cache.read_cached_code(cache_path, key)
        if code is not None:
            stats.cache_hits += 1
            return code

    failure_reason = None
    try:
        stats.transform_calls += 1
        # decode_source applies the coding cookie / BOM and universal newlines, as import does.
        text = importlib.util.decode_source(source_bytes)
        result = mend_module_source(
            text,
            filename=path,
            module_name=module_name,
            rules=options.rules,
            scope=options.scope,
            is_package=os.path.basename(path) == "__init__.py",
        )
        if result.changed:
            # The rewritten tree keeps every original statement's line number, so
            # tracebacks and log records point at the lines on disk.
            rewritten = result.tree if result.tree is not None else result.source
            code = compile(rewritten, path, "exec", dont_inherit=True)
        else:
            code = compile(source_bytes, path, "exec", dont_inherit=True)
    except Exception as exc:  # noqa: BLE001 - never break the user's program
        failure_reason = f"{type(exc).__name__}: {exc}"

    if stats.progress is not None:
        stats.progress.rewrote(module_name)

    if failure_reason is not None:
        # Outside the except block, so a real SyntaxError propagates with no chained
        # context: the user sees exactly what a plain import would have shown.
        code = compile(source_bytes, path, "exec", dont_inherit=True)
        stats.fallbacks += 1
        warnings.warn(
            GraphmendWarning(
                f"graphmend could not rewrite module {module_name!r} ({path}): "
                f"{failure_reason}; running the original code"
            ),
            stacklevel=warning_stacklevel + 1,
        )
        return code

    if key is not None and cache.write_cached_code(cache_path, key, code):
        stats.cache_writes += 1
    return code


class MendingLoader(importlib.machinery.SourceFileLoader):
    """A ``SourceFileLoader`` whose ``get_code`` returns mended code.

    Everything else is inherited, so package semantics stay as plain import makes
    them: ``is_package``, ``get_resource_reader`` (``importlib.resources``),
    ``get_filename``. ``get_source`` returns the ORIGINAL source, which is what is
    on disk and what tracebacks, ``linecache`` and ``inspect`` show; the rewriter
    keeps line numbers of original statements, so those lines match.
    It never writes the regular ``.pyc`` (``__cached__`` names where plain Python
    would put it); mended code goes to graphmend's own cache files instead.
    """

    def __init__(self, fullname: str, path: str, options: MendOptions, stats: HookStats):
        super().__init__(fullname, path)
        self.options = options
        self.stats = stats

    # Set while this loader's own ``exec_module`` runs: its frame then stands between
    # ``get_code`` and the importing statement, and a warning skips it too.
    _in_exec_module = False

    def exec_module(self, module: types.ModuleType) -> None:
        progress = self.stats.progress
        if progress is not None:
            progress.import_started()
        self._in_exec_module = True
        try:
            return super().exec_module(module)
        finally:
            self._in_exec_module = False
            if progress is not None:
                progress.import_ended()

    def get_code(self, fullname: str) -> types.CodeType:
        path = self.get_filename(fullname)
        source_bytes = self.get_data(path)
        return mended_code(
            source_bytes,
            path,
            fullname,
            self.options,
            self.stats,
            # this frame (and exec_module's), then the importing statement (importlib's
            # frames are skipped)
            warning_stacklevel=3 if self._in_exec_module else 2,
        )


def normalize_rules(rules: Sequence[str] | str, known: Sequence[str]) -> tuple[str, ...]:
    """Rules in the pipeline's canonical order, deduplicated; ValueError for unknown ones.

    ``rules`` may be a sequence or one comma-separated string. Canonical order keeps
    ``("defer", "trap")`` and ``("trap", "defer")`` on the same cache entry.
    """
    if isinstance(rules, str):
        rules = rules.split(",")
    requested = [rule.strip() for rule in rules if rule.strip()]
    unknown = sorted(set(requested) - set(known))
    if unknown:
        raise ValueError(
            f"unknown rule{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))}; "
            f"known rules: {', '.join(known)}"
        )
    return tuple(rule for rule in known if rule in requested)
