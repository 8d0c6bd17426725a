"""What must hold after a scenario run: the always-on oracles and the checks a scenario names.

A check reads the run's timeline through a :class:`TraceView`, so it judges a live run and a
trace loaded from a race cassette alike. It returns ``None`` or a :class:`Violation` (a message,
the rule ids it breaks, and the timeline index where it shows, which diagrams highlight).
``judge`` runs every check once and gives the run's :class:`Verdict`.

The oracles (``ORACLES``) need no scenario: they hold for any run of any correct implementation
(each names the rule ids it checks):

* ``LOG`` — LOG-3..6 on every agent's session log, steps counted from 1 within each turn (0b;
  ``conformance.invariants``);
* ``STATUS-1`` — only legal status transitions, no repeated status, nothing after ``disposed``;
* ``LOOP-3`` — each turn's number is the last one's + 1 (a resumed log's included);
* ``prompts`` — no prompt runs twice; a prompt sent and not later cancelled runs (MARKER-1), and so
  does steering, in its turn or re-queued as a prompt (LOOP-8, STEER-3);
* ``IDLE-2`` — a released ``when_idle()`` waiter saw quiescence: every prompt queued before its
  release (and not dropped by a cancel or a disposal since) had run to its turn's end, and the
  agent was not running; and every waiter is released once the agent settled;
* ``CANCEL-2`` — a prompt still queued (or steering still waiting) when ``cancel()`` comes never
  runs; ``MARKER-1`` — a turn ends ``aborted`` only if an ``abort()`` or ``cancel()`` came during
  it (a cancel never governs a later turn);
* ``LOOP-2`` — a turn drains every prompt queued before its driver woke for it (its ``running``
  status, or the end of the driver turn before it; else its ``turn/start``);
* ``MAXTOK`` — a ``max-tokens`` step makes the turn end ``max-tokens`` unless disposed, aborted or
  failed; ``max-tokens`` never appears without such a step; a ``max-tokens`` step dispatches no
  tool call; a turn with an ``error`` event ends ``error`` (or is aborted or disposed); a turn
  closed after a disposal ends ``disposed``;
* ``TOOLS`` — a step's tool calls do not overlap and run in the order of its message's tool-call
  blocks (TOOL-1); a failing tool becomes an ``is_error``
  result (TOOL-3); a result is logged under its call's id (TOOL-4); an abort during a tool ends the turn ``aborted`` with no further step
  (TOOL-5); no ``code: null``, and a failed turn's reason carries its error event's code (ERR-7);
* ``STEERING`` — steering logged in a turn that ends normally is followed by a model step
  (STEER-2, CONT-1); steering added by an ``agent/step-end`` or continuation listener joins that
  turn (CONT-2);
* ``DISPOSAL`` — an agent is disposed only by ``dispose()`` (or the world's close), never by a
  failure (ERR-1); no turn starts once it is disposed (DISP-2: disposal ends the driver);
  disposed while running it goes ``running -> disposed`` directly (DISP-5); a
  waiter released by the disposal waits for the driver to close its turn (IDLE-4);
* ``ERR-9`` — a turn logs one ``error`` event at most and is announced through ``agent/error``
  once at most, a late failure (after ``turn/end``) included, naming the turn and step its
  ``error`` event names; ``ERR-10`` — a throwing
  ``agent/turn-end`` listener of a turn closed by a disposal is not announced; ``ANNOUNCED`` —
  one of a turn that had not failed, and a failing flush, is (ERR-10, ERR-6, INJ-2); ``ONCE`` —
  no turn is named by two ``agent/error`` announcements, however it failed (ERR-9); ``ORIGINAL``
  — in process, an announcement carries the error the world raised, not a copy of its message;
* ``SVC-2`` — ``create()`` under the id of a live agent raises; ``SVC-3`` — a resumed agent runs
  on the resumed session id, and is rejected when a ``create()`` of its id succeeded during its
  load (SVC-2); LOOP-3's oracle checks that its turns continue the loaded log's numbers;
* ``NOTIFIED`` — every boundary a turn logs is notified after it (LOOP-4/LOOP-5), the empty step
  a cancel from ``agent/turn-start``/``agent/step-start`` dropped included (CANCEL-STEP), and a
  turn disposed once ``agent/turn-start`` was emitted gets its ``agent/turn-end`` (DISP-1, LOOP-4);
* ``QUEUED`` — every ``send()``/``steer()`` emits ``agent/queued`` with the resolved source and
  ``steering`` true only for a steer of a ``running`` agent, and ``agent/steering`` carries its
  steer's source and names the open turn (LOOP-9, STEER-1);
* ``TRIGGER`` — a turn's trigger carries the source of the first message it drained, or of
  an idle inject's context, and an idle inject's one-shot turn is triggered ``{kind: injection}``
  (LOOP-2, INJ-2);
* ``STEP-ORDER`` — steering is drained before a step opens or after its message, never between,
  and steering waiting when a step opens is drained before its ``step/start`` (LOOP-5, STEER-2);
* ``FLUSH`` — where a flush listener records every flush: each turn is flushed, and the driver
  awaits the flush before it goes idle or runs its next turn, which starts after the turn's
  ``agent/turn-end`` (LOOP-4); an idle inject's one-shot
  turn is flushed (INJ-2), and so is a turn a ``dispose()`` cut short (LOOP-4, DISP-1: the world's
  ``world/closed`` says a recorder listened, so a run with no flush at all is judged too);
* ``IDLE-3`` — a waiter pending when its agent goes idle is released at that transition, before
  the agent's next status (IDLE-3, IDLE-2);
* ``WARNED`` — a throwing notification listener is logged as a warning under the
  implementation's logger (ERR-12);
* ``problems`` — what the world itself saw go wrong (an actor or listener that raised, a fake
  model called past its script, an agent that never settled, a notification that stopped at a
  listener that threw: PY-2).

In plain worlds (no Python body that could rewrite a step's message or a request) also
``PLAIN_ORACLES``: ``ASSEMBLY`` (ASM-1/3, and ASM-2 for a text, reasoning or tool-call block
that never closes: its deltas; a max-tokens step's message without its tool calls,
and none when nothing remains, MAXTOK-5; a model's ``finish{error}`` message and code carried
into the error event, FINISH-1, ERR-7), ``CONTINUED`` (every step of a turn that ended completed or max-tokens
ends with one ``agent/turn-continuation`` call, told CONT-1's default: LOOP-5, CONT-1; the world
records each call), ``RAISED`` (a model stream that raised: no message
for its step, its turn ended with the raised message and code, FINISH-1/2), ``UNCAUSED`` (a turn
ends ``error`` only when something it was given failed since the turn before: a model stream, a
throwing listener, a tool, a call's bad input; section 6, FINISH-1/2, ERR-2), ``HISTORY`` (LOG-7), ``CHUNKS`` (every chunk a
fake model streamed to its end is logged, and its usage: LOG-3, LOOP-5, ASM-4), ``ARGS`` (a
tool receives its raw arguments parsed as TOOL-2 says) and ``DATA`` (every session event's data
has spec 0's keys and 0b's shapes: sources, triggers, reasons, blocks, tool calls and results,
codes; ``conformance.invariants.data_violations``).
"""

from __future__ import annotations

import bisect
import hashlib
import json
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import TYPE_CHECKING, Any

import orjson

import simulator
from conformance.fakes.model import REQUEST_KEYS, history_digest
from conformance.invariants import data_violations, log_violations

from . import events as ev
from .model import CheckSpec, ScenarioError

if TYPE_CHECKING:
    from .trace import Trace

Event = dict[str, Any]

_MAP = (dict, Mapping)
"""``isinstance(x, _MAP)`` is ``isinstance(x, Mapping)``, with the common case (a plain dict)
decided before the ABC machinery runs: the oracles ask it of every event they read."""


@dataclass(frozen=True)
class Violation:
    """A failed check: what is wrong, the rule ids it breaks, and the timeline index where it
    shows (or ``None``)."""

    message: str
    at: int | None = None
    rules: tuple[str, ...] = ()


@dataclass(frozen=True)
class LoopCheck:
    """A named check over a :class:`TraceView` (``rules``: the rule ids it checks)."""

    name: str
    fn: Callable[[TraceView], Violation | None]
    description: str = ""
    rules: tuple[str, ...] = ()

    def evaluate(self, view: TraceView) -> Violation | None:
        """The violation, or ``None`` when the check holds (a raising check is a violation)."""
        try:
            found = self.fn(view)
        except Exception as exc:
            return Violation(f"check raised {type(exc).__name__}: {exc}", rules=self.rules)
        if found is not None and not found.rules and self.rules:
            found = Violation(found.message, found.at, self.rules)
        return found


@dataclass(frozen=True)
class Finding:
    """One failed check of a run."""

    check: str
    violation: Violation

    @property
    def message(self) -> str:
        return self.violation.message

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"check": self.check, "message": self.violation.message, "at": self.violation.at}
        if self.violation.rules:
            out["rules"] = list(self.violation.rules)
        return out


@dataclass
class Verdict:
    """The outcome of judging a run: every failed check, in check order."""

    findings: list[Finding] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.findings

    @property
    def checks(self) -> list[str]:
        return [f.check for f in self.findings]

    @property
    def rules(self) -> list[str]:
        """The rule ids of the failed checks (in order, without repeats)."""
        out: dict[str, None] = {}
        for f in self.findings:
            for rid in f.violation.rules:
                out[rid] = None
        return list(out)


class VerdictMemo:
    """The verdicts of one search, by timeline: a search's schedules mostly reproduce a timeline
    it has seen (a deviation that commutes with what it swaps: about nine in ten of a hunt
    window's schedules and of a window-1 exploration's), and a verdict is a pure function of the
    timeline and of whether the run kept plain order (``TraceView.fifo``), so judging it again
    would cost a millisecond for nothing. Keyed by the timeline's bytes (orjson: about 30 us;
    it writes a NaN as null, and no schedule turns a logged value from one into the other); a
    timeline orjson cannot encode is judged every time. One memo serves one set of checks."""

    def __init__(self) -> None:
        self._seen: dict[bytes, list[Finding]] = {}
        self._checks: Sequence[LoopCheck] | None = None
        self.hits = 0

    def judge(self, trace: Trace, checks: Sequence[LoopCheck]) -> Verdict:
        if self._checks is None:
            self._checks = checks
        elif checks is not self._checks and list(checks) != list(self._checks):
            raise ValueError("a VerdictMemo serves one set of checks")
        try:
            text = orjson.dumps(trace.timeline)
            # a digest, not the text, is kept: a long search must not hold every timeline it saw
            key = (b"F" if trace.strategy == "fifo" else b"S") + hashlib.blake2b(text, digest_size=16).digest()
        except (TypeError, orjson.JSONEncodeError):  # not plain JSON (orjson also refuses ints past 64 bits)
            return judge(trace, checks)
        found = self._seen.get(key)
        if found is not None:
            self.hits += 1
            return Verdict(list(found))
        verdict = judge(trace, checks)
        self._seen[key] = list(verdict.findings)
        return verdict


# --------------------------------------------------------------------------- reading a trace


DISPOSERS = ("dispose", "cancel_driver")
"""The ops that dispose an agent: ``dispose()``, and cancelling its driver's task (PY-1: the
agent ends ``disposed``). Where a disposal *excuses* (a prompt dropped, a status nothing else
explains, a turn cut short) either counts; what DISP-* require of ``dispose()`` itself (running ->
disposed with nothing between, the cut turn still flushed) is judged of ``dispose()`` only: a
cancelled driver stops at its next suspension, and PY-1 asks only that it end disposed, balanced."""


class TraceView:
    """Indexed access to a scenario timeline (entries keep their timeline index as ``_i``).

    The indices every oracle reads (entries by kind, by kind and agent, the agents, the refused
    operations) are built in one pass when the view is made: the hunt judges every window run,
    and one pass over the timeline costs less than one per index."""

    def __init__(self, timeline: Sequence[Event], *, fifo: bool = False) -> None:
        self.timeline = timeline
        self.fifo = fifo
        """Whether the run followed plain asyncio order (no choice taken, no timer fired early):
        the few observations only plain order makes sound are judged only then."""
        self._cache: dict[Any, Any] = {}
        indexed: list[Event] = []
        by_kind: dict[str, list[Event]] = {}
        by_kind_agent: dict[tuple[str, Any], list[Event]] = {}
        agents: dict[str, None] = {}
        answers: dict[int, int] = {}  # op/error index -> the op it answers
        last_op: dict[tuple[Any, Any, Any], int] = {}
        every_op: dict[tuple[Any, Any, Any], list[int]] = {}
        aliases: dict[str, Any] = {}  # a call id a tools/execute plugin set in place -> the call's own
        for i, e in enumerate(timeline):
            x = dict.copy(e)  # a plain dict's copy is a memcpy: cheaper than {**e, "_i": i}
            x["_i"] = i
            indexed.append(x)
            kind = e.get("kind")
            name = kind if type(kind) is str else str(kind)
            agent = e.get("agent")
            found = by_kind.get(name)
            if found is None:
                by_kind[name] = [x]
            else:
                found.append(x)
            found = by_kind_agent.get((name, agent))
            if found is None:
                by_kind_agent[(name, agent)] = [x]
            else:
                found.append(x)
            if name == "op":
                if isinstance(agent, str):
                    agents[agent] = None
                key = (e.get("by"), e.get("op"), agent)
                last_op[key] = i
                every_op.setdefault(key, []).append(i)
            elif name == "op/error":
                # an ``op/error`` answers the latest ``op`` of the same actor, kind and agent, or
                # the one it names (``nth``: an awaitable's later failure)
                key = (e.get("by"), e.get("op"), agent)
                nth, ops = e.get("nth"), every_op.get(key, ())
                if isinstance(nth, int) and 0 < nth <= len(ops):
                    answers[i] = ops[nth - 1]
                    if last_op.get(key) == ops[nth - 1]:
                        del last_op[key]
                elif key in last_op:
                    answers[i] = last_op.pop(key)
            elif (name == "log" or name.startswith("agent/")) and isinstance(agent, str):
                agents[agent] = None
            elif name == "waterfall/edited":
                edited = e.get("fields")
                if isinstance(edited, dict) and isinstance(edited.get("call_id"), str):
                    aliases[edited["call_id"]] = e.get("call_id")
            elif aliases and (name == "tool/start" or name == "tool/done") and e.get("call_id") in aliases:
                # a plugin edited the call's id in place before the tool ran: the fake tool's record
                # is of the call the loop logged under the model's id
                x["call_id"] = aliases[e["call_id"]]
        self.indexed = indexed
        self._by_kind = by_kind
        self._by_kind_agent = by_kind_agent
        self.agents: list[str] = list(agents)
        self._answers = answers
        self._refused = set(answers.values())

    @classmethod
    def of(cls, trace: Trace) -> TraceView:
        # Several checks read the same trace: share one view per trace object.
        cached = getattr(trace, "_view", None)
        if isinstance(cached, TraceView) and cached.timeline is trace.timeline:
            return cached
        view = cls(trace.timeline, fifo=trace.strategy == "fifo")
        object.__setattr__(trace, "_view", view)
        return view

    def of_kind(self, kind: str, **where: Any) -> list[Event]:
        """The events of ``kind`` matching ``where`` (a filter on ``agent`` is indexed)."""
        if "agent" in where and len(where) == 1:
            return list(self._by_kind_agent.get((kind, where["agent"]), []))
        found = self._by_kind.get(kind, [])
        return [e for e in found if ev.matches(e, where)] if where else list(found)

    def log(self, agent: str) -> list[Event]:
        """The agent's session events ``{type, seq, data, _i}`` in order."""
        key = ("log", agent)
        out: list[Event] | None = self._cache.get(key)
        if out is None:
            # An entry the world recorded has them all: the indexed entry itself serves (the
            # oracles read only these four keys); one without gets the reduced entry it always had.
            out = self._cache[key] = [
                e if "data" in e and "type" in e and "seq" in e
                else {"type": e["type"], "seq": e["seq"], "data": e.get("data", {}), "_i": e["_i"]}
                for e in self._by_kind_agent.get(("log", agent), ())
            ]
        return out

    def turns(self, agent: str, upto: int | None = None) -> list[dict[str, Any]]:
        """Per turn of the log (the first ``upto`` session events) that this run ran (not those
        of a resumed log, ``log`` entries marked ``loaded``): number, prompts (user messages),
        steering texts, reason, and the timeline indices of its start and end."""
        if upto is not None and upto >= len(self.log(agent)):
            upto = None  # the whole log (a waiter released at the end sees all of it): one cache entry
        key = ("turns", agent, upto)
        cached: list[dict[str, Any]] | None = self._cache.get(key)
        if cached is None:
            cached = self._cache[key] = self._turns(agent, upto)
        return cached

    def _turns(self, agent: str, upto: int | None) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        log = self.log(agent)
        for e in log if upto is None else log[:upto]:
            kind, data = e["type"], e["data"]
            if kind == "turn/start":
                trigger = data.get("trigger") if isinstance(data.get("trigger"), _MAP) else {}
                out.append({"turn": data.get("turn"), "prompts": [], "steering": [], "ended": False,
                            "reason": None, "stop": None, "trigger": trigger.get("kind"), "_i": e["_i"],
                            "end_i": None, "events": [e], "loaded": bool(e.get("loaded"))})
                continue
            if not out:
                continue
            current = out[-1]
            if current["ended"]:
                continue
            current["events"].append(e)
            if kind == "user/message":
                current["prompts"].append(ev.texts(data.get("content")))
            elif kind == "steering/message":
                current["steering"].append(ev.texts(data.get("content")))
            elif kind == "turn/end":
                current["ended"] = True
                reason = data.get("reason") or {}
                current["reason"] = reason.get("kind") if isinstance(reason, _MAP) else reason
                current["stop"] = reason.get("reason") if isinstance(reason, _MAP) else None  # aborted{reason}
                current["end_i"] = e["_i"]
        # A resumed log's turns ran before this run: the run's oracles judge the turns it ran.
        return [t for t in out if not t["loaded"]]

    def answered(self, error: Event) -> Event | None:
        """The ``op`` an ``op/error`` answers (as :meth:`refused` pairs them), if any."""
        i = self._answers.get(error["_i"])
        return None if i is None else self.indexed[i]

    def refused(self) -> set[int]:
        """Indices of the ``op`` events whose call raised: an ``op/error`` answers the latest
        ``op`` of the same actor, kind and agent (events the call itself caused may lie between),
        or, when it names one (``nth``: an awaitable's later failure), that one."""
        return self._refused

    def ops(self, agent: str, *names: str) -> list[Event]:
        """The agent's ``op`` events (only ``names`` when given) that did not raise."""
        key = ("ops", agent, names)
        cached: list[Event] | None = self._cache.get(key)
        if cached is None:
            refused = self._refused
            cached = self._cache[key] = [e for e in self._by_kind_agent.get(("op", agent), ())
                                         if (not names or e.get("op") in names) and e["_i"] not in refused]
        return cached

    def sends(self, agent: str) -> list[Event]:
        """Prompts queued for a next turn: ``send``, and ``steer`` while not running (STEER-1).
        A call made on a disposed agent, or one that raised, queued nothing (DISP-3)."""
        return [
            e for e in self.ops(agent, "send", "steer")
            if (e.get("op") == "send" or e.get("status") != "running") and e.get("status") != "disposed"
        ]

    def steers(self, agent: str) -> list[Event]:
        """Steering given while the agent was running."""
        return [e for e in self.ops(agent, "steer") if e.get("status") == "running"]

    def stops(self, agent: str, *, close: bool = True) -> list[int]:
        """Indices of what may drop queued work: cancels and disposals, and (``close``) the
        world's final close. The close comes after the world settled the agent, so a prompt
        still unrun then was lost, not dropped: ``close=False`` leaves it out."""
        key = ("stops", agent, close)
        cached: list[int] | None = self._cache.get(key)
        if cached is None:
            cached = self._cache[key] = self._stops(agent, close)
        return cached

    def disposals(self, agent: str) -> list[int]:
        """Indices of the agent's ``dispose()`` calls and of its ``disposed`` status, in order."""
        key = ("disposals", agent)
        cached: list[int] | None = self._cache.get(key)
        if cached is None:
            cached = self._cache[key] = sorted(
                [e["_i"] for e in self.ops(agent, *DISPOSERS)]
                + [e["_i"] for e in self.of_kind("agent/status", agent=agent) if e.get("status") == "disposed"])
        return cached

    def disposed_at(self, agent: str) -> int:
        """Index of the agent's first disposal (``disposals``), or the timeline's length."""
        found = self.disposals(agent)
        return found[0] if found else len(self.timeline)

    def closings(self, caller: bool | None = None) -> list[int]:
        """Indices of the ``world/closing`` entries: every one, a caller's ``close()`` only
        (``caller=True``: the entry names ``by``), or the world's own close only (``False``: once
        nothing is left to act)."""
        key = ("closings", caller)
        cached: list[int] | None = self._cache.get(key)
        if cached is None:
            cached = self._cache[key] = [e["_i"] for e in self.of_kind("world/closing")
                                         if caller is None or ("by" in e) == caller]
        return cached

    def _stops(self, agent: str, close: bool) -> list[int]:
        final = self.closings(caller=False)
        end = final[0] if final and not close else len(self.timeline)
        out = [e["_i"] for e in self.ops(agent, "cancel", *DISPOSERS)]
        out += [e["_i"] for e in self.of_kind("agent/status", agent=agent)
                if e.get("status") == "disposed" and e["_i"] < end]
        # a caller's close() disposes like dispose(); the world's own counts where ``close`` says
        out += self.closings() if close else self.closings(caller=True)
        return sorted(out)

    def woken(self, agent: str) -> dict[int, int]:
        """Per turn of ``agent`` a message opened (by its ``turn/start`` index): the earliest point
        its driver may have taken its batch at. For the first turn after idle, the driver's wake
        (its ``running`` status); for a turn back to back with the previous driver turn, that
        turn's end (whether a loop drains before or after awaiting its flush is its own); the
        ``turn/start`` itself when neither is observed. A loop may take its batch there and log
        ``turn/start`` a task later (LOOP-2 says a turn drains what is queued, not that the drain
        and ``turn/start`` are one step): what another task queues in between may wait for the
        next turn. An idle inject's one-shot turn is no driver's turn: it may come in between."""
        key = ("woken", agent)
        cached: dict[int, int] | None = self._cache.get(key)
        if cached is None:
            running = [e["_i"] for e in self.of_kind("agent/status", agent=agent) if e.get("status") == "running"]
            cached, after = {}, -1
            for t in self.turns(agent):
                begin = t["_i"]
                if t["trigger"] == "injection":
                    continue
                if t["trigger"] == "message":
                    wake = next((i for i in running if after < i < begin), None)
                    cached[begin] = wake if wake is not None else after if after >= 0 else begin
                after = t["end_i"] if t["end_i"] is not None else len(self.timeline)
            self._cache[key] = cached
        return cached

    def drainers(self, agent: str, at: int) -> tuple[list[dict[str, Any]], bool]:
        """The turns a message opened that may have drained a prompt queued at ``at``: each one
        opening after it, up to the first whose driver woke after it (:meth:`woken`), which must
        have (LOOP-2); and whether that one came (``False``: none had to)."""
        woken = self.woken(agent)
        out: list[dict[str, Any]] = []
        for t in self.turns(agent):
            if t["_i"] > at and t["trigger"] == "message":
                out.append(t)
                if woken[t["_i"]] > at:
                    return out, True
        return out, False

    def excused(self, agent: str, after: int, before: int | None = None, *, close: bool = True) -> bool:
        """Whether a cancel, a disposal or a contained failure between ``after`` and ``before``
        may have dropped a queued prompt (``close``: see ``stops``): a failure only where no turn
        was open (ERR-8) or of a turn that opened after ``after``."""
        stop = before if before is not None else len(self.timeline)
        if not close and any(i < after for i in self.closings(caller=False)):
            close = True  # given while the world's own close runs (a listener of an agent it disposed): that close drops it
        if any(after < i < stop for i in self.stops(agent, close=close)):
            return True
        failures = [e for e in self._by_kind_agent.get(("agent/error", agent), ()) if after < e["_i"] < stop]
        if not failures:
            return False
        # A failure drops at most what its own turn drained when it opened: a turn/start rejected
        # (ERR-8: announced with step 0 while no turn is open, whatever turn number it names), a
        # turn/start whose listener threw (ERR-11), a prompt's user/message whose listener threw
        # (the rest of the batch then unlogged). Work queued once that turn had opened, during
        # its flush say, stays queued (ERR-1, ERR-6; LOOP-8 for steering).
        # That turn is the first turn a message opened after ``after`` (LOOP-2: a turn drains all
        # that is queued; an idle inject's one-shot turn drains nothing): a later failing turn
        # excuses nothing, and a failure with no turn open only what no turn opened to drain.
        turns: dict[Any, dict[str, Any]] | None = self._cache.get(("turn_numbers", agent))
        if turns is None:  # asked once per prompt given: the map is built once per view
            turns = self._cache[("turn_numbers", agent)] = {t["turn"]: t for t in self.turns(agent)}
        # (The turns that may have drained it: :meth:`drainers`; the last one must have.)
        drainers, must = self.drainers(agent, after)
        bound = drainers[-1]["_i"] if must else len(self.timeline)
        for e in failures:
            t = turns.get(e.get("turn"))
            if t is not None and any(t is d for d in drainers):
                return True
            no_turn = t is None or t["_i"] > e["_i"] or (
                e.get("step") == 0 and _turn_around(self, agent, e["_i"]) is None)
            if no_turn and bound > e["_i"]:
                return True
        return False

    def first_run(self, agent: str, text: Any) -> int | None:
        """``_first_run_index(self.turns(agent), text)``, with every text's answer found in one
        search (the oracles ask it of every prompt given)."""
        found: dict[Any, int] | None = self._cache.get(("first_runs", agent))
        if found is None:
            found = {}
            for t in self.turns(agent):  # the same search order: the first hit of a text wins
                for e in t["events"]:
                    kind = e["type"]
                    if kind == "user/message":
                        found.setdefault(ev.texts(e["data"].get("content")), int(t["_i"]))
                    elif kind == "steering/message":
                        found.setdefault(ev.texts(e["data"].get("content")), int(e["_i"]))
            self._cache[("first_runs", agent)] = found
        try:
            return found.get(text)
        except TypeError:  # an unhashable text: the plain search
            return _first_run_index(self.turns(agent), text)

    def release(self, waiter: str) -> Event | None:
        found = self.of_kind("waiter/released", waiter=waiter)
        return found[0] if found else None

    def registration(self, waiter: str) -> Event | None:
        return next((e for e in self._by_kind.get("op", ()) if e.get("op") == "when_idle" and e.get("waiter") == waiter),
                    None)


def _ran(turns: list[dict[str, Any]], text: Any) -> list[dict[str, Any]]:
    return [t for t in turns if text in t["prompts"] or text in t["steering"]]


def _first_run_index(turns: list[dict[str, Any]], text: Any) -> int | None:
    """Where ``text`` first started to run: the ``turn/start`` of the first turn whose prompt it
    is (a turn's prompts are taken when it starts: a cancel after its ``turn/start`` governs the
    started turn, CANCEL-1), or the first steering message carrying it."""
    for t in turns:
        for e in t["events"]:
            if e["type"] == "user/message" and ev.texts(e["data"].get("content")) == text:
                return int(t["_i"])
            if e["type"] == "steering/message" and ev.texts(e["data"].get("content")) == text:
                return int(e["_i"])
    return None


# --------------------------------------------------------------------------- the oracles


def _log_check(view: TraceView) -> Violation | None:
    for agent in view.agents:
        log = view.log(agent)
        # log_violations reads an event's type, seq and data alone: the entries go as they are
        problems = log_violations(log)
        if problems:
            rule = problems[0].split(":", 1)[0]
            return Violation(f"agent {agent}: {problems[0]}", log[0]["_i"] if log else None, (rule,))
    return None


def _data_check(view: TraceView) -> Violation | None:
    """Spec 0/0b: every session event's data has the table's keys and the stated shapes."""
    for agent in view.agents:
        log = view.log(agent)
        problems = data_violations(log)
        if problems:
            first = problems[0]
            return Violation(f"agent {agent}: {first}", log[first.position]["_i"], (first.rule,))
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
        loaded = False
        for e in view.log(agent):
            if e["type"] == "turn/start":
                n = e["data"].get("turn")
                if not isinstance(n, int) or n != last + 1:
                    if loaded and not e.get("loaded"):  # the first turn after a resume (SVC-3)
                        return Violation(f"agent {agent}: the loaded log's last turn is {last}, the first turn after "
                                         f"resume() is {n} (SVC-3, LOOP-3: turn numbers continue from the loaded "
                                         "log)", e["_i"], ("SVC-3", "LOOP-3"))
                    return Violation(f"agent {agent}: turn {n} started after turn {last} (LOOP-3: the next turn "
                                     "is the last turn/start's number + 1)", e["_i"], ("LOOP-3",))
                last, loaded = n, bool(e.get("loaded"))
    return None


def _prompts_check(view: TraceView) -> Violation | None:
    for agent in view.agents:
        ran: dict[str, list[int]] = {}
        for turn in view.turns(agent):
            for text in (*turn["prompts"], *turn["steering"]):
                ran.setdefault(text, []).append(turn["_i"])
        given: dict[str, list[Event]] = {}
        for e in view.ops(agent, "send", "steer"):
            if e.get("status") != "disposed":
                given.setdefault(str(e.get("text")), []).append(e)
        for text, runs in ran.items():
            if len(runs) > len(given.get(text, [])):
                return Violation(f"agent {agent}: prompt {text!r} ran {len(runs)} times, given "
                                 f"{len(given.get(text, []))} (LOOP-2)", runs[-1], ("LOOP-2",))
        for text, ops in given.items():
            needed = [e for e in ops if not view.excused(agent, e["_i"], close=False)]
            if len(ran.get(text, [])) < len(needed):
                last = needed[-1]
                failed = [e for e in view.of_kind("agent/error", agent=agent) if e["_i"] > last["_i"]]
                if failed and not (last.get("op") == "steer" and last.get("status") == "running"):
                    return Violation(f"agent {agent}: {last.get('op')} {text!r} was never cancelled but never ran: it "
                                     f"was dropped after a contained failure of turn {failed[0].get('turn')} (ERR-1: a "
                                     "failure ends its own turn, never the loop; ERR-6: a failing flush stops nothing)",
                                     last["_i"], ("ERR-1", "ERR-6"))
                if last.get("op") == "steer" and last.get("status") == "running":
                    return Violation(f"agent {agent}: steering {text!r} was given and never cancelled but never "
                                     "reached the model, as steering or as a later prompt (LOOP-8)", last["_i"],
                                     ("LOOP-8", "STEER-3"))
                if _idle_noop_cancel_before(view, agent, last["_i"]):
                    return Violation(f"agent {agent}: prompt {text!r} was sent after a cancel() on the idle agent "
                                     "with nothing pending, which is a no-op (CANCEL-3), but never ran (MARKER-1)",
                                     last["_i"], ("CANCEL-3", "MARKER-1", "LOOP-1"))
                return Violation(f"agent {agent}: prompt {text!r} was sent and never cancelled but never ran "
                                 "(MARKER-1)", last["_i"], ("MARKER-1", "LOOP-1"))
        found = _consumed_ran_again(view, agent)
        if found is not None:
            return found
    return None


def _cancels_after_status(view: TraceView, agent: str, index: int, status: str) -> Iterator[tuple[int, int | None]]:
    """The agent's ``cancel()`` calls before ``index`` made while its status was ``status``:
    each one's index and that of the agent's last status change before it (``None``: none)."""
    changes = [e["_i"] for e in view.of_kind("agent/status", agent=agent)]
    for c in view.ops(agent, "cancel"):
        if c["_i"] < index and c.get("status") == status:
            yield c["_i"], max((i for i in changes if i < c["_i"]), default=None)


def _window2_cancel_before(view: TraceView, agent: str, index: int) -> bool:
    """Whether a ``cancel()`` before ``index`` came in window 2: the agent running and no turn
    opened since it started running (CANCEL-W2: the turn about to start is dropped; a
    replacement queued there runs in that same running period)."""
    starts = [e["_i"] for e in view.log(agent) if e["type"] == "turn/start"]
    return any(since is not None and not any(since < i < at for i in starts)
               for at, since in _cancels_after_status(view, agent, index, "running"))


def _idle_noop_cancel_before(view: TraceView, agent: str, index: int) -> bool:
    """Whether a ``cancel()`` before ``index`` found the agent idle with nothing queued since it
    last changed status (CANCEL-3: nothing to cancel, so it arms nothing)."""
    given = [e["_i"] for e in view.ops(agent, "send", "steer", "inject")]
    return any(not any((-1 if since is None else since) < i < at for i in given)
               for at, since in _cancels_after_status(view, agent, index, "idle"))


def _consumed_ran_again(view: TraceView, agent: str) -> Violation | None:
    """ERR-11: a turn opened by prompts but holding none of them (its ``turn/start`` listener
    threw) consumed every prompt queued when it opened: none of them runs again unless sent again."""
    turns = view.turns(agent)
    for k, t in enumerate(turns):
        if t["trigger"] != "message" or t["prompts"] or not t["ended"] or t["reason"] != "error":
            continue
        pending = [e for e in view.sends(agent) if e["_i"] < t["_i"]
                   and not any(e["_i"] < u["_i"] < t["_i"] and str(e.get("text")) in u["prompts"] for u in turns[:k])
                   and not view.excused(agent, e["_i"], t["_i"])]
        for text in dict.fromkeys(str(e.get("text")) for e in pending):
            later = [u for u in turns[k + 1:] if text in u["prompts"]]
            again = [e for e in view.ops(agent, "send", "steer") if e["_i"] > t["_i"] and str(e.get("text")) == text]
            if len(later) > len(again):
                return Violation(f"agent {agent}: prompt {text!r} was consumed by turn {t['turn']} (its turn/start "
                                 f"failed: no user/message) yet ran again in turn {later[0]['turn']} (ERR-11: "
                                 "its prompt is consumed)", later[0]["_i"], ("ERR-11",))
    return None


def _idle_check(view: TraceView) -> Violation | None:
    for rel in view.of_kind("waiter/released"):
        agent, name = str(rel.get("agent")), str(rel.get("waiter"))
        reg = view.registration(name)
        if reg is None or rel.get("status") == "disposed":
            continue
        precise = bool(rel.get("precise"))
        # A sampled release is exact: every prompt queued before it counts. One observed only
        # when the awaiting task resumed is late: only what was queued before the registration.
        horizon = rel["_i"] if precise else reg["_i"]
        log_len = int(rel.get("log_len", 0))
        turns = view.turns(agent, log_len)
        done = [p for t in turns if t["ended"] for p in (*t["prompts"], *t["steering"])]
        given = sorted([*view.sends(agent), *view.steers(agent)], key=lambda e: e["_i"])
        for s in given:
            if s["_i"] > horizon:
                break
            if s.get("text") not in done and not view.excused(agent, s["_i"], rel["_i"]):
                w2 = _window2_cancel_before(view, agent, s["_i"])
                return Violation(
                    f"when_idle() {name!r} resolved before prompt {s.get('text')!r} (queued before "
                    f"the release) had run (IDLE-2" + (
                        "; queued after a cancel in window 2, it runs in the same running period: CANCEL-W2)"
                        if w2 else ")"), rel["_i"], ("IDLE-2", "CANCEL-W2") if w2 else ("IDLE-2",))
        if rel.get("status") == "running":
            idles = [e["_i"] for e in view.of_kind("agent/status", agent=agent, status="idle") if e["_i"] < rel["_i"]]
            since = max([reg["_i"], *idles])
            if precise or not any(since < s["_i"] < rel["_i"] for s in view.sends(agent)):
                return Violation(
                    f"when_idle() {name!r} resolved while agent {agent} was running (IDLE-2)", rel["_i"], ("IDLE-2",))
    return None


def _in_drain(view: TraceView, agent: str, op: Event) -> bool:
    """Whether ``op`` was made inside a steering drain: by an ``agent/steering`` listener, or by a
    ``session/event`` listener on a ``steering/message``."""
    return _in_own(view, agent, op, "agent/steering") or _acted_on(view, agent, op) == "steering/message"


_IN_DRAIN = frozenset(("steering/message", "context/message"))
"""What a drain's listener may have logged between two of its steering messages: steering, and an
injection's context (INJ-1 appends into the open turn at once)."""


def _same_drain(view: TraceView, agent: str, start: int, logged: int) -> bool:
    """Whether the agent logged nothing but steering (and injected context) between timeline
    indices ``start`` and ``logged``: the drain under way at ``start`` logged it."""
    return all(e["type"] in _IN_DRAIN for e in view.log(agent) if start < e["_i"] < logged)


def _cancel_check(view: TraceView) -> Violation | None:
    for agent in view.agents:
        # a cancel() on a disposed agent is a no-op (0b): it drops nothing
        cancels = [e for e in view.ops(agent, "cancel") if e.get("status") != "disposed"]
        if not cancels:
            continue
        for s in view.ops(agent, "send", "steer"):
            if s.get("status") == "disposed":
                continue
            started = view.first_run(agent, s.get("text"))
            if started is None:
                continue
            op = next((c for c in cancels if s["_i"] < c["_i"] < started), None)
            if op is not None:
                what = "steering" if s.get("op") == "steer" and s.get("status") == "running" else "prompt"
                # A cancel made inside a drain may find the rest of it taken from the FIFO already
                # (a batch drain logs it after): that steering is delivered, not run after the cancel
                # (STEER-3's oracle reads drains alike; what comes after the cancel is judged there).
                if what == "steering" and _in_drain(view, agent, op) and _same_drain(view, agent, op["_i"], started):
                    continue
                return Violation(
                    f"agent {agent}: {what} {s.get('text')!r} ran although a cancel() came after it was "
                    f"given and before it started (CANCEL-2)", started,
                    ("CANCEL-2",) if what == "prompt" else ("CANCEL-4",))
    return None


_NEW_WORK = ("send", "steer", "inject", "reload", "create")
"""What gives an agent work to run (or a new run of its session) after a ``cancel()``."""


def _idle_cancel_status_check(view: TraceView) -> Violation | None:
    """CANCEL-W1 (and CANCEL-3): a ``cancel()`` made while the agent is idle either drops the
    work queued before it, with no ``agent/status`` for that dropped turn, or finds nothing to
    cancel. Either way the agent has nothing to run: it turns ``running`` again only for work
    given after the cancel."""
    for agent in view.agents:
        runs = [e["_i"] for e in view.of_kind("agent/status", agent=agent) if e.get("status") == "running"]
        if not runs:
            continue
        given = [e["_i"] for e in view.ops(agent, *_NEW_WORK)]
        for c in view.ops(agent, "cancel"):
            if c.get("status") != "idle":
                continue
            at = c["_i"]
            flip = next((i for i in runs if i > at), None)
            if flip is None or any(at < i < flip for i in given):
                continue
            return Violation(f"agent {agent}: a cancel() while idle dropped what was queued, yet the agent turned "
                             "running with no work given since (CANCEL-W1: the dropped turn emits no "
                             "agent/status)", flip, ("CANCEL-W1",))
    return None


def _aborted_turns_check(view: TraceView) -> Violation | None:
    for agent in view.agents:
        stops = [e["_i"] for e in view.ops(agent, "cancel", "abort")]
        for t in view.turns(agent):
            if t["reason"] != "aborted" or t["end_i"] is None:
                continue
            if not any(t["_i"] < i < t["end_i"] for i in stops):
                if any(t["_i"] < i < t["end_i"] for i in view.stops(agent)):  # only a disposal came
                    return Violation(f"agent {agent}: turn {t['turn']} was disposed but ends aborted, not disposed "
                                     "(DISP-1)", t["end_i"], ("DISP-1",))
                if _window2_cancel_before(view, agent, t["_i"]):
                    return Violation(
                        f"agent {agent}: turn {t['turn']} ends aborted but no cancel() or abort() came during it: "
                        "the cancel of window 2 before it dropped only the turn about to start, and the "
                        "replacement runs (CANCEL-W2, MARKER-1)", t["end_i"], ("CANCEL-W2", "MARKER-1"))
                return Violation(
                    f"agent {agent}: turn {t['turn']} ends aborted but no cancel() or abort() came during it "
                    "(a cancel governs exactly one turn)", t["end_i"], ("MARKER-1", "CANCEL-W1", "ABORT-1"))
    return None


_BETWEEN_STEPS = frozenset(("turn/start", "step/end", "turn/end"))
"""Session events after which no step is in flight (LOOP-4/5: a step runs from its steering
drain to its ``step/end``), until the log says otherwise."""


def _no_step_in_flight(log: list[Event], at: int) -> bool:
    """Whether, by the agent's log at timeline index ``at``, no step was in flight: the last
    entry closes a step or a turn, or opens a turn (its ``user/message`` entries included)."""
    for e in reversed(log):
        if e["_i"] > at:
            continue
        if e["type"] == "user/message":
            continue  # a turn's prompts follow its turn/start; an idle inject's are outside any turn
        return e["type"] in _BETWEEN_STEPS
    return True


def _turn_around(view: TraceView, agent: str, at: int) -> dict[str, Any] | None:
    """The agent's turn that was open at timeline index ``at`` (ended since or not), if any."""
    return next((t for t in view.turns(agent) if t["_i"] < at and (t["end_i"] is None or t["end_i"] > at)), None)


def _ended_turn_around(view: TraceView, agent: str, at: int) -> dict[str, Any] | None:
    """The agent's turn that was open at timeline index ``at`` and has ended, if any."""
    return next((t for t in view.turns(agent) if t["_i"] < at and t["end_i"] is not None and at < t["end_i"]), None)


def _stop_reason(op: Event) -> str:
    reason = op.get("reason")
    return reason if isinstance(reason, str) else ("aborted" if op.get("op") == "abort" else "cancelled")


_STEP_OPENING = "agent/step-start"
"""The notification of a step that is logged but has no abort handle yet (CANCEL-STEP)."""


def _deferred_abort_check(view: TraceView) -> Violation | None:
    """ABORT-1: an ``abort()`` made while a turn runs but no step is in flight does nothing; it is
    not deferred to the turn's next step. Judged only where that is certain: an abort done
    synchronously by a listener (inside the notification or waterfall), at a point where the log
    shows no open step, whose reason no other stop of the run shares."""
    for agent in view.agents:
        stops = view.ops(agent, "cancel", "abort")
        if not stops:
            continue
        log = view.log(agent)
        clean: list[Event] = []
        unclear: set[str] = set()
        for op in stops:
            # at agent/step-start the step is logged but has no abort handle yet (CANCEL-STEP)
            if op.get("op") == "abort" and op.get("on") and op.get("status") == "running" \
                    and (_in_own(view, agent, op, _STEP_OPENING) or _no_step_in_flight(log, op["_i"])):
                clean.append(op)
            else:
                unclear.add(_stop_reason(op))
        for op in clean:
            reason = _stop_reason(op)
            if reason in unclear:
                continue
            turn = _ended_turn_around(view, agent, op["_i"])
            if turn is not None and turn["reason"] == "aborted" and turn["stop"] == reason:
                early = _in_own(view, agent, op, _STEP_OPENING)
                return Violation(
                    f"agent {agent}: turn {turn['turn']} ends aborted{{reason: {reason!r}}}, but that abort() came "
                    f"from a {op.get('on')} listener while no step was in flight (it does nothing: it is not "
                    "deferred to a later step" + ("; the step opening has no abort handle yet, CANCEL-STEP)"
                                                  if early else ")"),
                    turn["end_i"], ("ABORT-1", "CANCEL-STEP") if early else ("ABORT-1",))
    return None


_PAST_THE_MODEL_CALL = frozenset(("assistant/chunk", "assistant/message", "usage", "tool/call", "tool/result"))
"""Session events logged only inside a step whose model call has begun: the step is in flight,
its abort handle made, until its ``step/end`` (LOOP-5)."""


def _in_flight_abort_check(view: TraceView) -> Violation | None:
    """ABORT-1: an ``abort()`` aborts the in-flight step, and the turn ends ``aborted``. Judged
    only where the step is surely in flight: a listener's synchronous abort of the agent whose
    session event it heard, that event one of :data:`_PAST_THE_MODEL_CALL` (so the abort lands
    before the step's ``step/end``, with its handle made). The turn may end ``disposed`` or
    ``error`` instead (a disposal wins; which of a later failure and the abort wins is not
    stated), never ``completed`` or ``max-tokens`` (MAXTOK-3)."""
    logs: list[Event] | None = None
    for agent in view.agents:
        for op in view.ops(agent, "abort"):
            if not op.get("on") or op.get("status") != "running":
                continue
            if logs is None:
                logs = view.of_kind("log")
            at = bisect.bisect_left(logs, op["_i"], key=lambda e: e["_i"])  # the log entries before the op
            heard = logs[at - 1] if at else None
            if heard is None or heard.get("agent") != agent or heard.get("type") not in _PAST_THE_MODEL_CALL:
                continue
            turn = _ended_turn_around(view, agent, op["_i"])
            if turn is not None and turn["reason"] in ("completed", "max-tokens"):
                return Violation(
                    f"agent {agent}: turn {turn['turn']} ends {turn['reason']}, but abort() came from a listener of its "
                    f"{heard['type']} (step in flight, before its step/end): the step is aborted and the turn ends "
                    "aborted{reason}", turn["end_i"], ("ABORT-1",))
    return None


def _abort_reason_check(view: TraceView) -> Violation | None:
    """ABORT-1/CANCEL-1: an aborted turn ends with the reason of a ``cancel()`` or ``abort()``
    that came since the agent's previous turn ended (the caller's reason, or the default
    ``aborted`` / ``cancelled`` when it gave none)."""
    for agent in view.agents:
        stops = view.ops(agent, "cancel", "abort")
        since = -1
        for t in view.turns(agent):
            end = t["end_i"]
            if end is None:
                continue
            if t["reason"] == "aborted":
                reason = t["stop"]
                given = {_stop_reason(op) for op in stops if since < op["_i"] < end}
                if given and reason not in given:
                    return Violation(
                        f"agent {agent}: turn {t['turn']} ends aborted{{reason: {reason!r}}}, but the cancel()/abort() "
                        f"calls that could end it gave {sorted(given)!r} (a cancelled or aborted turn carries the "
                        "caller's reason)", end, ("CANCEL-1", "ABORT-1"))
            since = end
    return None


_ERR2_LISTENERS = frozenset(("agent/turn-start", "agent/step-start", "agent/step-end", "agent/request", "agent/step-result",
                    "agent/turn-continuation"))
"""The listeners whose failure ends the turn ``error`` (ERR-2)."""
_OPENING = frozenset(("agent/turn-start", "agent/step-start"))
"""The boundaries whose failure closes the turn without ``agent/turn-end`` (LOOP-4)."""


def _last_log_type(log: list[Event], at: int) -> Any:
    return next((e["type"] for e in reversed(log) if e["_i"] < at), None)


def _boundary_failure_check(view: TraceView) -> Violation | None:
    """ERR-2/ERR-3/ERR-11/LOOP-4: a listener that raises at a turn's boundary (one of ERR-2's
    gates, or a ``session/event`` listener on ``turn/start``) ends that turn ``error`` with exactly
    one ``error`` event and no further step; one on ``agent/turn-start``, ``agent/step-start`` or
    ``turn/start`` gets no ``agent/turn-end``, and one on ``turn/start`` consumes the prompt (no
    ``user/message``). Judged where nothing else ends the turn: no cancel, abort, dispose or close in it."""
    notified = bool(view.of_kind("agent/status"))  # notifications observed at all
    for agent in view.agents:
        raises = view.ops(agent, "raise")
        if not raises:
            continue
        log = view.log(agent)
        # a close() disposes every agent (SVC-7), as a dispose() does
        stops = [op["_i"] for op in view.ops(agent, "cancel", "abort", *DISPOSERS)] + \
                [op["_i"] for a in view.agents for op in view.ops(a, *DISPOSERS) if a != agent] + view.closings()
        for r in raises:
            on, at = r.get("on"), r["_i"]
            at_turn_start = on == "session/event" and _last_log_type(log, at) == "turn/start"
            if r.get("status") != "running" or not (on in _ERR2_LISTENERS or at_turn_start):
                continue
            turn = _ended_turn_around(view, agent, at)
            if turn is None or any(turn["_i"] < i < turn["end_i"] for i in stops):
                continue
            if at_turn_start and turn["trigger"] == "injection":
                continue  # the one-shot inject turn: INJ-2 also allows it to complete
            where = f"a {on} listener raised in turn {turn['turn']}" + (" (on turn/start)" if at_turn_start else "")
            rules = ("ERR-11",) if at_turn_start else ("ERR-2", "ERR-3") if on == "agent/step-end" else ("ERR-2",)
            if turn["reason"] != "error":
                return Violation(f"agent {agent}: {where}, but the turn ends {turn['reason']!r}, not 'error'",
                                 turn["end_i"], rules)
            errors = [e for e in turn["events"] if e["type"] == "error"]
            if len(errors) != 1:
                return Violation(f"agent {agent}: {where}: the turn logs {len(errors)} error events, not exactly one",
                                 turn["end_i"], rules)
            later = [e for e in turn["events"] if e["type"] == "step/start" and e["_i"] > at]
            if later:
                return Violation(f"agent {agent}: {where}, yet step {later[0]['data'].get('step')} opened after it "
                                 "(the failure ends the turn: no further step runs)", later[0]["_i"], rules)
            if at_turn_start:
                prompts = [e for e in turn["events"] if e["type"] == "user/message"]
                if prompts:
                    return Violation(f"agent {agent}: {where}, yet its prompt was logged as a user/message (the "
                                     "failure consumes it)", prompts[0]["_i"], ("ERR-11",))
            if notified and (on in _OPENING or at_turn_start):
                ends = [e for e in view.of_kind("agent/turn-end", agent=agent) if e.get("turn") == turn["turn"]]
                if ends:
                    return Violation(f"agent {agent}: {where}, yet agent/turn-end was notified for it (a turn closed "
                                     "by a boundary failure gets its turn/end but no agent/turn-end)", ends[0]["_i"],
                                     ("LOOP-4",))
    return None


def _dropped_step(events: list[Event], k: int) -> bool:
    """Whether the ``step/start`` at ``events[k]`` opens a step closed empty (its ``step/end``
    next): the step a cancel from ``agent/turn-start`` drops (CANCEL-STEP)."""
    return k + 1 < len(events) and events[k + 1]["type"] == "step/end"


def _steering_after_stop_check(view: TraceView) -> Violation | None:
    """STEER-3/CANCEL-4: no steering is drained into a turn after the ``abort()`` or ``cancel()``
    that ended it: steering waiting at an abort becomes a queued prompt of a new turn, at a
    cancel it is dropped, and steering added afterwards is late (LOOP-8)."""
    for agent in view.agents:
        stops = view.ops(agent, "cancel", "abort")
        if not stops:
            continue
        for t in view.turns(agent):
            if t["reason"] != "aborted" or t["end_i"] is None:
                continue
            governing = [op for op in stops if t["_i"] < op["_i"] < t["end_i"] and _stop_reason(op) == t["stop"]]
            if not governing:
                continue
            stop = governing[-1]
            after = [e for e in t["events"] if e["_i"] > stop["_i"]]
            if any(e["type"] == "step/start" and not _dropped_step(after, k) for k, e in enumerate(after)):
                continue  # a step ran after it: this stop did not end the step (other oracles judge)
            late = {op.get("text") for op in view.ops(agent, "steer") if op["_i"] > stop["_i"]}
            in_drain = _in_drain(view, agent, stop)
            # A stop made inside a drain may find the rest of that drain already taken from the FIFO
            # (a batch drain logs it after): only steering given after the stop is judged there.
            drained = next((e for e in after if e["type"] == "steering/message"
                            and (not in_drain or ev.texts(e["data"].get("content")) in late)), None)
            if drained is not None:
                verb = stop.get("op")
                return Violation(
                    f"agent {agent}: steering {ev.texts(drained['data'].get('content'))!r} was drained into turn "
                    f"{t['turn']} after the {verb}() that ended it (it belongs to a new turn"
                    f"{'' if verb == 'abort' else ', or is dropped'})", drained["_i"],
                    ("STEER-3",) if verb == "abort" else ("CANCEL-4",))
    return None


def _batching_check(view: TraceView) -> Violation | None:
    for agent in view.agents:
        turns = view.turns(agent)
        queued = view.sends(agent)
        stops = view.stops(agent)
        woken = view.woken(agent)
        for t in turns:
            if t["trigger"] != "message":
                continue  # an idle inject's one-shot turn drains nothing
            if t["reason"] in ("error", "disposed"):
                # The batch was taken when the turn started; a failure while its messages were
                # written (a throwing turn/start or user/message listener, ERR-1, ERR-11), or a
                # dispose() there (DISP-1 ends the turn at once), consumes what was not written yet.
                continue
            begin = t["_i"]
            woke = woken[begin]
            for s in queued:
                if s["_i"] > begin:
                    break
                if s["_i"] > woke:
                    continue  # queued once the driver had woken: the drain may come before turn/start
                if any(s["_i"] < i < begin for i in stops):
                    continue
                if view.excused(agent, s["_i"], begin):
                    continue  # a failure before a turn opened took it (ERR-8: a turn/start rejected)
                first = view.first_run(agent, s.get("text"))
                if first is not None and first < begin:
                    continue  # it ran in an earlier turn
                if any(u["reason"] == "error" and s["_i"] < u["_i"] < begin for u in turns):
                    continue  # an earlier turn took it and failed before writing it (ERR-11)
                end = t["end_i"] if t["end_i"] is not None else len(view.timeline)
                if first is None or first > end:
                    took = ", ".join(t["prompts"]) or "none"
                    return Violation(
                        f"agent {agent}: turn {t['turn']} did not take prompt {s.get('text')!r}, queued before it "
                        f"started (it took {took}) (LOOP-2)", begin, ("LOOP-2",))
    return None


def _finishes(turn: dict[str, Any]) -> dict[int, str]:
    out: dict[int, str] = {}
    for e in turn["events"]:
        if e["type"] != "assistant/chunk":
            continue
        chunk = e["data"].get("chunk")
        if isinstance(chunk, _MAP) and chunk.get("type") == "finish":
            reason = chunk.get("reason")
            out[int(e["data"].get("step", 0) or 0)] = str(reason.get("kind") if isinstance(reason, _MAP) else reason)
    return out


def _maxtok_check(view: TraceView) -> Violation | None:
    for agent in view.agents:
        # The world's close disposes the agent when close() gets to it: its disposed status says when.
        # A cancelled driver task disposes the agent where the cancellation lands, at the driver's
        # next suspension (a listener's cancel lands once the driver's stretch ends; a turn run
        # by another task, under a driver that supervises per-turn tasks, goes on meanwhile): the
        # turn may end as it would until then. The agent's `disposed` status, among the
        # disposals, is that moment (PY-1, DISP-1).
        disposals = [i for i in view.disposals(agent) if view.timeline[i].get("op") != "cancel_driver"]
        for t in view.turns(agent):
            if not t["ended"]:
                continue
            reason, where = t["reason"], f"agent {agent}: turn {t['turn']}"
            max_steps = {s for s, k in _finishes(t).items() if k == "max-tokens"}
            if reason == "max-tokens" and not max_steps:
                return Violation(f"{where} ends max-tokens without a max-tokens step (MAXTOK-4)", t["end_i"],
                                 ("MAXTOK-4", "MAXTOK-1"))
            if max_steps and reason == "completed":
                return Violation(f"{where} had a max-tokens step but ends completed (MAXTOK-2)", t["end_i"],
                                 ("MAXTOK-2", "MAXTOK-1"))
            if any(e["type"] == "error" for e in t["events"]) and reason not in ("error", "disposed", "aborted"):
                return Violation(f"{where} logged an error but ends {reason} (MAXTOK-3)", t["end_i"], ("MAXTOK-3", "ERR-2"))
            # An idle inject's one-shot turn is written whole by inject() itself, and INJ-2 gives
            # its shape (it ends completed): disposing while it is written may end it either way,
            # or leave the write as it would be without the dispose: a listener's throw there then
            # ends it error with its error event (ERR-11; indie60c, session 48).
            injection = t["trigger"] == "injection"
            thrown = injection and any(t["_i"] < o["_i"] < t["end_i"] for o in view.ops(agent, "raise"))
            allowed = ("disposed", "completed", *(("error",) if thrown else ())) if injection else ("disposed",)
            # A turn failed before the dispose, its `error` event logged, is still open: it ends
            # `disposed` too (DISP-1: "disposing mid-turn ... the turn ends disposed"; the suite's
            # reading, test_disposed_while_a_stopped_step_closes_the_turn_ends_disposed, which every
            # independent loop checked since passes).
            # A listener's throw made once dispose() was called, while the disposed turn closes: no
            # error event for it (DISP-5: disposal is not a failure; the suite's reading, as ERR-10
            # says of agent/turn-end's throw during disposal).
            # Only that throw's error event: a failure from before the dispose (a model's) may be
            # logged after it, where the open step's step/end comes before the error event (ERR-2
            # reads either way) and a step/end listener disposed.
            disposed = next((o["_i"] for o in view.ops(agent, "dispose") if t["_i"] < o["_i"] < t["end_i"]), t["end_i"])
            throw = next((o for o in view.ops(agent, "raise") if disposed < o["_i"] < t["end_i"]), None)
            logged = None if throw is None else next(
                (e for e in t["events"] if e["type"] == "error" and e["_i"] > throw["_i"]
                 and str(throw.get("message", "")) in str(e["data"].get("message", ""))), None)
            if logged is not None and not injection:
                return Violation(f"{where} logged an error event for a listener's throw made after dispose() (DISP-5: "
                                 "disposal is not a failure; a throw while the disposed turn closes is not logged)",
                                 logged["_i"], ("DISP-5", "DISP-4"))
            if any(i < t["end_i"] for i in disposals) and reason not in allowed:
                first = next(i for i in disposals if i < t["end_i"])
                how = ("its driver task was cancelled (PY-1) and the agent went disposed"
                       if view.timeline[first].get("kind") == "agent/status"
                       and any(o["_i"] < first for o in view.ops(agent, "cancel_driver"))
                       else "dispose()")
                return Violation(f"{where} closed after {how} but ends {reason} (DISP-1)", t["end_i"],
                                 ("DISP-1", "MAXTOK-3", "PY-1") if how != "dispose()" else ("DISP-1", "MAXTOK-3"))
            for e in t["events"]:
                if e["type"] == "tool/call" and e["data"].get("step") in max_steps:
                    return Violation(f"{where} dispatched tool call {e['data'].get('call_id')} from a max-tokens "
                                     "step (MAXTOK-5)", e["_i"], ("MAXTOK-5",))
            found = _continued_after_max_tokens(view, agent, t, max_steps)
            if found is not None:
                return Violation(f"{where}: step {found['data'].get('step')} ran after max-tokens step "
                                 f"{found['data'].get('step', 0) - 1}, with no steering drained or added since (a "
                                 "max-tokens step counts as one without tool calls: the turn stops)", found["_i"],
                                 ("MAXTOK-5", "CONT-1"))
    return None


def _continued_after_max_tokens(view: TraceView, agent: str, turn: dict[str, Any], max_steps: set[Any]) -> Event | None:
    """The ``step/start`` that followed a max-tokens step although nothing allowed it: no steering
    logged or ``steer()``-ed since that step started (CONT-1/CONT-2), no continuation listener
    of the scenario's own that could have forced it."""
    if any(e.get("on") == "agent/turn-continuation" and e.get("name") != "window" for e in view.of_kind("listener")):
        return None  # a listener of the scenario's own may force-continue (CONT-1)
    starts = {e["data"].get("step"): e for e in turn["events"] if e["type"] == "step/start"}
    steers = [e["_i"] for e in view.ops(agent, "steer")]
    for step in max_steps:
        nxt = starts.get(step + 1) if isinstance(step, int) else None
        begun = starts.get(step)
        if nxt is None or begun is None:
            continue
        drained = any(e["type"] == "steering/message" and begun["_i"] < e["_i"] < nxt["_i"] for e in turn["events"])
        if not drained and not any(begun["_i"] < i < nxt["_i"] for i in steers):
            return nxt
    return None


def _earlier_starts(view: TraceView, agent: str, t: dict[str, Any]) -> set[int]:
    """The ``tool/start`` entries inside turn ``t`` that start a call an earlier turn logged: each
    start goes to the oldest logged call of its id that had not started yet. Over the wire the
    tool of a call the loop stopped waiting for (an abort) may start late, once the next turn
    began, and call ids recur across turns."""
    key = ("earlier-starts", agent)
    owners: dict[int, int] | None = view._cache.get(key)
    if owners is None:
        owners = {}
        calls = [e for u in view.turns(agent) for e in u["events"] if e["type"] == "tool/call"]
        marks = sorted([*((e["_i"], "call", e["data"].get("call_id")) for e in calls),
                        *((e["_i"], "start", e.get("call_id")) for e in view.of_kind("tool/start"))])
        pending: dict[Any, list[int]] = {}
        for at, what, call_id in marks:
            if what == "call":
                pending.setdefault(call_id, []).append(at)
            elif pending.get(call_id):
                owners[at] = pending[call_id].pop(0)
        view._cache[key] = owners
    return {start for start, call in owners.items() if call < t["_i"] and start > t["_i"]}


def _tool_overlap(view: TraceView, agent: str, t: dict[str, Any], stops: list[int]) -> Violation | None:
    """LOOP-5 / TOOL-1, by the fake tools' own starts and ends: a call's tool runs after its
    ``tool/call`` is logged, and not while another call of the turn still runs (unless a stop came
    meanwhile: an aborted tool that ignores its signal may be left behind, TOOL-5)."""
    calls = [e for e in t["events"] if e["type"] == "tool/call"]
    logged = {e["data"].get("call_id"): e["_i"] for e in calls}
    # the fake tools' events name no agent and a call id may recur: judged only where each start
    # is surely this turn's call (one agent, every id once)
    if not calls or len(logged) != len(calls) or len(view.agents) != 1:
        return None
    found = _tool_after_stop(view, agent, t, calls, stops)
    if found is not None:
        return found
    end = t["end_i"] if t["end_i"] is not None else len(view.timeline)
    running: dict[Any, int] = {}
    # a listener that threw inside a tool call ended it with no tool/done of the fake's own
    stops = [*stops, *(e["_i"] for e in view.ops(agent, "raise"))]
    earlier = _earlier_starts(view, agent, t)
    events = sorted((e for e in (*view.of_kind("tool/start"), *view.of_kind("tool/done"))
                     if t["_i"] < e["_i"] < end and e.get("call_id") in logged and e["_i"] not in earlier),
                    key=lambda e: e["_i"])
    for e in events:
        call = e.get("call_id")
        if e["kind"] == "tool/done":
            running.pop(call, None)
            continue
        if logged[call] > e["_i"]:
            return Violation(f"agent {agent}: tool call {call} of turn {t['turn']} started running before its "
                             "tool/call was logged (LOOP-5: tool/call, the tools/execute waterfall, then tool/result)",
                             e["_i"], ("LOOP-5", "TOOL-1"))
        other = next((c for c, at in running.items() if c != call and not any(at < i < e["_i"] for i in stops)), None)
        if other is not None:
            return Violation(f"agent {agent}: tool call {call} of turn {t['turn']} started while {other} was still "
                             "running (TOOL-1: one after another)", e["_i"], ("TOOL-1",))
        running[call] = e["_i"]
    return None


def _tool_after_stop(view: TraceView, agent: str, t: dict[str, Any], calls: list[Event],
                     stops: list[int]) -> Violation | None:
    """TOOL-5, by the fake tools' own starts: once a stop came during a call (between its
    ``tool/call`` and its ``tool/result``), no later call of that step starts its tool, not even
    after the turn ended (a tool started over the wire runs when its request arrives); once one
    came after the step's ``assistant/message`` and before its first ``tool/call``, none of its
    tools starts. Judged where ``_tool_overlap`` judges, up to the agent's next turn."""
    if not stops:
        return None
    results = {e["data"].get("call_id"): e["_i"] for e in t["events"] if e["type"] == "tool/result"}
    later_turn = next((u["_i"] for u in view.turns(agent) if u["_i"] > t["_i"]), len(view.timeline))
    earlier = _earlier_starts(view, agent, t)
    starts = [e for e in view.of_kind("tool/start") if t["_i"] < e["_i"] < later_turn and e["_i"] not in earlier]
    # A stop after the step's message was logged and before its first tool/call (a listener on
    # assistant/message, say): the step is stopped before any of its tools, and none starts
    # (a loop that checks the abort after each call instead of before runs the first). Not a
    # cancelled driver task: it stops at its next suspension (PY-1), which may follow a start.
    at_once = {e["_i"] for e in view.ops(agent, "cancel", "abort", "dispose")}
    for m in t["events"]:
        if m["type"] != "assistant/message":
            continue
        step = m["data"].get("step")
        mine = [c for c in calls if c["data"].get("step") == step]
        if not mine:
            continue
        stop = next((i for i in stops if m["_i"] < i < mine[0]["_i"] and i in at_once), None)
        if stop is None:
            continue
        ids = {c["data"].get("call_id") for c in mine}
        ran = next((e for e in starts if e["_i"] > stop and e.get("call_id") in ids), None)
        if ran is not None:
            return Violation(f"agent {agent}: tool call {ran.get('call_id')} ran after a stop made once step {step}'s "
                             "message was logged, before any of its tools (TOOL-5, CANCEL-MID: the abort ends the "
                             "step, no tool of it runs)", ran["_i"], ("TOOL-5", "CANCEL-MID"))
    # A cancelled driver task stops at its next suspension (PY-1): a step the loop runs as a task
    # of its own goes on until the driver wakes to it, which it shows by disposing the agent.
    cut = {e["_i"] for e in view.ops(agent, "cancel_driver")}
    disposed = [e["_i"] for e in view.of_kind("agent/status", agent=agent) if e.get("status") == "disposed"]

    def landed(stop: int) -> int:
        return next((i for i in disposed if i > stop), stop) if stop in cut else stop

    for k, before in enumerate(calls):
        call_id, at = before["data"].get("call_id"), before["_i"]
        stop = next((i for i in stops if at < i < results.get(call_id, t["end_i"] or len(view.timeline))), None)
        if stop is None:
            continue
        rest = {c["data"].get("call_id") for c in calls[k + 1:] if c["data"].get("step") == before["data"].get("step")}
        ran = next((e for e in starts if e["_i"] > landed(stop) and e.get("call_id") in rest), None)
        if ran is not None:
            return Violation(f"agent {agent}: tool call {ran.get('call_id')} ran after a stop during tool call "
                             f"{call_id} of the same step (TOOL-5: an abort during a tool ends the step, no "
                             "further tool of it runs)", ran["_i"], ("TOOL-5",))
    return None


def _tools_check(view: TraceView) -> Violation | None:
    # What each failed fake tool call raised: a turn failing with that message did not contain it.
    failed_calls = view.of_kind("tool/done", outcome="error")
    failures = {str(e.get("error")) for e in failed_calls if e.get("error")}
    # The names of every tool the world registered at some point: a call of any other is of an
    # unknown tool (TOOL-3: an is_error result carrying error{code: UNKNOWN_TOOL}), unless a
    # plugin's tools/execute listener acted during that call (then the listener's result stands).
    known = {str(n) for e in (*view.of_kind("agent/created"), *view.of_kind("op", op="reconfigure"))
             for n in e.get("tools") or ()}
    listened = [e["_i"] for e in (*view.of_kind("listener"), *view.of_kind("op", op="raise"))
                if e.get("on") == "tools/execute"]
    for agent in view.agents:
        stop_ops = view.ops(agent, "cancel", "abort", *DISPOSERS)
        stops = [e["_i"] for e in stop_ops]
        # TOOL-5 asks an abort (a cancel's, a dispose()'s) to end the step; a cancelled driver task
        # stops only at its next suspension, and PY-1 asks no more than that it end disposed: a
        # loop running its step in a task of its own may open the next step before that lands
        aborts = [e["_i"] for e in stop_ops if e.get("op") != "cancel_driver"]
        coded = [e for e in view.ops(agent, "raise") if isinstance(e.get("code"), str) and e.get("message")]
        for t in view.turns(agent):
            found = _tool_overlap(view, agent, t, stops)
            if found is not None:
                return found
            open_calls: dict[Any, str] = {}
            names: dict[str, Any] = {}  # call id -> the tool its tool/call names
            calls: dict[str, int] = {}
            counted: dict[tuple[Any, str], int] = {}  # (step, call id) -> its tool/calls less its tool/results
            first_error: dict[str, Any] | None = None
            raw: dict[Any, Any] = {}  # tool-call id -> its arguments in the step's assistant/message
            order: dict[Any, list[Any]] = {}  # step -> its message's tool-call ids not yet called, in order
            listed: dict[Any, set[Any]] = {}  # step -> every tool-call id of its message
            for e in t["events"]:
                kind, data = e["type"], e["data"]
                if kind == "assistant/message":
                    ids = []
                    for b in data.get("content") or ():
                        if isinstance(b, _MAP) and b.get("type") == "tool-call":
                            ids.append(b.get("id"))
                            if isinstance(b.get("arguments"), str):
                                raw[b.get("id")] = b["arguments"]
                    if len(set(ids)) == len(ids):  # ids repeated: which call is which is not known
                        order[data.get("step")] = ids
                        listed[data.get("step")] = set(ids)
                elif kind == "tool/call":
                    step = data.get("step")
                    if step in listed and data.get("call_id") not in listed[step]:
                        return Violation(f"agent {agent}: tool call {data.get('call_id')} was dispatched, but step {step}'s "
                                         f"logged assistant/message has no such call (LOOP-6: dispatch uses the message "
                                         "agent/step-result returned, which the log records)", e["_i"], ("LOOP-6",))
                    if step in open_calls:
                        return Violation(
                            f"agent {agent}: tool call {data.get('call_id')} started before "
                            f"{open_calls[step]} had its result (TOOL-1)", e["_i"], ("TOOL-1",))
                    waiting = order.get(step)
                    if waiting and data.get("call_id") in waiting:
                        if waiting[0] != data.get("call_id"):
                            return Violation(
                                f"agent {agent}: tool call {data.get('call_id')} ran before {waiting[0]}, which the "
                                "model's message gives first (TOOL-1: one after another, in the model's order)",
                                e["_i"], ("TOOL-1",))
                        waiting.pop(0)
                    given = raw.get(data.get("call_id"))
                    if given is not None and data.get("arguments") != given:
                        return Violation(f"agent {agent}: tool/call {data.get('call_id')} logs arguments "
                                         f"{data.get('arguments')!r}, not the model's raw string {given!r} (0b, "
                                         "LOOP-6: dispatch uses the message the log records)", e["_i"],
                                         ("LOOP-6", "TOOL-2"))
                    call_id = str(data.get("call_id"))
                    open_calls[step] = call_id
                    counted[(step, call_id)] = counted.get((step, call_id), 0) + 1
                    calls[call_id] = e["_i"]
                    names[call_id] = data.get("name")
                elif kind == "tool/result":
                    key = (data.get("step"), str(data.get("call_id")))
                    if key in counted:
                        counted[key] -= 1
                        if counted[key] < 0:
                            return Violation(f"agent {agent}: tool call {data.get('call_id')} of step {key[0]} has a "
                                             "second tool/result (LOOP-5: each call, then its tools/execute waterfall, "
                                             "then its tool/result)", e["_i"], ("LOOP-5",))
                    expected = open_calls.pop(data.get("step"), None)
                    if expected is not None and str(data.get("call_id")) != expected:
                        return Violation(f"agent {agent}: the result of tool call {expected} is logged under call id "
                                         f"{data.get('call_id')!r} (TOOL-4: tool/result.call_id is always the model's "
                                         "call id, whatever id a tools/execute listener returns)", e["_i"], ("TOOL-4",))
                    content = data.get("content")
                    at = calls.get(str(data.get("call_id")))
                    if at is not None and data.get("is_error") is not True and any(
                            at < d["_i"] < e["_i"] and str(d.get("call_id")) == str(data.get("call_id")) for d in failed_calls):
                        return Violation(f"agent {agent}: tool call {data.get('call_id')} failed, but its result has "
                                         f"is_error {data.get('is_error')!r} (TOOL-3: a failing tool becomes an is_error "
                                         "result)", e["_i"], ("TOOL-3",))
                    if data.get("is_error") is True and not (
                            isinstance(content, list) and len(content) == 1 and isinstance(content[0], _MAP)
                            and content[0].get("type") == "text" and str(content[0].get("text", "")).startswith("Error: ")):
                        return Violation(f"agent {agent}: the error result of tool call {data.get('call_id')} has content "
                                         f"{content!r}, not [{{'type': 'text', 'text': 'Error: <message>'}}] (content is "
                                         "always a list of blocks)", e["_i"], ("TOOL-3",))
                    name = names.get(str(data.get("call_id")))
                    error = data.get("error")
                    stopped = at is not None and any(at < i < e["_i"] for i in (*stops, *view.closings()))
                    if known and isinstance(name, str) and name not in known and not stopped and not any(
                            at is not None and at < i < e["_i"] for i in listened) and (
                            data.get("is_error") is not True or not isinstance(error, _MAP)
                            or error.get("code") != "UNKNOWN_TOOL"):
                        return Violation(f"agent {agent}: tool call {data.get('call_id')} names {name!r}, which no one "
                                         f"registered, and its result has is_error {data.get('is_error')!r} and error "
                                         f"{error!r}, not an error result carrying error{{name, code: 'UNKNOWN_TOOL'}} "
                                         "(TOOL-3)", e["_i"], ("TOOL-3",))
                    if at is not None and any(at < i < e["_i"] for i in aborts):
                        later_step = any(x["type"] == "step/start" and x["_i"] > e["_i"] for x in t["events"])
                        # a listener that threw once the abort came (on the aborted call's tool/result,
                        # say) fails the turn too: which of the two ends it the contract does not order
                        abort_at = next(i for i in aborts if at < i < e["_i"])
                        threw = t["reason"] == "error" and any(abort_at < r["_i"] < (t["end_i"] or len(view.timeline))
                                                                 for r in view.ops(agent, "raise"))
                        if (t["reason"] not in ("aborted", "disposed", None) and not threw) or later_step:
                            return Violation(f"agent {agent}: an abort during tool call {data.get('call_id')} did "
                                             f"not end turn {t['turn']} aborted (TOOL-5)", e["_i"], ("TOOL-5",))
                elif kind == "error":
                    first_error = first_error if first_error is not None else data
                    if "code" in data and data["code"] is None:
                        return Violation(f"agent {agent}: an error event carries code null (ERR-7)", e["_i"], ("ERR-7",))
                    said = str(data.get("message", ""))
                    for r in coded:  # a listener's failure, told by its message: its error's code
                        if r["_i"] < e["_i"] and r["message"] in said and data.get("code") != r["code"]:
                            return Violation(f"agent {agent}: the error event of a listener's failure ({said!r}) carries "
                                             f"code {data.get('code')!r}, not the raised error's {r['code']!r} (ERR-7: a "
                                             "raised error's code is carried into the error event)", e["_i"], ("ERR-7",))
                    if calls and data.get("message") in failures:
                        return Violation(f"agent {agent}: a failing tool failed turn {t['turn']} (TOOL-3: it must "
                                         "become an error result and the turn go on)", e["_i"], ("TOOL-3",))
                elif kind == "turn/end" and isinstance(data.get("reason"), _MAP):
                    reason = data["reason"]
                    if "code" in reason and reason["code"] is None:
                        return Violation(f"agent {agent}: a turn-end reason carries code null (ERR-7)", e["_i"], ("ERR-7",))
                    code = first_error.get("code") if first_error is not None else None
                    if reason.get("kind") == "error" and isinstance(code, str) and reason.get("code") != code:
                        # ERR-9: the turn ends with its first failure, whose code both carry (ERR-7)
                        return Violation(f"agent {agent}: turn {t['turn']} failed with code {code!r} (its error event) "
                                         f"but its turn-end reason carries {reason.get('code')!r} (ERR-7: the code is "
                                         "carried into the error event and the turn-end reason)", e["_i"], ("ERR-7",))
            if t["reason"] in _NORMAL:
                # LOOP-5: a step runs each tool call of its message, whatever its finish (only a
                # max-tokens step's are removed, MAXTOK-5, from the message too); a turn nothing
                # stopped ran them all
                for step, waiting in order.items():
                    if waiting:
                        return Violation(f"agent {agent}: turn {t['turn']} ended {t['reason']}, but tool call "
                                         f"{waiting[0]} of step {step}'s assistant/message was never dispatched (no "
                                         "tool/call; LOOP-5: each tool call of the step, in order, whatever the "
                                         "finish reason)", t["_i"], ("LOOP-5", "CONT-1"))
    return None


_NORMAL = ("completed", "max-tokens")
_GATES = ("agent/step-end", "agent/turn-continuation")


def _steering_check(view: TraceView) -> Violation | None:
    for agent in view.agents:
        cancels = [e["_i"] for e in view.ops(agent, "cancel", "abort", *DISPOSERS)]
        steers = view.steers(agent)
        stops = [e["_i"] for e in view.ops(agent, "stop")]  # a continuation listener's forced stop (CONT-1)
        for t in view.turns(agent):
            if t["reason"] not in _NORMAL:
                continue
            events = t["events"]
            for k, e in enumerate(events):
                if e["type"] == "steering/message" and not any(x["type"] == "step/start" for x in events[k:]) and not any(
                        e["_i"] < i < t["end_i"] for i in stops):
                    return Violation(f"agent {agent}: steering logged in turn {t['turn']} got no model step "
                                     "(STEER-2)", e["_i"], ("STEER-2", "CONT-1"))
            for s in steers:
                if not (t["_i"] < s["_i"] < t["end_i"]) or not _in_own(view, agent, s, *_GATES):
                    continue
                if any(s["_i"] < c < t["end_i"] for c in cancels):
                    continue
                if s.get("text") not in t["steering"]:
                    return Violation(f"agent {agent}: steering {s.get('text')!r} added by a {s.get('on')} listener "
                                     f"did not join turn {t['turn']} (CONT-2)", s["_i"], ("CONT-2",))
    return None


def _disposal_check(view: TraceView) -> Violation | None:
    closing = view.closings()
    # A caller's close() disposes its agents when it gets to each (SVC-7 says no more): when an
    # agent it found running was disposed, and what it went through first, DISP-5 cannot say.
    final = view.closings(caller=False)
    # An inject started once the world had closed (an actor a schedule held back that long) is
    # never awaited: whether its awaitable raised, the run does not see.
    closed = view.of_kind("world/closed")
    unawaited = closed[-1]["_i"] if closed else len(view.timeline)
    for agent in view.agents:
        for e in view.ops(agent, "send", "steer", "inject"):  # the calls that did not raise
            if e.get("status") == "disposed" and not (e.get("op") == "inject" and e["_i"] > unawaited):
                return Violation(f"agent {agent}: {e.get('op')}() on the disposed agent returned without raising "
                                 "(DISP-3)", e["_i"], ("DISP-3",))
        disposes = sorted([e["_i"] for e in view.ops(agent, *DISPOSERS)] + closing)
        statuses = view.of_kind("agent/status", agent=agent)
        for e in statuses:
            if e.get("status") == "disposed" and not any(i < e["_i"] for i in disposes):
                return Violation(f"agent {agent}: disposed although nothing disposed it (ERR-1: a failure ends "
                                 "the turn, never the loop)", e["_i"], ("ERR-1", "LOOP-1"))
        for d in sorted([e["_i"] for e in view.ops(agent, "dispose")] + final):
            before = [e for e in statuses if e["_i"] < d]
            if not before or before[-1].get("status") != "running":
                continue
            after = [e for e in statuses if e["_i"] > d]
            if after and after[0].get("status") != "disposed":
                return Violation(f"agent {agent}: disposed while running, its status went running -> "
                                 f"{after[0].get('status')} before disposed (DISP-5)", after[0]["_i"], ("DISP-5", "STATUS-1"))
        log = view.log(agent)
        flipped = next((e["_i"] for e in statuses if e.get("status") == "disposed"), None)
        if flipped is not None:
            # a resumed log's own turns are loaded, not started: a close during the load may dispose
            # the agent before the world reads them (indie49, session 44)
            late = next((e for e in log if e["type"] == "turn/start" and e["_i"] > flipped and not e.get("loaded")),
                        None)
            if late is not None:
                return Violation(f"agent {agent}: turn {late['data'].get('turn')} started after the agent was disposed "
                                 "(DISP-2: disposal ends the driver)", late["_i"], ("DISP-2",))
        # IDLE-4 names two waiters: one registered on the disposed agent, and one registered while
        # running; one registered while idle (its work queued, the driver not yet woken) it leaves open
        held = {e.get("waiter") for e in view.ops(agent, "when_idle") if e.get("status") in ("running", "disposed")}
        for rel in view.of_kind("waiter/released", agent=agent):
            if rel.get("status") != "disposed" or not rel.get("precise") or rel.get("waiter") not in held:
                continue
            turns = view.turns(agent, int(rel.get("log_len", 0)))
            # a turn the driver ran was open when the waiter was released (an idle inject's one-shot
            # turn is its caller's, which IDLE-4's driver exit does not wait for: indie62a) ...
            if turns and not turns[-1]["ended"] and turns[-1]["trigger"] != "injection":
                started = turns[-1]
                if any(e["type"] == "turn/end" and e["_i"] > started["_i"] for e in log):  # ... and closed later
                    return Violation(f"when_idle() {rel.get('waiter')!r} was released by the disposal of agent {agent} "
                                     f"before its driver closed turn {started['turn']} and exited (IDLE-4)", rel["_i"],
                                     ("IDLE-4",))
    return None


_SHAPE = (("turn/start", "agent/turn-start", "turn"), ("step/start", "agent/step-start", "step"),
          ("step/end", "agent/step-end", "step"), ("turn/end", "agent/turn-end", "turn"))


def _shape_check(view: TraceView) -> Violation | None:
    """LOOP-4/LOOP-5: a boundary is appended to the log before its notification is emitted, and a
    turn's drained prompts (its ``user/message`` events) before ``agent/turn-start``."""
    for agent in view.agents:
        logged: dict[tuple[str, Any, Any], int] = {}
        for e in view.log(agent):
            data = e["data"]
            logged.setdefault((e["type"], data.get("turn"), data.get("step")), e["_i"])
        for log_type, note, _level in _SHAPE:
            for n in view.of_kind(note, agent=agent):
                key = (log_type, n.get("turn"), n.get("step") if log_type.startswith("step") else None)
                at = logged.get(key)
                if at is None or at > n["_i"]:
                    what = "was never logged" if at is None else "was logged after it"
                    return Violation(f"agent {agent}: {note} for turn {n.get('turn')}"
                                     + (f" step {n.get('step')}" if log_type.startswith("step") else "")
                                     + f" was emitted, but its {log_type} {what} (LOOP-4, LOOP-5)", n["_i"],
                                     ("LOOP-5",) if log_type.startswith("step") else ("LOOP-4",))
        # LOOP-4: turn/start, the drained user/messages, *then* agent/turn-start (a turn-start
        # listener sees its prompts in the log; one that throws leaves them logged).
        starts = view.of_kind("agent/turn-start", agent=agent)
        if starts:
            prompts = {t["turn"]: [e["_i"] for e in t["events"] if e["type"] == "user/message"]
                       for t in view.turns(agent)}
            for n in starts:
                late = [i for i in prompts.get(n.get("turn"), ()) if i > n["_i"]]
                if late:
                    return Violation(f"agent {agent}: agent/turn-start for turn {n.get('turn')} was emitted before "
                                     "the turn's user/message was logged (LOOP-4: turn/start, the drained "
                                     "user/messages, then agent/turn-start)", late[0], ("LOOP-4",))
    return None


def _one_failure_check(view: TraceView) -> Violation | None:
    """ERR-9: once a turn recorded a failure, a later one is neither written to the log nor
    announced; a failed turn is announced through ``agent/error`` exactly once, with the original
    error (the code its error event logged, ERR-7, or none)."""
    for agent in view.agents:
        announced: dict[int, list[Event]] = {}
        steps: dict[Any, set[Any]] = {}  # turn -> the steps its announcements named (step 0 included)
        stopped = [e["_i"] for e in view.ops(agent, *DISPOSERS)] + view.closings()
        for e in view.of_kind("agent/error", agent=agent):
            steps.setdefault(e.get("turn"), set()).add(e.get("step"))
            if e.get("step") not in (0, None) and isinstance(e.get("turn"), int):  # step 0: before any turn (ERR-8)
                announced.setdefault(e["turn"], []).append(e)
        for t in view.turns(agent):
            errors = [e for e in t["events"] if e["type"] == "error"]
            if len(errors) > 1:
                return Violation(f"agent {agent}: turn {t['turn']} logged {len(errors)} error events: the first "
                                 "failure wins, a later one is not logged (ERR-9)", errors[1]["_i"], ("ERR-9",))
            # ERR-9: the failure the error event logged is announced as agent/error(agent, turn, step,
            # error), naming the turn and step the event names (a throwing status listener's step-0
            # announcement, which ERR-8 allows, is another).
            step = errors[0]["data"].get("step") if errors else None
            # Not judged when a disposal came between the error event and the turn's end, before any
            # announcement (the turn then ends disposed: whether an announcement still pending when
            # the disposal began is made, or swallowed as ERR-10's are during disposal, is open).
            horizon = t["end_i"] if t["end_i"] is not None else len(view.timeline)
            if errors and not steps.get(t["turn"]) and any(errors[0]["_i"] < i < horizon for i in stopped):
                continue
            if errors and step not in steps.get(t["turn"], ()):
                named = sorted(str(x) for x in steps.get(t["turn"], ()))
                return Violation(f"agent {agent}: turn {t['turn']} logged its failure at step {step!r}, but "
                                 + (f"agent/error named step(s) {', '.join(named)}" if named else "no agent/error announced it")
                                 + " (ERR-9: every failed turn is announced through agent/error(agent, turn, step, "
                                 "error))", errors[0]["_i"], ("ERR-9",))
            said = announced.get(t["turn"], [])
            if errors:
                said = sorted(said + _late_step0(view, agent, t), key=lambda e: e["_i"])
            # A late failure (ERR-10: after turn/end) is announced and logs nothing: the turn failed all the same.
            if len(said) > 1:
                return Violation(f"agent {agent}: failed turn {t['turn']} was announced {len(said)} times through "
                                 f"agent/error ({said[0].get('error')}, then {said[1].get('error')}): the first "
                                 "failure wins, a later one is not announced (ERR-9)", said[1]["_i"], ("ERR-9",))
            # ERR-9: the announcement carries the original error, whose code (ERR-7) the error event
            # logged: a port that announces a new error made of the message loses it.
            logged, carried = (errors[0]["data"].get("code"), said[0].get("code")) if errors and said else (None, None)
            if logged != carried:
                if logged is None:  # the announced original has a code the log lost
                    return Violation(f"agent {agent}: turn {t['turn']}'s error event has no code, but the error it "
                                     f"announced ({said[0].get('error')}) has code {carried!r} (ERR-7: a raised "
                                     "error's code is carried into the error event)", errors[0]["_i"], ("ERR-7",))
                return Violation(f"agent {agent}: turn {t['turn']} failed with code {logged!r} (its error event), but "
                                 f"agent/error announced {said[0].get('error')} with code {carried!r}: the "
                                 "announcement carries the original error (ERR-9)", said[0]["_i"], ("ERR-9",))
    return None


def _late_step0(view: TraceView, agent: str, turn: dict[str, Any]) -> list[Event]:
    """The step-0 ``agent/error`` announcements naming ``turn`` that are a late failure of it: each
    after the turn ended, following a throw the world made in an ``agent/turn-end`` or
    ``session/flush`` listener of that turn, with no ``agent/status`` listener's throw since the
    turn began (ERR-8 lets that one be announced at step 0, under any number). An idle inject's
    one-shot turn has none: INJ-2 reports its failing flush at step 0, failed turn or not."""
    if turn["end_i"] is None or turn["trigger"] == "injection":
        return []
    raises = view.ops(agent, "raise")
    late = next((r["_i"] for r in raises if r.get("on") in ("agent/turn-end", "session/flush") and r["_i"] > turn["end_i"]
                 and _late_turn(view, agent, r) is turn), None)
    if late is None:
        return []
    status = next((r["_i"] for r in raises if r.get("on") == "agent/status" and r["_i"] > turn["_i"]), len(view.timeline))
    return [e for e in view.of_kind("agent/error", agent=agent)
            if e.get("step") == 0 and e.get("turn") == turn["turn"] and late < e["_i"] < status]


def _late_turn(view: TraceView, agent: str, op: Event) -> dict[str, Any] | None:
    """The turn whose late failure a listener's ``raise`` at ``agent/turn-end`` or inside
    ``session/flush`` is: the turn that notification named, or the one the flush that called the
    listener follows (the last turn ended before that flush started; the listener may have
    written an idle inject's one-shot turn since, and started its flush). ``None`` when it
    cannot be told (no flush recorder)."""
    at = op["_i"]
    turns = view.turns(agent)
    if op.get("on") == "agent/turn-end":
        note = next((e for e in reversed(view.of_kind("agent/turn-end", agent=agent)) if e["_i"] < at), None)
        if note is None:
            return None
        return next((t for t in turns if t["turn"] == note.get("turn") and t["end_i"] is not None
                     and t["end_i"] < at), None)
    # The flush the listener was called by: the last that started before its call, not before
    # its throw (a synchronous inject it made may have started the one-shot turn's flush since)
    called = next((e["_i"] for e in reversed(view.of_kind("listener", agent=agent))
                   if e["_i"] < at and e.get("name") == op.get("by") and e.get("on") == "session/flush"), at)
    began = next((e["_i"] for e in reversed(view.of_kind("flush", agent=agent))
                  if e.get("phase") == "start" and e["_i"] < called), None)
    if began is None:
        return None
    return next((t for t in reversed(turns) if t["end_i"] is not None and t["end_i"] < began), None)


def _late_failure_check(view: TraceView) -> Violation | None:
    """ERR-10: a throwing ``agent/turn-end`` listener of a turn closed by a disposal is swallowed:
    no ``agent/error`` follows it (before the next throw the world made, which may be announced)."""
    for agent in view.agents:
        raises = view.ops(agent, "raise")
        if not raises:
            continue
        said = [e for e in view.of_kind("agent/error", agent=agent) if e.get("step") not in (0, None)]
        for k, op in enumerate(raises):
            if op.get("on") != "agent/turn-end":
                continue
            turn = _late_turn(view, agent, op)
            if turn is None or turn["reason"] != "disposed":
                continue
            until = raises[k + 1]["_i"] if k + 1 < len(raises) else len(view.timeline)
            late = next((e for e in said if op["_i"] < e["_i"] < until and e.get("turn") == turn["turn"]), None)
            if late is not None:
                return Violation(f"agent {agent}: an agent/turn-end listener threw after turn {turn['turn']} ended "
                                 f"disposed, and that was announced through agent/error ({late.get('error')}): "
                                 "during disposal it is swallowed and the reason stays disposed (ERR-10, DISP-4)",
                                 late["_i"], ("ERR-10", "DISP-4"))
    return None


def _dropped_step_check(view: TraceView) -> Violation | None:
    """CANCEL-STEP: a cancel from a synchronous ``agent/turn-start`` listener, before the turn's
    first step, drops that step: it is still opened and closed empty (``step/start``,
    ``step/end``), the model is not called, and the turn ends ``aborted``. Judged where the turn
    ended ``aborted`` (a disposal, a failure or a driver's cancel ends it otherwise)."""
    for op in view.of_kind("op", op="cancel"):
        if op.get("on") != "agent/turn-start":
            continue
        agent, at = str(op.get("agent")), op["_i"]
        turn = _ended_turn_around(view, agent, at)
        if turn is None or turn["reason"] != "aborted":
            continue
        if any(e["type"] == "step/start" and e["_i"] < at for e in turn["events"]):
            continue  # not before the first step
        if not any(e["type"] == "step/start" for e in turn["events"]):
            return Violation(f"agent {agent}: a cancel from agent/turn-start ended turn {turn['turn']} with no step: "
                             "the dropped step is opened and closed empty (CANCEL-STEP: step/start, step/end and "
                             "their notifications, no model call)", turn["end_i"], ("CANCEL-STEP",))
    return None


def _forced_stop_check(view: TraceView) -> Violation | None:
    """CONT-1: the ``agent/turn-continuation`` waterfall may force-stop: once a listener voted to
    stop (a ``stop`` op), the turn opens no further step, steering drained after the step or not.
    Not judged where steering was queued after the step's ``step/end`` (it waits at the gate:
    CONT-2 lets a listener's override the stop, and a caller's there the contract leaves open)."""
    for op in view.of_kind("op", op="stop"):
        agent, at = str(op.get("agent")), op["_i"]
        turn = _turn_around(view, agent, at)
        if turn is None:
            continue
        ended = max((e["_i"] for e in turn["events"] if e["type"] == "step/end" and e["_i"] < at), default=turn["_i"])
        nxt = next((e for e in turn["events"] if e["type"] == "step/start" and e["_i"] > at), None)
        if nxt is None:
            continue
        if any(ended < q["_i"] < nxt["_i"] and q.get("steering") for q in view.of_kind("agent/queued", agent=agent)):
            continue
        return Violation(f"agent {agent}: an agent/turn-continuation listener voted to stop turn {turn['turn']}, but "
                         f"the turn opened step {nxt['data'].get('step')} (CONT-1: the waterfall may force-stop; "
                         "steering drained after the step does not override it)", nxt["_i"], ("CONT-1",))
    return None


def _taken_id_check(view: TraceView) -> Violation | None:
    """SVC-2: ``create()`` with the id of a live agent is rejected (it raises). Not judged inside
    the agent's own ``dispose()`` (``disposing``: it is on its way out), nor for a create the
    world made of another id while the service closed (``instead``, SVC-7's)."""
    for agent in view.agents:
        for op in view.ops(agent, "create"):  # the calls that did not raise
            # not once disposed, nor while resuming, nor while being disposed
            if op.get("status") in ("idle", "running") and not op.get("disposing") and "instead" not in op:
                return Violation(f"agent {agent}: service.create({agent!r}) returned while agent {agent} was live "
                                 f"({op.get('status')}): a second live agent with an id in use is rejected (SVC-2)",
                                 op["_i"], ("SVC-2",))
    return None


def _resume_check(view: TraceView) -> Violation | None:
    """SVC-3: a resumed agent runs on the resumed session id (that its turns continue the loaded
    log's numbers is LOOP-3's oracle's, over the whole log); SVC-2: once a ``create()`` of the id
    succeeded while the resume loaded (the id was free then), the resume is rejected."""
    for e in view.of_kind("agent/created"):
        resumed = e.get("resumed")
        if resumed is None:
            continue
        agent = str(e.get("agent"))
        start = max((op["_i"] for op in view.of_kind("op", agent=agent)
                     if op.get("op") == "resume" and op["_i"] < e["_i"]), default=-1)
        taken = [op for op in view.ops(agent, "create") if start < op["_i"] < e["_i"]]
        if taken:
            return Violation(f"agent {agent}: create({agent!r}) succeeded while resume({agent!r}, {resumed!r}) "
                             "loaded its session, and the resume succeeded too: two live agents under one id "
                             "(SVC-2: a second live agent with an id in use is rejected)", e["_i"], ("SVC-2",))
        if e.get("session") != resumed:
            return Violation(f"agent {agent}: resumed from session {resumed!r}, it runs on session "
                             f"{e.get('session')!r} (SVC-3: the live session id is the resumed id)", e["_i"], ("SVC-3",))
    return None


def _announced_check(view: TraceView) -> Violation | None:
    """ERR-10/ERR-6/INJ-2: a throwing ``agent/turn-end`` listener or a failing ``session/flush``
    after a turn that had not failed is announced through ``agent/error`` (before the driver's
    next turn starts; for an idle inject's one-shot turn, before the world closes the service).
    Not judged once a disposal or a close is under way (ERR-10 swallows then), after a turn that
    failed already (ERR-9: the first failure wins), nor for a turn-end listener of an idle
    inject's one-shot turn (INJ-2 only asks that it be contained)."""
    for agent in view.agents:
        raises = [e for e in view.ops(agent, "raise") if e.get("on") in ("agent/turn-end", "session/flush")]
        if not raises:
            continue
        said = view.of_kind("agent/error", agent=agent)
        final = next(iter(view.closings(caller=False)), len(view.timeline))
        stops = [i for i in view.disposals(agent) if i < final] + view.closings(caller=True)
        turns = view.turns(agent)
        for op in raises:
            at = op["_i"]
            found = _late_turn(view, agent, op)
            if found is None:
                continue
            turn, k = found, turns.index(found)
            if turn["reason"] == "disposed" and op["on"] == "agent/turn-end":
                # ERR-10: during disposal a throwing agent/turn-end listener is swallowed (a
                # failing flush of that turn is ERR-6's, which names no exception: not judged)
                flushed = any(r["on"] == "session/flush" and r["_i"] > turn["_i"] for r in raises)
                # a status listener's throw may be announced at step 0 too (ERR-8 allows it)
                status_threw = any(r.get("on") == "agent/status" and r["_i"] > turn["_i"]
                                   for r in view.ops(agent, "raise"))
                told = next((e for e in said if e["_i"] > at and e.get("turn") == turn["turn"]
                             and not (status_threw and e.get("step") == 0)), None)
                if told is not None and not flushed and not any(e["type"] == "error" for e in turn["events"]):
                    return Violation(f"agent {agent}: an agent/turn-end listener threw after turn {turn['turn']} "
                                     "ended disposed, and agent/error announced it (ERR-10: during disposal it is "
                                     "swallowed and the reason stays disposed, DISP-4)", told["_i"], ("ERR-10", "DISP-4"))
                continue
            if turn["reason"] not in ("completed", "max-tokens", "aborted"):
                continue  # failed (error) or disposed: nothing more is announced
            if op["on"] == "agent/turn-end" and turn["trigger"] == "injection":
                continue
            # a driver's turn: by its next turn; an idle inject's one-shot turn: by the world's close
            # (its flush is the inject's, and may still run while the driver's next turn does)
            nxt = final if turn["trigger"] == "injection" else next(
                (u["_i"] for u in turns[k + 1:] if u["trigger"] != "injection" and u["_i"] > at), final)
            if any(turn["_i"] < i < nxt for i in stops):
                continue
            if any(e["_i"] < at and e.get("turn") == turn["turn"] for e in said):
                continue  # the turn failed already (a late failure before this one): ERR-9
            if any(at < e["_i"] < nxt for e in said):
                continue
            # Flush listeners run concurrently (0a) and an idle inject's flush may be left
            # scheduled (INJ-4): a listener of an earlier inject's flush may act only after a
            # later flush started, so the failure may be that one-shot turn's, announced as such
            # (naming its turn) by the world's close; so may a failed one-shot turn's flush.
            # If such a one-shot turn had failed already, the failure may be its flush's, of
            # which ERR-9 asks nothing more (the first failure wins).
            if op["on"] == "session/flush":
                ended = [u for u in turns if u["trigger"] == "injection" and u["end_i"] is not None
                         and u["end_i"] < at and u is not turn]
                injected = {u["turn"] for u in ended}
                if any(at < e["_i"] < final and e.get("turn") in injected for e in said):
                    continue
                if any(u["reason"] not in ("completed", "max-tokens", "aborted") for u in ended):
                    continue
            what = ("an agent/turn-end listener threw" if op["on"] == "agent/turn-end"
                    else "a session/flush listener failed")
            rule = ("ERR-10" if op["on"] == "agent/turn-end"
                    else "INJ-2" if turn["trigger"] == "injection" else "ERR-6")
            return Violation(f"agent {agent}: {what} after turn {turn['turn']} ended {turn['reason']}, and no "
                             f"agent/error announced it ({rule}: a late failure is announced)", at, (rule,))
    return None


def _original_error_check(view: TraceView) -> Violation | None:
    """ERR-9: a failed turn is announced "carrying the original error". In process, the world
    marks every error it raises into the loop (a fake model's scripted failure, a listener told
    to throw) and records ``copied`` on an ``agent/error`` announcement whose error stands for
    such an error without being it: a new value made of its message, or a wrapper whose cause or
    context chain reaches it (``raise New(...) from exc``). Its type, attributes and identity
    are lost to the listeners either way (session 60's blind round K: a loop announcing an
    adapter's raise as a new error of its own type, with the same message and code, passed the
    suite, whose checks read the message and the code only; session 61's round N: the same
    made with ``from exc``). Every independent loop tried announces the object itself."""
    for e in view.of_kind("agent/error"):
        text = e.get("copied")
        if not isinstance(text, str):
            continue
        # judged only when that error was raised in the announced turn (a fake model's call ending
        # ``raised`` with it, a listener's raise of it): a loop's own error for a model's error
        # finish may share the text of one raised in another turn
        agent = str(e.get("agent"))
        start = max((x["_i"] for x in view.log(agent) if x["type"] == "turn/start" and x["_i"] < e["_i"]
                     and x["data"].get("turn") == e.get("turn")), default=0)
        raised_here = any(start <= r["_i"] < e["_i"] and (
            (r["kind"] == "model/done" and r.get("outcome") == "raised" and r.get("error") == text)
            or (r["kind"] == "op" and r.get("op") == "raise" and (r.get("message") or "listener failure") == text))
            for r in (*view.of_kind("model/done"), *view.ops(agent, "raise")))
        if raised_here:
            return Violation(f"agent {e.get('agent')}: agent/error announced {e.get('error')} for turn {e.get('turn')}, a "
                             "new error made of the one raised into the loop (its message, or a wrapper chained to it), "
                             "not that error: the announcement carries the original error (ERR-9)", e["_i"], ("ERR-9",))
    return None


def _announced_once_check(view: TraceView) -> Violation | None:
    """ERR-9: a failed turn is announced exactly once; once it recorded a failure, a later one of
    the same turn is not announced (the first failure wins). So no turn is named by two
    ``agent/error`` announcements: a loop naming a failing flush's turn by the log's newest turn
    names an idle inject's one-shot turn twice and the flushed turn never (session 58's blind
    round I). Not judged: an announcement naming a turn not yet opened (a failure before its
    ``turn/start``, ERR-8, names the turn it would have been, or any), one made once a disposal or
    a close is under way (ERR-10 swallows then), an announcement at step 0 with no turn open that
    no late failure (a throw at ``agent/turn-end`` or in ``session/flush``) made so far accounts
    for (ERR-8's failure before a turn opened may name any turn), nor an agent whose
    ``agent/status`` listener threw (ERR-8 allows announcing that, naming no turn in
    particular). An idle inject's one-shot
    turn is a turn like any other: INJ-2 reports its failing flush, unless it failed already
    (``test_an_idle_injects_turn_is_announced_failed_once``)."""
    for agent in view.agents:
        said = view.of_kind("agent/error", agent=agent)
        if len(said) < 2 or any(r.get("on") == "agent/status" for r in view.ops(agent, "raise")):
            continue
        opened: dict[Any, int] = {}
        for t in view.turns(agent):
            opened.setdefault(t["turn"], t["_i"])
        stop = min([view.disposed_at(agent), *view.closings()])
        late = [r["_i"] for r in view.ops(agent, "raise") if r.get("on") in ("agent/turn-end", "session/flush")]
        first: dict[Any, Event] = {}
        loose = 0  # announcements at step 0 with no turn open: each a late failure's, or a failure before a turn opened
        for e in said:
            if e["_i"] > stop:
                break
            n = e.get("turn")
            if n not in opened or opened[n] > e["_i"]:
                continue
            if e.get("step") == 0 and _turn_around(view, agent, e["_i"]) is None:
                loose += 1
                if loose > sum(1 for i in late if i < e["_i"]):
                    continue  # more than the late failures so far: one may be ERR-8's, naming any turn
            if n in first:
                return Violation(f"agent {agent}: turn {n} was announced through agent/error twice ({first[n].get('error')}, "
                                 f"then {e.get('error')}): a failed turn is announced exactly once, a later failure "
                                 "of the same turn not at all (ERR-9)", e["_i"], ("ERR-9",))
            first[n] = e
    return None


def _inject_check(view: TraceView) -> Violation | None:
    """INJ-2: an ``inject()`` of plain text on a live agent with no turn open never raises a
    failing flush into the caller. Judged only where the inject wrote its own one-shot turn: no
    turn open at the call by the log (INJ-1 decides from it), and none but an injection's opened
    before the error (an async inject may find a turn open when its body runs); only where no
    listener but a ``session/flush`` one threw meanwhile (of other listeners' throws INJ-2 says
    the turn stays balanced, not that they never reach the caller); and only while the agent was
    not disposed yet (an inject whose body runs after a dispose raises DISP-3's error, whatever
    its class is called)."""
    raises = view.of_kind("op", op="raise")
    for agent in view.agents:
        found = _bad_inject_check(view, agent)
        if found is not None:
            return found
        for err in view.of_kind("op/error", agent=agent):
            if err.get("op") != "inject" or str(err.get("error", "")).startswith("NotImplementedError"):
                continue
            if view.disposed_at(agent) < err["_i"]:
                continue  # disposed before the inject's body ran: DISP-3's clear error, no failing flush
            op = view.answered(err)
            if op is None or op.get("status") == "disposed" or op.get("unserialisable") or op.get("bad_source") or _turn_around(
                    view, agent, op["_i"]) is not None:
                continue
            if any(op["_i"] < t["_i"] < err["_i"] and t["trigger"] != "injection" for t in view.turns(agent)):
                continue  # a turn the inject did not open came first: INJ-1's case
            if any(op["_i"] < r["_i"] < err["_i"] and r.get("on") != "session/flush" for r in raises):
                continue
            return Violation(f"agent {agent}: inject() of plain text raised into the caller ({err.get('error')}): "
                             "a failing flush of its one-shot turn is reported through agent/error, never raised "
                             "into the caller (INJ-2)", err["_i"], ("INJ-2",))
    return None


def _injected_check(view: TraceView) -> Violation | None:
    """INJ-1: an ``inject()`` made while a turn is open (by the log, when the call's body ran: at
    the call, or for a coroutine as it began, ``inject/began``) appends its ``context/message``
    into that turn: before its ``turn/end``, however the turn ends (a loop may defer it while a
    tool runs, to keep each call next to its result, but not past the turn: an aborted tool or a
    failure still closes the turn with it). Not judged: a call that raised, one on a disposed
    agent, content JSON cannot encode (INJ-4), a turn a disposal or a close cut short (what a
    disposed turn still logs is DISP-1's), nor one whose ``turn/end`` never came (LOG-4's)."""
    began = view.of_kind("inject/began")
    for agent in view.agents:
        injects = [e for e in view.ops(agent, "inject") if e.get("status") != "disposed" and not e.get("unserialisable")]
        if not injects:
            continue
        turns = view.turns(agent)
        cuts = [*view.disposals(agent), *view.closings()]
        used: set[int] = set()
        for op in injects:
            at = op["_i"]
            mark = next((b for b in began if b["_i"] > at and b["_i"] not in used and b.get("agent") == agent
                         and b.get("by") == op.get("by") and b.get("text") == op.get("text")), None)
            if mark is not None:
                used.add(mark["_i"])
                at = mark["_i"]
            elif any(b.get("agent") == agent and b.get("text") == op.get("text") for b in began):
                continue  # a coroutine that never began: nothing to append
            turn = next((t for t in turns if t["_i"] < at and (t["end_i"] is None or t["end_i"] > at)), None)
            if turn is None or turn["end_i"] is None or any(at < c < turn["end_i"] for c in cuts):
                continue
            if not any(e["type"] == "context/message" and e["_i"] > op["_i"]
                       and ev.texts(e["data"].get("content")) == op.get("text") for e in turn["events"]):
                return Violation(f"agent {agent}: inject({op.get('text')!r}) made while turn {turn['turn']} was open "
                                 f"logged no context/message in that turn before its turn/end (INJ-1: it appends "
                                 "into the open turn)", turn["end_i"], ("INJ-1",))
    return None


def _bad_inject_check(view: TraceView, agent: str) -> Violation | None:
    """INJ-4: an ``inject()`` of content JSON cannot encode raises to the caller; made while no
    turn is open by the log, it raises once its one-shot turn is closed (its ``turn/end`` is
    logged when the error reaches the caller), and a waiter taken then is released only once that
    turn's flush ran. Not judged: a disposed agent's, one a dispose, a driver's cancel or a close
    came before its answer (what a disposed agent raises is DISP-3's)."""
    injects = view.of_kind("op", op="inject", agent=agent)
    bad = [e for e in injects if e.get("unserialisable")]
    bad_sources = [e for e in injects if e.get("bad_source")]
    if not bad and not bad_sources:
        return None
    answers: dict[int, Event] = {}
    for failed in view.of_kind("op/error", agent=agent):
        answered = view.answered(failed) if failed.get("op") == "inject" else None
        if answered is not None:
            answers[answered["_i"]] = failed
    # the world's own close comes once every injection it started has settled: not a stop
    stops = [e["_i"] for e in view.ops(agent, *DISPOSERS)] + view.closings(caller=True)
    closed = next((e["_i"] for e in view.of_kind("world/closed")), len(view.timeline))

    def answer(op: Event) -> tuple[Event | None, int] | None:
        """The ``op/error`` answering ``op`` (``None``: it did not raise) and where the answer came
        (the world's close when none); ``None`` when the agent was disposed first, or a dispose, a
        driver's cancel or a caller's close came before the answer (DISP-3's, PY-1's, SVC-7's)."""
        err = answers.get(op["_i"])
        answered_at = err["_i"] if err is not None else closed
        if op.get("status") == "disposed" or any(i < answered_at for i in stops):
            return None
        return err, answered_at

    for op in bad_sources:
        # "A source that is not serialisable raises and writes nothing"
        got = answer(op)
        if got is None:
            continue
        err, _ = got
        if err is None:
            return Violation(f"agent {agent}: inject() with a source JSON cannot encode did not raise (INJ-4: a "
                             "source that is not serialisable raises and writes nothing)", op["_i"], ("INJ-4",))
        wrote = next((e for e in view.log(agent) if op["_i"] < e["_i"] and e["type"] == "context/message"
                      and ev.texts(e["data"].get("content")) == op.get("text")), None)
        if wrote is not None:
            return Violation(f"agent {agent}: inject({op.get('text')!r}) with a source JSON cannot encode logged a "
                             "context/message (INJ-4: such a source raises and writes nothing)", wrote["_i"], ("INJ-4",))
    raises = [e["_i"] for e in view.ops(agent, "raise") if e.get("on") != "session/flush"]
    for op in bad:
        got = answer(op)
        if got is None:
            continue
        err, answered_at = got
        if err is None and any(op["_i"] < i < answered_at for i in raises):
            continue  # a listener threw first (on the one-shot turn/start, say): the content may never be appended
        if err is None:
            return Violation(f"agent {agent}: inject() of content JSON cannot encode did not raise (INJ-4: bad input "
                             "raises to the caller)", op["_i"], ("INJ-4",))
        # by the log when the call's body ran (a coroutine's, as it began: a turn may be open by then)
        at = next((b["_i"] for b in view.of_kind("inject/began") if op["_i"] < b["_i"] < err["_i"]
                   and b.get("agent") == agent and b.get("by") == op.get("by")), op["_i"])
        if _turn_around(view, agent, at) is not None:
            continue
        one_shot = next((t for t in view.turns(agent) if t["trigger"] == "injection" and at < t["_i"]
                         and t["end_i"] is not None and t["end_i"] < err["_i"]), None)
        if one_shot is None:
            return Violation(f"agent {agent}: inject() of content JSON cannot encode, made while no turn was open, "
                             "raised before its one-shot turn was closed (INJ-4: it raises once the turn's turn/end "
                             "is in the log)", err["_i"], ("INJ-4",))
        found = _flushed_before_released(view, agent, one_shot, err, stops)
        if found is not None:
            return found
    return None


def _unflushed(view: TraceView, agent: str, one_shot: Event, starts: list[int], at: int) -> list[Event]:
    """The agent's turns other than ``one_shot`` ended before ``at`` whose flush may begin after
    ``one_shot``'s end: those a flush begun by then does not account for (each flush given to the
    earliest turn ended before it that has none), and those ended since."""
    since = one_shot["end_i"]
    waiting = [t for t in view.turns(agent) if t is not one_shot and t["end_i"] is not None and t["end_i"] < at]
    for i in starts:
        if i > since:
            break
        first = next((t for t in waiting if t["end_i"] < i), None)
        if first is not None:
            waiting.remove(first)
    return waiting


def _flushed_before_released(view: TraceView, agent: str, one_shot: Event, err: Event,
                             stops: list[int]) -> Violation | None:
    """INJ-4: the bad inject's one-shot turn's flush "has run by the time when_idle() resolves":
    a waiter taken once the error reached the caller (at the call, for a synchronous inject that
    leaves its flush scheduled) is released only once that flush ended. (Of a waiter taken while
    an awaitable inject was still pending, the kit says nothing: such an inject may give its
    caller the wait itself, docs/mutants.md, session 56.)

    Flushes carry no turn, so they are counted. The turn's flush is one begun since its
    ``turn/end``; so is that of each other turn left without one then, or ended since (the
    claimants, :func:`_unflushed`). When they are all the driver's, whose flushes have ended by
    the release (the driver awaits its flush: LOOP-4, IDLE-2), every flush begun since has ended,
    one more than there are claimants; when another inject's turn is among them (INJ-4 holds
    waiters for a bad inject's flush only), at least one has. Once a ``dispose()`` came, only the
    flushes begun before it are owed (ended, or cut by the disposal). Judged where a flush
    listener records every flush and the release was sampled exactly; not where a driver's cancel
    or a close came first (PY-1, SVC-7)."""
    flushes = view.of_kind("flush")
    if not flushes:
        return None  # no flush listener records flushes here: nothing to say
    since = one_shot["end_i"]
    begun = {e.get("n"): e["_i"] for e in flushes if e.get("agent") == agent and e.get("phase") == "start"
             and e["_i"] > since}
    ended = {e.get("n"): e["_i"] for e in flushes if e.get("phase") in ("end", "cut", "failed") and e.get("n") in begun}
    starts = [e["_i"] for e in flushes if e.get("agent") == agent and e.get("phase") == "start"]
    disposes = [e["_i"] for e in view.ops(agent, "dispose")]
    released = {e.get("waiter"): e for e in view.of_kind("waiter/released")}
    for reg in view.ops(agent, "when_idle"):
        rel = released.get(reg.get("waiter"))
        if reg["_i"] < err["_i"] or rel is None or not rel.get("precise"):
            continue
        at = rel["_i"]
        if any(i < at for i in stops if i not in disposes):  # a driver's cancel, a close (PY-1, SVC-7)
            continue
        disposed = next((i for i in disposes if i < at), None)
        claimants = _unflushed(view, agent, one_shot, starts, at)
        strict = all(t["trigger"] != "injection" for t in claimants)
        done = sum(1 for n, i in ended.items() if begun[n] < at and i < at)
        running = any(i < at and ended.get(n, len(view.timeline)) > at for n, i in begun.items()
                      if disposed is None or i < disposed)
        if disposed is not None:
            # IDLE-4 and INJ-4: a disposed agent's waiter waits for its driver to exit, and for a
            # flush begun before the disposal to end (or be cut: DISP-2); whether a disposed
            # agent still owes a flush not begun by then, the contract leaves open
            failed = strict and running
        else:
            failed = done < 1 + (len(claimants) if strict else 0) or (strict and running)
        if failed:
            return Violation(f"agent {agent}: when_idle() {reg.get('waiter')!r}, taken once inject() of content JSON "
                             f"cannot encode had raised, resolved before the flush of its one-shot turn "
                             f"{one_shot['turn']} had run (INJ-4: its flush has run by the time when_idle() "
                             "resolves)", at, ("INJ-4",))
    return None


def _closed_check(view: TraceView) -> Violation | None:
    """LOG-2: every event notified through ``session/event`` is in the log; SVC-7: once
    ``service.close()`` returned every agent is disposed and logs nothing more (IDLE-4: its driver
    has exited); SVC-6: a disposed agent (every agent, once the service is closed) is no longer
    registered."""
    closed = view.of_kind("world/closed")
    if not closed:
        return None
    end = closed[-1]
    for agent, status in (end.get("agents") or {}).items():
        if status != "disposed":
            return Violation(f"agent {agent}: still {status} after service.close() (SVC-7: closing the "
                             "service disposes every agent it created)", end["_i"], ("SVC-7",))
    for agent, length in (end.get("logs") or {}).items():
        log = view.log(agent)
        late = [e for e in log if e["_i"] > end["_i"]]
        if late:
            return Violation(f"agent {agent}: {len(late)} session event(s) ({late[0]['type']} first) were logged after "
                             "service.close() returned: its driver was still closing a turn (SVC-7: close() disposes "
                             "every agent; IDLE-4: a disposed agent's when_idle() waits for its driver to exit)",
                             late[0]["_i"], ("SVC-7", "IDLE-4"))
        notified = len(log)
        if length < notified:
            return Violation(f"agent {agent}: {notified} session events were notified but the log holds {length}: an "
                             "event is pushed before session/event listeners hear of it, so a throwing listener "
                             "leaves it in the log (LOG-2)", end["_i"], ("LOG-2",))
    registered = list(end.get("registered") or ())
    if registered:
        return Violation(f"agents {registered} are still registered after the service closed (SVC-6: disposal "
                         "removes an agent from the registry)", end["_i"], ("SVC-6", "SVC-7"))
    return None


def _agent_models(view: TraceView) -> dict[str, str]:
    """Model name -> the one agent using it (models several agents share are left out)."""
    users: dict[str, set[str]] = {}
    for e in view.of_kind("agent/created"):
        users.setdefault(str(e.get("model")), set()).add(str(e.get("agent")))
    return {m: next(iter(a)) for m, a in users.items() if len(a) == 1}


def _unreturned_message_check(view: TraceView) -> Violation | None:
    """LOOP-6, ABORT-1: after an abort or cancel made inside the ``agent/step-result`` waterfall
    (a listener of it), a loop may abandon the waterfall or await it; either way an
    ``assistant/message`` of that step is what the waterfall returned, so none is logged before
    the acting listener returned (``waterfall/returned``): logging the assembled message then
    logs what a moderating listener was about to replace."""
    returns = [e["_i"] for e in view.of_kind("waterfall/returned")]
    firings = view.of_kind("listener", on="agent/step-result")
    for agent in view.agents:
        for op in view.ops(agent, "abort", "cancel"):
            if op.get("on") != "agent/step-result" or op.get("status") != "running":
                continue
            # only a stop made inside the agent's own waterfall holds its step's message: one made
            # in another agent's waterfall leaves this one's to return what it returns
            fired = next((e for e in reversed(firings) if e["_i"] < op["_i"] and e.get("name") == op.get("by")), None)
            if fired is not None and fired.get("agent") is not None and fired.get("agent") != agent:
                continue
            turn = _turn_around(view, agent, op["_i"])
            if turn is None:
                continue
            opened = [e for e in turn["events"] if e["type"] == "step/start" and e["_i"] < op["_i"]]
            if not opened:
                continue
            step = opened[-1]["data"].get("step")
            returned = next((i for i in returns if i > op["_i"]), len(view.timeline))
            late = next((e for e in turn["events"] if e["type"] == "assistant/message" and op["_i"] < e["_i"] < returned
                         and e["data"].get("step") == step), None)
            if late is not None:
                return Violation(f"agent {agent}: step {step} of turn {turn['turn']} was stopped by {op.get('op')}() inside "
                                 "the agent/step-result waterfall, and an assistant/message was logged for it before "
                                 "the waterfall returned (LOOP-6: the log records what the waterfall returned; a "
                                 "stopped waterfall the loop abandoned returned nothing; ABORT-1)", late["_i"],
                                 ("LOOP-6", "ABORT-1"))
    return None


def _signalled_stream_check(view: TraceView) -> Violation | None:
    """ABORT-1, CANCEL-MID, FINISH-1: a stream the step's own abort signal stopped (the fake
    model saw it fire: ``model/done`` marked ``signalled``) ends its turn ``aborted`` (or
    ``disposed``), never ``error``: an adapter failing its pending read, or ending without a
    finish, because of that abort does not make the step a failure. Not judged in a turn where a
    listener threw or the driver's task was cancelled (their own outcomes)."""
    signalled = [e for e in view.of_kind("model/done") if e.get("signalled")]
    models = _agent_models(view) if signalled else {}
    # The turn of a call is where its request was made: a stream's end may be recorded later,
    # once the next turn began (over the wire, the driver's model notices the abort late).
    requests = _requests(view) if signalled else {}
    for e in signalled:
        agent = models.get(str(e.get("model")))
        at = requests.get((e.get("model"), e.get("call")), int(e["_i"]))
        turn = _ended_turn_around(view, agent, at) if agent is not None else None
        if agent is None or turn is None or turn["reason"] != "error":
            continue
        if any(turn["_i"] < op["_i"] < turn["end_i"] for op in view.ops(agent, "raise", "cancel_driver")):
            continue
        return Violation(f"agent {agent}: the model stream of turn {turn['turn']} stopped at the step's abort signal, "
                         "and the turn ended error, not aborted (ABORT-1, CANCEL-MID: an abort or cancel during a "
                         "stream ends the turn aborted{reason}; FINISH-1: the step's own signal makes it aborted)",
                         turn["end_i"], ("ABORT-1", "CANCEL-MID", "FINISH-1"))
    return None


def _past_last_gate(view: TraceView, agent: str, turn: dict[str, Any], at: int) -> bool:
    """Whether ``at`` comes after ``turn``'s last continuation decision: its last
    ``agent/turn-continuation`` call was made before it and no step opened since. A cancel from
    outside that waterfall then lands where the turn neither starts nor continues, only closes
    (a loop that awaits between its gate and ``turn/end``): whether it still makes the closing
    turn ``aborted``, the spec leaves open (the marker is checked where a turn could start or
    continue, and "every window" names those). Only where the world recorded the calls."""
    calls = [e["_i"] for e in view.of_kind("continuation", agent=agent) if turn["_i"] < e["_i"] < at]
    if not calls:
        return False
    return not any(e["type"] == "step/start" and calls[-1] < e["_i"] < at for e in turn["events"])


def _in_own(view: TraceView, agent: str, op: Event, *events: str) -> bool:
    """Whether ``op`` was made by a listener of one of ``events`` (``on``) of ``agent``'s own: a
    listener on another agent's event (two agents on one service, a plugin of b acting on a)
    acts from outside ``agent``'s turn, in no window of its. The listener's firing, recorded just
    before its ops, names whose event it was (an event with no agent counts as the agent's)."""
    if op.get("on") not in events:
        return False
    fired = next((e for e in reversed(view.of_kind("listener")) if e["_i"] < op["_i"]
                  and e.get("name") == op.get("by") and e.get("on") == op.get("on")), None)
    return fired is None or fired.get("agent") in (None, agent)


def _cancel_step_check(view: TraceView) -> Violation | None:
    """CANCEL-1/CANCEL-STEP/CANCEL-CONT: after a ``cancel()`` while a turn is open, that turn opens
    no further step that calls the model (its marker stops the next step and the continuation), a
    cancel from a synchronous ``agent/turn-start`` or ``agent/step-start`` listener drops the step
    it comes before (CANCEL-STEP: the model is not called), and the turn ends aborted. The step
    already open when a cancel lands elsewhere is the in-flight step the cancel aborts: whether
    the loop still makes its model call, with the signal fired, is not judged (no rule says)."""
    for agent in view.agents:
        # CANCEL-CONT: a cancel inside the continuation waterfall opens no further step (not even
        # an empty one: the gate decides before the next step's own marker check would drop it).
        for c in view.ops(agent, "cancel"):
            if not _in_own(view, agent, c, "agent/turn-continuation") or c.get("status") != "running":
                continue
            turn = _turn_around(view, agent, c["_i"])
            opened = [e for e in (turn["events"] if turn else ()) if e["type"] == "step/start" and e["_i"] > c["_i"]]
            if turn is not None and opened:
                return Violation(f"agent {agent}: step {opened[0]['data'].get('step')} of turn {turn['turn']} opened after a "
                                 "cancel() during the continuation waterfall (no further step runs)", opened[0]["_i"],
                                 ("CANCEL-CONT",))
        # CANCEL-1: a turn cancelled while open ends aborted (in every window), unless it failed
        # or was disposed first or after (their own reasons; MAXTOK-3 for max-tokens).
        for c in view.ops(agent, "cancel"):
            turn = _turn_around(view, agent, c["_i"]) if c.get("status") == "running" else None
            if turn is not None and turn["ended"] and turn["reason"] in _NORMAL and turn["trigger"] == "message":
                gate = _in_own(view, agent, c, "agent/turn-continuation")
                if not gate and _past_last_gate(view, agent, turn, c["_i"]):
                    continue
                return Violation(f"agent {agent}: turn {turn['turn']} was cancelled while open but ended "
                                 f"{turn['reason']} (CANCEL-1: a cancelled turn ends aborted{{reason}} in every window"
                                 + ("; CANCEL-CONT: at the continuation gate whatever it voted)" if gate else ")"),
                                 turn["end_i"], ("CANCEL-1", "CANCEL-CONT") if gate else ("CANCEL-1",))
    models = _agent_models(view)
    if not models:
        return None
    requests: dict[str, list[int]] = {}
    for e in view.of_kind("model/request"):
        caller = models.get(str(e.get("model")))
        if caller is not None:
            requests.setdefault(caller, []).append(e["_i"])
    for agent, calls in requests.items():
        for c in view.ops(agent, "cancel"):
            if c.get("status") != "running":
                continue
            turn = _turn_around(view, agent, c["_i"])
            if turn is None:
                continue
            end = turn["end_i"] if turn["end_i"] is not None else len(view.timeline)
            boundary = _in_own(view, agent, c, "agent/turn-start", "agent/step-start")  # CANCEL-STEP
            opened = [e["_i"] for e in turn["events"] if e["type"] == "step/start" and e["_i"] > c["_i"]]
            later = [i for i in calls if c["_i"] < i < end and (boundary or any(o < i for o in opened))]
            if later:
                why = (f"by a synchronous {c['on']} listener (CANCEL-STEP: the step is dropped, the model not called)"
                       if boundary else "(a cancelled turn runs no further step)")
                return Violation(f"agent {agent}: the model was called in turn {turn['turn']} after a cancel() {why}",
                                 later[0], ("CANCEL-1", "CANCEL-CONT", "CANCEL-STEP"))
    return None


def _steps(turn: dict[str, Any]) -> dict[int, list[Event]]:
    out: dict[int, list[Event]] = {}
    for e in turn["events"]:
        step = e["data"].get("step")
        if isinstance(step, int) and step > 0:
            out.setdefault(step, []).append(e)
    return out


def _finish_error_not_carried(where: str, turn: dict[str, Any], chunks: list[Any]) -> Violation | None:
    """FINISH-1/ERR-7: the turn's error event of a step that finished ``error{message, code}``,
    when it gives that message (it is that failure, not a listener's) but not that code."""
    reason = next((c.get("reason") for c in chunks if c.get("type") == "finish"), None)
    if not isinstance(reason, _MAP) or not isinstance(reason.get("message"), str) or (
            "code" in reason and not isinstance(reason["code"], str)):
        return None  # a code that is no string is the model's own slip: nothing to carry (ERR-7)
    for e in turn["events"]:
        data = e["data"]
        if e["type"] == "error" and data.get("message") == reason["message"] and data.get("code") != reason.get("code"):
            said = f"{{message {reason['message']!r}" + (f", code {reason['code']!r}}}" if "code" in reason else "}")
            got = f"code {data['code']!r}" if "code" in data else "no code"
            return Violation(f"{where} finished error{said}, but its error event carries {got} (FINISH-1, ERR-7: the "
                             "message and code are carried)", e["_i"], ("FINISH-1", "ERR-7"))
    return None


def _assembly_check(view: TraceView) -> Violation | None:
    """ASM-1/ASM-3/MAXTOK-5/FINISH-1: a step's message is its blocks' ``block-end`` blocks in index
    order (a max-tokens step's without tool calls); a failed step logs no message. A step whose
    message a plugin's ``agent/step-result`` listener returned (any but the window's) is not
    judged: the log records what the listener returned (LOOP-6)."""
    rewrites = [e["_i"] for e in view.of_kind("listener") if e.get("on") == "agent/step-result"
                and e.get("name") != "window"]
    for agent in view.agents:
        for t in view.turns(agent):
            for step, events in _steps(t).items():
                if rewrites and events and any(events[0]["_i"] < i < events[-1]["_i"] for i in rewrites):
                    continue
                chunks = [e["data"].get("chunk") or {} for e in events if e["type"] == "assistant/chunk"]
                messages = [e for e in events if e["type"] == "assistant/message"]
                finish = next((c.get("reason", {}).get("kind") for c in chunks if c.get("type") == "finish"), None)
                where = f"agent {agent}: turn {t['turn']} step {step}"
                if finish == "error" and messages:
                    return Violation(f"{where} finished error but logged an assistant/message (FINISH-1)",
                                     messages[0]["_i"], ("FINISH-1",))
                found = _finish_error_not_carried(where, t, chunks) if finish == "error" else None
                if found is not None:
                    return found
                if finish == "max-tokens" and messages and not messages[0]["data"].get("content"):
                    return Violation(f"{where} finished max-tokens with nothing but tool calls, yet logged an empty "
                                     "assistant/message (MAXTOK-5: appended only when content remains)",
                                     messages[0]["_i"], ("MAXTOK-5",))
                if not messages or finish in ("error", "aborted") or not chunks:
                    continue
                expected = _assembled(chunks)
                if expected is None:
                    continue  # a block that never closed and cannot be built (no id or name for a tool call)
                if finish == "max-tokens":
                    expected = [b for b in expected if not (isinstance(b, _MAP) and b.get("type") == "tool-call")]
                got = list(messages[0]["data"].get("content") or [])
                if not _same_blocks(got, expected):
                    return Violation(f"{where}: the assistant/message is not the step's blocks in index order, each "
                                     "as its block-end says or, never closed, as its deltas built it (ASM-1, ASM-2, "
                                     f"ASM-3): {_first_difference(got, expected)}", messages[0]["_i"],
                                     ("ASM-1", "ASM-2", "ASM-3", "MAXTOK-5"))
    return None


class _Built(dict[str, Any]):
    """A block an assembly oracle built from deltas: compared by its own keys only (an
    implementation may give such a block fields of its own, as long as they say nothing else)."""


def _assembled(chunks: list[Any]) -> list[Any] | None:
    """ASM-1..3: a step's blocks in index order, each its first ``block-end``'s block or, for a
    block that never closed, what its deltas built before the stream ended: ``{type, text}`` of a
    text or reasoning block, ``{type, id, name, arguments}`` of a tool call (its id and name from
    the first delta giving them, its arguments the deltas' joined). None when a block that never
    closed cannot be built (another kind, a tool call without a name or an id)."""
    ended: dict[Any, Any] = {}
    opened: dict[Any, Any] = {}
    texts: dict[Any, str] = {}
    calls: dict[Any, dict[str, Any]] = {}
    for c in chunks:
        kind, index = c.get("type"), c.get("index")
        if kind == "block-end":
            ended.setdefault(index, c.get("block"))
        elif index in ended:
            continue  # ASM-1: what comes after a block's end is ignored
        elif kind == "block-start":
            opened.setdefault(index, c.get("block_type"))  # the trace keeps no block_type: its deltas tell
        elif kind in ("text-delta", "reasoning-delta"):
            opened[index] = opened.get(index) or kind.removesuffix("-delta")
            texts[index] = texts.get(index, "") + str(c.get("text", ""))
        elif kind == "tool-call-delta":
            opened[index] = opened.get(index) or "tool-call"
            call = calls.setdefault(index, {"arguments": ""})
            for key in ("id", "name"):
                if key not in call and isinstance(c.get(key), str):
                    call[key] = c[key]
            call["arguments"] += str(c.get("arguments_delta") or "")
        elif isinstance(kind, str) and kind.endswith("-delta"):
            opened.setdefault(index, None)
    blocks = dict(ended)
    for index, block_type in opened.items():
        if index in ended:
            continue
        if block_type in ("text", "reasoning"):
            blocks[index] = _Built(type=block_type, text=texts.get(index, ""))
            continue
        built = calls.get(index)
        if block_type != "tool-call" or built is None or "id" not in built or "name" not in built:
            return None
        blocks[index] = _Built(type="tool-call", id=built["id"], name=built["name"], arguments=built["arguments"])
    return [blocks[i] for i in sorted(blocks, key=lambda i: (not isinstance(i, int), i))]


def _first_difference(got: list[Any], expected: list[Any]) -> str:
    """Where an assembled message first differs from the blocks expected, in a line."""
    for i, (g, e) in enumerate(zip(got, expected, strict=False)):
        if not _same_blocks([g], [e]):
            return f"block {i} is {_short(g)}, expected {_short(dict(e))}"
    return f"{len(got)} block(s), expected {len(expected)}"


def _short(value: Any, limit: int = 160) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def _same_blocks(got: list[Any], expected: list[Any]) -> bool:
    """``got`` is ``expected``, a block built from deltas (:class:`_Built`) compared by its own
    keys only."""
    if len(got) != len(expected):
        return False
    for g, e in zip(got, expected, strict=True):
        if g == e:
            continue
        if not (isinstance(e, _Built) and isinstance(g, _MAP)):
            return False
        if any(g.get(k) != v for k, v in e.items()):
            return False
    return True


_UNFINISHED = frozenset(("aborted", "cancelled", "raised", "exhausted", "closed"))
"""Fake-model call outcomes where the loop was not given the whole stream, or stopped taking it."""


def _requests(view: TraceView) -> dict[tuple[Any, Any], int]:
    """The timeline index of each fake-model call's ``model/request``, by ``(model, call)``."""
    cached: dict[tuple[Any, Any], int] | None = view._cache.get("requests")
    if cached is None:
        cached = view._cache["requests"] = {(e.get("model"), e.get("call")): e["_i"]
                                             for e in view.of_kind("model/request")}
    return cached


_ModelCall = tuple[Event, str, int, dict[str, Any], Any]


def _model_calls(view: TraceView) -> list[_ModelCall]:
    """Each fake-model call made inside a step: ``(model/done, agent, the timeline index of its
    model/request, the turn, the step number)`` (read once per view: several oracles ask)."""
    cached: list[_ModelCall] | None = view._cache.get(("model_calls",))
    if cached is not None:
        return cached
    models = _agent_models(view)
    requests = _requests(view)
    cached = view._cache[("model_calls",)] = []
    for done in view.of_kind("model/done"):
        agent = models.get(str(done.get("model")))
        start = requests.get((done.get("model"), done.get("call")))
        if agent is None or start is None:
            continue
        turn = _turn_around(view, agent, start)
        opened = [e for e in (turn["events"] if turn else ()) if e["type"] == "step/start" and e["_i"] < start]
        if turn is not None and opened:
            cached.append((done, agent, start, turn, opened[-1]["data"].get("step")))
    return cached


def _streamed(view: TraceView) -> dict[tuple[str, Any, Any], int]:
    """Where each step's model stream ended (its ``model/done``), by ``(agent, turn, step)``
    (read once per view: STEP-ORDER and CONTINUED ask)."""
    cached: dict[tuple[str, Any, Any], int] | None = view._cache.get(("streamed",))
    if cached is None:
        cached = view._cache[("streamed",)] = {
            (agent, turn["turn"], step): done["_i"] for done, agent, _start, turn, step in _model_calls(view)}
    return cached


def _stopped(view: TraceView, agent: str, start: int, end: int, by: tuple[str, ...] = ("abort", "cancel", "raise")) -> bool:
    """Whether a stop (by default an abort, a cancel or a listener's throw: the ops ``by``) came
    between ``start`` and ``end``, or a disposal before ``end``: a driver cancel made by a listener
    before the step lands at the driver's next suspension, inside it (PY-1), and a loop may still
    start a step's model call after ``dispose()`` (the turn ends ``disposed`` whatever the call did)."""
    return any(start < e["_i"] < end for e in view.ops(agent, *by)) or any(
        e["_i"] < end for e in view.ops(agent, "dispose", "cancel_driver"))


def _gist(content: Any) -> list[tuple[Any, Any]]:
    """A message's blocks as ``(type, text or call id)``: what MESSAGE compares (an
    implementation may give a block keys of its own)."""
    out: list[tuple[Any, Any]] = []
    for b in content if isinstance(content, list) else ():
        kind = b.get("type") if isinstance(b, _MAP) else None
        out.append((kind, b.get("id") if kind == "tool-call" else b.get("text") if isinstance(b, _MAP) else b))
    return out


def _message_check(view: TraceView) -> Violation | None:
    """LOOP-5, LOOP-6, MAXTOK-5: a step whose model stream finished (any kind but ``error`` or
    ``aborted``; no finish counts as ``stop``, ASM-4) logs one ``assistant/message``: the message
    ``agent/step-result`` returned, even an empty one; of a ``max-tokens`` step, that message less
    its tool calls, and none when nothing remains. What the waterfall returned is known where a
    plugin's listener rewrote it (``waterfall/rewrote``), else it is the assembled message
    (ASSEMBLY judges its blocks). Steps something interrupted (a stop, a listener's throw, a
    contained failure, a disposal, the service's close) are not judged."""
    closed_at = next(iter(view.closings()), len(view.timeline))
    rewrites = [e for e in view.of_kind("waterfall/rewrote") if e.get("on") == "agent/step-result"
                and isinstance((e.get("fields") or {}).get("content"), list)]
    for done, agent, start, turn, step in _model_calls(view):
        outcome = done.get("outcome")
        if outcome in _UNFINISHED or outcome in ("error", "aborted") or done.get("unread") or not isinstance(step, int):
            continue
        events = _steps(turn).get(step, [])
        end = next((e["_i"] for e in events if e["type"] == "step/end"), turn["end_i"])
        if end is None or end > closed_at or _stopped(view, agent, start, end):
            continue
        if any(start < e["_i"] < end for e in view.of_kind("agent/error", agent=agent)):
            continue
        where = f"agent {agent}: turn {turn['turn']} step {step}"
        messages = [e for e in events if e["type"] == "assistant/message"]
        rewrote = [r for r in rewrites if start < r["_i"] < end and r.get("agent") == agent
                   and r.get("turn") == turn["turn"] and r.get("step") == step]
        returned = list(rewrote[-1]["fields"]["content"]) if rewrote else None
        expected: list[Any] | None = returned
        if outcome == "max-tokens":
            if returned is None:
                chunks = [e["data"].get("chunk") or {} for e in events if e["type"] == "assistant/chunk"]
                returned = _assembled(chunks) if not any(r.get("agent") == agent for r in rewrites) else None
            if returned is None:
                continue
            remains = [b for b in returned if not (isinstance(b, _MAP) and b.get("type") == "tool-call")]
            if not remains:
                if messages:
                    return Violation(f"{where} finished max-tokens and agent/step-result returned nothing but tool "
                                     "calls, yet it logged an assistant/message (MAXTOK-5: appended only when "
                                     "content remains)", messages[0]["_i"], ("MAXTOK-5",))
                continue
            expected = remains
        if not messages:
            said = "finished max-tokens with content left" if outcome == "max-tokens" else f"finished ({outcome})"
            return Violation(f"{where} {said}, nothing stopping it, but logged no assistant/message (LOOP-5: the "
                             "message agent/step-result returned is appended, an empty one too; MAXTOK-5: a "
                             "max-tokens step's, when content remains)", end, ("LOOP-5", "LOOP-6", "MAXTOK-5"))
        if len(messages) > 1:
            return Violation(f"{where} logged {len(messages)} assistant/message events (LOOP-5: a step appends its "
                             "message once)", messages[1]["_i"], ("LOOP-5",))
        if expected is not None and _gist(messages[0]["data"].get("content")) != _gist(expected):
            return Violation(f"{where}: the assistant/message holds {_gist(messages[0]['data'].get('content'))}, not "
                             f"what agent/step-result returned, {_gist(expected)}"
                             f"{' less its tool calls' if outcome == 'max-tokens' else ''} (LOOP-6: the log records "
                             "what the waterfall returned; MAXTOK-5)", messages[0]["_i"], ("LOOP-6", "MAXTOK-5"))
    return None


def _chunks_check(view: TraceView) -> Violation | None:
    """LOG-3/LOOP-5/ASM-4: every chunk a model call streamed to its end is logged as an
    ``assistant/chunk`` of its step, and a streamed ``usage`` is the step's ``usage`` event.
    Steps something interrupted (an abort, a cancel, a disposal, a raising listener, a contained
    failure, the world's close) are not judged: what they log of the rest is another rule's. Of a
    step an abort or a cancel stopped, the chunks the stream had yielded when the signal fired
    (``model/aborted``'s ``handed``) are all logged: the loop had them (indie61e, session 49)."""
    closed_at = next(iter(view.closings()), len(view.timeline))
    handed = {(e.get("model"), e.get("call")): e.get("handed") for e in view.of_kind("model/aborted")}
    for done, agent, start, turn, step in _model_calls(view):
        given = done.get("chunks")
        events = _steps(turn).get(step, []) if isinstance(step, int) else []
        end = next((e["_i"] for e in events if e["type"] == "step/end"), turn["end_i"])
        if end is None or end > closed_at:
            continue
        failed = any(start < e["_i"] < end for e in view.of_kind("agent/error", agent=agent))
        before = handed.get((done.get("model"), done.get("call")))
        if isinstance(before, int) and before > 0 and not failed and not _stopped(view, agent, start, end, ("raise",)):
            # LOG-3: what the stream had yielded when the step's signal fired was the loop's
            logged = sum(1 for e in events if e["type"] == "assistant/chunk")
            if logged < before:
                return Violation(f"agent {agent}: turn {turn['turn']} step {step}: the model had handed the loop "
                                 f"{before} chunk(s) when the step's signal fired, but the step logged {logged} "
                                 "(LOG-3: assistant/chunk events are never filtered out; LOOP-5: each chunk is "
                                 "appended)", end, ("LOG-3", "LOOP-5"))
        if not isinstance(given, int) or (done.get("outcome") in _UNFINISHED and not done.get("unread")):
            continue
        # a stop since the step opened: an abort while its request was built (a waterfall
        # awaiting) may let the loop call the model with the signal fired, and read nothing
        opened = next((e["_i"] for e in events if e["type"] == "step/start"), start)
        if failed or _stopped(view, agent, min(opened, start), end):
            continue
        where = f"agent {agent}: turn {turn['turn']} step {step}"
        if done.get("unread"):
            return Violation(f"{where}: the loop stopped reading the model's stream with {done['unread']} chunk(s) "
                             f"left after the {given} it read (LOOP-5: each chunk the model streams is appended; "
                             "ASM-4: a usage after the finish is the step's last)", end, ("LOOP-5", "ASM-4"))
        logged = sum(1 for e in events if e["type"] == "assistant/chunk")
        if logged < given:
            return Violation(f"{where}: the model streamed {given} chunk(s) but the log has {logged} assistant/chunk "
                             "event(s) (LOG-3: chunks are never filtered out; LOOP-5: each chunk is appended)",
                             end, ("LOG-3", "LOOP-5"))
        usage = done.get("usage")
        if usage is None:
            stray = next((e for e in events if e["type"] == "usage"), None)
            if stray is not None:
                return Violation(f"{where}: the model reported no usage, yet the step logged usage "
                                 f"{stray['data'].get('usage')} (LOOP-5: usage is appended when the model reported "
                                 "it; ASM-4: a step's usage is its own stream's)", stray["_i"], ("LOOP-5", "ASM-4"))
        elif done.get("outcome") not in ("error", "aborted"):  # a failed step: FINISH-1
            found = [e["data"].get("usage") for e in events if e["type"] == "usage"]
            if usage not in found:
                return Violation(f"{where}: the model reported usage {usage} but the step logged "
                                 f"{'usage ' + str(found[-1]) if found else 'no usage event'} (LOOP-5: usage is "
                                 "appended when the model reported it; ASM-4: the last usage chunk is the step's)",
                                 end, ("LOOP-5", "ASM-4"))
    return None


_NOT_SUCCESS = frozenset(("error", "aborted", "raised", "exhausted", "cancelled", "closed"))
"""Fake-model call outcomes that are no successful finish (any other is one: ``stop``,
``tool-calls``, ``max-tokens``, ``ended`` with no finish chunk, or a kind no rule names)."""


def _finished_check(view: TraceView) -> Violation | None:
    """FINISH-1 and section 0 ("the set is open: an unknown kind counts as a success"): a step
    whose model stream finished successfully does not fail its turn by that finish. Judged where
    nothing else could have failed the turn: no listener threw during it (a window's ``raise``)."""
    calls = {(agent, turn["turn"], step): done for done, agent, _start, turn, step in _model_calls(view)}
    for agent in view.agents:
        for t in view.turns(agent):
            if t.get("reason") != "error":
                continue
            failed = next((e for e in t["events"] if e["type"] == "error"), None)
            if failed is None:
                continue
            done = calls.get((agent, t["turn"], failed["data"].get("step")))
            outcome = None if done is None else done.get("outcome")
            if outcome is None or outcome in _NOT_SUCCESS:
                continue
            end = t["end_i"] if t["end_i"] is not None else len(view.timeline)
            if any(t["_i"] <= e["_i"] <= end for e in view.ops(agent, "raise")):
                continue
            return Violation(f"agent {agent}: turn {t['turn']} ended error ({failed['data'].get('message')!r}) "
                             f"although its step {failed['data'].get('step')}'s model stream finished "
                             f"{outcome!r} (FINISH-1, section 0: only finish{{error}} or finish{{aborted}} "
                             "fail a step; an unknown kind counts as a success)", failed["_i"], ("FINISH-1",))
    return None


_PERTURBING = frozenset(("cancel_driver", "reload", "close", "reconfigure"))
"""Ops after which the UNCAUSED oracle does not judge: they end drivers, resume sessions on a
second service, close the service under a step or change what a step may call, and what a loop
makes of that is judged by the oracles of those rules."""


def _uncaused_failure_check(view: TraceView) -> Violation | None:
    """Section 6's turn-end reasons, FINISH-1/FINISH-2 and ERR-2: a turn ends ``error`` because
    something failed. Judged in runs where the world can name every failure it made: a turn that
    ends ``error`` needs, between the agent's previous turn end and its own, a model stream that
    did not finish successfully, a listener that threw (``raise``), a tool that failed, a call
    given bad input, or the world's own problem; an agent created without a model (LOOP-7) is not
    judged, nor a run whose driver was cancelled, service closed or reconfigured, or session
    reloaded (:data:`_PERTURBING`). What it finds: a loop failing a turn for a failure of its own
    (an exception of its bookkeeping caught as the turn's failure, a state checked before an
    await and trusted after it), where nothing the turn was given failed."""
    if not view.of_kind("log") or any(e.get("model") is None for e in view.of_kind("agent/created")):
        return None
    if not any(t["reason"] == "error" for agent in view.agents for t in view.turns(agent)):
        return None  # most runs: nothing to explain
    causes: list[int] = []
    given = len(view.timeline)
    for i, e in enumerate(view.timeline):
        kind = e.get("kind")
        if kind == "op":
            op = e.get("op")
            if op in _PERTURBING:
                return None
            if op == "raise":
                causes.append(i)
            elif e.get("unserialisable") or e.get("bad_source"):
                given = min(given, i)  # bad input queued now may fail any later turn
        elif kind == "model/done":
            if e.get("outcome") in _NOT_SUCCESS:
                causes.append(i)
        elif (kind == "tool/done" and e.get("outcome") != "ok") or kind in ("problem", "actor/error", "op/error"):
            causes.append(i)
    for agent in view.agents:
        previous = -1
        for t in view.turns(agent):
            end = t["end_i"]
            if end is None:
                break
            if t["reason"] == "error" and given > end and not any(previous < c <= end for c in causes):
                failed = next((e for e in t["events"] if e["type"] == "error"), None)
                message = None if failed is None else failed["data"].get("message")
                return Violation(f"agent {agent}: turn {t['turn']} ended error ({message!r}) although nothing it was "
                                 "given failed since the turn before: no model stream failed, no listener threw, no "
                                 "tool failed, no call was given bad input (section 6, FINISH-1, FINISH-2, ERR-2: "
                                 "a turn ends error for a failure)", end, ("FINISH-1", "FINISH-2", "ERR-2"))
            previous = end
    return None


def _raised_check(view: TraceView) -> Violation | None:
    """FINISH-1/FINISH-2/ERR-7: a step whose model stream raised (the fake model's scripted
    raise, its message and code in ``model/done``) logs no ``assistant/message``, and a turn it
    ended ``error`` ends with the raised message and code. Turns a caller or a listener acted in
    after the request are not judged: a stronger reason, or an earlier failure, may end them."""
    for done, agent, start, turn, step in _model_calls(view):
        stop = turn["end_i"]
        if done.get("outcome") != "raised" or not isinstance(done.get("error"), str) or stop is None:
            continue
        if _stopped(view, agent, start, stop):
            continue
        where = f"agent {agent}: turn {turn['turn']} step {step}"
        message = next((e for e in _steps(turn).get(step, []) if e["type"] == "assistant/message"), None)
        if message is not None:
            return Violation(f"{where}: the model stream raised {done['error']!r}, yet the step logged an "
                             "assistant/message (FINISH-1: a failed step never logs a normal assistant/message)",
                             message["_i"], ("FINISH-1", "FINISH-2"))
        reason = turn["events"][-1]["data"].get("reason")
        if turn["reason"] != "error" or not isinstance(reason, _MAP):
            continue
        if reason.get("message") != done["error"] or reason.get("code") != done.get("code"):
            said = f"message {done['error']!r}" + (f", code {done['code']!r}" if "code" in done else "")
            got = f"message {reason.get('message')!r}" + (f", code {reason['code']!r}" if "code" in reason else "")
            return Violation(f"{where}: the model stream raised ({said}) but the turn ended error with {got} "
                             "(FINISH-2: the raised message and its code attribute; ERR-7)", stop,
                             ("FINISH-2", "ERR-7"))
    return None


def _continued_check(view: TraceView) -> Violation | None:
    """LOOP-5/CONT-1: every step of a turn that ended ``completed`` or ``max-tokens`` ends with
    one ``agent/turn-continuation`` call (after its ``step/end``, before the next step opens),
    told the turn's number and, as its default decision, CONT-1's: the step dispatched a tool
    call, or steering was drained after its message (a max-tokens step dispatches none). The
    default is judged only where nobody acted between the step's message and the call (a
    steer there may or may not count, as the implementation reads "drained after it")."""
    if not any(e.get("continuations") == "recorded" for e in view.of_kind("world/closed")):
        return None
    streamed = _streamed(view)
    for agent in view.agents:
        calls = view.of_kind("continuation", agent=agent)
        acted = [e["_i"] for e in view.ops(agent)]
        for t in view.turns(agent):
            if t["reason"] not in ("completed", "max-tokens") or t["end_i"] is None:
                continue
            mine = [c for c in calls if t["_i"] < c["_i"] < t["end_i"]]
            steps = sorted(_steps(t).items())
            ends = [next((e for e in events if e["type"] == "step/end"), None) for _n, events in steps]
            where = f"agent {agent}: turn {t['turn']}"
            if len(mine) != len(steps) or None in ends:
                return Violation(f"{where} ran {len(steps)} step(s) but its agent/turn-continuation waterfall was "
                                 f"called {len(mine)} time(s) (LOOP-5: every step ends with it; CONT-1: it decides "
                                 "whether the turn goes on)", (mine[-1] if mine else t["events"][-1])["_i"],
                                 ("LOOP-5", "CONT-1"))
            for k, ((step, events), end, call) in enumerate(zip(steps, ends, mine, strict=True)):
                assert end is not None
                following = steps[k + 1][1][0]["_i"] if k + 1 < len(steps) else t["end_i"]
                if not end["_i"] < call["_i"] < following:
                    return Violation(f"{where}: step {step}'s agent/turn-continuation call is not between its "
                                     "step/end and what follows (LOOP-5)", call["_i"], ("LOOP-5",))
                if call.get("turn") != t["turn"]:
                    return Violation(f"{where}: step {step}'s agent/turn-continuation was told turn "
                                     f"{call.get('turn')!r} (0b: agent/turn-continuation(agent, turn, ...))",
                                     call["_i"], ("LOOP-5",))
                # a step that logs no message (MAXTOK-5: nothing remained) is over once its stream finished
                message = next((e["_i"] for e in events if e["type"] == "assistant/message"),
                               min(end["_i"], streamed.get((agent, t["turn"], step), end["_i"])))
                if any(message < i < call["_i"] for i in acted) or not isinstance(call.get("decision"), bool):
                    continue
                expected = any(e["type"] == "tool/call" for e in events) or any(
                    e["type"] == "steering/message" and message < e["_i"] < end["_i"] for e in t["events"])
                if call["decision"] != expected:
                    why = "it dispatched a tool call or steering was drained after it" if expected else (
                        "it dispatched no tool call and no steering was drained after it")
                    return Violation(f"{where}: step {step}'s agent/turn-continuation default decision was "
                                     f"{call['decision']}, but {why} (CONT-1)", call["_i"], ("CONT-1",))
    return None


_PAIRS = tuple((log_type, note) for log_type, note, _level in _SHAPE)
_DROPPING = frozenset(("agent/turn-start", "agent/step-start"))


def _notified_check(view: TraceView) -> Violation | None:
    """LOOP-4/LOOP-5/CANCEL-STEP: every boundary a turn logs is notified after it (the converse
    of ``SHAPE``). Judged are turns that end normally, and turns a cancel from a synchronous
    ``agent/turn-start`` or ``agent/step-start`` listener aborted (their dropped step is opened
    and closed "and their notifications"); not injections (INJ-2 names no notification), nor
    turns a raising listener, a contained failure or a disposal touched (LOOP-4 exempts a turn a
    boundary listener closed; what a disposal notifies is DISP-1's)."""
    for agent in view.agents:
        failures = [e["_i"] for e in view.ops(agent, "raise")] + [e["_i"] for e in view.of_kind("agent/error", agent=agent)]
        troubles = failures + view.disposals(agent)
        cancels = [e for e in view.ops(agent, "cancel") if _in_own(view, agent, e, *_DROPPING) and e.get("status") == "running"]
        notes: dict[tuple[str, Any, Any], list[int]] = {}
        for _log_type, note in _PAIRS:
            for n in view.of_kind(note, agent=agent):
                key = (note, n.get("turn"), n.get("step") if note.startswith("agent/step") else None)
                notes.setdefault(key, []).append(n["_i"])
        turns = view.turns(agent)
        for t in turns:
            # LOOP-4: agent/turn-end, when made, notifies the end the log holds (ERR-10: turn/end
            # keeps its reason whatever a listener then does), not one reckoned again later
            told = next((i for i in notes.get(("agent/turn-end", t["turn"], None), ())
                         if t["end_i"] is not None and i > t["end_i"]), None)
            said = view.timeline[told].get("reason") if told is not None else None
            if told is not None and said is not None and said != t["reason"]:
                return Violation(f"agent {agent}: turn {t['turn']} logged turn/end {t['reason']} but agent/turn-end "
                                 f"notified {said} (LOOP-4: turn/end, then agent/turn-end "
                                 "notifying that end)", told, ("LOOP-4", "ERR-4"))
        for k, t in enumerate(turns):
            if not t["ended"] or t["trigger"] == "injection":
                continue
            start, end = t["_i"], t["end_i"]
            nxt = turns[k + 1]["_i"] if k + 1 < len(turns) else len(view.timeline)
            if t["reason"] == "disposed":
                # a turn its driver's cancellation cut (with a dispose() in the turn, one made before
                # the turn/end: the cancellation may have cut the disposal's close): PY-1 asks a
                # balanced log, no notification
                cut = min((e["_i"] for e in view.ops(agent, "cancel_driver") if e["_i"] < nxt), default=None)
                disposed_in = any(start <= e["_i"] < end for e in view.ops(agent, "dispose"))
                if cut is not None and (not disposed_in or cut < end):
                    continue
                found = _disposed_turn_end(agent, t, notes, failures, nxt)
                if found is not None:
                    return found
                continue
            found = _failed_turn_end(view, agent, t, notes, troubles, nxt)
            if found is not None:
                return found
            if any(start <= i < nxt for i in troubles) or any(e["type"] == "error" for e in t["events"]):
                continue
            dropped = t["reason"] == "aborted" and any(start < c["_i"] < end for c in cancels)
            if t["reason"] not in _NORMAL and not dropped:
                continue
            for e in t["events"]:
                for log_type, note in _PAIRS:
                    if e["type"] != log_type:
                        continue
                    step = e["data"].get("step") if log_type.startswith("step") else None
                    if not any(i > e["_i"] for i in notes.get((note, t["turn"], step), ())):
                        where = f"turn {t['turn']}" + (f" step {step}" if step is not None else "")
                        rules = ("CANCEL-STEP", "LOOP-5") if dropped and step is not None else (
                            ("LOOP-5",) if step is not None else ("LOOP-4",))
                        return Violation(f"agent {agent}: {where} logged {log_type} but {note} was never emitted "
                                         f"after it ({'the dropped step is opened and closed with their notifications' if dropped and step is not None else 'the turn and step shape of LOOP-4/LOOP-5'})",
                                         e["_i"], rules)
    return None


_NOTIFYING_FAILURES = frozenset(("agent/step-end", "agent/request", "agent/step-result", "agent/turn-continuation",
                                 "agent/steering"))
"""Listeners whose throw fails the turn (ERR-2; ``agent/steering``'s, ERR-1) without closing it at
a boundary: LOOP-4's exemption from ``agent/turn-end`` is not theirs (session 58's blind round I:
two loops whose throwing steering listener silenced the turn's end passed the suite and hunt)."""


_NOTIFYING_EVENTS = frozenset(("user/message", "step/start"))
"""Session events a throwing ``session/event`` listener fails the turn on (ERR-1) without being a
boundary listener: LOOP-4 names only ``turn/start`` among them."""


def _acted_on(view: TraceView, agent: str, op: Event) -> Any:
    """The session event a ``session/event`` listener's op was made on: the last the agent logged
    before it, but what the listener itself injected (INJ-1 appends at once)."""
    if not _in_own(view, agent, op, "session/event"):
        return None  # not a listener's, or one of another agent's events (acting from outside this one's log)
    return next((e["type"] for e in reversed(view.log(agent)) if e["_i"] < op["_i"] and e["type"] != "context/message"),
                None)


def _failed_turn_end(view: TraceView, agent: str, t: dict[str, Any], notes: dict[tuple[str, Any, Any], list[int]],
                     troubles: list[int], nxt: int) -> Violation | None:
    """LOOP-4: a turn a throwing ``agent/step-end``, ``agent/request``, ``agent/step-result`` or
    ``agent/turn-continuation`` listener failed is notified ended (the exemption names the
    boundary listeners only). Judged where that throw is all that touched the turn."""
    start, end = t["_i"], t["end_i"]
    if t["reason"] != "error" or end is None:
        return None
    raises = [e for e in view.ops(agent, "raise") if start < e["_i"] < end]
    if not raises or not all(e.get("on") in _NOTIFYING_FAILURES or _acted_on(view, agent, e) in _NOTIFYING_EVENTS
                             for e in raises):
        return None
    others = set(troubles) - {e["_i"] for e in raises}
    # what came once the agent settled after the turn (the world's close, say) is not the turn's
    settled = next((e["_i"] for e in view.of_kind("agent/status", agent=agent)
                    if e["_i"] > end and e.get("status") == "idle"), nxt)
    if any(start <= i < min(nxt, settled) for i in others if view.timeline[i].get("kind") != "agent/error"):
        return None  # a disposal or another failure: not this clause's
    if not any(i > end for i in notes.get(("agent/turn-end", t["turn"], None), ())):
        return Violation(f"agent {agent}: turn {t['turn']}, failed by a throwing {raises[0].get('on')} listener, logged "
                         "turn/end but agent/turn-end was never emitted after it (LOOP-4: only a boundary listener's "
                         "failure, agent/turn-start, agent/step-start or turn/start, goes without it)", end, ("LOOP-4",))
    return None


def _disposed_turn_end(agent: str, t: dict[str, Any], notes: dict[tuple[str, Any, Any], list[int]],
                       failures: list[int], nxt: int) -> Violation | None:
    """DISP-1/LOOP-4: a turn disposed after listeners were told it started (``agent/turn-start``)
    is told it ended: ``agent/turn-end`` with reason ``disposed`` after its ``turn/end`` (LOOP-4's
    one exemption is a boundary listener's failure; ERR-10 swallows a throwing ``agent/turn-end``
    listener during disposal, so the notification is made). Not judged: a turn a raising
    listener or an announced failure touched, and one disposed before ``agent/turn-start``."""
    start, end = t["_i"], t["end_i"]
    if any(start <= i < nxt for i in failures) or any(e["type"] == "error" for e in t["events"]):
        return None
    if not any(i > start for i in notes.get(("agent/turn-start", t["turn"], None), ())):
        return None
    if any(i > end for i in notes.get(("agent/turn-end", t["turn"], None), ())):
        return None
    return Violation(f"agent {agent}: turn {t['turn']} ended disposed (its agent/turn-start was emitted) but "
                     "agent/turn-end was never emitted after its turn/end (LOOP-4's turn shape: a disposal "
                     "ends the turn, it does not silence its end)", end, ("DISP-1", "LOOP-4"))


def _flush_concurrency(view: TraceView, starts: dict[Any, list[int]], ends: dict[Any, list[int]]) -> Violation | None:
    """0a/0b: ``session/flush`` runs its listeners concurrently: none is called after another
    listener of the same flush has finished. The recorder (registered first) holds its flush for
    a while, so a listener whose body ran only once the recorder's flush ended was run after it,
    in sequence. Judged in plain order only: the world sees a coroutine listener's body, not its
    call, and a schedule that fires the recorder's timer before a concurrently started listener
    body ran is as realisable as any. A listener of a later flush is told apart by the log events
    between them (one called before the recorder, as an implementation may order them, is not
    judged)."""
    if not view.fifo:
        return None
    for e in view.of_kind("listener"):
        if e.get("on") != "session/flush" or e.get("agent") not in starts:
            continue
        at, agent = e["_i"], e["agent"]
        began = next((i for i in reversed(starts[agent]) if i < at), None)
        if began is None:
            continue
        done = next((i for i in ends.get(agent, ()) if i > began), None)
        if done is None or done > at:
            continue
        if any(began < x["_i"] < at for x in view.log(agent)):
            continue  # the recorder's flush was an earlier one: this listener is of the next
        return Violation(f"agent {agent}: session/flush listener {e.get('name')!r} was called only after another "
                         "listener of the same flush had finished (0a: session/flush runs all its listeners "
                         "concurrently; LOOP-4: the flush is awaited as one)", at, ("LOOP-4",))
    return None


def _flush_check(view: TraceView) -> Violation | None:
    """LOOP-4/INJ-2: where a flush listener records every flush (``flush`` events), each turn's
    ``turn/end`` is followed by a flush of its agent; a turn the driver ran has its flush end
    before the agent's next ``turn/start`` or ``idle`` status (the flush is awaited), an idle
    inject's one-shot turn its flush start before the service closes (INJ-2), and a turn a
    ``dispose()`` cut short its flush at all (LOOP-4, DISP-1: its shape is a turn's). Turns a
    raising listener, a cancel or an abort touched after their ``turn/end`` are not judged (but a
    listener raising inside the flush itself is judged: the other listeners are still awaited), nor
    the flush timing of any once the agent is being disposed (whether the other flush listeners still run, or a flush survives a stop, the contract
    leaves open)."""
    flushes = view.of_kind("flush")
    recorded = any(e.get("flushes") == "recorded" for e in view.of_kind("world/closed"))
    if not flushes and not recorded:
        return None
    starts: dict[Any, list[int]] = {}
    ends: dict[Any, list[int]] = {}
    for e in flushes:
        (starts if e.get("phase") == "start" else ends).setdefault(e.get("agent"), []).append(e["_i"])
    found = _flush_concurrency(view, starts, ends)
    if found is not None:
        return found
    for agent in view.agents:
        if agent not in starts and not recorded:
            continue  # no recorder saw this agent's flushes (another service, or none ran)
        starts.setdefault(agent, [])
        closings = view.closings(caller=False)
        # a caller's close() stops a turn like a dispose()
        stops = [e["_i"] for e in view.ops(agent, "raise", "cancel", "abort")] + view.closings()
        disposed = view.disposed_at(agent)
        errors = [e["_i"] for e in view.of_kind("agent/error", agent=agent)]
        idles = [e["_i"] for e in view.of_kind("agent/status", agent=agent) if e.get("status") == "idle"]
        turns = view.turns(agent)
        disposes = [e["_i"] for e in view.ops(agent, "dispose")]
        drivers = [e["_i"] for e in view.ops(agent, "cancel_driver")]
        flush_raises = [e["_i"] for e in view.ops(agent, "raise") if e.get("on") == "session/flush"]
        for k, t in enumerate(turns):
            end = t["end_i"]
            if end is None:
                continue
            if t["reason"] == "disposed":
                # LOOP-4 / DISP-1: a turn a dispose() cut short keeps its shape, flush included (by
                # the time its driver exits, before the world's close); a close()'s is not judged,
                # nor an inject's one-shot turn (its flush is no driver's: when a disposed agent's
                # leftover flush must have run by, the contract does not say), nor one whose driver's
                # task was cancelled at all (a cancelled driver awaits nothing more: PY-1 asks a
                # balanced log only)
                cut = (t["trigger"] != "injection" and any(t["_i"] < i < end for i in disposes)
                       and not any(i < end for i in view.closings()) and not drivers)
                if cut and not any(i > end for i in starts[agent]):
                    return Violation(f"agent {agent}: turn {t['turn']} was disposed and ended, but no session/flush "
                                     "ran for it (LOOP-4: turn/end, agent/turn-end, then the awaited session/flush; "
                                     "DISP-1 changes the reason, not the shape)", end, ("LOOP-4", "DISP-1"))
                continue
            # the driver's next turn (an idle inject's one-shot turn may come between a turn's end
            # and its flush: it is not the driver's)
            nxt = next((u["_i"] for u in turns[k + 1:] if u["trigger"] != "injection"), len(view.timeline))
            began = next((i for i in starts[agent] if i > end), None)
            if t["trigger"] == "injection":
                # INJ-2: the one-shot turn is flushed (by the time the world closes the service: a
                # flush left scheduled may run after a when_idle() resolved, as INJ-4 reads)
                settled = next((i for i in closings if i > end), None)
                horizon = settled if settled is not None else len(view.timeline)
            else:
                settled = next((i for i in idles if i > end), None)
                horizon = min(x for x in (nxt, settled, len(view.timeline)) if x is not None)
            if disposed < horizon:
                continue
            # A flush listener that raised fails the flush, not the await: the flush still runs all
            # its listeners and is awaited (0a, ERR-6: reported, the agent goes on); what that one
            # listener's failure then reports is not a stop
            failed = [i for i in flush_raises if end < i < horizon]
            first_failed = min(failed, default=horizon)
            if any(end < i < horizon for i in stops if i not in failed) or any(end < i < first_failed for i in errors):
                continue
            where = f"agent {agent}: turn {t['turn']} ({t['trigger'] or 'prompt'})"
            if began is None or began > horizon:
                before = ("the service closed" if t["trigger"] == "injection" and horizon == settled
                          else "its next turn" if horizon == nxt and nxt < len(view.timeline)
                          else "the agent went idle" if horizon == settled else "the end")
                return Violation(f"{where} ended but no session/flush ran for it before {before} "
                                 f"({'INJ-2: the one-shot turn is flushed' if t['trigger'] == 'injection' else 'LOOP-4: the awaited session/flush closes the turn'})",
                                 end, ("INJ-2",) if t["trigger"] == "injection" else ("LOOP-4",))
            if t["trigger"] == "injection":
                continue
            told = next((e["_i"] for e in view.of_kind("agent/turn-end", agent=agent)
                         if e.get("turn") == t["turn"] and e["_i"] > end), None)
            if told is not None and told > began and not any(
                    u["trigger"] == "injection" and end < u["_i"] < began for u in turns):
                return Violation(f"{where}: its session/flush started before agent/turn-end was emitted (LOOP-4: "
                                 "turn/end, agent/turn-end, then the awaited session/flush)", began, ("LOOP-4",))
            done = next((i for i in ends.get(agent, ()) if i > began), None)
            if done is None or done > horizon:
                what = "its next turn started" if horizon == nxt else "the agent went idle"
                return Violation(f"{where}: {what} before the turn's session/flush finished (LOOP-4: the driver "
                                 "awaits the flush before it goes idle or runs the next turn)",
                                 horizon if horizon < len(view.timeline) else began, ("LOOP-4",))
    return None


def _tool_arguments_check(view: TraceView) -> Violation | None:
    """TOOL-2: the tool receives its call's raw arguments parsed as JSON; an empty string becomes
    ``{}``; a string that is not JSON is passed through as the raw string."""
    # A call id may come again in a later step (a provider numbering calls per response): a
    # tool's start is the call of its id and name logged last before it.
    raw: dict[Any, list[tuple[str, int]]] = {}
    for agent in view.agents:
        for e in view.log(agent):
            if e["type"] == "tool/call" and isinstance(e["data"].get("arguments"), str):
                key = (e["data"].get("call_id"), e["data"].get("name"))
                raw.setdefault(key, []).append((e["data"]["arguments"], e["_i"]))
    if not raw:
        return None
    for e in view.of_kind("tool/start"):
        calls = raw.get((e.get("call_id"), e.get("tool")))
        if "arguments" not in e or not calls:
            continue
        given = next((g for g, i in reversed(calls) if i < e["_i"]), None)
        if given is None:
            continue
        expected = _parsed_arguments(given)
        if expected is _UNJUDGED or e["arguments"] == expected:
            continue
        return Violation(f"tool call {e['call_id']}: the model's raw arguments {given!r} reached the tool as "
                         f"{e['arguments']!r}, not {expected!r} (TOOL-2: parsed as JSON, an empty string becomes {{}}, "
                         "a string that is not JSON is passed through as the raw string)", e["_i"], ("TOOL-2",))
    return None


_UNJUDGED = object()


def _reject_constant(name: str) -> Any:
    raise ValueError(name)


def _parsed_arguments(text: str) -> Any:
    """What TOOL-2 makes of raw arguments (``_UNJUDGED`` for ``NaN``/``Infinity``, which JSON
    parsers disagree on, and for JSON nested past a parser's depth)."""
    if text == "":
        return {}
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except RecursionError:  # nested past the parser's depth: parsed or raw, either may reach the tool
        return _UNJUDGED
    except ValueError as exc:
        return _UNJUDGED if str(exc) in ("NaN", "Infinity", "-Infinity") else text


_CONTAINED = frozenset(("agent/status", "agent/turn-start", "agent/step-start", "agent/step-end", "agent/turn-end",
                        "agent/error"))
"""The notifications whose throwing listeners the contract says are contained (STATUS-2, ERR-2,
ERR-10, ERR-5)."""
_MAY_PROPAGATE = frozenset(("agent/queued", "agent/steering"))
"""Notifications a loop may fire inside the caller's own call and let a listener's throw reach
the caller: contained (and then warned about) only when the call did not raise."""


def _propagated(view: TraceView, at: int) -> bool:
    """Whether the throw at ``at`` reached the call it fired in: the next op entry after it,
    past those of the window and of other listeners of the same notification (0b lets them run
    after a throw), is that call's ``op/error``."""
    on = view.timeline[at].get("on")
    for e in view.timeline[at + 1:]:
        if e.get("kind") == "op/error":
            return True
        if e.get("kind") == "op" and e.get("by") != "window" and e.get("on") != on:
            return False
    return False


_LATE = ("agent/turn-end", "session/flush")
"""Where a listener's throw is a late failure: after its turn's ``turn/end`` (ERR-6, ERR-10)."""


def _late_failure_turn(view: TraceView, agent: str, at: int) -> int | None:
    """The turn a late failure at ``at`` (a throw at ``agent/turn-end`` or in ``session/flush``)
    belongs to, as its announcement names it (ERR-6): the agent's next ``agent/error``, when no
    other failure came between (another listener's throw, a model's failure) and it names a turn
    that had ended by then. ``None`` where that is not sure (the turn had failed already and the
    failure is not announced, ERR-9)."""
    said = next((e for e in view.of_kind("agent/error", agent=agent) if e["_i"] > at), None)
    if said is None:
        return None
    if any(at < r["_i"] < said["_i"] for r in view.ops(agent, "raise")) or any(
            at < m["_i"] < said["_i"] and m.get("outcome") in ("raised", "error") for m in view.of_kind("model/done")):
        return None
    turn = said.get("turn")
    ended = any(t["turn"] == turn and t["end_i"] is not None and t["end_i"] < at for t in view.turns(agent))
    return turn if isinstance(turn, int) and ended else None


def _warned_check(view: TraceView) -> Violation | None:
    """ERR-12: a throwing listener of a notification the contract contains is a contained
    failure, logged as a warning under the implementation's logger; one thrown while a turn is
    open is named by a warning holding the agent id and the turn number (as a word of its own, as
    the rule tests read it), but for an ``agent/queued`` listener: the prompt it tells of belongs
    to no turn yet, so any turn, or none, may be named beside the agent. Judged where the world
    recorded that logger's warnings (its ``world/closed`` counts them); a throw once the agent is
    being disposed is not (ERR-10: during disposal it is swallowed). A late failure (a throw at
    ``agent/turn-end`` or in ``session/flush``) is named by the turn it belongs to, as its
    announcement names it, not by one opened since (session 62's blind round Q: a warning naming
    the log's newest turn)."""
    closed = view.of_kind("world/closed")
    if not closed or "warnings" not in closed[-1]:
        return None
    warnings = view.of_kind("warning")
    for agent in view.agents:
        disposing = view.disposed_at(agent)
        for r in view.ops(agent, "raise"):
            on = str(r.get("on") or "")
            if r["_i"] > disposing or r.get("status") == "disposed":
                continue
            late = _late_failure_turn(view, agent, r["_i"]) if on in _LATE else None
            # a failing flush is contained too (ERR-6): judged where it was announced
            if on == "session/flush" and late is None:
                continue
            if on != "session/flush" and on not in _CONTAINED and not (on in _MAY_PROPAGATE and not _propagated(view, r["_i"])):
                continue
            after = [e for e in warnings if e["_i"] > r["_i"]]
            if not after:
                return Violation(f"agent {agent}: an {on} listener threw and no warning was logged under the "
                                 "implementation's logger (ERR-12: every contained failure is logged as a warning "
                                 "naming the agent and the turn)", r["_i"], ("ERR-12",))
            if on == "agent/queued":
                # a queued prompt belongs to no turn yet (the notification names none): which turn
                # its listener's failure names, the running one, the next or none, is open
                if not any(re.search(rf"(?<!\w){re.escape(agent)}(?!\w)", str(e.get("message"))) for e in after):
                    return Violation(f"agent {agent}: an {on} listener threw, but no warning names the agent "
                                     f"({str(after[0].get('message'))!r}; ERR-12: a contained failure is logged "
                                     "naming the agent)", r["_i"], ("ERR-12",))
                continue
            if on in _LATE:
                turn = late  # the turn it belongs to, not one opened since (an idle inject's flush may end late)
            else:
                around = _turn_around(view, agent, r["_i"])
                turn = around["turn"] if around is not None else None
            if isinstance(turn, int) and not any(
                    agent in str(e.get("message")) and re.search(rf"(?<![\w.]){turn}(?![\w.])", str(e.get("message")))
                    for e in after):
                during = f"for turn {turn}, which had ended" if late is not None else f"during turn {turn}"
                return Violation(f"agent {agent}: an {on} listener threw {during}, but no warning names the "
                                 f"agent and turn {turn} ({str(after[0].get('message'))!r}; ERR-12: a contained "
                                 "failure is logged naming the agent and the turn)", r["_i"], ("ERR-12",))
    return None


def _idle_release_check(view: TraceView) -> Violation | None:
    """IDLE-2/IDLE-3: every waiter pending when its agent goes ``idle`` is released at that
    transition (before the status event, IDLE-3; work an ``idle`` listener queues counts as
    arriving after it, IDLE-2), so it is released before the agent's next status. Judged where the
    world samples the release exactly (``precise``: the awaitable has ``done()``), before any
    ``inject()`` of the agent; a waiter never released is the liveness oracle's."""
    released = {e.get("waiter"): e for e in view.of_kind("waiter/released")}
    for agent in view.agents:
        regs = [e for e in view.ops(agent, "when_idle") if e.get("waiter") is not None]
        if not regs:
            continue
        # an idle inject's flush may hold waiters past an idle transition (INJ-4: it has run by the
        # time when_idle() resolves): the transitions after an inject are not judged (one that
        # raised too: a bad inject's flush is owed all the same)
        injected = min([e["_i"] for e in view.of_kind("op", op="inject", agent=agent)] + [len(view.timeline)])
        statuses = view.of_kind("agent/status", agent=agent)
        found = _idle_at_once(view, agent, regs, released, statuses, injected)
        if found is not None:
            return found
        for k, s in enumerate(statuses):
            if s.get("status") != "idle":
                continue
            nxt = statuses[k + 1]["_i"] if k + 1 < len(statuses) else None
            if nxt is None or injected < nxt:
                continue
            for reg in regs:
                rel = released.get(reg["waiter"])
                if reg["_i"] > s["_i"] or rel is None or rel["_i"] < s["_i"] or not rel.get("precise"):
                    continue
                if rel["_i"] > nxt:
                    return Violation(f"agent {agent}: when_idle() {reg['waiter']!r} was pending when the agent went "
                                     f"idle, but was released only after its next status ({statuses[k + 1].get('status')}):"
                                     " waiters are released at the transition, before the status event (IDLE-3), and "
                                     "work an idle listener queues counts as arriving after it (IDLE-2)", s["_i"],
                                     ("IDLE-3", "IDLE-2"))
    return None


def _idle_at_once(view: TraceView, agent: str, regs: list[Event], released: dict[Any, Event],
                  statuses: list[Event], injected: int) -> Violation | None:
    """IDLE-1 (and 0b: the waiter is registered when ``when_idle()`` is called): a waiter taken
    while the agent is idle with nothing queued (no prompt or steering queued since its last
    status) resolves at once, so before the agent's next status. A waiter registered only when
    it is awaited misses that moment, and waits for whatever runs next. A release the world saw
    only as its watcher task ended (an awaitable with no ``done()``, a coroutine) is judged in
    plain order alone: there the watcher, started at the call, runs before whatever the caller
    did next wakes the driver; another schedule may run the driver first."""
    queued = [e["_i"] for e in view.of_kind("agent/queued", agent=agent)] + [
        e["_i"] for e in view.ops(agent, "send", "steer")]
    for reg in regs:
        if reg.get("status") != "idle" or reg["_i"] > injected:
            continue
        rel = released.get(reg["waiter"])
        if rel is None or not (rel.get("precise") or view.fifo):
            continue
        since = max((s["_i"] for s in statuses if s["_i"] < reg["_i"]), default=-1)
        if any(since < i < reg["_i"] for i in queued):
            continue
        nxt = next((s for s in statuses if s["_i"] > reg["_i"]), None)
        if nxt is not None and rel["_i"] > nxt["_i"]:
            return Violation(f"agent {agent}: when_idle() {reg['waiter']!r} was called while the agent was idle with "
                             f"nothing queued, but resolved only after its next status ({nxt.get('status')}): it "
                             "resolves at once (IDLE-1), its waiter registered when called, not when awaited (0b)",
                             reg["_i"], ("IDLE-1",))
    return None


def _step_order_check(view: TraceView) -> Violation | None:
    """LOOP-5: steering is drained before a step opens or after its message (and its tool
    calls): a ``steering/message`` between a ``step/start`` and that step's ``assistant/message``
    is out of LOOP-5's order (a step that logs no message drains none: STEER-3; one that logs none
    because nothing remained, MAXTOK-5, may drain once its stream finished); a step's ``usage``
    comes after its message."""
    streamed = _streamed(view)
    for agent in view.agents:
        in_step = False
        said = False
        step: Any = None
        turn: Any = None
        log = view.log(agent)
        spoke = {(e["data"].get("turn"), e["data"].get("step")) for e in log if e["type"] == "assistant/message"}
        for k, e in enumerate(log):
            kind = e["type"]
            if kind == "turn/start":
                turn = e["data"].get("turn")
            if in_step and not said and (turn, step) not in spoke and \
                    streamed.get((agent, turn, step), len(view.timeline)) < e["_i"]:
                said = True  # a step that logs no message (MAXTOK-5) drains after its stream finished
            if kind == "step/start":
                in_step, said, step = True, False, e["data"].get("step")
            elif kind in ("step/end", "turn/end"):
                in_step = False
            elif kind == "assistant/message":
                said = True
            elif kind == "usage" and in_step and not said and any(
                    x["type"] == "assistant/message" and x["data"].get("step") == step
                    and x["data"].get("turn") == e["data"].get("turn") for x in log[k + 1:]):
                return Violation(f"agent {agent}: step {step} logged its usage before its assistant/message (LOOP-5: "
                                 "the message is appended after agent/step-result, then usage)", e["_i"], ("LOOP-5",))
            elif kind == "steering/message" and in_step and not said:
                return Violation(f"agent {agent}: steering was logged inside step {step} before "
                                 "its assistant/message (LOOP-5: steering is drained before step/start, or after the "
                                 "step's message and tool calls)", e["_i"], ("LOOP-5",))
        found = _steering_left_waiting(view, agent)
        if found is not None:
            return found
    return None


def _steering_left_waiting(view: TraceView, agent: str) -> Violation | None:
    """LOOP-5: steering given while a turn is open (or once its running period began) and still
    waiting when a step opens is drained before that step's ``step/start``: it joins that step's
    request, not the next one. A steer made while the drain runs (from an ``agent/steering``
    listener) is the next drain's, and one a cancel, abort or dispose came after is not owed; nor is
    any at the step of a turn cancelled before it opened (CANCEL-STEP drops that step, and steering
    given after the cancel may be drained into it or re-queued as late, CANCEL-4)."""
    steers = view.steers(agent)
    if not steers:
        return None
    # a disposal by a close() names no agent: its disposed status stands for it
    disposed = view.disposals(agent)
    stops = [e["_i"] for e in view.ops(agent, "cancel", "abort")] + disposed
    cancels = [e["_i"] for e in view.ops(agent, "cancel")] + disposed
    running = [e["_i"] for e in view.of_kind("agent/status", agent=agent) if e.get("status") == "running"]
    ends = [t["end_i"] for t in view.turns(agent) if t["end_i"] is not None]
    for t in view.turns(agent):
        # the turn's period: from its turn/start, or from the running flip it is the first turn of
        flip = max((i for i in running if i < t["_i"]), default=None)
        since = flip if flip is not None and not any(flip < j < t["_i"] for j in ends) else t["_i"]
        given = [s for s in steers if since < s["_i"] < (t["end_i"] if t["end_i"] is not None else len(view.timeline))]
        if not given:
            continue
        delivered: list[tuple[int, Any]] = [(e["_i"], ev.texts(e["data"].get("content")))
                                            for e in t["events"] if e["type"] in ("steering/message", "user/message")]
        boundary = t["_i"]
        for e in t["events"]:
            if e["type"] in ("step/end", "turn/start"):
                boundary = e["_i"]
            if e["type"] != "step/start":
                continue
            at = e["_i"]
            if any(since < x < at for x in cancels):
                continue  # a cancelled turn's step is dropped (CANCEL-STEP); steering after the cancel is late (CANCEL-4)
            drain = next((x["_i"] for x in t["events"] if x["type"] == "steering/message" and boundary < x["_i"] < at),
                         at)  # where this step's drain began
            for s in given:
                if s["_i"] >= drain or any(s["_i"] < x < at for x in stops):
                    continue
                text = s.get("text")
                owed = sum(1 for x in given if x.get("text") == text and x["_i"] < drain
                           and not any(x["_i"] < y < at for y in stops))
                if sum(1 for i, said in delivered if i < at and said == text) < owed:
                    return Violation(f"agent {agent}: steering {text!r} was waiting when step {e['data'].get('step')} "
                                     f"of turn {t['turn']} opened, but was not drained before its step/start (LOOP-5: "
                                     "each step drains the steering waiting, then opens; STEER-2)", at, ("LOOP-5", "STEER-2"))
    return None


def _trigger_check(view: TraceView) -> Violation | None:
    """LOOP-2/INJ-2 (0b): a turn's trigger carries the source of what started it: a message
    turn the first drained ``user/message``'s, an idle inject's one-shot turn that of its
    ``context/message`` (one of them: an inject from a ``turn/start`` listener joins the turn)."""
    for agent in view.agents:
        # a turn a disposal cut short may never log the message that started it, nor one a
        # listener's throw ended (ERR-11: a throwing turn/start listener consumes the prompt)
        cuts = [*view.disposals(agent), *(e["_i"] for e in view.ops(agent, "raise"))]
        injects = view.of_kind("op", op="inject", agent=agent)
        previous = -1
        for t in view.turns(agent):
            since, previous = previous, t["_i"]
            trigger = t["events"][0]["data"].get("trigger")
            end = t["end_i"] if t["end_i"] is not None else len(view.timeline)
            if not isinstance(trigger, _MAP) or any(t["_i"] < i < end for i in cuts):
                continue
            kind = trigger.get("kind")
            if kind == "message":
                first = next((e for e in t["events"] if e["type"] == "user/message"), None)
                sources = [first["data"].get("source")] if first is not None else []
                types = {e["type"] for e in t["events"]}
                if first is None and "context/message" in types and "step/start" not in types:
                    return Violation(f"agent {agent}: turn {t['turn']} holds a context/message and no prompt or "
                                     "step, yet its trigger is a message's (INJ-2: an idle inject() writes a "
                                     "one-shot turn triggered {kind: injection})", t["events"][0]["_i"], ("INJ-2",))
            elif kind == "injection":
                # an inject from a listener of this turn's turn/start may log its context first; a
                # turn opened for content JSON cannot encode (INJ-4) logs none of its own
                before = [e for e in injects if e["_i"] < t["_i"]]
                if before and before[-1].get("unserialisable"):
                    continue
                sources = [e["data"].get("source") for e in t["events"] if e["type"] == "context/message"]
                # a loop that defers its injects takes them up in order: a bad one given since
                # the last turn began, followed by a good one, still opens its own turn first
                # (session 53's indie71), its trigger that inject's source
                sources += [e.get("source") if isinstance(e.get("source"), _MAP) else {"kind": "user"}
                            for e in before if e["_i"] > since and e.get("unserialisable")]
            else:
                continue
            sources = [s for s in sources if isinstance(s, _MAP)]
            if not sources or trigger.get("source") in sources:
                continue
            source = sources[0]
            rule = "LOOP-2" if kind == "message" else "INJ-2"
            what = "the first message's" if kind == "message" else "its context/message's"
            return Violation(f"agent {agent}: turn {t['turn']}'s trigger has source {trigger.get('source')!r}, not "
                             f"{what} {dict(source)!r} ({rule}: the trigger's source is {what})",
                             t["events"][0]["_i"], (rule,))
    return None


_SOURCED = {"user/message": ("send", "steer"), "steering/message": ("steer",), "context/message": ("inject",)}


def _sources_check(view: TraceView) -> Violation | None:
    """0b, LOOP-9, INJ-1/INJ-2, LOG-7: a logged ``user/message``, ``steering/message`` or
    ``context/message`` carries the source of the call that gave its text (a ``send``, a
    ``steer``, late steering re-queued as a prompt included; an ``inject``), resolved to
    ``{kind: user}`` when the call passed none. Derived history wraps steering and context in the
    source's kind, so a loop that logs another source shows the model a different message."""
    for agent in view.agents:
        given: dict[tuple[str, str], set[str | None]] = {}
        for op in view.ops(agent, "send", "steer", "inject"):
            if isinstance(op.get("text"), str):
                given.setdefault((op["op"], op["text"]), set()).add(_source_kind(op))
        if not given:
            continue
        for e in view.log(agent):
            verbs = _SOURCED.get(e["type"])
            if verbs is None or e.get("loaded"):
                continue
            data = e["data"]
            text = ev.texts(data.get("content"))
            kinds = set().union(*(given.get((verb, text), ()) for verb in verbs))
            source = data.get("source")
            if not isinstance(source, _MAP) or not kinds:
                continue  # a message logged without a source is a matter of shape, judged elsewhere
            if source.get("kind") not in kinds:
                rules = {"user/message": ("LOOP-9",), "steering/message": ("LOOP-9", "LOG-7"),
                         "context/message": ("INJ-1", "INJ-2", "LOG-7")}[e["type"]]
                return Violation(f"agent {agent}: {e['type']} {text!r} was logged with source {source!r}, but the "
                                 f"call that gave it passed source kind {sorted(map(str, kinds))[0]!r} (0b: the "
                                 "log keeps each message's resolved source)", e["_i"], rules)
    return None


def _source_kind(op: Event) -> str | None:
    """The kind of the source an ``op`` passed (``user``, the default, when it passed none)."""
    source = op.get("source")
    return source.get("kind") if isinstance(source, _MAP) else "user"


def _refused_queueing(view: TraceView, agent: str) -> Violation | None:
    """LOOP-9/DISP-3: a ``send()`` or ``steer()`` of a live agent queues its prompt and emits
    ``agent/queued``; the contract names a raise only on a disposed agent (DISP-3). Not judged
    once a disposal or a close began (the call may meet it half done), nor of a prompt whose
    source cannot be logged (ERR-8 fails its turn/start; a loop may refuse it at the call), nor
    of a call a simulator tripwire raised in (ESCAPE)."""
    refused = view.refused()
    if not refused:
        return None
    stop = min([view.disposed_at(agent), *view.closings()])
    escapes = [e["_i"] for e in view.of_kind(simulator.ESCAPE)]
    for error in view.of_kind("op/error", agent=agent):
        op = view.answered(error)
        if op is None or op.get("op") not in ("send", "steer") or op["_i"] not in refused or op["_i"] > stop \
                or op.get("status") == "disposed" or op.get("bad_source"):
            continue
        if any(op["_i"] < i < error["_i"] for i in escapes):
            continue  # a tripwire raised in the call: ESCAPE's finding (PY-3), not a refusal
        return Violation(f"agent {agent}: {op['op']}({op.get('text')!r}) of a live agent ({op.get('status')}) raised "
                         f"{error.get('error')} (LOOP-9: it queues the prompt and emits agent/queued; only a "
                         "disposed agent's raises, DISP-3)", op["_i"], ("LOOP-9",))
    return None


def _queued_check(view: TraceView) -> Violation | None:
    """LOOP-9/STEER-1: every ``send()``/``steer()`` a live agent took emits ``agent/queued``
    inside the call, with the resolved source (default ``{kind: user}``) and ``steering`` true
    only for a ``steer()`` of a ``running`` agent (otherwise it is a send, STEER-1); every
    ``agent/steering`` carries the source of the steer it delivers."""
    for agent in view.agents:
        refused = _refused_queueing(view, agent)
        if refused is not None:
            return refused
        queued = view.of_kind("agent/queued", agent=agent)
        steerings = view.of_kind("agent/steering", agent=agent)
        used: set[int] = set()
        steered: list[Event] = []
        for op in view.ops(agent, "send", "steer"):
            if op.get("status") == "disposed":
                continue
            kind = _source_kind(op)
            steering = op["op"] == "steer" and op.get("status") == "running"
            if steering:
                steered.append(op)
            # emitted inside the call, so after its op entry: the first unmatched one with its text
            ahead = next((e for e in queued if e["_i"] > op["_i"] and e["_i"] not in used
                          and e.get("text") == op.get("text")), None)
            what = f"{op['op']}({op.get('text')!r})" + (" of a running agent" if steering else "")
            if ahead is None:
                return Violation(f"agent {agent}: {what} emitted no agent/queued (LOOP-9)", op["_i"], ("LOOP-9",))
            used.add(ahead["_i"])
            if bool(ahead.get("steering")) != steering:
                as_send = op["op"] == "steer" and not steering  # STEER-1: a steer of an agent not running
                why = f": the agent was {op.get('status')}, so the steer is a send" if as_send else ""
                rule = "STEER-1" if as_send else "LOOP-9"
                return Violation(f"agent {agent}: {what} emitted agent/queued with steering {ahead.get('steering')}"
                                 f"{why} ({rule})", ahead["_i"], (rule,))
            if ahead.get("source") != kind:
                return Violation(f"agent {agent}: {what} emitted agent/queued with source {ahead.get('source')!r}, "
                                 f"not {kind!r} (LOOP-9: the resolved source)", ahead["_i"], ("LOOP-9",))
        taken: set[int] = set()
        turns = view.turns(agent) if steerings else []
        for e in steerings:
            # 0a: agent/steering(agent, turn, content, source) names the turn it is drained into
            current = next((t for t in reversed(turns) if t["_i"] < e["_i"]), None)
            if current is not None and (current["end_i"] is None or current["end_i"] > e["_i"]) \
                    and e.get("turn") != current["turn"]:
                return Violation(f"agent {agent}: agent/steering names turn {e.get('turn')!r} while turn "
                                 f"{current['turn']} is open (0a: agent/steering(agent, turn, content, source))",
                                 e["_i"], ("LOOP-9",))
            match = next((o for o in steered if o["_i"] < e["_i"] and o["_i"] not in taken
                          and o.get("text") == e.get("text")), None)
            if match is None:
                continue  # steering the agent re-queued or took some other way: not judged here
            taken.add(match["_i"])
            kind = _source_kind(match)
            if e.get("source") != kind:
                return Violation(f"agent {agent}: agent/steering for steer({match.get('text')!r}) has source "
                                 f"{e.get('source')!r}, not {kind!r} (LOOP-9)", e["_i"], ("LOOP-9",))
    return None


def derive(events: Sequence[Event]) -> list[dict[str, Any]]:
    """LOG-7's derived history of a log (the spec's rules, restated for the oracle)."""
    out: list[dict[str, Any]] = []
    for e in events:
        out += _derived(e)
    return out


def _derived(e: Event) -> list[dict[str, Any]]:
    """What one session event adds to the derived history (``derive`` is their concatenation)."""
    out: list[dict[str, Any]] = []
    kind, data = e["type"], e["data"]
    if kind == "user/message":
        out.append({"role": "user", "content": list(data.get("content") or [])})
    elif kind == "assistant/message":
        out.append({"role": "assistant", "content": list(data.get("content") or [])})
    elif kind == "tool/result":
        out.append({"role": "user", "content": [{"type": "tool-result", "tool_call_id": data.get("call_id"),
                                                 "content": list(data.get("content") or []),
                                                 "is_error": bool(data.get("is_error"))}]})
    elif kind in ("steering/message", "context/message"):
        tag = "steering" if kind == "steering/message" else "context"
        source = data.get("source") if isinstance(data.get("source"), _MAP) else {}
        out.append({"role": "user", "content": [{"type": "text", "text": f'<{tag} source="{source.get("kind", "user")}">'},
                                                *(data.get("content") or []),
                                                {"type": "text", "text": f"</{tag}>"}]})
    return out


def _prefix_digest(view: TraceView, agent: str, k: int) -> str:
    """``history_digest(derive(log[:k]))`` of the agent's log, each event derived once and each
    prefix digested once per view (several requests, several candidate prefixes each)."""
    key = ("digest", agent, k)
    digest: str | None = view._cache.get(key)
    if digest is None:
        parts: list[list[dict[str, Any]]] | None = view._cache.get(("derived", agent))
        if parts is None:
            parts = view._cache[("derived", agent)] = [_derived(x) for x in view.log(agent)]
        digest = view._cache[key] = history_digest([m for part in parts[:k] for m in part])
    return digest


def _history_check(view: TraceView) -> Violation | None:
    """LOG-7/INJ-3/STEER-2: a model request's messages are the history its agent's log derives."""
    models = _agent_models(view)
    for e in view.of_kind("model/request"):
        agent = models.get(str(e.get("model")))
        if agent is None or "history" not in e:
            continue
        # the log events before the request (the log is in timeline order: a prefix of it)
        log = [x for x in view.log(agent) if x["_i"] < e["_i"]]
        # The request was assembled somewhere between its step's start and the call (an
        # agent/request waterfall may await while context is injected): any prefix of the log
        # in that stretch may be the one it was built from.
        starts = [k for k, x in enumerate(log) if x["type"] == "step/start"]
        first = starts[-1] if starts else 0
        if not any(_prefix_digest(view, agent, k) == e["history"] for k in range(len(log), first - 1, -1)):
            return Violation(f"agent {agent}: model request #{e.get('call')} does not carry the history its log "
                             "derives (LOG-7: user, assistant and tool-result messages, steering and context "
                             "wrapped, at their positions)", e["_i"], ("LOG-7", "INJ-3", "STEER-2"))
    return None


def _fifo_check(view: TraceView) -> Violation | None:
    """INBOX-1 / LOOP-2: both queues are FIFOs: the prompts (sends, and steers while not running,
    STEER-1) and the steering messages one turn logs appear in the order they were given. Each
    logged text is matched with the earliest call that gave it and is not used yet (nor dropped
    by a cancel before the turn). Steering re-queued as a prompt (LOOP-8) matches its steer: it
    joins the queue "after the turn", so a prompt sent before that steer was given is logged
    before it (one sent later may be either side: when the re-queue happens is the loop's)."""
    for agent in view.agents:
        sends, steers = view.sends(agent), view.steers(agent)
        pools = {"user/message": sends, "steering/message": steers}
        used: set[int] = set()

        def match(given: list[Event], e: Event, text: str, turn: dict[str, Any], agent: str = agent,
                  used: set[int] = used) -> Event | None:
            return next((o for o in given if o["_i"] not in used and o["_i"] < e["_i"] and str(o.get("text")) == text
                         and not view.excused(agent, o["_i"], turn["_i"])), None)

        for turn in view.turns(agent):
            for kind, given in pools.items():
                texts: list[Any] = []
                ranks: list[int] = []
                requeued: list[tuple[int, str]] = []  # (steer's position, text): late steering logged so far
                for e in turn["events"]:
                    if e["type"] != kind:
                        continue
                    text = ev.texts(e["data"].get("content"))
                    texts.append(text)
                    op = match(given, e, text, turn)
                    if op is not None:
                        used.add(op["_i"])
                        ranks.append(op["_i"])
                        before = next((r for r in requeued if op["_i"] < r[0]), None) if kind == "user/message" else None
                        if before is not None:
                            return Violation(f"agent {agent}: turn {turn['turn']} logs {before[1]!r}, steering re-queued "
                                             f"as a prompt, before {text!r}, a prompt sent before that steering was "
                                             "given (LOOP-8: late steering is re-queued after the turn; INBOX-1: the "
                                             "queue is a FIFO)", e["_i"], ("LOOP-8", "INBOX-1"))
                    elif kind == "user/message":
                        late = match(steers, e, text, turn)
                        if late is not None:
                            used.add(late["_i"])
                            requeued.append((late["_i"], text))
                for earlier, later in pairwise(ranks):
                    if later < earlier:
                        what = "prompts" if kind == "user/message" else "steering messages"
                        return Violation(f"agent {agent}: turn {turn['turn']} logs its {what} {texts} out of the order "
                                         "they were given (INBOX-1: queued and steering are FIFOs; LOOP-2: one "
                                         "user/message per send, in order)", turn["_i"], ("INBOX-1", "LOOP-2"))
    return None


_REWRITING = frozenset(("agent/request", "system-prompt"))
_KEEPS_PROMPT = frozenset(("model", "metadata"))
"""The request fields an ``agent/request`` plugin may rewrite and leave SVC-5's to judge."""
"""Waterfalls whose plugins may change a request's system prompt or tools (the hunt's own window
listener never rewrites)."""


def _at_step_start(view: TraceView, agent: str, op: Event, opened: int) -> bool:
    """Whether ``op`` was made synchronously by a listener of ``agent``'s own step opening at
    ``opened``: an ``agent/step-start`` listener, or a ``session/event`` listener as that
    ``step/start`` was appended (nothing of the agent's log came between)."""
    if op.get("on") == "agent/step-start":
        return _in_own(view, agent, op, "agent/step-start")
    if op.get("on") != "session/event" or not _in_own(view, agent, op, "session/event"):
        return False
    last = max((x["_i"] for x in view.log(agent) if x["_i"] < op["_i"]), default=None)
    return last == opened


def _request_check(view: TraceView) -> Violation | None:
    """SVC-5: every model request of an agent carries its system prompt (the sections the world
    added, then the agent's own prompt, blank-line joined; none when both are empty) and, as
    ``tools``, every tool the world registered: a turn's later requests as much as its first. A
    ``reconfigure`` (sections and tools changed while the agents run) binds every step that
    opened after it, and the step whose opening a listener made it in (``agent/step-start``, a
    ``session/event`` listener on its ``step/start``: LOOP-5 assembles the prompt after both;
    session 60's blind round L took the configuration before the step opened); one made otherwise
    while the step was open (its ``step/start`` logged, the model not yet called) may or may not be
    in that request.
    Not judged where a scenario's plugin listens to a waterfall that may rewrite them (one whose
    rewrite names only other fields, a model routing plugin, leaves them to judge)."""
    if any(e.get("on") in _REWRITING and e.get("name") != "window"
           and (e.get("on") != "agent/request" or not _KEEPS_PROMPT.issuperset(e.get("rewrites") or ("?",)))
           and (e.get("on") != "system-prompt" or e.get("rewrites") != ["system"])
           for e in view.of_kind("listener")):
        return None
    models = _agent_models(view)
    created = view.of_kind("agent/created")
    changes = [op for op in view.of_kind("op") if op.get("op") == "reconfigure" and "sections" in op]
    # a plugin's paragraph added to the assembled prompt: the request after it is SYSTEM's to judge
    _, added = _system_added(view, models)
    for e in view.of_kind("model/request"):
        agent = models.get(str(e.get("model")))
        made = [c for c in created if c.get("agent") == agent and c["_i"] < e["_i"]]
        if agent is None or not made or e["_i"] in added:
            continue
        want, call = made[-1], e.get("call")
        own = want.get("system_prompt")
        # what the request may carry: the configuration when its step opened, or one made since
        states: list[Mapping[str, Any]] = [want]
        if changes:
            opened = max((x["_i"] for x in view.log(agent) if x["type"] == "step/start" and x["_i"] < e["_i"]),
                         default=e["_i"])
            # made by a listener of the step's own step/start (its session event, or agent/step-start):
            # before LOOP-5's assembly, so it binds the step as one made before it opened does
            bound = max((c["_i"] for c in changes if opened < c["_i"] < e["_i"] and _at_step_start(view, agent, c, opened)),
                        default=opened)
            states = [max((want, *(c for c in changes if c["_i"] <= bound)),
                          key=lambda x: x["_i"]),
                      *(c for c in changes if bound < c["_i"] < e["_i"])]
        systems = ["\n\n".join(p for p in (*(st.get("sections") or ()), own) if p) or None for st in states]
        if (e.get("system") or None) not in systems:
            after = " (the sections as a reconfigure left them)" if changes else ""
            return Violation(f"agent {agent}: model request #{call} carries system prompt {e.get('system')!r}, not "
                             f"{' or '.join(map(repr, systems))}{after} (SVC-5: the sections, then the agent's "
                             "system_prompt, blank-line joined)", e["_i"], ("SVC-5",))
        if e.get("tools_shape"):
            return Violation(f"agent {agent}: model request #{call} sends tools not of 0b's shape: "
                             f"{'; '.join(map(str, e['tools_shape']))} (SVC-5: each entry is "
                             "{name, description, input_schema})", e["_i"], ("SVC-5",))
        tools = [list(st.get("tools") or []) for st in states]
        if list(e.get("tools") or []) not in tools:
            return Violation(f"agent {agent}: model request #{call} carries tools {list(e.get('tools') or [])}, not "
                             f"the tools registered {' or '.join(map(str, tools))} (SVC-5: the schemas of the "
                             "registered tools are sent with the request)", e["_i"], ("SVC-5",))
    return None


def _system_added(view: TraceView, models: Mapping[str, str]) -> tuple[dict[int, Event], set[int]]:
    """The model requests made after a ``system-prompt`` plugin added a paragraph to the
    assembled prompt (``waterfall/rewrote``): the agent's first request after each (REQUEST
    leaves them alone), and of those the ones sure to be that step's, each with its rewrite (no
    stop, throw, other rewrite or new turn came between: the step may end before its request)."""
    key = "system-added"
    cached: tuple[dict[int, Event], set[int]] | None = view._cache.get(key)
    if cached is not None:
        return cached
    sure: dict[int, Event] = {}
    after: set[int] = set()
    rewrites = [r for r in view.of_kind("waterfall/rewrote") if r.get("on") == "system-prompt"]
    if rewrites:
        requests = view.of_kind("model/request")
        for r in rewrites:
            agent = r.get("agent")
            if not isinstance(agent, str):
                continue
            call = next((c for c in requests if c["_i"] > r["_i"] and models.get(str(c.get("model"))) == agent), None)
            if call is None:
                continue
            after.add(call["_i"])
            # a stop made inside the waterfall (before the plugin returned) ends the turn: its
            # request, if any, is the next turn's, opened after this one
            between = [*view.ops(agent, "cancel", "abort", "dispose", "raise", "cancel_driver"),
                       *(x for x in rewrites if x is not r and x.get("agent") == agent),
                       *(x for x in view.log(agent) if x["type"] == "turn/start")]
            if not any(r["_i"] < x["_i"] < call["_i"] for x in between):
                sure[call["_i"]] = r
    view._cache[key] = (sure, after)
    return sure, after


def _system_check(view: TraceView) -> Violation | None:
    """SVC-5 and 0a: a ``system-prompt`` listener rewrites the assembled prompt by returning
    something else, and the step's request carries what it returned: the paragraph a plugin added
    is in the system prompt the model receives (session 62's blind round Q: a loop that awaited
    the waterfall and kept the value it passed in)."""
    if not view.of_kind("waterfall/rewrote"):
        return None
    for at, r in _system_added(view, _agent_models(view))[0].items():
        call = view.timeline[at]
        text = str((r.get("fields") or {}).get("system"))
        if text not in str(call.get("system") or ""):
            return Violation(f"agent {r.get('agent')}: a system-prompt listener returned the assembled prompt with "
                             f"{text!r} added, but the step's model request carries system prompt "
                             f"{call.get('system')!r} (0a: a listener rewrites by returning something else; SVC-5)",
                             at, ("SVC-5",))
    return None


def _routed_check(view: TraceView) -> Violation | None:
    """LOOP-10: the adapter called is the one the request names, as the ``agent/request``
    waterfall returned it (a plugin rewriting the model name routes the call), and it receives
    the system prompt that request carries (a loop attaching its own after the waterfall
    overwrites a plugin's)."""
    calls = view.of_kind("model/request")
    for e in calls:
        if "requested" in e:
            return Violation(f"model {e.get('model')!r} was called (call #{e.get('call')}) with a request naming "
                             f"{e['requested']!r} (LOOP-10: the adapter named by the request the agent/request "
                             "waterfall returned is called)", e["_i"], ("LOOP-10",))
    for r in view.of_kind("waterfall/rewrote"):
        fields = r.get("fields") or {}
        if r.get("on") != "agent/request" or "system" not in fields or "model" not in fields:
            continue
        call = next((c for c in calls if c["_i"] > r["_i"] and c.get("model") == fields["model"]), None)
        if call is None:
            continue
        if call.get("system") != fields["system"]:
            return Violation(f"model {call.get('model')!r} was called (call #{call.get('call')}) with system prompt "
                             f"{call.get('system')!r}, not the {fields['system']!r} the agent/request waterfall "
                             "returned (LOOP-10: the adapter receives exactly the request the waterfall returned)",
                             call["_i"], ("LOOP-10",))
        added = sorted(k for k in fields if k not in REQUEST_KEYS)
        lost = [k for k in added if k not in (call.get("extra") or ())]
        if lost:
            return Violation(f"model {call.get('model')!r} was called (call #{call.get('call')}) without "
                             f"{', '.join(map(repr, lost))}, which the agent/request waterfall added to the request "
                             "(LOOP-10: the adapter receives exactly the request the waterfall returned)",
                             call["_i"], ("LOOP-10",))
    return None


def _rejected_check(view: TraceView) -> Violation | None:
    """ERR-8: a prompt whose source cannot be logged, once accepted, fails where its batch is
    written: its ``turn/start`` rejected before anything opened (announced through
    ``agent/error`` with step 0, while no turn is open), or, drained behind another prompt, the
    turn it joined (which ends ``error``, or ``disposed`` when a disposal came meanwhile: ERR-9
    judges its announcement). Not judged when the call raised (a loop may refuse the source at
    once) or a stop came before its batch was written."""
    for agent in view.agents:
        for s in view.ops(agent, "send"):  # the calls that did not raise
            if not s.get("bad_source") or s.get("status") == "disposed":
                continue
            # the turns a message opened that may have drained it (an idle inject's one-shot turn
            # drains nothing; one whose driver had woken before the send may leave it for the next)
            drainers, must = view.drainers(agent, s["_i"])
            nxt = drainers[-1]["_i"] if must else len(view.timeline)
            if any(s["_i"] < i < nxt for i in view.stops(agent, close=False)):
                continue
            if any(t["reason"] in ("error", "disposed") or s.get("text") in t["prompts"] for t in drainers):
                # drained behind another prompt: the turn it joined failed (ERR-9), or was disposed
                # meanwhile (a disposal outranks its failure: DISP-1); or it ran
                continue
            if not must and not view.closings(caller=False):
                continue  # the run ended before anything had to drain it
            announced = [e for e in view.of_kind("agent/error", agent=agent) if s["_i"] < e["_i"] < nxt]
            if not any(e.get("step") == 0 and _turn_around(view, agent, e["_i"]) is None for e in announced):
                said = f" (announced with step {announced[0].get('step')})" if announced else ""
                return Violation(f"agent {agent}: send({s.get('text')!r}) with a source that cannot be logged was "
                                 f"accepted, but no agent/error with step 0 announced its failure before the next "
                                 f"turn{said} (ERR-8: a failure before turn/start is reported through agent/error with "
                                 "step 0, and the loop goes on)", s["_i"], ("ERR-8",))
    return None


def _call_stops(view: TraceView, agent: str) -> list[int]:
    """What may cut a tool call of ``agent`` short: its cancels, aborts and disposals, and the
    service's closings."""
    return [e["_i"] for e in view.ops(agent, "cancel", "abort", *DISPOSERS)] + view.closings()


def _served_unasked(view: TraceView, answered: list[Event]) -> Violation | None:
    """ANSWERED's first half: every call of a tool a ``tools/execute`` plugin serves (one nobody
    registered) reaches that plugin (LOOP-5), unless a stop came during the call."""
    served = {str(e.get("tool")) for e in view.of_kind("waterfall/serves")}
    for agent in view.agents if served else ():
        log = view.log(agent)
        stops = _call_stops(view, agent)
        for call in log:
            if call["type"] != "tool/call" or call["data"].get("name") not in served:
                continue
            call_id = call["data"].get("call_id")
            result = next((e for e in log if e["_i"] > call["_i"] and e["type"] == "tool/result"), None)
            if result is None or any(call["_i"] < i < result["_i"] for i in stops):
                continue
            if not any(call["_i"] < a["_i"] < result["_i"] and a.get("call_id") == call_id for a in answered):
                return Violation(f"agent {agent}: tool call {call_id} names {call['data'].get('name')!r}, which a "
                                 "tools/execute plugin serves, but the plugin never answered it (LOOP-5: every tool "
                                 "call goes through the tools/execute waterfall, a tool nobody registered too; TOOL-3's "
                                 "unknown-tool error is the chain's end, which a listener may answer before)",
                                 result["_i"], ("LOOP-5", "TOOL-3"))
    return None


def _answered_check(view: TraceView) -> Violation | None:
    """0b: a ``tools/execute`` listener short-circuits by not calling ``next()``: the tool of a
    call it answered itself never starts (a chain run ahead of the listener starts it even before
    the listener is called), and the call's ``tool/result`` carries the answer, under the model's
    call id (TOOL-4), unless a stop came during the call."""
    answered = view.of_kind("waterfall/answered")
    found = _served_unasked(view, answered)
    if found is not None:
        return found
    for a in answered:
        agent, call_id = a.get("agent"), a.get("call_id")
        if not isinstance(agent, str):
            continue
        log = view.log(agent)
        call = next((e for e in reversed(log) if e["_i"] < a["_i"] and e["type"] == "tool/call"
                     and e["data"].get("call_id") == call_id), None)
        if call is None:
            continue  # no tool/call logged before its waterfall: LOOP-5's, judged by TOOLS
        result = next((e for e in log if e["_i"] > a["_i"] and e["type"] == "tool/result"), None)
        end = result["_i"] if result is not None else len(view.timeline)
        others = [e for other in view.agents if other != agent for e in view.log(other)
                  if call["_i"] < e["_i"] < end and e["type"] == "tool/call" and e["data"].get("call_id") == call_id]
        ran = next((e for e in view.of_kind("tool/start")
                    if call["_i"] < e["_i"] < end and e.get("call_id") == call_id
                    and e.get("tool") == call["data"].get("name")), None)
        if ran is not None and not others:
            return Violation(f"agent {agent}: the tool of call {call_id} ran though a tools/execute listener answered "
                             "the call itself without calling next() (0b: a listener short-circuits the chain by not "
                             "calling next(); LOOP-5)", ran["_i"], ("LOOP-5", "TOOL-4"))
        if result is None or any(call["_i"] < i < end for i in _call_stops(view, agent)):
            continue
        data = result["data"]
        if data.get("call_id") != call_id or data.get("content") != [ev.ANSWER] or data.get("is_error") is not False:
            return Violation(f"agent {agent}: a tools/execute listener answered call {call_id} itself with "
                             f"[{ev.ANSWER}], but its tool/result logs call id {data.get('call_id')!r}, content "
                             f"{data.get('content')!r}, is_error {data.get('is_error')!r} (0b: the listener's return "
                             "is the chain's value; TOOL-4: under the model's call id)", result["_i"], ("LOOP-5", "TOOL-4"))
    return None


def _escape_check(view: TraceView) -> Violation | None:
    # The simulator's tripwires raise at the call; a loop that contains its plugins' failures
    # (or its own) may catch that and go on looking well. It tried all the same: a thread, real
    # I/O or a blocking call makes a run unreproducible (PY-3), and an exit would end the check.
    for e in view.of_kind(simulator.ESCAPE):
        return Violation(f"the implementation tried to leave the simulation: {e.get('message')}", e["_i"])
    return None


def _problems_check(view: TraceView) -> Violation | None:
    for e in view.of_kind("problem"):
        rules = tuple(e.get("rules") or ())
        return Violation(f"{e.get('check')}: {e.get('message')}", e["_i"], rules)
    return None


ORACLES: tuple[LoopCheck, ...] = (
    LoopCheck("ESCAPE", _escape_check, "no thread, real I/O, blocking call or process exit inside a run", ("PY-3",)),
    # first: an accepted duplicate agent shares the id, and what the others then say follows from it
    LoopCheck("SVC-2", _taken_id_check, "creating an agent under a live agent's id is rejected", ("SVC-2",)),
    LoopCheck("SVC-3", _resume_check, "a resumed agent continues its session, and takes no id taken meanwhile",
              ("SVC-3", "SVC-2")),
    LoopCheck("LOG", _log_check, "LOG-3..6: the session log is balanced and nested", ("LOG-3", "LOG-4", "LOG-5", "LOG-6")),
    LoopCheck("STATUS-1", _status_check, "legal status transitions only", ("STATUS-1",)),
    LoopCheck("LOOP-3", _turn_numbers_check, "turn numbers continue by one, a resumed log's too",
              ("LOOP-3", "SVC-3")),
    LoopCheck("FIFO", _fifo_check, "prompts and steering are logged in the order they were given",
              ("INBOX-1", "LOOP-2", "LOOP-8")),
    # before prompts: an unannounced rejection leaves its prompt unexcused there
    LoopCheck("REJECTED", _rejected_check, "a prompt whose turn/start is rejected is announced with step 0",
              ("ERR-8",)),
    LoopCheck("prompts", _prompts_check, "no prompt runs twice; an uncancelled prompt or steer runs",
              ("MARKER-1", "LOOP-2", "LOOP-8", "ERR-1", "ERR-6", "ERR-11")),
    LoopCheck("IDLE-2", _idle_check, "when_idle() resolves only at quiescence", ("IDLE-2",)),
    LoopCheck("CANCEL-2", _cancel_check, "cancelled queued work never runs", ("CANCEL-2", "CANCEL-4")),
    LoopCheck("CANCEL-W1", _idle_cancel_status_check, "a cancel on an idle agent drops its queued work with no "
              "status change for it", ("CANCEL-W1",)),
    LoopCheck("MARKER-1", _aborted_turns_check, "a cancel governs exactly one turn", ("MARKER-1", "DISP-1")),
    LoopCheck("INJ-1", _injected_check, "an inject while a turn is open appends its context into that turn",
              ("INJ-1",)),
    LoopCheck("ABORT-1", _deferred_abort_check, "an abort with no step in flight is not deferred", ("ABORT-1",)),
    LoopCheck("IN-FLIGHT", _in_flight_abort_check, "an abort while a step is in flight ends the turn aborted",
              ("ABORT-1",)),
    LoopCheck("CANCEL-STEP", _dropped_step_check, "a cancel from agent/turn-start drops the first step, opened "
              "and closed empty", ("CANCEL-STEP",)),
    LoopCheck("CONT-1", _forced_stop_check, "a continuation listener's vote to stop ends the turn after its step",
              ("CONT-1",)),
    LoopCheck("MESSAGE", _message_check, "a finished step logs the message agent/step-result returned (a "
              "max-tokens step's less its tool calls, and none when nothing remains)", ("LOOP-5", "LOOP-6", "MAXTOK-5")),
    LoopCheck("UNRETURNED", _unreturned_message_check,
              "no assistant/message for a step stopped inside its agent/step-result waterfall", ("LOOP-6", "ABORT-1")),
    LoopCheck("SIGNALLED", _signalled_stream_check, "a stream stopped by the step's abort signal ends its turn aborted",
              ("ABORT-1", "CANCEL-MID", "FINISH-1")),
    LoopCheck("REASON", _abort_reason_check, "an aborted turn carries its caller's reason", ("CANCEL-1", "ABORT-1")),
    LoopCheck("STEER-3", _steering_after_stop_check, "no steering drained into a turn after its stop",
              ("STEER-3", "CANCEL-4")),
    LoopCheck("BOUNDARY", _boundary_failure_check, "a plugin failing at a turn's boundary ends the turn error",
              ("ERR-2", "ERR-3", "ERR-11", "LOOP-4")),
    LoopCheck("LOOP-2", _batching_check, "a turn drains every prompt queued before it", ("LOOP-2",)),
    LoopCheck("MAXTOK", _maxtok_check, "turn-end reasons and their precedence",
              ("MAXTOK-1", "MAXTOK-2", "MAXTOK-3", "MAXTOK-4", "MAXTOK-5", "DISP-1")),
    LoopCheck("TOOLS", _tools_check, "tool calls in order, contained, aborted",
              ("TOOL-1", "TOOL-2", "TOOL-3", "TOOL-4", "TOOL-5", "ERR-7", "LOOP-6")),
    LoopCheck("STEERING", _steering_check, "steering reaches the model", ("STEER-2", "CONT-1", "CONT-2")),
    LoopCheck("DISPOSAL", _disposal_check,
              "only dispose() disposes, directly; input to a disposed agent raises; its waiters wait for the driver",
              ("ERR-1", "LOOP-1", "DISP-2", "DISP-3", "DISP-5", "STATUS-1", "IDLE-4")),
    LoopCheck("SHAPE", _shape_check, "boundaries (and a turn's prompts) are logged before they are notified",
              ("LOOP-4", "LOOP-5")),
    LoopCheck("ERR-9", _one_failure_check, "the first failure of a turn wins, announced with its original error",
              ("ERR-9", "ERR-7")),
    LoopCheck("ERR-10", _late_failure_check, "a turn-end listener's throw during disposal is swallowed",
              ("ERR-10", "DISP-4")),
    LoopCheck("ANNOUNCED", _announced_check, "a late failure (a turn-end listener, a flush) is announced",
              ("ERR-10", "ERR-6", "INJ-2")),
    LoopCheck("ONCE", _announced_once_check, "no turn is announced through agent/error twice", ("ERR-9",)),
    LoopCheck("ORIGINAL", _original_error_check, "agent/error carries the error raised, not a copy of its message",
              ("ERR-9",)),
    LoopCheck("INJ-2", _inject_check, "an idle inject() never raises a contained failure; one of content JSON "
              "cannot encode raises, once its one-shot turn is closed", ("INJ-2", "INJ-4")),
    LoopCheck("CLOSED", _closed_check,
              "what was notified was logged; a closed service's agents are disposed and unregistered",
              ("LOG-2", "SVC-6", "SVC-7", "IDLE-4")),
    LoopCheck("CANCEL-1", _cancel_step_check, "a cancelled turn calls the model no more and ends aborted",
              ("CANCEL-1", "CANCEL-CONT", "CANCEL-STEP")),
    LoopCheck("NOTIFIED", _notified_check, "every boundary logged is notified after it",
              ("LOOP-4", "LOOP-5", "CANCEL-STEP", "DISP-1")),
    LoopCheck("QUEUED", _queued_check, "send and steer are queued with their source and steering flag",
              ("LOOP-9", "STEER-1")),
    LoopCheck("TRIGGER", _trigger_check, "a turn's trigger carries the source of what started it", ("LOOP-2", "INJ-2")),
    LoopCheck("SOURCES", _sources_check, "each logged message carries the source of the call that gave it",
              ("LOOP-9", "INJ-1", "INJ-2", "LOG-7")),
    LoopCheck("STEP-ORDER", _step_order_check, "steering is drained before a step or after its message",
              ("LOOP-5", "STEER-2")),
    LoopCheck("FLUSH", _flush_check, "each turn is flushed, and the driver awaits the flush",
              ("LOOP-4", "INJ-2", "DISP-1")),
    LoopCheck("IDLE-3", _idle_release_check, "a waiter pending at an idle transition is released at it, "
              "one taken while idle with nothing queued at once", ("IDLE-3", "IDLE-2", "IDLE-1")),
    LoopCheck("WARNED", _warned_check, "a throwing notification listener is warned about", ("ERR-12",)),
    LoopCheck("ROUTED", _routed_check, "the adapter called is the one the request names", ("LOOP-10",)),
    LoopCheck("ANSWERED", _answered_check, "a tools/execute listener that answers a call itself keeps its tool "
              "from running, and its answer is the result", ("LOOP-5", "TOOL-4")),
    LoopCheck("problems", _problems_check, "the world saw nothing go wrong"),
)
"""The always-on oracles (see the module docstring)."""

PLAIN_ORACLES: tuple[LoopCheck, ...] = (
    LoopCheck("ASSEMBLY", _assembly_check, "a step's message is what its blocks' block-end say (or their deltas)",
              ("ASM-1", "ASM-2", "ASM-3", "MAXTOK-5", "FINISH-1", "ERR-7")),
    LoopCheck("CONTINUED", _continued_check, "every step of a finished turn ends with the continuation waterfall",
              ("LOOP-5", "CONT-1")),
    LoopCheck("RAISED", _raised_check, "a model stream that raised fails its step with what it raised",
              ("FINISH-1", "FINISH-2", "ERR-7")),
    LoopCheck("FINISHED", _finished_check, "a stream that finished successfully (any kind but error or "
              "aborted) fails no turn", ("FINISH-1",)),
    LoopCheck("UNCAUSED", _uncaused_failure_check, "a turn ends error only when something it was given failed",
              ("FINISH-1", "FINISH-2", "ERR-2")),
    LoopCheck("HISTORY", _history_check, "a model request carries the derived history",
              ("LOG-7", "INJ-3", "STEER-2")),
    LoopCheck("CHUNKS", _chunks_check, "every chunk a model streamed is logged, and its usage",
              ("LOG-3", "LOOP-5", "ASM-4")),
    LoopCheck("REQUEST", _request_check, "every request carries the agent's system prompt and the registered tools",
              ("SVC-5",)),
    LoopCheck("SYSTEM", _system_check, "a request carries the system prompt its system-prompt waterfall returned",
              ("SVC-5",)),
    LoopCheck("ARGS", _tool_arguments_check, "a tool receives its raw arguments parsed as TOOL-2 says", ("TOOL-2",)),
    LoopCheck("DATA", _data_check, "every session event's data has the shape spec 0/0b gives it",
              ("LOOP-2", "LOOP-4", "LOOP-5", "LOOP-6", "STEER-2", "INJ-1", "TOOL-2", "TOOL-3", "ASM-4", "ERR-7")),
)
"""Oracles that hold when no listener rewrites a step's message (``agent/step-result``) or a
model request (``agent/request``): declared scenarios (YAML, generated, the hunt's) rewrite
nothing but a request's model name (the hunt's routing plugin, which REQUEST and HISTORY leave
alone: the routed requests are no agent's model), a Python body might."""


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
                f"started (agent {agent} was {rel.get('status')})", rel["_i"])
        if not any(t["ended"] for t in turns):
            return Violation(
                f"when_idle() {waiter!r} resolved while the turn running prompt {prompt!r} was still open", rel["_i"])
        return None

    return LoopCheck(f"released_after_turn({waiter}, {prompt})", check,
                     f"when_idle() {waiter} resolves only after {prompt}'s turn ended", ("IDLE-2",))


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

    return LoopCheck(f"same_turn({', '.join(wanted)})", check, "the prompts ran in one turn (LOOP-2)", ("LOOP-2",))


def statuses(expected: Sequence[str], agent: str | None = None) -> LoopCheck:
    """The agent's ``agent/status`` values, in order, before the world closed the service."""

    def check(view: TraceView) -> Violation | None:
        a = agent or (view.agents[0] if view.agents else "a")
        end = next(iter(view.closings()), len(view.timeline))
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


CHECK_KINDS = ("released_after_turn", "ran", "not_ran", "same_turn", "statuses", "turn_ends", "event",
               "no_event", "before")
"""The kinds of a declared check (``CheckSpec.kind``)."""


def compile_check(spec: CheckSpec | LoopCheck) -> LoopCheck:
    """The check a declared :class:`CheckSpec` names (a ``LoopCheck`` is returned as is)."""
    if isinstance(spec, LoopCheck):
        return spec
    a = dict(spec.args)
    kind = spec.kind
    if kind == "released_after_turn":
        return released_after_turn(a["waiter"], a["prompt"])
    if kind in ("ran", "not_ran"):
        return ran(a["prompt"], int(a.get("times", 0 if kind == "not_ran" else 1)), a.get("agent"))
    if kind == "same_turn":
        return same_turn(list(a["prompts"]), a.get("agent"))
    if kind == "statuses":
        return statuses(list(a["expect"]), a.get("agent"))
    if kind == "turn_ends":
        return turn_ends(list(a["expect"]), a.get("agent"))
    if kind == "event":
        return event(a["kind"], a.get("where"), a.get("count"))
    if kind == "no_event":
        return no_event(a["kind"], a.get("where"))
    if kind == "before":
        return before((a["first"]["kind"], a["first"].get("where") or {}), (a["then"]["kind"], a["then"].get("where") or {}))
    raise ScenarioError(f"unknown check kind {kind!r} (expected one of: {', '.join(CHECK_KINDS)})")


def judge(trace: Trace, checks: Sequence[LoopCheck], memo: VerdictMemo | None = None) -> Verdict:
    """Every failing check of ``checks`` over ``trace``, each evaluated once (or recalled from
    ``memo``, when it judged the same timeline with the same checks before)."""
    if memo is not None:
        return memo.judge(trace, checks)
    view = TraceView.of(trace)
    verdict = Verdict()
    for check in checks:
        found = check.evaluate(view)
        if found is not None:
            verdict.findings.append(Finding(check.name, found))
    return verdict
