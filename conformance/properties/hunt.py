"""Hunting: how many generated examples until the properties catch an implementation.

``hunt(impl, "random", max_examples=200)`` generates scenarios with hypothesis (derandomized:
the same examples every time) and runs example ``k`` under the named schedule strategy:
``fifo`` (plain asyncio order), ``random`` / ``pct`` (seeded with ``k``), or ``hypothesis`` (the
schedule drawn from the same hypothesis data as the scenario). It stops at the first violation.
"""

from __future__ import annotations

import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from ..adapter import Implementation
from .model import PropScenario, scenarios
from .play import Outcome, render, run_one
from .race import RaceResult, race_cassette

STRATEGIES = ("fifo", "random", "pct", "hypothesis")


@dataclass
class HuntResult:
    """The outcome of a hunt."""

    strategy: str
    caught: bool
    examples: int
    """Examples run up to and including the first failing one (all of them when not caught)."""
    wall_s: float
    violation: str | None = None
    example: str | None = field(default=None, repr=False)
    """The first failing example, rendered as a ready-to-run scenario."""
    scenario: PropScenario | None = field(default=None, repr=False)
    """The first failing example itself."""
    violations: list[str] = field(default_factory=list, repr=False)
    """All the violations of the first failing example."""
    race: RaceResult | None = field(default=None, repr=False)
    """Its race cassette, when the hunt was asked for one (``cassettes=DIR``)."""


class _Caught(Exception):
    def __init__(self, scenario: PropScenario, outcome: Outcome) -> None:
        super().__init__(outcome.violations[0])
        self.scenario, self.outcome = scenario, outcome


def _strategy(kind: str, seed: int, data: Any) -> Any:
    from simulator.strategies import PCTStrategy, RandomStrategy
    from simulator.strategies.hypothesis import HypothesisStrategy

    if kind == "fifo":
        return None
    if kind == "random":
        return RandomStrategy(seed=seed)
    if kind == "pct":
        return PCTStrategy(seed=seed)
    if kind == "hypothesis":
        return HypothesisStrategy(data)
    raise ValueError(f"unknown strategy {kind!r} (choose from {', '.join(STRATEGIES)})")


def hunt(
    impl: Implementation,
    strategy: str = "hypothesis",
    *,
    max_examples: int = 200,
    impl_spec: str = "reference",
    cassettes: Path | None = None,
) -> HuntResult:
    """Run up to ``max_examples`` generated examples against ``impl`` under ``strategy``; with
    ``cassettes`` (a directory), also write the first failing example's race cassette there
    (``race.race_cassette``) and name it in the rendered example."""
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r} (choose from {', '.join(STRATEGIES)})")
    count = [0]
    found: list[tuple[int, PropScenario, Outcome]] = []

    @settings(
        max_examples=max_examples,
        derandomize=True,
        database=None,
        deadline=None,
        phases=[Phase.generate],  # the first failure is what a hunt measures: no shrinking
        suppress_health_check=list(HealthCheck),
    )
    @given(scenarios(), st.data())
    def search(scenario: PropScenario, data: Any) -> None:
        count[0] += 1
        # The seed comes from the example itself, so hypothesis re-running it gets the same run.
        seed = zlib.crc32(repr(scenario).encode())
        outcome = run_one(impl, scenario, _strategy(strategy, seed, data), seed=seed)
        if not outcome.ok:
            if not found:
                found.append((count[0], scenario, outcome))
            raise _Caught(scenario, outcome)

    started = time.monotonic()
    try:
        search()
    except Exception:
        # _Caught, or hypothesis's report around it (e.g. a flaky re-run): the first failure
        # recorded is the answer either way; anything else is a bug of the hunt itself.
        if not found:
            raise
    wall = time.monotonic() - started
    if found:
        examples, scenario, outcome = found[0]
        race = None
        if cassettes is not None:
            race = race_cassette(scenario, impl, impl_spec, outcome.violations, out_dir=cassettes)
        example = render(scenario, outcome, impl_spec, race)
        return HuntResult(
            strategy, True, examples, wall, outcome.violations[0], example, scenario, list(outcome.violations), race
        )
    return HuntResult(strategy, False, count[0], wall)
