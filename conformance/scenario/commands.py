"""``loopkit rules | run | explore | replay``: the rule catalogue and race reproduction.

Exit codes: ``run`` 0 when every check holds and every element of the scenario fired (its
actors ran, its listeners and ``after:`` triggers fired, unless marked ``optional``), 1 otherwise; ``explore`` 1 when it found a
failing schedule (and wrote a race cassette), 0 when the budget ran out clean; ``replay`` 0 when
the checks hold, 1 when they fail, 2 when the schedule diverges. Bad input everywhere (a missing
or malformed file, an unknown rule id, a bad ``--impl``) is one line on stderr and exit 2.
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import Any

import typer

from ..files import clash_error, output_path_error
from ..impl import IMPL_HELP
from ..interrupts import echo
from ..limits import workers_error
from ..output import SELF_INTERRUPT, ImplementationInterrupt, guarded, printable


def _outputs(*paths: tuple[str, Path | None], make_parent: bool = False, reads: tuple[str, str] | None = None) -> None:
    """Each ``(option, path)`` given must be writable, none the same file as another or as the
    file the command reads (``reads``: what it is, its path), checked before the run (exit 2)."""
    for option, path in paths:
        problem = output_path_error(option, path, make_parent=make_parent) if path is not None else None
        if problem:
            raise _fail(problem)
    problem = clash_error(paths, (reads,) if reads is not None else ())
    if problem:
        raise _fail(problem)


def _absolute(path: Path | None) -> Path | None:
    """``path`` from the working directory the command started in: an implementation may
    change directory while it runs, and the output must still go where it was asked."""
    return None if path is None else path.absolute()


def _fail(message: str) -> typer.Exit:
    typer.echo(f"error: {printable(message)}", err=True)
    return typer.Exit(2)


def _resolve_checked(spec: str, timeout: float) -> Any:
    from conformance.preflight import resolve_checked

    return resolve_checked(spec, timeout)


def _user_errors() -> tuple[type[BaseException], ...]:
    from conformance.impl import ImplError
    from conformance.output import ImplementationInterrupt
    from conformance.preflight import PreflightError
    from simulator.errors import ExploreError, ScheduleError

    from .model import ScenarioError
    from .race import RaceCassetteError
    from .world import ScenarioSetupError

    return (ScenarioError, ImplError, PreflightError, ImplementationInterrupt, RaceCassetteError, ScenarioSetupError, ScheduleError, OSError, ExploreError)


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


TIMEOUT_HELP = ("Wall-clock seconds one run may take (0: no limit). Every wait of a run is virtual, so a run "
                "that takes seconds means the implementation never yields (a busy loop, or blocking code).")


def _timeout(seconds: float) -> None:
    """Set the wall-clock limit of every run of this command (engine.set_wall_limit)."""
    from . import engine

    if not 0 <= seconds < float("inf"):  # NaN too
        raise _fail(f"--timeout must be a finite number of seconds, at least 0 (got {seconds})")
    engine.set_wall_limit(seconds)


# --------------------------------------------------------------------------- rules


def rules(
    ids: list[str] = typer.Argument(None, metavar="[ID]...", help="Only these rule ids."),  # noqa: B008
    as_json: bool = typer.Option(False, "--json", help="Print the catalogue as JSON."),
) -> None:
    """List the rules of the agent-loop contract (id, tag, section, statement, tests)."""
    from conformance.catalogue import RULES, tests_for, unknown_ids

    wanted = list(ids or [])
    unknown = unknown_ids(wanted)
    if unknown:
        raise _fail(f"unknown rule id {unknown[0]!r} (see 'loopkit rules')")
    chosen = [r for r in RULES if not wanted or r.id in wanted]
    entries: list[dict[str, Any]] = [{
        "id": r.id, "tag": r.tag, "section": r.section, "statement": r.statement,
        "feature": r.feature, "required": r.required, "race": r.race, "tests": list(tests_for(r.id)),
    } for r in chosen]
    if as_json:
        echo(json.dumps({"rules": entries}, indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{len(entries)} rules", show_lines=False)
    for col in ("id", "tag", "section", "statement", "tests"):
        table.add_column(col, overflow="fold")
    for e in entries:
        statement = e["statement"] + (f" [optional: {e['feature']}]" if e["feature"] else "")
        table.add_row(e["id"], e["tag"], e["section"], statement, str(len(e["tests"])))
    Console().print(table)


# --------------------------------------------------------------------------- run


def run(
    scenario: str = typer.Argument(..., metavar="SCENARIO", help="A scenario file (.yaml) or MODULE:ATTR of a Python scenario."),
    impl: str = typer.Option("reference", "--impl", metavar="MODULE:ATTR", help=IMPL_HELP),
    strategy: str = typer.Option("fifo", "--strategy", help="fifo, random, pct, dfs or dpor (one schedule)."),
    seed: int = typer.Option(0, "--seed", help="The run's seed (sources and strategy)."),
    trace: Path | None = typer.Option(None, "--trace", metavar="FILE", help="Write the trace as JSON here."),  # noqa: B008
    diagram: Path | None = typer.Option(None, "--diagram", metavar="FILE", help="Write a sequence diagram: .html page or Mermaid text."),  # noqa: B008
    timeout: float = typer.Option(5.0, "--timeout", metavar="SECONDS", help=TIMEOUT_HELP),
) -> None:
    """Run a scenario once and print its timeline; exit 1 when a check fails."""
    from . import engine
    from .model import load

    _timeout(timeout)
    _outputs(("--trace", trace), ("--diagram", diagram), reads=("the scenario", scenario))
    trace, diagram = _absolute(trace), _absolute(diagram)
    if strategy not in engine.RUN_STRATEGIES:
        raise _fail(f"unknown strategy {strategy!r} (choose from {', '.join(engine.RUN_STRATEGIES)})")
    try:
        sc = load(scenario)
        with guarded():  # what the implementation prints or does to stdout leaves the timeline whole
            implementation = _resolve_checked(impl, timeout)
            horizon = engine.probe(sc, implementation)["choice_points"] if strategy == "pct" else None
            report = engine.run_one(sc, implementation, engine.make_strategy(strategy, pct_horizon=max(16, horizon or 0)),
                                    seed)
        _print_timeline(report)
        if trace is not None:
            trace.write_text(report.trace.to_json() + "\n", encoding="utf-8")
        if diagram is not None:
            from .diagram import write

            kind = write(report, diagram, impl=impl)
            echo(f"diagram ({kind}): {diagram}")
    except BrokenPipeError:
        raise  # stdout's reader left (`| head`): not bad input; typer ends the command quietly
    except _user_errors() as exc:
        raise _fail(_one_line(exc)) from None
    unfired = _unfired(report)
    if report.ok and unfired:
        t = report.trace
        echo(f"FAILED: scenario {t.scenario!r} ({t.strategy}, seed {t.seed}): never fired: {', '.join(unfired)} "
                   "(the checks hold, but the run did not do what the scenario describes; mark an element "
                   "'optional: true' if that is expected)")
    else:
        _print_verdict(report)
    raise typer.Exit(0 if report.ok and not unfired else 1)


def _unfired(report: Any) -> list[str]:
    """The scenario's elements (actors, listeners, ``after:`` triggers) that never acted, and are
    not marked optional: a check that holds vacuously must not read as a pass. The optional
    ones are printed as notes."""
    required: list[str] = []
    optional: list[str] = []
    for event in report.trace.timeline:
        if event.get("kind") == "untriggered":
            (optional if event.get("optional") else required).append(repr(str(event.get("name"))))
    if optional:
        echo(f"note: optional element(s) never fired: {', '.join(optional)}")
    return required


def _print_timeline(report: Any) -> None:
    from .rows import rows, seconds

    for r in rows(report.trace.timeline, report.deviations, report.violations):
        if r.style in ("deviation", "failure"):
            echo(f"{seconds(r.t_us):>10}  {'!!' if r.style == 'failure' else '~~'} {r.label}")
        elif r.dst is None:
            echo(f"{seconds(r.t_us):>10}  {r.src:<14} | {r.label}")
        else:
            arrow = "-->" if r.style == "reply" else "~~>" if r.style == "event" else "->"
            echo(f"{seconds(r.t_us):>10}  {r.src:<14} {arrow} {r.dst:<14} {r.label}")


def _print_verdict(report: Any) -> None:
    t = report.trace
    if report.ok:
        echo(f"ok: scenario {t.scenario!r} ({t.strategy}, seed {t.seed}): every check holds")
        return
    echo(f"FAILED: scenario {t.scenario!r} ({t.strategy}, seed {t.seed}): outcome {t.outcome}"
               + (f" ({t.error})" if t.error else _budget(report)))
    for f in t.failures:
        echo(f"  check {f['check']}: {f['message']}")


def _budget(report: Any) -> str:
    """Which of the scenario's own limits a run over budget used up: the scenario's, not the
    implementation's (a limit set too low reads as a loop that never ends otherwise)."""
    t, limits = report.trace, report.scenario.limits
    if t.outcome != "budget-exceeded":
        return ""
    if t.steps >= limits.max_steps:
        return f" (the scenario's limits.max_steps: {limits.max_steps:,} scheduler steps ran out)"
    if t.virtual_time_us >= limits.max_time * 1_000_000:
        return f" (the scenario's limits.max_time: {limits.max_time:g} virtual seconds ran out)"
    return ""


# --------------------------------------------------------------------------- explore


def explore(
    scenario: str = typer.Argument(..., metavar="SCENARIO", help="A scenario file (.yaml) or MODULE:ATTR."),
    impl: str = typer.Option("reference", "--impl", metavar="MODULE:ATTR", help=IMPL_HELP),
    strategy: str = typer.Option("random", "--strategy", help="random, pct, dfs, dpor or hypothesis."),
    budget: int = typer.Option(200, "--budget", help="Schedules (examples for hypothesis) to try at most."),
    seed: int = typer.Option(0, "--seed", help="First seed; run i uses seed + i."),
    workers: int = typer.Option(1, "--workers", help="Processes (disjoint seeds; random and pct)."),
    out: Path | None = typer.Option(None, "--out", metavar="FILE", help="Race cassette to write (default cassettes/races/NAME.yaml)."),  # noqa: B008
    timeout: float = typer.Option(5.0, "--timeout", metavar="SECONDS", help=TIMEOUT_HELP),
) -> None:
    """Explore schedules; on the first failure shrink it and write a race cassette (exit 1).

    Ctrl-C (or SIGTERM) stops the search at the next schedule: it prints how many ran and, if a
    failure was found by then, writes its cassette unshrunk; exit 130 (143 for SIGTERM)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from conformance.interrupts import Interrupts

    from . import engine, race
    from .model import load

    if strategy not in engine.STRATEGIES:
        raise _fail(f"unknown strategy {strategy!r} (choose from {', '.join(engine.STRATEGIES)})")
    if budget < 1:
        raise _fail("--budget must be at least 1")
    problem = workers_error("--workers", workers, least=1)
    if problem:
        raise _fail(problem)
    _timeout(timeout)
    _outputs(("--out", out), make_parent=True, reads=("the scenario", scenario))  # the cassette's directory is made, as saving it would
    out = _absolute(out)
    unit = "examples" if strategy == "hypothesis" else "schedules"
    with Interrupts() as stop:
        try:
            sc = load(scenario)
            target = out or Path("cassettes") / "races" / f"{_slug(sc.name)}.yaml"
            if out is None:  # the default path, known once the scenario's name is (--out was checked above)
                _outputs(("the race cassette (--out)", target), make_parent=True, reads=("the scenario", scenario))
            with guarded():
                implementation = _resolve_checked(impl, timeout)
            columns = (TextColumn(f"[bold]{sc.name}[/] {strategy}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
            with Progress(*columns, transient=True, disable=not sys.stderr.isatty()) as bar:
                task = bar.add_task("explore", total=budget)
                with guarded(signalled=lambda: stop.requested):
                    found = engine.explore(sc, implementation, strategy=strategy, budget=budget, seed=seed,
                                           workers=workers, progress=lambda n: bar.advance(task, n), should_stop=stop)
            if found.interrupted and not stop.requested:
                # the search stops at a KeyboardInterrupt, and no signal came: the implementation raised it
                raise ImplementationInterrupt(SELF_INTERRUPT)
            for note in found.notes:
                echo(f"note: {note}")
            rate = found.runs / found.wall_s if found.wall_s > 0 else 0.0
            echo(f"{found.runs} {unit} explored ({strategy}, seed {seed}, {found.workers} worker(s), "
                 f"{found.wall_s:.2f}s, {rate:,.0f}/s)" + (f"; exhausted ({found.classes} classes)" if found.exhausted and found.classes is not None
                    else "; the search tree is exhausted" if found.exhausted else ""))
            if found.guarantee is not None and not found.interrupted:
                g = found.guarantee
                echo(f"pct guarantee: a bug of depth <= {g['depth']} ({g['tasks']} tasks, {g['choice_points']} "
                     f"choice points) is hit with probability >= 1/{round(1 / g['per_run'])} per run, "
                     f">= {g['probability']:.1%} over {g['runs']} runs")
            if found.failure is None:
                if found.interrupted:
                    echo(f"{stop.message(found.runs, unit)}: no failing schedule so far for {sc.name!r} on {impl}")
                    raise typer.Exit(stop.exit_code)
                echo(f"ok: no failing schedule for {sc.name!r} on {impl} in {found.runs} {unit}")
                raise typer.Exit(0)
            echo(f"FOUND after {found.found_at} {unit} (seed {found.failing_seed}):")
            t = found.failure.trace
            if t.outcome != "completed" and t.error:  # a spin, a crash: say it before the checks it upset
                echo(f"  outcome {t.outcome}: {t.error}")
            for f in found.failure.trace.failures:
                echo(f"  check {f['check']}: {f['message']}")
            if stop.requested:  # keep the failure as found: shrinking is more runs
                original = found.failure.trace.schedule_object()
                shrunk = engine.Shrunk(original, found.failure, original.size(), original.size(), 0)
            else:
                shrunk = engine.shrink(sc, implementation, found.failure)
                echo(f"shrunk: {shrunk.before['deviations']} -> {shrunk.after['deviations']} deviation(s) from FIFO, "
                     f"{shrunk.before['length']} -> {shrunk.after['length']} recorded choices ({shrunk.runs} runs)")
            record = race.build(sc, impl, found, shrunk, impl_info=race.info_of(implementation))
            race.save(record, target)
            echo(f"race cassette: {target}   (replay: loopkit replay {target} --impl {shlex.quote(impl)})")
        except _user_errors() as exc:
            raise _fail(_one_line(exc)) from None
        except ValueError as exc:
            raise _fail(_one_line(exc)) from None
    if stop.requested:
        echo(stop.message(found.runs, unit) + " (the cassette holds the failure unshrunk)")
        raise typer.Exit(stop.exit_code)
    raise typer.Exit(1)


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "-" for c in name) or "race"


# --------------------------------------------------------------------------- replay


def replay(
    cassette_path: Path = typer.Argument(..., metavar="CASSETTE", help="A race cassette (cassettes/races/*.yaml)."),  # noqa: B008
    impl: str = typer.Option("reference", "--impl", metavar="MODULE:ATTR", help=IMPL_HELP),
    diagram: Path | None = typer.Option(None, "--diagram", metavar="FILE", help="Write a sequence diagram: .html page or Mermaid text."),  # noqa: B008
    timeout: float = typer.Option(5.0, "--timeout", metavar="SECONDS", help=TIMEOUT_HELP),
) -> None:
    """Re-run a race cassette's schedule: exit 0 checks hold, 1 they fail, 2 it diverges."""
    import simulator

    from . import race

    _timeout(timeout)
    _outputs(("--diagram", diagram), reads=("the race cassette", str(cassette_path)))
    diagram = _absolute(diagram)
    try:
        record = race.load(cassette_path)
        with guarded():
            implementation = _resolve_checked(impl, timeout)
        mismatch = race.runtime_warning(record, implementation)
        if mismatch:
            echo(f"warning: {cassette_path}: {mismatch}", err=True)
        try:
            with guarded():
                report = race.replay(record, implementation)
        except simulator.Divergence as exc:
            raise _fail(f"{cassette_path}: the schedule diverges on {impl}: {exc}") from None
        if diagram is not None:
            from .diagram import write

            kind = write(report, diagram, impl=impl)
            echo(f"diagram ({kind}): {diagram}")
    except BrokenPipeError:
        raise  # stdout's reader left (`| head`): not bad input; typer ends the command quietly
    except _user_errors() as exc:
        raise _fail(_one_line(exc)) from None
    sched = record.schedule
    echo(f"replayed {record.name!r} on {impl}: {sched.deviations} deviation(s) over {len(sched)} recorded "
               f"choices, then FIFO (recorded on {record.impl}, {record.found.get('strategy', '?')} seed "
               f"{record.found.get('failing_seed', '?')})")
    if record.impl and record.impl != impl:
        # A hunt's cassette replayed without --impl runs on the reference: "ok" then says nothing
        # of the implementation the race was found in.
        echo(f"note: this cassette was recorded on {record.impl}; it ran on {impl} "
                   f"(--impl {shlex.quote(record.impl)} replays it where it was found)", err=True)
    if report.ok:
        echo("ok: every check holds")
        raise typer.Exit(0)
    echo(f"FAILED: outcome {report.trace.outcome}" + (f" ({report.trace.error})" if report.trace.error else ""))
    for f in report.trace.failures:
        echo(f"  check {f['check']}: {f['message']}")
    raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    """Add ``rules``, ``run``, ``explore`` and ``replay`` to the CLI."""
    app.command("rules")(rules)
    app.command("run")(run)
    app.command("explore")(explore)
    app.command("replay")(replay)
