"""Property-based checking of agent loops: generated whole scenarios, run under generated
schedules, checked against the contract's invariants.

    from hypothesis import given, strategies as st
    from conformance.properties import scenarios, run_one, render
    from simulator.strategies.hypothesis import HypothesisStrategy

    @given(scenarios(), st.data())
    def test_loop(scenario, data):
        outcome = run_one(impl, scenario, HypothesisStrategy(data))
        assert outcome.ok, render(scenario, outcome)

``hunt`` runs the same search against any implementation (the bench and the mutant report use
it to see which mutants the properties find on their own).
"""

from __future__ import annotations

from .checks import violations
from .hunt import HuntResult, hunt
from .model import ListenerSpec, Op, PropScenario, scenarios
from .play import Outcome, render, run_one
from .world import Observation, World

__all__ = [
    "HuntResult",
    "ListenerSpec",
    "Observation",
    "Op",
    "Outcome",
    "PropScenario",
    "World",
    "hunt",
    "render",
    "run_one",
    "scenarios",
    "violations",
]
