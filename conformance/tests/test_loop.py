"""Section 3: inbox and the driver loop (INBOX-1, LOOP-1..10)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from conformance import fakes
from conformance.fakes import FakeModel, respond
from conformance.harness import Kit
from reference_loop import vocabulary as v

from ._support import COMPLETED, USER, Run, boom, once, passthrough, request_texts


@pytest.mark.rule("INBOX-1")
def test_two_fifos(run: Run) -> None:
    async def scenario(k: Kit) -> None:
        gate = k.gate()
        a = k.agent()
        k.model.push(fakes.text("A").gate(gate))
        a.send("A")
        await k.until(lambda: bool(k.model.requests), "A's model call")
        a.send("next-1")
        a.steer("now")
        a.send("next-2")
        gate.set()
        await k.idle(a)
        assert k.prompts(a) == [["A"], ["next-1", "next-2"]], "queued prompts form the next turn"
        steering = k.events(a, "steering/message")
        assert [(e["data"]["turn"], e["data"]["content"]) for e in steering] == [(1, [v.text("now")])]
        assert "now" in request_texts(k.model.requests[1]), "steering joins the running turn"

    run(scenario)


@pytest.mark.rule("LOOP-1")
def test_one_driver_for_life(run: Run) -> None:
    async def scenario(k: Kit) -> None:
        a = k.agent()
        await k.settle()
        task = k.service.driver_task(a)
        for prompt in ("one", "two", "three"):
            a.send(prompt)
            await k.idle(a)
            assert k.service.driver_task(a) is task, "the driver was replaced"
        assert k.prompts(a) == [["one"], ["two"], ["three"]]
        assert task is None or not task.done(), "the driver must keep running while the agent lives"

    run(scenario)


@pytest.mark.rule("LOOP-2")
def test_burst_is_one_turn(run: Run) -> None:
    async def scenario(k: Kit) -> None:
        a = k.agent()
        plugin: Any = {"kind": "plugin", "plugin": "p"}
        a.send("one", plugin)
        a.send("two")
        a.send([v.text("three")])
        await k.idle(a)
        assert k.prompts(a) == [["one", "two", "three"]]
        users = k.events(a, "user/message")
        assert [e["data"]["source"] for e in users] == [plugin, USER, USER]
        start = k.events(a, "turn/start")[0]["data"]
        assert start["trigger"] == {"kind": "message", "source": plugin}
        assert len(k.model.requests) == 1

    run(scenario)


@pytest.mark.rule("LOOP-3")
def test_turn_numbers_continue_from_log(run: Run) -> None:
    async def scenario(k: Kit) -> None:
        a = k.agent()
        a.send("one")
        await k.idle(a)
        trigger = {"kind": "message", "source": USER}
        a.session.append("turn/start", {"turn": 7, "trigger": trigger})
        a.session.append("turn/end", {"turn": 7, "reason": COMPLETED})
        a.send("two")
        await k.idle(a)
        a.send("three")
        await k.idle(a)
        turns = [e["data"]["turn"] for e in k.events(a, "turn/start")]
        assert turns == [1, 7, 8, 9]

    run(scenario)


@pytest.mark.rule("LOOP-4")
def test_turn_shape(run: Run) -> None:
    async def scenario(k: Kit) -> None:
        k.record("session/event", "agent/turn-start", "agent/turn-end", "agent/step-start")
        k.on("session/flush", lambda *_: k.notes.append(("session/flush",)))
        a = k.agent()
        a.send("one")
        a.send("two")
        await k.idle(a)
        names = [n[0] if n[0] != "session/event" else n[1] for n in k.notes]
        expected = ["turn/start", "user/message", "user/message", "agent/turn-start", "step/start"]
        assert names[: len(expected)] == expected
        assert names[-3:] == ["turn/end", "agent/turn-end", "session/flush"]
        assert k.noted("agent/turn-end") == [(1, COMPLETED)]

    run(scenario)


@pytest.mark.rule("LOOP-4")
def test_turn_closed_by_boundary_failure_gets_no_turn_end_notification(run: Run) -> None:
    async def scenario(k: Kit) -> None:
        k.record("agent/turn-end")
        k.on("agent/turn-start", once(boom))
        a = k.agent()
        a.send("one")
        await k.idle(a)
        assert [r["kind"] for r in k.reasons(a)] == ["error"]
        assert k.noted("agent/turn-end") == [], "the failure was already announced via agent/error"
        a.send("two")
        await k.idle(a)
        assert k.noted("agent/turn-end") == [(2, COMPLETED)]

    run(scenario)


@pytest.mark.rule("LOOP-5")
def test_step_shape(run: Run) -> None:
    async def scenario(k: Kit) -> None:
        a = k.agent()
        k.record("session/event", "agent/step-start", "agent/step-end", "agent/stream-chunk")

        def recorder(name: str) -> Callable[..., Any]:
            async def listener(*args: object) -> object:
                k.notes.append((name,))
                return await args[-1]()  # type: ignore[operator]

            return listener

        for name in ("agent/request", "agent/step-result", "agent/turn-continuation", "tools/execute"):
            k.on(name, recorder(name))
        k.tool("echo", hook=lambda _args: a.steer("nudge"))
        k.model.push(fakes.tool_calls(("c1", "echo", "{}")).usage(1, 2))
        a.send("hi")
        await k.idle(a)
        names = [n[0] if n[0] != "session/event" else n[1] for n in k.notes]
        step1 = names[names.index("step/start"): names.index("agent/turn-continuation") + 1]
        dedup = [n for i, n in enumerate(step1) if i == 0 or n != step1[i - 1]]
        assert dedup == [
            "step/start", "agent/step-start", "agent/request", "assistant/chunk", "agent/stream-chunk",
            "assistant/chunk", "agent/stream-chunk", "assistant/chunk", "agent/stream-chunk",
            "assistant/chunk", "agent/stream-chunk", "assistant/chunk", "agent/stream-chunk",
            "agent/step-result", "assistant/message", "usage", "tool/call", "tools/execute", "tool/result",
            "steering/message", "step/end", "agent/step-end", "agent/turn-continuation",
        ]

    run(scenario)


@pytest.mark.rule("LOOP-6")
def test_step_result_rewrite_is_logged_and_dispatched(run: Run) -> None:
    async def scenario(k: Kit) -> None:
        a = k.agent()
        echo = k.tool("echo")
        rewritten = {"role": "assistant", "content": [v.text("rewritten"), v.tool_call("c9", "echo", '{"n":9}')]}

        async def rewrite(agent: object, turn: int, step: int, message: object, next: object) -> object:
            await next()  # type: ignore[operator]
            return rewritten if step == 1 else await next()  # type: ignore[operator]

        k.on("agent/step-result", rewrite)
        k.model.push(fakes.text("original"))
        a.send("hi")
        await k.idle(a)
        first = k.events(a, "assistant/message")[0]["data"]["content"]
        assert first == rewritten["content"]
        assert [e["data"]["call_id"] for e in k.events(a, "tool/call")] == ["c9"]
        assert echo.call_args == [{"n": 9}]

    run(scenario)


@pytest.mark.rule("LOOP-7")
def test_request_without_model(run: Run) -> None:
    async def scenario(k: Kit) -> None:
        a = k.service.create("modelless-agent", {})
        k.agents.append(a)
        a.send("hi")
        await k.idle(a)
        (reason,) = k.reasons(a)
        assert reason["kind"] == "error"
        message = reason["message"]
        assert "modelless-agent" in message, f"the error does not name the agent: {message!r}"
        assert "model" in message.lower() and "option" in message.lower() and "agent/request" in message, (
            f"the error does not say to set a model in the options or through agent/request: {message!r}"
        )
        assert k.model.requests == []

    run(scenario)


@pytest.mark.rule("LOOP-8")
def test_late_steering_requeued_without_idle(run: Run) -> None:
    async def scenario(k: Kit) -> None:
        k.record("agent/status", "agent/queued")
        a = k.agent()
        k.on("agent/turn-end", once(lambda *_: a.steer("late")))
        a.send("A")
        await k.idle(a)
        assert k.prompts(a) == [["A"], ["late"]], "late steering must run as the next turn"
        assert k.statuses() == ["running", "idle"], "no idle transition between the turns"
        assert k.events(a, "steering/message") == []

    run(scenario)


@pytest.mark.rule("LOOP-8")
def test_queued_during_turn_runs_without_idle(run: Run) -> None:
    async def scenario(k: Kit) -> None:
        k.record("agent/status")
        a = k.agent()
        k.model.push(fakes.text("A").hook(lambda: a.send("B")))
        a.send("A")
        await k.idle(a)
        assert k.prompts(a) == [["A"], ["B"]]
        assert k.statuses() == ["running", "idle"]

    run(scenario)


@pytest.mark.rule("LOOP-9")
def test_queued_notifications(run: Run) -> None:
    async def scenario(k: Kit) -> None:
        k.record("agent/queued", "agent/steering")
        plugin: Any = {"kind": "plugin", "plugin": "p"}
        gate = k.gate()
        a = k.agent()
        k.model.push(fakes.text("A").gate(gate))
        a.send("A")
        await k.until(lambda: bool(k.model.requests), "A's model call")
        a.steer("S", plugin)
        gate.set()
        await k.idle(a)
        meta = [n[1] for n in k.noted("agent/queued")]
        assert meta == [{"source": USER, "steering": False}, {"source": plugin, "steering": True}]
        steering = k.noted("agent/steering")
        assert len(steering) == 1 and steering[0][0] == 1 and steering[0][2] == plugin

    run(scenario)


@pytest.mark.rule("LOOP-10")
def test_adapter_gets_rewritten_request(run: Run) -> None:
    async def scenario(k: Kit) -> None:
        other = FakeModel(default=respond.text("ok"))
        k.service.register_model("other", other)
        a = k.agent()

        async def reroute(agent: object, turn: int, step: int, request: dict, next: object) -> object:
            value = await next()  # type: ignore[operator]
            return {**value, "model": "other", "system": "REWRITTEN"}

        k.on("agent/request", reroute)
        k.on("agent/request", passthrough)
        a.send("hi")
        await k.idle(a)
        assert k.model.requests == []
        assert len(other.requests) == 1
        assert other.requests[0]["model"] == "other" and other.requests[0]["system"] == "REWRITTEN"
        assert request_texts(other.requests[0]) == ["hi"]

    run(scenario)
