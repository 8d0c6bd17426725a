"""Random choice among the options at each choice point, seeded.

With probability ``switch_bias`` the option whose task ran least recently is taken (a task
that has not run yet counts as least recent; ties go to the FIFO-most option), otherwise one
option uniformly at random. Races live between a task's read and its write, so favouring
context switches raises the chance of hitting them per schedule; ``switch_bias=0`` is plain
uniform choice.
"""

from __future__ import annotations

import random as _random
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from simulator.strategies.base import Strategy

if TYPE_CHECKING:
    from simulator._runtime import SimLoop


class RandomStrategy(Strategy):
    """Seeded random choice (see the module docstring).

    ``seed=None`` (default) derives the strategy's stream from the run's seed, so
    ``run(main, strategy=RandomStrategy(), seed=s)`` is reproducible from ``s`` alone.
    The stream is distinct from the program's ``current_sources().random``.
    """

    name = "random"

    def __init__(self, seed: int | None = None, switch_bias: float = 0.5) -> None:
        if not 0.0 <= switch_bias <= 1.0:
            raise ValueError("switch_bias must be within [0, 1]")
        self.seed = seed
        self.switch_bias = switch_bias
        self._rng = _random.Random(0)
        self._last: dict[Any, int] = {}

    def begin(self, loop: SimLoop, seed: int) -> None:
        self.loop = loop
        s = self.seed if self.seed is not None else seed
        self._rng.seed(s * 1_000_003 + 0x5EED)
        if self.switch_bias > 0:
            self._last = loop.track_runs()

    def choose_fn(self) -> Callable[[int], int] | None:
        rnd = self._rng.random
        bias = self.switch_bias
        if bias <= 0:

            def uniform(n: int) -> int:
                return int(rnd() * n)

            return uniform
        loop = self.loop
        assert loop is not None
        last = self._last
        tasks_of = loop.option_tasks

        def biased(n: int) -> int:
            if rnd() >= bias:
                return int(rnd() * n)
            best = 0
            best_t = 1 << 62
            for i, t in enumerate(tasks_of()):
                when = last.get(t, -1) if t is not None else 1 << 61
                if when < best_t:
                    best, best_t = i, when
            return best

        return biased

    def end(self, outcome: str) -> None:
        self._last = {}
        self.loop = None

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "seed": self.seed, "switch_bias": self.switch_bias}
