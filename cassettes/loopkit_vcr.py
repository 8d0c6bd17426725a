"""vcrpy, configured for LLM cassettes: recording, scrubbing, persistence and strict replay.

vcrpy does the HTTP-cassette work: it patches httpx's transports while a cassette is in use,
matches requests to recorded interactions, enforces the record mode (``none``, ``once``,
``new_episodes``, ``all``), filters headers and query parameters, runs the
``before_record_request`` / ``before_record_response`` hooks, decodes compressed bodies, decides
when to save and tracks what was played (``cassette.all_played``). loopkit plugs into vcrpy's own
extension points to add what vcrpy lacks:

- a **serializer** (registered as ``"loopkit"``) that reads every cassette shape loopkit reads
  (``llm_cassette.Cassette.parse``) and writes loopkit's format: each server-sent event its own
  record with its arrival offset, plus the joined body, so stock vcrpy still replays the file;
- a **persister** that writes atomically, erases every secret value it saw from the whole file
  (bodies echo keys), keeps the file's header comment and ``loopkit:`` metadata, and turns an
  unreadable cassette into a one-line ``CassetteError`` (vcrpy's file persister would log a
  warning and treat it as empty, so ``once`` would silently re-record over it);
- a **timing hook** underneath vcrpy (a ``custom_patches`` entry on httpcore's connection pools):
  vcrpy's httpx stub reads the whole response before handing it on (``_vcr_handle_async_request``
  in ``vcr/stubs/httpx_stubs.py``: ``real_response_content = b"".join([part async for part in
  real_response.stream])``), so above vcrpy every event arrives at once; below it, each network
  read is timestamped as vcrpy drains it, and ``before_record_response`` turns those timestamps
  into per-event offsets;
- **scrubbing** of every sensitive header (request headers through vcrpy's ``filter_headers``
  with a callable that also remembers the value; response headers such as ``set-cookie`` in
  ``before_record_response``) and of key-like query parameters (``filter_query_parameters``);
- **strict** use: ``use_cassette(..., strict=True)`` fails on exit when a recorded interaction was
  never played.

Users' own tests::

    from cassettes.loopkit_vcr import loopkit_vcr

    with loopkit_vcr.use_cassette("cassettes/llm/openai-chat/weather.yaml"):
        client.chat.completions.create(...)   # any httpx-based client: recorded, then replayed

The record mode comes from ``$LOOPKIT_RECORD_MODE`` (default ``none``: replay only, any request
without a recorded answer raises vcrpy's ``CannotOverwriteExistingCassetteException``). Record
once with ``LOOPKIT_RECORD_MODE=once``; replay the same file in virtual time with
``cassettes.model.CassetteModel``.
"""

from __future__ import annotations

import codecs
import copy
import functools
import os
import threading
import time
import zlib
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import httpcore
import vcr
import yaml
from vcr.cassette import Cassette as VcrCassette
from vcr.cassette import CassetteContextDecorator
from vcr.persisters.filesystem import CassetteNotFoundError
from vcr.serialize import deserialize as vcr_deserialize
from vcr.serialize import serialize as vcr_serialize

from .errors import CassetteError
from .eventstream import EVENTSTREAM_CONTENT_TYPE, split_frames
from .inputs import read_text
from .llm_cassette import FORMAT_KEY, SAFE_LOADER, Cassette, decoded_path
from .scrub import (
    FILTERED,
    Secrets,
    environment_keys,
    mask_frames,
    mask_sse,
    redact_url,
    scrub_binary_body,
)
from .sse import split_events

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
        "x-amz-security-token",  # AWS SigV4: the session token; the signature is in authorization
        "x-amz-date",
    }
)
SECRET_QUERY_PARAMETERS: tuple[str, ...] = (
    "key", "api_key", "api-key", "apikey", "access_token", "token", "sig", "signature",
    "X-Amz-Signature", "X-Amz-Credential", "X-Amz-Security-Token",
)
RECORD_MODE_ENV = "LOOPKIT_RECORD_MODE"
SERIALIZER_NAME = "loopkit"


# --------------------------------------------------------------------------- scrubbing


class Scrubber:
    """One cassette's secret handling: replaces sensitive values and remembers them.

    Remembered values (and the values of the environment's credential variables, and explicit
    ``secrets``) are erased from everything written, in every form they travel in
    (``cassettes.scrub``): the file's text, binary bodies, event-stream frames, and keys an
    endpoint echoed a few characters per event (masked in the reassembled text, then split back).
    """

    def __init__(self, sensitive: Iterable[str], secrets: Iterable[str] = ()) -> None:
        self.sensitive = frozenset(name.lower() for name in sensitive)
        self.known = Secrets([*environment_keys(), *secrets])

    @property
    def secrets(self) -> set[str]:
        """The values remembered so far."""
        return self.known.values

    def remember(self, value: object) -> None:
        self.known.add(value)

    def replace(self, key: str, value: object, request: object) -> str:
        """vcrpy's replacement-callable signature (``filter_headers``, ``filter_query_parameters``)."""
        self.remember(value)
        return FILTERED

    def request(self, request: Any) -> Any:
        """``before_record_request``: the URI's userinfo, key-like body fields."""
        uri = getattr(request, "uri", None)
        if isinstance(uri, str) and "@" in uri.split("?", 1)[0]:
            request.uri = redact_url(uri, self.known)
        self.known.learn_body(getattr(request, "body", None))
        return request

    def response(self, response: dict[str, Any]) -> dict[str, Any]:
        """``before_record_response``: vcrpy's ``filter_headers`` only covers requests."""
        headers = response.get("headers") or {}
        for name in list(headers):
            if name.lower() in self.sensitive:
                values = headers[name] if isinstance(headers[name], list) else [headers[name]]
                for value in values:
                    self.remember(value)
                headers[name] = [FILTERED for _ in values]
        return response

    def erase(self, text: str) -> str:
        return self.known.erase(text)

    def scrub(self, cassette_dict: dict[str, Any]) -> dict[str, Any]:
        """The cassette as it will be written: bodies and events scrubbed (copies; vcrpy's own
        in-memory cassette is left as recorded)."""
        requests = []
        for request in cassette_dict.get("requests", []):
            self.known.learn_body(getattr(request, "body", None))
            if isinstance(getattr(request, "body", None), bytes):
                request = copy.copy(request)
                request.body = self.known.erase_bytes(request.body)
            requests.append(request)
        responses = [self._scrub_response(copy.deepcopy(r)) for r in cassette_dict.get("responses", [])]
        return {**cassette_dict, "requests": requests, "responses": responses}

    def _scrub_response(self, response: dict[str, Any]) -> dict[str, Any]:
        headers = {str(k).lower(): v for k, v in (response.get("headers") or {}).items()}
        content_type = " ".join(str(v) for v in headers.get("content-type", []))
        body: dict[str, Any] = response["body"] if isinstance(response.get("body"), dict) else {}
        events = response.get("events")
        if isinstance(events, list) and events:
            if all(isinstance(e.get("data"), bytes) for e in events):
                frames = [e["data"] for e in events]
                masked = mask_frames(frames, self.known) if EVENTSTREAM_CONTENT_TYPE in content_type and _whole_frames(frames) else [
                    self.known.erase_bytes(f) for f in frames]
                for event, frame in zip(events, masked, strict=True):
                    event["data"] = frame
                body["string"] = b"".join(masked)
            elif all(isinstance(e.get("data"), str) for e in events):
                for event, text in zip(events, mask_sse([e["data"] for e in events], self.known), strict=True):
                    event["data"] = text
                body["string"] = "".join(e["data"] for e in events)
            return response
        value = body.get("string")
        if EVENTSTREAM_CONTENT_TYPE in content_type and isinstance(value, bytes | str):
            # Frames carry lengths and checksums: scrubbed frame by frame and re-encoded, never as text.
            body["string"] = scrub_binary_body(value if isinstance(value, bytes) else value.encode(), True, self.known)
            return response
        if isinstance(value, bytes):
            try:
                value = value.decode("utf-8")
            except UnicodeDecodeError:
                body["string"] = scrub_binary_body(body["string"], EVENTSTREAM_CONTENT_TYPE in content_type, self.known)
                return response
        if isinstance(value, str) and "text/event-stream" in content_type:
            raw, rest = split_events(value)
            body["string"] = "".join(mask_sse(raw, self.known)) + rest
        return response


def _whole_frames(frames: list[bytes]) -> bool:
    try:
        return all(len(split_frames(f)[0]) == 1 and not split_frames(f)[1] for f in frames)
    except ValueError:
        return False


# --------------------------------------------------------------------------- arrival timing


class _Arrival:
    """One streamed response's network reads, as (seconds after its headers, raw bytes)."""

    def __init__(self, encoding: str, binary: bool = False) -> None:
        self.encoding = encoding.lower()
        self.binary = binary  # AWS event-stream frames rather than server-sent events
        self.start = time.monotonic()
        self.reads: list[tuple[float, bytes]] = []

    def add(self, data: bytes) -> None:
        if data:
            self.reads.append((round(time.monotonic() - self.start, 4), data))

    def _decoded(self) -> list[tuple[float, bytes]] | None:
        wbits = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}
        if self.encoding and self.encoding not in wbits and self.encoding != "identity":
            return None
        inflate = zlib.decompressobj(wbits[self.encoding]) if self.encoding in wbits else None
        try:
            return [(offset, inflate.decompress(data) if inflate else data) for offset, data in self.reads]
        except zlib.error:
            return None

    def events(self) -> list[dict[str, Any]] | None:
        """The reads as event records ``{offset, data}`` (each event at the read completing it):
        SSE events as text, event-stream frames as bytes.

        ``None`` when the bytes do not decode (an encoding we cannot undo incrementally).
        """
        reads = self._decoded()
        if reads is None:
            return None
        return _frame_records(reads) if self.binary else _sse_records(reads)


def _sse_records(reads: list[tuple[float, bytes]]) -> list[dict[str, Any]] | None:
    decoder = codecs.getincrementaldecoder("utf-8")()
    pending, events = "", []
    offset = 0.0
    try:
        for offset, data in reads:
            pending += decoder.decode(data)
            complete, pending = split_events(pending)
            events += [{"offset": offset, "data": text} for text in complete]
        pending += decoder.decode(b"", final=True)
    except UnicodeDecodeError:
        return None
    if pending:  # a trailing partial event is kept as it came (replay reports it)
        events.append({"offset": offset, "data": pending})
    return events


def _frame_records(reads: list[tuple[float, bytes]]) -> list[dict[str, Any]] | None:
    pending, events = b"", []
    offset = 0.0
    try:
        for offset, data in reads:
            pending += data
            complete, pending = split_frames(pending)
            events += [{"offset": offset, "data": frame} for frame in complete]
    except ValueError:
        return None
    if pending:  # a frame cut short is kept as it came (replay reports it)
        events.append({"offset": offset, "data": pending})
    return events


def _joined(events: list[dict[str, Any]]) -> str | bytes:
    if events and isinstance(events[0]["data"], bytes):
        return b"".join(e["data"] for e in events)
    return "".join(e["data"] for e in events)


class ArrivalLog:
    """Arrival times of the event streams read while one cassette is in use.

    ``patches()`` are vcrpy ``custom_patches`` wrapping httpcore's connection pools, which sit
    under vcrpy's httpx stub: the stub drains the response stream as it arrives, so each read is
    timestamped at its real arrival. ``attach_events`` (a ``before_record_response`` hook) finds
    the arrival whose bytes are the recorded body and stores its events with their offsets.
    Server-sent events and AWS event-stream frames are both timed, one record per event/frame.
    """

    def __init__(self) -> None:
        self._arrivals: list[_Arrival] = []
        self._lock = threading.Lock()

    def open(self, headers: list[tuple[bytes, bytes]]) -> _Arrival | None:
        found = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in headers}
        content_type = found.get("content-type", "")
        binary = EVENTSTREAM_CONTENT_TYPE in content_type
        if "text/event-stream" not in content_type and not binary:
            return None  # only event streams get per-event records
        arrival = _Arrival(found.get("content-encoding", ""), binary)
        with self._lock:
            self._arrivals.append(arrival)
        return arrival

    def _take(self, body: str | bytes) -> list[dict[str, Any]] | None:
        wanted = body if isinstance(body, bytes) else _normalise(body)
        with self._lock:
            for arrival in self._arrivals:
                events = arrival.events()
                if events is None or arrival.binary != isinstance(body, bytes):
                    continue
                joined = _joined(events)
                if (joined if isinstance(joined, bytes) else _normalise(joined)) == wanted:
                    self._arrivals.remove(arrival)
                    return events
        return None

    def attach_events(self, response: dict[str, Any]) -> dict[str, Any]:
        """``before_record_response``: add ``events`` (per-event offsets) to an event stream."""
        headers = {str(k).lower(): v for k, v in (response.get("headers") or {}).items()}
        content_type = " ".join(str(v) for v in headers.get("content-type", []))
        binary = EVENTSTREAM_CONTENT_TYPE in content_type
        if ("text/event-stream" not in content_type and not binary) or headers.get("content-encoding"):
            return response  # not a stream, or still compressed (vcrpy could not decode it)
        body = (response.get("body") or {}).get("string")
        if binary:
            if not isinstance(body, bytes | str):
                return response
            wanted: str | bytes = body if isinstance(body, bytes) else body.encode("latin-1", "replace")
        else:
            try:
                text = body.decode("utf-8") if isinstance(body, bytes) else body
            except UnicodeDecodeError:
                return response
            if not isinstance(text, str):
                return response
            wanted = text
        events = self._take(wanted)
        if events is not None:
            response["events"] = events
            # The joined events are the body, line endings normalised: the two always agree.
            response["body"]["string"] = _joined(events)
            response["headers"] = {k: v for k, v in response["headers"].items() if k.lower() != "content-length"}
        return response

    def patches(self) -> tuple[tuple[Any, str, Any], ...]:
        return (
            (httpcore.AsyncConnectionPool, "handle_async_request", _timed_async(self)),
            (httpcore.ConnectionPool, "handle_request", _timed_sync(self)),
        )


def _normalise(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\r", "\n")


# Captured at import, before any cassette patches them: the timing wrappers call the real pools.
_POOL_ASYNC = httpcore.AsyncConnectionPool.handle_async_request
_POOL_SYNC = httpcore.ConnectionPool.handle_request


class _TimedAsyncStream:
    def __init__(self, inner: Any, arrival: _Arrival) -> None:
        self._inner = inner
        self._arrival = arrival

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for data in self._inner:
            self._arrival.add(data)
            yield data

    async def aclose(self) -> None:
        if hasattr(self._inner, "aclose"):
            await self._inner.aclose()


class _TimedSyncStream:
    def __init__(self, inner: Any, arrival: _Arrival) -> None:
        self._inner = inner
        self._arrival = arrival

    def __iter__(self) -> Iterator[bytes]:
        for data in self._inner:
            self._arrival.add(data)
            yield data

    def close(self) -> None:
        if hasattr(self._inner, "close"):
            self._inner.close()


def _timed_async(log: ArrivalLog) -> Callable[..., Any]:
    @functools.wraps(_POOL_ASYNC)
    async def handle_async_request(self: httpcore.AsyncConnectionPool, request: httpcore.Request) -> httpcore.Response:
        response = await _POOL_ASYNC(self, request)
        arrival = log.open(response.headers)
        if arrival is not None:
            response.stream = _TimedAsyncStream(response.stream, arrival)
        return response

    return handle_async_request


def _timed_sync(log: ArrivalLog) -> Callable[..., Any]:
    @functools.wraps(_POOL_SYNC)
    def handle_request(self: httpcore.ConnectionPool, request: httpcore.Request) -> httpcore.Response:
        response = _POOL_SYNC(self, request)
        arrival = log.open(response.headers)
        if arrival is not None:
            response.stream = _TimedSyncStream(response.stream, arrival)
        return response

    return handle_request


# --------------------------------------------------------------------------- serializer


class _Dumper(yaml.SafeDumper):
    """Multi-line strings as literal blocks, so recorded streams read line by line."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)

_REQUEST_KEYS = ("method", "uri", "headers", "body")
_RESPONSE_KEYS = ("status", "headers", "body", "events")


def _ordered(data: dict[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    """Readable key order (vcrpy builds requests as method, uri, body, headers)."""
    return {**{k: data[k] for k in keys if k in data}, **{k: v for k, v in data.items() if k not in keys}}


class LoopkitSerializer:
    """vcrpy serializer (``register_serializer("loopkit", ...)``) for loopkit's YAML format.

    ``deserialize`` accepts everything ``Cassette.parse`` accepts (stock vcrpy files, ``!!binary``
    gzip bodies, ``parsed_body`` mappings, our per-event records) and hands vcrpy decoded bodies;
    it loads with PyYAML's safe loader only. ``serialize`` writes the header comment, the
    ``loopkit:`` metadata, then the interactions, each response with its ``events`` records.
    """

    def __init__(self, *, comment: str = "", meta: dict[str, Any] | None = None) -> None:
        self.comment = comment
        self.meta = dict(meta or {})

    def with_header(self, comment: str, meta: dict[str, Any]) -> LoopkitSerializer:
        return LoopkitSerializer(comment=comment, meta=meta)

    def deserialize(self, cassette_string: str) -> dict[str, Any]:
        cassette = Cassette.parse(cassette_string, "<cassette>")
        return {"version": 1, "interactions": [i.to_vcr() for i in cassette.interactions]}

    def serialize(self, cassette_dict: dict[str, Any]) -> str:
        data: dict[str, Any] = {}
        if self.meta:
            data[FORMAT_KEY] = self.meta
        data["interactions"] = [
            {"request": _ordered(i["request"], _REQUEST_KEYS), "response": _ordered(i["response"], _RESPONSE_KEYS)}
            for i in cassette_dict.get("interactions", [])
        ]
        if cassette_dict.get("metadata"):
            data["metadata"] = cassette_dict["metadata"]  # vcrpy's own cassette metadata, kept
        data["version"] = cassette_dict.get("version", 1)
        text = yaml.dump(data, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=1 << 16)
        return _comment(self.comment) + text


def _comment(text: str) -> str:
    return "".join(f"# {line}\n".replace("# \n", "#\n") for line in text.splitlines())


def read_header(text: str) -> tuple[str, dict[str, Any]]:
    """A cassette file's leading comment (without ``# ``) and its ``loopkit:`` metadata.

    Only the top of the file is parsed (the comment, then a leading ``loopkit:`` block): the
    interactions are vcrpy's business, and parsing them twice would double the load time.
    """
    lines = text.splitlines()
    comment: list[str] = []
    while lines and lines[0].startswith("#"):
        line = lines.pop(0)
        comment.append(line[2:] if line.startswith("# ") else line[1:])
    meta: dict[str, Any] = {}
    if lines and lines[0].startswith(f"{FORMAT_KEY}:"):
        block = [lines[0]]
        for line in lines[1:]:
            if line and not line[0].isspace():
                break
            block.append(line)
        try:
            data = yaml.load("\n".join(block), Loader=SAFE_LOADER)
        except yaml.YAMLError:
            data = None
        if isinstance(data, dict) and isinstance(data.get(FORMAT_KEY), dict):
            meta = dict(data[FORMAT_KEY])
    return "\n".join(comment), meta


SERIALIZER = LoopkitSerializer()


# --------------------------------------------------------------------------- persister


class LoopkitPersister:
    """vcrpy persister for one cassette: strict loading, scrubbed atomic writes, kept header.

    ``comment`` / ``meta`` replace the file's header comment and ``loopkit:`` metadata when given
    (else the loaded file's are kept through a re-save); ``overwrite`` ignores an existing file
    (``loopkit cassette record`` replaces its output).
    """

    def __init__(
        self,
        *,
        scrubber: Scrubber | None = None,
        comment: str | None = None,
        meta: dict[str, Any] | None = None,
        overwrite: bool = False,
    ) -> None:
        self.scrubber = scrubber
        self.comment = comment
        self.meta = meta
        self.overwrite = overwrite
        self._loaded: tuple[str, dict[str, Any]] = ("", {})

    def load_cassette(self, cassette_path: str | os.PathLike[str], serializer: Any) -> Any:
        path = Path(cassette_path)
        if self.overwrite or not path.exists():
            raise CassetteNotFoundError()  # vcrpy: a new cassette
        try:
            # a directory, a FIFO or a device is no new cassette to record over: it is refused
            text = read_text(path)
        except OSError as exc:
            raise CassetteError(path, f"cannot read: {exc}") from exc
        if not text.strip():
            raise CassetteNotFoundError()  # vcrpy's rule: an empty file is a missing cassette
        if isinstance(serializer, LoopkitSerializer):
            self._loaded = read_header(text)
        try:
            return vcr_deserialize(text, serializer)
        except CassetteError as exc:
            raise CassetteError(path, exc.problem) from exc
        except (ValueError, KeyError, TypeError, yaml.YAMLError) as exc:  # another serializer's failure
            raise CassetteError(path, f"cannot load: {exc}") from exc

    def save_cassette(self, cassette_path: str | os.PathLike[str], cassette_dict: dict[str, Any], serializer: Any) -> None:
        path = Path(cassette_path)
        if isinstance(serializer, LoopkitSerializer):
            comment = self.comment if self.comment is not None else self._loaded[0]
            meta = self.meta if self.meta is not None else self._loaded[1]
            serializer = serializer.with_header(comment, meta)
        if self.scrubber is not None:
            cassette_dict = self.scrubber.scrub(cassette_dict)
        text = vcr_serialize(cassette_dict, serializer)
        if self.scrubber is not None:
            text = self.scrubber.erase(text)
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = _partial(path)
        partial.write_text(text, encoding="utf-8")
        os.replace(partial, path)  # never a half-written cassette


def _partial(path: Path) -> Path:
    """Where a cassette is written before it replaces ``path`` in one step."""
    return path.with_name(f".{path.name}.partial")


def check_writable(path: str | os.PathLike[str]) -> None:
    """Raise ``CassetteError`` naming ``path`` unless a cassette can be saved there.

    Checked before recording: a request made (and paid for) only to fail on a typo in the output
    path wastes it. The parent directory is made, as saving would; writing the partial file is
    the test (``os.access`` says yes to root even where nothing can be created, as in ``/proc``)."""
    path = Path(path)
    if path.is_dir():
        raise CassetteError(path, "cannot write: is a directory")
    if path.exists() and not path.is_file():
        raise CassetteError(path, "cannot write: not a regular file (a pipe, a device or a socket)")
    partial = _partial(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial.touch()
        partial.unlink()
    except OSError as exc:
        raise CassetteError(path, f"cannot write: cannot create a file in {path.parent} ({exc.strerror or exc})") from None


# --------------------------------------------------------------------------- the VCR


class _LoopkitCassetteContext(CassetteContextDecorator):
    """vcrpy's context manager/decorator, plus the strict check on a clean exit."""

    _non_cassette_arguments = (*CassetteContextDecorator._non_cassette_arguments, "loopkit_strict")

    def __enter__(self) -> VcrCassette:
        strict = bool(self._args_getter().get("loopkit_strict"))
        cassette = super().__enter__()
        self._loopkit = (cassette, len(cassette), strict)  # loaded interactions come first
        return cassette

    def __exit__(self, *exc_info: Any) -> None:
        cassette, loaded, strict = self._loopkit
        super().__exit__(*exc_info)
        if strict and not any(exc_info):
            left = [i for i in range(loaded) if not cassette.play_counts[i]]
            if left:
                names = ", ".join(f"#{i + 1} {cassette.requests[i].method} {cassette.requests[i].uri}" for i in left)
                raise CassetteError(cassette.path, f"{len(left)} interaction(s) never played: {names}")


class LoopkitVCR(vcr.VCR):
    """A ``vcr.VCR`` configured for LLM cassettes (see the module docstring).

    ``record_mode`` ``None`` reads ``$LOOPKIT_RECORD_MODE`` at each ``use_cassette`` (default
    ``none``). ``filter_headers`` adds header names to scrub (with their values erased from the
    whole file). Every other ``vcr.VCR`` option works as in vcrpy (``match_on``,
    ``before_record_request``/``before_record_response``, which run after loopkit's own hooks...).

    ``use_cassette(path, *, strict=False, comment=None, meta=None, overwrite=False, **vcr_options)``
    adds: ``strict`` (on a clean exit, fail if a recorded interaction was never played),
    ``comment`` (the file's header comment: say what it was recorded against), ``meta`` (the
    ``loopkit:`` mapping, e.g. ``{"adapter": "openai-chat"}``), ``overwrite`` (ignore an existing
    file), and a per-cassette ``filter_headers`` list of extra names.
    """

    def __init__(self, *, record_mode: str | None = None, filter_headers: Iterable[str | tuple[str, Any]] = (), **options: Any) -> None:
        self._record_mode_from_env = record_mode is None
        options.setdefault("serializer", SERIALIZER_NAME)
        options.setdefault("decode_compressed_response", True)
        headers = list(filter_headers)
        # Names are scrubbed loopkit's way (value remembered, erased everywhere); vcrpy's own
        # (name, replacement) pairs are passed to vcrpy as they are.
        pairs = [h for h in headers if not isinstance(h, str)]
        super().__init__(record_mode=record_mode or "none", filter_headers=pairs, **options)
        self.register_serializer(SERIALIZER_NAME, SERIALIZER)
        self.register_persister(LoopkitPersister)  # a marker: each cassette gets its own instance
        # paths compared percent-decoded: a scrubbed placeholder (`projects/<project-id>/...`) is
        # stored as typed and sent encoded
        self.register_matcher("path", decoded_path)
        self.sensitive = SENSITIVE_HEADERS | {h.lower() for h in headers if isinstance(h, str)}

    def _use_cassette(self, with_current_defaults: bool = False, **kwargs: Any) -> _LoopkitCassetteContext:
        # As vcrpy's, with the strict-checking context (re-evaluated config on every entry).
        getter = functools.partial(self.get_merged_config, **kwargs)
        if with_current_defaults:
            config = getter()
            getter = functools.partial(dict, config)
        return _LoopkitCassetteContext(VcrCassette, getter)

    def get_merged_config(self, **kwargs: Any) -> dict[str, Any]:
        strict = bool(kwargs.pop("strict", False))
        comment = kwargs.pop("comment", None)
        meta = kwargs.pop("meta", None)
        overwrite = bool(kwargs.pop("overwrite", False))
        extra = list(kwargs.pop("filter_headers", ()))  # names to scrub, or vcrpy (name, replacement) pairs
        secrets = [str(s) for s in kwargs.pop("secrets", ()) if s]
        scrubber = Scrubber(self.sensitive | {h.lower() for h in extra if isinstance(h, str)}, secrets)
        arrivals = ArrivalLog()
        if self._record_mode_from_env and "record_mode" not in kwargs:
            kwargs["record_mode"] = os.environ.get(RECORD_MODE_ENV) or "none"
        user_headers = [h for h in [*self.filter_headers, *extra] if not isinstance(h, str)]
        kwargs["filter_headers"] = [(name, scrubber.replace) for name in sorted(scrubber.sensitive)] + user_headers
        user_query = [p for p in self.filter_query_parameters if (p[0] if isinstance(p, tuple) else p) not in SECRET_QUERY_PARAMETERS]
        kwargs["filter_query_parameters"] = [(name, scrubber.replace) for name in SECRET_QUERY_PARAMETERS] + user_query
        user_hooks = kwargs.get("before_record_response", self.before_record_response)
        if user_hooks is None:
            user_hooks = ()
        elif callable(user_hooks):
            user_hooks = (user_hooks,)
        kwargs["before_record_response"] = (arrivals.attach_events, scrubber.response, *user_hooks)
        request_hooks = kwargs.get("before_record_request", self.before_record_request)
        request_hooks = () if request_hooks is None else (request_hooks,) if callable(request_hooks) else tuple(request_hooks)
        kwargs["before_record_request"] = _chain(scrubber.request, *request_hooks)
        kwargs["custom_patches"] = tuple(kwargs.get("custom_patches", ())) + arrivals.patches()
        config = super().get_merged_config(**kwargs)
        if config["persister"] is LoopkitPersister:
            config["persister"] = LoopkitPersister(scrubber=scrubber, comment=comment, meta=meta, overwrite=overwrite)
        config["loopkit_strict"] = strict
        return config


def _chain(*hooks: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """vcrpy takes one ``before_record_request``: run ours, then the user's (``None`` drops it)."""

    def run(request: Any) -> Any:
        for hook in hooks:
            if request is None:
                return None
            request = hook(request)
        return request

    return run


def make_vcr(*, record_mode: str | None = None, filter_headers: Iterable[str | tuple[str, Any]] = (), **options: Any) -> LoopkitVCR:
    """A configured ``LoopkitVCR``; ``options`` are ``vcr.VCR``'s (``match_on``, hooks...)."""
    return LoopkitVCR(record_mode=record_mode, filter_headers=filter_headers, **options)


loopkit_vcr = make_vcr()
"""The default instance: record mode from ``$LOOPKIT_RECORD_MODE`` (default ``none``)."""
