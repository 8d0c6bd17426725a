"""Race cassettes: one YAML file that reproduces a race found by ``loopkit explore``, forever.

A race cassette holds the scenario (inline: its YAML text, or the ``module:attr`` of a Python
scenario), the implementation it failed on (and, for one checked over the wire, ``impl_info``:
its kind, runtime and runtime version, protocol version), how it was found (strategy, seed, budget, after how
many schedules), the shrunk schedule (replayed strictly for as long as it lasts, then FIFO), the
failure (the checks that failed), the schedule's deviations from FIFO, and the full trace of the
failing run. The file is canonical: the same exploration gives the same bytes.

``load(path)`` and ``save(cassette, path)``; every problem is a one-line
:class:`RaceCassetteError` naming the file (and the line and field where there is one).
``build`` makes one from an exploration, ``scenario_of`` and ``replay`` read one back.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from cassettes import inputs
from conformance.adapter import Implementation
from simulator.errors import ScheduleError
from simulator.schedule import Schedule

from .engine import Exploration, RunReport, Shrunk, run_one
from .model import Scenario, ScenarioError, from_source
from .yaml_reader import mixed_up, parse

FORMAT = "loopkit-race/1"
FIELDS = ("format", "name", "impl", "impl_info", "found", "scenario", "schedule", "shrink", "failure",
          "deviations", "trace")


class RaceCassetteError(Exception):
    """A race cassette cannot be read or written (one-line message)."""


@dataclass
class RaceCassette:
    """The contents of a race cassette (see module docstring)."""

    name: str
    impl: str
    scenario: dict[str, Any]
    found: dict[str, Any]
    schedule: Schedule
    failure: dict[str, Any]
    shrink: dict[str, Any] = field(default_factory=dict)
    deviations: list[dict[str, Any]] = field(default_factory=list)
    trace: dict[str, Any] = field(default_factory=dict)
    path: str | None = None
    scenario_line: int = 0
    """0-based line of the cassette where an inline YAML scenario's text starts (for errors)."""
    impl_info: dict[str, Any] = field(default_factory=dict)
    """What the implementation was, when it says (a wire implementation: kind, runtime, runtime
    version, protocol); empty for an in-process one. A schedule recorded on one runtime version
    may not fit another (microtask hop counts are an engine detail)."""

    def to_yaml(self) -> str:
        """The cassette as canonical YAML text."""
        doc: dict[str, Any] = {
            "format": FORMAT,
            "name": self.name,
            "impl": self.impl,
            **({"impl_info": dict(self.impl_info)} if self.impl_info else {}),
            "found": dict(self.found),
            "scenario": _scenario_out(self.scenario),
            "schedule": _schedule_out(self.schedule),
            "shrink": dict(self.shrink),
            "failure": dict(self.failure),
            "deviations": [_Flow(d) for d in self.deviations],
            "trace": _trace_out(self.trace),
        }
        return yaml.dump(doc, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=100)


# --------------------------------------------------------------------------- writing


class _Flow(dict[str, Any]):
    """A mapping written on one line (timeline events, deviations)."""


class _FlowList(list[Any]):
    """A list written on one line (schedule choices)."""


class _Dumper(yaml.SafeDumper):
    pass


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    if "\n" in value:
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|")
    return dumper.represent_scalar("tag:yaml.org,2002:str", value)


_Dumper.add_representer(str, _str)
_Dumper.add_representer(_Flow, lambda d, v: d.represent_mapping("tag:yaml.org,2002:map", v.items(), flow_style=True))
_Dumper.add_representer(_FlowList, lambda d, v: d.represent_sequence("tag:yaml.org,2002:seq", v, flow_style=True))


def _scenario_out(source: dict[str, Any]) -> Any:
    if "yaml" in source:
        text = str(source["yaml"])
        # A literal block keeps the text (and its line numbers) as written.
        return "\n".join(line.rstrip() for line in text.rstrip("\n").split("\n")) + "\n"
    return {"python": source["python"]}


def _schedule_out(schedule: Schedule) -> dict[str, Any]:
    data = schedule.to_dict()
    data.pop("format", None)
    data["choices"] = [_FlowList(c) for c in data["choices"]]
    return data


def _event_out(event: dict[str, Any]) -> _Flow:
    head: dict[str, Any] = {k: event[k] for k in ("t_us", "kind") if k in event}
    rest = {k: event[k] for k in sorted(event) if k not in head}
    return _Flow({**head, **rest})


def _trace_out(trace: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in trace.items() if k not in ("timeline", "schedule", "format")}
    out["timeline"] = [_event_out(e) for e in trace.get("timeline", [])]
    return out


# --------------------------------------------------------------------------- reading


def load(path: str | Path) -> RaceCassette:
    """Read and validate a race cassette."""
    p = str(path)
    try:
        text = inputs.read_text(path)
    except FileNotFoundError:
        raise RaceCassetteError(f"{p}: no such race cassette") from None
    except OSError as exc:
        raise RaceCassetteError(f"{p}: cannot read the race cassette: {exc}") from None
    try:
        root = parse(text, p)
        mix_up = mixed_up(root, "race", p)
        if mix_up is not None:
            raise mix_up
        f = root.keys(FIELDS, required=("format", "name", "impl", "scenario", "schedule", "failure"))
        if f["format"].value() != FORMAT:
            raise f["format"].error(f"not a race cassette (expected format {FORMAT!r})")
        scenario_node = f["scenario"]
        if scenario_node.is_scalar():
            scenario: dict[str, Any] = {"yaml": scenario_node.string()}
            scenario_line = scenario_node.node.start_mark.line + 1
        else:
            scenario = {"python": scenario_node.keys(("python",), required=("python",))["python"].string()}
            scenario_line = 0
        sched_node = f["schedule"]
        data = _schedule_fields(sched_node)
        try:
            schedule = Schedule.from_dict({**data, "format": "loopkit-schedule/1"}, source=f"{p}: schedule")
        except ScheduleError as exc:
            raise sched_node.error(str(exc).split(": ", 2)[-1]) from None
        failure = f["failure"].value()
        if not isinstance(failure, dict):
            raise f["failure"].error("expected a mapping")
        return RaceCassette(
            name=f["name"].string(),
            impl=f["impl"].string(),
            impl_info=_mapping(f, "impl_info"),
            scenario=scenario,
            found=_mapping(f, "found"),
            schedule=schedule,
            failure=failure,
            shrink=_mapping(f, "shrink"),
            deviations=[_deviation(item) for item in f["deviations"].items()] if "deviations" in f else [],
            trace=_mapping(f, "trace"),
            path=p,
            scenario_line=scenario_line,
        )
    except ScenarioError as exc:
        raise RaceCassetteError(str(exc)) from None


SCHEDULE_FIELDS = ("scenario", "strategy", "seed", "mode", "vary_timers", "timer_window", "choices")


def _schedule_fields(node: Any) -> dict[str, Any]:
    """The schedule mapping, each field of its type (``mode: null`` or a NaN ``timer_window``
    is an error naming the line, not a default silently taken)."""
    from simulator._runtime import MODES

    f = node.keys(SCHEDULE_FIELDS, required=("choices",))
    data: dict[str, Any] = {}
    if "scenario" in f:
        data["scenario"] = f["scenario"].string()
    if "strategy" in f:
        data["strategy"] = f["strategy"].string()
    if "seed" in f:
        data["seed"] = f["seed"].integer(minimum=None)
    if "mode" in f:
        data["mode"] = f["mode"].choice(MODES)
    if "vary_timers" in f:
        data["vary_timers"] = f["vary_timers"].boolean()
    if "timer_window" in f:
        window = f["timer_window"].number(minimum=0.0)
        if window != window or window == float("inf"):
            raise f["timer_window"].error(f"must be a finite number of seconds, got {window}")
        data["timer_window"] = window
    choices = []
    for item in f["choices"].items():
        parts = item.items()
        if len(parts) != 3:
            raise item.error(f"a choice is [pick, options, label], got {len(parts)} item(s)")
        pick, count = parts[0].integer(), parts[1].integer(minimum=1)
        if pick >= count:
            raise item.error(f"pick {pick} is not one of the {count} options")
        choices.append([pick, count, parts[2].string()])
    data["choices"] = choices
    return data


def _deviation(node: Any) -> dict[str, Any]:
    value = node.value()
    if not isinstance(value, dict):
        raise node.error("a deviation is a mapping")
    return value


def _mapping(fields: dict[str, Any], key: str) -> dict[str, Any]:
    if key not in fields:
        return {}
    value = fields[key].value()
    if not isinstance(value, dict):
        raise fields[key].error("expected a mapping")
    return value


def save(cassette: RaceCassette, path: str | Path) -> None:
    """Write a cassette (creating its directory)."""
    p = Path(path)
    text = cassette.to_yaml()
    tmp = p.with_name(f".{p.name}.{os.getpid()}.tmp")
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        # Written aside then renamed: a run killed mid-write leaves the old file or none, never
        # half a cassette.
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, p)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise RaceCassetteError(f"{p}: cannot write ({exc.strerror or exc})") from None


# --------------------------------------------------------------------------- from and to runs


def info_of(impl: Implementation) -> dict[str, Any]:
    """What a cassette records about ``impl`` (its ``info``, for a wire implementation)."""
    info = getattr(impl, "info", None)
    return dict(info) if isinstance(info, dict) else {}


def runtime_warning(cassette: RaceCassette, impl: Implementation) -> str | None:
    """A warning when the cassette was recorded on another runtime or runtime version than
    ``impl`` runs on (its schedule may land elsewhere), else ``None``."""
    recorded, now = cassette.impl_info, info_of(impl)
    if not recorded:
        return None
    was = f"{recorded.get('runtime', '?')} {recorded.get('runtime_version', '?')}"
    if not now:
        return f"the cassette was recorded on {was}; this implementation runs in-process"
    is_ = f"{now.get('runtime', '?')} {now.get('runtime_version', '?')}"
    if was != is_:
        return f"the cassette was recorded on {was}, this implementation runs on {is_}: the schedule may not fit"
    return None


def build(scenario: Scenario, impl: str, found: Exploration, shrunk: Shrunk,
          impl_info: dict[str, Any] | None = None) -> RaceCassette:
    """The cassette of a failure found by ``engine.explore`` and shrunk by ``engine.shrink``.

    Nothing in it depends on the wall clock or on the number of worker processes."""
    report = shrunk.report
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
            "checks": [f.to_dict() for f in report.verdict.findings],
        },
        shrink={
            "deviations_before": shrunk.before["deviations"],
            "length_before": shrunk.before["length"],
            "deviations": shrunk.after["deviations"],
            "length": shrunk.after["length"],
        },
        deviations=report.deviations,
        trace=report.trace.to_dict(),
        impl_info=dict(impl_info or {}),
    )


def scenario_of(cassette: RaceCassette) -> Scenario:
    """The cassette's scenario (inline YAML errors name the cassette's own lines)."""
    origin = cassette.path or "<cassette>"
    try:
        return from_source(cassette.scenario, origin=origin, line_offset=cassette.scenario_line)
    except ScenarioError as exc:
        if "yaml" in cassette.scenario:
            raise ScenarioError(f"{exc} (in the cassette's inline scenario)") from None
        if not str(exc).startswith(origin):  # a Python scenario's error: say which cassette
            raise ScenarioError(f"{origin}: scenario: {exc}") from None
        raise


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
