"""Property tests: generated whole scenarios under generated schedules, on the reference.

Each example is a generated :class:`~conformance.scenario.model.Scenario` (concurrent actors,
acting listeners, scripted model and tools) run through the one engine and judged by the
oracles; with ``HypothesisStrategy`` the interleaving comes from the same hypothesis data, so a
failing example shrinks in both the operations and the schedule, and its message is the
scenario as YAML plus its race cassette. Derandomized: the same examples on every run.

Examples: 600 with hypothesis-drawn schedules, 300 each under seeded pct and random schedules;
``LOOPKIT_PROPERTY_EXAMPLES=N`` sets N for each test, ``LOOPKIT_PROPERTY_PROFILE=thorough``
multiplies the counts by 10.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conformance.impl import resolve
from conformance.scenario import fuzz
from conformance.scenario.generate import build, scenarios
from conformance.scenario.model import Scenario
from conformance.scenario.yaml_format import dump, load_text
from simulator.strategies import PCTStrategy, RandomStrategy
from simulator.strategies.hypothesis import HypothesisStrategy


def _examples(default: int) -> int:
    base = int(os.environ.get("LOOPKIT_PROPERTY_EXAMPLES", default))
    return base * 10 if os.environ.get("LOOPKIT_PROPERTY_PROFILE") == "thorough" else base


PROPERTY = settings(
    max_examples=_examples(200),  # the CI suite's share (under 3 minutes); the thorough profile takes 10x
    derandomize=True,  # reproducible in CI: the same examples every run
    database=None,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)

REFERENCE = resolve(None)


@pytest.fixture(autouse=True)
def _quiet_unawaited() -> Iterator[None]:
    # Cancelled runs may leave a listener's coroutine unawaited when the simulation ends.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        yield


@PROPERTY
@given(scenarios(), st.data())
def test_reference_under_hypothesis_schedules(scenario: Scenario, data: Any) -> None:
    report = fuzz.play(REFERENCE, scenario, HypothesisStrategy(data))
    assert report.ok, fuzz.report(REFERENCE, scenario, report)


@settings(PROPERTY, max_examples=_examples(150))
@given(scenarios())
def test_reference_under_pct(scenario: Scenario) -> None:
    seed = fuzz.seed_of(scenario)
    report = fuzz.play(REFERENCE, scenario, PCTStrategy(seed=seed), seed)
    assert report.ok, fuzz.report(REFERENCE, scenario, report)


@settings(PROPERTY, max_examples=_examples(150))
@given(scenarios())
def test_reference_under_random(scenario: Scenario) -> None:
    seed = fuzz.seed_of(scenario)
    report = fuzz.play(REFERENCE, scenario, RandomStrategy(seed=seed), seed)
    assert report.ok, fuzz.report(REFERENCE, scenario, report)


@settings(max_examples=_examples(100), derandomize=True, database=None, deadline=None,
          suppress_health_check=list(HealthCheck))
@given(scenarios())
def test_a_generated_scenario_is_yaml_that_reads_back_to_itself(scenario: Scenario) -> None:
    text = dump(scenario)
    again = load_text(text)
    assert dump(again) == text
    # The same world, with the same choice points: the loaded scenario runs to the same bytes.
    seed = fuzz.seed_of(scenario)
    first = fuzz.play(REFERENCE, scenario, RandomStrategy(seed=seed), seed)
    assert fuzz.play(REFERENCE, again, RandomStrategy(seed=seed), seed).trace.to_json() == first.trace.to_json()


def test_same_seed_same_run() -> None:
    # Determinism: a scenario, a strategy and a seed give the same trace, byte for byte.
    scenario = build(
        actors=[[("send", 0.0), ("steer", 0.0), ("waiter", 0.0), ("sleep", 0.1), ("cancel", 0.0), ("send", 0.0)],
                [("send", 0.0), ("wait", 0.0)]],
        listeners=[("agent/step-end", "steer", 1)],
        responses=["tools", "slow", "max-tokens"],
        tools=("slow", "fail"),
    )
    runs = [fuzz.play(REFERENCE, scenario, RandomStrategy(seed=7), 7) for _ in range(2)]
    assert all(r.ok for r in runs), runs[0].trace.summary()
    assert runs[0].trace.to_json() == runs[1].trace.to_json()
    assert sum(e["kind"] == "log" for e in runs[0].trace.timeline) > 10
