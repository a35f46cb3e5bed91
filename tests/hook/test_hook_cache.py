"""The rewritten-code cache: hits, every way a read can go wrong, every way a write
can go wrong, and two processes filling it at once."""

from __future__ import annotations

import importlib
import os
import stat
import subprocess
import sys
import time

import pytest

import graphmend
import graphmend.hook
from graphmend.hook import cache
from hook.hook_helpers import SUBPROCESS_DRIVER, run_driver, subprocess_environment


def cache_files(folder) -> list:
    return sorted(path for path in folder.rglob("*.pyc") if ".graphmend-" in path.name)


def import_fresh(name: str):
    """Import ``name`` as a new process would: its whole top-level package forgotten first."""
    top = name.partition(".")[0]
    for loaded in [n for n in sys.modules if n == top or n.startswith(top + ".")]:
        del sys.modules[loaded]
    return importlib.import_module(name)


# --- keys and names -----------------------------------------------------------------


def test_file_name_carries_interpreter_version_rules_and_scope():
    key = cache.make_key("pkg.mod", "/src/pkg/mod.py", b"x = 1\n", ("trap", "defer"), "all")
    name = cache.cache_file_path(key, None)
    assert name.startswith(os.path.join("/src/pkg/__pycache__", "pkg.mod."))
    for part in (sys.implementation.cache_tag, f"graphmend-{graphmend.__version__}", "trap-defer"):
        assert part in name
    assert name.endswith(f".all.{key.digest().hex()[:24]}.pyc")


@pytest.mark.parametrize(
    "changed",
    [
        {"source_bytes": b"x = 2\n"},
        {"rules": ("trap",)},
        {"scope": "entry"},
        {"module_name": "other.mod"},
        {"path": "/elsewhere/pkg/mod.py"},
    ],
    ids=lambda changed: next(iter(changed)),
)
def test_every_part_of_the_key_changes_the_digest(changed):
    base = {
        "module_name": "pkg.mod",
        "path": "/src/pkg/mod.py",
        "source_bytes": b"x = 1\n",
        "rules": ("trap", "defer"),
        "scope": "all",
    }
    assert cache.make_key(**base).digest() != cache.make_key(**{**base, **changed}).digest()


def test_explicit_cache_dir_and_pycache_prefix(tmp_path, monkeypatch):
    key = cache.make_key("pkg.mod", "/src/pkg/mod.py", b"", ("trap",), "all")
    assert os.path.dirname(cache.cache_file_path(key, str(tmp_path))) == str(tmp_path)
    monkeypatch.setattr(sys, "pycache_prefix", str(tmp_path / "prefix"))
    assert cache.cache_file_path(key, None).startswith(str(tmp_path / "prefix" / "src" / "pkg"))


# --- hits ---------------------------------------------------------------------------


def test_second_import_is_a_cache_hit(make_package, fake_rewriter, hook_handles):
    package = make_package({"mod.py": "X = 1\n"})
    first = hook_handles([package.name])
    assert import_fresh(f"{package.name}.mod").__mended_by_test__
    assert (first.stats.transform_calls, first.stats.cache_writes) == (2, 2)
    assert len(cache_files(package.directory)) == 2
    first.uninstall()

    second = hook_handles([package.name])
    mod = import_fresh(f"{package.name}.mod")
    assert mod.__mended_by_test__  # the mended code came back from the cache
    assert (second.stats.transform_calls, second.stats.cache_hits) == (0, 2)
    assert mod.__file__ == str(package.directory / "mod.py")


@pytest.mark.slow  # fresh interpreters
def test_cache_hit_in_a_fresh_interpreter(make_package):
    package = make_package({"mod.py": "X = 1\n"})
    cold = run_driver(package, f"{package.name}.mod")
    warm = run_driver(package, f"{package.name}.mod")
    assert cold["transform_calls"] == 2 and cold["cache_writes"] == 2
    assert warm["transform_calls"] == 0 and warm["cache_hits"] == 2
    assert cold["mended"] == warm["mended"] == [True]


def test_mtime_is_not_part_of_the_key_but_the_source_is(make_package, fake_rewriter, hook_handles):
    package = make_package({"mod.py": "X = 1\n"})
    path = package.directory / "mod.py"
    hook_handles([package.name])
    import_fresh(f"{package.name}.mod")
    os.utime(path, (time.time() + 1000, time.time() + 1000))  # a fresh clone, say
    import_fresh(f"{package.name}.mod")
    assert fake_rewriter.module_names.count(f"{package.name}.mod") == 1
    path.write_text("X = 2\n")
    importlib.invalidate_caches()
    assert import_fresh(f"{package.name}.mod").X == 2
    assert fake_rewriter.module_names.count(f"{package.name}.mod") == 2


def test_cache_dir_argument_and_environment_variable(
    make_package, fake_rewriter, tmp_path, monkeypatch
):
    package = make_package()
    with graphmend.hook.install([package.name], cache_dir=tmp_path / "explicit"):
        import_fresh(package.name)
    assert len(cache_files(tmp_path / "explicit")) == 1
    monkeypatch.setenv(graphmend.hook.CACHE_DIR_ENVIRONMENT_VARIABLE, str(tmp_path / "from-env"))
    with graphmend.hook.install([package.name]):
        import_fresh(package.name)
    assert len(cache_files(tmp_path / "from-env")) == 1
    assert cache_files(package.directory) == []


def test_cache_false_neither_reads_nor_writes(make_package, fake_rewriter, hook_handles):
    package = make_package()
    with graphmend.hook.install([package.name]):
        import_fresh(package.name)
    with graphmend.hook.install([package.name], cache=False) as handle:
        import_fresh(package.name)
    assert handle.stats.cache_hits == 0 and handle.stats.transform_calls == 1


# --- every read problem means "rewrite again" ---------------------------------------


def corrupt(data: bytes) -> bytes:
    return data[:-8] + b"\xff" * 8


def truncate(data: bytes) -> bytes:
    return data[: len(data) // 2]


def header_only(data: bytes) -> bytes:
    return data[: cache._HEADER.size]


def wrong_magic(data: bytes) -> bytes:
    return b"XXXX" + data[4:]


def other_python(data: bytes) -> bytes:
    return data[:8] + b"\0\0\r\n" + data[12:]


def empty(data: bytes) -> bytes:
    return b""


@pytest.mark.parametrize(
    "damage", [corrupt, truncate, header_only, wrong_magic, other_python, empty]
)
def test_damaged_cache_files_mean_rewrite_again(make_package, fake_rewriter, hook_handles, damage):
    package = make_package({"mod.py": "X = 1\n"})
    hook_handles([package.name])
    import_fresh(f"{package.name}.mod")
    (cache_file,) = [f for f in cache_files(package.directory) if ".mod." in f.name]
    cache_file.write_bytes(damage(cache_file.read_bytes()))
    os.chmod(cache_file, 0o600)

    mod = import_fresh(f"{package.name}.mod")

    assert mod.X == 1 and mod.__mended_by_test__
    assert fake_rewriter.module_names.count(mod.__name__) == 2
    key = cache.make_key(mod.__name__, mod.__file__, b"X = 1\n", ("trap", "where", "defer", "capture"), "all")
    assert cache.read_cached_code(str(cache_file), key) is not None  # rewritten, valid again


def test_a_cache_file_for_another_key_is_not_used(make_package, fake_rewriter, hook_handles):
    """A foreign file under our name (say, copied from another module) is ignored."""
    package = make_package({"a.py": "A = 1\n", "b.py": "B = 1\n"})
    hook_handles([package.name])
    import_fresh(f"{package.name}.a")
    import_fresh(f"{package.name}.b")
    files = {f.name.split(".")[1]: f for f in cache_files(package.directory)}
    files["b"].write_bytes(files["a"].read_bytes())
    b = import_fresh(f"{package.name}.b")
    assert b.B == 1 and not hasattr(b, "A")
    assert fake_rewriter.module_names.count(b.__name__) == 2


def test_untrusted_cache_files_are_not_read(make_package, fake_rewriter, hook_handles, monkeypatch):
    package = make_package()
    hook_handles([package.name])
    import_fresh(package.name)
    monkeypatch.setattr(cache, "is_trusted", lambda file_status: False)
    import_fresh(package.name)
    assert fake_rewriter.module_names == [package.name, package.name]


def fake_status(mode: int, uid: int) -> os.stat_result:
    return os.stat_result((mode, 0, 0, 1, uid, 0, 0, 0, 0, 0))


@pytest.mark.parametrize(
    ("mode", "uid_offset", "trusted"),
    [
        (stat.S_IFREG | 0o600, 0, True),
        (stat.S_IFREG | 0o644, 0, True),
        (stat.S_IFREG | 0o620, 0, False),  # group-writable
        (stat.S_IFREG | 0o602, 0, False),  # world-writable
        (stat.S_IFREG | 0o600, 1, False),  # someone else's
        (stat.S_IFDIR | 0o700, 0, False),  # not a regular file
    ],
)
def test_is_trusted(mode, uid_offset, trusted):
    assert cache.is_trusted(fake_status(mode, os.getuid() + uid_offset)) is trusted


def test_group_writable_cache_file_on_disk_is_ignored(make_package, fake_rewriter, hook_handles):
    package = make_package()
    hook_handles([package.name])
    import_fresh(package.name)
    (cache_file,) = cache_files(package.directory)
    os.chmod(cache_file, 0o666)
    import_fresh(package.name)
    assert len(fake_rewriter.calls) == 2


def test_symlinked_cache_file_is_not_followed(make_package, fake_rewriter, hook_handles, tmp_path):
    package = make_package()
    hook_handles([package.name])
    import_fresh(package.name)
    (cache_file,) = cache_files(package.directory)
    target = tmp_path / "elsewhere.pyc"
    cache_file.rename(target)
    cache_file.symlink_to(target)
    import_fresh(package.name)
    assert len(fake_rewriter.calls) == 2


# --- every write problem is ignored ---------------------------------------------------


def test_cache_dir_that_cannot_exist_is_ignored(make_package, fake_rewriter, tmp_path):
    package = make_package()
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with graphmend.hook.install([package.name], cache_dir=blocker / "cache") as handle:
        assert import_fresh(package.name).__mended_by_test__
    assert handle.stats.cache_writes == 0


def permission_denied(*args, **kwargs):
    raise PermissionError(13, "Permission denied")


@pytest.mark.parametrize("failing", ["os.replace", "tempfile.mkstemp", "os.makedirs"])
def test_unwritable_cache_folder_is_ignored(make_package, fake_rewriter, failing):
    # Tests may run as root, for whom chmod 0o500 stops nothing; fail the calls instead.
    module_name, function_name = failing.split(".")
    module = {"os": cache.os, "tempfile": cache.tempfile}[module_name]
    package = make_package()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(module, function_name, permission_denied)
        with graphmend.hook.install([package.name]) as handle:
            assert import_fresh(package.name).__mended_by_test__
    assert handle.stats.cache_writes == 0
    assert [
        p for p in package.directory.rglob("*") if p.is_file() and p.name != "__init__.py"
    ] == []


def test_read_only_cache_folder_still_serves_hits(
    make_package, fake_rewriter, hook_handles, monkeypatch
):
    package = make_package()
    hook_handles([package.name])
    import_fresh(package.name)
    monkeypatch.setattr(cache.tempfile, "mkstemp", permission_denied)
    import_fresh(package.name)
    assert len(fake_rewriter.calls) == 1


_XDG_PLATFORM = pytest.mark.skipif(sys.platform in ("win32", "darwin"), reason="XDG cache folder")


@_XDG_PLATFORM
def test_dont_write_bytecode_writes_nothing_next_to_the_module(
    make_package, fake_rewriter, hook_handles, monkeypatch, tmp_path
):
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "user-cache"))
    package = make_package()
    handle = hook_handles([package.name])
    assert import_fresh(package.name).__mended_by_test__
    assert not (package.directory / "__pycache__").exists()
    assert handle.stats.cache_writes == 1
    assert len(cache_files(tmp_path / "user-cache" / "graphmend")) == 1


def test_user_cache_dir_follows_xdg_cache_home(monkeypatch, tmp_path):
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache.user_cache_dir() == str(tmp_path / "graphmend")
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/ignored")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache.user_cache_dir() == str(tmp_path / "home" / ".cache" / "graphmend")


@_XDG_PLATFORM
@pytest.mark.parametrize("where", ["user cache directory", "GRAPHMEND_CACHE_DIR"])
def test_dont_write_bytecode_still_caches_across_processes(make_package, tmp_path, where):
    modules = {f"m{index}.py": f"VALUE = {index}\n" for index in range(3)}
    package = make_package(modules)
    names = [f"{package.name}.m{index}" for index in range(3)]
    user_cache = tmp_path / "user-cache"
    variables = {"PYTHONDONTWRITEBYTECODE": "1", "XDG_CACHE_HOME": str(user_cache)}
    folder = user_cache / "graphmend"
    if where == "GRAPHMEND_CACHE_DIR":
        folder = tmp_path / "explicit"
        variables[graphmend.hook.CACHE_DIR_ENVIRONMENT_VARIABLE] = str(folder)
    cold = run_driver(package, *names, **variables)
    written = {path: path.stat().st_mtime_ns for path in cache_files(folder)}
    warm = run_driver(package, *names, **variables)
    assert (cold["transform_calls"], cold["cache_writes"]) == (4, 4)
    assert (warm["transform_calls"], warm["cache_hits"], warm["cache_writes"]) == (0, 4, 0)
    assert warm["mended"] == [True, True, True]
    assert len(written) == 4 and {path: path.stat().st_mtime_ns for path in cache_files(folder)} == written
    assert cache_files(package.root) == []
    if where == "GRAPHMEND_CACHE_DIR":
        assert not user_cache.exists()


def test_no_cache_tag_means_no_cache(make_package, fake_rewriter, hook_handles, monkeypatch):
    monkeypatch.setattr(sys.implementation, "cache_tag", None)
    package = make_package()
    handle = hook_handles([package.name])
    import_fresh(package.name)
    assert handle.stats.cache_writes == 0 and not (package.directory / "__pycache__").exists()


# --- concurrency ------------------------------------------------------------------------


@pytest.mark.slow  # fresh interpreters
def test_two_processes_filling_a_cold_cache_at_once(make_package):
    modules = {f"m{index}.py": f"VALUE = {index}\n" * 200 for index in range(40)}
    package = make_package(modules)
    names = [f"{package.name}.m{index}" for index in range(40)]
    command = [sys.executable, "-c", SUBPROCESS_DRIVER, package.name, *names]
    environment = subprocess_environment(package.root)
    processes = [
        subprocess.Popen(command, env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for _ in range(2)
    ]
    for process in processes:
        _, stderr = process.communicate(timeout=120)
        assert process.returncode == 0, stderr.decode()
    assert not list(package.directory.rglob("*.tmp"))  # no temp files left behind
    warm = run_driver(package, *names)
    assert warm["transform_calls"] == 0 and warm["cache_hits"] == 41
    assert warm["mended"] == [True] * 40
