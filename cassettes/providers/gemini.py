"""Google Gemini (``POST {base}/models/{model}:generateContent``, and
``:streamGenerateContent?alt=sse``), streaming and not. Vertex AI's publisher URLs have the same
shape (``.../publishers/google/models/{model}:...``) and are read the same way.

Every streamed event is a whole ``GenerateContentResponse``: ``candidates[0].content.parts`` (text,
``thought: true`` text, ``functionCall`` with its arguments whole as an object, ``inlineData``,
``executableCode``...), ``finishReason`` on the last, ``usageMetadata`` on every event (the last
one wins), and ``promptFeedback.blockReason`` when the prompt itself was blocked. There is no
terminal sentinel: the stream ends with the connection, and one that ends before any
``finishReason`` (or block reason, or error) is truncated. An ``{"error": {code, message,
status}}`` object, as an HTTP body or an event, is an error with the ``status`` as its code.

Parts become blocks: consecutive parts of one kind join one block, except that a part carrying a
``thoughtSignature`` never joins a block with another signature or none (the API asks for parts
with signatures to come back as they were): the signature is kept in
``provider_data["gemini"]["thoughtSignature"]`` of its block and sent back on that part, in
whichever base64 alphabet it came. Function calls without an ``id`` get one (``call_<n>``, after
the ``responseId``); the answer is matched back to its call by name. Code execution parts are
kept whole (``part``) on an empty text block.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, ClassVar
from urllib.parse import quote, unquote, urlsplit

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

from ..sse import SSEEvent
from .base import (
    BlockBuilder,
    ProviderAdapter,
    Skipped,
    as_int,
    closing,
    compact_json,
    error_code,
    finish_from,
    parse_arguments,
    provider_data,
    text_of,
    truncated,
)

NAME = "gemini"
FINISH_REASONS: dict[str, str] = {
    "STOP": "stop",
    "MAX_TOKENS": "max-tokens",
    "SAFETY": "content-filter",
    "RECITATION": "content-filter",
    "LANGUAGE": "content-filter",
    "BLOCKLIST": "content-filter",
    "PROHIBITED_CONTENT": "content-filter",
    "SPII": "content-filter",
    "IMAGE_SAFETY": "content-filter",
    "IMAGE_PROHIBITED_CONTENT": "content-filter",
    "IMAGE_RECITATION": "content-filter",
    "MALFORMED_FUNCTION_CALL": "error",
    "UNEXPECTED_TOOL_CALL": "error",
    "TOO_MANY_TOOL_CALLS": "error",
    "MISSING_THOUGHT_SIGNATURE": "error",
    "MALFORMED_RESPONSE": "error",
    # OTHER, IMAGE_OTHER, NO_IMAGE, FINISH_REASON_UNSPECIFIED and unknown ones: stop, raw kept.
}
FINISH_NUMBERS = ("FINISH_REASON_UNSPECIFIED", "STOP", "MAX_TOKENS", "SAFETY", "RECITATION", "OTHER", "BLOCKLIST",
                  "PROHIBITED_CONTENT", "SPII", "MALFORMED_FUNCTION_CALL")
"""The enum's names by number, as Vertex AI sends them under ``$alt=json;enum-encoding=int`` (the
google-cloud-aiplatform client's wire form); the numbers past these differ between API versions."""
PLAIN_FINISH = frozenset({"STOP", "MAX_TOKENS"})
RESPONSE_KEYS = frozenset({"candidates", "usageMetadata", "modelVersion", "responseId", "promptFeedback", "createTime", "modelStatus", "sdkHttpResponse"})
CANDIDATE_KEYS = frozenset({"content", "finishReason", "finishMessage", "index", "safetyRatings", "citationMetadata", "groundingMetadata",
                            "urlContextMetadata", "avgLogprobs", "logprobsResult", "tokenCount", "groundingAttributions"})
PART_KEYS = frozenset({"text", "thought", "thoughtSignature", "functionCall", "inlineData", "fileData", "executableCode",
                       "codeExecutionResult", "videoMetadata", "partMetadata"})
KEPT_METADATA = ("citationMetadata", "groundingMetadata", "urlContextMetadata")  # on the last text block


def parse_usage(raw: Any) -> Usage | None:
    """``usageMetadata`` fields one to one: the prompt (cached content included), the candidates'
    tokens (thoughts not included: Gemini counts them apart, as ``reasoning_tokens``)."""
    if not isinstance(raw, dict) or as_int(raw.get("promptTokenCount")) is None:
        return None
    usage: Usage = {"input_tokens": int(raw["promptTokenCount"]), "output_tokens": as_int(raw.get("candidatesTokenCount")) or 0}
    cached = as_int(raw.get("cachedContentTokenCount"))
    if cached is not None:
        usage["cache_read_tokens"] = cached
    thoughts = as_int(raw.get("thoughtsTokenCount"))
    if thoughts is not None:
        usage["reasoning_tokens"] = thoughts
    return usage


def _error_finish(err: Mapping[str, Any]) -> FinishChunk:
    return finish("error", str(err.get("message") or "stream error"), error_code(err) or "error")


class GeminiStreamTranslator:
    """``GenerateContentResponse`` events (or one whole response) to kit chunks."""

    def __init__(self, skipped: Skipped | None = None) -> None:
        self.blocks = BlockBuilder(NAME)
        self.skipped = skipped if skipped is not None else Skipped()
        self.current: int | None = None  # the open text/reasoning block parts may join
        self.finish_reason: str | None = None
        self.finish_message: str | None = None  # the candidate's finishMessage, if any
        self.block_reason: dict[str, Any] | None = None
        self.usage: Usage | None = None
        self.error: FinishChunk | None = None
        self.response_id = ""
        self.metadata: dict[str, Any] = {}
        self.last_text: int | None = None
        self.calls = 0

    @property
    def done(self) -> bool:
        return self.error is not None  # otherwise the stream ends with the connection

    def feed(self, event: SSEEvent) -> list[Chunk]:
        if self.done or not event.data.strip():
            return []
        data = json.loads(event.data)
        if isinstance(data, list):  # the JSON-array framing of streamGenerateContent without alt=sse
            out: list[Chunk] = []
            for item in data:
                out += self.response(item)
            return out
        return self.response(data)

    def response(self, data: Any) -> list[Chunk]:
        if not isinstance(data, dict):
            raise ValueError("a response is not a JSON object")
        if isinstance(data.get("error"), dict):
            self.error = _error_finish(data["error"])
            return self.blocks.close_all()
        self.skipped.unknown_keys("response", data, RESPONSE_KEYS)
        self.response_id = str(data.get("responseId") or self.response_id)
        usage = parse_usage(data.get("usageMetadata"))
        if usage is not None:
            self.usage = usage
        feedback = data.get("promptFeedback")
        if isinstance(feedback, dict) and feedback.get("blockReason"):
            self.block_reason = feedback
        out: list[Chunk] = []
        candidates = data.get("candidates") or []
        if candidates:
            candidate = candidates[0]
            self.skipped.unknown_keys("candidate", candidate, CANDIDATE_KEYS)
            for part in (candidate.get("content") or {}).get("parts") or []:
                if isinstance(part, dict):
                    out += self.part(part)
            for key in KEPT_METADATA:
                if candidate.get(key):
                    self.metadata[key] = candidate[key]
            if candidate.get("finishReason"):
                number = candidate["finishReason"]
                known = isinstance(number, int) and not isinstance(number, bool) and 0 <= number < len(FINISH_NUMBERS)
                self.finish_reason = FINISH_NUMBERS[number] if known else str(number)
            if candidate.get("finishMessage"):
                self.finish_message = str(candidate["finishMessage"])
        return out

    def part(self, part: dict[str, Any]) -> list[Chunk]:
        self.skipped.unknown_keys("part", part, PART_KEYS)
        signature = part.get("thoughtSignature")
        out: list[Chunk] = []
        if isinstance(part.get("functionCall"), dict):
            out += self._close_current()
            call = part["functionCall"]
            call_id = str(call.get("id") or (f"{self.response_id}_call_{self.calls}" if self.response_id else f"call_{self.calls}"))
            self.calls += 1
            name = str(call.get("name") or "")
            arguments = compact_json(call.get("args") or {})
            index, started = self.blocks.start("tool-call", id=call_id, name=name, arguments=arguments)
            data = self.blocks.data(index)
            if call.get("id"):
                data["id"] = call["id"]
            if signature:
                data["thoughtSignature"] = signature
            return [*out, *started, tool_call_delta(index, call_id, arguments, name=name), *self.blocks.close(index)]
        if "text" in part:
            kind = "reasoning" if part.get("thought") else "text"
            text = str(part.get("text") or "")
            if not text and not signature and not self._joins(kind, signature):
                return out  # an empty part (``{"text": ""}`` beside the finish) opens no block
            index = self._block_for(kind, signature, out)
            if signature:
                self.blocks.data(index)["thoughtSignature"] = signature
            if text:
                self.blocks.open[index]["text"] += text
                out.append((reasoning_delta if kind == "reasoning" else text_delta)(index, text))
            if kind == "text":
                self.last_text = index
            return out
        if isinstance(part.get("inlineData"), dict) or isinstance(part.get("fileData"), dict):
            out += self._close_current()
            inline, stored = part.get("inlineData") or {}, part.get("fileData") or {}
            mime = str(inline.get("mimeType") or stored.get("mimeType") or "")
            url = f"data:{mime};base64,{inline.get('data', '')}" if inline else str(stored.get("fileUri") or "")
            index, started = self.blocks.start("image", url=url, mime_type=mime)
            if signature:
                self.blocks.data(index)["thoughtSignature"] = signature
            return [*out, *started, *self.blocks.close(index)]
        if any(key in part for key in ("executableCode", "codeExecutionResult")):
            out += self._close_current()
            index, started = self.blocks.start("text")
            self.blocks.data(index)["part"] = dict(part)
            return [*out, *started, *self.blocks.close(index)]
        return out

    def _joins(self, kind: str, signature: Any) -> bool:
        """Whether a text part of ``kind`` joins the open block (a signed part never joins)."""
        open_state = self.blocks.open.get(self.current) if self.current is not None else None
        return (
            open_state is not None
            and open_state["type"] == kind
            and not signature
            and not open_state.get("data", {}).get("thoughtSignature")
        )

    def _block_for(self, kind: str, signature: Any, out: list[Chunk]) -> int:
        """The open block a text part joins, or a new one."""
        if self.current is not None and self._joins(kind, signature):
            return self.current
        out += self._close_current()
        index, started = self.blocks.start("reasoning" if kind == "reasoning" else "text")
        out += started
        self.current = index
        return index

    def _close_current(self) -> list[Chunk]:
        if self.current is None or self.current not in self.blocks.open:
            return []
        index, self.current = self.current, None
        return self._close(index)

    def _close(self, index: int) -> list[Chunk]:
        if index == self.last_text and self.metadata and index in self.blocks.open:
            self.blocks.data(index).update(self.metadata)
        return self.blocks.close(index)

    def finish(self) -> FinishChunk:
        if self.error is not None:
            return self.error
        if self.finish_reason is None and self.block_reason is not None:
            reason = str(self.block_reason["blockReason"])
            message = str(self.block_reason.get("blockReasonMessage") or f"the prompt was blocked ({reason})")
            return finish("content-filter", message, raw=reason)
        chunk = finish_from(FINISH_REASONS, PLAIN_FINISH, self.finish_reason)
        if chunk["reason"]["kind"] == "stop" and self.finish_reason == "STOP" and self.blocks.tool_calls:
            return finish("tool-calls")  # Gemini says STOP after function calls too
        if self.finish_message:
            if chunk["reason"]["kind"] in ("error", "content-filter"):
                # what went wrong, in the API's words (``Malformed function call: ...``)
                chunk["reason"]["message"] = self.finish_message
            else:
                self.skipped.note("candidate.finishMessage")
        return chunk

    def end(self) -> list[Chunk]:
        if self.error is None and self.finish_reason is None and self.block_reason is None:
            raise truncated("a candidate's finishReason")
        if self.last_text in self.blocks.open and self.metadata:
            self.blocks.data(self.last_text).update(self.metadata)
        elif self.last_text is None:
            for key in self.metadata:  # no text block to carry it
                self.skipped.note(f"candidate.{key}")
        return closing(self.blocks, self.usage, self.finish())


def translate_response(data: Any, skipped: Skipped | None = None) -> list[Chunk]:
    """A whole ``generateContent`` response to the chunks its stream would have given."""
    translator = GeminiStreamTranslator(skipped)
    # streamGenerateContent without alt=sse answers with one JSON array of responses.
    items = data if isinstance(data, list) else [data]
    out = [chunk for item in items for chunk in translator.response(item)]
    if translator.finish_reason is None and translator.block_reason is None and translator.error is None:
        if not any(isinstance(item, dict) and item.get("candidates") for item in items):
            raise ValueError("a response with no candidate, finishReason, block reason or error")
        # A whole body is complete (a cut one is not JSON): a candidate without a finishReason
        # simply ended (older models, some proxies), it was not truncated.
        translator.finish_reason = "STOP"
    return out + translator.end()


# --------------------------------------------------------------------------- requests


def convert_contents(request: ModelRequest) -> list[dict[str, Any]]:
    """Kit messages to Gemini ``contents`` (roles ``user``/``model``; same-role turns merged, so
    every function response answers its call turn in one content, as the API requires)."""
    calls = {str(b.get("id", "")): b for m in request["messages"] for b in m["content"] if b.get("type") == "tool-call"}
    contents: list[dict[str, Any]] = []
    for message in request["messages"]:
        if message["role"] == "system":
            continue  # sent as systemInstruction
        role = "model" if message["role"] == "assistant" else "user"
        parts = [p for p in (_part(b, calls) for b in message["content"]) if p is not None]
        if not parts:
            continue
        if contents and contents[-1]["role"] == role:
            contents[-1]["parts"].extend(parts)
        else:
            contents.append({"role": role, "parts": parts})
    return contents


def _part(block: Any, calls: dict[str, Any]) -> dict[str, Any] | None:
    kind, mine = block["type"], provider_data(block, NAME)
    signature = mine.get("thoughtSignature")
    part: dict[str, Any] | None = None
    if isinstance(mine.get("part"), dict):
        return dict(mine["part"])
    if kind == "text" and (block["text"] or signature):
        part = {"text": block["text"]}
    elif kind == "reasoning" and signature:  # unsigned thoughts need not (and others' cannot) go back
        part = {"text": block["text"], "thought": True}
    elif kind == "tool-call":
        call: dict[str, Any] = {"name": block["name"], "args": parse_arguments(block["arguments"])}
        if mine.get("id"):
            call["id"] = mine["id"]
        part = {"functionCall": call}
    elif kind == "tool-result":
        text = text_of(block["content"])
        call = calls.get(block["tool_call_id"], {})
        answer: dict[str, Any] = {"name": str(call.get("name", "")), "response": {"error": text} if block["is_error"] else {"output": text}}
        if provider_data(call, NAME).get("id"):
            answer["id"] = block["tool_call_id"]  # Gemini gave the call an id: answer with it
        part = {"functionResponse": answer}
    elif kind == "image":
        url = str(block["url"])
        if url.startswith("data:") and ";base64," in url:
            mime, data = url[5:].split(";base64,", 1)
            part = {"inlineData": {"mimeType": mime or block.get("mime_type", ""), "data": data}}
        else:
            part = {"fileData": {"fileUri": url, "mimeType": block.get("mime_type", "")}}
    if part is not None and signature:
        part["thoughtSignature"] = signature
    return part


def model_in(url: str) -> tuple[str, str, bool]:
    """``(base_url, model, streaming)`` of a Gemini endpoint URL."""
    parts = urlsplit(url)
    path = parts.path
    head, _, tail = path.rpartition("/models/")
    model, _, method = tail.partition(":")
    return f"{parts.scheme}://{parts.netloc}{head}", unquote(model), method.startswith("streamGenerateContent")


class GeminiAdapter(ProviderAdapter):
    """Google Gemini API. Key from ``GEMINI_API_KEY`` when recording (sent as ``x-goog-api-key``).

    ``thinking_budget`` asks for thoughts (``thinkingConfig.includeThoughts``) with that budget.
    """

    name: ClassVar[str] = NAME
    path: ClassVar[str] = ":generateContent"
    default_base_url: ClassVar[str] = "https://generativelanguage.googleapis.com/v1beta"
    api_key_env: ClassVar[str] = "GEMINI_API_KEY"

    def __init__(self, *, thinking_budget: int | None = None, **options: Any) -> None:
        super().__init__(**options)
        self.thinking_budget = thinking_budget

    @classmethod
    def matches(cls, url: str) -> bool:
        path = urlsplit(url).path.rstrip("/")
        return "/models/" in path and path.endswith((":generateContent", ":streamGenerateContent"))

    @classmethod
    def replay_settings(cls, url: str, request_json: Mapping[str, Any] | None, is_stream: bool) -> dict[str, Any]:
        base, model, streaming = model_in(url)
        return {"base_url": base, "stream": streaming, "model": model}

    @property
    def url(self) -> str:
        return f"{self.base_url}/models/{{model}}:{'streamGenerateContent?alt=sse' if self.streaming else 'generateContent'}"

    def endpoint(self, request: ModelRequest) -> str:
        method = "streamGenerateContent?alt=sse" if self.streaming else "generateContent"
        return f"{self.base_url}/models/{quote(self.model_name(request), safe='')}:{method}"

    def build_body(self, request: ModelRequest) -> dict[str, Any]:
        body: dict[str, Any] = {"contents": convert_contents(request)}
        system = "\n\n".join(p for p in [request.get("system") or ""] + [text_of(m["content"]) for m in request["messages"] if m["role"] == "system"] if p)
        if system:
            body["systemInstruction"] = {"parts": [{"text": system}]}
        if request.get("tools"):
            body["tools"] = [{"functionDeclarations": [
                {"name": t["name"], "description": t["description"], "parameters": t["input_schema"]} for t in request["tools"]
            ]}]
        config: dict[str, Any] = {}
        if self.max_tokens is not None:
            config["maxOutputTokens"] = self.max_tokens
        if self.thinking_budget is not None:
            config["thinkingConfig"] = {"includeThoughts": True, "thinkingBudget": self.thinking_budget}
        if config:
            body["generationConfig"] = config
        return body

    def auth_headers(self) -> dict[str, str]:
        return {"x-goog-api-key": self.api_key} if self.api_key else {}

    def translator(self) -> GeminiStreamTranslator:
        return GeminiStreamTranslator()

    def translate_response(self, data: Any, skipped: Skipped) -> list[Chunk]:
        return translate_response(data, skipped)
