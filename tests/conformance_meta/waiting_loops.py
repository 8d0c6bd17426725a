"""``examples/spec_loop`` waiting in other ways than on a future: a driver that polls for work
every millisecond, and a ``close()`` that spins on ``sleep(0)`` until its own close is done.
Correct loops both, which the simulator must run as asyncio would (docs/simulator.md: the timer
window, fairness, spins costing time); each failed race rules under ``pct`` before.

And a ``when_idle()`` that returns a coroutine (no ``done()`` to read), correct and with session
55's blind-round bug: a waiter held for an idle inject's flush released when the flush ends if
the agent is not running, though a prompt sent meanwhile is queued (IDLE-2). And a ``dispose()``
that releases the waiters itself, its driver still running (IDLE-4)."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

from examples.spec_loop.adapter import SpecLoopImplementation, _sources
from examples.spec_loop.agent import Agent
from examples.spec_loop.service import Service


class _PollingAgent(Agent):
    async def _park(self) -> None:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._wake = fut
        try:
            while not fut.done():  # a polling driver: it looks for work every millisecond
                await asyncio.sleep(0.001)
        finally:
            self._wake = None


class _WaitingService(Service):
    agent_class = _PollingAgent

    async def close(self) -> None:
        closing = asyncio.ensure_future(super().close())
        while not closing.done():  # a spin: it yields until the close is over
            await asyncio.sleep(0)
        await closing


class WaitingLoop(SpecLoopImplementation):
    name = "spec_loop (polling, spinning)"

    def create_service(self, *, persistence: object | None = None) -> Service:
        return _WaitingService(persistence=persistence, sources=_sources())  # type: ignore[arg-type]


waiting_loop = WaitingLoop()


class _CoroutineWaiterAgent(Agent):
    def when_idle(self) -> Coroutine[Any, Any, None]:  # type: ignore[override]
        waiter = super().when_idle()

        async def waiting() -> None:
            await waiter

        return waiting()


class _QueueBlindAgent(_CoroutineWaiterAgent):
    def _work_arrived(self) -> bool:
        return self._status == "running"  # the bug: a prompt queued meanwhile is not looked at


class _CoroutineWaiterService(Service):
    agent_class = _CoroutineWaiterAgent


class _QueueBlindService(Service):
    agent_class = _QueueBlindAgent


class CoroutineWaiterLoop(SpecLoopImplementation):
    """spec_loop whose ``when_idle()`` returns a coroutine; ``queue_blind``: with the bug above."""

    def __init__(self, *, queue_blind: bool = False) -> None:
        self.queue_blind = queue_blind
        self.name = "spec_loop (coroutine waiter" + (", queue-blind)" if queue_blind else ")")

    def create_service(self, *, persistence: object | None = None) -> Service:
        service = _QueueBlindService if self.queue_blind else _CoroutineWaiterService
        return service(persistence=persistence, sources=_sources())  # type: ignore[arg-type]


class _EagerReleaseAgent(Agent):
    def _mark_disposed(self) -> None:
        super()._mark_disposed()
        # the bug (session 57's blind round G): dispose() itself releases the waiters, though the
        # driver still runs (inside the turn's flush, say) and has not exited (IDLE-4)
        waiters, self._waiters = self._waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)


class _EagerReleaseService(Service):
    agent_class = _EagerReleaseAgent


class EagerReleaseLoop(SpecLoopImplementation):
    """spec_loop whose ``dispose()`` releases its waiters at once, its driver still running."""

    name = "spec_loop (waiters released by dispose itself)"

    def create_service(self, *, persistence: object | None = None) -> Service:
        return _EagerReleaseService(persistence=persistence, sources=_sources())  # type: ignore[arg-type]

