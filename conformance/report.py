"""Turning a suite run into a verdict: per-rule statuses, the JSON and JUnit reports, the table.

The JSON report's shape (CI and later commands rely on it; fields are only ever added)::

    {"implementation": str, "kit_version": str,
     "complete": bool,             # every selected test ran (false: interrupted or stopped)
     "interrupted": bool, "stopped": str | null,
     "rules": [{"id", "status": "passed"|"failed"|"not-applicable"|"not-checked",
                "tests": [str], "failures": [str],          # "TEST_ID: full message"
                "expected": bool,                           # failed, but excused by the baseline
                "needs_hook": str | null,                   # failed for want of an adapter hook
                "failed_tests": [{"test", "schedule", "message", "reproduce", "expected"}]}],
     "summary": {"passed", "failed", "not_applicable", "not_checked", "expected": int},
     "common_failure"?: {"message": str, "rules": [str]}}   # one failure behind most failing rules

``not-checked`` only appears in an incomplete report of an interrupted run: a rule none of
whose tests ran then is not called failed. Reports are written atomically (a run killed while
writing leaves the previous file or none, never half of one).
"""

from __future__ import annotations

import json
import os
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from typing import Any

from . import catalogue
from .baseline import Baseline
from .files import atomic_write
from .output import shown
from .runner import SuiteRun, TestResult

TABLE_LINES = 30
"""Lines of a failure message shown in the table (the JSON report has it whole)."""


@dataclass
class RuleVerdict:
    """One rule's status and the tests behind it."""

    id: str
    status: str
    tests: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    excused: bool = False
    failed: list[TestResult] = field(default_factory=list)
    needs_hook: str | None = None


@dataclass
class Verdict:
    """The whole run: per-rule verdicts plus the baseline's effect."""

    implementation: str
    rules: list[RuleVerdict]
    unexcused: list[str] = field(default_factory=list)
    stale: list[str] = field(default_factory=list)
    run: SuiteRun | None = None
    expected_tests: set[str] = field(default_factory=set)

    @property
    def complete(self) -> bool:
        """Every selected test ran."""
        return self.run is None or self.run.complete
    implementation_info: dict[str, Any] | None = None
    """A wire implementation's kind, runtime and versions (``None`` for an in-process one)."""

    @property
    def ok(self) -> bool:
        """Exit 0 only when the run is complete, nothing failed unexcused, and no baseline entry
        is stale."""
        return self.complete and not self.unexcused and not self.stale


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
    expected_tests: set[str] = set()
    for rid in wanted:
        rule = catalogue.RULES_BY_ID[rid]
        results = by_rule.get(rid, [])
        verdict = RuleVerdict(rid, "passed", tests=[r.id for r in results])
        if catalogue.not_applicable(rule, run.impl) is not None:
            verdict.status = "not-applicable"
            verdicts.append(verdict)
            continue
        failed = [r for r in results if r.outcome == "failed"]
        ran = [r for r in results if r.outcome == "passed"]
        not_run = [r for r in results if r.outcome == "not-run"]
        verdict.failed = failed
        verdict.failures = [f"{r.id}: {r.message}" for r in failed]
        verdict.needs_hook = next((r.needs_hook for r in failed if r.needs_hook), None)
        if failed:
            verdict.status = "failed"
        elif not_run and run.interrupted is not None:
            verdict.status = "not-checked"  # interrupted: no verdict, and not a failure either
        elif not ran:
            verdict.status = "failed"
            reasons = sorted({r.message for r in results}) or ["no test checks this rule"]
            verdict.failures = [f"not checked: {reasons[0].removeprefix('not run: ')}"]
        elif not_run:
            verdict.status = "failed"  # part of it never ran (the run stopped): not a pass
            verdict.failures = [f"not checked: {len(not_run)} of its tests did not run: "
                                f"{not_run[0].message.removeprefix('not run: ')}"]
        if verdict.status == "failed":
            if baseline is not None and failed and all(baseline.excuses(r.id, rid) for r in failed) and not not_run:
                verdict.excused = True
                expected_tests.update(r.id for r in failed)
            else:
                unexcused.append(rid)
        verdicts.append(verdict)
    info = getattr(run.impl, "info", None)
    return Verdict(run.implementation, verdicts, unexcused, _stale(run, verdicts, baseline), run, expected_tests,
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


def _failed_test(run: SuiteRun | None, result: TestResult, expected: bool) -> dict[str, Any]:
    return {
        "test": result.id,
        "schedule": result.schedule,
        "message": result.message,
        "reproduce": run.reproduce(result) if run is not None else "",
        "expected": expected,
    }


COMMON_MIN_RULES = 5
"""How many failing rules one failure must be behind before the report calls it a common cause."""


def common_failure(verdict: Verdict) -> tuple[str, list[str]] | None:
    """The failure behind most of the failing rules, when one is: ``(its first line, the rules
    it fails)``, if it fails at least :data:`COMMON_MIN_RULES` rules and half of those failing.
    A ``close()`` or ``dispose()`` that raises fails every test that tears an agent down: the
    report then says that one message is behind the eighty rules, as it does for a missing hook."""
    failing = [v for v in verdict.rules if v.status == "failed" and v.failed and not v.needs_hook and not v.excused]
    by_line: dict[str, list[str]] = {}
    for v in failing:
        for line in dict.fromkeys(r.message.strip().splitlines()[0][:300] for r in v.failed if r.message.strip()):
            by_line.setdefault(line, []).append(v.id)
    if not by_line:
        return None
    line, rules = max(by_line.items(), key=lambda item: len(item[1]))
    if len(rules) < COMMON_MIN_RULES or 2 * len(rules) < len(failing):
        return None
    return line, rules


def to_json(verdict: Verdict) -> dict[str, Any]:
    """The report in its JSON shape (see the module docstring)."""
    rules = [{
        "id": v.id, "status": v.status, "tests": v.tests, "failures": v.failures,
        "expected": v.excused, "needs_hook": v.needs_hook,
        "failed_tests": [_failed_test(verdict.run, r, r.id in verdict.expected_tests) for r in v.failed],
    } for v in verdict.rules]
    summary = {
        "passed": sum(v.status == "passed" for v in verdict.rules),
        "failed": sum(v.status == "failed" for v in verdict.rules),
        "not_applicable": sum(v.status == "not-applicable" for v in verdict.rules),
        "not_checked": sum(v.status == "not-checked" for v in verdict.rules),
        "expected": sum(v.excused for v in verdict.rules),
    }
    run = verdict.run
    report: dict[str, Any] = {
        "implementation": verdict.implementation, "kit_version": kit_version(),
        "complete": verdict.complete,
        "interrupted": bool(run is not None and run.interrupted is not None),
        "stopped": run.stopped if run is not None else None,
        "rules": rules, "summary": summary,
    }
    common = common_failure(verdict)
    if common is not None:
        report["common_failure"] = {"message": common[0], "rules": common[1]}  # additive
    if verdict.implementation_info:
        report["implementation_info"] = dict(verdict.implementation_info)  # additive: wire implementations
    return report


def write_json(verdict: Verdict, path: str) -> None:
    """Write the JSON report (sorted keys, stable bytes)."""
    atomic_write(path, json.dumps(to_json(verdict), indent=2, sort_keys=True) + "\n")


def to_junit(verdict: Verdict) -> str:
    """The JUnit XML report: one test case per test, its rule ids as properties; baselined
    failures and tests that did not run are skipped with the reason, not failures."""
    run = verdict.run
    results = run.results if run is not None else []
    suite = ET.Element("testsuite", name=f"loopkit conformance: {verdict.implementation}")
    counts = {"tests": 0, "failures": 0, "skipped": 0}
    for r in results:
        module = r.nodeid.partition("::")[0] or r.id.partition("::")[0]
        classname = module.removesuffix(".py").replace("/", ".").replace(os.sep, ".")
        case = ET.SubElement(suite, "testcase", classname=classname, name=r.id.partition("::")[2], time="0")
        props = ET.SubElement(case, "properties")
        for rid in r.rules:
            ET.SubElement(props, "property", name="rule", value=rid)
        counts["tests"] += 1
        if r.outcome == "failed" and r.id in verdict.expected_tests:
            ET.SubElement(case, "skipped", type="expected",
                          message=f"expected failure (baseline): {r.summary}").text = r.message
            counts["skipped"] += 1
        elif r.outcome == "failed":
            if r.needs_hook:
                ET.SubElement(props, "property", name="needs_hook", value=r.needs_hook)
            failure = ET.SubElement(case, "failure", message=r.summary)
            failure.text = r.message + (f"\nreproduce: {run.reproduce(r)}" if run is not None else "")
            counts["failures"] += 1
        elif r.outcome != "passed":
            ET.SubElement(case, "skipped", message=r.message or r.outcome)
            counts["skipped"] += 1
    for key, value in counts.items():
        suite.set(key, str(value))
    suite.set("errors", "0")
    root = ET.Element("testsuites")
    root.append(suite)
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + _XML_INVALID.sub(_escaped, ET.tostring(root, encoding="unicode")) + "\n"


_XML_INVALID = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff\ud800-\udfff]")
"""Characters XML 1.0 cannot hold, even escaped (an implementation's message may carry NUL, an
ANSI colour code's ESC, a lone surrogate): written as ``\\xNN`` / ``\\uNNNN`` text."""


def _escaped(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def write_junit(verdict: Verdict, path: str) -> None:
    """Write the JUnit XML report (atomically)."""
    atomic_write(path, to_junit(verdict))


_STYLE = {"passed": "green", "failed": "red", "not-applicable": "dim", "not-checked": "yellow"}


def _cell(verdict: Verdict, v: RuleVerdict) -> str:
    """The table's failure cell: the first failing test, its schedule, the whole message
    (wrapped; at most TABLE_LINES lines) and the command that reproduces it."""
    if not v.failed:
        return shown(v.failures[0]) if v.failures else ""
    first = v.failed[0]
    lines = first.message.splitlines()
    if len(lines) > TABLE_LINES:
        lines = [*lines[:TABLE_LINES], f"[... {len(lines) - TABLE_LINES} more lines in the JSON report]"]
    text = f"{first.id} (schedule {first.schedule})\n" + "\n".join(lines)
    if len(v.failed) > 1:
        text += f"\n(+{len(v.failed) - 1} more failing tests)"
    if verdict.run is not None:
        text += f"\nreproduce: {verdict.run.reproduce(first)}"
    return shown(text)


def print_table(verdict: Verdict, *, console: Any = None, show_passed: bool = True) -> None:
    """The per-rule table, the summary and the baseline's effect, with rich."""
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    table = Table(title=f"loopkit conformance: {shown(verdict.implementation)}", show_lines=True)
    table.add_column("rule", no_wrap=True)
    table.add_column("status", no_wrap=True)
    table.add_column("tests", justify="right")
    table.add_column("first failure", overflow="fold")
    for v in verdict.rules:
        if not show_passed and v.status == "passed":
            continue
        label = f"needs hook {v.needs_hook}" if v.needs_hook else v.status
        status = f"[{_STYLE[v.status]}]{label}[/]" + (" (expected)" if v.excused else "")
        table.add_row(v.id, status, str(len(v.tests)), _cell(verdict, v))
    console.print(table)
    data = to_json(verdict)["summary"]
    console.print(
        f"passed {data['passed']}, failed {data['failed']}, not applicable {data['not_applicable']}"
        + (f", not checked {data['not_checked']}" if data["not_checked"] else "")
        + (f"; failures expected by the baseline: {data['expected']}" if data["expected"] else "")
    )
    hooks: dict[str, int] = {}
    for v in verdict.rules:
        if v.needs_hook:
            hooks[v.needs_hook] = hooks.get(v.needs_hook, 0) + 1
    for hook, count in sorted(hooks.items()):
        console.print(f"[yellow]needs hook {hook}: {count} rule(s) cannot be checked without it[/]")
    common = common_failure(verdict)
    if common is not None:
        console.print(f"[yellow]one failure behind {len(common[1])} failing rules (fix it first): {shown(common[0])}[/]")
    run = verdict.run
    if run is not None and run.stopped:
        console.print(f"[red]incomplete: {shown(run.stopped)}[/]")
    for entry in verdict.stale:
        console.print(f"[yellow]stale baseline entry (now passes): {shown(entry)}[/]")
    if verdict.unexcused:
        console.print(f"[red]FAILED rules: {', '.join(verdict.unexcused)}[/]")
