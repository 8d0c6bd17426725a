"""The invariants checked on every generated run (each violation names its rule id).

* LOG-3..6: the final log balances and nests (``conformance.invariants``);
* STATUS-1: only legal status transitions, no repeats, nothing after ``disposed``;
* LOOP-3: turn numbers go up by one;
* no prompt lost or run twice: each sent prompt runs exactly once, unless a ``cancel()`` or a
  disposal came after it was sent (then at most once); a prompt sent after a cancel must run
  (MARKER-1: the marker never drops a later prompt);
* IDLE-2 quiescence: when a ``when_idle()`` waiter is released, every prompt sent before its last
  unreleased sighting has run (its turn ended) or was dropped by a later cancel or disposal; every
  waiter is released once the agent settles;
* CANCEL-2 / CANCEL-4: a prompt still queued (or steering) when a ``cancel()`` comes never runs;
  MARKER-1: a turn ends ``aborted`` only if an ``abort()`` or ``cancel()`` came during it (an
  earlier cancel never governs a later turn);
* LOOP-2: a turn drains every prompt queued before it started;
* STEER-2 / CONT-1: steering logged in a turn that ends normally is followed by a model step;
  CONT-2: steering added by an ``agent/step-end`` or continuation listener joins that turn;
* TOOL-5: an abort during a tool ends the turn ``aborted``, with no further step;
* TOOL-1: a step's tool calls do not overlap; TOOL-3: a failing tool never fails the turn;
  ERR-7: no ``code: null``;
* MAXTOK-1..5 and precedence: a turn with a ``max-tokens`` step ends ``max-tokens`` unless
  disposed / aborted / error; ``max-tokens`` never appears without such a step; a turn with an
  ``error`` event ends ``error`` (or ``disposed``); a turn closed after a disposal ends
  ``disposed``; a ``max-tokens`` step dispatches no tool call.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ..invariants import log_violations
from .world import Observation, Prompt

_LEGAL = {("idle", "running"), ("running", "idle"), ("idle", "disposed"), ("running", "disposed")}


def violations(obs: Observation) -> list[str]:
    """Every invariant violation of one run (empty when it is sound)."""
    out = list(obs.problems)
    out += log_violations(obs.final_events)
    out += _status(obs.statuses)
    out += _turn_numbers(obs.final_events)
    out += _prompts(obs)
    out += _quiescence(obs)
    out += _turn_ends(obs)
    out += _aborted_turns(obs)
    out += _cancel_drops_pending(obs)
    out += _batching(obs)
    out += _tools_and_codes(obs.final_events)
    out += _steering(obs)
    out += _tool_aborts(obs)
    return out


def _status(statuses: list[str]) -> list[str]:
    current = "idle"
    for status in statuses:
        if (current, status) not in _LEGAL:
            return [f"STATUS-1: illegal status transition {current} -> {status} (trace {statuses})"]
        current = status
    return []


def _turn_numbers(events: list[dict[str, Any]]) -> list[str]:
    last = 0
    for event in events:
        if event["type"] == "turn/start":
            number = event["data"].get("turn")
            if number != last + 1:
                return [f"LOOP-3: turn/start {number} follows turn {last}"]
            last = number
    return []


def _texts(event: dict[str, Any]) -> Iterator[str]:
    for block in event["data"].get("content", []):
        if isinstance(block, dict) and block.get("type") == "text":
            yield str(block.get("text", ""))


def _runs(events: list[dict[str, Any]], text: str) -> list[int]:
    """Indices of the user/steering messages carrying ``text``."""
    return [
        i
        for i, e in enumerate(events)
        if e["type"] in ("user/message", "steering/message") and text in _texts(e)
    ]


def _excused(obs: Observation, prompt: Prompt, before: int | None = None) -> bool:
    """Whether a cancel or a disposal after the prompt was sent (and before ``before``) may have
    dropped it."""
    limit = before if before is not None else len(obs.moments) + 1
    return any(prompt.moment < m < limit for m in (*obs.cancels, *obs.disposals))


def _prompts(obs: Observation) -> list[str]:
    out: list[str] = []
    for prompt in obs.prompts:
        runs = _runs(obs.final_events, prompt.text)
        if len(runs) > 1:
            out.append(f"LOOP-2: prompt {prompt.text} ({prompt.verb} by {prompt.by}) ran {len(runs)} times")
        elif not runs and not _excused(obs, prompt):
            out.append(
                f"MARKER-1: prompt {prompt.text} ({prompt.verb} by {prompt.by} at moment {prompt.moment}) "
                "never ran, and no later cancel() or disposal dropped it"
            )
    return out


def _finished(events: list[dict[str, Any]], index: int) -> bool:
    """Whether the turn holding event ``index`` has ended within ``events``."""
    return any(e["type"] == "turn/end" for e in events[index:])


def _quiescence(obs: Observation) -> list[str]:
    out: list[str] = []
    for waiter in obs.waiters:
        if waiter.released_at is None or waiter.log_at_release is None:
            continue
        log = obs.events[: waiter.log_at_release]
        for prompt in obs.prompts:
            if prompt.moment > waiter.last_pending or _excused(obs, prompt, waiter.released_at):
                continue
            runs = _runs(log, prompt.text)
            if not runs or not _finished(log, runs[0]):
                out.append(
                    f"IDLE-2: when_idle() called by {waiter.by} at moment {waiter.moment} was released "
                    f"(by moment {waiter.released_at}) before prompt {prompt.text}, sent at moment "
                    f"{prompt.moment} while it was pending, had run"
                )
                break
    return out


def _turns(events: list[dict[str, Any]]) -> Iterator[tuple[int, int]]:
    start: int | None = None
    for i, event in enumerate(events):
        if event["type"] == "turn/start":
            start = i
        elif event["type"] == "turn/end" and start is not None:
            yield start, i
            start = None


def _turn_ends(obs: Observation) -> list[str]:
    out: list[str] = []
    events = obs.final_events
    for start, end in _turns(events):
        body = events[start:end]
        reason = events[end]["data"].get("reason", {}).get("kind")
        number = events[start]["data"].get("turn")
        finishes: dict[int, str] = {}
        for e in body:
            chunk = e["data"].get("chunk") if e["type"] == "assistant/chunk" else None
            if isinstance(chunk, dict) and chunk.get("type") == "finish":
                finishes[e["data"].get("step", 0)] = str(chunk.get("reason", {}).get("kind"))
        max_steps = {s for s, k in finishes.items() if k == "max-tokens"}
        errors = [e for e in body if e["type"] == "error"]
        disposed_before = end < len(obs.event_moment) and any(
            m < obs.event_moment[end] for m in obs.disposals
        )
        where = f"turn {number}"
        if reason == "max-tokens" and not max_steps:
            out.append(f"MAXTOK-4: {where} ends max-tokens without a max-tokens step")
        if max_steps and reason == "completed":
            out.append(f"MAXTOK-2: {where} had a max-tokens step but ends completed")
        if errors and reason not in ("error", "disposed", "aborted"):
            out.append(f"MAXTOK-3: {where} logged an error but ends {reason}")
        if disposed_before and reason != "disposed":
            out.append(f"MAXTOK-3: {where} closed after dispose() but ends {reason}")
        for e in body:
            if e["type"] == "tool/call" and e["data"].get("step") in max_steps:
                out.append(f"MAXTOK-5: {where} dispatched tool call {e['data'].get('call_id')} from a max-tokens step")
    return out


def _spans(obs: Observation) -> Iterator[tuple[int, int]]:
    """(turn/start, turn/end) indices in the notified events (which carry moments)."""
    yield from _turns(obs.events)


def _aborted_turns(obs: Observation) -> list[str]:
    out: list[str] = []
    for start, end in _spans(obs):
        if obs.events[end]["data"].get("reason", {}).get("kind") != "aborted":
            continue
        begin, finish = obs.event_moment[start], obs.event_moment[end]
        if not any(begin < m < finish for m in (*obs.cancels, *obs.aborts)):
            number = obs.events[start]["data"].get("turn")
            out.append(f"MARKER-1: turn {number} ends aborted but no cancel() or abort() came during it")
    return out


def _first_run(obs: Observation, text: str) -> int | None:
    runs = _runs(obs.events, text)
    return runs[0] if runs else None


def _cancel_drops_pending(obs: Observation) -> list[str]:
    out: list[str] = []
    for prompt in obs.prompts:
        index = _first_run(obs, prompt.text)
        if index is None:
            continue
        started = obs.event_moment[index]
        cancel = next((c for c in obs.cancels if prompt.moment < c < started), None)
        if cancel is not None:
            out.append(
                f"CANCEL-2: prompt {prompt.text} ({prompt.verb} by {prompt.by} at moment {prompt.moment}) "
                f"ran although a cancel() at moment {cancel} came before it started"
            )
    return out


def _batching(obs: Observation) -> list[str]:
    out: list[str] = []
    for start, end in _spans(obs):
        trigger = obs.events[start]["data"].get("trigger", {})
        if trigger.get("kind") != "message":
            continue  # an idle inject's one-shot turn drains nothing
        begin = obs.event_moment[start]
        for prompt in obs.prompts:
            if not prompt.queued or prompt.moment > begin:
                continue
            if any(prompt.moment < c < begin for c in (*obs.cancels, *obs.disposals)):
                continue
            index = _first_run(obs, prompt.text)
            if index is not None and index < start:
                continue  # it ran in an earlier turn
            if index is None or index > end:
                number = obs.events[start]["data"].get("turn")
                took = [t for e in obs.events[start:end + 1] if e["type"] == "user/message" for t in _texts(e)]
                out.append(f"LOOP-2: turn {number} did not take prompt {prompt.text}, queued before it started"
                           f" (it took {', '.join(took) if took else 'none'})")
                return out
    return out


def _tools_and_codes(events: list[dict[str, Any]]) -> list[str]:
    out: list[str] = []
    open_calls: dict[tuple[Any, Any], str] = {}
    for event in events:
        kind, data = event["type"], event["data"]
        key = (data.get("turn"), data.get("step"))
        if kind == "tool/call":
            if key in open_calls:
                out.append(f"TOOL-1: tool call {data.get('call_id')} started before {open_calls[key]} had its result")
            open_calls[key] = str(data.get("call_id"))
        elif kind == "tool/result":
            open_calls.pop(key, None)
        elif kind == "error":
            if "code" in data and data["code"] is None:
                out.append("ERR-7: an error event carries code null")
            if data.get("message") == "tool failed":
                out.append("TOOL-3: a failing tool failed the turn")
        elif kind == "turn/end":
            reason = data.get("reason", {})
            if "code" in reason and reason["code"] is None:
                out.append("ERR-7: a turn-end reason carries code null")
    return out


_NORMAL = ("completed", "max-tokens")
_GATE_LISTENERS = ("listener(agent/step-end", "listener(agent/turn-continuation")


def _steering(obs: Observation) -> list[str]:
    out: list[str] = []
    for start, end in _spans(obs):
        if obs.events[end]["data"].get("reason", {}).get("kind") not in _NORMAL:
            continue
        body = obs.events[start:end]
        number = obs.events[start]["data"].get("turn")
        for i, event in enumerate(body):
            if event["type"] == "steering/message" and not any(e["type"] == "step/start" for e in body[i:]):
                out.append(f"STEER-2: steering logged in turn {number} got no model step")
                break
        begin, finish = obs.event_moment[start], obs.event_moment[end]
        for prompt in obs.prompts:
            if not (begin < prompt.moment < finish) or prompt.queued or not prompt.by.startswith(_GATE_LISTENERS):
                continue
            if any(prompt.moment < c < finish for c in obs.cancels):
                continue
            if not any(e["type"] == "steering/message" and prompt.text in _texts(e) for e in body):
                out.append(f"CONT-2: steering {prompt.text} added by {prompt.by} did not join turn {number}")
    return out


def _tool_aborts(obs: Observation) -> list[str]:
    out: list[str] = []
    for start, end in _spans(obs):
        body = list(range(start, end))
        calls = {obs.events[i]["data"].get("call_id"): i for i in body if obs.events[i]["type"] == "tool/call"}
        for i in body:
            event = obs.events[i]
            if event["type"] != "tool/result" or event["data"].get("call_id") not in calls:
                continue
            called = obs.event_moment[calls[event["data"]["call_id"]]]
            if not any(called < m < obs.event_moment[i] for m in (*obs.aborts, *obs.cancels)):
                continue
            reason = obs.events[end]["data"].get("reason", {}).get("kind")
            later_step = any(obs.events[j]["type"] == "step/start" for j in range(i, end))
            if reason not in ("aborted", "disposed") or later_step:
                number = obs.events[start]["data"].get("turn")
                out.append(f"TOOL-5: an abort during tool call {event['data']['call_id']} did not end turn {number} aborted")
                break
    return out
