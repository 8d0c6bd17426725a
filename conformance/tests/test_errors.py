"""Section 7: error containment (ERR-1..12)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from conformance import fakes
from conformance.adapter import AgentHandle, ThrownValue
from conformance.catalogue import PYTHON, runtime_of
from conformance.fakes import respond
from conformance.fakes.errors import causes
from conformance.harness import Kit

from ._support import (
    COMPLETED,
    Run,
    aborted,
    boom,
    captured_warnings,
    delivered,
    in_process_only,
    once,
    texts,
    warnings_naming,
)


def _error_kinds(k: Kit, agent: object) -> list[str]:
    return [r["kind"] for r in k.reasons(agent)]  # type: ignore[arg-type]


WATERFALLS = ("agent/request", "agent/step-result", "agent/turn-continuation", "tools/execute")


def _throwing(name: str, error: Exception | None = None, *, nth: int = 1) -> Callable[..., Any]:
    """A listener for ``name`` that throws ``error`` (default ``RuntimeError("NAME failed")``)
    on its ``nth`` call (in a one-turn test of a step event: in step ``nth``), and passes through
    otherwise. Waterfall listeners are coroutine functions that await ``next()``: whether a plain
    function may return ``next()``'s awaitable is PY-2's question, not these rules'."""
    calls = [0]
    exc = error if error is not None else RuntimeError(f"{name} failed")

    if name in WATERFALLS:

        async def waterfall(*args: object) -> object:
            calls[0] += 1
            if calls[0] == nth:
                raise exc
            return await args[-1]()  # type: ignore[operator]

        return waterfall

    def notification(*_args: object) -> None:
        calls[0] += 1
        if calls[0] == nth:
            raise exc

    return notification


@pytest.mark.rule("ERR-1")
def test_throwing_plugin_ends_turn_not_loop(run: Run) -> None:
    async def scenario(k: Kit) -> None:
        a = k.agent()
        k.on("agent/request", _throwing("agent/request"), needs="the throwing plugin listens there")
        a.send("one")
        await k.idle(a)
        a.send("two")
        await k.idle(a)
        assert _error_kinds(k, a) == ["error", "completed"]

    run(scenario)


@pytest.mark.rule("ERR-1")
def test_throwing_plugin_spares_the_prompt_already_queued(run: Run) -> None:
    # The next prompt is queued while the failing turn still runs: the loop survives the
    # failure and runs it (as its own turn, the same running period or the next).
    async def scenario(k: Kit) -> None:
        a = k.agent()
        k.on("agent/step-result", _throwing("agent/step-result"), needs="the throwing plugin listens there")
        k.model.push(fakes.text("one").hook(lambda: a.send("two")), fakes.text("two"))
        a.send("one")
        await k.idle(a)
        assert k.prompts(a) == [["one"], ["two"]]
        assert _error_kinds(k, a) == ["error", "completed"]

    run(scenario)


class _Unprintable(Exception):
    """A plugin's error whose message cannot be read: its ``__str__`` raises (a library's error
    formatting a field it no longer has)."""

    def __str__(self) -> str:
        raise RuntimeError("__str__ is broken")


@pytest.mark.rule("ERR-1", "TOOL-3")
@pytest.mark.parametrize("where", ["agent/request", "tool"])
def test_a_failure_whose_message_cannot_be_read_ends_the_turn_not_the_loop(run: Run, where: str) -> None:
    # ERR-1: a throwing plugin ends the turn, never the loop, whatever it throws: here an error
    # whose str() itself raises. From a listener the turn ends error (ERR-2); from a tool the
    # call's result is an error and the turn goes on (TOOL-3). Then the next prompt runs. Session
    # 50's review: the reference formatted the message where a second failure escaped its
    # containment, and the driver died with the agent disposed.
    async def scenario(k: Kit) -> None:
        in_process_only(k, "a Python exception object whose __str__ raises does not cross the wire")
        a = k.agent()
        if where == "tool":
            def breaks(*_args: Any) -> Any:
                raise _Unprintable()

            k.world.add_tool(fakes.FakeTool("breaks", handler=breaks))
            k.model.push(fakes.tool_calls(("c1", "breaks", "{}")), respond.text("after the tool"))
        else:
            k.on(where, _throwing(where, _Unprintable()), needs="the throwing plugin listens there")
        a.send("one")
        await k.idle(a)
        assert a.status == "idle", f"the failure ended the loop: the agent is {a.status!r}"
        if where == "tool":
            (result,) = k.events(a, "tool/result")
            assert result["data"].get("is_error") is True, f"the tool's failure is an error result: {result['data']}"
            assert k.reasons(a) == [COMPLETED], f"the turn goes on after a failed tool (TOOL-3): {k.reasons(a)}"
        else:
            assert [r["kind"] for r in k.reasons(a)] == ["error"], k.reasons(a)
        a.send("two")
        await k.idle(a)
        assert k.reasons(a)[-1] == COMPLETED, f"the next prompt runs (ERR-1): {k.reasons(a)}"

    run(scenario)


BOUNDARIES = [
    "agent/turn-start",
    "agent/step-start",
    "agent/step-end",
    "agent/request",
    "agent/step-result",
    "agent/turn-continuation",
]


def _assert_failed_once(k: Kit, agent: object, message: str) -> None:
    """ERR-2's outcome: the turn ends error carrying the raised message (no ``code``: the error
    has none, ERR-7), one error event, one turn/end, and the open step closed before it."""
    (reason,) = k.reasons(agent)  # type: ignore[arg-type]
    assert reason["kind"] == "error" and message in reason["message"], reason
    assert "code" not in reason, reason
    assert len(k.events(agent, "error")) == 1, "exactly one error event"  # type: ignore[arg-type]
    assert len(k.events(agent, "turn/end")) == 1, "exactly one turn/end"  # type: ignore[arg-type]
    types = k.types(agent)  # type: ignore[arg-type]
    assert types.count("step/start") == types.count("step/end"), f"an open step was not closed: {types}"


@pytest.mark.rule("ERR-2")
@pytest.mark.parametrize("event", BOUNDARIES)
def test_throwing_boundary_listener(run: Run, event: str) -> None:
    async def scenario(k: Kit) -> None:
        a = k.agent()
        k.on(event, _throwing(event))
        a.send("one")
        await k.idle(a)
        _assert_failed_once(k, a, f"{event} failed")

    run(scenario)


@pytest.mark.rule("ERR-2")
@pytest.mark.parametrize("event", ["agent/request", "agent/step-start"])
def test_a_listener_throwing_a_value_that_is_no_error_object(run: Run, event: str) -> None:
    # A plugin may throw something that is not an error object (JavaScript: `throw "text"`;
    # ThrownValue is that over the wire, a plain exception in Python): the turn still ends error
    # with one error event carrying the text, and the loop goes on (ERR-1). A loop reading the
    # thrown value's `message` unchecked logs an error event without one.
    async def scenario(k: Kit) -> None:
        a = k.agent()
        k.on(event, _throwing(event, ThrownValue(f"{event} threw a string")))
        a.send("one")
        await k.idle(a)
        _assert_failed_once(k, a, f"{event} threw a string")
        (error,) = k.events(a, "error")
        assert isinstance(error["data"].get("message"), str), error
        a.send("two")
        await k.idle(a)
        assert k.reasons(a)[-1] == COMPLETED, "the loop stays alive"

    run(scenario)


@pytest.mark.rule("ERR-2")
@pytest.mark.parametrize("event", BOUNDARIES[1:])
def test_throwing_listener_in_a_later_step(run: Run, event: str) -> None:
    # The same failures in step 2 of a turn, after a tool step: the step open at the failure is
    # closed before the one turn/end, and nothing of step 1 is undone.
    async def scenario(k: Kit) -> None:
        a = k.agent()
        k.tool("echo")
        k.on(event, _throwing(event, nth=2))
        k.model.push(fakes.tool_calls(("c1", "echo", "{}")), fakes.text("second"), fakes.text("third"))
        a.send("one")
        await k.idle(a)
        _assert_failed_once(k, a, f"{event} failed")
        assert [e["data"]["call_id"] for e in k.events(a, "tool/result")] == ["c1"]
        assert k.events(a, "error")[0]["data"]["turn"] == 1

    run(scenario)


@pytest.mark.rule("ERR-3")
def test_throwing_step_end_after_good_step(run: Run) -> None:
    async def scenario(k: Kit) -> None:
        k.tool("echo")
        a = k.agent()
        k.on("agent/step-end", _throwing("agent/step-end"))
        k.model.push(fakes.tool_calls(("c1", "echo", "{}")))
        a.send("one")
        await k.idle(a)
        assert _error_kinds(k, a) == ["error"]
        assert len(k.model.requests) == 1, "no further step runs"

    run(scenario)


@pytest.mark.rule("ERR-3")
def test_throwing_step_end_after_second_good_step(run: Run) -> None:
    # Step 2 succeeds and would continue (it had a tool call, CONT-1), but its agent/step-end
    # listener throws: the turn ends error and step 3 never runs.
    async def scenario(k: Kit) -> None:
        k.tool("echo")
        a = k.agent()
        k.on("agent/step-end", _throwing("agent/step-end", nth=2))
        k.model.push(
            fakes.tool_calls(("c1", "echo", "{}")),
            fakes.tool_calls(("c2", "echo", "{}")),
            fakes.text("third"),
        )
        a.send("one")
        await k.idle(a)
        assert _error_kinds(k, a) == ["error"]
        assert len(k.model.requests) == 2, "no further step runs"
        assert len(k.events(a, "assistant/message")) == 2, "the good steps stay logged"

    run(scenario)


def _nothing_after_turn_end(k: Kit, agent: object) -> None:
    """No event follows the last turn/end (checked once the agent is idle again)."""
    types = k.types(agent)  # type: ignore[arg-type]
    assert types and types[-1] == "turn/end", f"events were appended after the turn's turn/end: {types}"


def _throw_once_on(k: Kit, event_type: str) -> list[bool]:
    """A session/event listener that throws on the first event of ``event_type``; ``[fired]``."""
    fired = [False]

    def listener(_session: object, event: dict) -> None:
        if event["type"] == event_type and not fired[0]:
            fired[0] = True
            raise RuntimeError(f"{event_type} listener failed")

    k.on("session/event", listener)
    return fired


@pytest.mark.rule("ERR-4", "FINISH-2")
@pytest.mark.parametrize("event_type", ["turn/start", "step/end", "error", "turn/end"])
def test_throwing_session_event_listener(run: Run, event_type: str) -> None:
    async def scenario(k: Kit) -> None:
        a = k.agent()
        fired = _throw_once_on(k, event_type)
        if event_type == "error":
            k.model.push(respond.raises("model failed"))
        a.send("one")
        await k.idle(a)
        assert fired[0]
        _nothing_after_turn_end(k, a)
        assert len(k.events(a, "turn/end")) == 1
        if event_type == "error":
            # the turn failed all the same (FINISH-2): the throw on its error event changes nothing
            reason = k.reasons(a)[0]
            assert reason.get("kind") == "error" and "model failed" in str(reason.get("message")), (
                f"the model raised, and a session/event listener threw on the turn's error event: the turn "
                f"ended {reason!r}, not error (FINISH-2; ERR-4 leaves the turn as it was)")
        a.send("two")
        await k.idle(a)
        assert k.reasons(a)[-1] == COMPLETED, "the loop stays alive"

    run(scenario)


@pytest.mark.rule("LOOP-5", "LOG-2")
@pytest.mark.parametrize("kind", [TypeError, ValueError], ids=lambda k: k.__name__)
def test_a_listener_throwing_on_a_tool_result_leaves_the_call_one_result(run: Run, kind: type[Exception]) -> None:
    # A plugin's session/event listener fails on a tool/result with the kind of error a JSON
    # encoder raises (a TypeError: a bug in the plugin). LOG-2: the event stays in the log; LOOP-5:
    # each call gets its tool/result once. A loop that reads such an error as "the result was no
    # JSON" and logs a second, failed result for the call breaks both. How the turn goes on after
    # the throw, no rule here says.
    async def scenario(k: Kit) -> None:
        k.tool("echo")
        k.model.push(fakes.tool_calls(("c1", "echo", "{}")), respond.text("done"))
        fired: list[int] = []

        def listener(_session: object, event: dict[str, Any]) -> None:
            if event["type"] == "tool/result" and not fired:
                fired.append(1)
                raise kind("the plugin's own bug")

        k.on("session/event", listener)
        a = k.agent()
        a.send("one")
        await k.idle(a)
        assert fired, "the tool's result was logged"
        results = [e["data"] for e in k.events(a, "tool/result")]
        assert [r["call_id"] for r in results] == ["c1"], f"one tool/result per call (LOOP-5): {results}"
        assert results[0]["is_error"] is False, f"the logged result is the tool's: {results[0]}"
        _nothing_after_turn_end(k, a)
        a.send("two")
        await k.idle(a)
        assert k.prompts(a)[-1] == ["two"], "the loop stays alive"

    run(scenario)


@pytest.mark.rule("ERR-9", "ERR-4")
@pytest.mark.parametrize("how", ["raised", "finish-error"])
def test_a_failed_turn_is_announced_though_a_listener_throws_on_its_error_event(run: Run, how: str) -> None:
    # ERR-4 contains a session/event listener throwing on the error event; that throw is a later
    # failure of a turn that has recorded one (ERR-9: neither logged nor announced), and it does
    # not take the turn's own announcement with it: every failed turn is announced exactly once,
    # carrying the original error.
    async def scenario(k: Kit) -> None:
        k.record("agent/error")
        a = k.agent()
        fired = _throw_once_on(k, "error")
        k.model.push(respond.raises("model failed", code="E_MODEL") if how == "raised"
                     else respond.error("model failed", "E_MODEL"))
        a.send("one")
        await k.idle(a)
        assert fired[0], "the error event was logged"
        assert _error_kinds(k, a) == ["error"]
        announced = [(turn, getattr(exc, "code", None), str(exc)) for turn, _step, exc in k.noted("agent/error")]
        assert len(announced) == 1 and announced[0][0] == 1 and "model failed" in announced[0][2], (
            f"the failed turn must be announced once, with the model's error: {announced}")
        assert announced[0][1] == "E_MODEL", f"agent/error carries the original error (code E_MODEL): {announced}"

    run(scenario)


@pytest.mark.rule("LOG-4", "ERR-1")
@pytest.mark.parametrize("event_type", ["user/message", "step/start", "assistant/message"])
def test_a_throwing_session_event_listener_on_any_event_leaves_the_turns_paired(run: Run, event_type: str) -> None:
    # ERR-4 names the boundaries; on any other event too a throwing session/event listener
    # leaves every turn/start closed by exactly one turn/end before the next (LOG-4), and the
    # loop alive (ERR-1: a failure ends its own turn at most). How that turn ends is not said.
    async def scenario(k: Kit) -> None:
        a = k.agent()
        fired = _throw_once_on(k, event_type)
        a.send("one")
        await k.idle(a)
        assert fired[0]
        a.send("two")
        await k.idle(a)
        kinds = [e["type"] for e in k.events(a) if e["type"] in ("turn/start", "turn/end")]
        assert kinds == ["turn/start", "turn/end"] * 2, f"turns do not pair: {kinds}"
        assert k.reasons(a)[-1] == COMPLETED, "the loop stays alive"

    run(scenario)


@pytest.mark.rule("ERR-4", "LOOP-4")
@pytest.mark.parametrize("does", ["raise", "dispose"])
def test_agent_turn_end_names_the_reason_turn_end_logged(run: Run, does: str) -> None:
    # A session/event listener on turn/end throws (ERR-4: the turn stays as it was closed) or
    # disposes the agent once the turn is closed: agent/turn-end, when it comes, notifies the
    # turn's end as logged (LOOP-4: turn/end, then agent/turn-end), not a reason made up later.
    async def scenario(k: Kit) -> None:
        a = k.agent()
        notified: list[tuple[Any, Any]] = []
        k.on("agent/turn-end", lambda _agent, turn, reason, *_: notified.append((turn, reason)),
             needs="the test compares agent/turn-end's reason with the logged turn/end")

        def listener(_session: object, event: dict) -> None:
            if event["type"] == "turn/end":
                if does == "raise":
                    raise RuntimeError("turn/end listener failed")
                a.dispose()

        k.on("session/event", listener)
        a.send("one")
        await k.idle(a)
        logged = {e["data"]["turn"]: e["data"]["reason"] for e in k.events(a, "turn/end")}
        assert logged == {1: COMPLETED}, logged
        for turn, reason in notified:
            assert reason == logged.get(turn), (
                f"agent/turn-end of turn {turn} says {reason!r}, its logged turn/end {logged.get(turn)!r}")

    run(scenario)


@pytest.mark.rule("ERR-4")
def test_session_event_listener_throwing_on_every_boundary(run: Run) -> None:
    # One listener throwing on step/end, error and turn/end at once (turn/start is ERR-11's),
    # over a turn with a tool step: whatever the loop makes of each throw (a failed turn, whose
    # error event throws as well, or a turn that goes on),
    # the turn balances, nothing follows its turn/end, and once the listener is gone the next
    # prompt runs normally.
    async def scenario(k: Kit) -> None:
        a = k.agent()
        k.tool("echo")
        thrown: list[str] = []

        def listener(_session: object, event: dict) -> None:
            if event["type"] in ("step/end", "error", "turn/end"):
                thrown.append(event["type"])
                raise RuntimeError(f"{event['type']} listener failed")

        remove = k.on("session/event", listener)
        k.model.push(fakes.tool_calls(("c1", "echo", "{}")))
        a.send("one")
        await k.idle(a)
        assert {"step/end", "turn/end"} <= set(thrown), thrown
        _nothing_after_turn_end(k, a)
        assert k.types(a).count("turn/end") == 1
        remove()
        k.model.push(fakes.text("fine"))
        a.send("two")
        await k.idle(a)
        assert k.reasons(a)[-1] == COMPLETED, "the loop stays alive"
        assert k.prompts(a)[-1] == ["two"]

    run(scenario)


@pytest.mark.rule("ERR-5")
def test_throwing_error_listener_contained(run: Run) -> None:
    async def scenario(k: Kit) -> None:
        a = k.agent()
        k.on("agent/error", boom)
        k.model.push(respond.raises("model failed"))
        a.send("one")
        await k.idle(a)
        a.send("two")
        await k.idle(a)
        assert _error_kinds(k, a) == ["error", "completed"]
        assert len(k.events(a, "error")) == 1

    run(scenario)


@pytest.mark.rule("ERR-5")
def test_throwing_error_listener_on_a_late_failure(run: Run) -> None:
    # The announcement of a failure after turn/end (a failing flush, ERR-6) throws too: still
    # contained, nothing is logged for it, and a prompt queued meanwhile runs.
    async def scenario(k: Kit) -> None:
        a = k.agent()
        k.on("agent/error", boom)

        async def flush(*_args: object) -> None:
            a.send("two")
            raise RuntimeError("disk full")

        k.on("session/flush", once(flush), needs="the late failure is a failing flush")
        a.send("one")
        await k.idle(a)
        assert k.prompts(a) == [["one"], ["two"]]
        assert _error_kinds(k, a) == ["completed", "completed"]
        assert k.events(a, "error") == []

    run(scenario)


@pytest.mark.rule("ERR-6")
def test_failing_flush_reported(run: Run) -> None:
    async def scenario(k: Kit) -> None:
        k.record("agent/error")
        a = k.agent()

        async def flush(*_args: object) -> None:
            raise RuntimeError("disk full")

        k.on("session/flush", once(flush))
        a.send("one")
        await k.idle(a)
        _nothing_after_turn_end(k, a)
        assert _error_kinds(k, a) == ["completed"]
        errors = k.noted("agent/error")
        assert len(errors) == 1 and "disk full" in str(errors[0][-1])
        a.send("two")
        await k.idle(a)
        assert _error_kinds(k, a) == ["completed", "completed"]

    run(scenario)


@pytest.mark.rule("ERR-6")
def test_failing_plain_flush_listener_beside_a_healthy_one(run: Run) -> None:
    # A plain (synchronous) flush listener raising, registered after a healthy async one that
    # still runs (whether listeners after a raising one run, 0b leaves open); a prompt queued
    # during the turn runs next, and nothing lands after either turn/end.
    async def scenario(k: Kit) -> None:
        k.record("agent/error")
        a = k.agent()
        healthy: list[int] = []

        async def ok(*_args: object) -> None:
            healthy.append(1)

        def failing(*_args: object) -> None:
            raise RuntimeError("disk full")

        k.on("session/flush", ok)
        k.on("session/flush", once(failing))
        k.model.push(fakes.text("one").hook(lambda: a.send("two")), fakes.text("two"))
        a.send("one")
        await k.idle(a)
        assert k.prompts(a) == [["one"], ["two"]]
        assert _error_kinds(k, a) == ["completed", "completed"]
        types = k.types(a)
        assert types[types.index("turn/end") + 1] == "turn/start", f"an event landed after turn/end: {types}"
        _nothing_after_turn_end(k, a)
        assert len(healthy) == 2, "the healthy flush listener runs for both turns"
        errors = k.noted("agent/error")
        assert len(errors) == 1 and "disk full" in str(errors[0][-1]), errors

    run(scenario)


@pytest.mark.rule("ERR-7")
def test_error_code_carried_or_absent(run: Run) -> None:
    async def scenario(k: Kit) -> None:
        a = k.agent()
        k.model.push(respond.raises("coded", code="E_CODE"), respond.raises("uncoded"))
        a.send("one")
        await k.idle(a)
        a.send("two")
        await k.idle(a)
        e1, e2 = (e["data"] for e in k.events(a, "error"))
        assert e1["code"] == "E_CODE" and e1["message"] == "coded"
        assert "code" not in e2 and e2["message"] == "uncoded"
        r1, r2 = k.reasons(a)
        assert r1 == {"kind": "error", "message": "coded", "code": "E_CODE"}
        assert r2 == {"kind": "error", "message": "uncoded"}

    run(scenario)


@pytest.mark.rule("ERR-7")
@pytest.mark.parametrize("how", ["raised", "finish"])
def test_an_empty_string_code_is_a_code(run: Run, how: str) -> None:
    # ERR-7 carries "a code attribute (a string)": the empty string is one, carried into the error
    # event and the turn-end reason alike (session 62's round Q dropped it from the event only,
    # testing the code for truth in one place and for None in the other).
    async def scenario(k: Kit) -> None:
        a = k.agent()
        k.model.push(respond.raises("refused", code="") if how == "raised" else respond.error("refused", ""))
        a.send("one")
        await k.idle(a)
        (event,) = (e["data"] for e in k.events(a, "error"))
        (reason,) = k.reasons(a)
        assert event.get("code") == "" and reason.get("code") == "", (
            f"the error event says {event}, the turn ends {reason}: an empty-string code is carried into both (ERR-7)")

    run(scenario)


@pytest.mark.rule("ERR-7")
def test_listener_error_code_carried_finish_error_without_code_absent(run: Run) -> None:
    # A listener's coded error (not the model's), and a finish{error} without a code: the code
    # reaches the error event and the reason; without one there is no code key, not a null.
    async def scenario(k: Kit) -> None:
        a = k.agent()
        k.on("agent/step-result", _throwing("agent/step-result", fakes.FakeError("rejected", "E_LISTENER")),
             needs="the coded error is raised there")
        k.model.push(fakes.text("x"), fakes.text("partial").finish("error", "overloaded"))
        a.send("one")
        await k.idle(a)
        a.send("two")
        await k.idle(a)
        e1, e2 = (e["data"] for e in k.events(a, "error"))
        assert e1.get("code") == "E_LISTENER" and "rejected" in e1["message"], e1
        assert "code" not in e2, e2
        r1, r2 = k.reasons(a)
        assert r1.get("code") == "E_LISTENER" and r1["kind"] == "error", r1
        assert r2 == {"kind": "error", "message": "overloaded"}

    run(scenario)


UNSERIALISABLE: Any = {"kind": "plugin", "plugin": object()}
"""A source ``turn/start`` cannot log: ERR-8's example of a failure before turn/start."""


def _queue_unserialisable(agent: AgentHandle, content: str) -> bool:
    """Queue ERR-8's example, a prompt whose source ``turn/start`` cannot log; ``False`` when
    ``send()`` refused it at once. That is allowed: ERR-8 says what follows such a failure if a
    prompt gets queued, and no rule makes ``send()`` take data the log must reject (LOG-1; INJ-4
    has ``inject()`` raise on it). Then no failure comes before turn/start, and the caller knew."""
    try:
        agent.send(content, UNSERIALISABLE)
    except Exception:
        return False
    return True


def _assert_reported_before_turn_start(k: Kit, agent: AgentHandle, queued: bool) -> None:
    users = [t for e in k.events(agent, "user/message") for t in texts(e["data"]["content"])]
    assert "bad" not in users, "the failed prompt opened nothing (no user/message)"
    if not queued:
        return  # send() refused it: nothing was queued, nothing failed before a turn/start
    errors = k.noted("agent/error")
    assert errors, "the failure before turn/start was not reported through agent/error"
    assert all(step == 0 for _turn, step, _exc in errors), f"reported with step 0: {errors}"
    assert all(isinstance(turn, int) and isinstance(exc, Exception) for turn, _step, exc in errors), (
        f"agent/error(agent, turn, step, error) carries a turn number and the error: {errors}"
    )
    assert len(k.events(agent, "turn/start")) == len(k.events(agent, "turn/end")), "no turn is owed"


@pytest.mark.rule("ERR-8")
def test_failure_before_turn_start(run: Run) -> None:
    async def scenario(k: Kit) -> None:
        k.record("agent/error")
        a = k.agent()
        queued = _queue_unserialisable(a, "bad")
        await k.idle(a)
        _assert_reported_before_turn_start(k, a, queued)
        a.send("two")
        await k.idle(a)
        assert k.reasons(a)[-1] == COMPLETED, "the loop goes on"
        assert k.prompts(a)[-1] == ["two"]

    run(scenario)


@pytest.mark.rule("ERR-8")
def test_failure_before_turn_start_between_turns(run: Run) -> None:
    # The bad prompt is queued while a turn runs, so its failure comes between two turns of one
    # running period; a prompt queued after it still runs.
    async def scenario(k: Kit) -> None:
        k.record("agent/error")
        a = k.agent()
        queued: list[bool] = []
        k.model.push(fakes.text("one").hook(lambda: queued.append(_queue_unserialisable(a, "bad"))))
        a.send("one")
        await k.idle(a)
        assert queued, "the model's hook never ran"
        _assert_reported_before_turn_start(k, a, queued[0])
        assert k.reasons(a)[0] == COMPLETED
        a.send("three")
        await k.idle(a)
        assert k.prompts(a)[-1] == ["three"] and k.reasons(a)[-1] == COMPLETED, "the loop goes on"

    run(scenario)


@pytest.mark.rule("LOOP-8", "ERR-8")
def test_steering_given_as_a_failure_before_turn_start_is_announced_still_runs(run: Run) -> None:
    # A failure before turn/start (ERR-8's example) is announced while the agent is running, and
    # a listener of that agent/error steers. No turn is open to take the steering: it is too late
    # for one and runs as a prompt (LOOP-8: never stranded, never silently dropped), before the
    # waiter resolves (IDLE-2) (indie60f, an independent loop of session 48, stranded it: found by
    # the hunt, `bad-source: after agent/error#1: steer`).
    async def scenario(k: Kit) -> None:
        a = k.agent()
        k.on("agent/error", once(lambda *_args: a.steer("late")), needs="a steer from the failure's announcement")
        k.model.push(fakes.text("for late"))
        if not _queue_unserialisable(a, "bad"):
            return  # refused by send(): no failure before turn/start, no announcement to steer from
        await k.idle(a)
        assert "late" in delivered(k, a), (f"steering given as a failure before turn/start was announced never ran before the "
                               f"agent went idle: turns' prompts {k.prompts(a)}, log {k.types(a)}")

    run(scenario)


@pytest.mark.rule("ERR-9")
def test_first_failure_wins(run: Run) -> None:
    async def scenario(k: Kit) -> None:
        k.record("agent/error")
        a = k.agent()
        k.on("agent/request", _throwing("agent/request"), needs="the first failure is raised there")
        k.on("agent/step-end", _throwing("agent/step-end"))
        a.send("one")
        await k.idle(a)
        (reason,) = k.reasons(a)
        assert reason["kind"] == "error" and "agent/request failed" in reason["message"], reason
        errors = k.events(a, "error")
        assert len(errors) == 1 and "agent/request failed" in errors[0]["data"]["message"], errors
        announced = k.noted("agent/error")
        assert len(announced) == 1 and "agent/request failed" in str(announced[0][-1])

    run(scenario)


@pytest.mark.rule("ERR-9")
@pytest.mark.parametrize("how", ["listener", "model", "raised", "raised-mid-stream", "raised-on-call"])
def test_failed_turn_is_announced_with_its_original_error(run: Run, how: str) -> None:
    # "carrying the original error": the error raised into the loop, a plugin's (a throwing
    # agent/request listener) or the model adapter's (raised from stream(), FINISH-2: by the call
    # itself, or by the stream before its first chunk or between two), is what agent/error gives its listeners: in this process the
    # object itself; over the wire no object crosses, and its code must. A model's error finish
    # (FINISH-1) has no object: its code is carried. A loop announcing a new error made of the
    # raised one's message and code, or a wrapper chained to it (raise New(...) from exc), hands
    # its listeners something else than the original: its type and attributes are lost to an
    # `isinstance` or attribute test (session 60's blind round K, session 61's round N; every
    # independent loop tried announces the object itself).
    async def scenario(k: Kit) -> None:
        k.record("agent/error")
        a = k.agent()
        plugin_error = fakes.FakeError("agent/request failed", "E_REQUEST")
        failure: BaseException = plugin_error
        code = "E_REQUEST"
        if how == "listener":
            k.on("agent/request", _throwing("agent/request", plugin_error), needs="the plugin's error is raised there")
        elif how == "model":
            k.model.push(respond.error("overloaded", "OVERLOADED"))
            code = "OVERLOADED"  # FINISH-1: the model's code is carried
        else:
            raising = fakes.FakeError("stream broke", "E_STREAM")
            k.model.push(respond.raises(raising) if how == "raised"
                         else respond.raises(raising, on_call=True) if how == "raised-on-call"  # stream() itself
                         else respond.text("partial answer").raises(raising, after=1))
            code = "E_STREAM"
        a.send("one")
        await k.idle(a)
        (announced,) = k.noted("agent/error")
        error = announced[-1]
        if how.startswith("raised"):
            assert k.model.raised, "the model's stream raised"
            failure = k.model.raised[0]  # the object the stream raised (a fresh copy of the script's)
        if how != "model" and runtime_of(k.impl) == PYTHON:
            wrapped = " (a wrapper chained to it)" if _chains_to(error, failure) else ""
            assert error is failure, (
                f"agent/error announced {type(error).__name__}: {error} (code {getattr(error, 'code', None)!r}){wrapped}, "
                f"not the {type(failure).__name__} raised into the loop (ERR-9: carrying the original error)")
        assert getattr(error, "code", None) == code, (
            f"agent/error announced {type(error).__name__}: {error} (code {getattr(error, 'code', None)!r}), "
            f"not the turn's original error (code {code!r})")

    run(scenario)


def _chains_to(error: object, original: BaseException) -> bool:
    """Whether ``error`` is another error whose cause or context chain reaches ``original``."""
    return any(link is original for link in causes(error)[1:])


def _fail_late(k: Kit, where: str, error: Exception, *, needs: str | None = None) -> None:
    """A failure after the turn's ``turn/end``, once: a throwing ``agent/turn-end`` listener
    (ERR-10) or a failing ``session/flush`` listener (ERR-6)."""
    if where == "agent/turn-end":
        k.on(where, _throwing(where, error), needs=needs)
        return

    async def flush(*_args: object) -> None:
        raise error

    k.on("session/flush", once(flush), needs=needs)


@pytest.mark.rule("ERR-9")
@pytest.mark.parametrize("later", ["turn-end", "flush"])
@pytest.mark.parametrize("first", ["stream", "step-result"])
def test_failure_after_turn_end_of_failed_turn_not_announced(run: Run, first: str, later: str) -> None:
    # A turn that already failed inside its steps fails again after its turn/end (a throwing
    # agent/turn-end listener, ERR-10, or a failing flush, ERR-6). Those late failures are
    # normally announced; here the turn has recorded a failure, so the first one wins and the
    # turn is still announced exactly once (test_first_failure_wins only has failures before
    # turn/end).
    async def scenario(k: Kit) -> None:
        k.record("agent/error")
        a = k.agent()
        if first == "stream":
            k.model.push(respond.raises("first failure", code="E_FIRST"))
        else:
            first_failure = _throwing("agent/step-result", fakes.FakeError("first failure", "E_FIRST"))
            k.on("agent/step-result", first_failure, needs="the first failure is raised there")
        _fail_late(k, "agent/turn-end" if later == "turn-end" else "session/flush", fakes.FakeError("late failure"),
                   needs="the late failure is raised there")
        a.send("one")
        await k.idle(a)
        # A model's failure is the reason's message (FINISH-2); a listener's is carried in it
        # (ERR-2 says only that the turn ends error; its code is kept, ERR-7).
        [reason] = k.reasons(a)
        errors = [e["data"] for e in k.events(a, "error")]
        assert len(errors) == 1, errors
        if first == "stream":
            assert reason == {"kind": "error", "message": "first failure", "code": "E_FIRST"}
            assert errors[0]["message"] == "first failure", errors
        else:
            assert reason["kind"] == "error" and "first failure" in reason["message"], reason
            assert reason.get("code") == "E_FIRST", reason
            assert "first failure" in errors[0]["message"], errors
            assert "late failure" not in reason["message"] + errors[0]["message"], "the first failure wins"
        assert k.types(a)[-1] == "turn/end", "nothing is appended after turn/end"
        announced = k.noted("agent/error")
        assert [(turn, str(exc)) for turn, _step, exc in announced] == [(1, "first failure")], (
            f"the failed turn must be announced once, with its first error: {announced}"
        )
        a.send("two")
        await k.idle(a)
        assert k.reasons(a)[-1] == COMPLETED, "the loop goes on"
        assert len(k.noted("agent/error")) == 1

    run(scenario)


@pytest.mark.rule("ERR-10")
def test_throwing_turn_end_listener(run: Run) -> None:
    async def scenario(k: Kit) -> None:
        k.record("agent/error")
        a = k.agent()
        k.on("agent/turn-end", _throwing("agent/turn-end"))
        k.model.push(fakes.text("trunc", finish="max-tokens"))
        a.send("one")
        await k.idle(a)
        assert k.reasons(a) == [{"kind": "max-tokens"}]
        assert k.events(a, "error") == []
        assert len(k.noted("agent/error")) == 1
        a.send("two")
        await k.idle(a)
        assert k.reasons(a)[-1] == COMPLETED

    run(scenario)


@pytest.mark.rule("ERR-10", "ERR-6")
@pytest.mark.parametrize("late", ["agent/turn-end", "session/flush"])
@pytest.mark.parametrize("stop", ["abort", "cancel"])
def test_a_late_failure_after_an_aborted_turn_is_announced(run: Run, stop: str, late: str) -> None:
    # An aborted turn has an outcome but no failure: a throwing agent/turn-end listener after it
    # (ERR-10) or a failing flush (ERR-6) is announced through agent/error like after a completed
    # one (ERR-9 silences only a failure after a *failure*), the turn keeps aborted{reason}, no
    # error event is logged, and the loop goes on.
    async def scenario(k: Kit) -> None:
        k.record("agent/error")
        a = k.agent()
        failure = fakes.FakeError("late failure", "E_LATE")
        _fail_late(k, late, failure)
        k.model.push(respond.hang(), fakes.text("two"))
        a.send("one")
        await k.until(lambda: bool(k.model.requests), "the first turn's model call")
        getattr(a, stop)("stop")
        await k.idle(a)
        assert k.reasons(a) == [aborted("stop")]
        assert k.events(a, "error") == [], "a late failure logs no error event"
        announced = k.noted("agent/error")
        assert len(announced) == 1 and announced[0][-1] is failure, (
            f"a {late} failure after an aborted turn is announced once, with its own error "
            f"({'ERR-10' if late == 'agent/turn-end' else 'ERR-6'}): {announced}")
        a.send("two")
        await k.idle(a)
        assert k.reasons(a)[-1] == COMPLETED

    run(scenario)


@pytest.mark.rule("ERR-10")
def test_throwing_turn_end_listener_completed_then_disposed(run: Run) -> None:
    # A completed turn keeps completed and its failure is announced with the original error;
    # during disposal the same listener's failure is swallowed (not announced), the turn ends
    # disposed.
    async def scenario(k: Kit) -> None:
        k.record("agent/error")
        a = k.agent()
        failure = fakes.FakeError("turn-end listener failed", "E_TURN_END")

        def listener(*_args: object) -> None:
            raise failure

        k.on("agent/turn-end", listener)
        k.model.push(fakes.text("done"), respond.hang())
        a.send("one")
        await k.idle(a)
        assert k.reasons(a) == [COMPLETED]
        assert k.events(a, "error") == [] and k.types(a)[-1] == "turn/end"
        announced = k.noted("agent/error")
        assert len(announced) == 1 and announced[0][0] == 1 and announced[0][-1] is failure, announced
        a.send("two")
        await k.until(lambda: len(k.model.requests) == 2, "the second turn's model call")
        a.dispose()
        await k.idle(a)
        assert k.reasons(a) == [COMPLETED, {"kind": "disposed"}]
        assert k.events(a, "error") == []
        assert len(k.noted("agent/error")) == 1, "a turn-end failure during disposal is swallowed"

    run(scenario)


@pytest.mark.rule("ERR-11")
def test_throwing_turn_start_event_listener(run: Run) -> None:
    async def scenario(k: Kit) -> None:
        k.record("agent/error")
        a = k.agent()
        fired = [False]

        def listener(_session: object, event: dict) -> None:
            if event["type"] == "turn/start" and not fired[0]:
                fired[0] = True
                raise RuntimeError("turn/start listener failed")

        k.on("session/event", listener)
        a.send("one")
        await k.idle(a)
        assert _error_kinds(k, a) == ["error"]
        assert k.events(a, "user/message") == [], "the prompt is consumed"
        assert k.model.requests == []
        assert len(k.noted("agent/error")) == 1
        a.send("two")
        await k.idle(a)
        assert k.prompts(a) == [[], ["two"]]

    run(scenario)


@pytest.mark.rule("ERR-11")
def test_throwing_turn_start_listener_on_a_back_to_back_turn(run: Run) -> None:
    # The second turn of a running period (its burst queued during the first) fails at its
    # turn/start: its whole burst is consumed (no user/message, no model call), announced once,
    # and a later prompt runs.
    async def scenario(k: Kit) -> None:
        k.record("agent/error")
        a = k.agent()
        starts = [0]

        def listener(_session: object, event: dict) -> None:
            if event["type"] == "turn/start":
                starts[0] += 1
                if starts[0] == 2:
                    raise RuntimeError("turn/start listener failed")

        def burst() -> None:
            a.send("B1")
            a.send("B2")

        k.on("session/event", listener)
        k.model.push(fakes.text("A").hook(burst), fakes.text("C"))
        a.send("A")
        await k.idle(a)
        assert _error_kinds(k, a) == ["completed", "error"]
        assert k.prompts(a) == [["A"], []], "B1 and B2 are consumed by the failed turn"
        assert len(k.model.requests) == 1
        assert [turn for turn, _step, _exc in k.noted("agent/error")] == [2]
        a.send("C")
        await k.idle(a)
        assert k.prompts(a)[-1] == ["C"] and k.reasons(a)[-1] == COMPLETED

    run(scenario)


async def _warned_turn_two(k: Kit, agent_id: str, arrange: Callable[[AgentHandle], None]) -> list[str]:
    """Run a clean turn 1, then ``arrange`` the failures and run turn 2, capturing warnings."""
    with captured_warnings(k) as capture:
        a = k.agent(agent_id)
        a.send("one")
        await k.idle(a)
        arrange(a)
        a.send("two")
        await k.idle(a)
    return warnings_naming(k, capture, agent_id, 2)


@pytest.mark.rule("ERR-12")
def test_contained_failures_are_warned(run: Run) -> None:
    # Two contained listener failures in turn 2: a throwing agent/turn-continuation listener
    # (the turn ends error) and a throwing agent/turn-end listener (announced after turn/end).
    async def scenario(k: Kit) -> None:
        def arrange(_a: AgentHandle) -> None:
            k.on("agent/turn-continuation", _throwing("agent/turn-continuation"), needs="a contained failure is raised there")
            k.on("agent/turn-end", _throwing("agent/turn-end"), needs="a contained failure is raised there")

        named = await _warned_turn_two(k, "warned-agent", arrange)
        assert len(named) >= 2, f"expected a warning naming the agent and turn 2 per contained failure: {named}"

    run(scenario)


@pytest.mark.rule("ERR-12")
def test_contained_model_and_flush_failures_are_warned(run: Run) -> None:
    # Failures that are not listeners of the agent/* taxonomy: a model stream raising (the turn
    # ends error, FINISH-2) and a failing session/flush (ERR-6), both in turn 2.
    async def scenario(k: Kit) -> None:
        k.model.push(fakes.text("one"), respond.raises("model failed"))  # turn 1's answer, then turn 2's

        def arrange(_a: AgentHandle) -> None:
            async def flush(*_args: object) -> None:
                raise RuntimeError("disk full")

            k.on("session/flush", once(flush), needs="a contained failure is raised there")

        named = await _warned_turn_two(k, "logged-agent", arrange)
        assert len(named) >= 2, f"expected a warning naming the agent and turn 2 per contained failure: {named}"

    run(scenario)


@pytest.mark.rule("ERR-12")
@pytest.mark.parametrize("call", ["a failing tool", "an unknown tool"])
def test_contained_tool_failures_are_warned(run: Run, call: str) -> None:
    # TOOL-3 contains a failing tool and an unknown tool into an is_error tool/result and the turn
    # goes on: a contained failure, warned naming the agent and turn 2 like any other (session 49's
    # review: an independent loop warned for a failing tool but not for an unknown one).
    async def scenario(k: Kit) -> None:
        k.tool("broken", error="disk gone")
        name = "broken" if call == "a failing tool" else "nobody-registered-this"
        k.model.push(fakes.text("one"), fakes.tool_calls(("c1", name, "{}")), fakes.text("after the tool"))
        named = await _warned_turn_two(k, "tooling-agent", lambda _a: None)
        assert named, f"expected a warning naming the agent and turn 2 for {call}'s contained failure"

    run(scenario)


@pytest.mark.rule("ERR-12")
def test_a_throwing_agent_error_listener_is_warned(run: Run) -> None:
    # The failure of an agent/error listener is a contained failure like any other, so it is
    # warned too: turn 2 fails (its model raises) and the listener told of it throws, two
    # contained failures, each warned naming the agent and turn 2.
    async def scenario(k: Kit) -> None:
        k.model.push(fakes.text("one"), respond.raises("model failed"))

        def arrange(_a: AgentHandle) -> None:
            k.on("agent/error", _throwing("agent/error"), needs="a failure announced there")

        named = await _warned_turn_two(k, "reporting-agent", arrange)
        assert len(named) >= 2, ("expected a warning naming the agent and turn 2 for the model's failure and "
                                 f"one for the throwing agent/error listener: {named}")

    run(scenario)


@pytest.mark.rule("ERR-12")
def test_a_contained_agent_queued_failure_is_warned(run: Run) -> None:
    # Whether send() contains a throwing agent/queued listener the spec leaves open (raising it
    # to the caller is allowed). Once contained, it is a contained failure like any other:
    # warned under the implementation's logger, naming the agent. With no turn running, which
    # turn it names, or whether it names none ("turn -"), the spec leaves open.
    async def scenario(k: Kit) -> None:
        with captured_warnings(k) as capture:
            a = k.agent("queueing-agent")
            k.on("agent/queued", _throwing("agent/queued"), needs="a failure raised there")
            try:
                a.send("one")
            except Exception:
                return  # not contained: nothing for ERR-12 to require
            await k.idle(a)
        named = warnings_naming(k, capture, "queueing-agent", None, any_turn=True)
        assert named, ("the contained agent/queued failure was not warned naming the agent: "
                       f"{[r.getMessage() for r in capture.records]}")

    run(scenario)


@pytest.mark.rule("ERR-4", "ERR-9", "DISP-5")
@pytest.mark.parametrize("ending", ["failure", "disposal"])
def test_throwing_step_end_listener_while_closing_an_open_step(run: Run, ending: str) -> None:
    # The step is still open when the turn closes (its model failed, or the agent was disposed
    # in it), so closing appends its step/end, and that append throws: the turn still balances
    # (one step/end, one turn/end), nothing follows, and the loop (or the disposal) goes on.
    async def scenario(k: Kit) -> None:
        k.record("agent/error")
        a = k.agent()
        k.on("session/event", lambda _s, e: boom() if e["type"] == "step/end" else None)
        k.model.push(respond.raises("model failed") if ending == "failure" else respond.hang())
        a.send("one")
        if ending == "disposal":
            await k.until(lambda: bool(k.model.requests), "the model call")
            a.dispose()
        await k.idle(a)
        types = k.types(a)
        assert types.count("step/end") == 1 and types.count("turn/end") == 1, types
        _nothing_after_turn_end(k, a)
        if ending == "failure":
            assert _error_kinds(k, a) == ["error"]
            # ERR-9: the first failure wins; the throwing step/end listener is a later one.
            assert len(k.events(a, "error")) == 1 and len(k.noted("agent/error")) == 1
            assert "model failed" in str(k.noted("agent/error")[0][-1])
            a.send("two")
            await k.idle(a)
            assert k.prompts(a)[-1] == ["two"], "the loop stays alive"
        else:
            assert k.reasons(a) == [{"kind": "disposed"}]
            assert k.events(a, "error") == [], "DISP-5: disposal logs no error event"

    run(scenario)


@pytest.mark.rule("ERR-12")
def test_failure_before_turn_start_is_warned(run: Run) -> None:
    # A failure with no turn opened (ERR-8's example) is contained too: warned, naming the
    # agent and a turn number (which one, for a turn that never opened, the spec leaves open).
    async def scenario(k: Kit) -> None:
        with captured_warnings(k) as capture:
            a = k.agent("early-agent")
            queued = _queue_unserialisable(a, "bad")
            await k.idle(a)
        if not queued:
            return  # refused by send(): no failure was contained, none to warn of
        named = warnings_naming(k, capture, "early-agent", None)
        assert named, f"the failure before turn/start was not warned naming the agent and a turn: {[r.getMessage() for r in capture.records]}"

    run(scenario)


@pytest.mark.rule("ERR-6", "ERR-9")
def test_two_failing_flush_listeners_announce_the_turn_once(run: Run) -> None:
    # ERR-6 reports a failing flush through agent/error; ERR-9 announces a turn's failure once,
    # the first winning: two flush listeners failing in one flush are one announcement, of either.
    async def scenario(k: Kit) -> None:
        k.record("agent/error")

        async def disk_full(*_args: object) -> None:
            raise RuntimeError("disk full")

        async def network_down(*_args: object) -> None:
            raise RuntimeError("network down")

        k.on("session/flush", disk_full)
        k.on("session/flush", network_down)
        a = k.agent()
        a.send("one")
        await k.idle(a)
        told = [str(error) for _turn, _step, error in k.noted("agent/error")]
        assert len(told) == 1, f"turn 1 was announced {len(told)} times: {told}"

    run(scenario)


@pytest.mark.rule("ERR-6", "LOOP-4")
def test_flush_awaits_every_listener_when_one_fails_fast(run: Run) -> None:
    # session/flush(session): every listener gets the agent's session and the flush is awaited
    # in full (LOOP-4) although one listener fails at once: the slow one has finished before
    # when_idle() resolves, and only the failure is reported (ERR-6); a listener returning a
    # value is no failure.
    async def scenario(k: Kit) -> None:
        k.record("agent/error")
        a = k.agent()
        sessions: list[Any] = []
        finished: list[str] = []

        async def slow(session: Any) -> str:
            sessions.append(session)
            await asyncio.sleep(2.0)
            finished.append("slow")
            return "flushed"

        async def failing(session: Any) -> None:
            sessions.append(session)
            raise RuntimeError("disk full")

        k.on("session/flush", slow)
        k.on("session/flush", once(failing))
        a.send("one")
        await k.idle(a)
        assert finished == ["slow"], "when_idle() resolved before the awaited flush had finished"
        assert sessions and all(s is not None and s.id == a.session.id for s in sessions), sessions
        errors = k.noted("agent/error")
        assert len(errors) == 1 and "disk full" in str(errors[0][-1]), errors
        a.send("two")
        await k.idle(a)
        assert finished == ["slow", "slow"] and len(k.noted("agent/error")) == 1, "a healthy flush reports nothing"

    run(scenario)


@pytest.mark.rule("ERR-9", "ERR-10")
def test_two_late_failures_of_a_completed_turn_announced_once(run: Run) -> None:
    # A clean turn, then a throwing agent/turn-end listener and a failing session/flush: both
    # come after turn/end, the first is announced, the second is a later failure of the same
    # turn (ERR-9: neither logged nor announced); turn/end keeps completed.
    async def scenario(k: Kit) -> None:
        k.record("agent/error")
        a = k.agent()
        k.on("agent/turn-end", once(boom))

        async def flush(*_args: object) -> None:
            raise RuntimeError("disk full")

        k.on("session/flush", once(flush))
        a.send("one")
        await k.idle(a)
        errors = k.noted("agent/error")
        assert len(errors) == 1, f"one turn, announced {len(errors)} times: {errors}"
        assert _error_kinds(k, a) == ["completed"]
        assert k.events(a, "error") == []

    run(scenario)


@pytest.mark.rule("ERR-4", "ERR-9")
def test_throwing_turn_end_listener_if_announced_carries_its_own_error(run: Run) -> None:
    # A session/event listener throwing on the turn/end of a clean turn: the turn stays
    # balanced with its reason, nothing follows, and whatever is announced through agent/error
    # carries the listener's own error (ERR-9: "carrying the original error").
    async def scenario(k: Kit) -> None:
        k.record("agent/error")
        failure = RuntimeError("turn/end listener failed")
        thrown: list[int] = []

        def listener(_session: object, event: dict[str, Any]) -> None:
            if event["type"] == "turn/end" and not thrown:
                thrown.append(1)
                raise failure

        k.on("session/event", listener)
        a = k.agent()
        a.send("one")
        await k.idle(a)
        assert thrown == [1] and _error_kinds(k, a) == ["completed"]
        _nothing_after_turn_end(k, a)
        errors = k.noted("agent/error")
        assert len(errors) <= 1, errors
        for _turn, _step, error in errors:
            assert error is failure or str(error) == str(failure), error

    run(scenario)


@pytest.mark.rule("ERR-12", "DISP-2")
def test_throwing_disposed_status_listener_warned_naming_the_turn(run: Run) -> None:
    # Disposal inside turn 2 (from its agent/turn-start listener, right after the turn's
    # user/message) with a listener throwing on agent/status('disposed'): disposal is not broken
    # (DISP-2) and the contained failure is warned naming the agent and turn 2 (ERR-12).
    async def scenario(k: Kit) -> None:
        def arrange(a: AgentHandle) -> None:
            k.on("agent/turn-start", lambda _agent, turn: a.dispose() if turn == 2 else None)
            k.on("agent/status", lambda _agent, status: boom() if status == "disposed" else None)

        with captured_warnings(k) as capture:
            a = k.agent("disposed-agent")
            a.send("one")
            await k.idle(a)
            arrange(a)
            a.send("two")
            await k.idle(a)
        assert a.status == "disposed"
        named = warnings_naming(k, capture, "disposed-agent", 2)
        assert named, f"no warning named the agent and turn 2: {[r.getMessage() for r in capture.records]}"

    run(scenario)
