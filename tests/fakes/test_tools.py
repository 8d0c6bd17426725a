"""Fake tools: scripted results and errors, latency, abort-aware hanging, hooks, recording."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

import simulator
from conformance.fakes import (
    FakeTool,
    Outcome,
    ScriptExhausted,
    ToolBox,
    fails,
    hangs,
    returns,
)
from reference_loop import vocabulary as v
from reference_loop.abort import AbortController, AbortError, AbortSignal
from reference_loop.protocols import Tool, ToolContext, ToolError


def run_async(main: Callable[[], Awaitable[Any]]) -> Any:
    """Run ``main`` under the simulator (FIFO); re-raise the error it ended with."""
    return simulator.run(main).unwrap()


def context(call_id: str = "c1", signal: AbortSignal | None = None) -> ToolContext:
    return {"call_id": call_id, "agent_id": "agent-1", "signal": signal or AbortSignal()}


async def call(
    tool: FakeTool, arguments: Any = None, ctx: ToolContext | None = None
) -> tuple[float, Any]:
    """(virtual seconds taken, result or the exception raised)."""
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    try:
        value: Any = await tool.execute({} if arguments is None else arguments, ctx or context())
    except Exception as exc:
        value = exc
    return loop.time() - t0, value


def test_implements_the_tool_protocol_and_defaults() -> None:
    tool = FakeTool("search")
    assert isinstance(tool, Tool)
    assert tool.schema() == {
        "name": "search",
        "description": "Fake tool search.",
        "input_schema": {"type": "object"},
    }
    assert run_async(lambda: call(tool)) == (0.0, "ok")


def test_single_result_and_blocks() -> None:
    blocks: list[v.Block] = [v.text("a"), v.image("http://x/y.png")]
    tool = FakeTool("t", returns(blocks))

    async def main() -> list[Any]:
        return [(await call(tool))[1] for _ in range(2)]

    first, second = run_async(main)
    assert first == blocks and second == blocks
    first.append("mutated")
    assert tool.calls[0].result == blocks  # the record is a copy


def test_results_in_order_then_exhausted_fails_clearly() -> None:
    tool = FakeTool("t", results=["one", fails("nope", code="NOT_FOUND"), ValueError("bad")])

    async def main() -> list[Any]:
        return [(await call(tool, {"i": i}))[1] for i in range(4)]

    one, err, bad, past = run_async(main)
    assert one == "one"
    assert isinstance(err, ToolError) and str(err) == "nope" and err.code == "NOT_FOUND"
    assert isinstance(bad, ValueError) and not hasattr(bad, "code")
    assert isinstance(past, ScriptExhausted)
    assert str(past) == "fake tool 't': call #4 but the script has only 3 result(s)"
    assert tool.problems() == [str(past)]
    assert [c.outcome for c in tool.calls] == ["ok", "error", "error", "exhausted"]
    assert [c.code for c in tool.calls] == [None, "NOT_FOUND", None, "SCRIPT_EXHAUSTED"]
    assert tool.call_args == [{"i": 0}, {"i": 1}, {"i": 2}, {"i": 3}]


def test_repeat_last_and_unused_results() -> None:
    tool = FakeTool("t", results=["a", "b"], repeat_last=True)

    async def main() -> list[Any]:
        return [(await call(tool))[1] for _ in range(3)]

    assert run_async(main) == ["a", "b", "b"]
    unused = FakeTool("u", results=["a", "b"], strict=True)
    assert unused.problems() == ["fake tool 'u': 2 of 2 scripted results never used (0 call(s))"]
    with pytest.raises(AssertionError, match="2 of 2 scripted results never used"):
        unused.assert_all_used()


def test_handler_sync_async_with_and_without_context() -> None:
    async def slow(args: Any, ctx: ToolContext) -> str:
        await asyncio.sleep(2)
        return f"{ctx['call_id']}:{args['x']}"

    echo = FakeTool("echo", handler=lambda args: args["text"].upper())
    slow_tool = FakeTool("slow", handler=slow)
    failing = FakeTool("failing", handler=lambda args: fails("no", code="E"))

    async def main() -> list[Any]:
        return [
            await call(echo, {"text": "hi"}),
            await call(slow_tool, {"x": 1}, context("c9")),
            await call(failing),
        ]

    (t1, r1), (t2, r2), (_, r3) = run_async(main)
    assert (t1, r1) == (0.0, "HI")
    assert (t2, r2) == (2.0, "c9:1")
    assert isinstance(r3, ToolError) and r3.code == "E"


def test_virtual_latency_per_tool_and_per_result() -> None:
    tool = FakeTool(
        "t",
        results=["slow", returns("fast", latency=0.5), fails("late", latency=3.0)],
        latency=10.0,
    )

    async def main() -> list[float]:
        return [(await call(tool))[0] for _ in range(3)]

    assert run_async(main) == [10.0, 0.5, 3.0]
    assert [(c.started, c.ended) for c in tool.calls] == [(0.0, 10.0), (10.0, 10.5), (10.5, 13.5)]


def test_hang_until_the_signal_fires() -> None:
    tool = FakeTool("t", hangs())

    async def main() -> tuple[float, Any]:
        ctrl = AbortController()
        asyncio.get_running_loop().call_later(7.0, ctrl.abort, "user stop")
        return await call(tool, ctx=context(signal=ctrl.signal))

    elapsed, error = run_async(main)
    assert elapsed == 7.0
    assert isinstance(error, AbortError) and str(error) == "user stop" and error.code == "ABORTED"
    assert tool.calls[0].outcome == "aborted"


def test_abort_during_latency_stops_promptly_unless_not_abort_aware() -> None:
    aware = FakeTool("a", "done", latency=10.0)
    unaware = FakeTool("u", "done", latency=10.0, abort_aware=False)

    async def one(tool: FakeTool) -> tuple[float, Any]:
        ctrl = AbortController()
        asyncio.get_running_loop().call_later(1.0, ctrl.abort)
        return await call(tool, ctx=context(signal=ctrl.signal))

    async def main() -> list[tuple[float, Any]]:
        return [await one(aware), await one(unaware)]

    (t1, r1), (t2, r2) = run_async(main)
    assert t1 == 1.0 and isinstance(r1, AbortError)
    assert (t2, r2) == (10.0, "done")


def test_a_hung_tool_without_abort_awareness_deadlocks_the_run() -> None:
    tool = FakeTool("stuck", hangs(), abort_aware=False)

    async def main() -> None:
        ctrl = AbortController()
        asyncio.get_running_loop().call_later(1.0, ctrl.abort)
        await tool.execute({}, context(signal=ctrl.signal))

    result = simulator.run(main)
    assert result.outcome == "deadlock"


def test_hook_runs_inside_the_call_with_arguments_and_context() -> None:
    seen: list[Any] = []
    ctrl = AbortController()

    def hook(args: Any, ctx: ToolContext) -> None:
        seen.append((args, ctx["call_id"]))
        ctrl.abort("cancelled from inside the tool")

    tool = FakeTool("t", "never returned", hook=hook, latency=5.0)

    async def main() -> tuple[float, Any]:
        return await call(tool, {"q": 1}, context("c7", ctrl.signal))

    elapsed, error = run_async(main)
    assert seen == [({"q": 1}, "c7")]
    assert elapsed == 0.0 and isinstance(error, AbortError)
    assert str(error) == "cancelled from inside the tool"


def test_async_hook_and_call_records() -> None:
    async def hook(args: Any, ctx: ToolContext) -> None:
        await asyncio.sleep(1.5)

    tool = FakeTool("t", "r", hook=hook, latency=0.5)

    async def main() -> tuple[float, Any]:
        return await call(tool, {"a": [1, 2]}, context("c3"))

    assert run_async(main) == (2.0, "r")
    assert tool.calls[0].to_dict() == {
        "tool": "t",
        "index": 1,
        "call_id": "c3",
        "agent_id": "agent-1",
        "arguments": {"a": [1, 2]},
        "outcome": "ok",
        "result": "r",
    }


def test_observed_events() -> None:
    tool = FakeTool("t", results=["x", fails("no", code="E")])

    async def main() -> None:
        await call(tool, ctx=context("a"))
        await call(tool, ctx=context("b"))

    result = simulator.run(main)
    assert [(e["kind"], e["call_id"], e.get("outcome")) for e in result.timeline] == [
        ("tool/start", "a", None),
        ("tool/done", "a", "ok"),
        ("tool/start", "b", None),
        ("tool/done", "b", "error"),
    ]


def test_toolbox_creates_several_and_records_calls_across_tools() -> None:
    box = ToolBox(
        FakeTool("search", "found"),
        fetch=["<p>1</p>", "<p>2</p>"],
        ping=hangs(),
        upper=lambda a: a["s"].upper(),
    )
    box.tool("clock", "12:00", latency=1.0)
    assert box.names == ["search", "fetch", "ping", "upper", "clock"]
    assert "fetch" in box and len(box) == 5
    assert [s["name"] for s in box.schemas()] == box.names

    async def main() -> list[Any]:
        return [
            (await call(box["fetch"]))[1],
            (await call(box["clock"]))[1],
            (await call(box["upper"], {"s": "x"}))[1],
            (await call(box["fetch"]))[1],
        ]

    assert run_async(main) == ["<p>1</p>", "12:00", "X", "<p>2</p>"]
    assert [c.tool for c in box.calls] == ["fetch", "clock", "upper", "fetch"]
    with pytest.raises(ValueError, match="already registered"):
        box.tool("search")
    box.assert_all_used()
    assert box.problems() == []


def test_invalid_configurations() -> None:
    with pytest.raises(ValueError, match="one of result=, results= or handler="):
        FakeTool("t", "x", results=["y"])
    with pytest.raises(TypeError, match="must be a str, a list of blocks or an Outcome"):
        FakeTool("t", results=[42])
    with pytest.raises(ValueError, match="no results= script"):
        FakeTool("t").push("x")
    assert Outcome(value="x").latency is not None  # the tool's latency applies by default


def test_a_gate_holds_the_call_until_it_opens_and_an_abort_ends_the_wait() -> None:
    from conformance.fakes import Gate

    gate = Gate("release")
    tool = FakeTool("held", "done", gate=gate)

    async def opened() -> tuple[float, Any]:
        asyncio.get_running_loop().call_later(3.0, gate.open)
        return await call(tool)

    assert run_async(opened) == (3.0, "done")

    held = FakeTool("held", "done", gate=Gate("never"))
    controller = AbortController()

    async def aborted() -> tuple[float, Any]:
        asyncio.get_running_loop().call_later(2.0, controller.abort, "stop")
        return await call(held, ctx=context(signal=controller.signal))

    when, value = run_async(aborted)
    assert when == 2.0 and isinstance(value, AbortError)


def test_a_hook_gets_the_context_only_when_it_takes_two_arguments() -> None:
    seen: list[Any] = []
    one = FakeTool("one", hook=lambda args: seen.append(args))
    two = FakeTool("two", hook=lambda args, ctx: seen.append(ctx["call_id"]))
    run_async(lambda: call(one, {"x": 1}))
    run_async(lambda: call(two, {}, context("c9")))
    assert seen == [{"x": 1}, "c9"]


def test_a_scripted_error_is_raised_fresh_each_call_and_the_script_keeps_no_traceback() -> None:
    # Raising the script's own object chains every call's traceback onto it: the frames of each
    # earlier run (and the worlds they hold) stayed alive as long as the script, a leak that made
    # the hunt's failing-tool workload twice as slow as its neighbours.
    error = fails("nope", code="NOT_FOUND")
    tool = FakeTool("t", result=error)

    async def main() -> list[Any]:
        return [(await call(tool))[1] for _ in range(2)]

    first, second = run_async(main)
    assert isinstance(first, ToolError) and isinstance(second, ToolError)
    assert first is not second
    assert (str(first), first.code) == (str(second), second.code) == ("nope", "NOT_FOUND")
    scripted = error.error
    assert scripted is not None and scripted.__traceback__ is None

    def depth(tb: Any) -> int:
        return 0 if tb is None else 1 + depth(tb.tb_next)

    assert depth(first.__traceback__) == depth(second.__traceback__) > 0  # no call's frames on another's
