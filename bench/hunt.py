"""Benchmark of window exploration (issue 11): ``loopkit hunt``'s speed and reach.

Prints:

* ``windows_per_s``: plain-order windows per second on one process (the reply workload), and
  ``window_vs_asyncio``: the cost of one such window (world, observation, oracles) as a ratio
  to one plain ``asyncio.run`` of the same workload without any of it, measured in the same run;
* ``default_hunt_s``: the wall time of the default hunt of the reference on ``--workers``
  processes (the issue's bound: 60 s on 2 cores), with its totals, and whether it found nothing;
* per mutant (``--mutants``, default the whole catalogue): the wall time to the hunt's first finding
  (``first=True``), the window and the failure signature, or "not found".

``python bench/hunt.py [--workers 2] [--mutants all|none|A,B] [--skip-default] [--json]``
"""

from __future__ import annotations

import os
import sys

# bench/ holds a simulator.py of its own: make sure the package is the one imported.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.getcwd()) != _HERE]
sys.path.insert(0, os.path.dirname(_HERE))

import argparse  # noqa: E402
import asyncio  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from typing import Any  # noqa: E402

from conformance import mutants  # noqa: E402
from conformance.fakes import FakeModel, respond  # noqa: E402
from conformance.hunt import driver, search  # noqa: E402
from conformance.hunt.workloads import by_name  # noqa: E402
from conformance.impl import resolve  # noqa: E402


async def _reply_workload() -> None:
    """The reply workload on the reference, without the scenario machinery."""
    from reference_loop import AgentLoopService

    service = AgentLoopService()
    service.register_model("fake", FakeModel([respond.text("the reply")], default=respond.text("ok"), name="fake"))
    agent = service.create("a", {"model": "fake"})
    agent.send("A")
    agent.send("W1")  # what a window adds
    await agent.when_idle()
    await service.close()


def window_rate(reps: int = 3) -> dict[str, float]:
    """Plain-order windows per second, and one window's cost against plain asyncio."""
    ref = resolve(None)
    wp = search.plan(by_name(["reply"]), ref, search.Config())[0]
    indices = list(range(0, len(wp.windows), 5))
    rates, ratios = [], []
    for _ in range(reps):  # interleaved, so a noisy neighbour hits both alike
        t0 = time.perf_counter()
        for i in indices:
            search.plain(wp, i, i + 1, ref)
        per_window = (time.perf_counter() - t0) / len(indices)
        t0 = time.perf_counter()
        for _ in range(200):
            asyncio.run(_reply_workload())
        plain = (time.perf_counter() - t0) / 200
        rates.append(1.0 / per_window)
        ratios.append(per_window / plain)
    return {"windows_per_s": round(max(rates), 1), "window_vs_asyncio": round(min(ratios), 2)}


def default_hunt(workers: int) -> dict[str, Any]:
    """The default hunt of the reference: wall seconds and totals."""
    t0 = time.perf_counter()
    result = driver.hunt(resolve(None), "reference", search.Config(), workers=workers)
    wall = time.perf_counter() - t0
    totals = result.report["totals"]
    return {"default_hunt_s": round(wall, 1), "workers": workers, "clean": result.ok,
            "findings": [f["signature"] for f in result.report["findings"]], **totals}


def first_findings(names: list[str], workers: int) -> list[dict[str, Any]]:
    """Per mutant: seconds to the hunt's first finding, and what it found."""
    rows = []
    for name in names:
        t0 = time.perf_counter()
        result = driver.hunt(mutants.get(name), f"mutant:{name}", search.Config(), workers=workers, first=True)
        wall = time.perf_counter() - t0
        found = result.report["findings"]
        rows.append({"mutant": name, "seconds": round(wall, 1), "found": bool(found),
                     "window": found[0]["first"] if found else None,
                     "signature": found[0]["signature"] if found else None,
                     "windows_run": result.report["totals"]["run"]})
        print(f"  {name}: " + (f"{wall:.1f} s" if found else "not found")
              + (f"  {found[0]['signature']}  ({found[0]['first']})" if found else ""), file=sys.stderr)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2, help="processes (default 2)")
    parser.add_argument("--mutants", default="all", help="all, none, or a comma list of mutant names")
    parser.add_argument("--skip-default", action="store_true", help="skip the default hunt of the reference")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    logging.getLogger().addHandler(logging.NullHandler())
    # window_rate runs windows directly, outside driver.hunt's filter: a window that cancels a
    # driver leaves coroutines nothing awaits, and their warnings are no figure of the bench
    warnings.filterwarnings("ignore", message=r"coroutine .* was never awaited", category=RuntimeWarning)
    figures: dict[str, Any] = window_rate()
    if not args.skip_default:
        figures.update(default_hunt(args.workers))
    names = mutants.names() if args.mutants == "all" else [] if args.mutants == "none" else args.mutants.split(",")
    rows = first_findings(names, args.workers) if names else []
    if rows:
        found = [r["seconds"] for r in rows if r["found"]]
        figures["mutants_found"] = f"{len(found)}/{len(rows)}"
        figures["first_finding_median_s"] = round(statistics.median(found), 1) if found else None
        figures["first_finding_max_s"] = max(found) if found else None
    if args.json:
        print(json.dumps({**figures, "mutants": rows}))
        return
    lines = [
        ("plain-order windows/s, 1 process", f"{figures['windows_per_s']:,.0f}"),
        ("one window vs plain asyncio (same workload)", f"{figures['window_vs_asyncio']:.2f}x"),
    ]
    if "default_hunt_s" in figures:
        lines.append((f"default hunt of the reference, {args.workers} workers",
                      f"{figures['default_hunt_s']:.1f} s ({figures['windows']} windows, {figures['schedules']} "
                      f"schedules, {'nothing found' if figures['clean'] else 'FOUND ' + ', '.join(figures['findings'])})"))
    if rows:
        lines.append(("mutants found by the hunt alone", figures["mutants_found"]))
        lines.append(("time to first finding, median / max",
                      f"{figures['first_finding_median_s']} s / {figures['first_finding_max_s']} s"))
    width = max(len(n) for n, _ in lines)
    for n, value in lines:
        print(f"{n:<{width}}  {value}")
    for r in rows:
        print(f"  {r['mutant']:<32} " + (f"{r['seconds']:>6.1f} s  {r['signature']}  ({r['window']})" if r["found"]
                                          else "   not found"))


if __name__ == "__main__":
    main()
