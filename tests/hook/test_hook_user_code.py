"""The user's own code is mended by default (issue 16): every module not in the
standard library or an installed distribution, decided by where its file is."""

from __future__ import annotations

import importlib
import importlib.machinery
import sys
import textwrap
import warnings

import pytest

import graphmend.hook
from graphmend.hook import GraphmendWarning, HookStats, MendingFinder, MendingLoader
from graphmend.hook.finder import LibraryLocations
from graphmend.hook.loader import MendOptions


@pytest.fixture
def user_folder(tmp_path, monkeypatch):
    """A project folder on sys.path; its modules are forgotten afterwards."""
    folder = tmp_path / "project"
    folder.mkdir()
    monkeypatch.syspath_prepend(str(folder))
    written: list[str] = []

    def write(relative: str, text: str = "X = 1\n"):
        path = folder / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")
        written.append(relative.split("/")[0].removesuffix(".py"))
        return path

    yield write
    for name in list(sys.modules):
        if name.split(".")[0] in written:
            del sys.modules[name]


def user_code_finder() -> MendingFinder:
    return MendingFinder((), MendOptions(rules=("trap",)), HookStats(), user_code=True)


def test_a_module_of_the_users_own_is_mended_with_scope_all(user_folder, fake_rewriter, hook_handles):
    user_folder("gm_own_model.py")
    user_folder("gm_own_pkg/__init__.py", "")
    user_folder("gm_own_pkg/layers.py")
    hook_handles(cache=False)
    model = importlib.import_module("gm_own_model")
    layers = importlib.import_module("gm_own_pkg.layers")
    assert model.__mended_by_test__ and layers.__mended_by_test__
    assert isinstance(layers.__spec__.loader, MendingLoader)
    assert {call["scope"] for call in fake_rewriter.calls} == {"all"}
    assert fake_rewriter.module_names == ["gm_own_model", "gm_own_pkg", "gm_own_pkg.layers"]


def test_user_code_false_mends_only_the_named_packages(user_folder, fake_rewriter, hook_handles):
    user_folder("gm_own_plain.py")
    hook_handles(cache=False, user_code=False)
    assert not hasattr(importlib.import_module("gm_own_plain"), "__mended_by_test__")
    assert fake_rewriter.calls == []


def test_code_in_a_site_packages_folder_is_an_installed_distribution(tmp_path, monkeypatch, fake_rewriter, hook_handles):
    site_folder = tmp_path / "venv" / "lib" / "site-packages"
    (site_folder / "gm_installed_lib").mkdir(parents=True)
    (site_folder / "gm_installed_lib" / "__init__.py").write_text("X = 1\n")
    (site_folder / "gm_installed_lib" / "sub.py").write_text("Y = 2\n")
    monkeypatch.syspath_prepend(str(site_folder))
    try:
        handle = hook_handles(cache=False)
        lib = importlib.import_module("gm_installed_lib")
        assert not hasattr(lib, "__mended_by_test__")
        # The top-level decision is remembered: the submodule is decided by name.
        assert not handle.finder.is_targeted("gm_installed_lib.sub")
        assert not hasattr(importlib.import_module("gm_installed_lib.sub"), "__mended_by_test__")
        assert fake_rewriter.calls == []
        # ... and --package adds it.
        assert MendingFinder(["gm_installed_lib"], MendOptions(rules=("trap",)), HookStats()).is_targeted(
            "gm_installed_lib.sub"
        )
    finally:
        for name in [n for n in sys.modules if n.startswith("gm_installed_lib")]:
            del sys.modules[name]


def test_the_standard_library_is_decided_by_name_without_a_lookup(monkeypatch):
    finder = user_code_finder()
    looked_up = []
    real_find_spec = importlib.machinery.PathFinder.find_spec

    def counting_find_spec(name, path=None, target=None):
        looked_up.append(name)
        return real_find_spec(name, path, target)

    monkeypatch.setattr(importlib.machinery.PathFinder, "find_spec", counting_find_spec)
    for name in ("json", "json.decoder", "logging.handlers", "colorsys", "torch.nn", "graphmend.api", "__main__"):
        assert not finder.is_targeted(name)
        assert finder.find_spec(name) is None
    assert looked_up == []


def test_the_interpreters_own_folders_are_installed_code():
    locations = LibraryLocations()
    assert locations.is_installed(json_file := importlib.import_module("json").__file__), json_file
    assert locations.is_installed(importlib.import_module("torch").__file__)
    assert not locations.is_installed(__file__)


def test_folders_named_by_pth_files_are_installed_code(tmp_path, monkeypatch):
    site_folder, editable = tmp_path / "site", tmp_path / "checkout" / "src"
    site_folder.mkdir()
    editable.mkdir(parents=True)
    (site_folder / "__editable__.mylib.pth").write_text(f"# a comment\nimport os\n{editable}\n")
    (site_folder / "unreadable.pth").mkdir()  # not a file: ignored
    monkeypatch.setattr("site.getsitepackages", lambda: [str(site_folder)])
    locations = LibraryLocations()
    assert locations.is_installed(str(editable / "mylib" / "__init__.py"))
    assert not locations.is_installed(str(tmp_path / "checkout" / "scripts" / "run.py"))


def test_a_user_module_the_rewriter_fails_on_loads_as_it_was_with_one_warning(
    user_folder, fake_rewriter, hook_handles
):
    user_folder("gm_own_broken.py", "VALUE = 'original'\n")
    fake_rewriter.error = RuntimeError("rewriter exploded")
    hook_handles(cache=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = importlib.import_module("gm_own_broken")
    assert module.VALUE == "original" and not hasattr(module, "__mended_by_test__")
    messages = [str(w.message) for w in caught if issubclass(w.category, GraphmendWarning)]
    assert len(messages) == 1 and "gm_own_broken" in messages[0] and "rewriter exploded" in messages[0]


def test_user_modules_imported_before_install_are_named_in_one_warning(user_folder, hook_handles):
    user_folder("gm_own_early.py")
    importlib.import_module("gm_own_early")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        hook_handles(cache=False)
    messages = [str(w.message) for w in caught if issubclass(w.category, GraphmendWarning)]
    assert len(messages) == 1 and "gm_own_early" in messages[0]
    # installed libraries imported before (torch, numpy, the standard library) are not named
    assert "numpy" not in messages[0] and "json" not in messages[0]


def test_graphmend_install_forwards_user_code():
    with graphmend.install(user_code=False) as handle:
        assert not handle.finder.user_code
    with graphmend.install() as handle:
        assert handle.finder.user_code


def test_an_import_never_fails_over_the_user_code_decision(user_folder, fake_rewriter, hook_handles, monkeypatch):
    user_folder("gm_own_undecidable.py", "VALUE = 'plain'\n")

    def broken_locations(self):
        raise RuntimeError("sysconfig is broken")

    monkeypatch.setattr(LibraryLocations, "__init__", broken_locations)
    hook_handles(cache=False)
    module = importlib.import_module("gm_own_undecidable")
    assert module.VALUE == "plain" and not hasattr(module, "__mended_by_test__")


def test_a_script_with_nothing_rewritten_gets_no_runtime_name(tmp_path, capsys):
    from graphmend.cli.run import run_command

    script = tmp_path / "pure_script.py"
    script.write_text("def double(x):\n    return x * 2\n\nprint(sorted(k for k in globals() if 'graphmend' in k))\n")
    assert run_command(["--no-cache", str(script)]) == 0
    assert capsys.readouterr().out == "[]\n"
