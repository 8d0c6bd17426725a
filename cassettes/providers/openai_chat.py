"""OpenAI-compatible chat completions (``POST {base}/chat/completions``), streaming and not.

Streaming: ``data:`` chunks with ``choices[0].delta``, ``finish_reason`` on the last choice chunk,
usage in a final chunk (``stream_options.include_usage``), then ``data: [DONE]``. Only choice 0 is
read (the loop asks for one completion). What the compatible providers add is read too:

- text in ``delta.content``, a string, or (Mistral) a list of ``text`` / ``thinking`` parts;
- reasoning in ``delta.reasoning_content`` (DeepSeek, Qwen, Z.AI, vLLM) or ``delta.reasoning``
  (OpenRouter, Groq, Ollama), and OpenRouter's structured ``delta.reasoning_details`` (merged by
  index, kept in ``provider_data`` and sent back);
- refusals in ``delta.refusal`` (a text block marked ``{"refusal": true}``, finish ``refusal``);
- usage in ``usage`` or Groq's ``x_groq.usage``; DeepSeek's ``prompt_cache_hit_tokens``;
- an error object mid-stream (OpenRouter sends one after a finish, with usage): it wins.

On the request side an assistant message carries back ``reasoning_content`` when it has tool calls
(DeepSeek requires it in a thinking-plus-tools conversation), ``reasoning_details`` when the
provider sent some (OpenRouter), and ``refusal`` for a refusal block.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar

from reference_loop.protocols import ModelRequest
from reference_loop.vocabulary import (
    Chunk,
    FinishChunk,
    Message,
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
    error_code,
    finish_from,
    provider_data,
    refusal_finish,
    text_of,
    truncated,
)

NAME = "openai-chat"
FINISH_REASONS: dict[str, str] = {
    "stop": "stop",
    "eos": "stop",  # Together, TGI
    "eos_token": "stop",
    "stop_sequence": "stop",
    "end_turn": "stop",
    "tool_calls": "tool-calls",
    "function_call": "tool-calls",
    "tool_use": "tool-calls",
    "length": "max-tokens",
    "max_tokens": "max-tokens",
    "model_length": "max-tokens",  # Mistral: the context window was reached
    "model_context_window_exceeded": "max-tokens",
    "content_filter": "content-filter",
    "sensitive": "content-filter",  # Z.AI
    "error": "error",  # OpenRouter, Mistral
    "network_error": "error",  # Z.AI
    "insufficient_system_resource": "error",  # DeepSeek: generation interrupted
    "abort": "error",  # vLLM
}
PLAIN_FINISH = frozenset({"stop", "tool_calls", "function_call", "length"})

# Chunk, choice and delta fields that carry no model output (ids, timings, padding): not reported.
CHUNK_KEYS = frozenset({"id", "object", "created", "model", "system_fingerprint", "service_tier", "provider", "obfuscation",
                        "prompt_filter_results", "choices", "usage", "x_groq", "error", "native_finish_reason", "request_id",
                        "kv_transfer_params", "prompt_logprobs", "nvext", "metadata", "seed",
                        "time_info", "moderation", "latency_checkpoint", "usage_breakdown"})
# (Cerebras' timings, OpenAI's moderation verdicts, Azure's latency marks, Groq's usage split)
CHOICE_KEYS = frozenset({"index", "delta", "message", "finish_reason", "native_finish_reason", "logprobs", "stop_reason",
                         "matched_stop", "content_filter_results", "error", "text_offset", "seed", "token_ids", "usage", "text",
                         "obfuscation"})  # Bedrock's OpenAI-compatible endpoint pads each choice
DELTA_KEYS = frozenset({"role", "content", "reasoning_content", "reasoning", "reasoning_details", "refusal", "tool_calls",
                        "function_call", "annotations", "executed_tools", "name", "tool_call_id", "metadata", "prefix", "token_id", "token_ids"})


def finish_kind(reason: str | None) -> str:
    """The kit kind of a chat finish string (``stop`` for an unknown one)."""
    return str(finish_from(FINISH_REASONS, PLAIN_FINISH, reason)["reason"]["kind"])


def parse_usage(raw: Any) -> Usage | None:
    """Chat usage (also DeepSeek's cache counts and OpenRouter's cache writes)."""
    if not isinstance(raw, dict):
        return None
    prompt = as_int(raw.get("prompt_tokens", raw.get("input_tokens")))
    if prompt is None:
        return None
    usage: Usage = {"input_tokens": prompt, "output_tokens": as_int(raw.get("completion_tokens", raw.get("output_tokens"))) or 0}
    prompt_details: dict[str, Any] = raw["prompt_tokens_details"] if isinstance(raw.get("prompt_tokens_details"), dict) else {}
    cached = as_int(prompt_details.get("cached_tokens"))
    if cached is None:
        cached = as_int(raw.get("prompt_cache_hit_tokens"))  # DeepSeek
    if cached is not None:
        usage["cache_read_tokens"] = cached
    written = as_int(prompt_details.get("cache_write_tokens"))
    if written is not None:
        usage["cache_write_tokens"] = written
    completion_details: dict[str, Any] = raw["completion_tokens_details"] if isinstance(raw.get("completion_tokens_details"), dict) else {}
    reasoning = as_int(completion_details.get("reasoning_tokens"))
    if reasoning is not None:
        usage["reasoning_tokens"] = reasoning
    return usage


def convert_messages(request: ModelRequest) -> list[dict[str, Any]]:
    """Kit messages to chat-completions messages (tool results become ``role: tool`` messages)."""
    out: list[dict[str, Any]] = []
    if request.get("system"):
        out.append({"role": "system", "content": request["system"]})
    for message in request["messages"]:
        out.extend(_convert(message))
    return out


def _convert(message: Message) -> list[dict[str, Any]]:
    role, blocks = message["role"], message["content"]
    if role == "assistant":
        return [_assistant(blocks)]
    out: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    for b in blocks:
        if b["type"] == "tool-result":
            out.append({"role": "tool", "tool_call_id": b["tool_call_id"], "content": text_of(b["content"])})
        elif b["type"] == "text" and b["text"]:
            parts.append({"type": "text", "text": b["text"]})
        elif b["type"] == "image":
            parts.append({"type": "image_url", "image_url": {"url": b["url"]}})
    if parts:
        simple = all(p["type"] == "text" for p in parts)
        out.append({"role": role, "content": "".join(p["text"] for p in parts) if simple else parts})
    return out


def _assistant(blocks: list[Any]) -> dict[str, Any]:
    texts = [b for b in blocks if b["type"] == "text"]
    refusal = "".join(b["text"] for b in texts if provider_data(b, NAME).get("refusal"))
    content = "".join(b["text"] for b in texts if not provider_data(b, NAME).get("refusal"))
    entry: dict[str, Any] = {"role": "assistant", "content": content or None}
    if refusal:
        entry["refusal"] = refusal
    calls = [
        {"id": b["id"], "type": "custom", "custom": {"name": b["name"], "input": b["arguments"]}}
        if provider_data(b, NAME).get("custom") else
        {"id": b["id"], "type": "function", "function": {"name": b["name"], "arguments": b["arguments"]}}
        for b in blocks
        if b["type"] == "tool-call"
    ]
    thoughts = [b for b in blocks if b["type"] == "reasoning"]
    if calls:
        entry["tool_calls"] = calls
        # DeepSeek: in thinking mode a tool-call message must carry its reasoning back. Reasoning
        # another provider signed (its provider_data is not ours) is not this API's to replay.
        sent = "".join(b["text"] for b in thoughts if not _foreign(b))
        if sent:
            entry["reasoning_content"] = sent
    details = [d for b in thoughts for d in provider_data(b, NAME).get("reasoning_details") or []]
    if details:
        entry["reasoning_details"] = details  # OpenRouter: signatures and encrypted reasoning
    return entry


def _foreign(block: Any) -> bool:
    data = block.get("provider_data")
    return isinstance(data, dict) and any(key != NAME for key in data)


def _merge_detail(details: list[dict[str, Any]], fragment: dict[str, Any], position: int) -> None:
    """Fold one streamed ``reasoning_details`` fragment into the list (same index+type: append)."""
    key = (fragment.get("index", position), fragment.get("type"))
    for item in details:
        if (item.get("index", position), item.get("type")) == key:
            for name, value in fragment.items():
                if name in ("text", "summary", "data") and isinstance(value, str) and isinstance(item.get(name), str):
                    item[name] += value
                elif value is not None:
                    item[name] = value
            return
    details.append(dict(fragment))


def _detail_text(fragment: dict[str, Any]) -> str:
    value = fragment.get("text") if fragment.get("type") == "reasoning.text" else fragment.get("summary")
    return value if isinstance(value, str) else ""


class ChatStreamTranslator:
    """Chat-completions SSE chunks to kit chunks."""

    def __init__(self, skipped: Skipped | None = None) -> None:
        self.blocks = BlockBuilder(NAME)
        self.skipped = skipped if skipped is not None else Skipped()
        self.text_index: int | None = None
        self.refusal_index: int | None = None
        self.reasoning_index: int | None = None
        self.calls: dict[Any, tuple[int, str]] = {}  # provider tool index -> (kit index, call id)
        self.finish_reason: str | None = None
        self.usage: Usage | None = None
        self.error: FinishChunk | None = None
        self.refusal = ""
        self._done = False

    @property
    def done(self) -> bool:
        return self._done

    def feed(self, event: SSEEvent) -> list[Chunk]:
        if self._done:
            return []
        if event.data.strip() == "[DONE]":
            self._done = True
            return []
        data = json.loads(event.data)
        if not isinstance(data, dict):
            raise ValueError("a chunk is not a JSON object")
        self.skipped.unknown_keys("chunk", data, CHUNK_KEYS)
        usage = parse_usage(data.get("usage")) or parse_usage((data.get("x_groq") or {}).get("usage"))
        out: list[Chunk] = []
        for choice in data.get("choices") or []:
            if choice.get("index", 0) != 0:
                continue
            self.skipped.unknown_keys("choice", choice, CHOICE_KEYS)
            usage = usage or parse_usage(choice.get("usage"))  # Moonshot puts it in the choice
            delta = choice.get("delta") or {}
            if isinstance(choice.get("text"), str) and not delta.get("content"):
                delta = {**delta, "content": choice["text"]}  # the completions-style copy, when it is the only one
            out.extend(self.delta(delta))
            if choice.get("finish_reason"):
                self.finish_reason = choice["finish_reason"]
                out.extend(self.blocks.close_all())
        if usage is not None:
            self.usage = usage
        if isinstance(data.get("error"), dict):  # a mid-stream error object: it ends the stream
            err = data["error"]
            self.error = finish("error", str(err.get("message") or "stream error"), error_code(err) or "error")
            self._done = True
            out.extend(self.blocks.close_all())
        return out

    def delta(self, delta: dict[str, Any]) -> list[Chunk]:
        """One ``delta`` (or a whole ``message``, which has the same fields) to chunks."""
        self.skipped.unknown_keys("delta", delta, DELTA_KEYS)
        out: list[Chunk] = []
        # Providers send one or the other (never the same text twice): the first present wins.
        thought = delta.get("reasoning_content") or delta.get("reasoning")
        details: list[Any] = delta["reasoning_details"] if isinstance(delta.get("reasoning_details"), list) else []
        if not (isinstance(thought, str) and thought) and details:
            thought = "".join(_detail_text(d) for d in details if isinstance(d, dict))
        if (isinstance(thought, str) and thought) or details:
            out += self._reasoning(str(thought or ""), details)
        content = delta.get("content")
        if isinstance(content, list):
            out += self._parts(content)
        elif isinstance(content, str) and content:
            out += self._text(content)
        if isinstance(delta.get("refusal"), str) and delta["refusal"]:
            out += self._refusal(delta["refusal"])
        for key in ("annotations", "executed_tools"):  # web-search citations; Groq's server-run tools
            if isinstance(delta.get(key), list) and delta[key]:
                index = self._text_block(out)
                self.blocks.data(index).setdefault(key, []).extend(delta[key])
        for position, call in enumerate(delta.get("tool_calls") or []):
            out.extend(self._tool_call(call.get("index", position), call))
        if isinstance(delta.get("function_call"), dict):  # the legacy single-function form
            out.extend(self._tool_call("function_call", {"function": delta["function_call"]}))
        return out

    def _reasoning(self, text: str, details: list[Any]) -> list[Chunk]:
        out: list[Chunk] = []
        if self.reasoning_index not in self.blocks.open:  # none yet, or closed by later content
            self.reasoning_index, started = self.blocks.start("reasoning")
            out.extend(started)
        assert self.reasoning_index is not None
        if details:
            merged = self.blocks.data(self.reasoning_index).setdefault("reasoning_details", [])
            for position, fragment in enumerate(details):
                if isinstance(fragment, dict):
                    _merge_detail(merged, fragment, position)
        if text:
            self.blocks.open[self.reasoning_index]["text"] += text
            out.append(reasoning_delta(self.reasoning_index, text))
        return out

    def _parts(self, parts: list[Any]) -> list[Chunk]:
        """Mistral's list-valued content: ``text`` and ``thinking`` parts (others reported)."""
        out: list[Chunk] = []
        for part in parts:
            if not isinstance(part, dict):
                continue
            kind = part.get("type")
            if kind == "text" and part.get("text"):
                out += self._text(str(part["text"]))
            elif kind == "thinking":
                inner = part.get("thinking")
                text = "".join(str(p.get("text", "")) for p in inner if isinstance(p, dict)) if isinstance(inner, list) else str(inner or "")
                if text:
                    out += self._reasoning(text, [])
            elif kind == "reference":
                index = self._text_block(out)
                self.blocks.data(index).setdefault("references", []).append(part)
            elif kind != "text":
                self.skipped.note(f"delta.content[].type={kind}")
        return out

    def _text_block(self, out: list[Chunk]) -> int:
        if self.text_index not in self.blocks.open:
            if self.reasoning_index is not None:
                out.extend(self.blocks.close(self.reasoning_index))
            self.text_index, started = self.blocks.start("text")
            out.extend(started)
        assert self.text_index is not None
        return self.text_index

    def _text(self, content: str) -> list[Chunk]:
        out: list[Chunk] = []
        index = self._text_block(out)
        self.blocks.open[index]["text"] += content
        out.append(text_delta(index, content))
        return out

    def _refusal(self, text: str) -> list[Chunk]:
        out: list[Chunk] = []
        if self.refusal_index not in self.blocks.open:
            for index in (self.reasoning_index, self.text_index):
                if index is not None:
                    out.extend(self.blocks.close(index))
            self.refusal_index, started = self.blocks.start("text")
            out.extend(started)
            self.blocks.data(self.refusal_index)["refusal"] = True
        assert self.refusal_index is not None
        self.blocks.open[self.refusal_index]["text"] += text
        self.refusal += text
        out.append(text_delta(self.refusal_index, text))
        return out

    def _tool_call(self, key: Any, call: dict[str, Any]) -> list[Chunk]:
        out: list[Chunk] = []
        custom = call.get("custom") if isinstance(call.get("custom"), dict) else None
        # a custom tool's call (GPT-5's free-form tools) carries its name and raw input text
        function = {"name": custom.get("name"), "arguments": custom.get("input")} if custom is not None else call.get("function") or {}
        fragment = function.get("arguments") or ""
        if not isinstance(fragment, str):  # some servers send the arguments whole, as an object
            fragment = json.dumps(fragment, separators=(",", ":"))
        if key not in self.calls:
            # Text (and reasoning) never resume once calls begin: close them so blocks stay ordered.
            for index in (self.reasoning_index, self.text_index, self.refusal_index):
                if index is not None:
                    out.extend(self.blocks.close(index))
            call_id, name = call.get("id") or f"call_{key}", function.get("name") or ""
            index, started = self.blocks.start("tool-call", id=call_id, name=name)
            if custom is not None or call.get("type") == "custom":
                self.blocks.data(index)["custom"] = True  # sent back as a custom call
            self.calls[key] = (index, call_id)
            self.blocks.open[index]["arguments"] += fragment
            out.extend(started)
            out.append(tool_call_delta(index, call_id, fragment, name=name))
            return out
        index, call_id = self.calls[key]
        if fragment and index in self.blocks.open:
            self.blocks.open[index]["arguments"] += fragment
            out.append(tool_call_delta(index, call_id, fragment))
        return out

    def finish(self) -> FinishChunk:
        if self.error is not None:
            return self.error
        if self.finish_reason is None and self.calls:
            return finish("tool-calls")  # a host that ends with [DONE] and no finish_reason after calls
        reason = finish_from(FINISH_REASONS, PLAIN_FINISH, self.finish_reason)
        if self.refusal and reason["reason"]["kind"] == "stop":
            return refusal_finish(self.refusal, raw=self.finish_reason if self.finish_reason not in (None, "stop") else None)
        return reason

    def end(self) -> list[Chunk]:
        if not self._done and self.finish_reason is None:
            raise truncated("its finish_reason and data: [DONE]")
        return closing(self.blocks, self.usage, self.finish())


def translate_completion(data: dict[str, Any], skipped: Skipped | None = None) -> list[Chunk]:
    """A whole (non-streaming) chat completion to the same chunks a stream would give."""
    translator = ChatStreamTranslator(skipped)
    translator.skipped.unknown_keys("chunk", data, CHUNK_KEYS)
    choice = (data.get("choices") or [{}])[0]
    translator.skipped.unknown_keys("choice", choice, CHOICE_KEYS)
    message = dict(choice.get("message") or {})
    calls = message.pop("tool_calls", None) or []
    out = translator.delta(message)
    for position, call in enumerate(calls):
        out += translator.delta({"tool_calls": [{**call, "index": position}]})
    translator.finish_reason = choice.get("finish_reason") or "stop"
    translator.usage = parse_usage(data.get("usage")) or parse_usage((data.get("x_groq") or {}).get("usage"))
    translator._done = True
    return out + translator.end()


class OpenAIChatAdapter(ProviderAdapter):
    """OpenAI (or compatible) chat completions. Key from ``OPENAI_API_KEY`` when recording."""

    name: ClassVar[str] = NAME
    path: ClassVar[str] = "/chat/completions"
    response_keys: ClassVar[tuple[str, ...]] = ("choices",)
    default_base_url: ClassVar[str] = "https://api.openai.com/v1"
    api_key_env: ClassVar[str] = "OPENAI_API_KEY"

    def build_body(self, request: ModelRequest) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model_name(request), "messages": convert_messages(request)}
        if request.get("tools"):
            body["tools"] = [
                {"type": "function", "function": {"name": t["name"], "description": t["description"], "parameters": t["input_schema"]}}
                for t in request["tools"]
            ]
        if self.max_tokens is not None:
            body["max_tokens"] = self.max_tokens
        if self.streaming:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        return body

    def auth_headers(self) -> dict[str, str]:
        return {"authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def translator(self) -> ChatStreamTranslator:
        return ChatStreamTranslator()

    def translate_response(self, data: Any, skipped: Skipped) -> list[Chunk]:
        return translate_completion(data, skipped)
