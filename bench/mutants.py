"""Which schedule strategy first catches each mutant, and after how many examples.

For every mutant of the catalogue (and the known gaps), the property search
(``conformance.scenario.fuzz``) runs up to ``--examples`` generated scenarios under each
strategy: ``fifo`` (plain asyncio order), ``random`` and ``pct`` (seeded per example), and
``hypothesis`` (the schedule drawn by hypothesis along with the scenario). The first strategy to
catch a mutant is the one needing the fewest examples (ties: the order above). Deterministic:
hypothesis is derandomized and the strategies are seeded from the example.

    python bench/mutants.py                    # table
    python bench/mutants.py --json             # one JSON object
    python bench/mutants.py --examples 2000 --mutant w2-settle-unconditionally
    python bench/mutants.py --suite            # also: which schedules of the hand-written suite kill it

With ``--suite``, each mutant also goes through the conformance suite (fifo plus seeded random
and pct schedules for the race rules), and the report says under which schedule kinds its
failing tests failed: ``fifo`` when a test fails under plain asyncio order, else the first
``random-N`` / ``pct-N`` schedule (N + 1 schedules of that kind were needed).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
import warnings
from pathlib import Path
from typing import Any

# Run as a script, bench/ is sys.path[0], and bench/conformance.py would shadow the package.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]

from conformance import mutants  # noqa: E402
from conformance.scenario.fuzz import STRATEGIES, FuzzResult, fuzz  # noqa: E402


def suite_schedules(name: str) -> dict[str, Any]:
    """Which schedules of the hand-written suite kill mutant ``name``."""
    import re

    from conformance.selfcheck import check_mutant

    outcome = check_mutant(name)
    kinds: dict[str, int] = {}
    for test in outcome.tests:
        found = re.search(r"\b(fifo|random|pct)(?:-(\d+))?\b", test.rsplit("[", 1)[-1]) if "[" in test else None
        kind, index = (found.group(1), int(found.group(2) or 0) + 1) if found else ("fifo", 1)
        kinds[kind] = min(kinds.get(kind, index), index)
    first = "fifo" if "fifo" in kinds else min(kinds, key=lambda k: kinds[k]) if kinds else None
    return {"killed": outcome.killed, "first": first, "schedules": kinds, "wall_s": round(outcome.seconds, 2)}


def bench(names: list[str], examples: int, *, suite: bool = False) -> dict[str, Any]:
    """Hunt every mutant in ``names`` under every strategy (and through the suite)."""
    rows: list[dict[str, Any]] = []
    started = time.monotonic()
    for name in names:
        results: dict[str, FuzzResult] = {s: fuzz(mutants.get(name), s, max_examples=examples, impl_spec=f"mutant:{name}") for s in STRATEGIES}
        caught = [s for s in STRATEGIES if results[s].caught]
        first = min(caught, key=lambda s: (results[s].examples, STRATEGIES.index(s))) if caught else None
        mutant = mutants.MUTANTS.get(name) or mutants.GAPS[name]
        rows.append(
            {
                "name": name,
                "gap": name in mutants.GAPS,
                "interleaving": mutant.interleaving,
                "first": first,
                "first_examples": results[first].examples if first else None,
                "violation": results[first].violation if first else None,
                "strategies": {
                    s: {"caught": r.caught, "examples": r.examples, "wall_s": round(r.wall_s, 3)}
                    for s, r in results.items()
                },
            }
        )
        if suite and name in mutants.MUTANTS:
            rows[-1]["suite"] = suite_schedules(name)
    return {
        "examples_per_strategy": examples,
        "strategies": list(STRATEGIES),
        "mutants": rows,
        "caught": sum(r["first"] is not None for r in rows),
        "total": len(rows),
        "wall_s": round(time.monotonic() - started, 1),
    }


def print_table(report: dict[str, Any]) -> None:
    """The report as a rich table."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"mutants vs property search ({report['examples_per_strategy']} examples per strategy)")
    table.add_column("mutant", no_wrap=True)
    table.add_column("first", no_wrap=True)
    for strategy in report["strategies"]:
        table.add_column(strategy, justify="right")
    with_suite = any("suite" in row for row in report["mutants"])
    if with_suite:
        table.add_column("suite", no_wrap=True)
    table.add_column("first violation", overflow="fold")
    for row in report["mutants"]:
        cells = []
        for strategy in report["strategies"]:
            r = row["strategies"][strategy]
            cells.append(f"{r['examples']} ({r['wall_s']:.1f}s)" if r["caught"] else f"- ({r['wall_s']:.1f}s)")
        label = row["name"] + (" (gap)" if row["gap"] else "") + (" *" if row["interleaving"] else "")
        if with_suite:
            kill = row.get("suite")
            cells.append(
                "" if kill is None else ", ".join(f"{k}({n})" for k, n in sorted(kill["schedules"].items())) or "[red]alive[/]"
            )
        table.add_row(label, row["first"] or "[red]none[/]", *cells, (row["violation"] or "")[:90])
    # Piped output (no terminal) would wrap to 80 columns: the table is wide, keep it whole.
    console = Console(width=None if sys.stdout.isatty() else 220)
    console.print(table)
    console.print(
        f"caught {report['caught']}/{report['total']} in {report['wall_s']}s; "
        "cells: examples to the first catch (wall time of the hunt); * = bug needs an interleaving; "
        "suite: schedule kinds with a failing test (schedules of that kind needed)"
    )


def main(argv: list[str] | None = None) -> int:
    # Mutants fail turns on purpose; their contained-failure warnings are not the report.
    logging.getLogger("reference_loop").setLevel(logging.ERROR)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", type=int, default=500, help="examples per strategy (default 500)")
    parser.add_argument("--mutant", action="append", default=[], help="only this mutant (repeatable)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    parser.add_argument("--suite", action="store_true", help="also run the conformance suite against each mutant")
    args = parser.parse_args(argv)
    names = args.mutant or [*mutants.names(), *mutants.GAPS]
    unknown = [n for n in names if n not in mutants.MUTANTS and n not in mutants.GAPS]
    if unknown:
        parser.error(f"unknown mutant(s): {', '.join(unknown)}")
    warnings.simplefilter("ignore")  # mutants leave coroutines unawaited on purpose
    report = bench(names, args.examples, suite=args.suite)
    if args.json:
        json.dump(report, sys.stdout, indent=2, sort_keys=True)
        sys.stdout.write("\n")
    else:
        print_table(report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
