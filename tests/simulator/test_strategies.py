"""Strategies, exploration, shrinking and replay."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import simulator
from simulator.strategies import (
    AnchoredProbe,
    AnchoredStrategy,
    DFSStrategy,
    DPORStrategy,
    PCTStrategy,
    RandomStrategy,
    Strategy,
    reaching_runs,
)
from simulator.strategies.hypothesis import HypothesisStrategy


def lost_update(tasks: int = 2, awaits: int = 1, staggered: bool = False) -> Any:
    """v = shared; await sleep(0) x awaits; shared = v + 1, in `tasks` tasks."""

    async def main() -> int:
        shared = [0]

        async def worker(i: int) -> None:
            v = shared[0]
            simulator.observe("read", task=i, v=v)
            for k in range(awaits):
                await asyncio.sleep(0)
                simulator.observe("step", task=i, k=k)
            shared[0] = v + 1
            simulator.observe("write", task=i, v=v + 1)

        running = []
        for i in range(tasks):
            if staggered and i:
                for _ in range(awaits):
                    await asyncio.sleep(0)
            running.append(asyncio.ensure_future(worker(i)))
        await asyncio.gather(*running)
        if shared[0] != tasks:
            raise AssertionError(f"lost update: {shared[0]} != {tasks}")
        return shared[0]

    return main


def test_fifo_passes_the_staggered_race() -> None:
    assert simulator.run(lost_update(3, 2, True)).ok
    assert simulator.run(lost_update(2, 1, True)).ok
    assert not simulator.run(lost_update(2, 1, False)).ok  # the plain race fails under asyncio too


@pytest.mark.parametrize("strategy", ["random", "pct"])
@pytest.mark.parametrize("staggered", [False, True])
def test_lost_update_found_within_100(strategy: str, staggered: bool) -> None:
    res = simulator.explore(lost_update(2, 1, staggered), strategy=strategy, budget=100)
    assert res.found, res.summary()
    assert res.first_failure is not None and res.first_failure_run is not None
    assert res.first_failure_run <= 100
    assert "lost update" in str(res.first_failure.error)


def test_hit_rates() -> None:
    def rate(strategy: Any, prog: Any, n: int = 300) -> float:
        return simulator.explore(prog, strategy=strategy, budget=n, stop_on_failure=False,
                                 track=False).hit_rate

    two, three = lost_update(2, 1, True), lost_update(3, 2, True)
    assert rate(RandomStrategy(), two) >= 0.39
    assert rate(RandomStrategy(), three) >= 0.7
    assert rate(PCTStrategy(), three) > rate(RandomStrategy(switch_bias=0.0), three) - 0.05


def test_dfs_counts_interleavings_exactly() -> None:
    # Two tasks started together, 3 segments each (2 awaits). In realisable mode the first
    # segments run in creation order (one origin scheduled both), the rest interleave freely:
    # C(6, 3) / 2 = 10 interleavings; in wide mode any order: C(6, 3) = 20.
    prog = lost_update(2, 2)
    for mode, expected in (("realisable", 10), ("wide", 20)):
        res = simulator.explore(prog, strategy=DFSStrategy(), budget=1000, stop_on_failure=False,
                                mode=mode)
        assert res.exhausted
        assert res.distinct_timelines == expected
        assert res.runs == expected, res.summary()


def test_dfs_exhausts_staggered_two_tasks_quickly() -> None:
    res = simulator.explore(lost_update(2, 1, True), strategy="dfs", budget=100,
                            stop_on_failure=False)
    assert res.exhausted and res.runs <= 10
    assert res.failures >= 1


def test_dfs_delay_bound() -> None:
    full = simulator.explore(lost_update(3, 1), strategy=DFSStrategy(), budget=1000,
                             stop_on_failure=False)
    bounded = simulator.explore(lost_update(3, 1), strategy=DFSStrategy(max_deviations=1),
                                budget=1000, stop_on_failure=False)
    assert bounded.exhausted and full.exhausted and bounded.runs < full.runs


def test_shrink_then_replay() -> None:
    prog = lost_update(3, 2, True)
    res = simulator.explore(prog, strategy=RandomStrategy(switch_bias=0.0), budget=200, seed=5)
    assert res.first_failure is not None
    failing = res.first_failure.schedule
    shrunk = simulator.shrink(prog, failing)
    assert shrunk.runs <= 50
    assert shrunk.after["deviations"] <= shrunk.before["deviations"]
    assert shrunk.after["deviations"] == 1  # one deviation from FIFO suffices for this race
    assert shrunk.result.failed
    again = simulator.replay(prog, shrunk.schedule, strict=False, then="fifo")
    assert again.failed and again.timeline == shrunk.result.timeline
    # the original failing schedule replays exactly, strictly
    exact = simulator.replay(prog, failing)
    assert exact.trace_json() == res.first_failure.trace_json().replace('"strategy":"random"',
                                                                         '"strategy":"random"')
    assert exact.timeline == res.first_failure.timeline


def test_strict_replay_reports_divergence() -> None:
    r = simulator.run(lost_update(2, 1, True), strategy=RandomStrategy(), seed=1)
    sched = r.schedule
    assert len(sched) >= 1
    bad = sched.replace(choices=[sched.choices[0]._replace(label="main.9:elsewhere"),
                                 *sched.choices[1:]])
    with pytest.raises(simulator.Divergence, match=r"diverged at choice 0: expected main\.9:elsewhere, found "):
        simulator.replay(lost_update(2, 1, True), bad)
    # lenient replay goes on
    assert simulator.replay(lost_update(2, 1, True), bad, strict=False).outcome in (
        "completed", "failed")
    # a changed program (three tasks instead of two) diverges too
    with pytest.raises(simulator.Divergence):
        simulator.replay(lost_update(3, 1, True), sched)


def test_wide_mode_is_named_in_schedule() -> None:
    r = simulator.run(lost_update(2, 1), strategy=RandomStrategy(), mode="wide")
    assert r.schedule.mode == "wide"
    assert '"mode":"wide"' in r.schedule.to_json()


def test_timer_variation_finds_staggered_timer_race() -> None:
    # The second task starts 10 ms later (a timer): FIFO passes; firing that timer before the
    # first task's remaining work (as if that work were slower) loses the update.
    async def main() -> None:
        shared = [0]

        async def worker(delay: float) -> None:
            await asyncio.sleep(delay)
            v = shared[0]
            await asyncio.sleep(0)
            shared[0] = v + 1

        await asyncio.gather(worker(0), worker(0.01))
        assert shared[0] == 2, "lost update"

    assert simulator.run(main).ok
    assert simulator.explore(main, strategy="random", budget=100).found
    assert not simulator.explore(main, strategy="random", budget=100, vary_timers=False).found


@settings(max_examples=200, suppress_health_check=list(HealthCheck), deadline=None,
          database=None)
@given(st.data())
def _hypothesis_search(data: Any) -> None:
    r = simulator.run(lost_update(2, 1, True), strategy=HypothesisStrategy(data))
    assert r.ok, r.report()


def test_hypothesis_strategy_finds_and_shrinks() -> None:
    with pytest.raises(AssertionError, match="lost update"):
        _hypothesis_search()


def test_explore_in_two_processes() -> None:
    res = simulator.explore(lost_update(2, 1, True), strategy="random", budget=40, workers=2,
                            stop_on_failure=False)
    assert res.runs == 40 and res.failures > 0
    assert res.first_failure is not None and res.first_failure.failed


async def _background_tasks_idiom() -> str:
    # asyncio's documented way to keep a task referenced: a set, and its discard as done callback.
    keep: set[asyncio.Task[Any]] = set()
    for _ in range(3):
        task = asyncio.ensure_future(asyncio.sleep(0))
        keep.add(task)
        task.add_done_callback(keep.discard)
    while keep:
        await asyncio.sleep(0)
    return "ok"


@pytest.mark.parametrize("make", [lambda: None, RandomStrategy, lambda: RandomStrategy(switch_bias=0.0),
                                  lambda: PCTStrategy(seed=1), DFSStrategy, DPORStrategy],
                         ids=["fifo", "random", "uniform", "pct", "dfs", "dpor"])
def test_a_done_callback_bound_to_an_unhashable_object_runs_under_every_strategy(make: Any) -> None:
    # The random strategy's run tracking once keyed every callback's owner: a set is unhashable.
    for seed in range(5):
        result = simulator.run(_background_tasks_idiom, strategy=make(), seed=seed)
        assert result.error is None and result.value == "ok", result.error


def _race_then_tail(tail: int) -> Any:
    """After the event ``go``, two tasks read-then-write a counter across one await (a lost
    update when the second reads before the first writes); then ``tail`` tasks step without
    sharing anything, a long end of the run where reordering finds nothing."""

    async def main() -> None:
        for _ in range(3):  # choice points before the anchor: no deviation belongs there
            await asyncio.gather(asyncio.sleep(0), asyncio.sleep(0))
        simulator.observe("go")
        shared = [0]

        async def bump(late: int) -> None:
            for _ in range(late):  # FIFO: the late one reads after the early one wrote
                await asyncio.sleep(0)
            v = shared[0]
            await asyncio.sleep(0)
            shared[0] = v + 1

        await asyncio.gather(bump(0), bump(1))
        if shared[0] != 2:
            raise AssertionError(f"lost update: {shared[0]}")

        async def idle() -> None:
            for _ in range(3):
                await asyncio.sleep(0)

        await asyncio.gather(*(idle() for _ in range(tail)))

    return main


def _deviations(res: Any) -> list[int]:
    return [i for i, c in enumerate(res.schedule.choices) if c.pick]


def test_anchored_deviates_once_after_its_anchor_nearest_first() -> None:
    main = _race_then_tail(0)
    fifo = simulator.run(main, strategy=Strategy())  # records every choice point, picks 0
    s = AnchoredStrategy(event=lambda e: e["kind"] == "go")
    seen: list[tuple[int, int]] = []
    while not s.exhausted and len(seen) < 50:
        res = simulator.run(main, strategy=s)
        devs = _deviations(res)
        assert len(devs) <= 1, "one deviation per run"
        if devs:
            seen.append((devs[0], res.schedule.choices[devs[0]].pick))
    assert seen, "it deviates at all"
    assert seen == sorted(seen), "nearest choice point first, then its next option"
    assert len(set(seen)) == len(seen), "no schedule twice"
    # the three gathers before the anchor are choice points too: no deviation lands there
    assert seen[0][0] >= 3
    assert [c.label for c in fifo.schedule.choices[:seen[0][0]]] == [c.label for c in res.schedule.choices[:seen[0][0]]]


def test_anchored_finds_a_race_after_its_anchor_before_dfs_does() -> None:
    main = _race_then_tail(6)
    assert simulator.run(main).error is None, "FIFO order passes"
    anchored = simulator.explore(main, strategy=AnchoredStrategy(event=lambda e: e["kind"] == "go"), budget=50)
    dfs = simulator.explore(main, strategy=DFSStrategy(max_deviations=1), budget=50)
    assert anchored.first_failure is not None and anchored.first_failure_run is not None
    assert anchored.first_failure_run <= 2
    assert dfs.first_failure_run is None or dfs.first_failure_run > anchored.first_failure_run


@pytest.mark.parametrize("tail", [0, 3, 6])
@pytest.mark.parametrize("anchor", ["event", "task"])
def test_the_anchored_probe_is_the_fifo_run_and_counts_the_searchs_reaching_runs(tail: int, anchor: str) -> None:
    main = _race_then_tail(tail)
    kw: dict[str, Any] = {"event": lambda e: e["kind"] == "go"} if anchor == "event" else {"task": "main.8"}
    probe = AnchoredProbe(**kw)
    probed = simulator.run(main, strategy=probe)
    assert probed.strategy == "fifo" and probed.timeline == simulator.run(main).timeline
    assert all(c.pick == 0 for c in probed.schedule.choices)
    s = AnchoredStrategy(**kw)
    reaching = 0
    while not s.exhausted:
        res = simulator.run(main, strategy=s)
        reaching += bool(_deviations(res))
    assert reaching == reaching_runs(probe.widths) and reaching > 0
    assert s.runs == reaching + 1, "the search learns it is exhausted from one run more, a FIFO one"


def test_anchored_by_task_and_exhaustion() -> None:
    async def main() -> None:
        async def window() -> None:
            await asyncio.sleep(0)

        await asyncio.sleep(0)
        t = asyncio.ensure_future(window())
        t.set_name("actor:window")
        await asyncio.gather(t, asyncio.sleep(0))

    s = AnchoredStrategy(task="actor:window")
    runs = 0
    while not s.exhausted and runs < 50:
        simulator.run(main, strategy=s)
        runs += 1
    assert s.exhausted and 1 < runs < 50
    never = AnchoredStrategy(task="no-such-task")
    res = simulator.run(main, strategy=never)
    assert never.exhausted and not _deviations(res), "no anchor: one FIFO run, then exhausted"
    with pytest.raises(ValueError, match="anchor"):
        AnchoredStrategy()


async def _poller_beside_ready_work() -> float:
    # A task polls every millisecond while another has work ready. Firing the poller's timer
    # early is fine (as if the ready work were slow), but only within the timer window of the
    # clock's last jump: real asyncio runs ready work before time can run on without bound.
    loop = asyncio.get_running_loop()
    ran_at: list[float] = []

    async def poll() -> None:
        while not ran_at:
            await asyncio.sleep(0.001)

    async def work() -> None:
        for _ in range(20):
            await asyncio.sleep(0)
        ran_at.append(loop.time())

    await asyncio.gather(poll(), work())
    return ran_at[0]


@pytest.mark.parametrize("make", [PCTStrategy, RandomStrategy], ids=["pct", "random"])
def test_early_timers_cannot_starve_ready_work(make: Any) -> None:
    window = 0.5
    for seed in range(30):
        r = simulator.run(_poller_beside_ready_work, strategy=make(seed=seed),
                          timer_window=window, max_steps=200_000)
        assert r.ok, (seed, r.report())
        assert r.value <= window + 0.002, (seed, r.value)


def test_clock_jumps_count_waits_on_time_not_timers_fired_early() -> None:
    # "At once" under every schedule: the clock jumps only when nothing was ready; a timer a
    # strategy fires early (loop.time() moves) is not a wait.
    async def main() -> tuple[int, float, int]:
        loop: Any = asyncio.get_running_loop()

        async def poll() -> None:
            for _ in range(50):
                await asyncio.sleep(0.001)

        poller = asyncio.create_task(poll())
        before, t0 = loop.clock_jumps, loop.time()
        for _ in range(10):
            await asyncio.sleep(0)  # ready work only
        during, moved = loop.clock_jumps - before, loop.time() - t0
        await asyncio.sleep(0.5)  # a wait on time: nothing else is ready for most of it
        await poller
        return during, moved, loop.clock_jumps - before

    runs = [simulator.run(main, strategy=PCTStrategy(seed=seed)) for seed in range(20)]
    assert all(r.ok for r in runs)
    assert all(r.value[0] == 0 and r.value[2] > 0 for r in runs), [r.value for r in runs]
    assert any(r.value[1] > 0 for r in runs), "no schedule fired the poller's timer early"
