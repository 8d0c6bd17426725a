"""The self-check: run the conformance suite against every mutant and against the reference.

A mutant is *killed* when at least one rule test fails against it; ``killed_by`` lists the rule
ids of the failing tests (catalogue order). The self-check passes only when the reference passes
every test and every mutant is killed. Its JSON report has the fixed shape::

    {"reference_passed": bool,
     "mutants": [{"name": str, "description": str, "killed": bool, "killed_by": [rule ids]}],
     "score": float,          # killed / total
     "complete": bool}        # false when interrupted: only the mutants checked by then

The reference and the mutants are the kit's own code, trusted to run in this process (no
worker processes: 59 suite runs would pay their start-up 59 times); the wall-clock limit per
test still applies. An interrupt stops the current suite at its next test and the self-check
after it: the report then lists what was checked, and says it is incomplete.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from . import catalogue, mutants, schedules
from .interrupts import Interrupts
from .runner import SuiteError, SuiteRun, run_suite


@dataclass
class MutantOutcome:
    """What the suite did to one mutant."""

    name: str
    description: str
    expected: list[str]
    killed: bool
    killed_by: list[str] = field(default_factory=list)
    tests: list[str] = field(default_factory=list)
    """The failing tests (short ids), for the table."""
    error: str = ""
    """A setup error (the mutant could not even be built): it counts as killed."""
    seconds: float = 0.0

    @property
    def expected_hit(self) -> bool:
        """Whether at least one of the rules the catalogue names caught it."""
        return bool(set(self.expected) & set(self.killed_by))


@dataclass
class SelfCheck:
    """The whole self-check."""

    reference_passed: bool
    reference_failures: list[str]
    mutants: list[MutantOutcome]
    seconds: float = 0.0
    interrupted: int | None = None
    """The signal that stopped the self-check early (then ``mutants`` is what was checked)."""
    total: int = 0
    """Mutants chosen (``len(mutants)`` unless interrupted)."""
    reference_checked: bool = True
    """Whether the reference's suite ran to its end (an interrupt may cut it short: then
    ``reference_passed`` is false without any test having failed)."""
    rules: list[str] = field(default_factory=list)
    """The rules whose tests ran (empty: the whole suite)."""

    @property
    def score(self) -> float:
        """Killed mutants over all mutants (1.0 for an empty catalogue)."""
        if not self.mutants:
            return 1.0
        return sum(m.killed for m in self.mutants) / len(self.mutants)

    @property
    def complete(self) -> bool:
        """Every chosen mutant (and the reference) was checked."""
        return self.interrupted is None

    @property
    def ok(self) -> bool:
        """Exit 0 only when the run is complete, the reference passes and every mutant is killed."""
        return self.complete and self.reference_passed and all(m.killed for m in self.mutants)


def _failed(run: SuiteRun) -> tuple[list[str], list[str]]:
    """The rule ids (catalogue order) and test ids of the failing tests of a run."""
    failed = [r for r in run.results if r.outcome == "failed"]
    rules = {rid for r in failed for rid in r.rules}
    order = [r.id for r in catalogue.RULES if r.id in rules]
    order += sorted(rules - set(order))
    return order, [r.id for r in failed]


def check_reference(
    schedule_count: int = schedules.DEFAULT_SCHEDULES, interrupts: Interrupts | None = None,
    rules: Sequence[str] = (),
) -> tuple[bool, list[str], bool]:
    """Run the suite (optionally only ``rules``) on the reference: (passed, failing tests with
    their messages, whether the suite ran to its end)."""
    run = run_suite(None, rules=list(rules), schedule_count=schedule_count, interrupts=interrupts)
    failures = [f"{r.id}: {r.summary}" for r in run.results if r.outcome == "failed"]
    return not failures and run.complete, failures, run.complete


def check_mutant(
    name: str, schedule_count: int = schedules.DEFAULT_SCHEDULES, rules: Sequence[str] = (),
    interrupts: Interrupts | None = None,
) -> MutantOutcome:
    """Run the suite (optionally only ``rules``) against mutant ``name``."""
    mutant = mutants.MUTANTS[name]
    started = time.monotonic()
    outcome = MutantOutcome(name, mutant.description, list(mutant.rules), killed=False)
    try:
        run = run_suite(f"mutant:{name}", rules=list(rules), schedule_count=schedule_count, interrupts=interrupts)
    except SuiteError as exc:
        outcome.killed, outcome.error = True, str(exc)
    else:
        outcome.killed_by, outcome.tests = _failed(run)
        outcome.killed = bool(outcome.tests)
    outcome.seconds = time.monotonic() - started
    return outcome


Progress = Callable[[str, int, int], None]
"""``progress(label, done, total)`` after each suite run."""


def run_selfcheck(
    names: Sequence[str] | None = None,
    *,
    schedule_count: int = schedules.DEFAULT_SCHEDULES,
    progress: Progress | None = None,
    interrupts: Interrupts | None = None,
    rules: Sequence[str] = (),
) -> SelfCheck:
    """The reference, then each mutant (all by default), through the whole suite (or only the
    tests of ``rules``: an unknown id is the reference's run's ``SuiteError``); stopped early (``interrupted``) when ``interrupts`` says so, with what
    was checked by then."""
    chosen = list(names or mutants.names())
    unknown = [n for n in chosen if n not in mutants.MUTANTS]
    if unknown:
        raise SuiteError(f"unknown mutant(s): {', '.join(unknown)}")
    stop = interrupts or Interrupts(signals=())
    started = time.monotonic()
    total = len(chosen) + 1
    passed, failures, checked = check_reference(schedule_count, stop, rules)
    if progress is not None:
        progress("reference", 1, total)
    outcomes: list[MutantOutcome] = []
    for index, name in enumerate(chosen, start=2):
        if stop.requested:
            break
        outcome = check_mutant(name, schedule_count, rules, interrupts=stop)
        if stop.requested and not outcome.killed:
            break  # its suite was cut short: no verdict on it
        outcomes.append(outcome)
        if progress is not None:
            progress(name, index, total)
    return SelfCheck(passed, failures, outcomes, time.monotonic() - started, stop.signum, len(chosen), checked,
                     list(rules))


def to_json(result: SelfCheck) -> dict[str, Any]:
    """The report in the issue's fixed shape."""
    return {
        "reference_passed": result.reference_passed,
        "mutants": [
            {"name": m.name, "description": m.description, "killed": m.killed, "killed_by": m.killed_by}
            for m in result.mutants
        ],
        "score": result.score,
        "complete": result.complete,
    }


def write_json(result: SelfCheck, path: str) -> None:
    """Write the JSON report (stable bytes: sorted keys, fixed indentation)."""
    from .files import atomic_write

    atomic_write(path, json.dumps(to_json(result), indent=2, sort_keys=True) + "\n")


def print_table(result: SelfCheck, *, console: Any = None) -> None:
    """The per-mutant table and the verdict, with rich."""
    from rich.console import Console
    from rich.table import Table

    from .output import shown

    console = console or Console()
    table = Table(title="loopkit selfcheck: the suite against its mutants")
    table.add_column("mutant", no_wrap=True)
    table.add_column("killed", no_wrap=True)
    table.add_column("killed by (rule ids)", overflow="fold")
    table.add_column("expected", overflow="fold")
    table.add_column("tests", justify="right")
    for m in result.mutants:
        mark = "[green]yes[/]" if m.killed else "[red]NO[/]"
        by = shown(", ".join(m.killed_by) or (f"setup: {m.error}" if m.error else ""))
        expected = ", ".join(m.expected) + ("" if m.expected_hit or not m.killed else " [yellow](missed)[/]")
        table.add_row(m.name, mark, by, expected, str(len(m.tests)))
    console.print(table)
    if result.reference_passed:
        ref = "[green]passes[/]"
    elif result.reference_checked or result.reference_failures:
        ref = "[red]FAILS[/]"
    else:
        ref = "[yellow]not fully checked[/]"
    killed = sum(m.killed for m in result.mutants)
    console.print(
        f"reference {ref}; killed {killed}/{len(result.mutants)} mutants; "
        f"score {result.score:.3f}; {result.seconds:.1f}s"
    )
    if result.rules:
        console.print(f"only the tests of {', '.join(result.rules)}")
    for failure in result.reference_failures[:10]:
        console.print(f"[red]reference failure: {shown(failure)}[/]")
    alive = [m.name for m in result.mutants if not m.killed]
    if alive:
        console.print(f"[red]SURVIVING mutants: {', '.join(alive)}[/]")
