"""Race cassettes: round trip, one-line errors, divergence."""

from __future__ import annotations

from pathlib import Path

import pytest

import simulator
from conformance.impl import resolve
from conformance.scenario import ScenarioError
from conformance.scenario import race as cassette
from conformance.scenario import race as races

SHIPPED = Path(__file__).parents[2] / "cassettes" / "races"


def test_round_trip_is_byte_identical(tmp_path: Path) -> None:
    record = races.load(SHIPPED / "window1.yaml")
    races.save(record, tmp_path / "again.yaml")
    assert (tmp_path / "again.yaml").read_text() == (SHIPPED / "window1.yaml").read_text()
    assert record.schedule.deviations >= 1 and record.failure["checks"]


@pytest.mark.parametrize(("edit", "message"), [
    (lambda t: t.replace("format: loopkit-race/1", "format: other"), ":1: format: not a race cassette"),
    (lambda t: t.replace("impl:", "implementation:"), "implementation: unknown field"),
    (lambda t: t.replace("  choices:", "  choices: 3\n  ignored:"), "schedule.ignored: unknown field"),
    (lambda t: t + "  - [oops\n", "YAML syntax error"),
])
def test_bad_cassettes_fail_in_one_line(tmp_path: Path, edit: object, message: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(edit((SHIPPED / "window1.yaml").read_text()))  # type: ignore[operator]
    with pytest.raises(races.RaceCassetteError) as err:
        races.load(path)
    assert "\n" not in str(err.value) and message in str(err.value), str(err.value)


def test_missing_cassette() -> None:
    with pytest.raises(races.RaceCassetteError, match="no such race cassette"):
        races.load("nowhere.yaml")


def test_inline_scenario_errors_name_the_cassette_line(tmp_path: Path) -> None:
    text = (SHIPPED / "window1.yaml").read_text()
    path = tmp_path / "bad.yaml"
    path.write_text(text.replace("      at: 0.5", "      at: later"))
    line = path.read_text().splitlines().index("      at: later") + 1
    with pytest.raises(ScenarioError, match=rf"bad.yaml:{line}: actors\[1\].at: expected a number"):
        cassette.scenario_of(races.load(path))


def test_a_schedule_that_no_longer_fits_diverges(tmp_path: Path) -> None:
    text = (SHIPPED / "window1.yaml").read_text().replace("'actor:racer:", "'actor:someone-else:", 1)
    path = tmp_path / "diverging.yaml"
    path.write_text(text)
    with pytest.raises(simulator.Divergence, match="diverged at choice 0"):
        cassette.replay(races.load(path), resolve(None))
