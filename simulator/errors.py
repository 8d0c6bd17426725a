"""Errors raised by the simulator."""

from __future__ import annotations


class SimulationError(RuntimeError):
    """Code under simulation tried to escape it (real I/O, threads, executors, signals),
    or the simulator was misused (a run started inside a run)."""


class ScheduleError(ValueError):
    """A schedule cannot be used: not JSON, wrong format, or recorded for another scenario.

    ``str(err)`` is a single line meant to be shown to a user as is."""


class Divergence(SimulationError):
    """Strict replay found the program no longer matches the recorded schedule.

    ``str(err)`` reads ``diverged at choice k: expected X, found Y``."""

    def __init__(self, index: int, expected: str, found: str) -> None:
        self.index = index
        self.expected = expected
        self.found = found
        super().__init__(f"diverged at choice {index}: expected {expected}, found {found}")


class ExploreError(SimulationError):
    """A search could not go on: a worker process raised or died (the message names the seed)."""
