"""The checks read timelines: each invariant fails on a timeline that breaks it, holds on one that
does not, and points at the event where it shows."""

from __future__ import annotations

from typing import Any

from conformance.scenarios import checks as ck


def _op(op: str, text: str | None = None, *, by: str = "caller", status: str = "idle", **extra: Any) -> dict[str, Any]:
    e = {"kind": "op", "op": op, "by": by, "agent": "a", "status": status, **extra}
    if text is not None:
        e["text"] = text
    return e


def _log(seq: int, type_: str, **data: Any) -> dict[str, Any]:
    return {"kind": "log", "agent": "a", "seq": seq, "type": type_, "data": data}


def _status(s: str) -> dict[str, Any]:
    return {"kind": "agent/status", "agent": "a", "status": s}


def _turn(seq: int, n: int, prompt: str) -> list[dict[str, Any]]:
    return [
        _log(seq, "turn/start", turn=n, trigger={"kind": "message"}),
        _log(seq + 1, "user/message", content=[{"type": "text", "text": prompt}]),
        _log(seq + 2, "turn/end", turn=n, reason={"kind": "completed"}),
    ]


def _check(name: str, timeline: list[dict[str, Any]]) -> ck.Violation | None:
    found = {c.name: c for c in ck.INVARIANTS}[name]
    return found.evaluate(ck.TraceView(timeline))


def test_sound_timeline_passes_every_invariant() -> None:
    tl = [_op("send", "A"), _op("when_idle", waiter="w"), _status("running"), *_turn(0, 1, "A"), _status("idle"),
          {"kind": "waiter/released", "waiter": "w", "agent": "a", "status": "idle", "log_len": 3}]
    assert [c.name for c in ck.INVARIANTS if c.evaluate(ck.TraceView(tl)) is not None] == []


def test_log_balance() -> None:
    tl = [_op("send", "A"), _log(0, "turn/start", turn=1), _log(1, "turn/start", turn=2)]
    found = _check("LOG", tl)
    assert found is not None and "LOG-4" in found.message


def test_status_repeat_and_illegal_transition() -> None:
    found = _check("STATUS-1", [_status("running"), _status("running")])
    assert found is not None and "repeated" in found.message and found.at == 1
    found = _check("STATUS-1", [_status("disposed"), _status("idle")])
    assert found is not None and "illegal" in found.message


def test_turn_numbers_increase() -> None:
    tl = [_op("send", "A"), _op("send", "B"), *_turn(0, 2, "A"), *_turn(3, 2, "B")]
    found = _check("LOOP-3", tl)
    assert found is not None and "turn 2 started after turn 2" in found.message


def test_prompt_run_twice_or_lost() -> None:
    found = _check("prompts", [_op("send", "A"), *_turn(0, 1, "A"), *_turn(3, 2, "A")])
    assert found is not None and "ran 2 times" in found.message
    found = _check("prompts", [_op("send", "A"), _op("send", "B"), *_turn(0, 1, "A")])
    assert found is not None and "'B'" in found.message and "never ran" in found.message
    # ... unless a later cancel may have dropped it.
    assert _check("prompts", [_op("send", "A"), _op("send", "B"), _op("cancel"), *_turn(0, 1, "A")]) is None


def test_idle2_running_at_release_without_new_prompt() -> None:
    tl = [_op("send", "A"), _op("when_idle", waiter="w"), _status("running"), *_turn(0, 1, "A"), _status("idle"),
          _status("running"), {"kind": "waiter/released", "waiter": "w", "agent": "a", "status": "running", "log_len": 3}]
    found = _check("IDLE-2", tl)
    assert found is not None and found.at == 8 and "running" in found.message
    # A prompt sent after the idle transition explains the running status.
    tl.insert(7, _op("send", "C"))
    assert _check("IDLE-2", tl) is None


def test_released_after_turn() -> None:
    check = ck.released_after_turn("w", "B")
    early = [_op("when_idle", waiter="w"), _log(0, "turn/start", turn=1),
             _log(1, "user/message", content=[{"type": "text", "text": "B"}]),
             {"kind": "waiter/released", "waiter": "w", "agent": "a", "status": "running", "log_len": 2},
             _log(2, "turn/end", turn=1, reason={"kind": "completed"})]
    found = check.evaluate(ck.TraceView(early))
    assert found is not None and "still open" in found.message and found.at == 3
    late = [early[0], early[1], early[2], early[4], {**early[3], "log_len": 3}]
    assert check.evaluate(ck.TraceView(late)) is None
    assert "never resolved" in (check.evaluate(ck.TraceView(early[:3])) or ck.Violation("")).message


def test_a_raising_check_is_a_violation() -> None:
    boom = ck.LoopCheck("boom", lambda view: 1 / 0)  # type: ignore[arg-type,return-value]
    found = boom.evaluate(ck.TraceView([]))
    assert found is not None and "ZeroDivisionError" in found.message


def test_send_refused_by_a_disposed_agent_is_owed_nothing() -> None:
    # DISP-3: send() on a disposed agent raises; the prompt was never queued, so it is not lost.
    tl = [_op("send", "A"), _status("running"), *_turn(0, 1, "A"), _status("idle"), _op("dispose"),
          _status("disposed"), _op("send", "B", status="disposed"),
          {"kind": "op/error", "op": "send", "by": "caller", "agent": "a", "error": "AgentDisposedError: x"}]
    assert _check("prompts", tl) is None
    # The same send on a live agent that raised (for whatever reason) queued nothing either.
    refused = [_op("send", "A"), _status("running"), *_turn(0, 1, "A"), _status("idle"), _op("send", "B"),
               {"kind": "agent/queued", "agent": "a", "text": "B"},
               {"kind": "op/error", "op": "send", "by": "caller", "agent": "a", "error": "ValueError: x"}]
    assert _check("prompts", refused) is None
    # But a send that went through and never ran is still caught.
    lost = [_op("send", "A"), _status("running"), *_turn(0, 1, "A"), _status("idle"), _op("send", "B")]
    violation = _check("prompts", lost)
    assert violation is not None and "'B'" in violation.message


def test_same_turn() -> None:
    check = ck.same_turn(["A", "B"])
    batched = [_op("send", "A"), _op("send", "B"), _log(0, "turn/start", turn=1, trigger={"kind": "message"}),
               _log(1, "user/message", content=[{"type": "text", "text": "A"}]),
               _log(2, "user/message", content=[{"type": "text", "text": "B"}]),
               _log(3, "turn/end", turn=1, reason={"kind": "completed"})]
    assert check.evaluate(ck.TraceView(batched)) is None
    split = [_op("send", "A"), _op("send", "B"), *_turn(0, 1, "A"), *_turn(3, 2, "B")]
    found = check.evaluate(ck.TraceView(split))
    assert found is not None and found.at == 2  # the turn that ran A (the first of them)
    assert "'A' in turn(s) [1], 'B' in turn(s) [2]" in found.message and "LOOP-2" in found.message
    lost = [_op("send", "A"), *_turn(1, 1, "A")]
    found = check.evaluate(ck.TraceView(lost))
    assert found is not None and "'B' never" in found.message
    # Per agent: another agent's turn does not count.
    assert ck.same_turn(["A", "B"], agent="b").evaluate(ck.TraceView(batched)) is not None


def test_where_reaches_into_nested_data() -> None:
    tl = [_op("send", "A"), *_turn(1, 1, "A")]
    view = ck.TraceView(tl)
    assert ck.event("log", {"type": "turn/end", "data.reason.kind": "completed"}, count=1).evaluate(view) is None
    assert ck.event("log", {"data.reason.kind": "aborted"}).evaluate(view) is not None
    assert ck.no_event("log", {"data.reason.kind": "completed"}).evaluate(view) is not None
    assert ck.no_event("log", {"data.reason.kind.deeper": "completed"}).evaluate(view) is None
    # A field whose own name has a dot wins over the path.
    assert ck.event("x", {"a.b": 1}).evaluate(ck.TraceView([{"kind": "x", "a.b": 1, "a": {"b": 2}}])) is None
