"""The runtime's public hooks: observation callbacks, the timeline so far, waiting for actors,
"strict, then FIFO" replay."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import simulator
from simulator.strategies import RandomStrategy, ReplayStrategy

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "cassettes" / "llm"


# --------------------------------------------------------------------------- observation


def test_on_observe_sees_each_event_after_it_is_in_the_timeline() -> None:
    seen: list[tuple[str, int, int]] = []

    async def main() -> int:
        simulator.observe("before")
        dispose = simulator.on_observe(
            lambda ev: seen.append((ev["kind"], simulator.timeline_length(), len(simulator.current_timeline())))
        )
        simulator.observe("a", x=1)
        await asyncio.sleep(2)
        simulator.observe("b")
        dispose()
        dispose()  # idempotent
        simulator.observe("after")
        return simulator.timeline_length()

    r = simulator.run(main)
    assert r.ok and r.value == 4
    assert seen == [("a", 2, 2), ("b", 3, 3)]
    assert type(r.timeline) is list  # the run's own list: nothing wraps it any more
    assert [e["kind"] for e in r.timeline] == ["before", "a", "b", "after"]
    assert r.timeline[2]["t"] == 2.0


def test_observers_run_in_order_may_observe_and_end_with_the_run() -> None:
    calls: list[str] = []
    disposers: list[Any] = []

    async def main() -> None:
        def first(ev: dict[str, Any]) -> None:
            calls.append(f"1:{ev['kind']}")
            if ev["kind"] == "x":
                simulator.observe("echo")  # observing from an observer is allowed

        disposers.append(simulator.on_observe(first))
        disposers.append(simulator.on_observe(lambda ev: calls.append(f"2:{ev['kind']}")))
        simulator.observe("x")

    r = simulator.run(main)
    assert r.ok
    assert calls == ["1:x", "1:echo", "2:echo", "2:x"]
    assert [e["kind"] for e in r.timeline] == ["x", "echo"]
    # after the run: disposing is harmless, and the next run starts with no observers
    for d in disposers:
        d()
    calls.clear()
    assert simulator.run(_observe_once).ok
    assert calls == []


async def _observe_once() -> None:
    simulator.observe("again")


def test_the_same_callback_twice_is_two_registrations() -> None:
    seen: list[str] = []

    def cb(ev: dict[str, Any]) -> None:
        seen.append(ev["kind"])

    async def main() -> None:
        d1 = simulator.on_observe(cb)
        simulator.on_observe(cb)
        simulator.observe("both")
        d1()
        simulator.observe("one")

    assert simulator.run(main).ok
    assert seen == ["both", "both", "one"]


def test_an_observer_exception_reaches_the_observing_code() -> None:
    async def main() -> str:
        simulator.on_observe(lambda ev: 1 / 0)
        try:
            simulator.observe("boom")
        except ZeroDivisionError:
            return "raised"
        return "swallowed"

    r = simulator.run(main)
    assert r.value == "raised" and [e["kind"] for e in r.timeline] == ["boom"]


def test_hooks_outside_a_run() -> None:
    with pytest.raises(simulator.SimulationError, match="outside a simulation"):
        simulator.on_observe(lambda ev: None)
    assert simulator.timeline_length() == 0
    assert simulator.current_timeline() == []


def test_loop_accessors_for_strategies() -> None:
    lengths: list[int] = []

    class Peek(RandomStrategy):
        def choose_fn(self) -> Any:
            inner = super().choose_fn()
            loop = self.loop
            assert loop is not None and inner is not None

            def choose(n: int) -> int:
                lengths.append(loop.timeline_length)
                assert loop.timeline() == simulator.current_timeline()
                return inner(n)

            return choose

    async def main() -> None:
        async def worker(i: int) -> None:
            simulator.observe("start", i=i)
            await asyncio.sleep(0)
            simulator.observe("end", i=i)

        await asyncio.gather(worker(1), worker(2))

    assert simulator.run(main, strategy=Peek(), seed=3).ok
    assert lengths and lengths == sorted(lengths)


# --------------------------------------------------------------------------- replay modes


def _race() -> Any:
    async def main() -> int:
        shared = [0]

        async def worker(i: int) -> None:
            v = shared[0]
            simulator.observe("read", task=i, v=v)
            await asyncio.sleep(0)
            await asyncio.sleep(0)
            shared[0] = v + 1

        await asyncio.gather(*(worker(i) for i in range(3)))
        return shared[0]

    return main


def _recorded() -> simulator.RunResult:
    for seed in range(50):
        r = simulator.run(_race(), strategy=RandomStrategy(switch_bias=0.0), seed=seed)
        if r.schedule.deviations and len(r.schedule) >= 4:
            return r
    raise AssertionError("no deviating schedule")


def test_strict_then_fifo_replays_the_tape_then_goes_on() -> None:
    r = _recorded()
    sched = r.schedule
    # the whole tape: identical run, like plain strict replay
    whole = simulator.run(_race(), strategy=ReplayStrategy(sched, then="fifo"), seed=sched.seed)
    assert whole.timeline == r.timeline and whole.schedule.choices == sched.choices
    # a prefix: plain strict replay diverges at the end of the tape ...
    prefix = sched.replace(choices=sched.choices[:2])
    with pytest.raises(simulator.Divergence, match=r"diverged at choice 2: expected end of schedule"):
        simulator.replay(_race(), prefix)
    # ... strict-then-FIFO goes on in asyncio's order: every later pick is 0
    on = simulator.replay(_race(), prefix, then="fifo")
    assert on.schedule.choices[:2] == prefix.choices
    assert all(c.pick == 0 for c in on.schedule.choices[2:])
    # it stays strict while the tape lasts (a label that is not offered diverges) ...
    bad = prefix.replace(choices=[prefix.choices[0]._replace(label="main.9:elsewhere"), prefix.choices[1]])
    with pytest.raises(simulator.Divergence, match=r"diverged at choice 0: expected main\.9:elsewhere"):
        simulator.replay(_race(), bad, then="fifo")
    # ... and a run that ends before the tape does diverges
    longer = sched.replace(choices=[*sched.choices, sched.choices[-1]])
    with pytest.raises(simulator.Divergence, match=rf"diverged at choice {len(sched)}: .*end of run"):
        simulator.replay(_race(), longer, then="fifo")


def test_strict_then_seed_continues_under_the_recorded_seed() -> None:
    r = _recorded()
    prefix = r.schedule.replace(choices=r.schedule.choices[:1])
    a = simulator.replay(_race(), prefix, then="seed")
    b = simulator.replay(_race(), prefix, strict=False)  # lenient defaults to the seed for random
    assert a.schedule.choices == b.schedule.choices and a.timeline == b.timeline


def test_replay_then_values() -> None:
    r = _recorded()
    assert ReplayStrategy(r.schedule).then == "diverge"
    assert ReplayStrategy(r.schedule, strict=False).then == "seed"
    assert ReplayStrategy(r.schedule.replace(strategy="dfs"), strict=False).then == "fifo"
    assert ReplayStrategy(r.schedule, then="fifo").describe() == {
        "name": "replay", "strict": True, "then": "fifo"}
    with pytest.raises(ValueError, match="then must be one of"):
        ReplayStrategy(r.schedule, then="later")


def test_the_simulator_imports_nothing_above_it() -> None:
    code = (
        "import sys, simulator, simulator.strategies, simulator.explore\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('cassettes', 'conformance', 'reference_loop'))))"
    )
    out = subprocess.run([sys.executable, "-c", "import json\n" + code], capture_output=True,
                         text=True, cwd=ROOT, check=True)
    assert json.loads(out.stdout) == []


# --------------------------------------------------------------------------- ready position


def test_ready_position_counts_callbacks_joining_the_ready_queue_in_fifo_runs() -> None:
    seen: list[int | None] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        seen.append(simulator.ready_position())
        seen.append(simulator.ready_position())  # nothing scheduled in between: the same moment
        loop.call_soon(lambda: None)
        seen.append(simulator.ready_position())
        loop.call_later(1.0, lambda: None)  # a timer joins the queue when it is due, not now
        seen.append(simulator.ready_position())
        await asyncio.sleep(2.0)  # its own timer and the first one, due before it, join
        seen.append(simulator.ready_position())

    simulator.run(main)
    a, b, c, d, e = seen
    assert a is not None and a == b
    assert c == a + 1 and d == c
    assert e is not None and e >= d + 2


def test_ready_position_is_none_outside_a_run_and_under_a_strategy() -> None:
    assert simulator.ready_position() is None

    async def main() -> int | None:
        return simulator.ready_position()

    assert simulator.run(main).value is not None
    assert simulator.run(main, strategy=RandomStrategy(), seed=1).value is None
