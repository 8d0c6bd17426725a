"""The one engine: run a scenario on an implementation, explore its schedules, shrink a failure,
replay a recorded schedule.

Every run is a pure function of (scenario, implementation, strategy name, seed): the strategies
are built fresh per run (``random`` and ``pct``, pct's horizon fixed up front from a probe run),
so a failure found by a worker process is re-run identically here, and the same seed gives the
same race cassette whatever ``workers`` says. The search itself is the simulator's
(``simulator.explore``); the verdict of a run is ``checks.judge`` over its trace, run once.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any

import simulator
from conformance.adapter import Implementation
from simulator.errors import ExploreError
from simulator.result import RunResult
from simulator.schedule import Schedule
from simulator.strategies import DFSStrategy, DPORStrategy, PCTStrategy, RandomStrategy
from simulator.strategies.base import Strategy

from .checks import ORACLES, PLAIN_ORACLES, LoopCheck, Verdict, VerdictMemo, compile_check, judge
from .model import Scenario
from .tape import Recording, Tape
from .trace import Trace
from .world import ScenarioSetupError, World

STRATEGIES = ("random", "pct", "dfs", "dpor", "hypothesis")
RUN_STRATEGIES = ("fifo", "random", "pct", "dfs", "dpor")
SYSTEMATIC = ("dfs", "dpor", "hypothesis")
"""Strategies that search one tree (or one example database): one process, one seed."""
PCT_DEPTH = 2
Progress = Callable[[int], None]

__all__ = [
    "Exploration",
    "ExploreError",
    "RunReport",
    "Shrunk",
    "explore",
    "judge_run",
    "main_of",
    "make_strategy",
    "probe",
    "run_one",
    "shrink",
]


@dataclass
class RunReport:
    """One run: its trace, the schedule's deviations from FIFO, and its verdict."""

    scenario: Scenario
    trace: Trace
    deviations: list[dict[str, Any]]
    verdict: Verdict

    @property
    def ok(self) -> bool:
        return self.trace.ok

    @property
    def violations(self) -> list[tuple[str, Any]]:
        """``(check name, violation)`` of every failed check (diagrams read this)."""
        return [(f.check, f.violation) for f in self.verdict.findings]

    @property
    def failure_key(self) -> tuple[str, ...]:
        """What failed, for "is it the same failure" while shrinking."""
        return failure_key(self.trace)


def failure_key(trace: Trace) -> tuple[str, ...]:
    if trace.failures:
        return tuple(sorted({f["check"] for f in trace.failures}))
    return (f"outcome:{trace.outcome}",)


def checks_of(scenario: Scenario) -> list[LoopCheck]:
    """The oracles (with the plain-world ones when no Python body could rewrite messages or
    requests), then the scenario's own checks."""
    # Compiled once per scenario object (its checks are a tuple, its body fixed; a compiled check
    # is a pure function of the trace): every run of a search judges with the same list.
    cached = scenario.__dict__.get("_compiled_checks")
    if cached is None or cached[0] is not scenario.checks or cached[1] is not scenario.body:
        plain = PLAIN_ORACLES if scenario.body is None else ()
        cached = (scenario.checks, scenario.body, (*ORACLES, *plain, *(compile_check(c) for c in scenario.checks)))
        object.__setattr__(scenario, "_compiled_checks", cached)
    return list(cached[2])


def main_of(scenario: Scenario, impl: Implementation) -> Callable[[], Coroutine[Any, Any, None]]:
    """The zero-argument ``main`` of one run of ``scenario`` on ``impl`` (for ``simulator.run``)."""

    async def main() -> None:
        await World(scenario, impl).run()

    main.__qualname__ = f"scenario:{scenario.name}"
    return main


WALL_LIMIT = 5.0
"""Default wall-clock seconds one run of a scenario may take (``--timeout``). A run's waits are all
virtual, so it takes milliseconds; one that takes seconds spins (``simulator.supervise``)."""

_wall_limit: float | None = WALL_LIMIT


def set_wall_limit(seconds: float | None) -> None:
    """The wall-clock limit of every run from now on, in this process and the workers it forks
    (``None`` or 0: none). ``loopkit run/explore/replay/hunt --timeout`` set it."""
    global _wall_limit
    _wall_limit = seconds or None


def spun(result: RunResult | None) -> bool:
    """Whether a run was stopped by its wall-clock limit (the implementation never yielded)."""
    return result is not None and result.budget_reason == "wall"


def run_kwargs(scenario: Scenario) -> dict[str, Any]:
    """The ``simulator.run`` limits of one run of ``scenario`` (its own, and the wall-clock limit)."""
    return {"max_steps": scenario.limits.max_steps, "max_time": scenario.limits.max_time, "scenario": scenario.name,
            "wall_limit": _wall_limit}


def judge_run(scenario: Scenario, result: RunResult, checks: Sequence[LoopCheck] | None = None,
              memo: VerdictMemo | None = None) -> tuple[Trace, Verdict]:
    """The trace of a finished run and its verdict (the failures are written into the trace);
    ``memo``: a search's memory of the timelines it judged (:class:`~.checks.VerdictMemo`)."""
    if isinstance(result.error, ScenarioSetupError):
        raise result.error
    trace = Trace.of(scenario.name, result)
    verdict = judge(trace, checks if checks is not None else checks_of(scenario), memo)
    trace.failures = [f.to_dict() for f in verdict.findings]
    return trace, verdict


def run_one(
    scenario: Scenario,
    impl: Implementation,
    strategy: Strategy | None = None,
    seed: int = 0,
    *,
    schedule: Schedule | None = None,
    memo: VerdictMemo | None = None,
) -> RunReport:
    """One run under ``strategy`` (``None``: FIFO) and ``seed``, or under a recorded ``schedule``
    (strict while it lasts, then FIFO; raises ``Divergence``). A search of many schedules of one
    scenario passes one ``memo`` to all of its runs."""
    kwargs = run_kwargs(scenario)
    if schedule is not None:
        strategy = Tape(schedule)
        seed = schedule.seed
        kwargs.update(mode=schedule.mode, vary_timers=schedule.vary_timers, timer_window=schedule.timer_window)
    rec = Recording(strategy)
    result = simulator.run(main_of(scenario, impl), strategy=rec, seed=seed, **kwargs)
    if schedule is not None:
        result.strategy = schedule.strategy
    trace, verdict = judge_run(scenario, result, memo=memo)
    return RunReport(scenario, trace, list(rec.deviations), verdict)


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
    if name == "dpor":
        return DPORStrategy()
    raise ValueError(f"unknown strategy {name!r} (choose from {', '.join(RUN_STRATEGIES)})")


def probe(scenario: Scenario, impl: Implementation) -> dict[str, int]:
    """Choice points and tasks of the FIFO run (fixes pct's horizon; sizes its guarantee)."""
    rec = Recording(Strategy())  # the base strategy always picks 0 but records the choices
    result = simulator.run(main_of(scenario, impl), strategy=rec, seed=0, **run_kwargs(scenario))
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
    classes: int | None = None
    """For a systematic search: the classes of interleavings it explored."""
    wall_s: float = 0.0
    pct_horizon: int | None = None
    guarantee: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)
    interrupted: bool = False
    """Stopped early by ``should_stop`` or a Ctrl-C: ``runs`` and ``failure`` are what it had."""


class _Fresh(Strategy):
    """A strategy built anew for every run (so each run depends on its seed alone)."""

    def __init__(self, name: str, horizon: int | None) -> None:
        self.name = name
        self._horizon = horizon
        self._inner: Strategy | None = None

    def begin(self, loop: Any, seed: int) -> None:
        self.loop = loop
        self._inner = make_strategy(self.name, pct_horizon=self._horizon)
        assert self._inner is not None
        self._inner.begin(loop, seed)

    def choose_fn(self) -> Callable[[int], int] | None:
        assert self._inner is not None
        return self._inner.choose_fn()

    def end(self, outcome: str) -> None:
        if self._inner is not None:
            self._inner.end(outcome)
        self.loop = None


def explore(
    scenario: Scenario,
    impl: Implementation,
    *,
    strategy: str = "random",
    budget: int = 200,
    seed: int = 0,
    workers: int = 1,
    progress: Progress | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> Exploration:
    """Run up to ``budget`` schedules; stop at the first failing one (see module docstring), or
    when ``should_stop()`` holds (``interrupted``)."""
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r} (choose from {', '.join(STRATEGIES)})")
    out = Exploration(strategy, budget, seed, workers)
    t0 = time.perf_counter()
    if strategy in SYSTEMATIC and workers > 1:
        out.notes.append(f"{strategy} searches one tree: ran on 1 process (--workers ignored)")
        out.workers = 1
    shape = probe(scenario, impl)  # a setup error surfaces here, before any search or fork
    if strategy == "pct":
        out.pct_horizon = max(16, shape["choice_points"])
    searched: str | Strategy = strategy
    if strategy in ("random", "pct"):
        searched = _Fresh(strategy, out.pct_horizon)
    elif strategy in ("dfs", "dpor"):
        searched = make_strategy(strategy) or DFSStrategy()
    checks = checks_of(scenario)
    memo = VerdictMemo()

    def failed(result: RunResult) -> bool:
        trace, _ = judge_run(scenario, result, checks, memo)
        return not trace.ok

    found = simulator.explore(
        main_of(scenario, impl), strategy=searched, budget=budget, seed=seed, is_failure=failed,
        track=False, workers=out.workers, progress=progress, should_stop=should_stop, **run_kwargs(scenario),
    )
    out.runs = found.runs
    out.interrupted = found.interrupted
    out.exhausted = found.exhausted
    out.classes = found.classes
    if found.first_failure is not None:
        out.found_at = found.first_failure_run
        out.failing_seed = seed if strategy in SYSTEMATIC else seed + (found.first_failure_run or 1) - 1
        # The failing run again, recorded (deviations for the diagram) under its own schedule.
        out.failure = run_one(scenario, impl, schedule=found.first_failure.schedule)
        if out.failure.ok:  # pragma: no cover - a run is a pure function of its schedule
            raise ExploreError(f"the failing schedule of seed {out.failing_seed} does not fail when replayed")
    if strategy == "pct":
        out.guarantee = pct_guarantee(out.runs, shape["tasks"], out.pct_horizon or shape["choice_points"])
    out.wall_s = time.perf_counter() - t0
    return out


# --------------------------------------------------------------------------- shrinking


@dataclass
class Shrunk:
    """The shrunk failing schedule (tape: replay it strictly, then FIFO) and its run."""

    schedule: Schedule
    report: RunReport
    before: dict[str, int]
    after: dict[str, int]
    runs: int


def shrink(scenario: Scenario, impl: Implementation, failing: RunReport, *, max_runs: int = 60) -> Shrunk:
    """Fewer deviations from FIFO, then a shorter tape, keeping the same failed checks."""
    original = failing.trace.schedule_object()
    if spun(failing.trace.result):
        return Shrunk(original, failing, original.size(), original.size(), 0)  # every try would spin again
    key = set(failing.failure_key)
    checks = checks_of(scenario)
    memo = VerdictMemo()

    def is_failure(result: RunResult) -> bool:
        trace, _ = judge_run(scenario, result, checks, memo)
        return not trace.ok and bool(set(failure_key(trace)) & key)

    try:
        found = simulator.shrink(main_of(scenario, impl), original, is_failure=is_failure, max_runs=max_runs,
                                 **run_kwargs(scenario))
        candidate, runs = found.schedule, found.runs
    except ValueError:
        candidate, runs = original, 0
    # The tape must reproduce the failure when replayed strictly then FIFO; else keep it all.
    for tape in (candidate, original):
        try:
            rep = run_one(scenario, impl, schedule=tape)
        except simulator.Divergence:
            continue
        if not rep.ok and set(rep.failure_key) & key:
            return Shrunk(tape, rep, original.size(), tape.size(), runs)
    return Shrunk(original, failing, original.size(), original.size(), runs)
