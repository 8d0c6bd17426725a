"""OpenAI-compatible chat completions (``POST {base}/chat/completions``), streaming and not.

Streaming: ``data:`` chunks with ``choices[0].delta`` (``content``, ``reasoning_content``,
``tool_calls[]`` keyed by their ``index``, arguments in fragments), ``finish_reason`` on the last
choice chunk, usage in a final chunk with ``choices: []`` (``stream_options.include_usage``), then
``data: [DONE]``. Only choice 0 is read (the loop asks for one completion).
"""

from __future__ import annotations

import json
from typing import Any, ClassVar

from reference_loop.protocols import ModelRequest
from reference_loop.vocabulary import (
    Chunk,
    Message,
    Usage,
    finish,
    reasoning_delta,
    text_delta,
    tool_call_delta,
)

from ..sse import SSEEvent
from .base import BlockBuilder, ProviderAdapter, error_from_body, truncated, usage_chunk

FINISH_REASONS: dict[str, str] = {
    "stop": "stop",
    "tool_calls": "tool-calls",
    "function_call": "tool-calls",
    "length": "max-tokens",
    # Not in the kit's closed list; the set is open and an unknown kind counts as a success.
    "content_filter": "content-filter",
}


def finish_kind(reason: str | None) -> str:
    return FINISH_REASONS.get(reason or "stop", reason or "stop")


def parse_usage(raw: dict[str, Any] | None) -> Usage | None:
    if not isinstance(raw, dict) or raw.get("prompt_tokens") is None:
        return None
    usage: Usage = {"input_tokens": int(raw.get("prompt_tokens") or 0), "output_tokens": int(raw.get("completion_tokens") or 0)}
    cached = (raw.get("prompt_tokens_details") or {}).get("cached_tokens")
    if cached is not None:
        usage["cache_read_tokens"] = int(cached)
    reasoning = (raw.get("completion_tokens_details") or {}).get("reasoning_tokens")
    if reasoning is not None:
        usage["reasoning_tokens"] = int(reasoning)
    return usage


def convert_messages(request: ModelRequest) -> list[dict[str, Any]]:
    """Kit messages to chat-completions messages (tool results become ``role: tool`` messages)."""
    out: list[dict[str, Any]] = []
    if request.get("system"):
        out.append({"role": "system", "content": request["system"]})
    for message in request["messages"]:
        out.extend(_convert(message))
    return out


def _text_of(blocks: list[Any]) -> str:
    return "".join(b.get("text", "") for b in blocks if b.get("type") == "text")


def _convert(message: Message) -> list[dict[str, Any]]:
    role, blocks = message["role"], message["content"]
    if role == "assistant":
        entry: dict[str, Any] = {"role": "assistant", "content": _text_of(blocks) or None}
        calls = [
            {"id": b["id"], "type": "function", "function": {"name": b["name"], "arguments": b["arguments"]}}
            for b in blocks
            if b["type"] == "tool-call"
        ]
        if calls:
            entry["tool_calls"] = calls
        return [entry]
    out: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    for b in blocks:
        if b["type"] == "tool-result":
            out.append({"role": "tool", "tool_call_id": b["tool_call_id"], "content": _text_of(b["content"])})
        elif b["type"] == "text":
            parts.append({"type": "text", "text": b["text"]})
        elif b["type"] == "image":
            parts.append({"type": "image_url", "image_url": {"url": b["url"]}})
    if parts:
        simple = all(p["type"] == "text" for p in parts)
        out.append({"role": role, "content": "".join(p["text"] for p in parts) if simple else parts})
    return out


class ChatStreamTranslator:
    """Chat-completions SSE chunks to kit chunks."""

    def __init__(self) -> None:
        self.blocks = BlockBuilder()
        self.text_index: int | None = None
        self.reasoning_index: int | None = None
        self.calls: dict[int, tuple[int, str]] = {}  # provider tool index -> (kit index, call id)
        self.finish_reason: str | None = None
        self.usage: Usage | None = None
        self.error: Chunk | None = None
        self._done = False

    @property
    def done(self) -> bool:
        return self._done

    def feed(self, event: SSEEvent) -> list[Chunk]:
        if self._done:
            return []
        if event.data.strip() == "[DONE]":
            self._done = True
            return []
        data = json.loads(event.data)
        if isinstance(data.get("error"), dict):  # a mid-stream error object
            err = error_from_body(0, event.data)
            self.error = finish("error", err.message, err.code)
            self._done = True
            return self.blocks.close_all()
        usage = parse_usage(data.get("usage"))
        if usage is not None:
            self.usage = usage
        out: list[Chunk] = []
        for choice in data.get("choices") or []:
            if choice.get("index", 0) != 0:
                continue
            out.extend(self._delta(choice.get("delta") or {}))
            if choice.get("finish_reason"):
                self.finish_reason = choice["finish_reason"]
                out.extend(self.blocks.close_all())
        return out

    def _delta(self, delta: dict[str, Any]) -> list[Chunk]:
        out: list[Chunk] = []
        thought = delta.get("reasoning_content") or delta.get("reasoning")
        if isinstance(thought, str) and thought:
            if self.reasoning_index not in self.blocks.open:  # none yet, or closed by later content
                self.reasoning_index, started = self.blocks.start("reasoning")
                out.extend(started)
            self.blocks.open[self.reasoning_index]["text"] += thought
            out.append(reasoning_delta(self.reasoning_index, thought))
        content = delta.get("content")
        if isinstance(content, str) and content:
            if self.reasoning_index is not None:
                out.extend(self.blocks.close(self.reasoning_index))
            if self.text_index not in self.blocks.open:
                self.text_index, started = self.blocks.start("text")
                out.extend(started)
            self.blocks.open[self.text_index]["text"] += content
            out.append(text_delta(self.text_index, content))
        for position, call in enumerate(delta.get("tool_calls") or []):
            out.extend(self._tool_call(call.get("index", position), call))
        return out

    def _tool_call(self, key: int, call: dict[str, Any]) -> list[Chunk]:
        out: list[Chunk] = []
        function = call.get("function") or {}
        fragment = function.get("arguments") or ""
        if key not in self.calls:
            # Text (and reasoning) never resume once calls begin: close them so blocks stay ordered.
            for index in (self.reasoning_index, self.text_index):
                if index is not None:
                    out.extend(self.blocks.close(index))
            call_id, name = call.get("id") or f"call_{key}", function.get("name") or ""
            index, started = self.blocks.start("tool-call", id=call_id, name=name)
            self.calls[key] = (index, call_id)
            self.blocks.open[index]["arguments"] += fragment
            out.extend(started)
            out.append(tool_call_delta(index, call_id, fragment, name=name))
            return out
        index, call_id = self.calls[key]
        if fragment and index in self.blocks.open:
            self.blocks.open[index]["arguments"] += fragment
            out.append(tool_call_delta(index, call_id, fragment))
        return out

    def end(self) -> list[Chunk]:
        if self.error is not None:
            return [self.error]
        if not self._done and self.finish_reason is None:
            raise truncated("its finish_reason and data: [DONE]")
        out = self.blocks.close_all()
        if self.usage is not None:
            out.append(usage_chunk(self.usage))
        out.append(finish(finish_kind(self.finish_reason)))
        return out


def translate_completion(data: dict[str, Any]) -> list[Chunk]:
    """A whole (non-streaming) chat completion to the same chunks a stream would give."""
    blocks = BlockBuilder()
    out: list[Chunk] = []
    choice = (data.get("choices") or [{}])[0]
    message = choice.get("message") or {}
    thought = message.get("reasoning_content") or message.get("reasoning")
    if isinstance(thought, str) and thought:
        index, started = blocks.start("reasoning")
        out += [*started, reasoning_delta(index, thought), *blocks.close(index, thought)]
    if isinstance(message.get("content"), str) and message["content"]:
        index, started = blocks.start("text")
        out += [*started, text_delta(index, message["content"]), *blocks.close(index, message["content"])]
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        arguments = function.get("arguments") or ""
        index, started = blocks.start("tool-call", id=call.get("id", ""), name=function.get("name", ""))
        out += [*started, tool_call_delta(index, call.get("id", ""), arguments, name=function.get("name", ""))]
        out += blocks.close(index, arguments)
    usage = parse_usage(data.get("usage"))
    if usage is not None:
        out.append(usage_chunk(usage))
    out.append(finish(finish_kind(choice.get("finish_reason"))))
    return out


class OpenAIChatAdapter(ProviderAdapter):
    """OpenAI (or compatible) chat completions. Key from ``OPENAI_API_KEY`` when recording."""

    name: ClassVar[str] = "openai-chat"
    path: ClassVar[str] = "/chat/completions"
    default_base_url: ClassVar[str] = "https://api.openai.com/v1"
    api_key_env: ClassVar[str] = "OPENAI_API_KEY"

    def build_body(self, request: ModelRequest) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model_name(request), "messages": convert_messages(request)}
        if request.get("tools"):
            body["tools"] = [
                {"type": "function", "function": {"name": t["name"], "description": t["description"], "parameters": t["input_schema"]}}
                for t in request["tools"]
            ]
        if self.max_tokens is not None:
            body["max_tokens"] = self.max_tokens
        if self.streaming:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        return body

    def auth_headers(self) -> dict[str, str]:
        return {"authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def translator(self) -> ChatStreamTranslator:
        return ChatStreamTranslator()

    def translate_response(self, data: dict[str, Any]) -> list[Chunk]:
        return translate_completion(data)
