"""graphmend.torch_adapter: torch is patched only by the ways in, and reversibly."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib
import warnings
from pathlib import Path

import pytest
import torch

import graphmend
from graphmend import torch_adapter
from graphmend.hook import GraphmendWarning

ROOT = Path(__file__).resolve().parents[1]

_FRESH = textwrap.dedent(
    """
    import importlib, json, sys
    import torch
    import graphmend
    from graphmend import torch_adapter

    def targets():
        found = {}
        for patch in torch_adapter.PATCHES:
            owner = importlib.import_module(patch.module)
            if patch.owner:
                owner = getattr(owner, patch.owner)
            found[patch.name] = getattr(owner, patch.attribute)
        return found

    originals = targets()
    graphmend.mend_source("print(1)\\n")
    state = {"runtime_imported": "graphmend.runtime" in sys.modules}
    state["unchanged_after_import"] = [n for n, v in targets().items() if v is originals[n]]
    handle = graphmend.install(user_code=False)
    state["patched_after_install"] = [n for n, v in targets().items() if torch_adapter.is_patched(v)]
    graphmend.install(user_code=False)
    state["patched_twice"] = [n for n, v in targets().items() if torch_adapter.is_patched(getattr(v, "__wrapped__", None))]
    graphmend.uninstall()
    state["restored_after_uninstall"] = [n for n, v in targets().items() if v is originals[n]]
    state["finders_left"] = [type(f).__name__ for f in sys.meta_path if type(f).__name__ == "MendingFinder"]
    print(json.dumps(state))
    """
)


def test_import_changes_nothing_install_patches_uninstall_restores():
    environment = dict(os.environ)
    environment["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), environment.get("PYTHONPATH", "")])
    completed = subprocess.run(
        [sys.executable, "-c", _FRESH], capture_output=True, text=True, env=environment, cwd=ROOT, timeout=300
    )
    assert completed.returncode == 0, completed.stderr
    state = json.loads(completed.stdout.splitlines()[-1])
    every = sorted(patch.name for patch in torch_adapter.PATCHES)
    needed = sorted(patch.name for patch in torch_adapter.PATCHES if torch_adapter.needed(patch))
    assert state["runtime_imported"] is False
    assert sorted(state["unchanged_after_import"]) == every
    assert sorted(state["patched_after_install"]) == needed
    assert state["patched_twice"] == []  # a second install wraps nothing again
    assert sorted(state["restored_after_uninstall"]) == every
    assert state["finders_left"] == []


@pytest.fixture
def adapter_reactivated():
    """Leave torch patched afterwards, as the rest of the suite (which imports the
    runtime) expects."""
    yield
    torch_adapter.activate()


def test_deactivate_restores_the_exact_objects_and_both_are_idempotent(adapter_reactivated):
    from torch._dynamo.convert_frame import ConvertFrame
    from torch._dynamo.symbolic_convert import InstructionTranslator, InstructionTranslatorBase

    from graphmend.runtime import claims

    torch_adapter.activate()
    assert torch_adapter.is_patched(torch.compile)
    assert torch_adapter.is_patched(ConvertFrame.__call__)
    assert claims.trace_checks_unavailable() is None
    torch_adapter.deactivate()
    torch_adapter.deactivate()
    assert not torch_adapter.is_patched(torch.compile)
    assert not torch_adapter.is_patched(ConvertFrame.__call__)
    assert not any(torch_adapter.is_patched(value) for value in vars(InstructionTranslator).values())
    assert not any(torch_adapter.is_patched(value) for value in vars(InstructionTranslatorBase).values())
    # With the hooks gone, no rewrite that needs them is kept while tracing.
    assert claims.trace_checks_unavailable() is not None
    torch_adapter.activate()
    first = torch.compile
    torch_adapter.activate()
    assert torch.compile is first and torch_adapter.is_patched(first)
    assert not torch_adapter.is_patched(first.__wrapped__)


def test_every_patch_has_its_target_in_this_torch():
    # A feature test per row: a new torch that moves a target shows up here by name.
    assert [patch.name for patch in torch_adapter.PATCHES if not torch_adapter.available(patch)] == []


def test_a_patch_for_behaviour_this_torch_lacks_is_not_applied_nor_required(adapter_reactivated, monkeypatch):
    from graphmend.runtime import claims

    lacking = torch_adapter.Patch(
        "for_a_feature_this_torch_lacks", "torch", None, "compile", lambda original: original,
        claims_hook=True, only_where=(("torch", "_no_such_feature_anywhere"),),
    )
    monkeypatch.setattr(torch_adapter, "PATCHES", (*torch_adapter.PATCHES, lacking))
    torch_adapter.deactivate()
    torch_adapter.activate()
    assert not torch_adapter.needed(lacking) and torch_adapter.available(lacking)
    assert "for_a_feature_this_torch_lacks" not in torch_adapter.applied()
    assert claims.trace_checks_unavailable() is None


def test_a_failed_op_is_restarted_from_where_this_torch_reports_it():
    # Either TorchDynamo wraps the failure into its own error (2.13), or it turns it into
    # an exception of the traced program (2.14 on), which another row restarts from.
    from torch._dynamo import exc

    rows = {patch.name: patch for patch in torch_adapter.PATCHES}
    observed = rows["restart_on_observed_failed_op"]
    assert torch_adapter.needed(observed) == hasattr(exc, "FakeTensorObservedException")
    assert torch_adapter.available(rows["restart_on_failed_op"])


def test_the_declared_torch_range_is_the_adapters():
    dependencies = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    (torch_requirement,) = [d for d in dependencies if d.startswith("torch")]
    low, high = re.fullmatch(r"torch>=(\d+\.\d+),<(\d+\.\d+)", torch_requirement).groups()
    as_pair = lambda text: tuple(int(part) for part in text.split("."))  # noqa: E731
    assert (as_pair(low), as_pair(high)) == torch_adapter.SUPPORTED
    assert torch_adapter.unsupported_torch() is None  # the torch these tests run on


def _model_function(x):
    if x.sum() > 0:
        return x + 1
    return x - 1


@pytest.fixture
def unsupported_torch(monkeypatch):
    monkeypatch.setattr(torch_adapter, "torch_version", lambda: (2, 16))
    monkeypatch.setattr(torch_adapter, "_warned", False)
    torch_adapter.deactivate()
    yield
    monkeypatch.undo()
    torch_adapter.activate()


def test_an_unsupported_torch_warns_once_and_nothing_is_mended_or_patched(unsupported_torch):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mended = graphmend.mend(_model_function)
        handle = graphmend.install(user_code=False)
        assert torch_adapter.activate() is False
    assert mended is _model_function
    assert not handle.installed
    assert not torch_adapter.is_patched(torch.compile)
    messages = [str(w.message) for w in caught if issubclass(w.category, GraphmendWarning)]
    assert len(messages) == 1
    assert "supports torch 2.13 to 2.15" in messages[0] and "unmended" in messages[0]
