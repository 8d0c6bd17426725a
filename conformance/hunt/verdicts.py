"""The hunt's verdicts as rule results: what ``loopkit conformance --hunt`` adds to the per-rule
report (table, JSON and JUnit).

Each failure signature of the hunt becomes one failed result named ``hunt::<first window>``,
carrying the rule ids of its oracle and the command that replays its race cassette (a finding
whose oracle names no rule — the world saw something go wrong — keeps an empty list; the caller
reports it apart and fails the run); the rules
the hunt's oracles check and no finding names get one passed result (``hunt::oracles``) — a
complete hunt that found nothing is evidence for them, as a passing rule test is. An
interrupted or stopped hunt adds no passes (it did not look everywhere).
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from ..catalogue import RULES_BY_ID, not_applicable
from ..runner import TestResult
from ..scenario.checks import ORACLES, PLAIN_ORACLES

ORACLE_RULES: tuple[str, ...] = tuple(sorted({r for c in (*ORACLES, *PLAIN_ORACLES) for r in c.rules}))
"""Every rule id the hunt's oracles check."""

HUNT_NODE = "hunt"
"""The ``nodeid`` of the results the hunt adds (the report's reproduce command is their replay)."""


def results(report: dict[str, Any], *, impl_spec: str, out: Path | None,
            selected: list[str] | None = None, impl: object | None = None) -> list[TestResult]:
    """The rule results of a hunt ``report`` (limited to the ``selected`` rules when given). The
    clean oracles' rules credited (``hunt::oracles``) are those that apply to ``impl``: a rule of
    a feature it lacks had no workload of its own (``resume`` needs persistence)."""
    keep = set(selected) if selected else None

    def chosen(rules: list[str]) -> list[str]:
        return [r for r in rules if keep is None or r in keep]

    found: list[TestResult] = []
    named: set[str] = set()
    for f in report["findings"]:
        rules = chosen(list(f["rules"]))
        if not rules and f["rules"]:
            continue  # names only rules not selected
        example = f["examples"][0] if f["examples"] else {"window": f["first"]}
        where = ", ".join(f["workloads"])
        message = (f"{f['message']}\nwindow: {example['window']} ({f['windows']} window(s) in {where}; "
                   f"oracle {f['signature']})")
        command = ""
        if example.get("cassette") and out is not None:
            command = f"loopkit replay {shlex.quote(str(out / example['cassette']))} --impl {shlex.quote(impl_spec)}"
        found.append(TestResult(f"hunt::{example['window']}", rules, "failed", message,
                                nodeid=HUNT_NODE, command=command))
        named.update(rules)
    complete = report.get("complete", True) and not report.get("stopped")
    clean = [r for r in chosen(list(ORACLE_RULES)) if r not in named
             and (impl is None or r not in RULES_BY_ID or not_applicable(RULES_BY_ID[r], impl) is None)]
    if complete and clean:
        t = report["totals"]
        found.append(TestResult("hunt::oracles", clean, "passed",
                                f"no oracle failed in {t['windows']} windows ({t['schedules']} schedules)",
                                nodeid=HUNT_NODE))
    return found
