"""Adapter details not covered by replays: request bodies, error mapping, in-stream errors."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import httpx
import pytest

from cassettes.errors import ProviderError, RateLimitError
from cassettes.llm_cassette import Cassette
from cassettes.providers import AnthropicMessagesAdapter, OpenAIChatAdapter, OpenAIResponsesAdapter
from cassettes.providers.base import error_from_body
from cassettes.replay import replay_interaction
from reference_loop.protocols import ModelRequest

from .conftest import SHIPPED

HISTORY: ModelRequest = {
    "model": "m",
    "system": "Be brief.",
    "messages": [
        {"role": "user", "content": [{"type": "text", "text": "weather?"}]},
        {"role": "assistant", "content": [{"type": "reasoning", "text": "hmm"}, {"type": "text", "text": "Checking."},
                                          {"type": "tool-call", "id": "c1", "name": "get_weather", "arguments": '{"city":"Paris"}'}]},
        {"role": "user", "content": [{"type": "tool-result", "tool_call_id": "c1", "content": [{"type": "text", "text": "sunny"}], "is_error": False}]},
    ],
    "tools": [{"name": "get_weather", "description": "d", "input_schema": {"type": "object"}}],
}


def test_openai_chat_body() -> None:
    body = OpenAIChatAdapter(max_tokens=50).build_body(HISTORY)
    assert body["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "weather?"},
        # The reasoning of a tool-call message goes back (DeepSeek requires it in thinking mode).
        {"role": "assistant", "content": "Checking.", "reasoning_content": "hmm",
         "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
    ]
    assert body["tools"][0]["function"]["parameters"] == {"type": "object"}
    assert (body["stream"], body["stream_options"], body["max_tokens"]) == (True, {"include_usage": True}, 50)


def test_anthropic_body_and_headers() -> None:
    adapter = AnthropicMessagesAdapter(api_key="k", stream=False)
    body = adapter.build_body(HISTORY)
    assert body["system"] == "Be brief." and body["max_tokens"] == 1024 and "stream" not in body
    assert body["messages"][1]["content"] == [
        {"type": "text", "text": "Checking."},
        {"type": "tool_use", "id": "c1", "name": "get_weather", "input": {"city": "Paris"}},
    ]
    assert body["messages"][2]["content"] == [{"type": "tool_result", "tool_use_id": "c1", "content": "sunny", "is_error": False}]
    headers = adapter.headers()
    assert headers["x-api-key"] == "k" and headers["anthropic-version"] and headers["accept"] == "application/json"


def test_responses_body() -> None:
    body = OpenAIResponsesAdapter(max_tokens=50).build_body(HISTORY)
    assert body["instructions"] == "Be brief." and body["max_output_tokens"] == 50
    # Items in block order; reasoning without its item (here: no provider_data) is not sent.
    assert body["input"] == [
        {"role": "user", "content": [{"type": "input_text", "text": "weather?"}]},
        {"role": "assistant", "content": [{"type": "output_text", "text": "Checking."}]},
        {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": '{"city":"Paris"}'},
        {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
    ]


@pytest.mark.parametrize(
    ("status", "body", "cls", "code"),
    [
        (429, '{"error": {"message": "slow down", "type": "requests", "code": "rate_limit_exceeded"}}', RateLimitError, "rate_limit_exceeded"),
        (529, '{"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}', RateLimitError, "overloaded_error"),
        (503, "<html>upstream unavailable</html>", ProviderError, "HTTP_503"),
        (400, '{"error": {"message": "bad", "type": "invalid_request_error", "code": null}}', ProviderError, "invalid_request_error"),
    ],
)
def test_http_errors_map_to_status_and_code(status: int, body: str, cls: type, code: str) -> None:
    error = error_from_body(status, body)
    assert type(error) is cls and (error.status, error.code) == (status, code)


def test_a_5xx_through_the_adapter_raises_with_status() -> None:
    transport = httpx.MockTransport(lambda request: httpx.Response(502, text="bad gateway"))

    async def run() -> None:
        async for _ in OpenAIChatAdapter(transport=transport).stream({"model": "m", "messages": []}):
            pass

    with pytest.raises(ProviderError) as info:
        asyncio.run(run())
    assert (info.value.status, info.value.code) == (502, "HTTP_502")


def test_anthropic_in_stream_error_ends_with_finish_error_and_keeps_the_usage() -> None:
    result = asyncio.run(replay_interaction(Cassette.load(SHIPPED / "anthropic" / "stream_error.yaml"), 0))
    assert result.chunks[-1] == {"type": "finish", "reason": {"kind": "error", "message": "Overloaded", "code": "overloaded_error"}}
    assert result.chunks[-2] == {"type": "usage", "usage": {"input_tokens": 12, "output_tokens": 1}}  # from message_start
    assert result.chunks[-3]["type"] == "block-end"  # the open block is closed before the finish


@pytest.mark.parametrize(
    ("adapter", "data"),
    [
        ("openai-chat", None),  # reasoning_content is the whole story: nothing to keep
        ("anthropic", {"anthropic": {"signature": "c2lnbmF0dXJl"}}),
        ("gemini", None),  # its signature comes on a part of its own, after the text
        ("bedrock", {"bedrock": {"signature": "c2lnbmF0dXJl"}}),
    ],
)
def test_reasoning_blocks_from_thinking_streams(adapter: str, data: dict | None) -> None:
    chunks = asyncio.run(replay_interaction(Cassette.load(SHIPPED / adapter / "thinking.yaml"), 0)).chunks
    blocks = [c["block"] for c in chunks if c["type"] == "block-end"]
    thought: dict = {"type": "reasoning", "text": "The user greets me; answer briefly."}
    if data is not None:
        thought["provider_data"] = data
    assert blocks[:2] == [thought, {"type": "text", "text": "Hello from the loopkit test server."}]


def test_stock_vcrpy_replays_our_format_as_one_body(tmp_path: Path) -> None:
    import vcr

    source = SHIPPED / "anthropic" / "text.yaml"
    text = source.read_text()
    port = re.search(r"127\.0\.0\.1:(\d+)", text)
    assert port is not None
    (tmp_path / "c.yaml").write_text(text)
    with vcr.use_cassette(str(tmp_path / "c.yaml"), record_mode="none", match_on=["method", "uri"]):
        response = httpx.post(f"http://127.0.0.1:{port.group(1)}/v1/messages", json={})
    assert response.text == Cassette.load(source).interactions[0].body
    assert json.loads(response.text.split("data: ", 1)[1].split("\n")[0])["type"] == "message_start"


def test_the_help_lists_every_adapter_by_name_in_registry_order() -> None:
    """``cassettes.names`` (what ``loopkit cassette record --help`` lists without loading httpx)
    names exactly the registered adapters."""
    from cassettes.names import ADAPTER_NAMES
    from cassettes.providers import ADAPTERS

    assert ADAPTER_NAMES == tuple(ADAPTERS)
