"""Section 1b: assembling a step's message from its chunks (ASM-1..4)."""

from __future__ import annotations

from typing import Any

import pytest

from conformance.adapter import AgentHandle
from conformance.fakes import respond
from conformance.harness import Kit
from reference_loop import vocabulary as v

from ._support import COMPLETED, Run


async def _answer(k: Kit, agent: AgentHandle, *chunks: Any) -> None:
    """The model streams ``chunks`` for a prompt sent to ``agent``; returns once it is idle."""
    k.model.push(respond.chunks(*chunks))
    agent.send("hi")
    await k.idle(agent)


def _hi_with_usage() -> tuple[Any, ...]:
    """A text block ``hi``, opened, streamed and closed, then a first usage chunk (1, 1)."""
    return (v.block_start(0, "text"), v.text_delta(0, "hi"), v.block_end(0, v.text("hi")), v.usage(1, 1))


def _message(k: Kit, agent: object) -> list[dict]:
    msgs = k.events(agent, "assistant/message")  # type: ignore[arg-type]
    assert msgs, "no assistant/message was logged"
    return list(msgs[0]["data"]["content"])


@pytest.mark.rule("ASM-1")
def test_block_end_is_authoritative(run: Run) -> None:
    async def scenario(k: Kit) -> None:
        a = k.agent()
        await _answer(k, a,
            v.block_start(0, "text"),
            v.text_delta(0, "par"),
            v.block_end(0, v.text("FULL")),
            v.text_delta(0, "late"),
            v.finish("stop"),
        )
        assert _message(k, a) == [v.text("FULL")]

    run(scenario)


@pytest.mark.rule("ASM-2")
def test_unclosed_blocks_kept(run: Run) -> None:
    async def scenario(k: Kit) -> None:
        a = k.agent()
        echo = k.tool("echo")
        await _answer(k, a,
            v.block_start(0, "text"),
            v.text_delta(0, "ab"),
            v.text_delta(0, "c"),
            v.tool_call_delta(1, "c1", '{"a":', name="echo"),
            v.tool_call_delta(1, "c1", "1}"),
            v.finish("tool-calls"),
        )
        assert _message(k, a) == [v.text("abc"), v.tool_call("c1", "echo", '{"a":1}')]
        assert echo.call_args == [{"a": 1}], "a tool call built from deltas is dispatched"

    run(scenario)


@pytest.mark.rule("ASM-3")
def test_index_order_kept(run: Run) -> None:
    async def scenario(k: Kit) -> None:
        a = k.agent()
        await _answer(k, a,
            v.block_start(0, "text"),
            v.block_start(1, "reasoning"),
            v.reasoning_delta(1, "think"),
            v.block_end(1, v.reasoning("think")),
            v.text_delta(0, "A"),
            v.block_end(0, v.text("A")),
            v.finish("stop"),
        )
        assert _message(k, a) == [v.text("A"), v.reasoning("think")]

    run(scenario)


@pytest.mark.rule("ASM-3")
def test_index_order_kept_for_blocks_that_open_out_of_order(run: Run) -> None:
    # "by index", not by the order blocks first appear: a provider may open a later index first
    # (a block-start, or a block built of deltas alone, ASM-2)
    async def scenario(k: Kit) -> None:
        a = k.agent()
        await _answer(k, a,
            v.reasoning_delta(2, "R"),
            v.block_start(1, "text"),
            v.text_delta(1, "B"),
            v.block_start(0, "text"),
            v.text_delta(0, "A"),
            v.block_end(0, v.text("A")),
            v.block_end(1, v.text("B")),
            v.finish("stop"),
        )
        assert _message(k, a) == [v.text("A"), v.text("B"), v.reasoning("R")]

    run(scenario)


@pytest.mark.rule("ASM-3", "LOOP-6")
def test_index_order_is_numeric_past_ten_blocks(run: Run) -> None:
    # "by index" is the number's order: twelve blocks (0..11), closing last to first, come out
    # 0, 1, 2, ..., 11, not as their indexes sort as text (0, 1, 10, 11, 2, ...). The tool
    # calls among them run in that order too (LOOP-6: dispatch uses the message).
    async def scenario(k: Kit) -> None:
        a = k.agent()
        calls = k.tool("lookup")
        order = list(range(12))
        chunks: list[Any] = []
        for i in order:
            if i in (2, 10):  # a tool call at index 2 and one at index 10
                chunks += [v.block_start(i, "tool-call"), v.tool_call_delta(i, f"c{i}", "{}", name="lookup")]
            else:
                chunks += [v.block_start(i, "text"), v.text_delta(i, f"t{i}")]
        for i in reversed(order):
            block = v.tool_call(f"c{i}", "lookup", "{}") if i in (2, 10) else v.text(f"t{i}")
            chunks.append(v.block_end(i, block))
        k.model.push(respond.chunks(*chunks, v.finish("tool-calls")), respond.text("done"))
        a.send("go")
        await k.idle(a)
        message = _message(k, a)
        shown = [b.get("text") or b.get("id") for b in message]
        assert shown == [f"c{i}" if i in (2, 10) else f"t{i}" for i in order], (
            f"blocks in index order 0..11 (ASM-3), got {shown}")
        ids = [e["data"]["call_id"] for e in k.events(a, "tool/call")]
        assert ids == ["c2", "c10"], f"the calls run in the message's order (LOOP-6): {ids}"
        assert len(calls.calls) == 2

    run(scenario)


@pytest.mark.rule("ASM-4")
@pytest.mark.parametrize("earlier", ["same-fields", "more-fields"])
def test_no_finish_is_stop_and_last_usage_wins(run: Run, earlier: str) -> None:
    # "The last usage chunk is the step's usage": the whole of it, not merged with an earlier
    # one's fields (session 61's blind round O merged them, so a field only the earlier reported
    # survived).
    async def scenario(k: Kit) -> None:
        a = k.agent()
        first = v.usage(1, 1) if earlier == "same-fields" else v.usage(1, 1, cache_read_tokens=3, reasoning_tokens=2)
        await _answer(k, a, *_hi_with_usage()[:-1], first, v.usage(5, 7))
        assert k.reasons(a) == [COMPLETED]
        usages = [e["data"]["usage"] for e in k.events(a, "usage")]
        assert usages == [{"input_tokens": 5, "output_tokens": 7}]  # the last chunk's, whole
        assert len(k.model.requests) == 1, "a stream without finish stops (no continuation)"

    run(scenario)


@pytest.mark.rule("ASM-4", "LOOP-5")
def test_chunks_after_the_finish_are_logged_and_a_usage_there_is_the_steps(run: Run) -> None:
    # A provider may report usage after its finish (a last chunk of the stream): LOOP-5 appends
    # each chunk the model streams, and ASM-4 makes the last usage the step's. A loop that stops
    # reading at the finish loses both. Observed through the log and the stream-chunk notifications.
    async def scenario(k: Kit) -> None:
        k.record("agent/stream-chunk")
        a = k.agent()
        await _answer(k, a, *_hi_with_usage(), v.finish("stop"), v.usage(5, 7))
        assert k.reasons(a) == [COMPLETED]
        chunks = [e["data"]["chunk"]["type"] for e in k.events(a, "assistant/chunk")]
        assert chunks[-2:] == ["finish", "usage"], f"the chunk after the finish was not logged: {chunks}"
        assert [n[-1]["type"] for n in k.noted("agent/stream-chunk")][-1] == "usage"
        usages = [e["data"]["usage"] for e in k.events(a, "usage")]
        assert usages == [{"input_tokens": 5, "output_tokens": 7}], usages

    run(scenario)


@pytest.mark.rule("ASM-1")
def test_block_end_wins_for_tool_calls_too(run: Run) -> None:
    # The block-end of a tool call is what runs and what the next request carries, not what
    # its deltas said; deltas after it (for the same index) change nothing.
    async def scenario(k: Kit) -> None:
        a = k.agent()
        echo = k.tool("echo")
        await _answer(k, a,
            v.block_start(0, "tool-call"),
            v.tool_call_delta(0, "c1", '{"from": "deltas"}', name="echo"),
            v.block_end(0, v.tool_call("c1", "echo", '{"from": "block-end"}')),
            v.tool_call_delta(0, "c1", "garbage"),
            v.finish("tool-calls"),
        )
        assert _message(k, a) == [v.tool_call("c1", "echo", '{"from": "block-end"}')]
        assert echo.call_args == [{"from": "block-end"}]
        assistant = [m for m in k.model.requests[1]["messages"] if m["role"] == "assistant"]
        assert assistant == [{"role": "assistant", "content": [v.tool_call("c1", "echo", '{"from": "block-end"}')]}]

    run(scenario)


@pytest.mark.rule("ASM-2")
def test_unclosed_blocks_reach_the_next_request(run: Run) -> None:
    # Observed through what the model is sent next (derived history), not the log alone: an
    # unclosed reasoning block and a tool call streamed as deltas only (no block-start, the
    # name on the first delta only) are kept, and the call runs.
    async def scenario(k: Kit) -> None:
        a = k.agent()
        echo = k.tool("echo")
        await _answer(k, a,
            v.block_start(0, "reasoning"),
            v.reasoning_delta(0, "thinking "),
            v.reasoning_delta(0, "hard"),
            v.tool_call_delta(1, "c7", '{"n"', name="echo"),
            v.tool_call_delta(1, "c7", ": 7}"),
            v.text_delta(2, "said "),  # no block-start either: a text block from its deltas
            v.text_delta(2, "so"),
            v.reasoning_delta(3, "and mused"),
            v.finish("tool-calls"),
        )
        kept = [v.reasoning("thinking hard"), v.tool_call("c7", "echo", '{"n": 7}'), v.text("said so"), v.reasoning("and mused")]
        assert echo.call_args == [{"n": 7}]
        assert len(k.model.requests) == 2, "the tool call continues the turn"
        assistant = [m["content"] for m in k.model.requests[1]["messages"] if m["role"] == "assistant"]
        assert assistant == [kept]

    run(scenario)


@pytest.mark.rule("ASM-3")
def test_index_order_kept_for_three_blocks_closing_backwards(run: Run) -> None:
    async def scenario(k: Kit) -> None:
        a = k.agent()
        echo = k.tool("echo")
        await _answer(k, a,
            v.block_start(0, "reasoning"),
            v.block_start(1, "text"),
            v.block_start(2, "tool-call"),
            v.tool_call_delta(2, "c1", "{}", name="echo"),
            v.block_end(2, v.tool_call("c1", "echo", "{}")),
            v.text_delta(1, "B"),
            v.block_end(1, v.text("B")),
            v.reasoning_delta(0, "R"),
            v.block_end(0, v.reasoning("R")),
            v.finish("tool-calls"),
        )
        ordered = [v.reasoning("R"), v.text("B"), v.tool_call("c1", "echo", "{}")]
        assert _message(k, a) == ordered
        assert len(echo.calls) == 1
        assistant = [m["content"] for m in k.model.requests[1]["messages"] if m["role"] == "assistant"]
        assert assistant == [ordered], "the next request carries the blocks in index order"

    run(scenario)


@pytest.mark.rule("ASM-4")
def test_no_finish_in_a_tool_step_and_usage_per_step(run: Run) -> None:
    # No finish chunk counts as stop, not as a failure: the tool call still runs and the turn
    # completes. Each step's usage event is its last usage chunk; a step without one logs none.
    async def scenario(k: Kit) -> None:
        a = k.agent()
        echo = k.tool("echo")
        k.model.push(
            respond.chunks(
                v.block_start(0, "tool-call"),
                v.tool_call_delta(0, "c1", "{}", name="echo"),
                v.block_end(0, v.tool_call("c1", "echo", "{}")),
                v.usage(1, 1),
                v.usage(2, 3, cache_read_tokens=1),
            ),
            respond.chunks(v.block_start(0, "text"), v.text_delta(0, "done"), v.block_end(0, v.text("done"))),
        )
        a.send("hi")
        await k.idle(a)
        assert len(echo.calls) == 1
        assert k.reasons(a) == [COMPLETED]
        assert k.events(a, "error") == []
        usages = [(e["data"]["step"], e["data"]["usage"]) for e in k.events(a, "usage")]
        assert usages == [(1, {"input_tokens": 2, "output_tokens": 3, "cache_read_tokens": 1})]

    run(scenario)


@pytest.mark.rule("ASM-1", "ASM-2")
def test_block_end_alone_and_reasoning_from_deltas(run: Run) -> None:
    # A block-end is authoritative even for an index no block-start or delta announced (ASM-1);
    # an unclosed reasoning block is kept as a reasoning block built from its deltas, and an
    # announced text block that never got a delta nor a block-end is kept as built: empty (ASM-2).
    async def scenario(k: Kit) -> None:
        a = k.agent()
        await _answer(k, a,
            v.reasoning_delta(0, "think"),
            v.reasoning_delta(0, "ing"),
            v.block_end(1, v.text("whole")),
            v.block_start(2, "text"),
            v.finish("stop"),
        )
        # Spelled out (0b's shapes), not built with the vocabulary the loop itself uses.
        assert _message(k, a) == [
            {"type": "reasoning", "text": "thinking"}, {"type": "text", "text": "whole"}, {"type": "text", "text": ""},
        ]
        assert k.reasons(a) == [COMPLETED]

    run(scenario)
