"""Running a loop scenario: one run, exploration (random / pct / dfs / hypothesis, on one or
several processes), shrinking, and the replay of a recorded schedule.

Every run is a pure function of (scenario, implementation, strategy name, seed) for ``random``
and ``pct`` (a fresh strategy object per run; pct's horizon is fixed up front from a probe run),
so a failure found by a worker process is re-run identically here, and the same seed gives the
same race cassette whatever ``--workers`` says. ``dfs`` and ``hypothesis`` search one tree /
one example database and run on one process.
"""

from __future__ import annotations

import multiprocessing as mp
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import simulator
from conformance.adapter import Implementation
from simulator.explore import shrink as simulator_shrink
from simulator.result import RunResult
from simulator.scenario import Scenario, Trace
from simulator.schedule import Schedule
from simulator.strategies import DFSStrategy, PCTStrategy, RandomStrategy
from simulator.strategies.base import Strategy

from .checks import Violation, evaluate_all
from .model import LoopScenario
from .tape import Recording, Tape
from .world import ScenarioSetupError

STRATEGIES = ("random", "pct", "dfs", "hypothesis")
RUN_STRATEGIES = ("fifo", "random", "pct", "dfs")
PCT_DEPTH = 2
Progress = Callable[[int], None]


class ExploreError(Exception):
    """Exploration could not go on (a worker process failed); one-line message."""


@dataclass
class RunReport:
    """One run: its trace, the schedule's deviations from FIFO, and the failed checks (with the
    timeline index where each shows)."""

    scenario: LoopScenario
    trace: Trace
    deviations: list[dict[str, Any]]
    violations: list[tuple[str, Violation]]

    @property
    def ok(self) -> bool:
        return self.trace.ok

    @property
    def failure_key(self) -> tuple[str, ...]:
        """What failed, for "is it the same failure" while shrinking."""
        if self.trace.failures:
            return tuple(sorted({f["check"] for f in self.trace.failures}))
        return (f"outcome:{self.trace.outcome}",)


def _bound(scenario: LoopScenario, impl: Implementation) -> Scenario:
    return scenario.bind(impl)


def _finish(scenario: LoopScenario, bound: Scenario, result: RunResult, rec: Recording) -> RunReport:
    if isinstance(result.error, ScenarioSetupError):
        raise result.error
    trace = bound.trace_of(result)
    return RunReport(scenario, trace, list(rec.deviations), evaluate_all(trace, scenario.all_checks))


def run_one(
    scenario: LoopScenario,
    impl: Implementation,
    strategy: Strategy | None = None,
    seed: int = 0,
    *,
    schedule: Schedule | None = None,
) -> RunReport:
    """One run under ``strategy`` (``None``: FIFO) and ``seed``, or under a recorded ``schedule``
    (strict while it lasts, then FIFO; raises ``Divergence``)."""
    bound = _bound(scenario, impl)
    kwargs: dict[str, Any] = {"max_steps": scenario.max_steps, "max_time": scenario.max_time}
    if schedule is not None:
        strategy = Tape(schedule)
        seed = schedule.seed
        kwargs.update(mode=schedule.mode, vary_timers=schedule.vary_timers, timer_window=schedule.timer_window)
    rec = Recording(strategy)
    main = bound.main(seed=seed, strategy=rec.name)
    result = simulator.run(main, strategy=rec, seed=seed, scenario=scenario.name, **kwargs)
    return _finish(scenario, bound, result, rec)


def make_strategy(name: str, *, pct_horizon: int | None = None, pct_depth: int = PCT_DEPTH) -> Strategy | None:
    """A fresh strategy object for one run (``fifo`` is ``None``)."""
    if name == "fifo":
        return None
    if name == "random":
        return RandomStrategy()
    if name == "pct":
        return PCTStrategy(depth=pct_depth, horizon=pct_horizon)
    if name == "dfs":
        return DFSStrategy()
    raise ValueError(f"unknown strategy {name!r} (choose from {', '.join(RUN_STRATEGIES)})")


def probe(scenario: LoopScenario, impl: Implementation) -> dict[str, int]:
    """Choice points and tasks of the FIFO run (fixes pct's horizon; sizes its guarantee)."""
    bound = _bound(scenario, impl)
    rec = Recording(Strategy())  # the base strategy always picks 0 but records the choices
    main = bound.main(seed=0, strategy="fifo")
    result = simulator.run(main, strategy=rec, seed=0, scenario=scenario.name,
                           max_steps=scenario.max_steps, max_time=scenario.max_time)
    if isinstance(result.error, ScenarioSetupError):
        raise result.error
    labels = [c.label for c in result.schedule.choices]
    tasks = {lbl.rsplit(":", 1)[0] for lbl in labels if not lbl.startswith(("timer:", "cb:"))}
    return {"choice_points": len(labels), "tasks": max(len(tasks), 1)}


def pct_guarantee(runs: int, tasks: int, choice_points: int, depth: int = PCT_DEPTH) -> dict[str, Any]:
    """PCT's bound (Burckhardt et al. 2010): one run finds a given bug of depth ``d`` with
    probability >= 1 / (n * k^(d-1)); ``runs`` independent runs with 1 - (1 - p)^runs."""
    k = max(choice_points, 1)
    per_run = 1.0 / (tasks * k ** (depth - 1))
    overall = 1.0 - (1.0 - per_run) ** runs
    return {"depth": depth, "tasks": tasks, "choice_points": k, "per_run": per_run,
            "runs": runs, "probability": overall}


# --------------------------------------------------------------------------- exploring


@dataclass
class Exploration:
    """What ``explore`` did: how many schedules ran and the first failure (lowest seed)."""

    strategy: str
    budget: int
    seed: int
    workers: int
    runs: int = 0
    failing_seed: int | None = None
    found_at: int | None = None
    failure: RunReport | None = None
    exhausted: bool = False
    wall_s: float = 0.0
    pct_horizon: int | None = None
    guarantee: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)


def explore(
    scenario: LoopScenario,
    impl: Implementation,
    *,
    strategy: str = "random",
    budget: int = 200,
    seed: int = 0,
    workers: int = 1,
    progress: Progress | None = None,
) -> Exploration:
    """Run up to ``budget`` schedules; stop at the first failing one (see module docstring)."""
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r} (choose from {', '.join(STRATEGIES)})")
    out = Exploration(strategy, budget, seed, workers)
    tick = progress or (lambda n: None)
    t0 = time.perf_counter()
    if strategy in ("dfs", "hypothesis") and workers > 1:
        out.notes.append(f"{strategy} searches one tree: ran on 1 process (--workers ignored)")
        out.workers = 1
    if strategy == "pct":
        shape = probe(scenario, impl)
        out.pct_horizon = max(16, shape["choice_points"])
    if strategy == "dfs":
        _explore_dfs(scenario, impl, out, tick)
    elif strategy == "hypothesis":
        _explore_hypothesis(scenario, impl, out, tick)
    elif out.workers > 1:
        _explore_parallel(scenario, impl, out, tick)
    else:
        for i in range(budget):
            rep = run_one(scenario, impl, make_strategy(strategy, pct_horizon=out.pct_horizon), seed + i)
            out.runs += 1
            tick(1)
            if not rep.ok:
                out.failing_seed, out.found_at, out.failure = seed + i, i + 1, rep
                break
    if out.failing_seed is not None and out.failure is None:
        # Found in a worker process: re-run the same (strategy, seed) here.
        out.failure = run_one(scenario, impl, make_strategy(strategy, pct_horizon=out.pct_horizon), out.failing_seed)
    if strategy == "pct":
        shape = probe(scenario, impl)
        out.guarantee = pct_guarantee(out.runs, shape["tasks"], out.pct_horizon or shape["choice_points"])
    out.wall_s = time.perf_counter() - t0
    return out


def _explore_dfs(scenario: LoopScenario, impl: Implementation, out: Exploration, tick: Progress) -> None:
    dfs = DFSStrategy()
    for i in range(out.budget):
        if dfs.exhausted:
            out.exhausted = True
            break
        rep = run_one(scenario, impl, dfs, out.seed)  # one program: the same seed every run
        out.runs += 1
        tick(1)
        if not rep.ok:
            out.failing_seed, out.found_at, out.failure = out.seed, i + 1, rep
            return
    out.exhausted = out.exhausted or dfs.exhausted


def _explore_hypothesis(scenario: LoopScenario, impl: Implementation, out: Exploration, tick: Progress) -> None:
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as hseed
    from hypothesis import strategies as st

    from simulator.strategies.hypothesis import HypothesisStrategy

    failing: list[tuple[int, RunReport]] = []

    # No hypothesis shrink phase: the kit's own shrink minimises the schedule afterwards, and
    # the budget then counts every run.
    @settings(max_examples=out.budget, database=None, deadline=None, derandomize=False,
              suppress_health_check=list(HealthCheck), report_multiple_bugs=False,
              phases=(Phase.explicit, Phase.generate))
    @hseed(out.seed)
    @given(st.data())
    def search(data: Any) -> None:
        rep = run_one(scenario, impl, HypothesisStrategy(data), out.seed)
        out.runs += 1
        tick(1)
        if not rep.ok:
            failing.append((out.runs, rep))
            raise AssertionError(rep.trace.summary())

    try:
        search()
    except AssertionError:
        pass
    if failing:
        out.found_at = failing[0][0]
        out.failing_seed = out.seed
        out.failure = failing[0][1]


_JOB: tuple[LoopScenario, Implementation, Exploration] | None = None


def _worker(index: int, count: int, done: Any, stop_at: Any, lock: Any, errors: Any) -> None:
    assert _JOB is not None
    scenario, impl, out = _JOB
    for i in range(index, out.budget, count):
        s = out.seed + i
        if s > stop_at.value:
            break  # a lower seed already failed: nothing here can be the first failure
        try:
            rep = run_one(scenario, impl, make_strategy(out.strategy, pct_horizon=out.pct_horizon), s)
        except Exception as exc:  # reported by the parent, not as a child's traceback
            errors.put(f"seed {s}: {type(exc).__name__}: {exc}")
            with lock:
                stop_at.value = -1
            return
        with done.get_lock():
            done.value += 1
        if not rep.ok:
            with lock:
                if s < stop_at.value:
                    stop_at.value = s
            break


def _explore_parallel(scenario: LoopScenario, impl: Implementation, out: Exploration, tick: Progress) -> None:
    """Seeds interleaved across forked workers (worker w runs seed + w, seed + w + N, ...). A
    failure at seed s stops the seeds above s but not those below, so the reported failure is
    the lowest failing seed: the one a single process finds."""
    global _JOB
    ctx = mp.get_context("fork")
    done = ctx.Value("q", 0)
    stop_at = ctx.Value("q", 2**62)
    lock = ctx.Lock()
    errors = ctx.SimpleQueue()
    probe(scenario, impl)  # a setup error surfaces here, in this process, before any fork
    _JOB = (scenario, impl, out)
    procs = [ctx.Process(target=_worker, args=(w, out.workers, done, stop_at, lock, errors))
             for w in range(out.workers)]
    try:
        for p in procs:
            p.start()
        seen = 0
        while any(p.is_alive() for p in procs):
            time.sleep(0.05)
            now = done.value
            if now > seen:
                tick(now - seen)
                seen = now
        for p in procs:
            p.join()
        if done.value > seen:
            tick(done.value - seen)
    finally:
        _JOB = None
        for p in procs:
            if p.is_alive():
                p.terminate()
    out.runs = int(done.value)
    if not errors.empty():
        raise ExploreError(f"a worker process failed: {errors.get()}")
    if stop_at.value < 2**62:
        out.failing_seed = int(stop_at.value)
        out.found_at = out.failing_seed - out.seed + 1


# --------------------------------------------------------------------------- shrinking


@dataclass
class Shrunk:
    """The shrunk failing schedule (tape: replay it strictly, then FIFO) and its run."""

    schedule: Schedule
    report: RunReport
    before: dict[str, int]
    after: dict[str, int]
    runs: int


def shrink(scenario: LoopScenario, impl: Implementation, failing: RunReport, *, max_runs: int = 60) -> Shrunk:
    """Fewer deviations from FIFO, then a shorter tape, keeping the same failed checks."""
    original = failing.trace.schedule_object()
    key = failing.failure_key
    bound = _bound(scenario, impl)

    def is_failure(result: RunResult) -> bool:
        trace = bound.trace_of(result)
        if trace.ok:
            return False
        got = {f["check"] for f in trace.failures} or {f"outcome:{trace.outcome}"}
        return bool(got & set(key))

    try:
        found = simulator_shrink(bound.main(), original, is_failure=is_failure, max_runs=max_runs,
                                 max_steps=scenario.max_steps, max_time=scenario.max_time)
        candidate, runs = found.schedule, found.runs
    except ValueError:
        candidate, runs = original, 0
    # The tape must reproduce the failure when replayed strictly then FIFO; else keep it all.
    for tape in (candidate, original):
        try:
            rep = run_one(scenario, impl, schedule=tape)
        except simulator.Divergence:
            continue
        if not rep.ok and set(rep.failure_key) & set(key):
            return Shrunk(tape, rep, original.size(), tape.size(), runs)
    return Shrunk(original, failing, original.size(), original.size(), runs)
