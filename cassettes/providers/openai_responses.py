"""OpenAI Responses (``POST {base}/responses``), streaming and not.

Streaming events (``event:`` + ``data:``): ``response.output_item.added`` / ``.done`` per output
item (``message``, ``function_call``, ``reasoning``), ``response.output_text.delta``,
``response.reasoning_summary_text.delta``, ``response.function_call_arguments.delta``, and a
terminal ``response.completed``, ``response.incomplete`` (``max_output_tokens`` -> ``max-tokens``),
``response.failed`` or ``error``. Blocks are keyed by ``output_index`` (and the content/summary
index inside it), which both old (no ``sequence_number``) and new recordings carry.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar

from reference_loop.protocols import ModelRequest
from reference_loop.vocabulary import (
    BlockType,
    Chunk,
    Usage,
    finish,
    reasoning_delta,
    text_delta,
    tool_call_delta,
)

from ..sse import SSEEvent
from .base import BlockBuilder, ProviderAdapter, truncated, usage_chunk

INCOMPLETE_REASONS: dict[str, str] = {"max_output_tokens": "max-tokens", "content_filter": "content-filter"}
TERMINAL = frozenset({"response.completed", "response.incomplete", "response.failed", "error"})


def parse_usage(raw: dict[str, Any] | None) -> Usage | None:
    if not isinstance(raw, dict) or raw.get("input_tokens") is None:
        return None
    usage: Usage = {"input_tokens": int(raw["input_tokens"]), "output_tokens": int(raw.get("output_tokens") or 0)}
    cached = (raw.get("input_tokens_details") or {}).get("cached_tokens")
    if cached is not None:
        usage["cache_read_tokens"] = int(cached)
    reasoning = (raw.get("output_tokens_details") or {}).get("reasoning_tokens")
    if reasoning is not None:
        usage["reasoning_tokens"] = int(reasoning)
    return usage


def convert_input(request: ModelRequest) -> list[dict[str, Any]]:
    """Kit messages to Responses input items (tool calls and results are items of their own)."""
    items: list[dict[str, Any]] = []
    for message in request["messages"]:
        role = message["role"]
        parts: list[dict[str, Any]] = []
        for typed in message["content"]:
            block: dict[str, Any] = dict(typed)  # plain dict: which fields exist depends on the type
            kind = block["type"]
            if kind == "text":
                parts.append({"type": "output_text" if role == "assistant" else "input_text", "text": block["text"]})
            elif kind == "image" and role != "assistant":
                parts.append({"type": "input_image", "image_url": block["url"]})
            elif kind == "tool-call":
                items.append({"type": "function_call", "call_id": block["id"], "name": block["name"], "arguments": block["arguments"]})
            elif kind == "tool-result":
                text = "".join(str(b.get("text", "")) for b in block["content"] if b.get("type") == "text")
                items.append({"type": "function_call_output", "call_id": block["tool_call_id"], "output": text})
        if parts:
            items.append({"role": role, "content": parts})
    return items


class ResponsesStreamTranslator:
    """Responses API SSE events to kit chunks."""

    def __init__(self) -> None:
        self.blocks = BlockBuilder()
        self.keys: dict[tuple[int, str, int], int] = {}  # (output_index, part kind, sub index) -> kit index
        self.terminal: dict[str, Any] | None = None
        self._done = False

    @property
    def done(self) -> bool:
        return self._done

    def _open(self, key: tuple[int, str, int], block_type: BlockType, **fields: Any) -> tuple[int, list[Chunk]]:
        if key in self.keys:
            return self.keys[key], []
        index, out = self.blocks.start(block_type, **fields)
        self.keys[key] = index
        return index, out

    def _close_item(self, output_index: int, item: dict[str, Any] | None = None) -> list[Chunk]:
        out: list[Chunk] = []
        for key, index in sorted(self.keys.items(), key=lambda kv: kv[1]):
            if key[0] == output_index and index in self.blocks.open:
                final = None
                if key[1] == "call" and item is not None and isinstance(item.get("arguments"), str):
                    final = item["arguments"]
                out += self.blocks.close(index, final)
        return out

    def feed(self, event: SSEEvent) -> list[Chunk]:
        if self._done or not event.data.strip():
            return []
        data = json.loads(event.data)
        kind = data.get("type") or event.event or ""
        position = int(data.get("output_index", 0))
        if kind == "response.output_item.added":
            item = data.get("item") or {}
            if item.get("type") == "function_call":
                call_id, name = str(item.get("call_id") or item.get("id") or ""), str(item.get("name") or "")
                index, out = self._open((position, "call", 0), "tool-call", id=call_id, name=name)
                initial = item.get("arguments") or ""
                self.blocks.open[index]["arguments"] += initial
                return [*out, tool_call_delta(index, call_id, initial, name=name)]
            return []
        if kind == "response.output_text.delta":
            index, out = self._open((position, "text", int(data.get("content_index", 0))), "text")
            return out + self._append(index, data.get("delta") or "", text_delta)
        if kind in ("response.reasoning_summary_text.delta", "response.reasoning_text.delta"):
            sub = int(data.get("summary_index", data.get("content_index", 0)))
            index, out = self._open((position, "reasoning", sub), "reasoning")
            return out + self._append(index, data.get("delta") or "", reasoning_delta)
        if kind == "response.function_call_arguments.delta":
            call = self.keys.get((position, "call", 0))
            fragment = data.get("delta") or ""
            if call is None or call not in self.blocks.open or not fragment:
                return []
            state = self.blocks.open[call]
            state["arguments"] += fragment
            return [tool_call_delta(call, state["id"], fragment)]
        if kind == "response.output_text.done":
            done = self.keys.get((position, "text", int(data.get("content_index", 0))))
            return self.blocks.close(done, data.get("text")) if done is not None else []
        if kind == "response.output_item.done":
            return self._close_item(position, data.get("item"))
        if kind in TERMINAL:
            self.terminal = data
            self._done = True
            return self.blocks.close_all()
        return []

    def _append(self, index: int, fragment: str, make: Any) -> list[Chunk]:
        if not fragment or index not in self.blocks.open:
            return []
        self.blocks.open[index]["text"] += fragment
        return [make(index, fragment)]

    def end(self) -> list[Chunk]:
        if self.terminal is None:
            raise truncated("response.completed (or .incomplete/.failed)")
        return self.blocks.close_all() + terminal_chunks(self.terminal, self.blocks.tool_calls > 0)


def terminal_chunks(data: dict[str, Any], had_calls: bool) -> list[Chunk]:
    """Usage and finish from a terminal event (or a whole response object)."""
    kind = data.get("type", "")
    response: dict[str, Any] = data["response"] if isinstance(data.get("response"), dict) else data
    out: list[Chunk] = []
    if kind == "error":
        return [finish("error", str(data.get("message") or "stream error"), str(data.get("code") or "error"))]
    usage = parse_usage(response.get("usage"))
    if usage is not None:
        out.append(usage_chunk(usage))
    status = response.get("status")
    if kind == "response.failed" or status == "failed":
        err = response.get("error") or {}
        out.append(finish("error", str(err.get("message") or "response failed"), str(err.get("code") or "response_failed")))
    elif kind == "response.incomplete" or status == "incomplete":
        reason = (response.get("incomplete_details") or {}).get("reason") or "incomplete"
        out.append(finish(INCOMPLETE_REASONS.get(reason, reason)))
    else:
        out.append(finish("tool-calls" if had_calls else "stop"))
    return out


def translate_response(data: dict[str, Any]) -> list[Chunk]:
    """A whole (non-streaming) response object to the chunks its stream would have given."""
    translator = ResponsesStreamTranslator()
    out: list[Chunk] = []
    for position, item in enumerate(data.get("output") or []):
        kind = item.get("type")
        if kind == "function_call":
            out += translator.feed(_event("response.output_item.added", output_index=position, item={**item, "arguments": ""}))
            out += translator.feed(_event("response.function_call_arguments.delta", output_index=position, delta=item.get("arguments", "")))
        elif kind == "message":
            for sub, part in enumerate(item.get("content") or []):
                if part.get("type") == "output_text":
                    out += translator.feed(_event("response.output_text.delta", output_index=position, content_index=sub, delta=part.get("text", "")))
        elif kind == "reasoning":
            for sub, part in enumerate(item.get("summary") or []):
                out += translator.feed(_event("response.reasoning_summary_text.delta", output_index=position, summary_index=sub, delta=part.get("text", "")))
        out += translator.feed(_event("response.output_item.done", output_index=position, item=item))
    return out + translator.blocks.close_all() + terminal_chunks(data, translator.blocks.tool_calls > 0)


def _event(kind: str, **fields: Any) -> SSEEvent:
    return SSEEvent(kind, json.dumps({"type": kind, **fields}))


class OpenAIResponsesAdapter(ProviderAdapter):
    """OpenAI Responses API. Key from ``OPENAI_API_KEY`` when recording."""

    name: ClassVar[str] = "openai-responses"
    path: ClassVar[str] = "/responses"
    default_base_url: ClassVar[str] = "https://api.openai.com/v1"
    api_key_env: ClassVar[str] = "OPENAI_API_KEY"

    def build_body(self, request: ModelRequest) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model_name(request), "input": convert_input(request)}
        if request.get("system"):
            body["instructions"] = request["system"]
        if request.get("tools"):
            body["tools"] = [
                {"type": "function", "name": t["name"], "description": t["description"], "parameters": t["input_schema"]}
                for t in request["tools"]
            ]
        if self.max_tokens is not None:
            body["max_output_tokens"] = self.max_tokens
        if self.streaming:
            body["stream"] = True
        return body

    def auth_headers(self) -> dict[str, str]:
        return {"authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def translator(self) -> ResponsesStreamTranslator:
        return ResponsesStreamTranslator()

    def translate_response(self, data: dict[str, Any]) -> list[Chunk]:
        return translate_response(data)
