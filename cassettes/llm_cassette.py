"""LLM cassettes: load any vcrpy-style YAML cassette, write our own, replay it over httpx.

Accepted on load (all safely, with PyYAML's safe loader):

- stock vcrpy: ``interactions: [{request, response}]``, request ``body`` a string, response
  ``body: {string: ...}`` holding the whole event stream as one string (literal or folded scalar);
- bodies stored as ``!!binary`` (base64 of gzip, deflate or brotli data) with their ``content-encoding``;
- bodies stored as parsed JSON mappings under ``parsed_body`` (pydantic-ai's serializer);
- several interactions per file, identical repeats included;
- our own format, which adds to the response an ``events`` list, one record per server-sent event
  with its arrival ``offset`` in seconds after the response headers. (It keeps ``body.string`` too,
  so stock vcrpy can still replay the file, as one blob.)

The same parser is the ``deserialize`` half of the serializer loopkit registers with vcrpy
(``cassettes.loopkit_vcr``): ``Interaction.to_vcr()`` gives an interaction back in vcrpy's own dict
shape, so vcrpy can play any file loopkit reads.

Replay (``ReplayTransport``) is an httpx transport: it never touches the network. Matching and
play accounting are vcrpy's: each transport holds a ``vcr.cassette.Cassette`` (record mode
``none``) and asks it which recorded interaction answers a request (same method, scheme, host, port
and path; the query is ignored, since SDKs add flags such as ``?beta=true``; the first unused one
wins). What vcrpy cannot do is the body: its httpx stub answers with one ``httpx.ByteStream`` of the
whole body, so the transport streams the recorded events itself, one by one, sleeping the recorded
gaps with ``asyncio.sleep`` so that under the simulator they pass in virtual time. (vcrpy's own
patching is not used here either: it is process-wide, and several cassette-backed models may replay
at once in one simulated run.)
"""

from __future__ import annotations

import asyncio
import datetime
import gzip
import json
import math
import zlib
from collections.abc import AsyncIterator, Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import brotli
import httpx
import yaml
from vcr import matchers
from vcr.cassette import Cassette as VcrCassette
from vcr.errors import UnhandledHTTPRequestError
from vcr.record_mode import RecordMode
from vcr.request import Request as VcrRequest

from .errors import CassetteError, UnmatchedRequestError
from .eventstream import EVENTSTREAM_CONTENT_TYPE, split_frames
from .inputs import read_text
from .sse import parse_block, split_events
from .urls import http_url_problem

FORMAT_KEY = "loopkit"
# libyaml's safe loader when present (several times faster), else PyYAML's: safe either way.
SAFE_LOADER: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@dataclass
class RecordedEvent:
    """One stream event as it arrived, with its offset (s): a server-sent event's raw text (blank
    line included), or one binary event-stream frame (``raw``; ``text`` is then empty)."""

    offset: float
    text: str
    raw: bytes | None = None

    @property
    def data(self) -> bytes:
        """The bytes that went over the wire for this event."""
        return self.raw if self.raw is not None else self.text.encode()


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
    events: list[RecordedEvent] | None = None  # streamed responses only (SSE or event-stream frames)
    timed: bool = False  # whether ``events`` came from the file (else split from the body, offset 0)
    raw: bytes | None = None  # the body's bytes when they are not UTF-8 text (``body`` then decodes them lossily)

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
    def is_eventstream(self) -> bool:
        """AWS's binary event-stream framing (Bedrock ConverseStream)."""
        return EVENTSTREAM_CONTENT_TYPE in self.header("content-type")

    @property
    def is_stream(self) -> bool:
        return self.is_sse or self.is_eventstream

    @property
    def body_bytes(self) -> bytes:
        """The body as it went over the wire (decompressed)."""
        if self.events is not None and self.timed:
            return b"".join(e.data for e in self.events)
        return self.raw if self.raw is not None else self.body.encode()

    @property
    def request_json(self) -> dict[str, Any] | None:
        try:
            data = json.loads(self.request_body or "")
        except (ValueError, RecursionError):
            return None
        return data if isinstance(data, dict) else None

    @property
    def streaming(self) -> bool:
        """Whether the request asked for a stream: as its adapter reads it from the URL (Gemini,
        Bedrock) or the body (``"stream": true``), else whether a stream came back."""
        from .providers import adapter_for_url

        cls = adapter_for_url(self.uri, self.request_json)
        if cls is not None:
            return bool(cls.replay_settings(self.uri, self.request_json, self.is_stream)["stream"])
        data = self.request_json
        if data is not None and "stream" in data:
            return bool(data["stream"])
        return self.is_stream

    def chunks(self) -> list[tuple[float, bytes]]:
        """The body as (offset, bytes) pieces: one per event for a stream, else one piece."""
        if self.events is not None:
            return [(e.offset, e.data) for e in self.events]
        return [(0.0, self.body_bytes)]

    def to_vcr(self) -> dict[str, Any]:
        """This interaction as vcrpy keeps it in memory: ``{"request": ..., "response": ...}``.

        The body is the decoded text (so no ``content-encoding``); timed events are kept under
        the response's ``events`` key, which vcrpy carries along untouched and ignores.
        """
        response: dict[str, Any] = {
            "status": {"code": self.status, "message": self.reason},
            "headers": {k: list(v) for k, v in self.headers.items()},
            "body": {"string": self.raw if self.raw is not None else self.body},
        }
        if self.timed and self.events is not None:
            response["events"] = [{"offset": e.offset, "data": e.raw if e.raw is not None else e.text} for e in self.events]
        request = {
            "method": self.method,
            "uri": self.uri,
            "body": self.request_body,
            "headers": {k: list(v) for k, v in self.request_headers.items()},
        }
        return {"request": request, "response": response}


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
            text = read_text(path)  # refuses a FIFO (it would block), a device, a huge file
        except OSError as exc:
            raise CassetteError(path, f"cannot read: {exc}") from exc
        return cls.parse(text, path)

    @classmethod
    def parse(cls, text: str, path: str | Path) -> Cassette:
        """Parse cassette text; ``path`` only names the file in errors."""
        path = Path(path)
        try:
            data = yaml.load(text, Loader=SAFE_LOADER)
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
            problem = getattr(exc, "problem", None) or str(exc)
            raise CassetteError(path, f"bad YAML{where}: {problem}") from exc
        except RecursionError as exc:
            raise CassetteError(path, "bad YAML: nested too deeply") from exc
        except (ValueError, TypeError, OverflowError) as exc:  # a tag's value the constructor rejects
            raise CassetteError(path, f"bad YAML: {exc}") from exc
        if not isinstance(data, dict) or not isinstance(data.get("interactions"), list):
            raise CassetteError(path, "not a vcrpy cassette: no 'interactions' list at the top level")
        if not data["interactions"]:
            raise CassetteError(path, "no interactions recorded")
        interactions = [_interaction(path, n, raw) for n, raw in enumerate(data["interactions"], 1)]
        meta: dict[str, Any] = data[FORMAT_KEY] if isinstance(data.get(FORMAT_KEY), dict) else {}
        return cls(path, interactions, meta)


def _fail(path: Path, n: int, problem: str) -> CassetteError:
    return CassetteError(path, f"interaction {n}: {problem}")


_SCALARS = (str, bytes, int, float)


def _headers(path: Path, n: int, where: str, raw: Any) -> dict[str, list[str]]:
    """Headers as ``{name: [values]}``; anything else is a one-line error naming the header."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise _fail(path, n, f"{where} headers are a {type(raw).__name__}, expected a mapping")
    out: dict[str, list[str]] = {}
    for name, value in raw.items():
        # Some serializers write a single scalar instead of vcrpy's list of values; botocore's
        # recordings store some values as !!binary.
        values = value if isinstance(value, list) else [value]
        if not values:
            raise _fail(path, n, f"{where} header {str(name)!r} has no value")
        # An unquoted value YAML typed (``openai-version: 2020-10-01`` loads as a date) is the
        # text it was written as.
        values = [v.isoformat() if isinstance(v, datetime.date) else v for v in values]
        if not all(isinstance(v, _SCALARS) and not isinstance(v, bool) for v in values):
            raise _fail(path, n, f"{where} header {str(name)!r} holds a {type(values[0]).__name__}, expected text")
        out[str(name)] = [_header_value(v) for v in values]
    return out


def _header_value(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _json_text(path: Path, n: int, value: Any) -> str:
    try:
        return json.dumps(value)
    except (ValueError, TypeError, RecursionError) as exc:
        raise _fail(path, n, f"parsed_body is not JSON: {type(exc).__name__}") from exc


def _body_text(path: Path, n: int, raw: Any, encoding: str) -> str:
    """A stored body as text (a binary one decoded lossily: see ``_body``)."""
    return _body(path, n, raw, encoding)[0]


def _body(path: Path, n: int, raw: Any, encoding: str) -> tuple[str, bytes | None]:
    """A stored body (str, bytes, ``{string: ...}``) as ``(text, bytes or None)``.

    gzip/deflate is undone first. Bytes that are not UTF-8 (a binary event stream, another
    charset) are kept as they are, with their text decoded lossily for display and scrubbing.
    """
    if isinstance(raw, dict):
        if "string" not in raw and "content" in raw:
            # pydantic-ai's serializer (2026): ``{type: text|json, content: ...}``, a JSON body
            # stored as its parsed value
            content = raw["content"]
            if raw.get("type") == "json" or not isinstance(content, str | bytes | None):
                return _json_text(path, n, content), None
            raw = content
        else:
            raw = raw.get("string")
    if raw is None:
        return "", None
    if isinstance(raw, str):
        return raw, None
    if not isinstance(raw, bytes):
        raise _fail(path, n, f"body is a {type(raw).__name__}, expected a string or !!binary")
    data = raw
    try:
        if "gzip" in encoding or data[:2] == b"\x1f\x8b":
            data = gzip.decompress(data)
        elif "deflate" in encoding:
            data = zlib.decompress(data)
        elif "br" in encoding.replace(" ", "").split(","):
            data = brotli.decompress(data)  # what httpx asks for when brotli is installed (weave's files)
    except (OSError, EOFError, zlib.error, brotli.error) as exc:
        raise _fail(path, n, f"body says content-encoding {encoding or 'gzip'} but does not decompress: {exc}") from exc
    try:
        return data.decode("utf-8"), None
    except UnicodeDecodeError:
        return data.decode("utf-8", "replace"), data


def _first(headers: dict[str, list[str]], name: str) -> str:
    for key, values in headers.items():
        if key.lower() == name and values:
            return values[0]
    return ""


def _interaction(path: Path, n: int, raw: Any) -> Interaction:
    if not isinstance(raw, dict) or not isinstance(raw.get("request"), dict) or not isinstance(raw.get("response"), dict):
        raise _fail(path, n, "needs a 'request' and a 'response' mapping")
    request, response = raw["request"], raw["response"]
    if "status_code" in response and "status" not in response:
        # vcrpy's older httpx form ({status_code, http_version, headers, content}): read as vcrpy
        # reads it, the content the body's string
        response = {"headers": response.get("headers"), "status": {"code": response["status_code"]},
                    "body": {"string": response.get("content", "")}}
    if not request.get("uri") or not request.get("method"):
        raise _fail(path, n, "request has no 'method' or 'uri'")
    method, uri = request["method"], request["uri"]
    if not isinstance(method, str) or not method.isalpha():
        raise _fail(path, n, f"request method {method!r} is not an HTTP method")
    if not isinstance(uri, str) or http_url_problem(uri) is not None:
        raise _fail(path, n, f"request uri {str(uri)[:80]!r} is not an http(s) URL")
    req_headers = _headers(path, n, "request", request.get("headers"))
    if "parsed_body" in request:
        req_body: str | None = _json_text(path, n, request["parsed_body"])
    else:
        req_body = _body_text(path, n, request.get("body"), _first(req_headers, "content-encoding")) or None
    status = response.get("status")
    code = status.get("code") if isinstance(status, dict) else status
    if not isinstance(code, int) or isinstance(code, bool):
        raise _fail(path, n, "response has no integer status code")
    if not 100 <= code <= 599:
        raise _fail(path, n, f"response status {code} is not an HTTP status (100-599)")
    reason = str(status.get("message", "")) if isinstance(status, dict) else ""
    headers = _headers(path, n, "response", response.get("headers"))
    encoding = _first(headers, "content-encoding").lower()
    events: list[RecordedEvent] | None = None
    raw_body: bytes | None = None
    if isinstance(response.get("events"), list):
        events = []
        for record in response["events"]:
            if not isinstance(record, dict) or not isinstance(record.get("data"), str | bytes):
                raise _fail(path, n, "each 'events' record needs a 'data' string (or !!binary frame) and an 'offset'")
            try:
                offset = float(record.get("offset") or 0.0)
            except (TypeError, ValueError, OverflowError) as exc:
                raise _fail(path, n, f"event offset {record.get('offset')!r} is not a number") from exc
            if not math.isfinite(offset) or offset < 0:
                raise _fail(path, n, f"event offset {record.get('offset')!r} is not a time after the headers")
            data = record["data"]
            events.append(RecordedEvent(offset, data, None) if isinstance(data, str) else RecordedEvent(offset, "", bytes(data)))
        if any(e.raw is not None for e in events):
            raw_body = b"".join(e.data for e in events)
            body = raw_body.decode("utf-8", "replace")
        else:
            body = "".join(e.text for e in events)
    elif "parsed_body" in response:
        body = _json_text(path, n, response["parsed_body"])
    else:
        body, raw_body = _body(path, n, response.get("body"), encoding)
    # Bodies are kept decoded: what we serve must not claim an encoding or a stale length.
    headers = {k: v for k, v in headers.items() if k.lower() not in ("content-encoding", "content-length")}
    if not _first(headers, "content-type"):
        # Some serializers drop response headers; sniff the body so the adapter reads it right.
        sse = body.lstrip().startswith(("data:", "event:"))
        frames = raw_body is not None and _frames_or_none(raw_body) is not None
        headers["content-type"] = [EVENTSTREAM_CONTENT_TYPE if frames else "text/event-stream" if sse else "application/json"]
    interaction = Interaction(method.upper(), uri, req_headers, req_body, code, reason, headers, body,
                              events, events is not None, raw_body)
    if interaction.is_eventstream and code < 400:
        if events is not None:
            frames_ok = _frames_or_none(interaction.body_bytes)
            if frames_ok is None or frames_ok[1]:
                raise _fail(path, n, "malformed event stream: the recorded frames do not decode")
        else:
            frames_found = _frames_or_none(raw_body if raw_body is not None else body.encode())
            if frames_found is None:
                raise _fail(path, n, "malformed event stream: a frame's length or checksum does not hold")
            whole, leftover = frames_found
            if leftover:
                raise _fail(path, n, f"truncated event stream: the body ends mid-frame ({len(leftover)} bytes left)")
            if not whole:
                raise _fail(path, n, "truncated event stream: no frame")
            interaction.events = [RecordedEvent(0.0, "", frame) for frame in whole]
    elif interaction.is_sse and code < 400:
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


def _frames_or_none(data: bytes) -> tuple[list[bytes], bytes] | None:
    try:
        return split_frames(data)
    except ValueError:
        return None


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


def decoded_path(r1: VcrRequest, r2: VcrRequest) -> None:
    """vcrpy's path matcher, on percent-decoded paths: a scrubbed recording keeps a placeholder
    as typed (``projects/<project-id>/...``), which httpx sends encoded (``%3Cproject-id%3E``)."""
    if unquote(r1.path or "/") != unquote(r2.path or "/"):
        raise AssertionError(f"{r1.path} != {r2.path}")


# vcrpy's matchers: the query is left out on purpose (SDKs add flags such as ``?beta=true``).
REPLAY_MATCH_ON = (matchers.method, matchers.scheme, matchers.host, matchers.port, decoded_path)


class _InMemoryPersister:
    """A vcrpy persister serving already-parsed interactions (and never saving anything).

    ``ReplayTransport`` replays a ``Cassette`` that may be a subset of a file (``loopkit cassette
    show`` plays interactions one at a time), so vcrpy gets them from memory, through its own
    persister interface, rather than from the file.
    """

    def __init__(self, cassette: Cassette) -> None:
        self._cassette = cassette

    def load_cassette(self, cassette_path: str, serializer: Any) -> tuple[list[VcrRequest], list[dict[str, Any]]]:
        requests, responses = [], []
        for interaction in self._cassette.interactions:
            data = interaction.to_vcr()
            requests.append(VcrRequest(**data["request"]))
            responses.append(data["response"])
        return requests, responses

    def save_cassette(self, cassette_path: str, cassette_dict: dict[str, Any], serializer: Any) -> None:
        raise AssertionError("a replay-only cassette is never saved")  # record mode none: unreachable


def vcr_cassette(cassette: Cassette) -> VcrCassette:
    """A vcrpy ``Cassette`` (record mode ``none``) over ``cassette``'s interactions, for matching."""
    return VcrCassette.load(
        path=str(cassette.path),
        persister=_InMemoryPersister(cassette),
        record_mode=RecordMode.NONE,
        match_on=REPLAY_MATCH_ON,
    )


class ReplayTransport(httpx.AsyncBaseTransport):
    """Serves a cassette to httpx; never opens a connection.

    vcrpy picks the interaction (``vcr_cassette``: its matchers, its play counts); this transport
    streams the chosen interaction's events with their recorded gaps. ``allow_playback_repeats``
    lets a used interaction answer again once no unused one matches (vcrpy's own flag would keep
    answering with the first match even while a later one is unused, which would replay turn one
    of a recorded conversation forever); ``pace`` (default on) sleeps the recorded gaps.
    ``assert_all_played()`` is the strict check (vcrpy's ``all_played``).
    """

    def __init__(self, cassette: Cassette, *, allow_playback_repeats: bool = False, pace: bool = True) -> None:
        self.cassette = cassette
        self.allow_playback_repeats = allow_playback_repeats
        self.pace = pace
        self.vcr = vcr_cassette(cassette)
        self.played: list[int] = []  # interaction positions, in play order

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        body = await request.aread()
        interaction = self.next_for(request.method, str(request.url), body, request.headers)
        return httpx.Response(
            interaction.status,
            # As bytes: a recorded value may hold what httpx will not encode as ASCII (UTF-8 text).
            headers=[(k.encode("utf-8"), v.encode("utf-8")) for k, values in interaction.headers.items() for v in values],
            stream=_ReplayStream(interaction.chunks(), self.pace),
            request=request,
        )

    def next_for(self, method: str, url: str, body: bytes | None = None, headers: Any = None) -> Interaction:
        """The interaction answering ``method url`` (first unused match), marked as played."""
        wanted = VcrRequest(method.upper(), url, body, headers or {})
        cassette = self.vcr
        cassette.allow_playback_repeats = False
        if not cassette.can_play_response_for(wanted):
            try:
                cassette.responses_of(wanted)
            except UnhandledHTTPRequestError:
                raise UnmatchedRequestError(self.cassette.path, f"no recorded interaction for {method} {url} (none recorded for it)") from None
            if not self.allow_playback_repeats:
                raise UnmatchedRequestError(self.cassette.path, f"no recorded interaction for {method} {url} (all matching interactions already played)")
            cassette.allow_playback_repeats = True  # every match is used: repeat the first one
        try:
            response = cassette.play_response(wanted)
        finally:
            cassette.allow_playback_repeats = False
        choice = next(i for i, recorded in enumerate(cassette.responses) if recorded is response)
        self.played.append(choice)
        return self.cassette.interactions[choice]

    def unplayed(self) -> list[int]:
        return [i for i in range(len(self.cassette.interactions)) if not self.vcr.play_counts[i]]

    def assert_all_played(self, ignore: Collection[int] = ()) -> None:
        """Strict mode: raise ``CassetteError`` when some interaction (but those at the 0-based
        positions ``ignore``) was never requested."""
        if self.vcr.all_played:
            return
        left = [i for i in self.unplayed() if i not in ignore]
        if not left:
            return
        names = ", ".join(f"#{i + 1} {self.cassette.interactions[i].method} {self.cassette.interactions[i].uri}" for i in left)
        raise CassetteError(self.cassette.path, f"{len(left)} interaction(s) never played: {names}")
