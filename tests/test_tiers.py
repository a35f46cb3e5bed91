"""The test tiers of tests/conftest.py: every test it lists as slow exists."""

from __future__ import annotations

import ast

import conftest

pytest_plugins = ["pytester"]


def _test_functions(path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)}


def test_every_listed_slow_test_exists():
    for file, tests in conftest.SLOW_TESTS.items():
        path = conftest.TESTS / file
        assert path.is_file(), file
        missing = set(tests) - {"*"} - _test_functions(path)
        assert not missing, f"{file}: no such tests {sorted(missing)}"


def test_generated_programs_keep_their_seed_parameters():
    path = conftest.TESTS / conftest.GENERATED_PROGRAMS
    assert "test_generated_program" in _test_functions(path)
    assert 'id=f"seed{seed}"' in path.read_text(encoding="utf-8")


def test_every_strided_test_exists_and_is_parametrized():
    for key, stride in conftest.DEFAULT_TIER_STRIDE.items():
        file, name = key.split("::")
        tree = ast.parse((conftest.TESTS / file).read_text(encoding="utf-8"))
        functions = {node.name: node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)}
        assert name in functions, key
        decorators = [ast.unparse(d) for d in functions[name].decorator_list]
        assert any("parametrize" in d for d in decorators), key
        assert stride >= 2, key


def test_a_strided_test_keeps_its_first_case_in_the_default_tier(pytester):
    pytester.makeconftest((conftest.TESTS / "conftest.py").read_text(encoding="utf-8"))
    (pytester.path / "rules").mkdir()
    (pytester.path / "rules" / "test_capture.py").write_text(
        "import pytest\n\n"
        "@pytest.mark.parametrize('case', range(11))\n"
        "def test_differential(case):\n"
        "    pass\n"
    )
    default = pytester.runpytest("-q", "-p", "no:cacheprovider")
    full = pytester.runpytest("-q", "-p", "no:cacheprovider", "--full")
    stride = conftest.DEFAULT_TIER_STRIDE["rules/test_capture.py::test_differential"]
    default.assert_outcomes(passed=len(range(0, 11, stride)), deselected=11 - len(range(0, 11, stride)))
    full.assert_outcomes(passed=11)
