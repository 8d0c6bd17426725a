"""Fuzzing the scenario format, the race cassette format and baselines (issue 13's input
contract): NaN, infinities, negative and absurd numbers, wrong types, deep nesting, unknown
references (agents, waiters, listener names, statuses), unknown fields and scenario/cassette
mix-ups.

Hypothesis applies mutations to the shipped scenarios and race cassettes, each known to keep
the document valid or to break it. The oracle is which kind was applied: loading succeeds
exactly when every mutation kept the document valid, and otherwise raises the format's one-line
error naming the file (and the line where there is one); never another exception. A sample
goes through the command line too (``loopkit run`` / ``loopkit replay``): exit 2 and one line on
stderr, never a traceback, never exit 0. CI-sized and derandomized.
"""

from __future__ import annotations

import copy
import math
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from cli import app
from conformance.baseline import BaselineError, parse
from conformance.scenario import race
from conformance.scenario.model import ScenarioError
from conformance.scenario.yaml_format import load_text

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "conformance" / "scenario" / "examples"


def _on(value: Any) -> Any:
    """YAML 1.1 reads the key ``on:`` as ``True`` in plain data: put it back (the format's
    reader composes nodes and sees the text)."""
    if isinstance(value, dict):
        return {("on" if key is True else key): _on(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_on(item) for item in value]
    return value


SCENARIOS = {p.name: _on(yaml.safe_load(p.read_text())) for p in sorted(EXAMPLES.glob("*.yaml"))}
RACES = {p.name: _on(yaml.safe_load(p.read_text())) for p in sorted((ROOT / "cassettes" / "races").glob("*.yaml"))}
SETTINGS = settings(max_examples=100, derandomize=True, database=None, deadline=None,
                    suppress_health_check=list(HealthCheck))

BAD_SECONDS = [math.nan, math.inf, -math.inf, -1.0, 1e12, "soon", [1], {"a": 1}, None, True]
BAD_COUNTS = [0, -3, 1.5, math.nan, "two", [2], None]
BAD_TEXT = [5, [1, 2], {"a": 1}, None, 1.5]


def _deep(levels: int) -> str:
    """A marker that ``_dump`` writes as ``levels`` nested flow lists (PyYAML cannot dump them)."""
    return f"DEEP-{levels}"


def _dump(doc: Any) -> str:
    text = yaml.safe_dump(doc, sort_keys=False, allow_unicode=True, width=10_000)
    return re.sub(r"DEEP-(\d+)", lambda m: "[" * int(m.group(1)) + "x" + "]" * int(m.group(1)), text)


def _dicts(value: Any) -> list[dict[str, Any]]:
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def _paths(doc: dict[str, Any]) -> dict[str, list[tuple[Any, Any]]]:
    """Where a scenario has fields of each kind: (container, key) pairs (earlier mutations may
    have broken its shape: only what is still there)."""
    found: dict[str, list[tuple[Any, Any]]] = {"seconds": [], "count": [], "text": [], "waiter": []}
    for actor in _dicts(doc.get("actors")):
        if "at" in actor:
            found["seconds"].append((actor, "at"))
        for action in _dicts(actor.get("do")):
            if "sleep" in action:
                found["seconds"].append((action, "sleep"))
            for verb in ("send", "steer"):
                if isinstance(action.get(verb), str):
                    found["text"].append((action, verb))
            if "wait_idle" in action:
                found["waiter"].append((action, "wait_idle"))
    for listener in _dicts(doc.get("listeners")):
        found["count"].append((listener, "nth"))
        for action in _dicts(listener.get("do")):
            for verb in ("send", "steer"):
                if isinstance(action.get(verb), str):
                    found["text"].append((action, verb))
    for response in _dicts(doc.get("model")):
        found["seconds"].append((response, "delay"))
    tools = doc.get("tools")
    for tool in tools.values() if isinstance(tools, dict) else []:
        if isinstance(tool, dict):
            found["seconds"].append((tool, "latency"))
    if isinstance(doc.get("limits", {}), dict):
        limits = doc.setdefault("limits", {})
        found["seconds"] += [(limits, "max_time"), (limits, "idle_timeout")]
        found["count"].append((limits, "max_steps"))
    for check in _dicts(doc.get("checks")):
        if isinstance(check.get("released_after_turn"), dict):
            found["waiter"].append((check["released_after_turn"], "waiter"))
    return found


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[str, dict[str, Any], bool]:
    """(example name, mutated document, still valid?)."""
    name = draw(st.sampled_from(sorted(SCENARIOS)))
    doc = copy.deepcopy(SCENARIOS[name])
    valid = True
    for _ in range(draw(st.integers(1, 3))):
        paths = _paths(doc)
        kind = draw(st.sampled_from(["rename", "describe", "optional", "seconds", "count", "text", "waiter",
                                     "agent", "status", "listener-ref", "unknown-field", "top-type", "deep",
                                     "race-doc"]))
        if kind == "rename":
            doc["name"] = draw(st.text("abcdef-_", min_size=1, max_size=8))
        elif kind == "describe":
            doc["description"] = draw(st.text(max_size=20))
        elif kind == "optional" and _dicts(doc.get("listeners")):
            draw(st.sampled_from(_dicts(doc["listeners"])))["optional"] = True
        elif kind in ("seconds", "count", "text") and paths[kind]:
            container, key = draw(st.sampled_from(paths[kind]))
            bad = {"seconds": BAD_SECONDS, "count": BAD_COUNTS, "text": BAD_TEXT}[kind]
            container[key] = draw(st.sampled_from(bad))
            valid = False
        elif kind == "waiter" and paths["waiter"]:
            container, key = draw(st.sampled_from(paths["waiter"]))
            container[key] = "no-such-waiter"
            valid = False
        elif kind == "agent" and _dicts(doc.get("listeners")):
            listener = draw(st.sampled_from(_dicts(doc["listeners"])))
            listener["where"] = {**(listener.get("where") if isinstance(listener.get("where"), dict) else {}),
                                 "agent": "ghost"}
            valid = False
        elif kind == "status" and _dicts(doc.get("listeners")):
            listener = draw(st.sampled_from(_dicts(doc["listeners"])))
            listener["on"] = "agent/status"
            listener["where"] = {"status": draw(st.sampled_from(["runing", "done", "", "IDLE"]))}
            listener.pop("when", None)
            valid = False
        elif kind == "listener-ref" and _dicts(doc.get("actors")):
            actor = draw(st.sampled_from(_dicts(doc["actors"])))
            actor.pop("at", None)
            actor["after"] = {"event": "listener", "where": {"name": "no-such-listener"}}
            valid = False
        elif kind == "unknown-field":
            doc[draw(st.sampled_from(["modle", "actor", "check", "format_"]))] = 1
            valid = False
        elif kind == "top-type":
            doc[draw(st.sampled_from(["name", "actors", "listeners", "checks", "agents", "limits"]))] = \
                draw(st.sampled_from([5, "x", [1], {"a": 1}, None, math.nan]))
            valid = False
        elif kind == "deep":
            doc[draw(st.sampled_from(["actors", "model", "checks"]))] = _deep(draw(st.integers(70, 3000)))
            valid = False
        elif kind == "race-doc":
            doc = {"format": "loopkit-race/1", **doc}
            valid = False
    return name, doc, valid


def _one_line(message: str, origin: str) -> None:
    assert "\n" not in message.strip(), message
    assert message.startswith(f"{origin}:"), message


@SETTINGS
@given(scenarios())
def test_scenario_loads_exactly_when_valid(case: tuple[str, dict[str, Any], bool]) -> None:
    name, doc, valid = case
    text = _dump(doc)
    try:
        load_text(text, origin=name)
    except ScenarioError as exc:
        assert not valid, f"a valid scenario was rejected: {exc}"
        _one_line(str(exc), name)
    else:
        assert valid, f"garbage accepted:\n{text}"


def _race_breakers() -> list[tuple[str, Any]]:
    return [
        ("schedule.mode", None), ("schedule.mode", "sideways"), ("schedule.seed", math.nan),
        ("schedule.seed", "x"), ("schedule.timer_window", -1.0), ("schedule.timer_window", math.inf),
        ("schedule.vary_timers", "yes"), ("schedule.choices", 5), ("schedule.choices", [[1, 2, 3, 4, 5, 6]]),
        ("schedule", [1]), ("deviations", True), ("deviations", [1, 2]), ("trace", 5), ("found", [1]),
        ("shrink", "x"), ("failure", 7), ("name", [1]), ("impl", None), ("format", "loopkit-race/9"),
        ("scenario", 5), ("scenario", "name: [unclosed"), ("scenario", {"python": 5}), ("extra", 1),
        ("trace", _deep(400)),
    ]


@SETTINGS
@given(st.sampled_from(sorted(RACES)), st.lists(st.sampled_from(_race_breakers()), max_size=2))
def test_race_cassette_loads_exactly_when_valid(tmp_path_factory: Any, name: str, breakers: list[tuple[str, Any]]) -> None:
    doc = copy.deepcopy(RACES[name])
    for path, value in breakers:
        head, _, tail = path.partition(".")
        if tail:
            if not isinstance(doc.get(head), dict):
                continue
            doc[head][tail] = value
        else:
            doc[head] = value
    target = tmp_path_factory.mktemp("race") / name
    target.write_text(_dump(doc))
    try:
        record = race.load(target)
        race.scenario_of(record)
    except (race.RaceCassetteError, ScenarioError) as exc:
        assert breakers, f"a shipped cassette was rejected: {exc}"
        _one_line(str(exc), str(target))
    else:
        assert not breakers, f"garbage accepted: {breakers}"


@SETTINGS
@given(st.lists(st.one_of(st.sampled_from(["CANCEL-W2", "IDLE-2", "# comment", "", "  LOOP-2  # x",
                                           "test_loop.py::test_burst_is_one_turn[fifo]"]),
                          st.text(max_size=30)), max_size=6))
def test_baseline_parses_or_names_the_line(lines: list[str]) -> None:
    text = "\n".join(lines)
    try:
        parse(text, path="b.txt")
    except BaselineError as exc:
        assert str(exc).startswith("b.txt:") and "\n" not in str(exc)


@pytest.mark.parametrize("case", list(range(40)))
def test_the_command_line_says_one_line_and_exits_2(tmp_path: Path, case: int) -> None:
    # A sample of broken scenarios (derandomized: the case number picks it) through `loopkit run`.
    import random

    rng = random.Random(case)
    name = rng.choice(sorted(SCENARIOS))
    doc = copy.deepcopy(SCENARIOS[name])
    paths = _paths(doc)
    kind = rng.choice(["seconds", "count", "waiter", "deep", "race-doc"])
    if kind in ("seconds", "count") and paths[kind]:
        container, key = rng.choice(paths[kind])
        container[key] = rng.choice(BAD_SECONDS if kind == "seconds" else BAD_COUNTS)
    elif kind == "waiter" and paths["waiter"]:
        container, key = rng.choice(paths["waiter"])
        container[key] = "no-such-waiter"
    elif kind == "deep":
        doc["actors"] = _deep(1000)
    else:
        doc = {"format": "loopkit-race/1", **doc}
    path = tmp_path / name
    path.write_text(_dump(doc))
    for command in (["run", str(path)], ["replay", str(path)]):
        result = CliRunner().invoke(app, command)
        output = result.output
        assert result.exit_code == 2, (command, output)
        lines = [line for line in output.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith(f"error: {path}"), output
        assert "Traceback" not in output


def _laughs(levels: int) -> str:
    """A "billion laughs": each anchor a list of ten aliases of the one before (553 bytes at
    ten levels, 10^10 values once expanded)."""
    lines = ["name: laughs", 'a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"a{i}: &a{i} [{','.join([f'*a{i - 1}'] * 10)}]" for i in range(1, levels)]
    return "\n".join([*lines, f"model: *a{levels - 1}", ""])


@pytest.mark.parametrize("kind", ["scenario", "cassette"])
def test_an_alias_bomb_is_refused_at_once(tmp_path: Path, kind: str) -> None:
    # The readers walked every expanded value: ten levels of ten aliases never finished.
    path = tmp_path / "laughs.yaml"
    path.write_text(("format: loopkit-race/1\n" if kind == "cassette" else "") + _laughs(10))
    result = CliRunner().invoke(app, ["run" if kind == "scenario" else "replay", str(path)])
    assert result.exit_code == 2, result.output
    assert result.output.strip() == f"error: {path}:1: holds more than 1,000,000 values once its aliases are expanded"


def test_aliases_within_the_bound_still_load() -> None:
    from conformance.scenario.yaml_reader import parse as compose

    assert compose(_laughs(4), "few.yaml").is_map()  # 10^4 values
    with pytest.raises(ScenarioError, match=r"^self\.yaml:1: nested deeper than 64 levels$"):
        compose("a: &a [*a]\n", "self.yaml")  # an alias inside its own anchor never ends
