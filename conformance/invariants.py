"""The session-log invariants of spec section 1 (LOG-3..6), checked after every suite run, and the
shapes of its events' data (spec 0/0b: ``data_violations``, an oracle of every declared scenario).

Pure functions over a list of session events: they return human-readable violations (an empty
list when the log is sound), so the suite, the property tests and the scenario checks share them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple


def _where(index: int, kind: Any) -> str:
    return f"event {index} ({kind})"  # only when there is a violation to say: most logs are sound


def log_violations(events: Sequence[dict[str, Any]], *, allow_open_turn: bool = False) -> list[str]:
    """Violations of LOG-3 (contiguous seq), LOG-4 (turns pair and nest, nothing outside a turn),
    LOG-5 (steps nest, chunks inside a step; 0b: steps count from 1 within their turn) and LOG-6
    (results follow their calls)."""
    out: list[str] = []
    turn: int | None = None
    step: int | None = None
    last_step = 0  # the turn's last step number
    calls: set[str] = set()
    for index, event in enumerate(events):
        kind = event.get("type")
        data = event.get("data", {})
        if event.get("seq") != index:
            out.append(f"LOG-3: {_where(index, kind)} has seq {event.get('seq')}, expected {index}")
        if kind == "turn/start":
            if turn is not None:
                out.append(f"LOG-4: {_where(index, kind)} opens turn {data.get('turn')} while turn {turn} is open")
            turn, step, last_step = data.get("turn"), None, 0
            continue
        if turn is None:
            out.append(f"LOG-4: {_where(index, kind)} lies outside a turn")
            continue
        if "turn" in data and data["turn"] != turn:
            out.append(f"LOG-4: {_where(index, kind)} names turn {data['turn']} inside turn {turn}")
        if kind == "turn/end":
            if step is not None:
                out.append(f"LOG-5: {_where(index, kind)} closes turn {turn} with step {step} still open")
            turn, step = None, None
        elif kind == "step/start":
            if step is not None:
                out.append(f"LOG-5: {_where(index, kind)} opens step {data.get('step')} while step {step} is open")
            elif data.get("step") != last_step + 1:
                out.append(f"LOG-5: {_where(index, kind)} opens step {data.get('step')} of turn {turn}, expected step "
                           f"{last_step + 1} (0b: steps count from 1, one by one, within their turn)")
            step = data.get("step")
            last_step = step if isinstance(step, int) else last_step + 1
        elif kind == "step/end":
            if step is None or data.get("step") != step:
                out.append(f"LOG-5: {_where(index, kind)} closes step {data.get('step')} but open step is {step}")
            step = None
        elif kind == "assistant/chunk":
            if step is None:
                out.append(f"LOG-5: {_where(index, kind)} lies outside a step")
        elif kind == "tool/call":
            calls.add(str(data.get("call_id")))
        elif kind == "tool/result" and str(data.get("call_id")) not in calls:
            out.append(f"LOG-6: {_where(index, kind)} has no earlier tool/call {data.get('call_id')!r}")
    if turn is not None and not allow_open_turn:
        out.append(f"LOG-4: turn {turn} never ended")
    return out


SIM_CLOCK_SPAN_MS = 30 * 24 * 3600 * 1000
"""How far past :data:`simulator.sources.EPOCH_MS` an event stamped by the simulated clock may lie
(a run's virtual time is hours at most)."""


def clock_violations(events: Sequence[Any], epoch_ms: int) -> list[str]:
    """PY-3: an event's ``time`` comes from the injected clock. Under the simulator that clock
    reads ``epoch_ms`` + virtual time, while a direct read of the real clock (``time.time()``,
    which the simulator pins to another epoch) lands elsewhere: a log holding both kinds of time
    mixes a direct read with the injected clock. (A log stamped by another clock throughout, one
    an adapter injected, is the adapter's business: only the mix is judged.)"""
    ours, other = None, None
    for index, event in enumerate(events):
        t = event.get("time") if isinstance(event, Mapping) else None
        if not isinstance(t, int) or isinstance(t, bool):
            continue
        if epoch_ms <= t <= epoch_ms + SIM_CLOCK_SPAN_MS:
            ours = ours if ours is not None else index
        else:
            other = other if other is not None else index
        if ours is not None and other is not None:
            stray = events[other]
            return [f"PY-3: {_where(other, stray.get('type'))} has time {stray.get('time')}, from another clock "
                    f"than the simulated one the log's other events carry ({epoch_ms} + virtual ms, as event "
                    f"{ours} has): a direct read of the real clock"]
    return []


def event_key(event: Any) -> tuple[Any, ...]:
    """``(type, seq, data)``: an event as logged, its time aside (what a persisted copy keeps)."""
    if not isinstance(event, Mapping):
        return (repr(event), None, None)
    return (event.get("type"), event.get("seq"), event.get("data"))


def persisted_prefix(logged: Sequence[Any], loaded: Sequence[Any]) -> int:
    """How many of the writer's events ``logged`` the loaded log starts with (compared by
    :func:`event_key`): what a resume found persisted of them."""
    common = 0
    while common < min(len(logged), len(loaded)) and event_key(loaded[common]) == event_key(logged[common]):
        common += 1
    return common


def repair_violations(logged: Sequence[Any], loaded: Sequence[Any]) -> list[str]:
    """Violations of a session loaded while its writer was still running, as after a process
    that died there (SVC-3: resume loads the persisted session; section 0: ``interrupted`` is
    written by a backend that repairs a log whose process died mid-turn). ``logged`` is the
    writer's whole log, ``loaded`` what the resume loaded: the writer's events as far as they
    were persisted, then only the repair of a turn left open (its open step's ``step/end``, the
    turn's ``turn/end{interrupted}``), the whole balanced (LOG-3..LOG-6)."""
    for index in range(persisted_prefix(logged, loaded), len(loaded)):
        event = loaded[index]
        kind = event.get("type") if isinstance(event, Mapping) else None
        data = event.get("data") if isinstance(event, Mapping) else None
        reason = data.get("reason") if isinstance(data, Mapping) else None
        if kind == "step/end" or (kind == "turn/end" and isinstance(reason, Mapping)
                                  and reason.get("kind") == "interrupted"):
            continue
        had = event_key(logged[index])[:2] if index < len(logged) else "nothing"
        return [f"SVC-3: {_where(index, kind)} is neither the writer's (its log had {had} there) nor the repair "
                "of an open turn (its open step's step/end, then turn/end {kind: interrupted})"]
    return log_violations([e if isinstance(e, dict) else {} for e in loaded])


DATA_KEYS: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    "turn/start": (frozenset({"turn", "trigger"}), frozenset()),
    "turn/end": (frozenset({"turn", "reason"}), frozenset()),
    "step/start": (frozenset({"turn", "step"}), frozenset()),
    "step/end": (frozenset({"turn", "step"}), frozenset()),
    "user/message": (frozenset({"content", "source"}), frozenset()),
    "context/message": (frozenset({"content", "source"}), frozenset()),
    "steering/message": (frozenset({"turn", "content", "source"}), frozenset()),
    "assistant/chunk": (frozenset({"turn", "step", "chunk"}), frozenset()),
    "assistant/message": (frozenset({"turn", "step", "content"}), frozenset()),
    "tool/call": (frozenset({"turn", "step", "call_id", "name", "arguments"}), frozenset()),
    "tool/result": (frozenset({"turn", "step", "call_id", "content", "is_error"}), frozenset({"error"})),
    "usage": (frozenset({"turn", "step", "usage"}), frozenset()),
    "error": (frozenset({"turn", "step", "message"}), frozenset({"code"})),
}
"""Spec section 0's table: the ``(required, optional)`` data keys of every session event type."""

# The rule that states each event type's fields, named by a data violation (0b has no id of its own).
_RULE_OF = {"turn/start": "LOOP-4", "turn/end": "LOOP-4", "step/start": "LOOP-5", "step/end": "LOOP-5",
            "user/message": "LOOP-2", "context/message": "INJ-1", "steering/message": "STEER-2",
            "assistant/chunk": "LOOP-5", "assistant/message": "LOOP-6", "tool/call": "TOOL-2",
            "tool/result": "TOOL-3", "usage": "ASM-4", "error": "ERR-7"}
_SOURCE_FIELD = {"user": None, "plugin": "plugin", "agent": "agent_id"}


def _source_problem(source: Any) -> str | None:
    if not isinstance(source, dict) or source.get("kind") not in _SOURCE_FIELD:
        return f"source {source!r} is not {{kind: user|plugin|agent, ...}}"
    field = _SOURCE_FIELD[source["kind"]]
    if field is not None and not isinstance(source.get(field), str):
        return f"source {source!r} has no string {field!r}"
    return None


def _blocks_problem(content: Any) -> str | None:
    if not isinstance(content, list):
        return f"content {content!r} is not a list of blocks"
    for block in content:
        if not isinstance(block, dict) or not isinstance(block.get("type"), str):
            return f"content holds {block!r}, not a block {{type, ...}}"
        kind = block["type"]
        if kind in ("text", "reasoning") and not isinstance(block.get("text"), str):
            return f"a {kind} block without a string text: {block!r}"
        if kind == "tool-call" and not all(isinstance(block.get(k), str) for k in ("id", "name", "arguments")):
            return f"a tool-call block without string id, name and arguments (raw JSON text): {block!r}"
    return None


Problem = tuple[str | None, str]
"""What is wrong with an event's data: the rule that states it when that is not the event type's
own (``_RULE_OF``: a code's is ERR-7 wherever it is carried), and what."""


def _code_problem(holder: dict[str, Any], what: str) -> Problem | None:
    if "code" in holder and not isinstance(holder["code"], str):
        return "ERR-7", f"{what} carries code {holder['code']!r}: a code is a string, and absent when there is none"
    return None


def _reason_problem(reason: Any) -> Problem | None:
    if not isinstance(reason, dict) or not isinstance(reason.get("kind"), str):
        return None, f"reason {reason!r} is not {{kind, ...}}"
    if reason["kind"] == "aborted" and not isinstance(reason.get("reason"), str):
        return None, f"an aborted reason without a string reason: {reason!r}"
    if reason["kind"] == "error":
        if not isinstance(reason.get("message"), str):
            return None, f"an error reason without a string message: {reason!r}"
        return _code_problem(reason, "the error reason")
    return None


def _fields_problem(kind: str, data: dict[str, Any]) -> Problem | None:
    """What is wrong with the values of one event's data (its keys are right), or None."""
    for key in ("turn", "step"):
        if key in data and (type(data[key]) is not int or data[key] < (1 if key == "turn" else 0)):
            return None, f"{key} is {data[key]!r}: turns count from 1, steps from 1 (0: no step)"
    found = (_blocks_problem(data["content"]) if "content" in data else None) or (
        _source_problem(data["source"]) if "source" in data else None)
    if found:
        return None, found
    if kind == "turn/start":
        trigger = data["trigger"]
        if not isinstance(trigger, dict) or trigger.get("kind") not in ("message", "injection", "continuation"):
            return None, f"trigger {trigger!r} is not {{kind: message|injection|continuation, ...}}"
        found = _source_problem(trigger.get("source")) if trigger["kind"] != "continuation" else None
        return (None, found) if found else None
    if kind == "turn/end":
        return _reason_problem(data["reason"])
    if kind == "tool/call":
        if not all(isinstance(data[k], str) for k in ("call_id", "name", "arguments")):
            return None, "call_id, name and arguments are not all strings (arguments: the model's raw JSON text)"
    elif kind == "tool/result":
        if not isinstance(data["call_id"], str) or type(data["is_error"]) is not bool:
            return None, f"call_id {data['call_id']!r} / is_error {data['is_error']!r}: a string and a boolean"
        if "error" in data:
            error = data["error"]
            if not isinstance(error, dict) or set(error) != {"name", "code"} or not all(
                    isinstance(error[k], str) for k in ("name", "code")):
                return None, f"error {error!r} is not {{name, code}} (strings)"
    elif kind == "usage":
        if not isinstance(data["usage"], dict):  # its counts are the model's: only the nesting is the loop's
            return None, f"usage {data['usage']!r} is not the model's usage object, nested (0b)"
    elif kind == "error":
        if not isinstance(data["message"], str):
            return None, f"message {data['message']!r} is not a string"
        return _code_problem(data, "the error event")
    return None


class DataViolation(NamedTuple):
    """One event whose data departs from spec 0/0b: its position in the log, the rule that states
    the field, and what is wrong (``str()``: ``"RULE: event N (type): ..."``)."""

    position: int
    rule: str
    message: str

    def __str__(self) -> str:
        return f"{self.rule}: {self.message}"


def data_violations(events: Sequence[dict[str, Any]]) -> list[DataViolation]:
    """Events whose data departs from spec 0/0b: the table's keys exactly (compared literally) and
    values of the stated shapes (sources, triggers, reasons, blocks, tool calls and results,
    usage, codes), each naming the rule that states the field. An ``assistant/chunk``'s chunk is
    the model's, not the loop's: only its envelope is checked."""
    out: list[DataViolation] = []
    for index, event in enumerate(events):
        kind = event.get("type")
        if not isinstance(kind, str) or kind not in DATA_KEYS:
            continue  # an unknown type: LOG-3's and the suite's business, not a shape
        data = event.get("data")
        required, optional = DATA_KEYS[kind]
        if not isinstance(data, dict) or not required <= set(data) <= required | optional:
            keys = sorted(data) if isinstance(data, dict) else data
            out.append(DataViolation(index, _RULE_OF[kind], f"{_where(index, kind)} has data keys {keys}, the table "
                                     f"(spec 0) says {sorted(required)}"
                                     + (f" and maybe {sorted(optional)}" if optional else "")))
            continue
        problem = _fields_problem(kind, data)
        if problem:
            rule, what = problem
            out.append(DataViolation(index, rule or _RULE_OF[kind], f"{_where(index, kind)}: {what} (spec 0b)"))
    return out
