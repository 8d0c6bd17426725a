"""Property tests: generated whole scenarios under generated schedules, on the reference.

Each example is a ``PropScenario`` (concurrent actors, acting listeners, scripted model and
tools) run on the simulator; with ``HypothesisStrategy`` the interleaving comes from the same
hypothesis data, so a failing example shrinks in both the operations and the schedule, and its
message is a ready-to-run scenario. Derandomized: the same examples on every run.

Examples: 600 with hypothesis-drawn schedules, 300 each under seeded pct and random schedules;
``LOOPKIT_PROPERTY_EXAMPLES=N`` sets N for each test, ``LOOPKIT_PROPERTY_PROFILE=thorough``
multiplies the counts by 10. A failing example's message also names its race cassette (written
under ``$LOOPKIT_PROPERTY_CASSETTES``, default the temporary directory) and the ``loopkit replay``
command that reproduces it.
"""

from __future__ import annotations

import os
import warnings
import zlib
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conformance.impl import resolve
from conformance.properties import ListenerSpec, Op, PropScenario, report, run_one, scenarios
from simulator.strategies import PCTStrategy, RandomStrategy
from simulator.strategies.hypothesis import HypothesisStrategy


def _examples(default: int) -> int:
    base = int(os.environ.get("LOOPKIT_PROPERTY_EXAMPLES", default))
    return base * 10 if os.environ.get("LOOPKIT_PROPERTY_PROFILE") == "thorough" else base


PROPERTY = settings(
    max_examples=_examples(600),
    derandomize=True,  # reproducible in CI: the same examples every run
    database=None,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)

REFERENCE = resolve(None)


@pytest.fixture(autouse=True)
def _quiet_unawaited() -> Any:
    # Cancelled runs may leave a listener's coroutine unawaited when the simulation ends.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        yield


def _seed(scenario: PropScenario) -> int:
    return zlib.crc32(repr(scenario).encode())


@PROPERTY
@given(scenarios(), st.data())
def test_reference_under_hypothesis_schedules(scenario: PropScenario, data: Any) -> None:
    outcome = run_one(REFERENCE, scenario, HypothesisStrategy(data))
    assert outcome.ok, report(REFERENCE, scenario, outcome)


@settings(PROPERTY, max_examples=_examples(300))
@given(scenarios())
def test_reference_under_pct(scenario: PropScenario) -> None:
    seed = _seed(scenario)
    outcome = run_one(REFERENCE, scenario, PCTStrategy(seed=seed), seed=seed)
    assert outcome.ok, report(REFERENCE, scenario, outcome)


@settings(PROPERTY, max_examples=_examples(300))
@given(scenarios())
def test_reference_under_random(scenario: PropScenario) -> None:
    seed = _seed(scenario)
    outcome = run_one(REFERENCE, scenario, RandomStrategy(seed=seed), seed=seed)
    assert outcome.ok, report(REFERENCE, scenario, outcome)


def test_same_seed_same_run() -> None:
    # Determinism: a scenario, a strategy and a seed give the same observation, byte for byte.
    scenario = PropScenario(
        actors=((Op("send"), Op("steer"), Op("waiter"), Op("sleep", 0.1), Op("cancel"), Op("send")), (Op("send"), Op("wait"))),
        listeners=(ListenerSpec("agent/step-end", "steer"),),
        responses=("tools", "slow", "max-tokens"),
        tools=("slow", "fail"),
    )
    runs = [run_one(REFERENCE, scenario, RandomStrategy(seed=7), seed=7) for _ in range(2)]
    assert all(r.ok for r in runs), runs[0].violations
    first, again = (r.observation for r in runs)
    assert first is not None and again is not None
    assert repr(first.moments) == repr(again.moments)
    assert first.final_events == again.final_events
    assert len(first.final_events) > 10
