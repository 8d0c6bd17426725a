"""Section 12: Python specifics (PY-1..3)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from conformance import fakes
from conformance.adapter import Implementation
from conformance.fakes import respond
from conformance.harness import Kit, run_scenario
from reference_loop import vocabulary as v

from ._support import COMPLETED, DISPOSED, Run


@pytest.mark.rule("PY-1")
def test_cancelling_driver_task_disposes(run: Run) -> None:
    async def scenario(k: Kit) -> None:
        a = k.agent()
        k.model.push(respond.hang())
        a.send("A")
        await k.until(lambda: bool(k.model.requests), "A's model call")
        task = k.driver_task(a, "the test cancels the agent's driver task (PY-1); the adapter names none now")
        task.cancel()
        await k.until(task.done, "the driver task to end")
        await k.settle()
        assert a.status == "disposed"
        assert k.reasons(a) == [DISPOSED]

    run(scenario)


@pytest.mark.rule("PY-1")  # PY-1 alone: a wire implementation has no driver task (not applicable there)
@pytest.mark.parametrize("what", ["stream", "tool"])
def test_cancelling_driver_task_mid_step_stops_the_step_it_was_running(run: Run, what: str) -> None:
    # The driver's task cancelled while a model stream (or a tool) it started is still going,
    # not hung: the driver ends, and what it was running ends with it. A stream or tool left
    # running would log its chunks or result after the disposed turn's turn/end.
    async def scenario(k: Kit) -> None:
        a = k.agent()
        if what == "stream":
            k.model.push(respond.text(["one ", "two ", "three ", "four"], deltas=4).timing(first=0.5, between=1.0))
        else:
            k.tool("slow", delay=3.0)
            k.model.push(fakes.tool_calls(("c1", "slow", "{}")), respond.text("after the tool"))
        a.send("A")
        await k.until(lambda: bool(k.model.requests), "A's model call")
        await asyncio.sleep(1.0)  # virtual: the stream is under way, or the tool runs
        task = k.driver_task(a, "the test cancels the agent's driver task (PY-1); the adapter names none now")
        task.cancel()
        await k.until(task.done, "the driver task to end")
        await asyncio.sleep(10.0)  # long enough for a stream or tool left running to finish
        await k.settle()
        assert a.status == "disposed"
        assert k.reasons(a) == [DISPOSED]
        types = k.types(a)
        assert types[-1] == "turn/end", f"events after the disposed turn's turn/end: {types}"

    run(scenario)


@pytest.mark.rule("PY-1")
def test_cancelling_driver_task_as_its_flush_begins_disposes(run: Run) -> None:
    # The driver's task cancelled by a plain-function flush listener, as the flush begins: the
    # coroutine listener registered before it has been called but has not run yet. The
    # cancellation reaches the driver where it awaits the flush, and still ends it: the agent
    # ends disposed, the cancellation never taken for a failing flush (a loop closing the
    # listener's unstarted coroutine there, and failing at it, reported a flush failure and went
    # on idle; session 57's mutation run).
    async def scenario(k: Kit) -> None:
        a = k.agent()
        k.model.push(respond.text("one"))
        cut: list[asyncio.Task[Any] | None] = []

        async def persist(*_args: object) -> None:
            await asyncio.sleep(0.01)

        def cancel(*_args: object) -> None:
            if not cut:
                cut.append(k.service.driver_task(a))
                if cut[0] is not None:
                    cut[0].cancel()

        k.on("session/flush", persist, needs="the test holds the turn's flush")
        k.on("session/flush", cancel, needs="the test cancels the driver from inside the flush")
        a.send("A")
        await k.until(lambda: bool(cut), "the turn's flush")
        task = cut[0] or k.driver_task(a, "the test cancels the agent's driver task (PY-1); the adapter names none now")
        await k.until(task.done, "the driver task to end")
        await k.settle()
        assert a.status == "disposed", f"the driver's task was cancelled as its flush began, yet the agent is {a.status!r}"
        await k.idle(a)

    run(scenario)


@pytest.mark.rule("PY-2")
def test_sync_and_async_listeners(run: Run) -> None:
    async def scenario(k: Kit) -> None:
        order: list[str] = []
        need = "the test observes a synchronous notification through it"
        k.on("agent/queued", lambda *_: order.append("first"), needs=need)
        k.on("agent/queued", lambda *_: order.append("second"), needs=need)

        def sync_request(agent: object, turn: int, step: int, request: dict, next: object) -> object:
            order.append("sync waterfall")
            return next()  # type: ignore[operator]

        async def async_request(agent: object, turn: int, step: int, request: dict, next: object) -> object:
            order.append("async waterfall")
            return await next()  # type: ignore[operator]

        async def flush(*_args: object) -> None:
            await asyncio.sleep(0.5)
            order.append("flushed")

        k.on("agent/request", sync_request)
        k.on("agent/request", async_request)
        k.on("session/flush", flush)
        a = k.agent()
        a.send("hi")
        assert order == ["first", "second"], "emit runs listeners synchronously, in order"
        await k.idle(a)
        # Both waterfall listeners, plain and coroutine, ran before the flush; which of them a
        # chain calls first the contract leaves open (registration order is stated for
        # notifications only).
        assert order[:2] == ["first", "second"] and order[-1] == "flushed", order
        assert sorted(order[2:-1]) == ["async waterfall", "sync waterfall"], order
        assert k.reasons(a) == [COMPLETED]

    run(scenario)


@pytest.mark.rule("PY-1")
@pytest.mark.parametrize("where", ["parked", "tool"])
def test_cancelling_driver_task_elsewhere_disposes(run: Run, where: str) -> None:
    # The driver's task cancelled while it waits for work, and while a tool runs: the driver
    # ends, the agent ends disposed, and the log is balanced (the tool's turn ends disposed).
    async def scenario(k: Kit) -> None:
        a = k.agent()
        hanging = k.tool("hang", hang=True)
        await k.settle()
        if where == "tool":
            k.model.push(fakes.tool_calls(("c1", "hang", "{}")))
            a.send("A")
            await k.until(lambda: bool(hanging.calls), "the tool call")
        elif k.service.driver_task(a) is None:
            # A loop that starts a task per turn has none while it waits: nothing to cancel. One
            # that names no task at all meets PY-1's other cases, which cancel a running one.
            pytest.skip("no driver task while the agent waits for work: nothing to cancel (PY-1 is "
                        "checked on a running driver)")
        task = k.driver_task(a, "the test cancels the agent's driver task (PY-1); the adapter names none now")
        task.cancel()
        await k.until(task.done, "the driver task to end")
        await k.settle()
        assert a.status == "disposed"
        assert k.reasons(a) == ([DISPOSED] if where == "tool" else [])
        await k.idle(a)

    run(scenario)


@pytest.mark.rule("PY-1")
def test_cancelling_driver_task_before_it_first_ran_disposes(run: Run) -> None:
    # PY-1 names no moment: a driver task cancelled before its first step (right after a send,
    # in the same tick) still ends the agent disposed, and when_idle() resolves. A task cancelled
    # unstarted never runs its coroutine's handlers, so a loop must not rely on them alone.
    async def scenario(k: Kit) -> None:
        a = k.agent()
        k.model.push(respond.text("never"))
        a.send("A")
        task = k.driver_task(a, "the test cancels the agent's driver task (PY-1); the adapter names none now")
        task.cancel()
        await k.until(task.done, "the driver task to end")
        await k.settle()
        assert a.status == "disposed", f"the driver's task ended, cancelled, but the agent is {a.status!r}"
        # the prompt is dropped with the agent: no turn, or one closed disposed if send() opened it
        assert k.reasons(a) in ([], [DISPOSED]), k.reasons(a)
        await k.idle(a)

    run(scenario)


@pytest.mark.rule("PY-2")
def test_a_listener_removing_itself_does_not_cost_the_next_one_the_event(run: Run) -> None:
    # "emit runs its listeners synchronously, in registration order": a once-listener that calls
    # its own disposer while being notified leaves the listener registered after it in that
    # notification (each registered listener runs; none is skipped by another's removal).
    async def scenario(k: Kit) -> None:
        seen: list[str] = []
        disposer: list[Any] = []

        def once_only(_agent: object, status: str, *_: object) -> None:
            seen.append(f"once:{status}")
            disposer[0]()

        disposer.append(k.on("agent/status", once_only))
        k.on("agent/status", lambda _agent, status, *_: seen.append(status))
        a = k.agent()
        a.send("A")
        await k.idle(a)
        first = seen[0].removeprefix("once:")
        assert seen[1:2] == [first], f"the listener after the one that removed itself missed {first!r}: {seen}"
        assert sum(x.startswith("once:") for x in seen) == 1, seen

    run(scenario)


@pytest.mark.rule("ERR-1", "PY-2")
@pytest.mark.parametrize("event", [
    "agent/queued", "agent/status", "agent/turn-start", "agent/step-start", "agent/stream-chunk",
    "agent/step-end", "agent/turn-end", "agent/error", "session/event",
])
def test_a_throwing_listener_of_any_notification_leaves_the_loop_alive(run: Run, event: str) -> None:
    # ERR-1: a throwing plugin ends at most its turn, never the loop: every prompt a send()
    # queued gets its turn (whether the listeners registered after the throwing one still run,
    # 0b leaves open; a throw from agent/queued may reach the caller, which then queued nothing
    # the test counts). The first turn fails (the model raises: an agent/error to throw on).
    async def scenario(k: Kit) -> None:
        thrown = [0]

        def throwing(*_args: Any) -> None:
            thrown[0] += 1
            raise RuntimeError("plugin failure")

        k.on(event, throwing, needs="the test throws from it")
        k.model.push(respond.raises("model failed"), respond.text("second"))
        a = k.agent()
        queued = 0
        for prompt in ("one", "two"):
            try:
                a.send(prompt)
                queued += 1
            except Exception:
                if event != "agent/queued":
                    raise
            await k.idle(a)
        assert thrown[0] > 0
        assert len(k.reasons(a)) == queued, f"{queued} prompt(s) queued, turns ended: {k.reasons(a)}"
        assert a.status == "idle", "the loop is alive"

    run(scenario)


@pytest.mark.rule("PY-2")
def test_sync_and_async_listeners_of_other_events(run: Run) -> None:
    # Notifications other than agent/queued run synchronously and in order before they return
    # (session/event from append(), agent/status from dispose()); the awaited events take plain
    # and coroutine listeners alike (agent/request, agent/step-result, agent/turn-continuation,
    # session/flush), each call of a waterfall running both its listeners (in an order the
    # contract leaves open: registration order is stated for notifications only).
    async def scenario(k: Kit) -> None:
        order: list[str] = []
        k.tool("echo")
        a = k.agent()

        def sync_value(name: str) -> Any:
            def listener(*args: Any) -> Any:
                order.append(f"sync {name}")
                return args[-1]()

            return listener

        def async_value(name: str) -> Any:
            async def listener(*args: Any) -> Any:
                order.append(f"async {name}")
                return await args[-1]()

            return listener

        for name in ("agent/request", "agent/step-result", "agent/turn-continuation"):
            k.on(name, sync_value(name))
            k.on(name, async_value(name))

        def sync_flush(*_args: object) -> None:
            order.append("sync flush")

        async def async_flush(*_args: object) -> None:
            await asyncio.sleep(0.1)
            order.append("async flush")

        k.on("session/flush", sync_flush)
        k.on("session/flush", async_flush)
        k.model.push(fakes.tool_calls(("c1", "echo", "{}")), fakes.text("done"))
        a.send("hi")
        await k.idle(a)
        step = ["agent/request", "agent/request", "agent/step-result", "agent/step-result",
                "agent/turn-continuation", "agent/turn-continuation"]
        assert [entry.split(" ", 1)[1] for entry in order] == [*step, *step, "flush", "flush"], order
        calls = [sorted(order[i:i + 2]) for i in range(0, len(order), 2)]  # one waterfall call each
        assert all(pair[0].startswith("async ") and pair[1].startswith("sync ") for pair in calls), order
        assert k.reasons(a) == [COMPLETED]
        assert len(k.events(a, "tool/result")) == 1

        seen: list[str] = []
        need = "the test observes a synchronous notification through it"
        k.on("session/event", lambda _s, e: seen.append(f"first {e['type']}"), needs=need)
        k.on("session/event", lambda _s, e: seen.append(f"second {e['type']}"), needs=need)
        k.check_invariants = False  # a raw append after the turn, on purpose
        a.session.append("context/message", {"content": [v.text("x")], "source": {"kind": "user"}})
        assert seen == ["first context/message", "second context/message"], "append() notified before returning"
        statuses: list[str] = []
        k.on("agent/status", lambda _a, status: statuses.append(f"first {status}"), needs=need)
        k.on("agent/status", lambda _a, status: statuses.append(f"second {status}"), needs=need)
        a.dispose()
        assert statuses == ["first disposed", "second disposed"], "dispose() notified before returning"

    run(scenario)


def _transcript(impl: Implementation, schedule: str) -> str:
    out: list[str] = []

    async def scenario(k: Kit) -> None:
        k.tool("echo")
        k.model.push(fakes.tool_calls(("c1", "echo", "{}")), fakes.text("done", usage=(1, 2)))
        a = k.agent()
        a.send("hi")
        await k.idle(a)
        await asyncio.sleep(1.5)
        a.send("again")
        await k.idle(a)
        out.append(a.session.id)
        out.append(json.dumps(a.session.events, sort_keys=True, separators=(",", ":")))

    run_scenario(impl, scenario, schedule)
    return "\n".join(out)


@pytest.mark.rule("PY-3")
def test_same_seed_same_bytes(impl: Implementation) -> None:
    for schedule in ("fifo", "random-7"):
        assert _transcript(impl, schedule) == _transcript(impl, schedule)
    assert "session" in _transcript(impl, "fifo")


def _busy_transcript(impl: Implementation, schedule: str) -> str:
    """A run with ids from create(), failing and hanging tools, an abort and timed waits."""
    out: list[str] = []

    async def scenario(k: Kit) -> None:
        k.check_invariants = False  # the bytes are the point here; the log's shape has its rules
        k.tool("broken", error="no", code="E_NO")
        hanging = k.tool("hang", hang=True, delay=0.3)
        k.model.push(
            fakes.tool_calls(("c1", "broken", "{}"), ("c2", "hang", "{}")),
            fakes.text("after", usage=(2, 3)),
        )
        a = k.agent("busy")
        b = k.agent("other")  # only its session id: a second uuid from the sources
        a.send("hi")
        await k.until(lambda: bool(hanging.calls) or "turn/end" in k.types(a), "the hanging tool")
        await asyncio.sleep(0.7)
        a.abort("enough")
        await k.idle(a)
        a.send("again")
        await k.idle(a)
        for agent in (a, b):
            out.append(agent.session.id)
            out.append(json.dumps(agent.session.events, sort_keys=True, separators=(",", ":")))

    run_scenario(impl, scenario, schedule)
    return "\n".join(out)


@pytest.mark.rule("PY-3")
def test_same_seed_same_bytes_with_failures_and_timing(impl: Implementation) -> None:
    # Session uuids, event times after virtual waits and tool latencies, failures and an abort:
    # the same seed and schedule give the same bytes, under plain and pct schedules.
    for schedule in ("fifo", "pct-3"):
        first = _busy_transcript(impl, schedule)
        assert first == _busy_transcript(impl, schedule), f"two runs under {schedule} differ"
        assert "busy-session-" in first and '"time":' in first


@pytest.mark.rule("PY-1")
def test_cancelling_driver_task_during_the_flush(run: Run) -> None:
    # The driver's task is cancelled while it awaits the turn's flush (the turn already
    # closed): the cancellation is not contained as a flush failure, the agent ends disposed,
    # and the closed turn is not closed again (one turn/end, nothing after it).
    async def scenario(k: Kit) -> None:
        a = k.agent()
        flushing = asyncio.Event()

        async def flush(*_args: object) -> None:
            flushing.set()
            await asyncio.sleep(10.0)

        k.on("session/flush", flush, needs="the driver is cancelled while it awaits the flush")
        a.send("A")
        await asyncio.wait_for(flushing.wait(), k.timeout)
        task = k.driver_task(a, "the test cancels the agent's driver task (PY-1); the adapter names none now")
        task.cancel()
        await k.until(task.done, "the driver task to end")
        await k.settle()
        assert a.status == "disposed"
        assert k.types(a)[-1] == "turn/end" and k.types(a).count("turn/end") == 1, k.types(a)
        assert k.reasons(a) == [COMPLETED]
        await k.idle(a)

    run(scenario)


@pytest.mark.rule("PY-2", "LOOP-5")
def test_each_stream_chunk_is_notified_before_the_next_is_logged(run: Run) -> None:
    # PY-2: a notification runs its listeners synchronously, before emit returns; LOOP-5: each
    # chunk is appended as assistant/chunk and emitted as agent/stream-chunk. A model whose chunks
    # arrive in one burst (an HTTP read holding several events: no suspension between them) gets
    # each chunk notified while it is the newest in the log, or just before it is appended; never
    # after a later chunk was logged (a notification deferred to the event loop is).
    async def scenario(k: Kit) -> None:
        a = k.agent()
        seen: list[int] = []
        k.on("agent/stream-chunk", lambda *_args: seen.append(len(k.events(a, "assistant/chunk"))))
        k.model.push(respond.text("one two three four five six", deltas=6).finish("stop").timing(first=0, between=None))
        a.send("hi")
        await k.idle(a)
        logged = len(k.events(a, "assistant/chunk"))
        assert len(seen) == logged, f"{logged} chunks logged, {len(seen)} notified"
        late = [(i, n) for i, n in enumerate(seen, 1) if n not in (i - 1, i)]
        assert not late, (f"chunk {late[0][0]} was notified with {late[0][1]} chunks in the log: notified "
                          "after a later chunk was logged, not as it was appended")

    run(scenario)


@pytest.mark.rule("PY-1")  # PY-1 alone: a wire implementation has no driver task
@pytest.mark.parametrize("where", [
    "session/event:turn/start", "session/event:user/message", "agent/turn-start", "session/event:step/start",
    "agent/step-start", "session/event:step/end", "agent/step-end", "agent/turn-continuation",
    # the model fails: the error event, and the step/end that closes the failed step
    "failing session/event:error", "failing session/event:step/end",
])
def test_a_listener_raising_cancelled_error_is_not_contained(run: Run, where: str) -> None:
    # PY-1: a CancelledError is never swallowed as a plugin error. A listener raising it where
    # the driver itself runs it (the turn's and step's boundaries) ends the driver, its task
    # cancelled, and the agent ends disposed; no `error` event records it as the plugin's failure.
    # Whether the log is then balanced is not judged here: PY-1 asks it of a driver whose task
    # was cancelled, which delivers the CancelledError at an await, not inside a notification
    # (the reference left a turn/start its listener raised it on unclosed until session 42; so
    # did three independent loops). A tool, the model's stream and a session/flush listener,
    # which a loop may run in a task of its own, are the next test's.
    failing, _, point = where.rpartition(" ")
    event, _, logged = point.partition(":")

    async def scenario(k: Kit) -> None:
        k.check_invariants = False  # see above: the log's balance is not this test's
        raised = [0]

        def cancelling(*args: Any) -> Any:
            if raised[0] or (logged and args[-1]["type"] != logged):
                return args[-1]() if event == "agent/turn-continuation" else None
            raised[0] += 1
            raise asyncio.CancelledError()

        k.on(event, cancelling, needs="the test raises CancelledError from it")
        k.model.push(respond.raises("model failed") if failing else respond.text("the reply"))
        a = k.agent()
        a.send("A")
        await k.until(lambda: raised[0] > 0, f"the {point} listener")
        await k.driver_ended(a, "the driver to end (the CancelledError is not contained)")
        await k.settle()
        assert a.status == "disposed", f"the driver ended cancelled, but the agent is {a.status!r}"
        errors = [e for e in k.events(a, "error") if "model failed" not in str(e["data"].get("message"))]
        assert not errors, f"the CancelledError was logged as a plugin's failure: {errors}"
        await k.idle(a)

    run(scenario)


@pytest.mark.rule("PY-1")  # PY-1 alone: a wire implementation has no driver task
@pytest.mark.parametrize("where", ["tool", "model stream", "session/flush"])
def test_a_plugin_raising_cancelled_error_in_a_task_of_its_own_is_not_swallowed(run: Run, where: str) -> None:
    # PY-1: "never swallowed as plugin errors", also where a loop may run the plugin in a task of
    # its own (a tool call, the model's stream read, a session/flush listener among the concurrent
    # ones). That task ends cancelled with no abort of the loop's own behind it: the loop must not
    # record that as the plugin's failure (an is_error tool/result, an error event, an agent/error)
    # nor drop it; it reaches the driver, which ends, and the agent ends disposed. Session 49's
    # review of five independent loops: three turned it into a failed tool or turn, or dropped a
    # flush listener's silently (a gather's return_exceptions result filtered on Exception).
    async def scenario(k: Kit) -> None:
        raised = [0]

        def cancelled(*_args: Any) -> Any:
            raised[0] += 1
            raise asyncio.CancelledError()

        if where == "tool":
            k.world.add_tool(fakes.FakeTool("cancels", handler=cancelled))
            k.model.push(fakes.tool_calls(("c1", "cancels", "{}")), respond.text("after the tool"))
        elif where == "model stream":
            k.model.push(respond.text("half an answer").raises(asyncio.CancelledError, after=1))
        else:
            k.model.push(respond.text("the reply"))

            async def flush(*_args: Any) -> None:
                cancelled()

            k.on("session/flush", flush, needs="the flush listener raises CancelledError")
        k.record("agent/error")
        a = k.agent()
        a.send("A")
        if where != "model stream":
            await k.until(lambda: raised[0] > 0, f"the {where} to raise")
        await k.driver_ended(a, f"the driver to end (the {where}'s CancelledError reaches the driver)")
        await k.settle()
        assert a.status == "disposed", f"the {where}'s CancelledError ended the driver, but the agent is {a.status!r}"
        swallowed = ([e["data"] for e in k.events(a, "tool/result") if e["data"].get("is_error")]
                     + [e["data"] for e in k.events(a, "error")])
        assert not swallowed, f"the {where}'s CancelledError was recorded as a plugin's failure: {swallowed}"
        assert not k.noted("agent/error"), f"the {where}'s CancelledError was announced as a failure"

    run(scenario)
