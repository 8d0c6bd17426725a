"""What the driver's code does in place reaches the JavaScript loop's own objects (docs/wire-protocol.md
§9.1), and a held backend's load is a point callers act in (§10): what one process shows of an
aliasing loop and of a resume's load, the wire shows too."""

from __future__ import annotations

from typing import Any

import pytest

from conformance.impl import resolve
from conformance.scenario import World, engine, loop_scenario
from conformance.scenario.yaml_format import load_text

from ._wire import (
    JS_LOOP,
    LOG_KEEPS_CALLERS_CONTENT,
    LOG_KEEPS_STEP_RESULT,
    LOG_KEEPS_TOOL_RESULT,
    requires_node,
)

pytestmark = requires_node


def test_a_listener_editing_the_request_in_place_edits_what_the_rest_of_the_chain_gets() -> None:
    # the world's compaction-like plugin trims the request in place and calls next(): in one
    # process the model then gets the trimmed request; over the wire the edit travels with next()
    seen: list[int] = []

    @loop_scenario(models=())
    async def trimmed(world: World) -> None:
        model = world.model(["one", "two"])
        agent = world.agent("a")

        async def trim(_agent: Any, _turn: Any, _step: Any, request: dict[str, Any], nxt: Any) -> Any:
            del request["messages"][:-1]
            return await nxt()

        world.listen("agent/request", trim)
        for i, prompt in enumerate(("first", "second")):
            world.send(agent, prompt)
            world.when_idle(agent, f"w{i}")
            await world.wait_idle(f"w{i}")
        seen.extend(len(r["messages"]) for r in model.requests)

    for impl in (resolve(None), resolve(f"wire:{JS_LOOP}")):
        seen.clear()
        report = engine.run_one(trimmed, impl)
        assert report.ok, report.trace.failure_messages()
        assert seen == [1, 1], f"{impl.name}: the model got {seen} messages: the listener's trim did not reach it"


RESUMED_AND_TAKEN = """
name: taken-while-loading
agents: [{id: a, resume: sess-1, history: [H1]}]
model: [{text: hi}]
actors:
  - {name: caller, after: agent/created, do: [{send: A}, {when_idle: w}, {wait_idle: w}]}
listeners:
  - on: persistence/load
    do: [{create: a}]
"""


def test_a_resumes_load_is_a_point_over_the_wire_too() -> None:
    # SVC-2: a create of the id being resumed, made inside the load; the world holds the child's
    # backend through WirePersistence.hold, so the point comes as it does in one process
    report = engine.run_one(load_text(RESUMED_AND_TAKEN, origin="taken.yaml"), resolve(f"wire:{JS_LOOP}"))
    assert report.ok, report.trace.failure_messages()
    kinds = [(e["kind"], e.get("op")) for e in report.trace.timeline if e["kind"] in ("op", "op/error", "persistence/load")]
    assert kinds[:3] == [("op", "resume"), ("persistence/load", None), ("op", "create")], kinds


BLOCKS = """
name: blocks
model: [{text: hi}]
actors:
  - {name: caller, at: 0, do: [{send: {text: A, blocks: true}}, {when_idle: w}, {wait_idle: w}]}
"""


def test_what_the_caller_edits_in_what_it_passed_reaches_the_childs_copy() -> None:
    # LOG-1: once the run is over the world edits the blocks it passed to send(); over the wire
    # the edit is made to the child's decoded copy too, and the logs are read again there, so a
    # loop logging the caller's object rather than a snapshot shows it as it would in one process
    sc = load_text(BLOCKS, origin="blocks.yaml")
    assert engine.run_one(sc, resolve(f"wire:{JS_LOOP}")).ok
    failures = engine.run_one(sc, resolve(f"wire:{LOG_KEEPS_CALLERS_CONTENT}")).trace.failures
    assert failures and failures[0]["rules"] == ["LOG-1"] and "user/message" in failures[0]["message"], failures


TOOL_BLOCKS = """
name: tool-blocks
model:
  - {tool_call: {name: lookup, args: {q: x}}}
  - {text: done}
tools:
  lookup: {result: [{type: text, text: found}]}
actors:
  - {name: caller, at: 0, do: [{send: A}, {when_idle: w}, {wait_idle: w}]}
"""

STEP_REWRITE = """
name: step-rewrite
model: [{text: hi}]
listeners:
  - {on: agent/step-result, rewrite: {content: [{type: text, text: moderated}]}}
actors:
  - {name: caller, at: 0, do: [{send: A}, {when_idle: w}, {wait_idle: w}]}
"""


@pytest.mark.parametrize(("scenario", "variant", "logged"), [
    (TOOL_BLOCKS, LOG_KEEPS_TOOL_RESULT, "tool/result"),
    (STEP_REWRITE, LOG_KEEPS_STEP_RESULT, "assistant/message"),
], ids=["tool-result", "step-result-rewrite"])
def test_what_a_tool_or_a_plugin_returned_and_edits_later_reaches_the_childs_copy(
        scenario: str, variant: str, logged: str) -> None:
    # LOG-1: the world edits, once the run is over, the blocks its tool returned and its plugin's
    # rewrite; over the wire the child keeps its decoded copies of them (`passed` on the settle
    # or the reply, §9.1), and the edits reach those, so a loop logging either object rather
    # than a snapshot fails as it would in one process
    sc = load_text(scenario, origin=f"{logged}.yaml")
    report = engine.run_one(sc, resolve(f"wire:{JS_LOOP}"))
    assert report.ok, report.trace.failure_messages()
    failures = engine.run_one(sc, resolve(f"wire:{variant}")).trace.failures
    assert failures and failures[0]["rules"] == ["LOG-1"] and logged in failures[0]["message"], failures
