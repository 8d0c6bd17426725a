"""``simulator.wait_quiescent()``: released once nothing else is ready, in every schedule."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import simulator
from simulator.strategies import DPORStrategy, PCTStrategy, RandomStrategy
from simulator.strategies.base import Strategy

HOPS = 25


def chain_then_look() -> Any:
    """A task ends; its done-callback sets off a chain of ``HOPS`` callbacks and task steps (a
    scheduler woken by the task's end, as a loop's driver might be); the main task, meanwhile
    yielding, waits for quiescence and reports how far the chain got and the virtual time."""

    async def main() -> tuple[int, float, bool]:
        loop = asyncio.get_running_loop()
        hops = [0]
        woken = asyncio.Event()

        def hop() -> None:
            hops[0] += 1
            if hops[0] < HOPS:
                loop.call_soon(hop)
            else:
                woken.set()

        async def scheduler() -> None:
            await woken.wait()
            for _ in range(3):
                await asyncio.sleep(0)
            hops[0] += 1

        async def job() -> None:
            await asyncio.sleep(0)

        later = asyncio.ensure_future(asyncio.sleep(5))  # a timer quiescence must not wait for
        sched = asyncio.ensure_future(scheduler())
        task = asyncio.ensure_future(job())
        task.add_done_callback(lambda _t: loop.call_soon(hop))
        await task
        for _ in range(2):
            await asyncio.sleep(0)  # yields a strategy may spend while the chain waits
        await simulator.wait_quiescent()
        seen = (hops[0], loop.time(), later.done())
        await asyncio.gather(sched, later)
        return seen

    return main


STRATEGIES: list[tuple[str, Any]] = [
    ("fifo", lambda _seed: None),
    ("random", lambda _seed: RandomStrategy()),
    ("pct", lambda seed: PCTStrategy(seed=seed, horizon=64)),
]


@pytest.mark.parametrize("name,make", STRATEGIES, ids=[s[0] for s in STRATEGIES])
def test_every_schedule_sees_the_chain_finished_and_the_clock_still(name: str, make: Any) -> None:
    for seed in range(40 if name != "fifo" else 1):
        result = simulator.run(chain_then_look(), strategy=make(seed), seed=seed)
        hops, now, timer_fired = result.unwrap()
        assert hops == HOPS + 1, f"{name} seed {seed}: quiescence came with the chain at {hops} of {HOPS + 1}"
        assert now == 0.0 and not timer_fired, f"{name} seed {seed}: quiescence waited for a timer (t={now})"


def test_a_traced_search_sees_the_same() -> None:
    found = simulator.explore(chain_then_look(), strategy=DPORStrategy(), budget=30,
                              is_failure=lambda r: r.failed or r.value != (HOPS + 1, 0.0, False))
    assert found.runs > 1 and found.first_failure is None, found.first_failure


def test_a_replay_of_a_recorded_schedule_is_exact() -> None:
    first = simulator.run(chain_then_look(), strategy=PCTStrategy(seed=3, horizon=64), seed=3)
    again = simulator.replay(chain_then_look(), first.schedule, strict=True)
    assert again.unwrap() == first.unwrap()
    assert again.timeline == first.timeline


def test_every_waiter_is_released_and_a_cancelled_one_is_skipped() -> None:
    async def main() -> list[str]:
        order: list[str] = []

        async def wait(name: str) -> None:
            await simulator.wait_quiescent()
            order.append(name)

        a = asyncio.ensure_future(wait("a"))
        b = asyncio.ensure_future(wait("b"))
        c = asyncio.ensure_future(wait("c"))
        await asyncio.sleep(0)
        b.cancel()
        await asyncio.gather(a, c)
        # a second wait, with nothing else going on, returns at once (no timer to move to)
        await simulator.wait_quiescent()
        return order

    assert simulator.run(main, strategy=Strategy()).unwrap() == ["a", "c"]


def test_outside_a_simulation_it_raises() -> None:
    with pytest.raises(RuntimeError, match="needs a running simulation"):
        asyncio.run(simulator.wait_quiescent())


def test_a_task_spinning_for_ever_does_not_hold_the_wait_for_ever() -> None:
    # A spinner (``while True: await sleep(0)``) leaves something ready at every moment; the
    # spin watchdog lets virtual time pass on it (docs/simulator.md), and the waiters go with it.
    async def main() -> float:
        async def spin() -> None:
            while True:
                await asyncio.sleep(0)

        spinner = asyncio.ensure_future(spin())
        await simulator.wait_quiescent()
        spinner.cancel()
        return asyncio.get_running_loop().time()

    for strategy in (None, PCTStrategy(seed=1, horizon=64)):
        result = simulator.run(main, strategy=strategy, max_steps=50_000)
        assert result.outcome == "completed" and 0 < result.unwrap() < 1, result.report()
