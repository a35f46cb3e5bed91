"""The hook with graphmend's real rewriter (no fake): mended modules import, behave as
the originals do when run eagerly, survive the cache, and keep their line numbers."""

from __future__ import annotations

import importlib
import sys
import traceback
import warnings

import pytest

from graphmend.hook import GraphmendWarning

torch = pytest.importorskip("torch")

MODEL_CODE = """\
import torch


def helper(x):
    y = x * 2

    if y.mean() > 0:
        print("large")

    return y + 1


def broken(x):
    y = x * 2

    if y.mean() > 0:
        print("large")

    return y + undefined_name
"""


def forget(name: str) -> None:
    for loaded in [n for n in sys.modules if n == name or n.startswith(name + ".")]:
        del sys.modules[loaded]


def test_mended_module_behaves_like_the_original_and_survives_the_cache(
    make_package, hook_handles, capsys
):
    package = make_package({"model.py": MODEL_CODE})
    name = f"{package.name}.model"
    plain = importlib.import_module(name)
    expected = plain.helper(torch.ones(2))
    assert capsys.readouterr().out == "large\n"
    forget(package.name)

    for attempt in ("cold", "warm"):
        handle = hook_handles([package.name])
        with warnings.catch_warnings():
            warnings.simplefilter("error", GraphmendWarning)
            mended = importlib.import_module(name)
        assert torch.equal(mended.helper(torch.ones(2)), expected), attempt
        assert capsys.readouterr().out == "large\n", attempt
        assert handle.stats.fallbacks == 0
        handle.uninstall()
        forget(package.name)
    assert handle.stats.cache_hits == 2 and handle.stats.transform_calls == 0


def test_tracebacks_from_mended_modules_quote_the_right_original_line(
    make_package, hook_handles, capsys
):
    package = make_package({"model.py": MODEL_CODE})
    hook_handles([package.name], cache=False)
    mended = importlib.import_module(f"{package.name}.model")
    assert any("__graphmend__" in getattr(getattr(value, "__code__", None), "co_names", ())
               for value in vars(mended).values()), "the rewriter no longer changes this module"
    assert "__graphmend__" not in vars(mended)
    with pytest.raises(NameError) as caught:
        mended.broken(torch.ones(2))
    frame = traceback.extract_tb(caught.value.__traceback__)[-1]
    assert (frame.lineno, frame.line) == (19, "return y + undefined_name")
