"""The finder and loader: which modules are mended, and that mended modules still
behave like plainly imported ones."""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.resources
import inspect
import sys
import traceback
import types
import warnings

import pytest

import graphmend.hook
from graphmend.hook import GraphmendWarning, HookStats, MendingFinder, MendingLoader
from graphmend.hook.loader import MendOptions
from hook.hook_helpers import MENDED_MARKER


def make_finder(*packages: str) -> MendingFinder:
    return MendingFinder(packages, MendOptions(rules=("trap",)), HookStats())


# --- the name-only decision ---------------------------------------------------------

TARGETED = [
    ("mypkg", ("mypkg",)),
    ("mypkg.sub", ("mypkg",)),
    ("mypkg.sub.deeper", ("mypkg",)),
    ("a.b.c", ("a.b",)),
    ("transformers.models.t5.modeling_t5", ("transformers",)),
    ("transformers_modules.org.model.modeling", ("transformers",)),
]
NOT_TARGETED = {
    "other package": ("json", ("mypkg",)),
    "shared prefix is not a subpackage": ("mypkg_extra", ("mypkg",)),
    "parent of a targeted subpackage": ("a", ("a.b",)),
    "torch is never rewritten": ("torch", ("mypkg",)),
    "torch submodules are never rewritten": ("torch._dynamo.eval_frame", ("mypkg",)),
    "graphmend is never rewritten": ("graphmend.runtime", ("mypkg",)),
    "remote code only with transformers": ("transformers_modules.x", ("mypkg",)),
}


@pytest.mark.parametrize(("name", "packages"), TARGETED)
def test_targeted_names(name, packages):
    assert make_finder(*packages).is_targeted(name)


@pytest.mark.parametrize(("name", "packages"), NOT_TARGETED.values(), ids=NOT_TARGETED.keys())
def test_names_left_alone(name, packages):
    assert not make_finder(*packages).is_targeted(name)


def test_untargeted_names_never_touch_the_file_system(monkeypatch):
    def no_file_system(*args, **kwargs):
        raise AssertionError("PathFinder was asked about an untargeted module")

    monkeypatch.setattr(importlib.machinery.PathFinder, "find_spec", no_file_system)
    finder = make_finder("mypkg")
    for name in ("json", "torch.nn", "graphmend.hook", "mypkg_extra.x"):
        assert finder.find_spec(name, None) is None


@pytest.mark.parametrize("name", ["torch", "torch.nn", "graphmend", "graphmend.rules", "", "1x"])
def test_install_refuses_packages_it_must_not_or_cannot_rewrite(name):
    with pytest.raises(ValueError):
        graphmend.hook.install([name])
    assert not any(isinstance(finder, MendingFinder) for finder in sys.meta_path)


def test_install_refuses_unknown_rules():
    with pytest.raises(ValueError, match="unknown rule 'nope'"):
        graphmend.hook.install(["mypkg"], rules=("trap", "nope"))


def test_rules_are_normalized_to_pipeline_order(hook_handles):
    handle = hook_handles(["mypkg"], rules="defer, trap,defer")
    assert handle.finder.options.rules == ("trap", "defer")


def test_torch_and_graphmend_are_not_rewritten_even_if_the_finder_is_asked(fake_rewriter):
    finder = make_finder("mypkg")
    assert finder.find_spec("torch.nn.functional", None) is None
    assert finder.find_spec("graphmend.runtime", None) is None
    assert fake_rewriter.calls == []


# --- mended modules -----------------------------------------------------------------


def test_targeted_modules_are_rewritten_with_scope_all(make_package, fake_rewriter, hook_handles):
    package = make_package({"sub/__init__.py": "", "sub/leaf.py": "X = 1\n"})
    handle = hook_handles([package.name], rules=("trap", "defer"), cache=False)

    leaf = importlib.import_module(f"{package.name}.sub.leaf")

    assert leaf.__mended_by_test__ and leaf.X == 1
    assert fake_rewriter.module_names == [package.name, f"{package.name}.sub", leaf.__name__]
    call = fake_rewriter.calls[-1]
    assert call["scope"] == "all"
    assert call["rules"] == ("trap", "defer")
    assert call["filename"] == leaf.__file__
    assert handle.stats.transform_calls == 3


def test_untargeted_modules_are_not_rewritten(make_package, fake_rewriter, hook_handles):
    targeted, other = make_package(), make_package()
    hook_handles([targeted.name], cache=False, user_code=False)
    module = importlib.import_module(other.name)
    assert not hasattr(module, "__mended_by_test__")
    assert not isinstance(module.__spec__.loader, MendingLoader)
    assert fake_rewriter.calls == []


def test_package_semantics_are_kept(make_package, fake_rewriter, hook_handles):
    package = make_package(
        {
            "data.txt": "resource\n",
            "sub/__init__.py": "",
            "sub/mod.py": "def f():\n    return 1 / 0\n",
        }
    )
    hook_handles([package.name], cache=False)
    module = importlib.import_module(package.name)
    mod = importlib.import_module(f"{package.name}.sub.mod")

    assert module.__file__ == str(package.directory / "__init__.py")
    assert module.__path__ == [str(package.directory)]
    assert module.__spec__.origin == module.__file__
    assert module.__spec__.submodule_search_locations == module.__path__
    assert module.__cached__ == importlib.util.cache_from_source(module.__file__)
    assert module.__loader__.is_package(package.name)
    assert not mod.__loader__.is_package(mod.__name__)
    assert mod.__package__ == f"{package.name}.sub"
    text = importlib.resources.files(package.name).joinpath("data.txt").read_text()
    assert text == "resource\n"
    # The original source, not the rewritten one, for get_source, inspect and tracebacks.
    assert mod.__loader__.get_source(mod.__name__) == "def f():\n    return 1 / 0\n"
    assert inspect.getsource(mod.f) == "def f():\n    return 1 / 0\n"
    with pytest.raises(ZeroDivisionError) as caught:
        mod.f()
    last_frame = traceback.extract_tb(caught.value.__traceback__)[-1]
    assert (last_frame.filename, last_frame.lineno, last_frame.line) == (
        mod.__file__,
        2,
        "return 1 / 0",
    )


def test_reload_goes_through_the_hook_again(make_package, fake_rewriter, hook_handles):
    package = make_package({"mod.py": "X = 1\n"})
    hook_handles([package.name], cache=False)
    mod = importlib.import_module(f"{package.name}.mod")
    importlib.reload(mod)
    assert fake_rewriter.module_names.count(mod.__name__) == 2
    assert mod.__mended_by_test__


def test_namespace_packages_are_left_to_python(make_package, fake_rewriter, hook_handles, tmp_path):
    package = make_package()
    namespace = tmp_path / "site" / f"{package.name}_ns"
    namespace.mkdir()
    (namespace / "inner.py").write_text("X = 1\n")
    importlib.invalidate_caches()
    hook_handles([namespace.name], cache=False)
    try:
        inner = importlib.import_module(f"{namespace.name}.inner")
        assert inner.__mended_by_test__  # the module inside is still a .py module
        assert fake_rewriter.module_names == [inner.__name__]
    finally:
        for name in [namespace.name, f"{namespace.name}.inner"]:
            sys.modules.pop(name, None)


def test_source_is_decoded_as_python_decodes_it(make_package, fake_rewriter, hook_handles):
    package = make_package(
        {
            "latin.py": "# -*- coding: latin-1 -*-\nTEXT = '\xe9'\n".encode("latin-1"),
            "bom.py": b"\xef\xbb\xbfTEXT = '\xc3\xa9'\r\n",
        }
    )
    hook_handles([package.name], cache=False)
    latin = importlib.import_module(f"{package.name}.latin")
    bom = importlib.import_module(f"{package.name}.bom")
    assert latin.TEXT == bom.TEXT == "\xe9"
    sources = {call["module_name"]: call["source"] for call in fake_rewriter.calls}
    assert sources[bom.__name__] == "TEXT = '\xe9'\n"  # no BOM, universal newlines


# --- never break the user's program -------------------------------------------------


def test_syntax_error_is_pythons_own(make_package, hook_handles):
    package = make_package({"broken.py": "x = 1\ndef f(:\n    pass\n"})
    with pytest.raises(SyntaxError) as plain:
        compile((package.directory / "broken.py").read_bytes(), "x", "exec")
    hook_handles([package.name], cache=False)  # the real (stub or full) rewriter
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(SyntaxError) as hooked:
            importlib.import_module(f"{package.name}.broken")
    assert hooked.value.msg == plain.value.msg
    assert hooked.value.lineno == plain.value.lineno == 2
    assert hooked.value.filename == str(package.directory / "broken.py")
    assert hooked.value.__context__ is None  # nothing of ours chained to it


@pytest.mark.parametrize(
    ("error", "output", "reason"),
    [
        (RuntimeError("rule exploded"), None, "RuntimeError: rule exploded"),
        (RecursionError("too deep"), None, "RecursionError: too deep"),
        (SyntaxError("rewriter rejects valid code"), None, "SyntaxError"),
        (None, "def broken(:\n", "SyntaxError"),
    ],
    ids=["raises", "recursion", "rejects-valid-source", "output-does-not-compile"],
)
def test_rewriter_failure_loads_the_original_with_one_warning(
    make_package, fake_rewriter, hook_handles, error, output, reason
):
    package = make_package({"mod.py": "X = 1\n"})
    fake_rewriter.error, fake_rewriter.output = error, output
    handle = hook_handles([package.name])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        __import__(f"{package.name}.mod")  # a plain import statement, no importlib frame
    mod = sys.modules[f"{package.name}.mod"]
    assert mod.X == 1 and not hasattr(mod, "__mended_by_test__")
    ours = [w for w in caught if issubclass(w.category, GraphmendWarning)]
    messages = [str(w.message) for w in ours]
    # one per module: the package __init__ and the submodule each fell back once
    assert len([m for m in messages if repr(mod.__name__) in m]) == 1, messages
    assert len(ours) == 2
    assert reason in messages[-1]
    assert ours[-1].filename == __file__  # attributed to the importing line
    assert handle.stats.fallbacks == 2
    assert handle.stats.cache_writes == 0  # failures are not cached
    assert not list(package.directory.rglob("*graphmend*"))


# --- install / uninstall ------------------------------------------------------------


def test_already_imported_modules_are_named_in_one_warning(make_package):
    package = make_package({"a.py": "", "b.py": ""})
    importlib.import_module(f"{package.name}.a")
    importlib.import_module(f"{package.name}.b")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        graphmend.hook.install([package.name, "json"]).uninstall()
    ours = [w for w in caught if issubclass(w.category, GraphmendWarning)]
    assert len(ours) == 1
    message = str(ours[0].message)
    for name in (package.name, f"{package.name}.a", f"{package.name}.b", "json"):
        assert name in message
    assert ours[0].filename == __file__


def test_no_warning_when_nothing_targeted_is_imported(make_package, hook_handles):
    package = make_package()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        hook_handles([package.name], user_code=False)


def test_modules_loaded_by_an_earlier_hook_are_not_reported(make_package, hook_handles):
    package = make_package()
    with graphmend.hook.install([package.name], cache=False, user_code=False):
        importlib.import_module(package.name)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        hook_handles([package.name], user_code=False)


def test_install_puts_the_finder_first_and_uninstall_removes_it(make_package, fake_rewriter):
    package = make_package({"late.py": ""})
    handle = graphmend.hook.install([package.name], cache=False)
    assert sys.meta_path[0] is handle.finder and handle.installed
    handle.uninstall()
    handle.uninstall()  # harmless
    assert handle.finder not in sys.meta_path and not handle.installed
    late = importlib.import_module(f"{package.name}.late")
    assert not hasattr(late, "__mended_by_test__")
    assert fake_rewriter.calls == []


def test_the_handle_is_a_context_manager(make_package, fake_rewriter):
    package = make_package()
    with graphmend.hook.install([package.name], cache=False) as handle:
        assert handle.installed
        assert importlib.import_module(package.name).__mended_by_test__
    assert not handle.installed


def test_include_main_covers_modules_next_to_the_main_script(
    tmp_path, monkeypatch, fake_rewriter, hook_handles
):
    scripts = tmp_path / "scripts"
    scripts.mkdir()
    (scripts / "train.py").write_text("")
    helper_name = f"gm_helper_{id(tmp_path)}"
    (scripts / f"{helper_name}.py").write_text("X = 1\n")
    main = types.ModuleType("__main__")
    main.__file__ = str(scripts / "train.py")
    monkeypatch.setitem(sys.modules, "__main__", main)
    monkeypatch.syspath_prepend(str(scripts))
    hook_handles([], include_main=True, cache=False)
    try:
        helper = importlib.import_module(helper_name)
        assert helper.__mended_by_test__
        assert fake_rewriter.module_names == [helper_name]
    finally:
        sys.modules.pop(helper_name, None)


def test_marker_is_what_the_fake_rewriter_appends():
    assert "__mended_by_test__" in MENDED_MARKER
