"""The strategy protocol.

A strategy decides, at each choice point of a run, which option runs next. ``run()`` calls
``begin(loop, seed)`` before the run, then the function returned by ``choose_fn()`` with the
number of options ``n`` (>= 2) at every choice point (it must return ``0 <= i < n``; ``0`` is
always what plain asyncio would run), then ``end(outcome)``. A strategy that needs to know what
the options are asks the loop: ``loop.option_labels()``, ``loop.option_kinds()``,
``loop.option_tasks()``, ``loop.choice_index``. ``choose_fn()`` returning ``None`` means FIFO
(the loop then skips the call entirely).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from simulator._runtime import SimLoop


class Strategy:
    """Base class: FIFO unless ``choose`` is overridden."""

    name = "base"
    loop: SimLoop | None = None

    def begin(self, loop: SimLoop, seed: int) -> None:
        self.loop = loop

    def choose_fn(self) -> Callable[[int], int] | None:
        return self.choose

    def choose(self, n: int) -> int:
        return 0

    def end(self, outcome: str) -> None:
        self.loop = None

    def describe(self) -> dict[str, Any]:
        return {"name": self.name}
