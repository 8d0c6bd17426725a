"""Schedules as JSON artifacts."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_strategies import lost_update

import simulator
from simulator.strategies import RandomStrategy


def test_roundtrip_and_replay(tmp_path: Path) -> None:
    prog = lost_update(3, 2, True)
    r = simulator.run(prog, strategy=RandomStrategy(), seed=11, scenario="lost-update")
    path = tmp_path / "s.json"
    simulator.save_schedule(r.schedule, path)
    loaded = simulator.load_schedule(path, scenario="lost-update")
    assert loaded == r.schedule
    assert all(c.label for c in loaded.choices)
    again = simulator.replay(prog, loaded)
    assert again.trace_json() == r.trace_json()


@pytest.mark.parametrize("content, needle", [
    ("not json {", "not JSON"),
    ('{"format": "something-else"}', "not a loopkit schedule"),
    ('{"format": "loopkit-schedule/1", "scenario": "other", "choices": []}', "scenario 'other'"),
    ('{"format": "loopkit-schedule/1", "choices": [[1]]}', "malformed"),
])
def test_bad_schedule_file_is_one_line_error(tmp_path: Path, content: str, needle: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(simulator.ScheduleError) as info:
        simulator.load_schedule(path, scenario="lost-update")
    msg = str(info.value)
    assert needle in msg and "\n" not in msg and str(path) in msg


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(simulator.ScheduleError, match="cannot read"):
        simulator.load_schedule(tmp_path / "nope.json")
