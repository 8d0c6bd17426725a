"""Running one generated scenario on the simulator, and printing it as a ready-to-run scenario."""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import simulator
from simulator.result import RunResult
from simulator.schedule import Schedule
from simulator.strategies.base import Strategy

from ..adapter import Implementation
from ..harness import Kit
from .checks import violations
from .model import PropScenario
from .race import RaceResult, race_cassette
from .world import Observation, World

MAX_STEPS = 200_000
"""Simulator callback budget per run: a driver spinning without awaiting is reported, not hung."""


@dataclass
class Outcome:
    """One run: its violations, the simulator's result (schedule, outcome) and the observation."""

    violations: list[str]
    result: RunResult
    observation: Observation | None

    @property
    def ok(self) -> bool:
        return not self.violations


def run_one(
    impl: Implementation,
    scenario: PropScenario,
    strategy: Strategy | None = None,
    seed: int = 0,
    schedule: Schedule | None = None,
) -> Outcome:
    """Play ``scenario`` against ``impl`` under ``strategy`` (FIFO when ``None``) or replay a
    recorded ``schedule``, and check every invariant."""

    async def main() -> Observation:
        return await World(Kit(impl), scenario).play()

    with _quiet(getattr(impl, "logger_name", "")):
        if schedule is not None:
            result = simulator.replay(main, schedule, strict=False)
        else:
            result = simulator.run(main, strategy=strategy, seed=seed, max_steps=MAX_STEPS)
    if result.outcome != "completed" or not isinstance(result.value, Observation):
        error = f"{type(result.error).__name__}: {result.error}" if result.error else ""
        return Outcome([f"RUN: the simulation ended {result.outcome} {error}".rstrip()], result, None)
    return Outcome(violations(result.value), result, result.value)


@contextlib.contextmanager
def _quiet(logger_name: str) -> Iterator[None]:
    """Generated runs contain failures on purpose: keep their contained-failure warnings
    (ERR-12) off the console while they run."""
    logger = logging.getLogger(logger_name or "reference_loop")
    before = logger.disabled
    logger.disabled = True
    try:
        yield
    finally:
        logger.disabled = before


def render(
    scenario: PropScenario, outcome: Outcome, impl_spec: str = "reference", race: RaceResult | None = None
) -> str:
    """The failing example as a ready-to-run Python scenario (its schedule replays the run), and
    its race cassette when one was written (``race.race_cassette``; see ``report``)."""
    schedule = outcome.result.schedule.to_json() if outcome.result.schedule is not None else None
    lines = [
        "# A failing generated scenario: paste into a file and run it with python.",
        "from conformance.impl import resolve",
        "from conformance.properties import *  # noqa: F403",
        "from simulator.schedule import Schedule",
        "",
        f"SCENARIO = {scenario!r}",
        f"SCHEDULE = Schedule.from_json({_compact(schedule)!r})" if schedule else "SCHEDULE = None",
        f"outcome = run_one(resolve({impl_spec!r}), SCENARIO, schedule=SCHEDULE)",
        "print('\\n'.join(outcome.violations) or 'no violation')",
        "",
        "# violations:",
        *[f"#   {line}" for line in outcome.violations],
    ]
    if race is not None:
        lines += ["", race.describe()]
    return "\n".join(lines)


def report(impl: Implementation, scenario: PropScenario, outcome: Outcome, impl_spec: str = "reference") -> str:
    """A failing example's message: ``render`` plus a race cassette written for it (in
    ``race.cassette_dir()``) that ``loopkit replay`` reproduces. Writing the cassette runs the
    scenario engine's search, so call it only for a failing example (``assert outcome.ok,
    report(...)`` evaluates it only then). Inside a hypothesis test, only the final run of the
    (shrunk) failing example writes one: the shrinking runs before it get ``render`` alone."""
    if not _final_hypothesis_run():
        return render(scenario, outcome, impl_spec)
    try:
        race = race_cassette(scenario, impl, impl_spec, outcome.violations)
    except Exception as exc:  # the example's message must survive a failing cassette search
        race = RaceResult(None, note=f"writing the cassette failed: {type(exc).__name__}: {exc}")
    return render(scenario, outcome, impl_spec, race)


def _final_hypothesis_run() -> bool:
    """False while hypothesis is still generating or shrinking (a cassette search per shrink
    step would cost seconds each); true on its final, reported run and outside hypothesis."""
    try:
        from hypothesis.control import current_build_context

        return bool(current_build_context().is_final)
    except Exception:  # not inside a hypothesis test (InvalidArgument), or no such API
        return True


def _compact(schedule_json: Any) -> str:
    """The schedule as one line of JSON text (``Schedule.from_json`` reads it back)."""
    if isinstance(schedule_json, str):
        return json.dumps(json.loads(schedule_json), separators=(",", ":"))
    return json.dumps(schedule_json, separators=(",", ":"))
