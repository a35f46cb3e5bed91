"""``graphmend rule``: the categories and conditions, a category explained with its rule's
conditions from the registry, and one condition explained by id or name."""

import re

import pytest

from graphmend.core.legality import CONDITIONS, EVERY_RULE, conditions_of
from graphmend.rewrite.findings import CATEGORY_TITLES


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
    assert "graphmend.runtime.whole_trace_conditions" in outcome.out


def test_a_rewritten_category_lists_every_condition_of_its_rule_and_those_every_rule_passes(cli):
    outcome = cli("rule", "DC")
    for condition in conditions_of("Where") + conditions_of(EVERY_RULE):
        assert f"  {condition.id}  {condition.name}: {condition.doc}" in outcome.out, condition.id
    assert "W1" in outcome.out and "G3" in outcome.out and "T1" not in outcome.out


def test_the_listing_names_every_condition(cli):
    outcome = cli("rule")
    for condition in CONDITIONS.values():
        assert re.search(rf"^  {condition.id}  .* {condition.name}$", outcome.out, re.MULTILINE), condition.id


@pytest.mark.parametrize("code", ["G303", "w103", "destination_is_unseen"])
def test_one_condition_is_explained_by_id_or_name(cli, code):
    outcome = cli("rule", code)
    assert outcome.code == 0
    condition = CONDITIONS.get(code.upper()) or next(c for c in CONDITIONS.values() if c.name == code)
    assert outcome.out.startswith(f"{condition.id} {condition.name}\nrule: {condition.rule}\nphase: {condition.phase}\n")
    assert f"check: {condition.check}" in outcome.out


def test_a_condition_explained_shows_its_checks_documentation(cli):
    outcome = cli("rule", "G303")
    assert "phase: whole trace" in outcome.out
    assert "untaken arm" in outcome.out  # the check's docstring, read from its source


def test_a_name_two_rules_share_explains_both(cli):
    outcome = cli("rule", "condition_is_tensorizable")
    assert outcome.code == 0
    assert "T101 condition_is_tensorizable" in outcome.out and "W101 condition_is_tensorizable" in outcome.out


def test_a_category_one_rule_rewrites_only_a_padding_of_says_which(cli):
    outcome = cli("rule", "DO")
    assert outcome.code == 0
    assert "reported, not rewritten, but\nfor a padding computed from a module's fixed tensors" in outcome.out
    assert "value_computed_from_fixed_tensors" in outcome.out or "W216" in outcome.out


def test_a_category_one_rule_rewrites_in_part_says_which(cli):
    outcome = cli("rule", "TI")
    assert outcome.code == 0
    assert "any other\nis reported, not rewritten" in outcome.out
    assert "read_only_by_checks" in outcome.out
    assert "numbers_only_handed_on" in outcome.out


def test_an_unknown_code_is_a_one_line_error(cli):
    outcome = cli("rule", "XX")
    assert outcome.code == 2
    assert outcome.out == ""
    assert outcome.err.strip().count("\n") == 0
    assert "unknown category 'XX'" in outcome.err
