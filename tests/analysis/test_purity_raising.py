"""Purity counts operations that commonly raise, and ``inplace=`` writes (issue 15)."""

import ast

import pytest

from graphmend.analysis.bindings import ModuleBindings
from graphmend.analysis.purity import PurityAnalysis


@pytest.mark.parametrize(
    "body, reason",
    [
        ("def g(v, heads):\n    return v * (12 // heads)", "may raise"),
        ("def g(v, n):\n    return v % n", "may raise"),
        ("def g(v, w):\n    return v @ w", "may raise"),
        ("def g(v, i):\n    return v[i]", "indexes"),
        ("def g(v):\n    return F.relu(v, inplace=True)", "inplace="),
    ],
)
def test_purity_counts_raising_operations_and_inplace_keywords(body, reason):
    tree = ast.parse("import torch\nimport torch.nn.functional as F\n" + body)
    purity = PurityAnalysis(tree, ModuleBindings(tree))
    impurity = purity.function_impurity(purity.functions["g"])
    assert impurity is not None and reason in impurity


def test_purity_keeps_plain_arithmetic_pure():
    tree = ast.parse("import torch\ndef g(v, k):\n    return torch.relu(v) * k + 1\n")
    purity = PurityAnalysis(tree, ModuleBindings(tree))
    assert purity.function_impurity(purity.functions["g"]) is None
