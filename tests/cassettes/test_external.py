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
import base64
import json
import re
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from botocore.eventstream import EventStreamBuffer

from cassettes.errors import CassetteError
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


def finish_of(raw: str) -> dict[str, Any]:
    """The finish a provider's string must give: its kind, and ``raw`` unless it is plain (or
    there was none)."""
    return {"kind": EXPECTED_KIND.get(raw, "stop"), "raw": None if raw in PLAIN or not raw else raw}


def _frames(interaction: Interaction) -> list[dict[str, Any]]:
    """Bedrock's event-stream frames as ``{"event": name, **payload}``."""
    buffer = EventStreamBuffer()
    buffer.add_data(interaction.body_bytes)
    return [{"event": m.headers.get(":event-type"), **json.loads(m.payload)} for m in buffer]


# Gemini's finish enum by number (Vertex AI's `$alt=json;enum-encoding=int` wire form).
GEMINI_NUMBERS = ["FINISH_REASON_UNSPECIFIED", "STOP", "MAX_TOKENS", "SAFETY", "RECITATION", "OTHER", "BLOCKLIST",
                  "PROHIBITED_CONTENT", "SPII", "MALFORMED_FUNCTION_CALL"]


def _gemini_expected(responses: list[dict[str, Any]], whole: bool = False) -> tuple[Any, list[Any], bool, str, str]:
    finish, calls, usage, text, thought, blocked = "", [], False, "", "", ""
    for response in responses:
        usage = usage or any(k.endswith("TokenCount") for k in response.get("usageMetadata") or {})
        blocked = (response.get("promptFeedback") or {}).get("blockReason") or blocked
        for candidate in response.get("candidates", [])[:1]:
            for part in candidate.get("content", {}).get("parts", []):
                if "functionCall" in part:
                    calls.append(_args(part["functionCall"].get("args", {})))
                elif part.get("thought"):
                    thought += part.get("text", "")
                else:
                    text += part.get("text", "")
            raw = candidate.get("finishReason")
            finish = (GEMINI_NUMBERS[raw] if isinstance(raw, int) and raw < len(GEMINI_NUMBERS) else raw) or finish
    if not finish and blocked:
        return {"kind": "content-filter", "raw": blocked}, calls, usage, text, thought
    if whole and not finish:
        finish = "STOP"  # a whole body is complete: a candidate without a finishReason simply ended
    kind = finish_of(finish)
    return (finish_of("tool_calls") if calls and finish == "STOP" else kind), calls, usage, text, thought


def _bedrock_expected(interaction: Interaction) -> tuple[Any, list[Any], bool, str, str]:
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
    return finish_of(stop), [_args(inputs[k]) for k in sorted(inputs)], usage, text, thought


def _events(interaction: Interaction) -> list[dict[str, Any]]:
    """The JSON events of a stream: SSE ``data:`` lines, or (Anthropic on Bedrock's InvokeModel)
    event-stream frames each carrying one base64 event."""
    if interaction.is_eventstream:
        return [json.loads(base64.b64decode(f["bytes"])) for f in _frames(interaction) if f["event"] == "chunk"]
    raw, _ = split_events(interaction.body)
    out = []
    for text in raw:
        data = "\n".join(line[5:].strip() for line in text.splitlines() if line.startswith("data:"))
        if data and data != "[DONE]":
            out.append(json.loads(data))
    return out


def _args(raw: Any) -> Any:
    """Tool-call arguments compared by value: JSON text parsed, anything else as it is (TOOL-2:
    a string that is not JSON, such as a custom tool's free-form input, is passed through)."""
    if not isinstance(raw, str):
        return raw
    try:
        return json.loads(raw or "{}")
    except ValueError:
        return raw


def _gemini_responses(interaction: Interaction) -> list[dict[str, Any]]:
    if interaction.is_sse:
        return _events(interaction)
    data = json.loads(interaction.body)  # streamGenerateContent without alt=sse: one JSON array
    return data if isinstance(data, list) else [data]


def _responses_expected(events: list[dict[str, Any]] | None, data: dict[str, Any] | None) -> tuple[Any, list[Any], bool, str, str]:
    """OpenAI Responses: a stream's events, or a whole response object."""
    if data is None:
        assert events is not None
        terminal = events[-1]
        response = terminal.get("response") or {}
        items = [ev["item"] for ev in events if ev["type"] == "response.output_item.done"]
        text = "".join(ev["delta"] for ev in events if ev["type"] in ("response.output_text.delta", "response.refusal.delta"))
        thought = "".join(ev["delta"] for ev in events
                          if ev["type"] in ("response.reasoning_summary_text.delta", "response.reasoning_text.delta"))
        status = {"response.incomplete": "incomplete", "response.failed": "failed"}.get(terminal["type"], "completed")
        refused = any(ev["type"] == "response.refusal.delta" for ev in events)
        usage = bool(response.get("usage"))
    else:
        response, items, status = data, data.get("output") or [], data.get("status") or "completed"
        parts = [p for i in items if i.get("type") == "message" for p in i.get("content") or []]
        text = "".join(p.get("text", "") if p.get("type") == "output_text" else p.get("refusal", "") for p in parts)
        refused = any(p.get("type") == "refusal" for p in parts)
        thought = "".join(p.get("text", "") for i in items if i.get("type") == "reasoning"
                          for p in [*(i.get("summary") or []), *(i.get("content") or [])])
        usage = bool(data.get("usage"))
    calls = [_args(i.get("arguments", i.get("input"))) for i in items if i.get("type") in ("function_call", "custom_tool_call")]
    if status == "incomplete":
        reason = (response.get("incomplete_details") or {}).get("reason")
        kind = finish_of("length") if reason == "max_output_tokens" else finish_of(reason or "incomplete")
    elif status == "failed":
        kind = {"kind": "error", "raw": None}
    elif refused and not calls:
        kind = finish_of("refusal")
    else:
        kind = finish_of("tool_calls" if calls else "stop")
    return kind, calls, usage, text, thought


def _messages_expected(interaction: Interaction) -> tuple[Any, list[Any], bool, str, str]:
    """Anthropic Messages (also on Vertex and on Bedrock's InvokeModel): events or a whole message."""
    if not interaction.is_stream:
        data = json.loads(interaction.body)
        calls = [b["input"] for b in data["content"] if b["type"] == "tool_use"]
        text = "".join(b["text"] for b in data["content"] if b["type"] == "text")
        thought = "".join(b["thinking"] for b in data["content"] if b["type"] == "thinking")
        return finish_of(data["stop_reason"]), calls, "usage" in data, text, thought
    parts: dict[int, str] = {}
    stop, text, thought = "", "", ""
    for ev in _events(interaction):
        if ev["type"] == "content_block_start" and ev["content_block"]["type"] == "tool_use":
            parts[ev["index"]] = ""
        if ev["type"] == "content_block_delta":
            if ev["delta"]["type"] == "input_json_delta" and ev["index"] in parts:  # a server tool's input is no call of ours
                parts[ev["index"]] += ev["delta"]["partial_json"]
            text += ev["delta"].get("text", "")
            thought += ev["delta"].get("thinking", "")
        if ev["type"] == "message_delta":
            stop = ev["delta"]["stop_reason"]
    return finish_of(stop), [_args(parts[k]) for k in sorted(parts)], True, text, thought


def _chat_expected(interaction: Interaction) -> tuple[Any, list[Any], bool, str, str]:
    """OpenAI chat completions (and compatible hosts): chunks or a whole completion."""
    if not interaction.is_sse:
        data = json.loads(interaction.body)
        message = data["choices"][0]["message"]
        legacy = [{"function": message["function_call"]}] if isinstance(message.get("function_call"), dict) else []
        calls = [_args(_call_fragment(c)) for c in (message.get("tool_calls") or []) + legacy]
        finish = data["choices"][0]["finish_reason"]
        refused = bool(message.get("refusal")) and finish == "stop"
        text, thought = _chat_parts(message)
        return (finish_of("refusal") if refused else finish_of(finish)), calls, "usage" in data, text, thought
    fragments: dict[Any, str] = {}
    finish, usage, refused, text, thought, failed = "", False, False, "", "", False
    for ev in _events(interaction):
        usage = usage or bool(ev.get("usage")) or bool((ev.get("x_groq") or {}).get("usage"))
        failed = failed or isinstance(ev.get("error"), dict)  # an error object inside a chunk ends the stream failed
        for choice in ev.get("choices") or []:
            delta = choice.get("delta") or {}
            legacy = [{"index": "function_call", "function": delta["function_call"]}] if isinstance(delta.get("function_call"), dict) else []
            for position, call in enumerate((delta.get("tool_calls") or []) + legacy):
                key = call.get("index", position)
                fragments[key] = fragments.get(key, "") + (_call_fragment(call) or "")
            refused = refused or bool(delta.get("refusal"))
            finish = choice.get("finish_reason") or finish
            if choice.get("index", 0) == 0:
                more_text, more_thought = _chat_parts(delta)
                text, thought = text + more_text, thought + more_thought
    refusal = refused and finish == "stop"  # a refusal is not an empty stop
    kind = finish_of("refusal") if refusal else finish_of("tool_calls") if fragments and not finish else finish_of(finish)
    if failed:
        kind = {"kind": "error", "raw": None}
    return kind, [_args(fragments[k]) for k in sorted(fragments, key=lambda k: (isinstance(k, str), k if isinstance(k, int) else 0))], usage, text, thought


def _call_fragment(call: dict[str, Any]) -> Any:
    """A chat tool call's arguments text: a function's, or a custom tool's free-form input."""
    if isinstance(call.get("custom"), dict):
        return call["custom"].get("input")
    return (call.get("function") or {}).get("arguments")


def expected(interaction: Interaction) -> tuple[Any, list[Any], bool, str, str]:
    """(finish, tool-call arguments, usage reported, visible text, reasoning text), read from the
    recorded payloads by the API the request went to."""
    cls = adapter_for_url(interaction.uri, interaction.request_json)
    name = cls.name if cls else ""
    if name == "bedrock":
        return _bedrock_expected(interaction)
    if name == "gemini":
        return _gemini_expected(_gemini_responses(interaction), whole=not interaction.is_sse)
    if name == "anthropic":
        return _messages_expected(interaction)
    if name == "openai-chat":
        return _chat_expected(interaction)
    if name == "openai-responses":
        if interaction.is_sse:
            return _responses_expected(_events(interaction), None)
        return _responses_expected(None, json.loads(interaction.body))
    raise AssertionError(f"no expectation for {interaction.uri} ({name or 'no adapter'})")


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


# Calls a recording may hold beside its model calls, named by their endpoints: token counting,
# context compaction, model lists, embeddings, files, a client library's telemetry upload, a
# connection warm-up, an OAuth token.
NOT_GENERATION = re.compile(r"count_tokens|count-tokens|:countTokens|/input_tokens$|/responses/compact$|/models/?$|/embeddings|"
                            r"/files\b|/batches|tcp_warming|/moderations|^/token$")
# APIs the kit does not speak, on purpose: Bedrock's InvokeModel of another vendor's model (each
# vendor's own format; Anthropic's is spoken), and Anthropic's legacy Text Completions.
INVOKE = re.compile(r"/model/[^/]+/invoke(-with-response-stream)?$")


def unspoken(interaction: Interaction) -> str | None:
    """What the kit must say of a generation call in an API it does not speak (``None``: it speaks it)."""
    if adapter_for_url(interaction.uri, interaction.request_json) is None and INVOKE.search(urlsplit(interaction.uri).path):
        return ""  # no adapter: `show` lists it as no adapter's
    request = interaction.request_json or {}
    if "prompt" in request and "messages" not in request and INVOKE.search(urlsplit(interaction.uri).path):
        return "legacy Text Completions"
    return None


def model_call(interaction: Interaction) -> bool:
    """Whether an interaction is a generation call (a POST to no endpoint above); a GET (a
    background response polled for) is none either."""
    return interaction.method == "POST" and not NOT_GENERATION.search(urlsplit(interaction.uri).path)


# The field every whole answer of an API has: a 200 body without it is some other document.
ANSWER_FIELD = {"openai-chat": "choices", "anthropic": "content", "openai-responses": "output", "bedrock": "output"}


def unreadable(interaction: Interaction) -> bool:
    """A whole 200 body that is not its API's answer (``{"x": 42}`` from a chat endpoint)."""
    cls = adapter_for_url(interaction.uri, interaction.request_json)
    if cls is None or interaction.is_stream or interaction.status >= 400 or cls.name not in ANSWER_FIELD:
        return False
    data = json.loads(interaction.body)
    return not (isinstance(data, dict) and (ANSWER_FIELD[cls.name] in data or isinstance(data.get("error"), dict)))


def unfinished(interaction: Interaction) -> bool:
    """A whole Responses answer still queued or in progress (background mode)."""
    cls = adapter_for_url(interaction.uri, interaction.request_json)
    if cls is None or cls.name != "openai-responses" or interaction.is_stream or interaction.status >= 400:
        return False
    return json.loads(interaction.body).get("status") in ("queued", "in_progress")


def expected_code(interaction: Interaction) -> str:
    """The error code a failed call's body (or AWS's header) names, else ``HTTP_<status>``."""
    body = json.loads(interaction.body)
    if isinstance(body.get("error"), dict):
        err = body["error"]
        if isinstance(err.get("code"), int):  # an HTTP-like number: Google names it by its status
            return str(err.get("status") or err["code"])
        return str(err.get("code") or err.get("type"))
    aws = interaction.header("x-amzn-errortype").split(":", 1)[0] or str(body.get("__type") or "").rsplit("#", 1)[-1]
    return aws or f"HTTP_{interaction.status}"


def _replay_all(path: Path) -> tuple[Cassette, list[ReplayResult | CassetteError]]:
    cassette = Cassette.load(path)

    async def one(n: int) -> ReplayResult | CassetteError:
        try:
            return await replay_interaction(cassette, n)
        except CassetteError as exc:  # the interaction is a defect: the tests say which they expect
            return exc

    async def run() -> list[ReplayResult | CassetteError]:
        return [await one(n) for n in range(len(cassette.interactions))]

    return cassette, asyncio.run(run())


def _model_results(path: Path) -> list[tuple[Interaction, ReplayResult]]:
    """The generation calls of a file with their replays (a call that is none is checked to
    have no adapter; one whose body is not its API's answer to be refused as unreadable)."""
    cassette, results = _replay_all(path)
    out = []
    for interaction, result in zip(cassette.interactions, results, strict=True):
        refusal = unspoken(interaction) if model_call(interaction) else None
        if not model_call(interaction) or refusal == "":
            assert not isinstance(result, CassetteError) and not result.adapter, f"no adapter speaks {interaction.uri}"
        elif refusal:
            assert isinstance(result, CassetteError) and refusal in str(result), result
        elif unreadable(interaction):
            assert isinstance(result, CassetteError) and "unreadable response" in str(result), result
        else:
            assert not isinstance(result, CassetteError), str(result)
            out.append((interaction, result))
    return out


@pytest.mark.parametrize("path", external_files(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_external_cassette_replays_to_a_well_formed_stream(path: Path) -> None:
    for interaction, result in _model_results(path):
        assert result.adapter, f"no adapter for {interaction.uri}"
        if interaction.status >= 400:
            assert result.chunks == []
            assert result.error_status == interaction.status
            assert result.error_code == expected_code(interaction)
            assert str(interaction.status) in (result.error or "")
            continue
        if unfinished(interaction):
            assert result.chunks == [] and result.error_code == "BACKGROUND_RESPONSE", "a queued answer is no empty answer"
            continue
        assert result.error is None
        assert stream_problems(result.chunks) == []
        kind, calls, has_usage, text, thought = expected(interaction)
        reason = dict(result.chunks[-1])["reason"]
        assert reason["kind"] == kind["kind"] and reason.get("raw") == kind["raw"]
        blocks = [c["block"] for c in result.chunks if c["type"] == "block-end"]
        assert [_args(b["arguments"]) for b in blocks if b["type"] == "tool-call"] == calls
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
    for interaction, result in _model_results(path):
        report = result.report()
        assert report["warnings"] == []
        if interaction.status >= 400 or unfinished(interaction):
            assert report["finish"] is None
            continue
        _, _, has_usage, text, thought = expected(interaction)
        assert report["recorded_chars"] == report["stream_chars"] == len(text) + len(thought)
        assert (report["usage"] is not None) == has_usage
        assert report["finish"]["kind"] in FINISH_VOCABULARY


def test_every_external_cassette_is_supported() -> None:
    """No file is left out: each generation call in each file has an adapter (the list of
    unsupported is empty), and every adapter's API is among them."""
    files = external_files()
    assert len(files) >= 30
    unsupported = []
    for path in files:
        cassette = Cassette.load(path)
        if any(adapter_for_url(i.uri, i.request_json) is None for i in cassette.interactions if model_call(i) and unspoken(i) is None):
            unsupported.append(path.name)
    assert unsupported == []
    names = {cls.name for p in files for i in Cassette.load(p).interactions if (cls := adapter_for_url(i.uri, i.request_json))}
    assert names >= {"openai-chat", "anthropic", "openai-responses", "gemini", "bedrock"}
