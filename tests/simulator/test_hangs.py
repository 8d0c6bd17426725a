"""Hangs are reported, quickly, with the stuck tasks named.

"Quickly" is asserted in loop steps, which are deterministic; the wall time (about 0.1 s and
0.4 s here) is measured by bench/peers.py row 7. The wall-clock bound below only says "it was
reported, not hung", loose enough for a loaded CI machine."""

from __future__ import annotations

import asyncio
import time

import simulator

_CLOCK = (time.perf_counter,)  # real clock, out of freezegun's reach


def test_heartbeat_deadlock_reported_promptly() -> None:
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
    assert _CLOCK[0]() - t0 < 10.0
    assert r.outcome == "deadlock" and r.stalled
    # The progress watchdog: 10,000 timer advances with no task but the heartbeat progressing.
    assert r.steps <= 25_000, r.steps
    rep = r.report()
    assert "main" in rep and "waiter" in rep and "Event.wait" in rep
    assert "main.1" in rep and "heartbeat" in rep


def test_spin_loop_reported_promptly() -> None:
    async def main() -> None:
        flag = [False]

        async def spinner() -> None:
            while not flag[0]:
                await asyncio.sleep(0)

        await spinner()

    t0 = _CLOCK[0]()
    r = simulator.run(main)
    assert _CLOCK[0]() - t0 < 10.0
    assert r.outcome == "budget-exceeded" and r.budget_reason == "steps"
    assert r.steps <= 100_010, r.steps  # the default step budget, not a million steps
    assert "spinner" in r.report()
