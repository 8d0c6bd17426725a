"""Every race cassette under ``cassettes/races/`` is a regression test: replaying its schedule on
the current implementation (the reference, or ``--loopkit-impl``) must satisfy every check."""

from __future__ import annotations

from pathlib import Path

import pytest

from conformance.impl import resolve
from conformance.scenario import race

CASSETTES = sorted((Path(__file__).parents[1] / "cassettes" / "races").glob("*.yaml"))


@pytest.mark.parametrize("path", CASSETTES, ids=lambda p: p.stem)
def test_race_cassette(path: Path, request: pytest.FixtureRequest) -> None:
    impl = resolve(request.config.getoption("--loopkit-impl", default=None))
    report = race.replay(race.load(path), impl)
    assert report.ok, report.trace.summary()


def test_the_seed_races_are_shipped() -> None:
    assert {p.stem for p in CASSETTES} >= {"window1", "window2"}


@pytest.mark.parametrize("path", CASSETTES, ids=lambda p: p.stem)
def test_race_cassette_still_reproduces_on_its_implementation(path: Path) -> None:
    # A cassette that no longer fails where it was found has lost its race: regenerate it.
    record = race.load(path)
    report = race.replay(record, resolve(record.impl))
    assert not report.ok, f"{path.name} no longer fails on {record.impl}"
    assert {c["check"] for c in record.failure["checks"]} <= {f["check"] for f in report.trace.failures}
