"""Anthropic messages (``POST {base}/messages``), streaming and not.

Streaming events: ``message_start`` (input usage), ``content_block_start`` / ``_delta`` / ``_stop``
per block (``text_delta``, ``thinking_delta``, ``input_json_delta``; ``signature_delta`` is not
content), ``message_delta`` (``stop_reason``, output usage), ``message_stop`` (terminal), ``ping``,
and in-stream ``error`` events, which end the stream with ``finish{error}``.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar

from reference_loop.protocols import ModelRequest
from reference_loop.vocabulary import (
    Chunk,
    Usage,
    finish,
    reasoning_delta,
    text_delta,
    tool_call_delta,
)

from ..sse import SSEEvent
from .base import BlockBuilder, ProviderAdapter, truncated, usage_chunk

STOP_REASONS: dict[str, str] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "tool_use": "tool-calls",
    "max_tokens": "max-tokens",
    "model_context_window_exceeded": "max-tokens",
    # Open-set kinds (count as success): the model paused or declined.
    "pause_turn": "pause-turn",
    "refusal": "refusal",
}
DEFAULT_MAX_TOKENS = 1024
API_VERSION = "2023-06-01"


def stop_kind(reason: str | None) -> str:
    return STOP_REASONS.get(reason or "end_turn", reason or "stop")


def merge_usage(usage: Usage | None, raw: dict[str, Any] | None) -> Usage | None:
    """Fold one usage object (``message_start`` or the cumulative ``message_delta``) into ours."""
    if not isinstance(raw, dict):
        return usage
    merged: Usage = dict(usage) if usage else {"input_tokens": 0, "output_tokens": 0}  # type: ignore[assignment]
    if raw.get("input_tokens") is not None:
        merged["input_tokens"] = int(raw["input_tokens"])
    if raw.get("output_tokens") is not None:
        merged["output_tokens"] = int(raw["output_tokens"])
    if raw.get("cache_read_input_tokens") is not None:
        merged["cache_read_tokens"] = int(raw["cache_read_input_tokens"])
    if raw.get("cache_creation_input_tokens") is not None:
        merged["cache_write_tokens"] = int(raw["cache_creation_input_tokens"])
    return merged


def convert_messages(request: ModelRequest) -> list[dict[str, Any]]:
    """Kit messages to Anthropic messages (reasoning is dropped: replaying it needs a signature)."""
    out: list[dict[str, Any]] = []
    for message in request["messages"]:
        content = [part for part in map(_block, message["content"]) if part is not None]
        if message["role"] == "system":
            continue  # the system prompt travels in the top-level ``system`` field
        if content:
            out.append({"role": message["role"], "content": content})
    return out


def _block(block: Any) -> dict[str, Any] | None:
    kind = block["type"]
    if kind == "text":
        return {"type": "text", "text": block["text"]}
    if kind == "tool-call":
        try:
            arguments = json.loads(block["arguments"] or "{}")
        except ValueError:
            arguments = {}
        return {"type": "tool_use", "id": block["id"], "name": block["name"], "input": arguments}
    if kind == "tool-result":
        text = "".join(b.get("text", "") for b in block["content"] if b.get("type") == "text")
        return {"type": "tool_result", "tool_use_id": block["tool_call_id"], "content": text, "is_error": block["is_error"]}
    if kind == "image":
        return {"type": "image", "source": {"type": "url", "url": block["url"]}}
    return None


def _system_of(request: ModelRequest) -> str:
    parts = [request.get("system") or ""]
    parts += [
        "".join(b.get("text", "") for b in m["content"] if b["type"] == "text")
        for m in request["messages"]
        if m["role"] == "system"
    ]
    return "\n\n".join(p for p in parts if p)


def _start_input(block: dict[str, Any]) -> str:
    start = block.get("input")
    return json.dumps(start, separators=(",", ":")) if start else ""


class MessagesStreamTranslator:
    """Anthropic SSE events to kit chunks."""

    def __init__(self) -> None:
        self.blocks = BlockBuilder()
        self.index_of: dict[int, int] = {}  # provider block index -> kit index
        self.start_input: dict[int, str] = {}
        self.stop_reason: str | None = None
        self.usage: Usage | None = None
        self.error: Chunk | None = None
        self._done = False

    @property
    def done(self) -> bool:
        return self._done

    def feed(self, event: SSEEvent) -> list[Chunk]:
        if self._done or not event.data.strip():
            return []
        data = json.loads(event.data)
        kind = data.get("type") or event.event
        if kind == "message_start":
            self.usage = merge_usage(self.usage, (data.get("message") or {}).get("usage"))
        elif kind == "content_block_start":
            return self._start(data.get("index", 0), data.get("content_block") or {})
        elif kind == "content_block_delta":
            return self._delta(data.get("index", 0), data.get("delta") or {})
        elif kind == "content_block_stop":
            index = self.index_of.get(data.get("index", 0))
            if index is None:
                return []
            state = self.blocks.open.get(index, {})
            final = None
            if state.get("type") == "tool-call" and not state.get("arguments"):
                final = self.start_input.get(index) or None
            return self.blocks.close(index, final)
        elif kind == "message_delta":
            self.stop_reason = (data.get("delta") or {}).get("stop_reason") or self.stop_reason
            self.usage = merge_usage(self.usage, data.get("usage"))
        elif kind == "message_stop":
            self._done = True
        elif kind == "error":
            err = data.get("error") or {}
            self.error = finish("error", str(err.get("message") or "stream error"), str(err.get("type") or "error"))
            self._done = True
            return self.blocks.close_all()
        return []

    def _start(self, provider_index: int, block: dict[str, Any]) -> list[Chunk]:
        kind = block.get("type")
        if kind in ("text", "thinking"):
            index, out = self.blocks.start("text" if kind == "text" else "reasoning")
            self.index_of[provider_index] = index
            initial = block.get("text") or block.get("thinking") or ""
            if initial:
                out += self._delta(provider_index, {"type": f"{kind}_delta", kind: initial})
            return out
        if kind == "tool_use":  # server_tool_use runs on Anthropic's side: not the loop's to call
            call_id, name = str(block.get("id", "")), str(block.get("name", ""))
            index, out = self.blocks.start("tool-call", id=call_id, name=name)
            self.index_of[provider_index] = index
            self.start_input[index] = _start_input(block)
            out.append(tool_call_delta(index, call_id, "", name=name))
            return out
        return []  # redacted thinking, server tool results...: not content the kit models

    def _delta(self, provider_index: int, delta: dict[str, Any]) -> list[Chunk]:
        index = self.index_of.get(provider_index)
        state = self.blocks.open.get(index) if index is not None else None
        if index is None or state is None:
            return []
        kind = delta.get("type")
        if kind == "text_delta" and delta.get("text"):
            state["text"] += delta["text"]
            return [text_delta(index, delta["text"])]
        if kind == "thinking_delta" and delta.get("thinking"):
            state["text"] += delta["thinking"]
            return [reasoning_delta(index, delta["thinking"])]
        if kind == "input_json_delta" and delta.get("partial_json"):
            state["arguments"] += delta["partial_json"]
            return [tool_call_delta(index, state["id"], delta["partial_json"])]
        return []

    def end(self) -> list[Chunk]:
        if self.error is not None:
            return [self.error]
        if not self._done:
            raise truncated("message_stop")
        out = self.blocks.close_all()
        if self.usage is not None:
            out.append(usage_chunk(self.usage))
        out.append(finish(stop_kind(self.stop_reason)))
        return out


def translate_message(data: dict[str, Any]) -> list[Chunk]:
    """A whole (non-streaming) message to the chunks its stream would have given."""
    translator = MessagesStreamTranslator()
    out: list[Chunk] = []
    for position, block in enumerate(data.get("content") or []):
        kind = block.get("type")
        out += translator._start(position, {**block, "text": "", "thinking": ""} if kind != "tool_use" else {**block, "input": {}})
        if kind == "text":
            out += translator._delta(position, {"type": "text_delta", "text": block.get("text", "")})
        elif kind == "thinking":
            out += translator._delta(position, {"type": "thinking_delta", "thinking": block.get("thinking", "")})
        elif kind == "tool_use":
            arguments = json.dumps(block.get("input") or {}, separators=(",", ":"))
            out += translator._delta(position, {"type": "input_json_delta", "partial_json": arguments})
        out += translator.feed(SSEEvent("content_block_stop", json.dumps({"type": "content_block_stop", "index": position})))
    usage = merge_usage(None, data.get("usage"))
    if usage is not None:
        out.append(usage_chunk(usage))
    out.append(finish(stop_kind(data.get("stop_reason"))))
    return out


class AnthropicMessagesAdapter(ProviderAdapter):
    """Anthropic messages API. Key from ``ANTHROPIC_API_KEY`` when recording."""

    name: ClassVar[str] = "anthropic"
    path: ClassVar[str] = "/messages"
    default_base_url: ClassVar[str] = "https://api.anthropic.com/v1"
    api_key_env: ClassVar[str] = "ANTHROPIC_API_KEY"

    def build_body(self, request: ModelRequest) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model_name(request),
            "max_tokens": self.max_tokens or DEFAULT_MAX_TOKENS,
            "messages": convert_messages(request),
        }
        system = _system_of(request)
        if system:
            body["system"] = system
        if request.get("tools"):
            body["tools"] = [
                {"name": t["name"], "description": t["description"], "input_schema": t["input_schema"]}
                for t in request["tools"]
            ]
        if self.streaming:
            body["stream"] = True
        return body

    def auth_headers(self) -> dict[str, str]:
        headers = {"anthropic-version": API_VERSION}
        if self.api_key:
            headers["x-api-key"] = self.api_key
        return headers

    def translator(self) -> MessagesStreamTranslator:
        return MessagesStreamTranslator()

    def translate_response(self, data: dict[str, Any]) -> list[Chunk]:
        return translate_message(data)
