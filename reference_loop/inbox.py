"""The per-agent inbox: a queued FIFO (prompts for the next turn) and a steering FIFO (INBOX-1)."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from . import vocabulary as v


@dataclass(frozen=True)
class InboxMessage:
    """One queued or steering message: its content blocks and resolved source."""

    content: list[v.Block]
    source: v.Source


class Inbox:
    """Two FIFOs plus a wake-up for the driver parked on ``wait_for_queued``."""

    def __init__(self) -> None:
        self._queued: deque[InboxMessage] = deque()
        self._steering: deque[InboxMessage] = deque()
        self._waker: asyncio.Future[None] | None = None
        self.clears = 0  # how many times clear() ran: a drain in progress stops at a cancel

    def enqueue(self, message: InboxMessage) -> None:
        """Queue a prompt for the next turn and wake the driver."""
        self._queued.append(message)
        self.wake()

    def steer(self, message: InboxMessage) -> None:
        """Add steering for the running turn."""
        self._steering.append(message)

    def drain_queued(self) -> list[InboxMessage]:
        """Take every queued prompt, in order (LOOP-2)."""
        drained = list(self._queued)
        self._queued.clear()
        return drained

    def drain_steering(self) -> list[InboxMessage]:
        """Take every steering message, in order."""
        drained = list(self._steering)
        self._steering.clear()
        return drained

    def take_steering(self) -> InboxMessage:
        """Take the oldest steering message (the FIFO must not be empty)."""
        return self._steering.popleft()

    @property
    def steering_count(self) -> int:
        return len(self._steering)

    def clear(self) -> None:
        """Drop both FIFOs (``cancel()``, CANCEL-1)."""
        self._queued.clear()
        self._steering.clear()
        self.clears += 1

    @property
    def has_queued(self) -> bool:
        return bool(self._queued)

    @property
    def has_steering(self) -> bool:
        return bool(self._steering)

    def wake(self) -> None:
        """Wake a parked ``wait_for_queued`` so it re-checks its condition."""
        waker, self._waker = self._waker, None
        if waker is not None and not waker.done():
            waker.set_result(None)

    async def wait_for_queued(self, also: Callable[[], bool] = lambda: False) -> None:
        """Park until something is queued or ``also()`` holds (re-checked on every ``wake``)."""
        while not (self._queued or also()):
            waker = asyncio.get_running_loop().create_future()
            self._waker = waker
            try:
                await waker
            finally:
                if self._waker is waker:
                    self._waker = None
