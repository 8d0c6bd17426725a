"""What every provider adapter shares: the HTTP call, SSE decoding, errors and abort handling.

A concrete adapter supplies four pure pieces (request body, headers, a stream translator, a
whole-response translator); this base drives them over httpx. Keeping translation pure (events in,
chunks out) is what lets cassettes, the local test server and live endpoints share one code path.
"""

from __future__ import annotations

import asyncio
import codecs
import json
from collections.abc import AsyncIterator, Awaitable
from typing import Any, ClassVar, Protocol, TypeVar

import httpx

from reference_loop.abort import AbortSignal
from reference_loop.protocols import ModelRequest
from reference_loop.vocabulary import Block, BlockType, Chunk, Usage, block_end, block_start

from ..errors import ProviderError, RateLimitError, StreamTruncatedError
from ..sse import SSEEvent, SSEParser

T = TypeVar("T")

_RATE_LIMIT_CODES = frozenset({"rate_limit_exceeded", "rate_limit_error", "overloaded_error"})


class StreamTranslator(Protocol):
    """Turns one response's SSE events into chunks; pure and synchronous."""

    @property
    def done(self) -> bool:
        """True once the provider's terminal event has been seen (nothing after it counts)."""
        ...

    def feed(self, event: SSEEvent) -> list[Chunk]: ...

    def end(self) -> list[Chunk]:
        """End of input: close what is open, then usage, then the one ``finish``.

        Raises ``StreamTruncatedError`` when the stream stopped before its terminal event.
        """
        ...


def error_from_body(status: int, text: str, reason: str = "") -> ProviderError:
    """Map an HTTP error answer (JSON of either provider's shape, or anything) to an error.

    OpenAI: ``{"error": {"message", "type", "code"}}``; Anthropic:
    ``{"type": "error", "error": {"type", "message"}}``. The code is the provider's ``code``,
    else its ``type``, else ``HTTP_<status>``.
    """
    message, code = "", None
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if isinstance(data, dict) and isinstance(data.get("error"), dict):
        err = data["error"]
        message = str(err.get("message") or "")
        code = err.get("code") or err.get("type")
    elif isinstance(data, dict) and isinstance(data.get("error"), str):
        message = data["error"]
    if not message:
        message = " ".join(text.split())[:200] or reason or f"HTTP {status}"
    code_s = str(code) if code else None
    cls = RateLimitError if status == 429 or code_s in _RATE_LIMIT_CODES else ProviderError
    return cls(message, status=status, code=code_s)


def usage_chunk(usage: Usage) -> Chunk:
    return {"type": "usage", "usage": usage}


class BlockBuilder:
    """Tracks the blocks of one response: kit indexes in order of appearance, open/closed state.

    Both streaming translators and the whole-response translators use it, so block numbering and
    the ``block-end`` payloads are identical whichever way a response arrives.
    """

    def __init__(self) -> None:
        self.count = 0
        self.open: dict[int, dict[str, Any]] = {}  # kit index -> {"type", "text"/"id","name","arguments"}
        self.tool_calls = 0

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
        else:
            text = final if final is not None else state["text"]
            block = {"type": state["type"], "text": text}
        return [block_end(index, block)]

    def close_all(self) -> list[Chunk]:
        chunks: list[Chunk] = []
        for index in sorted(self.open):
            chunks.extend(self.close(index))
        return chunks


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


class ProviderAdapter:
    """A ``ModelAdapter`` speaking one provider's HTTP API.

    ``base_url`` is the API root (``https://api.openai.com/v1``); ``model`` overrides the model
    name sent (default: ``request["model"]``); ``stream`` picks the streaming or the whole-response
    form of the API; ``transport`` lets cassettes replay or record (an ``httpx.AsyncBaseTransport``).
    """

    name: ClassVar[str]
    path: ClassVar[str]
    default_base_url: ClassVar[str]
    api_key_env: ClassVar[str]

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
        self.base_url = (base_url or self.default_base_url).rstrip("/")
        self.api_key = api_key
        self.model = model
        self.streaming = stream
        self.max_tokens = max_tokens
        self.extra_headers = dict(headers or {})
        self.transport = transport
        self.timeout = timeout

    # ------------------------------------------------------------------ provider-specific parts

    def build_body(self, request: ModelRequest) -> dict[str, Any]:
        raise NotImplementedError

    def auth_headers(self) -> dict[str, str]:
        raise NotImplementedError

    def translator(self) -> StreamTranslator:
        raise NotImplementedError

    def translate_response(self, data: dict[str, Any]) -> list[Chunk]:
        raise NotImplementedError

    # ------------------------------------------------------------------ shared driver

    @property
    def url(self) -> str:
        return self.base_url + self.path

    def model_name(self, request: ModelRequest) -> str:
        return self.model or request["model"]

    def headers(self) -> dict[str, str]:
        headers = {"content-type": "application/json", "accept-encoding": "identity"}
        headers["accept"] = "text/event-stream" if self.streaming else "application/json"
        headers.update(self.auth_headers())
        headers.update(self.extra_headers)
        return headers

    async def stream(self, request: ModelRequest) -> AsyncIterator[Chunk]:
        """Send the request and yield its chunks (the ``ModelAdapter`` contract).

        HTTP errors raise ``ProviderError`` (status and code); a stream cut before its terminal
        event raises ``StreamTruncatedError``; once the signal fires the stream stops at once,
        yielding nothing more.
        """
        signal = request.get("signal")
        if signal is not None and signal.aborted:
            return
        body = self.build_body(request)
        # A given transport (replay, recording) must not be bypassed by proxy settings from the env.
        async with httpx.AsyncClient(transport=self.transport, timeout=self.timeout, trust_env=self.transport is None) as client:
            req = client.build_request("POST", self.url, json=body, headers=self.headers())
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
                raise ProviderError(f"{type(exc).__name__}: {exc} ({self.url})", code="NETWORK_ERROR") from exc

    async def _read(self, response: httpx.Response, signal: AbortSignal | None) -> AsyncIterator[Chunk]:
        content_type = response.headers.get("content-type", "")
        if response.status_code >= 400:
            ok, raw = await _race(response.aread(), signal)
            if not ok or raw is None:
                return
            raise error_from_body(response.status_code, raw.decode("utf-8", "replace"), response.reason_phrase)
        if "text/event-stream" not in content_type:
            ok, raw = await _race(response.aread(), signal)
            if not ok or raw is None:
                return
            try:
                data = json.loads(raw)
            except ValueError as exc:
                raise ProviderError(f"response is not JSON: {exc}", status=response.status_code, code="BAD_RESPONSE") from exc
            if isinstance(data, dict) and isinstance(data.get("error"), dict):
                raise error_from_body(response.status_code, raw.decode("utf-8", "replace"))
            for chunk in self.translate_response(data):
                yield chunk
            return
        translator = self.translator()
        parser = SSEParser()
        decoder = codecs.getincrementaldecoder("utf-8")()
        pieces = response.aiter_bytes().__aiter__()
        while not translator.done:
            ok, piece = await _race(_next(pieces), signal)
            if not ok:
                return
            if piece is None:
                break
            for event in parser.feed(decoder.decode(piece)):
                for chunk in _translate(translator, event):
                    yield chunk
                if translator.done:
                    break
        if not translator.done:
            for event in parser.feed(decoder.decode(b"", final=True)) + parser.close():
                for chunk in _translate(translator, event):
                    yield chunk
        for chunk in translator.end():
            yield chunk


def _translate(translator: StreamTranslator, event: SSEEvent) -> list[Chunk]:
    try:
        return translator.feed(event)
    except (ValueError, TypeError, AttributeError, KeyError) as exc:
        # A payload that is not the provider's JSON: report it, never a bare traceback.
        raise ProviderError(f"malformed event {event.data[:80]!r}: {exc}", code="BAD_EVENT") from exc


async def _next(iterator: AsyncIterator[bytes]) -> bytes | None:
    try:
        return await iterator.__anext__()
    except StopAsyncIteration:
        return None


def truncated(what: str) -> StreamTruncatedError:
    return StreamTruncatedError(f"event stream ended before {what}")
