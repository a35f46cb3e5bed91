"""Code a compile-state test rules out never runs under torch.compile
(``analysis/compile_state.py``): no candidate there, and no rule rewrites it."""

from __future__ import annotations

import ast
import textwrap

import pytest
import torch

from graphmend.analysis.bindings import ModuleBindings
from graphmend.analysis.compile_state import compile_state_names, value_while_compiling
from graphmend.rewrite.pipeline import mend_module_source
from helpers import graphs_and_breaks, original_and_mended

IMPORTS = (
    "import torch\n"
    "from transformers.utils import is_torchdynamo_compiling\n"
    "from ..utils.import_utils import is_tracing\n"
    "from torch.jit import is_tracing as jit_is_tracing\n"
    "from torch.compiler import is_compiling\n"
)


@pytest.mark.parametrize(
    "test, value",
    [
        ("is_torchdynamo_compiling()", True),
        ("not is_torchdynamo_compiling()", False),
        ("not is_torchdynamo_compiling() and legacy", False),
        ("is_tracing() or x is None", True),
        ("not is_tracing(x)", False),
        ("torch.compiler.is_compiling()", True),
        ("torch._dynamo.is_compiling()", True),
        ("is_compiling() and not is_tracing()", False),
        # Decided only once a part that may break has run: not a decided test.
        ("x.any() and not is_compiling()", None),
        ("is_compiling() and x", None),
        ("legacy or not is_compiling()", None),
        # torch.jit.is_tracing is False under TorchDynamo; others' methods are unknown.
        ("jit_is_tracing()", None),
        ("torch.jit.is_tracing()", None),
        ("self.is_compiling()", None),
        ("is_torchdynamo_compiling(*args)", None),
    ],
)
def test_value_while_compiling(test, value):
    tree = ast.parse(IMPORTS)
    names = compile_state_names(ModuleBindings(tree))
    assert value_while_compiling(ast.parse(test, mode="eval").body, names) is value


def test_a_rebound_name_is_not_a_compile_state_test():
    tree = ast.parse(IMPORTS + "def is_tracing():\n    return False\n")
    names = compile_state_names(ModuleBindings(tree))
    assert value_while_compiling(ast.parse("not is_tracing()", mode="eval").body, names) is None


GUARDED = """
    import logging
    import torch

    logger = logging.getLogger("gm_test_compile_state")

    def f(x, legacy):
        if not torch.compiler.is_compiling() and legacy:
            logger.warning("legacy path %s", x.sum())
            if x.sum() > 0:
                x = x + 1
        if torch.compiler.is_compiling():
            y = x * 2
        else:
            print("eager", x.sum().item())
            y = x * 2
        return y
"""


def test_code_a_compile_state_test_rules_out_is_no_candidate_and_stays_as_written():
    result = mend_module_source(textwrap.dedent(GUARDED))
    assert result.findings == []
    assert not result.changed


def test_such_code_does_not_break_the_graph_unmended():
    """What makes it right: TorchDynamo answers the test while tracing, and the arm it
    rules out is never traced (no break, eager output as written)."""
    original, _, _ = original_and_mended(GUARDED)
    assert graphs_and_breaks(original.f, torch.ones(3), True) == (1, 0)


def test_a_test_a_tensor_part_runs_before_is_still_a_candidate():
    source = """
        import torch

        def f(x):
            if x.sum() > 0 and not torch.compiler.is_compiling():
                print("positive")
            return x
    """
    result = mend_module_source(textwrap.dedent(source))
    assert "DC" in [f.category for f in result.findings]


def test_a_method_only_an_eager_only_arm_calls_is_out_of_checks_scope():
    """qwen2-audio (transformers 5.x) merges its inputs the legacy way only under `if not
    is_torchdynamo_compiling() and legacy_processing:`: that method is never compiled."""
    source = """
        import torch

        class Model(torch.nn.Module):
            def forward(self, x, legacy):
                if not torch.compiler.is_compiling() and legacy:
                    x = self._legacy_merge(x)
                return self._merge(x)

            def _legacy_merge(self, x):
                if x.sum() > 0:
                    raise ValueError("legacy")
                return x

            def _merge(self, x):
                print("merge")
                return x
    """
    result = mend_module_source(textwrap.dedent(source), scope="entry")
    assert [(f.category, f.function) for f in result.findings] == [("LC", "Model._merge")]
    everything = mend_module_source(textwrap.dedent(source), scope="all")
    assert ("VG", "Model._legacy_merge") in [(f.category, f.function) for f in everything.findings]
