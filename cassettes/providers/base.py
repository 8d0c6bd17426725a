"""What every provider adapter shares: the HTTP call, stream framing, errors and abort handling.

A concrete adapter supplies a few pure pieces (request body, headers, a stream translator, a
whole-response translator, its endpoint); this base drives them over httpx. Keeping translation
pure (events in, chunks out) is what lets cassettes, the local test server and live endpoints share
one code path.

Shared vocabulary decisions (``docs/cassettes.md`` has the per-provider tables):

- Finish kinds: the spec's ``stop``, ``tool-calls``, ``max-tokens``, ``error``, plus two the kit
  adds to the open set: ``refusal`` (the model declined; its words are a text block and the
  reason's ``message``) and ``content-filter`` (the provider's safety system cut or blocked the
  output). A provider string that is not the plain word for its kind is kept as ``raw``; one the
  kit does not know becomes ``{"kind": "stop", "raw": ...}``, never a kind of its own.
- ``provider_data`` (spec 0b) is namespaced by adapter name (``{"anthropic": {...}}``), so a
  conversation moved to another provider never sends one provider's data to another.
- An error reported anywhere in a stream wins over a finish reason seen before it: the provider
  said the response failed, and a gate must not record that as a success. Its usage is kept.
"""

from __future__ import annotations

import asyncio
import codecs
import json
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Mapping
from typing import Any, ClassVar, Protocol, TypeVar
from urllib.parse import urlsplit

import httpx

from reference_loop.abort import AbortSignal
from reference_loop.protocols import ModelRequest
from reference_loop.vocabulary import (
    FINISH_KINDS,
    Block,
    BlockType,
    Chunk,
    FinishChunk,
    Usage,
    block_end,
    block_start,
    finish,
)

from ..errors import ProviderError, RateLimitError, StreamTruncatedError
from ..eventstream import EVENTSTREAM_CONTENT_TYPE, EventStreamFraming
from ..sse import SSEEvent, SSEParser
from ..urls import http_url_problem

T = TypeVar("T")

_RATE_LIMIT_CODES = frozenset(
    {"rate_limit_exceeded", "rate_limit_error", "overloaded_error", "RESOURCE_EXHAUSTED", "ThrottlingException", "throttlingException"}
)

FINISH_VOCABULARY: frozenset[str] = FINISH_KINDS | {"refusal", "content-filter"}
"""Every finish kind a provider adapter yields (the spec's closed list plus the kit's two)."""


class Skipped(Counter[str]):
    """What a translator met and did not understand (event types, field names), with counts.

    ``loopkit cassette show`` reports it, so a lossy replay is visible at once. Known metadata
    (ids, model names, timings, padding) is not noted: only what might have carried content.
    """

    def note(self, what: str) -> None:
        self[what] += 1

    def unknown_keys(self, where: str, data: Mapping[str, Any], known: frozenset[str]) -> None:
        """Note each key of ``data`` that is not in ``known`` (as ``where.key``); a key whose
        value is empty (``null``, ``""``, ``[]``, ``{}``) carries nothing and is not noted."""
        for key, value in data.items():
            if key not in known and value not in (None, "", [], {}):
                self.note(f"{where}.{key}")

    def report(self) -> list[str]:
        """One line per skipped name, sorted: ``name`` or ``name (xN)``."""
        return [name if count == 1 else f"{name} (x{count})" for name, count in sorted(self.items())]


class StreamTranslator(Protocol):
    """Turns one response's stream events into chunks; pure and synchronous."""

    skipped: Skipped

    @property
    def done(self) -> bool:
        """True once the provider's terminal event has been seen (nothing after it counts)."""
        ...

    def feed(self, event: Any) -> list[Chunk]: ...

    def end(self) -> list[Chunk]:
        """End of input: close what is open, then usage, then the one ``finish``.

        Raises ``StreamTruncatedError`` when the stream stopped before its terminal event.
        """
        ...


def finish_from(table: Mapping[str, str], plain: frozenset[str], value: str | None, *, default: str = "stop") -> FinishChunk:
    """A provider's finish string as a kit ``finish`` chunk.

    ``table`` maps provider strings to kinds; ``plain`` lists the strings that are the provider's
    own word for their kind (kept without ``raw``). Anything else keeps ``raw``; an unknown string
    is ``stop`` (the spec counts an unknown kind as a success; the kit never invents one). A kind
    of ``error`` gets a message and the string as its code.
    """
    if value is None or value == "":
        return finish(default)
    kind = table.get(value, "stop")
    raw = None if value in plain else value
    if kind == "error":
        return finish("error", f"the provider ended the response with {value}", value, raw=raw)
    return finish(kind, raw=raw)


def refusal_finish(message: str, raw: str | None = None) -> FinishChunk:
    """The kit's refusal: ``{"kind": "refusal", "message": <the refusal text>}``."""
    return finish("refusal", message or "the model declined to answer", raw=raw)


def error_code(err: Mapping[str, Any]) -> str | None:
    """An error object's code: ``code`` (OpenAI), ``type`` (Anthropic), ``status`` (Google)."""
    code, status = err.get("code"), err.get("status")
    if isinstance(code, int) and isinstance(status, str) and status:
        return status  # Google: {"code": 429, "status": "RESOURCE_EXHAUSTED"}
    found = code or err.get("type") or status
    return str(found) if found not in (None, "") else None


def error_from_body(status: int, text: str, reason: str = "", headers: Mapping[str, str] | None = None) -> ProviderError:
    """Map an HTTP error answer (JSON of any provider's shape, or anything) to an error.

    OpenAI: ``{"error": {"message", "type", "code"}}``; Anthropic:
    ``{"type": "error", "error": {"type", "message"}}``; Google: ``{"error": {"code", "message",
    "status"}}`` (also wrapped in a list); AWS: ``{"message"}`` with the type in the
    ``x-amzn-ErrorType`` header (or the body's ``__type``). The code is the provider's, else ``HTTP_<status>``.
    """
    message, code = "", None
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if isinstance(data, list) and data and isinstance(data[0], dict):
        data = data[0]
    if isinstance(data, dict) and isinstance(data.get("error"), dict):
        err = data["error"]
        message = str(err.get("message") or "")
        code = error_code(err)
    elif isinstance(data, dict) and isinstance(data.get("error"), str):
        message = data["error"]
    elif isinstance(data, dict) and isinstance(data.get("message") or data.get("Message"), str):
        message = str(data.get("message") or data.get("Message"))
    amz = _header(headers, "x-amzn-errortype")
    if not amz and isinstance(data, dict) and isinstance(data.get("__type"), str):
        amz = data["__type"].rsplit("#", 1)[-1]  # AWS's JSON protocol names the type in the body too
    if amz and not code:
        code = amz.split(":", 1)[0]
    if not message:
        message = " ".join(text.split())[:200] or reason or f"HTTP {status}"
    code_s = str(code) if code else None
    cls = RateLimitError if status == 429 or code_s in _RATE_LIMIT_CODES else ProviderError
    return cls(message, status=status, code=code_s)


def _header(headers: Mapping[str, str] | None, name: str) -> str:
    if not headers:
        return ""
    for key, value in headers.items():
        if key.lower() == name:
            return str(value)
    return ""


def usage_chunk(usage: Usage) -> Chunk:
    return {"type": "usage", "usage": usage}


def closing(blocks: BlockBuilder, usage: Usage | None, last: FinishChunk) -> list[Chunk]:
    """The end of every stream: what is still open closes, then the usage (if any), then finish."""
    out = blocks.close_all()
    if usage is not None:
        out.append(usage_chunk(usage))
    out.append(last)
    return out


def as_int(value: Any) -> int | None:
    """A token count as an int (``None`` when absent or not a number)."""
    if isinstance(value, bool) or value is None:
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def compact_json(value: Any) -> str:
    """Arguments that arrive whole (an object) as the raw JSON text the kit's blocks carry."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


class BlockBuilder:
    """Tracks the blocks of one response: kit indexes in order of appearance, open/closed state.

    Both streaming translators and the whole-response translators use it, so block numbering and
    the ``block-end`` payloads are identical whichever way a response arrives. A block's state may
    hold ``provider_data`` (merged per adapter namespace), which its ``block-end`` then carries.
    """

    def __init__(self, namespace: str = "") -> None:
        self.namespace = namespace
        self.count = 0
        self.open: dict[int, dict[str, Any]] = {}  # kit index -> {"type", "text"/"id","name","arguments", "data"}
        self.tool_calls = 0
        self.visible: list[int] = []  # indexes of blocks with visible text, in order

    def start(self, block_type: BlockType, **fields: Any) -> tuple[int, list[Chunk]]:
        index = self.count
        self.count += 1
        state: dict[str, Any] = {"type": block_type, **fields}
        if block_type in ("text", "reasoning"):
            state.setdefault("text", "")
        if block_type == "tool-call":
            state.setdefault("arguments", "")
            self.tool_calls += 1
        self.open[index] = state
        return index, [block_start(index, block_type)]

    def data(self, index: int) -> dict[str, Any]:
        """The open block's ``provider_data`` entry for this adapter (created on first use)."""
        state = self.open[index]
        data: dict[str, Any] = state.setdefault("data", {})
        return data

    def close(self, index: int, final: str | None = None) -> list[Chunk]:
        """Close one block; ``final`` overrides the assembled text/arguments (provider's own copy)."""
        state = self.open.pop(index, None)
        if state is None:
            return []
        block: Block
        if state["type"] == "tool-call":
            arguments = final if final is not None else state["arguments"]
            # Providers send an empty argument stream for a call without arguments: it means {}.
            block = {"type": "tool-call", "id": state["id"], "name": state["name"], "arguments": arguments or "{}"}
        elif state["type"] == "image":
            block = {"type": "image", "url": state.get("url", "")}
            if state.get("mime_type"):
                block["mime_type"] = state["mime_type"]
        else:
            text = final if final is not None else state["text"]
            block = {"type": state["type"], "text": text}
        if state.get("data"):
            block["provider_data"] = {self.namespace: state["data"]}
        return [block_end(index, block)]

    def close_all(self) -> list[Chunk]:
        chunks: list[Chunk] = []
        for index in sorted(self.open):
            chunks.extend(self.close(index))
        return chunks


def provider_data(block: Mapping[str, Any], namespace: str) -> dict[str, Any]:
    """This adapter's part of a history block's ``provider_data`` (empty when it has none)."""
    data = block.get("provider_data")
    if not isinstance(data, Mapping):
        return {}
    mine = data.get(namespace)
    return dict(mine) if isinstance(mine, Mapping) else {}


def text_of(blocks: Any) -> str:
    """The joined text of a list of text blocks (a tool result's content)."""
    if isinstance(blocks, str):
        return blocks
    return "".join(str(b.get("text", "")) for b in blocks or [] if isinstance(b, Mapping) and b.get("type") == "text")


def parse_arguments(raw: str) -> Any:
    """A tool call's raw argument text as an object for APIs that want one (``{}`` if not JSON)."""
    try:
        value = json.loads(raw or "{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


async def _race(awaitable: Awaitable[T], signal: AbortSignal | None) -> tuple[bool, T | None]:
    """Await ``awaitable`` unless ``signal`` fires first: ``(True, value)`` or ``(False, None)``."""
    if signal is None:
        return True, await awaitable
    if signal.aborted:
        if isinstance(awaitable, asyncio.Future):
            awaitable.cancel()
        elif asyncio.iscoroutine(awaitable):
            awaitable.close()
        return False, None
    work = asyncio.ensure_future(awaitable)
    stop = asyncio.ensure_future(signal.wait())
    try:
        await asyncio.wait({work, stop}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stop.cancel()
    if work.done():
        return True, work.result()
    work.cancel()
    try:
        await work
    except (asyncio.CancelledError, StopAsyncIteration):
        pass
    return False, None


class SSEFraming:
    """Bytes to server-sent events (UTF-8, decoded incrementally)."""

    def __init__(self) -> None:
        self._parser = SSEParser()
        self._decoder = codecs.getincrementaldecoder("utf-8")()

    def feed(self, data: bytes) -> list[SSEEvent]:
        return self._parser.feed(self._decoder.decode(data))

    def close(self) -> list[SSEEvent]:
        return self._parser.feed(self._decoder.decode(b"", final=True)) + self._parser.close()


class ProviderAdapter:
    """A ``ModelAdapter`` speaking one provider's HTTP API.

    ``base_url`` is the API root (``https://api.openai.com/v1``); ``model`` overrides the model
    name sent (default: ``request["model"]``); ``stream`` picks the streaming or the whole-response
    form of the API; ``transport`` lets cassettes replay or record (an ``httpx.AsyncBaseTransport``).
    After each call ``skipped`` holds what the translator met and did not understand.
    """

    name: ClassVar[str]
    path: ClassVar[str]
    default_base_url: ClassVar[str]
    api_key_env: ClassVar[str]
    response_keys: ClassVar[tuple[str, ...]] = ()
    """Fields a whole response of this API always has (one of them at least): a 200 body with
    none of them is some other document (``{"x": 42}``), unreadable rather than an empty answer."""

    def __init__(
        self,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        model: str | None = None,
        stream: bool = True,
        max_tokens: int | None = None,
        headers: dict[str, str] | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        timeout: float = 600.0,
    ) -> None:
        # A base URL may carry a query (Gemini's ``?key=``): it goes on every endpoint URL.
        root, _, self.base_query = (base_url or self.default_base_url).partition("?")
        self.base_url = root.rstrip("/")
        self.api_key = api_key
        self.model = model
        self.streaming = stream
        self.max_tokens = max_tokens
        self.extra_headers = dict(headers or {})
        self.transport = transport
        self.timeout = timeout
        self.skipped = Skipped()

    # ------------------------------------------------------------------ provider-specific parts

    def build_body(self, request: ModelRequest) -> dict[str, Any]:
        raise NotImplementedError

    def auth_headers(self) -> dict[str, str]:
        raise NotImplementedError

    def translator(self) -> StreamTranslator:
        raise NotImplementedError

    def translate_response(self, data: Any, skipped: Skipped) -> list[Chunk]:
        raise NotImplementedError

    # ------------------------------------------------------------------ endpoints (cassettes use these)

    @classmethod
    def matches(cls, url: str) -> bool:
        """Whether ``url`` names this adapter's endpoint."""
        return urlsplit(url).path.rstrip("/").endswith(cls.path)

    @classmethod
    def matches_request(cls, url: str, request_json: Mapping[str, Any]) -> bool:
        """Whether a request to ``url`` with this body is this adapter's API where the URL alone
        does not say (an endpoint several APIs share); by default the URL decides alone."""
        return False

    @classmethod
    def replay_settings(cls, url: str, request_json: Mapping[str, Any] | None, is_stream: bool) -> dict[str, Any]:
        """How to build an adapter that sends what was recorded at ``url``.

        ``{"base_url", "stream", "model"}``: the model is ``None`` when it travels in the body
        (the loop's request names it); APIs that put it in the URL return it from there.
        """
        parts = urlsplit(url)
        path = parts.path.rstrip("/")
        stream = bool(request_json["stream"]) if request_json is not None and "stream" in request_json else is_stream
        return {"base_url": f"{parts.scheme}://{parts.netloc}{path[: len(path) - len(cls.path)]}", "stream": stream, "model": None}

    @property
    def url(self) -> str:
        return self.base_url + self.path

    def endpoint(self, request: ModelRequest) -> str:
        """The URL this request is sent to."""
        return self.url

    def model_name(self, request: ModelRequest) -> str:
        return self.model or request["model"]

    def headers(self) -> dict[str, str]:
        headers = {"content-type": "application/json", "accept-encoding": "identity"}
        headers["accept"] = "text/event-stream" if self.streaming else "application/json"
        headers.update(self.auth_headers())
        headers.update(self.extra_headers)
        return headers

    def sign(self, request: httpx.Request) -> httpx.Request:
        """Last touch before sending (AWS signs the final bytes); the default changes nothing."""
        return request

    def http_error(self, response: httpx.Response, text: str) -> ProviderError:
        return error_from_body(response.status_code, text, response.reason_phrase, response.headers)

    # ------------------------------------------------------------------ shared driver

    async def stream(self, request: ModelRequest) -> AsyncIterator[Chunk]:
        """Send the request and yield its chunks (the ``ModelAdapter`` contract).

        HTTP errors raise ``ProviderError`` (status and code); a stream cut before its terminal
        event raises ``StreamTruncatedError``; once the signal fires the stream stops at once,
        yielding nothing more.
        """
        self.skipped = Skipped()
        signal = request.get("signal")
        if signal is not None and signal.aborted:
            return
        body = self.build_body(request)
        url = self.endpoint(request)
        if self.base_query:
            url += ("&" if "?" in url else "?") + self.base_query
        problem = http_url_problem(url)
        if problem is not None:  # nothing could answer it: the same failure as a refused connection
            raise ProviderError(f"InvalidURL: {problem} ({url})", code="NETWORK_ERROR")
        # A given transport (replay, recording) must not be bypassed by proxy settings from the env.
        async with httpx.AsyncClient(transport=self.transport, timeout=self.timeout, trust_env=self.transport is None) as client:
            req = self.sign(client.build_request("POST", url, json=body, headers=self.headers()))
            try:
                ok, response = await _race(client.send(req, stream=True), signal)
                if not ok or response is None:
                    return
                try:
                    async for chunk in self._read(response, signal):
                        yield chunk
                finally:
                    await response.aclose()
            except httpx.TransportError as exc:
                # Connection refused, timeouts, a dropped stream: a provider failure with a code.
                raise ProviderError(f"{type(exc).__name__}: {exc} ({url})", code="NETWORK_ERROR") from exc

    async def _read(self, response: httpx.Response, signal: AbortSignal | None) -> AsyncIterator[Chunk]:
        content_type = response.headers.get("content-type", "")
        if response.status_code >= 400:
            ok, raw = await _race(response.aread(), signal)
            if not ok or raw is None:
                return
            raise self.http_error(response, raw.decode("utf-8", "replace"))
        framing: SSEFraming | EventStreamFraming
        if "text/event-stream" in content_type:
            framing = SSEFraming()
        elif EVENTSTREAM_CONTENT_TYPE in content_type:
            framing = EventStreamFraming()
        else:
            ok, raw = await _race(response.aread(), signal)
            if not ok or raw is None:
                return
            try:
                data = json.loads(raw.decode(response.charset_encoding or "utf-8"))
            except (ValueError, RecursionError, LookupError) as exc:
                raise ProviderError(f"response is not JSON: {exc}", status=response.status_code, code="BAD_RESPONSE") from exc
            if isinstance(data, dict) and isinstance(data.get("error"), dict):
                raise self.http_error(response, raw.decode("utf-8", "replace"))
            if self.response_keys and not (isinstance(data, dict) and any(k in data for k in self.response_keys)):
                raise ProviderError(f"malformed response: no {' or '.join(map(repr, self.response_keys))} ({shape_of(data)}): "
                                    f"not an answer of the {self.name} API", status=response.status_code, code="BAD_RESPONSE")
            try:
                chunks = self.translate_response(data, self.skipped)
            except ProviderError as exc:  # the translator's own verdict on a readable response
                exc.status = response.status_code
                raise
            except Exception as exc:  # any payload that is not the provider's shape: one error, never a traceback
                raise ProviderError(f"malformed response: {type(exc).__name__}: {exc}", status=response.status_code, code="BAD_RESPONSE") from exc
            for chunk in chunks:
                yield chunk
            return
        translator = self.translator()
        self.skipped = translator.skipped
        pieces = response.aiter_bytes().__aiter__()
        while not translator.done:
            ok, piece = await _race(_next(pieces), signal)
            if not ok:
                return
            if piece is None:
                break
            for event in _frames(framing, piece):
                for chunk in _translate(translator, event):
                    yield chunk
                if translator.done:
                    break
        if not translator.done:
            for event in _frames(framing, None):
                for chunk in _translate(translator, event):
                    yield chunk
        for chunk in translator.end():
            yield chunk


def _frames(framing: SSEFraming | EventStreamFraming, piece: bytes | None) -> list[Any]:
    try:
        return framing.feed(piece) if piece is not None else framing.close()
    except ValueError as exc:  # a frame whose checksum or lengths do not hold
        raise ProviderError(f"malformed stream frame: {exc}", code="BAD_EVENT") from exc


def _translate(translator: StreamTranslator, event: Any) -> list[Chunk]:
    try:
        return translator.feed(event)
    except Exception as exc:
        # A payload that is not the provider's JSON (or not its shape): report it, never a traceback.
        raise ProviderError(f"malformed event {str(getattr(event, 'data', ''))[:80]!r}: {exc}", code="BAD_EVENT") from exc


async def _next(iterator: AsyncIterator[bytes]) -> bytes | None:
    try:
        return await iterator.__anext__()
    except StopAsyncIteration:
        return None


def shape_of(data: Any) -> str:
    """A few words on what a JSON document is, for an error saying it is not the answer expected."""
    if isinstance(data, dict):
        return f"keys {', '.join(map(repr, list(data)[:5]))}" if data else "an empty object"
    return f"a JSON {type(data).__name__}"


def json_object(data: Mapping[str, Any], key: str, name: str | None = None) -> dict[str, Any]:
    """The JSON object at ``data[key]`` (missing or null: an empty one). A recorded answer is
    untrusted JSON: another type raises ``ValueError`` naming the field (``name``, else ``key``),
    which the adapter reports as a malformed response rather than reading it as no content."""
    value = data.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValueError(f"{name or key!r} is a JSON {type(value).__name__}, expected an object")
    return value


def json_objects(data: Mapping[str, Any], key: str, name: str | None = None) -> list[dict[str, Any]]:
    """The list of JSON objects at ``data[key]`` (missing or null: none); another type, or an item
    that is no object, raises ``ValueError`` naming the field and the item (see :func:`json_object`)."""
    value = data.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise ValueError(f"{name or key!r} is a JSON {type(value).__name__}, expected a list")
    for n, item in enumerate(value, 1):
        if not isinstance(item, dict):
            raise ValueError(f"{name or key!r} item {n} is a JSON {type(item).__name__}, expected an object")
    return value


def truncated(what: str) -> StreamTruncatedError:
    return StreamTruncatedError(f"event stream ended before {what}")
