"""Every external cassette (real provider traffic recorded by other projects) replays correctly.

The expectations here are computed from the recorded bytes independently of the adapters: the
finish reason from the provider's own stop field, tool-call arguments by concatenating the raw
fragments (or reading the provider's final copy), the text and reasoning by joining the recorded
fragments, the error code from the error body. Bedrock's binary frames are decoded here with
botocore directly. Then ``cassette show``'s report must say the same: no visible character lost,
usage where recorded, a vocabulary finish kind, nothing skipped.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from botocore.eventstream import EventStreamBuffer

from cassettes.llm_cassette import Cassette, Interaction
from cassettes.providers import FINISH_VOCABULARY, adapter_for_url
from cassettes.replay import ReplayResult, replay_interaction
from cassettes.sse import split_events
from cassettes.wellformed import stream_problems

from .conftest import EXTERNAL, external_files

pytestmark = pytest.mark.skipif(not EXTERNAL.is_dir(), reason="../shared/cassettes-external is absent")

# Kept separate from the adapters' own tables on purpose: a wrong mapping there must fail here.
EXPECTED_KIND = {
    "stop": "stop", "end_turn": "stop", "stop_sequence": "stop", "STOP": "stop", "eos": "stop", "eos_token": "stop",
    "tool_calls": "tool-calls", "function_call": "tool-calls", "tool_use": "tool-calls",
    "length": "max-tokens", "max_tokens": "max-tokens", "MAX_TOKENS": "max-tokens", "model_length": "max-tokens",
    "model_context_window_exceeded": "max-tokens",
    "content_filter": "content-filter", "sensitive": "content-filter", "guardrail_intervened": "content-filter",
    "content_filtered": "content-filter", "SAFETY": "content-filter", "RECITATION": "content-filter", "BLOCKLIST": "content-filter",
    "PROHIBITED_CONTENT": "content-filter", "SPII": "content-filter", "LANGUAGE": "content-filter", "IMAGE_SAFETY": "content-filter",
    "refusal": "refusal", "error": "error", "MALFORMED_FUNCTION_CALL": "error", "malformed_tool_use": "error",
    "malformed_model_output": "error",
}
# The providers' own words for their kind: every other string is kept as ``raw``.
PLAIN = frozenset({"stop", "end_turn", "stop_sequence", "STOP", "tool_calls", "function_call", "tool_use", "length", "max_tokens",
                   "MAX_TOKENS", "refusal"})


def finish_of(raw: str) -> dict[str, str | None]:
    """The finish a provider's string must give: its kind, and ``raw`` unless it is plain."""
    return {"kind": EXPECTED_KIND.get(raw, "stop"), "raw": None if raw in PLAIN else raw}


def _frames(interaction: Interaction) -> list[dict[str, Any]]:
    """Bedrock's event-stream frames as ``{"event": name, **payload}``."""
    buffer = EventStreamBuffer()
    buffer.add_data(interaction.body_bytes)
    return [{"event": m.headers[":event-type"], **json.loads(m.payload)} for m in buffer]


def _gemini_expected(responses: list[dict[str, Any]]) -> tuple[str, list[Any], bool, str, str]:
    finish, calls, usage, text, thought = "", [], False, "", ""
    for response in responses:
        usage = usage or "usageMetadata" in response
        for candidate in response.get("candidates", [])[:1]:
            for part in candidate.get("content", {}).get("parts", []):
                if "functionCall" in part:
                    calls.append(part["functionCall"].get("args", {}))
                elif part.get("thought"):
                    thought += part.get("text", "")
                else:
                    text += part.get("text", "")
            finish = candidate.get("finishReason") or finish
    kind = finish_of(finish)
    return (finish_of("tool_calls") if calls and finish == "STOP" else kind), calls, usage, text, thought


def _bedrock_expected(interaction: Interaction) -> tuple[str, list[Any], bool, str, str]:
    if not interaction.is_eventstream:
        data = json.loads(interaction.body)
        content = data["output"]["message"]["content"]
        calls = [b["toolUse"]["input"] for b in content if "toolUse" in b]
        text = "".join(b.get("text", "") for b in content)
        thought = "".join(b.get("reasoningContent", {}).get("reasoningText", {}).get("text", "") for b in content)
        return finish_of(data["stopReason"]), calls, "usage" in data, text, thought
    inputs: dict[int, str] = {}
    stop, usage, text, thought = "", False, "", ""
    for frame in _frames(interaction):
        if frame["event"] == "contentBlockStart" and "toolUse" in frame["start"]:
            inputs[frame["contentBlockIndex"]] = ""
        elif frame["event"] == "contentBlockDelta":
            delta = frame["delta"]
            text += delta.get("text", "")
            thought += delta.get("reasoningContent", {}).get("text", "")
            if "toolUse" in delta:
                inputs[frame["contentBlockIndex"]] += delta["toolUse"]["input"]
        elif frame["event"] == "messageStop":
            stop = frame["stopReason"]
        elif frame["event"] == "metadata":
            usage = "usage" in frame
    return finish_of(stop), [json.loads(inputs[k] or "{}") for k in sorted(inputs)], usage, text, thought


def _events(interaction: Interaction) -> list[dict[str, Any]]:
    raw, _ = split_events(interaction.body)
    out = []
    for text in raw:
        data = "\n".join(line[5:].strip() for line in text.splitlines() if line.startswith("data:"))
        if data and data != "[DONE]":
            out.append(json.loads(data))
    return out


def expected(interaction: Interaction) -> tuple[str, list[Any], bool]:
    """(finish kind, parsed tool-call arguments in order, whether usage was reported)."""
    path = interaction.uri.split("?")[0]
    if "/model/" in path:
        return _bedrock_expected(interaction)[:3]
    if ":generateContent" in path or ":streamGenerateContent" in path:
        responses = _events(interaction) if interaction.is_sse else [json.loads(interaction.body)]
        return _gemini_expected(responses)[:3]
    if not interaction.is_sse:
        data = json.loads(interaction.body)
        if path.endswith("/chat/completions"):
            message = data["choices"][0]["message"]
            calls = [json.loads(c["function"]["arguments"]) for c in message.get("tool_calls") or []]
            finish = data["choices"][0]["finish_reason"]
            refused = bool(message.get("refusal")) and finish == "stop"
            return (finish_of("refusal") if refused else finish_of(finish)), calls, "usage" in data
        if path.endswith("/messages"):
            calls = [b["input"] for b in data["content"] if b["type"] == "tool_use"]
            return finish_of(data["stop_reason"]), calls, "usage" in data
        raise AssertionError(f"no expectation for {path}")
    events = _events(interaction)
    if path.endswith("/chat/completions"):
        fragments: dict[int, str] = {}
        finish, usage, refused = "", False, False
        for ev in events:
            usage = usage or bool(ev.get("usage")) or bool((ev.get("x_groq") or {}).get("usage"))
            for choice in ev.get("choices") or []:
                for call in choice.get("delta", {}).get("tool_calls") or []:
                    fragments[call["index"]] = fragments.get(call["index"], "") + (call.get("function", {}).get("arguments") or "")
                refused = refused or bool(choice.get("delta", {}).get("refusal"))
                finish = choice.get("finish_reason") or finish
        refusal = refused and finish == "stop"  # a refusal is not an empty stop
        return (finish_of("refusal") if refusal else finish_of(finish)), [json.loads(fragments[k]) for k in sorted(fragments)], usage
    if path.endswith("/messages"):
        parts: dict[int, str] = {}
        stop = ""
        for ev in events:
            if ev["type"] == "content_block_start" and ev["content_block"]["type"] == "tool_use":
                parts[ev["index"]] = ""
            if ev["type"] == "content_block_delta" and ev["delta"]["type"] == "input_json_delta":
                parts[ev["index"]] += ev["delta"]["partial_json"]
            if ev["type"] == "message_delta":
                stop = ev["delta"]["stop_reason"]
        return finish_of(stop), [json.loads(parts[k] or "{}") for k in sorted(parts)], True
    terminal = events[-1]
    items = [ev["item"] for ev in events if ev["type"] == "response.output_item.done"]
    calls = [json.loads(i["arguments"]) for i in items if i["type"] == "function_call"]
    if terminal["type"] == "response.incomplete":
        reason = terminal["response"]["incomplete_details"]["reason"]
        return (finish_of("length") if reason == "max_output_tokens" else finish_of(reason)), calls, True
    assert terminal["type"] == "response.completed"
    return finish_of("tool_calls" if calls else "stop"), calls, True


def expected_text(interaction: Interaction) -> tuple[str, str]:
    """(visible text, reasoning text) of a response, read straight from the recorded payloads."""
    path = interaction.uri.split("?")[0]
    if "/model/" in path:
        return _bedrock_expected(interaction)[3:]
    if ":generateContent" in path or ":streamGenerateContent" in path:
        responses = _events(interaction) if interaction.is_sse else [json.loads(interaction.body)]
        return _gemini_expected(responses)[3:]
    if not interaction.is_sse:
        data = json.loads(interaction.body)
        if path.endswith("/chat/completions"):
            return _chat_parts(data["choices"][0]["message"])
        text = "".join(b["text"] for b in data["content"] if b["type"] == "text")
        return text, "".join(b["thinking"] for b in data["content"] if b["type"] == "thinking")
    text, thought = "", ""
    for ev in _events(interaction):
        if path.endswith("/chat/completions"):
            for choice in ev.get("choices") or []:
                if choice.get("index", 0) == 0:
                    more_text, more_thought = _chat_parts(choice.get("delta") or {})
                    text, thought = text + more_text, thought + more_thought
        elif path.endswith("/messages"):
            if ev["type"] == "content_block_delta":
                text += ev["delta"].get("text", "")
                thought += ev["delta"].get("thinking", "")
        elif ev["type"] in ("response.output_text.delta", "response.refusal.delta"):
            text += ev["delta"]
        elif ev["type"] in ("response.reasoning_summary_text.delta", "response.reasoning_text.delta"):
            thought += ev["delta"]
    return text, thought


def _chat_parts(part: dict[str, Any]) -> tuple[str, str]:
    """(text, reasoning) of one chat delta or message: string or Mistral list content, refusal,
    ``reasoning_content`` or ``reasoning``."""
    content, text, thought = part.get("content"), "", ""
    if isinstance(content, list):
        for item in content:
            if item.get("type") == "text":
                text += item.get("text", "")
            elif item.get("type") == "thinking":
                thought += "".join(t.get("text", "") for t in item.get("thinking") or [])
    else:
        text += content or ""
    text += part.get("refusal") or ""
    thought += part.get("reasoning_content") or part.get("reasoning") or ""
    return text, thought


def _replay_all(path: Path) -> tuple[Cassette, list[ReplayResult]]:
    cassette = Cassette.load(path)

    async def run() -> list[ReplayResult]:
        return [await replay_interaction(cassette, n) for n in range(len(cassette.interactions))]

    return cassette, asyncio.run(run())


@pytest.mark.parametrize("path", external_files(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_external_cassette_replays_to_a_well_formed_stream(path: Path) -> None:
    cassette, results = _replay_all(path)
    assert results, "no interactions"
    for interaction, result in zip(cassette.interactions, results, strict=True):
        assert result.adapter, f"no adapter for {interaction.uri}"
        if interaction.status >= 400:
            body = json.loads(interaction.body)
            assert result.chunks == []
            assert result.error_status == interaction.status
            if isinstance(body.get("error"), dict):
                err = body["error"]
                code = err.get("status") if isinstance(err.get("code"), int) else err.get("code") or err.get("type")
            else:  # AWS: {"message"} and the type in a header
                code = interaction.header("x-amzn-errortype").split(":", 1)[0]
            assert result.error_code == code
            assert str(interaction.status) in (result.error or "")
            continue
        assert result.error is None
        assert stream_problems(result.chunks) == []
        kind, calls, has_usage = expected(interaction)
        reason = dict(result.chunks[-1])["reason"]
        assert reason["kind"] == kind["kind"] and reason.get("raw") == kind["raw"]
        blocks = [c["block"] for c in result.chunks if c["type"] == "block-end"]
        assert [json.loads(b["arguments"]) for b in blocks if b["type"] == "tool-call"] == calls
        text, thought = expected_text(interaction)
        assert "".join(b["text"] for b in blocks if b["type"] == "text") == text
        assert "".join(b["text"] for b in blocks if b["type"] == "reasoning") == thought
        usage = [n for n, c in enumerate(result.chunks) if c["type"] == "usage"]
        assert bool(usage) == has_usage
        if usage:
            assert usage[-1] < len(result.chunks) - 1


@pytest.mark.parametrize("path", external_files(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_the_show_report_says_nothing_was_lost(path: Path) -> None:
    """Point 5 of issue 14, per file: visible characters recorded == streamed, usage surfaced
    where recorded, only vocabulary finish kinds, no event or field skipped."""
    cassette, results = _replay_all(path)
    for interaction, result in zip(cassette.interactions, results, strict=True):
        report = result.report()
        assert report["warnings"] == []
        if interaction.status >= 400:
            assert report["recorded_chars"] is None and report["finish"] is None
            continue
        text, thought = expected_text(interaction)
        assert report["recorded_chars"] == report["stream_chars"] == len(text) + len(thought)
        assert (report["usage"] is not None) == expected(interaction)[2]
        assert report["finish"]["kind"] in FINISH_VOCABULARY


def test_every_external_cassette_is_supported() -> None:
    """No file is left out: each one has an adapter and loads (the list of unsupported is empty)."""
    files = external_files()
    assert len(files) >= 30
    unsupported = []
    for path in files:
        cassette = Cassette.load(path)
        if any(adapter_for_url(i.uri) is None for i in cassette.interactions):
            unsupported.append(path.name)
    assert unsupported == []
    names = {adapter_for_url(i.uri).name for p in files for i in Cassette.load(p).interactions}  # type: ignore[union-attr]
    assert names == {"openai-chat", "anthropic", "openai-responses", "gemini", "bedrock"}
