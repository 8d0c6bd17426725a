"""The runtime's public hooks: observation callbacks, the timeline so far, waiting for actors,
"strict, then FIFO" replay, and recorded LLM cassettes in scenarios."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import simulator
from simulator.scenario import Scenario, ScenarioContext, scenario
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


def test_scenario_timeline_is_a_copy_and_listeners_still_fire() -> None:
    heard: list[str] = []

    @scenario
    async def listens(ctx: ScenarioContext) -> None:
        ctx.on("ping", lambda ev: heard.append(ev["kind"]))
        ctx.observe("ping")
        snapshot = ctx.timeline
        snapshot.append({"kind": "not-in-the-run"})
        assert [e["kind"] for e in ctx.timeline] == ["ping"]

    trace = listens.run()
    trace.assert_ok()
    assert heard == ["ping"] and trace.kinds() == ["ping"]


# --------------------------------------------------------------------------- actors


def test_pending_actors_and_wait_actors() -> None:
    states: dict[str, Any] = {}

    @scenario
    async def actors(ctx: ScenarioContext) -> None:
        assert ctx.pending_actors() == []
        ctx.at(1.0, lambda: ctx.observe("timed"), name="timed")

        async def chain() -> None:
            await asyncio.sleep(0.5)
            ctx.spawn(lambda: ctx.observe("child"), name="child")  # started while waited for

        ctx.spawn(chain, name="parent")
        states["before"] = sorted(t.get_name() for t in ctx.pending_actors())
        await ctx.wait_actors()
        states["after"] = ctx.pending_actors()
        states["t"] = ctx.now()

    trace = actors.run()
    trace.assert_ok()
    assert states["before"] == ["actor:parent", "actor:timed"]
    assert states["after"] == [] and states["t"] == 1.0
    assert trace.kinds().count("child") == 1 and "timed" in trace.kinds()


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


# --------------------------------------------------------------------------- cassettes


def _request(text: str) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": text}]}]}


async def _collect(model: Any, text: str = "What is the weather in Paris and Tokyo?") -> list[dict[str, Any]]:
    return [c async for c in model.stream(_request(text))]


def test_a_scenario_plays_a_shipped_cassette_in_virtual_time() -> None:
    path = SHIPPED / "openai-chat" / "text.yaml"
    got: dict[str, Any] = {}

    @scenario(name="recorded-model")
    async def recorded(ctx: ScenarioContext) -> None:
        model = ctx.cassette(path)
        assert ctx.models["text"] is model and model.name == "text"
        chunks = await _collect(model)
        got["chunks"], got["t"] = chunks, ctx.now()
        ctx.observe("answer", kinds=[c["type"] for c in chunks])

    trace = recorded.run(seed=4)
    trace.assert_ok()
    chunks = got["chunks"]
    assert chunks[-1]["type"] == "finish" and chunks[-1]["reason"]["kind"] == "stop"
    text = "".join(c["text"] for c in chunks if c["type"] == "text-delta")
    assert text

    # the same chunks as the cassette model gives on plain asyncio, with the recorded gaps
    # passing in virtual time (no wall time)
    from cassettes.model import CassetteModel

    plain = asyncio.run(_collect(CassetteModel(path, pace=False)))
    assert chunks == plain
    assert got["t"] > 0
    # byte-identical traces run to run
    assert recorded.run(seed=4).to_json() == trace.to_json()


def test_cassette_problems_fail_the_scenario_like_a_fake_models() -> None:
    path = SHIPPED / "anthropic" / "text.yaml"

    @scenario(name="asks-twice")
    async def asks_twice(ctx: ScenarioContext) -> None:
        model = ctx.cassette(path, name="claude")
        await _collect(model)
        try:
            await _collect(model)  # one interaction recorded: the second call is unanswerable
        except Exception as exc:
            ctx.observe("model/raised", error=type(exc).__name__)

    trace = asks_twice.run()
    assert not trace.ok
    assert [f["check"] for f in trace.failures] == ["model:claude"]
    assert "no recorded interaction" in trace.failures[0]["message"]

    @scenario(name="never-asks", strict=True)
    async def never_asks(ctx: ScenarioContext) -> None:
        ctx.cassette(path)  # strict (the scenario's default): unplayed interactions fail

    trace = never_asks.run()
    assert [f["check"] for f in trace.failures] == ["model:text"]

    @scenario(name="never-asks-lenient", strict=True)
    async def lenient(ctx: ScenarioContext) -> None:
        ctx.cassette(path, strict=False)

    lenient.run().assert_ok()


def test_cassette_names_are_unique_and_bad_files_raise() -> None:
    from cassettes.errors import CassetteError

    async def body(ctx: ScenarioContext) -> None:
        ctx.model(["hi"], name="text")
        with pytest.raises(ValueError, match="already exists"):
            ctx.cassette(SHIPPED / "openai-chat" / "text.yaml")
        with pytest.raises(CassetteError):
            ctx.cassette(ROOT / "no-such-cassette.yaml")

    trace = Scenario("dup", body).run()
    assert trace.outcome == "completed", trace.summary()


def test_the_simulator_does_not_import_cassettes() -> None:
    code = (
        "import sys, simulator, simulator.scenario, simulator.fake_llm, simulator.fake_tools\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] == 'cassettes')))"
    )
    out = subprocess.run([sys.executable, "-c", "import json\n" + code], capture_output=True,
                         text=True, cwd=ROOT, check=True)
    assert json.loads(out.stdout) == []
