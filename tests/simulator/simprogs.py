"""Module-level programs for the simulator tests (importable from subprocesses)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import simulator


async def set_order() -> list[str]:
    """Behaviour depends on str hashing: iterates a set of strings."""
    names = {"alpha", "beta", "gamma", "delta", "epsilon", "zeta"}
    out = []
    for n in names:
        simulator.observe("visit", name=n)
        out.append(n)
        await asyncio.sleep(0)
    return out


async def stable() -> int:
    """Deterministic: tasks, queue, timers, seeded sources."""
    from simulator.sources import current_sources

    q: asyncio.Queue[int] = asyncio.Queue()

    async def producer(i: int) -> None:
        for j in range(3):
            await asyncio.sleep(0.1 * (i + 1))
            await q.put(i * 10 + j)
            simulator.observe("put", item=i * 10 + j)

    async def consumer() -> int:
        total = 0
        for _ in range(9):
            item = await q.get()
            src = current_sources()
            assert src is not None
            simulator.observe("got", item=item, uuid=src.uuid(), id=src.next_id("item"),
                              now=src.now_ms())
            total += item
        return total

    async with asyncio.TaskGroup() as tg:
        for i in range(3):
            tg.create_task(producer(i))
        c = tg.create_task(consumer())
    return c.result()


SET_OUTPUT: list[str] = []


async def set_started_tasks() -> list[str]:
    """Starts one task per name of a set: only the return value shows the hash order."""
    SET_OUTPUT.clear()
    names = {"alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel"}

    async def worker(name: str) -> None:
        await asyncio.sleep(0)
        SET_OUTPUT.append(name)

    await asyncio.gather(*(asyncio.ensure_future(worker(n)) for n in names))
    return list(SET_OUTPUT)


def executor_orders(make_main: Callable[[], Callable[[], Any]], seeds: int = 30) -> set[tuple[Any, ...]]:
    """The values of ``make_main()``'s runs under ``seeds`` random schedules, after checking
    that a worker-thread call is among a schedule's choice points and that the schedule replays
    (the executor tests of ``test_runtime`` and ``test_anyio``)."""
    from simulator.strategies import RandomStrategy

    orders = {tuple(simulator.run(make_main(), strategy=RandomStrategy(seed=s)).value) for s in range(seeds)}
    picked = simulator.run(make_main(), strategy=RandomStrategy(seed=1))
    assert any(c.label.startswith("cb:executor:") for c in picked.schedule.choices), picked.schedule.choices
    assert simulator.replay(make_main(), picked.schedule).value == picked.value
    return orders
