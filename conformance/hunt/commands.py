"""``loopkit hunt`` and ``loopkit hunt merge``: window exploration from the command line.

Exit codes as ``loopkit conformance``: 0 nothing found, 1 an oracle failed in some window (or,
with ``--baseline``, a difference from the ``--against`` implementation that the baseline does
not list), 2 bad input (one line on stderr), 130 interrupted (the report written is marked
``interrupted``).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import typer

from cassettes import inputs

from ..files import clash_error, writable
from ..impl import IMPL_HELP
from ..interrupts import echo
from ..limits import workers_error
from ..output import guarded, printable
from .config import VERBS, Config
from .console import print_report, write_report

BASELINE_FORMAT = "loopkit-hunt-baseline/1"

_DEFAULT = Config()

app = typer.Typer(help="Find races nobody wrote a scenario for: every window a caller can act in.",
                  no_args_is_help=False, add_completion=False)


def _fail(message: str) -> typer.Exit:
    typer.echo(f"error: {printable(message)}", err=True)
    return typer.Exit(2)


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def _resolve_checked(spec: str, timeout: float) -> Any:
    from conformance.preflight import resolve_checked

    return resolve_checked(spec, timeout)


def _user_errors() -> tuple[type[BaseException], ...]:
    from conformance.impl import ImplError
    from conformance.output import ImplementationInterrupt
    from conformance.preflight import PreflightError
    from simulator.errors import SimulationError

    from ..scenario.model import ScenarioError
    from ..scenario.race import RaceCassetteError
    from ..scenario.world import ScenarioSetupError
    from .pool import PoolError
    from .report import ReportError
    from .shards import ShardError

    return (ImplError, PreflightError, ImplementationInterrupt, ScenarioError, ScenarioSetupError, RaceCassetteError, PoolError, ReportError, ShardError,
            SimulationError, OSError)


def _baseline(path: Path) -> set[str]:
    from .report import ReportError

    try:
        data = json.loads(inputs.read_bytes(path).decode("utf-8"))
    except OSError as exc:
        raise ReportError(f"{path}: cannot read ({exc})") from None
    except UnicodeDecodeError:
        raise ReportError(f"{path}: not a hunt baseline (not UTF-8 text)") from None
    except json.JSONDecodeError as exc:
        raise ReportError(f"{path}:{exc.lineno}: not JSON ({exc.msg})") from None
    except (RecursionError, ValueError):  # nesting past the parser's depth; an int of 5,000 digits
        raise ReportError(f"{path}: not a hunt baseline (nested too deeply, or a number too long)") from None
    if not isinstance(data, dict) or data.get("format") != BASELINE_FORMAT or not isinstance(
            data.get("differences"), list) or not all(isinstance(d, str) for d in data["differences"]):
        raise ReportError(f"{path}: not a hunt baseline (expected format {BASELINE_FORMAT!r} and a "
                          "'differences' list of signatures)")
    return {str(d) for d in data["differences"]}


MAX_SEQUENCES = 5_000
"""Action sequences per point a hunt may enumerate (depth 2 with 12 actions makes 156; depth 3
makes 1,884): beyond, a hunt would run for days, so it is refused up front."""


def sequences_error(actions: int, depth: int, option: str = "--depth") -> str | None:
    """Why ``depth`` over ``actions`` actions makes too many action sequences per point (``None``:
    it does not). Counted only until past the bound, so a depth of 10^11 is refused at once."""
    if actions < 2:
        sequences, exact = actions * depth, True
    else:
        sequences, exact = 0, True
        for k in range(1, depth + 1):
            sequences += actions ** k
            if sequences > MAX_SEQUENCES:
                exact = k == depth
                break
    if sequences <= MAX_SEQUENCES:
        return None
    noun = "action" if actions == 1 else "actions"
    count = (f"{sequences:,} action sequences at every point, more" if exact
             else "more action sequences at every point")
    return (f"{option} {depth} with {actions} {noun} makes {count} than a hunt takes (at most {MAX_SEQUENCES:,}): "
            "lower it or narrow the actions")


@app.callback(invoke_without_command=True)
def hunt(
    ctx: typer.Context,
    impl: str = typer.Option("reference", "--impl", metavar="MODULE:ATTR", help=IMPL_HELP),
    workloads: str = typer.Option("", "--workloads", metavar="A,B", help="Only these workloads (default: all)."),
    depth: int = typer.Option(_DEFAULT.depth, "--depth", help="Actions per window: every sequence of 1..DEPTH verbs."),
    nth: int = typer.Option(_DEFAULT.nth, "--nth", help="Occurrences of each point to open a window at."),
    verbs: str = typer.Option("", "--verbs", metavar="A,B", help=f"Only these actions (default: {', '.join(VERBS)})."),
    first: bool = typer.Option(False, "--first", "-x", help="Stop at the first finding."),
    workers: int = typer.Option(0, "--workers", help="Processes (default: one per CPU)."),
    shard: str = typer.Option("", "--shard", metavar="I/N", help="Run the I-th of N parts (merge with 'hunt merge')."),
    against: str = typer.Option("", "--against", metavar="IMPL", help="Also report where traces differ from IMPL."),
    baseline: Path | None = typer.Option(None, "--baseline", metavar="FILE", help="Known differences (with --against): only others fail."),  # noqa: B008
    write_baseline: Path | None = typer.Option(None, "--write-baseline", metavar="FILE", help="Write the differences found as a baseline."),  # noqa: B008
    seed: int = typer.Option(0, "--seed", help="The seed of every window's random and pct runs."),
    random_runs: int = typer.Option(_DEFAULT.random, "--random", help="Seeded random schedules per explored window."),
    pct_runs: int = typer.Option(_DEFAULT.pct, "--pct", help="PCT schedules per explored window."),
    dfs_runs: int = typer.Option(_DEFAULT.dfs, "--dfs", help="Schedules per explored window that deviate once from FIFO, right after the window acted (nearest first)."),
    explore_all: bool = typer.Option(False, "--explore-all", help="Explore the schedules of every window, not only the first of each distinct trace (slower, deeper)."),
    no_twins: bool = typer.Option(False, "--no-twins", help="Run every actor window, also one whose plain run is an earlier window's (it starts its actor at the same place in FIFO order)."),
    cassettes: int = typer.Option(1, "--cassettes", help="Race cassettes per failure and workload."),
    out: Path = typer.Option(Path("hunt-report"), "--out", metavar="DIR", help="Where report.json and the cassettes go."),  # noqa: B008
    as_json: bool = typer.Option(False, "--json", help="Print the JSON report on stdout instead of the table."),
    timeout: float = typer.Option(5.0, "--timeout", metavar="SECONDS", help="Wall-clock seconds one window's run may take (0: no limit); the hunt stops at the first window past it (the implementation spins)."),
) -> None:
    """Open every window a caller can act in (after each notification, inside each waterfall,
    flush and tool call, between chunks, after creation), do every sequence of actions there,
    explore the schedules of each new trace, and judge by the contract's oracles alone."""
    if ctx.invoked_subcommand is not None:
        return
    from conformance.interrupts import Interrupts

    from . import driver, shards
    from .pool import WorkerSpun
    from .windows import SpinError

    if depth < 1 or nth < 1 or min(random_runs, pct_runs, dfs_runs) < 0 or cassettes < 1:
        raise _fail("--depth, --nth and --cassettes must be at least 1; --random, --pct and --dfs at least 0")
    problem = workers_error("--workers", workers)
    if problem:
        raise _fail(problem)
    for option, given in (("--workloads", workloads), ("--verbs", verbs)):
        if given and not [n for n in given.split(",") if n.strip()]:
            raise _fail(f"{option} {given!r} names nothing")
    if baseline is not None and not against:
        raise _fail("--baseline needs --against")
    if not 0 <= timeout < float("inf"):  # NaN too
        raise _fail(f"--timeout must be a finite number of seconds, at least 0 (got {timeout})")
    from ..scenario import engine

    engine.set_wall_limit(timeout)
    try:
        part = shards.parse(shard) if shard else None
        known = _baseline(baseline) if baseline is not None else None
        with guarded():  # what the implementation prints or does to stdout leaves the report whole
            implementation = _resolve_checked(impl, timeout)
            other = _resolve_checked(against, timeout) if against else None
        names = tuple(n.strip() for n in workloads.split(",") if n.strip())
        from .workloads import by_name

        chosen = by_name(list(names))  # an unknown workload is bad input
        lacking = [w for w in chosen if w.lacking(implementation)] if names else []
        if lacking:
            what = ", ".join(f"{w.name} (needs {', '.join(sorted(w.lacking(implementation)))})" for w in lacking)
            if len(lacking) == len(chosen):
                raise _fail(f"--workloads: no workload to run: {what}: {impl} does not declare the feature")
            echo(f"note: skipped {what}: {impl} does not declare the feature", err=True)
        actions = tuple(v.strip() for v in verbs.split(",") if v.strip()) or Config().verbs
        problem = sequences_error(len(actions), depth)
        if problem:
            raise _fail(problem)
        config = Config(workloads=names, depth=depth, nth=nth, verbs=actions, dfs=dfs_runs,
                               random=random_runs, pct=pct_runs, explore_all=explore_all, twins=not no_twins, seed=seed, cassettes=cassettes,
                               against=against or None)
        n = workers or (os.cpu_count() or 1)
        writable(out)
        shown, out = out, out.absolute()  # an implementation may change directory while it runs
        problem = clash_error((("--out", out / "report.json"), ("--write-baseline", write_baseline)),
                              (("the baseline (--baseline)", baseline),))
        if problem:
            raise _fail(problem)
        if write_baseline is not None:
            writable(write_baseline.parent, "--write-baseline")
            if write_baseline.is_dir():  # before the hunt's minutes, not after them
                raise _fail(f"cannot write {str(write_baseline)!r} (--write-baseline): it is a directory")
        with Interrupts() as stop, _progress() as tick, guarded(signalled=lambda: stop.requested):
            result = driver.hunt(implementation, impl, config, against=other, workers=n, shard=part, out=out,
                                 progress=tick, should_stop=lambda: stop.requested, first=first)
        rep = result.report
        text = _dumps(rep)
        write_report(out / "report.json", text)
        new = [d for d in rep["differences"] if known is None or d["signature"] not in known]
        if write_baseline is not None:
            write_report(write_baseline, json.dumps({"format": BASELINE_FORMAT, "differences": sorted(
                d["signature"] for d in rep["differences"])}, indent=2) + "\n")
        if part is None and not rep["findings"] and not rep["totals"]["windows"] and rep["stopped"] != "interrupted":
            # a gate whose options open no window checks nothing: never a silent pass
            raise _fail(f"no window to run: {', '.join(actions)} open{'s' if len(actions) == 1 else ''} no window in "
                        f"{', '.join(rep['planned'])} (a verb acts only at some points: docs/hunt.md, \"Windows\")")
    except (SpinError, WorkerSpun) as exc:  # a finding, not bad input
        echo(f"FAILED: {exc}")
        raise typer.Exit(1) from None
    except _user_errors() as exc:
        raise _fail(_one_line(exc)) from None
    except ValueError as exc:
        raise _fail(_one_line(exc)) from None
    if as_json:
        sys.stdout.write(text)
    else:
        print_report(rep, shown, impl, new if known is not None else [])
        echo(f"report: {shown / 'report.json'}")
    if rep["stopped"] == "interrupted":
        echo(stop.message(rep["totals"]["run"], f"of {rep['totals']['windows']} windows") +
                   f"; {len(rep['findings'])} finding(s) so far")
        raise typer.Exit(stop.exit_code)
    failed = bool(rep["findings"]) or (known is not None and bool(new))
    raise typer.Exit(1 if failed else 0)


def _dumps(rep: dict[str, Any]) -> str:
    from .report import dumps

    return dumps(rep)


PLAIN_EVERY = 30.0
"""Seconds between two progress lines when stderr is not a terminal (a CI log, a file)."""


class _progress:
    """A rich progress bar per phase on a terminal's stderr; elsewhere (a CI log, a file) a
    plain line as each phase starts and then every :data:`PLAIN_EVERY` seconds, so a long hunt
    shows it is alive."""

    def __enter__(self) -> Any:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        self.bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                            console=Console(stderr=True), transient=True, disable=not sys.stderr.isatty())
        self.bar.__enter__()
        self.tasks: dict[str, Any] = {}
        labels = {"plain": "windows (plain order)", "explore": "new traces explored", "cassettes": "race cassettes"}

        started = time.monotonic()
        said = [-PLAIN_EVERY]

        def tick(phase: str, done: int, total: int) -> None:
            first = phase not in self.tasks
            if first:
                self.tasks[phase] = self.bar.add_task(labels.get(phase, phase), total=total)
            self.bar.update(self.tasks[phase], completed=done, total=total)
            now = time.monotonic() - started
            if self.bar.disable and total and (first or now - said[0] >= PLAIN_EVERY):
                said[0] = now
                sys.stderr.write(f"hunt: {labels.get(phase, phase)}: {done}/{total} after {now:.0f} s\n")
                sys.stderr.flush()

        return tick

    def __exit__(self, *exc: Any) -> None:
        self.bar.__exit__(*exc)


@app.command("merge")
def merge(
    reports: list[Path] = typer.Argument(..., metavar="REPORT...", help="The report.json of every shard."),  # noqa: B008
    out: Path = typer.Option(Path("hunt-report"), "--out", metavar="DIR", help="Where the merged report.json goes."),  # noqa: B008
    as_json: bool = typer.Option(False, "--json", help="Print the merged JSON report on stdout."),
) -> None:
    """Join the reports of ``--shard 1/N`` .. ``N/N`` into what one machine reports."""
    from . import report

    problem = clash_error((("--out", out / "report.json"),), [(f"shard report {p}", p) for p in reports])
    if problem:
        raise _fail(problem)
    try:
        writable(out)
        merged = report.merge([(str(p), report.load(p)) for p in reports])
        text = report.dumps(merged)
        write_report(out / "report.json", text)
    except _user_errors() as exc:
        raise _fail(_one_line(exc)) from None
    missing = sorted(set(merged["planned"]) - {s["name"] for s in merged["workloads"]})
    if as_json:
        sys.stdout.write(text)
    else:
        print_report(merged, None, merged["impl"], [])
        echo(f"report: {out / 'report.json'}")
    if missing and not merged["stopped"]:  # why the exit is 2, on stderr like every error of the kit
        echo(f"error: incomplete: no report covers workload(s) {', '.join(missing)}", err=True)
    elif missing:
        echo(f"note: no report covers workload(s) {', '.join(missing)} (the hunt stopped)", err=True)
    if merged["findings"]:
        raise typer.Exit(1)
    raise typer.Exit(2 if not merged["complete"] and not merged["stopped"] else 0)


def register(root: typer.Typer) -> None:
    """Add ``hunt`` (and ``hunt merge``) to the CLI."""
    root.add_typer(app, name="hunt")
