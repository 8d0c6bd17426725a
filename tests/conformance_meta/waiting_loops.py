"""``examples/spec_loop`` waiting in other ways than on a future: a driver that polls for work
every millisecond, and a ``close()`` that spins on ``sleep(0)`` until its own close is done.
Correct loops both, which the simulator must run as asyncio would (docs/simulator.md: the timer
window, fairness, spins costing time); each failed race rules under ``pct`` before."""

from __future__ import annotations

import asyncio

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
