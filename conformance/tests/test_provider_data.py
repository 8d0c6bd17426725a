"""Spec 0b: a block's ``provider_data`` is carried unchanged into ``assistant/message`` and into
derived history (LOG-7).

Provider adapters put there what a provider needs back on a later request (a thinking signature,
redacted reasoning, an encrypted reasoning item, server-run tool calls and their results,
citations). A loop that drops or rewrites it breaks the next request to that provider, so each
test here streams blocks carrying it and checks the logged message and the derived history hold
exactly the ``block-end`` blocks, ``provider_data`` included.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from conformance.fakes import Response, respond
from conformance.harness import Kit
from reference_loop import vocabulary as v

from ._support import COMPLETED, MAXTOK, Run

# Deliberately awkward JSON: nesting, unicode, numbers, null, booleans, an empty object, a key
# that looks like a block field. "Unchanged" means equal as JSON, whatever it holds.
SIGNED: dict[str, Any] = {"anthropic": {"signature": "RXFKeGNoWlRRVUZCUVVGQg==", "n": [1, 2.5, None, True]}}
REDACTED: dict[str, Any] = {"anthropic": {"block": {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3p"}}}
CITED: dict[str, Any] = {"openai-responses": {"annotations": [{"type": "url_citation", "url": "https://ex.test/é", "start_index": 0}],
                                              "id": "msg_1", "text": "not the block's text", "extra": {}}}
CALL_DATA: dict[str, Any] = {"gemini": {"thoughtSignature": "CikB0e2Kbw5t_-+/", "empty": {}, "list": [[]]}}


def _with(block: Any, data: dict[str, Any]) -> Any:
    return {**block, "provider_data": copy.deepcopy(data)}


def _stream(blocks: list[Any], finish: str) -> Response:
    """Each block opened, filled from its deltas and closed with the block carrying the data."""
    out: list[Any] = []
    for index, block in enumerate(blocks):
        out.append(v.block_start(index, block["type"]))
        if block["type"] == "tool-call":
            out.append(v.tool_call_delta(index, block["id"], block["arguments"], name=block["name"]))
        elif block["text"]:
            delta = v.text_delta if block["type"] == "text" else v.reasoning_delta
            out.append(delta(index, block["text"]))
        out.append(v.block_end(index, copy.deepcopy(block)))
    out.append(v.finish(finish))
    return respond.chunks(*out)


def _assistant_messages(k: Kit, agent: Any) -> list[list[dict[str, Any]]]:
    return [list(e["data"]["content"]) for e in k.events(agent, "assistant/message")]


def _assistant_history(agent: Any) -> list[list[dict[str, Any]]]:
    return [list(m["content"]) for m in agent.session.derive_messages() if m["role"] == "assistant"]


@pytest.mark.rule("LOG-7")
def test_provider_data_reaches_the_logged_message_and_derived_history_unchanged(run: Run) -> None:
    first = [
        _with(v.reasoning("Let me look it up."), SIGNED),
        _with(v.reasoning(""), REDACTED),  # redacted thinking: no visible text, only the data
        _with(v.tool_call("call_1", "lookup", '{"q": "x"}'), CALL_DATA),
    ]
    # an empty text block carrying only provider_data (a thought signature on an empty part): a
    # block like any other, in the message and in history (session 62's round Q dropped it there)
    second = [_with(v.text("Found it."), CITED), _with(v.text(""), CALL_DATA)]

    async def scenario(k: Kit) -> None:
        a = k.agent()
        k.tool("lookup", result="result text")
        k.model.push(_stream(first, "tool-calls"), _stream(second, "stop"))
        a.send("look it up")
        await k.idle(a)
        assert k.reasons(a) == [COMPLETED]
        assert _assistant_messages(k, a) == [first, second], "assistant/message must hold each block-end block, provider_data included"
        assert _assistant_history(a) == [first, second], "derived history must carry provider_data unchanged"
        assert _assistant_history(a) == _assistant_history(a), "the same log must derive the same history"

    run(scenario)


@pytest.mark.rule("LOG-7", "ASM-1")
def test_the_block_end_copy_wins_and_late_deltas_do_not_strip_it(run: Run) -> None:
    final = _with(v.text("authoritative"), CITED)

    async def scenario(k: Kit) -> None:
        a = k.agent()
        k.model.push(respond.chunks(
            v.block_start(0, "text"),
            v.text_delta(0, "draft"),
            v.block_end(0, copy.deepcopy(final)),
            v.text_delta(0, " late"),  # ASM-1: ignored after the block-end
            v.finish("stop"),
        ))
        a.send("hi")
        await k.idle(a)
        assert _assistant_messages(k, a) == [[final]]
        assert _assistant_history(a) == [[final]]

    run(scenario)


@pytest.mark.rule("LOG-7", "MAXTOK-5")
def test_a_max_tokens_step_keeps_the_provider_data_of_the_blocks_it_keeps(run: Run) -> None:
    thought = _with(v.reasoning("partial"), SIGNED)
    text = _with(v.text("cut"), CITED)
    call = _with(v.tool_call("call_9", "lookup", "{}"), CALL_DATA)

    async def scenario(k: Kit) -> None:
        a = k.agent()
        k.tool("lookup")
        k.model.push(_stream([thought, text, call], "max-tokens"))
        a.send("hi")
        await k.idle(a)
        assert k.reasons(a) == [MAXTOK]
        assert _assistant_messages(k, a) == [[thought, text]], "only the tool call is removed; the rest keeps its data"
        assert _assistant_history(a) == [[thought, text]]

    run(scenario)


@pytest.mark.rule("LOG-7", "LOG-1")
def test_a_plugin_editing_nested_request_objects_in_place_changes_neither_log_nor_history(run: Run) -> None:
    # An agent/request plugin that converts the request in place for another provider: it
    # shortens a tool result's blocks and strips or rewrites provider_data. It edits that request
    # only: the log and the history derived from it keep what was logged (a loop whose history
    # copies blocks one level deep, or a tool result's block list but not its blocks, shares the
    # log's nested objects and fails). Observed through the log and through derive_messages().
    first = [_with(v.text("Looking."), SIGNED), _with(v.tool_call("call_1", "lookup", '{"q": "x"}'), CALL_DATA)]
    second = [_with(v.text("Found it."), CITED)]

    async def scenario(k: Kit) -> None:
        a = k.agent()
        k.tool("lookup", result="result text")

        async def convert(_agent: Any, _turn: Any, _step: Any, request: dict[str, Any], nxt: Any) -> Any:
            for message in request.get("messages", []):
                for block in message.get("content", []):
                    for inner in block.get("content", []) if isinstance(block.get("content"), list) else []:
                        if isinstance(inner, dict) and "text" in inner:
                            inner["text"] = "SHORTENED"
                    data = block.get("provider_data")
                    if isinstance(data, dict):
                        for value in data.values():
                            if isinstance(value, dict):
                                value.clear()
                        data["rerouted"] = True
            return await nxt()

        appended: list[Any] = []  # each tool/result's content as it was appended

        def on_event(_session: Any, event: dict[str, Any]) -> None:
            if event["type"] == "tool/result":
                appended.append(copy.deepcopy(event["data"]["content"]))

        k.on("session/event", on_event)
        k.on("agent/request", convert)
        k.model.push(_stream(first, "tool-calls"), _stream(second, "stop"), respond.text("again"))
        a.send("look it up")
        await k.idle(a)
        a.send("and again")
        await k.idle(a)
        assert k.reasons(a) == [COMPLETED, COMPLETED]
        assert _assistant_messages(k, a)[:2] == [first, second], "the logged assistant/message changed with the request"
        results = [e["data"]["content"] for e in k.events(a, "tool/result")]
        assert len(appended) == 1 and results == appended, f"the logged tool/result changed with the request: {results}"
        assert _assistant_history(a)[:2] == [first, second], "derived history changed with the request"
        history: list[Any] = [m for m in a.session.derive_messages()]
        tool_history = [b["content"] for m in history for b in m["content"] if b.get("type") == "tool-result"]
        assert tool_history == appended, tool_history

    run(scenario)
