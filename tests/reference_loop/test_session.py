"""The session log: validation, snapshots, push-then-notify, seq/time, derived history."""

from __future__ import annotations

from typing import Any

import pytest

from reference_loop.bus import EventBus
from reference_loop.session import Session, SessionValidationError


class Clock:
    def __init__(self) -> None:
        self.t = 1000

    def now_ms(self) -> int:
        self.t += 5
        return self.t

    def uuid(self) -> str:
        return "u"

    def next_id(self, prefix: str) -> str:
        return f"{prefix}-1"


def make() -> tuple[Session, EventBus]:
    bus = EventBus()
    return Session("s1", bus, Clock()), bus


def test_append_snapshots_and_numbers() -> None:
    session, _ = make()
    content = [{"type": "text", "text": "hi"}]
    event = session.append("user/message", {"content": content, "source": {"kind": "user"}})
    content[0]["text"] = "changed"
    assert event == {
        "type": "user/message",
        "seq": 0,
        "time": 1005,
        "data": {"content": [{"type": "text", "text": "hi"}], "source": {"kind": "user"}},
    }
    assert session.append("turn/start", {"turn": 1, "trigger": {}})["seq"] == 1


@pytest.mark.parametrize(
    ("kind", "data", "match"),
    [
        ("nope", {}, "unknown session event type"),
        ("usage", {"x": object()}, "usage data is not JSON-serialisable"),
        ("usage", {"x": float("nan")}, "not JSON-serialisable"),
        ("usage", [1], "must be a mapping"),
    ],
)
def test_append_rejects_before_entering_log(kind: str, data: Any, match: str) -> None:
    session, _ = make()
    with pytest.raises(SessionValidationError, match=match):
        session.append(kind, data)
    assert session.events == []


def test_throwing_listener_leaves_event_in_log() -> None:
    session, bus = make()
    seen: list[int] = []

    def boom(s: Session, event: Any) -> None:
        seen.append(len(s.events))
        raise RuntimeError("listener")

    bus.on("session/event", boom)
    with pytest.raises(RuntimeError):
        session.append("turn/start", {"turn": 1, "trigger": {}})
    assert seen == [1] and len(session.events) == 1


def test_derive_messages_and_turn_queries() -> None:
    session, _ = make()
    src = {"kind": "user"}
    session.append("turn/start", {"turn": 3, "trigger": {"kind": "message", "source": src}})
    session.append("user/message", {"content": [{"type": "text", "text": "q"}], "source": src})
    session.append("step/start", {"turn": 3, "step": 1})
    session.append("assistant/chunk", {"turn": 3, "step": 1, "chunk": {"type": "finish"}})
    session.append(
        "assistant/message", {"turn": 3, "step": 1, "content": [{"type": "text", "text": "a"}]}
    )
    session.append(
        "usage", {"turn": 3, "step": 1, "usage": {"input_tokens": 1, "output_tokens": 1}}
    )
    session.append(
        "tool/result", {"turn": 3, "step": 1, "call_id": "c", "content": [], "is_error": True}
    )
    session.append(
        "steering/message",
        {
            "turn": 3,
            "content": [{"type": "text", "text": "s"}],
            "source": {"kind": "agent", "agent_id": "b"},
        },
    )
    session.append("context/message", {"content": [{"type": "text", "text": "c"}], "source": src})
    session.append("error", {"turn": 3, "step": 1, "message": "x"})
    assert session.open_turn() == 3
    assert session.last_turn() == 3
    messages = session.derive_messages()
    assert messages == [
        {"role": "user", "content": [{"type": "text", "text": "q"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "a"}]},
        {
            "role": "user",
            "content": [
                {"type": "tool-result", "tool_call_id": "c", "content": [], "is_error": True}
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "text", "text": '<steering source="agent">'},
                {"type": "text", "text": "s"},
                {"type": "text", "text": "</steering>"},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "text", "text": '<context source="user">'},
                {"type": "text", "text": "c"},
                {"type": "text", "text": "</context>"},
            ],
        },
    ]
    session.append("turn/end", {"turn": 3, "reason": {"kind": "completed"}})
    assert session.open_turn() is None
    clone = Session.from_json(session.to_json(), EventBus(), Clock())
    assert clone.events == session.events and clone.derive_messages() == messages


def test_loaded_events_are_checked() -> None:
    with pytest.raises(SessionValidationError, match="event 0: seq is 4"):
        Session("s", EventBus(), Clock(), [{"type": "turn/start", "seq": 4, "time": 1, "data": {}}])
