"""The session log: an append-only list of ``{type, seq, time, data}`` events (spec section 1).

``append`` validates (known type, JSON-serialisable data), stores a snapshot, pushes the event,
and only then notifies ``session/event`` listeners (LOG-2: a throwing listener leaves the event in
the log and its exception reaches the caller). ``derive_messages()`` turns the log into the
conversation history a model request carries (LOG-7).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from . import vocabulary as v
from .bus import EventBus
from .sources import Sources


class SessionValidationError(ValueError):
    """An event was rejected before it entered the log (LOG-1)."""


def json_snapshot(value: Any, what: str) -> Any:
    """A deep, JSON-only copy of ``value``; ``SessionValidationError`` naming ``what`` otherwise.

    The copy is what a JSON round trip gives back. Plain values (exact dicts with string keys,
    lists, strings, numbers, booleans, None) are copied directly, which is several times faster;
    anything else (tuples, subclasses, other keys, NaN, cycles, very deep values) takes the round
    trip itself, so the result and the error are the round trip's."""
    try:
        return _plain_copy(value, 0)
    except _NotPlain:
        pass
    try:
        return json.loads(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError, RecursionError) as exc:  # nested past the encoder's depth too
        raise SessionValidationError(f"{what} is not JSON-serialisable: {exc}") from None


class _NotPlain(Exception):
    """``_plain_copy`` met a value only the JSON round trip copies faithfully."""


_SCALARS = frozenset((str, bool, type(None)))
_MAX_PLAIN_DEPTH = 64


def _plain_copy(value: Any, depth: int) -> Any:
    kind = type(value)
    if kind in _SCALARS:
        return value
    if kind is int:
        if value.bit_length() > 64:  # JSON may refuse its digits (sys.get_int_max_str_digits)
            raise _NotPlain
        return value
    if kind is float:
        if value - value != 0.0:  # NaN or an infinity: the round trip rejects it
            raise _NotPlain
        return value
    if depth >= _MAX_PLAIN_DEPTH:
        raise _NotPlain
    scalars = _SCALARS
    if kind is dict:
        out = {}
        for key, item in value.items():
            if type(key) is not str:
                raise _NotPlain
            out[key] = item if type(item) in scalars else _plain_copy(item, depth + 1)
        return out
    if kind is list:
        return [item if type(item) in scalars else _plain_copy(item, depth + 1) for item in value]
    raise _NotPlain


HEADER_FIELDS = ("cwd", "parent_session")
"""Creation metadata a session header takes from ``create_agent(meta=...)`` (strings or None)."""


def make_header(session_id: str, sources: Sources, meta: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A new session's header: its id, its creation time (the sources' clock, so seeded in a
    simulation), and the creation metadata of ``meta`` (``cwd``, ``parent_session``: the working
    directory the session was opened in and the session it was forked from, or None).

    The other keys of ``meta`` stay the agent's own (``agent.meta``), not the session's."""
    meta = meta or {}
    header: dict[str, Any] = {"id": session_id, "created": int(sources.now_ms())}
    for key in HEADER_FIELDS:
        value = meta.get(key)
        if value is not None and not isinstance(value, str):
            raise SessionValidationError(f"session header {key!r} must be a string or None, got {value!r}")
        header[key] = value
    return header


class Session:
    """One agent's session log, notifying ``session/event`` on the service's bus.

    ``header`` is the session's creation metadata (``make_header``); a resumed session gets the
    header it was created with back from the persistence backend."""

    def __init__(
        self,
        session_id: str,
        bus: EventBus,
        sources: Sources,
        events: Iterable[Mapping[str, Any]] = (),
        header: Mapping[str, Any] | None = None,
    ) -> None:
        self._id = session_id
        self._bus = bus
        self._sources = sources
        self._events: list[v.SessionEvent] = []
        for index, event in enumerate(events):
            self._events.append(_loaded_event(event, index, session_id))
        if header is None:  # built directly (the service passes make_header's): no clock read
            header = {"created": None, **dict.fromkeys(HEADER_FIELDS)}
        self._header: dict[str, Any] = json_snapshot(dict(header), f"session {session_id!r} header")
        self._header["id"] = session_id

    @property
    def id(self) -> str:
        """The session id."""
        return self._id

    @property
    def header(self) -> dict[str, Any]:
        """The creation metadata ``{"id", "created", "cwd", "parent_session"}`` (a copy)."""
        return dict(self._header)

    @property
    def events(self) -> list[v.SessionEvent]:
        """The events so far (a new list; the events themselves are the log's snapshots)."""
        return list(self._events)

    def __len__(self) -> int:
        return len(self._events)

    def append(self, type: str, data: Mapping[str, Any]) -> v.SessionEvent:
        """Validate, snapshot and push an event, then notify ``session/event`` (LOG-1, LOG-2).

        ``seq`` is the log length before the append (LOG-3); ``time`` comes from the sources.
        A listener's exception propagates to the caller, with the event already in the log.
        """
        if type not in v.EVENT_TYPES:
            raise SessionValidationError(f"unknown session event type {type!r}")
        if not isinstance(data, Mapping):
            raise SessionValidationError(f"{type} data must be a mapping, got {data!r}")
        snapshot = json_snapshot(dict(data), f"{type} data")
        event: v.SessionEvent = {
            "type": type,
            "seq": len(self._events),
            "time": int(self._sources.now_ms()),
            "data": snapshot,
        }
        self._events.append(event)
        self._bus.emit("session/event", self, event)
        return event

    # ------------------------------------------------------------------ queries over the log

    def last_turn(self) -> int:
        """The number of the last ``turn/start`` (0 when there is none) (LOOP-3)."""
        for event in reversed(self._events):
            if event["type"] == "turn/start":
                return int(event["data"].get("turn", 0))
        return 0

    def open_turn(self) -> int | None:
        """The turn whose ``turn/start`` has no ``turn/end`` yet, if any (INJ-1)."""
        for event in reversed(self._events):
            if event["type"] == "turn/end":
                return None
            if event["type"] == "turn/start":
                return int(event["data"].get("turn", 0))
        return None

    def derive_messages(self) -> list[v.Message]:
        """The conversation history (LOG-7); the same log always derives the same history."""
        return derive_messages(self._events)

    def to_json(self) -> str:
        """The log as one JSON document (a snapshot; ``Session.from_json`` reads it back)."""
        return json.dumps({"id": self._id, "header": self._header, "events": self._events}, sort_keys=True)

    @classmethod
    def from_json(cls, text: str, bus: EventBus, sources: Sources) -> Session:
        """Rebuild a session written by ``to_json``."""
        doc = json.loads(text)
        return cls(doc["id"], bus, sources, doc["events"], doc.get("header"))


def derive_messages(events: Iterable[Mapping[str, Any]]) -> list[v.Message]:
    """History of a log: user/assistant/tool-result messages, wrapped steering and context, each at
    its position in the log (INJ-3: injected context appears where it was injected).

    The blocks are copies: a plugin editing a request's messages in place (a redaction, a
    compaction) edits that request, not the log nor the next history (LOG-1, LOG-7)."""
    messages: list[v.Message] = []
    for event in events:
        kind, data = event["type"], event["data"]
        if kind == "user/message":
            messages.append({"role": "user", "content": _blocks(data["content"])})
        elif kind == "assistant/message":
            messages.append({"role": "assistant", "content": _blocks(data["content"])})
        elif kind == "tool/result":
            block = v.tool_result(data["call_id"], _blocks(data["content"]), bool(data["is_error"]))
            messages.append({"role": "user", "content": [block]})
        elif kind in ("steering/message", "context/message"):
            tag = "steering" if kind == "steering/message" else "context"
            source_kind = data.get("source", {}).get("kind", "user")
            content = [
                v.text(f'<{tag} source="{source_kind}">'),
                *_blocks(data["content"]),
                v.text(f"</{tag}>"),
            ]
            messages.append({"role": "user", "content": content})
    return messages


def _blocks(content: Any) -> list[Any]:
    """A copy of a logged content list (plain JSON already: the fast copy, a round trip at worst)."""
    out: list[Any] = json_snapshot(content, "content")
    return out


def _loaded_event(event: Mapping[str, Any], index: int, session_id: str) -> v.SessionEvent:
    """Check one persisted event's shape; the error names the session and position."""
    where = f"session {session_id!r} event {index}"
    if not isinstance(event, Mapping):
        raise SessionValidationError(f"{where}: not an object")
    for key, kind in (("type", str), ("seq", int), ("time", int), ("data", dict)):
        if not isinstance(event.get(key), kind):
            raise SessionValidationError(f"{where}: field {key!r} missing or not {kind.__name__}")
    if event["seq"] != index:
        raise SessionValidationError(f"{where}: seq is {event['seq']}, expected {index}")
    return {
        "type": event["type"],
        "seq": event["seq"],
        "time": event["time"],
        "data": json_snapshot(event["data"], f"{where} data"),
    }
