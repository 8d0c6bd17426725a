"""A generated scenario as a YAML scenario and a race cassette (``conformance.properties.race``)."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from pathlib import Path

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
def test_every_generated_scenario_translates_or_says_why(scenario: PropScenario) -> None:
    try:
        text = to_yaml(scenario, "generated")
    except Untranslatable as exc:
        assert "session/flush" in str(exc) or "th " in str(exc)
        return
    loaded = load_text(text)  # valid YAML scenario: it loads without a validation error
    assert loaded.name == "generated"


def test_untranslatable_features() -> None:
    for listener in (ListenerSpec("session/flush", "cancel"), ListenerSpec("agent/step-end", "send", nth=2)):
        with pytest.raises(Untranslatable):
            to_yaml(PropScenario(actors=((Op("send"),),), listeners=(listener,)))
    # The n-th turn-start is turn n's: a where filter says it.
    text = to_yaml(PropScenario(actors=((Op("send"),),), listeners=(ListenerSpec("agent/turn-start", "steer", nth=2),)))
    assert "turn: 2" in text


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
    ])
    assert found == [
        {"ran": "a1.2"},
        {"not_ran": "l1"},
        {"no_event": {"kind": "agent/turn-end", "where": {"turn": 3, "reason": "aborted"}}},
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
