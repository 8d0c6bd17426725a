"""Secrets out of recorded traffic: every form a key takes, wherever it lands, before a byte is written.

``Secrets`` remembers values (a header's, a query parameter's, a URL's userinfo password, a
key-like field of a request body, the keys the environment holds) together with the forms they
travel in: as is, URL-encoded, base64 (standard and URL-safe, with and without padding) and
JSON-escaped. ``erase`` replaces them in text, ``erase_bytes`` in a binary body.

A key an endpoint echoes a few characters per event never appears whole in one event, so
``mask_stream`` reassembles each JSON string field across a stream's events (``delta.content``
over every chunk...), masks each secret in the reassembled text, and splits the text back at the
original boundaries: every piece keeps its length, the secret's characters become a mask. It works
on server-sent events and, through ``mask_frames``, on AWS event-stream frames (re-encoded, so
their lengths and checksums hold).
"""

from __future__ import annotations

import base64
import json
import os
import re
import threading
from collections.abc import Iterable, Iterator
from typing import Any
from urllib.parse import (
    SplitResult,
    parse_qsl,
    quote,
    quote_plus,
    unquote,
    urlencode,
    urlsplit,
    urlunsplit,
)

from botocore.eventstream import EventStreamBuffer

from .eventstream import split_frames

FILTERED = "<filtered>"
MIN_SECRET = 8  # shorter values are words ("Bearer"), not credentials
KEY_ENV_SUFFIXES = ("_API_KEY", "_ACCESS_KEY", "_SECRET_ACCESS_KEY", "_SESSION_TOKEN", "_BEARER_TOKEN_BEDROCK", "_AUTH_TOKEN", "_SECRET_KEY")
KEY_ENV_NAMES = frozenset({"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_BEARER_TOKEN_BEDROCK"})
SECRET_FIELDS = re.compile(r"^(api[-_]?key|apikey|key|x-api-key|access[-_]?token|token|secret|client[-_]?secret|password|authorization)$", re.I)
SECRET_QUERY = re.compile(r"^(key|api[-_]?key|access[-_]?token|token|sig|signature|x-amz-signature|x-amz-credential|x-amz-security-token|code)$", re.I)


def environment_keys() -> list[str]:
    """Values of the environment's credential variables (``*_API_KEY``, AWS keys...)."""
    found = []
    for name, value in os.environ.items():
        upper = name.upper()
        if (upper in KEY_ENV_NAMES or upper.endswith(KEY_ENV_SUFFIXES)) and len(value) >= MIN_SECRET:
            found.append(value)
    return found


def forms(secret: str) -> set[str]:
    """The ways a secret is written on the wire."""
    raw = secret.encode()
    found = {secret, quote(secret, safe=""), quote_plus(secret), json.dumps(secret)[1:-1]}
    for encoded in (base64.b64encode(raw).decode(), base64.urlsafe_b64encode(raw).decode()):
        found |= {encoded, encoded.rstrip("=")}
    return {f for f in found if len(f) >= MIN_SECRET}


class Secrets:
    """The secrets of one cassette and every form of each (thread-safe: recordings may overlap)."""

    def __init__(self, values: Iterable[str] = ()) -> None:
        self._values: set[str] = set()
        self._forms: list[str] = []
        self._lock = threading.Lock()
        for value in values:
            self.add(value)

    @property
    def values(self) -> set[str]:
        with self._lock:
            return set(self._values)

    def add(self, value: object) -> None:
        """Remember a credential: the value, each word of it, a Basic pair's password."""
        text = value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
        parts = [text, *text.split()]
        if text.lower().startswith("basic "):
            try:
                pair = base64.b64decode(text.split(None, 1)[1]).decode()
            except (ValueError, IndexError):
                pair = ""
            parts += [pair, pair.partition(":")[2]]
        with self._lock:
            for part in parts:
                # An already filtered value (a re-recorded cassette's) is not a secret.
                if len(part) >= MIN_SECRET and part not in self._values and FILTERED not in part:
                    self._values.add(part)
                    self._forms = sorted(set(self._forms) | forms(part), key=len, reverse=True)

    def forms(self) -> list[str]:
        """Every form of every secret, longest first (so a longer form is erased whole)."""
        with self._lock:
            return list(self._forms)

    def erase(self, text: str) -> str:
        for form in self.forms():
            text = text.replace(form, FILTERED)
        return text

    def erase_bytes(self, data: bytes) -> bytes:
        for form in self.forms():
            for encoded in {form.encode("utf-8"), form.encode("latin-1", "ignore")}:
                if encoded:
                    data = data.replace(encoded, FILTERED.encode())
        return data

    def learn_body(self, body: Any) -> None:
        """Remember the values of key-like fields of a JSON request body (``{"api_key": ...}``)."""
        text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
        if not isinstance(text, str) or not text.strip():
            return
        try:
            data = json.loads(text)
        except (ValueError, RecursionError):
            data = dict(parse_qsl(text)) if "=" in text else None  # a form-encoded body
        for key, value in _fields(data):
            if SECRET_FIELDS.match(key) and isinstance(value, str):
                self.add(value)


def _fields(data: Any, depth: int = 0) -> Iterator[tuple[str, Any]]:
    if depth > 50:
        return
    if isinstance(data, dict):
        for key, value in data.items():
            yield str(key), value
            yield from _fields(value, depth + 1)
    elif isinstance(data, list):
        for item in data:
            yield from _fields(item, depth + 1)


def redact_url(url: str, secrets: Secrets | None = None) -> str:
    """``url`` without its userinfo password and key-like query values (remembered in ``secrets``)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return url
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, _, host = netloc.rpartition("@")
        user, _, password = userinfo.partition(":")
        if secrets is not None:
            secrets.add(unquote(password or user))
        netloc = f"{user}:{FILTERED}@{host}" if password else f"{FILTERED}@{host}"
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        if any(SECRET_QUERY.match(k) for k, _ in pairs):
            if secrets is not None:
                for key, value in pairs:
                    if SECRET_QUERY.match(key):
                        secrets.add(value)
            query = urlencode([(k, FILTERED if SECRET_QUERY.match(k) else v) for k, v in pairs])
    return urlunsplit(SplitResult(parts.scheme, netloc, parts.path, query, parts.fragment))


# --------------------------------------------------------------------------- split secrets


def _mask(length: int) -> str:
    return (FILTERED + "*" * length)[:length] if length >= len(FILTERED) else "*" * length


def _leaves(value: Any, path: tuple[Any, ...], out: list[tuple[tuple[Any, ...], Any, Any, str]], parent: Any = None, key: Any = None) -> None:
    """Every string leaf as ``(path, container, key, text)``; list indexes kept in the path."""
    if isinstance(value, str) and parent is not None:
        out.append((path, parent, key, value))
    elif isinstance(value, dict):
        for k, v in value.items():
            _leaves(v, (*path, k), out, value, k)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _leaves(v, (*path, i), out, value, i)


def mask_payloads(payloads: list[Any], secrets: Secrets) -> list[bool]:
    """Mask secrets split over the same string field of consecutive payloads, in place.

    Returns which payloads changed. A secret inside one piece is masked too (its length kept).
    """
    pieces: dict[tuple[Any, ...], list[tuple[int, Any, Any, str]]] = {}
    for n, payload in enumerate(payloads):
        found: list[tuple[tuple[Any, ...], Any, Any, str]] = []
        _leaves(payload, (), found)
        for path, parent, key, text in found:
            pieces.setdefault(path, []).append((n, parent, key, text))
    changed = [False] * len(payloads)
    forms = secrets.forms()
    for chain in pieces.values():
        whole = "".join(text for *_, text in chain)
        masked = whole
        for form in forms:
            start = masked.find(form)
            while start >= 0:
                masked = masked[:start] + _mask(len(form)) + masked[start + len(form):]
                start = masked.find(form, start + len(form))
        if masked == whole:
            continue
        at = 0
        for n, parent, key, text in chain:
            piece = masked[at : at + len(text)]
            at += len(text)
            if piece != text:
                parent[key] = piece
                changed[n] = True
    return changed


def mask_sse(events: list[str], secrets: Secrets) -> list[str]:
    """Server-sent events with split secrets masked (events whose data is not JSON: as text)."""
    parsed: list[Any] = []
    for event in events:
        data_lines = [line[5:].removeprefix(" ") for line in event.splitlines() if line.startswith("data:")]
        data = "\n".join(data_lines)
        try:
            parsed.append({"json": json.loads(data)} if data_lines else None)
        except (ValueError, RecursionError):
            parsed.append({"text": data})
    changed = mask_payloads(parsed, secrets)
    out = []
    for event, payload, did in zip(events, parsed, changed, strict=True):
        if not did:
            out.append(event)
            continue
        data = json.dumps(payload["json"], ensure_ascii=False) if "json" in payload else payload["text"]
        lines, placed = [], False
        for line in event.split("\n"):
            if line.startswith("data:"):
                if not placed:
                    lines += [f"data: {piece}" for piece in data.split("\n")]
                    placed = True
                continue
            lines.append(line)
        out.append("\n".join(lines))
    return out


def mask_frames(frames: list[bytes], secrets: Secrets) -> list[bytes]:
    """AWS event-stream frames with secrets masked in their JSON payloads, re-encoded."""
    from .eventstream import encode_frame

    decoded = []
    for frame in frames:
        buffer = EventStreamBuffer()
        buffer.add_data(frame)
        message = next(iter(buffer))
        try:
            payload: Any = {"json": json.loads(message.payload)}
        except (ValueError, RecursionError):
            payload = {"text": bytes(message.payload).decode("utf-8", "replace")}
        decoded.append((message, payload))
    changed = mask_payloads([p for _, p in decoded], secrets)
    out = []
    for frame, (message, payload), did in zip(frames, decoded, changed, strict=True):
        body = secrets.erase_bytes(bytes(message.payload)) if not did else (
            json.dumps(payload["json"], ensure_ascii=False).encode() if "json" in payload else payload["text"].encode())
        headers = {str(k): (v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)) for k, v in message.headers.items()}
        erased_headers = {k: secrets.erase(v) for k, v in headers.items()}
        if body == bytes(message.payload) and erased_headers == headers:
            out.append(frame)
        else:
            out.append(encode_frame(erased_headers, body))
    return out


def scrub_binary_body(data: bytes, eventstream: bool, secrets: Secrets) -> bytes:
    """A binary body with every secret form erased (event-stream frames kept decodable)."""
    if eventstream:
        try:
            frames, rest = split_frames(data)
        except ValueError:
            return secrets.erase_bytes(data)
        return b"".join(mask_frames(frames, secrets)) + secrets.erase_bytes(rest)
    return secrets.erase_bytes(data)
