"""``loopkit conformance``: check an implementation against every rule and print the verdict.

Exit codes: 0 every applicable rule passes (baseline applied, no stale entries); 1 a rule fails,
a baseline entry is stale or the run is incomplete; 2 a usage or setup error (one line on stderr,
no traceback); 130 interrupted (143 for SIGTERM).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

import typer

from . import schedules
from .files import clash_error, output_path_error, writable
from .impl import IMPL_HELP
from .limits import (
    DEFAULT_WORKERS,
    MAX_HANGS,
    MAX_SCHEDULES,
    MIN_TIMEOUT,
    WALL_TIMEOUT,
    workers_error,
)
from .output import printable

HUNT_OUT = Path("hunt-report")
HUNT_DEPTH = 2
"""``--hunt-out`` and ``--hunt-depth`` when not given (given without ``--hunt``, they are an error)."""


def _fail(message: str) -> typer.Exit:
    typer.echo(f"error: {printable(message)}", err=True)
    return typer.Exit(2)


def conformance(
    impl: str = typer.Option(
        "reference", "--impl", metavar="MODULE:ATTR",
        help=IMPL_HELP,
    ),
    rule: list[str] = typer.Option(  # noqa: B008 - typer's idiom
        [], "--rule", metavar="ID", help="Only check this rule id (repeatable)."
    ),
    schedule_count: int = typer.Option(
        schedules.DEFAULT_SCHEDULES, "--schedules", metavar="N",
        help="Seeded random and pct schedules (each) the race rules also run under.",
    ),
    baseline: str | None = typer.Option(
        None, "--baseline", metavar="FILE", help="Expected failures: rule ids or test ids, one per line."
    ),
    json_path: str | None = typer.Option(None, "--json", metavar="FILE", help="Write the JSON report here (-: on stdout, the table then on stderr)."),
    junit: str | None = typer.Option(None, "--junit", metavar="FILE", help="Write a JUnit XML report here (-: on stdout, the table then on stderr)."),
    failures_only: bool = typer.Option(False, "--failures-only", help="List only rules that did not pass."),
    timeout: float = typer.Option(
        WALL_TIMEOUT, "--timeout", metavar="SECONDS",
        help="Wall-clock limit per test, setup and teardown included (every wait is virtual: wall time means a spin); 0 disables.",
    ),
    workers: int = typer.Option(
        DEFAULT_WORKERS, "--workers", metavar="N",
        help="Worker processes the tests run in (a crash or exit of the implementation fails one test); 0 runs in this process.",
    ),
    max_hangs: int = typer.Option(
        MAX_HANGS, "--max-hangs", metavar="N",
        help="Stop after N tests exceeded --timeout (the rest is reported not run); 0 never stops.",
    ),
    hunt: bool = typer.Option(
        False, "--hunt", help="Also run the default hunt (loopkit hunt) and add its verdicts to the per-rule report."
    ),
    hunt_out: Path = typer.Option(  # noqa: B008 - typer's idiom
        HUNT_OUT, "--hunt-out", metavar="DIR", help="With --hunt: where its report.json and race cassettes go."
    ),
    hunt_workloads: str = typer.Option(
        "", "--hunt-workloads", metavar="A,B", help="With --hunt: only these workloads (default: all)."
    ),
    hunt_depth: int = typer.Option(
        HUNT_DEPTH, "--hunt-depth", metavar="N", help="With --hunt: actions per window (as loopkit hunt --depth)."
    ),
) -> None:
    """Check an implementation against every rule of the agent-loop contract.

    Prints a per-rule table. Exit 0 when every applicable rule passes (baseline applied), 1 when one fails, a baseline entry is stale or the run is incomplete, 2 on a usage or setup error, 130 when interrupted (the reports then say "complete": false).
    """
    from .baseline import BaselineError, load
    from .interrupts import Interrupts, echo
    from .output import STDOUT, to_stderr
    from .report import judge, print_table, write_json, write_junit
    from .runner import SuiteError, run_suite

    if not impl.strip():
        raise _fail(f"bad --impl {impl!r}: it names no implementation (expected MODULE:ATTR, 'reference', "
                    "'mutant:NAME' or 'wire:COMMAND')")
    if json_path == junit == STDOUT:
        raise _fail("--json and --junit cannot both write to stdout (-)")
    for option, path in (("--json", json_path), ("--junit", junit)):
        problem = output_path_error(option, path, stdout=True) if path else None
        if problem:
            raise _fail(problem)
    problem = clash_error((("--json", json_path), ("--junit", junit)), (("the baseline (--baseline)", baseline),))
    if problem:
        raise _fail(problem)
    if not (timeout >= 0) or timeout == float("inf"):
        raise _fail(f"--timeout must be a finite number of seconds >= 0, got {timeout}")
    if 0 < timeout < MIN_TIMEOUT:
        raise _fail(f"--timeout {timeout:g} is shorter than the suite's own work around a test: 0 (no limit) or at "
                    f"least {MIN_TIMEOUT:g} seconds")
    if max_hangs < 0:
        raise _fail("--max-hangs must be >= 0")
    problem = workers_error("--workers", workers)
    if problem:
        raise _fail(problem)
    if not 0 <= schedule_count <= MAX_SCHEDULES:
        raise _fail(f"--schedules must be between 0 and {MAX_SCHEDULES:,} (got {schedule_count})")
    if not hunt and (hunt_workloads or hunt_depth != HUNT_DEPTH or hunt_out != HUNT_OUT):
        raise _fail("--hunt-out, --hunt-workloads and --hunt-depth need --hunt")
    try:
        expected = load(baseline) if baseline else None
    except BaselineError as exc:
        raise _fail(str(exc)) from None
    hunt_names = tuple(n.strip() for n in hunt_workloads.split(",") if n.strip())
    if hunt:
        from .hunt.commands import sequences_error
        from .hunt.config import VERBS
        from .hunt.workloads import by_name

        if hunt_depth < 1:
            raise _fail("--hunt-depth must be at least 1")
        if hunt_workloads and not hunt_names:
            raise _fail(f"--hunt-workloads {hunt_workloads!r} names no workload")
        problem = sequences_error(len(VERBS), hunt_depth, "--hunt-depth")
        if problem:
            raise _fail(problem)
        try:
            by_name(list(hunt_names))
        except ValueError as exc:
            raise _fail(f"--hunt-workloads: {exc}") from None
        try:
            writable(hunt_out, "--hunt-out")  # before the suite: its minutes must not end in a traceback
        except OSError as exc:
            raise _fail(str(exc)) from None
    with to_stderr(STDOUT in (json_path, junit)):  # --json -: stdout holds the report alone
        started = time.monotonic()
        with Interrupts() as stop:
            try:
                run = run_suite(None if impl == "reference" else impl, rules=rule, schedule_count=schedule_count,
                                workers=workers, timeout=timeout, max_hangs=max_hangs, interrupts=stop)
            except SuiteError as exc:
                if stop.requested:
                    echo(stop.message(0, "tests"))
                    raise typer.Exit(stop.exit_code) from None
                raise _fail(str(exc)) from None
        if hunt and run.interrupted is None:
            run.results.extend(_hunt(run, impl, hunt_out, hunt_names, hunt_depth, workers, timeout))
        verdict = judge(run, expected)
        print_table(verdict, show_passed=not failures_only)
        unattributed = [r for r in run.results if r.outcome == "failed" and not r.rules]
        for r in unattributed:
            echo(f"FAILED hunt (no rule id): {r.id}: {r.summary}" + (f"  (replay: {r.command})" if r.command else ""))
        elapsed = time.monotonic() - started
        if run.interrupted is not None:
            echo(stop.message(run.ran, "tests") + f" of {len(run.results)} in {elapsed:.1f}s; "
                 "the report is incomplete and calls no unchecked rule failed")
        else:
            echo(f"{len(run.results)} tests in {elapsed:.1f}s" + ("" if run.complete else f" ({run.ran} ran)"))
    for option, path, write in (("--json", json_path, write_json), ("--junit", junit, write_junit)):
        if path:
            try:
                write(verdict, path)
            except OSError as exc:
                raise _fail(f"cannot write {path!r} ({option}): {exc.strerror or exc}") from None
    sys.stdout.flush()
    if run.interrupted is not None:
        raise typer.Exit(stop.exit_code)
    raise typer.Exit(0 if verdict.ok and not unattributed else 1)


def _hunt(run: Any, impl: str, out: Path, workloads: tuple[str, ...], depth: int, workers: int,
          timeout: float) -> list[Any]:
    """Run the default hunt of ``run``'s implementation and return its verdicts as rule results
    (:mod:`conformance.hunt.verdicts`); its coverage table and findings are printed. ``timeout``
    bounds each window's run; the hunt stops at the first that spins."""
    from .hunt import driver, search, verdicts
    from .hunt.console import print_report, write_report
    from .hunt.pool import PoolError, WorkerSpun
    from .hunt.report import dumps
    from .hunt.windows import SpinError
    from .interrupts import Interrupts, echo
    from .runner import TestResult
    from .scenario import engine
    from .scenario.world import ScenarioSetupError

    engine.set_wall_limit(timeout)  # per window run, as --timeout is per rule test
    config = search.Config(workloads=workloads, depth=depth)
    with Interrupts() as stop:
        try:
            result = driver.hunt(run.impl, impl, config, workers=workers or (os.cpu_count() or 1), out=out,
                                 should_stop=lambda: stop.requested)
        except (SpinError, WorkerSpun) as exc:  # the implementation spins: one failure
            return [TestResult("hunt::probe", [], "failed", str(exc), nodeid=verdicts.HUNT_NODE)]
        except (PoolError, ScenarioSetupError) as exc:  # a worker died, nothing could be set up: the
            # suite's verdicts stand, and the hunt is one failure saying why it could not run
            return [TestResult("hunt::probe", [], "failed", f"the hunt could not run: {exc}", nodeid=verdicts.HUNT_NODE)]
    rep = result.report
    write_report(out / "report.json", dumps(rep))
    print_report(rep, out, impl, [])
    if rep["stopped"] == "interrupted":
        echo(stop.message(rep["totals"]["run"], "windows") + f" of the hunt; no report written but the hunt's own "
             f"({out / 'report.json'})")
        raise typer.Exit(stop.exit_code)
    return verdicts.results(rep, impl_spec=impl, out=out, selected=run.selected_rules or None, impl=run.impl)


def register(app: typer.Typer) -> None:
    """Add ``loopkit conformance`` to the CLI."""
    app.command("conformance")(conformance)
