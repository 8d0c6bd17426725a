"""The hunt's search, in three phases over the windows of each workload.

1. *Plain*: every window runs once in plain asyncio (FIFO) order, judged by the oracles. It
   either fails there, or was not reached (its point never came), or leaves a trace signature.
2. *Explore*: the first window of each distinct signature of a workload (the others would
   search the same schedule space; ``Config.explore_all``: every window) has its schedules explored: single deviations from FIFO at
   the choice points right after the window acted, nearest first (phase 1 ran FIFO itself),
   then seeded random and pct runs; the first failing one is kept.
3. *Cassettes*: the first failing windows of each failure signature of a workload are
   shrunk into race cassettes.

Every function here is a pure function of its arguments (the seeds of a window come from the
hunt's seed, its workload and its index), so the units of work can run on any worker, in any
order, on any machine, and the result is the same. The dedup of phase 2 spans one workload: a
shard takes whole workloads (see :mod:`.shards`).
"""

from __future__ import annotations

import hashlib
import json
import re
import zlib
from dataclasses import dataclass, field, replace
from typing import Any

import orjson

from conformance.adapter import Implementation
from conformance.catalogue import PYTHON, runtime_of
from simulator.errors import SimulationError
from simulator.schedule import Schedule
from simulator.strategies import (
    AnchoredProbe,
    AnchoredStrategy,
    PCTStrategy,
    RandomStrategy,
    reaching_runs,
)
from simulator.strategies.base import Strategy

from ..scenario import engine, race
from ..scenario.checks import VerdictMemo
from ..scenario.model import Scenario
from ..scenario.trace import Trace
from ..scenario.world import ScenarioSetupError
from ..scenario.yaml_format import dump
from . import observable
from . import windows as win
from .config import VERBS, Config
from .workloads import Workload


@dataclass
class WorkloadPlan:
    """The windows of one workload, in their stable order, and its groups (the index ranges of
    the windows acting at one point)."""

    workload: Workload
    windows: list[win.Window] = field(default_factory=list)
    groups: list[tuple[int, int]] = field(default_factory=list)
    setup_error: str | None = None
    """Why the workload's own run, with no window, could not be set up on the implementation
    (then it has no windows, and the failure is a finding of the workload: see :func:`plan`)."""
    twins: dict[int, int] = field(default_factory=dict)
    """Actor windows whose plain-order run is an earlier window's (:func:`.windows.twins`):
    phase 1 runs the earlier one only and gives both its result."""

    def scenario(self, index: int) -> Scenario:
        return self.windows[index].scenario(self.workload.scenario)


def verbs_for(impl: Implementation, verbs: tuple[str, ...] = VERBS) -> list[str]:
    """The window verbs of ``verbs`` that ``impl`` supports (``inject`` and ``bad_inject`` need
    the ``injection`` feature; ``reload`` the ``persistence`` feature; ``cancel_driver`` an in-process Python
    implementation, whose driver is a task)."""
    features = set(getattr(impl, "features", ()))
    python = runtime_of(impl) == PYTHON
    return [v for v in verbs if (v not in ("inject", "bad_inject") or "injection" in features) and (v != "cancel_driver" or python)
            and (v != "reload" or "persistence" in features)]


def plan(workloads: tuple[Workload, ...], impl: Implementation, config: Config) -> list[WorkloadPlan]:
    """Every window of every workload ``impl`` can run, from a probe run of each.

    A workload whose own run cannot be set up on ``impl`` (the implementation raised or never
    settled while the world built it: a second agent's ``create``, writing a resumed agent's
    persisted session) gets no windows and its ``setup_error``: the implementation failed in one
    ordinary use, a finding, while the other workloads are still hunted. When no workload can be
    set up, the implementation cannot be checked at all: that is raised (bad input, exit 2)."""
    return checked([plan_workload(w, impl, config) for w in plannable(workloads, impl, config)])


def plannable(workloads: tuple[Workload, ...], impl: Implementation, config: Config) -> list[Workload]:
    """The workloads ``impl`` can run (those needing a feature it lacks are left out); raises
    ``ValueError`` for an unknown verb."""
    unknown = [v for v in config.verbs if v not in VERBS]
    if unknown:
        raise ValueError(f"unknown action {unknown[0]!r} (choose from {', '.join(VERBS)})")
    return [w for w in workloads if not w.lacking(impl)]


def plan_workload(workload: Workload, impl: Implementation, config: Config) -> WorkloadPlan:
    """The windows of one workload, from a probe run of it on ``impl`` (its ``setup_error`` when
    the workload's own run could not be set up)."""
    verbs = verbs_for(impl, config.verbs)
    python = runtime_of(impl) == PYTHON
    wp = WorkloadPlan(workload)
    try:
        timeline = win.probe(workload, impl)
    except ScenarioSetupError as exc:
        wp.setup_error = str(exc)  # the world's one line: what raised or never settled, and where
        return wp
    for point in win.points(workload, timeline, config.nth):
        start = len(wp.windows)
        modes = config.modes
        if point.on == "model/request" and not getattr(impl, "reentrant_model", True):  # adapter.py
            modes = tuple(m for m in modes if m != "listener")
        wp.windows += list(win.enumerate_windows(workload, [point], verbs, config.depth, modes,
                                                 flush_stalls=python))
        if len(wp.windows) > start:
            wp.groups.append((start, len(wp.windows)))
    if config.twins:
        wp.twins = win.twins(workload, impl, wp.windows)
    return wp


def checked(plans: list[WorkloadPlan]) -> list[WorkloadPlan]:
    """The plans, unless no workload could be set up: then the implementation cannot be checked
    at all, and the first workload's failure is raised (bad input, exit 2)."""
    if plans and all(wp.setup_error for wp in plans):
        raise ScenarioSetupError(str(plans[0].setup_error))
    return plans


# --------------------------------------------------------------------------- phase 1: plain runs


_OWN = re.compile(rb'"(W|hw)\d+"')
_SORTED = orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS


def signature(trace: Trace) -> str:
    """What the implementation did in a window's plain-order run, for "is it a new trace": the
    timeline without times, without the window's own calls and markers, its texts and waiter
    names made anonymous (``send; send`` and ``send`` may well do the same). Keys are sorted:
    an implementation may build its data in an order that depends on the hash seed. (orjson:
    every phase-1 window pays for this, and the standard encoder took a tenth of a run.)"""
    keep = [{k: v for k, v in e.items() if k != "t_us" and k != "t"} for e in trace.timeline
            if e.get("kind") not in ("listener", "actor/run")
            and not (e.get("by") == win.NAME and e.get("kind") in ("op", "op/error"))]
    try:
        text = orjson.dumps(keep, option=_SORTED, default=str)
    except orjson.JSONEncodeError:  # what orjson refuses (an int past 64 bits): the standard encoder
        text = json.dumps(keep, sort_keys=True, default=str).encode()
    return hashlib.sha1(_OWN.sub(rb'"\1"', text)).hexdigest()[:16]


def reached(trace: Trace) -> bool:
    """Whether the window's point came (its listener or actor acted)."""
    return win.NAME not in trace.untriggered


def failure_of(report: engine.RunReport) -> dict[str, Any]:
    """The failure of a failing run, as the report states it (its schedule kept for phase 3).

    A run stopped by its wall-clock limit is a ``wall-clock`` failure, ``hang`` set: the
    implementation spins, and what the oracles say of the half-run it left is noise."""
    t = report.trace
    hang = engine.spun(t.result)
    if hang:
        checks, rules, message = ["wall-clock"], [], str(t.error)
    else:
        checks = sorted({f["check"] for f in t.failures}) or [f"outcome:{t.outcome}"]
        rules = sorted({r for f in t.failures for r in f.get("rules", [])})
        message = t.failures[0]["message"] if t.failures else t.outcome_message()
    return {
        "checks": checks,
        "rules": rules,
        "message": message,
        "hang": hang,
        "strategy": t.strategy,
        "seed": t.seed,
        "schedule": t.schedule_object().to_json(),
    }


def confirmed(sc: Scenario, impl: Implementation, strategy: Strategy | None = None, seed: int = 0,
              memo: VerdictMemo | None = None) -> engine.RunReport:
    """One run of ``sc`` (``engine.run_one``), replayed once on its schedule when it spun, and
    the replay kept if that one does not: a loaded machine can stretch a window's milliseconds
    past the wall-clock limit once, and a false spin would stop the hunt. A real spin spins
    again on the same schedule (it costs the limit twice)."""
    rep = engine.run_one(sc, impl, strategy, seed, memo=memo)
    if not engine.spun(rep.trace.result):
        return rep
    try:
        again = engine.run_one(sc, impl, schedule=rep.trace.schedule_object(), memo=memo)
    except SimulationError:
        return rep  # it diverged: the implementation is not deterministic; keep the first run
    return rep if engine.spun(again.trace.result) else again


@dataclass
class Plain:
    """Phase 1 of one window."""

    reached: bool
    signature: str
    failure: dict[str, Any] | None = None
    difference: dict[str, Any] | None = None
    twin: int | None = None
    """The earlier window whose run this window's is (:attr:`WorkloadPlan.twins`), when it was
    not run itself."""
    widths: tuple[int, ...] | None = None
    """The options at each choice point phase 2's bounded search counts, in this run
    (:class:`~simulator.strategies.AnchoredProbe`): how many of its schedules reach a deviation."""


def plain(wp: WorkloadPlan, start: int, end: int, impl: Implementation,
          against: Implementation | None = None, *, skip_twins: bool = False) -> list[Plain | None]:
    """Phase 1 of windows ``start..end`` of one workload (and their run on ``against``); it ends
    early, after the window, at a window that spins (the rest are not run: the hunt stops).
    With ``skip_twins`` a twin is not run (``None`` in its place: see :func:`with_twins`)."""
    out: list[Plain | None] = []
    for index in range(start, end):
        if skip_twins and index in wp.twins:
            out.append(None)
            continue
        sc = wp.scenario(index)
        probe = AnchoredProbe(event=window_acted, task=anchor_task(wp, index))
        rep = confirmed(sc, impl, probe)
        result = Plain(reached(rep.trace), signature(rep.trace), None if rep.ok else failure_of(rep),
                       widths=tuple(probe.widths))
        if against is not None:
            other = confirmed(sc, against)
            if engine.spun(other.trace.result):
                raise ValueError(f"the --against implementation spins in window {wp.windows[index].name!r}: "
                                 f"{other.trace.error}")
            result.difference = observable.difference(other.trace, rep.trace, reached(other.trace), result.reached)
        out.append(result)
        if hung(result.failure):
            break
    return out


def with_twins(wp: WorkloadPlan, results: list[Plain | None]) -> None:
    """Give each twin the result of the window it twins (in place; left ``None`` when that one
    was not run: the hunt stopped)."""
    for index, twin in wp.twins.items():
        r = results[twin]
        if results[index] is None and r is not None:
            results[index] = replace(r, twin=twin)


def hung(failure: dict[str, Any] | None) -> bool:
    """Whether a window's failure is a spin (the hunt stops at the first)."""
    return failure is not None and bool(failure.get("hang"))


def distinct(results: list[Plain | None], every: bool = False) -> list[int]:
    """The windows phase 2 explores: the first reached, passing window of each signature (with
    ``every``, each reached, passing window)."""
    seen: set[str] = set()
    out = []
    for index, r in enumerate(results):
        if r is None or not r.reached or (r.signature in seen and not every):
            continue
        seen.add(r.signature)
        if r.failure is None:
            out.append(index)
    return out


def signatures(results: list[Plain]) -> int:
    """Distinct traces among the reached windows."""
    return len({r.signature for r in results if r.reached})


# --------------------------------------------------------------------------- phase 2: schedules


def window_seed(config: Config, workload: str, index: int) -> int:
    """The base seed of a window's random and pct runs."""
    return zlib.crc32(f"{config.seed}:{workload}:{index}".encode())


def window_acted(event: dict[str, Any]) -> bool:
    """Whether ``event`` is the window acting: its listener firing, or its actor starting."""
    kind = event.get("kind")
    return (kind == "listener" and event.get("name") == win.NAME) or (kind == "actor/run" and event.get("actor") == win.NAME)


def anchor_task(wp: WorkloadPlan, index: int) -> str | None:
    """The task whose readiness anchors the window's bounded search beside its acting event
    (:func:`window_acted`): its actor's; a listener acts in place (``None``)."""
    return f"actor:{win.NAME}" if wp.windows[index].mode == "actor" else None


def explore(wp: WorkloadPlan, index: int, impl: Implementation, config: Config,
            widths: tuple[int, ...] | None = None) -> tuple[int, dict[str, Any] | None]:
    """Phase 2 of one window: ``(schedules run, first failure or None)``. The bounded search
    deviates once per schedule, at the choice points right after the window acted, nearest first
    (an actor's from when its task is ready): phase 1 ran the FIFO schedule already. With the
    ``widths`` phase 1 measured (:attr:`Plain.widths`) it makes only the runs that reach a
    deviation; without, it learns the search is exhausted from a run that reached none (a FIFO
    run again)."""
    sc = wp.scenario(index)
    memo = VerdictMemo()  # most of a window's schedules give a timeline one of them gave
    runs = 0
    dfs = config.dfs if widths is None else min(config.dfs, reaching_runs(widths))
    if dfs:
        anchored = AnchoredStrategy(event=window_acted, task=anchor_task(wp, index))
        for _ in range(dfs):
            if anchored.exhausted:
                break
            rep = confirmed(sc, impl, anchored, 0, memo)
            runs += 1
            if not rep.ok:
                return runs, failure_of(rep)
    seed = window_seed(config, wp.workload.name, index)
    for i in range(config.random):
        rep = confirmed(sc, impl, RandomStrategy(), seed + i, memo)
        runs += 1
        if not rep.ok:
            return runs, failure_of(rep)
    for i in range(config.pct):
        rep = confirmed(sc, impl, PCTStrategy(seed=seed + i, horizon=64), seed + i, memo)
        runs += 1
        if not rep.ok:
            return runs, failure_of(rep)
    return runs, None


# --------------------------------------------------------------------------- phase 3: cassettes


def cassette(wp: WorkloadPlan, index: int, failure: dict[str, Any], impl: Implementation,
             impl_spec: str) -> race.RaceCassette:
    """The shrunk race cassette of a failing window (its scenario inline)."""
    sc = wp.scenario(index)
    sc = sc.with_source({"yaml": dump(sc)})
    failing = engine.run_one(sc, impl, schedule=Schedule.from_json(failure["schedule"]))
    shrunk = engine.shrink(sc, impl, failing)
    found = engine.Exploration(str(failure["strategy"]), 0, int(failure["seed"] or 0), 1, runs=1,
                               failing_seed=failure["seed"], found_at=1, failure=failing)
    return race.build(sc, impl_spec, found, shrunk)


def signature_of(failure: dict[str, Any]) -> str:
    """A failure's signature: the checks that failed and the rules they name."""
    return f"{'+'.join(failure['checks'])} [{', '.join(failure['rules'])}]"


__all__ = ["Config", "Plain", "WorkloadPlan", "anchor_task", "cassette", "confirmed", "distinct", "explore", "failure_of", "hung", "plain", "plan",
           "reached", "signature", "signature_of", "signatures", "verbs_for", "window_acted", "window_seed",
           "with_twins"]
