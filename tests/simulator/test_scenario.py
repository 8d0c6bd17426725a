"""The scenario API: setup, actors at times and after events, checks, traces."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from reference_loop import vocabulary as v
from reference_loop.abort import AbortController
from simulator.fake_llm import respond
from simulator.scenario import (
    Scenario,
    ScenarioContext,
    ScenarioFailed,
    Trace,
    event_before,
    expect_event,
    expect_no_event,
    expect_outcome,
    scenario,
)
from simulator.strategies import RandomStrategy

ROOT = Path(__file__).resolve().parents[2]


def timeline(trace: Trace, *skip: str) -> list[tuple[int, str]]:
    return [(e["t_us"], e["kind"]) for e in trace.timeline if e["kind"] not in skip]


# --------------------------------------------------------------------------- actors


def test_actors_run_at_virtual_times_in_order() -> None:
    @scenario(name="timed")
    async def timed(ctx: ScenarioContext) -> None:
        ctx.at(2.5, lambda: ctx.observe("b"))
        ctx.at(1.0, lambda: ctx.observe("a"))

        async def slow() -> None:
            ctx.observe("c-start")
            await asyncio.sleep(0.25)
            ctx.observe("c-end")

        ctx.at(3.0, slow, name="slow")
        ctx.later(0.5, lambda: ctx.observe("relative"))

    trace = timed.run()
    assert trace.ok, trace.summary()
    assert timeline(trace, "actor/run") == [
        (500_000, "relative"),
        (1_000_000, "a"),
        (2_500_000, "b"),
        (3_000_000, "c-start"),
        (3_250_000, "c-end"),
    ]
    assert trace.first("actor/run", actor="slow") == {
        "kind": "actor/run",
        "actor": "slow",
        "t_us": 3_000_000,
    }
    assert trace.virtual_time_us == 3_250_000


def test_actor_after_an_event_gets_the_event_and_runs_as_a_task() -> None:
    @scenario(name="after")
    async def after(ctx: ScenarioContext) -> None:
        seen: list[Any] = []

        def pong(ev: dict[str, Any]) -> None:
            seen.append(ev["n"])
            ctx.observe("pong", n=ev["n"])

        ctx.after("ping", pong, where={"n": 2})
        ctx.observe("ping", n=1)
        await asyncio.sleep(1)
        ctx.observe("ping", n=2)
        ctx.observe("sync-after-ping")  # the actor is a separate task: it runs after this
        await asyncio.sleep(1)
        ctx.observe("ping", n=2)  # triggers once only
        ctx.state["seen"] = seen

    trace = after.run()
    assert timeline(trace, "actor/run") == [
        (0, "ping"),
        (1_000_000, "ping"),
        (1_000_000, "sync-after-ping"),
        (1_000_000, "pong"),
        (2_000_000, "ping"),
    ]
    assert trace.context is not None and trace.context.seen == [2]


def test_immediate_every_predicate_and_already_happened() -> None:
    @scenario(name="after-variants")
    async def variants(ctx: ScenarioContext) -> None:
        ctx.observe("early", n=0)
        ctx.after("early", lambda: ctx.observe("saw-early"))  # already happened: triggers at once
        ctx.after(
            "tick",
            lambda ev: ctx.observe("inline", n=ev["n"]),
            immediate=True,
            every=True,
            where=lambda ev: ev["n"] % 2 == 1,
        )
        for n in range(4):
            ctx.observe("tick", n=n)

    trace = variants.run()
    kinds = [(e["kind"], e.get("n")) for e in trace.timeline if e["kind"] != "actor/run"]
    assert kinds == [
        ("early", 0),
        ("tick", 0),
        ("tick", 1),
        ("inline", 1),
        ("tick", 2),
        ("tick", 3),
        ("inline", 3),
        ("saw-early", None),
    ]


def test_untriggered_actors_are_listed_and_required_ones_fail() -> None:
    @scenario(name="untriggered")
    async def body(ctx: ScenarioContext) -> None:
        ctx.after("never", lambda: None, name="optional")
        ctx.after("never", lambda: None, name="needed", where={"x": 1}, required=True)

    trace = body.run()
    assert trace.untriggered == ["needed", "optional"]
    assert trace.failures == [
        {"check": "actor:needed", "message": "never triggered: no event kind='never' with x=1"}
    ]


def test_actor_errors_become_failures_and_the_run_goes_on() -> None:
    @scenario(name="actor-error")
    async def body(ctx: ScenarioContext) -> None:
        def bad() -> None:
            raise ValueError("actor broke")

        ctx.at(1.0, bad, name="bad")
        ctx.at(2.0, lambda: ctx.observe("still-here"))

    trace = body.run()
    assert trace.outcome == "completed"
    assert trace.failures == [{"check": "actor:bad", "message": "raised ValueError: actor broke"}]
    assert trace.first("actor/error") == {
        "kind": "actor/error",
        "actor": "bad",
        "error": "ValueError: actor broke",
        "t_us": 1_000_000,
    }
    assert trace.first("still-here") is not None


def test_declared_actors_setup_teardown_spawn_and_state() -> None:
    sc = Scenario("declared", description="actors declared on the scenario")
    order: list[str] = []

    @sc.setup
    def build(ctx: ScenarioContext) -> None:
        ctx.counter = 0  # an unknown attribute lives in ctx.state
        ctx.on_teardown(lambda: order.append(f"teardown counter={ctx.counter}"))

    @sc.actor(at=1.0)
    def bump(ctx: ScenarioContext) -> None:
        ctx.state["counter"] += 1
        order.append("bump")

    @sc.actor(after="bumped")
    async def react(ctx: ScenarioContext, event: dict[str, Any]) -> None:
        order.append(f"react {event['kind']}")

    @sc.setup
    async def worker(ctx: ScenarioContext) -> None:
        async def work() -> None:
            await asyncio.sleep(2)
            ctx.observe("bumped")
            order.append("worker")

        ctx.spawn(work, name="worker")

    trace = sc.run()
    assert trace.ok, trace.summary()
    assert order == ["bump", "worker", "react bumped", "teardown counter=1"]
    assert trace.context is not None and trace.context.state == {"counter": 1}
    with pytest.raises(AttributeError, match="no attribute or state entry 'missing'"):
        trace.context.missing  # noqa: B018


# --------------------------------------------------------------------------- checks


def test_checks_pass_and_fail_with_clear_messages() -> None:
    def returns_message(trace: Trace) -> str | None:
        return None if len(trace.timeline) > 10 else f"only {len(trace.timeline)} events"

    def asserts(trace: Trace) -> None:
        assert trace.outcome == "deadlock", "expected a deadlock"

    def crashes(trace: Trace) -> None:
        raise KeyError("nope")

    sc = Scenario(
        "checks",
        checks=[
            expect_event("a"),
            expect_event("a", count=2),
            expect_event("missing"),
            expect_no_event("b", n=1),
            event_before("b", "a"),
            expect_outcome("completed"),
            returns_message,
            asserts,
            crashes,
            lambda trace: False,
        ],
    )

    @sc.setup
    def emit(ctx: ScenarioContext) -> None:
        ctx.observe("a")
        ctx.observe("b", n=1)
        ctx.expect(1 + 1 == 3, "arithmetic is broken")
        ctx.check(lambda trace: trace.first("a") is not None, name="dynamic-pass")

    trace = sc.run()
    assert not trace.ok
    assert trace.failures == [
        {"check": "ctx.expect", "message": "arithmetic is broken"},
        {"check": "expect_event(a)", "message": "expected 2 event(s) kind='a', found 1"},
        {
            "check": "expect_event(missing)",
            "message": "no event kind='missing' in the timeline (kinds seen: ['a', 'b'])",
        },
        {"check": "expect_no_event(b)", "message": "unexpected event kind='b' with n=1 at t_us=0"},
        {"check": "event_before(b, a)", "message": "'b' happened after 'a'"},
        {"check": "returns_message", "message": "only 2 events"},
        {"check": "asserts", "message": trace.failures[6]["message"]},
        {"check": "crashes", "message": "check raised KeyError: 'nope'"},
        {"check": "check", "message": "check returned False"},
    ]
    assert trace.failures[6]["message"].startswith(
        "expected a deadlock"
    )  # (+ pytest's explanation)
    with pytest.raises(ScenarioFailed, match=r"failed check expect_event\(missing\): no event"):
        trace.assert_ok()


def test_fake_problems_become_failures() -> None:
    @scenario(name="fakes", strict=True)
    async def body(ctx: ScenarioContext) -> None:
        model = ctx.model(["one"], name="m")
        ctx.model(["unused"], name="spare")
        tool = ctx.tool("t", results=["r1", "r2"])
        for _ in range(2):  # the second call is past the end: contained, like a loop would
            try:
                async for _chunk in model.stream({"model": "m", "messages": []}):
                    pass
            except AssertionError:
                pass
        await tool.execute(
            {}, {"call_id": "c", "agent_id": "a", "signal": AbortController().signal}
        )

    trace = body.run()
    assert trace.outcome == "completed"
    assert trace.failures == [
        {
            "check": "model:m",
            "message": "fake model 'm': call #2 but the script has only 1 response(s) (last message: none)",
        },
        {
            "check": "model:spare",
            "message": "fake model 'spare': 1 of 1 scripted responses never requested (responses #1..#1; the model was called 0 time(s))",
        },
        {
            "check": "tool:t",
            "message": "fake tool 't': 1 of 2 scripted results never used (1 call(s))",
        },
    ]


def test_failed_run_and_deadlock_are_in_the_trace() -> None:
    @scenario(name="boom")
    async def boom(ctx: ScenarioContext) -> None:
        await asyncio.sleep(1)
        raise RuntimeError("body failed")

    trace = boom.run()
    assert (trace.outcome, trace.error) == ("failed", "RuntimeError: body failed")
    with pytest.raises(ScenarioFailed, match="RuntimeError: body failed"):
        trace.assert_ok()

    @scenario(name="stuck")
    async def stuck(ctx: ScenarioContext) -> None:
        await ctx.gate("never").wait()

    trace = stuck.run()
    assert trace.outcome == "deadlock"
    assert trace.pending == [{"task": "main", "coro": "scenario:stuck"}]


# --------------------------------------------------------------------------- a small agent-like world


async def tiny_loop(ctx: ScenarioContext) -> str:
    """A toy agent loop (model -> tools -> model) driving the fakes, to exercise them together."""
    model, tools = ctx.models["fake"], ctx.tools
    messages: list[v.Message] = [v.message("user", [v.text("go")])]
    while True:
        ctrl = AbortController()
        ctx.controller = ctrl
        blocks: list[v.Block] = []
        finish = "stop"
        async for chunk in model.stream(
            {"model": "fake", "messages": messages, "signal": ctrl.signal}
        ):
            if chunk["type"] == "block-end":
                blocks.append(chunk["block"])
            elif chunk["type"] == "finish":
                finish = chunk["reason"]["kind"]
        messages.append(v.message("assistant", blocks))
        if finish != "tool-calls":
            return finish
        for block in blocks:
            if block["type"] == "tool-call":
                try:
                    out = await tools[block["name"]].execute(
                        json.loads(block["arguments"]),
                        {"call_id": block["id"], "agent_id": "a", "signal": ctrl.signal},
                    )
                except Exception as exc:
                    out = f"Error: {exc}"
                messages.append(v.message("user", [v.tool_result(block["id"], [v.text(str(out))])]))
                if ctrl.signal.aborted:
                    return "aborted"


def cancel_world() -> Scenario:
    sc = Scenario("cancel-in-tool", checks=[expect_event("tool/done", outcome="aborted")])

    @sc.setup
    def world(ctx: ScenarioContext) -> None:
        ctx.model(
            [respond.text("calling") + respond.tool_call("slow", {"n": 1}, fragments=2), "done"]
        )
        ctx.tool(
            "slow", "late", latency=10.0, hook=lambda args, c: ctx.observe("tool-hook", n=args["n"])
        )
        ctx.after("tool-hook", lambda: ctx.controller.abort("user"), name="canceller")

    async def body(ctx: ScenarioContext) -> str:
        return await tiny_loop(ctx)

    sc.body = body
    return sc


def test_cancel_from_an_actor_during_a_tool() -> None:
    trace = cancel_world().run()
    assert trace.failures == []  # not strict: the unused "done" response is fine
    assert trace.result is not None and trace.result.value == "aborted"
    assert timeline(trace) == [
        (0, "model/request"),
        (0, "model/done"),
        (0, "tool/start"),
        (0, "tool-hook"),
        (0, "actor/run"),
        (0, "tool/done"),
    ]


# --------------------------------------------------------------------------- determinism and JSON


def test_trace_json_is_byte_stable_across_runs_and_round_trips() -> None:
    first = cancel_world().run(strategy=RandomStrategy(), seed=5).to_json()
    second = cancel_world().run(strategy=RandomStrategy(), seed=5).to_json()
    assert first == second
    data = json.loads(first)
    assert data["format"] == "loopkit-trace/1" and data["strategy"] == "random"
    assert all(isinstance(e["t_us"], int) for e in data["timeline"])
    assert Trace.from_json(first).to_json() == first
    with pytest.raises(ValueError, match="not a loopkit trace"):
        Trace.from_json('{"format": "other"}')
    with pytest.raises(ValueError, match="not JSON"):
        Trace.from_json("nope")


def test_replay_reproduces_the_trace() -> None:
    sc = cancel_world()
    recorded = sc.run(strategy=RandomStrategy(), seed=11)
    replayed = sc.replay(recorded)
    assert replayed.timeline == recorded.timeline
    assert replayed.schedule["choices"] == recorded.schedule["choices"]
    assert sc.replay(recorded.to_json()).timeline == recorded.timeline


def test_explore_finds_a_check_failure_and_it_replays() -> None:
    """Two actors race to write a shared value; a check wants the 'b' write to land last (FIFO)."""
    sc = Scenario(
        "race", checks=[lambda t: None if t.events("write")[-1]["by"] == "b" else "a wrote last"]
    )

    @sc.setup
    def world(ctx: ScenarioContext) -> None:
        for who in ("a", "b"):

            async def writer(who: str = who) -> None:
                await asyncio.sleep(0)
                ctx.observe("write", by=who)

            ctx.spawn(writer, name=who)

    assert sc.run().ok
    found = sc.explore(strategy="random", budget=50)
    assert found is not None and found.outcome == "failed"
    assert found.failures == [{"check": "check", "message": "a wrote last"}]
    assert found.error == "ScenarioFailed: check: a wrote last"
    assert sc.replay(found).timeline == found.timeline


def test_same_trace_bytes_in_two_processes_with_different_hash_seeds(tmp_path: Path) -> None:
    script = tmp_path / "scenario_main.py"
    script.write_text(
        textwrap.dedent(
            """
            import asyncio, sys
            from simulator.fake_llm import respond
            from simulator.scenario import Scenario
            from simulator.strategies import RandomStrategy

            sc = Scenario("hash-seeds")

            @sc.setup
            def world(ctx):
                model = ctx.model([respond.text("hello world", deltas=3).timing(0.1, 0.2)])
                names = {"x", "y", "z", "w"}  # set order depends on PYTHONHASHSEED: the trace sorts it
                for name in sorted(names):
                    async def actor(name=name):
                        await asyncio.sleep(0.3)
                        ctx.observe("actor", name=name, names=names)
                    ctx.spawn(actor, name="actor")

                async def consume():
                    async for chunk in model.stream({"model": "fake", "messages": []}):
                        ctx.observe("chunk", type=chunk["type"])
                ctx.spawn(consume, name="consumer")

            sys.stdout.write(sc.run(strategy=RandomStrategy(), seed=3).to_json())
            """
        )
    )
    outputs = []
    for hash_seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed, "PYTHONPATH": str(ROOT)}
        proc = subprocess.run(
            [sys.executable, str(script)], capture_output=True, env=env, check=True, timeout=60
        )
        outputs.append(proc.stdout)
    assert outputs[0] == outputs[1]
    assert b'"kind":"chunk"' in outputs[0]


def test_actor_specs_check_decorator_wait_for_and_budget() -> None:
    def poke(ctx: ScenarioContext) -> None:
        ctx.observe("poke")

    def on_request(ctx: ScenarioContext, event: dict[str, Any]) -> None:
        ctx.observe("saw-call", call=event["call"])

    sc = Scenario(
        "specs",
        actors=[("at", 1.0, poke), ("after", "model/request", on_request, {"where": {"call": 2}})],
    )

    @sc.check
    def two_calls(trace: Trace) -> str | None:
        n = len(trace.events("model/request"))
        return None if n == 2 else f"{n} model calls"

    @sc.setup
    async def world(ctx: ScenarioContext) -> None:
        model = ctx.model(["a", "b"])
        event = await ctx.wait_for("poke")
        ctx.observe("waited", at_us=round(event["t"] * 1e6))
        for _ in range(2):
            async for _chunk in model.stream({"model": "fake", "messages": []}):
                pass

    trace = sc.run()
    assert trace.ok, trace.summary()
    assert [
        (e["kind"], e.get("call")) for e in trace.timeline if e["kind"] in ("waited", "saw-call")
    ] == [
        ("waited", None),
        ("saw-call", 2),
    ]

    @scenario(name="forever")
    async def forever(ctx: ScenarioContext) -> None:
        while True:
            await asyncio.sleep(60)

    limited = forever.run(max_time=3600)
    assert limited.outcome == "budget-exceeded"
    assert limited.ok is False
