"""The loopkit side of bench/peers.py: the same programs on loopkit's simulator.

Only the runtime's public API is used (``simulator.run``, the strategy classes under
``simulator.strategies``, ``simulator.explore`` / ``shrink`` / ``check_determinism`` and the
``dfs`` strategy when they exist). Parts of that API that are missing are reported as such
(``MISSING``) rather than imitated here: the benchmark measures the runtime, it does not
stand in for it.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import time
from typing import Any

import _programs
from _programs import COLLECTOR, Program
from peers_runtimes import FirstFailure, Runtime, ShrinkFigures, SystematicFigures

#: API the benchmark looked for and did not find (printed as a note, listed in the report).
MISSING: set[str] = set()


def _strategy(name: str, **kwargs: Any) -> Any:
    """A strategy object from its module under simulator.strategies (one module each)."""
    module = importlib.import_module(f"simulator.strategies.{name}")
    classes = [
        obj for obj in vars(module).values()
        if inspect.isclass(obj) and obj.__module__ == module.__name__ and obj.__name__.endswith("Strategy")
    ]
    if not classes:
        raise LookupError(f"simulator.strategies.{name} defines no *Strategy class")
    return classes[0](**kwargs)


class Loopkit(Runtime):
    name = "loopkit"
    module = "simulator"
    # "random-wide" is random under mode="wide" (any ready callback may run next, the
    # peers' model): shown for comparison, the goals use the default realisable mode.
    # "random-uniform" is random with switch_bias=0 (a uniform pick at every choice point):
    # the baseline issue 5 asks PCT to beat; the default "random" is biased towards switching.
    strategies = ("random", "random-uniform", "pct", "random-wide")
    # dfs; dpor in its default (conservative) mode; dpor with shared="declared", for which the
    # race program declares its one shared counter (_programs.SHARED = simulator.shared).
    systematic_variants = ("dfs", "dpor", "dpor shared=declared")
    race_strategies = ("random", "pct", "dfs", "dpor")

    def available(self) -> bool:
        try:
            import simulator
        except ImportError:
            return False
        return hasattr(simulator, "run")

    def version(self) -> str:
        return super().version()

    # -- exploration ------------------------------------------------------------------

    def campaign(self, program: Program, runs: int, strategy: str, processes: int = 1) -> int | None:
        import simulator

        # The runtime's own campaign API, like the peers': seeds 0..runs-1, no stop at the
        # first failure (the race programs record the lost update instead of raising, so
        # every explorer runs the whole budget), workers=N for the multi-process figure.
        name, _, variant = strategy.partition("-")
        kwargs: dict[str, Any] = {}
        chosen: Any = name
        if variant == "uniform":
            from simulator.strategies.random import RandomStrategy

            chosen = RandomStrategy(switch_bias=0.0)
        elif variant:
            kwargs["mode"] = variant
        if processes > 1:
            kwargs["workers"] = processes
        result = simulator.explore(program, strategy=chosen, budget=runs, stop_on_failure=False, **kwargs)
        return int(result.runs)

    def run_once(self, program: Program) -> Any:
        import simulator

        result = simulator.run(program)
        if result.outcome != "completed":
            raise RuntimeError(f"loopkit run ended {result.outcome}: {result.error_text()}")
        return result.value

    # -- systematic search ------------------------------------------------------------

    def systematic(self, program: Program, budget: int, variant: str = "dfs") -> SystematicFigures | None:
        import simulator

        name, _, option = variant.partition(" ")
        kwargs = dict(kv.split("=", 1) for kv in option.split()) if option else {}
        try:
            strategy = _strategy(name, **kwargs)
        except (ImportError, LookupError):
            MISSING.add(f"simulator.strategies.{name} (systematic search)")
            return None
        declared = kwargs.get("shared") == "declared"
        if declared:
            _programs.SHARED = simulator.shared
        try:
            result = simulator.explore(program, strategy=strategy, budget=budget, stop_on_failure=False)
        finally:
            _programs.SHARED = list
        return SystematicFigures(int(result.runs), bool(result.exhausted), result.classes)

    def first_failure(self, program: Program, strategy: str, campaign: int, budget: int) -> FirstFailure | None:
        import simulator

        COLLECTOR.clear()
        start = time.perf_counter()
        result = simulator.explore(program, strategy=strategy, budget=budget, seed=campaign * 1000, track=False)
        if result.first_failure_run is None:
            return FirstFailure(None, None)
        return FirstFailure(result.first_failure_run, COLLECTOR.ends[result.first_failure_run - 1] - start)

    # -- shrinking ----------------------------------------------------------------------

    def shrink(self, program: Program) -> ShrinkFigures | None:
        import simulator

        shrink = getattr(simulator, "shrink", None)
        if shrink is None:
            MISSING.add("simulator.shrink")
            return None
        random = _strategy("random")
        for seed in range(1000):
            failing = simulator.run(program, strategy=random, seed=seed)
            if failing.outcome == "failed":
                break
        else:
            return None
        schedule = failing.schedule
        before = schedule.deviations
        counted = [0]

        def is_failure(result: Any) -> bool:
            counted[0] += 1
            return bool(result.outcome == "failed" and type(result.error).__name__ == "LostUpdate")

        start = time.perf_counter()
        result = shrink(program, schedule, is_failure=is_failure)
        seconds = time.perf_counter() - start
        shrunk = _first_attr(result, ("schedule", "after", "shrunk"), result)
        runs = _first_attr(result, ("runs", "runs_used", "attempts"), counted[0])
        after = getattr(shrunk, "deviations", None)
        if after is None:
            MISSING.add("shrink result exposing the shrunk schedule's deviations")
            return None
        return ShrinkFigures(int(runs), seconds, before, int(after))

    # -- hangs and determinism ----------------------------------------------------------

    def hang_probe(self, program: Program) -> str:
        import simulator

        # Default settings on purpose: the goal is that a user who runs the program as is
        # gets the hang reported, without knowing to set a budget.
        result = simulator.run(program)
        if result.outcome == "completed":
            return "completed"
        return str(result.report())

    def trace_fingerprint(self, program: Program) -> tuple[Any, ...] | None:
        import simulator

        check = getattr(simulator, "check_determinism", None)
        result = simulator.run(program)
        digest = hashlib.sha256(result.trace_json().encode()).hexdigest()
        flagged: Any = False
        if check is None:
            MISSING.add("simulator.check_determinism")
        else:
            verdict = check(program)
            flagged = not bool(_first_attr(verdict, ("ok", "deterministic", "same"), verdict))
        return digest, result.value, flagged


def _first_attr(obj: Any, names: tuple[str, ...], default: Any) -> Any:
    for name in names:
        if hasattr(obj, name):
            value = getattr(obj, name)
            return value() if callable(value) and not inspect.isclass(value) and name in ("ok",) else value
    return default


_ = COLLECTOR  # the programs fill it; re-exported for symmetry with peers_runtimes
