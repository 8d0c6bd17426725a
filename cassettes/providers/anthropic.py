"""Anthropic messages (``POST {base}/messages``; on Vertex AI ``{base}/publishers/anthropic/models/
{model}:streamRawPredict`` or ``:rawPredict``; on Amazon Bedrock's InvokeModel ``{base}/model/
{model}/invoke-with-response-stream`` or ``/invoke``), streaming and not.

On Bedrock the body carries ``anthropic_version: bedrock-2023-05-31`` and no ``model`` or
``stream``; the stream is AWS's binary event stream, each ``chunk`` frame holding one of the
events below as base64 JSON in its ``bytes`` (``message_stop`` adds Bedrock's own
``amazon-bedrock-invocationMetrics``, metadata); an ``exception`` frame ends it with
``finish{error}`` as in ConverseStream. Auth as for Converse: a Bedrock API key or SigV4.

Streaming events: ``message_start`` (input usage), ``content_block_start`` / ``_delta`` / ``_stop``
per block, ``message_delta`` (``stop_reason``, output usage), ``message_stop`` (terminal), ``ping``,
and in-stream ``error`` events, which end the stream with ``finish{error}`` (and win over a stop
reason seen before them; the usage is kept).

Blocks, and what is kept in ``provider_data["anthropic"]`` for the round trip:

- ``text`` -> text (``citations``: from the start block and every ``citations_delta``);
- ``thinking`` -> reasoning (``signature``: ``signature_delta``; required back before a tool
  result when thinking is on);
- ``redacted_thinking`` -> an empty reasoning block (``block``: the block as sent);
- ``tool_use`` -> tool-call;
- every other block (server-run tools: ``server_tool_use``, ``web_search_tool_result``,
  ``code_execution_tool_result``, ``web_fetch_tool_result``, MCP and container blocks...) -> an
  empty text block (``block``: the block, its streamed ``input`` reassembled). They ran on
  Anthropic's side: the loop must not call them, only send them back.

On the request side each block goes back as it came: thinking with its signature, redacted
thinking and server blocks verbatim, text with its citations. Reasoning without a signature (from
another provider) cannot be replayed and is dropped.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from typing import Any, ClassVar
from urllib.parse import quote, unquote, urlsplit

import httpx

from reference_loop.protocols import ModelRequest
from reference_loop.vocabulary import (
    Chunk,
    FinishChunk,
    Usage,
    finish,
    reasoning_delta,
    text_delta,
    tool_call_delta,
)

from ..eventstream import Frame
from ..sse import SSEEvent
from .base import (
    BlockBuilder,
    ProviderAdapter,
    Skipped,
    as_int,
    closing,
    compact_json,
    finish_from,
    parse_arguments,
    provider_data,
    shape_of,
    text_of,
    truncated,
    usage_chunk,
)
from .bedrock import (  # Bedrock's frames and auth, one reading for both APIs
    exception_finish,
    runtime_base_url,
    sigv4_sign,
)

NAME = "anthropic"
STOP_REASONS: dict[str, str] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "tool_use": "tool-calls",
    "max_tokens": "max-tokens",
    "model_context_window_exceeded": "max-tokens",
    "pause_turn": "stop",  # a long server-tool turn paused: send it back to continue
    "refusal": "refusal",
}
PLAIN_STOP = frozenset({"end_turn", "stop_sequence", "tool_use", "max_tokens", "refusal"})
DEFAULT_MAX_TOKENS = 1024
API_VERSION = "2023-06-01"
VERTEX_VERSION = "vertex-2023-10-16"
VERTEX_PATH = re.compile(r"/publishers/anthropic/models/([^/]+?):(streamRawPredict|rawPredict)$")
"""Anthropic's messages API on Google Vertex AI: ``{base}/publishers/anthropic/models/{model}:
streamRawPredict`` (``:rawPredict`` whole), the model in the URL, ``anthropic_version`` in the
body, the same events and answers."""
BEDROCK_VERSION = "bedrock-2023-05-31"
BEDROCK_PATH = re.compile(r"/model/([^/]+)/(invoke-with-response-stream|invoke)$")
"""Anthropic's messages API on Amazon Bedrock's InvokeModel: ``{base}/model/{model}/invoke-with-
response-stream`` (``/invoke`` whole), the model in the URL; an id naming an Anthropic model
(``anthropic.claude-...``, ``us.anthropic.claude-...``, an inference profile's ARN naming one):
InvokeModel serves every Bedrock model, each in its own vendor's format."""
DELTA_KEYS = frozenset({"stop_reason", "stop_sequence", "stop_details"})
"""``message_delta.delta``'s fields; ``stop_sequence`` (which sequence matched) is metadata."""
EVENTS = frozenset({"message_start", "content_block_start", "content_block_delta", "content_block_stop",
                    "message_delta", "message_stop", "ping", "error"})


def stop_kind(reason: str | None) -> str:
    """The kit kind of a stop reason (``stop`` for an unknown one)."""
    return str(_finish(reason)["reason"]["kind"])


def _finish(reason: str | None, details: Any = None) -> FinishChunk:
    """The finish of a stop reason; a refusal's message is its ``stop_details`` explanation and
    category when the API gives them (``{"type": "refusal", "category", "explanation"}``)."""
    chunk = finish_from(STOP_REASONS, PLAIN_STOP, reason)
    if chunk["reason"]["kind"] == "refusal":
        details = details if isinstance(details, dict) else {}
        category = f", category {details['category']}" if details.get("category") else ""
        explanation = f": {details['explanation']}" if details.get("explanation") else ""
        chunk["reason"]["message"] = f"the model declined to answer (stop_reason refusal{category}){explanation}"
    return chunk


def _finish_noting(reason: str | None, details: Any, skipped: Skipped) -> FinishChunk:
    """``_finish``, ``stop_details`` noted as skipped unless it explains a refusal."""
    if details not in (None, {}) and not (reason == "refusal" and isinstance(details, dict)):
        skipped.note("stop_details")
    return _finish(reason, details)


USAGE_METADATA = frozenset({"input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens",
                            "output_tokens_details", "cache_creation", "service_tier", "inference_geo"})
"""Usage fields read, or metadata: ``cache_creation`` splits the cache writes by lifetime."""


def merge_usage(usage: Usage | None, raw: dict[str, Any] | None, skipped: Skipped | None = None) -> Usage | None:
    """Fold one usage object (``message_start`` or the cumulative ``message_delta``) into ours;
    a count the kit's usage has no field for (``server_tool_use.web_search_requests``, billed per
    request) is noted in ``skipped`` when it is not zero."""
    if not isinstance(raw, dict):
        return usage
    if skipped is not None:
        for key, value in raw.items():
            counted = any(v not in (None, 0, "") for v in value.values()) if isinstance(value, dict) else value not in (None, 0, "", [])
            if key not in USAGE_METADATA and counted:
                skipped.note(f"usage.{key}")
    merged: Usage = dict(usage) if usage else {"input_tokens": 0, "output_tokens": 0}  # type: ignore[assignment]
    for theirs, ours in (("input_tokens", "input_tokens"), ("output_tokens", "output_tokens"),
                         ("cache_read_input_tokens", "cache_read_tokens"), ("cache_creation_input_tokens", "cache_write_tokens")):
        value = as_int(raw.get(theirs))
        if value is not None:
            merged[ours] = value  # type: ignore[literal-required]
    details = raw.get("output_tokens_details")
    thinking = as_int(details.get("thinking_tokens")) if isinstance(details, dict) else None
    if thinking is not None:  # newer answers count thinking apart (within output_tokens)
        merged["reasoning_tokens"] = thinking
    return merged


def convert_messages(request: ModelRequest) -> list[dict[str, Any]]:
    """Kit messages to Anthropic messages, each block as the provider first sent it."""
    out: list[dict[str, Any]] = []
    for message in request["messages"]:
        if message["role"] == "system":
            continue  # the system prompt travels in the top-level ``system`` field
        content = [part for part in map(_block, message["content"]) if part is not None]
        if content:
            out.append({"role": message["role"], "content": content})
    return out


def _block(block: Any) -> dict[str, Any] | None:
    kind = block["type"]
    mine = provider_data(block, NAME)
    if isinstance(mine.get("block"), dict):
        return dict(mine["block"])  # redacted thinking, server tool use and results: verbatim
    if kind == "text":
        if not block["text"]:
            return None  # the API rejects empty text blocks
        part: dict[str, Any] = {"type": "text", "text": block["text"]}
        if mine.get("citations"):
            part["citations"] = mine["citations"]
        return part
    if kind == "reasoning":
        if not mine.get("signature"):
            return None  # unsigned reasoning cannot be replayed to this API
        return {"type": "thinking", "thinking": block["text"], "signature": mine["signature"]}
    if kind == "tool-call":
        return {"type": "tool_use", "id": block["id"], "name": block["name"], "input": parse_arguments(block["arguments"])}
    if kind == "tool-result":
        return {"type": "tool_result", "tool_use_id": block["tool_call_id"], "content": text_of(block["content"]), "is_error": block["is_error"]}
    if kind == "image":
        return {"type": "image", "source": {"type": "url", "url": block["url"]}}
    return None


def _system_of(request: ModelRequest) -> str:
    parts = [request.get("system") or ""]
    parts += [text_of(m["content"]) for m in request["messages"] if m["role"] == "system"]
    return "\n\n".join(p for p in parts if p)


def _start_input(block: dict[str, Any]) -> str:
    start = block.get("input")
    return compact_json(start) if start else ""


class MessagesStreamTranslator:
    """Anthropic SSE events to kit chunks."""

    def __init__(self, skipped: Skipped | None = None) -> None:
        self.blocks = BlockBuilder(NAME)
        self.skipped = skipped if skipped is not None else Skipped()
        self.index_of: dict[int, int] = {}  # provider block index -> kit index
        self.start_input: dict[int, str] = {}
        self.raw_input: dict[int, str] = {}  # kit index -> streamed input of a server block
        self.stop_reason: str | None = None
        self.stop_details: Any = None
        self.usage: Usage | None = None
        self.error: FinishChunk | None = None
        self._done = False

    @property
    def done(self) -> bool:
        return self._done

    def feed(self, event: SSEEvent) -> list[Chunk]:
        if self._done or not event.data.strip():
            return []
        return self.event(json.loads(event.data), event.event)

    def event(self, data: dict[str, Any], name: str | None = None) -> list[Chunk]:
        """One parsed event (``name``: the SSE ``event:`` field, when its data has no ``type``)."""
        if self._done:
            return []
        kind = data.get("type") or name
        if kind == "message_start":
            self.usage = merge_usage(self.usage, (data.get("message") or {}).get("usage"), self.skipped)
        elif kind == "content_block_start":
            return self.start(data.get("index", 0), data.get("content_block") or {})
        elif kind == "content_block_delta":
            return self.delta(data.get("index", 0), data.get("delta") or {})
        elif kind == "content_block_stop":
            return self.stop(data.get("index", 0))
        elif kind == "message_delta":
            delta = data.get("delta") or {}
            self.skipped.unknown_keys("message_delta.delta", delta, DELTA_KEYS)
            self.stop_reason = delta.get("stop_reason") or self.stop_reason
            if delta.get("stop_details") is not None:
                self.stop_details = delta["stop_details"]
            self.usage = merge_usage(self.usage, data.get("usage"), self.skipped)
        elif kind == "message_stop":
            self._done = True
        elif kind == "error":
            err = data.get("error") or {}
            return self.fail(finish("error", str(err.get("message") or "stream error"), str(err.get("type") or "error")))
        elif kind not in EVENTS:
            self.skipped.note(f"event {kind}")
        return []

    def fail(self, error: FinishChunk) -> list[Chunk]:
        """The stream failed: close what is open; ``error`` is its finish, whatever came before."""
        self.error = error
        self._done = True
        return self.blocks.close_all()

    def start(self, provider_index: int, block: dict[str, Any]) -> list[Chunk]:
        kind = block.get("type")
        if kind in ("text", "thinking"):
            index, out = self.blocks.start("text" if kind == "text" else "reasoning")
            self.index_of[provider_index] = index
            if block.get("signature"):
                self.blocks.data(index)["signature"] = block["signature"]
            if block.get("citations"):
                self.blocks.data(index)["citations"] = list(block["citations"])
            initial = block.get("text") or block.get("thinking") or ""
            if initial:
                out += self.delta(provider_index, {"type": f"{kind}_delta", kind: initial})
            return out
        if kind == "tool_use":
            call_id, name = str(block.get("id", "")), str(block.get("name", ""))
            index, out = self.blocks.start("tool-call", id=call_id, name=name)
            self.index_of[provider_index] = index
            self.start_input[index] = _start_input(block)
            out.append(tool_call_delta(index, call_id, "", name=name))
            return out
        # Redacted thinking, server-run tools and their results: kept whole for the round trip.
        index, out = self.blocks.start("reasoning" if kind == "redacted_thinking" else "text")
        self.index_of[provider_index] = index
        self.blocks.data(index)["block"] = dict(block)
        return out

    def delta(self, provider_index: int, delta: dict[str, Any]) -> list[Chunk]:
        index = self.index_of.get(provider_index)
        state = self.blocks.open.get(index) if index is not None else None
        if index is None or state is None:
            return []
        kind = delta.get("type")
        raw = state.get("data", {}).get("block")
        if kind == "text_delta" and raw is None:
            if delta.get("text"):
                state["text"] += delta["text"]
                return [text_delta(index, delta["text"])]
        elif kind == "thinking_delta" and raw is None:
            if delta.get("thinking"):
                state["text"] += delta["thinking"]
                return [reasoning_delta(index, delta["thinking"])]
        elif kind == "signature_delta":
            data = self.blocks.data(index)
            data["signature"] = data.get("signature", "") + str(delta.get("signature") or "")
        elif kind == "citations_delta":
            self.blocks.data(index).setdefault("citations", []).append(delta.get("citation"))
        elif kind == "input_json_delta":
            fragment = str(delta.get("partial_json") or "")
            if raw is not None:
                self.raw_input[index] = self.raw_input.get(index, "") + fragment
            elif fragment:
                state["arguments"] += fragment
                return [tool_call_delta(index, state["id"], fragment)]
        else:
            self.skipped.note(f"delta {kind}")
        return []

    def stop(self, provider_index: int) -> list[Chunk]:
        index = self.index_of.get(provider_index)
        if index is None or index not in self.blocks.open:
            return []
        state = self.blocks.open[index]
        if index in self.raw_input:
            raw = state["data"]["block"]
            try:
                raw["input"] = json.loads(self.raw_input[index] or "{}")
            except ValueError:
                raw["input"] = self.raw_input[index]  # kept as sent, even if cut
        final = None
        if state.get("type") == "tool-call" and not state.get("arguments"):
            final = self.start_input.get(index) or None
        return self.blocks.close(index, final)

    def end(self) -> list[Chunk]:
        if self.error is None and not self._done:
            raise truncated("message_stop")
        if self.error is not None:
            return closing(self.blocks, self.usage, self.error)
        return closing(self.blocks, self.usage, _finish_noting(self.stop_reason, self.stop_details, self.skipped))


def _not_messages(data: Any) -> str:
    """Why an InvokeModel answer is not the messages API's: Bedrock also serves Anthropic's legacy
    Text Completions (``prompt`` in, ``completion`` out), which no adapter speaks."""
    if isinstance(data, dict) and "completion" in data:
        return "Anthropic's legacy Text Completions format (prompt/completion), not the messages API: not spoken"
    return "not a messages API event (no 'type')"


class InvokeStreamTranslator:
    """Bedrock's InvokeModelWithResponseStream frames to chunks: each ``chunk`` frame carries one
    Anthropic stream event (``{"bytes": <base64 JSON>}``), which :class:`MessagesStreamTranslator`
    reads as if it had come over SSE."""

    def __init__(self, skipped: Skipped | None = None) -> None:
        self.messages = MessagesStreamTranslator(skipped)
        self.skipped = self.messages.skipped

    @property
    def done(self) -> bool:
        return self.messages.done

    def feed(self, frame: Frame) -> list[Chunk]:
        if self.messages.done:
            return []
        if frame.message_type in ("exception", "error"):
            return self.messages.fail(exception_finish(frame))
        if frame.event_type != "chunk":
            self.skipped.note(f"frame {frame.event_type}")
            return []
        payload = frame.json()
        if not isinstance(payload, dict) or not isinstance(payload.get("bytes"), str):
            raise ValueError("a chunk frame without its base64 'bytes'")
        self.skipped.unknown_keys("chunk", payload, frozenset({"bytes", "p"}))
        try:
            text = base64.b64decode(payload["bytes"], validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError) as exc:
            raise ValueError(f"a chunk's bytes are not base64 UTF-8: {exc}") from exc
        event = json.loads(text)
        if not isinstance(event, dict) or "type" not in event:
            raise ValueError(_not_messages(event))
        return self.messages.event(event)

    def end(self) -> list[Chunk]:
        return self.messages.end()


def translate_message(data: dict[str, Any], skipped: Skipped | None = None) -> list[Chunk]:
    """A whole (non-streaming) message to the chunks its stream would have given."""
    translator = MessagesStreamTranslator(skipped)
    out: list[Chunk] = []
    for position, block in enumerate(data.get("content") or []):
        kind = block.get("type")
        if kind == "text":
            out += translator.start(position, {**block, "text": ""})
            out += translator.delta(position, {"type": "text_delta", "text": block.get("text", "")})
        elif kind == "thinking":
            out += translator.start(position, {**block, "thinking": ""})
            out += translator.delta(position, {"type": "thinking_delta", "thinking": block.get("thinking", "")})
        elif kind == "tool_use":
            out += translator.start(position, {**block, "input": {}})
            out += translator.delta(position, {"type": "input_json_delta", "partial_json": compact_json(block.get("input") or {})})
        else:
            out += translator.start(position, block)
        out += translator.stop(position)
    usage = merge_usage(None, data.get("usage"), translator.skipped)
    if usage is not None:
        out.append(usage_chunk(usage))
    out.append(_finish_noting(data.get("stop_reason"), data.get("stop_details"), translator.skipped))
    return out


def _bedrock_model(path: str, request_json: Any = None) -> re.Match[str] | None:
    """The InvokeModel path of an Anthropic model: its id names Anthropic, or (an application
    inference profile's ARN names no vendor) the recorded body is the messages API's on Bedrock."""
    found = BEDROCK_PATH.search(path)
    if found is None:
        return None
    body_says = isinstance(request_json, dict) and str(request_json.get("anthropic_version", "")).startswith("bedrock-")
    return found if "anthropic" in unquote(found.group(1)) or body_says else None


class AnthropicMessagesAdapter(ProviderAdapter):
    """Anthropic messages API. Key from ``ANTHROPIC_API_KEY`` when recording.

    ``platform="bedrock"`` speaks it through Amazon Bedrock's InvokeModel (``base_url``: the
    Bedrock runtime endpoint, by default that of ``$AWS_REGION``, else us-east-1; ``model``: the
    Bedrock model id; auth: ``api_key`` as a Bedrock API key, else ``credentials`` or the local
    AWS credentials, SigV4). A base URL ending in ``/publishers/anthropic`` is Vertex AI's."""

    name: ClassVar[str] = NAME
    path: ClassVar[str] = "/messages"
    default_base_url: ClassVar[str] = "https://api.anthropic.com/v1"
    api_key_env: ClassVar[str] = "ANTHROPIC_API_KEY"
    bedrock_base_url: ClassVar[str] = "https://bedrock-runtime.us-east-1.amazonaws.com"

    def __init__(self, *, thinking_budget: int | None = None, platform: str = "anthropic", credentials: Any = None,
                 **options: Any) -> None:
        if platform not in ("anthropic", "bedrock"):
            raise ValueError(f"unknown platform {platform!r} (anthropic or bedrock; Vertex AI is a base URL)")
        if platform == "bedrock":
            runtime_base_url(options)
            options["base_url"] = options.get("base_url") or self.bedrock_base_url
        super().__init__(**options)
        self.thinking_budget = thinking_budget
        self.bedrock = platform == "bedrock"
        self.credentials = credentials

    @classmethod
    def matches(cls, url: str) -> bool:
        path = urlsplit(url).path.rstrip("/")
        return path.endswith(cls.path) or VERTEX_PATH.search(path) is not None or _bedrock_model(path) is not None

    @classmethod
    def matches_request(cls, url: str, request_json: Any) -> bool:
        return _bedrock_model(urlsplit(url).path.rstrip("/"), request_json) is not None

    @classmethod
    def replay_settings(cls, url: str, request_json: Any, is_stream: bool) -> dict[str, Any]:
        parts = urlsplit(url)
        path = parts.path.rstrip("/")
        on_bedrock = _bedrock_model(path, request_json)
        if on_bedrock is not None:
            return {"base_url": f"{parts.scheme}://{parts.netloc}{path[: on_bedrock.start()]}", "platform": "bedrock",
                    "stream": on_bedrock.group(2) == "invoke-with-response-stream", "model": unquote(on_bedrock.group(1))}
        found = VERTEX_PATH.search(path)
        if found is None:
            return super().replay_settings(url, request_json, is_stream)
        base = parts.path[: found.start()] + "/publishers/anthropic"
        return {"base_url": f"{parts.scheme}://{parts.netloc}{base}", "stream": found.group(2) == "streamRawPredict",
                "model": unquote(found.group(1))}

    @property
    def vertex(self) -> bool:
        """Whether the base URL is a Vertex AI publisher's (``.../publishers/anthropic``)."""
        return self.base_url.rstrip("/").endswith("/publishers/anthropic")

    @property
    def url(self) -> str:
        if self.bedrock:
            return f"{self.base_url}/model/{{model}}/{'invoke-with-response-stream' if self.streaming else 'invoke'}"
        return super().url

    def endpoint(self, request: ModelRequest) -> str:
        if self.bedrock:
            method = "invoke-with-response-stream" if self.streaming else "invoke"
            return f"{self.base_url}/model/{quote(self.model_name(request), safe='')}/{method}"
        if not self.vertex:
            return super().endpoint(request)
        method = "streamRawPredict" if self.streaming else "rawPredict"
        return f"{self.base_url.rstrip('/')}/models/{quote(self.model_name(request), safe='@')}:{method}"

    def build_body(self, request: ModelRequest) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model_name(request),
            "max_tokens": self.max_tokens or DEFAULT_MAX_TOKENS,
            "messages": convert_messages(request),
        }
        if self.vertex or self.bedrock:
            del body["model"]  # in the URL
            body["anthropic_version"] = BEDROCK_VERSION if self.bedrock else VERTEX_VERSION
        system = _system_of(request)
        if system:
            body["system"] = system
        if request.get("tools"):
            body["tools"] = [
                {"name": t["name"], "description": t["description"], "input_schema": t["input_schema"]}
                for t in request["tools"]
            ]
        if self.thinking_budget is not None:
            body["thinking"] = {"type": "enabled", "budget_tokens": self.thinking_budget}
        if self.streaming and not self.bedrock:  # Bedrock: the path says it
            body["stream"] = True
        return body

    def headers(self) -> dict[str, str]:
        headers = super().headers()
        if self.bedrock:
            headers["accept"] = "application/vnd.amazon.eventstream" if self.streaming else "application/json"
        return headers

    def sign(self, request: httpx.Request) -> httpx.Request:
        if not self.bedrock:
            return request
        return sigv4_sign(request, self.api_key, self.credentials, self.transport)

    def auth_headers(self) -> dict[str, str]:
        if self.vertex or self.bedrock:  # a Google access token, a Bedrock API key; the version is in the body
            return {"authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        headers = {"anthropic-version": API_VERSION}
        if self.api_key:
            headers["x-api-key"] = self.api_key
        return headers

    def translator(self) -> MessagesStreamTranslator | InvokeStreamTranslator:
        return InvokeStreamTranslator() if self.bedrock else MessagesStreamTranslator()

    def translate_response(self, data: Any, skipped: Skipped) -> list[Chunk]:
        if not (isinstance(data, dict) and (data.get("type") == "message" or "content" in data)):
            # InvokeModel also serves the legacy Text Completions; anything else is no message at all
            legacy = self.bedrock or (isinstance(data, dict) and "completion" in data)
            raise ValueError(_not_messages(data) if legacy else f"not a messages API response (no 'content'; {shape_of(data)})")
        return translate_message(data, skipped)
