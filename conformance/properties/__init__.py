"""Property-based checking of agent loops: generated whole scenarios, run under generated
schedules, checked against the contract's invariants.

    from hypothesis import given, strategies as st
    from conformance.properties import scenarios, run_one, report
    from simulator.strategies.hypothesis import HypothesisStrategy

    @given(scenarios(), st.data())
    def test_loop(scenario, data):
        outcome = run_one(impl, scenario, HypothesisStrategy(data))
        assert outcome.ok, report(impl, scenario, outcome)

``render`` prints a failing example as a ready-to-run Python scenario; ``report`` adds a race
cassette (``race``: the example translated to a YAML scenario by ``translate``, its failing
schedule found again by the scenario engine) that ``loopkit replay`` reproduces.

``hunt`` runs the same search against any implementation (the bench and the mutant report use
it to see which mutants the properties find on their own).
"""

from __future__ import annotations

from .checks import violations
from .hunt import HuntResult, hunt
from .model import ListenerSpec, Op, PropScenario, scenarios
from .play import Outcome, render, report, run_one
from .race import RaceResult, race_cassette
from .translate import Untranslatable, to_yaml
from .world import Observation, World

__all__ = [
    "HuntResult",
    "ListenerSpec",
    "Observation",
    "Op",
    "Outcome",
    "PropScenario",
    "RaceResult",
    "Untranslatable",
    "World",
    "hunt",
    "race_cassette",
    "render",
    "report",
    "run_one",
    "scenarios",
    "to_yaml",
    "violations",
]
