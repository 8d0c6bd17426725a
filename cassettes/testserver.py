"""A local HTTP server (127.0.0.1 only) speaking the providers' documented wire formats.

No provider is reachable from CI, so the cassettes shipped in ``cassettes/llm/`` are recorded
through the adapters against this server, and the tests use it to exercise recording. It serves
``POST .../chat/completions`` (OpenAI chat), ``.../messages`` (Anthropic) and ``.../responses``
(OpenAI Responses), streaming (SSE, one event per write, ``delay`` seconds apart) or not, as the
request's ``stream`` flag says. The request's ``model`` picks the scenario:

``text`` (default), ``tools`` (text then two tool calls, arguments in fragments), ``thinking``
(reasoning then text), ``max-tokens``, ``error-404``, ``error-401``, ``rate-limit`` (429),
``stream-error`` (an error inside the stream) and ``truncated`` (the stream stops mid-response).

Every request's headers and body are kept in ``server.requests`` so tests can check what was sent.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from reference_loop.protocols import ToolSchema

CREATED = 1_700_000_000  # fixed, so recordings are stable
TEXT = "Hello from the loopkit test server."
WEATHER_TOOL: ToolSchema = {
    "name": "get_weather",
    "description": "Current weather for a city.",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}, "unit": {"type": "string"}}, "required": ["city"]},
}


@dataclass
class Plan:
    """What the model "says": parts in order, how it stops, token counts."""

    parts: list[tuple[str, ...]]  # ("text", s) | ("reasoning", s) | ("call", id, name, arguments)
    stop: str = "stop"  # stop | tool | length
    usage: tuple[int, int] = (12, 9)
    error: tuple[int, str, str] | None = None  # HTTP status, code, message
    stream_error: bool = False
    truncated: bool = False


def plan_for(model: str) -> Plan:
    if model == "tools":
        return Plan(
            [("text", "Let me check both cities."), ("call", "call_lk_1", "get_weather", '{"city": "Paris"}'), ("call", "call_lk_2", "get_weather", '{"city": "Tokyo", "unit": "c"}')],
            stop="tool",
            usage=(40, 31),
        )
    if model == "thinking":
        return Plan([("reasoning", "The user greets me; answer briefly."), ("text", TEXT)], usage=(15, 22))
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


# --------------------------------------------------------------------------- OpenAI chat


def chat_events(plan: Plan, model: str) -> list[str]:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> str:
        body = {"id": "chatcmpl-lk", "object": "chat.completion.chunk", "created": CREATED, "model": model,
                "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}
        return "data: " + json.dumps(body) + "\n\n"

    out = [chunk({"role": "assistant", "content": ""})]
    call_no = 0
    for part in plan.parts:
        if part[0] == "reasoning":
            out += [chunk({"reasoning_content": p}) for p in _pieces(part[1])]
        elif part[0] == "text":
            out += [chunk({"content": p}) for p in _pieces(part[1])]
        else:
            _, call_id, name, arguments = part
            head = {"index": call_no, "id": call_id, "type": "function", "function": {"name": name, "arguments": ""}}
            out.append(chunk({"tool_calls": [head]}))
            out += [chunk({"tool_calls": [{"index": call_no, "function": {"arguments": p}}]}) for p in _pieces(arguments, 6)]
            call_no += 1
    if plan.stream_error:
        return [*out, "data: " + json.dumps({"error": {"message": "The server had an error", "type": "server_error", "code": "server_error"}}) + "\n\n"]
    finish = {"stop": "stop", "tool": "tool_calls", "length": "length"}[plan.stop]
    out.append(chunk({}, finish))
    usage = {"prompt_tokens": plan.usage[0], "completion_tokens": plan.usage[1], "total_tokens": sum(plan.usage)}
    out.append("data: " + json.dumps({"id": "chatcmpl-lk", "object": "chat.completion.chunk", "created": CREATED, "model": model, "choices": [], "usage": usage}) + "\n\n")
    return [*out, "data: [DONE]\n\n"]


def chat_body(plan: Plan, model: str) -> dict[str, Any]:
    text = "".join(p[1] for p in plan.parts if p[0] == "text")
    message: dict[str, Any] = {"role": "assistant", "content": text or None}
    calls = [{"id": p[1], "type": "function", "function": {"name": p[2], "arguments": p[3]}} for p in plan.parts if p[0] == "call"]
    if calls:
        message["tool_calls"] = calls
    finish = {"stop": "stop", "tool": "tool_calls", "length": "length"}[plan.stop]
    usage = {"prompt_tokens": plan.usage[0], "completion_tokens": plan.usage[1], "total_tokens": sum(plan.usage)}
    return {"id": "chatcmpl-lk", "object": "chat.completion", "created": CREATED, "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": finish}], "usage": usage}


# --------------------------------------------------------------------------- Anthropic


def _sse(name: str, data: dict[str, Any]) -> str:
    return f"event: {name}\ndata: {json.dumps(data)}\n\n"


def anthropic_events(plan: Plan, model: str) -> list[str]:
    message: dict[str, Any] = {"id": "msg_lk", "type": "message", "role": "assistant", "content": [], "model": model,
               "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": plan.usage[0], "output_tokens": 1}}
    out = [_sse("message_start", {"type": "message_start", "message": message})]
    for index, part in enumerate(plan.parts):
        if part[0] == "call":
            block: dict[str, Any] = {"type": "tool_use", "id": part[1], "name": part[2], "input": {}}
            deltas = [{"type": "input_json_delta", "partial_json": p} for p in ["", *_pieces(part[3], 6)]]
        elif part[0] == "reasoning":
            block = {"type": "thinking", "thinking": "", "signature": ""}
            deltas = [{"type": "thinking_delta", "thinking": p} for p in _pieces(part[1])]
            deltas.append({"type": "signature_delta", "signature": "c2lnbmF0dXJl"})
        else:
            block = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": p} for p in _pieces(part[1])]
        out.append(_sse("content_block_start", {"type": "content_block_start", "index": index, "content_block": block}))
        if index == 0:
            out.append(_sse("ping", {"type": "ping"}))
        out += [_sse("content_block_delta", {"type": "content_block_delta", "index": index, "delta": d}) for d in deltas]
        if plan.stream_error:
            return [*out, _sse("error", {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})]
        out.append(_sse("content_block_stop", {"type": "content_block_stop", "index": index}))
    stop = {"stop": "end_turn", "tool": "tool_use", "length": "max_tokens"}[plan.stop]
    out.append(_sse("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None}, "usage": {"output_tokens": plan.usage[1]}}))
    return [*out, _sse("message_stop", {"type": "message_stop"})]


def anthropic_body(plan: Plan, model: str) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    for part in plan.parts:
        if part[0] == "call":
            content.append({"type": "tool_use", "id": part[1], "name": part[2], "input": json.loads(part[3])})
        elif part[0] == "reasoning":
            content.append({"type": "thinking", "thinking": part[1], "signature": "c2lnbmF0dXJl"})
        else:
            content.append({"type": "text", "text": part[1]})
    stop = {"stop": "end_turn", "tool": "tool_use", "length": "max_tokens"}[plan.stop]
    return {"id": "msg_lk", "type": "message", "role": "assistant", "model": model, "content": content,
            "stop_reason": stop, "stop_sequence": None, "usage": {"input_tokens": plan.usage[0], "output_tokens": plan.usage[1]}}


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
            items.append({"type": "reasoning", "id": f"rs_lk_{n}", "summary": [{"type": "summary_text", "text": part[1]}]})
        else:
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
    for n, (part, item) in enumerate(zip(plan.parts, items, strict=True)):
        if part[0] == "call":
            out.append(ev("response.output_item.added", output_index=n, item={**item, "arguments": "", "status": "in_progress"}))
            out += [ev("response.function_call_arguments.delta", item_id=item["id"], output_index=n, delta=p) for p in _pieces(part[3], 6)]
            out.append(ev("response.function_call_arguments.done", item_id=item["id"], output_index=n, arguments=part[3]))
        elif part[0] == "reasoning":
            out.append(ev("response.output_item.added", output_index=n, item={**item, "summary": []}))
            out += [ev("response.reasoning_summary_text.delta", item_id=item["id"], output_index=n, summary_index=0, delta=p) for p in _pieces(part[1])]
        else:
            out.append(ev("response.output_item.added", output_index=n, item={**item, "status": "in_progress", "content": []}))
            out.append(ev("response.content_part.added", item_id=item["id"], output_index=n, content_index=0, part={"type": "output_text", "text": "", "annotations": []}))
            out += [ev("response.output_text.delta", item_id=item["id"], output_index=n, content_index=0, delta=p) for p in _pieces(part[1])]
            if plan.stream_error:
                return [*out, ev("error", code="server_error", message="The server had an error", param=None)]
            out.append(ev("response.output_text.done", item_id=item["id"], output_index=n, content_index=0, text=part[1]))
        out.append(ev("response.output_item.done", output_index=n, item=item))
    if plan.stop == "length":
        return [*out, ev("response.incomplete", response=_response(model, "incomplete", items, plan))]
    return [*out, ev("response.completed", response=_response(model, "completed", items, plan))]


def responses_body(plan: Plan, model: str) -> dict[str, Any]:
    return _response(model, "incomplete" if plan.stop == "length" else "completed", _response_items(plan), plan)


# --------------------------------------------------------------------------- HTTP


RENDERERS = {
    "/chat/completions": (chat_events, chat_body),
    "/messages": (anthropic_events, anthropic_body),
    "/responses": (responses_events, responses_body),
}


def error_body(path: str, status: int, code: str, message: str) -> dict[str, Any]:
    if path.endswith("/messages"):
        kind = {401: "authentication_error", 404: "not_found_error", 429: "rate_limit_error"}.get(status, "api_error")
        return {"type": "error", "error": {"type": kind, "message": message}}
    return {"error": {"message": message, "type": "invalid_request_error", "param": None, "code": code}}


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
        renderer = next((r for suffix, r in RENDERERS.items() if path.endswith(suffix)), None)
        try:
            request = json.loads(body or "{}")
        except ValueError:
            request = None
        if renderer is None or not isinstance(request, dict):
            self._json(404 if renderer is None else 400, error_body(path, 404, "not_found", f"no route {self.path}"))
            return
        model = str(request.get("model") or "text")
        plan = plan_for(model)
        if plan.error is not None:
            status, code, message = plan.error
            self._json(status, error_body(path, status, code, message))
            return
        events, whole = renderer
        if not request.get("stream"):
            self._json(200, whole(plan, model))
            return
        self.send_response(200)
        self.send_header("content-type", "text/event-stream; charset=utf-8")
        self.send_header("cache-control", "no-cache")
        self.send_header("connection", "close")  # the body ends when the connection does
        self.end_headers()
        chunks = events(plan, model)
        if plan.truncated:
            chunks = chunks[: len(chunks) // 2]
        for chunk in chunks:
            time.sleep(self.server.delay)
            self.wfile.write(chunk.encode())
            self.wfile.flush()
        self.close_connection = True

    def _json(self, status: int, data: dict[str, Any]) -> None:
        raw = json.dumps(data).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(raw)))
        self.send_header("set-cookie", "session=server-cookie-value; Path=/")
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
