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

from _programs import COLLECTOR, Program
from peers_runtimes import Runtime, ShrinkFigures, SystematicFigures

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

    def systematic(self, program: Program, budget: int) -> SystematicFigures | None:
        import simulator

        try:
            dfs = _strategy("dfs", **_kwargs_for("dfs", budget=budget))
        except (ImportError, LookupError):
            MISSING.add("simulator.strategies.dfs (systematic search)")
            return None
        explore = getattr(simulator, "explore", None)
        if explore is not None:
            result = explore(program, strategy=dfs, budget=budget, **_stop_kwargs(explore))
            schedules = _first_attr(result, ("runs", "schedules", "count"), None)
            exhaustive = _first_attr(result, ("exhausted", "exhaustive", "complete"), None)
            if schedules is not None and exhaustive is not None:
                return SystematicFigures(int(schedules), bool(exhaustive))
        # Without an explorer that reports exhaustion: drive the dfs strategy run by run
        # until it says it is done.
        schedules = 0
        while schedules < budget:
            simulator.run(program, strategy=dfs, seed=schedules)
            schedules += 1
            done = _first_attr(dfs, ("exhausted", "done", "finished"), None)
            if done is None:
                MISSING.add("a way to tell that dfs has exhausted the space (dfs.exhausted)")
                return None
            if done:
                return SystematicFigures(schedules, True)
        return SystematicFigures(schedules, False)

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


def _kwargs_for(module: str, **wanted: Any) -> dict[str, Any]:
    mod = importlib.import_module(f"simulator.strategies.{module}")
    cls = next(obj for obj in vars(mod).values()
               if inspect.isclass(obj) and obj.__module__ == mod.__name__ and obj.__name__.endswith("Strategy"))
    params = inspect.signature(cls).parameters
    return {k: v for k, v in wanted.items() if k in params}


def _stop_kwargs(explore: Any) -> dict[str, Any]:
    params = inspect.signature(explore).parameters
    return {"stop_on_failure": False} if "stop_on_failure" in params else {}


_ = COLLECTOR  # the programs fill it; re-exported for symmetry with peers_runtimes
