"""Replay a recorded schedule.

Two independent settings: how each recorded choice is matched while the tape lasts, and what
happens when it runs out (``then``).

Matching. Strict (default): at choice ``k`` the recorded option index must exist and run the
recorded label, else :class:`~simulator.errors.Divergence` ("diverged at choice k: expected X,
found Y"); a run that ends before the tape does diverges too. Lenient (``strict=False``): match
each recorded choice by label (the recorded index if it still carries that label, else the first
option with that label, else the recorded index clamped to the options).

After the tape (``then``):

* ``"diverge"``: a further choice point is a ``Divergence`` (the run has more choice points
  than recorded). The default when strict.
* ``"fifo"``: go on in plain asyncio's order.
* ``"seed"``: go on under the recorded seed (a random strategy seeded with the schedule's seed).

Lenient replay defaults to ``"seed"`` when the schedule was recorded by a seeded strategy and to
``"fifo"`` otherwise. ``strict=True, then="fifo"`` is "strict, then FIFO": the recorded choices
must fit exactly, and once they are used up the run may differ freely (how a shrunk race tape
is replayed: a fixed implementation takes another path only after the race was set up).

A choice recorded with an empty label means "FIFO here" (used by shrinking).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from simulator.errors import Divergence
from simulator.schedule import Schedule
from simulator.strategies.base import Strategy
from simulator.strategies.random import RandomStrategy

if TYPE_CHECKING:
    from simulator._runtime import SimLoop

#: what a replay does when the tape runs out
THEN = ("diverge", "fifo", "seed")

#: strategies whose schedules carry no seed-driven continuation (replayed FIFO after the tape)
_UNSEEDED = ("fifo", "replay", "dfs", "dpor", "hypothesis")


class ReplayStrategy(Strategy):
    """Replays ``schedule`` (see the module docstring for ``strict`` and ``then``).

    ``matched`` / ``mismatched`` count, in lenient mode, the recorded choices found at their
    recorded index / found elsewhere or not at all.
    """

    name = "replay"

    def __init__(self, schedule: Schedule, *, strict: bool = True, then: str | None = None) -> None:
        self.schedule = schedule
        self.strict = strict
        if then is None:
            if strict:
                then = "diverge"
            else:
                then = "fifo" if schedule.strategy in _UNSEEDED else "seed"
        if then not in THEN:
            raise ValueError(f"then must be one of {', '.join(repr(t) for t in THEN)}, not {then!r}")
        self.then = then
        self._k = 0
        self._fallback: Callable[[int], int] | None = None
        self.matched = 0
        self.mismatched = 0

    def begin(self, loop: SimLoop, seed: int) -> None:
        self.loop = loop
        if self.schedule.strategy == "dpor":
            loop.unbounded_spins()  # recorded by the traced driver, which has none
        self._k = 0
        self.matched = self.mismatched = 0
        self._fallback = None
        if self.then == "seed":
            rs = RandomStrategy(self.schedule.seed)
            rs.begin(loop, self.schedule.seed)
            self._fallback = rs.choose_fn()

    def choose_fn(self) -> Callable[[int], int] | None:
        if self.schedule.strategy == "fifo" and not self.schedule.choices:
            return None  # a FIFO run records no choices: replay it as FIFO
        return self.choose

    def choose(self, n: int) -> int:
        loop = self.loop
        assert loop is not None
        k = self._k
        self._k = k + 1
        tape = self.schedule.choices
        if k >= len(tape):
            if self.then == "diverge":
                raise Divergence(k, "end of schedule", f"a choice among {loop.option_labels()}")
            return self._fallback(n) if self._fallback is not None else 0
        c = tape[k]
        if not c.label:
            return min(c.pick, n - 1)
        labels = loop.option_labels()
        if self.strict:
            if c.pick >= n:
                raise Divergence(k, f"{c.label} (option {c.pick} of {c.of})",
                                 f"{n} options {labels}")
            if labels[c.pick] != c.label:
                raise Divergence(k, c.label, labels[c.pick])
            return c.pick
        if c.pick < n and labels[c.pick] == c.label:
            self.matched += 1
            return c.pick
        self.mismatched += 1
        try:
            return labels.index(c.label)
        except ValueError:
            return min(c.pick, n - 1)

    def end(self, outcome: str) -> None:
        k = self._k
        self.loop = None
        if self.strict and k < len(self.schedule.choices):
            raise Divergence(k, self.schedule.choices[k].label, f"end of run ({outcome})")

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "strict": self.strict, "then": self.then}
