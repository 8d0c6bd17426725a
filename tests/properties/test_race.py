"""A generated scenario as a YAML scenario and a race cassette (``conformance.properties.race``)."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from cassettes import races
from conformance import mutants
from conformance.impl import resolve
from conformance.properties import (
    ListenerSpec,
    Op,
    PropScenario,
    Untranslatable,
    report,
    run_one,
    scenarios,
    to_yaml,
)
from conformance.properties.race import CASSETTE_DIR_ENV, violation_checks
from conformance.properties.translate import to_document
from conformance.properties.world import FLUSH_DELAY
from conformance.scenarios import cassette
from conformance.scenarios.yaml_format import load_text

# The window-2 race: a running-status listener cancels and replaces; three callers send.
WINDOW2 = PropScenario(
    actors=((Op("send"),), (Op("send"),), (Op("send"),)),
    listeners=(ListenerSpec("status:running", "cancel+send"),),
)


@pytest.fixture(autouse=True)
def _quiet_unawaited() -> Iterator[None]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        yield


@settings(max_examples=150, derandomize=True, database=None, deadline=None, suppress_health_check=list(HealthCheck))
@given(scenarios())
def test_every_generated_scenario_translates(scenario: PropScenario) -> None:
    text = to_yaml(scenario, "generated")
    loaded = load_text(text)  # valid YAML scenario: it loads without a validation error
    assert loaded.name == "generated"


def test_formerly_untranslatable_features() -> None:
    def listener(spec: ListenerSpec) -> dict[str, Any]:
        doc = to_document(PropScenario(actors=((Op("send"),),), listeners=(spec,)))
        load_text(to_yaml(PropScenario(actors=((Op("send"),),), listeners=(spec,))))
        found: dict[str, Any] = doc["listeners"][0]
        return found

    flush = listener(ListenerSpec("session/flush", "cancel"))
    assert flush["on"] == "session/flush" and flush["hold"] == FLUSH_DELAY and "nth" not in flush
    step_end = listener(ListenerSpec("agent/step-end", "send", nth=2))
    assert step_end["on"] == "agent/step-end" and step_end["nth"] == 2 and "where" not in step_end
    running = listener(ListenerSpec("status:running", "steer", nth=3))
    assert running["where"] == {"status": "running"} and running["nth"] == 3
    # The n-th turn-start is turn n's: a where filter says it.
    turn_start = listener(ListenerSpec("agent/turn-start", "steer", nth=2))
    assert turn_start["where"] == {"turn": 2} and "nth" not in turn_start
    # An actor's inject is awaited, as the property world's actor awaits it; a listener's is not.
    doc = to_document(PropScenario(actors=((Op("inject"),),), listeners=(ListenerSpec("agent/turn-end", "inject"),)))
    assert doc["actors"][0]["do"] == [{"inject": {"text": "a1.1", "wait": True}}]
    assert doc["listeners"][0]["do"] == [{"inject": "l1"}]
    # What the translation does not know still says so.
    with pytest.raises(Untranslatable, match="agent/queued"):
        to_yaml(PropScenario(actors=((Op("send"),),), listeners=(ListenerSpec("agent/queued", "cancel"),)))


def test_a_translated_flush_listener_acts_on_the_nth_flush() -> None:
    # The property world and its translation agree on which flush the listener acts on.
    scenario = PropScenario(actors=((Op("send"), Op("wait"), Op("send"), Op("wait"), Op("send")),),
                            listeners=(ListenerSpec("session/flush", "send", nth=2),))
    outcome = run_one(resolve(None), scenario)
    assert outcome.ok and outcome.observation is not None
    trace = load_text(to_yaml(scenario)).bind(resolve(None)).run(seed=0)
    assert trace.ok, trace.summary()
    log = [e for e in trace.timeline if e["kind"] == "log" and e["type"] == "user/message"]
    property_log = [e for e in outcome.observation.final_events if e["type"] == "user/message"]
    texts = [[b["text"] for b in e["data"]["content"]] for e in log]
    assert texts == [[b["text"] for b in e["data"]["content"]] for e in property_log]
    assert texts.index(["l1"]) == 2  # after the second flush (a1.3's turn may batch it)


def test_the_same_texts_in_both_worlds() -> None:
    outcome = run_one(resolve(None), WINDOW2)
    assert outcome.ok and outcome.observation is not None
    sent = {p.text for p in outcome.observation.prompts}
    assert sent == {"a1.1", "a2.1", "a3.1", "l1"}
    text = to_yaml(WINDOW2)
    assert all(f"send: {t}" in text for t in sent)


def test_violations_as_scenario_checks() -> None:
    found = violation_checks([
        "MARKER-1: prompt a1.2 (send by actor0 at moment 3) never ran, and no later cancel() or disposal dropped it",
        "CANCEL-2: prompt l1 (send by listener at moment 4) ran although a cancel() at moment 5 came before it started",
        "MARKER-1: turn 3 ends aborted but no cancel() or abort() came during it",
        "MARKER-1: turn 3 ends aborted but no cancel() or abort() came during it",
        "IDLE-2: when_idle() called by actor0 at moment 2 was released ...",
        "LOOP-2: turn 1 did not take prompt a1.3, queued before it started (it took a1.2, l1)",
        "LOOP-2: turn 2 did not take prompt a2.1, queued before it started (it took none)",
        "LOOP-2: prompt a1.1 (send by actor0) ran 2 times",
    ])
    assert found == [
        {"ran": "a1.2"},
        {"not_ran": "l1"},
        {"no_event": {"kind": "agent/turn-end", "where": {"turn": 3, "reason": "aborted"}}},
        {"same_turn": ["a1.2", "a1.3"]},
    ]


def test_report_writes_a_replayable_cassette(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CASSETTE_DIR_ENV, str(tmp_path))
    impl = mutants.get("marker-kept-in-window2")
    outcome = run_one(impl, WINDOW2)
    assert not outcome.ok
    message = report(impl, WINDOW2, outcome, "mutant:marker-kept-in-window2")
    assert "SCENARIO = PropScenario(" in message and "# race cassette: " in message
    written = sorted(tmp_path.glob("*.yaml"))
    assert len(written) == 1 and f"loopkit replay {written[0]} --impl mutant:marker-kept-in-window2" in message
    record = races.load(written[0])
    assert record.impl == "mutant:marker-kept-in-window2" and "yaml" in record.scenario  # inline, self-contained
    assert not cassette.replay(record, impl).ok
    assert cassette.replay(record, resolve(None)).ok
