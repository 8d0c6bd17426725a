"""The session log, derived history and an in-memory persistence backend."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from .core import Bus, ListenerFailure, NotSerialisable, Sources, snapshot


def text_block(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def to_blocks(content: Any) -> list[Any]:
    if isinstance(content, str):
        return [text_block(content)]
    if isinstance(content, Mapping):
        return [dict(content)]
    if isinstance(content, (list, tuple)):
        return [dict(b) if isinstance(b, Mapping) else b for b in content]
    return [content]  # rejected later, when it is appended


class Session:
    def __init__(self, session_id: str, bus: Bus, sources: Sources, header: Mapping[str, Any],
                 events: list[dict[str, Any]] | None = None, store: Any = None) -> None:
        self._id = session_id
        self._bus = bus
        self._sources = sources
        self._header = dict(header)
        self._events: list[dict[str, Any]] = list(events or [])
        self._store = store

    # -- read side
    @property
    def id(self) -> str:
        return self._id

    @property
    def header(self) -> Mapping[str, Any]:
        return dict(self._header)

    @property
    def events(self) -> list[dict[str, Any]]:
        return copy.deepcopy(self._events)

    def raw_events(self) -> list[dict[str, Any]]:
        return self._events

    # -- write side
    def _push(self, type: str, data: Mapping[str, Any]) -> dict[str, Any]:
        """Validate and snapshot, push, persist. Raises NotSerialisable (nothing written)."""
        if not isinstance(type, str) or not type:
            raise NotSerialisable("event type must be a non-empty string")
        if not isinstance(data, Mapping):
            raise NotSerialisable("event data must be a mapping")
        event = {"type": type, "seq": len(self._events), "time": self._sources.now_ms(),
                 "data": snapshot(dict(data))}
        self._events.append(event)
        if self._store is not None:
            self._store._record(self._id, self._header, event)
        return event

    def _append(self, type: str, data: Mapping[str, Any]) -> dict[str, Any]:
        """Append, then notify; a throwing listener raises ListenerFailure (event stays)."""
        event = self._push(type, data)
        self._bus.emit("session/event", self, copy.deepcopy(event))
        return event

    def append(self, type: str, data: Mapping[str, Any]) -> dict[str, Any]:
        try:
            return copy.deepcopy(self._append(type, data))
        except ListenerFailure as failure:
            raise failure.original from None

    # -- derived
    def derive_messages(self) -> list[dict[str, Any]]:
        return derive(self._events)

    # -- helpers on the log
    def last_turn_number(self) -> int:
        for e in reversed(self._events):
            if e["type"] == "turn/start":
                try:
                    return int(e["data"].get("turn", 0))
                except (TypeError, ValueError):
                    return 0
        return 0

    def open_turn(self) -> int | None:
        for e in reversed(self._events):
            if e["type"] == "turn/end":
                return None
            if e["type"] == "turn/start":
                return int(e["data"].get("turn", 0))
        return None


def _wrapped(tag: str, data: Mapping[str, Any]) -> dict[str, Any]:
    kind = (data.get("source") or {}).get("kind", "user")
    content = copy.deepcopy(list(data.get("content") or []))
    return {"role": "user",
            "content": [text_block(f'<{tag} source="{kind}">'), *content, text_block(f"</{tag}>")]}


def derive(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for e in events:
        t, d = e["type"], e["data"]
        if t == "user/message":
            out.append({"role": "user", "content": copy.deepcopy(d.get("content", []))})
        elif t == "assistant/message":
            out.append({"role": "assistant", "content": copy.deepcopy(d.get("content", []))})
        elif t == "tool/result":
            out.append({"role": "user", "content": [{
                "type": "tool-result", "tool_call_id": d.get("call_id"),
                "content": copy.deepcopy(d.get("content", [])), "is_error": bool(d.get("is_error"))}]})
        elif t == "steering/message":
            out.append(_wrapped("steering", d))
        elif t == "context/message":
            out.append(_wrapped("context", d))
    return out


class MemoryPersistence:
    """Keeps every session's header and events; survives the service that wrote them."""

    def __init__(self) -> None:
        self._sessions: dict[str, dict[str, Any]] = {}

    def _record(self, session_id: str, header: Mapping[str, Any], event: Mapping[str, Any]) -> None:
        entry = self._sessions.setdefault(session_id, {"header": dict(header), "events": []})
        entry["events"].append(copy.deepcopy(dict(event)))

    def _create(self, session_id: str, header: Mapping[str, Any]) -> None:
        self._sessions[session_id] = {"header": dict(header), "events": []}

    def has(self, session_id: str) -> bool:
        return session_id in self._sessions

    def load(self, session_id: str, now_ms: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        if session_id not in self._sessions:
            raise KeyError(session_id)
        entry = self._sessions[session_id]
        events = copy.deepcopy(entry["events"])
        # repair: a log whose writer died mid-turn gets its turn closed as interrupted
        open_turn = None
        for e in reversed(events):
            if e["type"] == "turn/end":
                break
            if e["type"] == "turn/start":
                open_turn = e["data"].get("turn")
                break
        if open_turn is not None:
            last_step_open = None
            for e in reversed(events):
                if e["type"] == "step/end":
                    break
                if e["type"] == "step/start":
                    last_step_open = e["data"].get("step")
                    break
                if e["type"] == "turn/start":
                    break
            for type_, data in (
                *((("step/end", {"turn": open_turn, "step": last_step_open}),) if last_step_open is not None else ()),
                ("turn/end", {"turn": open_turn, "reason": {"kind": "interrupted"}}),
            ):
                ev = {"type": type_, "seq": len(events), "time": now_ms, "data": data}
                events.append(ev)
                entry["events"].append(copy.deepcopy(ev))
        return dict(entry["header"]), events
