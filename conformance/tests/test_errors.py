"""Section 7: error containment (ERR-1..12)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pytest

from conformance import fakes
from conformance.fakes import respond
from conformance.harness import Kit

from ._support import COMPLETED, Run, boom, once


def _error_kinds(k: Kit, agent: object) -> list[str]:
    return [r["kind"] for r in k.reasons(agent)]  # type: ignore[arg-type]


WATERFALLS = ("agent/request", "agent/step-result", "agent/turn-continuation", "tools/execute")


def _throwing(name: str) -> Callable[..., Any]:
    """A listener for ``name`` that throws the first time, then passes through."""
    fired = [False]

    def listener(*args: object) -> object:
        if not fired[0]:
            fired[0] = True
            raise RuntimeError(f"{name} failed")
        return args[-1]() if name in WATERFALLS else None  # type: ignore[operator]

    return listener


@pytest.mark.rule("ERR-1")
def test_throwing_plugin_ends_turn_not_loop(run: Run) -> None:
    async def scenario(k: Kit) -> None:
        a = k.agent()
        k.on("agent/request", _throwing("agent/request"))
        a.send("one")
        await k.idle(a)
        a.send("two")
        await k.idle(a)
        assert _error_kinds(k, a) == ["error", "completed"]

    run(scenario)


BOUNDARIES = [
    "agent/turn-start",
    "agent/step-start",
    "agent/step-end",
    "agent/request",
    "agent/step-result",
    "agent/turn-continuation",
]


@pytest.mark.rule("ERR-2")
@pytest.mark.parametrize("event", BOUNDARIES)
def test_throwing_boundary_listener(run: Run, event: str) -> None:
    async def scenario(k: Kit) -> None:
        k.record("agent/error")
        a = k.agent()
        k.on(event, _throwing(event))
        a.send("one")
        await k.idle(a)
        (reason,) = k.reasons(a)
        assert reason == {"kind": "error", "message": f"{event} failed"}
        assert len(k.events(a, "error")) == 1
        assert len(k.events(a, "turn/end")) == 1
        assert len(k.noted("agent/error")) == 1
        # LOG-5 balance (an open step closed before turn/end) is checked on close.

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


@pytest.mark.rule("ERR-4")
@pytest.mark.parametrize("event_type", ["turn/start", "step/end", "error", "turn/end"])
def test_throwing_session_event_listener(run: Run, event_type: str) -> None:
    async def scenario(k: Kit) -> None:
        a = k.agent()
        fired = [False]

        def listener(_session: object, event: dict) -> None:
            if event["type"] == event_type and not fired[0]:
                fired[0] = True
                raise RuntimeError(f"{event_type} listener failed")

        k.on("session/event", listener)
        if event_type == "error":
            k.model.push(respond.raises("model failed"))
        a.send("one")
        await k.idle(a)
        events = k.events(a)
        first_end = next(i for i, e in enumerate(events) if e["type"] == "turn/end")
        assert all(e["type"] == "turn/end" for e in events[first_end:]), "nothing after the turn's turn/end"
        a.send("two")
        await k.idle(a)
        assert k.reasons(a)[-1] == COMPLETED, "the loop stays alive"
        assert fired[0]

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
        assert k.types(a)[-1] == "turn/end", "nothing is appended after turn/end"
        assert _error_kinds(k, a) == ["completed"]
        errors = k.noted("agent/error")
        assert len(errors) == 1 and "disk full" in str(errors[0][-1])
        a.send("two")
        await k.idle(a)
        assert _error_kinds(k, a) == ["completed", "completed"]

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


@pytest.mark.rule("ERR-8")
def test_failure_before_turn_start(run: Run) -> None:
    async def scenario(k: Kit) -> None:
        k.record("agent/error")
        a = k.agent()
        k.on("agent/status", once(lambda _a, status: boom() if status == "running" else None))
        a.send("one")
        await k.idle(a)
        errors = k.noted("agent/error")
        assert errors and all(e[1] == 0 for e in errors), f"reported with step 0: {errors}"
        assert len(k.events(a, "turn/start")) == len(k.events(a, "turn/end"))
        a.send("two")
        await k.idle(a)
        assert k.reasons(a)[-1] == COMPLETED

    run(scenario)


@pytest.mark.rule("ERR-9")
def test_first_failure_wins(run: Run) -> None:
    async def scenario(k: Kit) -> None:
        k.record("agent/error")
        a = k.agent()
        k.on("agent/request", _throwing("agent/request"))
        k.on("agent/step-end", _throwing("agent/step-end"))
        a.send("one")
        await k.idle(a)
        assert k.reasons(a) == [{"kind": "error", "message": "agent/request failed"}]
        errors = k.events(a, "error")
        assert [e["data"]["message"] for e in errors] == ["agent/request failed"]
        announced = k.noted("agent/error")
        assert len(announced) == 1 and "agent/request failed" in str(announced[0][-1])

    run(scenario)


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
            k.on("agent/step-result", _raise_once("agent/step-result", "first failure", "E_FIRST"))
        if later == "turn-end":
            k.on("agent/turn-end", _raise_once("agent/turn-end", "late failure"))
        else:

            async def flush(*_args: object) -> None:
                raise fakes.FakeError("late failure")

            k.on("session/flush", once(flush))
        a.send("one")
        await k.idle(a)
        assert k.reasons(a) == [{"kind": "error", "message": "first failure", "code": "E_FIRST"}]
        errors = [e["data"] for e in k.events(a, "error")]
        assert len(errors) == 1 and errors[0]["message"] == "first failure", errors
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


def _raise_once(name: str, message: str, code: str | None = None) -> Callable[..., Any]:
    """A listener for ``name`` raising ``FakeError(message, code)`` the first time (a coded
    error, so the turn-end reason shows which failure won), then passing through."""
    fired = [False]

    def listener(*args: object) -> object:
        if not fired[0]:
            fired[0] = True
            raise fakes.FakeError(message, code)
        return args[-1]() if name in WATERFALLS else None  # type: ignore[operator]

    return listener


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


class _Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@pytest.mark.rule("ERR-12")
def test_contained_failures_are_warned(run: Run) -> None:
    async def scenario(k: Kit) -> None:
        logger = logging.getLogger(k.impl.logger_name)
        capture = _Capture()
        logger.addHandler(capture)
        try:
            a = k.agent("warned-agent")
            k.on("agent/turn-continuation", _throwing("agent/turn-continuation"))
            k.on("agent/turn-end", _throwing("agent/turn-end"))
            a.send("one")
            await k.idle(a)
        finally:
            logger.removeHandler(capture)
        assert len(capture.messages) >= 2, f"expected a warning per contained failure: {capture.messages}"
        for m in capture.messages:
            assert "warned-agent" in m and "turn" in m.lower(), f"warning does not name agent and turn: {m}"

    run(scenario)
