"""The checks read timelines: each oracle fails on a timeline that breaks it, holds on one that
does not, names the rule ids it checks, and points at the event where it shows."""

from __future__ import annotations

from typing import Any

from conformance.scenario import checks as ck


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
    found = {c.name: c for c in ck.ORACLES}[name]
    return found.evaluate(ck.TraceView(timeline))


def test_sound_timeline_passes_every_invariant() -> None:
    start, message, end = _turn(0, 1, "A")
    tl = [_op("send", "A"), {"kind": "agent/queued", "agent": "a", "text": "A", "steering": False, "source": "user"},
          _op("when_idle", waiter="w"), _status("running"),
          start, message, {"kind": "agent/turn-start", "agent": "a", "turn": 1},
          end, {"kind": "agent/turn-end", "agent": "a", "turn": 1}, _status("idle"),
          {"kind": "waiter/released", "waiter": "w", "agent": "a", "status": "idle", "log_len": 3, "precise": True}]
    assert [c.name for c in ck.ORACLES if c.evaluate(ck.TraceView(tl)) is not None] == []


def test_log_balance() -> None:
    tl = [_op("send", "A"), _log(0, "turn/start", turn=1), _log(1, "turn/start", turn=2)]
    found = _check("LOG", tl)
    assert found is not None and "LOG-4" in found.message


def test_steps_count_from_one_within_their_turn() -> None:
    def turn(n: int, seq: int, *steps: int) -> list[dict[str, Any]]:
        out = [_log(seq, "turn/start", turn=n)]
        for i, step in enumerate(steps):
            out += [_log(seq + 1 + 2 * i, "step/start", turn=n, step=step), _log(seq + 2 + 2 * i, "step/end", turn=n, step=step)]
        return [*out, _log(seq + 1 + 2 * len(steps), "turn/end", turn=n)]

    assert _check("LOG", [_op("send", "A"), *turn(1, 0, 1, 2), *turn(2, 6, 1)]) is None
    found = _check("LOG", [_op("send", "A"), *turn(1, 0, 1), *turn(2, 4, 2)])  # numbered on from turn 1
    assert found is not None and found.rules == ("LOG-5",) and "expected step 1" in found.message
    assert "expected step 2" in (_check("LOG", [_op("send", "A"), *turn(1, 0, 1, 3)]) or ck.Violation("")).message


def test_status_repeat_and_illegal_transition() -> None:
    found = _check("STATUS-1", [_status("running"), _status("running")])
    assert found is not None and "repeated" in found.message and found.at == 1
    found = _check("STATUS-1", [_status("disposed"), _status("idle")])
    assert found is not None and "illegal" in found.message


def test_turn_numbers_increase() -> None:
    tl = [_op("send", "A"), _op("send", "B"), *_turn(0, 1, "A"), *_turn(3, 1, "B")]
    found = _check("LOOP-3", tl)
    assert found is not None and "turn 1 started after turn 1" in found.message
    # LOOP-3: the next turn is the last one's number + 1, the first one 1
    found = _check("LOOP-3", [_op("send", "A"), _op("send", "B"), *_turn(0, 1, "A"), *_turn(3, 3, "B")])
    assert found is not None and "turn 3 started after turn 1" in found.message
    assert _check("LOOP-3", [_op("send", "A"), *_turn(0, 2, "A")]) is not None
    assert _check("LOOP-3", [_op("send", "A"), _op("send", "B"), *_turn(0, 1, "A"), *_turn(3, 2, "B")]) is None


def _loaded(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{**e, "loaded": True} for e in entries]


def _resumed(session: str = "sess-1", *, live: str = "sess-1") -> list[dict[str, Any]]:
    return [{"kind": "op", "by": "world", "op": "resume", "agent": "a", "session": session},
            *_loaded(_turn(0, 1, "H")),
            {"kind": "agent/created", "agent": "a", "model": "fake", "resumed": session, "session": live}]


def test_resumed_session_continues() -> None:
    # SVC-3: the live session id is the resumed id; turns continue from the loaded log
    ok = [*_resumed(), _op("send", "A"), *_turn(3, 2, "A")]
    assert _check("SVC-3", ok) is None and _check("LOOP-3", ok) is None
    # the loaded turn ran before this run: no notification, no flush, no op sent its prompt
    assert _check("NOTIFIED", _resumed()) is None and _check("prompts", ok) is None
    found = _check("SVC-3", [*_resumed(live="a-session-1"), _op("send", "A"), *_turn(3, 2, "A")])
    assert found is not None and found.rules == ("SVC-3",) and "a-session-1" in found.message
    found = _check("LOOP-3", [*_resumed(), _op("send", "A"), *_turn(3, 1, "A")])
    assert found is not None and found.rules == ("SVC-3", "LOOP-3") and "first turn after resume() is 1" in found.message


def test_resume_after_the_id_was_taken_during_its_load() -> None:
    # SVC-2: a create() that succeeded while the resume loaded leaves the resume rejected
    resume, *loaded, created = _resumed()
    create = {"kind": "op", "by": "window", "op": "create", "agent": "a", "status": None}
    taken = [resume, create, {"kind": "agent/created", "agent": "a", "model": "fake"}, *loaded, created]
    found = _check("SVC-3", taken)
    assert found is not None and found.rules == ("SVC-2",) and "two live agents" in found.message
    refused = [resume, create, {"kind": "op/error", "by": "window", "op": "create", "agent": "a", "error": "taken"},
               *loaded, created]
    assert _check("SVC-3", refused) is None
    assert _check("SVC-2", taken) is None  # the id was free when create() came: SVC-2's own check is silent


def test_prompt_run_twice_or_lost() -> None:
    found = _check("prompts", [_op("send", "A"), *_turn(0, 1, "A"), *_turn(3, 2, "A")])
    assert found is not None and "ran 2 times" in found.message
    found = _check("prompts", [_op("send", "A"), _op("send", "B"), *_turn(0, 1, "A")])
    assert found is not None and "'B'" in found.message and "never ran" in found.message
    # ... unless a later cancel may have dropped it.
    assert _check("prompts", [_op("send", "A"), _op("send", "B"), _op("cancel"), *_turn(0, 1, "A")]) is None


def test_a_prompt_lost_after_a_noop_cancel_names_cancel3() -> None:
    # CANCEL-3: a cancel() on an idle agent with nothing pending arms nothing: the next prompt runs.
    found = _check("prompts", [_op("cancel"), _op("send", "A")])
    assert found is not None and "CANCEL-3" in found.rules and "no-op" in found.message
    # With a prompt queued before it the cancel had something to cancel: not CANCEL-3's case.
    found = _check("prompts", [_op("send", "A"), _op("cancel"), _op("send", "B")])
    assert found is not None and "'B'" in found.message and "CANCEL-3" not in found.rules
    # A cancel while running is not one either.
    found = _check("prompts", [_op("cancel", status="running"), _op("send", "B")])
    assert found is not None and "CANCEL-3" not in found.rules


def test_a_failure_drops_only_what_its_own_turn_drained() -> None:
    # ERR-11: turn 1's turn/start listener threw, consuming the prompt drained into it: excused.
    error = {"kind": "agent/error", "agent": "a", "turn": 1, "step": 0, "error": "RuntimeError: boom"}
    consumed = [_op("send", "A"), _log(0, "turn/start", turn=1, trigger={"kind": "message"}), error,
                _log(1, "turn/end", turn=1, reason={"kind": "error", "message": "boom"})]
    assert _check("prompts", consumed) is None
    # ERR-6 / ERR-1: a prompt sent during turn 1's flush, once turn 1 had opened, stays queued
    # whatever the failure of that flush: dropping it is named for the failure.
    start, message, end = _turn(0, 1, "A")
    flush_failed = dict(error, step=1)  # turn 1's flush failed, after its step 1
    dropped = [_op("send", "A"), start, message, end, _op("send", "B", by="window", status="running"), flush_failed]
    found = _check("prompts", dropped)
    assert found is not None and "'B'" in found.message and found.rules == ("ERR-1", "ERR-6"), found
    assert "contained failure of turn 1" in found.message and found.at == 4
    # ERR-8: a turn/start rejected, announced with step 0 while no turn is open, may name the
    # turn it would have opened or the last one: either way the prompts it drained are excused
    rejected = [_op("send", "A"), start, message, end, _op("send", "B"), dict(error, turn=2), _op("send", "C")]
    assert _check("prompts", [*rejected, *_turn(3, 3, "C")]) is None
    assert _check("prompts", [*rejected[:5], error, rejected[6], *_turn(3, 3, "C")]) is None


def test_a_prompt_consumed_by_a_failed_turn_start_does_not_run_again() -> None:
    failed = [_log(0, "turn/start", turn=1, trigger={"kind": "message"}),
              {"kind": "agent/error", "agent": "a", "turn": 1, "step": 0, "error": "RuntimeError: boom"},
              _log(1, "turn/end", turn=1, reason={"kind": "error", "message": "boom"})]
    again = _check("prompts", [_op("send", "A"), *failed, *_turn(2, 2, "A")])
    assert again is not None and again.rules == ("ERR-11",) and "consumed by turn 1" in again.message, again
    assert again.at == 4  # turn 2's turn/start
    # steering given too late for turn 2 is re-queued as a prompt (LOOP-8): it runs again, rightly
    late = [_op("send", "A"), *failed, _op("send", "B"), *_turn(3, 2, "B")[:2],
            _op("steer", "A", status="running"), *_turn(3, 2, "B")[2:], *_turn(6, 3, "A")]
    assert _check("prompts", late) is None
    # sent again after the failed turn: it runs again, as it should
    assert _check("prompts", [_op("send", "A"), *failed, _op("send", "A", status="running"), *_turn(2, 2, "A")]) is None


def test_every_request_carries_the_agents_system_prompt_and_the_registered_tools() -> None:
    created = {"kind": "agent/created", "agent": "a", "model": "fake", "system_prompt": "Be brief.", "tools": ["lookup"]}

    def request(call: int, **extra: Any) -> dict[str, Any]:
        return {"kind": "model/request", "model": "fake", "call": call, "messages": 1, "history": "h", **extra}

    good = request(1, system="Be brief.", tools=["lookup"])
    assert _plain("REQUEST", [created, good, request(2, system="Be brief.", tools=["lookup"])]) is None
    found = _plain("REQUEST", [created, good, request(2, system="Be brief.")])
    assert found is not None and found.rules == ("SVC-5",) and found.at == 2 and "#2" in found.message
    found = _plain("REQUEST", [created, request(1, tools=["lookup"])])
    assert found is not None and "system prompt None" in found.message
    sections = dict(created, sections=["One.", "Two."])
    assert _plain("REQUEST", [sections, request(1, system="One.\n\nTwo.\n\nBe brief.", tools=["lookup"])]) is None
    found = _plain("REQUEST", [sections, request(1, system="Be brief.\n\nOne.\n\nTwo.", tools=["lookup"])])
    assert found is not None and "'One.\\n\\nTwo.\\n\\nBe brief.'" in found.message, found
    # not judged where a plugin listens to a waterfall that may rewrite the request
    plugin = {"kind": "listener", "name": "rewriter", "on": "agent/request"}
    assert _plain("REQUEST", [created, plugin, request(1)]) is None
    assert _plain("REQUEST", [created, dict(plugin, name="window"), request(1)]) is not None
    # one whose rewrite names only the model (a routing plugin) leaves the prompt and tools to judge
    assert _plain("REQUEST", [created, dict(plugin, rewrites=["model"]), request(1)]) is not None
    assert _plain("REQUEST", [created, dict(plugin, rewrites=["model", "system"]), request(1)]) is None
    # the entries' shape (0b), recorded by the fake when off
    odd = request(1, system="Be brief.", tools=["lookup"], tools_shape=["lookup: no input_schema (...)"])
    found = _plain("REQUEST", [created, odd])
    assert found is not None and found.rules == ("SVC-5",) and "not of 0b's shape: lookup: no input_schema" in found.message


def test_prompts_and_steering_are_logged_in_the_order_given() -> None:
    def turn(*kinds_texts: tuple[str, str]) -> list[dict[str, Any]]:
        body = [_log(i + 1, kind, turn=1, content=[{"type": "text", "text": text}]) for i, (kind, text) in enumerate(kinds_texts)]
        return [_log(0, "turn/start", turn=1, trigger={"kind": "message"}), *body,
                _log(len(body) + 1, "turn/end", turn=1, reason={"kind": "completed"})]

    given = [_op("send", "A"), _op("send", "B"), _op("steer", "S1", status="running"), _op("steer", "S2", status="running")]
    fifo = turn(("user/message", "A"), ("user/message", "B"), ("steering/message", "S1"), ("steering/message", "S2"))
    assert _check("FIFO", [*given, *fifo]) is None
    lifo = turn(("user/message", "A"), ("user/message", "B"), ("steering/message", "S2"), ("steering/message", "S1"))
    found = _check("FIFO", [*given, *lifo])
    assert found is not None and found.rules == ("INBOX-1", "LOOP-2") and "['S2', 'S1']" in found.message
    swapped = turn(("user/message", "B"), ("user/message", "A"))
    assert _check("FIFO", [*given, *swapped]) is not None
    # steering re-queued as a prompt (LOOP-8) joins the queue after its turn: behind a prompt sent
    # before that steering was given (session 60, blind round K) ...
    late = turn(("user/message", "S1"), ("user/message", "A"))
    found = _check("FIFO", [*given, *late])
    assert found is not None and found.rules == ("LOOP-8", "INBOX-1") and "'S1', steering re-queued" in found.message
    # ... and either side of one sent after it (when the re-queue happens is the loop's)
    early = [_op("steer", "S1", status="running"), _op("send", "A")]
    assert _check("FIFO", [*early, *late]) is None
    assert _check("FIFO", [*early, *turn(("user/message", "A"), ("user/message", "S1"))]) is None
    # the same text sent twice is matched call by call: A, B, A in that order is FIFO
    again = [_op("send", "A"), _op("send", "B"), _op("send", "A")]
    assert _check("FIFO", [*again, *turn(("user/message", "A"), ("user/message", "B"), ("user/message", "A"))]) is None


def test_a_turn_cancelled_while_open_ends_aborted() -> None:
    start, message, _end = _turn(0, 1, "A")
    cancel = _op("cancel", status="running", by="window", on="agent/turn-continuation")
    completed = _check("CANCEL-1", [_op("send", "A"), start, message, cancel,
                                    _log(2, "turn/end", turn=1, reason={"kind": "completed"})])
    assert completed is not None and completed.rules == ("CANCEL-1", "CANCEL-CONT") and completed.at == 4, completed
    aborted = _log(2, "turn/end", turn=1, reason={"kind": "aborted", "reason": "cancelled"})
    assert _check("CANCEL-1", [_op("send", "A"), start, message, cancel, aborted]) is None
    # a cancel once turn/end is logged (during the flush, say) governs no open turn
    done = _log(2, "turn/end", turn=1, reason={"kind": "completed"})
    assert _check("CANCEL-1", [_op("send", "A"), start, message, done, cancel]) is None
    # a cancel from outside the continuation waterfall once the turn's last call of it was made
    # (a loop awaiting between its gate and turn/end): the closing turn's reason is open
    # (indie60d, session 48); inside the waterfall, or before the call, it is still judged
    gate = {"kind": "continuation", "agent": "a", "turn": 1, "decision": False}
    outside = _op("cancel", status="running", by="window", on="session/flush")
    assert _check("CANCEL-1", [_op("send", "A"), start, message, gate, outside, done]) is None
    assert _check("CANCEL-1", [_op("send", "A"), start, message, gate, cancel, done]) is not None
    assert _check("CANCEL-1", [_op("send", "A"), start, message, outside, gate, done]) is not None
    # a listener on another agent's continuation waterfall (b's plugin cancelling a) acts from
    # outside a's: past a's last gate the closing turn's reason is open there too (promise_loop,
    # session 58), and before it a's own continuation still counts it (CANCEL-1)
    theirs = {"kind": "listener", "name": "window", "on": "agent/turn-continuation", "agent": "b"}
    assert _check("CANCEL-1", [_op("send", "A"), start, message, gate, theirs, cancel, done]) is None
    mine = dict(theirs, agent="a")
    assert _check("CANCEL-1", [_op("send", "A"), start, message, gate, mine, cancel, done]) is not None
    step = _log(2, "step/start", turn=1, step=1)
    assert _check("CANCEL-1", [_op("send", "A"), start, message, theirs, cancel, step, aborted]) is None
    found = _check("CANCEL-1", [_op("send", "A"), start, message, mine, cancel, step, aborted])
    assert found is not None and found.rules == ("CANCEL-CONT",), found


def test_a_cancelled_turn_calls_the_model_in_no_further_step() -> None:
    start, message, _end = _turn(0, 1, "A")
    step = _log(2, "step/start", turn=1, step=1)
    request = {"kind": "model/request", "model": "fake", "call": 1}
    aborted = _log(4, "turn/end", turn=1, reason={"kind": "aborted", "reason": "cancelled"})
    head = [{"kind": "agent/created", "agent": "a", "model": "fake"}, _op("send", "A"), start, message]
    # a cancel landing in the open step, before its model call (a loop awaiting there): the step
    # in flight, which the cancel aborts; whether its call is still made is open (indie61b, session 49)
    actor = _op("cancel", status="running", by="window")
    assert _check("CANCEL-1", [*head, step, actor, request, _log(3, "step/end", turn=1, step=1), aborted]) is None
    # a step opened after the cancel calls no model (the marker drops it before each step) ...
    found = _check("CANCEL-1", [*head, actor, step, request, _log(3, "step/end", turn=1, step=1), aborted])
    assert found is not None and "CANCEL-STEP" in found.rules and found.at == 6
    # ... nor one a synchronous agent/step-start listener cancelled (CANCEL-STEP)
    listener = _op("cancel", status="running", by="window", on="agent/step-start")
    found = _check("CANCEL-1", [*head, step, listener, request, _log(3, "step/end", turn=1, step=1), aborted])
    assert found is not None and "agent/step-start listener" in found.message


def test_idle2_running_at_release_without_new_prompt() -> None:
    # A release seen only when its awaiting task resumed (not precise) is judged leniently.
    tl = [_op("send", "A"), _op("when_idle", waiter="w"), _status("running"), *_turn(0, 1, "A"), _status("idle"),
          _status("running"), {"kind": "waiter/released", "waiter": "w", "agent": "a", "status": "running", "log_len": 3}]
    found = _check("IDLE-2", tl)
    assert found is not None and found.at == 8 and "running" in found.message and found.rules == ("IDLE-2",)
    # A prompt sent after the idle transition explains the running status.
    tl.insert(7, _op("send", "C"))
    assert _check("IDLE-2", tl) is None
    # A sampled (precise) release while running is a violation whatever came before.
    tl[-1] = {**tl[-1], "precise": True}
    assert _check("IDLE-2", tl) is not None


def test_idle2_precise_release_counts_prompts_queued_after_registration() -> None:
    # The waiter was registered before B was sent, and released (sampled) before B ran: the
    # agent was not quiescent at the release (IDLE-2), although B came after the registration.
    tl = [_op("send", "A"), _op("when_idle", waiter="w"), _status("running"), _op("send", "B", status="running"),
          *_turn(0, 1, "A"), _status("idle"),
          {"kind": "waiter/released", "waiter": "w", "agent": "a", "status": "idle", "log_len": 3, "precise": True},
          _status("running"), *_turn(3, 2, "B"), _status("idle")]
    found = _check("IDLE-2", tl)
    assert found is not None and "'B'" in found.message
    # Not precise: only what was queued before the registration counts.
    tl[8] = {**tl[8], "precise": False}
    assert _check("IDLE-2", tl) is None
    # A cancel between B's send and the release dropped it: nothing was owed.
    excused = [*tl[:4], _op("cancel", status="running"), *tl[4:]]
    excused[9] = {**excused[9], "precise": True}
    assert _check("IDLE-2", excused) is None


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


def _ended(seq: int, n: int, prompt: str, reason: dict[str, Any], *body: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        _log(seq, "turn/start", turn=n, trigger={"kind": "message"}),
        _log(seq + 1, "user/message", content=[{"type": "text", "text": prompt}]),
        *body,
        _log(seq + 2 + len(body), "turn/end", turn=n, reason=reason),
    ]


def test_cancel_drops_queued_work() -> None:
    ran_anyway = [_op("send", "A"), _op("cancel"), _status("running"), *_turn(0, 1, "A"), _status("idle")]
    found = _check("CANCEL-2", ran_anyway)
    assert found is not None and "'A'" in found.message and found.rules == ("CANCEL-2",)
    # A prompt sent after the cancel runs.
    assert _check("CANCEL-2", [_op("cancel"), _op("send", "A"), _status("running"), *_turn(0, 1, "A")]) is None
    # Steering waiting at the cancel is dropped too (CANCEL-4).
    steered = [_op("send", "A"), _status("running"), _log(0, "turn/start", turn=1, trigger={"kind": "message"}),
               _log(1, "user/message", content=[{"type": "text", "text": "A"}]),
               _op("steer", "S", status="running"), _op("cancel", status="running"),
               _log(2, "steering/message", turn=1, content=[{"type": "text", "text": "S"}]),
               _log(3, "turn/end", turn=1, reason={"kind": "aborted", "reason": "cancelled"})]
    found = _check("CANCEL-2", steered)
    assert found is not None and found.rules == ("CANCEL-4",)


def test_aborted_turn_needs_a_cancel_or_abort_during_it() -> None:
    aborted = {"kind": "aborted", "reason": "cancelled"}
    leaked = [_op("send", "A"), _op("cancel"), _op("send", "B"), *_ended(0, 1, "B", aborted)]
    found = _check("MARKER-1", leaked)
    assert found is not None and "turn 1 ends aborted" in found.message and "MARKER-1" in found.rules
    during = [_op("send", "B"), _log(0, "turn/start", turn=1, trigger={"kind": "message"}), _op("abort", status="running"),
              _log(1, "turn/end", turn=1, reason=aborted)]
    assert _check("MARKER-1", during) is None


def test_window2_cancel_is_named_where_its_replacement_suffers() -> None:
    # CANCEL-W2: a status('running') listener cancels (no turn open yet) and queues B: B's turn
    # runs in the same running period, not aborted, and a waiter waits for it.
    aborted = {"kind": "aborted", "reason": "cancelled"}
    window2 = [_op("send", "A"), _status("running"), _op("cancel", status="running", on="agent/status"),
               _op("send", "B", status="running", on="agent/status")]
    found = _check("MARKER-1", [*window2, *_ended(0, 1, "B", aborted), _status("idle")])
    assert found is not None and found.rules == ("CANCEL-W2", "MARKER-1"), found
    released = {"kind": "waiter/released", "waiter": "w", "agent": "a", "status": "idle", "log_len": 0, "precise": True}
    found = _check("IDLE-2", [_op("when_idle", waiter="w"), *window2, _status("idle"), released,
                              _status("running"), *_turn(0, 1, "B"), _status("idle")])
    assert found is not None and found.rules == ("IDLE-2", "CANCEL-W2") and "'B'" in found.message, found
    # A cancel once the turn is open is not window 2's.
    open_turn = [_op("send", "A"), _status("running"), _log(0, "turn/start", turn=1, trigger={"kind": "message"}),
                 _op("cancel", status="running"), _log(1, "turn/end", turn=1, reason=aborted),
                 _op("send", "B", status="running"), *_ended(2, 2, "B", aborted)]
    found = _check("MARKER-1", open_turn)
    assert found is not None and "CANCEL-W2" not in found.rules


def _aborted_turn(abort_at: str, *, on: str | None = "agent/step-end", reason: str = "hunt") -> list[dict[str, Any]]:
    """Turn 1 of prompt A with two steps, ending aborted{hunt}; an abort(reason) lands at ``abort_at``
    (after that log entry), made by a listener ``on`` that event (``None``: by an actor)."""
    entries = [_log(0, "turn/start", turn=1), _log(1, "user/message", content=[{"type": "text", "text": "A"}]),
               _log(2, "step/start", turn=1, step=1), _log(3, "step/end", turn=1, step=1),
               _log(4, "step/start", turn=1, step=2), _log(5, "step/end", turn=1, step=2),
               _log(6, "turn/end", turn=1, reason={"kind": "aborted", "reason": "hunt"})]
    at = next(i for i, e in enumerate(entries) if f"{e['type']}#{e['data'].get('step', '')}" == abort_at) + 1
    stop = _op("abort", by="window", status="running", reason=reason, **({"on": on} if on else {}))
    return [_op("send", "A"), _status("running"), *entries[:at], stop, *entries[at:], _status("idle")]


def test_an_abort_with_no_step_in_flight_is_not_deferred() -> None:
    # Between steps (after step 1 closed) or before the first: the abort does nothing (ABORT-1).
    for between in ("step/end#1", "user/message#", "turn/start#"):
        found = _check("ABORT-1", _aborted_turn(between))
        assert found is not None and found.rules == ("ABORT-1",) and "no step was in flight" in found.message
        assert found.at == 9
    # Inside a step the abort is the cause; an actor's abort may land in a step's first moments;
    # another stop with the same reason may be the cause.
    assert _check("ABORT-1", _aborted_turn("step/start#2")) is None
    # ... but not from an agent/step-start listener: the step has no abort handle yet (CANCEL-STEP)
    found = _check("ABORT-1", _aborted_turn("step/start#2", on="agent/step-start"))
    assert found is not None and found.rules == ("ABORT-1", "CANCEL-STEP") and "abort handle" in found.message
    assert _check("ABORT-1", _aborted_turn("step/end#1", on=None)) is None
    assert _check("ABORT-1", _aborted_turn("step/end#1", reason="other")) is None
    tl = _aborted_turn("step/end#1")
    tl.insert(8, _op("cancel", by="window", status="running", reason="hunt"))
    assert _check("ABORT-1", tl) is None


def test_an_abort_while_the_step_is_in_flight_ends_the_turn_aborted() -> None:
    # A listener of the step's assistant/message aborts: the step is in flight until its
    # step/end, so the turn must not end completed (nor max-tokens); it may end aborted, or
    # disposed or error (session 56's blind round: a loop that checked the signal only after
    # tool calls ended such a turn completed).
    def turn(reason: dict[str, Any], *, on: str | None = "session/event", agent: str = "a",
             heard: str = "assistant/message") -> list[dict[str, Any]]:
        head = [_log(0, "turn/start", turn=1), _log(1, "step/start", turn=1, step=1),
                _log(2, heard, turn=1, step=1, content=[])]
        stop = _op("abort", by="window", status="running", reason="hunt", **({"on": on} if on else {}))
        stop["agent"] = agent
        return [_op("send", "A"), _status("running"), *head, stop,
                _log(3, "step/end", turn=1, step=1), _log(4, "turn/end", turn=1, reason=reason), _status("idle")]

    found = _check("IN-FLIGHT", turn({"kind": "completed"}))
    assert found is not None and found.rules == ("ABORT-1",) and "assistant/message" in found.message
    assert found.at == 7  # the turn/end
    assert _check("IN-FLIGHT", turn({"kind": "max-tokens"})) is not None
    for holds in ({"kind": "aborted", "reason": "hunt"}, {"kind": "disposed"}, {"kind": "error", "message": "x"}):
        assert _check("IN-FLIGHT", turn(holds)) is None
    # not judged: an actor's abort (it may land in a gap the log does not show), and an abort
    # heard before the model call (the step's handle may not exist yet: CANCEL-STEP)
    assert _check("IN-FLIGHT", turn({"kind": "completed"}, on=None)) is None
    assert _check("IN-FLIGHT", turn({"kind": "completed"}, heard="steering/message")) is None
    # nor an abort of another agent than the one whose event the listener heard
    assert _check("IN-FLIGHT", turn({"kind": "completed"}, agent="b")) is None


def test_an_aborted_turn_carries_the_reason_of_its_stop() -> None:
    # The turn ends with the reason of a stop since the previous turn ended (defaults filled in).
    def ended(reason: str, *stops: dict[str, Any]) -> list[dict[str, Any]]:
        return [_op("send", "A"), _log(0, "turn/start", turn=1, trigger={"kind": "message"}), *stops,
                _log(1, "turn/end", turn=1, reason={"kind": "aborted", "reason": reason})]

    found = _check("REASON", ended("aborted", _op("cancel", status="running", reason="user stop")))
    assert found is not None and found.rules == ("CANCEL-1", "ABORT-1") and "'user stop'" in found.message
    assert _check("REASON", ended("user stop", _op("cancel", status="running", reason="user stop"))) is None
    assert _check("REASON", ended("cancelled", _op("cancel", status="running"))) is None
    assert _check("REASON", ended("aborted", _op("abort", status="running"))) is None
    assert _check("REASON", ended("x", _op("abort", status="running", reason="y"), _op("cancel", status="running",
                                                                                      reason="x"))) is None


def test_a_cancel_on_a_disposed_agent_drops_nothing() -> None:
    # 0b: cancel() on a disposed agent is a no-op, so a prompt that runs after it broke no CANCEL-2.
    tl = [_op("send", "A"), _op("cancel", status="disposed"), *_turn(0, 1, "A")]
    assert _check("CANCEL-2", tl) is None
    tl[1] = _op("cancel", status="idle")
    assert _check("CANCEL-2", tl) is not None


def test_a_plugin_failing_at_a_boundary_ends_the_turn_error() -> None:
    def turn(on: str, end: str, *extra: dict[str, Any], turn_end: bool = False) -> list[dict[str, Any]]:
        raised = _op("raise", by="window", status="running", on=on)
        out = [_op("send", "A"), _status("running"), _log(0, "turn/start", turn=1, trigger={"kind": "message"}),
               _log(1, "step/start", turn=1, step=1), raised, *extra, _log(2, "step/end", turn=1, step=1),
               _log(3, "turn/end", turn=1, reason={"kind": end})]
        return out + ([{"kind": "agent/turn-end", "agent": "a", "turn": 1}] if turn_end else []) + [_status("idle")]

    found = _check("BOUNDARY", turn("agent/step-end", "completed"))
    assert found is not None and found.rules == ("ERR-2", "ERR-3") and "not 'error'" in found.message
    error = _log(9, "error", turn=1, step=1, message="boom")
    assert _check("BOUNDARY", turn("agent/step-end", "error", error)) is None
    found = _check("BOUNDARY", turn("agent/request", "error"))
    assert found is not None and "0 error events" in found.message
    found = _check("BOUNDARY", turn("agent/step-end", "error", error, _log(9, "step/start", turn=1, step=2)))
    assert found is not None and "step 2 opened" in found.message
    found = _check("BOUNDARY", turn("agent/step-start", "error", error, turn_end=True))
    assert found is not None and found.rules == ("LOOP-4",)
    assert _check("BOUNDARY", turn("agent/step-end", "error", error, turn_end=True)) is None
    # A cancel in the turn may end it first; an agent/turn-end listener is ERR-10's, not judged here.
    assert _check("BOUNDARY", turn("agent/step-end", "aborted", _op("cancel", status="running"))) is None
    assert _check("BOUNDARY", turn("agent/turn-end", "completed")) is None
    # So may a caller's close() (SVC-7: it disposes every agent), which names no agent: a hunt's
    # random run of hang-close had the listener's failure come first, the disposal win (session 46)
    closing = {"kind": "world/closing", "by": "closer"}
    assert _check("BOUNDARY", turn("agent/request", "disposed", closing, _status("disposed"))) is None


def test_an_error_tool_result_is_one_error_text_block() -> None:
    def result(content: Any) -> list[dict[str, Any]]:
        return [_op("send", "A"), _log(0, "turn/start", turn=1), _log(1, "step/start", turn=1, step=1),
                _log(2, "tool/call", turn=1, step=1, call_id="c1", name="t", arguments="{}"),
                _log(3, "tool/result", turn=1, step=1, call_id="c1", content=content, is_error=True),
                _log(4, "step/end", turn=1, step=1), _log(5, "turn/end", turn=1, reason={"kind": "completed"})]

    assert _check("TOOLS", result([{"type": "text", "text": "Error: boom"}])) is None
    for bad in ("Error: boom", [{"type": "text", "text": "boom"}], [], [{"type": "text", "text": "Error: a"}] * 2):
        found = _check("TOOLS", result(bad))
        assert found is not None and found.rules == ("TOOL-3",) and found.at == 4, bad


def test_a_max_tokens_step_stops_the_turn_unless_steering_came() -> None:
    # MAXTOK-5/CONT-1: its tool calls removed, a max-tokens step counts as one without them.
    def turn(*between: dict[str, Any]) -> list[dict[str, Any]]:
        finish = {"type": "finish", "reason": {"kind": "max-tokens"}}
        return [_op("send", "A"), _log(0, "turn/start", turn=1), _log(1, "step/start", turn=1, step=1),
                _log(2, "assistant/chunk", turn=1, step=1, chunk=finish), *between, _log(3, "step/end", turn=1, step=1),
                _log(4, "step/start", turn=1, step=2), _log(5, "step/end", turn=1, step=2),
                _log(6, "turn/end", turn=1, reason={"kind": "max-tokens"})]

    found = _check("MAXTOK", turn())
    assert found is not None and found.rules == ("MAXTOK-5", "CONT-1") and "step 2 ran" in found.message
    assert _check("MAXTOK", turn(_log(9, "steering/message", turn=1, content="s"))) is None
    assert _check("MAXTOK", turn(_op("steer", "s", status="running"))) is None
    assert _check("MAXTOK", [*turn(), {"kind": "listener", "name": "mine", "on": "agent/turn-continuation"}]) is None


def test_no_steering_is_drained_into_a_turn_after_the_stop_that_ended_it() -> None:
    def turn(verb: str, *after: dict[str, Any]) -> list[dict[str, Any]]:
        return [_op("send", "A"), _log(0, "turn/start", turn=1), _log(1, "step/start", turn=1, step=1),
                _op("steer", "S", status="running"), _op(verb, status="running", reason="stop"), *after,
                _log(3, "step/end", turn=1, step=1), _log(4, "turn/end", turn=1, reason={"kind": "aborted", "reason": "stop"})]

    steering = _log(2, "steering/message", turn=1, step=1, content=[{"type": "text", "text": "S"}])
    found = _check("STEER-3", turn("abort", steering))
    assert found is not None and found.rules == ("STEER-3",) and "'S'" in found.message and found.at == 5
    found = _check("STEER-3", turn("cancel", steering))
    assert found is not None and found.rules == ("CANCEL-4",)
    assert _check("STEER-3", turn("abort")) is None
    # A step opened after the stop: it did not end that step (the abort came between steps).
    assert _check("STEER-3", turn("abort", _log(9, "step/start", turn=1, step=2), steering)) is None
    # A stop made inside a drain (by a listener on a steering/message): the rest of that drain
    # may be logged after it; steering given after the stop may not.
    inside = turn("abort", steering)
    inside.insert(4, _log(1, "steering/message", turn=1, step=1, content=[{"type": "text", "text": "R"}]))
    inside[5] = {**inside[5], "on": "session/event"}
    assert _check("STEER-3", inside) is None
    inside.insert(6, _op("steer", "S", status="running"))
    assert _check("STEER-3", inside) is not None


def test_a_turn_takes_every_prompt_queued_before_it() -> None:
    split = [_op("send", "A"), _op("send", "B"), *_turn(0, 1, "A"), *_turn(3, 2, "B")]
    found = _check("LOOP-2", split)
    assert found is not None and "did not take prompt 'B'" in found.message and found.rules == ("LOOP-2",)
    # A cancel between the send and the turn excuses it (it was dropped).
    assert _check("LOOP-2", [_op("send", "A"), _op("cancel"), _op("send", "B"), *_turn(0, 1, "B")]) is None
    # A loop may take its batch as its driver wakes (its running status) and log turn/start a task
    # later: what another task queued in between may wait for the next turn (indie56, session 46);
    # what was queued before the wake may not.
    woke = [_op("send", "A"), _status("running"), _op("send", "B", status="running"), *_turn(0, 1, "A"),
            *_turn(3, 2, "B")]
    assert _check("LOOP-2", woke) is None
    assert _check("LOOP-2", [woke[0], woke[2], woke[1], *woke[3:]]) is not None
    # an idle inject's one-shot turn written in between is no driver's turn: the wake still counts
    one_shot = [_log(0, "turn/start", turn=1, trigger={"kind": "injection"}), _log(1, "context/message", content="C"),
                _log(2, "turn/end", turn=1, reason={"kind": "completed"})]
    assert _check("LOOP-2", [*woke[:3], *one_shot, *_turn(3, 2, "A"), *_turn(6, 3, "B")]) is None
    # back to back: the next batch may be taken as the turn before ends (before its flush or after)
    back = [_op("send", "A"), _status("running"), *_turn(0, 1, "A"), _op("send", "B", status="running"),
            _op("send", "C", status="running"), *_turn(3, 2, "B"), *_turn(6, 3, "C")]
    assert _check("LOOP-2", back) is None
    during = [*back[:3], back[5], back[3], back[6], *back[7:]]  # C queued while turn 1 ran: turn 2's
    assert _check("LOOP-2", during) is not None


def test_max_tokens_precedence() -> None:
    finish = {"type": "finish", "reason": {"kind": "max-tokens"}}
    chunk = _log(2, "assistant/chunk", turn=1, step=1, chunk=finish)
    completed = [_op("send", "A"), *_ended(0, 1, "A", {"kind": "completed"}, chunk)]
    found = _check("MAXTOK", completed)
    assert found is not None and "MAXTOK-2" in found.message
    invented = [_op("send", "A"), *_ended(0, 1, "A", {"kind": "max-tokens"})]
    assert "MAXTOK-4" in (_check("MAXTOK", invented) or ck.Violation("")).message
    dispatched = [_op("send", "A"), *_ended(0, 1, "A", {"kind": "max-tokens"}, chunk,
                                             _log(3, "tool/call", turn=1, step=1, call_id="c1"))]
    assert "MAXTOK-5" in (_check("MAXTOK", dispatched) or ck.Violation("")).message
    error = _log(2, "error", turn=1, step=1, message="boom")
    assert "MAXTOK-3" in (_check("MAXTOK", [_op("send", "A"), *_ended(0, 1, "A", {"kind": "completed"}, error)])
                          or ck.Violation("")).message
    disposed = [_op("send", "A"), _log(0, "turn/start", turn=1, trigger={"kind": "message"}), _op("dispose", status="running"),
                _log(1, "turn/end", turn=1, reason={"kind": "completed"})]
    assert "DISP-1" in (_check("MAXTOK", disposed) or ck.Violation("")).message
    assert _check("MAXTOK", [_op("send", "A"), *_ended(0, 1, "A", {"kind": "max-tokens"}, chunk)]) is None
    # PY-1: a cancelled driver task disposes the agent where the cancellation lands; a turn another
    # task runs may end as it would before then, not once the agent went disposed
    started = [_op("send", "A"), _log(0, "turn/start", turn=1, trigger={"kind": "message"}),
               _op("cancel_driver", status="running", by="window")]
    before = [*started, _log(1, "turn/end", turn=1, reason={"kind": "completed"}), _status("disposed")]
    assert _check("MAXTOK", before) is None
    after = [*started, _status("disposed"), _log(1, "turn/end", turn=1, reason={"kind": "completed"})]
    found = _check("MAXTOK", after)
    assert found is not None and found.rules == ("DISP-1", "MAXTOK-3", "PY-1"), found
    assert "its driver task was cancelled (PY-1) and the agent went disposed" in found.message


def test_tools_in_order_contained_and_aborted() -> None:
    call = lambda seq, cid: _log(seq, "tool/call", turn=1, step=1, call_id=cid)  # noqa: E731
    result = lambda seq, cid: _log(seq, "tool/result", turn=1, step=1, call_id=cid, is_error=False)  # noqa: E731
    overlapping = [_op("send", "A"), *_ended(0, 1, "A", {"kind": "completed"}, call(2, "c1"), call(3, "c2"),
                                              result(4, "c1"), result(5, "c2"))]
    assert "TOOL-1" in (_check("TOOLS", overlapping) or ck.Violation("")).message
    # LOOP-5: a call has one tool/result (a loop that takes a listener's throw for "the result was
    # no JSON" logs a second, failed one)
    twice = [_op("send", "A"), *_ended(0, 1, "A", {"kind": "error", "message": "x"}, call(2, "c1"), result(3, "c1"),
                                        dict(result(4, "c1"), data={**result(4, "c1")["data"], "is_error": True}))]
    found = _check("TOOLS", twice)
    assert found is not None and found.rules == ("LOOP-5",) and "second tool/result" in found.message, found
    assert found.at == 5
    assert _check("TOOLS", [_op("send", "A"), *_ended(0, 1, "A", {"kind": "completed"}, call(2, "c1"),
                                                      result(3, "c1"))]) is None
    failed = [_op("send", "A"), {"kind": "tool/done", "tool": "t", "call_id": "c1", "outcome": "error", "error": "tool failed"},
              *_ended(0, 1, "A", {"kind": "error", "message": "tool failed"}, call(2, "c1"),
                      _log(3, "error", turn=1, step=1, message="tool failed"))]
    assert "TOOL-3" in (_check("TOOLS", failed) or ck.Violation("")).message
    # TOOL-3: the result of a tool call that failed is an is_error result
    done = {"kind": "tool/done", "tool": "t", "call_id": "c1", "outcome": "error", "error": "tool failed"}
    unflagged = [_op("send", "A"), *_ended(0, 1, "A", {"kind": "completed"}, call(2, "c1"), done,
                                           _log(3, "tool/result", turn=1, step=1, call_id="c1", is_error=False,
                                                content=[{"type": "text", "text": "Error: tool failed"}]))]
    found = _check("TOOLS", unflagged)
    assert found is not None and found.rules == ("TOOL-3",) and "is_error False" in found.message
    go_on = [_log(0, "turn/start", turn=1, trigger={"kind": "message"}), call(1, "c1"), _op("abort", status="running"),
             result(2, "c1"), _log(3, "step/start", turn=1, step=2), _log(4, "turn/end", turn=1, reason={"kind": "completed"})]
    assert "TOOL-5" in (_check("TOOLS", go_on) or ck.Violation("")).message
    # a cancelled driver task is no abort: it stops at its next suspension (PY-1), and a loop whose
    # step runs in a task of its own may open the next step first (session 52's indie68)
    driver = [_log(0, "turn/start", turn=1, trigger={"kind": "message"}), call(1, "c1"),
              _op("cancel_driver", status="running"), result(2, "c1"), _log(3, "step/start", turn=1, step=2),
              _log(4, "turn/end", turn=1, reason={"kind": "disposed"})]
    assert _check("TOOLS", driver) is None
    disposed = [*driver[:2], _op("dispose", status="running"), *driver[3:]]
    assert "TOOL-5" in (_check("TOOLS", disposed) or ck.Violation("")).message
    null_code = [_op("send", "A"), *_ended(0, 1, "A", {"kind": "error", "message": "x", "code": None})]
    assert "ERR-7" in (_check("TOOLS", null_code) or ck.Violation("")).message
    # TOOL-1: in the model's order (the message's tool-call blocks); an aborted step runs a prefix
    blocks = [{"type": "tool-call", "id": cid, "name": "t"} for cid in ("c1", "c2")]
    message = _log(1, "assistant/message", turn=1, step=1, content=blocks)
    in_order = [_op("send", "A"), *_ended(0, 1, "A", {"kind": "completed"}, message, call(2, "c1"), result(3, "c1"),
                                           call(4, "c2"), result(5, "c2"))]
    assert _check("TOOLS", in_order) is None
    reversed_ = [_op("send", "A"), *_ended(0, 1, "A", {"kind": "completed"}, message, call(2, "c2"), result(3, "c2"),
                                            call(4, "c1"), result(5, "c1"))]
    found = _check("TOOLS", reversed_)
    assert found is not None and found.rules == ("TOOL-1",) and "model's order" in found.message
    prefix = [_op("send", "A"), *_ended(0, 1, "A", {"kind": "aborted", "reason": "r"}, message, call(2, "c1"),
                                         result(3, "c1"))]
    assert _check("TOOLS", prefix) is None


def test_steering_reaches_the_model() -> None:
    steer = _log(2, "steering/message", turn=1, content=[{"type": "text", "text": "S"}])
    stranded = [_op("send", "A"), *_ended(0, 1, "A", {"kind": "completed"}, _log(2, "step/start", turn=1, step=1), steer)]
    assert "STEER-2" in (_check("STEERING", stranded) or ck.Violation("")).message
    gate = [_op("send", "A"), _log(0, "turn/start", turn=1, trigger={"kind": "message"}),
            _op("steer", "S", by="l1", status="running", on="agent/step-end"),
            _log(1, "turn/end", turn=1, reason={"kind": "completed"})]
    found = _check("STEERING", gate)
    assert found is not None and found.rules == ("CONT-2",)


def test_problems_the_world_recorded_fail_the_run() -> None:
    found = _check("problems", [{"kind": "problem", "check": "IDLE-2", "message": "never resolved", "rules": ["IDLE-2"]}])
    assert found is not None and found.rules == ("IDLE-2",) and "never resolved" in found.message


def test_every_oracle_names_rule_ids_of_the_catalogue() -> None:
    from conformance.catalogue import RULES_BY_ID

    for oracle in (*ck.ORACLES, *ck.PLAIN_ORACLES):
        assert all(r in RULES_BY_ID for r in oracle.rules), oracle.name


def test_an_input_call_on_a_disposed_agent_must_raise_unless_nobody_awaits_it() -> None:
    # DISP-3: send(), steer() and inject() on a disposed agent raise. An async inject's raise
    # comes when its task runs (op/error); one started once the world had closed (an actor a pct
    # schedule held back that long) is never awaited, so its outcome is unseen (indie60e, session 48)
    closed = {"kind": "world/closed", "agents": {"a": "disposed"}, "logs": {}, "registered": []}
    gone = [_op("dispose"), _status("disposed")]
    late = _op("inject", "W2", by="window", status="disposed")
    found = _check("DISPOSAL", [*gone, late, closed])
    assert found is not None and found.rules == ("DISP-3",)
    assert _check("DISPOSAL", [*gone, closed, late]) is None
    assert _check("DISPOSAL", [*gone, closed, _op("send", "B", by="window", status="disposed")]) is not None


def test_only_dispose_disposes_directly_and_its_waiters_wait_for_the_driver() -> None:
    failed = [_op("send", "A"), _status("running"), _log(0, "turn/start", turn=1, trigger={"kind": "message"}),
              {"kind": "agent/error", "agent": "a", "turn": 1, "step": 0, "error": "boom"}, _status("disposed"),
              _log(1, "turn/end", turn=1, reason={"kind": "disposed"})]
    found = _check("DISPOSAL", failed)
    assert found is not None and "ERR-1" in found.rules and found.at == 4
    via_idle = [_op("send", "A"), _status("running"), _op("dispose", status="running"), _status("idle"), _status("disposed")]
    found = _check("DISPOSAL", via_idle)
    assert found is not None and found.rules[0] == "DISP-5"
    early = [_op("send", "A"), _status("running"), _op("when_idle", waiter="w", status="running"),
             _log(0, "turn/start", turn=1, trigger={"kind": "message"}), _op("dispose", status="running"), _status("disposed"),
             {"kind": "waiter/released", "waiter": "w", "agent": "a", "status": "disposed", "log_len": 1, "precise": True},
             _log(1, "turn/end", turn=1, reason={"kind": "disposed"})]
    found = _check("DISPOSAL", early)
    assert found is not None and found.rules == ("IDLE-4",)
    late = [*early[:6], early[7], {**early[6], "log_len": 2}]
    assert _check("DISPOSAL", late) is None
    # IDLE-4 names a waiter registered while running (or on the disposed agent): one registered
    # while idle, its prompt queued before the driver woke, it leaves open (indie61c, session 49)
    idle = [early[0], _op("when_idle", waiter="w"), early[1], *early[3:]]
    assert _check("DISPOSAL", idle) is None
    # an idle inject's one-shot turn is its caller's, not the driver's: a waiter released while it
    # is open has not been released before the driver exited (indie62a, session 50)
    injected = [{**e, "data": {**e["data"], "trigger": {"kind": "injection"}}} if e.get("type") == "turn/start" else e
                for e in early]
    assert _check("DISPOSAL", injected) is None
    closed = [_op("send", "A"), _status("running"), {"kind": "world/closing"}, _status("disposed")]
    assert _check("DISPOSAL", closed) is None


def test_a_close_during_a_resumes_load_may_dispose_before_the_loaded_log_is_read() -> None:
    # indie49 (session 44): a close() inside the persisted log's load disposes the agent before
    # the world reads the loaded log; its turns were loaded, not started after the disposal (DISP-2)
    early = [{"kind": "op", "by": "world", "op": "resume", "agent": "a", "session": "sess-1"},
             {"kind": "world/closing"}, _status("disposed"), *_loaded(_turn(0, 1, "H"))]
    assert _check("DISPOSAL", early) is None
    started = [*early, _log(3, "turn/start", turn=2, trigger={"kind": "message"})]
    found = _check("DISPOSAL", started)
    assert found is not None and found.rules == ("DISP-2",) and found.at == len(early)


def test_a_cancel_on_an_idle_agent_leaves_it_nothing_to_run() -> None:
    # CANCEL-W1: send(A); cancel() drops A with no agent/status for the dropped turn
    dropped = [_op("send", "A"), _op("cancel"), _status("running"), _status("idle")]
    found = _check("CANCEL-W1", dropped)
    assert found is not None and found.rules == ("CANCEL-W1",) and found.at == 2
    # work given after the cancel runs: send(A); cancel(); send(B)
    replaced = [_op("send", "A"), _op("cancel"), _op("send", "B"), _status("running"), *_turn(0, 1, "B"), _status("idle")]
    assert _check("CANCEL-W1", replaced) is None
    # a cancel while running is another window's
    running = [_op("send", "A"), _status("running"), _op("cancel", status="running"), _status("idle"),
               _status("running")]
    assert _check("CANCEL-W1", running) is None


def test_a_turn_failed_then_disposed_while_open_ends_disposed() -> None:
    # DISP-1: disposing mid-turn ends the turn disposed, also when its error event came first
    failed = [_op("send", "A"), _status("running"), _log(0, "turn/start", turn=1, trigger={"kind": "message"}),
              _log(1, "user/message", content=[{"type": "text", "text": "A"}]),
              _log(2, "error", turn=1, step=1, message="boom"), _op("dispose", status="running"), _status("disposed")]
    found = _check("MAXTOK", [*failed, _log(3, "turn/end", turn=1, reason={"kind": "error", "message": "boom"})])
    assert found is not None and "DISP-1" in found.rules
    assert _check("MAXTOK", [*failed, _log(3, "turn/end", turn=1, reason={"kind": "disposed"})]) is None


def test_the_adapter_receives_the_keys_a_request_listener_added() -> None:
    # LOOP-10: exactly the request the agent/request waterfall returned, a provider option too
    rewrote = {"kind": "waterfall/rewrote", "on": "agent/request", "listener": "routing",
               "fields": {"model": "routed", "system": "S", "metadata": {"route": "b"}}}
    kept = [rewrote, {"kind": "model/request", "model": "routed", "call": 1, "system": "S", "extra": ["metadata"]}]
    assert _check("ROUTED", kept) is None
    lost = [rewrote, {"kind": "model/request", "model": "routed", "call": 1, "system": "S"}]
    found = _check("ROUTED", lost)
    assert found is not None and found.rules == ("LOOP-10",) and "'metadata'" in found.message


def _streamed_step(logged: int, *, done: dict[str, Any] | None = None, between: list[dict[str, Any]] | None = None,
                   usage: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """A one-step turn whose model call streamed three chunks (and ``usage``), ``logged`` of them logged."""
    chunks = [_log(3 + k, "assistant/chunk", turn=1, step=1, chunk={"type": "text-delta", "index": 0, "text": "x"})
              for k in range(logged)]
    seq = 3 + logged
    tail = [_log(seq, "assistant/message", turn=1, step=1, content=[{"type": "text", "text": "x"}])]
    if usage is not None:
        tail.append(_log(seq + 1, "usage", turn=1, step=1, usage=usage))
    tail.append(_log(seq + 2, "step/end", turn=1, step=1))
    return [
        {"kind": "agent/created", "agent": "a", "model": "fake"}, _op("send", "A"),
        _log(0, "turn/start", turn=1, trigger={"kind": "message"}),
        _log(1, "user/message", content=[{"type": "text", "text": "A"}]),
        _log(2, "step/start", turn=1, step=1),
        {"kind": "model/request", "model": "fake", "call": 1},
        *chunks, *(between or []),
        {"kind": "model/done", "model": "fake", "call": 1, "outcome": "stop", "chunks": 3, **(done or {})},
        *tail, _log(seq + 3, "turn/end", turn=1, reason={"kind": "completed"}),
    ]


def _plain(name: str, timeline: list[dict[str, Any]]) -> ck.Violation | None:
    return {c.name: c for c in ck.PLAIN_ORACLES}[name].evaluate(ck.TraceView(timeline))


def test_every_chunk_a_model_streamed_is_logged_and_its_usage() -> None:
    assert _plain("CHUNKS", _streamed_step(3)) is None
    found = _plain("CHUNKS", _streamed_step(2))
    assert found is not None and found.rules == ("LOG-3", "LOOP-5") and "streamed 3 chunk(s)" in found.message
    # a call the loop stopped taking, or a step something interrupted, is another rule's
    assert _plain("CHUNKS", _streamed_step(2, done={"outcome": "closed"})) is None
    assert _plain("CHUNKS", _streamed_step(2, between=[_op("abort", status="running", reason="r")])) is None
    assert _plain("CHUNKS", _streamed_step(2, between=[{"kind": "agent/error", "agent": "a"}])) is None
    # a dispose before the call: a loop may still start it, and the turn ends disposed (indie61b)
    disposed = _streamed_step(0, done={"unread": 3, "chunks": 0})
    assert _plain("CHUNKS", disposed) is not None
    assert _plain("CHUNKS", [*disposed[:5], _op("dispose", status="running"), *disposed[5:]]) is None
    # an abort once the step opened, before its call (a waterfall building the request awaited):
    # the loop may call the model with the signal fired and read nothing (indie61b, session 50)
    assert _plain("CHUNKS", [*disposed[:5], _op("abort", status="running"), *disposed[5:]]) is None
    assert _plain("CHUNKS", [*disposed[:4], _op("abort", status="running"), *disposed[4:]]) is not None
    # ASM-4/LOOP-5: the usage the model reported is the step's usage event
    usage = {"input_tokens": 12, "output_tokens": 3}
    assert _plain("CHUNKS", _streamed_step(3, done={"usage": usage}, usage=usage)) is None
    found = _plain("CHUNKS", _streamed_step(3, done={"usage": usage}))
    assert found is not None and "no usage event" in found.message and "ASM-4" in found.rules
    found = _plain("CHUNKS", _streamed_step(3, done={"usage": usage}, usage={"input_tokens": 1, "output_tokens": 1}))
    assert found is not None and "ASM-4" in found.rules


def test_a_finished_step_logs_the_message_its_step_result_waterfall_returned() -> None:
    # LOOP-5/LOOP-6: a step whose stream finished logs one assistant/message, what
    # agent/step-result returned (a plugin's rewrite, when one fired)
    step = _streamed_step(3)
    assert _check("MESSAGE", step) is None
    message = next(i for i, e in enumerate(step) if e.get("type") == "assistant/message")
    found = _check("MESSAGE", step[:message] + step[message + 1:])
    assert found is not None and found.rules == ("LOOP-5", "LOOP-6", "MAXTOK-5") and "logged no assistant/message" in found.message
    assert _check("MESSAGE", [*step[:message + 1], step[message], *step[message + 1:]]) is not None  # twice
    # not judged: a step something stopped, or one that failed
    for cut in (_op("abort", status="running", reason="r"), {"kind": "agent/error", "agent": "a"}):
        silent = [e for e in _streamed_step(3, between=[cut]) if e.get("type") != "assistant/message"]
        assert _check("MESSAGE", silent) is None

    def rewritten(content: list[Any], outcome: str = "stop") -> list[dict[str, Any]]:
        rewrote = {"kind": "waterfall/rewrote", "on": "agent/step-result", "listener": "plugin", "agent": "a",
                   "turn": 1, "step": 1, "fields": {"content": content}}
        return _streamed_step(3, done={"outcome": outcome}, between=[rewrote])

    said = rewritten([{"type": "text", "text": "x"}])
    assert _check("MESSAGE", said) is None
    found = _check("MESSAGE", rewritten([{"type": "text", "text": "the plugin's"}]))
    assert found is not None and found.rules == ("LOOP-6", "MAXTOK-5") and "not what agent/step-result returned" in found.message
    # MAXTOK-5: a max-tokens step's message is what was returned less its tool calls, and none
    # is logged when nothing remains (a loop deciding from the streamed text logs an empty one)
    call = {"type": "tool-call", "id": "c9", "name": "lookup", "arguments": "{}"}
    assert _check("MESSAGE", rewritten([{"type": "text", "text": "x"}, call], "max-tokens")) is None
    only_call = rewritten([call], "max-tokens")
    found = _check("MESSAGE", only_call)
    assert found is not None and found.rules == ("MAXTOK-5",) and "nothing but tool calls" in found.message
    at = next(i for i, e in enumerate(only_call) if e.get("type") == "assistant/message")
    assert _check("MESSAGE", only_call[:at] + only_call[at + 1:]) is None


def test_chunks_the_stream_had_handed_over_when_the_step_was_aborted_are_logged() -> None:
    def aborted(handed: int, *extra: dict[str, Any]) -> list[dict[str, Any]]:
        tl = _streamed_step(2, done={"outcome": "aborted", "chunks": 3, "signalled": True})
        at = next(i for i, e in enumerate(tl) if e.get("kind") == "model/done")
        stop = [_op("abort", status="running", by="window", reason="r"),
                {"kind": "model/aborted", "model": "fake", "call": 1, "handed": handed}, *extra]
        return [*tl[:at], *stop, *tl[at:]]

    assert _plain("CHUNKS", aborted(2)) is None
    # the third chunk was yielded before the signal fired, and the loop dropped it (indie61e)
    found = _plain("CHUNKS", aborted(3))
    assert found is not None and found.rules == ("LOG-3", "LOOP-5") and "handed the loop 3" in found.message
    # a disposal or a listener's throw cuts the step otherwise: not judged
    assert _plain("CHUNKS", aborted(3, _op("dispose", status="running"))) is None
    assert _plain("CHUNKS", aborted(3, _op("raise", status="running", by="window"))) is None


def test_no_turn_starts_once_the_agent_is_disposed() -> None:
    tl = [_op("send", "A"), _status("running"), *_turn(0, 1, "A"), _op("dispose", status="running"), _status("disposed")]
    assert _check("DISPOSAL", tl) is None
    found = _check("DISPOSAL", [*tl, *_turn(3, 2, "B")])
    assert found is not None and found.rules == ("DISP-2",) and found.at == len(tl)


def test_a_failed_turns_reason_carries_the_code_of_its_error_event() -> None:
    def failed(reason: dict[str, Any]) -> list[dict[str, Any]]:
        return [_op("send", "A"), _log(0, "turn/start", turn=1, trigger={"kind": "message"}),
                _log(1, "user/message", content=[{"type": "text", "text": "A"}]),
                _log(2, "error", turn=1, step=1, message="overloaded", code="OVERLOADED"),
                _log(3, "turn/end", turn=1, reason=reason)]

    assert _check("TOOLS", failed({"kind": "error", "message": "overloaded", "code": "OVERLOADED"})) is None
    found = _check("TOOLS", failed({"kind": "error", "message": "overloaded"}))
    assert found is not None and found.rules == ("ERR-7",) and "'OVERLOADED'" in found.message


def test_a_disposed_turn_ending_aborted_is_named_a_disposal_problem() -> None:
    tl = [_op("send", "A"), _log(0, "turn/start", turn=1, trigger={"kind": "message"}),
          _op("dispose", status="running"), _status("disposed"),
          _log(1, "turn/end", turn=1, reason={"kind": "aborted", "reason": "disposed"})]
    found = _check("MARKER-1", tl)
    assert found is not None and found.rules == ("DISP-1",) and "disposed" in found.message


def test_a_tool_call_logs_the_models_raw_arguments() -> None:
    def step(logged: Any) -> list[dict[str, Any]]:
        block = {"type": "tool-call", "id": "c1", "name": "lookup", "arguments": '{"q": "x"}'}
        return [_op("send", "A"), _log(0, "turn/start", turn=1, trigger={"kind": "message"}),
                _log(1, "step/start", turn=1, step=1), _log(2, "assistant/message", turn=1, step=1, content=[block]),
                _log(3, "tool/call", turn=1, step=1, call_id="c1", name="lookup", arguments=logged)]

    assert _check("TOOLS", step('{"q": "x"}')) is None
    found = _check("TOOLS", step({"q": "x"}))
    assert found is not None and found.rules == ("LOOP-6", "TOOL-2") and "raw string" in found.message


def _note(kind: str, **fields: Any) -> dict[str, Any]:
    return {"kind": kind, "agent": "a", **fields}


def _stepped_turn(*, skip: str | None = None, reason: str = "completed",
                  after_start: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """One turn of one step, every boundary notified after it is logged (but ``skip``)."""
    out = [_op("send", "A"), _status("running"), _log(0, "turn/start", turn=1, trigger={"kind": "message"}),
           _log(1, "user/message", content=[{"type": "text", "text": "A"}]), _note("agent/turn-start", turn=1),
           _log(2, "step/start", turn=1, step=1), _note("agent/step-start", turn=1, step=1), *(after_start or []),
           _log(3, "step/end", turn=1, step=1), _note("agent/step-end", turn=1, step=1),
           _log(4, "turn/end", turn=1, reason={"kind": reason}), _note("agent/turn-end", turn=1), _status("idle")]
    return [e for e in out if e.get("kind") != skip]


def test_agent_turn_end_notifies_the_reason_turn_end_logged() -> None:
    # LOOP-4 / ERR-10: whatever a listener did after turn/end (a throw, a dispose), agent/turn-end
    # says the logged end; judged for any turn, troubled or not
    said = _stepped_turn()
    said[-2] = _note("agent/turn-end", turn=1, reason="completed")
    assert _check("NOTIFIED", said) is None
    said[-2] = _note("agent/turn-end", turn=1, reason="disposed")
    found = _check("NOTIFIED", [*said[:-1], _op("dispose", status="running", by="window", on="session/event"), said[-1]])
    assert found is not None and found.rules == ("LOOP-4", "ERR-4")
    assert "logged turn/end completed but agent/turn-end notified disposed" in found.message


def test_every_boundary_a_turn_logs_is_notified_after_it() -> None:
    assert _check("NOTIFIED", _stepped_turn()) is None
    found = _check("NOTIFIED", _stepped_turn(skip="agent/step-end"))
    assert found is not None and found.rules == ("LOOP-5",) and "agent/step-end was never emitted" in found.message
    found = _check("NOTIFIED", _stepped_turn(skip="agent/turn-start"))
    assert found is not None and found.rules == ("LOOP-4",)
    # CANCEL-STEP: a step a cancel from agent/step-start dropped is closed with its notifications
    cancel = [_op("cancel", status="running", by="window", on="agent/step-start", reason="r")]
    assert _check("NOTIFIED", _stepped_turn(reason="aborted", after_start=cancel)) is None
    found = _check("NOTIFIED", _stepped_turn(reason="aborted", after_start=cancel, skip="agent/step-end"))
    assert found is not None and found.rules == ("CANCEL-STEP", "LOOP-5")
    # not judged: a turn aborted otherwise, one a listener's failure or a disposal touched
    assert _check("NOTIFIED", _stepped_turn(reason="aborted", skip="agent/step-end")) is None
    raised = [_op("raise", status="running", by="window", on="agent/step-start")]
    assert _check("NOTIFIED", _stepped_turn(after_start=raised, skip="agent/turn-end")) is None
    assert _check("NOTIFIED", _stepped_turn(after_start=[_note("agent/error", turn=1, step=1)],
                                            skip="agent/step-end")) is None



def test_a_disposed_turn_is_notified_ended() -> None:
    # DISP-1/LOOP-4: a turn disposed once agent/turn-start was emitted gets its agent/turn-end;
    # the step the disposal closed owes no agent/step-end (not judged)
    disposal = [_op("dispose", status="running", by="window", on="agent/step-start"), _status("disposed")]
    ok = [e for e in _stepped_turn(reason="disposed", after_start=disposal, skip="agent/step-end")
          if e.get("status") != "idle"]
    assert _check("NOTIFIED", ok) is None
    silent = [e for e in ok if e.get("kind") != "agent/turn-end"]
    found = _check("NOTIFIED", silent)
    assert found is not None and found.rules == ("DISP-1", "LOOP-4") and "ended disposed" in found.message
    assert found.at == next(i for i, e in enumerate(silent) if e.get("type") == "turn/end")
    # not judged: disposed before agent/turn-start, or a failure touched the turn
    assert _check("NOTIFIED", [e for e in silent if e.get("kind") != "agent/turn-start"]) is None
    raised = [*disposal, _op("raise", status="disposed", by="window", on="agent/status")]
    assert _check("NOTIFIED", [e for e in _stepped_turn(reason="disposed", after_start=raised)
                               if e.get("kind") != "agent/turn-end"]) is None
    # nor a turn its driver's cancellation cut (PY-1 asks a balanced log, no notification)
    cut = [_op("cancel_driver", status="running", by="window", on="agent/step-start")]
    assert _check("NOTIFIED", [e for e in _stepped_turn(reason="disposed", after_start=cut, skip="agent/step-end")
                               if e.get("kind") not in ("agent/turn-end",) and e.get("status") != "idle"]) is None


def _flush(phase: str) -> dict[str, Any]:
    return {"kind": "flush", "phase": phase, "agent": "a", "listener": "persist"}


def test_each_turn_is_flushed_and_the_driver_awaits_the_flush() -> None:
    turn = [_op("send", "A"), _status("running"), *_turn(0, 1, "A")]
    assert _check("FLUSH", [*turn, _flush("start"), _flush("end"), _status("idle")]) is None
    # no recorder, nothing judged
    assert _check("FLUSH", [*turn, _status("idle")]) is None
    # idle before the flush finished: not awaited
    found = _check("FLUSH", [*turn, _flush("start"), _status("idle"), _flush("end")])
    assert found is not None and found.rules == ("LOOP-4",) and "before the turn's session/flush finished" in found.message
    # the next turn started before this one's flush: none ran for it
    two = [*turn, *_turn(3, 2, "B"), _flush("start"), _flush("end"), _flush("start"), _flush("end"), _status("idle")]
    found = _check("FLUSH", two)
    assert found is not None and "turn 1" in found.message and "before its next turn" in found.message
    # a cancel after the turn's end, or a disposal, leaves the flush unjudged
    assert _check("FLUSH", [*turn, _op("cancel", status="running"), _status("idle"), _flush("start"),
                            _flush("end")]) is None
    # INJ-2: an idle inject's one-shot turn is flushed, before the service closes
    inject = [_op("inject", "C"), _log(0, "turn/start", turn=1, trigger={"kind": "injection"}),
              _log(1, "context/message", content=[{"type": "text", "text": "C"}]),
              _log(2, "turn/end", turn=1, reason={"kind": "completed"})]
    closing = {"kind": "world/closing"}
    assert _check("FLUSH", [*turn, _flush("start"), _flush("end"), _status("idle"),
                            *[dict(e, seq=e.get("seq", 0) + 3) for e in inject], _flush("start"), closing]) is None
    found = _check("FLUSH", [*turn, _flush("start"), _flush("end"), _status("idle"),
                             *[dict(e, seq=e.get("seq", 0) + 3) for e in inject], closing, _flush("start")])
    assert found is not None and found.rules == ("INJ-2",) and "before the service closed" in found.message
    # LOOP-4: turn/end, agent/turn-end, then the flush
    told = {"kind": "agent/turn-end", "agent": "a", "turn": 1}
    assert _check("FLUSH", [*turn, told, _flush("start"), _flush("end"), _status("idle")]) is None
    found = _check("FLUSH", [*turn, _flush("start"), _flush("end"), told, _status("idle")])
    assert found is not None and found.rules == ("LOOP-4",) and "before agent/turn-end was emitted" in found.message


def test_a_tool_receives_its_raw_arguments_parsed_as_tool_2_says() -> None:
    def call(raw: str, received: Any) -> list[dict[str, Any]]:
        return [_op("send", "A"), _log(0, "turn/start", turn=1, trigger={"kind": "message"}),
                _log(1, "step/start", turn=1, step=1),
                _log(2, "tool/call", turn=1, step=1, call_id="c1", name="lookup", arguments=raw),
                {"kind": "tool/start", "tool": "lookup", "call_id": "c1", "index": 1, "arguments": received}]

    assert _plain("ARGS", call('{"q": "x"}', {"q": "x"})) is None
    assert _plain("ARGS", call("", {})) is None
    assert _plain("ARGS", call('{"q": ', '{"q": ')) is None
    assert _plain("ARGS", call("NaN", None)) is None  # parsers disagree: not judged
    deep = "[" * 5000 + "]" * 5000  # past a parser's depth: parsed or raw, not judged (nor a crash)
    assert _plain("ARGS", call(deep, deep)) is None
    for raw, received in (('{"q": ', {}), ("", ""), ('{"q": "x"}', '{"q": "x"}')):
        found = _plain("ARGS", call(raw, received))
        assert found is not None and found.rules == ("TOOL-2",), (raw, received)
    # a later step's call under the same id (a provider numbering calls per response), of another
    # tool, logged before this tool's late start: the start is its own call's
    first = call('["x", 2]', ["x", 2])
    later = _log(3, "tool/call", turn=1, step=2, call_id="c1", name="virtual", arguments='{"q": "v"}')
    assert _plain("ARGS", [*first[:-1], later, first[-1]]) is None
    assert _plain("ARGS", [*first[:-1], later, {**first[-1], "arguments": {"q": "v"}}]) is not None


def test_a_throwing_notification_listener_is_warned_about() -> None:
    closed = {"kind": "world/closed", "agents": {"a": "disposed"}, "logs": {}, "registered": [], "warnings": 1}
    raised = _op("raise", status="running", by="window", on="agent/error")
    warning = {"kind": "warning", "logger": "impl", "message": "agent a turn 1: agent/error listener failed"}
    assert _check("WARNED", [_status("running"), raised, warning, _status("idle"), closed]) is None
    found = _check("WARNED", [_status("running"), raised, _status("idle"), dict(closed, warnings=0)])
    assert found is not None and found.rules == ("ERR-12",) and found.at == 1
    # not judged: a world that recorded no warnings (an older trace), a waterfall's listener (its
    # failure is the step's), or a throw during disposal (swallowed, ERR-10)
    assert _check("WARNED", [_status("running"), raised, _status("idle")]) is None
    waterfall = _op("raise", status="running", by="window", on="agent/request")
    assert _check("WARNED", [_status("running"), waterfall, _status("idle"), closed]) is None
    late = [_op("dispose", status="running"), _status("disposed"), _op("raise", status="disposed", on="agent/status")]
    assert _check("WARNED", [_status("running"), *late, closed]) is None


def test_a_throw_in_the_callers_own_call_is_warned_about_only_when_contained() -> None:
    # agent/queued fires inside send(): a loop may let the throw reach the caller (op/error) or
    # contain it; contained, it is warned about like any other contained failure (ERR-12).
    closed = {"kind": "world/closed", "agents": {"a": "disposed"}, "logs": {}, "registered": [], "warnings": 0}
    send = _op("send", "A")
    raised = _op("raise", by="window", on="agent/queued")
    found = _check("WARNED", [send, raised, _op("when_idle", waiter="done"), closed])
    assert found is not None and found.rules == ("ERR-12",) and found.at == 1 and "agent/queued" in found.message
    reached = {"kind": "op/error", "by": "caller", "op": "send", "agent": "a", "error": "RuntimeError: boom"}
    assert _check("WARNED", [send, raised, reached, _op("when_idle", waiter="done"), closed]) is None
    # another listener of the same notification acting after the throw (0b lets it run) comes
    # between the throw and the send's op/error: still not contained
    other = _op("send", "X", by="logger", on="agent/queued")
    assert _check("WARNED", [send, raised, other, reached, _op("when_idle", waiter="done"), closed]) is None
    warning = {"kind": "warning", "logger": "impl", "message": "agent a turn 0: an agent/queued listener failed"}
    assert _check("WARNED", [send, raised, warning, _op("when_idle", waiter="done"), dict(closed, warnings=1)]) is None


def test_a_waiter_pending_at_an_idle_transition_is_released_at_it() -> None:
    def run(released_after: str) -> list[dict[str, Any]]:
        release = {"kind": "waiter/released", "waiter": "w", "agent": "a", "status": "idle", "precise": True}
        tl = [_op("send", "A"), _op("when_idle", waiter="w", status="running"), _status("running"), _status("idle")]
        if released_after == "idle":
            return [*tl, release, _op("send", "B", by="window", on="agent/status"), _status("running"), _status("idle")]
        return [*tl, _op("send", "B", by="window", on="agent/status"), _status("running"), _status("idle"), release]

    assert _check("IDLE-3", run("idle")) is None
    found = _check("IDLE-3", run("next turn"))
    assert found is not None and found.rules == ("IDLE-3", "IDLE-2") and found.at == 3
    # not judged: an imprecise sample, or a transition after an inject (its flush may hold waiters)
    assert _check("IDLE-3", [dict(e, precise=False) if e["kind"] == "waiter/released" else e
                             for e in run("next turn")]) is None
    assert _check("IDLE-3", [_op("inject", "C"), *run("next turn")]) is None


def test_steering_is_drained_before_a_step_or_after_its_message() -> None:
    def step(*inside: dict[str, Any]) -> list[dict[str, Any]]:
        return [_op("send", "A"), _log(0, "turn/start", turn=1, trigger={"kind": "message"}),
                _log(1, "step/start", turn=1, step=1), *inside, _log(5, "step/end", turn=1, step=1)]

    steering = _log(3, "steering/message", content=[{"type": "text", "text": "S"}])
    message = _log(2, "assistant/message", turn=1, step=1, content=[{"type": "text", "text": "x"}])
    assert _check("STEP-ORDER", step(message, steering)) is None
    found = _check("STEP-ORDER", step(steering, message))
    assert found is not None and found.rules == ("LOOP-5",) and found.at == 3 and "step 1" in found.message


def test_a_steps_usage_comes_after_its_message() -> None:
    def step(*inside: dict[str, Any]) -> list[dict[str, Any]]:
        return [_op("send", "A"), _log(0, "turn/start", turn=1, trigger={"kind": "message"}),
                _log(1, "step/start", turn=1, step=1), *inside, _log(5, "step/end", turn=1, step=1)]

    usage = _log(3, "usage", turn=1, step=1, usage={"input_tokens": 1, "output_tokens": 1})
    message = _log(2, "assistant/message", turn=1, step=1, content=[{"type": "text", "text": "x"}])
    assert _check("STEP-ORDER", step(message, usage)) is None
    assert _check("STEP-ORDER", step(usage)) is None  # a failed step's usage: no message to follow
    found = _check("STEP-ORDER", step(usage, message))
    assert found is not None and found.rules == ("LOOP-5",) and "usage before its assistant/message" in found.message


def test_a_warning_for_a_throw_during_a_turn_names_the_agent_and_the_turn() -> None:
    closed = {"kind": "world/closed", "agents": {"a": "idle"}, "logs": {}, "registered": [], "warnings": 1}
    raised = _op("raise", status="running", by="window", on="agent/step-start")
    opened = [_status("running"), _log(0, "turn/start", turn=2, trigger={"kind": "message"})]

    def warned(message: str) -> list[dict[str, Any]]:
        return [*opened, raised, {"kind": "warning", "logger": "impl", "message": message},
                _log(1, "turn/end", turn=2, reason={"kind": "error", "message": "x"}), closed]

    assert _check("WARNED", warned("agent a turn 2: agent/step-start listener failed: boom")) is None
    found = _check("WARNED", warned("agent a: agent/step-start listener failed: boom"))
    assert found is not None and found.rules == ("ERR-12",) and "turn 2" in found.message
    assert _check("WARNED", warned("agent a turn 12: listener failed")) is not None  # 12 is not turn 2


def test_a_warning_for_a_queued_listeners_throw_during_a_turn_may_name_any_turn() -> None:
    # a send while turn 2 runs queues a prompt for a later turn: its agent/queued listener's
    # failure belongs to no turn yet, so the warning must name the agent, not turn 2 (ERR-12)
    closed = {"kind": "world/closed", "agents": {"a": "idle"}, "logs": {}, "registered": [], "warnings": 1}
    opened = [_status("running"), _log(0, "turn/start", turn=2, trigger={"kind": "message"})]
    raised = _op("raise", status="running", by="window", on="agent/queued")

    def warned(message: str) -> list[dict[str, Any]]:
        return [*opened, _op("send", "B", status="running"), raised,
                {"kind": "warning", "logger": "impl", "message": message},
                _log(1, "turn/end", turn=2, reason={"kind": "completed"}), closed]

    assert _check("WARNED", warned("agent a turn 0: a listener of agent/queued failed: boom")) is None
    assert _check("WARNED", warned("agent a turn 2: agent/queued listener failed")) is None
    found = _check("WARNED", warned("listener of agent/queued failed: boom"))
    assert found is not None and found.rules == ("ERR-12",) and "names the agent" in found.message


def test_a_turns_trigger_carries_the_source_of_what_started_it() -> None:
    user, plugin = {"kind": "user"}, {"kind": "plugin", "plugin": "window"}

    def turn(trigger: dict[str, Any], *firsts: tuple[str, dict[str, Any]]) -> list[dict[str, Any]]:
        return [_op("send", "A"), _log(0, "turn/start", turn=1, trigger=trigger),
                *[_log(k + 1, kind, content=[{"type": "text", "text": "x"}], source=src)
                  for k, (kind, src) in enumerate(firsts)],
                _log(9, "turn/end", turn=1, reason={"kind": "completed"})]

    both = (("user/message", user), ("user/message", plugin))
    assert _check("TRIGGER", turn({"kind": "message", "source": user}, *both)) is None
    found = _check("TRIGGER", turn({"kind": "message", "source": plugin}, *both))
    assert found is not None and found.rules == ("LOOP-2",) and found.at == 1
    injected = ("context/message", plugin)
    assert _check("TRIGGER", turn({"kind": "injection", "source": plugin}, injected)) is None
    found = _check("TRIGGER", turn({"kind": "injection"}, injected))
    assert found is not None and found.rules == ("INJ-2",)
    # a turn/start listener that injected, then threw: the inject that started the turn may never
    # have logged its context/message (the throw consumed it), so the turn is not judged
    cut = turn({"kind": "injection", "source": user}, injected)
    assert _check("TRIGGER", cut) is not None
    cut.insert(3, _op("raise", by="window", status="running", on="session/event"))
    assert _check("TRIGGER", cut) is None


def test_a_turn_with_a_late_failure_is_announced_once() -> None:
    # ERR-9 / ERR-10: a throwing agent/turn-end listener logs nothing but is the turn's failure,
    # so a second throw after it (another listener, a failing flush) is not announced again.
    start, message, end = _turn(0, 1, "A")
    error = {"kind": "agent/error", "agent": "a", "turn": 1, "step": 1, "error": "RuntimeError: plugin failed"}
    tl = [_op("send", "A"), start, message, end, {"kind": "agent/turn-end", "agent": "a", "turn": 1},
          _op("raise", by="plugin", status="running", on="agent/turn-end"), error]
    assert _check("ERR-9", tl) is None
    tl += [_op("raise", by="window", status="running", on="session/flush"), dict(error, error="RuntimeError: flush")]
    found = _check("ERR-9", tl)
    assert found is not None and found.rules == ("ERR-9",) and found.at == len(tl) - 1
    assert "announced 2 times" in found.message


def test_a_failed_turns_late_failure_announced_at_step_zero_is_a_second_announcement() -> None:
    # ERR-9: a turn that failed (its error event, announced) whose flush then fails: the flush's
    # failure is a later one of the same turn (LOOP-4: the flush closes the turn), not announced,
    # at step 0 either (blind round 59b: a loop that reported it as an idle inject's flush is)
    start, message, _end = _turn(0, 1, "A")
    failed = [_log(2, "error", turn=1, step=1, message="boom", code="BOOM"),
              {"kind": "agent/error", "agent": "a", "turn": 1, "step": 1, "error": "Boom: boom", "code": "BOOM"},
              _log(3, "turn/end", turn=1, reason={"kind": "error", "message": "boom", "code": "BOOM"})]
    began = {"kind": "flush", "phase": "start", "agent": "a", "listener": "persist"}
    flush = _op("raise", by="window", status="running", on="session/flush")
    late = {"kind": "agent/error", "agent": "a", "turn": 1, "step": 0, "error": "RuntimeError: flush"}
    tl = [_op("send", "A"), start, message, *failed, began, flush]
    assert _check("ERR-9", tl) is None
    found = _check("ERR-9", [*tl, late])
    assert found is not None and found.rules == ("ERR-9",) and "announced 2 times" in found.message
    # a throwing status listener may be announced at step 0 under any number (ERR-8): not judged
    status = _op("raise", by="window", status="running", on="agent/status")
    assert _check("ERR-9", [*tl, status, late]) is None
    # an idle inject's one-shot turn that failed: INJ-2 reports its failing flush at step 0
    injected = [_log(0, "turn/start", turn=1, trigger={"kind": "injection"}), *failed, began, flush, late]
    assert _check("ERR-9", injected) is None


def test_a_failed_turn_is_announced_at_the_step_its_error_event_names() -> None:
    # ERR-9: agent/error(agent, turn, step, error) names the failure's turn and step, the ones its
    # error event logged; a throwing status listener's step-0 announcement (ERR-8) is another
    failed = _log(2, "error", turn=1, step=1, message="boom")
    start, message, _end = _turn(0, 1, "A")
    said = {"kind": "agent/error", "agent": "a", "turn": 1, "step": 1, "error": "RuntimeError: boom"}
    tl = [_op("send", "A"), start, message, failed, _log(3, "turn/end", turn=1, reason={"kind": "error", "message": "boom"})]
    assert _check("ERR-9", [*tl, said, dict(said, step=0, error="RuntimeError: status")]) is None
    found = _check("ERR-9", [*tl, dict(said, step=0)])
    assert found is not None and found.rules == ("ERR-9",) and "named step(s) 0" in found.message and found.at == 3
    found = _check("ERR-9", tl)
    assert found is not None and "no agent/error announced it" in found.message


def test_a_failure_a_disposal_overtook_before_its_announcement_is_not_judged() -> None:
    # ERR-9 leaves open whether an announcement still pending when a disposal began is made: a
    # dispose from the error event's own listener, before any agent/error, then turn/end{disposed}
    start, message, _end = _turn(0, 1, "A")
    failed = _log(2, "error", turn=1, step=1, message="boom")
    disposed = _log(3, "turn/end", turn=1, reason={"kind": "disposed"})
    tl = [_op("send", "A"), start, message, failed, _op("dispose", by="window", status="running"), disposed]
    assert _check("ERR-9", tl) is None
    # without the disposal in between, the failure is owed its announcement
    found = _check("ERR-9", [_op("send", "A"), start, message, failed, disposed, _op("dispose", status="disposed")])
    assert found is not None and "no agent/error announced it" in found.message


def test_a_turn_end_listeners_throw_during_disposal_is_swallowed() -> None:
    start, message, _end = _turn(0, 1, "A")
    disposed = _log(2, "turn/end", turn=1, reason={"kind": "disposed"})
    error = {"kind": "agent/error", "agent": "a", "turn": 1, "step": 1, "error": "RuntimeError: plugin failed"}
    tl = [_op("send", "A"), start, message, _op("dispose", status="running"), disposed,
          {"kind": "agent/turn-end", "agent": "a", "turn": 1},
          _op("raise", by="plugin", status="running", on="agent/turn-end")]
    assert _check("ERR-10", tl) is None  # swallowed
    found = _check("ERR-10", [*tl, error])
    assert found is not None and found.rules == ("ERR-10", "DISP-4") and found.at == len(tl)
    # A turn that ended completed announces its turn-end listener's throw (not judged here).
    done = [*tl[:3], _log(2, "turn/end", turn=1, reason={"kind": "completed"}), *tl[5:], error]
    assert _check("ERR-10", done) is None
    # What a later throw (a failing flush) causes is not the turn-end listener's.
    later = [*tl, _op("raise", by="window", status="disposed", on="session/flush"), error]
    assert _check("ERR-10", later) is None


def test_only_the_error_event_of_a_throw_made_after_dispose_breaks_disp_5() -> None:
    # DISP-5: a listener's throw made once dispose() was called, while the disposed turn closes,
    # logs no error event. A failure from before the dispose (the model's) may still be logged
    # after it: where the open step's step/end precedes the error event (ERR-2 reads either way),
    # a step/end listener can dispose before the model's failure is logged.
    start, message, _end = _turn(0, 1, "A")
    closing = [_op("send", "A"), start, message, _log(2, "step/start", turn=1, step=1), _log(3, "step/end", turn=1, step=1),
               _op("dispose", status="running", on="session/event"),
               _op("raise", by="window", status="running", on="session/event", message="window listener failed")]
    ended = _log(5, "turn/end", turn=1, reason={"kind": "disposed"})
    model = _log(4, "error", turn=1, step=1, message="overloaded", code="OVERLOADED")
    assert _check("MAXTOK", [*closing, model, ended]) is None
    throw = _log(4, "error", turn=1, step=1, message="ThrownValue: window listener failed")
    found = _check("MAXTOK", [*closing, throw, ended])
    assert found is not None and found.rules == ("DISP-5", "DISP-4")
    # an idle inject's one-shot turn, written whole by inject(): a dispose from its turn/start
    # listener may leave the write as it would be without it, the listener's throw ending it
    # error (ERR-11; indie60c, session 48); with no throw, error is no reason it may end with
    injected = [_op("inject", "C"), _log(0, "turn/start", turn=1, trigger={"kind": "injection"}),
                _op("dispose", status="idle", on="session/event")]
    thrown = _op("raise", by="window", status="disposed", on="session/event", message="window listener failed")
    error = _log(1, "error", turn=1, step=0, message="window listener failed")
    failed = _log(2, "turn/end", turn=1, reason={"kind": "error", "message": "window listener failed"})
    assert _check("MAXTOK", [*injected, thrown, error, failed]) is None
    unthrown = _check("MAXTOK", [*injected, _log(1, "turn/end", turn=1, reason={"kind": "error", "message": "x"})])
    assert unthrown is not None and unthrown.rules[0] == "DISP-1"


def _queued(text: str, *, steering: bool = False, source: str = "user") -> dict[str, Any]:
    return {"kind": "agent/queued", "agent": "a", "text": text, "steering": steering, "source": source}


def test_send_and_steer_are_queued_with_their_source_and_steering_flag() -> None:
    plugin = {"kind": "plugin", "plugin": "window"}
    sound = [_op("send", "A"), _queued("A"), _status("running"),
             _op("steer", "S", status="running", source=plugin), _queued("S", steering=True, source="plugin"),
             {"kind": "agent/steering", "agent": "a", "turn": 1, "text": "S", "source": "plugin"},
             _op("steer", "T", status="idle"), _queued("T")]
    assert _check("QUEUED", sound) is None
    # STEER-1: a steer of an agent that is not running is a send
    found = _check("QUEUED", [*sound[:-1], _queued("T", steering=True)])
    assert found is not None and found.rules == ("STEER-1",) and found.at == len(sound) - 1
    # LOOP-9: the resolved source, and agent/steering's
    found = _check("QUEUED", [*sound[:4], _queued("S", steering=True, source="user"), *sound[5:]])
    assert found is not None and found.rules == ("LOOP-9",) and "source 'user', not 'plugin'" in found.message
    found = _check("QUEUED", [*sound[:5], dict(sound[5], source="user"), *sound[6:]])
    assert found is not None and "agent/steering" in found.message
    # 0a: agent/steering names the turn it is drained into (the open one)
    opened = _log(0, "turn/start", turn=2, trigger={"kind": "message"})
    assert _check("QUEUED", [*sound[:5], opened, dict(sound[5], turn=2), *sound[6:]]) is None
    found = _check("QUEUED", [*sound[:5], opened, sound[5], *sound[6:]])
    assert found is not None and "names turn 1 while turn 2 is open" in found.message
    # no agent/queued at all
    found = _check("QUEUED", [_op("send", "A"), _status("running")])
    assert found is not None and "emitted no agent/queued" in found.message and found.at == 0
    # a refused send (a disposed agent) is owed nothing
    assert _check("QUEUED", [_op("send", "A", status="disposed"),
                             {"kind": "op/error", "by": "caller", "op": "send", "agent": "a", "error": "E"}]) is None


def test_a_live_agents_send_or_steer_does_not_raise() -> None:
    # LOOP-9 / DISP-3: send() and steer() queue; only a disposed agent's raise (a loop whose
    # every send raised passed the hunt: nothing was queued, so nothing was owed)
    def refused(op: str) -> dict[str, Any]:
        return {"kind": "op/error", "by": "caller", "op": op, "agent": "a", "error": "RuntimeError: no"}

    found = _check("QUEUED", [_op("send", "A"), refused("send")])
    assert found is not None and found.rules == ("LOOP-9",) and found.at == 0
    assert "send('A') of a live agent (idle) raised RuntimeError: no" in found.message
    found = _check("QUEUED", [_status("running"), _op("steer", "S", status="running"), refused("steer")])
    assert found is not None and found.at == 1
    # not judged: a disposal or a close under way, or a source that cannot be logged (ERR-8)
    assert _check("QUEUED", [_op("dispose"), _op("send", "A"), refused("send")]) is None
    assert _check("QUEUED", [{"kind": "world/closing"}, _op("send", "A"), refused("send")]) is None
    assert _check("QUEUED", [_op("send", "A", bad_source=True), refused("send")]) is None
    # a tripwire raised inside the call: that is ESCAPE's finding (PY-3)
    import simulator

    escape = {"kind": simulator.ESCAPE, "message": "time.sleep() blocks the event loop"}
    assert _check("QUEUED", [_op("send", "A"), escape, refused("send")]) is None
    # another kind of call that raised is not this check's
    assert _check("QUEUED", [_op("inject", "C"), refused("inject")]) is None


def test_a_late_failure_of_a_turn_that_had_not_failed_is_announced() -> None:
    # ERR-6 / ERR-10: a failing flush or a throwing agent/turn-end listener after a turn that
    # ended well is announced through agent/error, before the driver's next turn.
    start, message, end = _turn(0, 1, "A")
    began = {"kind": "flush", "phase": "start", "agent": "a", "listener": "persist"}
    flush = _op("raise", by="window", status="running", on="session/flush")
    error = {"kind": "agent/error", "agent": "a", "turn": 1, "step": 0, "error": "RuntimeError: flush"}
    tl = [_op("send", "A"), start, message, end, began, flush]
    found = _check("ANNOUNCED", tl)
    assert found is not None and found.rules == ("ERR-6",) and found.at == 5
    assert _check("ANNOUNCED", [*tl, error]) is None
    # too late: the driver's next turn started first
    nxt = _log(3, "turn/start", turn=2, trigger={"kind": "message"})
    assert _check("ANNOUNCED", [*tl, nxt, error]) is not None
    ending = _op("raise", by="plugin", status="running", on="agent/turn-end")
    found = _check("ANNOUNCED", [*tl[:4], {"kind": "agent/turn-end", "agent": "a", "turn": 1}, ending])
    assert found is not None and found.rules == ("ERR-10",)
    # a flush listener that wrote an idle inject's one-shot turn before it threw: the failure is
    # the flushed turn's, not the one-shot turn's
    failed = [*tl[:3], _log(2, "turn/end", turn=1, reason={"kind": "error"}), began,
              _log(3, "turn/start", turn=2, trigger={"kind": "injection"}), _log(4, "turn/end", turn=2,
                                                                                reason={"kind": "completed"}), flush]
    assert _check("ANNOUNCED", failed) is None
    # ... and whose synchronous inject started that one-shot turn's flush before the throw
    # (indie81, eager tasks): the listener was called by the first flush, the failure is its turn's
    called = {"kind": "listener", "name": "window", "on": "session/flush", "agent": "a"}
    failed = [*failed[:5], called, *failed[5:7], began, flush]
    assert _check("ANNOUNCED", failed) is None
    # the same order after a turn that ended well: that turn's failure, owed by its next turn
    found = _check("ANNOUNCED", [*tl[:5], called, *failed[6:]])
    assert found is not None and found.rules == ("ERR-6",) and "turn 1 ended completed" in found.message
    # no flush recorder: which turn a flush's throw belongs to cannot be told, so it is not judged
    assert _check("ANNOUNCED", [*tl[:4], flush]) is None
    # not judged: a turn that failed already (ERR-9), or a disposal under way (ERR-10 swallows)
    failed = [*tl[:3], _log(2, "turn/end", turn=1, reason={"kind": "error"}), began, flush]
    assert _check("ANNOUNCED", failed) is None
    assert _check("ANNOUNCED", [*tl[:4], _op("dispose", status="running"), _status("disposed"), began,
                                flush]) is None
    # an idle inject's one-shot turn: its failing flush is announced by the world's close (INJ-2)
    one = [_log(0, "turn/start", turn=1, trigger={"kind": "injection"}), _log(1, "context/message", content="C"),
           _log(2, "turn/end", turn=1, reason={"kind": "completed"}), began, flush]
    found = _check("ANNOUNCED", [*one, {"kind": "world/closing"}, _status("disposed")])
    assert found is not None and found.rules == ("INJ-2",)
    assert _check("ANNOUNCED", [*one, nxt, error, {"kind": "world/closing"}]) is None


def test_a_flush_failure_that_may_be_a_pending_inject_flushs_is_owed_by_the_close() -> None:
    # Flush listeners run concurrently (0a) and an idle inject's flush may be left scheduled
    # (INJ-4): a listener of it may act after the next driver turn's flush started, even after a
    # when_idle() was released (nothing says a good inject's flush holds it). Announced naming
    # the one-shot turn, by the world's close, it is that turn's failure; announced naming the
    # driver turn, it is owed before the driver's next turn.
    one = [_log(0, "turn/start", turn=1, trigger={"kind": "injection"}), _log(1, "context/message", content="C"),
           _log(2, "turn/end", turn=1, reason={"kind": "completed"})]
    began = {"kind": "flush", "phase": "start", "agent": "a", "listener": "persist"}
    released = {"kind": "waiter/released", "waiter": "w", "agent": "a", "status": "idle"}
    driver = [_op("send", "A"), *_turn(3, 2, "A"), began, released]
    flush = _op("raise", by="window", status="idle", on="session/flush")
    nxt = _log(6, "turn/start", turn=3, trigger={"kind": "message"})
    closing = {"kind": "world/closing"}

    def error(turn: int) -> dict[str, Any]:
        return {"kind": "agent/error", "agent": "a", "turn": turn, "step": 0, "error": "RuntimeError: flush"}

    assert _check("ANNOUNCED", [*one, *driver, flush, nxt, error(1), closing]) is None
    found = _check("ANNOUNCED", [*one, *driver, flush, nxt, error(2), closing])
    assert found is not None and found.rules == ("ERR-6",)
    assert _check("ANNOUNCED", [*one, *driver, flush, nxt, closing, error(1)]) is not None  # after the close
    assert _check("ANNOUNCED", [*one, *driver, flush, nxt, closing]) is not None
    # no inject turn before it: the driver turn's deadline alone
    assert _check("ANNOUNCED", [*driver, flush, nxt, error(1), closing]) is not None
    # a one-shot turn that failed (an inject of content the log refused) has its flush too: a
    # failure announced naming it is that flush's (a pct run of examples/spec_loop, session 46)
    failed = [*one[:2], _log(2, "error", turn=1, step=0, message="not JSON"),
              _log(3, "turn/end", turn=1, reason={"kind": "error", "message": "not JSON"})]
    assert _check("ANNOUNCED", [*failed, *driver, flush, nxt, error(1), closing]) is None
    # ... and announced by no one: the first failure of that turn won (ERR-9; a polling variant
    # of spec_loop, session 51, whose bad inject's flush started after a later inject's)
    assert _check("ANNOUNCED", [*failed, *driver, flush, nxt, closing]) is None
    later = [_log(6, "turn/start", turn=3, trigger={"kind": "injection"}), _log(7, "context/message", content="D"),
             _log(8, "turn/end", turn=3, reason={"kind": "completed"}), began, flush, closing]
    assert _check("ANNOUNCED", [*failed, *driver, *later]) is None
    found = _check("ANNOUNCED", [*one, *driver, *later])  # no failed one-shot turn: owed by the close
    assert found is not None and found.rules == ("INJ-2",)


def test_creating_an_agent_under_a_live_agents_id_is_rejected() -> None:
    refused = {"kind": "op/error", "by": "window", "op": "create", "agent": "a", "error": "ValueError: taken"}
    assert _check("SVC-2", [_op("create", by="window", status="running"), refused]) is None
    found = _check("SVC-2", [_op("create", by="window", status="running")])
    assert found is not None and found.rules == ("SVC-2",) and found.at == 0
    assert _check("SVC-2", [_op("create", by="window", status="disposed")]) is None  # the id may be free


def test_a_turns_prompts_are_logged_before_agent_turn_start() -> None:
    # LOOP-4: turn/start, the drained user/messages, then agent/turn-start (a fresh bug of the
    # blind check of 2026-12-03: the notification went out before the prompts were logged).
    start, message, end = _turn(0, 1, "A")
    note = {"kind": "agent/turn-start", "agent": "a", "turn": 1}
    assert _check("SHAPE", [start, message, note, end]) is None
    found = _check("SHAPE", [start, note, message, end])
    assert found is not None and found.rules == ("LOOP-4",) and found.at == 2
    assert "before the turn's user/message was logged" in found.message


def test_a_turn_end_listeners_throw_during_disposal_is_not_announced() -> None:
    # ERR-10: "during disposal it is swallowed"; DISP-5: disposal is not a failure
    start, message = _turn(0, 1, "A")[:2]
    end = _log(2, "turn/end", turn=1, reason={"kind": "disposed"})
    ending = _op("raise", by="plugin", status="disposed", on="agent/turn-end")
    error = {"kind": "agent/error", "agent": "a", "turn": 1, "step": 1, "error": "RuntimeError: plugin failed"}
    tl = [_op("send", "A"), start, message, _op("dispose", status="running"), end,
          {"kind": "agent/turn-end", "agent": "a", "turn": 1}, ending]
    assert _check("ANNOUNCED", tl) is None
    found = _check("ANNOUNCED", [*tl, error])
    assert found is not None and found.rules == ("ERR-10", "DISP-4") and found.at == len(tl)
    # a failing flush of the disposed turn too: which throw the announcement is, is not told
    flush = _op("raise", by="window", status="disposed", on="session/flush")
    assert _check("ANNOUNCED", [*tl, flush, error]) is None


def test_a_failed_turn_is_announced_with_its_original_error() -> None:
    # ERR-9: "carrying the original error": the code the error event logged (ERR-7) travels with
    # the announcement (a fresh bug of the blind check of 2026-12-03 announced RuntimeError(str(exc))).
    start, message, end = _turn(0, 1, "A")
    failed = _log(2, "error", turn=1, step=1, message="overloaded", code="OVERLOADED")
    end = _log(3, "turn/end", turn=1, reason={"kind": "error", "message": "overloaded", "code": "OVERLOADED"})
    said = {"kind": "agent/error", "agent": "a", "turn": 1, "step": 1, "error": "LoopError: overloaded",
            "code": "OVERLOADED"}
    tl = [_op("send", "A"), start, message, failed, end, said]
    assert _check("ERR-9", tl) is None
    wrapped = dict(said, error="RuntimeError: overloaded")
    del wrapped["code"]
    found = _check("ERR-9", [*tl[:-1], wrapped])
    assert found is not None and found.rules == ("ERR-9",) and found.at == 5
    assert "code 'OVERLOADED'" in found.message and "code None" in found.message
    # the announced original has a code the error event lost: the log's fault (ERR-7)
    found = _check("ERR-9", [_op("send", "A"), start, message, _log(2, "error", turn=1, step=1, message="overloaded"),
                             end, said])
    assert found is not None and found.rules == ("ERR-7",) and found.at == 3
    # no code logged, none announced: nothing to carry
    plain = [_op("send", "A"), start, message, _log(2, "error", turn=1, step=1, message="boom"), end,
             {"kind": "agent/error", "agent": "a", "turn": 1, "step": 1, "error": "RuntimeError: boom"}]
    assert _check("ERR-9", plain) is None


def test_each_logged_message_carries_the_source_of_the_call_that_gave_it() -> None:
    # 0b / LOOP-9 / INJ-1 / LOG-7 (fresh bugs of the blind check of 2026-12-03 logged the
    # default source for a steer's steering/message and for an inject into an open turn).
    plugin = {"kind": "plugin", "plugin": "window"}
    start = _log(0, "turn/start", turn=1, trigger={"kind": "message", "source": {"kind": "user"}})
    prompt = _log(1, "user/message", content=[{"type": "text", "text": "A"}], source={"kind": "user"})
    steering = _log(2, "steering/message", turn=1, content=[{"type": "text", "text": "W1"}], source=plugin)
    context = _log(3, "context/message", content=[{"type": "text", "text": "W2"}], source=plugin)
    end = _log(4, "turn/end", turn=1, reason={"kind": "completed"})
    ops = [_op("send", "A"), _op("steer", "W1", by="window", status="running", source=plugin),
           _op("inject", "W2", by="window", status="running", source=plugin)]
    assert _check("SOURCES", [*ops, start, prompt, steering, context, end]) is None
    wrong = dict(steering, data={**steering["data"], "source": {"kind": "user"}})
    found = _check("SOURCES", [*ops, start, prompt, wrong, context, end])
    assert found is not None and found.rules == ("LOOP-9", "LOG-7") and found.at == 5
    wrong = dict(context, data={**context["data"], "source": {"kind": "user"}})
    found = _check("SOURCES", [*ops, start, prompt, steering, wrong, end])
    assert found is not None and "INJ-1" in found.rules and "'plugin'" in found.message
    # late steering re-queued as a prompt keeps the steer's source
    requeued = _log(1, "user/message", content=[{"type": "text", "text": "W1"}], source=plugin)
    assert _check("SOURCES", [*ops, start, requeued, end]) is None


def test_flush_listeners_run_concurrently_judged_in_plain_order() -> None:
    # 0a: a flush's listeners run concurrently. The recorder (persist, registered first) holds
    # its flush; a listener whose body runs only once it ended was called after it, in sequence.
    start, message, end = _turn(0, 1, "A")
    s = {"kind": "flush", "phase": "start", "agent": "a", "listener": "persist"}
    e = {"kind": "flush", "phase": "end", "agent": "a", "listener": "persist"}
    window = {"kind": "listener", "name": "window", "on": "session/flush", "agent": "a"}
    tl = [_op("send", "A"), start, message, end, s, window, e, _status("idle")]
    sequential = [_op("send", "A"), start, message, end, s, e, window, _status("idle")]
    flush = {c.name: c for c in ck.ORACLES}["FLUSH"]
    assert flush.evaluate(ck.TraceView(tl, fifo=True)) is None
    found = flush.evaluate(ck.TraceView(sequential, fifo=True))
    assert found is not None and found.rules == ("LOOP-4",) and found.at == 6 and "concurrently" in found.message
    # under a schedule that may fire the recorder's timer first, a body starting late proves nothing
    assert flush.evaluate(ck.TraceView(sequential)) is None
    # a listener of the next turn's flush called before its recorder: the log moved on since the
    # last recorded flush, so it is not that flush's
    later = [_op("send", "A"), start, message, end, s, e, _op("send", "B"), *_turn(3, 2, "B"), window, s, e]
    assert flush.evaluate(ck.TraceView(later, fifo=True)) is None


def _plain_check(name: str, timeline: list[dict[str, Any]]) -> ck.Violation | None:
    found = {c.name: c for c in ck.PLAIN_ORACLES}[name]
    return found.evaluate(ck.TraceView(timeline))


def _data_turn(**changes: dict[str, Any]) -> list[dict[str, Any]]:
    """A turn with a failing tool call (code E_TOOL) and usage, each event's data replaceable."""
    user = {"kind": "user"}
    call = {"type": "tool-call", "id": "c1", "name": "lookup", "arguments": '{"q": "x"}'}
    data = {
        "turn/start": {"turn": 1, "trigger": {"kind": "message", "source": user}},
        "user/message": {"content": [{"type": "text", "text": "A"}], "source": user},
        "step/start": {"turn": 1, "step": 1},
        "assistant/message": {"turn": 1, "step": 1, "content": [call]},
        "usage": {"turn": 1, "step": 1, "usage": {"input_tokens": 3, "output_tokens": 4}},
        "tool/call": {"turn": 1, "step": 1, "call_id": "c1", "name": "lookup", "arguments": '{"q": "x"}'},
        "tool/result": {"turn": 1, "step": 1, "call_id": "c1", "is_error": True,
                        "content": [{"type": "text", "text": "Error: no such page"}],
                        "error": {"name": "ToolError", "code": "E_TOOL"}},
        "step/end": {"turn": 1, "step": 1},
        "turn/end": {"turn": 1, "reason": {"kind": "error", "message": "overloaded", "code": "OVERLOADED"}},
    }
    data.update(changes)
    return [_op("send", "A"), *(_log(i, t, **d) for i, (t, d) in enumerate(data.items()))]


def test_every_event_has_the_tables_keys_and_the_stated_shapes() -> None:
    # Spec 0/0b (a fresh bug of the blind check of 2026-12-03 dropped tool/result.error's name;
    # another logged the parsed arguments): the DATA oracle names the rule that states the field.
    assert _plain_check("DATA", _data_turn()) is None
    cases = {
        "TOOL-3": {"tool/result": {**_data_turn()[7]["data"], "error": {"code": "E_TOOL"}}},
        "TOOL-2": {"tool/call": {**_data_turn()[6]["data"], "arguments": {"q": "x"}}},
        "ERR-7": {"turn/end": {"turn": 1, "reason": {"kind": "error", "message": "m", "code": None}}},
        "LOOP-4": {"turn/start": {"turn": 1, "trigger": {"kind": "message"}}},
        "LOOP-2": {"user/message": {"content": "A", "source": {"kind": "user"}}},
        "ASM-4": {"usage": {"turn": 1, "step": 1, "input_tokens": 3, "output_tokens": 4}},
        "LOOP-6": {"assistant/message": {"turn": 1, "step": 1, "content": [{"type": "tool-call", "id": "c1"}]}},
    }
    for rule, change in cases.items():
        found = _plain_check("DATA", _data_turn(**change))
        assert found is not None and found.rules == (rule,), (rule, found)
        assert "spec 0" in found.message and found.at is not None
        kind = next(iter(change))
        assert f"({kind})" in found.message, found.message


def test_a_model_errors_code_is_carried_into_the_error_event() -> None:
    # FINISH-1 / ERR-7: a step that finished error{message, code} fails its turn with both.
    finish = {"type": "finish", "reason": {"kind": "error", "message": "overloaded", "code": "OVERLOADED"}}

    def turn(error: dict[str, Any]) -> list[dict[str, Any]]:
        return [_op("send", "A"), *_turn(0, 1, "A")[:2], _log(2, "step/start", turn=1, step=1),
                _log(3, "assistant/chunk", turn=1, step=1, chunk=finish), _log(4, "step/end", turn=1, step=1),
                _log(5, "error", turn=1, step=1, **error),
                _log(6, "turn/end", turn=1, reason={"kind": "error", **error})]

    assert _plain_check("ASSEMBLY", turn({"message": "overloaded", "code": "OVERLOADED"})) is None
    found = _plain_check("ASSEMBLY", turn({"message": "overloaded"}))
    assert found is not None and found.rules == ("FINISH-1", "ERR-7") and "carries no code" in found.message
    # another failure first (a listener threw): its message is not the model's, nothing to compare
    assert _plain_check("ASSEMBLY", turn({"message": "a listener failed"})) is None


def test_an_idle_injects_one_shot_turn_is_triggered_by_the_injection() -> None:
    # INJ-2 (a fresh bug of the blind check of 2026-12-03 wrote trigger {kind: message}).
    plugin = {"kind": "plugin", "plugin": "window"}

    def one_shot(kind: str) -> list[dict[str, Any]]:
        return [_op("inject", "W1", by="window", source=plugin),
                _log(0, "turn/start", turn=1, trigger={"kind": kind, "source": plugin}),
                _log(1, "context/message", content=[{"type": "text", "text": "W1"}], source=plugin),
                _log(2, "turn/end", turn=1, reason={"kind": "completed"})]

    assert _check("TRIGGER", one_shot("injection")) is None
    found = _check("TRIGGER", one_shot("message"))
    assert found is not None and found.rules == ("INJ-2",) and found.at == 1


def test_a_deferred_bad_injects_one_shot_turn_is_triggered_by_it() -> None:
    # INJ-2/INJ-4 (session 53's indie71 defers its injects and takes them up in order): a bad
    # inject E and a good inject D are both given while idle; turn 1 is E's one-shot turn (it
    # logs no context of its own; a turn/start listener's inject joins it), its trigger E's
    # source, though the last inject before the turn was D.
    plugin = {"kind": "plugin", "plugin": "window"}

    def deferred(trigger_source: dict[str, Any]) -> list[dict[str, Any]]:
        return [_op("inject", "E", unserialisable=True), _op("inject", "D"),
                _log(0, "turn/start", turn=1, trigger={"kind": "injection", "source": trigger_source}),
                _op("inject", "W1", by="window", source=plugin, status="running"),
                _log(1, "context/message", content=[{"type": "text", "text": "W1"}], source=plugin),
                _log(2, "turn/end", turn=1, reason={"kind": "completed"})]

    assert _check("TRIGGER", deferred({"kind": "user"})) is None
    found = _check("TRIGGER", deferred({"kind": "plugin", "plugin": "other"}))
    assert found is not None and found.rules == ("INJ-2",) and found.at == 2


def test_a_max_tokens_step_left_with_nothing_logs_no_message() -> None:
    # MAXTOK-5: its tool calls are removed, and assistant/message is appended only when content remains.
    call = {"type": "tool-call", "id": "c1", "name": "lookup", "arguments": "{}"}

    def step(*message: dict[str, Any]) -> list[dict[str, Any]]:
        chunks = [{"type": "block-end", "index": 0, "block": call}, {"type": "finish", "reason": {"kind": "max-tokens"}}]
        return [_op("send", "A"), *_turn(0, 1, "A")[:2], _log(2, "step/start", turn=1, step=1),
                *(_log(3 + i, "assistant/chunk", turn=1, step=1, chunk=c) for i, c in enumerate(chunks)),
                *message, _log(6, "step/end", turn=1, step=1), _log(7, "turn/end", turn=1, reason={"kind": "max-tokens"})]

    assert _plain_check("ASSEMBLY", step()) is None
    found = _plain_check("ASSEMBLY", step(_log(5, "assistant/message", turn=1, step=1, content=[])))
    assert found is not None and found.rules == ("MAXTOK-5",) and "empty" in found.message


def test_a_block_that_never_closes_is_its_deltas() -> None:
    # ASM-2 (a fresh bug of round 9 turned an unclosed reasoning block into text): a block with no
    # block-end is kept as its deltas built it, its type from block-start or its first delta;
    # ASM-1: deltas after a block's end change nothing.
    chunks = [{"type": "block-start", "index": 0, "block_type": "text"},
              {"type": "text-delta", "index": 0, "text": "a"},
              {"type": "block-end", "index": 0, "block": {"type": "text", "text": "A"}},
              {"type": "text-delta", "index": 0, "text": " late"},
              {"type": "reasoning-delta", "index": 1, "text": "still"},
              {"type": "reasoning-delta", "index": 1, "text": " going"},
              {"type": "finish", "reason": {"kind": "stop"}}]

    def step(*content: dict[str, Any]) -> list[dict[str, Any]]:
        return [_op("send", "A"), *_turn(0, 1, "A")[:2], _log(2, "step/start", turn=1, step=1),
                *(_log(3 + i, "assistant/chunk", turn=1, step=1, chunk=c) for i, c in enumerate(chunks)),
                _log(10, "assistant/message", turn=1, step=1, content=list(content)),
                _log(11, "step/end", turn=1, step=1), _log(12, "turn/end", turn=1, reason={"kind": "completed"})]

    closed = {"type": "text", "text": "A"}
    assert _plain_check("ASSEMBLY", step(closed, {"type": "reasoning", "text": "still going"})) is None
    # a field of its own on the block built from deltas says nothing else: allowed
    assert _plain_check("ASSEMBLY", step(closed, {"type": "reasoning", "text": "still going", "extra": 1})) is None
    for wrong in ({"type": "text", "text": "still going"}, {"type": "reasoning", "text": "still"}):
        found = _plain_check("ASSEMBLY", step(closed, wrong))
        assert found is not None and "ASM-2" in found.rules and found.at is not None, wrong
    found = _plain_check("ASSEMBLY", step(closed))  # the unclosed block dropped
    assert found is not None and "ASM-2" in found.rules
    found = _plain_check("ASSEMBLY", step({"type": "text", "text": "A late"}, {"type": "reasoning", "text": "still going"}))
    assert found is not None and "ASM-1" in found.rules


def test_a_tool_call_that_never_closes_is_its_deltas() -> None:
    # ASM-2: "a tool-call block can be built from deltas alone": its id and name from the first
    # delta giving them (0b: the name on the first), its arguments the deltas joined; the trace
    # keeps no block_type of a block-start, so the deltas tell the block's kind.
    chunks = [{"type": "block-start", "index": 0},
              {"type": "tool-call-delta", "index": 0, "id": "c2", "name": "lookup", "arguments_delta": '{"q": '},
              {"type": "tool-call-delta", "index": 0, "id": "c2", "arguments_delta": '"y"'},
              {"type": "finish", "reason": {"kind": "tool-calls"}}]

    def step(*content: dict[str, Any]) -> list[dict[str, Any]]:
        return [_op("send", "A"), *_turn(0, 1, "A")[:2], _log(2, "step/start", turn=1, step=1),
                *(_log(3 + i, "assistant/chunk", turn=1, step=1, chunk=c) for i, c in enumerate(chunks)),
                _log(10, "assistant/message", turn=1, step=1, content=list(content)),
                _log(11, "step/end", turn=1, step=1), _log(12, "turn/end", turn=1, reason={"kind": "completed"})]

    built = {"type": "tool-call", "id": "c2", "name": "lookup", "arguments": '{"q": "y"'}
    assert _plain_check("ASSEMBLY", step(built)) is None
    for key, wrong in (("name", ""), ("id", "c3"), ("arguments", '"y"')):
        found = _plain_check("ASSEMBLY", step({**built, key: wrong}))
        assert found is not None and "ASM-2" in found.rules, key
        assert f"block 0 is {({**built, key: wrong})!r}, expected {built!r}" in found.message, found.message
    chunks[1] = {k: v for k, v in chunks[1].items() if k != "name"}  # no name given: nothing to compare with
    assert _plain_check("ASSEMBLY", step({**built, "name": ""})) is None


def test_a_turn_cut_short_by_dispose_is_flushed() -> None:
    # LOOP-4 / DISP-1: a disposed turn keeps the turn's shape, its flush included. That no flush
    # ran is known from the world's close, which says a recorder listened to every flush.
    start, message, _ = _turn(0, 1, "A")
    end = _log(2, "turn/end", turn=1, reason={"kind": "disposed"})
    s = {"kind": "flush", "phase": "start", "agent": "a", "listener": "persist"}
    e = {"kind": "flush", "phase": "end", "agent": "a", "listener": "persist"}
    closed = {"kind": "world/closed", "agents": {"a": "disposed"}, "logs": {"a": 3}, "registered": [],
              "flushes": "recorded"}
    ran = [_op("send", "A"), start, message, _op("dispose", status="running"), _status("disposed"), end, s, e, closed]
    assert _check("FLUSH", ran) is None
    found = _check("FLUSH", [x for x in ran if x.get("kind") != "flush"])
    assert found is not None and found.rules == ("LOOP-4", "DISP-1") and found.at == 5
    # without a recorder (no "flushes" in world/closed) nothing is known
    unknown = [x for x in ran if x.get("kind") != "flush" and x is not closed] + [{**closed, "flushes": None}]
    assert _check("FLUSH", unknown) is None


def test_steering_waiting_when_a_step_opens_is_drained_before_it() -> None:
    # LOOP-5 / STEER-2: steering given once the turn opened (from agent/turn-start) and still
    # waiting at step 1 is logged before its step/start; drained after the step, it is late.
    start, message, end = _turn(0, 1, "A")
    steer = _op("steer", "S", by="window", status="running")
    steering = _log(2, "steering/message", turn=1, content=[{"type": "text", "text": "S"}], source={"kind": "user"})

    def turn(*body: dict[str, Any]) -> list[dict[str, Any]]:
        return [_op("send", "A"), _status("running"), start, message, steer, *body, {**end, "seq": 7}]

    step = [_log(3, "step/start", turn=1, step=1), _log(4, "assistant/message", turn=1, step=1, content=[])]
    assert _check("STEP-ORDER", turn(steering, *step, _log(5, "step/end", turn=1, step=1))) is None
    late = turn(*step, {**steering, "seq": 5}, _log(6, "step/end", turn=1, step=1))
    found = _check("STEP-ORDER", late)
    assert found is not None and found.rules == ("LOOP-5", "STEER-2") and found.at == 5 and "'S'" in found.message
    # a cancel after the steer drops it (CANCEL-4): nothing is owed
    cancelled = [*late[:5], _op("cancel", status="running"), *late[5:]]
    assert _check("STEP-ORDER", cancelled) is None
    # so does a close() (it names no agent: the agent's disposed status stands for it), where a
    # loop opened one more step of the disposed turn (an independent loop, session 51)
    closed = [*late[:5], {"kind": "world/closing", "by": "window"}, _status("disposed"), *late[5:]]
    assert _check("STEP-ORDER", closed) is None


def test_a_driver_still_logging_after_close_returned_is_named() -> None:
    # SVC-7 / IDLE-4 (a fresh bug of the blind check of 2026-12-03: a JavaScript loop whose
    # when_idle() on a disposed agent resolved at once, so its close() returned while the driver
    # was still closing its turn): not LOG-2, whose comparison it would otherwise trip.
    start, message, _ = _turn(0, 1, "A")
    end = _log(2, "turn/end", turn=1, reason={"kind": "disposed"})
    closed = {"kind": "world/closed", "agents": {"a": "disposed"}, "logs": {"a": 2}, "registered": []}
    found = _check("CLOSED", [_op("send", "A"), start, message, {"kind": "world/closing"}, _status("disposed"),
                              closed, end])
    assert found is not None and found.rules == ("SVC-7", "IDLE-4") and found.at == 6 and "turn/end first" in found.message
    assert _check("CLOSED", [_op("send", "A"), start, message, {"kind": "world/closing"}, _status("disposed"), end,
                             {**closed, "logs": {"a": 3}}]) is None


def test_a_verdict_memo_recalls_a_timeline_it_judged_and_judges_anything_else_afresh() -> None:
    from types import SimpleNamespace

    def trace(timeline: list[dict[str, Any]], strategy: str = "random") -> Any:
        return SimpleNamespace(timeline=timeline, strategy=strategy)

    checks = list(ck.ORACLES)
    broken = [_op("send", "A"), _log(0, "turn/start", turn=1), _log(1, "turn/start", turn=2)]
    memo = ck.VerdictMemo()
    first = memo.judge(trace([dict(e) for e in broken]), checks)
    assert "LOG" in first.checks and memo.hits == 0
    again = memo.judge(trace([dict(e) for e in broken]), checks)  # equal, not the same objects
    assert again.checks == first.checks and memo.hits == 1
    assert memo.judge(trace(broken, "fifo"), checks).checks == first.checks and memo.hits == 1  # fifo: its own key
    start, message, end = _turn(0, 1, "A")
    assert memo.judge(trace([_op("send", "A"), start, message, end]), checks).checks != first.checks
    odd = [*broken, {"kind": "op", "op": "send", "by": "caller", "agent": "a", "text": object()}]
    memo.judge(trace(odd), checks), memo.judge(trace(odd), checks)
    assert memo.hits == 1  # not plain JSON: judged each time, never recalled
    try:
        memo.judge(trace(broken), checks[:1])
    except ValueError as exc:
        assert "one set of checks" in str(exc)
    else:
        raise AssertionError("a memo must refuse a second set of checks")


def test_the_adapter_called_is_the_one_the_request_names() -> None:
    # LOOP-10: the fake records the model a request names when it is not its own.
    routed = {"kind": "model/request", "model": "fake-b", "call": 1, "messages": 1}
    assert _check("ROUTED", [routed]) is None
    found = _check("ROUTED", [{**routed, "requested": "fake-routed"}])
    assert found is not None and found.rules == ("LOOP-10",) and "'fake-routed'" in found.message


def test_a_call_a_tools_execute_listener_answered_runs_no_tool_and_logs_the_answer() -> None:
    # 0b: a tools/execute listener that never calls next() short-circuits the chain: no tool of
    # that call starts (a chain run ahead of the listener starts it first), and the call's result
    # is the answer, under the model's call id (TOOL-4); a stop during the call excuses the result.
    from conformance.scenario import events as ev

    answered = {"kind": "waterfall/answered", "on": "tools/execute", "listener": "window", "call_id": "c1", "agent": "a"}
    call = _log(3, "tool/call", turn=1, step=1, call_id="c1", name="lookup", arguments="{}")
    result = _log(4, "tool/result", turn=1, step=1, call_id="c1", content=[ev.ANSWER], is_error=False)
    start = {"kind": "tool/start", "tool": "lookup", "call_id": "c1", "index": 1}
    assert _check("ANSWERED", [call, answered, result]) is None
    ran = _check("ANSWERED", [call, start, answered, result])
    assert ran is not None and ran.rules == ("LOOP-5", "TOOL-4") and "ran though" in ran.message and ran.at == 1
    tool_said = {**result, "data": {**result["data"], "content": [{"type": "text", "text": "found"}]}}
    found = _check("ANSWERED", [call, answered, tool_said])
    assert found is not None and "'found'" in found.message and found.at == 2
    aborted = [call, answered, _op("abort", status="running"), tool_said]
    assert _check("ANSWERED", aborted) is None
    # a plugin serving a tool nobody registered: every call of it reaches the plugin (LOOP-5)
    serves = {"kind": "waterfall/serves", "on": "tools/execute", "listener": "virtual-tool", "tool": "lookup"}
    assert _check("ANSWERED", [serves, call, answered, result]) is None
    unasked = _check("ANSWERED", [serves, call, tool_said])
    assert unasked is not None and unasked.rules == ("LOOP-5", "TOOL-3") and "never answered it" in unasked.message
    assert _check("ANSWERED", [serves, call, _op("cancel", status="running"), tool_said]) is None


def test_a_prompt_whose_turn_start_is_rejected_is_announced_with_step_zero() -> None:
    # ERR-8: a queued prompt whose source cannot be logged fails before turn/start: announced
    # through agent/error with step 0 while no turn is open. Not judged when the send raised,
    # nor when the prompt joined a turn that failed (drained behind another prompt: ERR-9).
    bad = _op("send", "X", bad_source=True, source={"kind": "plugin"})
    closing = {"kind": "world/closing"}
    announced = {"kind": "agent/error", "agent": "a", "turn": 1, "step": 0, "error": "ValueError: not JSON"}
    assert _check("REJECTED", [bad, announced, closing]) is None
    found = _check("REJECTED", [bad, closing])
    assert found is not None and found.rules == ("ERR-8",) and "send('X')" in found.message and found.at == 0
    stepped = _check("REJECTED", [bad, {**announced, "step": 1}, closing])
    assert stepped is not None and "announced with step 1" in stepped.message
    refused = {"kind": "op/error", "by": "caller", "op": "send", "agent": "a", "error": "ValueError: not JSON"}
    assert _check("REJECTED", [bad, refused, closing]) is None
    start, message, end = _turn(0, 1, "W1")
    failed = {**end, "data": {"turn": 1, "reason": {"kind": "error", "message": "not JSON"}}}
    assert _check("REJECTED", [bad, start, message, failed, closing]) is None
    assert _check("REJECTED", [bad, start, message, end, closing]) is not None  # a turn that went on
    # the turn it joined was disposed as it failed (a close() begun before the send landed
    # then): disposal outranks the failure, whose announcement is ERR-9's (indie60d, session 48)
    disposed = {**end, "data": {"turn": 1, "reason": {"kind": "disposed"}}}
    assert _check("REJECTED", [bad, start, message, disposed, closing]) is None
    assert _check("REJECTED", [bad, _op("cancel"), closing]) is None
    # queued once the driver had woken for a turn that then went on: the next drain may reject it
    woke = [_op("send", "W1"), _status("running"), {**bad, "status": "running"}, start, message, end]
    assert _check("REJECTED", [*woke, {**announced, "turn": 2}, closing]) is None
    assert _check("REJECTED", [*woke, closing]) is not None


def test_an_inject_raising_is_judged_only_when_no_turn_was_open() -> None:
    # INJ-2 says an inject() while no turn is open never raises into the caller; into an open turn
    # (INJ-1) the contract says nothing of a listener's throw reaching the caller (an independent
    # loop's dispute, 2026-12-03): not judged there. Open or not is read from the log (INJ-1).
    error = {"kind": "op/error", "op": "inject", "by": "window", "agent": "a", "error": "RuntimeError: listener failed"}
    idle = [*_turn(0, 1, "A"), _op("inject", "W1", by="window"), error]
    found = _check("INJ-2", idle)
    assert found is not None and found.rules == ("INJ-2",) and "RuntimeError: listener failed" in found.message
    start, message, end = _turn(0, 1, "A")
    open_turn = [start, message, _op("inject", "W1", by="window"), _log(2, "context/message", content=[]), error, end]
    assert _check("INJ-2", open_turn) is None
    # paired with its own call: an idle inject that went fine, then one into an open turn that raised
    one_shot = [_op("inject", "W1", by="window"), _log(3, "turn/start", turn=2, trigger={"kind": "injection"}),
                _log(4, "context/message", content=[]), _log(5, "turn/end", turn=2, reason={"kind": "completed"})]
    later = [_log(6, "turn/start", turn=3, trigger={"kind": "message"}), _op("inject", "W2", by="window"), error,
             _log(7, "turn/end", turn=3, reason={"kind": "completed"})]
    assert _check("INJ-2", [*_turn(0, 1, "A"), *one_shot, *later]) is None
    # a turn another prompt opened before the async inject's body ran: INJ-1's case
    raced = [*_turn(0, 1, "A"), _op("inject", "W1", by="window"), _log(3, "turn/start", turn=2, trigger={"kind": "message"}), error]
    assert _check("INJ-2", raced) is None
    # a listener's throw (not a flush's) meanwhile: INJ-2 says the turn stays balanced, no more
    thrown = {"kind": "op", "op": "raise", "by": "window", "agent": "a", "on": "session/event"}
    assert _check("INJ-2", [*idle[:-1], thrown, error]) is None
    assert _check("INJ-2", [*idle[:-1], dict(thrown, on="session/flush"), error]) is not None
    # disposed before an async inject's body ran: the error it raises is DISP-3's, whatever its
    # class is called (indie60e, session 48: RuntimeError: agent 'a' is disposed)
    disposed = {"kind": "op/error", "op": "inject", "by": "window", "agent": "a",
                "error": "RuntimeError: agent 'a' is disposed"}
    gone = [*idle[:-1], _op("dispose", by="window"), _status("disposed"), disposed]
    assert _check("INJ-2", gone) is None
    assert _check("INJ-2", [*idle[:-1], disposed]) is not None  # not disposed: a raise INJ-2 forbids


def _two_tool_turn(order: list[str]) -> list[dict[str, Any]]:
    """A turn whose step's message has calls c1 and c2; ``order`` places the fake tools' starts
    and ends (``s1``, ``d1``, ...) and the calls' ``tool/call`` logs (``l1``, ``l2``) and results."""
    calls = [{"type": "tool-call", "id": f"c{i}", "name": "lookup", "arguments": "{}"} for i in (1, 2)]
    head = [_op("send", "A"), _log(0, "turn/start", turn=1, trigger={"kind": "message"}),
            _log(1, "user/message", content=[{"type": "text", "text": "A"}]), _log(2, "step/start", turn=1, step=1),
            _log(3, "assistant/message", turn=1, step=1, content=calls)]
    seq = [4]

    def item(code: str) -> dict[str, Any]:
        n = code[1]
        if code[0] == "l":
            seq[0] += 1
            return _log(seq[0], "tool/call", turn=1, step=1, call_id=f"c{n}", name="lookup", arguments="{}")
        if code[0] == "r":
            seq[0] += 1
            return _log(seq[0], "tool/result", turn=1, step=1, call_id=f"c{n}", content=[], is_error=False)
        kind = "tool/start" if code[0] == "s" else "tool/done"
        return {"kind": kind, "tool": "lookup", "call_id": f"c{n}", **({"outcome": "ok"} if kind == "tool/done" else {})}

    return [*head, *(item(c) for c in order), _log(99, "step/end", turn=1, step=1),
            _log(100, "turn/end", turn=1, reason={"kind": "completed"})]


def test_tools_run_after_their_call_is_logged_and_one_at_a_time() -> None:
    # LOOP-5 / TOOL-1 by the fake tools' own starts and ends
    assert _check("TOOLS", _two_tool_turn(["l1", "s1", "d1", "r1", "l2", "s2", "d2", "r2"])) is None
    early = _check("TOOLS", _two_tool_turn(["l1", "s1", "s2", "d1", "d2", "r1", "l2", "r2"]))
    assert early is not None and early.rules == ("LOOP-5", "TOOL-1") and "before its tool/call was logged" in early.message
    overlap = _check("TOOLS", _two_tool_turn(["l1", "s1", "l2", "s2", "d1", "d2", "r1", "r2"]))
    assert overlap is not None and "started while c1 was still running" in overlap.message
    # an abort between: c1 may be left behind (TOOL-5), not judged
    left = _two_tool_turn(["l1", "s1", "r1", "l2", "s2", "d2", "r2"])
    left.insert(left.index(next(e for e in left if e.get("kind") == "log" and e["type"] == "tool/call"
                                and e["data"]["call_id"] == "c2")), _op("abort", status="running", reason="r"))
    assert _check("TOOLS", left) is None


def test_a_step_stopped_inside_step_result_logs_only_what_the_waterfall_returned() -> None:
    # UNRETURNED (LOOP-6): the stop came inside the waterfall; a message logged before the acting
    # listener returned is not what the waterfall returned; one logged after it is (a loop that
    # awaits the waterfall may log it), and so is none
    head = [_op("send", "A"), _status("running"), _log(0, "turn/start", turn=1, trigger={"kind": "message"}),
            _log(1, "user/message", content=[{"type": "text", "text": "A"}]), _log(2, "step/start", turn=1, step=1),
            _op("abort", by="window", status="running", on="agent/step-result", reason="r")]
    message = _log(3, "assistant/message", turn=1, step=1, content=[{"type": "text", "text": "hi"}])
    returned = {"kind": "waterfall/returned", "on": "agent/step-result", "listener": "window"}
    tail = [_log(4, "step/end", turn=1, step=1), _log(5, "turn/end", turn=1, reason={"kind": "aborted", "reason": "r"})]
    found = _check("UNRETURNED", [*head, message, returned, *tail])
    assert found is not None and found.rules == ("LOOP-6", "ABORT-1") and "before the waterfall returned" in found.message
    assert _check("UNRETURNED", [*head, message, *tail]) is not None  # it never returned
    assert _check("UNRETURNED", [*head, returned, message, *tail]) is None
    assert _check("UNRETURNED", [*head, returned, *tail]) is None
    # the acting listener fired in its own waterfall: judged; in agent b's (it cancelled a from
    # there), a's waterfall was never held, and a's message is what it returned (session 52's
    # indie67, a two-agents window whose listener raised after the cancel: no returned marker)
    fired = {"kind": "listener", "name": "window", "on": "agent/step-result"}
    own = [*head[:-1], dict(fired, agent="a"), head[-1]]
    assert _check("UNRETURNED", [*own, message, *tail]) is not None
    other = [*head[:-1], dict(fired, agent="b"), head[-1]]
    assert _check("UNRETURNED", [*other, message, *tail]) is None


def test_no_further_tool_of_the_step_runs_after_a_stop_during_one() -> None:
    # TOOL-5: an abort during c1 ends the step: c2's tool never starts, not even after the turn
    # ended (over the wire a tool starts when its request arrives)
    during = _two_tool_turn(["l1", "s1", "d1", "r1", "l2", "s2", "d2", "r2"])
    during.insert(during.index(next(e for e in during if e.get("kind") == "tool/done")),
                  _op("abort", status="running", reason="r"))
    found = _check("TOOLS", during)
    assert found is not None and found.rules == ("TOOL-5",) and "c2 ran after a stop during tool call c1" in found.message
    late = _two_tool_turn(["l1", "s1", "d1", "r1", "l2", "r2"])
    late.insert(late.index(next(e for e in late if e.get("kind") == "tool/done")), _op("cancel", status="running"))
    late[-1]["data"]["reason"] = {"kind": "aborted", "reason": "cancelled"}
    late += [{"kind": "tool/start", "tool": "lookup", "call_id": "c2"}]
    assert (_check("TOOLS", late) or ck.Violation("")).rules == ("TOOL-5",)
    # c2 logged (its result an error, say) but its tool never started: nothing ran
    assert _check("TOOLS", late[:-1]) is None


def test_a_cancelled_driver_stops_the_step_once_it_wakes_to_the_cancellation() -> None:
    # PY-1: a cancelled driver task stops at its next suspension. A loop running the step as a
    # task of its own (indie62b) goes on with it until the driver wakes and disposes the agent: a
    # tool started before that disposal ran before the stop landed; one started after it did not.
    def turn(disposed_before_c2: bool) -> list[dict[str, Any]]:
        events = _two_tool_turn(["l1", "s1", "d1", "r1", "l2", "s2", "d2", "r2"])
        done = events.index(next(e for e in events if e.get("kind") == "tool/done"))
        events.insert(done, _op("cancel_driver", status="running"))
        start2 = events.index(next(e for e in events if e.get("kind") == "tool/start" and e["call_id"] == "c2"))
        events.insert(start2 + (0 if disposed_before_c2 else 1), _status("disposed"))
        events[-1]["data"]["reason"] = {"kind": "disposed"}
        return events

    assert _check("TOOLS", turn(disposed_before_c2=False)) is None
    found = _check("TOOLS", turn(disposed_before_c2=True))
    assert found is not None and found.rules == ("TOOL-5",) and "c2 ran after a stop during tool call c1" in found.message


def test_a_reconfigure_binds_the_steps_opened_after_it() -> None:
    created = {"kind": "agent/created", "agent": "a", "model": "fake", "sections": ["Old."], "tools": ["lookup"]}
    change = {"kind": "op", "by": "window", "op": "reconfigure", "sections": ["New."], "tools": ["lookup", "more"]}

    def request(call: int, system: str, tools: list[str]) -> dict[str, Any]:
        return {"kind": "model/request", "model": "fake", "call": call, "messages": 1, "history": "h",
                "system": system, "tools": tools}

    step1 = [_log(0, "turn/start", turn=1, trigger={"kind": "message"}), _log(1, "step/start", turn=1, step=1)]
    step2 = [_log(2, "step/end", turn=1, step=1), _log(3, "step/start", turn=1, step=2)]
    # made while step 1 was open: its request may carry either configuration
    for old_or_new in (("Old.", ["lookup"]), ("New.", ["lookup", "more"])):
        assert _plain("REQUEST", [created, *step1, change, request(1, *old_or_new)]) is None
    # step 2 opened after it: only the new one
    assert _plain("REQUEST", [created, *step1, change, request(1, "Old.", ["lookup"]), *step2,
                              request(2, "New.", ["lookup", "more"])]) is None
    found = _plain("REQUEST", [created, *step1, change, request(1, "Old.", ["lookup"]), *step2,
                               request(2, "Old.", ["lookup"])])
    assert found is not None and found.rules == ("SVC-5",) and "#2" in found.message, found
    found = _plain("REQUEST", [created, *step1, change, request(1, "Old.", ["lookup"]), *step2,
                               request(2, "New.", ["lookup"])])
    assert found is not None and "tools" in found.message, found


def test_a_stream_that_finished_successfully_fails_no_turn() -> None:
    def run(outcome: str, *extra: dict[str, Any]) -> ck.Violation | None:
        created = {"kind": "agent/created", "agent": "a", "model": "fake"}
        return _plain("FINISHED", [
            created, _log(0, "turn/start", turn=1, trigger={"kind": "message"}), _log(1, "step/start", turn=1, step=1),
            {"kind": "model/request", "model": "fake", "call": 1, "messages": 1, "history": "h"},
            {"kind": "model/done", "model": "fake", "call": 1, "outcome": outcome}, *extra,
            _log(2, "error", turn=1, step=1, message="boom"), _log(3, "step/end", turn=1, step=1),
            _log(4, "turn/end", turn=1, reason={"kind": "error", "message": "boom"})])

    found = run("content-filter")
    assert found is not None and found.rules == ("FINISH-1",) and "'content-filter'" in found.message, found
    assert run("stop") is not None
    for failing in ("error", "aborted", "raised", "exhausted"):
        assert run(failing) is None, failing  # the model's own failure
    assert run("stop", _op("raise", by="window", status="running")) is None  # a listener threw in the turn


def test_a_step_whose_model_reported_no_usage_logs_none() -> None:
    # LOOP-5 "usage appended when the model reported it": a usage event in a step whose stream had
    # no usage chunk is another step's, leaked (an assembler reused across steps).
    stray = {"input_tokens": 1, "output_tokens": 2}
    found = _plain("CHUNKS", _streamed_step(3, usage=stray))
    assert found is not None and found.rules == ("LOOP-5", "ASM-4") and "reported no usage" in found.message, found
    assert _plain("CHUNKS", _streamed_step(3, usage=stray, done={"usage": stray})) is None


def test_a_flush_a_window_listener_raised_in_is_still_awaited() -> None:
    # 0a / ERR-6: a flush listener that raised fails the flush, not the await: the other
    # listeners (here the recorder) still finish before the agent goes idle
    turn = [_op("send", "A"), _status("running"), *_turn(0, 1, "A")]
    raised = _op("raise", by="window", status="running", on="session/flush")
    error = {"kind": "agent/error", "agent": "a", "turn": 1, "step": 0}
    awaited = [*turn, _flush("start"), raised, _flush("end"), error, _status("idle")]
    assert _check("FLUSH", awaited) is None
    fail_fast = [*turn, _flush("start"), raised, error, _status("idle"), _flush("end")]
    found = _check("FLUSH", fail_fast)
    assert found is not None and found.rules == ("LOOP-4",) and "before the turn's session/flush finished" in found.message
    # a raise elsewhere (a turn/end listener) still excuses the turn, as before
    elsewhere = [*turn, _op("raise", by="window", status="running", on="agent/turn-end"), _flush("start"), error,
                 _status("idle"), _flush("end")]
    assert _check("FLUSH", elsewhere) is None


def _released(waiter: str, *, precise: bool = True) -> dict[str, Any]:
    return {"kind": "waiter/released", "waiter": waiter, "agent": "a", "status": "idle", "log_len": 3, "precise": precise}


def test_a_waiter_taken_while_idle_with_nothing_queued_resolves_at_once() -> None:
    # IDLE-1 (0b: registered when called): released before the agent's next status
    earlier = [_op("send", "A"), _status("running"), *_turn(0, 1, "A"), _status("idle")]
    waiter = _op("when_idle", waiter="w1")
    at_once = [*earlier, waiter, _released("w1"), _op("send", "B"), _status("running"), *_turn(3, 2, "B"),
               _status("idle")]
    assert _check("IDLE-3", at_once) is None
    late = [*earlier, waiter, _op("send", "B"), _status("running"), *_turn(3, 2, "B"), _status("idle"),
            _released("w1")]
    found = _check("IDLE-3", late)
    assert found is not None and found.rules == ("IDLE-1",) and "nothing queued" in found.message
    # queued before the call: it waits for that work (IDLE-2), not judged here
    queued = [*earlier, _op("send", "B"), waiter, _status("running"), *_turn(3, 2, "B"), _status("idle"), _released("w1")]
    assert _check("IDLE-3", queued) is None
    # a release the world could not sample exactly (a coroutine's, seen as its watcher ended) is
    # judged in plain order only: there the watcher runs before what the caller did next
    imprecise = [*late[:-1], _released("w1", precise=False)]
    assert _check("IDLE-3", imprecise) is None
    found = {c.name: c for c in ck.ORACLES}["IDLE-3"].evaluate(ck.TraceView(imprecise, fifo=True))
    assert found is not None and found.rules == ("IDLE-1",)


def test_an_inject_of_content_json_cannot_encode_raises_once_its_one_shot_turn_is_closed() -> None:
    # INJ-4: it raises to the caller, after the one-shot turn's turn/end
    bad = _op("inject", "E", unserialisable=True)
    one_shot = [_log(0, "turn/start", turn=1, trigger={"kind": "injection", "source": {"kind": "user"}}),
                _log(1, "error", turn=1, step=0, message="not JSON"), _log(2, "turn/end", turn=1, reason={"kind": "error",
                                                                                                     "message": "not JSON"})]
    raised = {"kind": "op/error", "by": "caller", "op": "inject", "agent": "a", "error": "TypeError: not JSON"}
    assert _check("INJ-2", [bad, *one_shot, raised]) is None
    found = _check("INJ-2", [bad, *one_shot])
    assert found is not None and found.rules == ("INJ-4",) and "did not raise" in found.message
    found = _check("INJ-2", [bad, raised, *one_shot])
    assert found is not None and found.rules == ("INJ-4",) and "before its one-shot turn was closed" in found.message
    # the world's own close at the end of every run is no close before the answer (it once hid all of this)
    closing = [{"kind": "world/closing"}, {"kind": "world/closed", "agents": {"a": "disposed"}, "logs": {"a": 3}}]
    found = _check("INJ-2", [bad, raised, *one_shot, *closing])
    assert found is not None and "before its one-shot turn was closed" in found.message
    # ... and the flush of that turn has run by the time a waiter taken once it raised resolves
    waiter = [_op("when_idle", waiter="w")]
    released = {"kind": "waiter/released", "waiter": "w", "agent": "a", "status": "idle", "log_len": 3, "precise": True}
    early = [bad, *one_shot, raised, *waiter, _flush("start"), released, _flush("end"), *closing]
    found = _check("INJ-2", early)
    assert found is not None and found.rules == ("INJ-4",) and "before the flush of its one-shot turn" in found.message
    assert _check("INJ-2", [bad, *one_shot, raised, *waiter, _flush("start"), _flush("end"), released, *closing]) is None
    disposed = [bad, *one_shot, raised, *waiter, _op("dispose"), released, _flush("start"), _flush("end"), *closing]
    assert _check("INJ-2", disposed) is None  # a disposal releases waiters (IDLE-4)
    # a listener that threw on the one-shot turn's turn/start failed the turn before the content
    # was appended: whether the inject still raises for it, the spec leaves open
    threw = _op("raise", by="window", status="idle", on="session/event")
    assert _check("INJ-2", [bad, one_shot[0], threw, *one_shot[1:], *closing]) is None


def test_a_bad_injects_flush_is_told_from_the_drivers_by_counting_flushes() -> None:
    # INJ-4, with a synchronous inject (no inject/began: its body ran at the call) made from a
    # turn/end listener of the driver's turn: the driver's flush and the one-shot turn's both
    # begin after the one-shot turn's end, and flushes name no turn. The driver awaits its own
    # flush (LOOP-4), so when a waiter taken after the one-shot turn resolves while one of them
    # still runs, the bad inject's flush had not run (blind round E's v05, session 56).
    def flush(phase: str, n: int) -> dict[str, Any]:
        return dict(_flush(phase), n=n)

    driver = [_op("send", "A"), _status("running"), *_turn(0, 1, "A")]
    bad = _op("inject", "E", by="window", status="running", unserialisable=True)
    one_shot = [_log(3, "turn/start", turn=2, trigger={"kind": "injection", "source": {"kind": "user"}}),
                _log(4, "turn/end", turn=2, reason={"kind": "completed"})]
    raised = {"kind": "op/error", "by": "window", "op": "inject", "agent": "a", "error": "TypeError: not JSON"}
    waiter = _op("when_idle", by="window", status="running", waiter="w")
    released = {"kind": "waiter/released", "waiter": "w", "agent": "a", "status": "idle", "log_len": 5, "precise": True}
    closing = [{"kind": "world/closing"}, {"kind": "world/closed", "agents": {"a": "disposed"}, "logs": {"a": 5}}]
    head = [*driver, bad, *one_shot, raised, waiter, flush("start", 1), flush("start", 2)]
    early = [*head, flush("end", 1), _status("idle"), released, flush("end", 2), *closing]
    found = _check("INJ-2", early)
    assert found is not None and found.rules == ("INJ-4",) and "before the flush of its one-shot turn 2" in found.message
    assert _check("INJ-2", [*head, flush("end", 1), flush("end", 2), _status("idle"), released, *closing]) is None
    # another inject's one-shot turn still owed a flush then: the one still running may be its
    # (INJ-4 holds waiters for a bad inject's flush only), so one flush ended is enough
    good = [_op("inject", "D", by="other", status="running"),
            _log(5, "turn/start", turn=3, trigger={"kind": "injection", "source": {"kind": "user"}}),
            _log(6, "context/message", content=[{"type": "text", "text": "D"}]),
            _log(7, "turn/end", turn=3, reason={"kind": "completed"})]
    assert _check("INJ-2", [*head, *good, flush("start", 3), flush("end", 1), flush("end", 2), _status("idle"),
                            released, flush("end", 3), *closing]) is None
    # disposed meanwhile: its waiter waits for the driver (IDLE-4) and for the flushes begun
    # before the disposal, ended or cut (INJ-4; session 56's blind round C, v01)
    idle = [_op("inject", "E", unserialisable=True), *one_shot, dict(raised, by="caller"), _op("when_idle", waiter="w"),
            flush("start", 1), _op("dispose")]
    found = _check("INJ-2", [*idle, _status("disposed"), released, flush("end", 1), *closing])
    assert found is not None and found.rules == ("INJ-4",)
    assert _check("INJ-2", [*idle, flush("cut", 1), _status("disposed"), released, *closing]) is None
    # a coroutine's (inject/began) holds waiters only once the caller saw its error
    began = {"kind": "inject/began", "by": "window", "agent": "a", "text": "E"}
    taken_first = [*driver, bad, began, *one_shot, waiter, flush("start", 1), flush("start", 2), flush("end", 1),
                   _status("idle"), released, flush("end", 2), raised, *closing]
    assert _check("INJ-2", taken_first) is None


def test_an_inject_with_a_source_json_cannot_encode_raises_and_writes_nothing() -> None:
    # INJ-4: "A source that is not serialisable raises and writes nothing"
    bad = _op("inject", "F", bad_source=True)
    raised = {"kind": "op/error", "by": "caller", "op": "inject", "agent": "a", "error": "TypeError: not JSON"}
    closing = [{"kind": "world/closing"}, {"kind": "world/closed", "agents": {"a": "disposed"}, "logs": {"a": 0}}]
    assert _check("INJ-2", [bad, raised, *closing]) is None
    found = _check("INJ-2", [bad, *closing])
    assert found is not None and found.rules == ("INJ-4",) and "did not raise" in found.message
    wrote = [bad, _log(0, "turn/start", turn=1, trigger={"kind": "injection"}),
             _log(1, "context/message", content=[{"type": "text", "text": "F"}]), raised, *closing]
    found = _check("INJ-2", wrote)
    assert found is not None and found.rules == ("INJ-4",) and "writes nothing" in found.message
    # a disposed agent's raise is DISP-3's
    assert _check("INJ-2", [_op("dispose"), dict(bad, status="disposed"), *closing]) is None


def test_a_listeners_failure_carries_the_code_of_the_error_it_raised() -> None:
    # ERR-7: a window's raise with a code; its error event (the message tells it) carries that code
    raised = _op("raise", by="window", status="running", on="agent/request", code="E_WINDOW",
                 message="window listener failed")
    def failed(**code: Any) -> list[dict[str, Any]]:
        return [_op("send", "A"), _log(0, "turn/start", turn=1, trigger={"kind": "message"}),
                _log(1, "user/message", content=[{"type": "text", "text": "A"}]), _log(2, "step/start", turn=1, step=1),
                raised, _log(3, "error", turn=1, step=1, message="agent/request listener: window listener failed", **code),
                _log(4, "step/end", turn=1, step=1),
                _log(5, "turn/end", turn=1, reason={"kind": "error", "message": "window listener failed", **code})]
    assert _check("TOOLS", failed(code="E_WINDOW")) is None
    found = _check("TOOLS", failed())
    assert found is not None and found.rules == ("ERR-7",) and "'E_WINDOW'" in found.message


def _inject_turn(inject: dict[str, Any], *, logged: bool, cut: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    start, message, end = _turn(0, 1, "A")
    context = _log(2, "context/message", content=[{"type": "text", "text": "W1"}], source={"kind": "user"})
    end = dict(end, seq=3)
    return [_op("send", "A"), _status("running"), start, message, inject, *([cut] if cut else []),
            *([context] if logged else []), end, _status("idle")]


def test_an_inject_while_a_turn_is_open_appends_into_that_turn() -> None:
    # INJ-1: a loop may defer the context (until a running tool's result), never past turn/end
    inject = _op("inject", "W1", status="running")
    assert _check("INJ-1", _inject_turn(inject, logged=True)) is None
    found = _check("INJ-1", _inject_turn(inject, logged=False))
    assert found is not None and found.rules == ("INJ-1",) and "inject('W1') made while turn 1 was open" in found.message
    # not judged: a call that raised, a turn a disposal cut, content JSON cannot encode
    refused = _inject_turn(inject, logged=False)
    refused.insert(5, {"kind": "op/error", "by": "caller", "op": "inject", "agent": "a", "error": "ValueError: no"})
    assert _check("INJ-1", refused) is None
    assert _check("INJ-1", _inject_turn(inject, logged=False, cut=_op("dispose", status="running"))) is None
    assert _check("INJ-1", _inject_turn(dict(inject, unserialisable=True), logged=False)) is None
    # a coroutine inject is judged from where its body began: after turn/end, the turn was closed
    began = {"kind": "inject/began", "by": "caller", "agent": "a", "text": "W1"}
    late = [*_inject_turn(inject, logged=False), began]
    assert _check("INJ-1", late) is None
    early = _inject_turn(inject, logged=False)
    early.insert(5, began)
    assert _check("INJ-1", early) is not None


def test_a_call_of_a_tool_nobody_registered_gets_an_unknown_tool_error_result() -> None:
    # TOOL-3: "an unknown tool has code UNKNOWN_TOOL"; a tools/execute plugin may answer it itself,
    # and a stop during the call makes its result the abort's
    def timeline(error: Any, *extra: dict[str, Any], during: tuple[dict[str, Any], ...] = ()) -> list[dict[str, Any]]:
        call = {"type": "tool-call", "id": "c1", "name": "ghost", "arguments": "{}"}
        result: dict[str, Any] = {"turn": 1, "step": 1, "call_id": "c1", "is_error": True,
                                  "content": [{"type": "text", "text": "Error: unknown tool 'ghost'"}]}
        if error is not None:
            result["error"] = error
        return [{"kind": "agent/created", "agent": "a", "model": "fake", "tools": ["lookup"]}, *extra,
                _log(0, "turn/start", turn=1, trigger={"kind": "message"}), _log(1, "step/start", turn=1, step=1),
                _log(2, "assistant/message", turn=1, step=1, content=[call]),
                _log(3, "tool/call", turn=1, step=1, call_id="c1", name="ghost", arguments="{}"), *during,
                _log(4, "tool/result", **result), _log(5, "step/end", turn=1, step=1),
                _log(6, "turn/end", turn=1, reason={"kind": "completed"})]

    assert _check("TOOLS", timeline({"name": "LoopError", "code": "UNKNOWN_TOOL"})) is None
    found = _check("TOOLS", timeline(None))
    assert found is not None and found.rules == ("TOOL-3",) and "'ghost', which no one registered" in found.message
    plugin = {"kind": "listener", "name": "router", "on": "tools/execute"}
    assert _check("TOOLS", timeline(None, during=(plugin,))) is None  # it acted during the call
    assert _check("TOOLS", timeline(None, plugin)) is not None  # a plugin acting at another call excuses none
    registered = {"kind": "op", "op": "reconfigure", "by": "window", "agent": None, "tools": ["ghost", "lookup"]}
    assert _check("TOOLS", timeline(None, registered)) is None


def test_a_continuation_listeners_vote_to_stop_ends_the_turn_after_its_step() -> None:
    # CONT-1: the waterfall may force-stop, steering drained after the step or not; steering
    # queued after the step's step/end waits at the gate, which CONT-2 lets override the stop
    start, message, _end = _turn(0, 1, "A")
    step1 = [_log(2, "step/start", turn=1, step=1), _log(3, "steering/message", turn=1, content=[]),
             _log(4, "step/end", turn=1, step=1)]
    stop = _op("stop", by="window", status="running", on="agent/turn-continuation")
    step2 = [_log(5, "step/start", turn=1, step=2), _log(6, "step/end", turn=1, step=2)]
    end = _log(7, "turn/end", turn=1, reason={"kind": "completed"})
    found = _check("CONT-1", [start, message, *step1, stop, *step2, end])
    assert found is not None and found.rules == ("CONT-1",) and "opened step 2" in found.message
    assert _check("CONT-1", [start, message, *step1, stop, dict(end, seq=5)]) is None
    waiting = {"kind": "agent/queued", "agent": "a", "text": "S", "steering": True, "source": "user"}
    assert _check("CONT-1", [start, message, *step1, waiting, stop, *step2, end]) is None
    # and the steering drained into the stopped turn got no model step: not STEER-2's concern
    assert _check("STEERING", [start, message, *step1, stop, dict(end, seq=5)]) is None


def test_a_cancel_from_turn_start_still_opens_and_closes_the_dropped_step() -> None:
    # CANCEL-STEP: the first step is dropped, opened and closed empty, and the turn ends aborted
    start, message, _end = _turn(0, 1, "A")
    cancel = _op("cancel", by="window", status="running", on="agent/turn-start", reason="")
    aborted = _log(2, "turn/end", turn=1, reason={"kind": "aborted", "reason": ""})
    found = _check("CANCEL-STEP", [start, message, cancel, aborted])
    assert found is not None and found.rules == ("CANCEL-STEP",) and "with no step" in found.message
    empty = [_log(2, "step/start", turn=1, step=1), _log(3, "step/end", turn=1, step=1)]
    assert _check("CANCEL-STEP", [start, message, cancel, *empty, dict(aborted, seq=4)]) is None
    # a turn a disposal ended is DISP-1's
    assert _check("CANCEL-STEP", [start, message, cancel, dict(aborted, data={"turn": 1, "reason": {"kind": "disposed"}})]) is None


def test_a_turn_ends_error_only_when_something_it_was_given_failed() -> None:
    created = {"kind": "agent/created", "agent": "a", "model": "fake"}

    def failed_turn(n: int, seq: int) -> list[dict[str, Any]]:
        return [_log(seq, "turn/start", turn=n, trigger={"kind": "message"}),
                _log(seq + 1, "error", turn=n, step=1, message="'NoneType' object has no attribute 'abort'"),
                _log(seq + 2, "turn/end", turn=n, reason={"kind": "error", "message": "'NoneType' object ..."})]

    tl = [created, _op("send", "A"), *failed_turn(1, 0)]
    found = _plain("UNCAUSED", tl)
    assert found is not None and found.rules == ("FINISH-1", "FINISH-2", "ERR-2") and "turn 1 ended error" in found.message
    stream_failed = {"kind": "model/done", "model": "fake", "call": 1, "outcome": "raised"}
    assert _plain("UNCAUSED", [created, _op("send", "A"), stream_failed, *failed_turn(1, 0)]) is None
    assert _plain("UNCAUSED", [created, _op("send", "A"), _op("raise", by="window"), *failed_turn(1, 0)]) is None
    # a cause counts for the turn it falls in, not for the next one
    tl = [created, _op("send", "A"), stream_failed, *failed_turn(1, 0), *failed_turn(2, 3)]
    found = _plain("UNCAUSED", tl)
    assert found is not None and "turn 2" in found.message
    # an agent without a model of its own fails its steps by LOOP-7; a cancelled driver is PY-1's
    assert _plain("UNCAUSED", [{**created, "model": None}, *failed_turn(1, 0)]) is None
    assert _plain("UNCAUSED", [created, _op("cancel_driver", status="running"), *failed_turn(1, 0)]) is None
    # bad input given to a call fails the turn that takes it, however many turns ran between
    bad = _op("send", "X", bad_source=True)
    assert _plain("UNCAUSED", [created, bad, _op("inject", "W"), *_turn(0, 1, "W"), *failed_turn(2, 3)]) is None
    # a turn that succeeded is no question
    assert _plain("UNCAUSED", [created, _op("send", "A"), *_turn(0, 1, "A")]) is None


def test_steering_drained_into_a_step_a_turn_start_cancel_dropped_is_late() -> None:
    # CANCEL-STEP opens and closes the dropped step empty after the cancel: steering given after
    # that cancel and logged into the turn (before the empty step) never reaches a model (CANCEL-4)
    cancel = _op("cancel", status="running", on="agent/turn-start", reason="stop")
    steer = _op("steer", "late", status="running", on="agent/turn-start")
    tl = [_op("send", "A"), _log(0, "turn/start", turn=1, trigger={"kind": "message"}),
          _log(1, "user/message", content=[{"type": "text", "text": "A"}]), cancel, steer,
          _log(2, "steering/message", turn=1, content=[{"type": "text", "text": "late"}]),
          _log(3, "step/start", turn=1, step=1), _log(4, "step/end", turn=1, step=1),
          _log(5, "turn/end", turn=1, reason={"kind": "aborted", "reason": "stop"})]
    found = _check("STEER-3", tl)
    assert found is not None and found.rules == ("CANCEL-4",) and "'late'" in found.message
    # the same steering re-queued as the next turn's prompt is what CANCEL-4 asks
    fine = [e for e in tl if not (e.get("type") == "steering/message")]
    assert _check("STEER-3", fine) is None


def test_steering_a_batch_drain_had_taken_when_a_listener_cancelled_is_delivered_not_run_after() -> None:
    # Two steering messages wait; a session/event listener on the first one's steering/message
    # cancels. A drain that took both off the FIFO logs the second right after: delivered by the
    # drain under way, not run after the cancel (as STEER-3's oracle reads it). Logged by a later
    # drain, it ran after the cancel (CANCEL-4).
    steers = [_op("steer", "S1", status="running"), _op("steer", "S2", status="running")]
    cancel = _op("cancel", status="running", on="session/event", reason="stop")
    head = [_op("send", "A"), _log(0, "turn/start", turn=1, trigger={"kind": "message"}),
            _log(1, "user/message", content=[{"type": "text", "text": "A"}]), *steers,
            _log(2, "steering/message", turn=1, content=[{"type": "text", "text": "S1"}]), cancel]
    batch = [*head, _log(3, "steering/message", turn=1, content=[{"type": "text", "text": "S2"}])]
    assert _check("CANCEL-2", batch) is None
    later = [*head, _log(3, "step/start", turn=1, step=1),
             _log(4, "steering/message", turn=1, content=[{"type": "text", "text": "S2"}])]
    found = _check("CANCEL-2", later)
    assert found is not None and found.rules == ("CANCEL-4",) and "'S2'" in found.message


def test_no_turn_is_announced_twice() -> None:
    # ERR-9: a failed turn is announced exactly once (the first failure wins). Blind round I's
    # loops named a failing flush by the log's newest turn: an idle inject's one-shot turn
    # written during the driver's flush was announced twice, the flushed turn never.
    start, message, end = _turn(0, 1, "A")
    shot = [_log(3, "turn/start", turn=2, trigger={"kind": "injection"}),
            _log(4, "context/message", content=[{"type": "text", "text": "C"}]),
            _log(5, "turn/end", turn=2, reason={"kind": "completed"})]

    def said(turn: int, step: int = 0) -> dict[str, Any]:
        return {"kind": "agent/error", "agent": "a", "turn": turn, "step": step, "error": "TypeError: flush failed"}

    flush = _op("raise", by="failing-flush", status="idle", on="session/flush")
    tl = [_op("send", "A"), start, message, end, *shot, flush, flush]
    found = _check("ONCE", [*tl, said(2), said(2)])
    assert found is not None and found.rules == ("ERR-9",) and found.at == 10
    assert "turn 2 was announced through agent/error twice" in found.message
    assert _check("ONCE", [*tl, said(2), said(1)]) is None
    # announcements at step 0 with no turn open beyond the late failures made: one may be a
    # failure before a turn opened (ERR-8), which may name any turn
    assert _check("ONCE", [*tl[:-1], said(2), said(2)]) is None
    # a failure before its turn opened names the turn it would have been (ERR-8): not that turn's
    assert _check("ONCE", [_op("send", "A"), said(1), *tl[1:], said(1)]) is None
    # once a disposal or a close is under way: not judged (ERR-10 swallows then)
    assert _check("ONCE", [*tl, said(2), {"kind": "world/closing"}, said(2)]) is None
    assert _check("ONCE", [*tl, said(2), _op("dispose"), said(2)]) is None
    # a throwing agent/status listener may be announced naming any turn (ERR-8)
    assert _check("ONCE", [*tl, _op("raise", by="plugin", status="idle", on="agent/status"), said(2), said(2)]) is None
    # a turn is announced once whatever failed: a step, then its flush; an idle inject's one-shot
    # turn too (test_an_idle_injects_turn_is_announced_failed_once: the first failure wins)
    assert _check("ONCE", [*tl, said(1, 1), said(1)]) is not None
    failed = [*shot[:2], _log(5, "error", turn=2, step=0, message="boom"), said(2),
              _log(6, "turn/end", turn=2, reason={"kind": "error"})]
    assert _check("ONCE", [*tl[:4], *failed, flush, said(2)]) is not None


def test_an_announcement_made_of_a_raised_errors_message_is_not_the_original() -> None:
    # ORIGINAL (ERR-9): the world records ``copied`` (the text) on an agent/error whose error is a
    # new value made of the message of one it raised; judged when that raise was made in the
    # announced turn (a loop's own error for a model's error finish may share another turn's text)
    start, message, _end = _turn(0, 1, "A")
    raised = {"kind": "model/done", "model": "fake", "call": 1, "outcome": "raised", "error": "stream broke"}
    copy = {"kind": "agent/error", "agent": "a", "turn": 1, "step": 1, "error": "RuntimeError: stream broke",
            "copied": "stream broke"}
    end = _log(2, "turn/end", turn=1, reason={"kind": "error", "message": "stream broke"})
    found = _check("ORIGINAL", [start, message, raised, copy, end])
    assert found is not None and found.rules == ("ERR-9",) and "not that error" in found.message
    # the same text raised in an earlier turn, this turn's own error made by the loop: not judged
    assert _check("ORIGINAL", [raised, start, message, copy, end]) is None
    # a listener's raise of it in the turn counts too
    thrown = _op("raise", by="window", status="running", message="stream broke", on="agent/request")
    assert _check("ORIGINAL", [start, message, thrown, copy, end]) is not None
