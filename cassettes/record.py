"""Record LLM cassettes: an httpx transport that tees real traffic into our cassette format.

Each server-sent event is stored as its own record with its arrival offset (seconds after the
response headers), and the whole body is also kept as ``body.string`` so stock vcrpy can replay
the file. Secrets never reach disk: sensitive headers are replaced by ``<filtered>`` before
anything is written, and every value they held is also erased from the rest of the cassette (URL,
bodies, other headers), in case an endpoint echoes it back.
"""

from __future__ import annotations

import asyncio
import re
import zlib
from collections.abc import AsyncIterator, Iterable
from pathlib import Path
from typing import Any

import httpx
import yaml

from reference_loop.protocols import ModelRequest
from reference_loop.vocabulary import Chunk

from .errors import ProviderError
from .llm_cassette import FORMAT_KEY
from .sse import split_events

FILTERED = "<filtered>"
SENSITIVE_HEADERS: frozenset[str] = frozenset(
    {
        "authorization",
        "proxy-authorization",
        "x-api-key",
        "api-key",
        "x-goog-api-key",
        "cookie",
        "set-cookie",
        "openai-organization",
        "openai-project",
        "anthropic-organization-id",
    }
)
_SECRET_QUERY = re.compile(r"(?i)([?&](?:key|api_key|api-key|access_token)=)[^&]*")


class _Dumper(yaml.SafeDumper):
    """Multi-line strings as literal blocks, so recorded streams read line by line."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


class CassetteRecorder:
    """Collects interactions and writes them, scrubbed, as one cassette file.

    ``filter_headers`` adds header names to scrub; ``header`` is the comment written at the top of
    the file (say what the cassette was recorded against).
    """

    def __init__(self, *, filter_headers: Iterable[str] = (), header: str = "", meta: dict[str, Any] | None = None) -> None:
        self.sensitive = SENSITIVE_HEADERS | {h.lower() for h in filter_headers}
        self.header = header
        self.meta = dict(meta or {})
        self.interactions: list[dict[str, Any]] = []
        self.secrets: set[str] = set()

    def scrub_headers(self, headers: Iterable[tuple[str, str]]) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for name, value in headers:
            key = name.lower()
            if key in self.sensitive:
                self._remember(value)
                value = FILTERED
            elif key in ("content-encoding", "content-length"):
                continue  # bodies are stored decoded; these would lie on replay
            out.setdefault(key, []).append(value)
        return out

    def _remember(self, value: str) -> None:
        for part in [value, *value.split()]:
            if len(part) >= 8:  # long enough to be a credential, not a scheme word like "Bearer"
                self.secrets.add(part)

    def add(self, interaction: dict[str, Any]) -> None:
        self.interactions.append(interaction)

    def dumps(self) -> str:
        """The cassette text: header comment, metadata, interactions; secrets erased."""
        data: dict[str, Any] = {}
        if self.meta:
            data[FORMAT_KEY] = self.meta
        data["interactions"] = self.interactions
        data["version"] = 1
        text = yaml.dump(data, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=1 << 16)
        for secret in sorted(self.secrets, key=len, reverse=True):
            text = text.replace(secret, FILTERED)
        comment = "".join(f"# {line}\n".replace("# \n", "#\n") for line in self.header.splitlines())
        return comment + text

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(self.dumps(), encoding="utf-8")
        return path


class _TeeStream(httpx.AsyncByteStream):
    """Passes the body through unchanged while recording it event by event."""

    def __init__(self, inner: httpx.Response, record: dict[str, Any], sse: bool, encoding: str, recorder: CassetteRecorder) -> None:
        self._inner = inner
        self._record = record
        self._sse = sse
        self._recorder = recorder
        self._decompress = zlib.decompressobj(16 + zlib.MAX_WBITS if "gzip" in encoding else zlib.MAX_WBITS) if encoding in ("gzip", "deflate") else None
        self._start = asyncio.get_running_loop().time()
        self._text = ""
        self._events: list[dict[str, Any]] = []
        self._finished = False

    def _offset(self) -> float:
        return round(asyncio.get_running_loop().time() - self._start, 4)

    def _take(self, data: bytes) -> None:
        if self._decompress is not None:
            data = self._decompress.decompress(data)
        self._text += data.decode("utf-8", "replace")
        if self._sse:
            complete, rest = split_events(self._text)
            offset = self._offset()
            self._events += [{"offset": offset, "data": text} for text in complete]
            self._text = rest

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for data in self._inner.aiter_raw():
            self._take(data)
            yield data
        self._finish()

    def _finish(self) -> None:
        if self._finished:
            return
        self._finished = True
        response = self._record["response"]
        if self._sse:
            if self._text:  # a trailing partial event is kept as it came (replay reports it)
                self._events.append({"offset": self._offset(), "data": self._text})
            response["body"] = {"string": "".join(e["data"] for e in self._events)}
            response["events"] = self._events
        else:
            response["body"] = {"string": self._text}
        self._recorder.add(self._record)

    async def aclose(self) -> None:
        self._finish()
        await self._inner.aclose()


class RecordingTransport(httpx.AsyncBaseTransport):
    """Forwards to ``inner`` (a real transport) and records every exchange into ``recorder``."""

    def __init__(self, recorder: CassetteRecorder, inner: httpx.AsyncBaseTransport | None = None) -> None:
        self.recorder = recorder
        self.inner = inner or httpx.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        body = (await request.aread()).decode("utf-8", "replace")
        url = _SECRET_QUERY.sub(lambda m: m.group(1) + FILTERED, str(request.url))
        for match in _SECRET_QUERY.finditer(str(request.url)):
            self.recorder._remember(match.group(0).split("=", 1)[1])
        record: dict[str, Any] = {
            "request": {
                "method": request.method,
                "uri": url,
                "headers": self.recorder.scrub_headers(request.headers.multi_items()),
                "body": body or None,
            },
            "response": {},
        }
        response = await self.inner.handle_async_request(request)
        record["response"]["status"] = {"code": response.status_code, "message": httpx.codes.get_reason_phrase(response.status_code)}
        record["response"]["headers"] = self.recorder.scrub_headers(response.headers.multi_items())
        sse = "text/event-stream" in response.headers.get("content-type", "")
        encoding = response.headers.get("content-encoding", "").lower()
        return httpx.Response(
            response.status_code,
            headers=response.headers,
            stream=_TeeStream(response, record, sse, encoding, self.recorder),
            extensions=response.extensions,
            request=request,
        )

    async def aclose(self) -> None:
        await self.inner.aclose()


async def record_cassette(
    out: str | Path,
    *,
    adapter: str,
    request: ModelRequest,
    base_url: str | None = None,
    api_key: str | None = None,
    stream: bool = True,
    max_tokens: int | None = None,
    filter_headers: Iterable[str] = (),
    header: str = "",
    meta: dict[str, Any] | None = None,
) -> tuple[Path, list[Chunk], ProviderError | None]:
    """Send ``request`` through ``adapter`` to a real endpoint and write what went over the wire.

    Returns the file, the chunks the adapter yielded and the provider error it raised, if any (an
    error answer is recorded too: replaying it must give the same error).
    """
    from .providers import ADAPTERS

    recorder = CassetteRecorder(filter_headers=filter_headers, header=header, meta={"adapter": adapter, **(meta or {})})
    transport = RecordingTransport(recorder)
    model = ADAPTERS[adapter](base_url=base_url, api_key=api_key, stream=stream, max_tokens=max_tokens, transport=transport)
    chunks: list[Chunk] = []
    error: ProviderError | None = None
    try:
        async for chunk in model.stream(request):
            chunks.append(chunk)
    except ProviderError as exc:
        error = exc
    finally:
        await transport.aclose()
    if error is not None and not recorder.interactions:
        raise error  # nothing came back (connection refused...): there is nothing to keep
    return recorder.save(out), chunks, error
