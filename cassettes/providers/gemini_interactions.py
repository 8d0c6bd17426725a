"""Google Gemini's Interactions API (``POST {base}/interactions``, ``/v1beta/interactions`` on the
Gemini API), streaming (``"stream": true`` in the body, server-sent events) and not.

A stream is a sequence of events named by ``event_type``: ``interaction.created`` (older:
``interaction.start``) and ``interaction.status_update`` (metadata), then per step (older: per
content item) ``step.start`` (``content.start``) with the step's ``index`` and its ``type``,
``step.delta`` (``content.delta``) and ``step.stop`` (``content.stop``), and a terminal
``interaction.completed`` (older: ``interaction.complete``) whose ``interaction.status`` says how
it ended, or an ``error`` event. ``data: [DONE]`` follows the terminal event (the adapter reads
on to it, or to the end of the stream, and ignores anything in between); a stream that ends
before a terminal event is truncated. Any event may carry ``metadata.usage``; the last usage
seen wins.

Steps become blocks: a ``thought`` step is reasoning (``thought_summary`` deltas; its
``thought_signature`` deltas, the last non-empty one, are kept as ``provider_data[NAME]
["signature"]``, on an empty reasoning block when the thought has no summary), a
``model_output`` step's ``text`` deltas are text (``image`` items image blocks), a
``function_call`` step (``id``, ``name``, its own ``signature``) is a tool call whose arguments
stream as ``arguments_delta`` string fragments (``arguments``, or ``partial_arguments``) or
arrive whole as an object (the older ``function_call`` delta, a whole response). Server-run tool
steps (Google Search, code execution, URL context, MCP, file search, Maps: their calls and
results) are kept whole (``step``) on an empty text block and sent back as they came.

Finish: ``completed`` is ``stop`` (``tool-calls`` when the answer called functions),
``requires_action`` is ``tool-calls``, ``incomplete`` (the output hit its token limit) is
``max-tokens``, ``budget_exceeded`` is ``max-tokens`` with its raw string, ``failed`` and
``cancelled`` are ``error``. Requests send the whole history as ``input`` steps
(``user_input``, ``thought``, ``model_output``, ``function_call``, ``function_result``), each
thought and call with its signature, as a stateless conversation must.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, ClassVar

from reference_loop.protocols import ModelRequest
from reference_loop.vocabulary import (
    BlockType,
    Chunk,
    FinishChunk,
    Usage,
    finish,
    reasoning_delta,
    text_delta,
    tool_call_delta,
)

from ..sse import SSEEvent
from .base import (
    BlockBuilder,
    ProviderAdapter,
    Skipped,
    as_int,
    closing,
    compact_json,
    finish_from,
    json_objects,
    parse_arguments,
    provider_data,
    text_of,
    truncated,
)

NAME = "gemini-interactions"
STATUSES: dict[str, str] = {
    "completed": "stop",
    "requires_action": "tool-calls",
    "incomplete": "max-tokens",
    "budget_exceeded": "max-tokens",
    "failed": "error",
    "cancelled": "error",
}
PLAIN_STATUS = frozenset({"completed", "requires_action", "incomplete"})
START_EVENTS = frozenset({"step.start", "content.start"})
DELTA_EVENTS = frozenset({"step.delta", "content.delta"})
STOP_EVENTS = frozenset({"step.stop", "content.stop"})
TERMINAL_EVENTS = frozenset({"interaction.completed", "interaction.complete"})
QUIET_EVENTS = frozenset({"interaction.created", "interaction.start", "interaction.status_update"})
EVENT_KEYS = frozenset({"event_type", "event_id", "index", "step", "content", "delta", "metadata", "interaction", "interaction_id",
                        "status", "error"})
INTERACTION_KEYS = frozenset({
    "id", "object", "status", "created", "updated", "model", "agent", "role", "usage", "steps", "outputs", "input",
    "service_tier", "system_instruction", "tools", "previous_interaction_id", "generation_config", "agent_config", "environment",
    "environment_id", "response_format", "response_mime_type", "response_modalities", "webhook_config", "store", "background", "error",
    "output_text",
})
# Server-run tools: their calls and results are not the loop's to dispatch, but go back as they came.
SERVER_STEPS = frozenset({
    "code_execution_call", "code_execution_result", "url_context_call", "url_context_result", "google_search_call",
    "google_search_result", "mcp_server_tool_call", "mcp_server_tool_result", "file_search_call", "file_search_result",
    "google_maps_call", "google_maps_result", "function_result",
})
CALL_KEYS = frozenset({"type", "id", "name", "arguments", "signature"})
THOUGHT_KEYS = frozenset({"type", "signature", "summary"})
TEXT_KEYS = frozenset({"type", "text", "annotations"})
OUTPUT_KEYS = frozenset({"type", "content"})
MEDIA_KEYS = frozenset({"type", "data", "mime_type", "uri", "resolution"})


def parse_usage(raw: Any) -> Usage | None:
    """``usage`` fields one to one (snake_case, or the older camelCase aliases): the prompt (cached
    content included), the output (thoughts not included: counted apart, as ``reasoning_tokens``)."""
    if not isinstance(raw, Mapping):
        return None

    def field(name: str) -> int | None:
        camel = "".join(w.capitalize() if n else w for n, w in enumerate(name.split("_")))
        return as_int(raw.get(name, raw.get(camel)))

    prompt = field("total_input_tokens")
    if prompt is None:
        return None
    usage: Usage = {"input_tokens": prompt, "output_tokens": field("total_output_tokens") or 0}
    cached = field("total_cached_tokens")
    if cached is not None:
        usage["cache_read_tokens"] = cached
    thoughts = field("total_thought_tokens")
    if thoughts is not None:
        usage["reasoning_tokens"] = thoughts
    return usage


def _error_finish(err: Any, default: str = "stream error", code: str = "error") -> FinishChunk:
    err = err if isinstance(err, Mapping) else {}
    return finish("error", str(err.get("message") or default), str(err.get("code") or err.get("status") or code))


class InteractionsStreamTranslator:
    """Interactions API events (or one whole interaction, through ``translate_response``) to chunks."""

    def __init__(self, skipped: Skipped | None = None) -> None:
        self.blocks = BlockBuilder(NAME)
        self.skipped = skipped if skipped is not None else Skipped()
        self.steps: dict[int, str] = {}  # step index -> step type
        self.keys: dict[tuple[int, str], int] = {}  # (step index, part) -> kit index
        self.last_call: int | None = None  # the function call argument fragments belong to
        self.usage: Usage | None = None
        self.interaction: dict[str, Any] | None = None
        self.error: FinishChunk | None = None
        self.images = 0
        self.ended = False
        self.pending: dict[int, dict[str, Any]] = {}  # a call step started without its name

    @property
    def done(self) -> bool:
        # After interaction.completed the stream still sends ``data: [DONE]``: read on to it (the
        # chunks then end where the recording does), ignoring anything in between.
        return self.error is not None or (self.ended and self.interaction is not None)

    # ------------------------------------------------------------------ events

    def feed(self, event: SSEEvent) -> list[Chunk]:
        data_text = event.data.strip()
        if data_text == "[DONE]":
            self.ended = True  # the stream's own end; a stream may also just end after its terminal event
            return []
        if self.done or self.interaction is not None or not data_text:
            return []  # nothing after the terminal event counts
        data = json.loads(data_text)
        if not isinstance(data, dict):
            raise ValueError("an event is not a JSON object")
        return self.event(data, str(data.get("event_type") or event.event or ""))

    def event(self, data: dict[str, Any], kind: str) -> list[Chunk]:
        self.skipped.unknown_keys(f"event {kind}", data, EVENT_KEYS)
        usage = parse_usage((data.get("metadata") or {}).get("usage") if isinstance(data.get("metadata"), dict) else None)
        if usage is not None:
            self.usage = usage
        index = as_int(data.get("index")) or 0
        if kind in START_EVENTS:
            step = data.get("step") if isinstance(data.get("step"), dict) else data.get("content")
            return self.start(index, step if isinstance(step, dict) else {})
        if kind in DELTA_EVENTS:
            return self.delta(index, data["delta"] if isinstance(data.get("delta"), dict) else {})
        if kind in STOP_EVENTS:
            return self.stop(index)
        if kind in TERMINAL_EVENTS:
            interaction: dict[str, Any] = data["interaction"] if isinstance(data.get("interaction"), dict) else {}
            self.skipped.unknown_keys("interaction", interaction, INTERACTION_KEYS)
            usage = parse_usage(interaction.get("usage"))
            if usage is not None:
                self.usage = usage
            self.interaction = interaction
            return self.blocks.close_all()
        if kind == "error":
            self.error = _error_finish(data.get("error"))
            return self.blocks.close_all()
        if kind not in QUIET_EVENTS:
            self.skipped.note(f"event {kind}")
        return []

    def start(self, index: int, step: dict[str, Any]) -> list[Chunk]:
        kind = str(step.get("type") or "")
        self.steps[index] = kind
        out: list[Chunk] = []
        if kind == "function_call":
            self.skipped.unknown_keys("step function_call", step, CALL_KEYS)
            if step.get("name"):
                out += self._call(index, step)
            else:  # the older content.start names no call: its function_call delta does
                self.pending[index] = dict(step)
        elif kind == "thought":
            self.skipped.unknown_keys("step thought", step, THOUGHT_KEYS)
            for item in step.get("summary") or []:
                out += self.delta(index, {"type": "thought_summary", "content": item})
            if step.get("signature"):
                out += self.delta(index, {"type": "thought_signature", "signature": step["signature"]})
        elif kind == "model_output":
            self.skipped.unknown_keys("step model_output", step, OUTPUT_KEYS)
            for item in step.get("content") or []:
                if isinstance(item, dict):
                    out += self.delta(index, item)
        elif kind in ("text", "image"):  # the older content items, or a whole response's outputs
            out += self.delta(index, step)
        elif kind in SERVER_STEPS:
            block, out = self._open(index, "server", "text")
            self.blocks.data(block)["step"] = dict(step)
        elif kind != "user_input":  # a whole response echoes the input first: not the model's
            self.skipped.note(f"step {kind}")
        return out

    def delta(self, index: int, delta: dict[str, Any]) -> list[Chunk]:
        kind = str(delta.get("type") or "")
        if kind == "text":
            self.skipped.unknown_keys("delta text", delta, TEXT_KEYS)
            block, out = self._open(index, "text", "text")
            if delta.get("annotations"):
                self.blocks.data(block).setdefault("annotations", []).extend(delta["annotations"])
            return out + self._append(block, str(delta.get("text") or ""), text_delta)
        if kind == "thought_summary":
            content: dict[str, Any] = delta["content"] if isinstance(delta.get("content"), dict) else {}
            if content.get("type", "text") != "text":
                self.skipped.note(f"thought summary {content.get('type')}")
                return []
            block, out = self._open(index, "reasoning", "reasoning")
            return out + self._append(block, str(content.get("text") or ""), reasoning_delta)
        if kind == "thought_signature":
            signature = delta.get("signature")
            if not signature:
                return []  # the stream sends empty ones along the summary
            block, out = self._open(index, "reasoning", "reasoning")
            self.blocks.data(block)["signature"] = str(signature)
            return out
        if kind in ("arguments_delta", "arguments"):
            fragment = delta.get("arguments") if isinstance(delta.get("arguments"), str) else delta.get("partial_arguments")
            # Bound to this step's call; a fragment whose index names another step goes to the open call.
            call = self.keys.get((index, "call"), self.last_call)
            if not isinstance(fragment, str) or not fragment or call is None or call not in self.blocks.open:
                return []
            state = self.blocks.open[call]
            state["arguments"] += fragment
            return [tool_call_delta(call, state["id"], fragment)]
        if kind == "function_call":  # the older generation: the call whole in one delta
            return self._call(index, {**self.pending.pop(index, {}), **{k: v for k, v in delta.items() if v not in (None, "")}})
        if kind == "text_annotation_delta":
            target = self.keys.get((index, "text"))
            if target is not None and target in self.blocks.open and delta.get("annotations"):
                self.blocks.data(target).setdefault("annotations", []).extend(delta["annotations"])
            return []
        if kind == "image":
            self.skipped.unknown_keys("delta image", delta, MEDIA_KEYS)
            self.images += 1
            mime = str(delta.get("mime_type") or "")
            url = f"data:{mime};base64,{delta['data']}" if delta.get("data") else str(delta.get("uri") or "")
            block, out = self._open(index, f"image{self.images}", "image", url=url, mime_type=mime)
            return out + self.blocks.close(block)
        if kind in SERVER_STEPS:
            block, out = self._open(index, "server", "text")
            kept = self.blocks.data(block).setdefault("step", {"type": kind})
            kept.update({k: v for k, v in delta.items() if k != "type"})
            return out
        self.skipped.note(f"delta {kind}")
        return []

    def stop(self, index: int) -> list[Chunk]:
        out: list[Chunk] = self._call(index, self.pending.pop(index)) if index in self.pending else []
        for key, block in sorted(((k, b) for k, b in self.keys.items() if k[0] == index), key=lambda kb: kb[1]):
            out += self.blocks.close(block)
            del self.keys[key]
        return out

    def _call(self, index: int, call: Mapping[str, Any]) -> list[Chunk]:
        call_id, name = str(call.get("id") or f"call_{self.blocks.tool_calls}"), str(call.get("name") or "")
        out: list[Chunk] = []
        block = self.keys.get((index, "call"))
        if block is None or block not in self.blocks.open:
            block, out = self._open(index, "call", "tool-call", id=call_id, name=name)
            out.append(tool_call_delta(block, call_id, "", name=name))
        self.last_call = block
        if call.get("signature"):
            self.blocks.data(block)["signature"] = call["signature"]
        arguments = call.get("arguments")
        if isinstance(arguments, dict) and arguments:  # whole: the streamed start has {} and fragments follow
            whole = compact_json(arguments)
            self.blocks.open[block]["arguments"] = whole
            out.append(tool_call_delta(block, self.blocks.open[block]["id"], whole))
        return out

    def _open(self, index: int, part: str, block_type: BlockType, **fields: Any) -> tuple[int, list[Chunk]]:
        key = (index, part)
        if key in self.keys and self.keys[key] in self.blocks.open:
            return self.keys[key], []
        block, out = self.blocks.start(block_type, **fields)
        self.keys[key] = block
        return block, out

    def _append(self, block: int, fragment: str, make: Any) -> list[Chunk]:
        if not fragment or block not in self.blocks.open:
            return []
        self.blocks.open[block]["text"] += fragment
        return [make(block, fragment)]

    # ------------------------------------------------------------------ the end

    def finish(self) -> FinishChunk:
        if self.error is not None:
            return self.error
        interaction = self.interaction or {}
        status = str(interaction.get("status") or "")
        if status in ("failed", "cancelled"):
            return _error_finish(interaction.get("error"), f"the interaction ended {status}", status)
        if status == "completed" and self.blocks.tool_calls:
            return finish("tool-calls")  # an interaction that called functions may say completed too
        if status == "requires_action" and not self.blocks.tool_calls:
            return finish("stop", raw=status)  # waiting on something that is not a function call of ours
        return finish_from(STATUSES, PLAIN_STATUS, status or None)

    def end(self) -> list[Chunk]:
        if self.interaction is None and self.error is None:
            raise truncated("interaction.completed (or an error event)")
        return closing(self.blocks, self.usage, self.finish())


def translate_response(data: Any, skipped: Skipped | None = None) -> list[Chunk]:
    """A whole interaction (``steps``, or the older ``outputs``) to the chunks its stream would give."""
    if not isinstance(data, dict) or not isinstance(data.get("status"), str):
        raise ValueError("an interaction without a status")
    translator = InteractionsStreamTranslator(skipped)
    out: list[Chunk] = []
    for index, step in enumerate(json_objects(data, "steps" if data.get("steps") is not None else "outputs")):
        out += translator.start(index, step) + translator.stop(index)
    return out + translator.event({"event_type": "interaction.completed", "interaction": data}, "interaction.completed") + translator.end()


# --------------------------------------------------------------------------- requests


def convert_input(request: ModelRequest) -> list[dict[str, Any]]:
    """Kit messages to Interactions ``input`` steps, in block order; consecutive text (and images)
    of one message join one ``user_input`` or ``model_output`` step."""
    calls: dict[str, dict[str, Any]] = {str(b.get("id", "")): dict(b) for m in request["messages"] for b in m["content"] if b.get("type") == "tool-call"}
    steps: list[dict[str, Any]] = []
    for message in request["messages"]:
        if message["role"] == "system":
            continue  # sent as system_instruction
        current: dict[str, Any] | None = None  # the user_input / model_output step content joins
        container = "model_output" if message["role"] == "assistant" else "user_input"
        for typed in message["content"]:
            block: dict[str, Any] = dict(typed)
            kind, mine = block["type"], provider_data(block, NAME)
            if isinstance(mine.get("step"), dict):
                steps.append(dict(mine["step"]))  # a server-run tool step, verbatim
                current = None
            elif kind == "text" and block["text"]:
                item: dict[str, Any] = {"type": "text", "text": block["text"]}
                if mine.get("annotations"):
                    item["annotations"] = mine["annotations"]
                if current is None:
                    current = {"type": container, "content": []}
                    steps.append(current)
                current["content"].append(item)
            elif kind == "image":
                if current is None:
                    current = {"type": container, "content": []}
                    steps.append(current)
                current["content"].append(_image(block))
            elif kind == "reasoning" and mine.get("signature"):  # unsigned thoughts (another provider's) are not sent
                thought: dict[str, Any] = {"type": "thought", "signature": mine["signature"]}
                if block["text"]:
                    thought["summary"] = [{"type": "text", "text": block["text"]}]
                steps.append(thought)
                current = None
            elif kind == "tool-call":
                call: dict[str, Any] = {"type": "function_call", "id": block["id"], "name": block["name"],
                                        "arguments": parse_arguments(block["arguments"])}
                if mine.get("signature"):
                    call["signature"] = mine["signature"]
                steps.append(call)
                current = None
            elif kind == "tool-result":
                answer: dict[str, Any] = {"type": "function_result", "call_id": block["tool_call_id"],
                                          "name": str(calls.get(block["tool_call_id"], {}).get("name", "")),
                                          "result": text_of(block["content"])}
                if block.get("is_error"):
                    answer["is_error"] = True
                steps.append(answer)
                current = None
    return steps


def _image(block: Mapping[str, Any]) -> dict[str, Any]:
    url = str(block["url"])
    if url.startswith("data:") and ";base64," in url:
        mime, data = url[5:].split(";base64,", 1)
        return {"type": "image", "data": data, "mime_type": mime or block.get("mime_type", "")}
    item: dict[str, Any] = {"type": "image", "uri": url}
    if block.get("mime_type"):
        item["mime_type"] = block["mime_type"]
    return item


class GeminiInteractionsAdapter(ProviderAdapter):
    """Google Gemini's Interactions API. Key from ``GEMINI_API_KEY`` when recording (sent as
    ``x-goog-api-key``).

    ``thinking_level`` (``minimal``, ``low``, ``medium``, ``high``) asks for thoughts at that level,
    with their summaries (``thinking_summaries: auto``). ``api_revision`` is sent as the
    ``Api-Revision`` header (the documented one by default; ``None`` sends none).
    """

    name: ClassVar[str] = NAME
    path: ClassVar[str] = "/interactions"
    default_base_url: ClassVar[str] = "https://generativelanguage.googleapis.com/v1beta"
    api_key_env: ClassVar[str] = "GEMINI_API_KEY"

    def __init__(self, *, thinking_level: str | None = None, api_revision: str | None = "2026-05-20", **options: Any) -> None:
        super().__init__(**options)
        self.thinking_level = thinking_level
        self.api_revision = api_revision

    def build_body(self, request: ModelRequest) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model_name(request), "input": convert_input(request)}
        system = "\n\n".join(p for p in [request.get("system") or ""] + [text_of(m["content"]) for m in request["messages"] if m["role"] == "system"] if p)
        if system:
            body["system_instruction"] = system
        if request.get("tools"):
            body["tools"] = [{"type": "function", "name": t["name"], "description": t["description"], "parameters": t["input_schema"]}
                             for t in request["tools"]]
        config: dict[str, Any] = {}
        if self.max_tokens is not None:
            config["max_output_tokens"] = self.max_tokens
        if self.thinking_level is not None:
            config["thinking_level"] = self.thinking_level
            config["thinking_summaries"] = "auto"
        if config:
            body["generation_config"] = config
        if self.streaming:
            body["stream"] = True
        return body

    def auth_headers(self) -> dict[str, str]:
        headers = {"x-goog-api-key": self.api_key} if self.api_key else {}
        if self.api_revision:
            headers["api-revision"] = self.api_revision
        return headers

    def translator(self) -> InteractionsStreamTranslator:
        return InteractionsStreamTranslator()

    def translate_response(self, data: Any, skipped: Skipped) -> list[Chunk]:
        return translate_response(data, skipped)
