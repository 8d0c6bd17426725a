"""LLM cassettes: load any vcrpy-style YAML cassette, write our own, replay it over httpx.

Accepted on load (all safely, with ``yaml.SafeLoader``):

- stock vcrpy: ``interactions: [{request, response}]``, request ``body`` a string, response
  ``body: {string: ...}`` holding the whole event stream as one string (literal or folded scalar);
- bodies stored as ``!!binary`` (base64 of gzip or deflate data) with ``content-encoding: gzip``;
- bodies stored as parsed JSON mappings under ``parsed_body`` (pydantic-ai's serializer);
- several interactions per file, identical repeats included;
- our own format, which adds to the response an ``events`` list, one record per server-sent event
  with its arrival ``offset`` in seconds after the response headers. (It keeps ``body.string`` too,
  so stock vcrpy can still replay the file, as one blob.)

Replay (``ReplayTransport``) is an httpx transport: it never touches the network, matches each
request to the first unused interaction with the same method, host and path (the query is
ignored: SDKs add flags such as ``?beta=true``), and streams the recorded events one by one,
sleeping the recorded gaps with ``asyncio.sleep`` so that under the simulator they pass in
virtual time.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import zlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import yaml

from .errors import CassetteError, UnmatchedRequestError
from .sse import parse_block, split_events

FORMAT_KEY = "loopkit"


@dataclass
class RecordedEvent:
    """One server-sent event as it arrived: its raw text (blank line included) and offset (s)."""

    offset: float
    text: str


@dataclass
class Interaction:
    """One request/response pair, with the response body decoded to text."""

    method: str
    uri: str
    request_headers: dict[str, list[str]]
    request_body: str | None
    status: int
    reason: str
    headers: dict[str, list[str]]
    body: str
    events: list[RecordedEvent] | None = None  # SSE responses only

    def header(self, name: str) -> str:
        """First value of a response header, case-insensitively ("" when absent)."""
        for key, values in self.headers.items():
            if key.lower() == name.lower() and values:
                return str(values[0])
        return ""

    @property
    def is_sse(self) -> bool:
        return "text/event-stream" in self.header("content-type")

    @property
    def request_json(self) -> dict[str, Any] | None:
        try:
            data = json.loads(self.request_body or "")
        except ValueError:
            return None
        return data if isinstance(data, dict) else None

    @property
    def streaming(self) -> bool:
        """Whether the request asked for a stream (``"stream": true``), else whether one came back."""
        data = self.request_json
        if data is not None and "stream" in data:
            return bool(data["stream"])
        return self.is_sse

    def chunks(self) -> list[tuple[float, bytes]]:
        """The body as (offset, bytes) pieces: one per event for SSE, else one piece."""
        if self.events is not None:
            return [(e.offset, e.text.encode()) for e in self.events]
        return [(0.0, self.body.encode())]


@dataclass
class Cassette:
    """A loaded cassette: its file path (for error messages), interactions and our metadata."""

    path: Path
    interactions: list[Interaction]
    meta: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def load(cls, path: str | Path) -> Cassette:
        """Load and validate a cassette; any problem raises ``CassetteError`` naming the file."""
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise CassetteError(path, f"cannot read: {exc}") from exc
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
            problem = getattr(exc, "problem", None) or str(exc)
            raise CassetteError(path, f"bad YAML{where}: {problem}") from exc
        if not isinstance(data, dict) or not isinstance(data.get("interactions"), list):
            raise CassetteError(path, "not a vcrpy cassette: no 'interactions' list at the top level")
        if not data["interactions"]:
            raise CassetteError(path, "no interactions recorded")
        interactions = [_interaction(path, n, raw) for n, raw in enumerate(data["interactions"], 1)]
        meta: dict[str, Any] = data[FORMAT_KEY] if isinstance(data.get(FORMAT_KEY), dict) else {}
        return cls(path, interactions, meta)


def _fail(path: Path, n: int, problem: str) -> CassetteError:
    return CassetteError(path, f"interaction {n}: {problem}")


def _headers(raw: Any) -> dict[str, list[str]]:
    if not isinstance(raw, dict):
        return {}
    # Some serializers write a single scalar instead of vcrpy's list of values.
    return {str(k): [str(x) for x in v] if isinstance(v, list) else [str(v)] for k, v in raw.items()}


def _body_text(path: Path, n: int, raw: Any, encoding: str) -> str:
    """A stored body (str, bytes, ``{string: ...}``) as text, undoing gzip/deflate when needed."""
    if isinstance(raw, dict):
        raw = raw.get("string")
    if raw is None:
        return ""
    if isinstance(raw, str):
        return raw
    if not isinstance(raw, bytes):
        raise _fail(path, n, f"body is a {type(raw).__name__}, expected a string or !!binary")
    data = raw
    try:
        if "gzip" in encoding or data[:2] == b"\x1f\x8b":
            data = gzip.decompress(data)
        elif "deflate" in encoding:
            data = zlib.decompress(data)
    except (OSError, EOFError, zlib.error) as exc:
        raise _fail(path, n, f"body says content-encoding {encoding or 'gzip'} but does not decompress: {exc}") from exc
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _fail(path, n, f"body is not UTF-8 text ({encoding or 'no content-encoding'})") from exc


def _first(headers: dict[str, list[str]], name: str) -> str:
    for key, values in headers.items():
        if key.lower() == name and values:
            return values[0]
    return ""


def _interaction(path: Path, n: int, raw: Any) -> Interaction:
    if not isinstance(raw, dict) or not isinstance(raw.get("request"), dict) or not isinstance(raw.get("response"), dict):
        raise _fail(path, n, "needs a 'request' and a 'response' mapping")
    request, response = raw["request"], raw["response"]
    if not request.get("uri") or not request.get("method"):
        raise _fail(path, n, "request has no 'method' or 'uri'")
    req_headers = _headers(request.get("headers"))
    if "parsed_body" in request:
        req_body: str | None = json.dumps(request["parsed_body"])
    else:
        req_body = _body_text(path, n, request.get("body"), _first(req_headers, "content-encoding")) or None
    status = response.get("status")
    code = status.get("code") if isinstance(status, dict) else status
    if not isinstance(code, int):
        raise _fail(path, n, "response has no integer status code")
    reason = str(status.get("message", "")) if isinstance(status, dict) else ""
    headers = _headers(response.get("headers"))
    encoding = _first(headers, "content-encoding").lower()
    events: list[RecordedEvent] | None = None
    if isinstance(response.get("events"), list):
        events = []
        for record in response["events"]:
            if not isinstance(record, dict) or not isinstance(record.get("data"), str):
                raise _fail(path, n, "each 'events' record needs a 'data' string and an 'offset'")
            events.append(RecordedEvent(float(record.get("offset") or 0.0), record["data"]))
        body = "".join(e.text for e in events)
    elif "parsed_body" in response:
        body = json.dumps(response["parsed_body"])
    else:
        body = _body_text(path, n, response.get("body"), encoding)
    # Bodies are kept decoded: what we serve must not claim an encoding or a stale length.
    headers = {k: v for k, v in headers.items() if k.lower() not in ("content-encoding", "content-length")}
    if not _first(headers, "content-type"):
        # Some serializers drop response headers; sniff the body so the adapter reads it right.
        sse = body.lstrip().startswith(("data:", "event:"))
        headers["content-type"] = ["text/event-stream" if sse else "application/json"]
    interaction = Interaction(str(request["method"]).upper(), str(request["uri"]), req_headers, req_body, code, reason, headers, body, events)
    if interaction.is_sse and code < 400:
        raw_events, rest = split_events(body) if events is None else ([e.text for e in events], "")
        if rest.strip():
            # Some serializers strip the final blank line: a last event whose data is whole is
            # kept; one cut inside its payload is a truncation.
            if not _whole_event(rest):
                raise _fail(path, n, f"truncated SSE: the stream ends mid-event ({rest.strip()[:60]!r})")
            raw_events.append(rest)
        if not raw_events:
            raise _fail(path, n, "truncated SSE: the event stream is empty")
        if events is None:
            interaction.events = [RecordedEvent(0.0, text) for text in raw_events]
    return interaction


def _whole_event(text: str) -> bool:
    """Whether a trailing event without its blank line still carries complete ``data:``."""
    event = parse_block(text.strip("\n"))
    if event is None:
        return True
    if event.data.strip() == "[DONE]":
        return True
    try:
        json.loads(event.data)
    except ValueError:
        return False
    return True


class _ReplayStream(httpx.AsyncByteStream):
    def __init__(self, pieces: list[tuple[float, bytes]], pace: bool) -> None:
        self._pieces = pieces
        self._pace = pace

    async def __aiter__(self) -> AsyncIterator[bytes]:
        elapsed = 0.0
        for offset, data in self._pieces:
            if self._pace:
                # Always yield to the loop, even for a zero gap: each event is its own arrival.
                await asyncio.sleep(max(0.0, offset - elapsed))
                elapsed = max(elapsed, offset)
            yield data


def _key(method: str, url: str) -> tuple[str, str, str]:
    parts = urlsplit(url)
    return method.upper(), parts.netloc.lower(), parts.path.rstrip("/")


class ReplayTransport(httpx.AsyncBaseTransport):
    """Serves a cassette to httpx; never opens a connection.

    ``allow_playback_repeats`` lets a used interaction answer again; ``pace`` (default on) sleeps
    the recorded gaps between events. ``assert_all_played()`` is the strict check.
    """

    def __init__(self, cassette: Cassette, *, allow_playback_repeats: bool = False, pace: bool = True) -> None:
        self.cassette = cassette
        self.allow_playback_repeats = allow_playback_repeats
        self.pace = pace
        self.played: list[int] = []  # interaction positions, in play order

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        interaction = self.next_for(request.method, str(request.url))
        return httpx.Response(
            interaction.status,
            headers=[(k, v) for k, values in interaction.headers.items() for v in values],
            stream=_ReplayStream(interaction.chunks(), self.pace),
            request=request,
        )

    def next_for(self, method: str, url: str) -> Interaction:
        """The interaction answering ``method url`` (first unused match), marked as played."""
        key = _key(method, url)
        candidates = [i for i, x in enumerate(self.cassette.interactions) if _key(x.method, x.uri) == key]
        unused = [i for i in candidates if i not in self.played]
        if unused:
            choice = unused[0]
        elif candidates and self.allow_playback_repeats:
            choice = candidates[0]
        else:
            detail = "all matching interactions already played" if candidates else "none recorded for it"
            raise UnmatchedRequestError(self.cassette.path, f"no recorded interaction for {method} {url} ({detail})")
        self.played.append(choice)
        return self.cassette.interactions[choice]

    def unplayed(self) -> list[int]:
        return [i for i in range(len(self.cassette.interactions)) if i not in self.played]

    def assert_all_played(self) -> None:
        """Strict mode: raise ``CassetteError`` when some interaction was never requested."""
        left = self.unplayed()
        if left:
            names = ", ".join(f"#{i + 1} {self.cassette.interactions[i].method} {self.cassette.interactions[i].uri}" for i in left)
            raise CassetteError(self.cassette.path, f"{len(left)} interaction(s) never played: {names}")
