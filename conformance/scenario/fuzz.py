"""Property search: generated scenarios under generated schedules, judged by the oracles.

``fuzz(impl, "random", max_examples=200)`` generates scenarios with hypothesis (derandomized:
the same examples every time) and runs example ``k`` through the one engine under the named
schedule strategy: ``fifo`` (plain asyncio order), ``random`` / ``pct`` (seeded from the
example), or ``hypothesis`` (the schedule drawn from the same hypothesis data as the scenario).
It stops at the first failing example. A failing example is a scenario in the same world as
every other: ``report`` prints it as YAML with its schedule and writes its race cassette (the
scenario and the schedule that failed, shrunk), which ``loopkit replay`` reproduces.
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from conformance.adapter import Implementation
from simulator.strategies import PCTStrategy, RandomStrategy
from simulator.strategies.base import Strategy
from simulator.strategies.hypothesis import HypothesisStrategy

from . import engine, race
from .generate import scenarios
from .model import Scenario
from .yaml_format import dump

STRATEGIES = ("fifo", "random", "pct", "hypothesis")

CASSETTE_DIR_ENV = "LOOPKIT_PROPERTY_CASSETTES"
"""Where failing examples' race cassettes go (default: a ``loopkit-races`` directory under the
system's temporary directory, so a failing test never writes into the repository: copy a
cassette into ``cassettes/races/`` to keep it as a regression test)."""


def cassette_dir() -> Path:
    """The directory failing examples' cassettes are written to (see ``CASSETTE_DIR_ENV``)."""
    configured = os.environ.get(CASSETTE_DIR_ENV)
    return Path(configured) if configured else Path(tempfile.gettempdir()) / "loopkit-races"


def seed_of(scenario: Scenario) -> int:
    """A seed derived from the example itself (hypothesis re-running it gets the same run)."""
    return zlib.crc32(repr(scenario).encode())


def strategy_for(kind: str, seed: int, data: Any = None) -> Strategy | None:
    """The schedule strategy of one example."""
    if kind == "fifo":
        return None
    if kind == "random":
        return RandomStrategy(seed=seed)
    if kind == "pct":
        return PCTStrategy(seed=seed)
    if kind == "hypothesis":
        return HypothesisStrategy(data)
    raise ValueError(f"unknown strategy {kind!r} (choose from {', '.join(STRATEGIES)})")


def play(impl: Implementation, scenario: Scenario, strategy: Strategy | None = None, seed: int | None = None) -> engine.RunReport:
    """One run of a generated example (its contained-failure warnings kept off the console)."""
    with quiet(impl):
        return engine.run_one(scenario, impl, strategy, seed_of(scenario) if seed is None else seed)


@contextlib.contextmanager
def quiet(impl: Implementation) -> Iterator[None]:
    """Generated runs contain failures on purpose: keep their contained-failure warnings
    (ERR-12) off the console while they run."""
    # Not ``disabled``: the world records the warnings for the WARNED oracle (ERR-12). They stop
    # at the logger (no propagation), whose null handler keeps logging's last resort silent.
    logger = logging.getLogger(getattr(impl, "logger_name", "") or "reference_loop")
    before = logger.propagate
    null = logging.NullHandler()
    logger.addHandler(null)
    logger.propagate = False
    try:
        yield
    finally:
        logger.propagate = before
        logger.removeHandler(null)


def write_cassette(scenario: Scenario, impl: Implementation, impl_spec: str, failing: engine.RunReport,
                   out_dir: Path | None = None) -> Path:
    """Shrink a failing example's schedule and write its race cassette; the path."""
    named = scenario if scenario.source else scenario.with_source({"yaml": dump(scenario)})
    with quiet(impl):
        shrunk = engine.shrink(named, impl, failing)
    t = failing.trace
    found = engine.Exploration(t.strategy, 1, t.seed, 1, runs=1, failing_seed=t.seed, found_at=1, failure=failing)
    target = (out_dir or cassette_dir()) / f"{example_name(named)}.yaml"
    race.save(race.build(named, impl_spec, found, shrunk, impl_info=race.info_of(impl)), target)
    return target


def example_name(scenario: Scenario) -> str:
    """A stable name for a generated example (its cassette's file stem)."""
    return "property-" + f"{zlib.crc32(repr(scenario).encode()):08x}"


def render(scenario: Scenario, report: engine.RunReport, cassette: Path | None = None, impl_spec: str = "reference") -> str:
    """A failing example: its violations, the scenario as YAML, and how to replay it."""
    lines = ["A failing generated scenario:", *[f"  {f['check']}: {f['message']}" for f in report.trace.failures]]
    if report.trace.error:
        lines.append(f"  outcome {report.trace.outcome}: {report.trace.error}")
    lines += ["", "# save as example.yaml; `loopkit run example.yaml` plays it (FIFO)", dump(scenario)]
    if cassette is not None:
        impl = "" if impl_spec == "reference" else f" --impl {impl_spec}"
        lines.append(f"# race cassette (this schedule, shrunk): {cassette}\n#   replay: loopkit replay {cassette}{impl}")
    return "\n".join(lines)


def report(impl: Implementation, scenario: Scenario, failing: engine.RunReport, impl_spec: str = "reference") -> str:
    """A failing example's message: ``render`` plus its race cassette (``cassette_dir()``). Inside
    a hypothesis test only the final run of the (shrunk) failing example writes one; the
    shrinking runs before it get ``render`` alone."""
    if not _final_hypothesis_run():
        return render(scenario, failing, impl_spec=impl_spec)
    try:
        path: Path | None = write_cassette(scenario, impl, impl_spec, failing)
        note = ""
    except Exception as exc:  # the example's message must survive a failing cassette
        path, note = None, f"\n# writing the race cassette failed: {type(exc).__name__}: {exc}"
    return render(scenario, failing, path, impl_spec) + note


def _final_hypothesis_run() -> bool:
    try:
        from hypothesis.control import current_build_context

        return bool(current_build_context().is_final)
    except Exception:  # not inside a hypothesis test (InvalidArgument), or no such API
        return True


@dataclass
class FuzzResult:
    """The outcome of a property search."""

    strategy: str
    caught: bool
    examples: int
    """Examples run up to and including the first failing one (all of them when not caught)."""
    wall_s: float
    violation: str | None = None
    scenario: Scenario | None = field(default=None, repr=False)
    report: engine.RunReport | None = field(default=None, repr=False)
    cassette: Path | None = None

    @property
    def violations(self) -> list[str]:
        if self.report is None:
            return []
        return [f"{f['check']}: {f['message']}" for f in self.report.trace.failures] or [
            f"outcome {self.report.trace.outcome}: {self.report.trace.error}"]


class _Caught(Exception):
    pass


def fuzz(
    impl: Implementation,
    strategy: str = "hypothesis",
    *,
    max_examples: int = 200,
    impl_spec: str = "reference",
    cassettes: Path | None = None,
) -> FuzzResult:
    """Run up to ``max_examples`` generated examples against ``impl`` under ``strategy``; with
    ``cassettes`` (a directory), also write the first failing example's race cassette there."""
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r} (choose from {', '.join(STRATEGIES)})")
    count = [0]
    found: list[tuple[int, Scenario, engine.RunReport]] = []

    @settings(max_examples=max_examples, derandomize=True, database=None, deadline=None,
              phases=[Phase.generate],  # the first failure is what a search measures: no shrinking
              suppress_health_check=list(HealthCheck))
    @given(scenarios(), st.data())
    def search(scenario: Scenario, data: Any) -> None:
        count[0] += 1
        seed = seed_of(scenario)
        rep = play(impl, scenario, strategy_for(strategy, seed, data), seed)
        if not rep.ok:
            if not found:
                found.append((count[0], scenario, rep))
            raise _Caught

    started = time.monotonic()
    try:
        search()
    except Exception:
        # _Caught, or hypothesis's report around it: the first failure recorded is the answer;
        # anything else is a bug of the search itself.
        if not found:
            raise
    wall = time.monotonic() - started
    if not found:
        return FuzzResult(strategy, False, count[0], wall)
    examples, scenario, rep = found[0]
    path = write_cassette(scenario, impl, impl_spec, rep, cassettes) if cassettes is not None else None
    first = rep.trace.failures[0] if rep.trace.failures else {"check": "outcome", "message": str(rep.trace.error)}
    return FuzzResult(strategy, True, examples, wall, f"{first['check']}: {first['message']}", scenario, rep, path)
