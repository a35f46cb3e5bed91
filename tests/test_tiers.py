"""The test tiers of tests/conftest.py: every test it lists as slow exists."""

from __future__ import annotations

import ast

import conftest


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
