"""Schedules: which interleaving a suite run uses, and how a scenario is run under it.

A schedule is named by a string: ``fifo``, ``random-SEED`` or ``pct-SEED``. ``run_under`` runs
a zero-argument coroutine function on the simulator with the matching strategy (virtual time,
reproducible). The schedule source is pluggable (``set_backend``) so the suite can also run on
plain asyncio (FIFO only, real time) where the simulator is unavailable.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

Main = Callable[[], Coroutine[Any, Any, Any]]
Backend = Callable[[Main, str], Any]

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


def _strategy(kind: str, seed: int) -> Any:
    from simulator import strategies

    if kind == "fifo":
        return None
    if kind == "random":
        return strategies.RandomStrategy(seed=seed)
    return strategies.PCTStrategy(seed=seed)


def simulator_backend(main: Main, schedule: str) -> Any:
    """Run ``main`` on the simulator under ``schedule``; re-raise its error."""
    import simulator

    kind, seed = parse(schedule)
    result = simulator.run(main, strategy=_strategy(kind, seed), seed=seed)
    if result.outcome == "completed":
        return result.value
    if result.outcome == "failed" and result.error is not None:
        raise result.error
    raise ScheduleError(f"simulation under {schedule} ended {result.outcome}: {result.error or ''}".rstrip(": "))


def asyncio_backend(main: Main, schedule: str) -> Any:
    """Plain asyncio (real time); only FIFO is meaningful, other schedules run as FIFO."""
    parse(schedule)
    return asyncio.run(main())


def _default_backend() -> Backend:
    try:
        import simulator

        if hasattr(simulator, "run"):
            return simulator_backend
    except ImportError:
        pass
    return asyncio_backend


_backend: Backend | None = None


def set_backend(backend: Backend | None) -> None:
    """Replace the backend (``None`` restores the default: the simulator when present)."""
    global _backend
    _backend = backend


def run_under(main: Main, schedule: str = "fifo") -> Any:
    """Run ``main`` to completion under ``schedule``; return its value or raise its error."""
    backend = _backend or _default_backend()
    return backend(main, schedule)


def virtual_time() -> bool:
    """Whether runs use virtual time (so long timeouts cost nothing)."""
    return (_backend or _default_backend()) is simulator_backend
