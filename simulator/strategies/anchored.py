"""Single deviations from FIFO at the choice points that follow an anchor, nearest first.

Where a program's interesting moment is known (a caller acted there), the interleavings worth
trying first are those right after it: the work the action started against the work already
under way. A bounded dfs backtracks from the deepest choice point, so its first schedules
reorder the end of the run, where little is left to race; this strategy does the opposite.

The *anchor* is the first observed event that ``event`` accepts, or the first choice point at
which a task named ``task`` is ready (whichever comes first). Up to it every run is FIFO (so its
prefix is plain asyncio's run, and costs nothing to explore). From it, the choice points are
counted, except those where an asyncio-internal callback ("glue") is ready, whose orderings are
no new interleavings (see :mod:`.dfs`). Run ``r`` takes option ``o`` at counted choice point
``k`` and FIFO everywhere else, for ``(k, o)`` = ``(0, 1)``, ``(0, 2)``, ..., ``(0, n0 - 1)``,
``(1, 1)``, ...: one strategy object drives the whole search, and ``exhausted`` becomes true
once a run reaches no target (the anchor never came, or the run has fewer choice points).
A run at a deviation that no earlier run made never repeats the FIFO run itself.

:class:`AnchoredProbe` is the FIFO run that also measures, for the same anchor, the width of
every counted choice point (:attr:`AnchoredProbe.widths`): the search above then makes exactly
``sum(w - 1 for w in widths)`` runs that reach their target (:func:`reaching_runs`), and a
caller that ran the probe anyway (a plain-order run it needed) need not spend a run to learn
that the search is exhausted.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from simulator.errors import SimulationError
from simulator.strategies.base import Strategy

if TYPE_CHECKING:
    from simulator._runtime import SimLoop


class AnchoredStrategy(Strategy):
    """One deviation per run, at the choice points after an anchor (see the module docstring)."""

    name = "anchored"
    systematic = True

    def __init__(self, *, event: Callable[[dict[str, Any]], bool] | None = None, task: str | None = None) -> None:
        if event is None and task is None:
            raise ValueError("AnchoredStrategy needs an anchor: an event predicate, a task name, or both")
        self.event = event
        self.task = task
        self.exhausted = False
        self.runs = 0
        self._target = (0, 1)
        self._width = 0  # the options at the target choice point, in the run that reached it
        self._armed = False
        self._count = 0
        self._hit = False
        self._dispose: Callable[[], None] | None = None

    def begin(self, loop: SimLoop, seed: int) -> None:
        if self.exhausted:
            raise SimulationError("anchored: the search is exhausted")
        self.loop = loop
        self._armed = False
        self._count = 0
        self._hit = False
        self._dispose = loop.add_observer(self._watch) if self.event is not None else None

    def _watch(self, event: dict[str, Any]) -> None:
        if not self._armed and self.event is not None and self.event(event):
            self._armed = True

    def _counted(self) -> bool:
        """Whether this choice point is one the search counts: after the anchor, no glue ready."""
        loop = self.loop
        assert loop is not None
        if not self._armed:
            if self.task is None or not any(t is not None and t.get_name() == self.task for t in loop.option_tasks()):
                return False
            self._armed = True
        return "glue" not in loop.option_kinds()

    def choose(self, n: int) -> int:
        if self._hit or not self._counted():
            return 0
        k = self._count
        self._count = k + 1
        target, option = self._target
        if k < target:
            return 0
        self._hit = True
        self._width = n
        return min(option, n - 1)

    def end(self, outcome: str) -> None:
        self.runs += 1
        if self._dispose is not None:
            self._dispose()
            self._dispose = None
        if not self._hit:
            self.exhausted = True
        else:
            k, option = self._target
            self._target = (k, option + 1) if option + 1 < self._width else (k + 1, 1)
        self.loop = None

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "task": self.task, "event": self.event is not None}


class AnchoredProbe(AnchoredStrategy):
    """A FIFO run (it always takes option 0, so its run is plain asyncio's, and it is named
    ``fifo``) that records in :attr:`widths` the options at each choice point an
    :class:`AnchoredStrategy` with the same anchor counts. It costs a few percent more than the
    runtime's FIFO fast path, which never looks at its choice points."""

    name = "fifo"

    def __init__(self, *, event: Callable[[dict[str, Any]], bool] | None = None, task: str | None = None) -> None:
        super().__init__(event=event, task=task)
        self.widths: list[int] = []

    def begin(self, loop: SimLoop, seed: int) -> None:
        super().begin(loop, seed)
        self.widths = []

    def choose(self, n: int) -> int:
        if self._counted():
            self.widths.append(n)
        return 0

    def end(self, outcome: str) -> None:
        if self._dispose is not None:
            self._dispose()
            self._dispose = None
        self.loop = None


def reaching_runs(widths: list[int] | tuple[int, ...]) -> int:
    """How many runs of an :class:`AnchoredStrategy` search reach their target, given the
    widths its anchor's counted choice points have in the FIFO run (:class:`AnchoredProbe`):
    each run deviates at one of them, to one of its other options, in the FIFO run's prefix."""
    return sum(w - 1 for w in widths)
