"""The test tiers of tests/conftest.py: slow tests, and strided many-case tests."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).parent
CONFTEST = (TESTS / "conftest.py").read_text(encoding="utf-8")

pytest_plugins = ["pytester"]


def _strided_tests():
    for path in sorted(TESTS.rglob("test_*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if not isinstance(node, ast.FunctionDef):
                continue
            for decorator in node.decorator_list:
                if "default_tier_stride" in ast.unparse(decorator):
                    yield path.relative_to(TESTS).as_posix(), node, decorator


def test_every_strided_test_is_parametrized_with_a_stride_of_at_least_2():
    strided = list(_strided_tests())
    assert strided
    for file, function, decorator in strided:
        decorators = [ast.unparse(d) for d in function.decorator_list]
        assert any("parametrize" in d for d in decorators), (file, function.name)
        assert isinstance(decorator, ast.Call), (file, function.name)
        (stride,) = decorator.args
        assert isinstance(stride, ast.Constant) and stride.value >= 2, (file, function.name)


def test_a_strided_test_keeps_its_first_case_in_the_default_tier(pytester):
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(
        test_strided="import pytest\n\n"
        "@pytest.mark.default_tier_stride(5)\n"
        "@pytest.mark.parametrize('case', range(11))\n"
        "def test_differential(case):\n"
        "    pass\n"
    )
    default = pytester.runpytest("-q", "-p", "no:cacheprovider")
    full = pytester.runpytest("-q", "-p", "no:cacheprovider", "--full")
    default.assert_outcomes(passed=len(range(0, 11, 5)), deselected=11 - len(range(0, 11, 5)))
    full.assert_outcomes(passed=11)


def test_a_slow_test_runs_only_in_the_full_tier_or_when_chosen_by_marker(pytester):
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(
        test_marked="import pytest\n\n"
        "@pytest.mark.slow\n"
        "def test_slow():\n"
        "    pass\n\n"
        "def test_quick():\n"
        "    pass\n",
        test_whole_module="import pytest\n\n"
        "pytestmark = pytest.mark.slow\n\n"
        "def test_in_a_slow_module():\n"
        "    pass\n",
    )
    pytester.runpytest("-q", "-p", "no:cacheprovider").assert_outcomes(passed=1, deselected=2)
    pytester.runpytest("-q", "-p", "no:cacheprovider", "--full").assert_outcomes(passed=3)
    pytester.runpytest("-q", "-p", "no:cacheprovider", "-m", "slow").assert_outcomes(passed=2, deselected=1)
