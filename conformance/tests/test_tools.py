"""Section 5: tools (TOOL-1..5)."""

from __future__ import annotations

import pytest

from conformance import fakes
from conformance.harness import Kit
from reference_loop import vocabulary as v

from ._support import COMPLETED, Run, aborted


@pytest.mark.rule("TOOL-1")
def test_tools_run_in_order_one_at_a_time(run: Run) -> None:
    async def scenario(k: Kit) -> None:
        trace: list[str] = []
        k.tool("slow", delay=1.0, hook=lambda _a: trace.append("slow"))
        k.tool("fast", hook=lambda _a: trace.append("fast"))
        a = k.agent()

        async def log(execution: dict, next: object) -> object:
            trace.append(f"start {execution['call_id']}")
            result = await next()  # type: ignore[operator]
            trace.append(f"end {execution['call_id']}")
            return result

        k.on("tools/execute", log)
        k.model.push(fakes.tool_calls(("c1", "slow", "{}"), ("c2", "fast", "{}"), ("c3", "slow", "{}")))
        a.send("hi")
        await k.idle(a)
        assert trace == ["start c1", "slow", "end c1", "start c2", "fast", "end c2", "start c3", "slow", "end c3"]

    run(scenario)


@pytest.mark.rule("TOOL-2")
def test_argument_parsing(run: Run) -> None:
    async def scenario(k: Kit) -> None:
        echo = k.tool("echo")
        a = k.agent()
        k.model.push(fakes.tool_calls(("c1", "echo", '{"x": [1, 2]}'), ("c2", "echo", ""), ("c3", "echo", "not json{")))
        a.send("hi")
        await k.idle(a)
        assert echo.call_args == [{"x": [1, 2]}, {}, "not json{"]
        assert [e["data"]["arguments"] for e in k.events(a, "tool/call")] == ['{"x": [1, 2]}', "", "not json{"]
        assert k.reasons(a) == [COMPLETED]

    run(scenario)


@pytest.mark.rule("TOOL-3")
def test_tool_failures_become_error_results(run: Run) -> None:
    async def scenario(k: Kit) -> None:
        k.tool("coded", error="it broke", code="E_BROKE")
        k.tool("plain", error="also broke")
        k.tool("guarded")

        async def guard(execution: dict, next: object) -> object:
            if execution["name"] == "guarded":
                raise RuntimeError("denied")
            return await next()  # type: ignore[operator]

        k.on("tools/execute", guard)
        a = k.agent()
        k.model.push(fakes.tool_calls(("c1", "coded", "{}"), ("c2", "missing", "{}"), ("c3", "plain", "{}"), ("c4", "guarded", "{}")))
        a.send("hi")
        await k.idle(a)
        results = {e["data"]["call_id"]: e["data"] for e in k.events(a, "tool/result")}
        assert all(r["is_error"] is True for r in results.values())
        assert results["c1"]["content"] == [v.text("Error: it broke")]
        assert results["c1"]["error"]["code"] == "E_BROKE" and isinstance(results["c1"]["error"]["name"], str)
        assert results["c2"]["error"]["code"] == "UNKNOWN_TOOL"
        assert results["c2"]["content"][0]["text"].startswith("Error: ")
        assert results["c3"]["content"] == [v.text("Error: also broke")] and "error" not in results["c3"]
        assert results["c4"]["content"] == [v.text("Error: denied")]
        assert k.reasons(a) == [COMPLETED], "the turn goes on"
        assert len(k.model.requests) == 2

    run(scenario)


@pytest.mark.rule("TOOL-4")
def test_result_keyed_on_model_call_id(run: Run) -> None:
    async def scenario(k: Kit) -> None:
        k.tool("echo")
        a = k.agent()

        async def lie(execution: dict, next: object) -> object:
            result = await next()  # type: ignore[operator]
            return {**result, "call_id": "forged"}

        k.on("tools/execute", lie)
        k.model.push(fakes.tool_calls(("c1", "echo", "{}")))
        a.send("hi")
        await k.idle(a)
        assert [e["data"]["call_id"] for e in k.events(a, "tool/result")] == ["c1"]

    run(scenario)


@pytest.mark.rule("TOOL-5")
def test_abort_during_tool_ends_step(run: Run) -> None:
    async def scenario(k: Kit) -> None:
        hanging = k.tool("hang", hang=True)
        after = k.tool("after")
        a = k.agent()
        k.model.push(fakes.tool_calls(("c1", "hang", "{}"), ("c2", "after", "{}")))
        a.send("hi")
        await k.until(lambda: bool(hanging.calls), "the hanging tool")
        a.abort()
        await k.idle(a)
        assert after.calls == [], "no further tool of the step runs"
        assert len(k.model.requests) == 1, "no next model step runs"
        assert k.reasons(a) == [aborted()]

    run(scenario)
