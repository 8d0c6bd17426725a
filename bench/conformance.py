"""Wall time of the full conformance suite (issue 7's benchmark row).

Runs ``conformance.runner.run_suite`` in this process — exactly what ``loopkit conformance``
does — on the reference with the default number of race schedules and with more, and on the
example third-party loop, and prints one table (``--json``: one object).

    python bench/conformance.py [--schedules 10 50] [--json]
"""

from __future__ import annotations

import os
import sys

# bench/ holds a simulator.py of its own (the issue names it): import the real package.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.getcwd()) != _HERE]
sys.path.insert(0, os.path.dirname(_HERE))

import argparse  # noqa: E402
import json  # noqa: E402
import time  # noqa: E402
from typing import Any  # noqa: E402

from conformance.runner import run_suite  # noqa: E402

TINY = "examples.tiny_loop.adapter:implementation"


def measure(impl: str | None, schedules: int) -> dict[str, Any]:
    """One in-process run of the whole suite; wall seconds and what it ran."""
    start = time.perf_counter()
    run = run_suite(impl, schedule_count=schedules)
    wall = time.perf_counter() - start
    statuses = [test.outcome for test in run.results]
    return {
        "implementation": impl or "reference",
        "schedules": schedules,
        "tests": len(statuses),
        "passed": statuses.count("passed"),
        "failed": statuses.count("failed"),
        "wall_s": round(wall, 3),
        "tests_per_s": round(len(statuses) / wall, 1) if wall else None,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--schedules", type=int, nargs="+", default=[10, 50],
                        help="race-rule schedule counts to time on the reference (default: 10 50)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)

    rows = [measure(None, n) for n in args.schedules]
    rows.append(measure(TINY, args.schedules[0]))
    if args.json:
        print(json.dumps({"rows": rows}, sort_keys=True))
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table(title="conformance suite wall time (in-process, like `loopkit conformance`)")
    for column in ("implementation", "schedules", "tests", "passed", "failed", "wall_s", "tests_per_s"):
        table.add_column(column, justify="left" if column == "implementation" else "right")
    for row in rows:
        table.add_row(*(str(row[c]) for c in ("implementation", "schedules", "tests", "passed",
                                               "failed", "wall_s", "tests_per_s")))
    Console().print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
