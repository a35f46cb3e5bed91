"""The registry of legality conditions (``graphmend.core.legality``): every condition has
a well-formed id, a check that exists, and every place that refuses a rewrite names a
registered id; declines carry the id of the condition that failed, in each phase."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import json
import re
import textwrap
import warnings
from pathlib import Path

import pytest
import torch
from torch._dynamo.utils import counters

from graphmend.cli.explain import read_records
from graphmend.core.legality import (
    CONDITIONS,
    EVERY_RULE,
    PHASES,
    RULES,
    Reason,
    condition_id,
    declined,
    expected_prefix,
    failed,
    restated,
)
from graphmend.rewrite.findings import Finding
from graphmend.runtime import claims, reset, trace_hooks, whole_trace_conditions
from graphmend.runtime.store import store
from helpers import breaks, mend, original_and_mended

SOURCE = Path(__file__).resolve().parents[1] / "src" / "graphmend"


# --- the registry itself ---------------------------------------------------------------------


def test_each_condition_is_well_formed():
    names_by_rule: dict[str, set[str]] = {}
    for condition_id_, condition in CONDITIONS.items():
        assert condition.id == condition_id_
        assert re.fullmatch(r"[TWDCG][123]\d\d", condition.id), condition.id
        assert condition.rule in RULES and condition.phase in PHASES, condition
        assert condition.id[:2] == expected_prefix(condition.rule, condition.phase), condition
        assert re.fullmatch(r"[a-z][a-z0-9_]*", condition.name), condition
        assert condition.doc and "\n" not in condition.doc, condition
        assert condition.name not in names_by_rule.setdefault(condition.rule, set()), condition
        names_by_rule[condition.rule].add(condition.name)


def _resolve(check: str):
    module_name, _, qualified_name = check.partition(":")
    target = importlib.import_module(module_name)
    for part in qualified_name.split("."):
        target = getattr(target, part)
    return target


@pytest.mark.parametrize("condition_id_", sorted(CONDITIONS))
def test_each_registered_check_exists(condition_id_):
    condition = CONDITIONS[condition_id_]
    assert callable(_resolve(condition.check)), condition.check


def _ids_used_in_source() -> list[tuple[str, int, str]]:
    """(path under graphmend/, line, id) for every id a refusal site names: the first argument of
    ``failed``, and the condition argument of attribute_access's ``_decided``."""
    used = []
    for path in sorted(SOURCE.rglob("*.py")):
        relative = path.relative_to(SOURCE).as_posix()
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
                continue
            if node.func.id == "failed":
                argument = node.args[0]
            elif node.func.id == "_decided" and len(node.args) == 3:
                argument = node.args[2]
            else:
                continue
            if isinstance(argument, ast.Constant) and isinstance(argument.value, str):
                used.append((relative, node.lineno, argument.value))
            elif isinstance(argument, ast.BoolOp):
                # ``condition_id(inner) or "W110"``: the inner reason's id, else this one.
                used += [
                    (relative, node.lineno, value.value)
                    for value in argument.values
                    if isinstance(value, ast.Constant) and isinstance(value.value, str)
                ]
            else:
                # Only a condition passed on (``failed(condition, ...)``) may be computed.
                assert isinstance(argument, ast.Name), (relative, node.lineno)
    return used


def test_every_refusal_site_names_a_registered_id():
    used = _ids_used_in_source()
    assert len(used) >= 80
    unknown = [site for site in used if site[2] not in CONDITIONS]
    assert unknown == []


# Conditions whose failure records no decline: the compiled form falls back to the
# original statement at the point it is decided (Where's selection, Defer's output
# performed at the call), or the statement is no candidate at all.
DECIDED_WITHOUT_A_RECORDED_REASON = {"C110", "D206", "D207", "W201", "W202", "W206"}


def test_every_registered_condition_is_named_at_a_refusal_site_or_decided_silently():
    used = {condition for _file, _line, condition in _ids_used_in_source()}
    assert set(CONDITIONS) - used == DECIDED_WITHOUT_A_RECORDED_REASON


def test_refusals_of_each_phase_live_where_that_phase_is_decided():
    """A static id is used by the rules (or the rewrite machinery), never by the
    runtime; ids of the tracing phases only by the runtime."""
    for relative, line, used in _ids_used_in_source():
        phase = CONDITIONS[used].phase
        if relative.startswith("runtime/"):
            assert phase != "static", (relative, line, used)
        elif relative.startswith(("rules/", "rewrite/")):
            assert phase == "static", (relative, line, used)


def test_every_whole_trace_check_the_refusals_make_is_registered():
    """The predicates the claims are checked with over the whole trace (and the ones made
    when a claim is made) are each a registered condition's check, so ``graphmend rule``
    lists every one of them."""
    registered = {condition.check for condition in CONDITIONS.values()}
    for module in (claims, whole_trace_conditions, trace_hooks):
        for name in dir(module):
            function = getattr(module, name)
            if name.startswith("_") or not callable(function) or getattr(function, "__module__", "") != module.__name__:
                continue
            source = ast.parse(textwrap.dedent(inspect.getsource(function)))
            if any(
                isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "failed"
                for node in ast.walk(source)
            ):
                assert f"{module.__name__}:{name}" in registered, name


def test_every_rule_and_phase_has_conditions():
    for rule in ("Trap", "Where", "Defer", "Capture"):
        assert {condition.phase for condition in CONDITIONS.values() if condition.rule == rule} >= {
            "static", "while tracing"
        }, rule
    assert {condition.phase for condition in CONDITIONS.values() if condition.rule == EVERY_RULE} == set(PHASES)


# --- reasons carry their id ------------------------------------------------------------------


def test_a_reason_keeps_its_id_through_the_ways_it_is_extended():
    reason = failed("W103", "an arm leaves the branch early")
    assert reason == "an arm leaves the branch early" and condition_id(reason) == "W103"
    assert failed("W103", None) is None
    assert condition_id(reason + "; kept as a call") == "W103"
    assert condition_id("line 3: " + reason) == "W103"
    assert condition_id(restated(reason, f"the returned value: {reason}")) == "W103"
    assert condition_id(f"{reason}") is None  # rebuilt text: a site that does so marks it again
    assert condition_id(failed("W110", reason)) == "W110"  # the outer condition is the one shown


def test_a_finding_takes_the_id_of_its_reason_and_shows_it():
    finding = Finding(1, 1, "DC", "branch", "f", rule="Where", reason=failed("W104", "one arm returns"))
    assert finding.condition == "W104"
    assert finding.outcome() == "Where declined [W104 arms_end_alike]: one arm returns"
    assert finding.as_dict()["condition"] == "W104"
    unmarked = Finding(1, 1, "DC", "branch", "f", rule="Where", reason="why")
    assert unmarked.condition is None and unmarked.outcome() == "Where declined: why"
    assert declined("Trap", Reason("x", "T999")) == "Trap declined: x"  # not registered: no label


def test_explain_reads_the_id_of_a_decline_made_while_tracing(tmp_path):
    log = tmp_path / "records.jsonl"
    reason = failed("G303", "the joined graph records autograd")
    log.write_text(
        json.dumps({"declined": ["a.py", 3, reason, condition_id(reason)]}) + "\n"
        + json.dumps({"declined": ["b.py", 4, "an older record without an id"]}) + "\n"
    )
    _breaks, _recompilations, declines = read_records(str(log))
    assert condition_id(declines[("a.py", 3)]) == "G303"
    assert declines[("b.py", 4)] == "an older record without an id" and condition_id(declines[("b.py", 4)]) is None


# --- static declines, a few per rule -----------------------------------------------------------

STATIC_DECLINES = {
    "T102": ("Trap", """
        def f(x):
            if (x > 0).any():
                raise ValueError("bad", "values")
            return x
    """),
    "T104": ("Trap", """
        def f(x):
            if (x > 0).any():
                raise ValueError(3)
            return x
    """),
    "T106": ("Trap", """
        def f(x):
            try:
                if (x > 0).any():
                    raise ValueError("bad")
            except ValueError:
                pass
            return x
    """),
    "W103": ("Where", """
        def f(x):
            if x.sum() > 0:
                return x
                y = x
            else:
                y = x * 2
            return y
    """),
    "W104": ("Where", """
        def f(x):
            if x.sum() > 0:
                return x + 1
            else:
                y = x * 2
            return y
    """),
    "W106": ("Where", """
        items = []
        def f(x):
            if x.sum() > 0:
                items.append(x)
            return x
    """),
    "W108": ("Where", """
        def f(x):
            global z
            if x.sum() > 0:
                z = x + 1
            else:
                z = x - 1
            return z
    """),
    "D101": ("Defer", """
        print = lambda *a: None
        def f(x):
            print(x)
            return x
    """),
    "D102": ("Defer", """
        import warnings
        def f(x):
            warnings.warn("careful", stacklevel=2)
            return x
    """),
    "D105": ("Defer", """
        import contextlib
        def f(x):
            with contextlib.suppress(ValueError):
                print(x)
            return x
    """),
    "C101": ("Capture", """
        def main(x, w):
            positions = torch.nonzero(x > 0, as_tuple=w.shape[0] > 2)
            return positions
    """),
    "C102": ("Capture", """
        def main(x, w):
            total = w.sum()
            for row in (x > 0).nonzero():
                total = total + w[row[0], row[1]]
            return total
    """),
    "G101": ("Where", """
        def f(x):
            if x.sum() > 0:  # graphmend: ignore
                z = x + 1
            else:
                z = x - 1
            return z
    """),
}


@pytest.mark.parametrize("expected", sorted(STATIC_DECLINES))
def test_a_static_decline_carries_its_condition_id(expected):
    rule, body = STATIC_DECLINES[expected]
    result = mend("import torch\n" + textwrap.dedent(body))
    declined_findings = [f for f in result.findings if f.rule == rule and not f.fixed]
    assert [f.condition for f in declined_findings] == [expected], [(f.condition, f.reason) for f in declined_findings]
    finding = declined_findings[0]
    assert f"{rule} declined [{expected} {CONDITIONS[expected].name}]: " in finding.outcome()


def _sources_in_the_rule_tests():
    """(file, row, source) for each program in the upper-case tables of tests/rules."""
    for path in sorted((Path(__file__).parent / "rules").glob("test_*.py")):
        spec = importlib.util.spec_from_file_location(f"_legality_sweep_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        for table_name, table in vars(module).items():
            if not (table_name.isupper() and isinstance(table, dict)):
                continue
            for row, value in table.items():
                body = value[0] if isinstance(value, tuple) and value else value
                if isinstance(body, str):
                    yield path.name, row, textwrap.dedent(body)


def test_every_decline_of_the_rule_tests_programs_carries_an_id():
    """The rule tests hold one must-not-rewrite row per condition: each decline they
    produce names its condition (a condition added without an id shows here)."""
    declines, without_id = 0, []
    for file, row, source in _sources_in_the_rule_tests():
        try:
            result = mend(source if "import torch" in source else "import torch\n" + source)
        except SyntaxError:
            continue  # a fragment the test completes itself
        for finding in result.findings:
            if finding.rule and not finding.fixed:
                declines += 1
                if finding.condition is None:
                    without_id.append((file, row, finding.reason))
    assert declines >= 100
    assert without_id == []


# --- declines made while tracing and over the whole trace --------------------------------------


@pytest.fixture
def fresh_declines():
    reset()
    yield store.trace_time_declines
    reset()


def test_a_decline_while_tracing_carries_its_condition_id(fresh_declines):
    original, mended, _ = original_and_mended(textwrap.dedent("""
        import torch

        class Owner:
            @property
            def scale(self):
                return torch.ones(3)

        def f(x, owner):
            if x.sum() > 0:
                z = x + owner.scale
            else:
                z = x - 1
            return z
    """))
    arguments = (torch.ones(3), mended.Owner())
    assert breaks(mended.f, *arguments) == breaks(original.f, torch.ones(3), original.Owner()) == 1
    assert {condition_id(reason) for reason in fresh_declines.values()} == {"W203"}


def test_a_decline_over_the_whole_trace_carries_its_condition_id(fresh_declines):
    original, mended, _ = original_and_mended(textwrap.dedent("""
        import torch

        def f(x):
            a = x * 1.1
            b = a.sin() + a.cos()
            print("between")
            return b * a + a.exp() + a.tanh()
    """))

    def reads_its_graph(graph_module, example_inputs):
        graph_module.graph.lint()  # a backend graphmend cannot see runs the graph as written
        return graph_module.forward

    def graph_breaks(function):
        torch._dynamo.reset()
        counters.clear()
        torch.compile(function, backend=reads_its_graph)(torch.linspace(-1.0, 1.0, 7, requires_grad=True))
        return sum(counters["graph_break"].values())

    assert graph_breaks(mended.f) == graph_breaks(original.f) == 1
    assert {condition_id(reason) for reason in fresh_declines.values()} == {"G311"}


def test_a_decline_of_an_output_while_tracing_carries_its_condition_id(fresh_declines):
    original, mended, _ = original_and_mended(textwrap.dedent("""
        import warnings

        import torch

        def f(x, total):
            total.add_(1.0)
            warnings.warn("after the write")
            return x * 2
    """))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert breaks(mended.f, torch.ones(2), torch.zeros(2)) == breaks(original.f, torch.ones(2), torch.zeros(2)) == 1
    assert {condition_id(reason) for reason in fresh_declines.values()} == {"D205"}
