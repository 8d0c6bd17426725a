"""Scenario checks: the spec's invariants (always on) and the checks a scenario names.

A check reads the run's timeline (a :class:`TraceView` over ``Trace.timeline``), so it works the
same on a live run and on a trace loaded from a race cassette. It returns ``None`` or a
:class:`Violation` (a message plus the timeline index where it shows, which the sequence diagram
highlights). ``LoopCheck.as_check()`` adapts it to the simulator's ``Check``.

Always on (``INVARIANTS``):

* ``LOG`` — LOG-3..6 on every agent's session log (``conformance.invariants``);
* ``STATUS-1`` — only legal status transitions, no repeated status, nothing after ``disposed``;
* ``LOOP-3`` — turn numbers strictly increase;
* ``prompts`` — no prompt runs twice; a prompt sent and not later cancelled runs;
* ``IDLE-2`` — when a ``when_idle()`` waiter resolves, the prompts sent before it was registered
  (and not cancelled) have run, and the agent is not running unless a prompt arrived after its
  last idle transition.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from conformance.invariants import log_violations
from simulator.scenario import Check, Trace

from . import events as ev

Event = dict[str, Any]


@dataclass(frozen=True)
class Violation:
    """A failed check: what is wrong, and the timeline index where it shows (or ``None``)."""

    message: str
    at: int | None = None


@dataclass(frozen=True)
class LoopCheck:
    """A named check over a :class:`TraceView`."""

    name: str
    fn: Callable[[TraceView], Violation | None]
    description: str = ""

    def evaluate(self, view: TraceView) -> Violation | None:
        """The violation, or ``None`` when the check holds (a raising check is a violation)."""
        try:
            return self.fn(view)
        except Exception as exc:
            return Violation(f"check raised {type(exc).__name__}: {exc}")

    def as_check(self) -> Check:
        """The simulator ``Check`` that fails with this check's message."""

        def run(trace: Trace) -> str | None:
            found = self.evaluate(TraceView.of(trace))
            return None if found is None else found.message

        return Check(run, self.name)


# --------------------------------------------------------------------------- reading a trace


@dataclass
class TraceView:
    """Indexed access to a scenario timeline (entries keep their timeline index as ``_i``)."""

    timeline: list[Event]
    _cache: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def of(cls, trace: Trace) -> TraceView:
        # Several checks read the same trace: share one view per trace object.
        cached = getattr(trace, "_loop_view", None)
        if isinstance(cached, TraceView) and cached.timeline is trace.timeline:
            return cached
        view = cls(trace.timeline)
        object.__setattr__(trace, "_loop_view", view)
        return view

    @cached_property
    def indexed(self) -> list[Event]:
        return [{**e, "_i": i} for i, e in enumerate(self.timeline)]

    def of_kind(self, kind: str, **where: Any) -> list[Event]:
        return [e for e in self.indexed if e.get("kind") == kind and ev.matches(e, where)]

    @cached_property
    def agents(self) -> list[str]:
        seen: dict[str, None] = {}
        for e in self.indexed:
            if e.get("kind") in ("log", "op") or str(e.get("kind", "")).startswith("agent/"):
                if isinstance(e.get("agent"), str):
                    seen[e["agent"]] = None
        return list(seen)

    def log(self, agent: str) -> list[Event]:
        """The agent's session events ``{type, seq, data, _i}`` in order."""
        key = f"log:{agent}"
        if key not in self._cache:
            self._cache[key] = [
                {"type": e["type"], "seq": e["seq"], "data": e.get("data", {}), "_i": e["_i"]}
                for e in self.of_kind("log", agent=agent)
            ]
        out: list[Event] = self._cache[key]
        return out

    def turns(self, agent: str, upto: int | None = None) -> list[dict[str, Any]]:
        """Per turn of the log (the first ``upto`` session events): number, prompts, ended."""
        out: list[dict[str, Any]] = []
        for e in self.log(agent)[:upto]:
            if e["type"] == "turn/start":
                out.append({"turn": e["data"].get("turn"), "prompts": [], "ended": False,
                            "reason": None, "_i": e["_i"]})
            elif e["type"] == "user/message" and out:
                out[-1]["prompts"].append(ev.texts(e["data"].get("content")))
            elif e["type"] == "turn/end" and out:
                out[-1]["ended"] = True
                reason = e["data"].get("reason") or {}
                out[-1]["reason"] = reason.get("kind") if isinstance(reason, Mapping) else reason
                out[-1]["end_i"] = e["_i"]
        return out

    def refused(self) -> set[int]:
        """Indices of the ``op`` events whose call raised: an ``op/error`` answers the latest
        ``op`` of the same actor, kind and agent (events the call itself caused may lie between)."""
        out: set[int] = set()
        last: dict[tuple[Any, Any, Any], int] = {}
        for e in self.indexed:
            key = (e.get("by"), e.get("op"), e.get("agent"))
            if e.get("kind") == "op":
                last[key] = e["_i"]
            elif e.get("kind") == "op/error" and key in last:
                out.add(last.pop(key))
        return out

    def sends(self, agent: str) -> list[Event]:
        """Prompts queued for a next turn: ``send``, and ``steer`` while not running (STEER-1).
        A call made on a disposed agent, or one that raised, queued nothing (DISP-3)."""
        refused = self.refused()
        return [
            e for e in self.of_kind("op", agent=agent)
            if (e.get("op") == "send" or (e.get("op") == "steer" and e.get("status") != "running"))
            and e.get("status") != "disposed" and e["_i"] not in refused
        ]

    def excused(self, agent: str, after: int, before: int | None = None) -> bool:
        """Whether a cancel, a disposal or a contained failure between ``after`` and ``before``
        may have dropped a queued prompt."""
        for e in self.indexed[after + 1: before]:
            if e.get("agent") != agent:
                continue
            if e.get("kind") == "op" and e.get("op") in ("cancel", "dispose"):
                return True
            if e.get("kind") == "agent/error" or (e.get("kind") == "agent/status" and e.get("status") == "disposed"):
                return True
        return False

    def release(self, waiter: str) -> Event | None:
        found = self.of_kind("waiter/released", waiter=waiter)
        return found[0] if found else None

    def registration(self, waiter: str) -> Event | None:
        found = [e for e in self.of_kind("op") if e.get("op") == "when_idle" and e.get("waiter") == waiter]
        return found[0] if found else None


# --------------------------------------------------------------------------- invariants


def _log_check(view: TraceView) -> Violation | None:
    for agent in view.agents:
        log = view.log(agent)
        problems = log_violations([{k: v for k, v in e.items() if k != "_i"} for e in log])
        if problems:
            return Violation(f"agent {agent}: {problems[0]}", log[0]["_i"] if log else None)
    return None


_LEGAL = {("idle", "running"), ("running", "idle"), ("idle", "disposed"), ("running", "disposed")}


def _status_check(view: TraceView) -> Violation | None:
    for agent in view.agents:
        current = "idle"
        for e in view.of_kind("agent/status", agent=agent):
            new = e.get("status")
            if (current, new) not in _LEGAL:
                what = "a repeated status" if current == new else "an illegal transition"
                return Violation(f"agent {agent}: {what} {current} -> {new} (STATUS-1)", e["_i"])
            current = str(new)
    return None


def _turn_numbers_check(view: TraceView) -> Violation | None:
    for agent in view.agents:
        last = 0
        for e in view.log(agent):
            if e["type"] == "turn/start":
                n = e["data"].get("turn")
                if not isinstance(n, int) or n <= last:
                    return Violation(f"agent {agent}: turn {n} started after turn {last} (LOOP-3)", e["_i"])
                last = n
    return None


def _prompts_check(view: TraceView) -> Violation | None:
    for agent in view.agents:
        ran: dict[str, list[int]] = {}
        for turn in view.turns(agent):
            for text in turn["prompts"]:
                ran.setdefault(text, []).append(turn["_i"])
        steered = [e for e in view.of_kind("op", agent=agent) if e.get("op") == "steer" and e.get("status") == "running"]
        sent: dict[str, list[Event]] = {}
        for e in view.sends(agent):
            sent.setdefault(str(e.get("text")), []).append(e)
        for text, runs in ran.items():
            allowed = len(sent.get(text, [])) + sum(1 for s in steered if s.get("text") == text)
            if len(runs) > allowed:
                return Violation(f"agent {agent}: prompt {text!r} ran {len(runs)} times, sent {allowed}", runs[-1])
        for text, sends in sent.items():
            needed = [s for s in sends if not view.excused(agent, s["_i"])]
            if len(ran.get(text, [])) < len(needed):
                return Violation(
                    f"agent {agent}: prompt {text!r} was sent and never cancelled but never ran", needed[-1]["_i"]
                )
    return None


def _idle_check(view: TraceView) -> Violation | None:
    for rel in view.of_kind("waiter/released"):
        agent, name = str(rel.get("agent")), str(rel.get("waiter"))
        reg = view.registration(name)
        if reg is None or rel.get("status") == "disposed":
            continue
        log_len = int(rel.get("log_len", 0))
        done = [t for t in view.turns(agent, log_len) if t["ended"]]
        ran = [p for t in done for p in t["prompts"]]
        for s in view.sends(agent):
            if s["_i"] > reg["_i"]:
                break
            if s.get("text") not in ran and not view.excused(agent, s["_i"], rel["_i"]):
                return Violation(
                    f"when_idle() {name!r} resolved before prompt {s.get('text')!r} (sent before it) "
                    f"had run (IDLE-2)", rel["_i"]
                )
        if rel.get("status") == "running":
            idles = [e["_i"] for e in view.of_kind("agent/status", agent=agent, status="idle") if e["_i"] < rel["_i"]]
            since = max([reg["_i"], *idles])
            if not any(since < s["_i"] < rel["_i"] for s in view.sends(agent)):
                return Violation(
                    f"when_idle() {name!r} resolved while agent {agent} was running and no prompt "
                    f"had arrived since its last idle transition (IDLE-2)", rel["_i"]
                )
    return None


INVARIANTS: tuple[LoopCheck, ...] = (
    LoopCheck("LOG", _log_check, "LOG-3..6: the session log is balanced and nested"),
    LoopCheck("STATUS-1", _status_check, "legal status transitions only"),
    LoopCheck("LOOP-3", _turn_numbers_check, "turn numbers strictly increase"),
    LoopCheck("prompts", _prompts_check, "no prompt runs twice; an uncancelled prompt runs"),
    LoopCheck("IDLE-2", _idle_check, "when_idle() resolves only at quiescence"),
)


# --------------------------------------------------------------------------- scenario checks


def released_after_turn(waiter: str, prompt: str) -> LoopCheck:
    """``when_idle()`` ``waiter`` resolves only after the turn that ran ``prompt`` ended."""

    def check(view: TraceView) -> Violation | None:
        rel = view.release(waiter)
        if rel is None:
            return Violation(f"when_idle() {waiter!r} never resolved")
        agent = str(rel.get("agent"))
        turns = [t for t in view.turns(agent, int(rel.get("log_len", 0))) if prompt in t["prompts"]]
        if not turns:
            return Violation(
                f"when_idle() {waiter!r} resolved before prompt {prompt!r} ran: its turn had not "
                f"started (agent {agent} was {rel.get('status')})", rel["_i"]
            )
        if not any(t["ended"] for t in turns):
            return Violation(
                f"when_idle() {waiter!r} resolved while the turn running prompt {prompt!r} was "
                f"still open", rel["_i"]
            )
        return None

    return LoopCheck(f"released_after_turn({waiter}, {prompt})", check,
                     f"when_idle() {waiter} resolves only after {prompt}'s turn ended")


def ran(prompt: str, times: int = 1, agent: str | None = None) -> LoopCheck:
    """``prompt`` ran in exactly ``times`` turns (0: never ran)."""

    def check(view: TraceView) -> Violation | None:
        agents = [agent] if agent else view.agents
        hits = [t for a in agents for t in view.turns(a) if prompt in t["prompts"]]
        if len(hits) != times:
            at = hits[-1]["_i"] if hits else None
            return Violation(f"prompt {prompt!r} ran {len(hits)} time(s), expected {times}", at)
        return None

    return LoopCheck(f"ran({prompt}, {times})", check)


def same_turn(prompts: Sequence[str], agent: str | None = None) -> LoopCheck:
    """One turn ran every prompt of ``prompts`` (LOOP-2: prompts queued before a turn starts are
    batched into it)."""
    wanted = list(prompts)

    def check(view: TraceView) -> Violation | None:
        agents = [agent] if agent else view.agents
        turns = [t for a in agents for t in view.turns(a)]
        if any(all(p in t["prompts"] for p in wanted) for t in turns):
            return None
        ran_in = {p: [t["turn"] for t in turns if p in t["prompts"]] for p in wanted}
        said = ", ".join(f"{p!r} in turn(s) {ran_in[p]}" if ran_in[p] else f"{p!r} never" for p in wanted)
        first = next((t for t in turns if any(p in t["prompts"] for p in wanted)), None)
        return Violation(f"prompts {wanted} did not run in the same turn: {said} (LOOP-2)",
                         first["_i"] if first else None)

    return LoopCheck(f"same_turn({', '.join(wanted)})", check, "the prompts ran in one turn (LOOP-2)")


def statuses(expected: Sequence[str], agent: str | None = None) -> LoopCheck:
    """The agent's ``agent/status`` values, in order, before the world closed the service."""

    def check(view: TraceView) -> Violation | None:
        a = agent or (view.agents[0] if view.agents else "a")
        closed = view.of_kind("world/closing")
        end = closed[0]["_i"] if closed else len(view.timeline)
        got = [e["status"] for e in view.of_kind("agent/status", agent=a) if e["_i"] < end]
        if got != list(expected):
            return Violation(f"agent {a} statuses {got}, expected {list(expected)}")
        return None

    return LoopCheck(f"statuses({', '.join(expected)})", check)


def turn_ends(expected: Sequence[str], agent: str | None = None) -> LoopCheck:
    """The kinds of the agent's ``turn/end`` reasons, in order."""

    def check(view: TraceView) -> Violation | None:
        a = agent or (view.agents[0] if view.agents else "a")
        got = [t["reason"] for t in view.turns(a)]
        if got != list(expected):
            return Violation(f"agent {a} turn-end reasons {got}, expected {list(expected)}")
        return None

    return LoopCheck(f"turn_ends({', '.join(expected)})", check)


def event(kind: str, where: Mapping[str, Any] | None = None, count: int | None = None) -> LoopCheck:
    """At least one (or exactly ``count``) timeline event of ``kind`` matching ``where``."""

    def check(view: TraceView) -> Violation | None:
        found = view.of_kind(kind, **dict(where or {}))
        if count is None and not found:
            return Violation(f"no {kind} event matching {dict(where or {})}")
        if count is not None and len(found) != count:
            return Violation(f"{len(found)} {kind} event(s) matching {dict(where or {})}, expected {count}",
                             found[count]["_i"] if len(found) > count else None)
        return None

    return LoopCheck(f"event({kind})", check)


def no_event(kind: str, where: Mapping[str, Any] | None = None) -> LoopCheck:
    """No timeline event of ``kind`` matching ``where``."""

    def check(view: TraceView) -> Violation | None:
        found = view.of_kind(kind, **dict(where or {}))
        if found:
            return Violation(f"unexpected {kind} event matching {dict(where or {})}", found[0]["_i"])
        return None

    return LoopCheck(f"no_event({kind})", check)


def before(first: tuple[str, Mapping[str, Any]], then: tuple[str, Mapping[str, Any]]) -> LoopCheck:
    """The first event matching ``first`` comes before the first matching ``then``."""

    def check(view: TraceView) -> Violation | None:
        a = view.of_kind(first[0], **dict(first[1]))
        b = view.of_kind(then[0], **dict(then[1]))
        if not a or not b:
            return Violation(f"missing {first[0] if not a else then[0]} event")
        if a[0]["_i"] > b[0]["_i"]:
            return Violation(f"{first[0]} {dict(first[1])} came after {then[0]} {dict(then[1])}", b[0]["_i"])
        return None

    return LoopCheck(f"before({first[0]}, {then[0]})", check)


def evaluate_all(trace: Trace, checks: Sequence[LoopCheck]) -> list[tuple[str, Violation]]:
    """``(check name, violation)`` for every failing check (for reports and diagrams)."""
    view = TraceView.of(trace)
    out: list[tuple[str, Violation]] = []
    for check in checks:
        found = check.evaluate(view)
        if found is not None:
            out.append((check.name, found))
    return out
