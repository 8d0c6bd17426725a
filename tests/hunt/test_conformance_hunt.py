"""``loopkit conformance --hunt``: the hunt's verdicts in the per-rule report (table, JSON, JUnit)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

from conformance.hunt import driver, search, verdicts
from conformance.impl import resolve
from conformance.report import judge, to_json
from conformance.runner import SuiteRun

TINY = search.Config(workloads=("reply",), depth=1, nth=1, verbs=("send", "cancel", "when_idle"), dfs=1, random=1,
                     pct=0)
MUTANT = "mutant:waiters-after-status"


def _verdict(spec: str, tmp_path: Path, rules: list[str]) -> tuple[dict, list]:
    impl = resolve(None if spec == "reference" else spec)
    rep = driver.hunt(impl, spec, TINY, out=tmp_path).report
    results = verdicts.results(rep, impl_spec=spec, out=tmp_path, selected=rules)
    run = SuiteRun(spec, impl, results=list(results), selected_rules=rules)
    return to_json(judge(run)), results


def test_a_finding_fails_the_rules_its_oracle_names_with_a_replay_command(tmp_path: Path) -> None:
    data, results = _verdict(MUTANT, tmp_path, ["IDLE-2", "LOG-4"])
    status = {r["id"]: r for r in data["rules"]}
    assert status["IDLE-2"]["status"] == "failed"
    (failed,) = [t for t in status["IDLE-2"]["failed_tests"] if t["test"].startswith("hunt::")]
    assert failed["schedule"] == "hunt" and "window: reply: " in failed["message"]
    assert failed["reproduce"].startswith("loopkit replay ") and f"--impl {MUTANT}" in failed["reproduce"]
    cassette = Path(failed["reproduce"].split()[2])
    assert cassette.exists()
    # The rules no finding names are supported by the complete hunt (and only the selected ones).
    assert status["LOG-4"]["status"] == "passed" and status["LOG-4"]["tests"] == ["hunt::oracles"]
    assert {rid for r in results for rid in r.rules} <= {"IDLE-2", "LOG-4", "IDLE-1"}


def test_a_clean_hunt_passes_every_oracle_rule(tmp_path: Path) -> None:
    data, results = _verdict("reference", tmp_path, [])
    (only,) = results
    assert only.id == "hunt::oracles" and only.outcome == "passed"
    assert set(only.rules) == set(verdicts.ORACLE_RULES) and "IDLE-2" in only.rules
    statuses = {r["id"]: r["status"] for r in data["rules"]}
    assert all(statuses[rid] == "passed" for rid in verdicts.ORACLE_RULES)


def test_a_clean_hunt_credits_no_rule_of_a_feature_the_implementation_lacks(tmp_path: Path) -> None:
    # tiny_loop has no persistence (nor injection): the resume workload never ran, so SVC-3 is not the
    # hunt's to pass
    spec = "examples.tiny_loop.adapter:implementation"
    impl = resolve(spec)
    rep = driver.hunt(impl, spec, TINY, out=tmp_path).report
    def credited(of: object) -> list[str]:
        (only,) = [r for r in verdicts.results(rep, impl_spec=spec, out=tmp_path, impl=of) if r.id == "hunt::oracles"]
        return only.rules

    rules = credited(impl)
    assert "LOOP-3" in rules and "SVC-3" not in rules and "INJ-2" not in rules and "SVC-3" in verdicts.ORACLE_RULES
    assert "SVC-3" in credited(resolve(None))  # the same report, for one that has the feature


def test_a_stopped_hunt_supports_no_rule(tmp_path: Path) -> None:
    impl = resolve(MUTANT)
    rep = driver.hunt(impl, MUTANT, TINY, first=True).report
    results = verdicts.results(rep, impl_spec=MUTANT, out=None)
    assert results and all(r.outcome == "failed" for r in results)
    assert all(r.command == "" for r in results)  # no cassette written: nothing to replay


def test_conformance_hunt_on_the_command_line(tmp_path: Path) -> None:
    out, report, junit = tmp_path / "hunt", tmp_path / "r.json", tmp_path / "r.xml"
    proc = subprocess.run(
        [sys.executable, "-m", "cli", "conformance", "--impl", MUTANT, "--rule", "IDLE-2", "--schedules", "0",
         "--workers", "0", "--hunt", "--hunt-workloads", "reply", "--hunt-depth", "1", "--hunt-out", str(out), "--json", str(report),
         "--junit", str(junit)],
        capture_output=True, text=True, timeout=300, cwd=Path(__file__).resolve().parents[2],
        env={**os.environ, "COLUMNS": "120"})
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "window kind" in proc.stdout and "FOUND" in proc.stdout and "Traceback" not in proc.stderr
    data = json.loads(report.read_text())
    (rule,) = data["rules"]
    assert rule["status"] == "failed" and any(t.startswith("hunt::") for t in rule["tests"])
    assert (out / "report.json").exists()
    cases = ET.parse(junit).getroot().iter("testcase")
    hunt_cases = [c for c in cases if c.get("name", "").startswith("reply: ")]
    assert hunt_cases and all(c.find("failure") is not None for c in hunt_cases)
    assert {p.get("value") for c in hunt_cases for p in c.iter("property")} >= {"IDLE-2"}


def test_conformance_hunt_rejects_an_unknown_workload_before_running() -> None:
    proc = subprocess.run([sys.executable, "-m", "cli", "conformance", "--hunt", "--hunt-workloads", "nope"],
                          capture_output=True, text=True, timeout=60, cwd=Path(__file__).resolve().parents[2])
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "--hunt-workloads: unknown workload 'nope'" in lines[0]
