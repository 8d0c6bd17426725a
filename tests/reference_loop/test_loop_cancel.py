"""End-to-end: the cancellation windows, idle waiters and disposal of the driver loop."""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar

from conformance.fakes.model import respond

from .conftest import Recorder, make_service, turn_ends, types


def test_window_0_send_when_idle_cancel_right_after_creation(arun: Any) -> None:
    async def body() -> None:
        svc, model = make_service(respond.text("B"))
        agent = svc.create("a", {"model": "m"})
        agent.send("A")
        waiter = agent.when_idle()
        agent.cancel()
        await waiter  # CANCEL-W0: released, not left hanging
        assert agent.session.events == []
        agent.send("B")  # MARKER-1: the next prompt runs normally
        await agent.when_idle()
        assert turn_ends(agent) == [{"kind": "completed"}]
        assert model.calls == 1

    arun(body)


def test_window_0_idle_listener_sends_then_cancels(arun: Any) -> None:
    async def body() -> None:
        svc, _ = make_service(respond.text("one"), respond.text("two"))
        agent = svc.create("a", {"model": "m"})
        armed = [True]
        waiters: list[Any] = []

        def on_status(_agent: Any, status: str) -> None:
            if status == "idle" and armed[0]:
                armed[0] = False
                agent.send("dropped")
                waiters.append(agent.when_idle())
                agent.cancel()

        svc.bus.on("agent/status", on_status)
        agent.send("first")
        await agent.when_idle()
        await asyncio.wait_for(asyncio.ensure_future(_await(waiters[0])), 1)
        agent.send("second")
        await agent.when_idle()
        users = [
            e["data"]["content"][0]["text"]
            for e in agent.session.events
            if e["type"] == "user/message"
        ]
        assert users == ["first", "second"]

    arun(body)


async def _await(awaitable: Any) -> None:
    await awaitable


def test_window_1_send_cancel_send(arun: Any) -> None:
    async def body() -> None:
        svc, model = make_service(respond.text("B"))
        rec = Recorder(svc)
        agent = svc.create("a", {"model": "m"})
        await asyncio.sleep(0)  # the driver parks at the idle wait
        agent.send("A")
        agent.cancel()
        agent.send("B")
        waiter = agent.when_idle()
        await waiter
        assert agent.status == "idle"
        users = [
            e["data"]["content"][0]["text"]
            for e in agent.session.events
            if e["type"] == "user/message"
        ]
        assert users == ["B"]
        assert rec.of("agent/status") == [("running",), ("idle",)]
        assert model.calls == 1

    arun(body)


def test_window_1_send_cancel_drops_without_status_events(arun: Any) -> None:
    async def body() -> None:
        svc, _ = make_service()
        rec = Recorder(svc)
        agent = svc.create("a", {"model": "m"})
        await asyncio.sleep(0)
        agent.send("A")
        waiter = agent.when_idle()
        agent.cancel()
        await waiter
        assert agent.session.events == []
        assert rec.of("agent/status") == []

    arun(body)


def test_window_2_running_listener_cancels_and_queues_replacement(arun: Any) -> None:
    async def body() -> None:
        svc, model = make_service(respond.text("B done"))
        agent = svc.create("a", {"model": "m"})
        fired = [False]

        def on_status(_agent: Any, status: str) -> None:
            if status == "running" and not fired[0]:
                fired[0] = True
                agent.cancel()
                agent.send("B")

        svc.bus.on("agent/status", on_status)
        agent.send("A")
        await agent.when_idle()
        # The waiter resolved only after B's turn ran (the seed's window-2 fix).
        users = [
            e["data"]["content"][0]["text"]
            for e in agent.session.events
            if e["type"] == "user/message"
        ]
        assert users == ["B"]
        assert turn_ends(agent) == [{"kind": "completed"}]
        assert model.calls == 1

    arun(body)


def test_window_2_running_listener_cancels_goes_back_to_idle(arun: Any) -> None:
    async def body() -> None:
        svc, _ = make_service()
        rec = Recorder(svc)
        agent = svc.create("a", {"model": "m"})
        svc.bus.on("agent/status", lambda _a, s: agent.cancel("stop") if s == "running" else None)
        agent.send("A")
        await agent.when_idle()
        assert agent.session.events == []
        assert rec.of("agent/status") == [("running",), ("idle",)]

    arun(body)


def test_cancel_from_step_start_drops_step(arun: Any) -> None:
    async def body() -> None:
        svc, model = make_service()
        agent = svc.create("a", {"model": "m"})
        svc.bus.on("agent/step-start", lambda _a, t, s: agent.cancel("halt"))
        agent.send("A")
        await agent.when_idle()
        assert types(agent) == ["turn/start", "user/message", "step/start", "step/end", "turn/end"]
        assert turn_ends(agent) == [{"kind": "aborted", "reason": "halt"}]
        assert model.calls == 0

    arun(body)


def test_cancel_during_continuation_stops_turn(arun: Any) -> None:
    async def body() -> None:
        svc, model = make_service(respond.text("x"))
        agent = svc.create("a", {"model": "m"})

        def cont(_a: Any, _turn: int, _default: bool, _next: Any) -> bool:
            agent.cancel("enough")
            return True

        svc.bus.on("agent/turn-continuation", cont)
        agent.send("A")
        await agent.when_idle()
        assert turn_ends(agent) == [{"kind": "aborted", "reason": "enough"}]
        assert model.calls == 1

    arun(body)


def test_abort_hung_stream_and_queued_prompt_still_runs(arun: Any) -> None:
    async def body() -> None:
        svc, _ = make_service(respond.hang(), respond.text("B"))
        agent = svc.create("a", {"model": "m"})
        svc.bus.on("agent/step-start", lambda _a, t, s: None)
        agent.send("A")
        started = asyncio.Event()
        svc.bus.on("agent/turn-start", lambda _a, t: started.set())
        await started.wait()
        await asyncio.sleep(0.01)
        agent.send("B")
        agent.abort("user stop")
        await agent.when_idle()
        assert turn_ends(agent) == [
            {"kind": "aborted", "reason": "user stop"},
            {"kind": "completed"},
        ]

    arun(body)


def test_cancel_mid_stream_drops_queued(arun: Any) -> None:
    async def body() -> None:
        svc, model = make_service(respond.hang())
        agent = svc.create("a", {"model": "m"})
        agent.send("A")
        await asyncio.sleep(0.01)
        agent.send("queued")
        agent.cancel()
        await agent.when_idle()
        assert turn_ends(agent) == [{"kind": "aborted", "reason": "cancelled"}]
        assert model.calls == 1

    arun(body)


def test_cancel_on_idle_agent_is_noop(arun: Any) -> None:
    async def body() -> None:
        svc, _ = make_service(respond.text("ok"))
        agent = svc.create("a", {"model": "m"})
        await asyncio.sleep(0)
        agent.cancel()
        agent.send("A")
        await agent.when_idle()
        assert turn_ends(agent) == [{"kind": "completed"}]

    arun(body)


def test_hung_tool_aborted_ends_turn(arun: Any) -> None:
    # The abort must land while the tool is really running (hung in execute()), not before it
    # is dispatched: aborting from a tool/call listener would end the step before execute()
    # was ever called, and the test would pass whether or not a hung tool can be aborted.
    started = asyncio.Event()
    finished: list[str] = []

    class Hang:
        name = "hang"
        description = "never returns"
        input_schema: ClassVar[dict[str, Any]] = {}

        async def execute(self, arguments: Any, context: Any) -> str:
            started.set()
            await asyncio.sleep(3600)
            finished.append("late")
            return "late"

    async def body() -> None:
        svc, model = make_service(respond.tool_call("hang", {}) + respond.tool_call("hang", {}))
        svc.register_tool(Hang())
        agent = svc.create("a", {"model": "m"})
        agent.send("A")
        await asyncio.wait_for(started.wait(), timeout=1)
        agent.abort("stop")
        await agent.when_idle()
        assert finished == [], "the hung tool ran to completion"
        assert [e["type"] for e in agent.session.events].count("tool/call") == 1
        assert turn_ends(agent) == [{"kind": "aborted", "reason": "stop"}]
        assert model.calls == 1

    arun(body)


def test_dispose_mid_turn_balanced(arun: Any) -> None:
    async def body() -> None:
        svc, _ = make_service(respond.hang())
        rec = Recorder(svc)
        agent = svc.create("a", {"model": "m"})
        agent.send("A")
        await asyncio.sleep(0.01)
        waiter = agent.when_idle()
        agent.dispose()
        agent.dispose()
        await waiter
        assert agent.driver_task is not None and agent.driver_task.done()
        assert types(agent) == ["turn/start", "user/message", "step/start", "step/end", "turn/end"]
        assert turn_ends(agent) == [{"kind": "disposed"}]
        assert rec.of("agent/status") == [("running",), ("disposed",)]
        assert svc.get("a") is None
        for verb in (agent.send, agent.steer):
            try:
                verb("x")
            except RuntimeError as exc:
                assert "disposed" in str(exc)
            else:
                raise AssertionError("expected an error")

    arun(body)


def test_cancelling_driver_task_disposes_balanced(arun: Any) -> None:
    async def body() -> None:
        svc, _ = make_service(respond.hang())
        agent = svc.create("a", {"model": "m"})
        agent.send("A")
        await asyncio.sleep(0.01)
        task = agent.driver_task
        assert task is not None
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass
        assert task.cancelled()
        assert agent.status == "disposed"
        assert turn_ends(agent) == [{"kind": "disposed"}]
        await agent.when_idle()

    arun(body)


def test_throwing_idle_listener_cannot_hang_waiter(arun: Any) -> None:
    async def body() -> None:
        svc, _ = make_service(respond.text("x"))
        agent = svc.create("a", {"model": "m"})

        def boom(_a: Any, status: str) -> None:
            raise RuntimeError(f"status {status}")

        svc.bus.on("agent/status", boom)
        agent.send("A")
        await agent.when_idle()
        assert agent.status == "idle"
        assert turn_ends(agent) == [{"kind": "completed"}]

    arun(body)


def test_close_disposes_and_releases_waiters(arun: Any) -> None:
    async def body() -> None:
        svc, _ = make_service(respond.hang())
        agent = svc.create("a", {"model": "m"})
        agent.send("A")
        await asyncio.sleep(0.01)
        waiter = agent.when_idle()
        await svc.close()
        await waiter
        assert agent.status == "disposed"

    arun(body)


def test_prompt_sent_while_cancelled_turn_flushes_runs(arun: Any) -> None:
    async def body() -> None:
        svc, model = make_service(respond.hang(), respond.text("B"))
        agent = svc.create("a", {"model": "m"})
        sent = [False]

        def on_flush(_s: Any) -> None:
            if not sent[0]:
                sent[0] = True
                agent.send("B")  # MARKER-1: the cancel governed the previous turn only

        svc.bus.on("session/flush", on_flush)
        agent.send("A")
        await asyncio.sleep(0.01)
        agent.cancel("stop")
        await agent.when_idle()
        assert turn_ends(agent) == [{"kind": "aborted", "reason": "stop"}, {"kind": "completed"}]
        assert model.calls == 2

    arun(body)


def test_steering_of_aborted_step_becomes_next_turn(arun: Any) -> None:
    async def body() -> None:
        svc, _ = make_service(respond.hang(), respond.text("B"))
        agent = svc.create("a", {"model": "m"})
        agent.send("A")
        await asyncio.sleep(0.01)
        agent.steer("S")  # STEER-3
        agent.abort()
        await agent.when_idle()
        assert turn_ends(agent) == [{"kind": "aborted", "reason": "aborted"}, {"kind": "completed"}]
        users = [
            e["data"]["content"][0]["text"]
            for e in agent.session.events
            if e["type"] == "user/message"
        ]
        assert users == ["A", "S"]

    arun(body)


def test_disposed_reason_survives_throwing_turn_end_listener(arun: Any) -> None:
    async def body() -> None:
        svc, _ = make_service(respond.hang())
        rec = Recorder(svc)
        agent = svc.create("a", {"model": "m"})
        svc.bus.on("session/event", lambda s, e: 1 / 0 if e["type"] == "turn/end" else None)
        svc.bus.on("agent/turn-end", lambda *_: 1 / 0)
        agent.send("A")
        await asyncio.sleep(0.01)
        agent.dispose()
        await agent.when_idle()
        assert turn_ends(agent) == [{"kind": "disposed"}]  # DISP-4
        assert "error" not in types(agent) and rec.of("agent/error") == []  # DISP-5

    arun(body)


def test_cancel_from_system_prompt_listener_skips_model(arun: Any) -> None:
    async def body() -> None:
        svc, model = make_service()
        agent = svc.create("a", {"model": "m"})

        async def prompt(_a: Any, assembly: Any, nxt: Any) -> Any:
            agent.cancel("late")
            return await nxt()

        svc.bus.on("system-prompt", prompt)
        agent.send("A")
        await agent.when_idle()
        assert turn_ends(agent) == [{"kind": "aborted", "reason": "late"}]
        assert model.calls == 0

    arun(body)


def test_window_2_steering_after_cancel_is_not_stranded(arun: Any) -> None:
    async def body() -> None:
        svc, model = make_service(respond.text("S"))
        agent = svc.create("a", {"model": "m"})
        fired = [False]

        def on_status(_agent: Any, status: str) -> None:
            if status == "running" and not fired[0]:
                fired[0] = True
                agent.cancel()
                agent.steer("S")  # status is running: goes to the steering FIFO

        svc.bus.on("agent/status", on_status)
        agent.send("A")
        await agent.when_idle()
        users = [
            e["data"]["content"][0]["text"]
            for e in agent.session.events
            if e["type"] == "user/message"
        ]
        assert users == ["S"] and model.calls == 1

    arun(body)


def test_abort_stops_a_hung_request_listener(arun: Any) -> None:
    async def body() -> None:
        svc, model = make_service()
        agent = svc.create("a", {"model": "m"})

        async def hang(_a: Any, _t: int, _s: int, request: Any, nxt: Any) -> Any:
            await asyncio.sleep(3600)
            return await nxt()

        svc.bus.on("agent/request", hang)
        agent.send("A")
        await asyncio.sleep(0.01)
        agent.abort("enough")
        await agent.when_idle()
        assert turn_ends(agent) == [{"kind": "aborted", "reason": "enough"}]
        assert model.calls == 0

    arun(body)
