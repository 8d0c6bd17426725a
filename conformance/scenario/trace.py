"""The trace of one scenario run: what happened, as canonical JSON.

A :class:`Trace` holds the schedule, the timeline of observable events (virtual timestamps in
integer microseconds, so no float from the clock reaches the bytes), the outcome and the failed
checks. ``to_json()`` gives the same text, byte for byte, for the same scenario, implementation,
strategy and seed, in any process.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from simulator.errors import ScheduleError
from simulator.result import RunResult
from simulator.schedule import Schedule

from .events import jsonable

TRACE_FORMAT = "loopkit-trace/1"

Event = dict[str, Any]


def dumps(obj: Any) -> str:
    """Canonical JSON text (sorted keys, no whitespace, no NaN). A NaN or an infinity an
    implementation put in its data (JSON has neither) is written as the string ``"NaN"``,
    ``"Infinity"`` or ``"-Infinity"``: the trace is still written, and says what was there."""
    try:
        return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except ValueError:
        return json.dumps(_finite(obj), sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _finite(value: Any) -> Any:
    if isinstance(value, float) and value != value:
        return "NaN"
    if isinstance(value, float) and value in (math.inf, -math.inf):
        return "Infinity" if value > 0 else "-Infinity"
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def us(seconds: float) -> int:
    """Virtual seconds as integer microseconds."""
    return round(seconds * 1_000_000)


def _adopt(timeline: list[dict[str, Any]]) -> list[Event]:
    """The run's own timeline entries as trace events, converted in place (a trace is built from
    every run, and copying each event of each run cost more than the oracles reading them)."""
    for event in timeline:
        if "t" in event:
            event["t_us"] = round(event.pop("t") * 1_000_000)
    return timeline


@dataclass
class Trace:
    """What one scenario run did: JSON-serialisable (``to_json()``), comparable byte for byte.

    ``timeline`` entries are ``{"t_us": virtual microseconds, "kind": ..., **data}``;
    ``failures`` are ``{"check", "message", "at", "rules"?}``; ``result`` (the ``RunResult``, with
    the traceback) is kept for inspection, not serialised. Two traces are compared by their
    ``to_json()`` (the schedule may not be made yet).
    """

    scenario: str
    seed: int
    strategy: str
    mode: str
    outcome: str
    error: str | None
    virtual_time_us: int
    steps: int
    schedule_source: Schedule | None = field(repr=False, compare=False)
    """The schedule; ``None`` until first asked for when the trace comes from a run (``result``
    makes it: labelling every choice point costs, and most runs pass and never need it)."""
    timeline: list[Event]
    failures: list[dict[str, Any]] = field(default_factory=list)
    untriggered: list[str] = field(default_factory=list)
    pending: list[dict[str, Any]] = field(default_factory=list)
    unretrieved: list[dict[str, Any]] = field(default_factory=list)
    result: RunResult | None = field(default=None, repr=False, compare=False)

    @classmethod
    def of(cls, name: str, result: RunResult) -> Trace:
        """The trace of a finished run (its failures are filled in by the judge)."""
        return cls(
            scenario=name,
            seed=result.seed,
            strategy=result.strategy,
            mode=result.mode,
            outcome=result.outcome,
            error=result.error_text(),
            virtual_time_us=us(result.virtual_time),
            steps=result.steps,
            schedule_source=None,
            timeline=_adopt(result.timeline),
            untriggered=sorted({str(e.get("name")) for e in result.timeline if e.get("kind") == "untriggered"}),
            pending=[{"task": p["task"], "coro": p["coro"]} for p in result.pending],
            unretrieved=[{"task": u["task"], "error": u["error"]} for u in result.unretrieved],
            result=result,
        )

    @property
    def schedule(self) -> dict[str, Any]:
        """The schedule as JSON data (made when first asked for: most runs never are)."""
        cached = self.__dict__.get("_schedule")
        if cached is None:
            cached = self.__dict__["_schedule"] = jsonable(self.schedule_object().to_dict())
        return cached

    @property
    def ok(self) -> bool:
        """Completed, and no check failed."""
        return self.outcome == "completed" and not self.failures

    def outcome_message(self) -> str:
        """One line on a run that did not complete: its error, or (a deadlock, a budget) the
        tasks still pending, each with its coroutine."""
        if self.error:
            return self.error
        waiting = ", ".join(f"{p['task']} ({p['coro']})" for p in self.pending)
        return f"the run ended {self.outcome}" + (f" with {len(self.pending)} task(s) pending: {waiting}" if waiting else "")

    def failure_messages(self) -> list[str]:
        return [f"{f['check']}: {f['message']}" for f in self.failures]

    def summary(self) -> str:
        lines = [f"scenario {self.scenario!r} (strategy {self.strategy}, seed {self.seed}): {self.outcome}"]
        if self.error:
            lines.append(f"  error: {self.error}")
        for p in self.pending:
            lines.append(f"  pending: {p['task']} ({p['coro']})")
        for f in self.failures:
            lines.append(f"  failed check {f['check']}: {f['message']}")
        return "\n".join(lines)

    def events(self, kind: str | None = None, **fields: Any) -> list[Event]:
        """Timeline events of ``kind`` whose fields equal ``fields``."""
        return [e for e in self.timeline if (kind is None or e.get("kind") == kind)
                and all(e.get(k) == v for k, v in fields.items())]

    def kinds(self) -> list[str]:
        return [e["kind"] for e in self.timeline]

    def schedule_object(self) -> Schedule:
        """The schedule as a ``simulator.Schedule`` (for replay)."""
        if self.schedule_source is None:
            assert self.result is not None, "a trace has its schedule or the run it comes from"
            self.schedule_source = self.result.schedule
        return self.schedule_source

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": TRACE_FORMAT,
            "scenario": self.scenario,
            "seed": self.seed,
            "strategy": self.strategy,
            "mode": self.mode,
            "outcome": self.outcome,
            "error": self.error,
            "virtual_time_us": self.virtual_time_us,
            "steps": self.steps,
            "schedule": self.schedule,
            "timeline": jsonable(self.timeline),
            "failures": self.failures,
            "untriggered": self.untriggered,
            "pending": self.pending,
            "unretrieved": self.unretrieved,
        }

    def to_json(self) -> str:
        """Canonical JSON: stable across runs and processes."""
        return dumps(self.to_dict())

    @classmethod
    def from_json(cls, text: str) -> Trace:
        """Load a trace written by ``to_json()`` (without ``result``)."""
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"trace: not JSON ({exc.msg} at line {exc.lineno})") from None
        if not isinstance(data, dict) or data.get("format") != TRACE_FORMAT:
            raise ValueError(f"trace: not a loopkit trace (expected format {TRACE_FORMAT!r})")
        try:
            fields = {k: data[k] for k in data if k not in ("format", "schedule")}
            schedule = Schedule.from_dict(data.get("schedule"), source="trace")
            return cls(**fields, schedule_source=schedule)
        except (TypeError, ScheduleError) as exc:
            raise ValueError(f"trace: malformed ({exc})") from None
