"""Benchmark of race reproduction (issue 7): exploration speed and simulator overhead.

Prints, side by side:

* ``schedules_per_s_1``: random schedules per second exploring the window-1 scenario
  (``conformance/scenario/examples/window1.yaml``) on the reference, one process;
* ``schedules_per_s_2``: the same with ``--workers 2`` (forked processes, disjoint seeds);
* ``plain_asyncio_ms`` / ``simulator_fifo_ms`` / ``scenario_ms``: wall milliseconds of one run
  of the window-1 workload (send A, when_idle, cancel, send B, the model answers B) on plain
  ``asyncio.run``, on ``simulator.run`` (FIFO), and as the full scenario (world, observation,
  checks); ``overhead_ratio`` = simulator / plain asyncio and ``scenario_ratio`` = scenario /
  plain asyncio. Medians over interleaved repetitions.

``python bench/races.py [--budget N] [--json]``; ``--json`` prints one object with those keys.
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
import statistics  # noqa: E402
import time  # noqa: E402
from typing import Any  # noqa: E402

import simulator  # noqa: E402
from conformance.fakes import FakeModel, respond  # noqa: E402
from conformance.impl import resolve  # noqa: E402
from conformance.scenario import engine, load  # noqa: E402

WINDOW1 = os.path.join(os.path.dirname(_HERE), "conformance", "scenario", "examples", "window1.yaml")
_CLOCK = time.perf_counter


async def window1_workload() -> None:
    """The window-1 operations on the reference, without the scenario machinery."""
    from reference_loop import AgentLoopService

    service = AgentLoopService()
    service.register_model("fake", FakeModel([respond.text("first"), respond.text("second")], name="fake"))
    agent = service.create("a", {"model": "fake"})
    agent.send("A")
    waiter = agent.when_idle()
    await asyncio.sleep(0)
    agent.cancel("replaced")
    agent.send("B")
    await waiter
    await agent.when_idle()
    await service.close()


def _median_ms(fn: Any, reps: int) -> float:
    times = []
    for _ in range(reps):
        t0 = _CLOCK()
        fn()
        times.append((_CLOCK() - t0) * 1000)
    return statistics.median(times)


def measure(budget: int = 1000, reps: int = 30) -> dict[str, float]:
    """Run the benchmark (see module docstring)."""
    sc = load(WINDOW1)
    ref = resolve(None)
    rates = {}
    for workers in (1, 2):
        found = engine.explore(sc, ref, strategy="random", budget=budget, seed=0, workers=workers)
        assert found.failure is None, "the reference must pass window 1"
        rates[workers] = found.runs / found.wall_s
    plain, simu, scen = [], [], []
    for _ in range(3):  # interleaved, so a noisy neighbour hits all three alike
        plain.append(_median_ms(lambda: asyncio.run(window1_workload()), reps))
        simu.append(_median_ms(lambda: simulator.run(window1_workload), reps))
        scen.append(_median_ms(lambda: engine.run_one(sc, ref), reps))
    p, s, c = statistics.median(plain), statistics.median(simu), statistics.median(scen)
    return {
        "schedules_per_s_1": round(rates[1], 1),
        "schedules_per_s_2": round(rates[2], 1),
        "plain_asyncio_ms": round(p, 3),
        "simulator_fifo_ms": round(s, 3),
        "scenario_ms": round(c, 3),
        "overhead_ratio": round(s / p, 2),
        "scenario_ratio": round(c / p, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=int, default=1000, help="schedules per exploration (default 1000)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    figures = measure(args.budget)
    if args.json:
        print(json.dumps(figures))
        return
    rows = [
        ("window-1 schedules/s, 1 process", f"{figures['schedules_per_s_1']:,.0f}"),
        ("window-1 schedules/s, --workers 2", f"{figures['schedules_per_s_2']:,.0f}"),
        ("one run, plain asyncio", f"{figures['plain_asyncio_ms']:.2f} ms"),
        ("one run, simulator (FIFO)", f"{figures['simulator_fifo_ms']:.2f} ms  ({figures['overhead_ratio']:.2f}x)"),
        ("one run, full scenario + checks", f"{figures['scenario_ms']:.2f} ms  ({figures['scenario_ratio']:.2f}x)"),
    ]
    width = max(len(r[0]) for r in rows)
    for name, value in rows:
        print(f"{name:<{width}}  {value}")


if __name__ == "__main__":
    main()
