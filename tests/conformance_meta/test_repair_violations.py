"""``repair_violations``: what a session loaded while its writer was still inside a turn may be
(SVC-3; section 0's ``interrupted``; LOG-4, LOG-5)."""

from __future__ import annotations

from typing import Any

import pytest

from conformance.invariants import repair_violations


def _log(*kinds: tuple[str, dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"type": kind, "seq": i, "time": 0, "data": data} for i, (kind, data) in enumerate(kinds)]


WRITER = _log(
    ("turn/start", {"turn": 1, "trigger": "user"}),
    ("user/message", {"content": [{"type": "text", "text": "A"}], "source": {"kind": "user"}}),
    ("step/start", {"turn": 1, "step": 1}),
    ("assistant/message", {"turn": 1, "step": 1, "content": []}),
    ("tool/call", {"turn": 1, "step": 1, "call_id": "c1", "name": "t", "arguments": {}}),
    ("tool/result", {"turn": 1, "step": 1, "call_id": "c1", "content": [], "is_error": False}),
    ("step/end", {"turn": 1, "step": 1}),
    ("turn/end", {"turn": 1, "reason": {"kind": "completed"}}),
)
MID_TOOL = 5  # the writer "died" after its tool/call: the step and the turn are open


def _repair(at: int, *kinds: tuple[str, dict[str, Any]]) -> list[dict[str, Any]]:
    return [*WRITER[:at], *({"type": k, "seq": at + i, "time": 0, "data": d} for i, (k, d) in enumerate(kinds))]


INTERRUPTED = ("turn/end", {"turn": 1, "reason": {"kind": "interrupted"}})


def test_a_whole_prefix_closed_by_its_repair_is_sound() -> None:
    assert repair_violations(WRITER, _repair(MID_TOOL, ("step/end", {"turn": 1, "step": 1}), INTERRUPTED)) == []
    assert repair_violations(WRITER, WRITER) == []  # loaded once the turn was over: nothing to repair
    assert repair_violations(WRITER, []) == []  # nothing persisted yet


def test_a_repair_leaving_the_step_open_is_a_log5_violation() -> None:
    found = repair_violations(WRITER, _repair(MID_TOOL, INTERRUPTED))
    assert found and found[0].startswith("LOG-5:") and "step 1 still open" in found[0], found


def test_an_open_turn_left_unrepaired_is_a_log4_violation() -> None:
    found = repair_violations(WRITER, WRITER[:MID_TOOL])
    assert found == ["LOG-4: turn 1 never ended"], found


@pytest.mark.parametrize("tail", [
    ("turn/end", {"turn": 1, "reason": {"kind": "aborted"}}),  # not the repair's reason
    ("error", {"turn": 1, "step": 1, "message": "died"}),  # no event a repair writes
])
def test_anything_but_the_writers_events_and_a_repair_is_an_svc3_violation(tail: tuple[str, dict[str, Any]]) -> None:
    found = repair_violations(WRITER, _repair(MID_TOOL, ("step/end", {"turn": 1, "step": 1}), tail))
    assert found and found[0].startswith("SVC-3:") and f"({tail[0]})" in found[0], found


def test_a_repair_that_matches_the_writers_next_event_is_still_judged_whole() -> None:
    # the repair's step/end is the event the writer logged next: the common prefix takes it in
    assert repair_violations(WRITER, _repair(6, ("step/end", {"turn": 1, "step": 1}), INTERRUPTED)) == []
    # a step/end where no step is open is no repair of it
    assert repair_violations(WRITER, _repair(7, ("step/end", {"turn": 1, "step": 1}), INTERRUPTED))[0].startswith(
        "LOG-5:")
