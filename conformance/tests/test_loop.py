"""Section 3: inbox and the driver loop (INBOX-1, LOOP-1..10)."""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import Callable
from typing import Any

import pytest

from conformance import fakes
from conformance.adapter import AgentHandle
from conformance.fakes import FakeModel, respond
from conformance.harness import MODEL, Kit
from reference_loop import vocabulary as v

from ._support import (
    COMPLETED,
    USER,
    Run,
    aborted,
    boom,
    once,
    passthrough,
    request_texts,
    texts,
    throws_on,
)


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
    # LOOP-1 names one driver for the agent's life, not one asyncio task: a driver may run each
    # of its phases as a task of its own (indie60d, an independent loop of session 48), so the
    # test asks what the rule states: between turns the driver is still there, waiting (the task
    # the adapter names is not done), and each prompt runs as its own turn, in order.
    async def scenario(k: Kit) -> None:
        a = k.agent()

        def assert_driver_lives() -> None:
            task = k.service.driver_task(a)
            assert task is None or not task.done(), "the driver must keep running while the agent lives"

        await k.settle()
        assert_driver_lives()
        for prompt in ("one", "two", "three"):
            a.send(prompt)
            await k.idle(a)
            assert_driver_lives()
        assert k.prompts(a) == [["one"], ["two"], ["three"]]

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


@pytest.mark.rule("LOOP-4", "INBOX-1")
@pytest.mark.parametrize("hook", ["agent/turn-start", "agent/step-start"])
def test_prompt_sent_once_the_turn_opened_is_the_next_turns(run: Run, hook: str) -> None:
    # The turn drained its prompts before turn/start; a send() once it is open (from its
    # agent/turn-start or agent/step-start listener) is queued for the next turn, never logged
    # into this one (LOOP-4: turn/start, the drained user/messages, agent/turn-start, steps).
    async def scenario(k: Kit) -> None:
        a = k.agent()
        k.on(hook, once(lambda *_: a.send("B")), needs="a send from inside the open turn")
        a.send("A")
        await k.idle(a)  # B was queued during A's turn: released once B's turn ran (IDLE-2)
        assert k.prompts(a) == [["A"], ["B"]], "a prompt sent once the turn opened belongs to the next turn"
        assert k.reasons(a) == [COMPLETED, COMPLETED]

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
def test_flush_listeners_run_concurrently(run: Run) -> None:
    # 0a/0b: "session/flush runs all its listeners concurrently and is awaited". The first
    # listener waits for the second to have started: run one after the other, the flush (and so
    # the agent) never finishes.
    async def scenario(k: Kit) -> None:
        second_started = asyncio.Event()
        order: list[str] = []

        async def first(*_args: object) -> None:
            order.append("first")
            await asyncio.wait_for(second_started.wait(), 5.0)
            order.append("first done")

        async def second(*_args: object) -> None:
            order.append("second")
            second_started.set()

        k.on("session/flush", first)
        k.on("session/flush", second)
        a = k.agent()
        a.send("one")
        await k.idle(a)
        assert "first done" in order and order.index("second") < order.index("first done"), (
            f"the flush's listeners ran one after the other: {order}")
        assert k.reasons(a) == [COMPLETED]

    run(scenario)


@pytest.mark.rule("LOOP-4")
@pytest.mark.parametrize("boundary", ["agent/turn-start", "agent/step-start", "session/event(turn/start)"])
def test_turn_closed_by_boundary_failure_gets_no_turn_end_notification(run: Run, boundary: str) -> None:
    # LOOP-4 names the three: a turn closed because an agent/turn-start or agent/step-start
    # listener, or a session/event listener on turn/start, threw gets no agent/turn-end. Only
    # the notification is skipped: the turn still ends with its awaited session/flush (a loop
    # that closed such a turn's log and skipped its flush passed the suite: session 55).
    async def scenario(k: Kit) -> None:
        k.record("agent/turn-end")
        flushed: list[int] = []
        k.on("session/flush", lambda *_: flushed.append(len(k.events(a, "turn/end"))))
        if boundary.startswith("session/event"):
            thrown: list[int] = []

            def on_turn_start(_session: object, event: Any) -> None:
                if event.get("type") == "turn/start" and not thrown:
                    thrown.append(1)
                    raise RuntimeError("turn/start listener failed")

            k.on("session/event", on_turn_start)
        else:
            k.on(boundary, once(boom))
        a = k.agent()
        a.send("one")
        await k.idle(a)
        assert [r["kind"] for r in k.reasons(a)] == ["error"]
        assert k.noted("agent/turn-end") == [], "the failure was already announced via agent/error"
        assert flushed == [1], f"the failed turn's session/flush, after its turn/end (flushes: {flushed})"
        a.send("two")
        await k.idle(a)
        assert k.noted("agent/turn-end") == [(2, COMPLETED)]
        assert flushed == [1, 2]

    run(scenario)


@pytest.mark.rule("LOOP-4", "ERR-2")
@pytest.mark.parametrize("listener", ["agent/step-end", "agent/request", "agent/turn-continuation",
                                      "session/event on user/message", "session/event on step/start"])
def test_turn_failed_by_another_listener_still_notifies_its_end(run: Run, listener: str) -> None:
    # LOOP-4's turn shape ends turn/end, agent/turn-end; its exemption names the boundary listeners
    # only (agent/turn-start, agent/step-start, session/event on turn/start). A turn another
    # listener failed (ERR-2; a session/event listener on the prompt's user/message, ERR-4) is
    # notified ended, with the reason turn/end logged.
    async def scenario(k: Kit) -> None:
        k.record("agent/turn-end")
        if listener == "agent/step-end":
            k.on(listener, once(boom))
        elif listener.startswith("session/event on "):
            k.on("session/event", throws_on(listener.removeprefix("session/event on "), []))
        else:
            thrown: list[int] = []

            async def failing(*args: Any) -> Any:
                if not thrown:
                    thrown.append(1)
                    raise RuntimeError(f"{listener} listener failed")
                return await args[-1]()

            k.on(listener, failing)
        a = k.agent()
        a.send("one")
        await k.idle(a)
        reasons = k.reasons(a)
        assert [r["kind"] for r in reasons] == ["error"]
        assert k.noted("agent/turn-end") == [(1, reasons[0])], (
            f"a turn a throwing {listener} listener failed was not notified ended (LOOP-4): {k.noted('agent/turn-end')}")

    run(scenario)


@pytest.mark.rule("CONT-1", "LOOP-6")
@pytest.mark.parametrize("case", ["calls finished stop", "calls with no finish", "calls removed by step-result"])
def test_the_default_continuation_follows_the_steps_tool_calls_not_its_finish(run: Run, case: str) -> None:
    # CONT-1: the default is "the step had tool calls (or steering was drained after it)", what
    # the step's message holds (LOOP-6: the message agent/step-result returned), not the finish
    # kind the model reported: providers finish a tool-call step `stop`, or with no finish at all
    # (ASM-4), and a plugin may take the calls out of a `tool-calls` step.
    async def scenario(k: Kit) -> None:
        k.tool("echo")
        a = k.agent()
        call = fakes.tool_calls(("c1", "echo", "{}"))
        if case == "calls finished stop":
            call = call.finish("stop")
        elif case == "calls with no finish":
            call = call.finish(None)
        else:
            async def strip(*args: Any) -> Any:
                message = dict(await args[-1]())
                message["content"] = [b for b in message["content"] if b.get("type") != "tool-call"] or [v.text("none")]
                return message

            k.on("agent/step-result", strip)
        k.model.push(call, fakes.text("after the tool"))
        a.send("one")
        await k.idle(a)
        steps = len(k.events(a, "step/start"))
        if case == "calls removed by step-result":
            assert steps == 1 and len(k.model.requests) == 1, (
                f"the returned message has no tool calls: the turn stops after its step (CONT-1, LOOP-6): {steps} steps")
        else:
            assert len(k.events(a, "tool/result")) == 1
            assert steps == 2 and len(k.model.requests) == 2, (
                f"a step whose message had tool calls ({case}) continues: the model must see their results "
                f"(CONT-1): {steps} steps")
        assert k.reasons(a) == [COMPLETED]

    run(scenario)


@pytest.mark.rule("LOOP-5", "CANCEL-STEP", "CANCEL-MID")
@pytest.mark.parametrize("how", ["cancel at agent/turn-start", "cancel at agent/step-start",
                                 "cancel between chunks", "abort between chunks", "model raises"])
def test_a_step_ended_early_is_logged_closed_before_it_is_notified(run: Run, how: str) -> None:
    # LOOP-5's step shape ends with `step/end` appended, then `agent/step-end`, and a step closed
    # early keeps that shape: a dropped step is "opened and closed empty (step/start, step/end and
    # their notifications)" (CANCEL-STEP), an aborted or failed one is closed as any other. A loop
    # with a second closing path for those must not notify the step ended while its log has it open.
    async def scenario(k: Kit) -> None:
        k.record("session/event", "agent/step-end")
        a = k.agent()
        verb, _, where = how.partition(" ")
        if how == "model raises":
            k.model.push(respond.raises("model failed"))
        elif where.endswith("chunks"):
            k.model.push(respond.text("partial").hang(after=1).on_abort("finish"))
            k.on("agent/stream-chunk", once(lambda *_: getattr(a, verb)("stop")),
                 needs="the stop lands between two chunks")
        else:
            k.on(where.removeprefix("at "), once(lambda *_: a.cancel("stop")))
        a.send("A")
        await k.idle(a)
        order = [n[1] if n[0] == "session/event" else n[0] for n in k.notes]
        order = [n for n in order if n in ("step/end", "agent/step-end")]
        assert order and order[0] == "step/end", (
            f"{how}: agent/step-end was emitted before step/end was appended (LOOP-5): {order}")
        # A dropped step is notified closed (CANCEL-STEP); whether a failed or aborted one is, the
        # rules leave open: when it is, once and after its step/end.
        expected = {1} if where.startswith("at ") else {0, 1}
        assert order.count("agent/step-end") in expected, f"{how}: the step is notified ended once: {order}"

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
        # Each chunk is appended as assistant/chunk and emitted as agent/stream-chunk; the spec
        # fixes the order of step/start before agent/step-start and of agent/step-result before
        # assistant/message, not the order within a chunk's pair: read each pair as one "chunk".
        shape: list[str] = []
        i = 0
        while i < len(step1):
            if set(step1[i : i + 2]) == {"assistant/chunk", "agent/stream-chunk"}:
                shape.append("chunk")
                i += 2
            else:
                shape.append(step1[i])
                i += 1
        assert shape == [
            "step/start", "agent/step-start", "agent/request", "chunk", "chunk", "chunk", "chunk", "chunk",
            "agent/step-result", "assistant/message", "usage", "tool/call", "tools/execute", "tool/result",
            "steering/message", "step/end", "agent/step-end", "agent/turn-continuation",
        ]

    run(scenario)


@pytest.mark.rule("LOOP-6", "ABORT-1")
@pytest.mark.parametrize("verb", ["abort", "cancel"])
def test_a_step_stopped_inside_the_step_result_waterfall_logs_no_message(run: Run, verb: str) -> None:
    # A moderating agent/step-result listener stops the step, yields, and then replaces the
    # message. A loop may abandon the waterfall at the stop (it then returned nothing: no
    # assistant/message) or await it (the moderated message): LOOP-6, the log records what the
    # waterfall returned. Logging the assembled message logs what the listener was replacing.
    # The turn ends aborted{reason} either way.
    async def scenario(k: Kit) -> None:
        a = k.agent()
        k.model.push(fakes.text("unmoderated"))
        moderated = [v.text("moderated")]

        async def moderate(*args: Any) -> Any:
            a.abort("moderated") if verb == "abort" else a.cancel("moderated")
            await asyncio.sleep(0)
            message = await args[-1]()
            return {**message, "content": moderated}

        k.on("agent/step-result", moderate)
        a.send("hi")
        await k.idle(a)
        logged = [e["data"]["content"] for e in k.events(a, "assistant/message")]
        assert logged in ([], [moderated]), (
            f"the step stopped inside agent/step-result logged {logged}: none, or what the waterfall returned")
        assert k.reasons(a) == [aborted("moderated")]

    run(scenario)


@pytest.mark.rule("LOOP-6")
def test_step_result_rewrite_is_logged_and_dispatched(run: Run) -> None:
    async def scenario(k: Kit) -> None:
        a = k.agent()
        echo = k.tool("echo")
        rewritten = {"role": "assistant", "content": [v.text("rewritten"), v.tool_call("c9", "echo", '{"n":9}')]}

        async def rewrite(agent: object, turn: int, step: int, message: object, next: object) -> object:
            value = await next()  # type: ignore[operator]
            return rewritten if step == 1 else value

        k.on("agent/step-result", rewrite)
        k.model.push(fakes.text("original"))
        a.send("hi")
        await k.idle(a)
        first = k.events(a, "assistant/message")[0]["data"]["content"]
        assert first == rewritten["content"]
        assert [e["data"]["call_id"] for e in k.events(a, "tool/call")] == ["c9"]
        assert echo.call_args == [{"n": 9}]

    run(scenario)


def _assert_no_model_error(k: Kit, agent: AgentHandle, agent_id: str) -> None:
    """LOOP-7's error: the step failed (the turn ends error, with its error event in a step) and
    the message names the agent, says it has no model, and names the two ways to set one (the
    options, agent/request). Wording beyond that is the implementation's."""
    (reason,) = k.reasons(agent)
    assert reason["kind"] == "error", f"the turn must end error: {reason}"
    message = reason["message"]
    assert agent_id in message, f"the error does not name the agent: {message!r}"
    assert re.search(r"(?i)\bmodel\b", message), f"the error does not say it has no model: {message!r}"
    assert re.search(r"(?i)option", message) and "agent/request" in message, (
        f"the error does not say to set a model in the options or through agent/request: {message!r}"
    )
    errors = k.events(agent, "error")
    assert len(errors) == 1 and errors[0]["data"]["message"] == message
    assert errors[0]["data"]["step"] >= 1, "the step fails (its error lies in a step)"
    assert k.model.requests == []


@pytest.mark.rule("LOOP-7")
def test_request_without_model(run: Run) -> None:
    async def scenario(k: Kit) -> None:
        a = k.service.create("modelless-agent", {})
        k.agents.append(a)
        a.send("hi")
        await k.idle(a)
        _assert_no_model_error(k, a, "modelless-agent")

    run(scenario)


@pytest.mark.rule("LOOP-7")
def test_request_without_model_after_agent_request(run: Run) -> None:
    # "None set by agent/request": a listener that rewrites the request but sets no model (it
    # drops the one it got) still leaves the step without a model; one that sets a model fixes
    # an agent created without one.
    async def scenario(k: Kit) -> None:
        a = k.service.create("stripped-agent", {"model": MODEL})
        b = k.service.create("routed-agent", {})
        k.agents += [a, b]

        async def route(agent: object, turn: int, step: int, request: dict, next: object) -> object:
            value = dict(await next())  # type: ignore[operator]
            if value.get("model") == MODEL:
                del value["model"]
            else:
                value["model"] = MODEL
            return value

        k.on("agent/request", route)
        a.send("hi")
        await k.idle(a)
        _assert_no_model_error(k, a, "stripped-agent")
        b.send("hi")
        await k.idle(b)
        assert k.reasons(b) == [COMPLETED], "a model set through agent/request is used"
        assert len(k.model.requests) == 1

    run(scenario)


@pytest.mark.rule("LOOP-8")
def test_late_steering_requeued_without_idle(run: Run) -> None:
    async def scenario(k: Kit) -> None:
        k.record("agent/status")
        a = k.agent()
        k.on("agent/turn-end", once(lambda *_: a.steer("late")), needs="the test steers from it, after the turn's last step")
        a.send("A")
        await k.idle(a)
        assert k.prompts(a) == [["A"], ["late"]], "late steering must run as the next turn"
        assert k.statuses() == ["running", "idle"], "no idle transition between the turns"
        assert k.events(a, "steering/message") == []

    run(scenario)


@pytest.mark.rule("LOOP-8", "INBOX-1", "LOOP-2")
@pytest.mark.parametrize("late", ["agent/turn-end", "session/flush"])
def test_late_steering_joins_the_queue_behind_a_prompt_sent_before_it(run: Run, late: str) -> None:
    # LOOP-8 re-queues steering that arrived too late for its turn "as prompts for a next turn":
    # into the queued FIFO (INBOX-1), behind a prompt sent before that steering was given. So the
    # next turn takes B (sent during turn 1) then S (steered once turn 1 had closed), and its
    # trigger is B's source (LOOP-2: the first message's). A loop putting late steering at the
    # head of the queue, as if it belonged before what was already waiting, reverses them
    # (session 60's blind round K: it passed the suite and the hunt). Steering given before B
    # may go either side of it (when "after the turn" re-queues it is the loop's choice).
    async def scenario(k: Kit) -> None:
        a = k.agent()
        plugin: Any = {"kind": "plugin", "plugin": "reviewer"}
        k.model.push(fakes.text("first").hook(lambda: a.send("B")), fakes.text("second"))
        k.on(late, once(lambda *_: a.steer("S", plugin)), needs="the test steers from it, once turn 1 closed")
        a.send("A")
        await k.idle(a)
        assert k.prompts(a) == [["A"], ["B", "S"]], (
            f"turns took {k.prompts(a)}: B, sent during turn 1, waits in the queue before S, steered too late for "
            "turn 1 and re-queued after it (LOOP-8, INBOX-1)")
        trigger = k.events(a, "turn/start")[1]["data"]["trigger"]
        assert trigger.get("source") == USER, f"turn 2's trigger is its first message's source, B's (LOOP-2): {trigger}"

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
            # provider options a plugin adds: "exactly the request the waterfall returned"
            return {**value, "model": "other", "system": "REWRITTEN", "temperature": 0.25, "metadata": {"trace": "t1"}}

        k.on("agent/request", reroute)
        k.on("agent/request", passthrough)
        a.send("hi")
        await k.idle(a)
        assert k.model.requests == []
        assert len(other.requests) == 1
        assert other.requests[0]["model"] == "other" and other.requests[0]["system"] == "REWRITTEN"
        assert request_texts(other.requests[0]) == ["hi"]
        extra = {key: other.requests[0].get(key) for key in ("temperature", "metadata")}
        assert extra == {"temperature": 0.25, "metadata": {"trace": "t1"}}, (
            f"keys the agent/request listener added did not reach the adapter (LOOP-10): {extra}")

    run(scenario)


@pytest.mark.rule("LOOP-10")
def test_each_step_is_routed_by_its_own_request(run: Run) -> None:
    # LOOP-10 holds per request: a plugin that routes only a turn's second step (a cheaper model
    # for the answer after a tool, say) routes that step, and only that one. A loop that looked
    # the adapter up once per turn sent the second step to the first step's model (session 58's
    # blind round H: the suite and the hunt passed it).
    async def scenario(k: Kit) -> None:
        other = FakeModel(default=respond.text("routed"))
        k.service.register_model("other", other)
        k.tool("echo")
        a = k.agent()
        k.model.push(fakes.tool_calls(("c1", "echo", "{}")), fakes.text("not routed"))

        async def second_step_elsewhere(agent: object, turn: int, step: int, request: dict, next: object) -> object:
            value = await next()  # type: ignore[operator]
            return {**value, "model": "other"} if step == 2 else value

        k.on("agent/request", second_step_elsewhere)
        a.send("hi")
        await k.idle(a)
        assert len(k.model.requests) == 1, (
            f"the agent's own model served {len(k.model.requests)} request(s); only step 1 was left to it: step 2's "
            "request named model 'other' (LOOP-10: a rewritten model name routes the call)")
        assert len(other.requests) == 1 and other.requests[0]["model"] == "other", (
            f"model 'other' served {len(other.requests)} request(s), expected step 2's (LOOP-10)")
        assert k.reasons(a) == [COMPLETED]

    run(scenario)


@pytest.mark.rule("INBOX-1")
def test_two_fifos_during_a_tool(run: Run) -> None:
    # Interleaved sends and steers while a tool runs: each FIFO keeps its own order; steering
    # joins the running turn (its next request), prompts wait for the next turn.
    async def scenario(k: Kit) -> None:
        gate = k.gate()
        held = k.tool("held", gate=gate)
        a = k.agent()
        k.model.push(fakes.tool_calls(("c1", "held", "{}")), fakes.text("after tool"), fakes.text("next turn"))
        a.send("A")
        await k.until(lambda: bool(held.calls), "the tool call")
        a.send("q1")
        a.steer("s1")
        a.send("q2")
        a.steer("s2")
        gate.set()
        await k.idle(a)
        steering = [(e["data"]["turn"], texts(e["data"]["content"])) for e in k.events(a, "steering/message")]
        assert steering == [(1, ["s1"]), (1, ["s2"])]
        assert k.prompts(a) == [["A"], ["q1", "q2"]]
        second = request_texts(k.model.requests[1])
        assert second.index("s1") < second.index("s2") and "q1" not in second, second

    run(scenario)


@pytest.mark.rule("LOOP-1", "IDLE-2")
@pytest.mark.parametrize("bad", ["content", "source"])
def test_a_prompt_send_could_not_take_is_never_stranded(run: Run, bad: str) -> None:
    # A prompt whose content (or source) holds what JSON cannot, and what cannot even be copied
    # (a lock): send() may refuse it (bad input, it raises) or take it (its turn then fails, ERR-8
    # for a source, ERR-1 for content). Either way the driver is not left parked with it queued:
    # when_idle() resolves, and a good prompt sent next runs, alone, and completes. Session 49's
    # review: examples/spec_loop queued it, then raised before waking its driver.
    async def scenario(k: Kit) -> None:
        a = k.agent()
        await k.settle()  # the driver has started and parked at the idle wait
        lock = threading.Lock()
        try:
            if bad == "content":
                a.send([{"type": "text", "text": "locked", "meta": lock}])
            else:
                a.send("locked", {"kind": "user", "handle": lock})  # type: ignore[arg-type]
        except Exception:
            pass
        await k.idle(a, what="when_idle() after a send() the agent could not take (nothing left stranded)")
        before = len(k.reasons(a))
        a.send("next")
        await k.idle(a)
        assert k.reasons(a)[before:] == [COMPLETED], f"the good prompt's turn: {k.reasons(a)[before:]}"
        assert k.prompts(a)[-1] == ["next"], f"the good prompt runs alone: {k.prompts(a)}"

    run(scenario)


@pytest.mark.rule("LOOP-1")
def test_one_turn_at_a_time(run: Run) -> None:
    # The driver runs one turn, then waits for the next: prompts sent while a turn runs never
    # start a second, concurrent turn (one model call in flight at a time), and the driver
    # goes on after an aborted and a cancelled turn (a failed one is ERR-1's).
    async def scenario(k: Kit) -> None:
        gate = k.gate()
        a = k.agent()
        k.model.push(fakes.text("A").gate(gate), fakes.text("B"), respond.hang(), respond.hang())
        a.send("A")
        await k.until(lambda: bool(k.model.requests), "A's model call")
        a.send("B")
        await k.settle()
        assert len(k.model.requests) == 1, "a second turn started while the first was running"
        assert k.types(a).count("turn/start") == 1
        gate.set()
        await k.idle(a)
        a.send("C")
        await k.until(lambda: len(k.model.requests) == 3, "C's model call")
        a.abort()
        await k.idle(a)
        a.send("D")
        await k.until(lambda: len(k.model.requests) == 4, "D's model call")
        a.cancel()
        await k.idle(a)
        a.send("E")
        await k.idle(a)
        assert k.prompts(a) == [["A"], ["B"], ["C"], ["D"], ["E"]]
        assert [r["kind"] for r in k.reasons(a)] == ["completed", "completed", "aborted", "aborted", "completed"]

    run(scenario)


@pytest.mark.rule("LOOP-2")
def test_burst_during_a_turn_is_the_next_turn(run: Run, schedule: str) -> None:
    # A burst sent while a turn runs (the driver is busy, not waiting): the next turn drains
    # all of it, in order, and its trigger carries the first message's source.
    async def scenario(k: Kit) -> None:
        plugin: Any = {"kind": "plugin", "plugin": "p"}
        agent_source: Any = {"kind": "agent", "agent_id": "other"}
        a = k.agent()

        def burst() -> None:
            a.send("B1", agent_source)
            a.send("B2", plugin)
            a.send("B3")

        k.model.push(fakes.text("A").hook(burst), fakes.text("B"))
        a.send("A")
        # Wait for the two turns themselves: quiescence (when_idle) is IDLE-2's, not this rule's.
        await k.until(lambda: k.types(a).count("turn/end") == 2, "the burst's turn to end")
        await k.idle(a)
        assert k.prompts(a) == [["A"], ["B1", "B2", "B3"]]
        starts = k.events(a, "turn/start")
        assert starts[1]["data"]["trigger"] == {"kind": "message", "source": agent_source}
        users = [e["data"]["source"] for e in k.events(a, "user/message")]
        assert users == [USER, agent_source, plugin, USER]
        assert len(k.model.requests) == 2

    run(scenario)


@pytest.mark.rule("LOOP-3")
def test_turn_numbers_count_every_written_turn(run: Run) -> None:
    # Failed and aborted turns take their number; a prompt dropped before its turn/start
    # (window 1) writes none, so it takes none: next = the log's last turn/start + 1.
    async def scenario(k: Kit) -> None:
        a = k.agent()
        await k.settle()
        k.model.push(respond.raises("model failed"), respond.hang())
        a.send("error turn")
        await k.idle(a)
        a.send("aborted turn")
        await k.until(lambda: len(k.model.requests) == 2, "the second model call")
        a.abort()
        await k.idle(a)
        a.send("dropped")
        a.cancel()
        await k.idle(a)
        await k.settle()
        a.send("next")
        await k.idle(a)
        turns = [e["data"]["turn"] for e in k.events(a, "turn/start")]
        assert turns == [1, 2, 3]
        assert [e["data"]["turn"] for e in k.events(a, "turn/end")] == [1, 2, 3]

    run(scenario)


@pytest.mark.rule("LOOP-5")
def test_step_shape_across_steps(run: Run) -> None:
    # Steering added by an agent/step-end listener is drained at the start of the next step,
    # before its step/start; each step keeps step/start before agent/step-start and
    # agent/step-result before assistant/message; each of two tool calls is
    # tool/call, tools/execute, tool/result.
    async def scenario(k: Kit) -> None:
        a = k.agent()
        k.record("session/event", "agent/step-start", "agent/step-end")

        async def step_result(*args: object) -> object:
            k.notes.append(("agent/step-result",))
            return await args[-1]()  # type: ignore[operator]

        async def execute(*args: object) -> object:
            k.notes.append(("tools/execute",))
            return await args[-1]()  # type: ignore[operator]

        k.on("agent/step-result", step_result)
        k.on("tools/execute", execute)
        k.on("agent/step-end", once(lambda *_: a.steer("between steps")))
        k.tool("echo")
        k.model.push(fakes.tool_calls(("c1", "echo", "{}"), ("c2", "echo", "{}")), fakes.text("done"))
        a.send("hi")
        await k.idle(a)
        names = [n[0] if n[0] != "session/event" else n[1] for n in k.notes]
        core = [n for n in names if n not in ("assistant/chunk", "user/message", "turn/start", "turn/end")]
        assert core == [
            "step/start", "agent/step-start", "agent/step-result", "assistant/message",
            "tool/call", "tools/execute", "tool/result", "tool/call", "tools/execute", "tool/result",
            "step/end", "agent/step-end",
            "steering/message", "step/start", "agent/step-start", "agent/step-result", "assistant/message",
            "step/end", "agent/step-end",
        ]

    run(scenario)


@pytest.mark.rule("LOOP-6")
def test_step_result_removing_a_call_is_what_runs(run: Run) -> None:
    # A listener that drops one of the model's tool calls: the log records the message without
    # it, that call is never dispatched, and the next request carries the rewritten message.
    async def scenario(k: Kit) -> None:
        a = k.agent()
        echo = k.tool("echo")

        async def drop_c2(agent: object, turn: int, step: int, message: dict, next: object) -> object:
            value = await next()  # type: ignore[operator]
            return {**value, "content": [b for b in value["content"] if b.get("id") != "c2"]}

        k.on("agent/step-result", drop_c2)
        k.model.push(fakes.tool_calls(("c1", "echo", '{"n": 1}'), ("c2", "echo", '{"n": 2}'), prefix="two calls"))
        a.send("hi")
        await k.idle(a)
        kept = [v.text("two calls"), v.tool_call("c1", "echo", '{"n": 1}')]
        assert k.events(a, "assistant/message")[0]["data"]["content"] == kept
        assert [e["data"]["call_id"] for e in k.events(a, "tool/call")] == ["c1"]
        assert echo.call_args == [{"n": 1}]
        assistant = [m["content"] for m in k.model.requests[1]["messages"] if m["role"] == "assistant"]
        assert assistant[0] == kept

    run(scenario)


@pytest.mark.rule("LOOP-9")
def test_queued_notifications_resolve_sources(run: Run) -> None:
    # The default source is {kind: user} for both verbs; an explicit agent source is carried
    # as given; a steer on an agent that is not running is queued with steering false.
    async def scenario(k: Kit) -> None:
        k.record("agent/queued", "agent/steering")
        agent_source: Any = {"kind": "agent", "agent_id": "peer"}
        gate = k.gate()
        a = k.agent()
        a.steer("idle steer", agent_source)
        await k.idle(a)
        k.model.push(fakes.text("B").gate(gate))
        a.send("B", agent_source)
        await k.until(lambda: len(k.model.requests) == 2, "B's model call")
        a.steer("running steer")
        gate.set()
        await k.idle(a)
        queued = [(texts(c), meta) for c, meta in k.noted("agent/queued")]
        assert queued == [
            (["idle steer"], {"source": agent_source, "steering": False}),
            (["B"], {"source": agent_source, "steering": False}),
            (["running steer"], {"source": USER, "steering": True}),
        ]
        steering = [(turn, texts(content), source) for turn, content, source in k.noted("agent/steering")]
        assert steering == [(2, ["running steer"], USER)]

    run(scenario)


@pytest.mark.rule("LOOP-10")
def test_adapter_gets_rewritten_messages_and_tools(run: Run) -> None:
    # A compaction-style listener replaces the messages and the tools: the adapter receives
    # exactly those (the signal aside, which the fake model does not record).
    async def scenario(k: Kit) -> None:
        a = k.agent()
        k.tool("echo")
        compacted = [{"role": "user", "content": [v.text("compacted history")]}]
        tools = [{"name": "only", "description": "the one tool", "input_schema": {"type": "object"}}]

        async def compact(agent: object, turn: int, step: int, request: dict, next: object) -> object:
            value = await next()  # type: ignore[operator]
            return {**value, "messages": compacted, "tools": tools}

        k.on("agent/request", compact)
        a.send("first")
        await k.idle(a)
        a.send("second")
        await k.idle(a)
        for request in k.model.requests:
            assert request["messages"] == compacted
            assert request["tools"] == tools
            assert request["model"] == MODEL

    run(scenario)


@pytest.mark.rule("LOOP-10", "LOOP-5")
@pytest.mark.parametrize("rewrite", ["replaced", "removed"])
def test_a_request_listener_sees_and_rewrites_the_system_prompt(run: Run, rewrite: str) -> None:
    # LOOP-5: the system prompt is assembled before the agent/request waterfall, so a listener
    # finds it in the request it is handed; LOOP-10: what the listener returns is what the
    # adapter receives, a redacted system prompt, or none (a loop attaching the prompt after the
    # waterfall hides it from the listener and overwrites the listener's rewrite).
    async def scenario(k: Kit) -> None:
        seen: list[Any] = []

        async def redact(agent: object, turn: int, step: int, request: dict, next: object) -> object:
            seen.append(request.get("system"))
            value = dict(await next())  # type: ignore[operator]
            if rewrite == "replaced":
                value["system"] = "REDACTED"
            else:
                value.pop("system", None)
            return value

        k.on("agent/request", redact)
        a = k.agent(system_prompt="Mine")
        a.send("hi")
        await k.idle(a)
        assert seen == ["Mine"], f"the agent/request listener saw system {seen} (LOOP-5: assembled before it)"
        sent = k.model.requests[0].get("system")
        if rewrite == "replaced":
            assert sent == "REDACTED", f"the adapter got system {sent!r}, not the listener's rewrite (LOOP-10)"
        else:
            assert not sent, f"the listener removed the system prompt, the adapter got {sent!r} (LOOP-10)"

    run(scenario)


@pytest.mark.rule("LOOP-4", "LOOP-5")
def test_notifications_and_waterfalls_carry_agent_turn_and_step(run: Run) -> None:
    # Spec 0b: notifications pass the agent first, then the turn (and step) they are about;
    # the agent/* waterfalls take (agent, turn[, step], value, next); tools/execute takes the
    # execution {call_id, name, arguments, agent, signal}. Two agents, so "the agent" is each
    # one's own object (whatever object the implementation passes, the same one for all of an
    # agent's events and another for the other agent's).
    async def scenario(k: Kit) -> None:
        k.tool("echo")
        seen: list[tuple[Any, ...]] = []

        def note(name: str) -> Callable[..., Any]:
            def listener(*args: Any) -> None:
                seen.append((name, *args))

            return listener

        def through(name: str) -> Callable[..., Any]:
            async def listener(*args: Any) -> Any:
                seen.append((name, *args[:-1]))
                return await args[-1]()

            return listener

        for name in ("agent/turn-start", "agent/turn-end", "agent/step-start", "agent/step-end", "agent/stream-chunk"):
            k.on(name, note(name))
        for name in ("agent/request", "agent/step-result", "agent/turn-continuation", "tools/execute"):
            k.on(name, through(name))
        k.model.push(fakes.tool_calls(("c1", "echo", '{"x": 1}')), fakes.text("done"), fakes.text("other"))
        a = k.agent("first")
        a.send("hi")
        await k.idle(a)
        b = k.agent("second")
        b.send("hi")
        await k.idle(b)
        executions = [s[1] for s in seen if s[0] == "tools/execute"]
        assert len(executions) == 1
        execution = executions[0]
        assert set(execution) >= {"call_id", "name", "arguments", "agent", "signal"}, execution
        assert (execution["call_id"], execution["name"], execution["arguments"]) == ("c1", "echo", {"x": 1})
        agent_of = execution["agent"]
        others = [s for s in seen if s[0] != "tools/execute"]
        firsts = [s[1] for s in others]
        assert all(x is not None for x in firsts), "every notification and waterfall passes the agent first"
        mine = [s for s in others if s[1] is agent_of]
        theirs = [s for s in others if s[1] is not agent_of]
        assert theirs and all(s[1] is theirs[0][1] for s in theirs), "one object per agent"
        assert [s[2:] for s in mine if s[0] == "agent/turn-start"] == [(1,)]
        for name in ("agent/step-start", "agent/step-end"):
            assert [s[2:] for s in mine if s[0] == name] == [(1, 1), (1, 2)], name
        for name in ("agent/request", "agent/step-result", "agent/stream-chunk"):
            assert sorted({s[2:4] for s in mine if s[0] == name}) == [(1, 1), (1, 2)], name
        ends = [s[2:] for s in mine if s[0] == "agent/turn-end"]
        assert ends == [(1, COMPLETED)]
        continuations = [s[2:] for s in mine if s[0] == "agent/turn-continuation"]
        assert continuations == [(1, True), (1, False)], "(agent, turn, default decision, next)"
        chunks = [s[4] for s in mine if s[0] == "agent/stream-chunk"]
        assert chunks == [e["data"]["chunk"] for e in k.events(a, "assistant/chunk")]
        requests = [s[4] for s in mine if s[0] == "agent/request"]
        assert all(r["model"] == MODEL and r["messages"] for r in requests)
        results = [s[4] for s in mine if s[0] == "agent/step-result"]
        assert [r["content"] for r in results] == [e["data"]["content"] for e in k.events(a, "assistant/message")]

    run(scenario)


@pytest.mark.rule("LOOP-5")
def test_every_step_assembles_the_system_prompt_before_its_request(run: Run) -> None:
    # "system prompt assembled, agent/request waterfall": the system-prompt waterfall runs in
    # each step, before that step's agent/request.
    async def scenario(k: Kit) -> None:
        order: list[str] = []

        async def assembly(*args: Any) -> Any:
            order.append("system-prompt")
            return await args[-1]()

        async def request(*args: Any) -> Any:
            order.append("agent/request")
            return await args[-1]()

        k.on("system-prompt", assembly)
        k.on("agent/request", request)
        k.tool("echo")
        k.model.push(fakes.tool_calls(("c1", "echo", "{}")), fakes.text("done"))
        a = k.agent(system_prompt="Mine")
        a.send("hi")
        await k.idle(a)
        assert order == ["system-prompt", "agent/request"] * 2
        assert all(r.get("system") == "Mine" for r in k.model.requests), "a pass-through assembly changes nothing"

    run(scenario)


@pytest.mark.rule("LOOP-5")
def test_step_events_carry_their_turn_and_step(run: Run) -> None:
    # The data of section 0's table: every event of a step names its turn and step, and carries
    # the fields the table gives it.
    async def scenario(k: Kit) -> None:
        k.tool("echo")
        a = k.agent()
        k.model.push(fakes.tool_calls(("c1", "echo", "{}")).usage(1, 2), fakes.text("done", usage=(3, 4)), fakes.text("two", usage=(5, 6)))
        a.send("one")
        await k.idle(a)
        a.send("two")
        await k.idle(a)
        fields = {
            "step/start": {"turn", "step"}, "step/end": {"turn", "step"},
            "assistant/chunk": {"turn", "step", "chunk"}, "assistant/message": {"turn", "step", "content"},
            "usage": {"turn", "step", "usage"},
            "tool/call": {"turn", "step", "call_id", "name", "arguments"},
            "tool/result": {"turn", "step", "call_id", "content", "is_error"},
        }
        placed = []
        turn = step = 0
        for event in k.events(a):
            kind, data = event["type"], event["data"]
            if kind == "turn/start":
                turn, step = data["turn"], 0
            elif kind == "step/start":
                step = data["step"]
            if kind in fields:
                assert fields[kind] <= set(data), f"{kind} lacks {fields[kind] - set(data)}: {data}"
                placed.append((kind, data["turn"], data["step"]) == (kind, turn, step))
        assert placed and all(placed), "an event names another turn or step than the one it lies in"
        assert [(e["data"]["turn"], e["data"]["step"]) for e in k.events(a, "usage")] == [(1, 1), (1, 2), (2, 1)]
        assert [(e["data"]["turn"], e["data"]["step"]) for e in k.events(a, "assistant/message")] == [(1, 1), (1, 2), (2, 1)]

    run(scenario)


@pytest.mark.rule("LOOP-10")
def test_unknown_model_name_fails_with_no_adapter(run: Run) -> None:
    # Spec 0b: an unknown model name fails the step with code NO_ADAPTER, whether it comes from
    # the agent's options or from a rewriting agent/request listener; nothing is streamed.
    async def scenario(k: Kit) -> None:
        a = k.agent("unknown", model="no-such-model")
        a.send("hi")
        await k.idle(a)
        b = k.agent("rerouted")

        async def reroute(agent: object, turn: int, step: int, request: dict, next: object) -> object:
            value = await next()  # type: ignore[operator]
            return {**value, "model": "nowhere"} if agent is not a else value

        k.on("agent/request", reroute)
        b.send("hi")
        await k.idle(b)
        for agent in (a, b):
            (reason,) = k.reasons(agent)
            assert reason["kind"] == "error" and reason.get("code") == "NO_ADAPTER", reason
            (error,) = k.events(agent, "error")
            assert error["data"].get("code") == "NO_ADAPTER" and error["data"]["step"] == 1
            assert k.events(agent, "assistant/chunk") == []
        assert k.model.requests == []

    run(scenario)


@pytest.mark.rule("LOOP-9", "ERR-9")
def test_queued_steering_status_and_error_notifications_carry_their_arguments(run: Run) -> None:
    # Spec 0 / 0b, the rest of the taxonomy: agent/queued(agent, content, {source, steering}),
    # agent/steering(agent, turn, content, source), agent/status(agent, status) and
    # agent/error(agent, turn, step, error), the agent first: whatever object the implementation
    # passes, one per agent (two agents here), never None.
    async def scenario(k: Kit) -> None:
        seen: list[tuple[Any, ...]] = []
        for name in ("agent/queued", "agent/steering", "agent/status", "agent/error"):
            k.on(name, lambda *args, name=name: seen.append((name, *args)))
        a = k.agent("first")
        k.tool("echo", hook=lambda _args: a.steer("nudge"))
        failure = RuntimeError("model failed")
        k.model.push(fakes.tool_calls(("c1", "echo", "{}")), fakes.text("done"), respond.raises(failure))
        a.send("hi")
        await k.idle(a)
        b = k.agent("second")
        b.send("fails")
        await k.idle(b)
        a.dispose()
        firsts = [s[1] for s in seen]
        assert firsts and all(x is not None for x in firsts), "every notification passes the agent first"
        by_name: dict[str, list[tuple[Any, ...]]] = {}
        for s in seen:
            by_name.setdefault(s[0], []).append(s)
        (steering,) = by_name["agent/steering"]
        (error,) = by_name["agent/error"]
        agent_a, agent_b = steering[1], error[1]  # only a steers, only b's turn fails
        assert agent_a is not agent_b, "one object per agent"
        assert all(s[1] in (agent_a, agent_b) for s in seen), "one object per agent"
        # the content as the caller gave it (a string here) or as its blocks: spec 0 names the
        # argument, not its form
        def blocks(content: Any) -> Any:
            return [v.text(content)] if isinstance(content, str) else content

        def queued(agent: Any) -> list[tuple[Any, ...]]:
            return [(blocks(s[2]), *s[3:]) for s in by_name["agent/queued"] if s[1] is agent]
        assert queued(agent_a) == [
            ([v.text("hi")], {"source": USER, "steering": False}),
            ([v.text("nudge")], {"source": USER, "steering": True}),
        ]
        assert queued(agent_b) == [([v.text("fails")], {"source": USER, "steering": False})]
        assert (steering[2], blocks(steering[3]), *steering[4:]) == (1, [v.text("nudge")], USER)
        assert [s[2] for s in by_name["agent/status"] if s[1] is agent_a] == ["running", "idle", "disposed"]
        assert [s[2] for s in by_name["agent/status"] if s[1] is agent_b] == ["running", "idle"]
        assert error[2:4] == (1, 1), error
        assert error[4] is failure or str(error[4]) == "model failed", "agent/error carries the original error"

    run(scenario)


@pytest.mark.rule("LOOP-5", "LOOP-6")
def test_step_result_gets_the_assembled_assistant_message(run: Run) -> None:
    # Spec 0b: the agent/step-result waterfall gets the step's assembled message
    # {"role": "assistant", "content": [blocks]}, a reasoning block among them as it streamed.
    async def scenario(k: Kit) -> None:
        got: list[Any] = []

        async def result(*args: Any) -> Any:
            got.append(args[-2])
            return await args[-1]()

        k.on("agent/step-result", result)
        k.model.push(respond.reasoning("thinking") + respond.text("answer"))
        a = k.agent()
        a.send("hi")
        await k.idle(a)
        assert got == [{"role": "assistant", "content": [v.reasoning("thinking"), v.text("answer")]}]

    run(scenario)


class _RecordingAdapter:
    """A model adapter that keeps every request it is handed and answers with one text block."""

    def __init__(self) -> None:
        self.requests: list[Any] = []

    def stream(self, request: Any) -> Any:
        self.requests.append(request)
        return self._chunks()

    async def _chunks(self) -> Any:
        yield v.block_end(0, v.text("hi"))
        yield v.finish("stop")


@pytest.mark.rule("LOOP-10")
def test_the_request_carries_the_steps_abort_signal(run: Run) -> None:
    # Spec 0b: the request is {model, messages, system?, tools?} plus the step's abort signal;
    # the agent/request waterfall sees it and the adapter receives that same signal.
    async def scenario(k: Kit) -> None:
        adapter = _RecordingAdapter()
        k.service.register_model("recording", adapter)
        seen: list[Any] = []

        async def request(*args: Any) -> Any:
            seen.append(args[-2].get("signal"))
            return await args[-1]()

        k.on("agent/request", request)
        a = k.agent("r", model="recording")
        a.send("one")
        await k.idle(a)
        a.send("two")
        await k.idle(a)
        signals = [r.get("signal") for r in adapter.requests]
        assert len(signals) == 2 and all(s is not None for s in signals), "the request carries the step's abort signal"
        assert [s is t for s, t in zip(seen, signals, strict=True)] == [True, True], "the waterfall's signal reaches the adapter"
        assert signals[0] is not signals[1], "each step has its own signal"

    run(scenario)


@pytest.mark.rule("LOOP-2")
@pytest.mark.parametrize("boundary", ["turn/start", "user/message"])
def test_a_prompt_sent_while_a_turn_logs_its_prompts_waits_for_the_next_turn(run: Run, boundary: str) -> None:
    # LOOP-2: a turn drains the messages queued when it opens. A session/event listener sending
    # as the turn logs its turn/start or its first user/message queues a prompt after that drain:
    # it runs as the next turn, alone, and the loop goes on (not folded into the open turn, not
    # lost to a queue changed while it was read).
    async def scenario(k: Kit) -> None:
        a = k.agent()
        sent: list[str] = []

        def listener(_session: object, event: dict[str, Any]) -> None:
            if event.get("type") == boundary and not sent:
                sent.append(boundary)
                a.send("late")

        k.on("session/event", listener)
        a.send("first")
        await k.idle(a)
        assert sent, f"the {boundary} listener never ran"
        assert k.prompts(a) == [["first"], ["late"]], (
            f"a prompt sent from a {boundary} listener ran as {k.prompts(a)}, not as the next turn of its own")
        assert a.status == "idle"

    run(scenario)
