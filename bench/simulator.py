"""Benchmark of the simulator runtime (issue 2).

Prints, in one run:

* ``schedules_per_s``: random-strategy schedules per second exploring a 3-task / 2-await
  lost-update program (locked, so every schedule completes), next to plain ``asyncio.run``
  runs per second of the same program;
* ``overhead_ratio``: wall time of the simulator (FIFO) over plain ``asyncio.run`` on a 10-task
  queue pipeline with timers (plain asyncio runs it with every delay scaled by 1e-7 so its
  timers stay real timers without a minute of waiting);
* ``virtual_hour_wall_s``: wall seconds for one virtual hour of 100 tasks each sleeping a
  minute 60 times (6,000 timers).

Medians over interleaved repetitions. ``--json`` prints exactly
``{"schedules_per_s": float, "overhead_ratio": float, "virtual_hour_wall_s": float}``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from collections.abc import Coroutine
from typing import Any

_BENCH = os.path.dirname(os.path.abspath(__file__))
_ROOT = os.path.dirname(_BENCH)

if __name__ == "simulator":
    # Another script in bench/ (so bench/ is first on its sys.path) ran `import simulator` and
    # found this file instead of the package. Load the package from the repository in our
    # place: when this module's import finishes, the import system hands out whatever
    # sys.modules["simulator"] then holds, so `import simulator` and `simulator.x` resolve to
    # the real package. (No sys.path surgery, no re-entrant import of our own name.)
    import importlib.util

    _spec = importlib.util.spec_from_file_location(
        "simulator",
        os.path.join(_ROOT, "simulator", "__init__.py"),
        submodule_search_locations=[os.path.join(_ROOT, "simulator")],
    )
    assert _spec is not None and _spec.loader is not None
    _package = importlib.util.module_from_spec(_spec)
    sys.modules["simulator"] = _package
    _spec.loader.exec_module(_package)
elif __name__ == "__main__":
    # Run as a script: bench/ is sys.path[0], where this very file would shadow the package.
    sys.path.insert(0, _ROOT)

import _programs  # noqa: E402  (bench/ is on sys.path: this file lives there)

import simulator  # noqa: E402  (after the path set-up above)
from simulator.strategies.random import RandomStrategy  # noqa: E402

_CLOCK = (time.perf_counter,)  # the real clock, kept out of freezegun's reach


async def race_main(tasks: int = 3, awaits: int = 2) -> int:
    shared = [0]
    lock = asyncio.Lock()

    async def worker() -> None:
        async with lock:
            v = shared[0]
            for _ in range(awaits):
                await asyncio.sleep(0)
            shared[0] = v + 1

    await asyncio.gather(*(worker() for _ in range(tasks)))
    return shared[0]


# The queue pipeline is the one bench/peers.py measures too (row 3): one definition for both.
def pipeline_main(scale: float = 1.0) -> Coroutine[Any, Any, int]:
    return _programs._pipeline_main(scale)


async def hour_main() -> None:
    async def sleeper() -> None:
        for _ in range(60):
            await asyncio.sleep(60)

    await asyncio.gather(*(sleeper() for _ in range(100)))


def _timed(fn: object, n: int) -> float:
    clock = _CLOCK[0]
    t0 = clock()
    for _ in range(n):
        fn()  # type: ignore[operator]
    return (clock() - t0) / n


def measure(repeats: int = 5, quick: bool = False) -> dict[str, float]:
    n_race = 300 if quick else 1000
    n_pipe = 5 if quick else 20
    strat = RandomStrategy()
    seed = [0]

    def sim_race() -> None:
        seed[0] += 1
        simulator.run(race_main, strategy=strat, seed=seed[0])

    def plain_race() -> None:
        asyncio.run(race_main())

    def sim_pipe() -> None:
        r = simulator.run(pipeline_main)
        assert r.ok, r.report()

    def plain_pipe() -> None:
        asyncio.run(pipeline_main(1e-7))

    # warm up (imports, freezegun installation)
    sim_race()
    plain_race()
    sim_pipe()
    plain_pipe()
    race_sim, race_plain, pipe_ratio, hour = [], [], [], []
    for _ in range(repeats):
        race_plain.append(_timed(plain_race, n_race))
        race_sim.append(_timed(sim_race, n_race))
        p = _timed(plain_pipe, n_pipe)
        s = _timed(sim_pipe, n_pipe)
        pipe_ratio.append(s / p)
        clock = _CLOCK[0]
        t0 = clock()
        r = simulator.run(hour_main)
        hour.append(clock() - t0)
        assert r.ok and r.virtual_time == 3600.0, r.report()
    return {
        "schedules_per_s": 1.0 / statistics.median(race_sim),
        "overhead_ratio": statistics.median(pipe_ratio),
        "virtual_hour_wall_s": statistics.median(hour),
        "asyncio_runs_per_s": 1.0 / statistics.median(race_plain),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="fewer iterations")
    args = ap.parse_args(argv)
    m = measure(args.repeats, args.quick)
    if args.json:
        print(json.dumps({k: float(m[k]) for k in
                          ("schedules_per_s", "overhead_ratio", "virtual_hour_wall_s")}))
        return 0
    print(f"Python {sys.version.split()[0]}")
    print(f"schedules/s (random, 3 tasks x 2 awaits, locked): {m['schedules_per_s']:,.0f}"
          f"   (plain asyncio.run: {m['asyncio_runs_per_s']:,.0f} runs/s, "
          f"{m['schedules_per_s'] / m['asyncio_runs_per_s']:.2f}x)")
    print(f"overhead ratio (fifo / plain asyncio, queue pipeline): {m['overhead_ratio']:.2f}")
    print(f"virtual hour (100 tasks x 60 one-minute sleeps) wall: "
          f"{m['virtual_hour_wall_s'] * 1000:.1f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
