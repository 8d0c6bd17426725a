"""Report details: baselined failures are ``expected`` (JSON) and skipped with the reason
(JUnit), rule ids are JUnit properties, ``needs hook`` failures are their own category, an
interrupted run calls no unchecked rule failed, whole assertion diffs reach the report, every
failure has its schedule and a reproduce command, and the table shows them."""

from __future__ import annotations

import io
import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from rich.console import Console

from conformance import catalogue
from conformance.baseline import parse
from conformance.reference_adapter import ReferenceImplementation
from conformance.report import judge, print_table, to_json, to_junit, write_json, write_junit
from conformance.runner import SuiteRun, TestResult, run_suite

ALL = frozenset({"persistence", "configuration", "injection"})


def _run(results: list[TestResult], **kwargs: object) -> SuiteRun:
    run = SuiteRun(implementation="pkg:impl", impl=ReferenceImplementation(name="x", features=ALL),
                   results=results, spec="pkg:impl")
    for key, value in kwargs.items():
        setattr(run, key, value)
    return run


def _passing(skip: set[str] = frozenset()) -> list[TestResult]:  # type: ignore[assignment]
    return [TestResult(f"test_x.py::test_{r.id}", [r.id], "passed", nodeid=f"conformance/tests/test_x.py::test_{r.id}")
            for r in catalogue.RULES if r.id not in skip]


def _failed(test: str, rules: list[str], message: str) -> TestResult:
    return TestResult(test, rules, "failed", message, nodeid=f"conformance/tests/{test}")


def test_baselined_failure_is_expected_in_json_and_skipped_in_junit() -> None:
    results = [*_passing({"CANCEL-W2"}), _failed("test_cancel.py::test_window2_cancel_settles_idle[pct-3]", ["CANCEL-W2"], "AssertionError: late")]
    verdict = judge(_run(results), parse("CANCEL-W2\n"))
    assert verdict.ok
    rule = next(r for r in to_json(verdict)["rules"] if r["id"] == "CANCEL-W2")
    assert rule["status"] == "failed" and rule["expected"] is True
    assert rule["failed_tests"][0]["expected"] is True and rule["failed_tests"][0]["schedule"] == "pct-3"
    assert to_json(verdict)["summary"]["expected"] == 1
    suite = ET.fromstring(to_junit(verdict)).find("testsuite")
    assert suite is not None and suite.get("failures") == "0" and suite.get("skipped") == "1"
    case = next(c for c in suite.iter("testcase") if c.get("name") == "test_window2_cancel_settles_idle[pct-3]")
    skipped = case.find("skipped")
    assert skipped is not None and skipped.get("type") == "expected"
    assert skipped.get("message") == "expected failure (baseline): AssertionError: late"
    assert [p.get("value") for p in case.iter("property") if p.get("name") == "rule"] == ["CANCEL-W2"]
    assert case.get("classname") == "conformance.tests.test_cancel"


def test_a_message_with_characters_xml_cannot_hold_still_makes_well_formed_junit(tmp_path: Path) -> None:
    # An implementation's error message carried NUL, an ANSI colour code and a lone surrogate:
    # the JUnit file was not well-formed XML, and the surrogate ended its write in a traceback.
    results = [*_passing({"IDLE-2"}), _failed("test_idle.py::test_w[fifo]", ["IDLE-2"], "E: \x00 \x1b[31mred \udcff")]
    write_junit(judge(_run(results)), str(tmp_path / "j.xml"))
    case = next(c for c in ET.parse(tmp_path / "j.xml").iter("testcase") if c.get("name") == "test_w[fifo]")
    failure = case.find("failure")
    assert failure is not None and failure.text is not None
    assert "E: \\x00 \\x1b[31mred \\udcff" in failure.text


def test_unexcused_failure_is_a_junit_failure_with_its_reproduce_command(tmp_path: Path) -> None:
    results = [*_passing({"IDLE-2"}), _failed("test_idle.py::test_w[fifo]", ["IDLE-2"], "AssertionError: x\nmore")]
    verdict = judge(_run(results))
    write_junit(verdict, str(tmp_path / "j.xml"))
    write_json(verdict, str(tmp_path / "r.json"))
    case = next(c for c in ET.parse(tmp_path / "j.xml").iter("testcase") if c.get("name") == "test_w[fifo]")
    failure = case.find("failure")
    assert failure is not None and failure.get("message") == "AssertionError: x"
    assert failure.text is not None and "AssertionError: x\nmore" in failure.text
    assert "reproduce: pytest --pyargs 'conformance.tests.test_idle::test_w[fifo]' --loopkit-impl pkg:impl" in failure.text
    data = json.loads((tmp_path / "r.json").read_text())
    assert not list(tmp_path.glob(".*.tmp"))
    (detail,) = next(r for r in data["rules"] if r["id"] == "IDLE-2")["failed_tests"]
    assert detail["message"] == "AssertionError: x\nmore"


@pytest.mark.parametrize("prefix", ["", "NeedsHook: ", "conformance.hooks.NeedsHook: "])
def test_needs_hook_is_its_own_category(prefix: str) -> None:
    # raised by the test's body, pytest's one-line form names the exception's module
    message = prefix + "needs hook abort_signal: the adapter gives no way to reach the step's signal"
    results = [*_passing({"ABORT-1"}), _failed("test_abort.py::test_a[fifo]", ["ABORT-1"], message)]
    verdict = judge(_run(results))
    rule = next(r for r in to_json(verdict)["rules"] if r["id"] == "ABORT-1")
    assert rule["needs_hook"] == "abort_signal" and rule["status"] == "failed"
    console = Console(file=io.StringIO(), width=200)
    print_table(verdict, console=console, show_passed=False)
    out = console.file.getvalue()  # type: ignore[attr-defined]
    assert "needs hook abort_signal" in out
    assert "needs hook abort_signal: 1 rule(s) cannot be checked without it" in out


def test_one_failure_behind_most_failing_rules_is_named_once() -> None:
    # A close() that raises fails every test that tears an agent down: the report says that one
    # message is behind the rules, and stays quiet when failures have their own causes.
    rules = ["LOG-1", "LOG-2", "IDLE-1", "IDLE-2", "LOOP-2", "CANCEL-1"]
    common = [_failed(f"test_x.py::test_{r}[fifo]", [r], "RuntimeError: dictionary changed size during iteration\nmore")
              for r in rules[:5]]
    own = _failed("test_x.py::test_CANCEL-1[fifo]", ["CANCEL-1"], "AssertionError: its own")
    verdict = judge(_run([*_passing(set(rules)), *common, own]))
    assert to_json(verdict)["common_failure"] == {"message": "RuntimeError: dictionary changed size during iteration",
                                                  "rules": rules[:5]}
    console = Console(file=io.StringIO(), width=200)
    print_table(verdict, console=console, show_passed=False)
    assert "one failure behind 5 failing rules (fix it first): RuntimeError: dictionary changed size" in console.file.getvalue()  # type: ignore[attr-defined]
    spread = [_failed(f"test_x.py::test_{r}[fifo]", [r], f"AssertionError: {r}") for r in rules]
    assert "common_failure" not in to_json(judge(_run([*_passing(set(rules)), *spread])))
    few = judge(_run([*_passing(set(rules[:4])), *common[:4]]))
    assert "common_failure" not in to_json(few)  # four rules: below the threshold


def test_an_interrupted_run_calls_no_unchecked_rule_failed() -> None:
    results = [TestResult("test_x.py::test_a", ["LOOP-2"], "passed"),
               TestResult("test_x.py::test_b", ["IDLE-2"], "not-run", "not run: the run was interrupted")]
    verdict = judge(_run(results, interrupted=2, selected_rules=["LOOP-2", "IDLE-2"]))
    data = to_json(verdict)
    assert data["complete"] is False and data["interrupted"] is True
    assert {r["id"]: r["status"] for r in data["rules"]} == {"LOOP-2": "passed", "IDLE-2": "not-checked"}
    assert not verdict.ok and not verdict.unexcused


def test_a_stopped_run_is_incomplete_and_fails() -> None:
    results = [TestResult("test_x.py::test_a", ["LOOP-2"], "passed"),
               TestResult("test_x.py::test_b", ["LOOP-2"], "not-run", "not run: the run stopped after 3 tests")]
    verdict = judge(_run(results, stopped="the run stopped after 3 tests", selected_rules=["LOOP-2"]))
    assert not verdict.ok and verdict.unexcused == ["LOOP-2"]
    assert to_json(verdict)["rules"][0]["failures"][0].startswith("not checked: 1 of its tests did not run")


def test_whole_assertion_diffs_reach_the_report() -> None:
    # tiny_loop reports no usage: the diff must show both sides whole (pytest's default, at the
    # runner's old -q, was "[{'input_toke...t_tokens': 7}]" on both sides).
    run = run_suite("examples.tiny_loop.adapter:implementation", rules=["ASM-4"], schedule_count=0, workers=0)
    (failed,) = [r for r in run.results if r.outcome == "failed" and r.id.endswith("last_usage_wins[same-fields]")]
    assert failed.summary == "AssertionError: assert [] == [{'input_tokens': 5, 'output_tokens': 7}]"
    assert "Full diff:" in failed.message and "'output_tokens': 7," in failed.message
    assert "..." not in failed.message


def test_a_reproduce_command_with_a_wire_spec_pastes_into_a_shell() -> None:
    import shlex

    result = _failed("test_idle.py::test_w[fifo]", ["IDLE-2"], "AssertionError: x")
    command = _run([result], spec="wire:node bridge.mjs --variant late").reproduce(result)
    words = shlex.split(command)
    assert words[words.index("--loopkit-impl") + 1] == "wire:node bridge.mjs --variant late"
    assert "conformance.tests.test_idle::test_w[fifo]" in words


def test_a_message_with_control_characters_and_brackets_is_shown_not_acted_on() -> None:
    # An implementation's message carried an ANSI sequence (clear screen, colour), a carriage
    # return and rich markup: the terminal table printed them raw, and `[/x]` could stop rich.
    message = "E: \x1b[2J\x1b[31mred\r [/x] [bold]b"
    results = [*_passing({"IDLE-2"}), _failed("test_idle.py::test_w[fifo]", ["IDLE-2"], message)]
    console = Console(file=io.StringIO(), width=300)
    print_table(judge(_run(results)), console=console, show_passed=False)
    out = console.file.getvalue()  # type: ignore[attr-defined]
    assert "\x1b" not in out and "\r" not in out
    assert "E: \\x1b[2J\\x1b[31mred" in out and "[/x] [bold]b" in out  # the table splits lines at the \\r
