"""FIFO: exactly the order plain asyncio would use (always option 0)."""

from __future__ import annotations

from collections.abc import Callable

from simulator.strategies.base import Strategy


class FifoStrategy(Strategy):
    """Always the first ready origin, never a timer early: plain asyncio's order."""

    name = "fifo"

    def choose_fn(self) -> Callable[[int], int] | None:
        return None
