"""Turning a suite run into a verdict: per-rule statuses, the JSON report, the console table.

The JSON report's shape is fixed (CI and later commands rely on it)::

    {"implementation": str, "kit_version": str,
     "rules": [{"id", "status": "passed"|"failed"|"not-applicable", "tests": [str], "failures": [str]}],
     "summary": {"passed": int, "failed": int, "not_applicable": int}}
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from . import catalogue
from .baseline import Baseline
from .runner import SuiteRun, TestResult


@dataclass
class RuleVerdict:
    """One rule's status and the tests behind it."""

    id: str
    status: str
    tests: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    excused: bool = False


@dataclass
class Verdict:
    """The whole run: per-rule verdicts plus the baseline's effect."""

    implementation: str
    rules: list[RuleVerdict]
    unexcused: list[str] = field(default_factory=list)
    stale: list[str] = field(default_factory=list)
    implementation_info: dict[str, Any] | None = None
    """A wire implementation's kind, runtime and versions (``None`` for an in-process one)."""

    @property
    def ok(self) -> bool:
        """Exit 0 only when nothing failed unexcused and no baseline entry is stale."""
        return not self.unexcused and not self.stale


def kit_version() -> str:
    """The installed loopkit version."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("loopkit")
    except PackageNotFoundError:
        return "0+unknown"


def judge(run: SuiteRun, baseline: Baseline | None = None) -> Verdict:
    """Per-rule statuses from test results, with the baseline applied."""
    by_rule: dict[str, list[TestResult]] = {}
    for result in run.results:
        for rid in result.rules:
            by_rule.setdefault(rid, []).append(result)
    wanted = run.selected_rules or [r.id for r in catalogue.RULES]
    verdicts: list[RuleVerdict] = []
    unexcused: list[str] = []
    for rid in wanted:
        rule = catalogue.RULES_BY_ID[rid]
        results = by_rule.get(rid, [])
        verdict = RuleVerdict(rid, "passed", tests=[r.id for r in results])
        if catalogue.not_applicable(rule, run.impl) is not None:
            verdict.status = "not-applicable"
        else:
            failed = [r for r in results if r.outcome == "failed"]
            ran = [r for r in results if r.outcome == "passed"]
            verdict.failures = [f"{r.id}: {r.message}" for r in failed]
            if failed:
                verdict.status = "failed"
            elif not ran:
                verdict.status = "failed"
                reasons = sorted({r.message for r in results}) or ["no test checks this rule"]
                verdict.failures = [f"not checked: {reasons[0]}"]
            if verdict.status == "failed":
                if baseline is not None and failed and all(baseline.excuses(r.id, rid) for r in failed):
                    verdict.excused = True
                else:
                    unexcused.append(rid)
        verdicts.append(verdict)
    info = getattr(run.impl, "info", None)
    return Verdict(run.implementation, verdicts, unexcused, _stale(run, verdicts, baseline),
                   implementation_info=dict(info) if isinstance(info, dict) else None)


def _stale(run: SuiteRun, verdicts: list[RuleVerdict], baseline: Baseline | None) -> list[str]:
    if baseline is None:
        return []
    status = {v.id: v.status for v in verdicts}
    stale = sorted(rid for rid in baseline.rules if status.get(rid) == "passed")
    for entry in sorted(baseline.tests):
        matching = [r for r in run.results if entry in (r.id, r.id.split("[", 1)[0])]
        if matching and all(r.outcome == "passed" for r in matching):
            stale.append(entry)
    return stale


def to_json(verdict: Verdict) -> dict[str, Any]:
    """The report in its fixed JSON shape."""
    rules = [{"id": v.id, "status": v.status, "tests": v.tests, "failures": v.failures} for v in verdict.rules]
    summary = {
        "passed": sum(v.status == "passed" for v in verdict.rules),
        "failed": sum(v.status == "failed" for v in verdict.rules),
        "not_applicable": sum(v.status == "not-applicable" for v in verdict.rules),
    }
    report: dict[str, Any] = {"implementation": verdict.implementation, "kit_version": kit_version(), "rules": rules,
                              "summary": summary}
    if verdict.implementation_info:
        report["implementation_info"] = dict(verdict.implementation_info)  # additive: wire implementations
    return report


def write_json(verdict: Verdict, path: str) -> None:
    """Write the JSON report (sorted keys, stable bytes)."""
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(to_json(verdict), handle, indent=2, sort_keys=True)
        handle.write("\n")


_STYLE = {"passed": "green", "failed": "red", "not-applicable": "dim"}


def print_table(verdict: Verdict, *, console: Any = None, show_passed: bool = True) -> None:
    """The per-rule table, the summary and the baseline's effect, with rich."""
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    table = Table(title=f"loopkit conformance: {verdict.implementation}", show_lines=False)
    table.add_column("rule", no_wrap=True)
    table.add_column("status", no_wrap=True)
    table.add_column("tests", justify="right")
    table.add_column("first failure", overflow="fold")
    for v in verdict.rules:
        if not show_passed and v.status == "passed":
            continue
        status = f"[{_STYLE[v.status]}]{v.status}[/]" + (" (baseline)" if v.excused else "")
        table.add_row(v.id, status, str(len(v.tests)), v.failures[0] if v.failures else "")
    console.print(table)
    data = to_json(verdict)["summary"]
    console.print(
        f"passed {data['passed']}, failed {data['failed']}, not applicable {data['not_applicable']}"
        + (f"; failures expected by the baseline: {sum(v.excused for v in verdict.rules)}" if any(v.excused for v in verdict.rules) else "")
    )
    for entry in verdict.stale:
        console.print(f"[yellow]stale baseline entry (now passes): {entry}[/]")
    if verdict.unexcused:
        console.print(f"[red]FAILED rules: {', '.join(verdict.unexcused)}[/]")
