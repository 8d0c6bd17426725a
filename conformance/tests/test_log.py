"""Section 1: the session log (LOG-1..7)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from conformance import fakes
from conformance.fakes import respond
from conformance.harness import Kit
from conformance.invariants import DATA_KEYS, log_violations
from reference_loop import vocabulary as v

from ._support import USER, Run, aborted, cyclic_block, in_process_only, request_texts, texts


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

        k.on("agent/turn-start", add_context, needs="the test appends context from it, inside the turn")
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


@pytest.mark.rule("LOG-1")
def test_loop_appends_are_snapshots_and_bad_data_is_rejected(run: Run) -> None:
    # LOG-1 through what the loop itself appends (user/message from send) and through event
    # types other than context/message: whatever appends, the log keeps a snapshot and
    # non-JSON data never enters it.
    async def scenario(k: Kit) -> None:
        a = k.agent()
        content: list[Any] = [v.text("hello")]
        a.send(content)
        await k.idle(a)
        content[0]["text"] = "mutated"
        content.append(v.text("added"))
        (logged,) = k.events(a, "user/message")
        assert logged["data"]["content"] == [v.text("hello")], "the log holds a snapshot of the prompt"
        assert a.session.derive_messages()[0]["content"] == [v.text("hello")]
        k.check_invariants = False  # raw appends outside a turn, on purpose
        before = k.events(a)
        for kind, data in (
            ("user/message", {"content": [{"type": "text", "text": object()}], "source": USER}),
            ("context/message", {"content": [cyclic_block()], "source": USER}),
            ("error", {"turn": 1, "step": 1, "message": {1, 2}}),
            ("usage", {"turn": 1, "step": 1, "usage": {"input_tokens": b"1", "output_tokens": 1}}),
        ):
            with pytest.raises(Exception):  # noqa: B017 - any error type is fine, it must raise
                a.session.append(kind, data)
        assert k.events(a) == before, "rejected appends must not enter the log"
        error: dict[str, Any] = {"turn": 1, "step": 1, "message": "m", "code": "C"}
        a.session.append("error", error)
        error["message"] = "changed"
        assert k.events(a)[-1]["data"]["message"] == "m", "the log holds a snapshot of the data"

    run(scenario)


@pytest.mark.rule("LOG-2")
def test_loop_events_are_pushed_before_listeners_see_them(run: Run) -> None:
    # LOG-2 through the loop's own appends: every session/event listener call sees its event
    # already in the log, and a listener throwing on one (here turn/end, which every loop must
    # survive, ERR-4) leaves that event in the log. Waits for the event itself, not for the
    # agent to settle: surviving the throw is ERR-4's, not this rule's.
    async def scenario(k: Kit) -> None:
        a = k.agent()
        late: list[str] = []

        def check(_session: object, event: dict[str, Any]) -> None:
            events = a.session.events
            if not events or events[-1]["seq"] != event["seq"] or len(events) != event["seq"] + 1:
                late.append(event["type"])

        def throw_on_turn_end(_session: object, event: dict[str, Any]) -> None:
            if event["type"] == "turn/end":
                raise RuntimeError("listener fails")

        k.on("session/event", check)
        k.on("session/event", throw_on_turn_end)
        k.tool("echo")
        k.model.push(fakes.tool_calls(("c1", "echo", "{}")), fakes.text("done"))
        a.send("hi")
        await k.until(lambda: "turn/end" in k.types(a), "the turn/end a listener throws on")
        types = k.types(a)
        assert types[0] == "turn/start" and "tool/result" in types
        assert late == [], f"listeners saw these events before they were in the log: {late}"

    run(scenario)


@pytest.mark.rule("LOG-3")
def test_empty_deltas_are_logged_like_any_chunk(run: Run) -> None:
    # "Never filtered out": a delta carrying nothing (a provider's first chunk, a keep-alive) is
    # a chunk the adapter yielded, logged as assistant/chunk like the others (session 61's blind
    # round N: a loop skipping empty text deltas passed the suite).
    async def scenario(k: Kit) -> None:
        a = k.agent()
        stream = respond.chunks(
            {"type": "block-start", "index": 0, "block_type": "text"},
            {"type": "text-delta", "index": 0, "text": ""},
            {"type": "text-delta", "index": 0, "text": "hello"},
            {"type": "text-delta", "index": 0, "text": ""},
            {"type": "block-end", "index": 0, "block": {"type": "text", "text": "hello"}},
            {"type": "finish", "reason": {"kind": "stop"}})
        k.model.push(stream)
        a.send("hi")
        await k.idle(a)
        chunks = [e["data"]["chunk"] for e in k.events(a) if e["type"] == "assistant/chunk"]
        assert chunks == stream.build(), f"the log's chunks {chunks} are not the {len(stream.build())} streamed"
        assert k.reasons(a) == [{"kind": "completed"}], k.reasons(a)

    run(scenario)


@pytest.mark.rule("LOG-3")
def test_seq_contiguous_and_chunks_kept_when_steps_fail(run: Run) -> None:
    # The chunks of a failing stream (finish{error}, or a raise midway) are logged as well:
    # "never filtered out" holds for every chunk the adapter yielded.
    async def scenario(k: Kit) -> None:
        k.check_invariants = False  # this test judges its own rule's invariant only
        a = k.agent()
        failing = fakes.text("partial").finish("error", "overloaded")
        raising = fakes.text("cut short", finish=None).raises("kaput", after=1)
        k.model.push(failing, raising)
        a.send("one")
        await k.idle(a)
        a.send("two")
        await k.idle(a)
        events = k.events(a)
        assert _only("LOG-3", events) == []
        chunks = [e["data"]["chunk"] for e in events if e["type"] == "assistant/chunk"]
        assert chunks == [*failing.build(), *raising.build()[:2]], "every chunk the model yielded is logged"

    run(scenario)


@pytest.mark.rule("LOG-3")
def test_chunks_the_stream_handed_over_before_an_abort_are_logged(run: Run) -> None:
    # "Never filtered out" holds for a chunk the stream had yielded when the step's signal fired:
    # the loop had it. A loop reading the stream in a task raced against the signal may learn of
    # both at once and drop the chunk (session 49's indie61e). The stream queues an abort() just
    # before it yields its second chunk; which runs first is the loop's (and the schedule's)
    # affair, so the fake model's count of what it had handed over when the signal fired decides.
    async def scenario(k: Kit) -> None:
        # the wire connection forwards each chunk as read: what the remote loop had been handed
        # when its signal fired, this process cannot tell
        in_process_only(k, "the stream is relayed to another process: what it had handed over is not known here")
        loop = asyncio.get_running_loop()
        agent: list[Any] = []
        k.model.push(respond.text(["one ", "two ", "three"]).finish("stop").hook(
            lambda: loop.call_soon(agent[0].abort, "stop"), before=1))
        a = k.agent()
        agent.append(a)
        a.send("A")
        await k.idle(a)
        handed = k.model.handed_at_abort.get(1)
        assert handed is not None, "the step's signal fired while the stream was read"
        logged = [e["data"]["chunk"] for e in k.events(a, "assistant/chunk")]
        assert len(logged) >= handed, (f"the stream had yielded {handed} chunk(s) when the step's signal fired, "
                                       f"but the log holds {len(logged)}: {logged}")
        assert k.reasons(a) == [aborted("stop")]

    run(scenario)


@pytest.mark.rule("LOG-4")
def test_turns_pair_whatever_ends_them(run: Run) -> None:
    async def scenario(k: Kit) -> None:
        k.check_invariants = False  # this test judges its own rule's invariant only
        a = k.agent()
        k.model.push(respond.raises("model failed"), respond.hang(), fakes.text("fine"), respond.hang())
        a.send("error turn")
        await k.idle(a)
        a.send("aborted turn")
        await k.until(lambda: len(k.model.requests) == 2, "the second model call")
        a.abort()
        await k.idle(a)
        a.send("completed turn")
        await k.idle(a)
        a.send("disposed turn")
        await k.until(lambda: len(k.model.requests) == 4, "the fourth model call")
        a.dispose()
        await k.idle(a)
        events = k.events(a)
        assert _only("LOG-4", events) == []
        bounds = [(e["type"], e["data"]["turn"]) for e in events if e["type"] in ("turn/start", "turn/end")]
        assert bounds == [(kind, n) for n in (1, 2, 3, 4) for kind in ("turn/start", "turn/end")]

    run(scenario)


@pytest.mark.rule("LOG-5")
def test_steps_nest_when_a_step_fails_or_aborts(run: Run) -> None:
    async def scenario(k: Kit) -> None:
        k.check_invariants = False  # this test judges its own rule's invariant only
        a = k.agent()
        k.tool("echo")
        k.model.push(
            fakes.tool_calls(("c1", "echo", "{}")),
            fakes.text("then fails", finish=None).raises("kaput", after=1),
            fakes.tool_calls(("c2", "echo", "{}")),
            respond.hang(),
        )
        a.send("one")
        await k.idle(a)
        a.send("two")
        await k.until(lambda: len(k.model.requests) == 4, "the second turn's second step")
        a.abort()
        await k.idle(a)
        events = k.events(a)
        assert _only("LOG-5", events) == []
        steps = [(e["type"], e["data"]["turn"], e["data"]["step"]) for e in events if e["type"] in ("step/start", "step/end")]
        assert steps == [(kind, turn, step) for turn in (1, 2) for step in (1, 2) for kind in ("step/start", "step/end")]

    run(scenario)


@pytest.mark.rule("LOG-6")
def test_every_result_has_its_call_even_when_tools_fail(run: Run) -> None:
    # Failing, unknown and aborted tools: whatever results the loop writes for them (TOOL-3
    # says which), each follows the call with its id; a call left without one is legal.
    async def scenario(k: Kit) -> None:
        k.check_invariants = False  # this test judges its own rule's invariant only
        a = k.agent()
        k.tool("broken", error="it broke")
        hanging = k.tool("hang", hang=True)
        k.model.push(fakes.tool_calls(("c1", "broken", "{}"), ("c2", "missing", "{}"), ("c3", "hang", "{}")))
        a.send("hi")
        await k.until(lambda: bool(hanging.calls) or "turn/end" in k.types(a), "the hanging tool (or the turn's end)")
        a.abort()
        await k.until(lambda: "turn/end" in k.types(a), "the turn's end")
        events = k.events(a)
        assert _only("LOG-6", events) == []
        calls = [e["data"]["call_id"] for e in events if e["type"] == "tool/call"]
        results = [e["data"]["call_id"] for e in events if e["type"] == "tool/result"]
        assert calls and calls == ["c1", "c2", "c3"][: len(calls)], calls
        assert len(results) == len(set(results)) and set(results) <= set(calls), results

    run(scenario)


@pytest.mark.rule("LOG-7")
@pytest.mark.parametrize("failure", ["raises", "finish-error"])
def test_errors_derive_nothing(run: Run, failure: str) -> None:
    # A failed turn logs an `error` event; "errors derive nothing": the history (derived, and as
    # the next request carries it) holds the failed turn's prompt and nothing for its error.
    async def scenario(k: Kit) -> None:
        a = k.agent()
        k.model.push(respond.raises("overloaded") if failure == "raises" else fakes.text("", finish="error"),
                     fakes.text("fine"))
        a.send("one")
        await k.idle(a)
        assert k.types(a).count("error") == 1, k.types(a)
        a.send("two")
        await k.idle(a)
        expected = [{"role": "user", "content": [v.text("one")]}, {"role": "user", "content": [v.text("two")]}]
        sent = k.model.requests[-1]["messages"]
        assert request_texts(k.model.requests[-1]) == ["one", "two"], "the request after a failed turn"
        assert all(m.get("role") != "assistant" for m in sent), f"an error derived a message: {sent}"
        assert a.session.derive_messages() == [*expected, {"role": "assistant", "content": [v.text("fine")]}]

    run(scenario)


@pytest.mark.rule("LOG-7")
def test_tool_results_derive_blocks_whatever_the_tool_returned(run: Run) -> None:
    # A tool's content is a string or a list of blocks; either way its tool/result content is
    # a list of blocks, and derived history holds it as one tool-result block per result.
    async def scenario(k: Kit) -> None:
        a = k.agent()
        blocks = [v.text("line one"), v.text("line two")]
        k.tool("plain", result="just text")
        k.tool("rich", result=blocks)
        k.model.push(fakes.tool_calls(("c1", "plain", "{}"), ("c2", "rich", "{}")))
        a.send("hi")
        await k.idle(a)
        results = [(e["data"]["call_id"], e["data"]["content"], e["data"]["is_error"]) for e in k.events(a, "tool/result")]
        assert results == [("c1", [v.text("just text")], False), ("c2", blocks, False)]
        derived = [m for m in a.session.derive_messages() if m["content"] and m["content"][0].get("type") == "tool-result"]
        assert derived == [
            {"role": "user", "content": [{"type": "tool-result", "tool_call_id": "c1", "content": [v.text("just text")], "is_error": False}]},
            {"role": "user", "content": [{"type": "tool-result", "tool_call_id": "c2", "content": blocks, "is_error": False}]},
        ]

    run(scenario)


@pytest.mark.rule("LOG-4", "LOG-5")
def test_event_data_has_the_tables_keys_and_names_its_turn_and_step(run: Run) -> None:
    # Spec 0 / 0b: each event's data holds exactly the keys of section 0's table (compared
    # literally), and the events inside a turn and a step name that turn and step (LOG-4,
    # LOG-5: how the log itself says where an event lies). One turn with usage, tool calls (one
    # failing with a code), steering and a second step; then a turn whose model fails.
    async def scenario(k: Kit) -> None:
        a = k.agent()
        k.tool("echo", hook=lambda _args: a.steer("nudge"))
        k.tool("coded", error="it broke", code="E_BROKE")
        k.model.push(
            fakes.tool_calls(("c1", "echo", '{"x": 1}'), ("c2", "coded", "{}")).usage(1, 2),
            fakes.text("done", usage=(3, 4)),
            respond.error("model failed", code="E_MODEL"),
        )
        a.send("one")
        await k.idle(a)
        a.send("two")
        await k.idle(a)
        events = k.events(a)
        seen = {e["type"] for e in events}
        assert {"steering/message", "tool/result", "usage", "error", "assistant/message"} <= seen, seen
        turn: int | None = None
        step: int | None = None
        for event in events:
            kind, data = event["type"], event["data"]
            required, optional = DATA_KEYS[kind]
            assert required <= set(data) <= required | optional, f"{kind} data keys {sorted(data)}"
            if kind == "turn/start":
                turn, step = data["turn"], None
                continue
            if kind == "step/start":
                step = data["step"]
            if "turn" in required:
                assert data["turn"] == turn, f"{kind} names turn {data['turn']}, lies in turn {turn}"
            if "step" in required and kind != "error":
                assert data["step"] == step, f"{kind} names step {data['step']}, lies in step {step}"
            if kind == "step/end":
                step = None
        (error,) = k.events(a, "error")
        assert error["data"]["step"] == 1  # after its step/end, it still names its step
        # (what the error and the failed result carry, code and name, is FINISH-1's and TOOL-3's)

    run(scenario)


@pytest.mark.rule("LOG-1")
def test_append_rejects_numbers_json_cannot_hold(run: Run) -> None:
    # Spec 0b: data is plain JSON, which has no NaN or infinities: such data is rejected before
    # it enters the log, like any other value that is not JSON.
    async def scenario(k: Kit) -> None:
        k.check_invariants = False  # raw appends outside a turn, on purpose
        a = k.agent()
        for bad in (float("nan"), float("inf"), float("-inf")):
            before = len(k.events(a))
            with pytest.raises(Exception):  # noqa: B017 - any error type is fine, it must raise
                a.session.append("context/message", {"content": [v.text("x")], "source": USER, "n": bad})
            assert len(k.events(a)) == before, f"{bad!r} entered the log"

    run(scenario)


@pytest.mark.rule("LOG-7")
def test_derived_tool_results_keep_their_error_flag(run: Run) -> None:
    # A failing tool's result derives a tool-result block with is_error true, a healthy one
    # with is_error false: the flag of the logged tool/result, carried into history.
    async def scenario(k: Kit) -> None:
        a = k.agent()
        k.tool("broken", error="it broke")
        k.tool("fine", result="ok")
        k.model.push(fakes.tool_calls(("c1", "broken", "{}"), ("c2", "fine", "{}")))
        a.send("hi")
        await k.idle(a)
        flags = {e["data"]["call_id"]: e["data"]["is_error"] for e in k.events(a, "tool/result")}
        assert flags == {"c1": True, "c2": False}
        blocks: list[Any] = [m["content"][0] for m in a.session.derive_messages() if m["content"] and m["content"][0].get("type") == "tool-result"]
        assert [(b["tool_call_id"], b["is_error"]) for b in blocks] == [("c1", True), ("c2", False)]
        sent = [m["content"][0] for m in k.model.requests[-1]["messages"] if m["content"] and m["content"][0].get("type") == "tool-result"]
        assert sent == blocks, "the next request carries that history"

    run(scenario)


@pytest.mark.rule("LOG-7", "LOG-1")
def test_a_plugin_editing_the_request_in_place_changes_neither_log_nor_history(run: Run) -> None:
    # LOG-7: history is derived from the log, and replaying the same log derives the same history.
    # A plugin that redacts and trims the request's messages in place (a compaction plugin that
    # does not copy) edits that request only: the log, the next request's history and
    # derive_messages() are as the log says (a loop handing out cached or logged objects fails).
    async def scenario(k: Kit) -> None:
        a = k.agent()
        received: list[list[str]] = []

        async def compact(_agent: Any, _turn: Any, _step: Any, request: dict[str, Any], nxt: Any) -> Any:
            received.append(request_texts(request))
            for message in request.get("messages", []):
                for block in message.get("content", []):
                    if block.get("type") == "text":
                        block["text"] = "REDACTED"
            del request["messages"][:-1]
            return await nxt()

        k.on("agent/request", compact)
        k.model.push(fakes.text("answer one"), fakes.text("answer two"))
        for prompt in ("first", "second"):
            a.send(prompt)
            await k.idle(a)
        assert received == [["first"], ["first", "answer one", "second"]], (
            f"the requests reached the plugin with {received}: the second must carry the whole history")
        history = [[b.get("text") for b in m["content"]] for m in a.session.derive_messages()]
        assert history == [["first"], ["answer one"], ["second"], ["answer two"]], history
        assert [texts(e["data"]["content"]) for e in k.events(a, "user/message")] == [["first"], ["second"]]

    run(scenario)
