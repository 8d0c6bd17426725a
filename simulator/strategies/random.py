"""Random choice among the options at each choice point, seeded.

With probability ``switch_bias`` the *favoured* option is taken, otherwise one option
uniformly at random (``switch_bias=0`` is plain uniform choice). The favoured option is, in
this order of preference:

1. a task's first step (a task that has not run yet);
2. the option whose task ran least recently, among everything but wake-ups (a task step, a
   timer fired early, a callback concerning a task);
3. a task's wake-up from a future another callback resolved (``Task.__wakeup``: an
   ``Event.set()``, a queue put, a future's result), least recent first;
4. callbacks that concern no task.

Ties go to the FIFO-most option. Why: races live between a task's read and its write, so
context switches find them (2); a task woken by another's action is the one asyncio runs
soonest, as if notifications had no latency, and the races of agent loops (a listener acting
between a wake-up and the state flip it leads to) need the woken task to run *later* than the
work already under way (3). The ordering coincides with plain least-recent-first on programs
without wake-ups (the staggered lost updates), so their hit rates are unchanged by it.
"""

from __future__ import annotations

import asyncio
import random as _random
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from simulator._runtime import handle_task
from simulator.strategies.base import Strategy

if TYPE_CHECKING:
    from simulator._runtime import SimLoop


class RandomStrategy(Strategy):
    """Seeded random choice (see the module docstring).

    ``switch_bias`` (default 0.6; it was 0.5 with plain least-recent-first before the
    wake-up rule) is the probability of the favoured option.
    ``seed=None`` (default) derives the strategy's stream from the run's seed, so
    ``run(main, strategy=RandomStrategy(), seed=s)`` is reproducible from ``s`` alone.
    The stream is distinct from the program's ``current_sources().random``.
    """

    name = "random"

    def __init__(self, seed: int | None = None, switch_bias: float = 0.6) -> None:
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
        handles_of = loop.option_handles
        task_of = handle_task
        task_type = asyncio.Task

        def biased(n: int) -> int:
            if rnd() >= bias:
                return int(rnd() * n)
            best = 0
            best_key = (4, 0)
            for i, h in enumerate(handles_of()):
                t = task_of(h)
                if t is None:
                    key = (3, 0)
                else:
                    when = last.get(t, -1)
                    owner = getattr(h._callback, "__self__", None)
                    if when < 0:
                        key = (0, 0)
                    elif isinstance(owner, task_type) and h._args:
                        key = (2, when)  # Task.__wakeup(future)
                    else:
                        key = (1, when)
                if key < best_key:
                    best, best_key = i, key
            return best

        return biased

    def end(self, outcome: str) -> None:
        self._last = {}
        self.loop = None

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "seed": self.seed, "switch_bias": self.switch_bias}
