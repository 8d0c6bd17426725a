"""AWS's binary event-stream framing (``application/vnd.amazon.eventstream``), as Bedrock's
ConverseStream sends it, parsed by botocore's ``EventStreamBuffer`` (not by hand).

Each frame is a prelude (total and header lengths, CRC), typed headers (``:message-type``
``event``/``exception``/``error``, ``:event-type``, ``:exception-type``, ``:content-type``), a
payload (JSON for Bedrock) and a message CRC. ``EventStreamFraming`` turns bytes that arrive in
arbitrary pieces into ``Frame`` objects, like ``SSEParser`` does for text streams;
``split_frames`` cuts a whole recorded body into its raw frames (one cassette event each).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from botocore.eventstream import EventStreamBuffer, EventStreamMessage, ParserError

EVENTSTREAM_CONTENT_TYPE = "application/vnd.amazon.eventstream"


@dataclass(frozen=True)
class Frame:
    """One decoded frame: its message type, its event (or exception/error) type, its payload."""

    message_type: str  # "event", "exception" or "error"
    event_type: str  # :event-type, :exception-type or :error-code
    payload: bytes
    headers: dict[str, Any]

    @property
    def data(self) -> str:
        """The payload as text (what error messages quote)."""
        return self.payload.decode("utf-8", "replace")

    def json(self) -> Any:
        """The payload as JSON (an empty payload is ``{}``); ``ValueError`` when it is not JSON."""
        return json.loads(self.payload) if self.payload.strip() else {}

    @classmethod
    def of(cls, message: EventStreamMessage) -> Frame:
        headers = {str(k): (v.decode("utf-8", "replace") if isinstance(v, bytes) else v) for k, v in message.headers.items()}
        kind = str(headers.get(":message-type", "event"))
        if kind == "exception":
            name = headers.get(":exception-type", "")
        elif kind == "error":
            name = headers.get(":error-code", "")
        else:
            name = headers.get(":event-type", "")
        return cls(kind, str(name), bytes(message.payload), headers)


class EventStreamFraming:
    """Incremental: feed bytes, get every frame they complete. Bad checksums raise ``ValueError``."""

    def __init__(self) -> None:
        self._buffer = EventStreamBuffer()
        self.fed = 0
        self.consumed = 0

    def feed(self, data: bytes) -> list[Frame]:
        self._buffer.add_data(data)
        self.fed += len(data)
        frames: list[Frame] = []
        try:
            for message in self._buffer:
                self.consumed += message.prelude.total_length
                frames.append(Frame.of(message))
        except ParserError as exc:
            raise ValueError(f"{type(exc).__name__}: {exc}") from exc
        return frames

    @property
    def pending(self) -> int:
        """Bytes received after the last complete frame (non-zero: a frame cut short)."""
        return self.fed - self.consumed

    def close(self) -> list[Frame]:
        """End of input: a partial frame cannot be decoded, so nothing more comes out."""
        return []


def split_frames(data: bytes) -> tuple[list[bytes], bytes]:
    """A whole body as its raw frames (each a ``bytes``) and the remainder after the last one.

    Raises ``ValueError`` when a frame's lengths or checksums do not hold.
    """
    buffer = EventStreamBuffer()
    buffer.add_data(data)
    raw: list[bytes] = []
    start = 0
    try:
        for message in buffer:
            length = message.prelude.total_length
            raw.append(data[start : start + length])
            start += length
    except ParserError as exc:
        raise ValueError(f"{type(exc).__name__}: {exc}") from exc
    return raw, data[start:]


def encode_frame(headers: dict[str, str], payload: bytes) -> bytes:
    """One frame with string headers (the local test server's side; botocore only decodes).

    Layout: total length, headers length, prelude CRC32, headers (name length, name, type 7 =
    string, value length, value), payload, message CRC32; all integers big-endian.
    """
    import binascii
    import struct

    head = b""
    for name, value in headers.items():
        n, val = name.encode(), value.encode()
        head += struct.pack(">B", len(n)) + n + b"\x07" + struct.pack(">H", len(val)) + val
    total = 12 + len(head) + len(payload) + 4
    prelude = struct.pack(">II", total, len(head))
    prelude += struct.pack(">I", binascii.crc32(prelude) & 0xFFFFFFFF)
    body = prelude + head + payload
    return body + struct.pack(">I", binascii.crc32(body) & 0xFFFFFFFF)
