"""Schedules: the recorded choices of a run, as a JSON artifact.

A schedule lists, for every choice point of a run (a moment when more than one option was
available), which option was taken (``pick``, 0 = FIFO), how many there were (``of``) and the
semantic label of what ran (``task-name:coroutine-qualname``, ``cb:qualname``, or
``timer:<label>`` for a timer fired before the remaining ready work). With the seed, the mode and
the timer settings it is enough to replay the run exactly.

File format (``format: "loopkit-schedule/1"``)::

    {"format": "loopkit-schedule/1", "scenario": "lost-update", "strategy": "random",
     "seed": 7, "mode": "realisable", "vary_timers": true, "timer_window": 1.0,
     "choices": [[0, 2, "main.1:worker"], [1, 3, "main.2:worker"], ...]}
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from simulator.errors import ScheduleError

FORMAT = "loopkit-schedule/1"


class Choice(NamedTuple):
    """One choice point: option ``pick`` of ``of``, which ran ``label``."""

    pick: int
    of: int
    label: str


@dataclass
class Schedule:
    """The choices of one run plus what is needed to replay it."""

    choices: list[Choice] = field(default_factory=list)
    seed: int = 0
    strategy: str = "fifo"
    mode: str = "realisable"
    vary_timers: bool = True
    timer_window: float = 1.0
    scenario: str | None = None

    @property
    def deviations(self) -> int:
        """Number of choices that differ from FIFO (``pick != 0``)."""
        return sum(1 for c in self.choices if c.pick)

    def __len__(self) -> int:
        return len(self.choices)

    def size(self) -> dict[str, int]:
        return {"deviations": self.deviations, "length": len(self.choices)}

    def trimmed(self) -> Schedule:
        """The same schedule without its trailing FIFO choices (replay continues FIFO)."""
        choices = list(self.choices)
        while choices and choices[-1].pick == 0:
            choices.pop()
        return self.replace(choices=choices)

    def replace(self, **changes: Any) -> Schedule:
        data = dict(self.__dict__)
        data.update(changes)
        return Schedule(**data)

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "scenario": self.scenario,
            "strategy": self.strategy,
            "seed": self.seed,
            "mode": self.mode,
            "vary_timers": self.vary_timers,
            "timer_window": self.timer_window,
            "choices": [list(c) for c in self.choices],
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_dict(cls, data: Any, *, scenario: str | None = None, source: str = "schedule") -> Schedule:
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ScheduleError(f"{source}: not a loopkit schedule (expected format {FORMAT!r})")
        if scenario is not None and data.get("scenario") not in (None, scenario):
            raise ScheduleError(
                f"{source}: schedule is for scenario {data.get('scenario')!r}, not {scenario!r}"
            )
        try:
            choices = [Choice(int(p), int(n), str(lbl)) for p, n, lbl in data["choices"]]
            return cls(
                choices=choices,
                seed=int(data.get("seed", 0)),
                strategy=str(data.get("strategy", "fifo")),
                mode=str(data.get("mode", "realisable")),
                vary_timers=bool(data.get("vary_timers", True)),
                timer_window=float(data.get("timer_window", 1.0)),
                scenario=data.get("scenario"),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ScheduleError(f"{source}: malformed schedule ({type(exc).__name__}: {exc})") from None

    @classmethod
    def from_json(cls, text: str, *, scenario: str | None = None, source: str = "schedule") -> Schedule:
        try:
            data = json.loads(text)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ScheduleError(f"{source}: not JSON ({exc.msg} at line {exc.lineno})"
                                if isinstance(exc, json.JSONDecodeError)
                                else f"{source}: not JSON ({exc})") from None
        return cls.from_dict(data, scenario=scenario, source=source)

    def save(self, path: str | Path) -> None:
        Path(path).write_text(self.to_json() + "\n", encoding="utf-8")

    @classmethod
    def load(cls, path: str | Path, *, scenario: str | None = None) -> Schedule:
        """Read a schedule file; any problem is a one-line :class:`ScheduleError`."""
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ScheduleError(f"{path}: cannot read schedule ({exc.__class__.__name__}: {exc})") from None
        return cls.from_json(text, scenario=scenario, source=str(path))


def load_schedule(path: str | Path, *, scenario: str | None = None) -> Schedule:
    """Read a schedule file (see :meth:`Schedule.load`)."""
    return Schedule.load(path, scenario=scenario)


def save_schedule(schedule: Schedule, path: str | Path) -> None:
    """Write a schedule file."""
    schedule.save(path)
