"""Fixtures for the import-hook tests."""

from __future__ import annotations

import itertools
import os
import sys

import pytest

import graphmend.hook
import graphmend.hook.loader
from hook.hook_helpers import FakeRewriter, GeneratedPackage

_package_numbers = itertools.count()


@pytest.fixture
def fake_rewriter(monkeypatch) -> FakeRewriter:
    """The seam: the loader calls graphmend.hook.loader.mend_module_source."""
    rewriter = FakeRewriter()
    monkeypatch.setattr(graphmend.hook.loader, "mend_module_source", rewriter)
    return rewriter


@pytest.fixture(autouse=True)
def bytecode_writing_allowed(monkeypatch):
    """The environment may set PYTHONDONTWRITEBYTECODE; cache tests need writes on."""
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    monkeypatch.delenv("PYTHONDONTWRITEBYTECODE", raising=False)
    monkeypatch.delenv(graphmend.hook.CACHE_DIR_ENVIRONMENT_VARIABLE, raising=False)


@pytest.fixture
def hook_handles():
    """install() through this list; every handle is uninstalled after the test."""
    handles: list[graphmend.hook.InstallHandle] = []

    def install(*args, **kwargs):
        handle = graphmend.hook.install(*args, **kwargs)
        handles.append(handle)
        return handle

    yield install
    for handle in handles:
        handle.uninstall()


@pytest.fixture
def make_package(tmp_path, monkeypatch):
    """Create uniquely named packages on sys.path; forget their modules afterwards."""
    created: list[str] = []

    def make(files: dict[str, str | bytes] | None = None) -> GeneratedPackage:
        name = f"gm_test_pkg_{os.getpid()}_{next(_package_numbers)}"
        root = tmp_path / "site"
        package = GeneratedPackage(name, root)
        package.write("__init__.py", "VALUE = 'package'\n")
        for relative, text in (files or {}).items():
            package.write(relative, text)
        monkeypatch.syspath_prepend(str(root))
        created.append(name)
        return package

    yield make
    for name in list(sys.modules):
        if any(name == package or name.startswith(package + ".") for package in created):
            del sys.modules[name]
