"""Section 1b: assembling a step's message from its chunks (ASM-1..4)."""

from __future__ import annotations

import pytest

from conformance.fakes import respond
from conformance.harness import Kit
from reference_loop import vocabulary as v

from ._support import COMPLETED, Run


def _message(k: Kit, agent: object) -> list[dict]:
    msgs = k.events(agent, "assistant/message")  # type: ignore[arg-type]
    assert msgs, "no assistant/message was logged"
    return list(msgs[0]["data"]["content"])


@pytest.mark.rule("ASM-1")
def test_block_end_is_authoritative(run: Run) -> None:
    async def scenario(k: Kit) -> None:
        a = k.agent()
        k.model.push(respond.chunks(
            v.block_start(0, "text"),
            v.text_delta(0, "par"),
            v.block_end(0, v.text("FULL")),
            v.text_delta(0, "late"),
            v.finish("stop"),
        ))
        a.send("hi")
        await k.idle(a)
        assert _message(k, a) == [v.text("FULL")]

    run(scenario)


@pytest.mark.rule("ASM-2")
def test_unclosed_blocks_kept(run: Run) -> None:
    async def scenario(k: Kit) -> None:
        a = k.agent()
        echo = k.tool("echo")
        k.model.push(respond.chunks(
            v.block_start(0, "text"),
            v.text_delta(0, "ab"),
            v.text_delta(0, "c"),
            v.tool_call_delta(1, "c1", '{"a":', name="echo"),
            v.tool_call_delta(1, "c1", "1}"),
            v.finish("tool-calls"),
        ))
        a.send("hi")
        await k.idle(a)
        assert _message(k, a) == [v.text("abc"), v.tool_call("c1", "echo", '{"a":1}')]
        assert echo.call_args == [{"a": 1}], "a tool call built from deltas is dispatched"

    run(scenario)


@pytest.mark.rule("ASM-3")
def test_index_order_kept(run: Run) -> None:
    async def scenario(k: Kit) -> None:
        a = k.agent()
        k.model.push(respond.chunks(
            v.block_start(0, "text"),
            v.block_start(1, "reasoning"),
            v.reasoning_delta(1, "think"),
            v.block_end(1, v.reasoning("think")),
            v.text_delta(0, "A"),
            v.block_end(0, v.text("A")),
            v.finish("stop"),
        ))
        a.send("hi")
        await k.idle(a)
        assert _message(k, a) == [v.text("A"), v.reasoning("think")]

    run(scenario)


@pytest.mark.rule("ASM-4")
def test_no_finish_is_stop_and_last_usage_wins(run: Run) -> None:
    async def scenario(k: Kit) -> None:
        a = k.agent()
        k.model.push(respond.chunks(
            v.block_start(0, "text"),
            v.text_delta(0, "hi"),
            v.block_end(0, v.text("hi")),
            v.usage(1, 1),
            v.usage(5, 7),
        ))
        a.send("hi")
        await k.idle(a)
        assert k.reasons(a) == [COMPLETED]
        usages = [e["data"]["usage"] for e in k.events(a, "usage")]
        assert usages == [{"input_tokens": 5, "output_tokens": 7}]
        assert len(k.model.requests) == 1, "a stream without finish stops (no continuation)"

    run(scenario)
