"""Amazon Bedrock Converse (``POST {base}/model/{modelId}/converse``) and ConverseStream
(``.../converse-stream``, binary ``application/vnd.amazon.eventstream`` frames, decoded by botocore).

ConverseStream events: ``messageStart``, ``contentBlockStart`` (``start.toolUse`` for a tool call;
text blocks have none), ``contentBlockDelta`` (``delta.text``, ``delta.toolUse.input`` string
fragments, ``delta.reasoningContent`` ``text`` / ``signature`` / ``redactedContent``,
``delta.citation``), ``contentBlockStop``, ``messageStop`` (``stopReason``) and ``metadata``
(``usage``: ``inputTokens``, ``outputTokens``, ``cacheReadInputTokens``,
``cacheWriteInputTokens``), the terminal event. A frame of ``:message-type exception`` (its
``:exception-type``: ``throttlingException``, ``modelStreamErrorException``...) ends the stream
with ``finish{error}``, winning over a stop reason seen before it. Errors before the stream are
JSON ``{"message"}`` with the type in ``x-amzn-ErrorType``.

``provider_data["bedrock"]`` keeps the reasoning ``signature`` (or the ``redactedContent``) and
text ``citations``; server-run tool use and results (``toolUse.type: server_tool_use``,
``toolResult`` in the output) and ``citationsContent`` blocks are kept whole (``block``) and sent
back as they came. Auth: a Bedrock API key (``AWS_BEARER_TOKEN_BEDROCK``, a bearer token) or AWS
credentials from the environment, signed with botocore's SigV4.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
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
from .base import (
    BlockBuilder,
    ProviderAdapter,
    Skipped,
    as_int,
    closing,
    compact_json,
    finish_from,
    json_object,
    json_objects,
    parse_arguments,
    provider_data,
    text_of,
    truncated,
)

NAME = "bedrock"
STOP_REASONS: dict[str, str] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "tool_use": "tool-calls",
    "max_tokens": "max-tokens",
    "model_context_window_exceeded": "max-tokens",
    "guardrail_intervened": "content-filter",
    "content_filtered": "content-filter",
    "malformed_model_output": "error",
    "malformed_tool_use": "error",
}
PLAIN_STOP = frozenset({"end_turn", "stop_sequence", "tool_use", "max_tokens"})
EVENTS = frozenset({"messageStart", "contentBlockStart", "contentBlockDelta", "contentBlockStop", "messageStop", "metadata"})
DELTA_KEYS = frozenset({"text", "toolUse", "reasoningContent", "citation", "toolResult"})
PATH = re.compile(r"/model/([^/]+)/(converse|converse-stream)$")


def parse_usage(raw: Any) -> Usage | None:
    if not isinstance(raw, dict) or as_int(raw.get("inputTokens")) is None:
        return None
    usage: Usage = {"input_tokens": int(raw["inputTokens"]), "output_tokens": as_int(raw.get("outputTokens")) or 0}
    read, written = as_int(raw.get("cacheReadInputTokens")), as_int(raw.get("cacheWriteInputTokens"))
    if read is not None:
        usage["cache_read_tokens"] = read
    if written is not None:
        usage["cache_write_tokens"] = written
    return usage


def _stop(reason: str | None) -> FinishChunk:
    return finish_from(STOP_REASONS, PLAIN_STOP, reason)


def exception_finish(frame: Frame) -> FinishChunk:
    """The ``finish{error}`` of an ``exception`` or ``error`` frame (its message, its type as code)."""
    payload = frame.json() if frame.message_type == "exception" else {}
    message = payload.get("message") or payload.get("Message") if isinstance(payload, dict) else None
    message = message or frame.headers.get(":error-message") or frame.data or "stream error"
    return finish("error", str(message), frame.event_type or frame.message_type)


class ConverseStreamTranslator:
    """ConverseStream frames (or one whole Converse response) to kit chunks."""

    def __init__(self, skipped: Skipped | None = None) -> None:
        self.blocks = BlockBuilder(NAME)
        self.skipped = skipped if skipped is not None else Skipped()
        self.index_of: dict[int, int] = {}  # contentBlockIndex -> kit index
        self.raw_input: dict[int, str] = {}  # kit index -> streamed input of a server tool use
        self.stop_reason: str | None = None
        self.usage: Usage | None = None
        self.error: FinishChunk | None = None
        self._done = False

    @property
    def done(self) -> bool:
        return self._done

    def feed(self, frame: Frame) -> list[Chunk]:
        if self._done:
            return []
        if frame.message_type in ("exception", "error"):
            self.error = exception_finish(frame)
            self._done = True
            return self.blocks.close_all()
        return self.event(frame.event_type, frame.json())

    def event(self, kind: str, data: Any) -> list[Chunk]:
        if not isinstance(data, dict):
            raise ValueError(f"a {kind} payload is not a JSON object")
        if kind == "contentBlockStart":
            return self.start(int(data.get("contentBlockIndex", 0)), data.get("start") or {})
        if kind == "contentBlockDelta":
            return self.delta(int(data.get("contentBlockIndex", 0)), data.get("delta") or {})
        if kind == "contentBlockStop":
            return self.stop(int(data.get("contentBlockIndex", 0)))
        if kind == "messageStop":
            self.stop_reason = data.get("stopReason") or self.stop_reason
        elif kind == "metadata":
            self.usage = parse_usage(data.get("usage")) or self.usage
            self._done = True  # the terminal event: it follows messageStop
        elif kind not in EVENTS:
            self.skipped.note(f"event {kind}")
        return []

    def _open(self, position: int, block_type: Any, **fields: Any) -> tuple[int, list[Chunk]]:
        index = self.index_of.get(position)
        if index is not None and index in self.blocks.open and self.blocks.open[index]["type"] == block_type:
            return index, []
        index, out = self.blocks.start(block_type, **fields)
        self.index_of[position] = index
        return index, out

    def start(self, position: int, start: dict[str, Any]) -> list[Chunk]:
        use = start.get("toolUse")
        if isinstance(use, dict) and use.get("type") != "server_tool_use":
            call_id, name = str(use.get("toolUseId") or ""), str(use.get("name") or "")
            index, out = self._open(position, "tool-call", id=call_id, name=name)
            return [*out, tool_call_delta(index, call_id, "", name=name)]
        if isinstance(use, dict) or isinstance(start.get("toolResult"), dict):
            # Run on Bedrock's side (server tools): kept whole for the round trip, never dispatched.
            key = "toolUse" if isinstance(use, dict) else "toolResult"
            index, out = self._open(position, "text")
            self.blocks.data(index)["block"] = {key: dict(start[key])}
            return out
        self.skipped.unknown_keys("contentBlockStart.start", start, frozenset())
        return []

    def delta(self, position: int, delta: dict[str, Any]) -> list[Chunk]:
        self.skipped.unknown_keys("delta", delta, DELTA_KEYS)
        out: list[Chunk] = []
        index = self.index_of.get(position)
        state = self.blocks.open.get(index) if index is not None else None
        raw = state.get("data", {}).get("block") if state is not None else None
        if isinstance(delta.get("text"), str):
            index, out = self._open(position, "text")
            if delta["text"]:
                self.blocks.open[index]["text"] += delta["text"]
                out.append(text_delta(index, delta["text"]))
        reasoning = delta.get("reasoningContent")
        if isinstance(reasoning, dict):
            index, started = self._open(position, "reasoning")
            out += started
            if isinstance(reasoning.get("text"), str) and reasoning["text"]:
                self.blocks.open[index]["text"] += reasoning["text"]
                out.append(reasoning_delta(index, reasoning["text"]))
            for key in ("signature", "redactedContent"):
                if isinstance(reasoning.get(key), str):
                    data = self.blocks.data(index)
                    data[key] = data.get(key, "") + reasoning[key]
        use = delta.get("toolUse")
        if isinstance(use, dict) and state is not None and index is not None:
            fragment = str(use.get("input") or "")
            if raw is not None:
                self.raw_input[index] = self.raw_input.get(index, "") + fragment
            elif fragment and state["type"] == "tool-call":
                state["arguments"] += fragment
                out.append(tool_call_delta(index, state["id"], fragment))
        if isinstance(delta.get("toolResult"), list) and raw is not None and "toolResult" in raw:
            raw["toolResult"].setdefault("content", []).extend(delta["toolResult"])
        if isinstance(delta.get("citation"), dict):
            index, started = self._open(position, "text")
            out += started
            self.blocks.data(index).setdefault("citations", []).append(delta["citation"])
        return out

    def stop(self, position: int) -> list[Chunk]:
        index = self.index_of.get(position)
        if index is None or index not in self.blocks.open:
            return []
        if index in self.raw_input:
            use = self.blocks.open[index]["data"]["block"]["toolUse"]
            use["input"] = parse_arguments(self.raw_input[index]) if self.raw_input[index] else {}
        return self.blocks.close(index)

    def end(self) -> list[Chunk]:
        if self.error is None and self.stop_reason is None:
            raise truncated("messageStop")
        return closing(self.blocks, self.usage, self.error if self.error is not None else _stop(self.stop_reason))


def translate_converse(data: dict[str, Any], skipped: Skipped | None = None) -> list[Chunk]:
    """A whole Converse response to the chunks its stream would have given."""
    translator = ConverseStreamTranslator(skipped)
    out: list[Chunk] = []
    message = json_object(json_object(data, "output"), "message", "output.message")
    for position, block in enumerate(json_objects(message, "content", "output.message.content")):
        if isinstance(block.get("toolUse"), dict) and block["toolUse"].get("type") != "server_tool_use":
            use = block["toolUse"]
            out += translator.start(position, {"toolUse": {k: v for k, v in use.items() if k != "input"}})
            out += translator.delta(position, {"toolUse": {"input": compact_json(use.get("input") or {})}})
        elif isinstance(block.get("text"), str):
            out += translator.delta(position, {"text": block["text"]})
        elif "reasoningContent" in block:
            reasoning = json_object(block, "reasoningContent", f"content item {position + 1} reasoningContent")
            text_block = json_object(reasoning, "reasoningText", f"content item {position + 1} reasoningText")
            delta = {"text": text_block.get("text", ""), "signature": text_block.get("signature")}
            if reasoning.get("redactedContent") is not None:
                delta = {"redactedContent": reasoning["redactedContent"]}
            out += translator.delta(position, {"reasoningContent": {k: v for k, v in delta.items() if v is not None}})
        elif isinstance(block.get("citationsContent"), dict):
            cited = block["citationsContent"]
            out += translator.delta(position, {"text": "".join(str(p.get("text", "")) for p in cited.get("content") or [])})
            translator.blocks.data(translator.index_of[position])["block"] = dict(block)
        elif any(key in block for key in ("toolUse", "toolResult")):
            index, started = translator._open(position, "text")
            out += started
            translator.blocks.data(index)["block"] = dict(block)
        else:
            translator.skipped.note(f"content block {next(iter(block), '?')}")
        out += translator.stop(position)
    translator.stop_reason = data.get("stopReason") or "end_turn"
    translator.usage = parse_usage(data.get("usage"))
    return out + translator.end()


# --------------------------------------------------------------------------- requests


def convert_messages(request: ModelRequest) -> list[dict[str, Any]]:
    """Kit messages to Converse messages; roles must alternate, so same-role turns are merged."""
    out: list[dict[str, Any]] = []
    for message in request["messages"]:
        if message["role"] == "system":
            continue
        content = [part for part in map(_block, message["content"]) if part is not None]
        if not content:
            continue
        if out and out[-1]["role"] == message["role"]:
            out[-1]["content"].extend(content)
        else:
            out.append({"role": message["role"], "content": content})
    return out


def _block(block: Any) -> dict[str, Any] | None:
    kind, mine = block["type"], provider_data(block, NAME)
    if isinstance(mine.get("block"), dict):
        return dict(mine["block"])
    if kind == "text":
        return {"text": block["text"]} if block["text"] else None
    if kind == "reasoning":
        if mine.get("redactedContent"):
            return {"reasoningContent": {"redactedContent": mine["redactedContent"]}}
        if not mine.get("signature"):
            return None  # unsigned reasoning cannot be replayed
        return {"reasoningContent": {"reasoningText": {"text": block["text"], "signature": mine["signature"]}}}
    if kind == "tool-call":
        return {"toolUse": {"toolUseId": block["id"], "name": block["name"], "input": parse_arguments(block["arguments"])}}
    if kind == "tool-result":
        return {"toolResult": {"toolUseId": block["tool_call_id"], "content": [{"text": text_of(block["content"]) or " "}],
                               "status": "error" if block["is_error"] else "success"}}
    if kind == "image":
        url = str(block["url"])
        if url.startswith("data:image/") and ";base64," in url:
            mime, data = url[5:].split(";base64,", 1)
            return {"image": {"format": mime.split("/", 1)[1], "source": {"bytes": data}}}
    return None


def local_credentials() -> Any:
    """AWS credentials from the environment or the shared credentials file, else ``None``.

    Only providers that read local state: botocore's full chain would also ask the instance
    metadata service over HTTP, which a recording would capture (and which hangs off AWS).
    """
    from botocore.credentials import EnvProvider, SharedCredentialProvider

    for provider in (EnvProvider(), SharedCredentialProvider(os.path.expanduser("~/.aws/credentials"), os.environ.get("AWS_PROFILE", "default"))):
        found = provider.load()
        if found is not None:
            return found
    return None


def runtime_base_url(options: dict[str, Any]) -> None:
    """Default ``options["base_url"]`` to the runtime endpoint of ``$AWS_REGION``, when it is set."""
    if options.get("base_url") is None and os.environ.get("AWS_REGION"):
        options["base_url"] = f"https://bedrock-runtime.{os.environ['AWS_REGION']}.amazonaws.com"


def sigv4_sign(request: httpx.Request, api_key: str | None, credentials: Any, transport: Any) -> httpx.Request:
    """A Bedrock request as sent: unchanged with an API key (a bearer token), else signed with
    SigV4 (botocore) when there are AWS credentials (given, or the local ones for a live call)."""
    if api_key:
        return request
    if credentials is None and transport is None:
        credentials = local_credentials()
    if credentials is None:
        return request
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest

    host = request.url.host
    region = host.split(".")[1] if host.startswith("bedrock-runtime.") else os.environ.get("AWS_REGION", "us-east-1")
    signed = AWSRequest(method=request.method, url=str(request.url), data=request.content,
                        headers={k: v for k, v in request.headers.items() if k.lower() in ("content-type", "host")})
    SigV4Auth(credentials, "bedrock", region).add_auth(signed)
    for name in ("Authorization", "X-Amz-Date", "X-Amz-Security-Token"):
        if name in signed.headers:
            request.headers[name] = signed.headers[name]
    return request


class BedrockConverseAdapter(ProviderAdapter):
    """Amazon Bedrock Converse / ConverseStream.

    ``model`` is the model id (it travels in the URL). ``base_url`` defaults to the runtime
    endpoint of ``$AWS_REGION`` (else us-east-1). Auth: ``api_key`` (a Bedrock API key,
    ``AWS_BEARER_TOKEN_BEDROCK``) as a bearer token, else AWS credentials (``credentials``, or the
    environment's, looked up only for live calls) with a SigV4 signature. ``thinking_budget`` turns
    on extended thinking for Claude models (``additionalModelRequestFields.thinking``).
    """

    name: ClassVar[str] = NAME
    path: ClassVar[str] = "/converse"
    response_keys: ClassVar[tuple[str, ...]] = ("output",)
    default_base_url: ClassVar[str] = "https://bedrock-runtime.us-east-1.amazonaws.com"
    api_key_env: ClassVar[str] = "AWS_BEARER_TOKEN_BEDROCK"

    def __init__(self, *, credentials: Any = None, thinking_budget: int | None = None, **options: Any) -> None:
        runtime_base_url(options)
        super().__init__(**options)
        self.credentials = credentials
        self.thinking_budget = thinking_budget

    @classmethod
    def matches(cls, url: str) -> bool:
        return PATH.search(urlsplit(url).path.rstrip("/")) is not None

    @classmethod
    def replay_settings(cls, url: str, request_json: Mapping[str, Any] | None, is_stream: bool) -> dict[str, Any]:
        parts = urlsplit(url)
        found = PATH.search(parts.path.rstrip("/"))
        assert found is not None
        base = parts.path[: found.start()]
        return {"base_url": f"{parts.scheme}://{parts.netloc}{base}", "stream": found.group(2) == "converse-stream",
                "model": unquote(found.group(1))}

    @property
    def url(self) -> str:
        return f"{self.base_url}/model/{{model}}/{'converse-stream' if self.streaming else 'converse'}"

    def endpoint(self, request: ModelRequest) -> str:
        return f"{self.base_url}/model/{quote(self.model_name(request), safe='')}/{'converse-stream' if self.streaming else 'converse'}"

    def headers(self) -> dict[str, str]:
        headers = super().headers()
        headers["accept"] = "application/vnd.amazon.eventstream" if self.streaming else "application/json"
        return headers

    def build_body(self, request: ModelRequest) -> dict[str, Any]:
        body: dict[str, Any] = {"messages": convert_messages(request)}
        system = [text_of(m["content"]) for m in request["messages"] if m["role"] == "system"]
        system = [s for s in [request.get("system") or "", *system] if s]
        if system:
            body["system"] = [{"text": s} for s in system]
        if request.get("tools"):
            body["toolConfig"] = {"tools": [
                {"toolSpec": {"name": t["name"], "description": t["description"], "inputSchema": {"json": t["input_schema"]}}}
                for t in request["tools"]
            ]}
        if self.max_tokens is not None:
            body["inferenceConfig"] = {"maxTokens": self.max_tokens}
        if self.thinking_budget is not None:
            body["additionalModelRequestFields"] = {"thinking": {"type": "enabled", "budget_tokens": self.thinking_budget}}
        return body

    def auth_headers(self) -> dict[str, str]:
        return {"authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def sign(self, request: httpx.Request) -> httpx.Request:
        return sigv4_sign(request, self.api_key, self.credentials, self.transport)

    def translator(self) -> ConverseStreamTranslator:
        return ConverseStreamTranslator()

    def translate_response(self, data: Any, skipped: Skipped) -> list[Chunk]:
        return translate_converse(data, skipped)
