"""The observable vocabulary of a scenario run: how agent events become timeline entries.

Every notification of the implementation's bus (``agent/status``, ``agent/queued``, ...) is
flattened into plain fields (``{"agent": "a", "status": "running"}``) so that one ``where``
filter means the same thing for a listener (YAML ``listeners[].where``), for an actor triggered
``after`` an event, and for a check reading the trace. Session events are recorded compactly as
``log`` entries (assistant chunks keep their type and index, a finish its kind, a block-end its
block: the deltas are the model's, not the loop's).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

#: Notification name -> the names of its arguments after the agent (spec section 0b).
NOTIFICATIONS: dict[str, tuple[str, ...]] = {
    "agent/status": ("status",),
    "agent/queued": ("content", "info"),
    "agent/turn-start": ("turn",),
    "agent/turn-end": ("turn", "reason"),
    "agent/step-start": ("turn", "step"),
    "agent/step-end": ("turn", "step"),
    "agent/stream-chunk": ("turn", "step", "chunk"),
    "agent/steering": ("turn", "content", "source"),
    "agent/error": ("turn", "step", "error"),
}

#: Notifications recorded in the timeline by default (stream chunks only on request: they are
#: many and say little about interleavings).
OBSERVED = tuple(n for n in NOTIFICATIONS if n != "agent/stream-chunk")

#: Waterfall name -> argument names before ``value, next`` (the agent first where there is one).
WATERFALLS: dict[str, tuple[str, ...]] = {
    "agent/request": ("agent", "turn", "step"),
    "agent/step-result": ("agent", "turn", "step"),
    "agent/turn-continuation": ("agent", "turn"),
    "tools/execute": (),
    "system-prompt": ("agent",),
}

#: The content block of a ``tools/execute`` listener's own answer (the ``answer`` verb: it never
#: calls ``next()``, so no tool runs and the call's ``tool/result`` carries this, 0b).
ANSWER: dict[str, str] = {"type": "text", "text": "answered by a plugin"}

#: Points of the world itself a listener may act at, synchronously, as the timeline event is
#: observed: right after an agent was created (before its driver first ran), as a fake tool call
#: starts (inside the call), as a fake model call starts, as the abort signal of a fake model
#: call fires (inside the loop's ``abort()``, ``cancel()`` or ``dispose()``: an abort observer, as
#: an adapter's own listener on the signal is), as a resume()'s persisted log loads.
WORLD_POINTS: dict[str, tuple[str, ...]] = {
    "agent/created": ("agent", "model"),
    "tool/start": ("tool", "call_id", "index"),
    "model/request": ("model", "call", "messages"),
    "model/aborted": ("model", "call"),
    "persistence/load": ("agent", "session"),
}

#: Every event a listener may be registered on (``session/flush(session)`` is awaited by the loop
#: after each turn, LOOP-4).
LISTENABLE = (*NOTIFICATIONS, *WATERFALLS, "session/event", "session/flush", *WORLD_POINTS)


#: The kinds of the world's own timeline entries, beside the notifications and WORLD_POINTS:
#: what an actor's ``after``, a ``wait_for`` and a check's ``kind`` may name in a YAML scenario
#: (``tests/scenario/test_yaml_format.py::test_every_kind_a_run_records_may_be_named`` keeps
#: the list true to what runs record).
RECORDED = (
    "log", "op", "op/error", "listener", "actor/run", "actor/error", "flush", "continuation",
    "inject/began", "reload/loaded", "model/done", "tool/done", "waiter/released", "waiter/timeout",
    "waterfall/answered", "waterfall/edited", "waterfall/returned", "waterfall/rewrote", "waterfall/serves", "warning",
    "problem", "untriggered", "world/closing", "world/closed", "simulation/escape",
)

#: Every kind a timeline entry of a scenario run may have.
TIMELINE_KINDS = frozenset((*NOTIFICATIONS, *WORLD_POINTS, *RECORDED))


def texts(content: Any) -> str:
    """The text of a content value (a string or a list of blocks), joined with spaces."""
    kind = type(content)
    if kind is str:
        return content
    if kind is list:
        # The common case (a log's content blocks), without the ABC machinery of
        # isinstance(Mapping) per block: the oracles read every prompt's text.
        parts = []
        for b in content:
            if type(b) is dict:
                if "text" in b:
                    parts.append(str(b["text"]))
            elif isinstance(b, Mapping) and "text" in b:
                parts.append(str(b.get("text", "")))
        return " ".join(parts)
    if isinstance(content, str):
        return content
    if isinstance(content, Mapping):
        content = [content]
    if isinstance(content, list | tuple):
        return " ".join(str(b.get("text", "")) for b in content if isinstance(b, Mapping) and "text" in b)
    return ""


SHAPED = frozenset(("content", "info", "source", "reason", "chunk", "error"))
"""The argument names ``flatten`` shapes; any other argument with a plain value (a string, a
number, a bool, None) becomes the one field ``{name: value}``."""


def flatten(name: str, value: Any) -> dict[str, Any]:
    """One argument of a notification as JSON-safe fields."""
    if name == "content":
        return {"text": texts(value)}
    if name == "info" and isinstance(value, Mapping):
        source = value.get("source")
        return {
            "steering": bool(value.get("steering")),
            "source": source.get("kind") if isinstance(source, Mapping) else None,
        }
    if name == "source":
        return {"source": value.get("kind") if isinstance(value, Mapping) else None}
    if name == "reason" and isinstance(value, Mapping):
        out: dict[str, Any] = {"reason": value.get("kind")}
        if value.get("reason") is not None:
            out["detail"] = str(value["reason"])
        elif value.get("message") is not None:
            out["detail"] = str(value["message"])
        return out
    if name == "chunk" and isinstance(value, Mapping):
        return {"chunk": value.get("type")}
    if name == "error":
        if not isinstance(value, BaseException):
            return {"error": str(value)}
        code = getattr(value, "code", None)  # ERR-9: the original error's code travels with it
        found = {"error": f"{type(value).__name__}: {value}"}
        return {**found, "code": code} if isinstance(code, str) else found
    if isinstance(value, bool | int | str | float) or value is None:
        return {name: value}
    return {name: f"<{type(value).__name__}>"}


def compact_log(event: Mapping[str, Any]) -> dict[str, Any]:
    """A session event as a ``log`` timeline entry's fields: ``seq``, ``type``, ``data``."""
    return {"seq": event.get("seq"), "type": event.get("type"), "data": compact_data(event)}


_TEXT_DELTAS = frozenset(("text-delta", "reasoning-delta"))


def compact_data(event: Mapping[str, Any]) -> dict[str, Any]:
    """The ``data`` of a session event's ``log`` entry (see ``compact_log``): a JSON-safe copy."""
    data = event.get("data") or {}
    if event.get("type") != "assistant/chunk":
        # jsonable copies a mapping itself: no shallow copy first
        return jsonable(data if type(data) is dict or isinstance(data, Mapping) else dict(data))
    data = dict(data)
    if isinstance(data.get("chunk"), Mapping):
        chunk = data["chunk"]
        compact: dict[str, Any] = {"type": chunk.get("type")}
        if "index" in chunk:
            compact["index"] = chunk.get("index")
        reason = chunk.get("reason")
        if chunk.get("type") == "finish" and isinstance(reason, Mapping):
            # what the max-tokens oracles read, and an error's message and code (FINISH-1 carries them)
            compact["reason"] = {k: reason[k] for k in ("kind", "message", "code") if k in reason}
        elif chunk.get("type") == "block-end":
            compact["block"] = chunk.get("block")  # what the assembly oracle compares with
        elif chunk.get("type") in _TEXT_DELTAS and isinstance(chunk.get("text"), str):
            compact["text"] = chunk["text"]  # a block that never closes is its deltas (ASM-2)
        elif chunk.get("type") == "tool-call-delta":
            for key in ("id", "name", "arguments_delta"):  # so is a tool call's (ASM-2)
                if key in chunk:
                    compact[key] = chunk[key]
        data["chunk"] = compact
    return jsonable(data)


PLAIN = frozenset((str, int, float, bool, type(None)))
"""The types of JSON's plain values (exactly: a subclass is not plain here)."""


def jsonable(value: Any) -> Any:
    """A JSON-safe, deterministic copy: tuples become lists, sets sorted lists, unknown objects
    ``"<TypeName>"`` (never a ``repr`` with a memory address), exceptions ``"Type: message"``."""
    kind = type(value)
    if kind in PLAIN:
        return value
    # The common cases, without the ABC machinery of isinstance(Mapping), and plain leaves
    # copied inline (no call per leaf): every session event's data goes through here.
    if kind is dict:
        return {(k if type(k) is str else str(k)): (v if type(v) in PLAIN else jsonable(v)) for k, v in value.items()}
    if kind is list or kind is tuple:
        return [v if type(v) in PLAIN else jsonable(v) for v in value]
    if isinstance(value, bool | int | str | float):
        return value
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if isinstance(value, set | frozenset):
        return sorted((jsonable(v) for v in value), key=lambda x: json.dumps(x, sort_keys=True))
    if isinstance(value, BaseException):
        return f"{type(value).__name__}: {value}"
    return f"<{type(value).__name__}>"


_MISSING = object()


def lookup(fields: Mapping[str, Any], key: str) -> Any:
    """The value of field ``key``: a plain name, or a dotted path into nested mappings
    (``data.reason.kind``) when no field has the whole dotted name; ``_MISSING`` if absent."""
    if key in fields:
        return fields[key]
    if "." not in key:
        return _MISSING
    value: Any = fields
    for part in key.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return _MISSING
        value = value[part]
    return value


def matches(fields: Mapping[str, Any], where: Mapping[str, Any] | None) -> bool:
    """Whether every ``where`` entry equals the field of the same name (a dotted name reaches
    into nested data, e.g. ``data.reason.kind`` of a ``log`` entry)."""
    if not where:
        return True
    for key, wanted in where.items():
        value = lookup(fields, key)
        if value is _MISSING or value != wanted:
            return False
    return True
