"""Section 9: disposal (DISP-1..5)."""

from __future__ import annotations

import pytest

from conformance.adapter import AgentHandle
from conformance.fakes import respond
from conformance.harness import Kit

from ._support import DISPOSED, Run, Watch, boom


async def _mid_turn(k: Kit) -> AgentHandle:
    a = k.agent()
    k.model.push(respond.hang())
    a.send("A")
    await k.until(lambda: bool(k.model.requests), "A's model call")
    return a


@pytest.mark.rule("DISP-1")
def test_dispose_mid_turn(run: Run) -> None:
    async def scenario(k: Kit) -> None:
        k.record("agent/status")
        a = await _mid_turn(k)
        a.dispose()
        await k.idle(a)
        assert k.statuses()[-1] == "disposed"
        assert k.reasons(a) == [DISPOSED]
        assert k.types(a)[-2:] == ["step/end", "turn/end"], "the open step is closed first"

    run(scenario)


@pytest.mark.rule("DISP-2")
def test_dispose_idempotent_and_unbreakable(run: Run) -> None:
    async def scenario(k: Kit) -> None:
        k.on("agent/status", boom)
        k.on("agent/turn-end", boom)
        a = await _mid_turn(k)
        watch = Watch(k, a)
        a.dispose()
        a.dispose()
        assert a.status == "disposed"
        await watch.wait()
        await k.settle()
        task = k.service.driver_task(a)
        assert task is None or task.done(), "disposal ends the driver"
        a.dispose()
        assert k.reasons(a) == [DISPOSED]

    run(scenario)


@pytest.mark.rule("DISP-3")
def test_disposed_agent_rejects_input(run: Run) -> None:
    async def scenario(k: Kit) -> None:
        a = k.agent()
        a.dispose()
        for name in ("send", "steer"):
            with pytest.raises(Exception, match=r"(?i)dispos") as info:
                getattr(a, name)("late")
            assert info.type is not AssertionError
        if "injection" in k.impl.features:
            with pytest.raises(Exception, match=r"(?i)dispos"):
                await a.inject("late")
        assert k.events(a) == []

    run(scenario)


@pytest.mark.rule("DISP-4")
@pytest.mark.parametrize("listener", ["session/event", "agent/turn-end"])
def test_throwing_turn_end_listener_during_disposal(run: Run, listener: str) -> None:
    async def scenario(k: Kit) -> None:
        if listener == "session/event":
            k.on("session/event", lambda _s, e: boom() if e["type"] == "turn/end" else None)
        else:
            k.on("agent/turn-end", boom)
        a = await _mid_turn(k)
        a.dispose()
        await k.idle(a)
        assert k.reasons(a) == [DISPOSED]

    run(scenario)


@pytest.mark.rule("DISP-5")
def test_disposal_is_not_a_failure(run: Run) -> None:
    async def scenario(k: Kit) -> None:
        k.record("agent/status", "agent/error")
        a = await _mid_turn(k)
        a.dispose()
        await k.idle(a)
        assert k.events(a, "error") == []
        assert k.statuses() == ["running", "disposed"]
        assert k.noted("agent/error") == []

    run(scenario)
