"""Section 4: continuation and steering (CONT-1..2, STEER-1..3)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from conformance import fakes
from conformance.adapter import AgentHandle
from conformance.fakes import respond
from conformance.harness import Kit
from reference_loop import vocabulary as v

from ._support import COMPLETED, USER, Run, aborted, once, once_on, request_texts, texts


def _steps(k: Kit, agent: object) -> int:
    return len(k.events(agent, "step/start"))  # type: ignore[arg-type]


@pytest.mark.rule("CONT-1")
def test_default_continuation(run: Run) -> None:
    async def scenario(k: Kit) -> None:
        k.tool("echo")
        a = k.agent()
        k.model.push(
            fakes.tool_calls(("c1", "echo", "{}")),
            fakes.text("done"),
            fakes.text("plain"),
            fakes.text("steered").hook(lambda: a.steer("S")),
            fakes.text("after steering"),
        )
        a.send("tools")
        await k.idle(a)
        assert _steps(k, a) == 2, "a step with tool calls continues"
        a.send("plain")
        await k.idle(a)
        assert _steps(k, a) == 3, "a step without tool calls or steering stops"
        # The third arm of the default: no tool calls, but steering was drained after the step.
        a.send("steer me")
        await k.idle(a)
        assert _steps(k, a) == 5, "a step after which steering was drained continues"
        assert len(k.events(a, "turn/start")) == 3, "the steering continued its turn, not a new one"
        assert "S" in request_texts(k.model.requests[-1])

    run(scenario)


@pytest.mark.rule("CONT-1")
def test_continuation_waterfall_can_force(run: Run) -> None:
    async def scenario(k: Kit) -> None:
        k.tool("echo")
        a = k.agent()
        decisions: list[object] = []

        async def force(agent: object, turn: int, decision: object, next: object) -> object:
            decisions.append(decision)
            await next()  # type: ignore[operator]
            if turn == 1:
                return len(decisions) == 1  # continue after step 1 (a plain answer), then stop
            return False  # stop even though the step had tool calls

        k.on("agent/turn-continuation", force)
        k.model.push(fakes.text("first"), fakes.text("second"), fakes.tool_calls(("c1", "echo", "{}")))
        a.send("one")
        await k.idle(a)
        a.send("two")
        await k.idle(a)
        assert [len(k.events(a, "step/start"))] == [3]
        assert decisions == [False, False, True], "the default decision is passed to the waterfall"
        assert k.reasons(a) == [COMPLETED, COMPLETED]

    run(scenario)


@pytest.mark.rule("CONT-1")
def test_a_forced_stop_holds_when_an_earlier_listener_removes_itself(run: Run) -> None:
    # A waterfall's next() runs the rest of the chain: a one-shot listener that removes itself
    # as it runs, then calls next(), does not take the listener after it out of this call. That
    # one force-stops the turn (CONT-1) after a step with tool calls, whose default is to go on.
    async def scenario(k: Kit) -> None:
        k.tool("echo")
        a = k.agent()
        removers: list[Callable[[], object]] = []
        stopped: list[int] = []

        async def one_shot(agent: object, turn: int, decision: object, next: Callable[[], Any]) -> object:
            removers[0]()
            return await next()

        async def stop(agent: object, turn: int, decision: object, next: Callable[[], Any]) -> object:
            await next()
            stopped.append(turn)
            return False

        removers.append(k.on("agent/turn-continuation", one_shot))
        k.on("agent/turn-continuation", stop)
        k.model.push(fakes.tool_calls(("c1", "echo", "{}")), fakes.text("never"))
        a.send("one")
        await k.idle(a)
        assert stopped == [1], f"the listener after the one that removed itself ran: {stopped}"
        assert _steps(k, a) == 1, "the forced stop holds: no second step"

    run(scenario)


@pytest.mark.rule("CONT-1")
def test_a_forced_stop_holds_after_steering_was_drained(run: Run) -> None:
    # CONT-1: steering drained after a step makes the default decision "continue", and the
    # agent/turn-continuation waterfall may still force-stop: the turn ends after that step. The
    # steering is not stranded: it is in the log (steering/message) and in the next turn's history.
    # (CONT-2's override is for steering a step-end or continuation listener adds, still waiting.)
    async def scenario(k: Kit) -> None:
        a = k.agent()
        decisions: list[object] = []

        async def stop(agent: object, turn: int, decision: object, next: object) -> object:
            decisions.append(decision)
            await next()  # type: ignore[operator]
            return False

        k.on("agent/turn-continuation", stop, needs="the test forces a stop there")
        k.model.push(fakes.text("steered").hook(lambda: a.steer("S")), fakes.text("next turn"))
        a.send("one")
        await k.idle(a)
        assert decisions == [True], f"steering drained after the step makes the default continue: {decisions}"
        assert len(k.events(a, "step/start")) == 1, "the forced stop ends the turn after its one step (CONT-1)"
        assert [texts(e["data"]["content"]) for e in k.events(a, "steering/message")] == [["S"]]
        a.send("two")
        await k.idle(a)
        assert "S" in request_texts(k.model.requests[-1]), "the drained steering is in the next turn's history"

    run(scenario)


@pytest.mark.rule("CONT-2")
def test_steering_from_step_end_overrides_stop(run: Run) -> None:
    async def scenario(k: Kit) -> None:
        a = k.agent()
        k.on("agent/step-end", once(lambda *_: a.steer("more")))
        a.send("hi")
        await k.idle(a)
        assert _steps(k, a) == 2
        assert "more" in request_texts(k.model.requests[1])

    run(scenario)


@pytest.mark.rule("CONT-2")
def test_steering_from_continuation_overrides_stop(run: Run) -> None:
    async def scenario(k: Kit) -> None:
        a = k.agent()
        steered = [False]

        async def listener(agent: object, turn: int, decision: object, next: object) -> object:
            if not steered[0]:
                steered[0] = True
                a.steer("more")
            return await next()  # type: ignore[operator]

        k.on("agent/turn-continuation", listener)
        a.send("hi")
        await k.idle(a)
        assert _steps(k, a) == 2
        assert "more" in request_texts(k.model.requests[1])
        assert k.prompts(a) == [["hi"]]

    run(scenario)


@pytest.mark.rule("CONT-2", "CONT-1")
@pytest.mark.parametrize("first", ["text", "tool-calls"])
@pytest.mark.parametrize("when", ["before-next", "after-next"])
def test_steering_from_continuation_overrides_the_listeners_own_forced_stop(run: Run, first: str, when: str) -> None:
    # CONT-2: steering added by an agent/turn-continuation listener overrides "a stop decision":
    # the default one, and one a listener forces (CONT-1) as well, its own vote included. A
    # reviewing plugin that steers a correction and votes to stop gets the turn continued with its
    # steering in the next request. After a tool step the default is to continue, so only the
    # forced stop is there to override: a loop letting steering override the default stop alone
    # ends the turn (session 60's blind round K, which passed the suite and the hunt).
    async def scenario(k: Kit) -> None:
        a = k.agent()
        voted: list[object] = []

        async def reviewer(agent: object, turn: int, decision: object, next: object) -> object:
            if voted:
                return await next()  # type: ignore[operator]
            voted.append(decision)
            if when == "before-next":
                a.steer("more")
            await next()  # type: ignore[operator]
            if when == "after-next":
                a.steer("more")
            return False

        k.on("agent/turn-continuation", reviewer, needs="the test steers and votes to stop there")
        k.model.push(fakes.tool_calls(("c1", "echo", "{}")) if first == "tool-calls" else fakes.text("first"),
                     fakes.text("second"))
        a.send("hi")
        await k.idle(a)
        assert voted == [first == "tool-calls"], f"the first step's default decision (CONT-1): {voted}"
        assert _steps(k, a) == 2, (
            f"the turn ran {_steps(k, a)} step(s): steering a continuation listener added overrides the stop it voted "
            "(CONT-2), so a second step runs")
        assert "more" in request_texts(k.model.requests[1]), "the second request contains the steering (CONT-2)"
        assert k.prompts(a) == [["hi"]], f"one turn: the steering joined it, no second turn: {k.prompts(a)}"

    run(scenario)


@pytest.mark.rule("STEER-1")
def test_steer_when_idle_is_send(run: Run) -> None:
    async def scenario(k: Kit) -> None:
        k.record("agent/queued")
        a = k.agent()
        a.steer("S")
        await k.idle(a)
        assert k.prompts(a) == [["S"]]
        assert k.events(a, "steering/message") == []
        assert [n[1] for n in k.noted("agent/queued")] == [{"source": USER, "steering": False}]

    run(scenario)


@pytest.mark.rule("STEER-2")
def test_steering_joins_next_request(run: Run) -> None:
    async def scenario(k: Kit) -> None:
        a = k.agent()
        k.model.push(fakes.text("first").hook(lambda: a.steer("S")), fakes.text("second"))
        a.send("hi")
        await k.idle(a)
        steering = k.events(a, "steering/message")
        assert [(e["data"]["turn"], e["data"]["content"]) for e in steering] == [(1, [v.text("S")])]
        assert len(k.model.requests) == 2
        assert "S" in request_texts(k.model.requests[1]) and "S" not in request_texts(k.model.requests[0])
        assert len(k.events(a, "turn/start")) == 1

    run(scenario)


@pytest.mark.rule("INBOX-1", "STEER-2")
def test_steering_joins_its_own_agents_turn(run: Run) -> None:
    # INBOX-1: each agent has its own steering FIFO. With two agents mid-step, the one that
    # reaches its next request first must not take the other's steering (a fresh bug of round
    # 12 kept one FIFO for every agent).
    async def scenario(k: Kit) -> None:
        gate_a, gate_b = k.gate(), k.gate()
        a, b = k.agent("a"), k.agent("b")
        k.model.push(fakes.text("for a").gate(gate_a), fakes.text("for b").gate(gate_b))
        a.send("A")
        await k.until(lambda: len(k.model.requests) == 1, "a's model call")
        b.send("B")
        await k.until(lambda: len(k.model.requests) == 2, "b's model call")
        a.steer("S")
        gate_b.set()
        await k.idle(b)
        gate_a.set()
        await k.idle(a)
        assert k.events(b, "steering/message") == [], "b's turn took a's steering"
        assert [e["data"]["content"] for e in k.events(a, "steering/message")] == [[v.text("S")]]

    run(scenario)


@pytest.mark.rule("STEER-2")
def test_steering_from_actor_during_step(run: Run) -> None:
    async def scenario(k: Kit) -> None:
        gate = k.gate()
        a = k.agent()
        k.model.push(fakes.text("first").gate(gate))
        a.send("hi")
        await k.until(lambda: bool(k.model.requests), "the model call")
        a.steer("S1")
        a.steer("S2")
        gate.set()
        await k.idle(a)
        texts = [b["text"] for e in k.events(a, "steering/message") for b in e["data"]["content"]]
        assert texts == ["S1", "S2"]
        assert k.prompts(a) == [["hi"]]

    run(scenario)


@pytest.mark.rule("STEER-3")
def test_steering_of_aborted_step_requeued(run: Run) -> None:
    async def scenario(k: Kit) -> None:
        a = k.agent()
        steered = asyncio.Event()
        def steer_now() -> None:
            a.steer("S")
            steered.set()

        k.model.push(respond.hang().hook(steer_now))
        a.send("hi")
        await asyncio.wait_for(steered.wait(), k.timeout)
        a.abort()
        await k.idle(a)
        assert k.reasons(a) == [aborted(), COMPLETED]
        assert k.prompts(a) == [["hi"], ["S"]], "steering of an aborted step becomes the next turn's prompt"

    run(scenario)


@pytest.mark.rule("STEER-2", "LOOP-9", "LOG-7")
def test_steering_keeps_its_source_in_the_log_and_the_next_request(run: Run) -> None:
    # A plugin's steering: steering/message logs the plugin source (0b), agent/steering carries it
    # (LOOP-9) and the next request's history wraps it in the plugin's kind (LOG-7).
    async def scenario(k: Kit) -> None:
        k.record("agent/steering")
        plugin = {"kind": "plugin", "plugin": "p"}
        a = k.agent()
        k.model.push(fakes.text("first").hook(lambda: a.steer("S", plugin)), fakes.text("second"))  # type: ignore[arg-type]
        a.send("hi")
        await k.idle(a)
        (steering,) = k.events(a, "steering/message")
        assert steering["data"]["source"] == plugin, steering
        assert [n[-1] for n in k.noted("agent/steering")] == [plugin]
        assert '<steering source="plugin">' in request_texts(k.model.requests[1])

    run(scenario)


@pytest.mark.rule("STEER-1")
def test_steer_after_a_turn_is_send(run: Run) -> None:
    # Once a turn is over (idle again), steer() with a source is a send() with that source:
    # a new turn whose trigger and user/message carry it, agent/queued with steering false.
    async def scenario(k: Kit) -> None:
        k.record("agent/queued")
        plugin = {"kind": "plugin", "plugin": "p"}
        a = k.agent()
        a.send("first")
        await k.idle(a)
        a.steer("S", plugin)  # type: ignore[arg-type]
        await k.idle(a)
        assert k.prompts(a) == [["first"], ["S"]]
        assert k.events(a, "steering/message") == []
        start = k.events(a, "turn/start")[1]["data"]
        assert start["trigger"] == {"kind": "message", "source": plugin}
        assert k.events(a, "user/message")[1]["data"]["source"] == plugin
        assert [n[1] for n in k.noted("agent/queued")] == [
            {"source": USER, "steering": False},
            {"source": plugin, "steering": False},
        ]

    run(scenario)


@pytest.mark.rule("STEER-3")
def test_steering_during_an_aborted_tool_requeued(run: Run, schedule: str) -> None:
    # The steering arrives while a tool runs; the step is aborted there: it is not lost and
    # not dropped, it becomes the prompt of the next turn, which completes.
    async def scenario(k: Kit) -> None:
        a = k.agent()
        hanging = k.tool("hang", hang=True)
        k.model.push(fakes.tool_calls(("c1", "hang", "{}")), fakes.text("steered"))
        a.send("hi")
        await k.until(lambda: bool(hanging.calls), "the hanging tool")
        a.steer("S")
        a.abort("stop tool")
        await k.idle(a)
        await k.until(lambda: len(k.reasons(a)) == 2, "the steering's turn to end")
        assert k.reasons(a) == [aborted("stop tool"), COMPLETED]
        assert k.prompts(a) == [["hi"], ["S"]], "steering of an aborted step becomes the next turn's prompt"

    run(scenario)


async def _steered_from_status(k: Kit, status: str, *, needs: str) -> AgentHandle:
    """Prompt ``A`` with an ``agent/status`` listener that steers ``S`` at the first transition to
    ``status`` (``agent/queued`` recorded); returns once the agent is idle again."""
    k.record("agent/queued")
    a = k.agent()
    k.on("agent/status", once_on(status, lambda: a.steer("S")), needs=needs)
    a.send("A")
    await k.idle(a)
    return a


@pytest.mark.rule("STEER-1")
def test_steer_from_the_idle_listener_is_send(run: Run) -> None:
    # Inside agent/status('idle') the agent is not running: steer() there is send() (a
    # next turn with S as its prompt, agent/queued with steering false), never steering of the
    # turn that just ended.
    async def scenario(k: Kit) -> None:
        a = await _steered_from_status(k, "idle", needs="a steer from inside the idle transition")
        await k.settle()
        await k.idle(a)
        assert k.prompts(a) == [["A"], ["S"]]
        assert k.events(a, "steering/message") == []
        assert [n[1] for n in k.noted("agent/queued")] == [{"source": USER, "steering": False}] * 2

    run(scenario)


@pytest.mark.rule("STEER-1", "LOOP-9", "STEER-2")
def test_steer_from_the_running_listener_is_steering(run: Run) -> None:
    # Inside agent/status('running') the agent is running though no turn is open yet in the log:
    # steer() there is steering (agent/queued with steering true), drained into the turn's first
    # step as a steering/message, not a prompt of its own (decided by the status, not the log).
    async def scenario(k: Kit) -> None:
        a = await _steered_from_status(k, "running", needs="a steer from inside the running flip")
        assert k.prompts(a) == [["A"]]
        assert [n[1] for n in k.noted("agent/queued")] == [{"source": USER, "steering": False},
                                                          {"source": USER, "steering": True}]
        steering = k.events(a, "steering/message")
        assert [(e["data"]["turn"], texts(e["data"]["content"])) for e in steering] == [(1, ["S"])]

    run(scenario)


@pytest.mark.rule("LOOP-5", "STEER-2")
@pytest.mark.parametrize("hook", ["agent/status(running)", "agent/turn-start"])
def test_steering_waiting_when_the_first_step_opens_joins_its_request(run: Run, hook: str) -> None:
    # A plugin steers before the turn's first step (from the running flip, or from agent/turn-start
    # once the turn is open): LOOP-5's step shape drains the steering waiting, then appends
    # step/start, so the steering is logged before step 1 and step 1's request carries it (not
    # step 2's, after a continuation the steering would force).
    async def scenario(k: Kit) -> None:
        if hook == "agent/turn-start":
            a = k.agent()
            k.on("agent/turn-start", once(lambda *_: a.steer("S")), needs="a steer from inside agent/turn-start")
            a.send("A")
            await k.idle(a)
        else:
            a = await _steered_from_status(k, "running", needs="a steer from inside the running flip")
        assert k.prompts(a) == [["A"]]
        log = [e["type"] for e in k.events(a)]
        assert "steering/message" in log and log.index("steering/message") < log.index("step/start"), log
        assert "S" in request_texts(k.model.requests[0]), "steering waiting at the first step joins its request"

    run(scenario)


@pytest.mark.rule("LOOP-8", "STEER-1")
def test_steering_given_while_the_turn_flushes_becomes_the_next_prompt(run: Run, schedule: str) -> None:
    # The turn has ended and flushes (still running): steer() is steering too late for it, so it
    # is re-queued as the next turn's prompt once the flush is over: never stranded, and run
    # without an idle transition in between (LOOP-8: re-queued, then idle unless something is).
    async def scenario(k: Kit) -> None:
        k.record("agent/status")
        a = k.agent()
        flushes = [0]

        async def flush(*_args: object) -> None:
            flushes[0] += 1
            if flushes[0] == 1:
                a.steer("S")
                await asyncio.sleep(0.5)

        k.on("session/flush", flush)
        a.send("A")
        await k.idle(a)
        assert k.prompts(a) == [["A"], ["S"]], "steering given during the flush must run as the next prompt"
        assert k.reasons(a) == [COMPLETED, COMPLETED]
        assert k.statuses() == ["running", "idle"], "the re-queued steering runs with no idle transition before it"

    run(scenario)


@pytest.mark.rule("STEER-2", "LOOP-8")
@pytest.mark.parametrize("hook", ["agent/steering", "session/event"])
def test_steering_added_during_the_drain_reaches_the_model_once(run: Run, hook: str) -> None:
    # A listener told of steering S1 being drained steers S2: S2 joins a later request of the
    # turn as steering (STEER-2) or, too late for it, becomes a next prompt (LOOP-8); it is
    # never dropped and delivered once.
    async def scenario(k: Kit) -> None:
        a = k.agent()
        fired: list[bool] = []

        def steer_once() -> None:
            if not fired:
                fired.append(True)
                a.steer("S2")

        if hook == "agent/steering":
            k.on("agent/steering", lambda *_args: steer_once(), needs="a steer from inside the steering drain")
        else:
            def on_event(_session: object, event: dict[str, object]) -> None:
                data = event.get("data")
                if event.get("type") == "steering/message" and isinstance(data, dict) and "S1" in texts(data.get("content")):
                    steer_once()

            k.on("session/event", on_event)
        k.model.push(fakes.text("first").hook(lambda: a.steer("S1")), fakes.text("second"), fakes.text("third"),
                     fakes.text("fourth"))
        a.send("hi")
        await k.idle(a)
        await k.settle()
        await k.idle(a)
        assert fired, f"{hook} was never told of the steering S1"
        assert any("S2" in request_texts(r) for r in k.model.requests), \
            "steering added during the drain never reached the model (LOOP-8: never silently dropped)"
        delivered = [t for e in (*k.events(a, "steering/message"), *k.events(a, "user/message"))
                     for t in texts(e["data"]["content"]) if t == "S2"]
        assert len(delivered) == 1, f"S2 was delivered {len(delivered)} times"

    run(scenario)


@pytest.mark.rule("LOOP-8", "ERR-1", "LOOP-4")
@pytest.mark.parametrize("given", ["mid-stream", "at-step-end"])
def test_steering_waiting_behind_one_whose_listener_threw_still_runs(run: Run, given: str) -> None:
    # Two steering messages wait at a drain and an agent/steering listener throws on the first:
    # the throw ends the turn (ERR-1), and the second, not yet delivered, is steering too late
    # for it: it runs in a turn after it (LOOP-8: "never stranded, never silently dropped"). The
    # failed turn is notified ended: agent/steering is no boundary listener (LOOP-4; session 58's
    # blind round I planted its agent/turn-end's silence twice). The steering is given while the
    # model streams, or by an agent/step-end listener, after the step's own drain: it then waits
    # for the next step's opening (CONT-2), a drain a loop may take for part of opening the step
    # (session 61's blind round M: a throw there silenced agent/turn-end).
    async def scenario(k: Kit) -> None:
        k.record("agent/turn-end")
        a = k.agent()
        thrown: list[bool] = []

        def throw_once(*_args: object) -> None:
            if not thrown:
                thrown.append(True)
                raise RuntimeError("steering listener failed")

        k.on("agent/steering", throw_once, needs="a throwing agent/steering listener")

        def steer_both() -> None:
            a.steer("S1")
            a.steer("S2")

        if given == "mid-stream":
            k.model.push(fakes.text("first").hook(steer_both), fakes.text("second"), fakes.text("third"))
        else:
            def steer_at_step_end(*_args: object) -> None:
                if not k.model.requests[1:]:  # the first step's end only
                    steer_both()

            k.on("agent/step-end", steer_at_step_end, needs="an agent/step-end listener")
            k.model.push(fakes.text("first"), fakes.text("second"), fakes.text("third"))
        a.send("hi")
        await k.idle(a)
        await k.settle()
        await k.idle(a)
        assert thrown, "agent/steering was never told of the steering"
        assert k.reasons(a)[0]["kind"] == "error", k.reasons(a)
        assert any("S2" in request_texts(r) for r in k.model.requests), (
            "the steering behind the one whose listener threw never reached the model (LOOP-8: never silently "
            f"dropped): {[request_texts(r) for r in k.model.requests]}")
        ended = [n[0] for n in k.noted("agent/turn-end")]
        assert 1 in ended, (f"turn 1, failed by a throwing agent/steering listener, was never notified ended (agent/turn-end "
                            f"for turns {ended}; LOOP-4: only a boundary listener's failure goes without it)")

    run(scenario)


@pytest.mark.rule("LOOP-8", "ERR-1")
@pytest.mark.parametrize("failure", ["finish-error", "raises"])
def test_steering_given_during_a_step_that_fails_still_runs(run: Run, failure: str) -> None:
    # LOOP-8: steering that arrived too late for its turn is re-queued as prompts for a next turn,
    # "never stranded, never silently dropped". Steering given while the model streams a step
    # that then fails (a finish{error}, or a stream that raises) comes too late for the failed
    # turn: it runs in a turn after it, its text reaching the model.
    async def scenario(k: Kit) -> None:
        gate = k.gate()
        a = k.agent()
        failing = fakes.text("partial", finish=None).gate(gate, before=1)
        failing = failing.raises("kaput", code="K") if failure == "raises" else failing.finish("error", "overloaded", "E")
        k.model.push(failing, fakes.text("answered"))
        a.send("hi")
        await k.until(lambda: bool(k.model.requests), "the model call")
        a.steer("the steer")
        gate.set()
        await k.idle(a)
        assert k.reasons(a)[0]["kind"] == "error", k.reasons(a)
        assert len(k.model.requests) == 2 and "the steer" in request_texts(k.model.requests[1]), (
            "the steering given during the failed step never reached the model: "
            f"{[request_texts(r) for r in k.model.requests]}")

    run(scenario)
