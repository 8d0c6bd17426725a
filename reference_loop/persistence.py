"""Session persistence backends: in memory and JSONL files (spec SVC-3).

A backend is wired to the service's bus: ``record`` follows every ``session/event``, ``flush``
every ``session/flush``, and ``load`` serves ``resume``. Loading a log whose last turn never
closed (the process died mid-turn) repairs it: the open step gets its ``step/end`` and the turn a
``turn/end{interrupted}``, stamped with the last event's time (no clock needed: deterministic).
"""

from __future__ import annotations

import copy
import json
import logging
import os
from pathlib import Path
from typing import Any, Protocol, runtime_checkable
from urllib.parse import quote

from . import vocabulary as v
from .session import SessionValidationError, json_snapshot

logger = logging.getLogger("reference_loop")


class PersistenceError(Exception):
    """A persisted log cannot be read (the message names the file and line)."""


@runtime_checkable
class SessionPersistence(Protocol):
    """What the service needs from a persistence backend."""

    def record(self, session_id: str, event: v.SessionEvent) -> None:
        """Take one appended event (called synchronously from ``session/event``)."""
        ...

    async def flush(self, session_id: str) -> None:
        """Make the recorded events durable (called from ``session/flush``)."""
        ...

    async def load(self, session_id: str) -> list[v.SessionEvent] | None:
        """The persisted events of a session, repaired; ``None`` when it is unknown."""
        ...


@runtime_checkable
class HeaderPersistence(Protocol):
    """What a backend provides, besides the events, to keep session headers (optional: the
    service uses it when the backend has it; a resumed session then gets its header back)."""

    def record_header(self, session_id: str, header: dict[str, Any]) -> None:
        """Take a new session's header (before its first event)."""
        ...

    async def load_header(self, session_id: str) -> dict[str, Any] | None:
        """The header a session was created with, or ``None`` when none was kept."""
        ...


def repair(events: list[v.SessionEvent]) -> list[v.SessionEvent]:
    """Events to append so the log's last turn is closed (empty when it already is)."""
    open_turn: int | None = None
    open_step: int | None = None
    for event in events:
        kind, data = event["type"], event["data"]
        if kind == "turn/start":
            open_turn, open_step = data.get("turn"), None
        elif kind == "turn/end":
            open_turn, open_step = None, None
        elif kind == "step/start":
            open_step = data.get("step")
        elif kind == "step/end":
            open_step = None
    if open_turn is None:
        return []
    time = events[-1]["time"] if events else 0
    fixes: list[v.SessionEvent] = []
    if open_step is not None:
        fixes.append(
            {
                "type": "step/end",
                "seq": 0,
                "time": time,
                "data": {"turn": open_turn, "step": open_step},
            }
        )
    fixes.append(
        {
            "type": "turn/end",
            "seq": 0,
            "time": time,
            "data": {"turn": open_turn, "reason": v.turn_end_interrupted()},
        }
    )
    for offset, fix in enumerate(fixes):
        fix["seq"] = len(events) + offset
    return fixes


def _copy(event: v.SessionEvent) -> v.SessionEvent:
    """A copy of a logged event that shares nothing with it. A logged event is plain JSON (the
    log took a snapshot): ``json_snapshot`` copies that several times faster than ``deepcopy``,
    which a resume paid for every event of the session; anything else is deep-copied."""
    try:
        copied: v.SessionEvent = json_snapshot(event, "the event")
    except SessionValidationError:
        return copy.deepcopy(event)
    return copied


class InMemoryPersistence:
    """Keeps every session's events in memory; share one between services to test resume."""

    def __init__(self) -> None:
        self._sessions: dict[str, list[v.SessionEvent]] = {}
        self._headers: dict[str, dict[str, Any]] = {}

    def record(self, session_id: str, event: v.SessionEvent) -> None:
        self._sessions.setdefault(session_id, []).append(_copy(event))

    def record_header(self, session_id: str, header: dict[str, Any]) -> None:
        self._headers.setdefault(session_id, copy.deepcopy(header))

    async def load_header(self, session_id: str) -> dict[str, Any] | None:
        header = self._headers.get(session_id)
        return copy.deepcopy(header) if header is not None else None

    async def flush(self, session_id: str) -> None:
        return None

    async def load(self, session_id: str) -> list[v.SessionEvent] | None:
        events = self._sessions.get(session_id)
        if events is None:
            return None
        events.extend(repair(events))
        return [_copy(e) for e in events]

    def sessions(self) -> list[str]:
        """The known session ids."""
        return list(self._sessions)


class JsonlPersistence:
    """One ``{session_id}.jsonl`` file per session under ``directory`` (one event per line).

    Events are buffered on ``record`` and appended to the file on ``flush`` (the end of a turn),
    so a process that dies mid-turn leaves an unclosed turn that ``load`` repairs. A new file
    starts with the session's header line, ``{"header": {...}}`` (files without one still load).
    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        self._pending: dict[str, list[str]] = {}

    def path(self, session_id: str) -> Path:
        """The file of ``session_id`` (the id is percent-encoded into a safe file name)."""
        return self.directory / f"{quote(session_id, safe='')}.jsonl"

    def record(self, session_id: str, event: v.SessionEvent) -> None:
        self._pending.setdefault(session_id, []).append(json.dumps(event, sort_keys=True))

    def record_header(self, session_id: str, header: dict[str, Any]) -> None:
        if self.path(session_id).exists() or session_id in self._pending:
            return  # a session already on disk keeps the header it was created with
        self._pending[session_id] = [json.dumps({"header": header}, sort_keys=True)]

    async def load_header(self, session_id: str) -> dict[str, Any] | None:
        path = self.path(session_id)
        if not path.exists():
            return None
        with path.open(encoding="utf-8") as handle:
            first = handle.readline()
        try:
            doc = json.loads(first)
        except ValueError:
            return None
        header = doc.get("header") if isinstance(doc, dict) else None
        return header if isinstance(header, dict) else None

    async def flush(self, session_id: str) -> None:
        lines = self._pending.pop(session_id, [])
        if lines:
            self._write(session_id, lines)

    def _write(self, session_id: str, lines: list[str]) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        with self.path(session_id).open("a", encoding="utf-8") as handle:
            handle.write("".join(line + "\n" for line in lines))

    async def load(self, session_id: str) -> list[v.SessionEvent] | None:
        await self.flush(session_id)
        path = self.path(session_id)
        if not path.exists():
            return None
        events, torn = _read_jsonl(path)
        if torn:  # drop the torn line from the file too, so the repair lands after valid lines
            header = await self.load_header(session_id)
            head = [json.dumps({"header": header}, sort_keys=True)] if header is not None else []
            path.write_text(
                "".join(line + "\n" for line in [*head, *(json.dumps(e, sort_keys=True) for e in events)]),
                encoding="utf-8",
            )
        fixes = repair(events)
        if fixes:
            logger.warning(
                "session %s: last turn never closed; repaired as interrupted", session_id
            )
            self._write(session_id, [json.dumps(fix, sort_keys=True) for fix in fixes])
        return events + fixes


def _read_jsonl(path: Path) -> tuple[list[v.SessionEvent], bool]:
    """Parse one event per line; a torn final line (a crash mid-write) is dropped (and reported
    as the second value)."""
    text = path.read_text(encoding="utf-8")
    lines = text.split("\n")
    events: list[v.SessionEvent] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            event: Any = json.loads(line)
        except ValueError as exc:
            if number == len(lines) and not text.endswith("\n"):
                logger.warning("%s:%d: dropping a torn last line", path, number)
                return events, True
            raise PersistenceError(f"{path}:{number}: not a JSON event: {exc}") from None
        if number == 1 and isinstance(event, dict) and "header" in event and "type" not in event:
            continue  # the header line (load_header reads it)
        if not isinstance(event, dict) or not isinstance(event.get("type"), str):
            raise PersistenceError(f"{path}:{number}: not a session event: {line[:80]!r}")
        if event.get("seq") != len(events):
            raise PersistenceError(
                f"{path}:{number}: seq {event.get('seq')!r}, expected {len(events)}"
            )
        events.append(event)  # type: ignore[arg-type]
    return events, False
