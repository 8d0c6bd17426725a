"""The YAML scenario format: examples load; malformed files fail in one line naming line and field."""

from __future__ import annotations

from pathlib import Path

import pytest

from conformance.scenarios import ScenarioError, load
from conformance.scenarios.yaml_format import load_text

EXAMPLES = sorted((Path(__file__).parents[2] / "conformance" / "scenarios" / "examples").glob("*.yaml"))

GOOD = """\
name: demo
model: ["hi"]
actors:
  - at: 0
    do: [{send: A}]
"""


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_examples_load_and_pass_on_the_reference(path: Path) -> None:
    from conformance.impl import resolve

    scenario = load(str(path))
    trace = scenario.bind(resolve(None)).run(seed=0)
    assert trace.ok, trace.summary()


def test_on_is_a_field_name_not_a_boolean() -> None:
    sc = load_text(GOOD + "listeners:\n  - on: agent/status\n    do: [{cancel: x}]\n")
    assert sc.name == "demo"


BAD = [
    ("actors:\n  - at: 0\n    do: [{send: A}]\n", 1, "missing required field 'name'"),
    (GOOD + "colour: red\n", 6, "colour: unknown field"),
    (GOOD.replace("{send: A}", "{shout: A}"), 5, "actors[0].do[0].shout: unknown action 'shout'"),
    (GOOD.replace("at: 0", "at: soon"), 4, "actors[0].at: expected a number, got a string"),
    (GOOD.replace("{send: A}", "{send: {text: A, agent: zed}}"), 5, "unknown agent 'zed'"),
    (GOOD + "listeners:\n  - on: agent/statuz\n    do: [{cancel: x}]\n", 7, "unknown event 'agent/statuz'"),
    (GOOD + "listeners:\n  - on: agent/status\n    where: {colour: red}\n    do: [{cancel: x}]\n", 8,
     "agent/status has no field 'colour'"),
    (GOOD + "listeners:\n  - on: agent/status\n    do: [{sleep: 1}]\n", 8, "unknown action 'sleep' in a listener"),
    (GOOD + "checks:\n  - released_after_turn: {waiter: w}\n", 7, "missing required field 'prompt'"),
    (GOOD + "checks:\n  - eventually: x\n", 7, "unknown check 'eventually'"),
    (GOOD.replace('["hi"]', "[{text: hi, error: boom}]"), 2, "exactly one of"),
    (GOOD.replace("{send: A}", "{wait_idle: nope}"), 5, "no when_idle registers a waiter named 'nope'"),
    ("name: x\nmodel: [\n", 3, "YAML syntax error"),
    (GOOD + "agents: [{id: a, model: gpt}]\n", 6, "uses model 'gpt'"),
]


@pytest.mark.parametrize(("text", "line", "message"), BAD)
def test_malformed_scenarios_name_line_and_field(text: str, line: int, message: str) -> None:
    with pytest.raises(ScenarioError) as err:
        load_text(text, origin="s.yaml")
    text_ = str(err.value)
    assert "\n" not in text_
    assert text_.startswith(f"s.yaml:{line}: "), text_
    assert message in text_


def test_missing_file_and_bad_reference() -> None:
    with pytest.raises(ScenarioError, match="no such scenario file"):
        load("nowhere/missing.yaml")
    with pytest.raises(ScenarioError, match="not a scenario file"):
        load("justaword")
    with pytest.raises(ScenarioError, match="cannot import"):
        load("no_such_module_xyz:thing")
    with pytest.raises(ScenarioError, match="not a scenario"):
        load("conformance.scenarios.checks:INVARIANTS")
