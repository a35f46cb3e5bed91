"""tools/upstream_tests/run.py: reading JUnit reports and listing changed outcomes, on
synthetic reports (no torch, no subprocess)."""

from __future__ import annotations

import json
from pathlib import Path

from tools.upstream_tests import run
from tools.upstream_tests.run import compare, count_outcomes, parse_junit

PLAIN_REPORT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" errors="0" failures="1" skipped="2" tests="6">
<testcase classname="test_x.Cases" name="test_passes" time="0.1" />
<testcase classname="test_x.Cases" name="test_counts_graphs" time="0.1" />
<testcase classname="test_x.Cases" name="test_fails_in_both" time="0.1">
  <failure message="AssertionError: 1 != 2">trace of the failure</failure>
</testcase>
<testcase classname="test_x.Cases" name="test_skipped" time="0.0">
  <skipped type="pytest.skip" message="requires cuda">skip body</skipped>
</testcase>
<testcase classname="test_x.Cases" name="test_expected_failure" time="0.0">
  <skipped type="pytest.xfail" message="expected failure" />
</testcase>
<testcase classname="test_x.Cases" name="test_only_plain" time="0.0" />
</testsuite></testsuites>
"""

MENDED_REPORT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest">
<testcase classname="test_x.Cases" name="test_passes" time="0.1" />
<testcase classname="test_x.Cases" name="test_counts_graphs" time="0.1">
  <failure message="AssertionError: Scalars are not equal! Expected 1 but got 0.">long trace</failure>
</testcase>
<testcase classname="test_x.Cases" name="test_fails_in_both" time="0.1">
  <failure message="AssertionError: 1 != 3">another trace</failure>
</testcase>
<testcase classname="test_x.Cases" name="test_skipped" time="0.0">
  <skipped type="pytest.skip" message="requires cuda" />
</testcase>
<testcase classname="test_x.Cases" name="test_expected_failure" time="0.0" />
<testcase classname="test_x.Cases" name="test_only_mended" time="0.0">
  <error message="failed on setup">setup trace</error>
</testcase>
</testsuite></testsuites>
"""


def test_outcomes_are_read_from_the_child_element() -> None:
    outcomes = parse_junit(PLAIN_REPORT)
    assert {name.split("::")[1]: result.outcome for name, result in outcomes.items()} == {
        "test_passes": "passed",
        "test_counts_graphs": "passed",
        "test_fails_in_both": "failed",
        "test_skipped": "skipped",
        "test_expected_failure": "xfailed",
        "test_only_plain": "passed",
    }
    failure = outcomes["test_x.Cases::test_fails_in_both"]
    assert failure.message == "AssertionError: 1 != 2\ntrace of the failure"
    assert count_outcomes(outcomes) == {"failed": 1, "passed": 3, "skipped": 1, "xfailed": 1}


def test_a_failure_that_also_errors_in_teardown_counts_as_failed() -> None:
    report = (
        '<testsuite><testcase classname="c" name="t">'
        '<failure message="boom" /><error message="teardown" /></testcase></testsuite>'
    )
    assert parse_junit(report)["c::t"].outcome == "failed"


def test_only_tests_whose_outcome_differs_are_listed_with_both_messages() -> None:
    changed = compare(parse_junit(PLAIN_REPORT), parse_junit(MENDED_REPORT))
    summary = [(change.test.split("::")[1], change.plain, change.mended) for change in changed]
    # A failure in both arms with another message is not a change of outcome.
    assert summary == [
        ("test_counts_graphs", "passed", "failed"),
        ("test_expected_failure", "xfailed", "passed"),
        ("test_only_plain", "passed", "missing"),
        ("test_only_mended", "missing", "error"),
    ]
    counts_graphs = changed[0]
    assert counts_graphs.plain_message == ""
    assert counts_graphs.mended_message.startswith("AssertionError: Scalars are not equal!")
    assert changed[3].mended_message == "failed on setup\nsetup trace"


def test_long_messages_keep_their_start_and_end() -> None:
    message = "start " + "x" * 10_000 + " end"
    report = f'<testsuite><testcase classname="c" name="t"><failure message="{message}" /></testcase></testsuite>'
    shortened = parse_junit(report)["c::t"].message
    assert len(shortened) < run.MESSAGE_LIMIT + 20
    assert shortened.startswith("start ") and shortened.endswith(" end")


def test_the_mended_arm_runs_this_checkout_with_plain_assertions() -> None:
    plain = run.arm_command("plain", "py", "test_a.py", Path("r.xml"), False, ["-k", "x"])
    mended = run.arm_command("mended", "py", "test_a.py", Path("r.xml"), False, ["-k", "x"])
    assert plain == [
        "py",
        "-m",
        "pytest",
        "test_a.py",
        "-p",
        "no:cacheprovider",
        "-p",
        "upstream_shims",
        "--junitxml=r.xml",
        "-o",
        "junit_logging=system-out",
        "-k",
        "x",
    ]
    assert mended[:7] == ["py", "-m", "graphmend", "run", "--no-cache", "-m", "pytest"]
    assert "--assert=plain" in mended
    assert "--assert=plain" in run.arm_command("plain", "py", "t.py", Path("r.xml"), True, [])
    assert run.arm_environment("mended")["PYTHONPATH"].split(":")[:2] == [
        str(run.SOURCE),
        str(run.PLUGINS),
    ]
    assert run.arm_environment("plain")["PYTHONPATH"].split(":")[0] == str(run.PLUGINS)
    assert (run.PLUGINS / "upstream_shims.py").is_file()


def test_a_file_whose_arms_leave_reports_is_compared(tmp_path, monkeypatch) -> None:
    reports = {"plain": PLAIN_REPORT, "mended": MENDED_REPORT}

    def fake_run(command, env, timeout, check, cwd=None, stdout=None, stderr=None, **_):
        if "check" in command:
            summary = {"break_candidates": 3, "fixable": 2, "declined": 1, "not_fixable": 0}
            return type("Completed", (), {"stdout": json.dumps({"summary": summary})})()
        arm = "mended" if "graphmend" in command else "plain"
        report = next(word for word in command if word.startswith("--junitxml="))
        Path(report.split("=", 1)[1]).write_text(reports[arm], encoding="utf-8")
        return type("Completed", (), {"returncode": 1})()

    monkeypatch.setattr(run.subprocess, "run", fake_run)
    test_file = tmp_path / "test_x.py"
    test_file.write_text("", encoding="utf-8")
    output = tmp_path / "out.json"
    assert run.main([str(test_file), "--work", str(tmp_path / "work"), "--json", str(output)]) == 0
    (result,) = json.loads(output.read_text(encoding="utf-8"))
    assert result["tests"] == 7
    assert result["check"]["fixable"] == 2
    assert len(result["changed"]) == 4
    assert [change["test"] for change in result["failing_differently"]] == [
        "test_x.Cases::test_fails_in_both"
    ]
    assert result["arms"]["mended"]["counts"] == {
        "error": 1,
        "failed": 2,
        "passed": 2,
        "skipped": 1,
    }


def test_an_arm_that_times_out_reports_no_outcomes(tmp_path, monkeypatch) -> None:
    def timing_out(command, **_):
        raise run.subprocess.TimeoutExpired(command, 1)

    monkeypatch.setattr(run.subprocess, "run", timing_out)
    test_file = tmp_path / "test_x.py"
    test_file.write_text("", encoding="utf-8")
    result = run.run_file(test_file, "py", 1, False, [], tmp_path)
    assert result["arms"]["plain"]["timed_out"] and not result["arms"]["plain"]["report_found"]
    assert result["check"]["error"].startswith("TimeoutExpired")
    assert result["changed"] == [] and result["tests"] == 0


def test_tests_failing_in_both_arms_with_another_message_are_listed_apart() -> None:
    plain = parse_junit(PLAIN_REPORT)
    mended = parse_junit(MENDED_REPORT)
    (differing,) = run.failing_differently(plain, mended)
    assert differing.test == "test_x.Cases::test_fails_in_both"
    assert differing.plain_message.startswith("AssertionError: 1 != 2")
    assert differing.mended_message.startswith("AssertionError: 1 != 3")


def test_failures_that_differ_only_in_numbers_and_addresses_are_the_same() -> None:
    report = '<testsuite><testcase classname="c" name="t"><failure message="{}" /></testcase></testsuite>'
    plain = parse_junit(report.format("object at 0x7f00aa, took 1.5 s, line 12"))
    mended = parse_junit(report.format("object at 0x7f11bb, took 0.25 s, line 14"))
    assert run.failing_differently(plain, mended) == []


def test_a_message_whose_lines_are_only_reordered_is_marked_so() -> None:
    report = '<testsuite><testcase classname="c" name="t"><failure message="{}" /></testcase></testsuite>'
    plain = parse_junit(report.format("sets differ:&#10;'a'&#10;'b'"))
    mended = parse_junit(report.format("sets differ:&#10;'b'&#10;'a'"))
    (differing,) = run.failing_differently(plain, mended)
    assert differing.lines_reordered_only
    (first,) = run.failing_differently(parse_junit(PLAIN_REPORT), parse_junit(MENDED_REPORT))
    assert not first.lines_reordered_only


def test_a_test_that_prints_other_text_in_the_mended_arm_is_listed() -> None:
    # A print performed once more while the graph was traced: the outcome is the same.
    report = (
        '<testsuite><testcase classname="c" name="t"><system-out>{}</system-out></testcase>'
        '<testcase classname="c" name="quiet" /></testsuite>'
    )
    plain = parse_junit(report.format("tensor(1) 1.0&#10;"))
    mended = parse_junit(report.format("tensor(1) 1.0&#10;tensor(1) 1.0&#10;"))
    (differing,) = run.printing_differently(plain, mended)
    assert differing.test == "c::t" and differing.plain == differing.mended == "passed"
    assert differing.plain_message == "tensor(1) 1.0\n"
    assert differing.mended_message == "tensor(1) 1.0\ntensor(1) 1.0\n"


def test_printed_text_that_differs_only_in_addresses_is_the_same() -> None:
    report = '<testsuite><testcase classname="c" name="t"><system-out>{}</system-out></testcase></testsuite>'
    plain = parse_junit(report.format("&lt;object at 0x7f00aa&gt; 3"))
    mended = parse_junit(report.format("&lt;object at 0x7f11bb&gt; 3"))
    assert run.printing_differently(plain, mended) == []
    other_number = parse_junit(report.format("&lt;object at 0x7f11bb&gt; 4"))
    assert [change.test for change in run.printing_differently(plain, other_number)] == ["c::t"]
