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
