"""A cache of rewritten code objects, so that a second import skips the rewriter.

Modelled on pytest's assertion-rewriting cache (``_pytest/assertion/rewrite.py``).
The cache is only an optimisation, so it is allowed to fail quietly in both
directions:

* every read problem (missing, truncated, corrupt, foreign, written by someone else,
  written for another key) means "rewrite again";
* every write problem (read-only folder, full disk, a file where a folder should be)
  is ignored.

The key is everything the rewritten code depends on: the interpreter's cache tag,
graphmend's version and a fingerprint of its own source (so an edited rewriter in a
development checkout never serves stale rewrites), the rule set and scope, the
module's name and path (both end up in the code object), and the SHA-256 of the
source bytes. Never the mtime: fresh clones and restored CI caches change mtimes
without changing code.

A cache file is a fixed header followed by ``marshal`` data::

    b"GMND" | format version (u32) | importlib MAGIC_NUMBER (4 bytes) | key digest (32 bytes)

Its name repeats the readable parts of the key and the first hex digits of the key
digest: ``<module>.<cache_tag>.graphmend-<version>.<rules>.<scope>.<digest>.pyc``.
"""

from __future__ import annotations

import hashlib
import importlib.util
import marshal
import os
import stat
import struct
import sys
import tempfile
import types
from dataclasses import dataclass
from pathlib import Path

import graphmend

CACHE_DIR_ENVIRONMENT_VARIABLE = "GRAPHMEND_CACHE_DIR"

FILE_MAGIC = b"GMND"
FORMAT_VERSION = 1
_HEADER = struct.Struct("<4sI4s32s")
# Characters of the key digest that go into the file name; the full digest is in the header.
_NAME_DIGEST_LENGTH = 24

# The subpackages whose code decides what mended code looks like, or what it calls.
REWRITER_SUBPACKAGES = ("analysis", "rules", "rewrite", "runtime")

_rewriter_fingerprint: str | None = None


def rewriter_fingerprint() -> str:
    """SHA-256 over the rewriter's own ``.py`` files, computed once per process.

    The version number alone does not change while the rules are being developed in
    an editable install; without this, a cache filled by yesterday's rules would keep
    serving yesterday's rewrites. Editing the CLI or this hook does not invalidate it.
    """
    global _rewriter_fingerprint
    if _rewriter_fingerprint is None:
        digest = hashlib.sha256()
        package_root = Path(graphmend.__file__).parent
        sources = [package_root / "__init__.py"]
        for subpackage in REWRITER_SUBPACKAGES:
            sources.extend((package_root / subpackage).rglob("*.py"))
        for path in sorted(sources):
            try:
                data = path.read_bytes()
            except OSError:
                data = b"<unreadable>"
            digest.update(path.relative_to(package_root).as_posix().encode())
            digest.update(b"\0")
            digest.update(hashlib.sha256(data).digest())
        _rewriter_fingerprint = digest.hexdigest()
    return _rewriter_fingerprint


@dataclass(frozen=True)
class CacheKey:
    """Everything a cached code object depends on."""

    module_name: str
    path: str
    source_sha256: str
    rules: tuple[str, ...]
    scope: str

    def digest(self) -> bytes:
        parts = [
            sys.implementation.cache_tag or "",
            graphmend.__version__,
            rewriter_fingerprint(),
            ",".join(self.rules),
            self.scope,
            self.module_name,
            self.path,
            self.source_sha256,
        ]
        return hashlib.sha256("\0".join(parts).encode("utf-8", "surrogateescape")).digest()

    def file_name(self) -> str:
        rules = "-".join(self.rules) or "none"
        return (
            f"{self.module_name}.{sys.implementation.cache_tag}.graphmend-{graphmend.__version__}"
            f".{rules}.{self.scope}.{self.digest().hex()[:_NAME_DIGEST_LENGTH]}.pyc"
        )


def make_key(
    module_name: str, path: str, source_bytes: bytes, rules: tuple[str, ...], scope: str
) -> CacheKey:
    return CacheKey(
        module_name=module_name,
        path=path,
        source_sha256=hashlib.sha256(source_bytes).hexdigest(),
        rules=tuple(rules),
        scope=scope,
    )


def cache_enabled() -> bool:
    """An interpreter without a cache tag (``sys.implementation.cache_tag is None``)
    asks for no bytecode caching at all; we follow it."""
    return sys.implementation.cache_tag is not None


def user_cache_dir() -> str:
    """graphmend's folder in the user's cache directory: ``$XDG_CACHE_HOME/graphmend``
    (``~/.cache/graphmend``), ``~/Library/Caches/graphmend`` on macOS,
    ``%LOCALAPPDATA%\\graphmend\\Cache`` on Windows."""
    if sys.platform == "win32":
        base = os.environ.get("LOCALAPPDATA") or os.path.expanduser(os.path.join("~", "AppData", "Local"))
        return os.path.join(base, "graphmend", "Cache")
    if sys.platform == "darwin":
        return os.path.expanduser(os.path.join("~", "Library", "Caches", "graphmend"))
    base = os.environ.get("XDG_CACHE_HOME", "")
    if not os.path.isabs(base):  # the XDG specification: a relative value is ignored
        base = os.path.expanduser(os.path.join("~", ".cache"))
    return os.path.join(base, "graphmend")


def cache_folder(cache_dir: str | None) -> str | None:
    """The one folder every cache file goes into, or None for "next to each module".

    An explicit ``cache_dir`` (``$GRAPHMEND_CACHE_DIR``) always. Without one, the
    files sit where Python puts each module's own ``.pyc``, unless Python is told not
    to write those (``PYTHONDONTWRITEBYTECODE``, common in containers whose source
    folders are read-only or thrown away): then the user's cache directory, so that a
    second run does not rewrite every module again.
    """
    if cache_dir is not None:
        return cache_dir
    if sys.dont_write_bytecode:
        return user_cache_dir()
    return None


def cache_file_path(key: CacheKey, cache_dir: str | None) -> str:
    """Where the cache file for ``key`` lives.

    In one folder (``cache_folder``) the key digest in the name keeps same-named
    modules from different paths apart. Otherwise it sits where Python puts the
    module's own ``.pyc``: the module's ``__pycache__`` folder, or the mirror tree
    under ``sys.pycache_prefix``.
    """
    folder = cache_folder(cache_dir)
    if folder is None:
        folder = os.path.dirname(importlib.util.cache_from_source(key.path))
    return os.path.join(folder, key.file_name())


def is_trusted(file_status: os.stat_result) -> bool:
    """Read only regular files this user wrote and nobody else can change.

    A cache file holds code we will execute; one planted by another user (or made
    writable for others) must never be trusted, only ignored.
    """
    if not stat.S_ISREG(file_status.st_mode):
        return False
    if file_status.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return False
    getuid = getattr(os, "getuid", None)
    return getuid is None or file_status.st_uid == getuid()


def read_cached_code(cache_path: str, key: CacheKey) -> types.CodeType | None:
    """The cached code object for ``key``, or None on any problem at all."""
    try:
        flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_BINARY", 0)
        descriptor = os.open(cache_path, flags)
    except OSError:
        return None
    try:
        with open(descriptor, "rb") as cache_file:
            if not is_trusted(os.fstat(cache_file.fileno())):
                return None
            data = cache_file.read()
    except OSError:
        return None
    if len(data) < _HEADER.size:
        return None
    magic, format_version, python_magic, key_digest = _HEADER.unpack_from(data)
    if (
        magic != FILE_MAGIC
        or format_version != FORMAT_VERSION
        or python_magic != importlib.util.MAGIC_NUMBER
        or key_digest != key.digest()
    ):
        return None
    try:
        code = marshal.loads(data[_HEADER.size :])
    except Exception:  # noqa: BLE001 - any bad data (EOFError, ValueError, ...) means a miss
        return None
    if not isinstance(code, types.CodeType):
        return None
    return code


def write_cached_code(cache_path: str, key: CacheKey, code: types.CodeType) -> bool:
    """Store ``code`` atomically; return whether it was written. Never raises OSError.

    The temporary file is created in the destination folder (``os.replace`` is only
    atomic within one file system) with mode 0600, so a concurrent reader sees
    either no file or a complete one, and the result passes ``is_trusted``.
    ``sys.dont_write_bytecode`` is honoured by where the file goes (``cache_folder``):
    never next to the module.
    """
    header = _HEADER.pack(FILE_MAGIC, FORMAT_VERSION, importlib.util.MAGIC_NUMBER, key.digest())
    folder = os.path.dirname(cache_path)
    temporary_path = None
    try:
        os.makedirs(folder, exist_ok=True)
        descriptor, temporary_path = tempfile.mkstemp(
            dir=folder, prefix=os.path.basename(cache_path) + ".", suffix=".tmp"
        )
        with open(descriptor, "wb") as temporary_file:
            temporary_file.write(header)
            temporary_file.write(marshal.dumps(code))
        os.replace(temporary_path, cache_path)
        return True
    except (OSError, ValueError):  # ValueError: marshal cannot serialise the object
        if temporary_path is not None:
            try:
                os.unlink(temporary_path)
            except OSError:
                pass
        return False
