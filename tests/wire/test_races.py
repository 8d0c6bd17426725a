"""Races over the wire: explore finds the buggy variants' races and writes race cassettes that
replay (on the variant: the failure; on the fixed loop: every check holds); same seed, same bytes
(the wire transcript, the trace, the cassette, with one or two worker processes); an action can
land inside one run of the loop (``defer``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from _wire import JS_LOOP, MARKER_NOT_RESET, ROOT, requires_node

from conformance.harness import Kit, run_scenario
from conformance.impl import resolve
from conformance.scenario import engine, race
from conformance.scenario.model import load
from conformance.wire import WireImplementation
from simulator.strategies import RandomStrategy

pytestmark = requires_node

RACES = sorted((ROOT / "examples" / "js_loop" / "races").glob("*.yaml"))
CANCEL_AND_REPLACE = ROOT / "examples" / "js_loop" / "scenarios" / "cancel_and_replace.yaml"
WINDOW2 = ROOT / "conformance" / "scenario" / "examples" / "window2.yaml"


@pytest.fixture(autouse=True)
def _at_the_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)  # the shipped cassettes name their implementation relative to it


@pytest.mark.parametrize("path", RACES, ids=lambda p: p.stem)
def test_a_shipped_race_fails_on_its_variant_and_holds_on_the_loop(path: Path) -> None:
    record = race.load(path)
    assert record.impl_info["kind"] == "wire" and record.impl_info["runtime"] == "node"
    failing = race.replay(record, resolve(record.impl))
    assert not failing.ok
    assert {c["check"] for c in record.failure["checks"]} <= {f["check"] for f in failing.trace.failures}
    assert race.replay(record, resolve(f"wire:{JS_LOOP}")).ok


def test_explore_finds_a_race_fifo_misses_and_the_cassette_is_canonical(tmp_path: Path) -> None:
    scenario = load(str(CANCEL_AND_REPLACE))
    variant = resolve(f"wire:{MARKER_NOT_RESET}")
    assert engine.run_one(scenario, variant).ok, "plain order does not open the race"
    written = []
    for workers in (1, 2):
        found = engine.explore(scenario, variant, budget=100, workers=workers)
        assert found.failure is not None and found.found_at is not None and found.found_at > 1
        shrunk = engine.shrink(scenario, variant, found.failure)
        target = tmp_path / f"w{workers}.yaml"
        race.save(race.build(scenario, "wire:variant", found, shrunk, impl_info=race.info_of(variant)), target)
        written.append(target.read_bytes())
    assert written[0] == written[1], "the same seed gives the same cassette, whatever the worker count"
    replayed = race.replay(race.load(tmp_path / "w1.yaml"), variant)
    assert not replayed.ok and "MARKER-1" in {f["check"] for f in replayed.trace.failures}


def test_same_seed_same_bytes_on_the_wire() -> None:
    scenario = load(str(WINDOW2))
    runs = []
    for impl in (WireImplementation(JS_LOOP, transcript=True), WireImplementation(JS_LOOP, transcript=True)):
        for _ in range(2):  # the same child twice, then a fresh child
            report = engine.run_one(scenario, impl, RandomStrategy(), 7)
            runs.append(("\n".join(impl.transcript()), report.trace.to_json()))
        impl.close()
    assert all(run == runs[0] for run in runs)
    transcript = runs[0][0]
    assert '"op":"reset","args":{"seed":7}' in transcript.splitlines()[1]


def test_a_runtime_version_change_is_warned_about() -> None:
    record = race.load(RACES[0])
    impl = resolve(record.impl)
    assert race.runtime_warning(record, impl) is None
    record.impl_info = {**record.impl_info, "runtime_version": "0.0.1"}
    assert "recorded on node 0.0.1" in str(race.runtime_warning(record, impl))
    assert "runs in-process" in str(race.runtime_warning(record, resolve(None)))


def _reasons_with_cancel_deferred(ticks: int) -> list[str]:
    out: list[str] = []

    async def body(k: Kit) -> None:
        a = k.agent()
        await k.settle()
        a.send("A")
        performed = a.defer(ticks, "cancel", "deferred")  # type: ignore[attr-defined]
        await k.idle(a)
        await performed
        out.extend(f"{r['kind']}:{r.get('reason', '')}" for r in k.reasons(a))
        out.append(f"calls:{len(k.model.requests)}")

    run_scenario(resolve(f"wire:{JS_LOOP}"), body)
    return out


def test_defer_lands_an_action_inside_one_run() -> None:
    # Between two runs the cancel lands in window 1 (A never starts); a few microtask hops into
    # the run it lands once the turn is open, before or after the model call. The hop counts
    # are V8's (they may move between Node versions); the order of the windows does not.
    assert _reasons_with_cancel_deferred(0) == ["calls:0"]
    assert _reasons_with_cancel_deferred(1000) == ["aborted:deferred", "calls:1"]
    outcomes = [_reasons_with_cancel_deferred(k) for k in range(12)]
    assert outcomes == sorted(outcomes, key=lambda o: (o != ["calls:0"], o[-1]))
    assert ["aborted:deferred", "calls:0"] in outcomes, "some hop count lands before the model call"
    assert _reasons_with_cancel_deferred(2) == _reasons_with_cancel_deferred(2)


def test_observers_are_batched_listeners_are_round_trips() -> None:
    impl = WireImplementation(JS_LOOP, transcript=True)
    report = engine.run_one(load(str(WINDOW2)), impl)
    assert report.ok
    lines = impl.transcript()
    impl.close()
    notify = [line for line in lines if '"ev":"notify"' in line]
    requests = [line for line in lines if '"type":"request"' in line]
    assert notify, "the world's recorders travel as events"
    # The scenario's one acting listener (the canceller on agent/status) is the only listener
    # round trip; the only other request asks for the session id's uuid.
    assert {line.split('"op":"')[1].split('"')[0] for line in requests} == {"listener", "uuid"}
    # Registrations are posted (they travel with the next call), and the model call is an event.
    assert not any('"type":"call"' in line and '"op":"on"' in line for line in lines)
    assert any('"type":"post"' in line and '"op":"on"' in line for line in lines)
    assert any('"ev":"stream"' in line for line in lines)
    # The canceller acts once and removes itself (a one-shot listener): one round trip, then an
    # `unregister`; the listener counting what comes after it is passive.
    assert sum('"op":"listener"' in line for line in requests) == 1
    assert any('"op":"unregister"' in line for line in lines)


SCENARIOS = sorted((ROOT / "examples" / "js_loop" / "scenarios").glob("*.yaml"))


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.stem)
def test_the_js_scenarios_hold_on_the_loop_and_the_reference(path: Path) -> None:
    # Two of them were found by the property search on early versions of the JS loop (a cancel
    # while a turn flushed leaked into the next turn; steering added in window 2 was stranded).
    scenario = load(str(path))
    for impl in (resolve(f"wire:{JS_LOOP}"), resolve(None)):
        for seed in range(3):
            report = engine.run_one(scenario, impl, RandomStrategy() if seed else None, seed)
            assert report.ok, f"{impl.name}, seed {seed}: {report.trace.failures}"


def test_a_late_listener_of_an_inject_flush_is_judged_as_that_turns_failure() -> None:
    # A hunt (--explore-all) race of the inject workload on the JS loop: its idle inject's flush,
    # left scheduled (INJ-4), ran its listener over the wire after the next driver turn's flush
    # and after when_idle() released; the loop announced the failure as the one-shot turn's
    # (turn 1, step 0), which the ANNOUNCED oracle once read as the driver turn's, too late.
    record = race.load(Path(__file__).parent / "races" / "overlapping-flushes.yaml")
    assert record.failure["checks"][0]["check"] == "ANNOUNCED"  # what the oracle said before
    replayed = race.replay(record, resolve(f"wire:{JS_LOOP}"))
    assert replayed.ok, replayed.trace.failure_messages()
    errors = [(e["turn"], e["step"]) for e in replayed.trace.timeline if e["kind"] == "agent/error"]
    assert errors == [(1, 0)]
