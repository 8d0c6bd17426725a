"""The session log: validation, snapshots, push-then-notify, seq/time, derived history."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reference_loop.bus import EventBus
from reference_loop.session import Session, SessionValidationError, json_snapshot


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


# json_snapshot copies plain values directly; whatever it copies must equal the JSON round trip.
_json_like = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.tuples(inner, inner)
    | st.dictionaries(st.text(max_size=3) | st.integers() | st.booleans() | st.none(), inner, max_size=3),
    max_leaves=12,
)


def _round_trip(value: object) -> object:
    try:
        return json.loads(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError) as exc:
        return ("rejected", f"w is not JSON-serialisable: {exc}")


def _snapshot(value: object) -> object:
    try:
        return json_snapshot(value, "w")
    except SessionValidationError as exc:
        return ("rejected", str(exc))


@settings(max_examples=300, derandomize=True, deadline=None)
@given(_json_like)
def test_snapshot_is_the_json_round_trip(value: object) -> None:
    assert repr(_snapshot(value)) == repr(_round_trip(value))


def test_snapshot_is_a_deep_copy_and_rejects_what_json_rejects() -> None:
    data = {"a": [{"b": 1.5}], "c": "x"}
    copy = json_snapshot(data, "w")
    assert copy == data and copy["a"] is not data["a"] and copy["a"][0] is not data["a"][0]
    cyclic: dict[str, object] = {}
    cyclic["self"] = cyclic
    with pytest.raises(SessionValidationError, match="w is not JSON-serialisable: Circular reference"):
        json_snapshot(cyclic, "w")
    with pytest.raises(SessionValidationError, match="w is not JSON-serialisable"):
        json_snapshot({"x": float("inf")}, "w")
    with pytest.raises(SessionValidationError, match="w is not JSON-serialisable"):
        json_snapshot({"x": object()}, "w")
    with pytest.raises(SessionValidationError, match="w is not JSON-serialisable: Exceeds the limit"):
        json_snapshot({"n": [10**5000]}, "w")  # more digits than JSON writes
    assert json_snapshot({"n": 2**70}, "w") == {"n": 2**70}
    deep: list[object] = []
    node = deep
    for _ in range(200):  # deeper than the direct copy goes: the round trip copies it
        node.append([])
        node = node[0]  # type: ignore[assignment]
    assert json_snapshot(deep, "w") == deep
