"""Injectable sources of time and identity (spec PY-3).

Nothing in the loop reads the real clock or real randomness directly. It asks a ``Sources``
object: ``now_ms()`` for event timestamps, ``uuid()`` for session ids, ``next_id(prefix)`` for
counters. ``default_sources()`` returns the simulator's seeded sources when a simulation is
running on the current thread, and real ones otherwise, so the same code is reproducible to the
byte under the simulator and ordinary in production.
"""

from __future__ import annotations

import itertools
import time
import uuid as _uuid
from typing import Protocol, runtime_checkable


@runtime_checkable
class Sources(Protocol):
    """Where the loop gets its time and ids."""

    def now_ms(self) -> int:
        """Epoch milliseconds."""
        ...

    def uuid(self) -> str:
        """A fresh uuid in canonical text form."""
        ...

    def next_id(self, prefix: str) -> str:
        """A fresh id ``{prefix}-{n}``, counting per prefix from 1."""
        ...


class RealSources:
    """Real clock, real uuid4: what a production loop uses outside the simulator."""

    def __init__(self) -> None:
        self._counters: dict[str, itertools.count[int]] = {}

    def now_ms(self) -> int:
        return int(time.time() * 1000)

    def uuid(self) -> str:
        return str(_uuid.uuid4())

    def next_id(self, prefix: str) -> str:
        counter = self._counters.setdefault(prefix, itertools.count(1))
        return f"{prefix}-{next(counter)}"


def default_sources() -> Sources:
    """The simulator's seeded sources inside a simulation, else real ones."""
    try:
        from simulator.sources import current_sources
    except ImportError:  # the simulator is optional for a production loop
        return RealSources()
    sources = current_sources()
    return sources if sources is not None else RealSources()
