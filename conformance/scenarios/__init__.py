"""Scenarios over the adapter protocol: YAML files and Python functions, their checks, the
exploration / shrinking / replay engine behind ``loopkit run|explore|replay``, and sequence
diagrams. See docs/scenarios.md.
"""

from __future__ import annotations

from .checks import (
    INVARIANTS,
    LoopCheck,
    TraceView,
    Violation,
    before,
    event,
    no_event,
    ran,
    released_after_turn,
    same_turn,
    statuses,
    turn_ends,
)
from .model import LoopScenario, ScenarioError, load, loop_scenario
from .world import ScenarioSetupError, World

__all__ = [
    "INVARIANTS",
    "LoopCheck",
    "LoopScenario",
    "ScenarioError",
    "ScenarioSetupError",
    "TraceView",
    "Violation",
    "World",
    "before",
    "event",
    "load",
    "loop_scenario",
    "no_event",
    "ran",
    "released_after_turn",
    "same_turn",
    "statuses",
    "turn_ends",
]
