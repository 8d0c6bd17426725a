"""The invariant checker on hand-made observations: each check can fail."""

from __future__ import annotations

from typing import Any

from conformance.properties import Observation, violations
from conformance.properties.world import Prompt, Waiter


def _event(seq: int, kind: str, **data: Any) -> dict[str, Any]:
    return {"type": kind, "seq": seq, "time": 0, "data": data}


def _obs(events: list[dict[str, Any]], **fields: Any) -> Observation:
    obs = Observation(events=events, final_events=events, **fields)
    obs.event_moment = [10 + i for i in range(len(events))]
    obs.moments = [("x",)] * (10 + len(events) + 5)
    return obs


def _turn(seq: int, turn: int, prompt: str, reason: str = "completed", *body: tuple[str, dict[str, Any]]) -> list[dict[str, Any]]:
    events = [
        _event(seq, "turn/start", turn=turn, trigger={"kind": "message", "source": {"kind": "user"}}),
        _event(seq + 1, "user/message", content=[{"type": "text", "text": prompt}], source={"kind": "user"}),
    ]
    for kind, data in body:
        events.append(_event(seq + len(events), kind, turn=turn, **data))
    events.append(_event(seq + len(events), "turn/end", turn=turn, reason={"kind": reason}))
    return events


def test_a_sound_run_has_no_violation() -> None:
    obs = _obs(_turn(0, 1, "m1"), statuses=["running", "idle"], prompts=[Prompt("m1", 1, "send", "actor0")])
    assert violations(obs) == []


def test_illegal_status_transition() -> None:
    obs = _obs([], statuses=["running", "running"])
    assert any(v.startswith("STATUS-1") for v in violations(obs))


def test_lost_prompt_and_excuse() -> None:
    lost = _obs([], prompts=[Prompt("m1", 1, "send", "actor0")])
    assert any(v.startswith("MARKER-1") for v in violations(lost))
    cancelled = _obs([], prompts=[Prompt("m1", 1, "send", "actor0")], cancels=[2])
    assert violations(cancelled) == []


def test_prompt_run_after_its_cancel() -> None:
    obs = _obs(_turn(0, 1, "m1"), statuses=["running", "idle"], prompts=[Prompt("m1", 1, "send", "a")], cancels=[5])
    assert any(v.startswith("CANCEL-2") for v in violations(obs))


def test_turn_numbers_and_max_tokens() -> None:
    events = _turn(0, 2, "m1", "max-tokens")
    found = violations(_obs(events, statuses=["running", "idle"], prompts=[Prompt("m1", 1, "send", "a")]))
    assert any(v.startswith("LOOP-3") for v in found)
    assert any(v.startswith("MAXTOK-4") for v in found)


def test_unbatched_burst() -> None:
    events = _turn(0, 1, "m1") + _turn(3, 2, "m2")
    prompts = [Prompt("m1", 1, "send", "a"), Prompt("m2", 2, "send", "a")]
    found = violations(_obs(events, statuses=["running", "idle"], prompts=prompts))
    assert any(v.startswith("LOOP-2") for v in found)


def test_waiter_released_before_its_prompt_ran() -> None:
    obs = _obs(_turn(0, 1, "m1"), statuses=["running", "idle"], prompts=[Prompt("m1", 3, "send", "a")])
    obs.waiters = [Waiter(2, "a", last_pending=4, released_at=5, log_at_release=0)]
    assert any(v.startswith("IDLE-2") for v in violations(obs))
