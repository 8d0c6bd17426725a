"""Section 6: turn-end reasons and max-tokens precedence (MAXTOK-1..5, FINISH-1..2)."""

from __future__ import annotations

import json

import pytest

from conformance import fakes
from conformance.fakes import respond
from conformance.harness import Kit
from reference_loop import vocabulary as v

from ._support import COMPLETED, DISPOSED, MAXTOK, Run, aborted, once


def _continue_once(k: Kit) -> None:
    """Force one continuation after the first step of each turn."""

    async def listener(agent: object, turn: int, decision: object, next: object) -> object:
        value = await next()  # type: ignore[operator]
        steps = [e for e in k.agents[0].session.events if e["type"] == "step/start" and e["data"]["turn"] == turn]
        return True if len(steps) == 1 else value

    k.on("agent/turn-continuation", listener, needs="the test forces a second step through it")


@pytest.mark.rule("MAXTOK-1")
def test_max_tokens_turn_end(run: Run) -> None:
    async def scenario(k: Kit) -> None:
        a = k.agent()
        k.model.push(fakes.text("trunc", finish="max-tokens"))
        a.send("hi")
        await k.idle(a)
        assert k.reasons(a) == [MAXTOK]
        assert k.events(a, "assistant/message")[0]["data"]["content"] == [v.text("trunc")]

    run(scenario)


@pytest.mark.rule("MAXTOK-2")
def test_max_tokens_survives_later_clean_step(run: Run) -> None:
    async def scenario(k: Kit) -> None:
        a = k.agent()
        _continue_once(k)
        k.model.push(fakes.text("trunc", finish="max-tokens"), fakes.text("clean"))
        a.send("hi")
        await k.idle(a)
        assert len(k.model.requests) == 2
        assert k.reasons(a) == [MAXTOK]

    run(scenario)


@pytest.mark.rule("MAXTOK-3")
@pytest.mark.parametrize("ending", ["aborted", "error", "disposed"])
def test_max_tokens_loses_to_stronger_reasons(run: Run, ending: str) -> None:
    async def scenario(k: Kit) -> None:
        a = k.agent()
        _continue_once(k)
        second = respond.hang() if ending != "error" else fakes.text("x").finish("error", "overloaded")
        k.model.push(fakes.text("trunc", finish="max-tokens"), second)
        a.send("hi")
        await k.until(lambda: len(k.model.requests) == 2, "the second step")
        if ending == "aborted":
            a.abort()
        elif ending == "disposed":
            await k.settle()
            a.dispose()
        await k.idle(a)
        expected = {"aborted": aborted(), "error": {"kind": "error", "message": "overloaded"}, "disposed": DISPOSED}
        assert k.reasons(a) == [expected[ending]]

    run(scenario)


@pytest.mark.rule("MAXTOK-4")
def test_max_tokens_does_not_leak(run: Run) -> None:
    async def scenario(k: Kit) -> None:
        a = k.agent()
        k.model.push(fakes.text("trunc", finish="max-tokens"), fakes.text("clean"))
        a.send("one")
        await k.idle(a)
        a.send("two")
        await k.idle(a)
        assert k.reasons(a) == [MAXTOK, COMPLETED]

    run(scenario)


@pytest.mark.rule("MAXTOK-5")
def test_max_tokens_step_dispatches_no_tools(run: Run) -> None:
    async def scenario(k: Kit) -> None:
        echo = k.tool("echo")
        a = k.agent()
        seen: list[object] = []

        async def sneak(agent: object, turn: int, step: int, message: dict, next: object) -> object:
            value = await next()  # type: ignore[operator]
            seen.append(value["content"])
            return {**value, "content": [*value["content"], v.tool_call("c9", "echo", "{}")]}

        k.on("agent/step-result", sneak)
        k.model.push(fakes.tool_calls(("c1", "echo", "{}"), prefix="partial", finish="max-tokens"))
        a.send("one")
        await k.idle(a)
        assert seen == [[v.text("partial")]], "tool calls are removed before agent/step-result"
        assert k.events(a, "assistant/message")[0]["data"]["content"] == [v.text("partial")]
        assert echo.calls == [] and k.events(a, "tool/call") == []
        assert len(k.model.requests) == 1, "a max-tokens step counts as a step without tool calls"
        assert k.reasons(a) == [MAXTOK]

    run(scenario)


@pytest.mark.rule("MAXTOK-5")
def test_max_tokens_step_keeps_every_block_around_the_removed_calls(run: Run) -> None:
    # "Its other blocks are kept": text after a tool call is kept too, in order (removing the
    # calls is no truncation at the first one).
    async def scenario(k: Kit) -> None:
        echo = k.tool("echo")
        a = k.agent()
        k.model.push((respond.text("before") + respond.tool_call("echo", "{}", id="c1") + respond.text("between")
                       + respond.tool_call("echo", "{}", id="c2") + respond.text("after")).finish("max-tokens"))
        a.send("one")
        await k.idle(a)
        assert k.events(a, "assistant/message")[0]["data"]["content"] == [
            v.text("before"), v.text("between"), v.text("after")]
        assert echo.calls == []
        assert k.reasons(a) == [MAXTOK]

    run(scenario)


@pytest.mark.rule("MAXTOK-5")
def test_max_tokens_step_with_only_tool_calls_logs_no_message(run: Run) -> None:
    async def scenario(k: Kit) -> None:
        echo = k.tool("echo")
        a = k.agent()
        k.model.push(fakes.tool_calls(("c1", "echo", "{}"), finish="max-tokens"))
        a.send("one")
        await k.idle(a)
        assert k.events(a, "assistant/message") == []
        assert echo.calls == []
        assert k.reasons(a) == [MAXTOK]

    run(scenario)


@pytest.mark.rule("MAXTOK-5", "LOOP-6")
@pytest.mark.parametrize("returned", ["text", "nothing"])
def test_max_tokens_step_logs_a_message_by_what_step_result_returned(run: Run, returned: str) -> None:
    # "assistant/message is appended only when content remains", and "the log records what
    # agent/step-result returned" (LOOP-6): whether content remains is read from what the
    # waterfall returned (with its tool calls removed again), not from what went into it. A
    # step of only tool calls whose listener returns a text logs that text; a step of text whose
    # listener returns no content logs no message (session 56's blind round: a loop deciding
    # from the content before the waterfall passed the suite and the hunt).
    async def scenario(k: Kit) -> None:
        echo = k.tool("echo")
        a = k.agent()
        content = [v.text("(truncated)"), v.tool_call("c9", "echo", "{}")] if returned == "text" else []

        async def rewrite(agent: object, turn: int, step: int, message: dict, next: object) -> object:
            value = await next()  # type: ignore[operator]
            return {**value, "content": content}

        k.on("agent/step-result", rewrite)
        if returned == "text":
            k.model.push(fakes.tool_calls(("c1", "echo", "{}"), finish="max-tokens"))
        else:
            k.model.push(fakes.text("partial", finish="max-tokens"))
        a.send("one")
        await k.idle(a)
        messages = [e["data"]["content"] for e in k.events(a, "assistant/message")]
        assert messages == ([[v.text("(truncated)")]] if returned == "text" else []), (
            f"a max-tokens step whose agent/step-result returned {content} logged {messages} (MAXTOK-5, LOOP-6)")
        assert echo.calls == [] and k.reasons(a) == [MAXTOK]

    run(scenario)


@pytest.mark.rule("MAXTOK-5", "LOOP-5")
def test_a_clean_step_after_a_max_tokens_step_logs_its_message_even_empty(run: Run) -> None:
    # "Only when content remains" is the max-tokens step's own rule: a later step of the same
    # turn that finishes stop with no content still logs its assistant/message (LOOP-5), though
    # the turn will end max-tokens (MAXTOK-2). A loop keying the rule on the turn's max-tokens
    # flag rather than the step's finish drops it (session 56's blind round).
    async def scenario(k: Kit) -> None:
        a = k.agent()
        k.model.push(fakes.text("trunc", finish="max-tokens").hook(lambda: a.steer("go on")), respond.empty())
        a.send("one")
        await k.idle(a)
        steps = [e["data"]["step"] for e in k.events(a, "assistant/message")]
        assert len(k.model.requests) == 2, "steering drained after the max-tokens step continues the turn (CONT-1)"
        assert steps == [1, 2], (
            f"assistant/message logged for steps {steps}: step 2 finished stop, its message is logged even empty "
            "(MAXTOK-5 spares only the max-tokens step's)")
        assert k.events(a, "assistant/message")[1]["data"]["content"] == []
        assert k.reasons(a) == [MAXTOK]

    run(scenario)


@pytest.mark.rule("LOOP-5", "ASM-4", "MAXTOK-5")
def test_max_tokens_step_with_only_tool_calls_still_logs_its_usage(run: Run) -> None:
    # LOOP-5: `usage` is appended when the model reported it, whether or not a message remains
    # (a fresh bug of round 12 appended it only along with the assistant/message).
    async def scenario(k: Kit) -> None:
        k.tool("echo")
        a = k.agent()
        k.model.push(fakes.tool_calls(("c1", "echo", "{}"), finish="max-tokens").usage(7, 3))
        a.send("one")
        await k.idle(a)
        assert k.events(a, "assistant/message") == []
        usage = k.events(a, "usage")
        assert len(usage) == 1, "the step's usage was reported by the model: it is logged"
        assert usage[0]["data"]["usage"] == v.usage(7, 3)["usage"]
        assert usage[0]["data"]["turn"] == 1 and usage[0]["data"]["step"] == 1

    run(scenario)


@pytest.mark.rule("ASM-4", "LOOP-5")
def test_each_step_logs_its_own_usage(run: Run) -> None:
    # ASM-4: "the last usage chunk is the step's usage"; LOOP-5 appends it per step. In a turn of
    # several steps each usage event is that step's, not the turn's running total.
    async def scenario(k: Kit) -> None:
        k.tool("echo")
        a = k.agent()
        k.model.push(fakes.tool_calls(("c1", "echo", "{}")).usage(10, 5), fakes.text("done").usage(20, 7))
        a.send("one")
        await k.idle(a)
        got = [(e["data"]["step"], e["data"]["usage"]) for e in k.events(a, "usage")]
        assert got == [(1, v.usage(10, 5)["usage"]), (2, v.usage(20, 7)["usage"])], (
            f"each step's usage event carries that step's usage (ASM-4): {got}")
        assert k.reasons(a) == [COMPLETED]

    run(scenario)


@pytest.mark.rule("FINISH-2", "ERR-7", "TOOL-3")
@pytest.mark.parametrize("where", ["model", "tool"])
def test_an_error_coded_aborted_with_no_abort_is_a_failure(run: Run, where: str) -> None:
    # Only the step's own signal makes a failure an abort (FINISH-1: "unless the step's own abort
    # signal fired"). An adapter or a tool raising an error whose code happens to be ABORTED (a
    # provider's dropped connection, a tool's own timeout) with nobody aborting is a failure like
    # any other: the model's ends the turn error with its message and code (FINISH-2, ERR-7), the
    # tool's becomes an error result with its message and the turn goes on (TOOL-3).
    async def scenario(k: Kit) -> None:
        a = k.agent()
        if where == "model":
            k.model.push(respond.raises("connection aborted by peer", code="ABORTED"))
        else:
            k.tool("fetch", error="fetch timed out", code="ABORTED")
            k.model.push(fakes.tool_calls(("c1", "fetch", "{}")), fakes.text("after"))
        a.send("one")
        await k.idle(a)
        if where == "model":
            assert k.reasons(a) == [{"kind": "error", "message": "connection aborted by peer", "code": "ABORTED"}], (
                f"a raised error coded ABORTED with no abort ends the turn error (FINISH-2): {k.reasons(a)}")
            assert len(k.events(a, "error")) == 1
        else:
            (result,) = k.events(a, "tool/result")
            assert result["data"].get("is_error") is True
            assert "fetch timed out" in json.dumps(result["data"].get("content")), (
                f"the tool's error result carries its own message (TOOL-3): {result['data']}")
            assert k.reasons(a) == [COMPLETED], f"a failing tool does not stop the turn (TOOL-3): {k.reasons(a)}"
            assert len(k.model.requests) == 2

    run(scenario)


@pytest.mark.rule("FINISH-1")
def test_finish_error(run: Run) -> None:
    async def scenario(k: Kit) -> None:
        a = k.agent()
        k.model.push(fakes.text("partial").finish("error", "overloaded", "OVERLOADED"))
        a.send("hi")
        await k.idle(a)
        assert k.reasons(a) == [{"kind": "error", "message": "overloaded", "code": "OVERLOADED"}]
        errors = k.events(a, "error")
        assert len(errors) == 1 and errors[0]["data"]["message"] == "overloaded"
        assert errors[0]["data"]["code"] == "OVERLOADED"
        assert k.events(a, "assistant/message") == []

    run(scenario)


@pytest.mark.rule("FINISH-1")
def test_finish_aborted_without_signal_is_error(run: Run) -> None:
    async def scenario(k: Kit) -> None:
        a = k.agent()
        k.model.push(fakes.text("partial", finish="aborted"))
        a.send("hi")
        await k.idle(a)
        assert k.reasons(a) == [{"kind": "error", "message": "model stream aborted", "code": "ABORTED"}]
        assert len(k.events(a, "error")) == 1
        assert k.events(a, "assistant/message") == []

    run(scenario)


@pytest.mark.rule("FINISH-1")
def test_finish_aborted_with_signal_is_aborted(run: Run) -> None:
    async def scenario(k: Kit) -> None:
        a = k.agent()
        k.model.push(respond.hang())
        a.send("hi")
        await k.until(lambda: bool(k.model.requests), "the model call")
        a.abort("user stop")
        await k.idle(a)
        assert k.reasons(a) == [aborted("user stop")]
        assert k.events(a, "error") == [] and k.events(a, "assistant/message") == []

    run(scenario)


@pytest.mark.rule("FINISH-2")
def test_adapter_raising(run: Run) -> None:
    # "raising from stream()": while its stream is read (mid-answer, or before the first chunk)
    # or by the call itself, before any stream is returned; each ends its turn error, and the
    # loop goes on.
    async def scenario(k: Kit) -> None:
        a = k.agent()
        k.model.push(fakes.text("x", finish=None).raises("kaput", code="K_CODE", after=2), respond.raises("plain"),
                     respond.raises("no connection", code="E_CONNECT", on_call=True), respond.text("fine"))
        for prompt in ("one", "two", "three", "four"):
            a.send(prompt)
            await k.idle(a)
        assert k.reasons(a) == [{"kind": "error", "message": "kaput", "code": "K_CODE"}, {"kind": "error", "message": "plain"},
                                {"kind": "error", "message": "no connection", "code": "E_CONNECT"}, {"kind": "completed"}]
        assert len(k.events(a, "assistant/message")) == 1

    run(scenario)


@pytest.mark.rule("MAXTOK-1")
def test_max_tokens_after_a_tool_step(run: Run) -> None:
    # The truncated step is the turn's second (after a tool step): the turn still ends
    # max-tokens, in the log and in the agent/turn-end notification.
    async def scenario(k: Kit) -> None:
        k.record("agent/turn-end", needs="the test reads the turn-end reason it announces")
        k.tool("echo")
        a = k.agent()
        k.model.push(fakes.tool_calls(("c1", "echo", "{}")), respond.text("a long answer cut short").truncate(3))
        a.send("hi")
        await k.idle(a)
        assert k.reasons(a) == [MAXTOK]
        assert k.noted("agent/turn-end") == [(1, MAXTOK)]
        assert len(k.model.requests) == 2

    run(scenario)


@pytest.mark.rule("MAXTOK-2")
def test_max_tokens_survives_a_steered_continuation(run: Run) -> None:
    # No listener forces anything: steering drained after the max-tokens step continues the
    # turn (CONT-1), the next steps finish cleanly (one with a tool), the turn ends max-tokens.
    async def scenario(k: Kit) -> None:
        k.tool("echo")
        a = k.agent()
        k.model.push(
            fakes.text("trunc", finish="max-tokens").hook(lambda: a.steer("go on")),
            fakes.tool_calls(("c1", "echo", "{}")),
            fakes.text("clean"),
        )
        a.send("hi")
        await k.idle(a)
        assert len(k.model.requests) == 3
        assert k.reasons(a) == [MAXTOK]

    run(scenario)


@pytest.mark.rule("MAXTOK-3")
@pytest.mark.parametrize("ending", ["aborted", "error", "disposed"])
def test_stronger_reasons_win_right_after_the_max_tokens_step(run: Run, ending: str) -> None:
    # The stronger reason comes at the max-tokens step's own end (its agent/step-end listener
    # cancels, throws or disposes), not in a later step.
    async def scenario(k: Kit) -> None:
        a = k.agent()

        def at_step_end(*_args: object) -> None:
            if ending == "aborted":
                a.cancel("stop")
            elif ending == "error":
                raise fakes.FakeError("step-end failed")
            else:
                a.dispose()

        k.on("agent/step-end", once(at_step_end), needs="the stronger reason comes from it")
        k.model.push(fakes.text("trunc", finish="max-tokens").hook(lambda: a.steer("more")))
        a.send("hi")
        await k.idle(a)
        (reason,) = k.reasons(a)
        expected = {"aborted": "aborted", "error": "error", "disposed": "disposed"}[ending]
        assert reason["kind"] == expected, f"{expected} must win over max-tokens: {reason}"

    run(scenario)


@pytest.mark.rule("MAXTOK-4")
def test_max_tokens_does_not_leak_into_failed_or_aborted_turns(run: Run) -> None:
    # A max-tokens turn, then turns that end otherwise: each gets its own reason, and a
    # max-tokens turn in between does not taint the completed one after it.
    async def scenario(k: Kit) -> None:
        a = k.agent()
        k.model.push(
            fakes.text("trunc", finish="max-tokens"),
            respond.hang(),
            fakes.text("trunc again", finish="max-tokens"),
            respond.raises("model failed"),
            fakes.text("clean"),
        )
        a.send("one")
        await k.idle(a)
        a.send("two")
        await k.until(lambda: len(k.model.requests) == 2, "the second turn's model call")
        a.abort()
        await k.idle(a)
        for prompt in ("three", "four", "five"):
            a.send(prompt)
            await k.idle(a)
        assert k.reasons(a) == [MAXTOK, aborted(), MAXTOK, {"kind": "error", "message": "model failed"}, COMPLETED]

    run(scenario)


class _RaisingAdapter:
    """A model adapter whose ``stream()`` raises when called, before returning any iterator."""

    def __init__(self, error: BaseException) -> None:
        self.error = error
        self.calls = 0

    def stream(self, request: object) -> object:
        self.calls += 1
        raise self.error


@pytest.mark.rule("FINISH-2")
def test_adapter_raising_when_called(run: Run) -> None:
    # stream() itself raises (no iterator at all): the turn ends error with the raised message
    # and its code, one error event, no assistant/message, and the loop goes on.
    async def scenario(k: Kit) -> None:
        adapter = _RaisingAdapter(fakes.FakeError("no connection", "E_CONNECT"))
        k.service.register_model("raising", adapter)  # type: ignore[arg-type]
        a = k.agent("r", model="raising")
        a.send("one")
        await k.idle(a)
        assert adapter.calls == 1
        assert k.reasons(a) == [{"kind": "error", "message": "no connection", "code": "E_CONNECT"}]
        assert len(k.events(a, "error")) == 1 and k.events(a, "assistant/message") == []
        a.send("two")
        await k.idle(a)
        assert len(k.reasons(a)) == 2 and adapter.calls == 2, "the loop goes on"

    run(scenario)



@pytest.mark.rule("FINISH-1", "MAXTOK-1")
def test_an_unknown_finish_kind_counts_as_a_success(run: Run) -> None:
    # Section 0: "The set is open: an unknown kind counts as a success." A stream finishing with
    # a kind no rule names ends its step as a stop would: the message logged, the turn
    # completed, no error.
    async def scenario(k: Kit) -> None:
        a = k.agent()
        k.model.push(fakes.text("filtered answer", finish="content-filter"))
        a.send("hi")
        await k.idle(a)
        assert k.reasons(a) == [COMPLETED], f"a turn ending on an unknown finish kind ended {k.reasons(a)}"
        assert k.events(a, "error") == []
        (message,) = k.events(a, "assistant/message")
        assert message["data"]["content"] == [v.text("filtered answer")]

    run(scenario)
