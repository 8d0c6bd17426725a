"""What the wire costs (issue 12): the kit's JavaScript loop over the wire protocol against the
in-process reference, on the same scenarios, in one run.

Prints:

* per scenario (``conformance/scenario/examples/*.yaml``): the median wall milliseconds of one
  FIFO run on the reference and over the wire, and their ratio; the messages one wire run
  exchanges, how many of them were round trips (calls and the child's requests) and how many
  observer notifications travelled batched instead of as round trips;
* ``round_trip_us``: one bare call (``get`` of an unknown agent) to the child and back;
* ``explore``: random schedules per second on the window-2 scenario, reference and wire;
* ``suite``: the whole conformance suite (``run_suite``, like ``loopkit conformance``) on both,
  wall seconds and the ratio (goal: under 30 s over the wire on 2 cores).

    python bench/wire.py [--reps 30] [--budget 200] [--no-suite] [--json]

Needs ``node`` on PATH.
"""

from __future__ import annotations

import os
import sys

# bench/ holds a simulator.py of its own: make sure the package is the one imported.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.getcwd()) != _HERE]
sys.path.insert(0, os.path.dirname(_HERE))

import argparse  # noqa: E402
import glob  # noqa: E402
import json  # noqa: E402
import shlex  # noqa: E402
import shutil  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from typing import Any  # noqa: E402

import simulator  # noqa: E402
from conformance.impl import resolve  # noqa: E402
from conformance.runner import run_suite  # noqa: E402
from conformance.scenario import engine, load  # noqa: E402
from conformance.wire import WireImplementation  # noqa: E402

ROOT = os.path.dirname(_HERE)
BRIDGE = os.path.join(ROOT, "examples", "js_loop", "bridge.mjs")
WIRE = shlex.join(["node", BRIDGE])
SCENARIOS = sorted(glob.glob(os.path.join(ROOT, "conformance", "scenario", "examples", "*.yaml")))
_CLOCK = time.perf_counter


def _ms(fn: Any) -> float:
    start = _CLOCK()
    fn()
    return (_CLOCK() - start) * 1000


def per_scenario(reps: int, wire: WireImplementation) -> list[dict[str, Any]]:
    reference = resolve(None)
    rows = []
    for path in SCENARIOS:
        sc = load(path)
        engine.run_one(sc, reference)
        engine.run_one(sc, wire)  # warm both
        ref_ms: list[float] = []
        wire_ms: list[float] = []
        for _ in range(reps):  # interleaved, so load on the machine hits both alike
            ref_ms.append(_ms(lambda sc=sc: engine.run_one(sc, reference)))
            wire_ms.append(_ms(lambda sc=sc: engine.run_one(sc, wire)))
        lines = wire.transcript()
        sent = [line for line in lines if line.startswith(">")]
        got = [line for line in lines if line.startswith("<")]
        calls = sum('"type":"call"' in line for line in sent)
        requests = sum('"type":"request"' in line for line in got)
        rows.append({
            "scenario": os.path.basename(path),
            "reference_ms": round(statistics.median(ref_ms), 3),
            "wire_ms": round(statistics.median(wire_ms), 3),
            "ratio": round(statistics.median(wire_ms) / statistics.median(ref_ms), 2),
            "messages": len(lines),
            "round_trips": calls + requests,
            "batched_observers": sum('"ev":"notify"' in line for line in got),
        })
    return rows


def round_trip_us(wire: WireImplementation, n: int = 2000) -> float:
    out: list[float] = []

    def real() -> float:  # inside a simulation the perf_counter family reads virtual time
        return time.clock_gettime(time.CLOCK_MONOTONIC)

    async def main() -> None:
        service = wire.create_service()
        start = real()
        for _ in range(n):
            service.get("nobody")
        out.append((real() - start) / n * 1e6)

    simulator.run(main)
    return round(out[0], 1)


def explore_rate(budget: int, wire: WireImplementation) -> dict[str, Any]:
    sc = load(os.path.join(ROOT, "conformance", "scenario", "examples", "window2.yaml"))
    rates = {}
    for label, impl in (("reference", resolve(None)), ("wire", wire)):
        found = engine.explore(sc, impl, strategy="random", budget=budget)
        rates[label] = round(found.runs / found.wall_s, 1)
    rates["ratio"] = round(rates["reference"] / rates["wire"], 2)
    return rates


def suite() -> dict[str, Any]:
    out: dict[str, Any] = {}
    for label, spec in (("reference", None), ("wire", f"wire:{WIRE}")):
        start = _CLOCK()
        run = run_suite(spec)
        out[f"{label}_s"] = round(_CLOCK() - start, 2)
        out[f"{label}_failed"] = sum(r.outcome == "failed" for r in run.results)
        out[f"{label}_tests"] = len(run.results)
    out["ratio"] = round(out["wire_s"] / out["reference_s"], 2)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=30, help="runs per scenario and implementation (default 30)")
    parser.add_argument("--budget", type=int, default=200, help="schedules explored per implementation (default 200)")
    parser.add_argument("--no-suite", action="store_true", help="skip the whole-suite row")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    if shutil.which("node") is None:
        print("bench/wire.py: node is not on PATH", file=sys.stderr)
        return 2
    wire = WireImplementation(WIRE, transcript=True)
    result: dict[str, Any] = {
        "node": wire.runtime_version,
        "cpus": os.cpu_count(),
        "scenarios": per_scenario(args.reps, wire),
        "round_trip_us": round_trip_us(wire),
        "explore": explore_rate(args.budget, wire),
    }
    wire.record_transcript = False
    if not args.no_suite:
        result["suite"] = suite()
    if args.json:
        print(json.dumps(result, sort_keys=True))
        return 0
    from rich.console import Console
    from rich.table import Table

    console = Console()
    table = Table(title=f"one FIFO run, median of {args.reps} (node {result['node']}, {result['cpus']} cpus)")
    columns = ("scenario", "reference_ms", "wire_ms", "ratio", "messages", "round_trips", "batched_observers")
    for column in columns:
        table.add_column(column, justify="left" if column == "scenario" else "right")
    for row in result["scenarios"]:
        table.add_row(*(str(row[c]) for c in columns))
    console.print(table)
    console.print(f"one bare round trip: {result['round_trip_us']} us")
    e = result["explore"]
    console.print(f"explore window2 (random, {args.budget}): reference {e['reference']}/s, wire {e['wire']}/s "
                  f"(reference / wire = {e['ratio']})")
    if "suite" in result:
        s = result["suite"]
        console.print(f"whole suite: reference {s['reference_s']} s ({s['reference_tests']} tests, "
                      f"{s['reference_failed']} failed), wire {s['wire_s']} s ({s['wire_tests']} tests, "
                      f"{s['wire_failed']} failed), wire / reference = {s['ratio']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
