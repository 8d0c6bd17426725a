"""End-to-end: turn shape, errors, max-tokens, steering, injection, system prompt."""

from __future__ import annotations

import asyncio
import logging
from typing import Any, ClassVar

import pytest

from conformance.fakes.model import respond

from .conftest import EchoTool, Recorder, make_service, turn_ends, types


def test_tool_step_then_answer_shape(arun: Any) -> None:
    async def body() -> None:
        svc, model = make_service(
            respond.text("let me") + respond.tool_call("echo", {"x": 1}),
            respond.text("done").usage(1, 2),
        )
        tool = EchoTool()
        svc.register_tool(tool)
        rec = Recorder(svc)
        agent = svc.create("a", {"model": "m"})
        agent.send("go")
        await agent.when_idle()
        assert types(agent) == [
            "turn/start", "user/message", "step/start", "assistant/message", "tool/call",
            "tool/result", "step/end", "step/start", "assistant/message", "usage", "step/end",
            "turn/end",
        ]  # fmt: skip
        assert tool.calls == [{"x": 1}]
        assert [e[0] for e in rec.log] == [
            "agent/queued", "agent/status", "agent/turn-start", "agent/step-start",
            "agent/step-end", "agent/step-start", "agent/step-end", "agent/turn-end", "agent/status",
        ]  # fmt: skip
        assert [seq for seq, _ in enumerate(agent.session.events)] == [
            e["seq"] for e in agent.session.events
        ]
        assert model.calls == 2

    arun(body)


def test_unknown_tool_and_bad_arguments_are_error_results(arun: Any) -> None:
    async def body() -> None:
        svc, _ = make_service(respond.tool_call("nope", "not json"), respond.text("ok"))
        agent = svc.create("a", {"model": "m"})
        agent.send("go")
        await agent.when_idle()
        result = next(e["data"] for e in agent.session.events if e["type"] == "tool/result")
        assert result["is_error"] is True
        assert result["content"] == [{"type": "text", "text": "Error: unknown tool 'nope'"}]
        assert result["error"] == {"name": "UnknownToolError", "code": "UNKNOWN_TOOL"}
        assert turn_ends(agent) == [{"kind": "completed"}]

    arun(body)


@pytest.mark.parametrize(
    "event",
    [
        "agent/turn-start",
        "agent/step-start",
        "agent/step-end",
        "agent/request",
        "agent/step-result",
    ],
)
def test_throwing_listener_ends_turn_error_once(arun: Any, event: str, caplog: Any) -> None:
    class Boom(Exception):
        code = "BOOM"

    async def body() -> None:
        svc, _ = make_service(respond.text("x"), respond.text("y"))
        rec = Recorder(svc)
        agent = svc.create("a", {"model": "m"})
        fired = [False]

        def boom(*args: Any) -> Any:
            if not fired[0]:
                fired[0] = True
                raise Boom("kaput")
            return args[-1]() if event in ("agent/request", "agent/step-result") else None

        svc.bus.on(event, boom)
        agent.send("one")
        agent.send("two")  # batched into the failed turn
        await agent.when_idle()
        agent.send("three")  # ERR-1: the loop lives on
        await agent.when_idle()
        assert turn_ends(agent) == [
            {"kind": "error", "message": "kaput", "code": "BOOM"},
            {"kind": "completed"},
        ]
        errors = [e["data"] for e in agent.session.events if e["type"] == "error"]
        assert len(errors) == 1 and errors[0]["code"] == "BOOM"
        assert len(rec.of("agent/error")) == 1
        assert isinstance(rec.of("agent/error")[0][2], Boom)
        turn_end_notes = [t for t, _ in rec.of("agent/turn-end")]
        assert turn_end_notes == (
            [2] if event in ("agent/turn-start", "agent/step-start") else [1, 2]
        )
        # Balanced: every step/start of turn 1 has its step/end.
        t1 = [e["type"] for e in agent.session.events if e["data"].get("turn") == 1]
        assert t1.count("step/start") == t1.count("step/end")

    with caplog.at_level(logging.WARNING, logger="reference_loop"):
        arun(body)
    assert any("agent a turn 1" in r.getMessage() for r in caplog.records)


def test_first_failure_wins_and_turn_end_listener_contained(arun: Any) -> None:
    async def body() -> None:
        svc, _ = make_service(respond.error("overloaded", code="OVER"))
        rec = Recorder(svc)
        agent = svc.create("a", {"model": "m"})

        def turn_end(*_: Any) -> None:
            raise RuntimeError("late")

        svc.bus.on("agent/turn-end", turn_end)
        agent.send("go")
        await agent.when_idle()
        assert turn_ends(agent) == [{"kind": "error", "message": "overloaded", "code": "OVER"}]
        assert [str(e[2]) for e in rec.of("agent/error")] == ["overloaded"]

    arun(body)


def test_turn_end_listener_failure_keeps_reason_and_is_announced(arun: Any) -> None:
    async def body() -> None:
        svc, _ = make_service(respond.text("x"))
        rec = Recorder(svc)
        agent = svc.create("a", {"model": "m"})
        svc.bus.on("agent/turn-end", lambda *_: 1 / 0)
        agent.send("go")
        await agent.when_idle()
        assert turn_ends(agent) == [{"kind": "completed"}]
        assert "error" not in types(agent)
        assert len(rec.of("agent/error")) == 1

    arun(body)


def test_session_event_listener_on_turn_start_consumes_prompt(arun: Any) -> None:
    async def body() -> None:
        svc, model = make_service()
        agent = svc.create("a", {"model": "m"})
        svc.bus.on("session/event", lambda s, e: 1 / 0 if e["type"] == "turn/start" else None)
        agent.send("go")
        await agent.when_idle()
        assert types(agent) == ["turn/start", "error", "turn/end"]
        assert model.calls == 0

    arun(body)


def test_unserialisable_source_fails_before_turn_start(arun: Any) -> None:
    async def body() -> None:
        svc, _ = make_service(respond.text("ok"))
        rec = Recorder(svc)
        agent = svc.create("a", {"model": "m"})
        agent.send("bad", {"kind": "plugin", "plugin": object()})  # type: ignore[typeddict-item]
        await agent.when_idle()
        assert agent.session.events == []
        assert [(t, s) for t, s, _ in rec.of("agent/error")] == [(1, 0)]  # ERR-8
        agent.send("good")
        await agent.when_idle()
        assert turn_ends(agent) == [{"kind": "completed"}]

    arun(body)


def test_no_model_names_the_agent(arun: Any) -> None:
    async def body() -> None:
        svc, _ = make_service()
        agent = svc.create("helper")
        agent.send("go")
        await agent.when_idle()
        (reason,) = turn_ends(agent)
        assert reason["kind"] == "error" and "'helper'" in reason["message"]
        assert "agent/request" in reason["message"] and "options" in reason["message"]

    arun(body)


def test_unknown_model_is_no_adapter(arun: Any) -> None:
    async def body() -> None:
        svc, _ = make_service()
        agent = svc.create("a", {"model": "other"})
        agent.send("go")
        await agent.when_idle()
        assert turn_ends(agent)[0]["code"] == "NO_ADAPTER"

    arun(body)


def test_max_tokens_sticky_drops_tool_calls_and_does_not_leak(arun: Any) -> None:
    async def body() -> None:
        svc, model = make_service(
            (respond.text("partial") + respond.tool_call("echo", {})).finish("max-tokens"),
            respond.text("fine"),
            respond.text("next turn"),
        )
        tool = EchoTool()
        svc.register_tool(tool)
        agent = svc.create("a", {"model": "m"})
        steps = [0]

        def force(_a: Any, _t: int, default: bool, nxt: Any) -> Any:
            steps[0] += 1
            return steps[0] == 1 or default  # force one more step after the max-tokens one

        svc.bus.on("agent/turn-continuation", force)
        agent.send("go")
        await agent.when_idle()
        agent.send("again")
        await agent.when_idle()
        assert tool.calls == []
        first = next(e["data"] for e in agent.session.events if e["type"] == "assistant/message")
        assert first["content"] == [{"type": "text", "text": "partial"}]
        assert turn_ends(agent) == [{"kind": "max-tokens"}, {"kind": "completed"}]
        assert model.calls == 3

    arun(body)


def test_finish_aborted_without_signal_is_error(arun: Any) -> None:
    async def body() -> None:
        svc, _ = make_service(respond.aborted())
        agent = svc.create("a", {"model": "m"})
        agent.send("go")
        await agent.when_idle()
        assert turn_ends(agent) == [
            {"kind": "error", "message": "model stream aborted", "code": "ABORTED"}
        ]
        assert "assistant/message" not in types(agent)

    arun(body)


def test_steering_joins_next_request_and_late_steering_requeued(arun: Any) -> None:
    async def body() -> None:
        svc, model = make_service(respond.text("one"), respond.text("two"), respond.text("three"))
        rec = Recorder(svc)
        agent = svc.create("a", {"model": "m"})
        once = [True]

        def on_chunk(_a: Any, turn: int, step: int, chunk: Any) -> None:
            if once[0] and chunk["type"] == "finish":
                once[0] = False
                agent.steer("more please", {"kind": "plugin", "plugin": "p"})

        flushed = [False]

        def on_flush(_s: Any) -> None:
            if not flushed[0]:
                flushed[0] = True
                agent.steer("too late")

        svc.bus.on("agent/stream-chunk", on_chunk)
        svc.bus.on("session/flush", on_flush)
        agent.send("go")
        await agent.when_idle()
        assert types(agent).count("steering/message") == 1
        assert turn_ends(agent) == [{"kind": "completed"}, {"kind": "completed"}]
        second_request = model.requests[1]["messages"]
        assert second_request[-1]["content"][0] == {
            "type": "text",
            "text": '<steering source="plugin">',
        }
        users = [
            e["data"]["content"][0]["text"]
            for e in agent.session.events
            if e["type"] == "user/message"
        ]
        assert users == ["go", "too late"]
        assert ("more please", True) in [
            (c[0]["text"], o["steering"]) for c, o in rec.of("agent/queued")
        ]

    arun(body)


def test_system_prompt_sections_and_tools_in_request(arun: Any) -> None:
    async def body() -> None:
        svc, model = make_service(respond.text("ok"))
        svc.register_tool(EchoTool())
        svc.add_system_prompt_section("a", "Section A.")
        drop = svc.add_system_prompt_section("b", "Section B.")
        svc.add_system_prompt_section("c", "Section C.")
        drop()
        agent = svc.create("a", {"model": "m", "system_prompt": "Mine."})
        agent.send("go")
        await agent.when_idle()
        request = model.requests[0]
        assert request["system"] == "Section A.\n\nSection C.\n\nMine."
        assert request["tools"] == [
            {
                "name": "echo",
                "description": "Echo the arguments back.",
                "input_schema": {"type": "object"},
            }
        ]

    arun(body)


def test_request_waterfall_routes_model(arun: Any) -> None:
    async def body() -> None:
        svc, model = make_service(respond.text("ok"))
        agent = svc.create("a")

        async def route(_a: Any, _t: int, _s: int, request: Any, nxt: Any) -> Any:
            return {**(await nxt()), "model": "m"}

        svc.bus.on("agent/request", route)
        agent.send("go")
        await agent.when_idle()
        assert turn_ends(agent) == [{"kind": "completed"}]
        assert model.requests[0]["model"] == "m"

    arun(body)


def test_inject_idle_and_into_open_turn(arun: Any) -> None:
    async def body() -> None:
        svc, model = make_service(respond.text("ok"))
        agent = svc.create("a", {"model": "m"})
        await agent.inject("ctx", {"kind": "plugin", "plugin": "mem"})
        assert types(agent) == ["turn/start", "context/message", "turn/end"]
        assert agent.session.events[0]["data"]["trigger"] == {
            "kind": "injection", "source": {"kind": "plugin", "plugin": "mem"}
        }  # fmt: skip

        async def during(_a: Any, _t: int, _s: int, request: Any, nxt: Any) -> Any:
            await agent.inject("mid")
            return await nxt()

        svc.bus.on("agent/request", during)
        agent.send("go")
        await agent.when_idle()
        assert [e["data"]["turn"] for e in agent.session.events if e["type"] == "turn/start"] == [
            1,
            2,
        ]
        assert types(agent)[3:6] == ["turn/start", "user/message", "step/start"]
        assert "context/message" in types(agent)[6:]
        assert model.requests[0]["messages"][0]["content"][1] == {"type": "text", "text": "ctx"}
        with pytest.raises(ValueError, match="not JSON-serialisable"):
            await agent.inject([{"type": "text", "text": object()}])
        assert types(agent)[-3:] == ["turn/end", "turn/start", "turn/end"]  # closed, then raised
        with pytest.raises(ValueError, match="source"):
            await agent.inject("x", {"kind": object()})  # type: ignore[typeddict-item]

    arun(body)


def test_flush_failure_is_reported_not_logged(arun: Any) -> None:
    async def body() -> None:
        svc, _ = make_service(respond.text("ok"), respond.text("ok2"))
        rec = Recorder(svc)
        agent = svc.create("a", {"model": "m"})

        async def bad_flush(_s: Any) -> None:
            await asyncio.sleep(0)
            raise OSError("disk full")

        svc.bus.on("session/flush", bad_flush)
        agent.send("go")
        await agent.when_idle()
        assert types(agent)[-1] == "turn/end"
        assert [str(e[2]) for e in rec.of("agent/error")] == ["disk full"]
        agent.send("again")
        await agent.when_idle()
        assert len(turn_ends(agent)) == 2

    arun(body)


def test_tool_failure_code_and_call_id_kept(arun: Any) -> None:
    from reference_loop.protocols import ToolError

    class Failing:
        name = "fail"
        description = "always fails"
        input_schema: ClassVar[dict[str, Any]] = {}

        async def execute(self, arguments: Any, context: Any) -> str:
            assert arguments == {}  # TOOL-2: "" parses as {}
            raise ToolError("no luck", code="E_LUCK")

    async def body() -> None:
        svc, _ = make_service(
            respond.tool_call("fail", "") + respond.tool_call("echo", {"a": 1}), respond.text("ok")
        )
        svc.register_tool(Failing())
        svc.register_tool(EchoTool())

        async def rewrite(execution: Any, nxt: Any) -> Any:
            result = await nxt()
            return {**result, "call_id": "bogus"}

        svc.bus.on("tools/execute", rewrite)
        agent = svc.create("a", {"model": "m"})
        agent.send("go")
        await agent.when_idle()
        calls = [e["data"]["call_id"] for e in agent.session.events if e["type"] == "tool/call"]
        results = [e["data"] for e in agent.session.events if e["type"] == "tool/result"]
        assert [r["call_id"] for r in results] == calls  # TOOL-4
        assert results[0]["content"] == [{"type": "text", "text": "Error: no luck"}]
        assert results[0]["error"] == {"name": "ToolError", "code": "E_LUCK"}
        assert results[1]["is_error"] is False and "error" not in results[1]
        assert turn_ends(agent) == [{"kind": "completed"}]

    arun(body)


def test_steering_from_step_end_overrides_stop(arun: Any) -> None:
    async def body() -> None:
        svc, model = make_service(respond.text("one"), respond.text("two"))
        agent = svc.create("a", {"model": "m"})
        once = [True]

        def on_step_end(_a: Any, turn: int, step: int) -> None:
            if once[0]:
                once[0] = False
                agent.steer("keep going")  # CONT-2

        svc.bus.on("agent/step-end", on_step_end)
        agent.send("go")
        await agent.when_idle()
        assert turn_ends(agent) == [{"kind": "completed"}]
        assert model.calls == 2
        assert types(agent).count("step/start") == 2

    arun(body)
