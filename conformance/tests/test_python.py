"""Section 12: Python specifics (PY-1..3)."""

from __future__ import annotations

import asyncio
import json

import pytest

from conformance import fakes
from conformance.adapter import Implementation
from conformance.fakes import respond
from conformance.harness import Kit, run_scenario

from ._support import COMPLETED, DISPOSED, Run


@pytest.mark.rule("PY-1")
def test_cancelling_driver_task_disposes(run: Run) -> None:
    async def scenario(k: Kit) -> None:
        a = k.agent()
        k.model.push(respond.hang())
        a.send("A")
        await k.until(lambda: bool(k.model.requests), "A's model call")
        task = k.service.driver_task(a)
        assert task is not None, "the adapter must expose the driver task (ServiceHandle.driver_task)"
        task.cancel()
        await k.until(task.done, "the driver task to end")
        await k.settle()
        assert a.status == "disposed"
        assert k.reasons(a) == [DISPOSED]

    run(scenario)


@pytest.mark.rule("PY-2")
def test_sync_and_async_listeners(run: Run) -> None:
    async def scenario(k: Kit) -> None:
        order: list[str] = []
        k.on("agent/queued", lambda *_: order.append("first"))
        k.on("agent/queued", lambda *_: order.append("second"))

        def sync_request(agent: object, turn: int, step: int, request: dict, next: object) -> object:
            order.append("sync waterfall")
            return next()  # type: ignore[operator]

        async def async_request(agent: object, turn: int, step: int, request: dict, next: object) -> object:
            order.append("async waterfall")
            return await next()  # type: ignore[operator]

        async def flush(*_args: object) -> None:
            await asyncio.sleep(0.5)
            order.append("flushed")

        k.on("agent/request", sync_request)
        k.on("agent/request", async_request)
        k.on("session/flush", flush)
        a = k.agent()
        a.send("hi")
        assert order == ["first", "second"], "emit runs listeners synchronously, in order"
        await k.idle(a)
        assert order == ["first", "second", "sync waterfall", "async waterfall", "flushed"]
        assert k.reasons(a) == [COMPLETED]

    run(scenario)


def _transcript(impl: Implementation, schedule: str) -> str:
    out: list[str] = []

    async def scenario(k: Kit) -> None:
        k.tool("echo")
        k.model.push(fakes.tool_calls(("c1", "echo", "{}")), fakes.text("done", usage=(1, 2)))
        a = k.agent()
        a.send("hi")
        await k.idle(a)
        await asyncio.sleep(1.5)
        a.send("again")
        await k.idle(a)
        out.append(a.session.id)
        out.append(json.dumps(a.session.events, sort_keys=True, separators=(",", ":")))

    run_scenario(impl, scenario, schedule)
    return "\n".join(out)


@pytest.mark.rule("PY-3")
def test_same_seed_same_bytes(impl: Implementation) -> None:
    for schedule in ("fifo", "random-7"):
        assert _transcript(impl, schedule) == _transcript(impl, schedule)
    assert "session" in _transcript(impl, "fifo")
