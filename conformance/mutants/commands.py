"""``loopkit selfcheck``: prove the suite's strength by running it against every mutant.

Exit codes: 0 the reference passes and every mutant is killed; 1 otherwise; 2 a usage error
(unknown mutant, unwritable report), one line on stderr; 130 interrupted (Ctrl-C: the mutants
checked so far are reported, the JSON says ``"complete": false``).
"""

from __future__ import annotations

import sys
import warnings

import typer

from conformance import catalogue, schedules
from conformance.output import printable


def _fail(message: str) -> typer.Exit:
    typer.echo(f"error: {printable(message)}", err=True)
    return typer.Exit(2)


def _list_catalogue() -> None:
    from rich.console import Console
    from rich.table import Table

    from . import GAPS, MUTANTS

    table = Table(title="loopkit mutants (--impl mutant:NAME)")
    for column in ("mutant", "section", "rules", "description"):
        table.add_column(column, overflow="fold")
    for mutant in MUTANTS.values():
        table.add_row(mutant.name, mutant.section, ", ".join(mutant.rules), mutant.description)
    for mutant in GAPS.values():
        table.add_row(f"{mutant.name} (gap)", mutant.section, ", ".join(mutant.rules), mutant.description)
    Console().print(table)


def selfcheck(
    json_path: str | None = typer.Option(None, "--json", metavar="FILE", help="Write the JSON report here (-: on stdout, the table then on stderr)."),
    mutant: list[str] = typer.Option(  # noqa: B008 - typer's idiom
        [], "--mutant", metavar="NAME", help="Only these mutants (repeatable); all by default."
    ),
    schedule_count: int = typer.Option(
        schedules.DEFAULT_SCHEDULES, "--schedules", metavar="N",
        help="Seeded random and pct schedules (each) the race rules run under.",
    ),
    rule: list[str] = typer.Option(  # noqa: B008 - typer's idiom
        [], "--rule", metavar="ID",
        help="Only this rule's tests (repeatable), for the reference and each mutant: a quick check of a mutant.",
    ),
    list_only: bool = typer.Option(False, "--list", help="List the mutant catalogue and exit."),
) -> None:
    """Run the conformance suite against every mutant and the reference: every mutant must die."""
    if list_only:
        _list_catalogue()
        raise typer.Exit(0)
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from conformance.files import output_path_error
    from conformance.interrupts import Interrupts, echo
    from conformance.output import STDOUT, to_stderr
    from conformance.runner import SuiteError
    from conformance.selfcheck import print_table, run_selfcheck, write_json

    from . import MUTANTS

    problem = output_path_error("--json", json_path, stdout=True) if json_path else None
    if problem:
        raise _fail(problem)  # before the minutes-long run, not after it
    unknown = [name for name in mutant if name not in MUTANTS]
    if unknown:
        raise _fail(f"unknown mutant(s): {', '.join(unknown)} (see `loopkit selfcheck --list`)")
    if schedule_count < 0:
        raise _fail("--schedules must be >= 0")
    problem = catalogue.unknown_ids_problem(rule)
    if problem:
        raise _fail(problem)  # before the progress bar, as an unknown mutant is
    console = Console()
    columns = (
        TextColumn("selfcheck"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        TextColumn("{task.description}"),
    )
    total = len(mutant or MUTANTS) + 1
    # A mutant that lets a listener's throw escape leaves the coroutines of the listeners called
    # before it unawaited, held by its traceback until this process exits: each would then warn
    # on the terminal. For the whole process: the last of them are collected at its exit.
    warnings.filterwarnings("ignore", message=r"coroutine .* was never awaited", category=RuntimeWarning)
    # Progress goes to stderr so the table and JSON-minded stdout stay clean.
    with to_stderr(json_path == STDOUT):  # --json -: stdout holds the report alone
        with Progress(*columns, console=Console(stderr=True), transient=True) as progress:
            task = progress.add_task("reference", total=total)

            def advance(label: str, done: int, _total: int) -> None:
                progress.update(task, completed=done, description=f"done: {label}")

            with Interrupts() as stop:
                try:
                    result = run_selfcheck(mutant or None, schedule_count=schedule_count, progress=advance,
                                           interrupts=stop, rules=rule)
                except SuiteError as exc:
                    raise _fail(str(exc)) from None
        print_table(result, console=console)
        if not result.complete:
            echo(stop.message(len(result.mutants), f"of {result.total} mutants")
                 + "; the report lists only those (\"complete\": false)")
    if json_path:
        try:
            write_json(result, json_path)
        except OSError as exc:
            raise _fail(f"cannot write {json_path!r}: {exc.strerror or exc}") from None
    sys.stdout.flush()
    if not result.complete:
        raise typer.Exit(stop.exit_code)
    raise typer.Exit(0 if result.ok else 1)


def register(app: typer.Typer) -> None:
    """Add ``loopkit selfcheck`` to the CLI."""
    app.command("selfcheck")(selfcheck)
