"""The result of one simulated run."""

from __future__ import annotations

import json
import traceback
from dataclasses import dataclass, field
from typing import Any

from simulator.schedule import Choice, Schedule

OUTCOMES = ("completed", "failed", "deadlock", "budget-exceeded")


def _json_value(value: Any) -> Any:
    """The value itself when it is plain JSON, else only its type (a repr could carry a
    memory address and make identical runs look different)."""
    try:
        json.dumps(value, sort_keys=True)
    except (TypeError, ValueError):
        return {"unserialisable": type(value).__qualname__}
    return value


def _dumps(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=repr, ensure_ascii=False)


@dataclass
class RunResult:
    """What happened in one run.

    ``outcome``: ``"completed"`` | ``"failed"`` | ``"deadlock"`` | ``"budget-exceeded"``.
    ``value``: main's return value; ``error``: the exception main ended with (``traceback`` has
    it formatted). ``pending``: for deadlock / budget-exceeded, every task still pending with
    its await stack. ``unretrieved``: exceptions of tasks nobody retrieved; ``unhandled``:
    exceptions raised by plain callbacks. ``schedule``: the recorded choices
    (:class:`~simulator.schedule.Schedule`); ``timeline``: the observable events
    (``simulator.observe``) with virtual timestamps.
    """

    outcome: str
    value: Any = None
    error: BaseException | None = None
    timeline: list[dict[str, Any]] = field(default_factory=list)
    virtual_time: float = 0.0
    steps: int = 0
    pending: list[dict[str, Any]] = field(default_factory=list)
    unretrieved: list[dict[str, Any]] = field(default_factory=list)
    unhandled: list[dict[str, Any]] = field(default_factory=list)
    budget_reason: str | None = None
    #: a deadlock found by the progress watchdog: only timers kept firing
    stalled: bool = False
    seed: int = 0
    strategy: str = "fifo"
    mode: str = "realisable"
    vary_timers: bool = True
    timer_window: float = 1.0
    scenario: str | None = None
    raw_choices: list[Any] = field(default_factory=list, repr=False)
    _schedule: Schedule | None = field(default=None, repr=False)

    @property
    def ok(self) -> bool:
        return self.outcome == "completed"

    @property
    def failed(self) -> bool:
        return self.outcome != "completed"

    def unwrap(self) -> Any:
        """The value ``main`` returned; re-raise the error the run ended with, or raise an
        ``AssertionError`` carrying :meth:`report` for an error-less outcome (deadlock,
        budget exceeded). Handy in tests: ``simulator.run(main).unwrap()``."""
        if self.outcome == "completed":
            return self.value
        if self.error is not None:
            raise self.error
        raise AssertionError(self.report())

    @property
    def traceback(self) -> str:
        e = self.error
        if e is None:
            return ""
        return "".join(traceback.format_exception(type(e), e, e.__traceback__))

    @property
    def schedule(self) -> Schedule:
        if self._schedule is None:
            from simulator._runtime import callback_label

            choices = []
            for pick, n, cb, args, is_timer in self.raw_choices:
                label = callback_label(cb, args)
                choices.append(Choice(pick, n, "timer:" + label if is_timer else label))
            self._schedule = Schedule(
                choices=choices,
                seed=self.seed,
                strategy=self.strategy,
                mode=self.mode,
                vary_timers=self.vary_timers,
                timer_window=self.timer_window,
                scenario=self.scenario,
            )
            self.raw_choices = []
        return self._schedule

    @property
    def deadlocked(self) -> bool:
        return self.outcome == "deadlock"

    def error_text(self) -> str | None:
        if self.error is None:
            return None
        return f"{type(self.error).__name__}: {self.error}"

    def trace(self) -> dict[str, Any]:
        """Outcome, main's value (when plain JSON), error, schedule, timeline, pending tasks and
        unretrieved exceptions: a JSON-serialisable dict."""
        return {
            "outcome": self.outcome,
            "value": _json_value(self.value),
            "error": self.error_text(),
            "virtual_time": self.virtual_time,
            "schedule": self.schedule.to_dict(),
            "timeline": self.timeline,
            "stalled": self.stalled,
            "pending": [{"task": p["task"], "coro": p["coro"]} for p in self.pending],
            "unretrieved": [{"task": u["task"], "error": u["error"]} for u in self.unretrieved],
        }

    def trace_json(self) -> str:
        """The trace as canonical JSON text (sorted keys, no whitespace): compare it byte for
        byte across runs and processes."""
        return _dumps(self.trace())

    def timeline_json(self) -> str:
        return _dumps(self.timeline)

    def report(self) -> str:
        """A human-readable summary: outcome, error, and for deadlock / budget-exceeded every
        pending task and where it waits."""
        lines = [f"outcome: {self.outcome}"
                 + (f" ({self.budget_reason} budget)" if self.budget_reason else "")
                 + f" after {self.steps} steps, virtual time {self.virtual_time:g}s"]
        if self.stalled:
            lines.append("no task progressed (none created or finished, nothing observed) while "
                         "only timers fired: a deadlock kept alive by timers")
        if self.error is not None:
            lines.append(f"error: {self.error_text()}")
        if self.pending:
            lines.append(f"pending tasks ({len(self.pending)}):")
            for p in self.pending:
                lines.append(f"  {p['task']} ({p['coro']})")
                for fr in p["stack"]:
                    lines.append(f"      {fr}")
        for u in self.unretrieved:
            lines.append(f"unretrieved exception in task {u['task']}: {u['error']}")
        for u in self.unhandled:
            lines.append(f"unhandled: {u['message']} {u.get('error', '')}")
        return "\n".join(lines)
