"""A local HTTP server (127.0.0.1 only) speaking the providers' documented wire formats.

No provider is reachable from CI, so the cassettes shipped in ``cassettes/llm/`` are recorded
through the adapters against this server, and the tests use it to exercise recording and round
trips. It serves, streaming or not:

- ``POST .../chat/completions`` (OpenAI chat; ``stream`` in the body),
- ``.../messages`` (Anthropic), ``.../responses`` (OpenAI Responses),
- ``.../models/{model}:generateContent`` and ``:streamGenerateContent?alt=sse`` (Gemini),
- ``.../model/{model}/converse`` and ``/converse-stream`` (Bedrock; binary event-stream frames),
- ``.../model/anthropic.{model}/invoke`` and ``/invoke-with-response-stream`` (Anthropic on Bedrock's
  InvokeModel: Anthropic's events, base64 inside event-stream ``chunk`` frames; AWS errors),
- ``.../interactions`` (Gemini's Interactions API; ``stream`` in the body; Google's errors).

Events are written one per write, ``delay`` seconds apart. The model name (in the body, or in the
URL for Gemini and Bedrock) picks the scenario: ``text`` (default), ``tools`` (text then two tool
calls, arguments in fragments), ``thinking`` (reasoning then text), ``max-tokens``, ``error-404``,
``error-401``, ``rate-limit`` (429), ``stream-error`` (an error inside the stream), ``truncated``
(the stream stops mid-response), and two for round trips:

- ``thinking-tools``: signed reasoning (plus redacted reasoning where the API has it) and a tool
  call. The follow-up request (it holds the tool's result) is **rejected, as the real provider
  rejects it, unless it sends back what the provider requires**: DeepSeek-style
  ``reasoning_content`` on the tool-call message (chat), the thinking block with its signature
  and the redacted block first in the assistant turn (Anthropic, Bedrock), the reasoning item with
  its ``encrypted_content`` before the function call (Responses), the ``thoughtSignature`` on the
  function-call part (Gemini, in either base64 alphabet), the thought steps with their signatures
  (the redacted one a signature alone) before the signed function call (Interactions). Then it
  answers with text.
- ``server-tools``: Anthropic's server-run web search (``server_tool_use``, its result block,
  text with ``citations_delta``); chat's OpenRouter-style ``reasoning_details``; Responses'
  ``web_search_call`` item; the Interactions API's ``google_search_call`` and
  ``google_search_result`` steps. A follow-up must send them back unchanged.

Every request's headers and body are kept in ``server.requests`` so tests can check what was sent.
"""

from __future__ import annotations

import base64
import json
import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, quote, unquote

from reference_loop.protocols import ToolSchema

from .eventstream import EVENTSTREAM_CONTENT_TYPE, encode_frame

CREATED = 1_700_000_000  # fixed, so recordings are stable
TEXT = "Hello from the loopkit test server."
ANSWER = "It is sunny in Paris."
WEATHER_TOOL: ToolSchema = {
    "name": "get_weather",
    "description": "Current weather for a city.",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}, "unit": {"type": "string"}}, "required": ["city"]},
}
THOUGHT = "The user wants the weather in Paris: call the tool."
SIGNATURE = "c2lnbmF0dXJl"  # what the thinking scenario signs with (Anthropic's stream)
ROUND_TRIP_SIGNATURE = base64.b64encode(b"\xfb\xff\xfe loopkit signed this thought \xfb\xef").decode()  # has + and /
REDACTED = base64.b64encode(b"loopkit redacted reasoning").decode()
ENCRYPTED = "gAAAAB-loopkit-encrypted-reasoning=="
REASONING_DETAILS = [
    {"type": "reasoning.text", "text": THOUGHT, "signature": ROUND_TRIP_SIGNATURE, "format": "anthropic-claude-v1", "index": 0},
    {"type": "reasoning.encrypted", "data": REDACTED, "format": "anthropic-claude-v1", "index": 1},
]
SEARCH_USE = {"type": "server_tool_use", "id": "srvtoolu_lk_1", "name": "web_search", "input": {"query": "weather Paris"}}
SEARCH_RESULT = {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_lk_1", "content": [
    {"type": "web_search_result", "url": "https://weather.example/paris", "title": "Paris weather", "encrypted_content": "EqgfCioIARgBIiQ3", "page_age": None}]}
CITATION = {"type": "web_search_result_location", "url": "https://weather.example/paris", "title": "Paris weather",
            "encrypted_index": "Eo8BCioIAhgBIiQ", "cited_text": "Sunny, 21 degrees"}
SEARCH_CALL = {"type": "web_search_call", "id": "ws_lk_0", "status": "completed", "action": {"type": "search", "query": "weather Paris"}}


SCENARIOS = ("text", "tools", "thinking", "thinking-tools", "server-tools", "max-tokens", "error-404", "error-401", "rate-limit",
             "stream-error", "truncated", "echo-key")
"""The model names the server answers (anything else is refused by ``cassette record --test-server``)."""


@dataclass
class Plan:
    """What the model "says": parts in order, how it stops, token counts."""

    parts: list[tuple[Any, ...]]  # ("text", s) | ("reasoning", s, signature) | ("redacted", data) | ("call", id, name, arguments)
    stop: str = "stop"  # stop | tool | length
    usage: tuple[int, int] = (12, 9)
    error: tuple[int, str, str] | None = None  # HTTP status, code, message
    stream_error: bool = False
    truncated: bool = False
    extra: str = ""  # server-tools: the API's server-run tool content
    piece: int = 0  # text in pieces of this many characters (0: a word per piece)
    charset: str = "utf-8"  # of whole JSON answers


def plan_for(model: str) -> Plan:
    if model == "tools":
        return Plan(
            [("text", "Let me check both cities."), ("call", "call_lk_1", "get_weather", '{"city": "Paris"}'), ("call", "call_lk_2", "get_weather", '{"city": "Tokyo", "unit": "c"}')],
            stop="tool",
            usage=(40, 31),
        )
    if model == "thinking":
        return Plan([("reasoning", "The user greets me; answer briefly.", SIGNATURE), ("text", TEXT)], usage=(15, 22))
    if model == "thinking-tools":
        return Plan([("reasoning", THOUGHT, ROUND_TRIP_SIGNATURE), ("redacted", REDACTED), ("call", "call_lk_1", "get_weather", '{"city": "Paris"}')],
                    stop="tool", usage=(30, 25))
    if model == "server-tools":
        return Plan([("reasoning", THOUGHT, ROUND_TRIP_SIGNATURE), ("text", "Sunny, 21 degrees in Paris.")], usage=(50, 20), extra="search")
    if model == "max-tokens":
        return Plan([("text", "Here is a very long answer that the token limit cuts")], stop="length", usage=(10, 10))
    if model == "error-404":
        return Plan([], error=(404, "model_not_found", f"The model `{model}` does not exist"))
    if model == "error-401":
        return Plan([], error=(401, "invalid_api_key", "Incorrect API key provided"))
    if model == "rate-limit":
        return Plan([], error=(429, "rate_limit_exceeded", "Rate limit reached, retry later"))
    if model == "stream-error":
        return Plan([("text", TEXT)], stream_error=True)
    if model == "truncated":
        return Plan([("text", TEXT)], truncated=True)
    return Plan([("text", TEXT)])


def _pieces(text: str, size: int = 0) -> list[str]:
    if size:
        return [text[i : i + size] for i in range(0, len(text), size)]
    return re.findall(r"\S+\s*|\s+", text) or [""]


def _finish(plan: Plan, names: dict[str, str]) -> str:
    return names[plan.stop]


def _parts(plan: Plan, *kinds: str) -> list[tuple[Any, ...]]:
    return [p for p in plan.parts if p[0] in kinds]


# --------------------------------------------------------------------------- OpenAI chat


def chat_events(plan: Plan, model: str) -> list[str]:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> str:
        body = {"id": "chatcmpl-lk", "object": "chat.completion.chunk", "created": CREATED, "model": model,
                "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}
        return "data: " + json.dumps(body) + "\n\n"

    out = [chunk({"role": "assistant", "content": ""})]
    call_no = 0
    for part in plan.parts:
        if part[0] == "reasoning" and plan.extra:  # OpenRouter: reasoning plus structured details
            out += [chunk({"reasoning": p, "reasoning_details": [{**REASONING_DETAILS[0], "text": p, "signature": None}]}) for p in _pieces(part[1])]
            out.append(chunk({"reasoning_details": [{"type": "reasoning.text", "text": "", "signature": ROUND_TRIP_SIGNATURE, "index": 0}, REASONING_DETAILS[1]]}))
        elif part[0] == "reasoning":
            out += [chunk({"reasoning_content": p}) for p in _pieces(part[1])]
        elif part[0] == "text":
            out += [chunk({"content": p}) for p in _pieces(part[1], plan.piece)]
        elif part[0] == "call":
            _, call_id, name, arguments = part
            head = {"index": call_no, "id": call_id, "type": "function", "function": {"name": name, "arguments": ""}}
            out.append(chunk({"tool_calls": [head]}))
            out += [chunk({"tool_calls": [{"index": call_no, "function": {"arguments": p}}]}) for p in _pieces(arguments, 6)]
            call_no += 1
    if plan.stream_error:
        return [*out, "data: " + json.dumps({"error": {"message": "The server had an error", "type": "server_error", "code": "server_error"}}) + "\n\n"]
    out.append(chunk({}, _finish(plan, {"stop": "stop", "tool": "tool_calls", "length": "length"})))
    usage = {"prompt_tokens": plan.usage[0], "completion_tokens": plan.usage[1], "total_tokens": sum(plan.usage)}
    out.append("data: " + json.dumps({"id": "chatcmpl-lk", "object": "chat.completion.chunk", "created": CREATED, "model": model, "choices": [], "usage": usage}) + "\n\n")
    return [*out, "data: [DONE]\n\n"]


def chat_body(plan: Plan, model: str) -> dict[str, Any]:
    text = "".join(p[1] for p in _parts(plan, "text"))
    message: dict[str, Any] = {"role": "assistant", "content": text or None}
    thought = "".join(p[1] for p in _parts(plan, "reasoning"))
    if thought:
        message["reasoning_content"] = thought
    calls = [{"id": p[1], "type": "function", "function": {"name": p[2], "arguments": p[3]}} for p in _parts(plan, "call")]
    if calls:
        message["tool_calls"] = calls
    usage = {"prompt_tokens": plan.usage[0], "completion_tokens": plan.usage[1], "total_tokens": sum(plan.usage)}
    return {"id": "chatcmpl-lk", "object": "chat.completion", "created": CREATED, "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": _finish(plan, {"stop": "stop", "tool": "tool_calls", "length": "length"})}], "usage": usage}


def chat_check(request: dict[str, Any], model: str) -> str | None:
    """DeepSeek: a thinking-mode tool-call message must carry its ``reasoning_content`` back;
    OpenRouter: ``reasoning_details`` come back as they were sent."""
    for n, message in enumerate(request.get("messages") or []):
        if message.get("role") != "assistant" or not message.get("tool_calls"):
            continue
        if model == "thinking-tools" and message.get("reasoning_content") != THOUGHT:
            return f"Missing `reasoning_content` field in the assistant message at message index {n}"
    if model == "server-tools":
        sent = [d for m in request.get("messages") or [] if m.get("role") == "assistant" for d in m.get("reasoning_details") or []]
        if sent != REASONING_DETAILS:
            return "reasoning_details were not returned as received (the signature and the encrypted reasoning are required)"
    return None


# --------------------------------------------------------------------------- Anthropic


def _sse(name: str, data: dict[str, Any]) -> str:
    return f"event: {name}\ndata: {json.dumps(data)}\n\n"


def _anthropic_blocks(plan: Plan) -> list[tuple[dict[str, Any], list[dict[str, Any]]]]:
    """(content_block_start block, its deltas) per block, server-tools extras included."""
    blocks: list[tuple[dict[str, Any], list[dict[str, Any]]]] = []
    for part in plan.parts:
        deltas: list[dict[str, Any]]
        if part[0] == "call":
            blocks.append(({"type": "tool_use", "id": part[1], "name": part[2], "input": {}},
                           [{"type": "input_json_delta", "partial_json": p} for p in ["", *_pieces(part[3], 6)]]))
        elif part[0] == "reasoning":
            deltas = [{"type": "thinking_delta", "thinking": p} for p in _pieces(part[1])]
            blocks.append(({"type": "thinking", "thinking": "", "signature": ""}, [*deltas, {"type": "signature_delta", "signature": part[2]}]))
        elif part[0] == "redacted":
            blocks.append(({"type": "redacted_thinking", "data": part[1]}, []))
        else:
            if plan.extra:
                query = json.dumps(SEARCH_USE["input"])
                blocks.append(({**SEARCH_USE, "input": {}}, [{"type": "input_json_delta", "partial_json": p} for p in _pieces(query, 7)]))
                blocks.append((SEARCH_RESULT, []))
            deltas = [{"type": "text_delta", "text": p} for p in _pieces(part[1], plan.piece)]
            if plan.extra:
                deltas.insert(0, {"type": "citations_delta", "citation": CITATION})
            blocks.append(({"type": "text", "text": ""}, deltas))
    return blocks


def anthropic_stream(plan: Plan, model: str) -> list[dict[str, Any]]:
    """Anthropic's stream events, each named by its ``type`` (SSE and Bedrock frame them alike)."""
    message: dict[str, Any] = {"id": "msg_lk", "type": "message", "role": "assistant", "content": [], "model": model,
               "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": plan.usage[0], "output_tokens": 1}}
    out: list[dict[str, Any]] = [{"type": "message_start", "message": message}]
    for index, (block, deltas) in enumerate(_anthropic_blocks(plan)):
        out.append({"type": "content_block_start", "index": index, "content_block": block})
        if index == 0:
            out.append({"type": "ping"})
        out += [{"type": "content_block_delta", "index": index, "delta": d} for d in deltas]
        if plan.stream_error:
            return [*out, {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}]
        out.append({"type": "content_block_stop", "index": index})
    stop = _finish(plan, {"stop": "end_turn", "tool": "tool_use", "length": "max_tokens"})
    out.append({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None}, "usage": {"output_tokens": plan.usage[1]}})
    return [*out, {"type": "message_stop"}]


def anthropic_events(plan: Plan, model: str) -> list[str]:
    return [_sse(event["type"], event) for event in anthropic_stream(plan, model)]


def anthropic_body(plan: Plan, model: str) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    for block, deltas in _anthropic_blocks(plan):
        whole = dict(block)
        for delta in deltas:
            if delta["type"] == "text_delta":
                whole["text"] += delta["text"]
            elif delta["type"] == "thinking_delta":
                whole["thinking"] += delta["thinking"]
            elif delta["type"] == "signature_delta":
                whole["signature"] = delta["signature"]
            elif delta["type"] == "citations_delta":
                whole.setdefault("citations", []).append(delta["citation"])
            elif delta["type"] == "input_json_delta":
                whole["_json"] = whole.get("_json", "") + delta["partial_json"]
        if "_json" in whole:
            whole["input"] = json.loads(whole.pop("_json") or "{}")
        content.append(whole)
    stop = _finish(plan, {"stop": "end_turn", "tool": "tool_use", "length": "max_tokens"})
    return {"id": "msg_lk", "type": "message", "role": "assistant", "model": model, "content": content,
            "stop_reason": stop, "stop_sequence": None, "usage": {"input_tokens": plan.usage[0], "output_tokens": plan.usage[1]}}


def anthropic_check(request: dict[str, Any], model: str) -> str | None:
    """With thinking on, the assistant turn before a tool result starts with its thinking blocks,
    sent back unmodified (signature and redacted data); server tool blocks come back whole."""
    for n, message in enumerate(request.get("messages") or []):
        content = message.get("content")
        if message.get("role") != "assistant" or not isinstance(content, list):
            continue
        if model == "thinking-tools" and any(b.get("type") == "tool_use" for b in content):
            first = content[0] if content else {}
            if first.get("type") not in ("thinking", "redacted_thinking"):
                return (f"messages.{n}.content.0.type: Expected `thinking` or `redacted_thinking`, but found `{first.get('type')}`. "
                        "When `thinking` is enabled, a final `assistant` message must start with a thinking block.")
            if first.get("signature") != ROUND_TRIP_SIGNATURE or first.get("thinking") != THOUGHT:
                return f"messages.{n}.content.0: Invalid `signature` in `thinking` block"
            if content[1:2] != [{"type": "redacted_thinking", "data": REDACTED}]:
                return f"messages.{n}.content.1: the `redacted_thinking` block must be passed back unmodified"
        if model == "server-tools":
            if SEARCH_USE not in content or SEARCH_RESULT not in content:
                return f"messages.{n}: server tool use without its web_search_tool_result (send both back unchanged)"
            cited = [b for b in content if b.get("type") == "text" and b.get("citations")]
            if not cited or cited[0]["citations"] != [CITATION]:
                return f"messages.{n}: citations must be passed back with their text"
    return None


# --------------------------------------------------------------------------- OpenAI Responses


def _response(model: str, status: str, output: list[dict[str, Any]], plan: Plan | None) -> dict[str, Any]:
    usage = None
    if plan is not None:
        usage = {"input_tokens": plan.usage[0], "input_tokens_details": {"cached_tokens": 0}, "output_tokens": plan.usage[1],
                 "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": sum(plan.usage)}
    incomplete = {"reason": "max_output_tokens"} if status == "incomplete" else None
    return {"id": "resp_lk", "object": "response", "created_at": CREATED, "status": status, "error": None,
            "incomplete_details": incomplete, "model": model, "output": output, "usage": usage}


def _response_items(plan: Plan) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    for n, part in enumerate(plan.parts):
        if part[0] == "call":
            items.append({"type": "function_call", "id": f"fc_lk_{n}", "call_id": part[1], "name": part[2], "arguments": part[3], "status": "completed"})
        elif part[0] == "reasoning":
            item = {"type": "reasoning", "id": f"rs_lk_{n}", "summary": [{"type": "summary_text", "text": part[1]}]}
            if part[2] != SIGNATURE:
                item["encrypted_content"] = ENCRYPTED
            items.append(item)
        elif part[0] == "text":
            if plan.extra:
                items.append(dict(SEARCH_CALL))
            items.append({"type": "message", "id": f"msg_lk_{n}", "status": "completed", "role": "assistant",
                          "content": [{"type": "output_text", "text": part[1], "annotations": []}]})
    return items


def responses_events(plan: Plan, model: str) -> list[str]:
    seq = iter(range(1_000_000))

    def ev(name: str, **data: Any) -> str:
        return _sse(name, {"type": name, "sequence_number": next(seq), **data})

    out = [ev("response.created", response=_response(model, "in_progress", [], None)),
           ev("response.in_progress", response=_response(model, "in_progress", [], None))]
    items = _response_items(plan)
    for n, item in enumerate(items):
        if item["type"] == "function_call":
            out.append(ev("response.output_item.added", output_index=n, item={**item, "arguments": "", "status": "in_progress"}))
            out += [ev("response.function_call_arguments.delta", item_id=item["id"], output_index=n, delta=p) for p in _pieces(item["arguments"], 6)]
            out.append(ev("response.function_call_arguments.done", item_id=item["id"], output_index=n, arguments=item["arguments"]))
        elif item["type"] == "reasoning":
            out.append(ev("response.output_item.added", output_index=n, item={**item, "summary": []}))
            text = item["summary"][0]["text"]
            out += [ev("response.reasoning_summary_text.delta", item_id=item["id"], output_index=n, summary_index=0, delta=p) for p in _pieces(text)]
        elif item["type"] == "web_search_call":
            out.append(ev("response.output_item.added", output_index=n, item={**item, "status": "in_progress"}))
            out.append(ev("response.web_search_call.searching", item_id=item["id"], output_index=n))
            out.append(ev("response.web_search_call.completed", item_id=item["id"], output_index=n))
        else:
            text = item["content"][0]["text"]
            out.append(ev("response.output_item.added", output_index=n, item={**item, "status": "in_progress", "content": []}))
            out.append(ev("response.content_part.added", item_id=item["id"], output_index=n, content_index=0, part={"type": "output_text", "text": "", "annotations": []}))
            out += [ev("response.output_text.delta", item_id=item["id"], output_index=n, content_index=0, delta=p) for p in _pieces(text, plan.piece)]
            if plan.stream_error:
                return [*out, ev("error", code="server_error", message="The server had an error", param=None)]
            out.append(ev("response.output_text.done", item_id=item["id"], output_index=n, content_index=0, text=text))
        out.append(ev("response.output_item.done", output_index=n, item=item))
    if plan.stop == "length":
        return [*out, ev("response.incomplete", response=_response(model, "incomplete", items, plan))]
    return [*out, ev("response.completed", response=_response(model, "completed", items, plan))]


def responses_body(plan: Plan, model: str) -> dict[str, Any]:
    return _response(model, "incomplete" if plan.stop == "length" else "completed", _response_items(plan), plan)


def responses_check(request: dict[str, Any], model: str) -> str | None:
    """Stateless reasoning: a function call that followed a reasoning item comes back with it."""
    items = [i for i in request.get("input") or [] if isinstance(i, dict)]
    if model == "thinking-tools":
        calls = [n for n, i in enumerate(items) if i.get("type") == "function_call"]
        for n in calls:
            before = items[n - 1] if n else {}
            if before.get("type") != "reasoning" or before.get("encrypted_content") != ENCRYPTED or before.get("id") != "rs_lk_0":
                return f"Item '{items[n].get('id', 'fc_lk_2')}' of type 'function_call' was provided without its required 'reasoning' item: 'rs_lk_0'."
    if model == "server-tools" and dict(SEARCH_CALL) not in items:
        return "the web_search_call item must be passed back with the message that followed it"
    return None


# --------------------------------------------------------------------------- Gemini


def _gemini_parts(plan: Plan) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = []
    signed = False
    for part in plan.parts:
        if part[0] == "reasoning":
            parts += [{"text": p, "thought": True} for p in _pieces(part[1])]
        elif part[0] == "text":
            parts += [{"text": p} for p in _pieces(part[1], plan.piece)]
        elif part[0] == "call":
            call: dict[str, Any] = {"functionCall": {"name": part[2], "args": json.loads(part[3])}}
            if not signed and _parts(plan, "reasoning"):
                call["thoughtSignature"] = ROUND_TRIP_SIGNATURE  # on the first call, as Gemini does
                signed = True
            parts.append(call)
    if _parts(plan, "reasoning") and not signed:
        parts.append({"text": "", "thoughtSignature": ROUND_TRIP_SIGNATURE})  # a text answer's signature comes last
    return parts


def _gemini_usage(plan: Plan, done: bool) -> dict[str, Any]:
    usage: dict[str, Any] = {"promptTokenCount": plan.usage[0], "totalTokenCount": plan.usage[0]}
    if done:
        usage.update(candidatesTokenCount=plan.usage[1], totalTokenCount=sum(plan.usage))
        if _parts(plan, "reasoning"):
            usage["thoughtsTokenCount"] = 7
    return usage


def gemini_events(plan: Plan, model: str) -> list[str]:
    parts = _gemini_parts(plan)
    finish = _finish(plan, {"stop": "STOP", "tool": "STOP", "length": "MAX_TOKENS"})
    out: list[str] = []
    for n, part in enumerate(parts):
        last = n == len(parts) - 1
        candidate: dict[str, Any] = {"content": {"parts": [part], "role": "model"}, "index": 0}
        if plan.stream_error and n == len(parts) // 2:
            return [*out, "data: " + json.dumps({"error": {"code": 503, "message": "The model is overloaded.", "status": "UNAVAILABLE"}}) + "\r\n\r\n"]
        if last:
            candidate["finishReason"] = finish
        body = {"candidates": [candidate], "usageMetadata": _gemini_usage(plan, last), "modelVersion": model, "responseId": "lk-gemini-response"}
        out.append("data: " + json.dumps(body) + "\r\n\r\n")
    return out


def gemini_body(plan: Plan, model: str) -> dict[str, Any]:
    finish = _finish(plan, {"stop": "STOP", "tool": "STOP", "length": "MAX_TOKENS"})
    merged: list[dict[str, Any]] = []
    for part in _gemini_parts(plan):  # a whole response joins the text parts of one kind
        if merged and "text" in part and "text" in merged[-1] and part.get("thought") == merged[-1].get("thought") and "thoughtSignature" not in part:
            merged[-1]["text"] += part["text"]
        else:
            merged.append(dict(part))
    return {"candidates": [{"content": {"parts": merged, "role": "model"}, "finishReason": finish, "index": 0}],
            "usageMetadata": _gemini_usage(plan, True), "modelVersion": model, "responseId": "lk-gemini-response"}


def _same_signature(sent: Any) -> bool:
    """Gemini accepts a signature in standard or URL-safe base64 (SDKs re-encode it)."""
    if not isinstance(sent, str):
        return False
    try:
        return base64.urlsafe_b64decode(sent.replace("+", "-").replace("/", "_")) == base64.b64decode(ROUND_TRIP_SIGNATURE)
    except ValueError:
        return False


def gemini_check(request: dict[str, Any], model: str) -> str | None:
    if model != "thinking-tools":
        return None
    for n, content in enumerate(request.get("contents") or []):
        calls = [p for p in content.get("parts") or [] if "functionCall" in p]
        if content.get("role") == "model" and calls and not _same_signature(calls[0].get("thoughtSignature")):
            return f"Function call is missing a thought_signature in functionCall parts (contents[{n}].parts[0])."
    return None


# --------------------------------------------------------------------------- Gemini Interactions

INTERACTION_ID = "v1_lk-interaction"
SEARCH_STEPS: list[dict[str, Any]] = [
    {"type": "google_search_call", "id": "gs_lk_1", "arguments": {"queries": ["weather Paris"]}, "signature": ENCRYPTED},
    {"type": "google_search_result", "call_id": "gs_lk_1", "result": [{"search_suggestions": "<div>weather Paris</div>"}], "signature": ENCRYPTED},
]


def _interaction_steps(plan: Plan) -> list[dict[str, Any]]:
    """The plan as Interactions steps: a thought (summary and signature; a redacted one is a
    signature alone), model output, function calls (the first one signed, as Gemini signs it)."""
    steps: list[dict[str, Any]] = []
    signed = False
    for part in plan.parts:
        if part[0] == "reasoning":
            steps.append({"type": "thought", "summary": [{"type": "text", "text": part[1]}], "signature": part[2]})
        elif part[0] == "redacted":
            steps.append({"type": "thought", "signature": part[1]})
        elif part[0] == "call":
            call: dict[str, Any] = {"type": "function_call", "id": part[1], "name": part[2], "arguments": json.loads(part[3])}
            if not signed and _parts(plan, "reasoning"):
                call["signature"] = ROUND_TRIP_SIGNATURE
                signed = True
            steps.append(call)
        else:
            if plan.extra:
                steps += [dict(s) for s in SEARCH_STEPS]
            steps.append({"type": "model_output", "content": [{"type": "text", "text": part[1]}]})
    return steps


def _interaction(model: str, plan: Plan, status: str, steps: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    usage: dict[str, Any] = {"total_input_tokens": plan.usage[0], "total_output_tokens": plan.usage[1], "total_cached_tokens": 0,
                             "total_tokens": sum(plan.usage)}
    if _parts(plan, "reasoning"):
        usage.update(total_thought_tokens=7, total_tokens=sum(plan.usage) + 7)
    body: dict[str, Any] = {"id": INTERACTION_ID, "status": status, "usage": usage, "created": "2026-06-05T12:00:00Z",
                            "updated": "2026-06-05T12:00:00Z", "service_tier": "standard", "object": "interaction", "model": model}
    if steps is not None:
        body["steps"] = steps
    return body


def _interaction_status(plan: Plan) -> str:
    return _finish(plan, {"stop": "completed", "tool": "requires_action", "length": "incomplete"})


def interactions_events(plan: Plan, model: str) -> list[str]:
    def ev(name: str, **data: Any) -> str:
        return _sse(name, {**data, "event_type": name})

    out = [ev("interaction.created", interaction={"id": INTERACTION_ID, "status": "in_progress", "object": "interaction", "model": model},
              metadata={"usage": {"total_tokens": plan.usage[0], "total_input_tokens": plan.usage[0], "total_output_tokens": 0}}),
           ev("interaction.status_update", interaction_id=INTERACTION_ID, status="in_progress")]
    for index, step in enumerate(_interaction_steps(plan)):
        kind = step["type"]
        if kind == "thought":
            out.append(ev("step.start", index=index, step={"type": "thought"}))
            for item in step.get("summary") or []:
                out += [ev("step.delta", index=index, delta={"content": {"text": p, "type": "text"}, "type": "thought_summary"})
                        for p in _pieces(item["text"])]
                out.append(ev("step.delta", index=index, delta={"signature": "", "type": "thought_signature"}))
            out.append(ev("step.delta", index=index, delta={"signature": step["signature"], "type": "thought_signature"}))
        elif kind == "function_call":
            out.append(ev("step.start", index=index, step={**step, "arguments": {}}))
            out += [ev("step.delta", index=index, delta={"type": "arguments_delta", "arguments": p})
                    for p in _pieces(json.dumps(step["arguments"]), 6)]
        elif kind == "model_output":
            out.append(ev("step.start", index=index, step={"type": "model_output"}))
            pieces = _pieces(step["content"][0]["text"], plan.piece)
            for n, p in enumerate(pieces):
                out.append(ev("step.delta", index=index, delta={"text": p, "type": "text"}))
                if plan.stream_error and n == len(pieces) // 2:
                    return [*out, ev("error", error={"code": "UNAVAILABLE", "message": "The model is overloaded."})]
        else:  # a server-run tool step arrives whole
            out.append(ev("step.start", index=index, step=step))
        out.append(ev("step.stop", index=index))
    out.append(ev("interaction.completed", interaction=_interaction(model, plan, _interaction_status(plan))))
    return [*out, "event: done\ndata: [DONE]\n\n"]


def interactions_body(plan: Plan, model: str) -> dict[str, Any]:
    return _interaction(model, plan, _interaction_status(plan), _interaction_steps(plan))


def interactions_check(request: dict[str, Any], model: str) -> str | None:
    """Stateless thinking: every thought and the signed function call come back with their
    signatures, the thought before the call; server-run search steps come back unchanged."""
    steps = [s for s in request.get("input") or [] if isinstance(s, dict)] if isinstance(request.get("input"), list) else []
    if model == "thinking-tools":
        thoughts = [s.get("signature") for s in steps if s.get("type") == "thought"]
        calls = [n for n, s in enumerate(steps) if s.get("type") == "function_call"]
        for n in calls[:1]:
            if not _same_signature(steps[n].get("signature")) or not _same_signature(thoughts[0] if thoughts else None) or REDACTED not in thoughts:
                return f"Function call is missing a thought_signature in input[{n}] (the thought steps must precede it with their signatures)."
    if model == "server-tools" and not all(s in steps for s in SEARCH_STEPS):
        return "the google_search_call and google_search_result steps must be passed back unchanged"
    return None


# --------------------------------------------------------------------------- Bedrock


def _frame(event: str, payload: dict[str, Any]) -> bytes:
    return encode_frame({":event-type": event, ":content-type": "application/json", ":message-type": "event"},
                        json.dumps({**payload, "p": "abcdefgh"}).encode())


def bedrock_events(plan: Plan, model: str) -> list[bytes]:
    out = [_frame("messageStart", {"role": "assistant"})]
    for index, part in enumerate(plan.parts):
        if part[0] == "call":
            out.append(_frame("contentBlockStart", {"contentBlockIndex": index, "start": {"toolUse": {"toolUseId": part[1], "name": part[2]}}}))
            out += [_frame("contentBlockDelta", {"contentBlockIndex": index, "delta": {"toolUse": {"input": p}}}) for p in _pieces(part[3], 6)]
        elif part[0] == "reasoning":
            out += [_frame("contentBlockDelta", {"contentBlockIndex": index, "delta": {"reasoningContent": {"text": p}}}) for p in _pieces(part[1])]
            out.append(_frame("contentBlockDelta", {"contentBlockIndex": index, "delta": {"reasoningContent": {"signature": part[2]}}}))
        elif part[0] == "redacted":
            out.append(_frame("contentBlockDelta", {"contentBlockIndex": index, "delta": {"reasoningContent": {"redactedContent": part[1]}}}))
        else:
            out += [_frame("contentBlockDelta", {"contentBlockIndex": index, "delta": {"text": p}}) for p in _pieces(part[1], plan.piece)]
        if plan.stream_error:
            exception = encode_frame({":exception-type": "modelStreamErrorException", ":content-type": "application/json", ":message-type": "exception"},
                                     json.dumps({"message": "The model stream failed", "originalStatusCode": 500}).encode())
            return [*out, exception]
        out.append(_frame("contentBlockStop", {"contentBlockIndex": index}))
    out.append(_frame("messageStop", {"stopReason": _finish(plan, {"stop": "end_turn", "tool": "tool_use", "length": "max_tokens"})}))
    usage = {"inputTokens": plan.usage[0], "outputTokens": plan.usage[1], "totalTokens": sum(plan.usage)}
    return [*out, _frame("metadata", {"usage": usage, "metrics": {"latencyMs": 120}})]


def bedrock_body(plan: Plan, model: str) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    for part in plan.parts:
        if part[0] == "call":
            content.append({"toolUse": {"toolUseId": part[1], "name": part[2], "input": json.loads(part[3])}})
        elif part[0] == "reasoning":
            content.append({"reasoningContent": {"reasoningText": {"text": part[1], "signature": part[2]}}})
        elif part[0] == "redacted":
            content.append({"reasoningContent": {"redactedContent": part[1]}})
        else:
            content.append({"text": part[1]})
    usage = {"inputTokens": plan.usage[0], "outputTokens": plan.usage[1], "totalTokens": sum(plan.usage)}
    return {"output": {"message": {"role": "assistant", "content": content}}, "metrics": {"latencyMs": 120},
            "stopReason": _finish(plan, {"stop": "end_turn", "tool": "tool_use", "length": "max_tokens"}), "usage": usage}


def anthropic_invoke_events(plan: Plan, model: str) -> list[bytes]:
    """Anthropic's events as InvokeModelWithResponseStream sends them: each one base64 JSON in a
    ``chunk`` frame; the stream's failure an ``exception`` frame, not an ``error`` event."""
    out: list[bytes] = []
    for event in anthropic_stream(plan, model):
        if event["type"] == "error":
            out.append(encode_frame({":exception-type": "modelStreamErrorException", ":content-type": "application/json",
                                     ":message-type": "exception"}, json.dumps({"message": "The model stream failed"}).encode()))
            break
        if event["type"] == "message_stop":
            event["amazon-bedrock-invocationMetrics"] = {"inputTokenCount": plan.usage[0], "outputTokenCount": plan.usage[1]}
        out.append(encode_frame({":event-type": "chunk", ":content-type": "application/json", ":message-type": "event"},
                                json.dumps({"bytes": base64.b64encode(json.dumps(event).encode()).decode(), "p": "abcd"}).encode()))
    return out


def bedrock_check(request: dict[str, Any], model: str) -> str | None:
    if model != "thinking-tools":
        return None
    for n, message in enumerate(request.get("messages") or []):
        content = message.get("content") or []
        if message.get("role") != "assistant" or not any("toolUse" in b for b in content):
            continue
        expected = [{"reasoningContent": {"reasoningText": {"text": THOUGHT, "signature": ROUND_TRIP_SIGNATURE}}},
                    {"reasoningContent": {"redactedContent": REDACTED}}]
        if content[:2] != expected:
            return (f"The model returned the following errors: messages.{n}.content.0.type: Expected `thinking` or "
                    "`redacted_thinking`, but found `tool_use`. When `thinking` is enabled, a final `assistant` message must start with a thinking block.")
    return None


# --------------------------------------------------------------------------- HTTP


@dataclass(frozen=True)
class Route:
    """One API: how to find its model, render its answers, check a follow-up, and its errors."""

    pattern: re.Pattern[str]
    events: Callable[[Plan, str], list[Any]]
    whole: Callable[[Plan, str], dict[str, Any]]
    check: Callable[[dict[str, Any], str], str | None]
    api: str
    content_type: str = "text/event-stream; charset=utf-8"
    errors: str = ""
    """Whose error answers it gives (default: ``api``'s)."""


ROUTES = (
    Route(re.compile(r"/chat/completions$"), chat_events, chat_body, chat_check, "openai"),
    Route(re.compile(r"/messages$"), anthropic_events, anthropic_body, anthropic_check, "anthropic"),
    Route(re.compile(r"/responses$"), responses_events, responses_body, responses_check, "openai"),
    Route(re.compile(r"/models/(?P<model>[^/:]+):(?P<method>generateContent|streamGenerateContent)$"), gemini_events, gemini_body, gemini_check, "gemini"),
    Route(re.compile(r"/model/(?P<model>[^/]+)/(?P<method>converse|converse-stream)$"), bedrock_events, bedrock_body, bedrock_check, "bedrock",
          EVENTSTREAM_CONTENT_TYPE),
    # Bedrock ids name the vendor (``anthropic.tools``): the scenario is the rest
    Route(re.compile(r"/model/anthropic\.(?P<model>[^/]+)/(?P<method>invoke|invoke-with-response-stream)$"), anthropic_invoke_events,
          anthropic_body, anthropic_check, "anthropic", EVENTSTREAM_CONTENT_TYPE, errors="bedrock"),
    Route(re.compile(r"/interactions$"), interactions_events, interactions_body, interactions_check, "interactions", errors="gemini"),
)
GOOGLE_STATUS = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 404: "NOT_FOUND", 429: "RESOURCE_EXHAUSTED", 503: "UNAVAILABLE"}
AWS_ERRORS = {400: "ValidationException", 401: "UnrecognizedClientException", 403: "AccessDeniedException", 404: "ResourceNotFoundException",
              429: "ThrottlingException"}


def error_body(api: str, status: int, code: str, message: str) -> tuple[dict[str, Any], dict[str, str]]:
    """An error answer as the API sends it: ``(body, extra headers)``."""
    if api == "anthropic":
        kind = {401: "authentication_error", 404: "not_found_error", 429: "rate_limit_error"}.get(status, "invalid_request_error")
        return {"type": "error", "error": {"type": kind, "message": message}}, {}
    if api == "gemini":
        return {"error": {"code": status, "message": message, "status": GOOGLE_STATUS.get(status, "INTERNAL")}}, {}
    if api == "bedrock":
        kind = AWS_ERRORS.get(status, "InternalServerException")
        return {"message": message}, {"x-amzn-ErrorType": f"{kind}:http://internal.amazon.com/coral/com.amazon.bedrock/"}
    return {"error": {"message": message, "type": "invalid_request_error", "param": None, "code": code}}, {}


def presented_key(headers: Any, query: str, request: dict[str, Any]) -> str:
    """The credential a request presented, wherever it put it (echo-key echoes it back)."""
    for name in ("x-api-key", "x-goog-api-key", "api-key"):
        if headers.get(name):
            return str(headers[name])
    auth = str(headers.get("authorization") or "")
    if auth.lower().startswith("basic "):
        return base64.b64decode(auth.split(None, 1)[1]).decode("utf-8", "replace").partition(":")[2]
    if auth.lower().startswith("bearer "):
        return auth.split(None, 1)[1]
    found = dict(parse_qsl(query)).get("key")
    return str(found or request.get("api_key") or "")


def echo_plan(key: str) -> Plan:
    """``echo-key``: an endpoint that echoes the key a few characters per event, URL-encoded and
    base64-encoded, in a café's charset (a whole answer is ISO-8859-1, not UTF-8)."""
    text = f"Your key is {key}; encoded {quote(key, safe='')} and {base64.b64encode(key.encode()).decode()}. Merci, café."
    return Plan([("text", text)], piece=3, charset="iso-8859-1")


def _has_tool_result(api: str, request: dict[str, Any]) -> bool:
    text = json.dumps(request)
    marker = {"openai": ('"role": "tool"', '"function_call_output"'), "anthropic": ('"tool_result"',),
              "gemini": ('"functionResponse"',), "bedrock": ('"toolResult"',),
              "interactions": ('"function_result"',)}[api]
    return any(m in text for m in marker)


def _follow_up(api: str, model: str, request: dict[str, Any]) -> bool:
    """A round-trip scenario's second request: it answers the tool call (or asks again)."""
    if model == "thinking-tools":
        return _has_tool_result(api, request)
    if model == "server-tools":
        return any(m.get("role") == "assistant" for m in request.get("messages") or request.get("contents") or []) or any(
            i.get("role") == "assistant" or i.get("type") in ("message", "model_output") for i in request.get("input") or [] if isinstance(i, dict))
    return False


@dataclass
class SeenRequest:
    method: str
    path: str
    headers: dict[str, str]
    body: str


@dataclass
class TestServer:
    """A running server: ``base_url`` ends in ``/v1``; ``requests`` lists what it received."""

    __test__ = False  # not a pytest test class, despite the name

    base_url: str
    requests: list[SeenRequest] = field(default_factory=list)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # keep test output clean
        pass

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("content-length") or 0)).decode("utf-8", "replace")
        self.server.state.requests.append(SeenRequest("POST", self.path, dict(self.headers.items()), body))
        path = self.path.split("?", 1)[0].rstrip("/")
        found = next(((r, m) for r in ROUTES if (m := r.pattern.search(path))), None)
        try:
            request = json.loads(body or "{}")
        except ValueError:
            request = None
        if found is None or not isinstance(request, dict):
            self._json(404 if found is None else 400, *error_body("openai", 404, "not_found", f"no route {self.path}"))
            return
        route, match = found
        groups = match.groupdict()
        model = unquote(groups["model"]) if "model" in groups else str(request.get("model") or "text")
        streaming = (groups["method"] in ("streamGenerateContent", "converse-stream", "invoke-with-response-stream") if "method" in groups
                     else bool(request.get("stream")))
        errors = route.errors or route.api
        plan = plan_for(model) if model != "echo-key" else echo_plan(presented_key(self.headers, self.path.partition("?")[2], request))
        if _follow_up(route.api, model, request):
            problem = route.check(request, model)
            if problem is not None:
                self._json(400, *error_body(errors, 400, "invalid_request_error", problem))
                return
            plan = Plan([("text", ANSWER)], usage=(60, 8))
        if plan.error is not None:
            status, code, message = plan.error
            self._json(status, *error_body(errors, status, code, message))
            return
        if not streaming:
            self._json(200, route.whole(plan, model), {}, plan.charset)
            return
        self.send_response(200)
        self.send_header("content-type", route.content_type)
        self.send_header("cache-control", "no-cache")
        self.send_header("connection", "close")  # the body ends when the connection does
        self.end_headers()
        chunks = route.events(plan, model)
        if plan.truncated:
            chunks = chunks[: len(chunks) // 2]
        for chunk in chunks:
            time.sleep(self.server.delay)
            self.wfile.write(chunk if isinstance(chunk, bytes) else chunk.encode())
            self.wfile.flush()
        self.close_connection = True

    def _json(self, status: int, data: dict[str, Any], headers: dict[str, str], charset: str = "utf-8") -> None:
        raw = json.dumps(data, ensure_ascii=False).encode(charset)
        self.send_response(status)
        self.send_header("content-type", "application/json" if charset == "utf-8" else f"application/json; charset={charset}")
        self.send_header("content-length", str(len(raw)))
        self.send_header("set-cookie", "session=server-cookie-value; Path=/")
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(raw)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, delay: float) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.delay = delay
        self.state = TestServer(f"http://127.0.0.1:{self.server_address[1]}/v1")


@contextmanager
def serve(delay: float = 0.002) -> Iterator[TestServer]:
    """Run the server on a free port of 127.0.0.1 for the duration of the ``with`` block."""
    server = _Server(delay)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server.state
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
