"""Counting what a recorded response *said*, read straight from its payloads, not through an adapter.

``loopkit cassette show`` compares this count with the characters of the replayed chunk stream, so
a translator that drops text, reasoning or a refusal shows up at once. It is deliberately a second,
much smaller reading of each wire format: the visible fields only (text, reasoning, refusal),
summed per payload, with none of the adapters' block bookkeeping.
"""

from __future__ import annotations

import base64
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
                except ValueError:  # binascii.Error, or a str that is not ASCII
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
    except (ValueError, RecursionError):  # not JSON, or nested past the parser's limit
        return None


# The payloads are untrusted JSON: a field of the wrong type counts nothing here rather than
# raising, so the adapter's replay is the one that reports it (naming the interaction and event).


def _obj(value: Any) -> dict[str, Any]:
    """``value`` if it is a JSON object, else an empty one."""
    return value if isinstance(value, dict) else {}


def _objs(value: Any) -> list[dict[str, Any]]:
    """The JSON objects in ``value`` if it is a list (anything else holds none)."""
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def _first(value: Any) -> dict[str, Any]:
    """The first item of the list ``value`` if it is a JSON object, else an empty one."""
    return _obj(value[0]) if isinstance(value, list) and value else {}


def _str(value: Any) -> int:
    return len(value) if isinstance(value, str) else 0


def _chat(payload: Any) -> int:
    total = 0
    for choice in _objs(_obj(payload).get("choices")):
        if choice.get("index", 0) != 0:
            continue
        part = _obj(choice.get("delta") or choice.get("message"))
        content = part.get("content") or choice.get("text")  # Together also copies the text into the choice
        if isinstance(content, list):  # Mistral: text and thinking parts
            total += sum(_mistral_part(item) for item in _objs(content))
        else:
            total += _str(content)
        total += _str(_chat_thought(part)) + _str(part.get("refusal"))
    return total


def _mistral_part(item: dict[str, Any]) -> int:
    """A Mistral content part: its text, and its thinking (a string or a list of text parts)."""
    inner = item.get("thinking")
    thinking = sum(_str(t.get("text")) for t in _objs(inner)) if isinstance(inner, list) else _str(inner)
    return _str(item.get("text")) + thinking


def _chat_thought(part: dict[str, Any]) -> Any:
    """A chat delta's or message's reasoning: its own field, else OpenRouter's readable details."""
    thought = part.get("reasoning_content") or part.get("reasoning")
    if thought:
        return thought
    details = [d for d in _objs(part.get("reasoning_details")) if d.get("type") != "reasoning.encrypted"]
    return "".join(str(d.get("text") or d.get("summary") or "") for d in details)


def _anthropic(payload: Any) -> int:
    payload = _obj(payload)
    kind = payload.get("type")
    if kind == "message":  # a whole message
        return sum(_str(b.get("text")) + _str(b.get("thinking")) for b in _objs(payload.get("content")))
    if kind == "content_block_start":
        block = _obj(payload.get("content_block"))
        return _str(block.get("text")) + _str(block.get("thinking")) if block.get("type") in ("text", "thinking") else 0
    if kind == "content_block_delta":
        delta = _obj(payload.get("delta"))
        return _str(delta.get("text")) + _str(delta.get("thinking"))
    return 0


_RESPONSES_DELTAS = ("response.output_text.delta", "response.refusal.delta", "response.reasoning_summary_text.delta", "response.reasoning_text.delta")


def _responses(payload: Any) -> int:
    payload = _obj(payload)
    if payload.get("type") in _RESPONSES_DELTAS:
        return _str(payload.get("delta"))
    if payload.get("object") == "response":  # a whole response
        total = 0
        for item in _objs(payload.get("output")):
            total += sum(_str(part.get("text")) + _str(part.get("refusal")) for part in _objs(item.get("content")))
            total += sum(_str(s.get("text")) for s in _objs(item.get("summary")))
        return total
    return 0


def _gemini(payload: Any) -> int:
    items = payload if isinstance(payload, list) else [payload]
    total = 0
    for item in _objs(items):
        candidate = _first(item.get("candidates"))
        total += sum(_str(p.get("text")) for p in _objs(_obj(candidate.get("content")).get("parts")))
    return total


def _bedrock(payload: Any) -> int:
    payload = _obj(payload)
    if "output" in payload:  # a whole Converse response
        total = 0
        for block in _objs(_obj(_obj(payload.get("output")).get("message")).get("content")):
            total += _str(block.get("text"))
            total += _str(_obj(_obj(block.get("reasoningContent")).get("reasoningText")).get("text"))
            total += sum(_str(p.get("text")) for p in _objs(_obj(block.get("citationsContent")).get("content")))
        return total
    delta = _obj(payload.get("delta"))
    return _str(delta.get("text")) + _str(_obj(delta.get("reasoningContent")).get("text"))


def _interactions_item(item: Any) -> int:
    """One step or content item of the Interactions API: text, a thought's summary, model output.
    The items inside a thought or an output are text (one level: a payload cannot recurse here)."""
    item = _obj(item)
    kind = item.get("type")
    if kind == "text":
        return _str(item.get("text"))
    inner = item.get("summary") if kind == "thought" else item.get("content") if kind == "model_output" else None
    return sum(_str(i.get("text")) for i in _objs(inner) if i.get("type") == "text")


def _interactions(payload: Any) -> int:
    payload = _obj(payload)
    kind = payload.get("event_type")
    if kind in ("step.delta", "content.delta"):
        delta = _obj(payload.get("delta"))
        if delta.get("type") == "thought_summary":
            return _interactions_item(delta.get("content"))
        return _interactions_item(delta)
    if kind in ("step.start", "content.start"):
        return _interactions_item(payload.get("step") or payload.get("content"))
    if kind is None and isinstance(payload.get("status"), str):  # a whole interaction (its input echo is not the model's)
        steps = payload.get("steps") or payload.get("outputs")
        return sum(_interactions_item(s) for s in _objs(steps))
    return 0


_COUNTERS = {"openai-chat": _chat, "anthropic": _anthropic, "openai-responses": _responses, "gemini": _gemini, "bedrock": _bedrock,
             "gemini-interactions": _interactions}
