"""Windows: the points of a run where a caller can act, and what it does there.

A :class:`Point` is a place in a workload's run: right after a notification (``agent/status``
split by status, ``session/event`` by event type), before or after a waterfall's ``next()``,
inside ``session/flush``, inside a tool call, at a model call, as a model call's abort signal
fires (inside the loop's abort, an abort observer), right after an agent was created
(before its driver first ran), inside a ``resume()``'s load of its persisted log (where only
``create`` of its id applies); and which occurrence of it (``nth``). A :class:`Window` is a
point, a sequence of caller actions (``send``, ``steer``, ``inject`` (or ``bad_inject``, of content
JSON cannot encode), ``cancel``, ``abort``,
``dispose``, ``when_idle``, the service's ``close`` and ``create`` of a taken id, ``reconfigure``,
``reload`` (the session resumed on a second service over the same backend, as after a process
that died at the point), and, on a Python implementation, ``cancel_driver`` (the agent's driver
task cancelled, PY-1); a listener may also ``raise``, as a failing plugin does), and how
they are done: synchronously by a listener at the point (``listener``), or by an actor started
there, as its own task (``actor``), whose landing the schedule decides. The actions are on the
point's own agent; a workload with ``cross`` pairs also has windows where a listener of one
agent's event acts on another agent of the service (:func:`cross_windows`).

Windows are enumerated from a probe run of each workload on the implementation (the points it
actually reaches, up to ``nth`` occurrences), in a stable order, and named stably::

    two-prompts: after agent/status(idle)#1: send; cancel
    tool: actor after tool call#1: abort
    reply: before agent/turn-continuation next()#1: cancel; send

A window is ordinary scenario data: its scenario is the workload's plus one listener or actor
named ``window``, so a failing window is a race cassette like any other.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from itertools import product
from typing import Any

import simulator
from conformance.adapter import Implementation

from ..scenario import events as ev
from ..scenario.engine import main_of, run_kwargs, spun
from ..scenario.model import RETURNED_VERBS, Action, Actor, Listener, Scenario
from ..scenario.world import World
from .config import MODES as MODES
from .config import VERBS as VERBS  # re-exported: windows are made of these
from .workloads import Workload

_WATERFALL_PROBES = (*ev.WATERFALLS, "session/flush")


@dataclass(frozen=True)
class Point:
    """A place in a run: ``on`` an event (with a ``where`` qualifier), ``when`` before or after a
    waterfall's ``next()``, its ``nth`` occurrence."""

    on: str
    where: tuple[tuple[str, Any], ...] = ()
    when: str = "before"
    nth: int = 1

    @property
    def kind(self) -> str:
        """``notification``, ``log``, ``waterfall``, ``flush`` or ``world``."""
        if self.on == "session/event":
            return "log"
        if self.on == "session/flush":
            return "flush"
        if self.on in ev.WATERFALLS:
            return "waterfall"
        if self.on in ev.WORLD_POINTS:
            return "world"
        return "notification"

    @property
    def label(self) -> str:
        qual = dict(self.where)
        inner = ", ".join(str(v) for k, v in self.where if k != "agent")
        agent = f" of {qual['agent']}" if "agent" in qual else ""
        n = f"#{self.nth}"
        if self.on == "session/event":
            return f"after session/event({inner}){agent}{n}"
        if self.on == "session/flush":
            return f"inside session/flush{agent}{n}"
        if self.on in ev.WATERFALLS:
            return f"{self.when} {self.on} next(){agent}{n}"
        if self.on == "tool/start":
            return f"inside tool call{n}"
        if self.on == "model/request":
            return f"at model call{agent}{n}"
        if self.on == "model/aborted":
            return f"as a model call's signal fires{agent}{n}"
        if self.on == "agent/created":
            return f"after creation of {qual.get('agent', '?')}"
        if self.on == "persistence/load":
            return f"inside the persisted log's load of {qual.get('agent', '?')}"
        return f"after {self.on}({inner}){agent}{n}" if inner else f"after {self.on}{agent}{n}"

    @property
    def actor_after(self) -> tuple[str, dict[str, Any]] | None:
        """The timeline kind and filter an actor triggered at this point waits for (``None``
        where the point is not observed in the timeline: waterfalls and flushes)."""
        if self.kind in ("waterfall", "flush"):
            return None
        if self.on == "session/event":
            return "log", dict(self.where)
        return self.on, dict(self.where)


@dataclass(frozen=True)
class Window:
    """A point, the actions done there, and how (see the module docstring)."""

    workload: str
    point: Point
    actions: tuple[str, ...]
    mode: str = "listener"
    target: str | None = None
    """The agent the actions are on when not the point's own (:data:`CROSS_VERBS`): a listener of
    one agent acting on another of the service (``None``: the point's agent)."""

    @property
    def name(self) -> str:
        how = "actor " if self.mode == "actor" else "plain listener " if self.mode == "plain" else ""
        on = f" {self.target}" if self.target is not None else ""
        return f"{self.workload}: {how}{self.point.label}: {'; '.join(v + on for v in self.actions)}"

    @property
    def group(self) -> str:
        """The windows sharing a workload and a point: searched together, on one worker."""
        return f"{self.workload}: {self.point.label}"

    def scenario(self, base: Scenario) -> Scenario:
        """The workload's scenario with this window's listener or actor (named :data:`NAME`) added."""
        agent = self.target if self.target is not None else dict(self.point.where).get("agent")
        actions = tuple(_action(verb, i + 1, agent, self.mode) for i, verb in enumerate(self.actions)
                        if verb != "stall")
        if self.mode in ("listener", "plain"):
            # a stall is the listener's own wait, for ever (``hold``), after what it did
            element = Listener(on=self.point.on, do=actions, name=NAME, where=dict(self.point.where),
                               nth=self.point.nth, when=self.point.when,  # type: ignore[arg-type]
                               plain=self.mode == "plain", hold=math.inf if "stall" in self.actions else 0.0)
            return replace(base, description=self.name, listeners=(*base.listeners, element))
        after = self.point.actor_after
        assert after is not None
        actor = Actor(do=actions, name=NAME, after=after[0], where=after[1] or None, nth=self.point.nth)
        return replace(base, description=self.name, actors=(*base.actors, actor))


NAME = "window"
"""The name of a window's listener or actor (the world's ``by``, its actor task ``actor:window``)."""

WINDOW_FAILURE = "window listener failed"
"""The message of the error a window's ``raise`` throws (its ``code`` is ``E_WINDOW`` when the
``raise`` follows another action)."""

WINDOW_SOURCE = {"kind": "plugin", "plugin": NAME}
"""The source of a window's messages: a plugin's, not the caller's ``{kind: user}``, so a turn
that drains both shows which one its trigger names (LOOP-2: the first message's)."""


def _action(verb: str, k: int, agent: str | None, mode: str) -> Action:
    if verb in ("send", "inject"):
        # a list of blocks, which the world edits once the run is over: the log must not change
        # with it (LOG-1); steer's is a string, so both forms of content are exercised
        return Action(verb, agent, text=f"W{k}", source=WINDOW_SOURCE, blocks=True)
    if verb == "bad_inject":
        # INJ-4's bad input; an actor awaits the call, so the waiter after it is taken once it raised
        return Action("inject", agent, text=f"W{k}", source=WINDOW_SOURCE, unserialisable=True, wait=mode == "actor")
    if verb == "steer":
        return Action(verb, agent, text=f"W{k}", source=WINDOW_SOURCE)
    if verb in ("cancel", "abort"):
        # An actor gives none, so the defaults are exercised (ABORT-1: `aborted`, CANCEL-1:
        # `cancelled`); a listener's abort gives a reason of its own, and its cancel an empty one:
        # a reason all the same (CANCEL-1), which a marker tested for truthiness loses.
        if mode == "actor":
            return Action(verb, agent, reason=None)
        return Action(verb, agent, reason="hunt" if verb == "abort" else "")
    if verb == "when_idle":
        return Action(verb, agent, name=f"hw{k}")
    if verb == "raise":
        # alone, a value that is no error object (ERR-2: JavaScript's `throw "text"` over the
        # wire; it has no code, and ERR-7 says none is carried, not a null); after another
        # action, an error with a code of its own, which a failure it causes carries into its
        # error event
        if k == 1:
            return Action(verb, agent, message=WINDOW_FAILURE, thrown=True)
        return Action(verb, agent, message=WINDOW_FAILURE, code="E_WINDOW")
    if verb in ("close", "reconfigure"):
        return Action(verb)  # the service's, whatever agent the window is on
    return Action(verb, agent)


CLOSE_AFTER = frozenset(("send", "steer", "inject", "when_idle"))
"""What may come before a window's ``close``: work or a waiter the close must deal with (SVC-7);
a close after a cancel or a dispose shows nothing a close alone or that verb alone does not."""


CROSS_VERBS = ("send", "steer", "inject", "cancel", "abort", "dispose", "when_idle")
"""What a listener of one agent does to another agent of the service (a workload's ``cross``):
a supervising plugin's work, context, stop or disposal of a peer, and a waiter on it. One verb per window:
the point is that the peer's loop is acted on from outside its own turn, at a moment only the
other agent's events mark (a service that drives every agent from one task decides for one agent
between two decisions of another: blind round H's v01)."""


WITHDRAWN = (("send", "when_idle", "cancel"), ("steer", "when_idle", "cancel"), ("send", "when_idle", "dispose"))
"""Three-action sequences every hunt of depth 2 also runs: work queued, a waiter taken for it (not
released at once: something is queued, IDLE-1), then the work withdrawn. The waiter must be
released once the agent is quiescent (CANCEL-W0, IDLE-2; IDLE-4 for the disposal), by a loop that
may have released its waiters only before the status event it is in (upstream's regression test
"idle-listener cancellation settles its waiter"; round 20b, 2026-12-05)."""


ALONE = ("create", "cancel_driver", "reconfigure", "reload", "stop", "answer")
"""The verbs a window does alone (see :func:`sequences`)."""

BAD_INJECTS = (("bad_inject",), ("bad_inject", "when_idle"))
"""The sequences a ``bad_inject`` is in (INJ-4): the call alone (it raises once its one-shot turn is
closed, and the turn is flushed), or followed by a waiter, released only once that flush ran;
another verb beside it shows what that verb alone does."""

STOP_AFTER = frozenset(("steer",))
"""What may come before a continuation listener's ``stop``, its vote returned once it acted: a
steer, the override CONT-2 gives steering "added by an ``agent/step-end`` or
``agent/turn-continuation`` listener" over a stop decision, a forced one included (session 60's
blind round K: a loop letting only a default stop be overridden passed the suite and the hunt).
Anything else beside a stop shows what it does alone."""

STALL_AFTER = frozenset(("cancel", "abort"))
"""What may come before a window's ``stall``: the stops that leave the stalled turn to a later
``dispose()`` from outside (the world's, :meth:`~conformance.scenario.world.World._settle`). Not
a ``dispose`` by the stalling listener itself: ending the driver then means the driver's own
task abandoning the listener it runs, which the contract does not plainly ask; after other work
the stall only shows what the stall alone does."""


def sequences(verbs: Sequence[str], depth: int, mode: str = "listener") -> list[tuple[str, ...]]:
    """Every sequence of 1..``depth`` verbs, shortest first (``raise`` ends a listener's
    sequence: nothing after it runs; an actor cannot throw into the loop; ``close`` ends a
    sequence too, after verbs of ``CLOSE_AFTER`` only: once the service closes, the agents are
    disposed, and what a disposed agent does with more is what ``dispose; X`` shows; ``create``
    only alone: what it judges, a taken id rejected, no other verb changes; ``cancel_driver``
    alone too: once the driver's task is cancelled the agent ends disposed (PY-1), and what a
    disposed agent does with more is what ``dispose; X`` shows; ``reconfigure`` alone: what it
    judges, the next step's request, no other verb changes; ``reload`` alone: what it judges, the
    session a second service loads, another verb before it only moves the point; and by a listener
    only, since the reload itself runs as a task of its own; ``stop`` alone or after a ``steer``,
    :data:`STOP_AFTER`). At depth 2, the :data:`WITHDRAWN` triples too."""
    out: list[tuple[str, ...]] = []
    for n in range(1, depth + 1):
        for seq in product(verbs, repeat=n):
            if "raise" in seq and (mode == "actor" or seq.index("raise") != n - 1):
                continue
            if "close" in seq and (seq.index("close") != n - 1 or not CLOSE_AFTER.issuperset(seq[:-1])):
                continue
            if "stall" in seq and (mode != "listener" or seq.index("stall") != n - 1
                                   or not STALL_AFTER.issuperset(seq[:-1])):
                continue  # a listener's own await: it ends its sequence (nothing after it runs)
            if n > 1 and any(v in seq for v in ALONE) and not (
                    seq[-1] == "stop" and STOP_AFTER.issuperset(seq[:-1])):
                continue
            if "bad_inject" in seq and seq not in BAD_INJECTS:
                continue
            if mode == "actor" and ("reload" in seq or any(v in RETURNED_VERBS for v in seq)):
                continue  # a reload is a task of its own already: an actor would only start it a step later;
                # a stop is the vote a continuation listener returns, an answer a tools/execute listener's
            out.append(seq)
    if depth == 2:
        out += [seq for seq in WITHDRAWN if set(seq) <= set(verbs)]
    return out


# --------------------------------------------------------------------------- enumeration


def probe(workload: Workload, impl: Implementation) -> list[dict[str, Any]]:
    """The timeline of the workload's FIFO run, with every waterfall and flush marked."""
    listeners = tuple(Listener(on=on, do=(), name=f"probe:{on}", times="always", optional=True)
                      for on in _WATERFALL_PROBES)
    sc = replace(workload.scenario, listeners=(*workload.scenario.listeners, *listeners))
    result = simulator.run(main_of(sc, impl), **run_kwargs(sc))
    if spun(result):
        raise SpinError(f"workload {workload.name!r}: its own run, with no window, {result.error}")
    if result.error is not None and not isinstance(result.error, AssertionError):
        from ..scenario.world import ScenarioSetupError

        if isinstance(result.error, ScenarioSetupError):
            raise result.error
    return list(result.timeline)


def twins(workload: Workload, impl: Implementation, windows: Sequence[Window]) -> dict[int, int]:
    """The actor windows whose plain-order run is another's: ``{index: index of its twin}``, the
    twin always an earlier window.

    An actor window only adds a task, created when its event is observed; the implementation
    sees nothing of it until the task runs. Plain (FIFO) order runs callbacks in the order they
    join the ready queue, so two actor windows with the same actions on the same agent whose
    events come with the same number of callbacks joined so far (:func:`simulator.ready_position`:
    nothing was scheduled between them) start their actors at the same place in that order, after
    the same callbacks, and their runs are the same run (the world gives actors a context of
    their own: not even a context variable tells them apart). The figure is the one an actor
    armed after the workload's own sees: their actors, started at the same event, come first.
    Read from one FIFO run of the workload alone (the probe's waterfall listeners could add
    callbacks of their own)."""
    sc = workload.scenario
    positions: list[tuple[dict[str, Any], int | None]] = []

    async def main() -> None:
        await World(sc, impl, positions=positions).run()

    result = simulator.run(main, **run_kwargs(sc))
    if result.error is not None:
        return {}  # the probe judges the workload's own run; no twin is worth a doubt
    at: dict[Point, list[int | None]] = {}  # a point's events' positions, as the world's actor counts them
    first: dict[tuple[tuple[str, ...], Any, int], int] = {}
    out: dict[int, int] = {}
    for index, window in enumerate(windows):
        after = window.point.actor_after
        if window.mode != "actor" or after is None:
            continue
        point = replace(window.point, nth=1)
        if point not in at:
            kind, where = after
            at[point] = [position for event, position in positions
                         if event.get("kind") == kind and not event.get("loaded") and ev.matches(event, where)]
        found = at[point]
        position = found[window.point.nth - 1] if window.point.nth <= len(found) else None
        if position is None:
            continue
        # the same actions on the same agent (a window's actions are on its point's agent)
        twin = first.setdefault((window.actions, dict(window.point.where).get("agent"), position), index)
        if twin != index:
            out[index] = twin
    return out


class SpinError(Exception):
    """A workload's probe run exceeded the wall-clock limit: the implementation spins before any
    window opens (a finding, not bad input: ``loopkit hunt`` exits 1)."""


def points(workload: Workload, timeline: list[dict[str, Any]], max_nth: int = 3) -> list[Point]:
    """The points a probe timeline reached, up to ``max_nth`` occurrences each, in order of first
    appearance."""
    multi = len(workload.scenario.agents) > 1
    counts: dict[tuple[str, tuple[tuple[str, Any], ...], str], int] = {}
    order: list[tuple[str, tuple[tuple[str, Any], ...], str]] = []

    def seen(on: str, where: Mapping[str, Any], when: str = "before") -> None:
        key = (on, tuple(sorted(where.items())), when)
        if key not in counts:
            counts[key] = 0
            order.append(key)
        counts[key] += 1

    for e in timeline:
        kind = e.get("kind")
        agent = {"agent": e.get("agent")} if multi and isinstance(e.get("agent"), str) else {}
        if kind == "agent/status":
            seen("agent/status", {"status": e.get("status"), **agent})
        elif kind in ev.OBSERVED:
            seen(str(kind), agent)
        elif kind == "log" and not e.get("loaded"):  # a resumed log was loaded, not notified
            seen("session/event", {"type": e.get("type"), **agent})
        elif kind == "listener" and str(e.get("name", "")).startswith("probe:"):
            on = str(e.get("on"))
            seen(on, {})
            if on in ev.WATERFALLS:
                seen(on, {}, "after")
        elif kind == "tool/start":
            seen("tool/start", {})
        elif kind == "model/request":
            seen("model/request", {"model": e.get("model")} if multi else {})
        elif kind == "model/aborted":
            seen("model/aborted", {"model": e.get("model")} if multi else {})
        elif kind == "agent/created":
            seen("agent/created", {"agent": e.get("agent")})
        elif kind == "persistence/load" and isinstance(e.get("agent"), str):
            seen("persistence/load", {"agent": e.get("agent")})
    out: list[Point] = []
    for on, where, when in order:
        cap = 1 if on in ("agent/created", "persistence/load") else max_nth
        for nth in range(1, min(counts[(on, where, when)], cap) + 1):
            out.append(Point(on, where, when, nth))
    return out


def enumerate_windows(workload: Workload, pts: list[Point], verbs: Sequence[str], depth: int,
                      modes: Sequence[str] = MODES, *, flush_stalls: bool = True) -> Iterator[Window]:
    """Every window of ``workload`` at ``pts`` within the bounds, in a stable order. Without
    ``flush_stalls`` no ``stall`` acts inside ``session/flush``: it judges that dispose() cuts the
    flush listener's task, which only an in-process loop can cancel (one over the wire abandons
    it, which IDLE-4 forbids)."""
    seqs = {mode: sequences(verbs, depth, mode) for mode in modes}
    # PY-2: a flush listener may be a plain function; one that throws does so at the call, which a
    # loop containing only what its awaits raise lets through (round 44's flush-sync-raise-escapes):
    # at a flush, the throwing sequences again, by a plain function
    throwing = [actions for actions in seqs.get("listener", ()) if actions[-1] == "raise"]
    for point in pts:
        yield from cross_windows(workload, point, verbs)
        if not workload.own:
            continue
        for mode in modes:
            if mode == "actor" and point.actor_after is None:
                continue
            for actions in seqs[mode]:
                if point.on == "agent/created" and "raise" in actions:
                    continue  # the world's own setup, not the implementation, would fail
                if point.on == "persistence/load" and actions not in (("create",), ("close",)):
                    continue  # no agent yet: a caller can take its id (SVC-2) or close the service (SVC-7)
                if "stall" in actions and not ((point.on in ev.WATERFALLS and point.when == "before")
                                               or (point.on == "session/flush" and flush_stalls)):
                    continue  # a plugin awaiting inside a waterfall, before it passes the value on, or a flush
                returned = [RETURNED_VERBS[v] for v in actions if v in RETURNED_VERBS]
                if returned and (point.when != "before" or any(on != point.on for on in returned)):
                    continue  # a waterfall listener's own return value, at its waterfall, before next() (a stop
                    # votes once per call: before and after next() vote alike; an answer replaces next())
                yield Window(workload.name, point, actions, mode)
        if point.kind == "flush":
            for actions in throwing:
                yield Window(workload.name, point, actions, "plain")


def cross_windows(workload: Workload, point: Point, verbs: Sequence[str]) -> Iterator[Window]:
    """The windows at ``point`` acting on another agent (the workload's ``cross`` pairs: from the
    point's agent to the target), one verb of :data:`CROSS_VERBS` each, by a listener."""
    source = dict(point.where).get("agent")
    if source is None or point.kind in ("waterfall", "world"):
        return
    for origin, target in workload.cross:
        if origin == source:
            for verb in CROSS_VERBS:
                if verb in verbs:
                    yield Window(workload.name, point, (verb,), "listener", target)
