"""Report shape and rule statuses, from hand-made results (no suite run)."""

from __future__ import annotations

import json
from pathlib import Path

from conformance import catalogue
from conformance.baseline import parse
from conformance.reference_adapter import ReferenceImplementation
from conformance.report import judge, to_json, write_json
from conformance.runner import SuiteRun, TestResult, short_id


def _run(results: list[TestResult], features: frozenset = frozenset(), rules: list[str] | None = None) -> SuiteRun:
    impl = ReferenceImplementation(name="fake", features=features)
    return SuiteRun(implementation="pkg:fake", impl=impl, results=results, selected_rules=rules or [])


def _all_passing() -> list[TestResult]:
    return [TestResult(f"test_x.py::test_{r.id}", [r.id], "passed") for r in catalogue.RULES]


def test_shape_is_exactly_the_documented_one(tmp_path: Path) -> None:
    verdict = judge(_run(_all_passing(), frozenset({"persistence", "configuration", "injection"})))
    data = to_json(verdict)
    assert set(data) == {"implementation", "kit_version", "complete", "interrupted", "stopped", "rules", "summary"}
    assert data["implementation"] == "pkg:fake" and isinstance(data["kit_version"], str)
    assert (data["complete"], data["interrupted"], data["stopped"]) == (True, False, None)
    assert set(data["summary"]) == {"passed", "failed", "not_applicable", "not_checked", "expected"}
    assert [r["id"] for r in data["rules"]] == [r.id for r in catalogue.RULES]
    for rule in data["rules"]:
        assert set(rule) == {"id", "status", "tests", "failures", "expected", "needs_hook", "failed_tests"}
        assert rule["status"] == "passed" and rule["failures"] == [] and len(rule["tests"]) == 1
        assert (rule["expected"], rule["needs_hook"], rule["failed_tests"]) == (False, None, [])
    assert data["summary"] == {"passed": len(catalogue.RULES), "failed": 0, "not_applicable": 0,
                               "not_checked": 0, "expected": 0}
    assert verdict.ok
    path = tmp_path / "r.json"
    write_json(verdict, str(path))
    assert json.loads(path.read_text()) == data


def test_unsupported_features_are_not_applicable() -> None:
    results = [r for r in _all_passing() if not r.rules[0].startswith(("INJ-", "SVC-3", "SVC-4"))]
    data = to_json(judge(_run(results)))
    status = {r["id"]: r["status"] for r in data["rules"]}
    assert status["INJ-1"] == status["SVC-3"] == status["SVC-4"] == "not-applicable"
    assert data["summary"]["not_applicable"] == 6


def test_failure_marks_every_rule_of_the_test() -> None:
    results = _all_passing()
    results.append(TestResult("test_c.py::test_both[pct-1]", ["CANCEL-W1", "IDLE-2"], "failed", "AssertionError: late"))
    verdict = judge(_run(results, frozenset({"persistence", "configuration", "injection"})))
    data = to_json(verdict)
    failed = {r["id"]: r["failures"] for r in data["rules"] if r["status"] == "failed"}
    assert failed == {
        "CANCEL-W1": ["test_c.py::test_both[pct-1]: AssertionError: late"],
        "IDLE-2": ["test_c.py::test_both[pct-1]: AssertionError: late"],
    }
    assert not verdict.ok and verdict.unexcused == ["IDLE-2", "CANCEL-W1"]


def test_rule_without_passing_test_fails() -> None:
    results = [r for r in _all_passing() if r.rules != ["PY-3"]]
    results.append(TestResult("test_python.py::test_same_seed_same_bytes", ["PY-3"], "skipped", "needs the simulator"))
    data = to_json(judge(_run(results, frozenset({"persistence", "configuration", "injection"}))))
    py3 = next(r for r in data["rules"] if r["id"] == "PY-3")
    assert py3["status"] == "failed" and "needs the simulator" in py3["failures"][0]


def test_selected_rules_only() -> None:
    data = to_json(judge(_run(_all_passing(), rules=["LOOP-2", "CANCEL-W2"])))
    assert [r["id"] for r in data["rules"]] == ["LOOP-2", "CANCEL-W2"]


def test_baseline_applies_to_verdict() -> None:
    results = _all_passing()
    results.append(TestResult("test_cancel.py::test_window2_cancel_settles_idle[fifo]", ["CANCEL-W2"], "failed", "x"))
    run = _run(results, frozenset({"persistence", "configuration", "injection"}))
    assert judge(run, parse("CANCEL-W2\n")).ok
    assert judge(run, parse("test_cancel.py::test_window2_cancel_settles_idle\n")).ok


def test_short_id() -> None:
    assert short_id("/x/conformance/tests/test_a.py::test_b[fifo]") == "test_a.py::test_b[fifo]"
    assert short_id("conformance/tests/test_a.py::test_b") == "test_a.py::test_b"
