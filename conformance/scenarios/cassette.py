"""Between the engine and ``cassettes.races``: a race cassette from an exploration, and the
scenario and replay of a cassette."""

from __future__ import annotations

from typing import Any

from cassettes.races import RaceCassette
from conformance.adapter import Implementation

from .engine import Exploration, RunReport, Shrunk, run_one
from .model import LoopScenario, ScenarioError, load


def build(scenario: LoopScenario, impl: str, found: Exploration, shrunk: Shrunk) -> RaceCassette:
    """The cassette of a failure found by ``explore`` and shrunk by ``shrink``.

    Nothing in it depends on the wall clock or on the number of worker processes."""
    report = shrunk.report
    trace = report.trace.to_dict()
    info: dict[str, Any] = {
        "strategy": found.strategy,
        "seed": found.seed,
        "budget": found.budget,
        "failing_seed": found.failing_seed,
        "schedules": found.found_at,
    }
    if found.pct_horizon is not None:
        info["pct_horizon"] = found.pct_horizon
    return RaceCassette(
        name=scenario.name,
        impl=impl,
        scenario=dict(scenario.source),
        found=info,
        schedule=shrunk.schedule,
        failure={
            "outcome": report.trace.outcome,
            "error": report.trace.error,
            "checks": [{"check": name, "message": v.message, "at": v.at} for name, v in report.violations]
            or [{"check": f["check"], "message": f["message"], "at": None} for f in report.trace.failures],
        },
        shrink={
            "deviations_before": shrunk.before["deviations"],
            "length_before": shrunk.before["length"],
            "deviations": shrunk.after["deviations"],
            "length": shrunk.after["length"],
        },
        deviations=report.deviations,
        trace=trace,
    )


def scenario_of(cassette: RaceCassette) -> LoopScenario:
    """The cassette's scenario (inline YAML errors name the cassette's own lines)."""
    origin = cassette.path or "<cassette>"
    if "yaml" in cassette.scenario:
        from .yaml_format import load_text

        try:
            sc = load_text(str(cassette.scenario["yaml"]), origin=origin, line_offset=cassette.scenario_line)
        except ScenarioError as exc:
            raise ScenarioError(f"{exc} (in the cassette's inline scenario)") from None
        return sc
    return load(str(cassette.scenario["python"]))


def replay(cassette: RaceCassette, impl: Implementation) -> RunReport:
    """Re-run the cassette's schedule on ``impl`` (raises ``simulator.Divergence``)."""
    return run_one(scenario_of(cassette), impl, schedule=cassette.schedule)


def first_difference(recorded: dict[str, Any], report: RunReport) -> str | None:
    """Where the new run's timeline first departs from the recorded one (informational)."""
    old = recorded.get("timeline") or []
    new = report.trace.timeline
    for i, (a, b) in enumerate(zip(old, new, strict=False)):
        if a != b:
            return f"event {i}: recorded {_short(a)}, now {_short(b)}"
    if len(old) != len(new):
        return f"event {min(len(old), len(new))}: the recorded run has {len(old)} events, this one {len(new)}"
    return None


def _short(event: dict[str, Any]) -> str:
    keys = [k for k in ("op", "status", "type", "text", "waiter", "actor") if k in event]
    return f"{event.get('kind')}(" + ", ".join(f"{k}={event[k]}" for k in keys) + ")"
