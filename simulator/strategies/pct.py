"""PCT: probabilistic concurrency testing (Burckhardt, Kothari, Musuvathi, Nagarakatte 2010).

Every task gets a random initial priority (all above ``depth``); at ``depth - 1`` change points,
chosen uniformly among the first ``horizon`` choice points, the task about to run has its
priority dropped below every initial one. At each choice point the option whose task has the
highest priority runs. Options are keyed by the task they step or wake (a timer that resolves
a task's sleep counts as that task's, so a high-priority task's timer fires early); options
with no task (plain callbacks) are keyed by label.

``horizon`` defaults to an adaptive estimate: the largest number of choice points seen in
earlier runs of this strategy object (16 before the first run). A bug of depth ``d`` (``d``
ordering constraints) is found with probability >= 1 / (n * k^(d-1)) per run for ``n`` tasks
and ``k`` choice points.
"""

from __future__ import annotations

import random as _random
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from simulator.strategies.base import Strategy

if TYPE_CHECKING:
    from simulator._runtime import SimLoop


class PCTStrategy(Strategy):
    name = "pct"

    def __init__(self, depth: int = 2, seed: int | None = None, horizon: int | None = None) -> None:
        if depth < 1:
            raise ValueError("depth must be >= 1")
        self.depth = depth
        self.seed = seed
        self.horizon = horizon
        self._k_est = 16
        self._rng = _random.Random(0)
        self._prio: dict[Any, float] = {}
        self._changes: dict[int, int] = {}
        self._j = 0

    def begin(self, loop: SimLoop, seed: int) -> None:
        self.loop = loop
        s = self.seed if self.seed is not None else seed
        self._rng.seed(s * 7_919 + 0xC0FFEE)
        self._prio = {}
        k = self.horizon or self._k_est
        n_changes = min(self.depth - 1, k)
        points = self._rng.sample(range(k), n_changes) if n_changes > 0 else []
        # change point i lowers the running task to priority (depth - 1 - i) < depth
        self._changes = {p: i for i, p in enumerate(sorted(points))}
        self._j = 0

    def choose_fn(self) -> Callable[[int], int] | None:
        return self.choose

    def choose(self, n: int) -> int:
        loop = self.loop
        assert loop is not None
        tasks = loop.option_tasks()
        labels: list[str] | None = None
        keys: list[Any] = []
        for i, t in enumerate(tasks):
            if t is None:
                if labels is None:
                    labels = loop.option_labels()
                keys.append(labels[i])
            else:
                keys.append(t)
        prio = self._prio
        rnd = self._rng.random
        for key in keys:
            if key not in prio:
                prio[key] = self.depth + rnd()
        best = max(range(n), key=lambda i: prio[keys[i]])
        if all(k is keys[0] for k in keys):
            return best
        j = self._j
        self._j = j + 1
        change = self._changes.get(j)
        if change is not None:
            prio[keys[best]] = float(self.depth - 1 - change) + rnd() * 0.5
            best = max(range(n), key=lambda i: prio[keys[i]])
        return best

    def end(self, outcome: str) -> None:
        if self._j > self._k_est:
            self._k_est = self._j
        self.loop = None

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "depth": self.depth, "seed": self.seed, "horizon": self.horizon}
