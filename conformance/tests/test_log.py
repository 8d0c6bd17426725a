"""Section 1: the session log (LOG-1..7)."""

from __future__ import annotations

from typing import Any

import pytest

from conformance import fakes
from conformance.harness import Kit
from conformance.invariants import log_violations
from reference_loop import vocabulary as v

from ._support import USER, Run


def _only(prefix: str, events: list[dict]) -> list[str]:
    return [p for p in log_violations(events) if p.startswith(prefix)]


@pytest.mark.rule("LOG-1")
def test_append_rejects_non_json_and_snapshots(run: Run) -> None:
    async def scenario(k: Kit) -> None:
        k.check_invariants = False  # raw appends outside a turn, on purpose
        a = k.agent()
        before = len(k.events(a))
        with pytest.raises(Exception):  # noqa: B017 - any error type is fine, it must raise
            a.session.append("context/message", {"content": [v.text("x")], "source": USER, "bad": object()})
        assert len(k.events(a)) == before, "a rejected append must not enter the log"
        data: dict[str, Any] = {"content": [v.text("original")], "source": USER}
        a.session.append("context/message", data)
        data["content"].append(v.text("mutated"))
        data["source"] = {"kind": "plugin", "plugin": "p"}
        logged = k.events(a)[-1]["data"]
        assert logged["content"] == [v.text("original")], "the log must hold a snapshot"
        assert logged["source"] == USER

    run(scenario)


@pytest.mark.rule("LOG-2")
def test_push_then_notify(run: Run) -> None:
    async def scenario(k: Kit) -> None:
        k.check_invariants = False
        a = k.agent()
        seen: list[int] = []

        def listener(session: object, event: dict) -> None:
            seen.append(len(a.session.events))
            raise RuntimeError("listener fails")

        k.on("session/event", listener)
        try:
            a.session.append("context/message", {"content": [v.text("x")], "source": USER})
        except Exception:
            pass
        events = k.events(a)
        assert events and events[-1]["type"] == "context/message", "the event must stay in the log"
        assert seen == [events[-1]["seq"] + 1], "listeners must see the event already pushed"

    run(scenario)


def _rich_turns(k: Kit) -> None:
    k.tool("echo")
    k.model.push(
        fakes.tool_calls(("c1", "echo", '{"a":1}'), ("c2", "echo", "{}"), prefix="calling"),
        fakes.text("done", usage=(3, 4)),
        fakes.text("second turn"),
    )


@pytest.mark.rule("LOG-3")
def test_seq_contiguous_and_chunks_kept(run: Run) -> None:
    async def scenario(k: Kit) -> None:
        a = k.agent()
        _rich_turns(k)
        a.send("hi")
        await k.idle(a)
        a.send("again")
        await k.idle(a)
        events = k.events(a)
        assert [e["seq"] for e in events] == list(range(len(events)))
        chunks = [e["data"]["chunk"] for e in events if e["type"] == "assistant/chunk"]
        streamed = [c for r in (fakes.tool_calls(("c1", "echo", '{"a":1}'), ("c2", "echo", "{}"), prefix="calling"),
                                fakes.text("done", usage=(3, 4)), fakes.text("second turn")) for c in r.build()]
        assert chunks == streamed, "every streamed chunk must be logged as assistant/chunk, in order"

    run(scenario)


@pytest.mark.rule("LOG-4")
def test_turns_pair_and_nest(run: Run) -> None:
    async def scenario(k: Kit) -> None:
        a = k.agent()
        _rich_turns(k)
        a.send("hi")
        await k.idle(a)
        a.send("again")
        await k.idle(a)
        events = k.events(a)
        assert _only("LOG-4", events) == []
        starts = [e["data"]["turn"] for e in events if e["type"] == "turn/start"]
        ends = [e["data"]["turn"] for e in events if e["type"] == "turn/end"]
        assert starts == ends == [1, 2]

    run(scenario)


@pytest.mark.rule("LOG-5")
def test_steps_nest(run: Run) -> None:
    async def scenario(k: Kit) -> None:
        a = k.agent()
        _rich_turns(k)
        a.send("hi")
        await k.idle(a)
        events = k.events(a)
        assert _only("LOG-5", events) == []
        steps = [(e["type"], e["data"]["step"]) for e in events if e["type"] in ("step/start", "step/end")]
        assert steps == [("step/start", 1), ("step/end", 1), ("step/start", 2), ("step/end", 2)]

    run(scenario)


@pytest.mark.rule("LOG-6")
def test_results_follow_calls(run: Run) -> None:
    async def scenario(k: Kit) -> None:
        a = k.agent()
        _rich_turns(k)
        a.send("hi")
        await k.idle(a)
        events = k.events(a)
        assert _only("LOG-6", events) == []
        order = [(e["type"], e["data"]["call_id"]) for e in events if e["type"] in ("tool/call", "tool/result")]
        assert order == [("tool/call", "c1"), ("tool/result", "c1"), ("tool/call", "c2"), ("tool/result", "c2")]

    run(scenario)


@pytest.mark.rule("LOG-7")
def test_derived_history(run: Run) -> None:
    async def scenario(k: Kit) -> None:
        a = k.agent()
        k.tool("echo", result="echoed")
        plugin = {"kind": "plugin", "plugin": "p"}

        def add_context(*_args: object) -> None:
            a.session.append("context/message", {"content": [v.text("ctx")], "source": plugin})

        k.on("agent/turn-start", add_context)
        k.model.push(
            fakes.tool_calls(("c1", "echo", "{}")).hook(lambda: a.steer("nudge"), before=-1),
            fakes.text("bye", usage=(1, 1)),
        )
        a.send("hi")
        await k.idle(a)
        history = a.session.derive_messages()
        expected = [
            {"role": "user", "content": [v.text("hi")]},
            {"role": "user", "content": [v.text('<context source="plugin">'), v.text("ctx"), v.text("</context>")]},
            {"role": "assistant", "content": [v.tool_call("c1", "echo", "{}")]},
            {"role": "user", "content": [v.tool_result("c1", [v.text("echoed")], False)]},
            {"role": "user", "content": [v.text('<steering source="user">'), v.text("nudge"), v.text("</steering>")]},
            {"role": "assistant", "content": [v.text("bye")]},
        ]
        assert history == expected
        assert a.session.derive_messages() == history, "the same log must derive the same history"

    run(scenario)
