"""Server-sent events: an incremental parser (text/event-stream, WHATWG rules) and a splitter.

The parser is fed decoded text in arbitrary pieces (network chunks, or one recorded event at a
time) and returns each complete event once its terminating blank line has arrived; ``close()``
reports a trailing partial event, which is how a truncated stream is detected.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SSEEvent:
    """One dispatched event: ``event`` is the ``event:`` field (``None`` when absent)."""

    event: str | None
    data: str
    id: str | None = None


def _normalise(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\r", "\n")


class SSEParser:
    """Incremental parser; feed text, get events."""

    def __init__(self) -> None:
        self._buffer = ""

    def feed(self, text: str) -> list[SSEEvent]:
        """Add text; return every event completed by it."""
        self._buffer += _normalise(text)
        events: list[SSEEvent] = []
        while True:
            end = self._buffer.find("\n\n")
            if end < 0:
                break
            block, self._buffer = self._buffer[:end], self._buffer[end + 2 :]
            event = parse_block(block)
            if event is not None:
                events.append(event)
        return events

    @property
    def pending(self) -> str:
        """Text received after the last complete event (non-empty means a partial event)."""
        return self._buffer

    def close(self) -> list[SSEEvent]:
        """End of input: a non-blank remainder is a partial event, returned only if it has data.

        Servers normally end every event with a blank line; callers decide whether a remainder is
        a truncation (see ``pending``).
        """
        rest, self._buffer = self._buffer, ""
        event = parse_block(rest.rstrip("\n")) if rest.strip() else None
        return [event] if event is not None else []


def parse_block(block: str) -> SSEEvent | None:
    """Parse the lines of one event; comment-only blocks (``: ping``) give ``None``."""
    event_type: str | None = None
    data_lines: list[str] = []
    event_id: str | None = None
    for line in block.split("\n"):
        if not line or line.startswith(":"):
            continue
        name, sep, value = line.partition(":")
        if sep and value.startswith(" "):
            value = value[1:]
        if name == "event":
            event_type = value
        elif name == "data":
            data_lines.append(value)
        elif name == "id":
            event_id = value
    if not data_lines and event_type is None:
        return None
    return SSEEvent(event=event_type, data="\n".join(data_lines), id=event_id)


def split_events(text: str) -> tuple[list[str], str]:
    """Split a whole stream into raw event texts (each ending with its blank line) and a remainder.

    Used to turn a vcrpy body (one blob) into per-event records; the remainder is what follows the
    last blank line (non-blank means the stream was cut mid-event).
    """
    text = _normalise(text)
    raw: list[str] = []
    start = 0
    while True:
        end = text.find("\n\n", start)
        if end < 0:
            break
        # Runs of blank lines belong to the event they close, so re-joining gives the input back.
        stop = end + 2
        while stop < len(text) and text[stop] == "\n":
            stop += 1
        raw.append(text[start:stop])
        start = stop
    return raw, text[start:]
