"""Seeded sources of time and identity for code under simulation.

Inside :func:`simulator.run` the code under test gets a :class:`SimSources` object from
:func:`current_sources` (``reference_loop.sources.default_sources()`` uses it): ``now_ms()`` is
:data:`EPOCH_MS` plus the virtual clock in milliseconds, ``uuid()`` and ``.random`` come from a
``random.Random`` seeded with the run's seed, and ``next_id(prefix)`` counts per prefix from 1.
Outside a simulation :func:`current_sources` returns ``None``.
"""

from __future__ import annotations

import random as _random
import uuid as _uuid
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from simulator._runtime import SimLoop

#: 2026-01-01T00:00:00Z in epoch milliseconds: the wall clock at virtual time 0.
EPOCH_MS = 1767225600000


class SimSources:
    """Per-run seeded sources (implements ``reference_loop.sources.Sources``)."""

    __slots__ = ("_counters", "_loop", "random", "seed")

    def __init__(self, seed: int, loop: SimLoop | None = None) -> None:
        self.seed = seed
        self.random = _random.Random(seed)
        self._counters: dict[str, int] = {}
        self._loop = loop

    def now_ms(self) -> int:
        """Epoch milliseconds: :data:`EPOCH_MS` + virtual time."""
        loop = self._loop
        return EPOCH_MS + (round(loop._now * 1000) if loop is not None else 0)

    def uuid(self) -> str:
        """A version-4 uuid drawn from the seeded random."""
        return str(_uuid.UUID(int=self.random.getrandbits(128), version=4))

    def next_id(self, prefix: str) -> str:
        """``{prefix}-{n}``, counting per prefix from 1 within the run."""
        n = self._counters.get(prefix, 0) + 1
        self._counters[prefix] = n
        return f"{prefix}-{n}"


def current_sources() -> SimSources | None:
    """The running simulation's sources, or ``None`` outside a simulation."""
    from simulator import _runtime

    loop = _runtime._CURRENT
    return loop._sources if loop is not None else None
