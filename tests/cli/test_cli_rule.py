"""``graphmend rule``: the categories, and one explained with its rule's conditions."""

import ast
import inspect
import re

import pytest

from graphmend.rewrite.findings import CATEGORY_TITLES
from graphmend.runtime import claims


def test_without_a_code_the_categories_are_listed(cli):
    outcome = cli("rule")
    assert outcome.code == 0
    for code, title in CATEGORY_TITLES.items():
        assert re.search(rf"^  {code}  {re.escape(title)}", outcome.out, re.MULTILINE)
    assert "rewritten by Where" in outcome.out and "reported, not rewritten" in outcome.out


@pytest.mark.parametrize(
    "code, rule, condition",
    [("DC", "Where", "selected_value_is_fresh"), ("lc", "Defer", "callee_is_real"), ("VG", "Trap", "guard_body_only_raises"),
     ("VG", "Trap", "message_is_text")],
)
def test_a_rewritten_category_shows_its_rule_and_legality_conditions(cli, code, rule, condition):
    outcome = cli("rule", code)
    assert outcome.code == 0
    assert outcome.out.startswith(f"{code.upper()}: {CATEGORY_TITLES[code.upper()]}, rewritten by {rule}")
    assert condition in outcome.out
    assert "graphmend.runtime.claims" in outcome.out


def _checks_the_refusals_call() -> set[str]:
    """Public functions of claims that _refusals and _claim_refusals call: the checks."""
    tree = ast.parse(inspect.getsource(claims))
    called = set()
    for function in tree.body:
        if isinstance(function, ast.FunctionDef) and function.name in ("_refusals", "_claim_refusals"):
            called |= {
                node.func.id
                for node in ast.walk(function)
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.func.id.startswith("_")
            }
    return {name for name in called if callable(getattr(claims, name, None))}


def test_the_whole_trace_checks_it_names_exist():
    from graphmend.cli.rule import _WHOLE_TRACE_CHECKS

    names = re.findall(r"\((\w+)\)", _WHOLE_TRACE_CHECKS)
    assert len(names) == len(set(names))
    for name in names:
        assert callable(getattr(claims, name)), name


def test_the_whole_trace_checks_name_every_check_the_refusals_make():
    from graphmend.cli.rule import _WHOLE_TRACE_CHECKS

    named = set(re.findall(r"\((\w+)\)", _WHOLE_TRACE_CHECKS))
    checks = _checks_the_refusals_call()
    assert len(checks) >= 10
    assert checks - named == set()


def test_a_category_no_rule_rewrites_says_so(cli):
    outcome = cli("rule", "DO")
    assert outcome.code == 0
    assert "No graphmend rule rewrites it" in outcome.out


def test_a_category_one_rule_rewrites_in_part_says_which(cli):
    outcome = cli("rule", "TI")
    assert outcome.code == 0
    assert "any other is reported, not\nrewritten" in outcome.out
    assert "read_only_by_checks" in outcome.out


def test_an_unknown_code_is_a_one_line_error(cli):
    outcome = cli("rule", "XX")
    assert outcome.code == 2
    assert outcome.out == ""
    assert outcome.err.strip().count("\n") == 0
    assert "unknown category 'XX'" in outcome.err
