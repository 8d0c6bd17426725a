"""Hangs are reported, quickly, with the stuck tasks named."""

from __future__ import annotations

import asyncio
import time

import simulator

_CLOCK = (time.perf_counter,)  # real clock, out of freezegun's reach


def test_heartbeat_deadlock_reported_within_a_second() -> None:
    async def main() -> None:
        never = asyncio.Event()

        async def heartbeat() -> None:
            while True:
                await asyncio.sleep(1.0)

        async def waiter() -> None:
            await never.wait()

        beat = asyncio.ensure_future(heartbeat())
        await waiter()
        beat.cancel()

    t0 = _CLOCK[0]()
    r = simulator.run(main)
    assert _CLOCK[0]() - t0 < 1.0
    assert r.outcome == "deadlock" and r.stalled
    rep = r.report()
    assert "main" in rep and "waiter" in rep and "Event.wait" in rep
    assert "main.1" in rep and "heartbeat" in rep


def test_spin_loop_reported_within_a_second() -> None:
    async def main() -> None:
        flag = [False]

        async def spinner() -> None:
            while not flag[0]:
                await asyncio.sleep(0)

        await spinner()

    t0 = _CLOCK[0]()
    r = simulator.run(main)
    assert _CLOCK[0]() - t0 < 1.0
    assert r.outcome == "budget-exceeded" and r.budget_reason == "steps"
    assert "spinner" in r.report()
