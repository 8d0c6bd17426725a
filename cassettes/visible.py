"""Counting what a recorded response *said*, read straight from its payloads, not through an adapter.

``loopkit cassette show`` compares this count with the characters of the replayed chunk stream, so
a translator that drops text, reasoning or a refusal shows up at once. It is deliberately a second,
much smaller reading of each wire format: the visible fields only (text, reasoning, refusal),
summed per payload, with none of the adapters' block bookkeeping.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterator
from typing import Any

from reference_loop.vocabulary import Chunk

from .eventstream import split_frames
from .llm_cassette import Interaction
from .sse import parse_block, split_events


def stream_chars(chunks: list[Chunk]) -> int:
    """Visible characters of a chunk stream: every text and reasoning delta."""
    return sum(len(str(c.get("text", ""))) for c in chunks if c.get("type") in ("text-delta", "reasoning-delta"))


def recorded_chars(api: str, interaction: Interaction) -> int | None:
    """Visible characters of one recorded answer (``None``: an error answer or an unknown API)."""
    if interaction.status >= 400 or api not in _COUNTERS:
        return None
    count = _COUNTERS[api]
    return sum(count(payload) for payload in _payloads(interaction))


def _payloads(interaction: Interaction) -> Iterator[Any]:
    if interaction.is_eventstream:
        frames, _ = split_frames(interaction.body_bytes)
        for frame in frames:
            # A frame: prelude (12 bytes), headers, payload, CRC (4). The event name is in the
            # headers; each Bedrock payload names its own fields, which is all the count needs.
            headers_length = int.from_bytes(frame[4:8], "big")
            payload = _json(frame[12 + headers_length : -4].decode("utf-8", "replace"))
            if isinstance(payload, dict) and isinstance(payload.get("bytes"), str):
                # InvokeModelWithResponseStream: the vendor's own event, base64 in ``bytes``
                try:
                    payload = _json(base64.b64decode(payload["bytes"]).decode("utf-8", "replace"))
                except binascii.Error:
                    payload = None
            yield payload
        return
    if interaction.is_sse:
        raw, rest = split_events(interaction.body)
        for text in [*raw, rest]:
            event = parse_block(text.strip("\n"))
            if event is not None and event.data.strip() and event.data.strip() != "[DONE]":
                yield _json(event.data)
        return
    yield _json(interaction.body)


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


def _str(value: Any) -> int:
    return len(value) if isinstance(value, str) else 0


def _chat(payload: Any) -> int:
    if not isinstance(payload, dict):
        return 0
    total = 0
    for choice in payload.get("choices") or []:
        if not isinstance(choice, dict) or choice.get("index", 0) != 0:
            continue
        part = choice.get("delta") or choice.get("message") or {}
        content = part.get("content") or choice.get("text")  # Together also copies the text into the choice
        if isinstance(content, list):  # Mistral: text and thinking parts
            for item in content:
                if isinstance(item, dict):
                    total += _str(item.get("text"))
                    inner = item.get("thinking")
                    total += sum(_str(t.get("text")) for t in inner if isinstance(t, dict)) if isinstance(inner, list) else _str(inner)
        else:
            total += _str(content)
        thought = part.get("reasoning_content") or part.get("reasoning")
        if not thought and isinstance(part.get("reasoning_details"), list):
            thought = "".join(str(d.get("text") or d.get("summary") or "") for d in part["reasoning_details"] if isinstance(d, dict) and d.get("type") != "reasoning.encrypted")
        total += _str(thought) + _str(part.get("refusal"))
    return total


def _anthropic(payload: Any) -> int:
    if not isinstance(payload, dict):
        return 0
    if payload.get("type") == "message":  # a whole message
        return sum(_str(b.get("text")) + _str(b.get("thinking")) for b in payload.get("content") or [] if isinstance(b, dict))
    if payload.get("type") == "content_block_start":
        block = payload.get("content_block") or {}
        return _str(block.get("text")) + _str(block.get("thinking")) if block.get("type") in ("text", "thinking") else 0
    if payload.get("type") == "content_block_delta":
        delta = payload.get("delta") or {}
        return _str(delta.get("text")) + _str(delta.get("thinking"))
    return 0


_RESPONSES_DELTAS = ("response.output_text.delta", "response.refusal.delta", "response.reasoning_summary_text.delta", "response.reasoning_text.delta")


def _responses(payload: Any) -> int:
    if not isinstance(payload, dict):
        return 0
    if payload.get("type") in _RESPONSES_DELTAS:
        return _str(payload.get("delta"))
    if payload.get("object") == "response":  # a whole response
        total = 0
        for item in payload.get("output") or []:
            for part in item.get("content") or []:
                total += _str(part.get("text")) + _str(part.get("refusal"))
            total += sum(_str(s.get("text")) for s in item.get("summary") or [])
        return total
    return 0


def _gemini(payload: Any) -> int:
    items = payload if isinstance(payload, list) else [payload]
    total = 0
    for item in items:
        if not isinstance(item, dict):
            continue
        for candidate in (item.get("candidates") or [])[:1]:
            total += sum(_str(p.get("text")) for p in (candidate.get("content") or {}).get("parts") or [] if isinstance(p, dict))
    return total


def _bedrock(payload: Any) -> int:
    if not isinstance(payload, dict):
        return 0
    if "output" in payload:  # a whole Converse response
        total = 0
        for block in ((payload.get("output") or {}).get("message") or {}).get("content") or []:
            total += _str(block.get("text"))
            total += _str(((block.get("reasoningContent") or {}).get("reasoningText") or {}).get("text"))
            total += sum(_str(p.get("text")) for p in (block.get("citationsContent") or {}).get("content") or [])
        return total
    delta: dict[str, Any] = payload["delta"] if isinstance(payload.get("delta"), dict) else {}
    return _str(delta.get("text")) + _str((delta.get("reasoningContent") or {}).get("text"))


def _interactions_item(item: Any) -> int:
    """One step or content item of the Interactions API: text, a thought's summary, model output."""
    if not isinstance(item, dict):
        return 0
    kind = item.get("type")
    if kind == "text":
        return _str(item.get("text"))
    if kind == "thought":
        return sum(_interactions_item(s) for s in item.get("summary") or [])
    if kind == "model_output":
        return sum(_interactions_item(c) for c in item.get("content") or [])
    return 0


def _interactions(payload: Any) -> int:
    if not isinstance(payload, dict):
        return 0
    kind = payload.get("event_type")
    if kind in ("step.delta", "content.delta"):
        delta = payload.get("delta") or {}
        if delta.get("type") == "thought_summary":
            return _interactions_item(delta.get("content"))
        return _interactions_item(delta)
    if kind in ("step.start", "content.start"):
        return _interactions_item(payload.get("step") or payload.get("content"))
    if kind is None and isinstance(payload.get("status"), str):  # a whole interaction (its input echo is not the model's)
        return sum(_interactions_item(s) for s in payload.get("steps") or payload.get("outputs") or [])
    return 0


_COUNTERS = {"openai-chat": _chat, "anthropic": _anthropic, "openai-responses": _responses, "gemini": _gemini, "bedrock": _bedrock,
             "gemini-interactions": _interactions}
