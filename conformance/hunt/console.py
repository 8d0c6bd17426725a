"""What a hunt shows and writes: its report on a terminal (coverage table, findings,
differences) and the report file, written atomically. Used by ``loopkit hunt``, ``hunt merge``
and ``loopkit conformance --hunt``."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from ..files import atomic_write
from ..output import shown


def write_report(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically (its directory made if need be)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(str(path), text)


def print_report(rep: dict[str, Any], out: Path | None, impl: str, new_differences: list[dict[str, Any]]) -> None:
    """The coverage table, the findings and the differences, for a terminal."""
    from rich.console import Console
    from rich.table import Table

    console = Console(highlight=False, soft_wrap=True)
    table = Table(title=f"hunt of {shown(rep['impl'])}" + (f" (shard {rep['shard']})" if rep["shard"] else ""),
                  title_justify="left")
    for col in ("window kind", "enumerated", "run", "distinct traces"):
        table.add_column(col, justify="left" if col == "window kind" else "right")
    for kind, row in rep["coverage"].items():
        table.add_row(shown(kind), str(row["enumerated"]), str(row["run"]), str(row["distinct"]))
    t = rep["totals"]
    table.add_row("[bold]all[/]", str(t["windows"]), str(t["run"]), str(t["distinct"]))
    console.print(table)
    twins = t.get("twins", 0)
    console.print(f"{t['workloads']} workload(s); {t['explored']} window(s) explored, {t['schedules']} schedules"
                  + (f"; {twins} actor window(s) took the plain run of an earlier twin" if twins else ""))
    for f in rep["findings"]:
        console.print(f"[bold red]FOUND[/] {shown(f['signature'])} in {f['windows']} window(s) "
                      f"({shown(', '.join(f['workloads']))})")
        console.print(f"  {shown(f['message'])}")
        for ex in f["examples"]:
            line = f"  window: {ex['window']}"
            if ex.get("cassette") and out is not None:
                line += f"\n  replay: loopkit replay {out / ex['cassette']} --impl {shlex.quote(impl)} --diagram race.html"
            elif ex.get("unreplayable"):
                line += f"\n  no cassette: {ex['unreplayable']}"
            console.print(shown(line))
    if rep["differences"]:
        console.print(f"{len(rep['differences'])} kind(s) of difference from {shown(rep['config']['against'])} "
                      f"({len(new_differences)} not in the baseline):")
        for d in rep["differences"][:20]:
            mark = "new " if d in new_differences else ""
            console.print(shown(f"  {mark}{d['signature']}: {d['windows']} window(s), e.g. {d['first']}"))
    if rep["stopped"] == "interrupted":
        console.print("[yellow]interrupted[/]: the report covers what ran before the stop")
    elif rep["stopped"]:
        console.print(f"stopped at the {rep['stopped']} ({t['run']} of {t['windows']} windows run)")
    elif not rep["findings"]:
        console.print(f"ok: no oracle failed in {t['windows']} windows")
