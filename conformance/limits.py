"""The conformance run's default limits, in a module of their own so the command line can show
them as defaults without importing pytest (``loopkit hunt --help`` should not pay for it)."""

from __future__ import annotations

import os

WALL_TIMEOUT = 5.0
"""Default wall-clock seconds per rule test (setup, call and teardown together)."""
MIN_TIMEOUT = 0.01
"""The shortest ``conformance --timeout`` (besides 0, no limit): a shorter alarm fires in pytest's
own bookkeeping around a test, before the test runs, and ends the whole run."""
MAX_HANGS = 3
"""Default number of rule tests that may exceed the wall-clock limit before the run stops."""
DEFAULT_WORKERS = 2
"""Worker processes by default (the CI machines have two cores)."""
MAX_SCHEDULES = 10_000
"""The most seeded schedules of each kind ``--schedules`` takes: each race test runs ``2N + 1``
schedules, and its wall-clock limit ends far fewer (a larger count only fills the memory)."""


def max_workers() -> int:
    """The most worker processes a command forks (``--workers``): four per CPU, at least eight.
    Beyond, the processes only contend for the CPUs, and a typo forks thousands of them."""
    return max(8, 4 * (os.cpu_count() or 1))


def workers_error(option: str, workers: int, *, least: int = 0) -> str | None:
    """Why ``workers`` is not a worker count (``None`` when it is)."""
    if workers < least:
        return f"{option} must be at least {least} (got {workers})"
    if workers > max_workers():
        return f"{option} {workers} is more processes than this machine can use (at most {max_workers()})"
    return None
