"""Two strategy wrappers the scenario engine needs on top of ``simulator.strategies``.

* :class:`Recording` wraps any strategy and notes every deviation from FIFO (which option ran
  instead of the FIFO one, and how far the timeline had got), for the sequence diagram.
* :class:`Tape` replays a (shrunk) schedule strictly for as long as it lasts, then continues
  FIFO: how a race cassette is replayed. A recorded choice whose label is no longer offered at
  that position is a :class:`~simulator.errors.Divergence`; after the tape, the run may differ
  freely (a fixed implementation takes another path once the race is past). It is the
  simulator's ``ReplayStrategy(schedule, strict=True, then="fifo")`` under the schedule's own
  strategy name.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import simulator
from simulator.schedule import Schedule
from simulator.strategies.base import Strategy
from simulator.strategies.replay import ReplayStrategy

if TYPE_CHECKING:
    from simulator import SimLoop


class Recording(Strategy):
    """Delegates to ``inner`` and records its non-FIFO picks in ``deviations``.

    Each deviation is ``{"choice": k, "at": timeline length, "ran": label, "ran_task": name,
    "instead_of": label, "instead_of_task": name}`` (the task an option steps or wakes, if any).
    """

    def __init__(self, inner: Strategy | None) -> None:
        self.inner = inner
        self.name = inner.name if inner is not None else "fifo"
        self.deviations: list[dict[str, Any]] = []
        self._k = 0

    def begin(self, loop: SimLoop, seed: int) -> None:
        self.loop = loop
        self.deviations = []
        self._k = 0
        if self.inner is not None:
            self.inner.begin(loop, seed)

    def choose_fn(self) -> Callable[[int], int] | None:
        inner = self.inner.choose_fn() if self.inner is not None else None
        if inner is None:
            return None  # FIFO: keep the runtime's fast path
        loop = self.loop
        assert loop is not None

        def choose(n: int) -> int:
            k = self._k
            self._k = k + 1
            pick = inner(n)
            if pick:
                labels = loop.option_labels()
                tasks = loop.option_tasks()
                self.deviations.append({
                    "choice": k, "at": simulator.timeline_length(), "ran": labels[pick],
                    "ran_task": _task_name(tasks[pick]), "instead_of": labels[0],
                    "instead_of_task": _task_name(tasks[0]),
                })
            return pick

        return choose

    def end(self, outcome: str) -> None:
        if self.inner is not None:
            self.inner.end(outcome)
        self.loop = None

    @property
    def exhausted(self) -> bool:
        return bool(getattr(self.inner, "exhausted", False))


def _task_name(task: Any) -> str | None:
    return task.get_name() if task is not None else None


class Tape(ReplayStrategy):
    """Strict on the recorded choices, FIFO after them (see module docstring).

    Named after the strategy that recorded the schedule, so the replayed run's trace and
    schedule carry the same strategy name as the run that found the race.
    """

    def __init__(self, schedule: Schedule) -> None:
        super().__init__(schedule, strict=True, then="fifo")
        self.name = schedule.strategy
