"""Exploration, replay, shrinking and the determinism check, on top of :func:`simulator.run`."""

from __future__ import annotations

import base64
import json
import os
import pickle
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from simulator._runtime import run
from simulator.errors import ExploreError
from simulator.result import RunResult
from simulator.schedule import Choice, Schedule
from simulator.strategies.base import Strategy
from simulator.strategies.dfs import DFSStrategy
from simulator.strategies.dpor import DPORStrategy
from simulator.strategies.fifo import FifoStrategy
from simulator.strategies.pct import PCTStrategy
from simulator.strategies.random import RandomStrategy
from simulator.strategies.replay import ReplayStrategy

Main = Callable[[], Any]
Predicate = Callable[[RunResult], bool]


def default_is_failure(result: RunResult) -> bool:
    """A run fails when it does not complete or leaves a task exception unretrieved."""
    return result.outcome != "completed" or bool(result.unretrieved)


def make_strategy(strategy: str | Strategy | None, **options: Any) -> Strategy:
    """A strategy object from a name (``fifo``, ``random``, ``pct``, ``dfs``, ``dpor``) or as
    is."""
    if strategy is None:
        return FifoStrategy()
    if isinstance(strategy, Strategy):
        return strategy
    table: dict[str, Callable[..., Strategy]] = {
        "fifo": FifoStrategy,
        "random": RandomStrategy,
        "pct": PCTStrategy,
        "dfs": DFSStrategy,
        "dpor": DPORStrategy,
    }
    try:
        return table[strategy](**options)
    except KeyError:
        raise ValueError(f"unknown strategy {strategy!r} (choose from {sorted(table)})") from None


def _run_kwargs(schedule: Schedule, extra: dict[str, Any]) -> dict[str, Any]:
    kw = {
        "seed": schedule.seed,
        "mode": schedule.mode,
        "vary_timers": schedule.vary_timers,
        "timer_window": schedule.timer_window,
        "scenario": schedule.scenario,
    }
    kw.update(extra)
    return kw


# --------------------------------------------------------------------------------------------
# explore


@dataclass
class ExploreResult:
    """What a search found.

    ``runs``: schedules run; ``failures``: how many failed; ``first_failure``: the first failing
    run (its ``.schedule`` replays it); ``first_failure_run``: 1-based number of schedules run
    up to and including it; ``distinct_schedules`` / ``distinct_timelines``: distinct choice
    sequences / observable timelines seen; ``exhausted``: a systematic search (dfs, dpor)
    covered its whole (reduced) tree; ``budget_hit``: a systematic search stopped at the
    budget with schedules left; ``classes``: for a systematic search, the runs that explored a
    new class of interleavings (the others were cut short as redundant by its sleep sets).
    """

    strategy: str
    runs: int = 0
    failures: int = 0
    first_failure: RunResult | None = None
    first_failure_run: int | None = None
    distinct_schedules: int = 0
    distinct_timelines: int = 0
    exhausted: bool = False
    budget_hit: bool = False
    classes: int | None = None
    wall_s: float = 0.0
    outcomes: dict[str, int] = field(default_factory=dict)
    interrupted: bool = False
    """The search was stopped early (``should_stop`` or a KeyboardInterrupt): ``runs`` and any
    ``first_failure`` are what it had found by then."""

    @property
    def found(self) -> bool:
        return self.first_failure is not None

    def record(self, r: RunResult, failed: bool) -> None:
        """Account for one run."""
        self.runs += 1
        self.outcomes[r.outcome] = self.outcomes.get(r.outcome, 0) + 1
        if failed:
            self.failures += 1
            if self.first_failure is None:
                self.first_failure = r
                self.first_failure_run = self.runs

    @property
    def schedules_per_s(self) -> float:
        return self.runs / self.wall_s if self.wall_s > 0 else float("inf")

    @property
    def hit_rate(self) -> float:
        return self.failures / self.runs if self.runs else 0.0

    def summary(self) -> str:
        s = (f"{self.strategy}: {self.runs} schedules, {self.failures} failing, "
             f"{self.distinct_timelines} distinct timelines, {self.schedules_per_s:,.0f}/s")
        if self.first_failure_run is not None:
            s += f"; first failure at schedule {self.first_failure_run}"
        if self.exhausted:
            s += f"; exhausted ({self.classes} classes)" if self.classes is not None else "; search exhausted"
        elif self.budget_hit:
            s += f"; budget hit ({self.runs} schedules, {self.classes} classes so far)"
        if self.interrupted:
            s += "; interrupted"
        return s


Progress = Callable[[int], None]
StopCheck = Callable[[], bool]


def explore(
    main: Main,
    *,
    strategy: str | Strategy = "random",
    budget: int = 1000,
    seed: int = 0,
    is_failure: Predicate | None = None,
    stop_on_failure: bool = True,
    track: bool = True,
    workers: int = 1,
    progress: Progress | None = None,
    should_stop: StopCheck | None = None,
    **run_kwargs: Any,
) -> ExploreResult:
    """Run ``main`` under up to ``budget`` schedules and report what was found.

    ``strategy``: ``"random"``, ``"pct"``, ``"dfs"``, ``"fifo"``, ``"hypothesis"`` or a strategy
    object. Run ``i`` uses seed ``seed + i`` (the strategy's stream and the program's sources);
    ``hypothesis`` draws every choice from one hypothesis search (``seed`` seeds it) and ``dfs``
    walks one tree (the same seed every run), stopping early when exhausted; ``dpor`` likewise
    with partial-order reduction. A systematic search (``dfs``, ``dpor``) reports ``exhausted``
    with the number of ``classes`` it explored, or ``budget_hit`` when the budget ran out first.
    ``is_failure(result)`` decides failure (default: not completed, or an unretrieved task
    exception). ``stop_on_failure`` stops at the first failure. ``track`` counts distinct
    schedules and timelines (costs a little per run). ``progress(n)`` is told of every ``n``
    runs done. ``workers > 1`` interleaves the seeds across forked processes (random, pct and
    fifo; see :func:`_explore_parallel`): the first failure reported is the lowest failing seed,
    the one a single process finds. Other keyword arguments go to :func:`simulator.run`.

    Interrupts: ``should_stop()`` is asked before every run, and a ``KeyboardInterrupt`` during
    one is caught; either way the search returns what it found so far with ``interrupted`` set
    (the run cut short is not counted), workers included.
    """
    is_failure = is_failure or default_is_failure
    tick = progress or (lambda n: None)
    stop = should_stop or (lambda: False)
    if strategy == "hypothesis":
        return _explore_hypothesis(main, budget, seed, is_failure, stop_on_failure, track, tick, stop, run_kwargs)
    strat = make_strategy(strategy)
    systematic = bool(getattr(strat, "systematic", False))
    if workers > 1 and not systematic:
        return _explore_parallel(main, strat, budget, seed, is_failure, stop_on_failure, track,
                                 workers, tick, stop, run_kwargs)
    res = ExploreResult(strategy=strat.name)
    seen = _Seen(track)
    t0 = time.perf_counter()
    try:
        for i in range(budget):
            if systematic and getattr(strat, "exhausted", False):
                break
            if stop():
                res.interrupted = True
                break
            r = run(main, strategy=strat, seed=seed if systematic else seed + i, **run_kwargs)
            failed = _count(res, r, is_failure, seen)
            tick(1)
            if failed and stop_on_failure:
                break
    except KeyboardInterrupt:
        res.interrupted = True
    res.wall_s = time.perf_counter() - t0
    if systematic:
        res.exhausted = bool(getattr(strat, "exhausted", False))
        res.budget_hit = not res.exhausted and res.runs >= budget
        classes = getattr(strat, "classes", None)
        res.classes = int(classes) if classes is not None else None
    seen.into(res)
    return res


class _Seen:
    """Distinct schedules and timelines of a search (when tracked)."""

    def __init__(self, track: bool) -> None:
        self.track = track
        self.schedules: set[Any] = set()
        self.timelines: set[str] = set()

    def add(self, r: RunResult) -> None:
        if self.track:
            self.schedules.add(tuple(c[0] for c in r.raw_choices) if r.raw_choices
                               else tuple(c.pick for c in r.schedule.choices))
            self.timelines.add(r.timeline_json())

    def into(self, res: ExploreResult) -> None:
        res.distinct_schedules = len(self.schedules)
        res.distinct_timelines = len(self.timelines)


def _count(res: ExploreResult, r: RunResult, is_failure: Predicate, seen: _Seen) -> bool:
    """Account for one run; whether it failed."""
    seen.add(r)
    failed = is_failure(r)
    res.record(r, failed)
    return failed


def _explore_hypothesis(main: Main, budget: int, seed: int, is_failure: Predicate, stop_on_failure: bool,
                        track: bool, tick: Progress, stop: StopCheck, run_kwargs: dict[str, Any]) -> ExploreResult:
    """Every choice drawn from one hypothesis search (no hypothesis shrinking: ``shrink``
    minimises the schedule afterwards, and the budget then counts every run)."""
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as hseed
    from hypothesis import strategies as st

    from simulator.strategies.hypothesis import HypothesisStrategy

    res = ExploreResult(strategy="hypothesis")
    seen = _Seen(track)

    class _Found(Exception):
        pass

    class _Stopped(Exception):
        pass

    @settings(max_examples=budget, database=None, deadline=None, derandomize=False,
              suppress_health_check=list(HealthCheck), report_multiple_bugs=False,
              phases=(Phase.explicit, Phase.generate))
    @hseed(seed)
    @given(st.data())
    def search(data: Any) -> None:
        if stop():
            raise _Stopped
        r = run(main, strategy=HypothesisStrategy(data), seed=seed, **run_kwargs)
        failed = _count(res, r, is_failure, seen)
        tick(1)
        if failed and stop_on_failure:
            raise _Found

    t0 = time.perf_counter()
    try:
        search()
    except _Found:
        pass
    except (_Stopped, KeyboardInterrupt):
        res.interrupted = True
    except Exception:
        if res.first_failure is None:  # hypothesis's own report around something else
            raise
    res.wall_s = time.perf_counter() - t0
    seen.into(res)
    return res


_WORK: Any = None

HALT_GRACE = 1.0
"""Seconds workers get to report after a stop was asked for, before they are killed."""


def _worker(index: int, count: int, shared: Any, results: Any) -> None:
    """Worker ``index`` of ``count``: seeds ``seed + index``, ``seed + index + count``, ... until the
    budget, or a lower seed failed (``stop_at``), or the parent asked to stop (``halt``); it
    reports its counts and its first failure. It dies with the parent whatever ends it, and
    ignores SIGINT and SIGTERM (a Ctrl-C or timeout(1) reaches the whole process group: the
    parent decides, and asks every worker to report what it has)."""
    import signal

    from simulator.supervise import die_with_parent

    die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # timeout(1) signals the whole group too
    main, strat, budget, seed, is_failure, stop_on_failure, track, run_kwargs = _WORK
    done, stop_at, current, halt = shared
    res = ExploreResult(strategy=strat.name)
    seen = _Seen(track)
    first: tuple[int, int, str] | None = None
    try:
        for i in range(index, budget, count):
            s = seed + i
            if halt.value:
                res.interrupted = True
                break
            if stop_on_failure and s > stop_at.value:
                break  # a lower seed already failed: nothing here can be the first failure
            current[index] = s
            r = run(main, strategy=strat, seed=s, **run_kwargs)
            failed = _count(res, r, is_failure, seen)
            with done.get_lock():
                done.value += 1
            if failed and first is None:
                first = (s, res.runs, r.schedule.to_json())
                if stop_on_failure:
                    with stop_at.get_lock():
                        stop_at.value = min(stop_at.value, s)
                    break
    except BaseException as exc:  # reported by the parent as the error of this seed
        _report(results, {"worker": index, "error": f"seed {current[index]}: {type(exc).__name__}: {exc}"})
        return
    _report(results, {"worker": index, "runs": res.runs, "failures": res.failures, "outcomes": res.outcomes,
                      "first": first, "sched": seen.schedules, "tl": seen.timelines,
                      "interrupted": res.interrupted})


def _report(results: Any, message: dict[str, Any]) -> None:
    """A worker's report to the parent. A pipe the program under test closed (it closes file
    descriptors it does not own) ends the worker quietly: the parent names the missing worker."""
    import os

    from simulator.supervise import WORKER_BROKE

    try:
        results.put(message)
    except BaseException:
        os._exit(WORKER_BROKE)


def _explore_parallel(
    main: Main, strat: Strategy, budget: int, seed: int, is_failure: Predicate,
    stop_on_failure: bool, track: bool, workers: int, tick: Progress, stop: StopCheck,
    run_kwargs: dict[str, Any],
) -> ExploreResult:
    """Seeds interleaved across forked workers (worker w runs seed + w, seed + w + N, ...). A
    failure at seed s stops the seeds above s but not those below, so the reported failure is
    the lowest failing seed: the one a single process finds. A worker that raises or dies is a
    :class:`~simulator.errors.ExploreError` naming the seed it was running, never a silent gap.

    Its supervision (the hunt's pool, ``conformance.hunt.pool``, shares it): workers die with the parent
    (:func:`simulator.supervise.die_with_parent`), ignore SIGINT, and stop at the next seed when
    ``stop()`` holds or the parent gets a ``KeyboardInterrupt``; their reports are merged into a
    partial result (``interrupted``), and a worker that has not reported within
    :data:`HALT_GRACE` seconds is killed (its runs are counted from the shared counter)."""
    import multiprocessing as mp

    global _WORK
    ctx = mp.get_context("fork")
    done = ctx.Value("q", 0)
    stop_at = ctx.Value("q", 2**62)
    halt = ctx.Value("b", 0)
    current = ctx.Array("q", [seed + w for w in range(workers)])
    results = ctx.SimpleQueue()
    _WORK = (main, strat, budget, seed, is_failure, stop_on_failure, track, run_kwargs)
    procs = [ctx.Process(target=_worker, args=(w, workers, (done, stop_at, current, halt), results), daemon=True)
             for w in range(workers)]
    t0 = time.perf_counter()
    reports: dict[int, dict[str, Any]] = {}
    interrupted = False
    deadline: float | None = None

    def drain() -> None:
        while not results.empty():
            report = results.get()
            reports[report["worker"]] = report

    try:
        for p in procs:
            p.start()
        ticked = 0
        while len(reports) < workers:
            try:
                if not interrupted and stop():
                    raise KeyboardInterrupt
                drain()
                now = done.value
                if now > ticked:
                    tick(now - ticked)
                    ticked = now
                dead = [w for w, p in enumerate(procs) if not p.is_alive() and w not in reports]
                if dead:
                    time.sleep(0.05)  # a report may still be in the pipe
                    drain()
                    dead = [w for w in dead if w not in reports]
                    if dead and not interrupted:
                        w = dead[0]
                        raise ExploreError(f"worker {w} died (exit code {procs[w].exitcode}) while running seed "
                                           f"{current[w]}")
                    if dead:
                        break
                if deadline is not None and time.monotonic() > deadline:
                    break  # the stragglers are killed below; their runs come from the counter
                time.sleep(0.01)
            except KeyboardInterrupt:
                if interrupted:  # a second interrupt while waiting for the reports: stop waiting
                    break
                interrupted = True
                halt.value = 1
                deadline = time.monotonic() + HALT_GRACE
        if done.value > ticked:
            tick(done.value - ticked)
    finally:
        _WORK = None
        for p in procs:
            if p.is_alive() and interrupted:
                p.kill()  # past the grace period: its runs come from the shared counter
            elif p.is_alive():
                p.kill()  # done with it (a worker ignores SIGTERM)
            p.join(timeout=5)
    for report in reports.values():
        if "error" in report:
            raise ExploreError(f"a worker process failed at {report['error']}")
    res = ExploreResult(strategy=strat.name, interrupted=interrupted)
    seen = _Seen(track)
    first = None
    for report in reports.values():
        res.runs += report["runs"]
        res.failures += report["failures"]
        for k, v in report["outcomes"].items():
            res.outcomes[k] = res.outcomes.get(k, 0) + v
        seen.schedules |= report["sched"]
        seen.timelines |= report["tl"]
        if report["first"] is not None and (first is None or report["first"][0] < first[0]):
            first = report["first"]
    if interrupted:
        res.runs = max(res.runs, int(done.value))  # killed workers' runs, which sent no report
    res.wall_s = time.perf_counter() - t0
    seen.into(res)
    if first is not None:
        res.first_failure_run = first[0] - seed + 1
        res.first_failure = replay(main, Schedule.from_json(first[2]), strict=True,
                                   **{k: v for k, v in run_kwargs.items() if k in ("max_steps", "max_time", "wall_limit")})
    return res


# --------------------------------------------------------------------------------------------
# replay


def replay(
    main: Main, schedule: Schedule, *, strict: bool = True, then: str | None = None,
    **run_kwargs: Any,
) -> RunResult:
    """Re-run ``main`` under a recorded schedule (same seed, mode and timer settings).

    Strict mode raises :class:`~simulator.errors.Divergence` ("diverged at choice k: expected
    X, found Y") when the program no longer fits the schedule; lenient mode
    (``strict=False``) matches choices by label and, past the end of the tape, continues under
    the recorded seed (or FIFO with ``then="fifo"``). ``then`` also applies to strict mode:
    ``strict=True, then="fifo"`` replays the tape strictly, then goes on FIFO (see
    :mod:`simulator.strategies.replay`)."""
    strat = ReplayStrategy(schedule, strict=strict, then=then)
    r = run(main, strategy=strat, **_run_kwargs(schedule, run_kwargs))
    r.strategy = schedule.strategy
    return r


# --------------------------------------------------------------------------------------------
# shrink


@dataclass
class ShrinkResult:
    """A smaller failing schedule: ``before``/``after`` give ``{"deviations", "length"}``."""

    schedule: Schedule
    result: RunResult
    runs: int
    before: dict[str, int]
    after: dict[str, int]
    wall_s: float

    def summary(self) -> str:
        return (f"shrunk from {self.before['deviations']} deviations / {self.before['length']} "
                f"choices to {self.after['deviations']} / {self.after['length']} in {self.runs} "
                f"runs ({self.wall_s * 1000:.0f} ms)")


def shrink(
    main: Main,
    schedule: Schedule,
    *,
    is_failure: Predicate | None = None,
    max_runs: int = 50,
    **run_kwargs: Any,
) -> ShrinkResult:
    """Find a simpler schedule that still fails: fewer deviations from FIFO, then shorter.

    Candidates are replayed leniently (by label, FIFO after the tape), so removing one
    deviation re-anchors the later ones. Passes: drop all deviations (FIFO); drop each
    deviation in turn, keeping every removal that still fails; then, if more than one
    deviation is left, try every single-deviation schedule off the FIFO run. Each accepted
    candidate is replaced by the schedule its run actually recorded, trimmed of trailing FIFO
    choices. At most ``max_runs`` runs."""
    is_failure = is_failure or default_is_failure
    t0 = time.perf_counter()
    runs = 0
    before = schedule.size()

    def attempt(s: Schedule) -> RunResult | None:
        nonlocal runs
        runs += 1
        r = replay(main, s, strict=False, then="fifo", **run_kwargs)
        return r if is_failure(r) else None

    cur = schedule.trimmed()
    first = attempt(cur)
    best: RunResult
    if first is None:
        # The schedule does not fail when replayed leniently; try it untrimmed and strict.
        runs += 1
        r = replay(main, schedule, strict=False, **run_kwargs)
        if not is_failure(r):
            raise ValueError("shrink: the given schedule does not fail")
        best, cur = r, schedule
    else:
        best, cur = first, first.schedule.trimmed()

    def accept(r: RunResult) -> None:
        nonlocal best, cur
        best = r
        cur = r.schedule.trimmed()

    # Pass 0: FIFO.
    if cur.deviations and runs < max_runs:
        r0 = attempt(cur.replace(choices=[]))
        if r0 is not None:
            accept(r0)
    # Pass 1: remove deviations one at a time (last first), to a fixpoint.
    changed = True
    while changed and cur.deviations > 1 and runs < max_runs:
        changed = False
        positions = [k for k, c in enumerate(cur.choices) if c.pick]
        for k in reversed(positions):
            if runs >= max_runs or k >= len(cur.choices) or not cur.choices[k].pick:
                continue
            cand = list(cur.choices)
            cand[k] = Choice(0, cand[k].of, "")
            r1 = attempt(cur.replace(choices=cand))
            if r1 is not None and r1.schedule.deviations < cur.deviations:
                accept(r1)
                changed = True
    # Pass 2: single deviations off the FIFO run.
    if cur.deviations > 1 and runs < max_runs:
        fifo_run = run(main, strategy=Strategy(), **_run_kwargs(cur, run_kwargs))
        runs += 1
        fifo_choices = fifo_run.schedule.choices
        done = False
        for k, c in enumerate(fifo_choices):
            for alt in range(1, c.of):
                if runs >= max_runs:
                    done = True
                    break
                cand = [Choice(0, x.of, "") for x in fifo_choices[:k]] + [Choice(alt, c.of, "")]
                r2 = attempt(cur.replace(choices=cand))
                if r2 is not None and r2.schedule.deviations < cur.deviations:
                    accept(r2)
                    done = True
                    break
            if done:
                break
    # Shorter: trailing FIFO choices are implied.
    final = cur.trimmed()
    return ShrinkResult(
        schedule=final,
        result=best,
        runs=runs,
        before=before,
        after=final.size(),
        wall_s=time.perf_counter() - t0,
    )


# --------------------------------------------------------------------------------------------
# determinism check


@dataclass
class DeterminismReport:
    """``deterministic``: the runs agreed; ``diff``: where they first differ; ``traces``: the
    canonical trace JSON of each run; ``how``: ``"subprocess"`` (separate processes with
    different ``PYTHONHASHSEED``) or ``"in-process"``."""

    deterministic: bool
    diff: str | None
    traces: list[str]
    how: str

    def __bool__(self) -> bool:
        return self.deterministic


def _target_ref(target: Any) -> str | None:
    """``"module:qualname"`` or ``"pickle:<base64>"`` naming ``target`` for another process."""
    if isinstance(target, str):
        return target
    mod = getattr(target, "__module__", None)
    qual = getattr(target, "__qualname__", None)
    if mod and qual and mod != "__main__" and "<locals>" not in qual:
        return f"{mod}:{qual}"
    try:  # e.g. functools.partial of a module-level function
        data = pickle.dumps(target)
    except Exception:
        return None
    if b"__main__" in data:
        return None
    return "pickle:" + base64.b64encode(data).decode("ascii")


def resolve_target(ref: str) -> Main:
    """Import ``"module:qualname"`` (or unpickle ``"pickle:<base64>"``)."""
    import importlib

    if ref.startswith("pickle:"):
        return pickle.loads(base64.b64decode(ref[7:]))  # type: ignore[no-any-return,unused-ignore]
    mod_name, _, qual = ref.partition(":")
    obj: Any = importlib.import_module(mod_name)
    for part in qual.split("."):
        obj = getattr(obj, part)
    return obj  # type: ignore[no-any-return,unused-ignore]


def _diff_traces(a: str, b: str) -> str | None:
    if a == b:
        return None
    da, db = json.loads(a), json.loads(b)
    for key in ("outcome", "error"):
        if da.get(key) != db.get(key):
            return f"{key} differs: {da.get(key)!r} vs {db.get(key)!r}"
    ta, tb = da.get("timeline", []), db.get("timeline", [])
    for i, (x, y) in enumerate(zip(ta, tb, strict=False)):
        if x != y:
            return f"timeline[{i}] differs: {json.dumps(x)} vs {json.dumps(y)}"
    if len(ta) != len(tb):
        return f"timeline length differs: {len(ta)} vs {len(tb)}"
    if da.get("value") != db.get("value"):
        return f"value differs: {json.dumps(da.get('value'))} vs {json.dumps(db.get('value'))}"
    ca, cb = da["schedule"]["choices"], db["schedule"]["choices"]
    for i, (x, y) in enumerate(zip(ca, cb, strict=False)):
        if x != y:
            return f"schedule choice {i} differs: {x} vs {y}"
    if len(ca) != len(cb):
        return f"schedule length differs: {len(ca)} vs {len(cb)}"
    for key in da:
        if da.get(key) != db.get(key):
            return f"{key} differs"
    return "traces differ"


def check_determinism(
    target: Main | str,
    *,
    schedule: Schedule | None = None,
    strategy: str = "fifo",
    seed: int = 0,
    runs: int = 2,
    hash_seeds: tuple[int, ...] = (1, 2),
    subprocess_mode: bool | None = None,
    timeout: float = 60.0,
    **run_kwargs: Any,
) -> DeterminismReport:
    """Run the same program, seed and schedule several times and diff the traces (outcome,
    timeline of observable events, then schedule labels) — not merely their hashes.

    When ``target`` is importable (a ``"module:qualname"`` string or a module-level function),
    each run happens in a fresh interpreter with a different ``PYTHONHASHSEED`` (from
    ``hash_seeds``), which catches behaviour that depends on set/dict-of-str iteration order,
    ``id()``, or process state. Otherwise (or with ``subprocess_mode=False``) the runs happen in
    this process. ``strategy`` is a name (``fifo``/``random``/``pct``) when no schedule is given.
    """
    ref = _target_ref(target)
    use_sub = subprocess_mode if subprocess_mode is not None else ref is not None
    traces: list[str] = []
    if use_sub:
        if ref is None:
            raise ValueError("check_determinism: subprocess mode needs an importable target")
        payload = json.dumps({
            "target": ref,
            "schedule": schedule.to_dict() if schedule is not None else None,
            "strategy": strategy,
            "seed": seed,
            "run_kwargs": run_kwargs,
        })
        env_path = os.pathsep.join(p for p in sys.path if p)
        for i in range(max(runs, len(hash_seeds))):
            env = dict(os.environ)
            env["PYTHONHASHSEED"] = str(hash_seeds[i % len(hash_seeds)])
            env["PYTHONPATH"] = env_path
            proc = subprocess.run(
                [sys.executable, "-m", "simulator._detworker"],
                input=payload, capture_output=True, text=True, env=env, timeout=timeout,
            )
            if proc.returncode != 0:
                raise RuntimeError(f"determinism worker failed: {proc.stderr.strip()[-2000:]}")
            traces.append(proc.stdout.strip())
        how = "subprocess"
    else:
        main = resolve_target(target) if isinstance(target, str) else target
        for _ in range(runs):
            traces.append(_one_trace(main, schedule, strategy, seed, run_kwargs))
        how = "in-process"
    for t in traces[1:]:
        d = _diff_traces(traces[0], t)
        if d is not None:
            return DeterminismReport(False, d, traces, how)
    return DeterminismReport(True, None, traces, how)


def _one_trace(main: Main, schedule: Schedule | None, strategy: str, seed: int,
               run_kwargs: dict[str, Any]) -> str:
    if schedule is not None:
        r = replay(main, schedule, strict=False, **run_kwargs)
    else:
        r = run(main, strategy=make_strategy(strategy), seed=seed, **run_kwargs)
    return r.trace_json()
