"""The one scenario model and its engine: scenarios as data (YAML, Python, generated), the world
they run in, the oracles and checks that judge them, exploration / shrinking / replay, race
cassettes and sequence diagrams. See docs/scenarios.md.
"""

from __future__ import annotations

from .checks import (
    ORACLES,
    Finding,
    LoopCheck,
    TraceView,
    Verdict,
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
from .model import (
    Action,
    Actor,
    AgentSpec,
    CheckSpec,
    Limits,
    Listener,
    ModelSpec,
    Scenario,
    ScenarioError,
    ToolSpec,
    load,
    loop_scenario,
)
from .trace import Trace
from .world import ScenarioSetupError, World

__all__ = [
    "ORACLES",
    "Action",
    "Actor",
    "AgentSpec",
    "CheckSpec",
    "Finding",
    "Limits",
    "Listener",
    "LoopCheck",
    "ModelSpec",
    "Scenario",
    "ScenarioError",
    "ScenarioSetupError",
    "ToolSpec",
    "Trace",
    "TraceView",
    "Verdict",
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
