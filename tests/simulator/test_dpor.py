"""Dynamic partial-order reduction: it finds what plain dfs finds, counts classes, and sees
conflicts that go only through asyncio objects (declared mode)."""

from __future__ import annotations

import asyncio
import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import simulator
from simulator.strategies import DFSStrategy, DPORStrategy, PCTStrategy, RandomStrategy

from .test_strategies import lost_update

Main = Callable[[], Any]


def _bench_programs() -> Any:
    path = Path(__file__).parents[2] / "bench" / "_programs.py"
    spec = importlib.util.spec_from_file_location("loopkit_bench_programs", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


PROGRAMS = _bench_programs()


def declared_lost_update(tasks: int, awaits: int, staggered: bool = False) -> Main:
    """lost_update with its counter declared shared (simulator.shared)."""

    async def main() -> int:
        shared = simulator.shared([0])

        async def worker() -> None:
            v = shared[0]
            for _ in range(awaits):
                await asyncio.sleep(0)
            shared[0] = v + 1

        running = []
        for i in range(tasks):
            if staggered and i:
                for _ in range(awaits):
                    await asyncio.sleep(0)
            running.append(asyncio.ensure_future(worker()))
        await asyncio.gather(*running)
        if shared[0] != tasks:
            raise AssertionError(f"lost update: {shared[0]} != {tasks}")
        return shared[0]

    return main


def search(main: Main, strategy: Any, budget: int = 3000) -> simulator.ExploreResult:
    return simulator.explore(main, strategy=strategy, budget=budget, stop_on_failure=False)


def outcomes(main: Main, strategy: Any) -> set[str]:
    seen: set[str] = set()
    while not strategy.exhausted:
        r = simulator.run(main, strategy=strategy)
        seen.add(r.outcome if r.error is None else f"{r.outcome}: {r.error}")
    return seen


CASES = [(2, 1, True), (2, 2, False), (3, 1, False), (3, 2, True)]


@pytest.mark.parametrize(("tasks", "awaits", "staggered"), CASES)
def test_dpor_finds_what_dfs_finds_on_the_lost_update(tasks: int, awaits: int, staggered: bool) -> None:
    dfs = search(lost_update(tasks, awaits, staggered), DFSStrategy())
    conservative = search(lost_update(tasks, awaits, staggered), DPORStrategy())
    declared = search(declared_lost_update(tasks, awaits, staggered), DPORStrategy(shared="declared"))
    assert dfs.exhausted and conservative.exhausted and declared.exhausted
    assert dfs.failures > 0
    assert conservative.failures > 0 and declared.failures > 0
    # Conservative about plain state: every user step is dependent, so no fewer classes than dfs
    # (which counts interleavings of user steps); declared: no more.
    assert conservative.classes == dfs.classes
    assert declared.runs <= dfs.runs


@pytest.mark.parametrize(("tasks", "awaits", "staggered"), CASES[:3])
def test_declared_dpor_reaches_every_outcome_of_the_full_tree(tasks: int, awaits: int, staggered: bool) -> None:
    full = outcomes(declared_lost_update(tasks, awaits, staggered), DFSStrategy(reduction=False))
    reduced = outcomes(declared_lost_update(tasks, awaits, staggered), DPORStrategy(shared="declared"))
    assert reduced == full


def test_class_counts() -> None:
    # 2 tasks x (read, await, await, write): dfs counts 10 interleavings, so does conservative
    # dpor; with the counter declared, the classes are the orders of the conflicting accesses:
    # R0 R1 W0 W1, R0 R1 W1 W0, R0 W0 R1 W1 (the first segments start in creation order).
    assert search(lost_update(2, 2), DPORStrategy()).classes == 10
    res = search(declared_lost_update(2, 2), DPORStrategy(shared="declared"))
    assert res.exhausted and res.classes == 3
    assert "exhausted (3 classes)" in res.summary()


def test_budget_hit_is_reported() -> None:
    res = simulator.explore(lost_update(3, 2, True), strategy="dpor", budget=20, stop_on_failure=False)
    assert not res.exhausted and res.budget_hit and res.runs == 20
    assert "budget hit" in res.summary()


@pytest.mark.parametrize("locked", [False, True])
def test_bench_race_programs(locked: bool) -> None:
    # The benchmark's own programs (its log of the interleaving is not declared: it observes).
    PROGRAMS.SHARED = simulator.shared
    try:
        for tasks, awaits in ((2, 1), (3, 2)):
            prog = PROGRAMS.race(tasks, awaits, staggered=True, locked=locked, raise_on_hit=True)
            dfs = search(prog, DFSStrategy(), budget=2000)
            dpor = search(prog, DPORStrategy(shared="declared"))
            assert dpor.exhausted
            assert (dpor.failures > 0) == (dfs.failures > 0) == (not locked)
            if tasks == 2 and locked:
                assert dpor.runs <= 2
    finally:
        PROGRAMS.SHARED = list


def test_agent_race() -> None:
    prog = PROGRAMS.agent_race()
    assert simulator.run(prog).ok  # asyncio's order passes
    dfs = simulator.explore(prog, strategy="dfs", budget=200)
    dpor = simulator.explore(prog, strategy="dpor", budget=200)
    assert dfs.found and dpor.found
    assert isinstance(dpor.first_failure.error, PROGRAMS.AgentRaceFailure)  # type: ignore[union-attr]


def _only_through(kind: str) -> Main:
    """A bug that depends on the order of two tasks' accesses to one asyncio object, and on
    no plain Python state: declared mode must see the conflict itself."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        ev = asyncio.Event()
        q: asyncio.Queue[int] = asyncio.Queue()
        lock = asyncio.Lock()
        fut = loop.create_future()

        async def first() -> None:
            await asyncio.sleep(0)
            if kind == "event":
                ev.set()
            elif kind == "queue":
                q.put_nowait(1)
            elif kind == "lock":
                await lock.acquire()
            else:
                fut.set_result(1)

        async def second() -> None:
            await asyncio.sleep(0)
            if kind == "event":
                assert not ev.is_set(), "saw the event set"
            elif kind == "queue":
                assert q.empty(), "saw an item"
            elif kind == "lock":
                assert not lock.locked(), "saw the lock held"
            else:
                assert not fut.done(), "saw the future done"

        t2 = asyncio.ensure_future(second())
        t1 = asyncio.ensure_future(first())
        await asyncio.gather(t1, t2)

    return main


@pytest.mark.parametrize("kind", ["event", "queue", "lock", "future"])
def test_declared_mode_sees_asyncio_objects(kind: str) -> None:
    prog = _only_through(kind)
    assert simulator.run(prog).ok  # FIFO: second runs first
    res = simulator.explore(prog, strategy=DPORStrategy(shared="declared"), budget=50)
    assert res.found, res.summary()
    # the primitives are back to their own methods after the search
    assert not hasattr(asyncio.Event.set, "__wrapped__")


def test_declared_mode_sees_a_cancel_of_a_ready_task() -> None:
    async def main() -> None:
        async def victim() -> None:
            await asyncio.sleep(0)
            await asyncio.sleep(0)

        async def canceller(t: asyncio.Task[None]) -> None:
            await asyncio.sleep(0)
            t.cancel()

        v = asyncio.ensure_future(victim())
        c = asyncio.ensure_future(canceller(v))
        await c
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert not v.cancelled(), "cancelled"

    assert simulator.run(main).failed  # in FIFO the cancel lands
    res = simulator.explore(main, strategy=DPORStrategy(shared="declared"), budget=50, stop_on_failure=False)
    assert res.exhausted and 0 < res.failures < res.runs  # both outcomes are explored


def test_timer_race() -> None:
    # The timer-staggered lost update (test_strategies): found by firing a timer early.
    async def main() -> None:
        shared = simulator.shared([0])

        async def worker(delay: float) -> None:
            await asyncio.sleep(delay)
            v = shared[0]
            await asyncio.sleep(0)
            shared[0] = v + 1

        await asyncio.gather(worker(0), worker(0.01))
        assert shared[0] == 2, "lost update"

    assert simulator.run(main).ok
    for strategy in (DPORStrategy(), DPORStrategy(shared="declared")):
        assert simulator.explore(main, strategy=strategy, budget=100).found


def test_dpor_search_is_deterministic() -> None:
    def picks() -> list[list[int]]:
        s = DPORStrategy(shared="declared")
        out = []
        while not s.exhausted:
            r = simulator.run(declared_lost_update(3, 2, True), strategy=s)
            out.append([c.pick for c in r.schedule.choices])
        return out

    assert picks() == picks()


def test_dpor_bound() -> None:
    full = search(lost_update(3, 1), DPORStrategy())
    bounded = search(lost_update(3, 1), DPORStrategy(max_deviations=1))
    assert bounded.exhausted and bounded.runs < full.runs


def test_shared_and_access_outside_a_run_are_plain() -> None:
    xs = simulator.shared([1, 2])
    assert xs == [1, 2] and isinstance(xs, list)
    d = simulator.shared({"a": 1})
    assert d["a"] == 1
    marker = object()
    assert simulator.shared(marker) is marker
    simulator.access(marker)  # no-op outside a run
    with pytest.raises(ValueError):
        DPORStrategy(shared="some")


def test_sharper_random_on_the_agent_race() -> None:
    # Wake-ups last: the agent race (the woken driver must run after the user's step) is hit
    # in more than half of the schedules; plain least-recent-first hit it in under a fifth.
    prog = PROGRAMS.agent_race()
    res = simulator.explore(prog, strategy=RandomStrategy(), budget=200, stop_on_failure=False, track=False)
    assert res.hit_rate > 0.5
    pct = simulator.explore(prog, strategy=PCTStrategy(), budget=100, stop_on_failure=False, track=False)
    assert pct.failures > 0


def test_a_dpor_failure_replays_and_shrinks_untraced() -> None:
    # A traced run schedules exactly as an untraced one: its schedule replays strictly on the
    # plain driver, and shrinks to one deviation.
    prog = declared_lost_update(3, 2, True)
    res = simulator.explore(prog, strategy=DPORStrategy(shared="declared"), budget=100)
    assert res.first_failure is not None
    again = simulator.replay(prog, res.first_failure.schedule)
    assert again.failed and again.timeline == res.first_failure.timeline
    assert simulator.shrink(prog, res.first_failure.schedule).after["deviations"] == 1
