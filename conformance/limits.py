"""The conformance run's default limits, in a module of their own so the command line can show
them as defaults without importing pytest (``loopkit hunt --help`` should not pay for it)."""

from __future__ import annotations

WALL_TIMEOUT = 5.0
"""Default wall-clock seconds per rule test (setup, call and teardown together)."""
MAX_HANGS = 3
"""Default number of rule tests that may exceed the wall-clock limit before the run stops."""
DEFAULT_WORKERS = 2
"""Worker processes by default (the CI machines have two cores)."""
