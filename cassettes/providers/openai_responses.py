"""OpenAI Responses (``POST {base}/responses``), streaming and not.

Streaming events (``event:`` + ``data:``): ``response.output_item.added`` / ``.done`` per output
item, ``response.output_text.delta`` (+ ``.annotation.added``), ``response.refusal.delta``,
``response.reasoning_summary_text.delta`` / ``response.reasoning_text.delta``,
``response.function_call_arguments.delta`` (``response.custom_tool_call_input.delta`` for custom
tools), progress events of server-run tools, and a terminal ``response.completed``,
``response.incomplete`` (``max_output_tokens`` -> ``max-tokens``), ``response.failed`` or
``error``. Blocks are keyed by ``output_index`` (and the content/summary index inside it), which
both old (no ``sequence_number``) and new recordings carry.

``provider_data["openai-responses"]`` keeps what a later request needs: a reasoning item whole
(``item``: id, summary, ``encrypted_content``) on its first reasoning block (an empty one when the
item has no summary), the ``id`` of message and function-call items (a reasoning item must be sent
back with the item that followed it), ``annotations`` of output text, ``refusal: true`` on a
refusal's text block, and server-run tool items (web search, file search, code interpreter, MCP,
image generation...) whole on an empty text block. Input items are rebuilt in block order.
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

from ..errors import ProviderError
from ..sse import SSEEvent
from .base import (
    BlockBuilder,
    ProviderAdapter,
    Skipped,
    as_int,
    finish_from,
    provider_data,
    refusal_finish,
    text_of,
    truncated,
    usage_chunk,
)

NAME = "openai-responses"
INCOMPLETE_REASONS: dict[str, str] = {"max_output_tokens": "max-tokens", "content_filter": "content-filter"}
PLAIN_INCOMPLETE = frozenset({"max_output_tokens"})
TERMINAL = frozenset({"response.completed", "response.incomplete", "response.failed", "error"})
CALL_ITEMS = frozenset({"function_call", "custom_tool_call"})
# Events that carry nothing the items do not carry whole at ``response.output_item.done``.
QUIET_EVENTS = frozenset({
    "response.created", "response.in_progress", "response.queued", "response.content_part.added",
    "response.content_part.done", "response.reasoning_summary_part.added", "response.reasoning_summary_part.done",
    "response.reasoning_summary_text.done", "response.reasoning_text.done", "response.refusal.done",
    "response.function_call_arguments.done", "response.custom_tool_call_input.done",
})
SERVER_TOOL_EVENTS = ("response.web_search_call.", "response.file_search_call.", "response.code_interpreter_call",
                      "response.image_generation_call.", "response.mcp_call", "response.mcp_list_tools.")


def parse_usage(raw: dict[str, Any] | None) -> Usage | None:
    if not isinstance(raw, dict) or as_int(raw.get("input_tokens")) is None:
        return None
    usage: Usage = {"input_tokens": int(raw["input_tokens"]), "output_tokens": as_int(raw.get("output_tokens")) or 0}
    cached = as_int((raw.get("input_tokens_details") or {}).get("cached_tokens"))
    if cached is not None:
        usage["cache_read_tokens"] = cached
    reasoning = as_int((raw.get("output_tokens_details") or {}).get("reasoning_tokens"))
    if reasoning is not None:
        usage["reasoning_tokens"] = reasoning
    return usage


def convert_input(request: ModelRequest) -> list[dict[str, Any]]:
    """Kit messages to Responses input items, in block order (reasoning -> message -> call)."""
    items: list[dict[str, Any]] = []
    for message in request["messages"]:
        role = message["role"]
        current: dict[str, Any] | None = None  # the message item consecutive text joins
        for typed in message["content"]:
            block: dict[str, Any] = dict(typed)  # plain dict: which fields exist depends on the type
            kind, mine = block["type"], provider_data(block, NAME)
            if isinstance(mine.get("item"), dict):
                items.append(dict(mine["item"]))  # a reasoning item or a server tool item, verbatim
                current = None
            elif kind in ("text", "image") and (kind == "image" or block["text"]):
                part = _part(role, block, mine)
                if part is None:
                    continue
                if current is None or (mine.get("id") and current.get("id") != mine.get("id")):
                    current = {"role": role, "content": []}
                    if role == "assistant" and mine.get("id"):
                        current = {"type": "message", "role": "assistant", "id": mine["id"], "status": "completed", "content": []}
                    items.append(current)
                current["content"].append(part)
            elif kind == "tool-call":
                if mine.get("custom"):
                    item = {"type": "custom_tool_call", "call_id": block["id"], "name": block["name"], "input": block["arguments"]}
                else:
                    item = {"type": "function_call", "call_id": block["id"], "name": block["name"], "arguments": block["arguments"]}
                if mine.get("id"):
                    item["id"] = mine["id"]
                items.append(item)
                current = None
            elif kind == "tool-result":
                items.append({"type": "function_call_output", "call_id": block["tool_call_id"], "output": text_of(block["content"])})
                current = None
            # reasoning without its item (a later summary part, or another provider's) is not sent
    return items


def _part(role: str, block: dict[str, Any], mine: dict[str, Any]) -> dict[str, Any] | None:
    if block["type"] == "image":
        return {"type": "input_image", "image_url": block["url"]} if role != "assistant" else None
    if role != "assistant":
        return {"type": "input_text", "text": block["text"]}
    if mine.get("refusal"):
        return {"type": "refusal", "refusal": block["text"]}
    part: dict[str, Any] = {"type": "output_text", "text": block["text"]}
    if mine.get("annotations"):
        part["annotations"] = mine["annotations"]
    return part


class ResponsesStreamTranslator:
    """Responses API SSE events to kit chunks."""

    def __init__(self, skipped: Skipped | None = None) -> None:
        self.blocks = BlockBuilder(NAME)
        self.skipped = skipped if skipped is not None else Skipped()
        self.keys: dict[tuple[int, str, int], int] = {}  # (output_index, part kind, sub index) -> kit index
        self.terminal: dict[str, Any] | None = None
        self.refusal = ""
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

    def _item_blocks(self, output_index: int) -> list[tuple[tuple[int, str, int], int]]:
        return sorted(((k, i) for k, i in self.keys.items() if k[0] == output_index), key=lambda kv: kv[1])

    def _close_item(self, output_index: int, item: dict[str, Any] | None = None) -> list[Chunk]:
        item = item or {}
        kind = item.get("type")
        out: list[Chunk] = []
        owned = self._item_blocks(output_index)
        if kind == "reasoning" or (kind not in (None, "message") and kind not in CALL_ITEMS):
            # The item itself goes back on a later request: on its first block (made if none).
            if not owned:
                key = (output_index, "reasoning" if kind == "reasoning" else "item", 0)
                _, out = self._open(key, "reasoning" if kind == "reasoning" else "text")
                owned = self._item_blocks(output_index)
            first = owned[0][1]
            if first in self.blocks.open:
                self.blocks.data(first)["item"] = item
        for key, index in owned:
            if index not in self.blocks.open:
                continue
            final = None
            if key[1] == "call":
                value = item.get("arguments", item.get("input"))
                final = value if isinstance(value, str) else None
                if item.get("id"):
                    self.blocks.data(index)["id"] = item["id"]
            elif key[1] in ("text", "refusal") and kind == "message":
                if item.get("id"):
                    self.blocks.data(index)["id"] = item["id"]
                parts = item.get("content") or []
                part = parts[key[2]] if key[2] < len(parts) and isinstance(parts[key[2]], dict) else {}
                if part.get("annotations"):
                    self.blocks.data(index)["annotations"] = part["annotations"]
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
            if item.get("type") in CALL_ITEMS:
                call_id, name = str(item.get("call_id") or item.get("id") or ""), str(item.get("name") or "")
                index, out = self._open((position, "call", 0), "tool-call", id=call_id, name=name)
                if item["type"] == "custom_tool_call":
                    self.blocks.data(index)["custom"] = True
                initial = item.get("arguments") or item.get("input") or ""
                self.blocks.open[index]["arguments"] += initial
                return [*out, tool_call_delta(index, call_id, initial, name=name)]
            return []
        if kind == "response.output_text.delta":
            index, out = self._open((position, "text", int(data.get("content_index", 0))), "text")
            return out + self._append(index, data.get("delta") or "", text_delta)
        if kind == "response.refusal.delta":
            index, out = self._open((position, "refusal", int(data.get("content_index", 0))), "text")
            if index in self.blocks.open:
                self.blocks.data(index)["refusal"] = True
            self.refusal += data.get("delta") or ""
            return out + self._append(index, data.get("delta") or "", text_delta)
        if kind in ("response.reasoning_summary_text.delta", "response.reasoning_text.delta"):
            sub = int(data.get("summary_index", data.get("content_index", 0)))
            part = "reasoning" if kind.startswith("response.reasoning_summary") else "reasoning-text"
            index, out = self._open((position, part, sub), "reasoning")
            return out + self._append(index, data.get("delta") or "", reasoning_delta)
        if kind in ("response.function_call_arguments.delta", "response.custom_tool_call_input.delta"):
            call = self.keys.get((position, "call", 0))
            fragment = data.get("delta") or ""
            if call is None or call not in self.blocks.open or not fragment:
                return []
            state = self.blocks.open[call]
            state["arguments"] += fragment
            return [tool_call_delta(call, state["id"], fragment)]
        if kind == "response.output_text.annotation.added":
            target = self.keys.get((position, "text", int(data.get("content_index", 0))))
            if target is not None and target in self.blocks.open:
                self.blocks.data(target).setdefault("annotations", []).append(data.get("annotation"))
            return []
        if kind == "response.output_text.done":
            done = self.keys.get((position, "text", int(data.get("content_index", 0))))
            if done is None or done not in self.blocks.open:
                return []
            state = self.blocks.open[done]
            # The item's own copy is authoritative; the ids and annotations come with the item.
            state["text"] = data.get("text") if isinstance(data.get("text"), str) else state["text"]
            return []
        if kind == "response.output_item.done":
            return self._close_item(position, data.get("item"))
        if kind in TERMINAL:
            self.terminal = data
            self._done = True
            return self.blocks.close_all()
        if kind not in QUIET_EVENTS and not kind.startswith(SERVER_TOOL_EVENTS):
            self.skipped.note(f"event {kind}")
        return []

    def _append(self, index: int, fragment: str, make: Any) -> list[Chunk]:
        if not fragment or index not in self.blocks.open:
            return []
        self.blocks.open[index]["text"] += fragment
        return [make(index, fragment)]

    def end(self) -> list[Chunk]:
        if self.terminal is None:
            raise truncated("response.completed (or .incomplete/.failed)")
        return self.blocks.close_all() + terminal_chunks(self.terminal, self.blocks.tool_calls > 0, self.refusal)


UNFINISHED = frozenset({"queued", "in_progress"})
"""Statuses of a whole response that holds no answer yet (background mode)."""


def terminal_chunks(data: dict[str, Any], had_calls: bool, refusal: str = "") -> list[Chunk]:
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
    elif status == "cancelled":  # a background response cancelled before it finished
        out.append(finish("error", "the response was cancelled", "cancelled"))
    elif kind == "response.incomplete" or status == "incomplete":
        reason = (response.get("incomplete_details") or {}).get("reason") or "incomplete"
        out.append(finish_from(INCOMPLETE_REASONS, PLAIN_INCOMPLETE, reason))
    elif refusal:
        out.append(refusal_finish(refusal))
    else:
        out.append(finish("tool-calls" if had_calls else "stop"))
    return out


def translate_response(data: dict[str, Any], skipped: Skipped | None = None) -> list[Chunk]:
    """A whole (non-streaming) response object to the chunks its stream would have given."""
    if data.get("status") in UNFINISHED:
        # background mode: the answer comes later, from polling GET /responses/{id}
        raise ProviderError(f"the response is still {data['status']}: a background response, whose result loopkit does not poll "
                            "for (GET /responses/{id})", code="BACKGROUND_RESPONSE")
    translator = ResponsesStreamTranslator(skipped)
    out: list[Chunk] = []
    for position, item in enumerate(data.get("output") or []):
        kind = item.get("type")
        if kind in CALL_ITEMS:
            field = "arguments" if kind == "function_call" else "input"
            out += translator.feed(_event("response.output_item.added", output_index=position, item={**item, field: ""}))
            delta = "response.function_call_arguments.delta" if kind == "function_call" else "response.custom_tool_call_input.delta"
            out += translator.feed(_event(delta, output_index=position, delta=item.get(field, "")))
        elif kind == "message":
            for sub, part in enumerate(item.get("content") or []):
                if part.get("type") == "output_text":
                    out += translator.feed(_event("response.output_text.delta", output_index=position, content_index=sub, delta=part.get("text", "")))
                elif part.get("type") == "refusal":
                    out += translator.feed(_event("response.refusal.delta", output_index=position, content_index=sub, delta=part.get("refusal", "")))
                else:
                    translator.skipped.note(f"message content type {part.get('type')}")
        elif kind == "reasoning":
            for sub, part in enumerate(item.get("summary") or []):
                out += translator.feed(_event("response.reasoning_summary_text.delta", output_index=position, summary_index=sub, delta=part.get("text", "")))
            for sub, part in enumerate(item.get("content") or []):
                out += translator.feed(_event("response.reasoning_text.delta", output_index=position, content_index=sub, delta=part.get("text", "")))
        out += translator.feed(_event("response.output_item.done", output_index=position, item=item))
    return out + translator.blocks.close_all() + terminal_chunks(data, translator.blocks.tool_calls > 0, translator.refusal)


def _event(kind: str, **fields: Any) -> SSEEvent:
    return SSEEvent(kind, json.dumps({"type": kind, **fields}))


class OpenAIResponsesAdapter(ProviderAdapter):
    """OpenAI Responses API. Key from ``OPENAI_API_KEY`` when recording.

    ``reasoning`` (e.g. ``{"effort": "low", "summary": "auto"}``) asks for reasoning; the adapter
    then also asks for ``reasoning.encrypted_content``, so a stateless conversation can send each
    reasoning item back.
    """

    name: ClassVar[str] = NAME
    path: ClassVar[str] = "/responses"
    response_keys: ClassVar[tuple[str, ...]] = ("output",)
    default_base_url: ClassVar[str] = "https://api.openai.com/v1"
    api_key_env: ClassVar[str] = "OPENAI_API_KEY"

    def __init__(self, *, reasoning: dict[str, Any] | None = None, **options: Any) -> None:
        super().__init__(**options)
        self.reasoning = reasoning

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
        if self.reasoning is not None:
            body["reasoning"] = self.reasoning
            body["include"] = ["reasoning.encrypted_content"]
            body["store"] = False
        if self.streaming:
            body["stream"] = True
        return body

    def auth_headers(self) -> dict[str, str]:
        return {"authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def translator(self) -> ResponsesStreamTranslator:
        return ResponsesStreamTranslator()

    def translate_response(self, data: Any, skipped: Skipped) -> list[Chunk]:
        return translate_response(data, skipped)
