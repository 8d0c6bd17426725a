"""The seed's two races: explore finds each on its buggy loop (window 1 only through the
schedule), the cassette replays it, the reference passes; the same seed gives the same bytes."""

from __future__ import annotations

from pathlib import Path

import pytest

from conformance.impl import resolve
from conformance.scenario import engine, load
from conformance.scenario import race as cassette
from conformance.scenario import race as races

EXAMPLES = Path(__file__).parents[2] / "conformance" / "scenario" / "examples"
WINDOW1 = str(EXAMPLES / "window1.yaml")
WINDOW2 = str(EXAMPLES / "window2.yaml")


def test_window1_is_not_hand_picked_fifo_and_reference_pass() -> None:
    sc = load(WINDOW1)
    assert engine.run_one(sc, resolve("mutant:w1-release-with-replacement")).ok, "FIFO alone must not open window 1"
    found = engine.explore(sc, resolve(None), strategy="random", budget=150)
    assert found.failure is None and found.runs == 150


@pytest.mark.parametrize("strategy", ["random", "pct", "dfs"])
def test_explore_finds_window1_through_the_schedule(strategy: str) -> None:
    sc = load(WINDOW1)
    budget = 1000 if strategy == "dfs" else 300
    found = engine.explore(sc, resolve("mutant:w1-release-with-replacement"), strategy=strategy, budget=budget)
    assert found.failure is not None, f"{strategy} missed window 1 in {found.runs} schedules"
    assert found.failure.deviations, "the failing schedule deviates from FIFO"
    assert any(name.startswith("released_after_turn") for name, _ in found.failure.violations)


def test_explore_finds_window2_and_the_cassette_replays(tmp_path: Path) -> None:
    sc = load(WINDOW2)
    buggy = resolve("mutant:w2-settle-unconditionally")
    found = engine.explore(sc, buggy, strategy="random", budget=50)
    assert found.failure is not None and found.found_at == 1
    shrunk = engine.shrink(sc, buggy, found.failure)
    assert shrunk.schedule.deviations == 0
    path = tmp_path / "w2.yaml"
    races.save(cassette.build(sc, "mutant:w2-settle-unconditionally", found, shrunk), path)
    record = races.load(path)
    assert not cassette.replay(record, buggy).ok
    assert cassette.replay(record, resolve(None)).ok


def _cassette_bytes(tmp_path: Path, name: str, workers: int) -> bytes:
    sc = load(WINDOW1)
    impl = resolve("mutant:w1-release-with-replacement")
    found = engine.explore(sc, impl, strategy="random", budget=200, seed=3, workers=workers)
    assert found.failure is not None
    path = tmp_path / name
    races.save(cassette.build(sc, "mutant:w1-release-with-replacement", found, engine.shrink(sc, impl, found.failure)), path)
    return path.read_bytes()


def test_same_seed_same_cassette_bytes_whatever_the_workers(tmp_path: Path) -> None:
    first = _cassette_bytes(tmp_path, "a.yaml", 1)
    assert first == _cassette_bytes(tmp_path, "b.yaml", 1)
    assert first == _cassette_bytes(tmp_path, "c.yaml", 2)


def test_hypothesis_strategy_finds_window2() -> None:
    found = engine.explore(load(WINDOW2), resolve("mutant:w2-settle-unconditionally"), strategy="hypothesis", budget=20)
    assert found.failure is not None
    # Window 2 itself (the waiter released while B's turn was open), not some other failure.
    assert "released_after_turn(w, B)" in {name for name, _ in found.failure.violations}, found.failure.violations


def test_pct_reports_its_guarantee() -> None:
    found = engine.explore(load(WINDOW2), resolve(None), strategy="pct", budget=20)
    g = found.guarantee
    assert g is not None and g["runs"] == 20 and 0 < g["per_run"] <= g["probability"] < 1
