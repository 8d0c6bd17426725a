"""Section 10: injection (INJ-1..4), an optional feature."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import Awaitable
from typing import Any

import pytest

from conformance import fakes
from conformance.adapter import AgentHandle, Implementation
from conformance.fakes import respond
from conformance.harness import Kit
from conformance.invariants import log_violations
from conformance.plugin import NOT_APPLICABLE
from reference_loop import vocabulary as v

from ._support import (
    COMPLETED,
    DISPOSED,
    USER,
    Run,
    Watch,
    captured_warnings,
    cyclic_block,
    in_process_only,
    passthrough,
    request_texts,
    texts,
    throws_on,
    warnings_naming,
)


@pytest.mark.rule("INJ-1")
def test_inject_into_open_turn(run: Run) -> None:
    async def scenario(k: Kit) -> None:
        gate = k.gate()
        a = k.agent()
        k.model.push(fakes.text("A").gate(gate))
        a.send("A")
        await k.until(lambda: bool(k.model.requests), "A's model call")
        plugin: Any = {"kind": "plugin", "plugin": "p"}
        await k.inject(a, "ctx", plugin)
        ctx = k.events(a, "context/message")
        assert len(ctx) == 1 and ctx[0]["data"]["content"] == [v.text("ctx")]
        assert ctx[0]["data"]["source"] == plugin
        assert len(k.events(a, "turn/start")) == 1, "no new turn"
        gate.set()
        await k.idle(a)
        assert len(k.model.requests) == 1, "inject does not run the model"

    run(scenario)


@pytest.mark.rule("INJ-1", "INJ-3")
@pytest.mark.parametrize("when", ["next-step", "next-turn"])
def test_inject_after_a_tool_step_joins_the_open_turn_at_once(run: Run, when: str) -> None:
    # Context injected while a model call streams, after a tool step: in the same turn's next
    # step, or in a later turn. Only an inject made inside a tool call may wait for the call's
    # result (to keep the result next to its call); this one is appended at once, inside the
    # open turn (INJ-1), and the next request carries it (INJ-3). A loop whose "inside a tool
    # call" state outlives the tool batch defers it, and the context is never logged.
    async def scenario(k: Kit) -> None:
        gate = k.gate()
        a = k.agent()
        k.tool("echo")
        k.model.push(fakes.tool_calls(("c1", "echo", "{}")))
        if when == "next-turn":
            k.model.push(fakes.text("done"))
            a.send("A")
            await k.idle(a)
        k.model.push(fakes.text("B").gate(gate), fakes.text("after"))
        a.send("B" if when == "next-turn" else "A")
        calls = 3 if when == "next-turn" else 2
        await k.until(lambda: len(k.model.requests) >= calls, "the model call after the tool step")
        await k.inject(a, "ctx")
        ctx = k.events(a, "context/message")
        assert len(ctx) == 1 and ctx[0]["data"]["content"] == [v.text("ctx")], (
            f"the context injected into the open turn was not appended at once: {k.types(a)}")
        gate.set()
        await k.idle(a)
        turn = [e for e in k.events(a) if e["type"] in ("turn/start", "context/message", "turn/end")]
        assert [e["type"] for e in turn][-3:] == ["turn/start", "context/message", "turn/end"], turn
        a.send("C")
        await k.idle(a)
        assert "ctx" in " ".join(request_texts(k.model.requests[-1])), "the next request carries the context (INJ-3)"

    run(scenario)


@pytest.mark.rule("INJ-1")
def test_open_turn_decided_from_log(run: Run) -> None:
    async def scenario(k: Kit) -> None:
        a = k.agent()
        injected: list[object] = []

        async def listener(agent: object, turn: int, step: int, request: dict, next: object) -> object:
            if not injected:
                injected.append(asyncio.ensure_future(k.inject(a, "from plugin")))
            return await next()  # type: ignore[operator]

        k.on("agent/request", listener, needs="the test injects from it, while the turn is open")
        a.send("A")
        await k.idle(a)
        assert len(k.events(a, "turn/start")) == 1
        assert [e["data"]["content"] for e in k.events(a, "context/message")] == [[v.text("from plugin")]]

    run(scenario)


@pytest.mark.rule("INJ-1", "INJ-2")
def test_inject_while_running_but_no_turn_open(run: Run) -> None:
    # The awaited session/flush after turn/end: the agent is still running (the reference goes
    # idle only after the flush) but its turn is closed in the log. INJ-1 decides "a turn is
    # open" from the log, so this inject is a one-shot turn (INJ-2), not a context/message
    # appended after turn/end outside any turn. The other existing INJ-1 tests inject while a
    # turn is open, where deciding from the status gives the same answer.
    async def scenario(k: Kit) -> None:
        a = k.agent()
        seen: list[str] = []
        pending: list[Any] = []

        async def flush(*_args: object) -> None:
            if seen:
                return  # the one-shot turn's own flush
            seen.append(k.types(a)[-1])
            pending.append(await _one_shot_from_a_flush(k, a, "ctx"))

        k.on("session/flush", flush)
        a.send("A")
        await k.idle(a)
        if pending and pending[0] is not None:
            await asyncio.wait_for(pending[0], k.timeout)
        assert seen == ["turn/end"], f"the flush runs after turn/end: {seen}"
        types = k.types(a)
        first_end = types.index("turn/end")
        assert types[first_end + 1 :] == ["turn/start", "context/message", "turn/end"], (
            f"the inject must be a one-shot turn of its own: {types}"
        )
        start, ctx, end = (e["data"] for e in k.events(a)[-3:])
        assert start["turn"] == 2 and start["trigger"] == {"kind": "injection", "source": USER}
        assert ctx["content"] == [v.text("ctx")]
        assert end == {"turn": 2, "reason": COMPLETED}
        assert len(k.model.requests) == 1, "inject does not run the model"
        a.send("B")
        await k.idle(a)
        assert k.events(a, "turn/start")[-1]["data"]["turn"] == 3

    run(scenario)


def _inject_task(k: Kit, agent: Any, content: Any) -> asyncio.Future[Any] | None:
    """Start ``agent.inject(content)`` now: the task awaiting an ``async`` inject, ``None`` for a
    synchronous one (INJ-4 allows both)."""
    pending = k.start_inject(agent, content)
    return asyncio.ensure_future(pending) if pending is not None else None


def _inject_once(k: Kit, agent: Any, started: list[asyncio.Future[Any] | None]) -> None:
    """Start the one inject a listener makes (:func:`_inject_task`) into ``started``, taken
    first: a synchronous inject notifies its own events, this listener's too, inside the call."""
    if not started:
        started.append(None)
        started[0] = _inject_task(k, agent, "ctx")


async def _idle_after_inject(k: Kit, agent: Any, started: list[asyncio.Future[Any] | None], listener: str) -> None:
    """Await the agent idle, the inject its ``listener`` started (:func:`_inject_once`), then the
    agent idle again (the one-shot turn and its flush)."""
    await k.idle(agent)
    assert started, f"the {listener} listener never ran"
    if started[0] is not None:
        await asyncio.wait_for(started[0], k.timeout)
    await k.idle(agent)


async def _one_shot_from_a_flush(k: Kit, agent: Any, content: Any) -> asyncio.Future[Any] | None:
    """An idle inject made by a ``session/flush`` listener: started there, and awaited there only
    until its one-shot turn is in the log (its ``turn/end``), not until its own flush, which a
    loop may run after the flush in progress (INJ-4 does not say when): awaiting that in here
    would wait for itself. The caller awaits the task :func:`_inject_task` returns later."""
    ends = len(k.events(agent, "turn/end"))
    task = _inject_task(k, agent, content)
    await k.until(lambda: len(k.events(agent, "turn/end")) > ends or (task is not None and task.done()),
                  "the injection's one-shot turn")
    return task


async def _inject_with_held_flush(k: Kit, agent: Any, hold: Any) -> asyncio.Future[Any] | None:
    """An idle inject whose one-shot turn's flush waits at ``hold`` (the first flush only);
    returns once that flush has begun, with :func:`_inject_task`'s task."""
    flushing: list[bool] = []

    async def flush(*_args: object) -> None:
        if not flushing:
            flushing.append(True)
            k.poke()
            await hold.wait()

    k.on("session/flush", flush)
    injecting = _inject_task(k, agent, "ctx")
    await k.until(lambda: bool(flushing), "the inject's flush")
    return injecting


async def _bad_inject_with_held_flush(k: Kit, agent: Any, hold: Any
                                      ) -> tuple[asyncio.Future[Any] | None, list[str], bool]:
    """An idle inject of content that cannot be serialised (INJ-4), its one-shot turn's flush
    waiting at ``hold``; returns once that flush has begun and the loop had time to raise:
    :func:`_inject_task`'s task, the flush's progress (``begun``, then ``done``, or ``cut`` when
    a disposal cancels it), and whether the caller has seen the error by then."""
    flushing: list[str] = []

    async def flush(*_args: object) -> None:
        flushing.append("begun")
        k.poke()
        try:
            await hold.wait()
        except asyncio.CancelledError:
            flushing.append("cut")
            raise
        flushing.append("done")

    k.on("session/flush", flush)
    try:
        injecting = _inject_task(k, agent, [cyclic_block()])
    except Exception:
        injecting = None  # a synchronous inject raised at once, its flush left scheduled
    await k.until(lambda: bool(flushing), "the bad inject's flush")
    await k.settle(1.5)
    return injecting, flushing, injecting is None or injecting.done()


@pytest.mark.rule("INJ-1", "INJ-2")
def test_inject_from_the_turn_end_event_is_a_one_shot_turn(run: Run) -> None:
    # In a session/event listener on turn/end the turn is closed in the log though the agent
    # still runs (agent/turn-end and the flush are to come): INJ-1 decides from the log, so the
    # inject is a one-shot turn after it (INJ-2), never a context/message outside any turn (a
    # loop deciding from a turn object it clears after notifying turn/end writes one).
    async def scenario(k: Kit) -> None:
        a = k.agent()
        started: list[asyncio.Future[Any] | None] = []

        def listener(_session: object, event: Any) -> None:
            if event.get("type") == "turn/end":
                _inject_once(k, a, started)

        k.on("session/event", listener)
        a.send("A")
        await _idle_after_inject(k, a, started, "turn/end")
        types = k.types(a)
        first_end = types.index("turn/end")
        assert types[first_end + 1 :] == ["turn/start", "context/message", "turn/end"], (
            f"an inject once the turn's turn/end is logged must be a one-shot turn of its own: {types}")
        assert k.events(a, "turn/start")[-1]["data"]["trigger"]["kind"] == "injection"
        assert len(k.model.requests) == 1, "inject does not run the model"

    run(scenario)


@pytest.mark.rule("IDLE-2", "INJ-2")
def test_a_waiter_held_for_an_inject_flush_is_released_at_quiescence(run: Run) -> None:
    # A when_idle() called while an idle inject's one-shot turn flushes may resolve at once
    # (IDLE-1: not running, nothing queued) or wait for that flush. If it waits, then at the moment
    # it is released nothing is queued and the agent is not running (IDLE-2): a prompt sent
    # meanwhile, whose model call is held, runs first (a loop releasing it when the flush ends,
    # without looking again, releases it mid-turn).
    async def scenario(k: Kit) -> None:
        a = k.agent()
        hold, model = k.gate("flush"), k.gate("model")
        injecting = await _inject_with_held_flush(k, a, hold)
        sent = [False]
        released: list[tuple[bool, str, int]] = []

        async def watch(waiter: Any) -> None:
            await waiter
            released.append((sent[0], a.status, k.types(a).count("turn/end")))

        watching = asyncio.ensure_future(watch(a.when_idle()))
        await k.settle(1.5)  # an at-once release is recorded before the prompt is sent
        k.model.push(fakes.text("A").gate(model))
        sent[0] = True
        a.send("A")
        # A's turn starts now, its model call held, unless the loop runs the inject's flush before
        # its next turn (INJ-4 does not say when the flush runs): then A runs once it is open
        await k.settle(1.5)
        hold.open()
        await k.settle(1.5)
        model.open()
        await asyncio.wait_for(watching, k.timeout)
        if injecting is not None:
            await asyncio.wait_for(injecting, k.timeout)
        after_send, status, ends = released[0]
        assert status == "idle", f"when_idle() was released with the agent {status} (IDLE-1, IDLE-2)"
        if after_send:
            assert ends == 2, (
                f"when_idle(), held while the inject flushed, was released with the agent {status} and "
                f"{ends} turn/end(s) logged: at its release A (sent meanwhile) must have run (IDLE-2)")

    run(scenario)


@pytest.mark.rule("IDLE-2", "INJ-2")
@pytest.mark.parametrize("hops", [0, 1, 2, 3, 4])
def test_a_prompt_sent_as_the_inject_flush_ends_holds_a_waiter_held_for_it(run: Run, hops: int) -> None:
    # The same with the prompt sent as the inject's flush ends: by the flush listener's last act
    # (0 hops), or that many loop callbacks after it returned, before the driver has woken, while
    # the status still says idle but A is queued. A loop that looks only at its status when the
    # flush ends releases the waiter with A queued (session 55's blind round: only the hunt found
    # it, after 20 minutes). Whether the waiter was released already is read as A is sent
    # (Watch.pending_now: its done(), or that of the future a coroutine waiter awaits; a task
    # awaiting it resumes a callback or more after the release, when the driver may have started
    # A already); a waiter whose state cannot be read then is not judged.
    async def scenario(k: Kit) -> None:
        a = k.agent()
        hold = k.gate("flush")
        flushing: list[bool] = []
        watches: list[Watch] = []
        pending_at_send: list[bool | None] = []

        async def flush(*_args: object) -> None:
            if not flushing:
                flushing.append(True)
                k.poke()
                await hold.wait()
                send(hops)

        def send(left: int) -> None:
            if left:
                asyncio.get_running_loop().call_soon(send, left - 1)
                return
            pending_at_send.append(watches[0].pending_now())
            a.send("A")

        k.on("session/flush", flush)
        k.model.push(fakes.text("A"))
        injecting = _inject_task(k, a, "ctx")
        await k.until(lambda: bool(flushing), "the inject's flush")
        watches.append(Watch(k, a))
        await k.settle(1.5)  # an at-once release (IDLE-1) comes before the flush is let go
        hold.open()
        await watches[0].wait()
        if injecting is not None:
            await asyncio.wait_for(injecting, k.timeout)
        if pending_at_send and pending_at_send[0] is True:
            ends = watches[0].turn_ends_at_release()
            assert ends == 2, (
                f"when_idle(), held while the inject flushed, was released with {ends} turn/end(s) "
                "logged: A, sent as that flush ended, was queued at its release (IDLE-2: nothing is queued then)")
        await k.until(lambda: bool(pending_at_send), "the prompt sent as the flush ended")
        await k.idle(a)
        assert k.prompts(a)[-1] == ["A"]

    run(scenario)


@pytest.mark.rule("DISP-2", "INJ-2", "IDLE-4")
@pytest.mark.parametrize("waterfall", ["agent/request", "agent/turn-continuation"])
def test_an_inject_flush_ending_under_a_stalled_turn_leaves_dispose_able_to_end_it(run: Run, waterfall: str) -> None:
    # An idle inject's flush is held; meanwhile a prompt's turn starts and a waterfall listener
    # of it waits on what never comes (a loop may also hold the turn until that flush ended:
    # INJ-4 does not say). The inject's flush then ends, and dispose() follows: it
    # "ends the driver" (DISP-2) all the same. A loop that marks "awaiting a plugin" in one flag
    # per agent, set and cleared by the inject's flush too, has cleared it under the stalled
    # turn, and its dispose() no longer cuts that listener (a mutmut survivor of the reference).
    async def scenario(k: Kit) -> None:
        in_process_only(k, "a waterfall listener in this process, which only a Python loop can cut")
        a = k.agent()
        hold = k.gate("flush")
        injecting = await _inject_with_held_flush(k, a, hold)
        held: list[bool] = []

        async def plugin(*args: Any) -> Any:
            if not held:
                held.append(True)
                k.poke()
                await asyncio.get_running_loop().create_future()  # never set
            return await passthrough(*args)

        k.on(waterfall, plugin, needs=f"the agent is disposed while a {waterfall} listener waits")
        k.model.push(fakes.text("A"))
        a.send("A")
        await k.settle(1.5)  # A's turn reaches the listener now, or (a loop that lets the flush end first) later
        hold.open()
        await k.until(lambda: bool(held), f"the {waterfall} listener of A's turn")
        if injecting is not None:
            await asyncio.wait_for(injecting, k.timeout)
        await k.settle(1.5)
        a.dispose()
        await k.idle(a, what=f"dispose() must end the driver though a {waterfall} listener never returns (DISP-2)")
        task = k.service.driver_task(a)
        assert task is None or task.done(), "disposal ends the driver (DISP-2)"
        assert k.reasons(a)[-1] == DISPOSED, f"A's turn must end disposed: {k.types(a)} (DISP-1)"

    run(scenario)


@pytest.mark.rule("IDLE-1", "INJ-2")
def test_another_agents_inject_flush_does_not_hold_a_waiter(run: Run) -> None:
    # Agent a's idle inject is flushing (its flush held); agent b is idle with nothing queued:
    # b's when_idle() resolves at once (IDLE-1), whatever a's injection is doing.
    async def scenario(k: Kit) -> None:
        a, b = k.agent("a"), k.agent("b")
        hold = k.gate("flush")
        injecting = await _inject_with_held_flush(k, a, hold)
        jumps = k.clock_jumps()
        await k.idle(b)
        assert k.clock_jumps() == jumps, "b's when_idle() waited for agent a's inject flush"
        hold.open()
        if injecting is not None:
            await asyncio.wait_for(injecting, k.timeout)
        await k.idle(a)

    run(scenario)


@pytest.mark.rule("INJ-2")
def test_idle_inject_writes_one_shot_turn(run: Run) -> None:
    async def scenario(k: Kit) -> None:
        flushes: list[str] = []
        a = k.agent()
        # what the log ends with when the flush runs: the one-shot turn is written, then flushed
        k.on("session/flush", lambda *_: flushes.append(k.types(a)[-1]))
        plugin: Any = {"kind": "plugin", "plugin": "p"}
        await k.inject(a, "ctx", plugin)
        assert k.types(a) == ["turn/start", "context/message", "turn/end"]
        await k.idle(a)  # a synchronous inject may leave its flush scheduled until then
        start, ctx, end = (e["data"] for e in k.events(a))
        assert start["trigger"] == {"kind": "injection", "source": plugin}
        assert ctx["source"] == plugin and end["reason"] == COMPLETED
        assert flushes == ["turn/end"], f"the flush ran with the log ending {flushes} (INJ-2: turn/end, then the flush)"
        assert k.model.requests == []

    run(scenario)


@pytest.mark.rule("ERR-9", "ERR-6", "INJ-2")
def test_each_failing_flush_is_announced_for_the_turn_it_flushed(run: Run, impl: Implementation) -> None:
    # An agent/turn-end listener injects: a one-shot turn 2 is written after turn 1's turn/end,
    # before turn 1's flush runs. Every flush fails. Each failed turn is announced exactly once
    # (ERR-9): turn 1 for its failing flush (ERR-6), turn 2 for its own (INJ-2). A loop that
    # names the flushed turn by the log's last turn announced turn 2 twice and turn 1 never
    # (session 58's blind round I: the suite and the hunt passed it, twice).
    if "injection" not in set(getattr(impl, "features", ())):
        pytest.skip(f"{NOT_APPLICABLE}: feature injection not supported")

    async def scenario(k: Kit) -> None:
        k.record("agent/error")
        a = k.agent()
        await _one_shot_turn_flushed_before_turn_one(k, a)
        turns = sorted(e[0] for e in k.noted("agent/error"))
        assert turns == [1, 2], (
            f"agent/error announced turns {turns}: each of the two failed flushes is announced once, for the turn it "
            "flushed (ERR-9, ERR-6; the one-shot turn's, INJ-2)")

    run(scenario)


async def _one_shot_turn_flushed_before_turn_one(k: Kit, a: AgentHandle) -> None:
    """Every flush fails, and an ``agent/turn-end`` listener injects as turn 1 ends: a one-shot
    turn 2 is written before turn 1's flush runs (the log's newest turn is 2 by then)."""
    started: list[asyncio.Future[Any] | None] = []

    async def flush(*_args: object) -> None:
        raise RuntimeError("disk full")

    def turn_end(_agent: object, turn: int, *_rest: object) -> None:
        if turn == 1:
            _inject_once(k, a, started)

    k.on("session/flush", flush)
    k.on("agent/turn-end", turn_end, needs="the test injects as turn 1's end is notified")
    a.send("A")
    await _idle_after_inject(k, a, started, "agent/turn-end")
    assert k.types(a).count("turn/end") == 2, k.types(a)


@pytest.mark.rule("ERR-12")
def test_a_late_failure_is_warned_under_the_turn_it_belongs_to(run: Run, impl: Implementation) -> None:
    # ERR-12 names the agent and the turn of each contained failure: turn 1's failing flush runs
    # once the one-shot turn 2 is in the log, and its warning names turn 1, not the log's newest
    # turn (session 62's blind round Q: the warning named turn 2 while agent/error named turn 1).
    if "injection" not in set(getattr(impl, "features", ())):
        pytest.skip(f"{NOT_APPLICABLE}: feature injection not supported")

    async def scenario(k: Kit) -> None:
        with captured_warnings(k) as capture:
            a = k.agent("late-agent")
            await _one_shot_turn_flushed_before_turn_one(k, a)
        for turn in (1, 2):
            assert warnings_naming(k, capture, "late-agent", turn), (
                f"no warning names the agent and turn {turn}, whose flush failed (ERR-12): "
                f"{[r.getMessage() for r in capture.records]}")

    run(scenario)


@pytest.mark.rule("LOOP-3", "INJ-2")
def test_an_idle_inject_between_back_to_back_turns_takes_its_own_number(run: Run, impl: Implementation) -> None:
    # LOOP-3: next turn = the log's last turn/start + 1, idle injections counted. An inject
    # awaited in turn 1's flush (no turn open: a one-shot turn) while B waits for turn 2 makes
    # B's turn the third (a fresh bug of round 12 counted on once per running period).
    if "injection" not in set(getattr(impl, "features", ())):
        pytest.skip(f"{NOT_APPLICABLE}: feature injection not supported")

    async def scenario(k: Kit) -> None:
        a = k.agent()
        k.model.push(fakes.text("one").timing(first=1.0), fakes.text("two"))
        flushes: list[int] = []
        injected: list[Any] = []

        async def flush(*_args: object) -> None:
            flushes.append(1)
            if len(flushes) == 1:  # turn 1's flush only (the one-shot turn is flushed too)
                injected.append(await _one_shot_from_a_flush(k, a, "C"))

        k.on("session/flush", flush)
        a.send("A")
        await k.until(lambda: len(k.model.requests) == 1, "A's model call")
        a.send("B")  # queued for the turn after A's
        await k.idle(a)
        if injected and injected[0] is not None:
            await asyncio.wait_for(injected[0], k.timeout)
        starts = [e["data"] for e in k.events(a, "turn/start")]
        assert [(s["turn"], s["trigger"]["kind"]) for s in starts] == [
            (1, "message"), (2, "injection"), (3, "message")], starts
        assert k.prompts(a) == [["A"], [], ["B"]]

    run(scenario)


@pytest.mark.rule("INJ-2", "ERR-5")
@pytest.mark.parametrize("reporter", ["quiet", "throwing"])
def test_idle_inject_failures_contained(run: Run, reporter: str) -> None:
    # INJ-2: the one-shot turn's failing flush is reported through agent/error, "never raised
    # into the caller"; nor is the throw of an agent/error listener told of it (ERR-5: contained).
    # A loop announcing it straight on its bus let the reporter's throw reach the inject's caller
    # (session 61's blind round M).
    async def scenario(k: Kit) -> None:
        k.record("agent/error")

        async def failing_flush(*_args: object) -> None:
            raise RuntimeError("flush failed")

        def throwing_reporter(*_args: object) -> None:
            raise RuntimeError("error reporter down")

        k.on("session/flush", failing_flush)
        if reporter == "throwing":
            k.on("agent/error", throwing_reporter, needs="a throwing agent/error listener")
        a = k.agent()
        await k.inject(a, "ctx")  # a failing flush is never raised into the caller
        await k.idle(a)  # a synchronous inject may leave its flush scheduled until then
        errors = k.noted("agent/error")
        assert len(errors) == 1 and "flush failed" in str(errors[0][-1]) and errors[0][1] == 0, errors
        assert k.types(a) == ["turn/start", "context/message", "turn/end"]

    run(scenario)


@pytest.mark.rule("INJ-2", "ERR-9")
def test_an_inject_flush_failing_late_is_announced_with_its_own_turn(run: Run) -> None:
    # INJ-2: the one-shot turn's failing flush is reported through agent/error with step 0, and
    # ERR-9: announced as the failure of that turn, carrying its number, even when the flush
    # fails once a prompt sent meanwhile has opened the next turn (whether a loop runs that
    # flush before its next turn is open: INJ-4 does not say when it runs).
    async def scenario(k: Kit) -> None:
        k.record("agent/error")
        a = k.agent()
        hold, model = k.gate("flush"), k.gate("model")
        first = [True]

        async def flush(*_args: object) -> None:
            if first:  # the one-shot turn's flush only
                first.clear()
                k.poke()
                await hold.wait()
                raise RuntimeError("flush failed")

        k.on("session/flush", flush)
        injecting = _inject_task(k, a, "ctx")
        await k.until(lambda: not first, "the inject's flush")
        k.model.push(fakes.text("A").gate(model))
        a.send("A")
        await k.settle(1.5)  # A's turn opens now, unless the loop runs the inject's flush first
        hold.open()
        await k.settle(1.5)
        model.open()
        await k.idle(a)
        if injecting is not None:
            await asyncio.wait_for(injecting, k.timeout)  # never raised into the caller (INJ-2)
        one_shot = k.events(a, "turn/start")[0]["data"]["turn"]
        errors = [(turn, step) for turn, step, error in k.noted("agent/error") if "flush failed" in str(error)]
        assert errors == [(one_shot, 0)], (
            f"the inject's failing flush was announced as {errors} (turn, step), not once for its one-shot turn "
            f"{one_shot} with step 0 (INJ-2, ERR-9)")
        assert k.prompts(a)[-1] == ["A"]

    run(scenario)


@pytest.mark.rule("INJ-2")
def test_idle_inject_balanced_when_listener_throws(run: Run) -> None:
    async def scenario(k: Kit) -> None:
        k.on("session/event", lambda _s, e: (_ for _ in ()).throw(RuntimeError("x")) if e["type"] == "context/message" else None)
        a = k.agent()
        try:
            await k.inject(a, "ctx")
        except RuntimeError:
            pass  # whether a throwing append listener reaches the caller is not fixed; balance is
        assert k.types(a)[0] == "turn/start" and k.types(a)[-1] == "turn/end"
        assert k.events(a, "turn/end")[0]["data"]["turn"] == 1

    run(scenario)


@pytest.mark.rule("INJ-3")
def test_request_sees_injected_context(run: Run) -> None:
    async def scenario(k: Kit) -> None:
        a = k.agent()
        a.send("first")
        await k.idle(a)
        await k.inject(a, "ctx")
        a.send("second")
        await k.idle(a)
        texts = request_texts(k.model.requests[-1])
        assert texts == ["first", "ok", '<context source="user">', "ctx", "</context>", "second"]

    run(scenario)


@pytest.mark.rule("INJ-2", "DISP-2")
@pytest.mark.parametrize("when", ["at once", "from its turn/end"])
def test_an_idle_inject_disposed_before_its_flush_still_settles(run: Run, when: str) -> None:
    # INJ-2 writes the one-shot turn and flushes it; an async inject's awaitable stands for that
    # work. A dispose() right after it (in the same synchronous stretch, or from a session/event
    # listener on its turn/end) must not leave that awaitable pending for ever: it resolves (or
    # raises), and the disposed agent's when_idle() resolves too (DISP-2). A loop that settles it
    # only from a flush its disposed driver never runs hangs its caller.
    async def scenario(k: Kit) -> None:
        a = k.agent()
        await k.settle()
        if when == "from its turn/end":
            def dispose_at_end(_session: object, event: Any) -> None:
                if isinstance(event, dict) and event.get("type") == "turn/end":
                    a.dispose()

            k.on("session/event", dispose_at_end)
        injecting = _inject_task(k, a, "ctx")
        if when == "at once":
            a.dispose()
        if injecting is not None:
            try:
                await asyncio.wait_for(injecting, k.timeout)
            except TimeoutError:
                raise AssertionError(f"inject() disposed {when} never settled (INJ-2, DISP-2){k.why()}") from None
            except Exception:  # refusing it is the loop's choice; settling is not
                pass
        await k.idle(a, what="the disposed agent's driver to exit")
        assert a.status == "disposed"
        # an async inject whose body runs once the agent is disposed refuses it (DISP-3): nothing
        # written; otherwise its one-shot turn is whole
        assert k.types(a) in ([], ["turn/start", "context/message", "turn/end"]), k.types(a)

    run(scenario)


@pytest.mark.rule("INJ-4", "IDLE-2")
def test_a_waiter_taken_once_a_bad_inject_raised_waits_for_its_flush(run: Run) -> None:
    # INJ-4: a bad idle inject's flush "has run by the time when_idle() resolves"; a synchronous
    # inject "may leave it scheduled" (an async one may too, raising before its flush ends), and
    # its caller then has only when_idle() to wait for it. So a when_idle() taken once the inject
    # raised, while that flush has begun and its listener still writes, waits for it: a loop
    # counting the flush done when it starts it (rather than when it ends) releases the waiter
    # mid-flush. (An async inject that awaits the flush before raising gives its caller that wait
    # itself: nothing to judge here; a when_idle() taken elsewhere meanwhile is IDLE-1's, and the
    # reference resolves it at once.)
    async def scenario(k: Kit) -> None:
        a = k.agent()
        hold = k.gate("flush")
        injecting, flushing, raised = await _bad_inject_with_held_flush(k, a, hold)
        released: list[list[str]] = []

        async def watch(waiter: Any) -> None:
            await waiter
            released.append(list(flushing))

        watching = asyncio.ensure_future(watch(a.when_idle()))
        await k.settle(1.5)
        if raised:
            assert not released, (
                f"when_idle(), taken once the bad inject raised, resolved while the flush it left scheduled was "
                f"still running (INJ-4): {released}")
        hold.open()
        await asyncio.wait_for(watching, k.timeout)
        if raised:
            assert released == [["begun", "done"]], released
        if injecting is not None:
            with pytest.raises(Exception):  # noqa: B017 - any error type: the content cannot be serialised
                await asyncio.wait_for(injecting, k.timeout)

    run(scenario)


@pytest.mark.rule("INJ-4", "IDLE-2")
def test_a_bad_inject_made_in_the_turns_flush_holds_a_waiter_until_its_own_flush_ran(run: Run) -> None:
    # The same with the bad inject made by a session/flush listener of a driver turn's flush (the
    # agent still running, its turn closed in the log: a one-shot turn, INJ-2): once it raised,
    # a when_idle() taken while its own flush still runs waits for that flush (INJ-4), though
    # the driver's turn has ended by then. A loop that tracks an inject's flush only when the
    # agent is idle lets it go (session 56's adversarial blind round). (An inject that awaits its
    # flush before raising gives its caller that wait itself: not judged, as above.)
    async def scenario(k: Kit) -> None:
        a = k.agent()
        hold = k.gate("flush")
        flushes: list[str] = []
        injections: list[asyncio.Future[Any] | None] = []

        async def flush(*_args: object) -> None:
            index = len(flushes)
            flushes.append("begun")
            if index == 0:  # the driver's flush of turn 1: it injects, then returns
                try:
                    pending = k.start_inject(a, [cyclic_block()])
                except Exception:
                    pending = None  # a synchronous inject raised at once, its flush left scheduled
                injections.append(asyncio.ensure_future(pending) if pending is not None else None)
            else:
                k.poke()
                await hold.wait()
            flushes[index] = "done"

        k.on("session/flush", flush)
        k.model.push(fakes.text("A"))
        a.send("A")
        await k.until(lambda: len(flushes) >= 2, "the bad inject's flush")
        await k.settle(1.5)
        injecting = injections[0]
        raised = injecting is None or injecting.done()  # the caller has seen the error, its flush held
        watch = Watch(k, a)
        await k.settle(1.5)
        if raised and flushes[1] == "begun":
            assert watch.pending_now() is not False, (
                "when_idle(), taken once the bad inject raised, resolved while the flush it left scheduled was still "
                f"running (INJ-4): flushes {flushes}")
        hold.open()
        await watch.wait()
        if injecting is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(injecting, k.timeout)

    run(scenario)


@pytest.mark.rule("INJ-4", "IDLE-4", "DISP-2")
def test_a_disposed_agents_waiter_waits_for_a_bad_injects_flush(run: Run) -> None:
    # The same with the agent disposed once the bad inject raised, its flush still running: the
    # flush "has run by the time when_idle() resolves" (INJ-4) whatever else ends meanwhile, and a
    # disposed agent's waiter waits for its driver to exit (IDLE-4) as well. A loop whose
    # disposal releases waiters when its driver exits, without looking at the inject's flush,
    # releases this one mid-flush (session 56's blind round: neither the suite nor the hunt saw
    # it). A loop may also cut that flush as it disposes (DISP-2 ends what it awaits): a
    # listener cancelled there has ended too.
    async def scenario(k: Kit) -> None:
        a = k.agent()
        hold = k.gate("flush")
        injecting, flushing, raised = await _bad_inject_with_held_flush(k, a, hold)
        a.dispose()
        watch = Watch(k, a)
        released: list[list[str]] = []
        watch.task.add_done_callback(lambda _task: released.append(list(flushing)))
        await k.settle(1.5)
        if raised and flushing == ["begun"]:
            assert not released, (
                "when_idle() of the disposed agent resolved while the flush the bad inject left scheduled was "
                f"still running (INJ-4: it has run by then): {released}")
        hold.open()
        await watch.wait()
        if raised:
            assert released and released[0][-1] in ("done", "cut"), (
                f"when_idle() of the disposed agent resolved before the bad inject's flush had run (INJ-4): {released}")
        if injecting is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(injecting, k.timeout)

    run(scenario)


@pytest.mark.rule("INJ-4")
@pytest.mark.parametrize("odd", ["object", "cycle"])
def test_bad_inject_input(run: Run, odd: str) -> None:
    # An idle inject() of content that cannot be serialised raises to the caller once its
    # one-shot turn is closed: the turn/end is in the log when the error arrives. Its flush
    # still runs: an async inject may await it before raising, a synchronous one may leave it
    # scheduled; either way it has run by the time when_idle() resolves. A bad source raises
    # and writes nothing.
    async def scenario(k: Kit) -> None:
        flushes: list[int] = []

        async def flush(*_args: object) -> None:
            await asyncio.sleep(0.05)  # a persistence plugin writing the log out: it takes a while
            flushes.append(1)

        k.on("session/flush", flush)
        a = k.agent()
        at_raise: list[str] | None = None
        bad = {"type": "text", "text": object()} if odd == "object" else cyclic_block()
        try:
            await k.inject(a, [bad])
        except Exception:
            at_raise = k.types(a)
        assert at_raise is not None, "inject() of content that cannot be serialised must raise"
        assert at_raise[:1] == ["turn/start"] and at_raise[-1:] == ["turn/end"], (
            f"the one-shot turn must be closed when the error reaches the caller: {at_raise}"
        )
        await k.idle(a)
        assert flushes == [1], "its flush (which takes a while) has run by the time when_idle() resolves"
        before = len(k.events(a))
        with pytest.raises(Exception):  # noqa: B017 - any error type, it must raise
            await k.inject(a, "ctx", {"kind": "plugin", "plugin": object()})
        assert len(k.events(a)) == before, "a bad source writes nothing"

    run(scenario)


@pytest.mark.rule("INJ-4")
def test_inject_contains_turn_end_and_flush_failures(run: Run) -> None:
    async def scenario(k: Kit) -> None:
        async def failing_flush(*_args: object) -> None:
            raise RuntimeError("flush failed")

        k.on("session/flush", failing_flush)
        k.on("session/event", lambda _s, e: (_ for _ in ()).throw(RuntimeError("x")) if e["type"] == "turn/end" else None)
        a = k.agent()
        await k.inject(a, "ctx")
        assert k.types(a) == ["turn/start", "context/message", "turn/end"]
        a.send("after")
        await k.idle(a)
        assert k.prompts(a)[-1] == ["after"]

    run(scenario)


@pytest.mark.rule("INJ-3")
def test_context_injected_during_a_tool_reaches_the_next_step(run: Run) -> None:
    # Injected while a tool of step 1 runs (the turn is open): the request of step 2 carries
    # the context where the log has it. Where that is, INJ-1 leaves open (it is appended into
    # the open turn): as the inject is made, between the tool call and its result, or once the
    # step's tool results are logged (a loop keeping each call next to its result, as providers
    # want, defers it; upstream does).
    async def scenario(k: Kit) -> None:
        a = k.agent()

        async def inject_now(_args: object) -> None:
            await k.inject(a, "from the tool", {"kind": "plugin", "plugin": "p"})

        k.tool("lookup", result="found", hook=inject_now)
        k.model.push(fakes.tool_calls(("c1", "lookup", "{}")), fakes.text("done"))
        a.send("hi")
        await k.idle(a)
        types = k.types(a)
        second_step = [i for i, t in enumerate(types) if t == "step/start"][1]
        assert types.index("tool/call") < types.index("context/message") < second_step, types
        messages = k.model.requests[1]["messages"]
        wrapped = [v.text('<context source="plugin">'), v.text("from the tool"), v.text("</context>")]
        contents = [m["content"] for m in messages]
        assert wrapped in contents, f"the step-2 request lacks the context: {contents}"
        position = contents.index(wrapped)
        call = contents.index([v.tool_call("c1", "lookup", "{}")])
        result = next(i for i, c in enumerate(contents) if c and c[0]["type"] == "tool-result")
        if types.index("context/message") < types.index("tool/result"):
            assert call < position < result, "logged between the call and its result: so in the request"
        else:
            assert result < position, "logged after the tool result: so in the request"
        assert len(k.events(a, "turn/start")) == 1

    run(scenario)


@pytest.mark.rule("INJ-1")
@pytest.mark.parametrize("stop", ["abort", "cancel"])
def test_context_injected_during_a_tool_that_is_then_stopped_stays_in_that_turn(run: Run, stop: str) -> None:
    # The same inject, then the step stopped while the tool still runs: the turn ends aborted,
    # and the context is in it, before its turn/end. A loop that defers the context until the
    # tool's result is logged must still write it when no result comes (round 25's
    # `aborted-tool-strands-context` wrote it into a later turn, or never).
    async def scenario(k: Kit) -> None:
        a = k.agent()

        async def inject_then_stop(_args: object) -> None:
            await k.inject(a, "from the tool", {"kind": "plugin", "plugin": "p"})
            a.abort("stop") if stop == "abort" else a.cancel("stop")
            await asyncio.sleep(1.0)  # still running when the stop lands

        k.tool("lookup", result="found", hook=inject_then_stop)
        k.model.push(fakes.tool_calls(("c1", "lookup", "{}")), fakes.text("done"), fakes.text("next"))
        a.send("hi")
        await k.idle(a)
        a.send("again")
        await k.idle(a)
        types = k.types(a)
        assert k.reasons(a)[0]["kind"] == "aborted", k.reasons(a)
        first = types[:types.index("turn/end") + 1]
        assert "context/message" in first, f"the context injected in turn 1 is not in turn 1: {first}"
        assert types.count("context/message") == 1, f"the context was logged again, or into a later turn: {types}"

    run(scenario)


@pytest.mark.rule("INJ-3")
def test_context_injected_while_the_system_prompt_is_assembled_reaches_that_steps_request(run: Run) -> None:
    # Injected while an async system-prompt listener holds step 1 (the turn is open, its
    # step/start logged, no request built yet): the request the model then receives is the next
    # one, and it carries the context where the log has it, after the prompt.
    async def scenario(k: Kit) -> None:
        a = k.agent()
        injected = asyncio.Event()

        async def assembling(*args: Any) -> Any:
            if not injected.is_set():
                injected.set()
                await k.inject(a, "while assembling", {"kind": "plugin", "plugin": "p"})
                await asyncio.sleep(1.0)
            return await args[-1]()

        k.on("system-prompt", assembling, needs="the test injects while the system prompt is assembled")
        a.send("hi")
        await k.idle(a)
        types = k.types(a)
        assert types.index("step/start") < types.index("context/message"), types
        assert len(k.model.requests) == 1, "one step: an inject into an open turn runs no model (INJ-1)"
        texts_sent = request_texts(k.model.requests[0])
        assert texts_sent == ["hi", '<context source="plugin">', "while assembling", "</context>"], (
            f"the request built after the inject lacks the context the log already had: {texts_sent}")

    run(scenario)


async def _injected_past_a_throw(k: Kit, a: AgentHandle) -> None:
    """Inject ``ctx`` into the idle agent ``a`` and wait until it settles."""
    try:
        await k.inject(a, "ctx")
    except RuntimeError:
        pass  # whether a throwing append listener reaches the caller is not fixed
    await k.idle(a)


@pytest.mark.rule("INJ-2", "ERR-9")
@pytest.mark.parametrize("event", ["turn/start", "context/message", "turn/end"])
def test_idle_inject_turn_stays_balanced_when_a_listener_throws(run: Run, event: str) -> None:
    # A session/event listener throwing once on one event of the one-shot turn: the event stays
    # in the log (LOG-2) and the turn is balanced (INJ-2: even if a listener throws). Two
    # readings meet here, and both are accepted: INJ-2's shape, turn/start{injection}, the
    # context, turn/end{completed}; or the listener's failure ending the turn error (ERR-1;
    # ERR-11 for turn/start, which consumes the context as it does a prompt) with one error
    # event carrying its message. Whatever is announced through agent/error carries the
    # listener's own error (ERR-9).
    async def scenario(k: Kit) -> None:
        k.record("agent/error")
        failure = RuntimeError(f"listener on {event} failed")
        thrown: list[str] = []

        def listener(_session: object, logged: dict[str, Any]) -> None:
            if logged["type"] == event and not thrown:
                thrown.append(event)
                raise failure

        k.on("session/event", listener)
        a = k.agent()
        await _injected_past_a_throw(k, a)
        assert thrown == [event]
        types = k.types(a)
        assert types[0] == "turn/start" and types[-1] == "turn/end" and types.count("turn/end") == 1, types
        start, end = k.events(a)[0]["data"], k.events(a)[-1]["data"]
        assert start["trigger"]["kind"] == "injection"
        contexts = [texts(e["data"]["content"]) for e in k.events(a, "context/message")]
        if end["reason"] == COMPLETED:
            assert types == ["turn/start", "context/message", "turn/end"], types
        else:
            assert event != "turn/end", "a listener on turn/end runs after the reason is logged (ERR-4, ERR-10)"
            assert end["reason"]["kind"] == "error" and str(failure) in end["reason"]["message"], end["reason"]
            errors = k.events(a, "error")
            assert len(errors) == 1 and str(failure) in errors[0]["data"]["message"], errors
            assert set(types[1:-1]) <= {"context/message", "error"}, types
            if event == "context/message":
                assert contexts, "the context was appended before its listener threw (LOG-2)"
        assert contexts in ([], [["ctx"]]), contexts
        for _turn, _step, error in k.noted("agent/error"):
            assert error is failure or str(error) == str(failure), error

    run(scenario)


@pytest.mark.rule("INJ-2", "ERR-9")
@pytest.mark.parametrize("first", ["another failing flush listener", "a throwing context/message listener"])
def test_an_idle_injects_turn_is_announced_failed_once(run: Run, first: str) -> None:
    # ERR-9: every failed turn is announced exactly once, the first failure winning; an idle
    # inject's one-shot turn is a turn like any other, whose failing flush INJ-2 reports through
    # agent/error. Two failures of one such turn, the flush's second: two failing flush listeners,
    # or a throwing context/message listener and then a failing flush (whether that throw fails
    # the turn or is contained, one announcement). Session 49's review: examples/spec_loop
    # announced each failure of a one-shot turn.
    async def scenario(k: Kit) -> None:
        k.record("agent/error")

        async def flush_failed(*_args: object) -> None:
            raise RuntimeError("flush failed")

        k.on("session/flush", flush_failed)
        if first == "another failing flush listener":
            async def flush_failed_too(*_args: object) -> None:
                raise RuntimeError("flush failed too")

            k.on("session/flush", flush_failed_too)
        else:
            def context_failed(_session: object, logged: dict[str, Any]) -> None:
                if logged["type"] == "context/message":
                    raise RuntimeError("context listener failed")

            k.on("session/event", context_failed)
        a = k.agent()
        await _injected_past_a_throw(k, a)
        told = [(turn, str(error)) for turn, _step, error in k.noted("agent/error")]
        assert len(told) == 1, f"the one-shot turn's failures were announced {len(told)} times: {told}"

    run(scenario)


async def _awaited(awaitable: Awaitable[Any]) -> Any:
    return await awaitable


def _scheduled(awaitable: Awaitable[Any] | None) -> asyncio.Future[Any] | None:
    """An ``async`` inject's awaitable as a task (awaited later, INJ-4)."""
    return asyncio.ensure_future(_awaited(awaitable)) if awaitable is not None else None


@pytest.mark.rule("INJ-2")
@pytest.mark.parametrize("history", ["fresh", "after-a-turn"])
@pytest.mark.parametrize("order", ["inject-then-send", "send-then-inject"])
def test_idle_inject_racing_a_send(run: Run, schedule: str, order: str, history: str) -> None:
    # inject("C") on an idle agent and send("A") in one synchronous stretch, in either order:
    # the driver may open A's turn while the inject runs. Whatever the interleaving, turns pair
    # and nest (LOG-4: no turn/start inside an open turn) with increasing numbers, the context is
    # written exactly once and A runs exactly once. A context written inside A's open turn is
    # INJ-1; one written outside it is INJ-2's one-shot turn: turn/start{injection}, the
    # context/message, turn/end{completed}, nothing else.
    async def scenario(k: Kit) -> None:
        a = k.agent()
        if history == "after-a-turn":
            a.send("first")
            await k.idle(a)
        requests = len(k.model.requests)
        if order == "inject-then-send":
            pending = _scheduled(k.start_inject(a, "C"))
            a.send("A")
        else:
            a.send("A")
            pending = _scheduled(k.start_inject(a, "C"))
        await k.idle(a)
        if pending is not None:
            try:
                await asyncio.wait_for(asyncio.shield(pending), k.timeout)
            except TimeoutError:
                raise AssertionError(f"inject() never finished{k.why()}") from None
        await k.idle(a)  # a synchronous inject may leave its flush scheduled until then
        events = k.events(a)
        types = [e["type"] for e in events]
        nesting = [p for p in log_violations(events) if p.startswith("LOG-4")]
        assert not nesting, f"{nesting[0]}: {types}"
        numbers = [e["data"]["turn"] for e in events if e["type"] == "turn/start"]
        assert all(x < y for x, y in itertools.pairwise(numbers)), f"turn numbers must increase: {numbers}"
        contexts = [i for i, e in enumerate(events) if e["type"] == "context/message"]
        assert len(contexts) == 1, f"the context must be written exactly once: {types}"
        assert texts(events[contexts[0]]["data"]["content"]) == ["C"]
        prompts = [i for i, e in enumerate(events) if e["type"] == "user/message" and texts(e["data"]["content"]) == ["A"]]
        assert len(prompts) == 1, f"A must run exactly once: {types}"
        assert len(k.model.requests) == requests + 1, "A runs once and inject does not run the model"
        # The turn holding the context: from the turn/start before it to the turn/end after it.
        at = contexts[0]
        start = max(i for i in range(at) if types[i] == "turn/start")
        end = next(i for i in range(at, len(types)) if types[i] == "turn/end")
        if start < prompts[0] < end:
            return  # written into A's open turn: INJ-1
        assert types[start : end + 1] == ["turn/start", "context/message", "turn/end"], (
            f"a context written outside A's turn must be a one-shot turn of its own: {types}"
        )
        assert events[start]["data"]["trigger"]["kind"] == "injection", events[start]["data"]
        assert events[end]["data"]["reason"] == COMPLETED, events[end]["data"]

    run(scenario)


@pytest.mark.rule("INJ-2", "ERR-4")
@pytest.mark.parametrize("boundary", ["turn/end", "turn/start"])
def test_an_idle_inject_after_a_throwing_boundary_listener_opens_its_own_turn(run: Run, boundary: str) -> None:
    # ERR-4: a session/event listener throwing on a turn's boundary leaves the turn balanced and
    # the loop alive. The turn is closed all the same: an inject once the agent is idle is an
    # idle inject, a one-shot injection turn of its own (INJ-2), not context dropped into the
    # closed turn (a loop whose "is a turn open" state missed the close fails here).
    async def scenario(k: Kit) -> None:
        a = k.agent()
        thrown: list[str] = []
        k.on("session/event", throws_on(boundary, thrown))
        a.send("hi")
        await k.idle(a)
        assert thrown, f"the {boundary} listener never ran"
        before = len(k.events(a))
        assert k.types(a)[-1] == "turn/end", k.types(a)
        await k.inject(a, "ctx")
        await k.idle(a)
        added = k.events(a)[before:]
        assert [e["type"] for e in added] == ["turn/start", "context/message", "turn/end"], (
            f"the inject after a throwing {boundary} listener logged {[e['type'] for e in added]}, "
            "not a one-shot injection turn")
        assert added[0]["data"]["trigger"]["kind"] == "injection"
        assert log_violations(k.events(a)) == []

    run(scenario)


@pytest.mark.rule("INJ-1")
def test_inject_into_a_long_open_turn_joins_that_turn(run: Run) -> None:
    # INJ-1 "into an open turn": however many events the turn has logged. A turn whose first
    # step streamed a hundred chunks is open while its tool runs; an inject from the tool
    # appends context/message inside it, no one-shot turn of its own (as the inject is made, or
    # once the step's tool results are logged: INJ-1 says into which turn, not when).
    async def scenario(k: Kit) -> None:
        a = k.agent()

        async def inject_now(_args: object) -> None:
            await k.inject(a, "late context")

        k.tool("lookup", result="found", hook=inject_now)
        long_step = (respond.text("word " * 100, deltas=100) + respond.tool_call("lookup", "{}", id="c1")).finish(
            "tool-calls")
        k.model.push(long_step, fakes.text("done"))
        a.send("hi")
        await k.idle(a)
        types = k.types(a)
        assert types.count("assistant/chunk") >= 100, types.count("assistant/chunk")
        assert types.count("turn/start") == 1 and types.count("turn/end") == 1, (
            f"the inject opened a turn of its own: {types.count('turn/start')} turn/start")
        assert types.index("tool/call") < types.index("context/message") < types.index("turn/end"), (
            "the context lies inside the turn that was open while its tool ran")
        assert len(k.model.requests) == 2, "the inject ran no model call of its own"
        assert log_violations(k.events(a)) == []

    run(scenario)


@pytest.mark.rule("LOOP-3", "INJ-2")
def test_an_inject_as_the_agent_starts_running_numbers_its_turn_before_the_drivers(run: Run) -> None:
    # An inject() from a synchronous agent/status('running') listener finds no turn open in the
    # log (the driver has not appended its turn/start yet): a one-shot turn (INJ-2), numbered
    # from the log (LOOP-3), and the driver's turn, numbered from the log when it opens, after
    # it: numbers strictly increase, none taken twice.
    async def scenario(k: Kit) -> None:
        a = k.agent()
        pending: list[Awaitable[Any] | None] = []

        def listener(_agent: object, status: str) -> None:
            if status == "running" and not pending:
                pending.append(k.start_inject(a, "context"))

        k.on("agent/status", listener, needs="an inject() as the agent starts running, before its turn opens")
        a.send("A")
        await k.idle(a)
        if pending and pending[0] is not None:
            await pending[0]
        await k.idle(a)
        starts = [e["data"]["turn"] for e in k.events(a, "turn/start")]
        ends = [e["data"]["turn"] for e in k.events(a, "turn/end")]
        assert len(starts) == 2 and starts == sorted(set(starts)), (
            f"turn/start numbers {starts}: the inject's one-shot turn and the driver's turn each take the next "
            "number of the log (LOOP-3: strictly increasing)")
        assert ends == starts, f"turn/end numbers {ends} for turn/start numbers {starts}"
        triggers = [e["data"]["trigger"]["kind"] for e in k.events(a, "turn/start")]
        assert sorted(triggers) == ["injection", "message"], triggers

    run(scenario)
