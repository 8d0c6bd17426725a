"""The YAML scenario format: examples load; malformed files fail in one line naming line and field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from conformance.scenario import Scenario, ScenarioError, load
from conformance.scenario.yaml_format import load_text

EXAMPLES = sorted((Path(__file__).parents[2] / "conformance" / "scenario" / "examples").glob("*.yaml"))

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
    from conformance.scenario import engine

    report = engine.run_one(load(str(path)), resolve(None))
    assert report.ok, report.trace.summary()


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
    (GOOD.replace('["hi"]', "[{raises: x, raise_after: 1, raise_on_call: true}]"), 2,
     "model[0].raise_on_call: raise_on_call has no position"),
    (GOOD.replace('["hi"]', "[{text: hi, raise_on_call: true}]"), 2, "raise_on_call goes with raises: MESSAGE alone"),
    (GOOD + "record_continuations: maybe\n", 6, "record_continuations: expected"),
    (GOOD.replace("{send: A}", "{wait_idle: nope}"), 5, "no when_idle registers a waiter named 'nope'"),
    ("name: x\nmodel: [\n", 3, "YAML syntax error"),
    (GOOD + "agents: [{id: a, model: gpt}]\n", 6, "uses model 'gpt'"),
    (GOOD + "listeners:\n  - on: agent/status\n    nth: 0\n    do: [{cancel: x}]\n", 8,
     "listeners[0].nth: must be >= 1, got 0"),
    (GOOD + "listeners:\n  - on: agent/status\n    nth: two\n    do: [{cancel: x}]\n", 8,
     "listeners[0].nth: expected an integer"),
    (GOOD + "listeners:\n  - on: agent/status\n    hold: 1\n    do: [{cancel: x}]\n", 8,
     "listeners[0].hold: hold goes with on: session/flush (a slow flush) or a waterfall"),
    (GOOD + "listeners:\n  - on: session/flush\n    hold: soon\n    do: [{cancel: x}]\n", 8,
     "listeners[0].hold: expected a number"),
    (GOOD + "listeners:\n  - on: session/flush\n    where: {turn: 1}\n    do: [{cancel: x}]\n", 8,
     "session/flush has no field 'turn'"),
    (GOOD + "listeners:\n  - on: agent/status\n    do: [{inject: {text: I, wait: true}}]\n", 8,
     "listeners[0].do[0].inject.wait: an inject in a listener cannot wait"),
    (GOOD.replace("{send: A}", "{inject: {text: I, wait: yes please}}"), 5, "do[0].inject.wait: expected true or false"),
    (GOOD.replace("{send: A}", "{inject: {text: I, later: true}}"), 5, "do[0].inject.later: unknown field"),
    (GOOD.replace("{send: A}", "{send: {text: I, wait: true}}"), 5, "do[0].send.wait: unknown field"),
    (GOOD + "checks:\n  - same_turn: [A]\n", 7, "checks[0].same_turn: same_turn needs at least two prompts"),
    (GOOD + "checks:\n  - same_turn: {prompts: [A, B], agent: zed}\n", 7, "unknown agent 'zed'"),
    (GOOD + "checks:\n  - same_turn: {agent: a}\n", 7, "missing required field 'prompts'"),
    (GOOD.replace("{send: A}", "{send: {text: A, source: plugin}}"), 5, "a source is a mapping"),
    (GOOD.replace("{send: A}", "{send: {text: A, source: {kind: robot}}}"), 5, "a source has kind user, plugin or agent"),
    (GOOD.replace("{send: A}", "{send: {text: A, source: {kind: plugin}}}"), 5, "a source of kind plugin needs 'plugin'"),
    (GOOD + "listeners:\n  - on: agent/status\n    times: always\n", 7, "missing required field 'do'"),
    (GOOD + "listeners:\n  - on: session/flush\n    times: always\n", 7, "only a listener with hold"),
    (GOOD.replace("{send: A}", "{close: now}"), 5, "do[0].close: close takes no argument"),
    (GOOD.replace("{send: A}", "{stop: null}"), 5, "unknown action 'stop'"),
    (GOOD + "listeners:\n  - on: agent/status\n    do: [{stop: null}]\n", 8,
     "stop is a vote of an agent/turn-continuation listener"),
    (GOOD + "listeners:\n  - on: agent/turn-continuation\n    do: [{stop: now}]\n", 8, "stop takes no argument"),
    (GOOD.replace("{send: A}", "{answer: null}"), 5, "unknown action 'answer'"),
    (GOOD + "listeners:\n  - on: agent/request\n    do: [{answer: null}]\n", 8,
     "answer is a tools/execute listener's own result"),
    (GOOD + "listeners:\n  - on: tools/execute\n    do: [{answer: yes}]\n", 8, "answer takes no argument"),
    (GOOD + "listeners:\n  - on: agent/status\n    rewrite: {call_id: x}\n", 8,
     "listeners[0].rewrite: rewrite (fields of the value next() returned) goes with a waterfall"),
    (GOOD + "listeners:\n  - on: tools/execute\n    rewrite: {}\n", 8, "rewrite needs at least one field"),
    (GOOD + "listeners:\n  - on: agent/request\n    edit: {call_id: x}\n", 8,
     "listeners[0].edit: edit (fields set in place on the execution before next()) goes with on: tools/execute, when: before"),
    (GOOD + "listeners:\n  - on: tools/execute\n    when: after\n    edit: {call_id: x}\n", 9, "goes with on: tools/execute, when: before"),
    (GOOD + "listeners:\n  - on: tools/execute\n    edit: {}\n", 8, "edit needs at least one field"),
    (GOOD + "agents: [{id: a, history: [H1]}]\n", 6, "agents[0].history: a history needs a session to resume"),
    (GOOD + "agents: [{id: a, resume: [s]}]\n", 6, "agents[0].resume: expected a string"),
    (GOOD + "agents: [{id: a, resume: s, configured: true}]\n", 6, "an agent is configured or resumed, not both"),
    # session 58's probe: each ran, and failed or crashed in the run instead
    (GOOD + "agents: ['']\n", 6, "agents[0]: an agent id cannot be empty"),
    (GOOD + "agents: [{id: ' '}]\n", 6, "agents[0].id: an agent id cannot be empty"),
    (GOOD + "tools:\n  '': {result: x}\n", 7, "a tool needs a name"),
    (GOOD.replace("{send: A}", "{when_idle: w}, {when_idle: w}"), 4, "a waiter named 'w' is registered twice"),
    (GOOD + "? [a, b]\n: 1\n", 6, "keys must be strings, got a list"),
    (GOOD + "limits: {max_time: '1e3'}\n", 6, "limits.max_time: expected a number, got a string"),
    (GOOD.replace("at: 0", "at: 4000") + "limits: {max_time: 3600}\n", 4,
     "actors[0].at: 4000 is not before the scenario's limits.max_time (3600 seconds)"),
    (GOOD + "agents: [" + ", ".join(f"a{i}" for i in range(1001)) + "]\n", 6, "1,001 agents: a scenario has at most 1,000"),
    # an event kind nothing records: an actor that never starts, a check that never holds
    (GOOD + "  - after: agent/turnstart\n    do: [{cancel: x}]\n", 6,
     "actors[1].after: unknown event kind 'agent/turnstart' (did you mean 'agent/turn-start'?"),
    (GOOD + "  - after: {event: waiter/release}\n    do: [{cancel: x}]\n", 6,
     "actors[1].after.event: unknown event kind 'waiter/release' (did you mean 'waiter/released'?"),
    (GOOD.replace("{send: A}", "{wait_for: {event: agent/done}}"), 5,
     "actors[0].do[0].wait_for.event: unknown event kind 'agent/done'"),
    (GOOD + "checks:\n  - event: {kind: tool/started}\n", 7,
     "checks[0].event.kind: unknown event kind 'tool/started' (did you mean 'tool/start'?"),
    (GOOD + "checks:\n  - no_event: {kind: zzz}\n", 7,
     "unknown event kind 'zzz' (the timeline's kinds are listed in docs/scenarios.md)"),
    (GOOD + "checks:\n  - before: {first: {kind: agent/status}, then: {kind: agent/stats}}\n", 7,
     "checks[0].before.then.kind: unknown event kind 'agent/stats'"),
]


def test_a_raise_on_call_and_an_unrecorded_continuation_round_trip() -> None:
    # FINISH-2's raise from stream() itself, and a scenario whose world leaves the continuation
    # waterfall alone (the hunt's race cassettes store their scenario as YAML: both must survive)
    from conformance.scenario.yaml_format import dump

    sc = load_text(GOOD.replace('["hi"]', "[{raises: down, code: E, raise_on_call: true}]") + "record_continuations: false\n")
    assert sc.models[0].script[0].raise_on_call and not sc.record_continuations
    again = load_text(dump(sc))
    assert again.models[0].script[0].raise_on_call and not again.record_continuations
    assert "record_continuations" not in dump(load_text(GOOD))


def test_an_editing_tool_plugin_round_trips() -> None:
    # TOOL-4's plugin that sets a call's id in place before next(): a race cassette of the
    # tool-plugin workload stores it
    from conformance.scenario.yaml_format import dump

    sc = load_text(GOOD + "listeners:\n  - on: tools/execute\n    times: always\n    edit: {call_id: x}\n")
    assert sc.listeners[0].edit == {"call_id": "x"} and sc.listeners[0].do == ()
    assert load_text(dump(sc)).listeners[0].edit == {"call_id": "x"}


def test_a_number_in_exponent_form_is_a_number() -> None:
    # YAML 1.1 reads an unquoted 1e3 as text ("expected a number, got a string"); YAML 1.2 and
    # every reader of it take it for the number it is
    assert load_text(GOOD + "limits: {max_time: 1e3, idle_timeout: 2.5E+1}\n").limits.max_time == 1000.0


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
        load("conformance.scenario.checks:ORACLES")


def _run(text: str) -> list[dict[str, Any]]:
    from conformance.impl import resolve
    from conformance.scenario import engine

    report = engine.run_one(load_text(text), resolve(None))
    assert report.ok, report.trace.summary()
    return list(report.trace.timeline)


def _read_back_and_run(text: str) -> tuple[Scenario, list[dict[str, Any]]]:
    """The scenario ``text`` loads to, once its dump reads back to itself, and its timeline on
    the reference (whose checks all hold)."""
    from conformance.scenario.yaml_format import dump

    sc = load_text(text)
    assert load_text(dump(sc)) == sc
    return sc, _run(text)


def _failing_checks(sc: Scenario, impl: str) -> set[str]:
    """The checks that fail when ``sc`` runs on ``impl``."""
    from conformance.impl import resolve
    from conformance.scenario import engine

    return {f["check"] for f in engine.run_one(sc, resolve(impl)).trace.failures}


FLUSH = """\
name: flush
model: [r1, r2, r3, r4]
listeners:
  - name: flusher
    on: session/flush
    nth: 2
    hold: 0.5
    do: [{send: L}]
actors:
  - at: 0
    do: [{send: A}, {when_idle: w}, {wait_idle: w}, {send: B}, {when_idle: v}, {wait_idle: v}]
checks:
  - ran: L
"""


def test_a_listener_on_the_nth_session_flush() -> None:
    timeline = _run(FLUSH)
    fired = [i for i, e in enumerate(timeline) if e["kind"] == "listener"]
    assert [timeline[i]["on"] for i in fired] == ["session/flush"]
    # The second flush is turn 2's (B): the listener acts after its turn/end, not after turn 1's.
    ends = [i for i, e in enumerate(timeline) if e["kind"] == "log" and e["type"] == "turn/end"]
    assert ends[0] < ends[1] < fired[0] < ends[2]
    # hold: the flush takes virtual time, the next turn starts after it.
    starts = [e["t_us"] for e in timeline if e["kind"] == "log" and e["type"] == "turn/start"]
    assert starts[2] - timeline[fired[0]]["t_us"] >= 500_000


def test_nth_counts_matching_events_for_every_kind() -> None:
    # nth: 2 on agent/status where {status: running}: the second running transition, i.e. B's turn.
    text = FLUSH.replace("on: session/flush", "on: agent/status\n    where: {status: running}").replace(
        "    hold: 0.5\n", "")
    timeline = _run(text)
    fired = [i for i, e in enumerate(timeline) if e["kind"] == "listener"]
    sends = [i for i, e in enumerate(timeline) if e["kind"] == "op" and e.get("text") == "B"]
    assert len(fired) == 1 and fired[0] > sends[0]
    # Without nth the first one fires (A's turn).
    timeline = _run(text.replace("    nth: 2\n", ""))
    fired = [i for i, e in enumerate(timeline) if e["kind"] == "listener"]
    sends = [i for i, e in enumerate(timeline) if e["kind"] == "op" and e.get("text") == "B"]
    assert len(fired) == 1 and fired[0] < sends[0]
    # nth: 5 never comes: the listener never fires; times: always acts from the n-th on.
    assert not [e for e in _run(text.replace("nth: 2", "nth: 5").replace("  - ran: L\n", "  - not_ran: L\n"))
                if e["kind"] == "listener"]
    # times: always acts on the n-th matching event and every later one.
    always = text.replace("{send: L}", "{steer: S}").replace("  - ran: L\n", "  - ran: A\n")
    for nth, fired_times in ((1, 2), (2, 1), (3, 0)):
        timeline = _run(always.replace("nth: 2", f"nth: {nth}\n    times: always"))
        assert len([e for e in timeline if e["kind"] == "listener"]) == fired_times, nth


INJECT = """\
name: inject
model: [{text: r1, delay: 3}, r2, r3]
actors:
  - name: caller
    at: 0
    do: [{send: A}, {inject: INJ}, {send: B}]
"""


def test_an_actor_can_await_an_inject() -> None:
    def order(text: str) -> tuple[int, int]:
        timeline = _run(text)
        injected = next(i for i, e in enumerate(timeline) if e["kind"] == "log" and e["type"] == "context/message")
        sent = next(i for i, e in enumerate(timeline) if e["kind"] == "op" and e.get("text") == "B")
        return injected, sent

    injected, sent = order(INJECT)  # started, not awaited: B goes first (backwards compatible)
    assert sent < injected
    injected, sent = order(INJECT.replace("{inject: INJ}", "{inject: {text: INJ, wait: false}}"))
    assert sent < injected
    injected, sent = order(INJECT.replace("{inject: INJ}", "{inject: {text: INJ, wait: true}}"))
    assert injected < sent


def test_same_turn_in_yaml() -> None:
    text = GOOD.replace("{send: A}", "{send: A}, {send: B}") + "checks:\n  - same_turn: [A, B]\n"
    _run(text)
    loaded = load_text(text.replace("same_turn: [A, B]", "same_turn: {prompts: [A, B], agent: a}"))
    from conformance.scenario.checks import compile_check

    assert [compile_check(c).name for c in loaded.checks] == ["same_turn(A, B)"]


PERSIST = """\
name: persist
model: [r1, r2]
listeners:
  - name: persist
    on: session/flush
    times: always
    hold: 0.25
actors:
  - at: 0
    do: [{send: A}, {when_idle: w}, {wait_idle: w}, {send: B}, {when_idle: v}, {wait_idle: v}]
"""


def test_a_slow_flush_that_does_nothing_else_records_each_flush() -> None:
    from conformance.scenario.yaml_format import dump

    sc = load_text(PERSIST)
    assert sc.listeners[0].do == () and load_text(dump(sc)) == sc  # it reads back without a do
    timeline = _run(PERSIST)
    flushes = [(e["phase"], e["agent"], e["t_us"]) for e in timeline if e["kind"] == "flush"]
    assert [(p, a) for p, a, _ in flushes] == [("start", "a"), ("end", "a")] * 2
    assert flushes[1][2] - flushes[0][2] == 250_000  # the hold: the FLUSH oracle judged the run


SOURCED = """\
name: sourced
model: [r1]
actors:
  - at: 0
    do: [{send: {text: A, source: {kind: plugin, plugin: p}}}, {send: B}, {when_idle: w}, {wait_idle: w}]
"""


def test_a_send_may_name_its_source_and_the_turn_is_triggered_by_the_first() -> None:
    from conformance.scenario.yaml_format import dump

    sc = load_text(SOURCED)
    assert sc.actors[0].do[0].source == {"kind": "plugin", "plugin": "p"} and load_text(dump(sc)) == sc
    timeline = _run(SOURCED)
    start = next(e for e in timeline if e["kind"] == "log" and e["type"] == "turn/start")
    assert start["data"]["trigger"] == {"kind": "message", "source": {"kind": "plugin", "plugin": "p"}}
    sends = [e for e in timeline if e["kind"] == "op" and e["op"] == "send"]
    assert sends[0]["source"] == {"kind": "plugin", "plugin": "p"} and "source" not in sends[1]


SECTIONS = """\
name: sections
sections: {tools: "Look things up.", style: "Be kind."}
agents: [{id: a, system_prompt: "Answer briefly."}]
model: ["hi"]
actors:
  - at: 0
    do: [{send: A}]
"""


def test_system_prompt_sections_reach_every_request_before_the_agents_own_prompt() -> None:
    # SVC-5: the world adds the sections, in order, before the agents; a request's system prompt
    # is the sections, then the agent's own prompt, blank-line joined (the REQUEST oracle checks it).
    from conformance.scenario.yaml_format import dump

    sc = load_text(SECTIONS)
    assert sc.sections == (("tools", "Look things up."), ("style", "Be kind.")) and load_text(dump(sc)) == sc
    timeline = _run(SECTIONS)
    (request,) = [e for e in timeline if e["kind"] == "model/request"]
    assert request["system"] == "Look things up.\n\nBe kind.\n\nAnswer briefly."
    created = next(e for e in timeline if e["kind"] == "agent/created")
    assert created["sections"] == ["Look things up.", "Be kind."] and created["system_prompt"] == "Answer briefly."
    with pytest.raises(ScenarioError, match=r"^<scenario>:2: sections: expected a mapping, got a list$"):
        load_text(SECTIONS.replace('{tools: "Look things up.", style: "Be kind."}', "[one, two]"))


def test_a_raise_may_throw_a_value_that_is_no_error_object() -> None:
    # ERR-2: `thrown: true` throws conformance.adapter.ThrownValue (a string over the wire); the
    # turn fails all the same, with the text as its message, and the form survives a dump
    from conformance.impl import resolve
    from conformance.scenario import engine
    from conformance.scenario.yaml_format import dump

    sc = load_text(GOOD + "listeners:\n  - on: agent/request\n    do: [{raise: {message: boom, thrown: true}}]\n")
    (action,) = sc.listeners[0].do
    assert action.thrown and action.code is None and action.message == "boom"
    assert load_text(dump(sc)).listeners[0].do == sc.listeners[0].do
    report = engine.run_one(sc, resolve(None))
    errors = [e for e in report.trace.timeline if e.get("kind") == "log" and e.get("type") == "error"]
    assert [e["data"]["message"] for e in errors] == ["boom"] and "code" not in errors[0]["data"]
    with pytest.raises(ScenarioError, match="no error object: it has no code"):
        load_text(GOOD + "listeners:\n  - on: agent/request\n    do: [{raise: {message: b, code: E, thrown: true}}]\n")


_TOOL_TURN = """\
name: {name}
model: [{{tool_call: {{name: lookup, args: {{q: x}}}}}}, {{text: {second}}}]
tools: {{lookup: found}}
listeners:
  - {listener}
actors:
  - {{at: 0, do: [{{send: A}}, {{when_idle: w}}, {{wait_idle: w}}]}}
"""
"""A turn with one tool call, then a text, and one listener (``str.format`` fields)."""


def test_a_configured_agent_is_created_from_configuration_and_keeps_its_prompt() -> None:
    # SVC-4: `configured: true` creates the agent through load_config (feature configuration);
    # its requests carry its system prompt (SVC-5, REQUEST); it round-trips through YAML
    sc, timeline = _read_back_and_run(
        "name: configured\nagents: [{id: a, system_prompt: Be brief., configured: true}]\n"
        "model: [{text: hi}]\nactors:\n  - {at: 0, do: [{send: A}, {when_idle: w}, {wait_idle: w}]}\n")
    assert sc.agents[0].configured
    assert [r.get("system") for r in timeline if r["kind"] == "model/request"] == ["Be brief."]
    assert "REQUEST" in _failing_checks(sc, "mutant:config-system-prompt-camel")


def test_a_tools_execute_listener_answers_a_call_and_no_tool_runs() -> None:
    # 0b: `answer` makes a tools/execute listener return a result of its own without calling
    # next(): the tool never runs, the answer is logged under the model's call id (TOOL-4); a
    # loop running the chain ahead of the listener fails ANSWERED. It round-trips through YAML.
    from conformance.scenario import events as ev

    sc, timeline = _read_back_and_run(_TOOL_TURN.format(name="answered", second="done",
                                                         listener="{on: tools/execute, do: [{answer: null}]}"))
    assert not [e for e in timeline if e["kind"] == "tool/start"], "the answered call never reached the tool"
    results = [e["data"] for e in timeline if e["kind"] == "log" and e.get("type") == "tool/result"]
    assert [(r["content"], r["is_error"]) for r in results] == [([ev.ANSWER], False)]
    assert "ANSWERED" in _failing_checks(sc, "mutant:waterfall-chain-eager")



def test_a_continuation_listener_votes_to_stop_and_the_turn_ends() -> None:
    # CONT-1: `stop` makes an agent/turn-continuation listener return false, a forced stop even
    # though the step had a tool call: the turn ends after it; it round-trips through YAML
    _sc, timeline = _read_back_and_run(_TOOL_TURN.format(
        name="stopped", second="never", listener="{on: agent/turn-continuation, do: [{stop: null}]}"))
    steps = [e for e in timeline if e["kind"] == "log" and e.get("type") == "step/start"]
    assert len(steps) == 1, "the forced stop ends the turn after its first step"


@pytest.mark.parametrize(("on", "end", "mutant"), [
    ("agent/turn-continuation", "disposed", "dispose-deaf-between-step-signals"),
    ("session/flush", "completed", "dispose-deaf-in-flush"),
])
def test_a_plugin_that_never_returns_is_ended_by_a_dispose(on: str, end: str, mutant: str) -> None:
    # `hold: forever`: a plugin's listener awaiting what never comes (DISP-2), on a waterfall (the
    # turn's continuation) or on session/flush (a persistence plugin's write, where the listener
    # acts: its first flush here, once the turn closed). The caller's waiter times out and the
    # world disposes the stalled agent: disposal ends the driver; the continuation's turn ends
    # disposed, the flushed one keeps its turn/end. A loop whose disposal waits on the plugin (the
    # mutant) leaves the waiter pending: a problem naming DISP-2. It round-trips through YAML.
    sc, timeline = _read_back_and_run(_TOOL_TURN.format(
        name="stalled", second="never", listener=f"{{on: {on}, hold: forever}}"))
    assert [e["by"] for e in timeline if e["kind"] == "op" and e["op"] == "dispose"] == ["world"]
    ends = [e["data"]["reason"] for e in timeline if e["kind"] == "log" and e.get("type") == "turn/end"]
    assert ends == [{"kind": end}]
    from conformance.impl import resolve
    from conformance.scenario import engine

    failures = engine.run_one(sc, resolve(f"mutant:{mutant}")).trace.failures
    assert any(f["check"] == "problems" and "DISP-2" in f.get("rules", ()) for f in failures), failures


def test_every_event_a_listener_may_be_on_loads_from_yaml() -> None:
    # The hunt writes a race cassette for a window at any listenable point (the system-prompt
    # waterfall's were once refused on load, so those findings could not be replayed).
    from conformance.scenario import events as ev
    from conformance.scenario.yaml_format import EVENT_FIELDS

    assert set(EVENT_FIELDS) == set(ev.LISTENABLE)
    for event in ev.LISTENABLE:
        sc = load_text(f"name: x\nlisteners:\n- 'on': {event}\n  do: [{{raise: boom}}]\n")
        assert sc.listeners[0].on == event


def test_every_kind_a_run_records_may_be_named() -> None:
    # The reader refuses kinds outside events.TIMELINE_KINDS: a kind the world records and the
    # list lacks would make a valid after:, wait_for: or check unreadable. Every hunt workload,
    # with a spread of its windows (every verb, both modes, each point kind), and the examples.
    from conformance.hunt import search
    from conformance.hunt.workloads import workloads
    from conformance.impl import resolve
    from conformance.scenario import engine
    from conformance.scenario import events as ev

    ref = resolve(None)
    seen: set[str] = set()
    for path in EXAMPLES:
        seen |= {e["kind"] for e in engine.run_one(load(str(path)), ref).trace.timeline}
    for workload in workloads():
        wp = search.plan((workload,), ref, search.Config(depth=1, nth=1))[0]
        for index in range(0, len(wp.windows), 11):
            seen |= {e["kind"] for e in engine.run_one(wp.scenario(index), ref).trace.timeline}
    assert seen <= ev.TIMELINE_KINDS, sorted(seen - ev.TIMELINE_KINDS)
    assert len(seen) >= 30  # the spread reached most of them
