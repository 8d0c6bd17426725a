"""One adapter per runtime: plain asyncio, loopkit, simloom, simloop, seedloop, looptime,
detangle and frontrun.

Each adapter drives its runtime through that runtime's own public campaign APIs (its
explorer, its systematic search, its shrinker, its determinism check) the way a user would,
with default settings. The figures the benchmark prints come from what the *programs*
observed (``_programs.COLLECTOR``), not from each runtime's own counters, so every row
compares like with like.

An adapter method returns ``None`` when the runtime has no such feature; the table prints
"n/a" for it.
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib.util
import json
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any

import _programs
from _programs import COLLECTOR, Program

# A program scale for plain asyncio and looptime-free baselines: every virtual delay is
# multiplied by this so that timers remain real timers (heap entries, select timeouts)
# while the real waiting they cost is negligible (an hour becomes 0.36 ms).
REAL_SCALE = 1e-7


@dataclass
class ShrinkFigures:
    runs: int
    seconds: float
    deviations_before: int
    deviations_after: int


@dataclass
class SystematicFigures:
    schedules: int
    exhaustive: bool
    classes: int | None = None  # equivalence classes explored (partial-order reduction)


@dataclass
class FirstFailure:
    """One campaign on a failing program: schedules run up to and including the first failing
    one (None: not found within the budget) and the wall time until it ended."""

    schedules: int | None
    seconds: float | None


def installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


class Runtime:
    """The interface peers.py drives; every method may return None (feature absent)."""

    name = "?"
    module = "?"
    # Exploration strategies, as this runtime names them ("fifo" for runtimes that never
    # reorder: they are listed so the table shows that they cannot find the staggered race).
    strategies: tuple[str, ...] = ()
    # The scale its virtual-time programs run at (1.0: virtual time; REAL_SCALE: real time).
    scale = 1.0
    # Whether it runs a whole program (rows 3, 4, 7, 8); frontrun only interleaves workers.
    runs_programs = True

    def available(self) -> bool:
        return installed(self.module)

    def version(self) -> str:
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version(self.module if self.module != "simulator" else "loopkit")
        except PackageNotFoundError:
            return "?"

    def campaign(self, program: Program, runs: int, strategy: str, processes: int = 1) -> int | None:
        """Run ``runs`` schedules of ``program``; return how many ran (COLLECTOR is filled
        in the parent process when processes == 1)."""
        return None

    def run_once(self, program: Program) -> Any:
        """One run under the runtime's default mode (the overhead and scale rows)."""
        raise NotImplementedError

    #: the systematic searches this runtime offers (rows of section 5), by name
    systematic_variants: tuple[str, ...] = ("systematic",)
    #: the strategies row 9 (the agent race) runs
    race_strategies: tuple[str, ...] = ()

    def systematic(self, program: Program, budget: int, variant: str = "systematic") -> SystematicFigures | None:
        return None

    def first_failure(self, program: Program, strategy: str, campaign: int, budget: int) -> FirstFailure | None:
        """Run one campaign (seeds derived from ``campaign``) until the first failure."""
        return None

    def shrink(self, program: Program) -> ShrinkFigures | None:
        return None

    def hang_probe(self, program: Program) -> str:
        """Run a hanging program in this (sub)process; return what the runtime reported."""
        try:
            self.run_once(program)
        except BaseException as exc:
            return f"{type(exc).__name__}: {exc}"
        return "completed"

    def trace_fingerprint(self, program: Program) -> tuple[Any, ...] | None:
        """(the runtime's own trace digest, the program's observable result[, whether the
        runtime's own determinism check flagged the program]) of one run: compared across
        processes with different PYTHONHASHSEED."""
        return None


# -- plain asyncio: the yardstick ------------------------------------------------------


class PlainAsyncio(Runtime):
    name = "asyncio.run"
    module = "asyncio"
    strategies = ("fifo",)
    scale = REAL_SCALE

    def version(self) -> str:
        import platform

        return platform.python_version()

    def run_once(self, program: Program) -> Any:
        return asyncio.run(program())

    def campaign(self, program: Program, runs: int, strategy: str, processes: int = 1) -> int | None:
        if processes > 1:
            return _fan_out(_asyncio_chunk, program, runs, processes)
        for _ in range(runs):
            try:
                asyncio.run(program())
            except _programs.LostUpdate:
                pass
        return runs

    def hang_probe(self, program: Program) -> str:
        return super().hang_probe(program)


def _asyncio_chunk(program: Program, runs: int) -> int:
    PlainAsyncio().campaign(program, runs, "fifo")
    return runs


def _fan_out(chunk: Callable[[Program, int], int], program: Program, runs: int, processes: int) -> int:
    # A fixed split of the budget over a fresh pool; the pool start-up is part of the
    # measured time on purpose (the peers' own multi-process explorers pay it too).
    share = [runs // processes + (1 if i < runs % processes else 0) for i in range(processes)]
    with ProcessPoolExecutor(max_workers=processes) as pool:
        return sum(pool.map(chunk, [program] * processes, share))


# -- simloom ---------------------------------------------------------------------------


class Simloom(Runtime):
    name = "simloom"
    module = "simloom"
    strategies = ("random", "pct")
    race_strategies = ("random", "pct")

    def first_failure(self, program: Program, strategy: str, campaign: int, budget: int) -> FirstFailure | None:
        import simloom

        COLLECTOR.clear()
        start = time.perf_counter()
        found = simloom.explore(program, runs=budget, scheduler=self._spec(strategy), start_seed=campaign * 1000)
        return _from_collector(start, found.first_failure is not None)

    def _spec(self, strategy: str) -> str:
        # pct:auto measures the program's step count in a probe run and sizes the horizon
        # from it: simloom's own recommended way to make PCT fire on short programs.
        return {"random": "random", "pct": "pct:auto"}[strategy]

    def campaign(self, program: Program, runs: int, strategy: str, processes: int = 1) -> int | None:
        import simloom

        spec = self._spec(strategy)
        if processes > 1 and spec.startswith("pct:auto"):
            spec = str(simloom._run.resolve_auto_horizon(program, spec, seed=0))
            COLLECTOR.clear()
        result = simloom.explore(program, runs=runs, stop_on_failure=False, scheduler=spec, processes=processes)
        if spec.startswith("pct:auto") and processes == 1:
            COLLECTOR.drop_first()  # the horizon probe run
        return result.runs

    def run_once(self, program: Program) -> Any:
        import simloom

        return simloom.run(program, seed=0).value

    def systematic(self, program: Program, budget: int, variant: str = "systematic") -> SystematicFigures | None:
        import simloom

        # Delay bound 3: the figure the issue quotes (417 schedules for the 2-task program).
        result = simloom.explore_systematic(program, max_delays=3, max_schedules=budget, stop_on_failure=False)
        return SystematicFigures(result.schedules, result.exhaustive)

    def shrink(self, program: Program) -> ShrinkFigures | None:
        import simloom

        found = simloom.explore(program, runs=1000, scheduler="random")
        if found.first_failure is None:
            return None
        before = sum(1 for d in found.first_failure.tape if d.value)
        start = time.perf_counter()
        result = simloom.shrink(program, found.first_failure)
        return ShrinkFigures(result.runs_used, time.perf_counter() - start, before, result.deviations)

    def hang_probe(self, program: Program) -> str:
        import simloom

        result = simloom.run(program, seed=0, raise_on_error=False)
        if result.error is None:
            return "completed"
        return f"{type(result.error).__name__}: {result.error}"

    def trace_fingerprint(self, program: Program) -> tuple[Any, ...] | None:
        import simloom

        # check_determinism=True is simloom's run-twice check (in one process); the
        # cross-process comparison is of the universe digest it prints for a seed.
        result = simloom.run(program, seed=0, check_determinism=True, raise_on_error=False)
        return result.digest, result.value


# -- simloop ---------------------------------------------------------------------------


class Simloop(Runtime):
    name = "simloop"
    module = "simloop"
    strategies = ("random", "pct")

    def campaign(self, program: Program, runs: int, strategy: str, processes: int = 1) -> int | None:
        import simloop

        if strategy == "pct" and processes > 1:
            return None  # simloop refuses policy="pct" with jobs > 1
        if strategy == "pct":
            # Seed 0 is simloop's calibration seed; starting at 1 makes the horizon
            # measurement the one extra (first) run, which is dropped.
            simloop.explore(program, range(1, runs + 1), policy="pct", jobs=1, trace_tail=0)
            COLLECTOR.drop_first()
            return runs
        # simloop.explore stops at the first failing seed; the campaign programs never
        # raise (they record the lost update instead), so it runs the whole budget.
        simloop.explore(program, range(runs), jobs=processes, trace_tail=0)
        return runs

    def run_once(self, program: Program) -> Any:
        from simloop import SimLoop
        from simloop._run import finish

        loop = SimLoop(0)
        try:
            return loop.run_until_complete(program())
        finally:
            finish(loop)

    def shrink(self, program: Program) -> ShrinkFigures | None:
        from simloop import SimLoop
        from simloop._run import finish, run_once
        from simloop._shrink import shrink_schedule

        # The same path as simloop.explore(shrink=True): find the failing seed, take its
        # recorded choices, minimise them. Done by hand only to time the shrink alone.
        for seed in range(1000):
            loop = SimLoop(seed)
            failure = run_once(loop, program)
            choices = loop._choices
            finish(loop)
            if failure is not None:
                break
        else:
            return None
        before = sum(1 for c in choices if c)
        start = time.perf_counter()
        result = shrink_schedule(program, seed, choices, failure)
        seconds = time.perf_counter() - start
        if result is None:
            return None
        return ShrinkFigures(result.oracle_runs, seconds, before, len(result.kept))

    def trace_fingerprint(self, program: Program) -> tuple[Any, ...] | None:
        from simloop import SimLoop
        from simloop._run import finish

        loop = SimLoop(0)
        try:
            value = loop.run_until_complete(program())
            return loop.trace_hash(), value
        finally:
            finish(loop)


# -- seedloop ----------------------------------------------------------------------------


class Seedloop(Runtime):
    name = "seedloop"
    module = "seedloop"
    # seedloop's seed drives entropy and simulated-network timing, never callback order
    # (faithful FIFO by design): a seed sweep is the same schedule every time.
    strategies = ("seeds",)

    @staticmethod
    def _scenario(program: Program) -> Callable[[Any], Any]:
        async def scenario(world: Any) -> Any:
            return await program()

        return scenario

    def campaign(self, program: Program, runs: int, strategy: str, processes: int = 1) -> int | None:
        import seedloop

        if processes > 1:
            return None  # no multi-process sweep
        seedloop.check(self._scenario(program), seeds=runs, on_failure="return")
        return runs

    def run_once(self, program: Program) -> Any:
        import seedloop

        seedloop.replay(self._scenario(program), seed=0)

    def trace_fingerprint(self, program: Program) -> tuple[Any, ...] | None:
        from seedloop._run import _run_one

        timeline = _run_one(self._scenario(program), 0)
        digest = hashlib.sha256(json.dumps([repr(e) for e in timeline]).encode()).hexdigest()
        return digest, list(_programs.SET_OUTPUT)


# -- looptime ----------------------------------------------------------------------------


class Looptime(Runtime):
    name = "looptime"
    module = "looptime"
    strategies = ()  # virtual time only: no schedule control, no trace

    def run_once(self, program: Program) -> Any:
        import looptime

        with asyncio.Runner(loop_factory=looptime.new_event_loop) as runner:
            return runner.run(program())


def _from_collector(start: float, found: bool) -> FirstFailure:
    # The agent-race program appends one entry per run it finished (the failing one included)
    # before it raises, so the first hit's index is the number of schedules to the failure.
    first = next((i for i, h in enumerate(COLLECTOR.hits) if h), None)
    if first is None or not found:
        return FirstFailure(None, None)
    return FirstFailure(first + 1, COLLECTOR.ends[first] - start)


# -- detangle ----------------------------------------------------------------------------


class Detangle(Runtime):
    name = "detangle"
    module = "detangle"
    # detangle's own strategies: a uniform random walk, PCT (its default depth 3) and its
    # default `auto` portfolio (FIFO, PCT depth 2, random, PCT 3, PCT 1, one run each in turn).
    strategies = ("random", "pct", "auto")
    race_strategies = ("random", "pct", "auto")
    systematic_variants = ("dfs max_delays=2",)

    def campaign(self, program: Program, runs: int, strategy: str, processes: int = 1) -> int | None:
        import detangle

        if processes > 1:
            return None  # no multi-process explorer
        # The race programs record the lost update instead of raising: every run is made.
        detangle.explore(program, runs=runs, strategy=strategy, seed=0, shrink=False, database=False)
        return runs

    def run_once(self, program: Program) -> Any:
        import detangle

        return detangle.run(program)

    def systematic(self, program: Program, budget: int, variant: str = "systematic") -> SystematicFigures | None:
        import detangle

        # Its delay-bounded DFS at its default bound (2 deviations).
        stats = detangle.explore(program, runs=budget, strategy=detangle.DFS(max_delays=2), shrink=False, database=False)
        return SystematicFigures(stats.runs, bool(stats.exhausted))

    def first_failure(self, program: Program, strategy: str, campaign: int, budget: int) -> FirstFailure | None:
        import detangle

        COLLECTOR.clear()
        start = time.perf_counter()
        try:
            detangle.explore(program, runs=budget, strategy=strategy, seed=campaign * 1000, shrink=False, database=False)
        except detangle.BugFound:
            return _from_collector(start, True)
        return FirstFailure(None, None)

    def hang_probe(self, program: Program) -> str:
        import detangle

        try:
            detangle.run(program)
        except BaseException as exc:
            return f"{type(exc).__name__}: {exc}"
        return "completed"


# -- frontrun ----------------------------------------------------------------------------


class Frontrun(Runtime):
    name = "frontrun"
    module = "frontrun"
    # frontrun interleaves the worker coroutines it is given (at every await), so it takes the
    # race as (setup, workers, invariant): _programs.race_workers. It has no whole-program
    # runner, so it has no rows for the sections that run a program (1-4, 6-8).
    strategies = ()
    # Its random strategy (the async shuffler) is not run: on the agent race every one of its
    # schedules times out (5 s each) with the driver parked on the agent's asyncio.Event.
    race_strategies = ("dpor",)
    systematic_variants = ("dpor",)
    runs_programs = False

    def systematic(self, program: Program, budget: int, variant: str = "systematic") -> SystematicFigures | None:
        import frontrun

        form = _programs.race_workers(program)
        if form is None:
            return None
        setup, workers, invariant = form
        # Defaults (preemption_bound=2), every interleaving (stop_on_first=False), within the
        # same schedule budget as the others.
        result = asyncio.run(frontrun.explore(setup=setup, workers=workers, invariant=invariant, stop_on_first=False,
                                              max_executions=budget, reproduce_on_failure=0))
        return SystematicFigures(result.num_explored, result.num_explored < budget)

    def first_failure(self, program: Program, strategy: str, campaign: int, budget: int) -> FirstFailure | None:
        import frontrun

        form = _programs.race_workers(program)
        if form is None:
            return None
        setup, workers, invariant = form
        start = time.perf_counter()
        if strategy == "dpor":
            result = asyncio.run(frontrun.explore(setup=setup, workers=workers, invariant=invariant,
                                                  max_executions=budget, reproduce_on_failure=0))
        else:
            result = asyncio.run(frontrun.explore(setup=setup, workers=workers, invariant=invariant, strategy="random",
                                                  max_attempts=budget, seed=campaign * 1000))
        seconds = time.perf_counter() - start
        if result.property_holds is not False:
            return FirstFailure(None, None)
        return FirstFailure(result.num_explored, seconds)

    def run_once(self, program: Program) -> Any:
        raise NotImplementedError("frontrun explores worker coroutines; it has no whole-program runner")


PEERS: tuple[Runtime, ...] = (Simloom(), Simloop(), Seedloop(), Looptime(), Detangle(), Frontrun())
