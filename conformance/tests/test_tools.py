"""Section 5: tools (TOOL-1..5)."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import pytest

from conformance import fakes
from conformance.harness import Kit
from reference_loop import vocabulary as v

from ._support import COMPLETED, Run, aborted, cyclic_block, in_process_only, passthrough


@pytest.mark.rule("TOOL-1")
def test_tools_run_in_order_one_at_a_time(run: Run) -> None:
    async def scenario(k: Kit) -> None:
        trace: list[str] = []
        k.tool("slow", delay=1.0, hook=lambda _a: trace.append("slow"))
        k.tool("fast", hook=lambda _a: trace.append("fast"))
        a = k.agent()

        async def log(execution: dict, next: object) -> object:
            trace.append(f"start {execution['call_id']}")
            result = await next()  # type: ignore[operator]
            trace.append(f"end {execution['call_id']}")
            return result

        k.on("tools/execute", log, needs="the test sees each call start and end through it")
        k.model.push(fakes.tool_calls(("c1", "slow", "{}"), ("c2", "fast", "{}"), ("c3", "slow", "{}")))
        a.send("hi")
        await k.idle(a)
        assert trace == ["start c1", "slow", "end c1", "start c2", "fast", "end c2", "start c3", "slow", "end c3"]

    run(scenario)


@pytest.mark.rule("TOOL-1", "LOOP-5", "CONT-1")
def test_a_call_id_an_earlier_step_used_still_runs(run: Run) -> None:
    # Some providers number tool calls per response (`call_0` in every step): nothing in the
    # contract makes a call's id unique across a turn, so each step's calls all run, and each step
    # with tool calls continues the turn (CONT-1).
    async def scenario(k: Kit) -> None:
        echo = k.tool("echo")
        a = k.agent()
        k.model.push(fakes.tool_calls(("call_0", "echo", '{"n": 1}')), fakes.tool_calls(("call_0", "echo", '{"n": 2}')),
                     fakes.text("done"))
        a.send("hi")
        await k.idle(a)
        assert [c.arguments for c in echo.calls] == [{"n": 1}, {"n": 2}], \
            f"a call whose id an earlier step used did not run: {[c.arguments for c in echo.calls]}"
        assert len(k.model.requests) == 3, "each step with a tool call continues the turn"
        assert [e["data"]["call_id"] for e in k.events(a, "tool/result")] == ["call_0", "call_0"]
        assert k.reasons(a) == [COMPLETED]

    run(scenario)


@pytest.mark.rule("TOOL-2")
def test_argument_parsing(run: Run) -> None:
    async def scenario(k: Kit) -> None:
        echo = k.tool("echo")
        a = k.agent()
        k.model.push(fakes.tool_calls(("c1", "echo", '{"x": [1, 2]}'), ("c2", "echo", ""), ("c3", "echo", "not json{")))
        a.send("hi")
        await k.idle(a)
        assert echo.call_args == [{"x": [1, 2]}, {}, "not json{"]
        assert [e["data"]["arguments"] for e in k.events(a, "tool/call")] == ['{"x": [1, 2]}', "", "not json{"]
        assert k.reasons(a) == [COMPLETED]

    run(scenario)


@pytest.mark.rule("TOOL-3")
def test_tool_failures_become_error_results(run: Run) -> None:
    async def scenario(k: Kit) -> None:
        k.tool("coded", error="it broke", code="E_BROKE")
        k.tool("plain", error="also broke")
        k.tool("guarded")

        async def guard(execution: dict, next: object) -> object:
            if execution["name"] == "guarded":
                raise RuntimeError("denied")
            return await next()  # type: ignore[operator]

        k.on("tools/execute", guard)
        a = k.agent()
        k.model.push(fakes.tool_calls(("c1", "coded", "{}"), ("c2", "missing", "{}"), ("c3", "plain", "{}"), ("c4", "guarded", "{}")))
        a.send("hi")
        await k.idle(a)
        results = {e["data"]["call_id"]: e["data"] for e in k.events(a, "tool/result")}
        assert all(r["is_error"] is True for r in results.values())
        assert results["c1"]["content"] == [v.text("Error: it broke")]
        assert results["c1"]["error"]["code"] == "E_BROKE" and isinstance(results["c1"]["error"]["name"], str)
        assert results["c2"]["error"]["code"] == "UNKNOWN_TOOL"
        assert results["c2"]["content"][0]["text"].startswith("Error: ")
        assert results["c3"]["content"] == [v.text("Error: also broke")] and "error" not in results["c3"]
        assert results["c4"]["content"] == [v.text("Error: denied")]
        assert k.reasons(a) == [COMPLETED], "the turn goes on"
        assert len(k.model.requests) == 2

    run(scenario)


@pytest.mark.rule("TOOL-4")
@pytest.mark.parametrize("how", ["returned", "edited-in-place"])
def test_result_keyed_on_model_call_id(run: Run, how: str) -> None:
    # A tools/execute listener that returns the result under another id, or, since next() takes
    # no argument, edits the call's id in place on the execution before calling next(), as a
    # plugin adjusting a call does (a loop reading the id back from the execution once the chain
    # returned logs the plugin's). The result is the model's call's all the same: observed
    # through the log and through the history the next request carries.
    async def scenario(k: Kit) -> None:
        k.tool("echo")
        a = k.agent()

        async def lie(execution: dict, next: object) -> object:
            if how == "edited-in-place":
                execution["call_id"] = "edited"
                return await next()  # type: ignore[operator]
            result = await next()  # type: ignore[operator]
            return {**result, "call_id": "forged"}

        k.on("tools/execute", lie)
        k.model.push(fakes.tool_calls(("c1", "echo", "{}")))
        a.send("hi")
        await k.idle(a)
        assert k.calls("tools/execute") == 1, "the tools/execute listener never ran"
        assert [e["data"]["call_id"] for e in k.events(a, "tool/result")] == ["c1"]
        ids = [b["tool_call_id"] for m in k.model.requests[1]["messages"] for b in m["content"] if b.get("type") == "tool-result"]
        assert ids == ["c1"]

    run(scenario)


@pytest.mark.rule("TOOL-5")
def test_abort_during_tool_ends_step(run: Run) -> None:
    async def scenario(k: Kit) -> None:
        hanging = k.tool("hang", hang=True)
        after = k.tool("after")
        a = k.agent()
        k.model.push(fakes.tool_calls(("c1", "hang", "{}"), ("c2", "after", "{}")))
        a.send("hi")
        await k.until(lambda: bool(hanging.calls), "the hanging tool")
        a.abort()
        await k.idle(a)
        assert after.calls == [], "no further tool of the step runs"
        assert len(k.model.requests) == 1, "no next model step runs"
        assert k.reasons(a) == [aborted()]

    run(scenario)


@pytest.mark.rule("TOOL-5", "CANCEL-MID")
@pytest.mark.parametrize("verb", ["cancel", "abort"])
def test_a_stop_once_the_message_is_logged_runs_none_of_its_tools(run: Run, verb: str) -> None:
    # A session/event listener on the step's assistant/message stops the step before any of its
    # tools ran: the abort ends the step (CANCEL-MID, TOOL-5), so none of its tools runs and no
    # next step either (a loop checking the abort after each call, not before, runs the first).
    async def scenario(k: Kit) -> None:
        first, second = k.tool("first"), k.tool("second")
        a = k.agent()
        k.model.push(fakes.tool_calls(("c1", "first", "{}"), ("c2", "second", "{}")))
        fired = [False]

        def listener(_session: object, event: dict) -> None:
            if event["type"] == "assistant/message" and not fired[0]:
                fired[0] = True
                a.cancel() if verb == "cancel" else a.abort()

        k.on("session/event", listener)
        a.send("hi")
        await k.idle(a)
        assert fired[0], "no assistant/message was logged"
        assert first.calls == [] and second.calls == [], (
            f"a tool ran after the step was stopped from its assistant/message listener (ran: "
            f"{[*first.calls, *second.calls]}) (TOOL-5, CANCEL-MID)")
        assert len(k.model.requests) == 1, "no next model step runs"
        assert k.reasons(a) == [aborted("cancelled" if verb == "cancel" else "aborted")]

    run(scenario)


@pytest.mark.rule("TOOL-1")
def test_tools_run_in_order_seen_from_the_tools_and_the_log(run: Run) -> None:
    # Without any tools/execute listener: the tools' own records (virtual start and end times)
    # show each call starting after the previous one ended, in the model's order, and the log
    # pairs each call with its result before the next call.
    async def scenario(k: Kit) -> None:
        slow = k.tool("slow", delay=1.0)
        fast = k.tool("fast", delay=0.5)  # every call takes time: no two start at one instant
        a = k.agent()
        k.model.push(fakes.tool_calls(("c1", "slow", "{}"), ("c2", "fast", "{}"), ("c3", "slow", "{}"), ("c4", "fast", "{}")))
        a.send("hi")
        await k.idle(a)
        calls = sorted([*slow.calls, *fast.calls], key=lambda c: (c.started, c.call_id))
        for before, after in itertools.pairwise(calls):
            assert before.ended is not None and after.started >= before.ended, (
                f"{after.call_id} started before {before.call_id} ended: the calls overlap"
            )
        assert [c.call_id for c in calls] == ["c1", "c2", "c3", "c4"], "the model's order"
        order = [(e["type"], e["data"]["call_id"]) for e in k.events(a, "tool/call", "tool/result")]
        assert order == [(kind, c) for c in ("c1", "c2", "c3", "c4") for kind in ("tool/call", "tool/result")]

    run(scenario)


@pytest.mark.rule("TOOL-2")
def test_argument_parsing_of_every_json_kind(run: Run) -> None:
    # Any JSON value parses (arrays, strings, numbers, null, nested objects); text that is not
    # JSON (a truncated object, a bare word) passes through raw; the log keeps the raw text.
    async def scenario(k: Kit) -> None:
        echo = k.tool("echo")
        a = k.agent()
        raw = ['{"a": {"b": [1, "two", null]}}', "[1, 2]", '"text"', "42", "null", '{"cut": ', "yes"]
        k.model.push(fakes.tool_calls(*((f"c{i}", "echo", r) for i, r in enumerate(raw))))
        a.send("hi")
        await k.idle(a)
        assert echo.call_args == [{"a": {"b": [1, "two", None]}}, [1, 2], "text", 42, None, '{"cut": ', "yes"]
        assert [e["data"]["arguments"] for e in k.events(a, "tool/call")] == raw
        assert len(k.events(a, "tool/result")) == len(raw)
        assert k.reasons(a) == [COMPLETED], "nothing crashes"

    run(scenario)


@pytest.mark.rule("TOOL-2")
def test_arguments_nested_past_a_parsers_limit_crash_nothing(run: Run) -> None:
    # TOOL-2 "nothing crashes": JSON nested deeper than a parser takes (RFC 8259 lets a parser
    # limit the depth; Python's json raises RecursionError there, not the ValueError of text that
    # is not JSON). The tool gets the arguments parsed or raw, and the turn goes on. Session 49's
    # review: the reference and ten of eleven independent loops caught ValueError only and failed
    # the turn.
    async def scenario(k: Kit) -> None:
        # the parser-depth error is Python's; a value that deep does not cross the wire to the
        # kit's fake tool (JSON.stringify and the kit's decoder have their own depth)
        in_process_only(k, "Python's parser depth; the parsed value cannot reach the kit's tool over the wire")
        got: list[str] = []

        def deep_tool(args: Any) -> str:
            got.append("raw" if isinstance(args, str) else "parsed" if isinstance(args, list) else type(args).__name__)
            return "done"

        k.world.add_tool(fakes.FakeTool("deep", handler=deep_tool))
        nested = "[" * 5000 + "]" * 5000
        k.model.push(fakes.tool_calls(("c1", "deep", nested)), fakes.text("after the tool"))
        a = k.agent()
        a.send("hi")
        await k.idle(a)
        assert got in (["raw"], ["parsed"]), f"the tool got {got}, not its arguments parsed or raw, once"
        results = [e["data"] for e in k.events(a, "tool/result")]
        assert len(results) == 1 and not results[0].get("is_error"), f"the call's tool/result: {results}"
        assert k.reasons(a) == [COMPLETED], "nothing crashes"

    run(scenario)


@pytest.mark.rule("TOOL-3")
def test_error_results_reach_the_model_and_the_turn_goes_on(run: Run) -> None:
    # Observed through the next request (what the model is told) as well as the log: each
    # failure is a tool-result block with is_error true whose content is a list holding the
    # "Error: <message>" text block; a listener's coded error carries error{name, code}.
    async def scenario(k: Kit) -> None:
        k.tool("broken", error="disk gone")
        k.tool("guarded")

        async def guard(execution: dict, next: object) -> object:
            if execution["name"] == "guarded":
                raise fakes.FakeError("not allowed", "E_DENIED")
            return await next()  # type: ignore[operator]

        k.on("tools/execute", guard)
        a = k.agent()
        k.model.push(fakes.tool_calls(("c1", "broken", "{}"), ("c2", "nowhere", "{}"), ("c3", "guarded", "{}")))
        a.send("hi")
        await k.idle(a)
        results = {e["data"]["call_id"]: e["data"] for e in k.events(a, "tool/result")}
        assert results["c3"]["error"]["code"] == "E_DENIED" and isinstance(results["c3"]["error"]["name"], str)
        assert results["c2"]["error"]["code"] == "UNKNOWN_TOOL"
        blocks = [b for m in k.model.requests[1]["messages"] for b in m["content"] if b.get("type") == "tool-result"]
        assert [b["tool_call_id"] for b in blocks] == ["c1", "c2", "c3"]
        for block in blocks:
            assert block["is_error"] is True
            (text,) = block["content"]
            assert text["type"] == "text" and text["text"].startswith("Error: "), block
        assert blocks[0]["content"] == [v.text("Error: disk gone")]
        assert blocks[2]["content"] == [v.text("Error: not allowed")]
        assert k.reasons(a) == [COMPLETED], "the turn goes on"

    run(scenario)


@pytest.mark.rule("TOOL-4")
def test_result_keyed_on_model_call_id_when_listener_short_circuits(run: Run) -> None:
    # A listener that answers itself (never calls next()) with another id, and one that
    # returns a result without any id: the results, and the history sent next, carry the
    # model's ids.
    async def scenario(k: Kit) -> None:
        echo = k.tool("echo")
        a = k.agent()

        async def answer(execution: dict, next: object) -> object:
            if execution["call_id"] == "c1":
                return {"call_id": "forged", "content": [v.text("cached")], "is_error": False}
            result = dict(await next())  # type: ignore[operator]
            result.pop("call_id", None)
            return result

        k.on("tools/execute", answer)
        k.model.push(fakes.tool_calls(("c1", "echo", "{}"), ("c2", "echo", "{}")))
        a.send("hi")
        await k.idle(a)
        assert k.calls("tools/execute") == 2, "the tools/execute listener never ran"
        assert [e["data"]["call_id"] for e in k.events(a, "tool/result")] == ["c1", "c2"]
        assert len(echo.calls) == 1, "the short-circuited call never reached the tool"
        ids = [b["tool_call_id"] for m in k.model.requests[1]["messages"] for b in m["content"] if b.get("type") == "tool-result"]
        assert ids == ["c1", "c2"]

    run(scenario)


@pytest.mark.rule("TOOL-3", "LOOP-5")
def test_a_listener_serves_a_tool_nobody_registered(run: Run) -> None:
    # LOOP-5: every tool call goes through the tools/execute waterfall, and TOOL-3's unknown-tool
    # error is where the chain ends: a listener answering a call itself serves a tool nobody
    # registered (a loop failing unknown tools ahead of the waterfall never asks it). Observed
    # through the listener's own calls, the log and the next request.
    async def scenario(k: Kit) -> None:
        served: list[str] = []

        async def virtual(execution: dict, next: object) -> object:
            if execution["name"] == "virtual":
                served.append(execution["call_id"])
                return {"call_id": execution["call_id"], "content": [v.text("served")], "is_error": False}
            return await next()  # type: ignore[operator]

        k.on("tools/execute", virtual)
        a = k.agent()
        k.model.push(fakes.tool_calls(("c1", "virtual", '{"q": 1}'), ("c2", "nowhere", "{}")))
        a.send("hi")
        await k.idle(a)
        assert served == ["c1"], "the tools/execute listener was never asked for the unregistered tool's call"
        results = {e["data"]["call_id"]: e["data"] for e in k.events(a, "tool/result")}
        assert results["c1"]["is_error"] is False and results["c1"]["content"] == [v.text("served")]
        assert results["c2"]["is_error"] is True and results["c2"]["error"]["code"] == "UNKNOWN_TOOL"
        blocks = {b["tool_call_id"]: b for m in k.model.requests[1]["messages"] for b in m["content"]
                  if b.get("type") == "tool-result"}
        assert blocks["c1"]["is_error"] is False and blocks["c1"]["content"] == [v.text("served")]
        assert k.reasons(a) == [COMPLETED]

    run(scenario)


@pytest.mark.rule("TOOL-5", "CANCEL-MID")
@pytest.mark.parametrize("plugin", [False, True])
def test_abort_during_a_tool_that_ignores_the_signal(run: Run, plugin: bool) -> None:
    # The tool does not honour its abort signal (it finishes its work later anyway): the step
    # still ends at the abort, not when the tool returns, no later tool of the step runs, no next
    # step, the turn aborted. Also with a tools/execute plugin passing the call on (a loop that
    # awaited the waterfall without its abort waited for the tool: session 60's blind round L;
    # every independent loop ends the step at once, with the plugin or without).
    async def scenario(k: Kit) -> None:
        stubborn = k.tool("stubborn", delay=2.0, abort_aware=False)
        after = k.tool("after")
        a = k.agent()
        if plugin:
            k.on("tools/execute", passthrough, needs="the test passes the call on through a plugin")
        k.model.push(fakes.tool_calls(("c1", "stubborn", "{}"), ("c2", "after", "{}"), ("c3", "after", "{}")))
        a.send("hi")
        await k.until(lambda: bool(stubborn.calls), "the stubborn tool")
        loop = asyncio.get_running_loop()
        aborted_at = loop.time()
        a.abort("enough")
        await k.idle(a)
        waited = loop.time() - aborted_at
        assert waited < 1.0, (
            f"the turn ended {waited:.2f} virtual s after the abort, once the tool that ignores its signal returned: an "
            "abort during a tool ends the step (TOOL-5, CANCEL-MID), whatever the tool does with its signal")
        assert after.calls == [], "no further tool of the step runs"
        assert len(k.model.requests) == 1, "no next model step runs"
        assert k.reasons(a) == [aborted("enough")]

    run(scenario)


class _SignalWatcher:
    """A tool (``reference_loop.protocols.Tool``) that records its context and what its call's
    abort signal reports, then waits for the gate (or its abort)."""

    name = "watcher"
    description = "records its context"

    def __init__(self) -> None:
        self.input_schema: dict[str, Any] = {"type": "object"}
        self.contexts: list[dict[str, Any]] = []
        self.fired: list[str] = []

    async def execute(self, arguments: Any, context: Any) -> str:
        self.contexts.append({"call_id": context["call_id"]})
        context["signal"].add_listener(self.fired.append)
        await asyncio.sleep(60.0)
        return "never"


@pytest.mark.rule("TOOL-5", "TOOL-4")
def test_a_tool_sees_its_call_and_its_abort(run: Run) -> None:
    # What spec 0's tools/execute execution gives a tool: the model's call id and the step's abort
    # signal, which fires with the abort's reason when the step is aborted during the tool. (Not
    # the agent's id: the Tool protocol's context has one, the spec's execution does not; an
    # independent loop written from the spec alone, 2026-12-03, failed here for lacking it.)
    # The watching tool ignores its signal and sleeps on: the abort still ends the step and the
    # turn (TOOL-5, as CANCEL-MID for a stream whose adapter ignores it), so the loop stops waiting.
    async def scenario(k: Kit) -> None:
        echo = k.tool("echo")
        watcher = _SignalWatcher()
        k.service.register_tool(watcher)
        a = k.agent("tooled")
        k.model.push(fakes.tool_calls(("c1", "echo", "{}"), ("c2", "watcher", "{}")))
        a.send("hi")
        await k.until(lambda: bool(watcher.contexts), "the watching tool")
        a.abort("stop watching")
        await k.idle(a, what="an abort during a tool that ignores its signal ends the step and the turn; the loop "
                             "must not wait for the tool to return (TOOL-5)")
        assert [c.call_id for c in echo.calls] == ["c1"]
        assert watcher.contexts == [{"call_id": "c2"}]
        assert watcher.fired == ["stop watching"], "the tool's signal fires with the abort's reason"
        assert k.reasons(a) == [aborted("stop watching")]

    run(scenario)


@pytest.mark.rule("TOOL-3", "TOOL-4")
def test_a_listener_result_is_logged_as_returned(run: Run) -> None:
    # A tools/execute listener that answers itself with a failure of its own (spec 0b's result
    # {call_id, content, is_error, error?}): the tool/result carries its content, is_error and
    # error as returned, keyed on the model's call id; the tool never runs.
    async def scenario(k: Kit) -> None:
        echo = k.tool("echo")
        a = k.agent()
        denied = {"call_id": "mine", "content": [v.text("Error: not today")], "is_error": True,
                  "error": {"name": "PolicyError", "code": "E_POLICY"}}

        async def policy(execution: dict, next: object) -> object:
            return dict(denied)

        k.on("tools/execute", policy)
        k.model.push(fakes.tool_calls(("c1", "echo", "{}")))
        a.send("hi")
        await k.idle(a)
        (result,) = [e["data"] for e in k.events(a, "tool/result")]
        assert result["call_id"] == "c1"
        assert (result["content"], result["is_error"], result.get("error")) == (
            denied["content"], True, denied["error"]), result
        assert echo.calls == []
        assert k.reasons(a) == [COMPLETED], "the turn goes on"

    run(scenario)


@pytest.mark.rule("TOOL-3", "LOG-6", "ERR-9")
@pytest.mark.parametrize("odd", ["object", "cycle"])
def test_tool_returning_unloggable_content_is_a_failed_result(run: Run, odd: str) -> None:
    # A tool whose content cannot be logged (not JSON, LOG-1). The contract allows two readings:
    # the tool has failed (TOOL-3: an is_error tool/result whose content is a list of blocks, and
    # the turn goes on), or the rejected tool/result append is a failure of the turn (LOG-6: a call
    # without a result is legal; ERR-9: the turn ends error, announced once). Either way nothing
    # unloggable enters the log, and the loop stays alive for the next prompt.
    async def scenario(k: Kit) -> None:
        k.tool("odd", result=[{"type": "text", "text": "x", "extra": object()}] if odd == "object" else [cyclic_block()])
        errors: list[object] = []
        k.on("agent/error", lambda *args: errors.append(args))  # read only when the turn failed
        a = k.agent()
        k.model.push(fakes.tool_calls(("c1", "odd", "{}")))
        a.send("hi")
        await k.idle(a)
        results = [e["data"] for e in k.events(a, "tool/result")]
        assert len(results) <= 1, f"one tool/result at most for call c1, got {results}"
        if results:  # TOOL-3: the tool failed
            (result,) = results
            assert result["call_id"] == "c1" and result["is_error"] is True, result
            assert isinstance(result["content"], list) and all(b.get("type") == "text" for b in result["content"])
            assert k.reasons(a) == [COMPLETED], "the turn goes on after a failed tool (TOOL-3)"
            assert len(k.model.requests) == 2
        else:  # LOG-6 and ERR-9: the turn failed on the append
            (reason,) = k.reasons(a)
            assert reason.get("kind") == "error", (
                f"call c1 got no tool/result, so its turn must end error (ERR-9), not {reason}")
            assert len(k.events(a, "error")) == 1 and len(errors) == 1, "the failure is logged and announced once"
        k.model.push(fakes.text("after"))
        a.send("next")
        await k.idle(a)
        assert k.reasons(a)[-1] == COMPLETED, "the loop goes on"

    run(scenario)


@pytest.mark.rule("TOOL-2")
def test_each_call_gets_its_own_parsed_arguments(run: Run) -> None:
    # TOOL-2: a tool receives its call's raw arguments parsed. Two calls with the same raw string
    # (one step, then the next) each get that value: a tool consuming its arguments in place (a
    # pop) leaves the next call's untouched (a loop sharing one parsed object between calls fails).
    async def scenario(k: Kit) -> None:
        received: list[Any] = []

        def consume(arguments: Any) -> str:
            received.append(dict(arguments) if isinstance(arguments, dict) else arguments)
            if isinstance(arguments, dict):
                arguments.pop("q", None)
            return "done"

        k.world.add_tool(fakes.FakeTool("search", handler=consume, description="consumes its arguments"))
        a = k.agent()
        k.model.push(fakes.tool_calls(("c1", "search", '{"q": "x"}'), ("c2", "search", '{"q": "x"}')),
                     fakes.tool_calls(("c3", "search", '{"q": "x"}')), fakes.text("done"))
        a.send("hi")
        await k.idle(a)
        assert received == [{"q": "x"}] * 3, f"the three calls received {received}"

    run(scenario)
