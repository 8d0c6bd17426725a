"""Schedules of the rule tests: which interleaving a run uses.

A schedule is named by a string: ``fifo``, ``random-SEED`` or ``pct-SEED``; ``strategy`` gives
the simulator strategy it names. Race rules run under ``fifo`` plus N of each seeded kind.
"""

from __future__ import annotations

from typing import Any

DEFAULT_SCHEDULES = 10
"""Seeded random and pct schedules per race test by default (each)."""


class ScheduleError(Exception):
    """A run that did not complete (deadlock, budget exceeded) or a bad schedule name."""


def schedule_names(count: int) -> list[str]:
    """``fifo`` plus ``count`` seeded random and ``count`` seeded pct schedules."""
    names = ["fifo"]
    names += [f"random-{seed}" for seed in range(count)]
    names += [f"pct-{seed}" for seed in range(count)]
    return names


def parse(schedule: str) -> tuple[str, int]:
    """``"pct-3"`` -> ``("pct", 3)``; ``"fifo"`` -> ``("fifo", 0)``."""
    kind, _, seed = schedule.partition("-")
    if kind not in ("fifo", "random", "pct") or (kind != "fifo" and not seed.isdigit()):
        raise ScheduleError(f"unknown schedule {schedule!r} (expected fifo, random-N or pct-N)")
    return kind, int(seed or 0)


def strategy(kind: str, seed: int) -> Any:
    """The simulator strategy of a schedule kind (``None`` for FIFO)."""
    from simulator import strategies

    if kind == "fifo":
        return None
    if kind == "random":
        return strategies.RandomStrategy(seed=seed)
    return strategies.PCTStrategy(seed=seed)
