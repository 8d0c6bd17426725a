"""Baseline semantics: excused failures, stale entries, bad files."""

from __future__ import annotations

from pathlib import Path

import pytest

from conformance.baseline import BaselineError, load, parse
from conformance.catalogue import Feature
from conformance.reference_adapter import ReferenceImplementation
from conformance.report import judge
from conformance.runner import SuiteRun, TestResult

ALL: frozenset[Feature] = frozenset({"persistence", "configuration", "injection"})
W2 = "test_cancel.py::test_window2_cancel_settles_idle"
W2_REPLACE = "test_cancel.py::test_window2_replacement_runs_before_waiter"


def _run(*results: TestResult) -> SuiteRun:
    from conformance import catalogue

    rows = [TestResult(f"test_x.py::test_{r.id}", [r.id], "passed") for r in catalogue.RULES]
    return SuiteRun("impl", ReferenceImplementation(features=ALL), [*rows, *results])


def test_parse_rules_tests_comments() -> None:
    baseline = parse(f"# known bugs\nCANCEL-W2   # window 2\n\n{W2}[pct-1]\n{W2_REPLACE}\n")
    assert baseline.rules == {"CANCEL-W2"}
    assert baseline.tests == {f"{W2}[pct-1]", W2_REPLACE}


@pytest.mark.parametrize("entry", ["CANCEL-W9", "test_cancel.py::test_nope", "hello"])
def test_unknown_entry_is_an_error(entry: str) -> None:
    with pytest.raises(BaselineError, match=r"<baseline>:2: .* is neither"):
        parse(f"LOOP-2\n{entry}\n")


def test_missing_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(BaselineError, match="cannot read baseline"):
        load(tmp_path / "nope.txt")


def test_listed_rule_failure_is_excused() -> None:
    verdict = judge(_run(TestResult(f"{W2}[fifo]", ["CANCEL-W2"], "failed", "boom")), parse("CANCEL-W2"))
    assert verdict.ok and verdict.unexcused == [] and verdict.stale == []
    assert next(v for v in verdict.rules if v.id == "CANCEL-W2").status == "failed"


def test_listed_test_failure_is_excused_by_base_or_param_id() -> None:
    failing = TestResult(f"{W2}[pct-1]", ["CANCEL-W2"], "failed", "boom")
    assert judge(_run(failing), parse(W2)).ok
    assert judge(_run(failing), parse(f"{W2}[pct-1]")).ok
    assert not judge(_run(failing), parse(f"{W2}[pct-2]")).ok


def test_unlisted_failure_still_fails() -> None:
    verdict = judge(_run(TestResult(f"{W2}[fifo]", ["CANCEL-W2"], "failed", "boom")), parse("LOOP-2"))
    assert not verdict.ok and verdict.unexcused == ["CANCEL-W2"]
    assert verdict.stale == ["LOOP-2"], "LOOP-2 passes: its entry is stale"


def test_partially_excused_rule_fails() -> None:
    verdict = judge(
        _run(
            TestResult(f"{W2}[fifo]", ["CANCEL-W2"], "failed", "boom"),
            TestResult(f"{W2_REPLACE}[fifo]", ["CANCEL-W2"], "failed", "boom"),
        ),
        parse(W2),
    )
    assert verdict.unexcused == ["CANCEL-W2"]


def test_stale_entries_fail_the_run() -> None:
    verdict = judge(_run(TestResult(f"{W2}[fifo]", ["CANCEL-W2"], "passed")), parse(f"CANCEL-W2\n{W2}\n"))
    assert not verdict.ok
    assert verdict.stale == ["CANCEL-W2", W2]


def test_entry_for_a_test_that_did_not_run_is_not_stale() -> None:
    verdict = judge(_run(), parse(W2_REPLACE))
    assert verdict.ok and verdict.stale == []
