"""Section 2: status and quiescence (STATUS-1..2, IDLE-1..4)."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import Callable

import pytest

from conformance import fakes
from conformance.fakes import Gate, respond
from conformance.harness import Kit

from ._support import (
    FLUSH_DONE,
    Run,
    Watch,
    assert_driver_exited,
    boom,
    driver_exit_at_release,
    once_on,
)

LEGAL = {("idle", "running"), ("running", "idle"), ("idle", "disposed"), ("running", "disposed")}


@pytest.mark.rule("STATUS-1")
def test_legal_transitions_only(run: Run) -> None:
    async def scenario(k: Kit) -> None:
        k.record("agent/status")
        a = k.agent()
        a.send("one")
        a.send("two")  # a burst: one running period, no repeated 'running'
        await k.idle(a)
        a.send("three")
        await k.idle(a)
        a.dispose()
        a.dispose()
        a.cancel()
        a.abort()
        await k.settle()
        trace = ["idle", *k.statuses()]
        assert k.statuses() == ["running", "idle", "running", "idle", "disposed"]
        assert all(pair in LEGAL for pair in itertools.pairwise(trace)), trace
        assert a.status == "disposed"

    run(scenario)


@pytest.mark.rule("STATUS-1", "DISP-5")
@pytest.mark.parametrize("where", ["mid-step", "flush"])
def test_dispose_while_running_goes_straight_to_disposed(run: Run, where: str) -> None:
    # test_legal_transitions_only disposes an idle agent; this one disposes a running one, once
    # inside a step and once during the awaited flush (running, turn already closed). "Settling"
    # waiters through an idle transition on the way out is legal pair by pair (running -> idle
    # -> disposed) but is not the trace the rule fixes: running -> disposed, nothing after it.
    async def scenario(k: Kit) -> None:
        k.record("agent/status")
        a = k.agent()
        if where == "mid-step":
            k.model.push(respond.hang())
        else:

            async def flush(*_args: object) -> None:
                a.dispose()

            k.on("session/flush", flush, needs="the test disposes during the turn's flush")
        a.send("A")
        if where == "mid-step":
            await k.until(lambda: bool(k.model.requests), "A's model call")
            a.dispose()
        await k.idle(a)
        # Nothing leaves disposed: none of these may emit a status or revive the agent.
        a.dispose()
        a.cancel()
        a.abort()
        for verb in (a.send, a.steer):
            # DISP-3 says these raise; that is checked there. Here only the trace matters.
            with contextlib.suppress(Exception):
                verb("late")
        await k.settle()
        trace = ["idle", *k.statuses()]
        assert k.statuses() == ["running", "disposed"], f"status trace {trace}"
        assert all(pair in LEGAL for pair in itertools.pairwise(trace)), trace
        assert a.status == "disposed"

    run(scenario)


@pytest.mark.rule("STATUS-2")
def test_throwing_status_listener_contained(run: Run) -> None:
    async def scenario(k: Kit) -> None:
        k.record("agent/status")
        k.on("agent/status", boom)
        a = k.agent()
        a.send("one")
        await k.idle(a)
        assert a.status == "idle"
        assert k.statuses()[:2] == ["running", "idle"], "transitions still happen"
        a.send("two")
        await k.idle(a)
        assert k.statuses() == ["running", "idle", "running", "idle"], "the loop goes on"

    run(scenario)


@pytest.mark.rule("IDLE-1")
def test_when_idle_resolves_at_once(run: Run) -> None:
    async def scenario(k: Kit) -> None:
        a = k.agent()
        # "at once": no wait on time (loop.time() may move under a schedule that fires a
        # polling loop's timer early, as if the ready work were slow)
        jumps = k.clock_jumps()
        await k.idle(a)
        assert k.clock_jumps() == jumps, "a fresh agent's when_idle() resolves without waiting"
        a.send("one")
        await k.idle(a)
        jumps = k.clock_jumps()
        await k.idle(a)
        assert k.clock_jumps() == jumps, "an idle agent's when_idle() resolves without waiting"

    run(scenario)


@pytest.mark.rule("IDLE-2")
def test_when_idle_waits_for_queued_work(run: Run) -> None:
    async def scenario(k: Kit) -> None:
        a = k.agent()
        # B arrives while A runs (from A's stream): the waiter must wait for B's turn too.
        k.model.push(fakes.text("A").hook(lambda: a.send("B")), fakes.text("B").timing(first=1.0))
        a.send("A")
        watch = Watch(k, a)
        await watch.wait()
        # What the waiter saw when it was released comes first: that is the rule.
        assert watch.turn_ends_at_release() == 2, "released before the queued prompt B ran"
        assert watch.status_at_release == "idle", "released while the agent was still running"

    run(scenario)


@pytest.mark.rule("IDLE-2")
def test_a_waiter_is_registered_when_called_not_when_awaited(run: Run) -> None:
    # 0b: when_idle() registers its waiter when it is *called* (it returns an awaitable, like a
    # promise); IDLE-2 releases it on the next transition out of running. A waiter taken while A
    # runs and first awaited once A went idle and B runs was released by A's idle: it resolves
    # at once, not at the end of B.
    async def scenario(k: Kit) -> None:
        first, second = k.gate("A"), k.gate("B")
        a = k.agent()
        k.model.push(fakes.text("A").gate(first), fakes.text("B").gate(second))
        a.send("A")
        await k.until(lambda: len(k.model.requests) == 1, "A's model call")
        waiter = a.when_idle()  # registered now, while A runs; not awaited yet
        first.set()
        await k.until(lambda: a.status == "idle" and "turn/end" in k.types(a), "A's turn to end and the agent idle")
        a.send("B")
        await k.until(lambda: len(k.model.requests) == 2, "B's model call")
        released = asyncio.ensure_future(waiter)  # any awaitable: a future, a coroutine, an object with __await__
        await k.until(released.done, "a when_idle() called while A ran and first awaited while B runs to resolve: "
                      "its waiter is registered when called (0b) and released by A's transition to idle (IDLE-2), "
                      "not by B's")
        second.set()
        await k.idle(a)

    run(scenario)


@pytest.mark.rule("IDLE-2")
def test_when_idle_ignores_other_agents(run: Run) -> None:
    async def scenario(k: Kit) -> None:
        gate = k.gate()
        a = k.agent("a")
        b = k.agent("b")
        k.model.push(fakes.text("A").gate(gate))
        a.send("A")
        await k.until(lambda: bool(k.model.requests), "A's model call")
        watch = Watch(k, a)
        b.send("B")
        await k.idle(b)
        await k.settle()
        assert not watch.released, "a's waiter resolved on b's transition"
        gate.set()
        await watch.wait()

    run(scenario)


@pytest.mark.rule("IDLE-2")
def test_a_waiter_awaited_twice_still_resolves_its_first_await(run: Run) -> None:
    # IDLE-2: the waiter resolves at quiescence. A second await of the same waiter may resolve
    # too (a future, "like a promise", 0b) or raise at once (a coroutine awaits once): it must
    # not make the first await hang (a fresh bug of round 12 replaced the waiter's future on
    # every await, so only the last await was ever woken).
    async def scenario(k: Kit) -> None:
        gate = k.gate()
        a = k.agent()
        k.model.push(fakes.text("A").gate(gate))
        a.send("A")
        waiter = a.when_idle()
        started = asyncio.Event()

        async def first() -> None:
            started.set()
            await waiter

        async def second() -> None:
            await waiter

        one = asyncio.ensure_future(first())
        await started.wait()
        two = asyncio.ensure_future(second())
        await k.settle()
        gate.set()
        await k.until(lambda: one.done() and two.done(), "both awaits of the one waiter to settle")
        assert one.exception() is None, f"the first await of the waiter raised {one.exception()!r}"
        two.exception()  # retrieved: raising at once is allowed for the second await

    run(scenario)


@pytest.mark.rule("IDLE-2", "IDLE-3")
def test_work_queued_by_idle_listener_is_after(run: Run) -> None:
    async def scenario(k: Kit) -> None:
        a = k.agent()
        gate = k.gate()
        # C (queued by the idle listener) cannot finish before the waiter resolves: if the
        # waiter waited for C, this deadlocks and the wait times out.
        k.model.push(fakes.text("A"), fakes.text("C").gate(gate))
        k.on("agent/status", once_on("idle", lambda: a.send("C")))
        a.send("A")
        watch = Watch(k, a)
        await watch.wait()
        gate.set()
        await k.idle(a)
        assert k.prompts(a) == [["A"], ["C"]]

    run(scenario)


@pytest.mark.rule("IDLE-2")
def test_a_waiter_an_idle_listener_takes_for_work_it_queued_waits_for_that_work(run: Run) -> None:
    # IDLE-2: work an agent/status('idle') listener queues arrives after the transition, and at
    # a waiter's release nothing is queued. A when_idle() the listener takes right after its
    # send() is not IDLE-1's (something is queued): it resolves once C's turn is over, not in
    # the stretch that published idle (a loop settling its waiters again after the idle event).
    async def scenario(k: Kit) -> None:
        a = k.agent()
        gate = k.gate()
        k.model.push(fakes.text("A"), fakes.text("C").gate(gate))
        watches: list[Watch] = []

        def on_idle() -> None:
            a.send("C")
            watches.append(Watch(k, a))

        k.on("agent/status", once_on("idle", on_idle))
        a.send("A")
        await k.until(lambda: bool(watches), "agent/status('idle') after A's turn")
        await k.settle()  # C's turn waits at the gate
        assert not watches[0].released, (
            f"when_idle(), taken by an agent/status('idle') listener right after it queued C, resolved "
            f"while C had not run (log at release: {watches[0].types_at_release}) (IDLE-2)")
        gate.set()
        await watches[0].wait()
        assert watches[0].turn_ends_at_release() == 2, watches[0].types_at_release
        assert k.prompts(a) == [["A"], ["C"]]

    run(scenario)


@pytest.mark.rule("IDLE-3")
def test_throwing_idle_listener_cannot_strand_waiter(run: Run) -> None:
    # Two observations: the waiter's own done() sampled inside the agent/status('idle') listener
    # (when the awaitable has one: "released before the event is emitted"), and the consequence
    # the rule is for, whatever the awaitable: a throwing listener cannot leave it hanging.
    async def scenario(k: Kit) -> None:
        a = k.agent()
        fired: list[str] = []
        released_first: list[bool] = []
        probe: list[Callable[[], object]] = []

        def listener(_agent: object, value: str) -> None:
            if value == "idle":
                fired.append(value)
                released_first.extend(bool(done()) for done in probe)
                raise RuntimeError("idle listener fails")

        k.on("agent/status", listener)
        a.send("A")
        waiter = a.when_idle()
        done = getattr(waiter, "done", None)
        if callable(done) and not asyncio.iscoroutine(waiter):
            probe.append(done)
        await k.idle(a, waiter)
        assert fired, "agent/status('idle') was never emitted"
        wire = (getattr(k.impl, "info", None) or {}).get("kind") == "wire"
        assert all(released_first), "waiters must be released before agent/status('idle') is emitted" + (
            " (over the wire: or the child reported the waiter settling late, wire protocol §8.4)" if wire else "")

    run(scenario)


def _slow_flush(k: Kit, log: list[str], seconds: float = 1.0, gate: Gate | None = None, needs: str | None = None) -> None:
    """A session/flush listener taking ``seconds`` (or until ``gate`` opens); ``log`` gets
    start, then end (or cancelled)."""

    async def flush(*_args: object) -> None:
        log.append("start")
        k.poke()  # wake k.until() waiting for the flush to begin
        try:
            await (gate.wait() if gate is not None else asyncio.sleep(seconds))
        except asyncio.CancelledError:
            log.append("cancelled")  # a loop may cancel its flush on disposal: also an exit
            raise
        log.append("end")

    k.on("session/flush", flush, needs=needs)


async def _released_with(k: Kit, waiter: object, snapshot: Callable[[], tuple[list[str], bool | None]]) -> tuple[list[str], bool | None]:
    """Await ``waiter`` and return ``snapshot()`` taken the moment it resolved."""
    try:
        await asyncio.wait_for(_awaited(waiter), k.timeout)
    except TimeoutError:
        raise AssertionError("when_idle() never resolved after dispose()") from None
    return snapshot()


async def _awaited(waiter: object) -> None:
    await waiter  # type: ignore[misc]


@pytest.mark.rule("IDLE-4")
@pytest.mark.parametrize("awaited", ["after dispose", "before dispose"])
def test_when_idle_on_disposal_waits_for_driver_exit(run: Run, awaited: str) -> None:
    # A waiter registered while running and released by disposal: the driver still closes the
    # turn and may flush it (slowly); the waiter resolves only once the driver has exited,
    # seen through the driver task (when the adapter exposes it) and through the flush. Awaited
    # once disposed, or already awaited by a task when dispose() comes (what that task resumes
    # to is the same: the driver gone, IDLE-4's "also waits for that exit").
    async def scenario(k: Kit) -> None:
        a = k.agent()
        flush: list[str] = []
        _slow_flush(k, flush)
        k.model.push(respond.hang())
        a.send("A")
        await k.until(lambda: bool(k.model.requests), "A's model call")
        task = k.service.driver_task(a)
        waiter = a.when_idle()
        if awaited == "before dispose":
            watcher = asyncio.ensure_future(_released_with(k, waiter, lambda: driver_exit_at_release(flush, task)))
            await k.settle()  # the watcher is inside its await of the waiter
            assert not watcher.done(), "when_idle() resolved while the turn was still running"
            a.dispose()
            seen = await watcher
        else:
            a.dispose()
            seen = await _released_with(k, waiter, lambda: driver_exit_at_release(flush, task))
        assert_driver_exited(seen)
        late = a.when_idle()
        await k.idle(a, late)
        assert task is None or task.done()

    run(scenario)


@pytest.mark.rule("IDLE-4")
def test_when_idle_called_after_dispose_waits_for_driver_exit(run: Run) -> None:
    # The other half of the rule: when_idle() called on an agent already disposed (the status
    # flipped) while its driver is still inside the turn's awaited flush.
    async def scenario(k: Kit) -> None:
        a = k.agent()
        flush: list[str] = []
        gate = k.gate()
        _slow_flush(k, flush, gate=gate, needs="the test disposes while the driver is inside the flush")
        a.send("A")
        await k.until(lambda: flush == ["start"], "the turn's flush")
        task = k.service.driver_task(a)
        a.dispose()
        assert a.status == "disposed"
        watcher = asyncio.ensure_future(_released_with(k, a.when_idle(), lambda: driver_exit_at_release(flush, task)))
        await k.settle()  # a waiter released too early resolves now, with the flush still open
        gate.open()
        seen = await watcher
        assert_driver_exited(seen, FLUSH_DONE[1:])

    run(scenario)


@pytest.mark.rule("IDLE-2", "LOOP-1")
def test_a_waiter_whose_awaiter_gave_up_harms_neither_the_other_waiters_nor_the_driver(run: Run) -> None:
    # A caller that stops waiting (asyncio.wait_for timing out: the awaitable, or the task around
    # it, is cancelled) is ordinary use: the turn still ends, the other waiters are released at
    # quiescence (IDLE-2), and the driver goes on running prompts for the agent's lifetime (LOOP-1).
    async def scenario(k: Kit) -> None:
        a = k.agent()
        k.model.push(fakes.text("A").timing(first=1.0), fakes.text("B"))
        a.send("A")
        impatient = a.when_idle()
        patient = a.when_idle()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(_awaited(impatient), 0.1)
        await k.idle(a, patient)
        a.send("B")
        await k.idle(a)
        assert k.prompts(a) == [["A"], ["B"]], f"the driver stopped running prompts: {k.prompts(a)}"
        assert a.status == "idle"

    run(scenario)


@pytest.mark.rule("IDLE-1", "IDLE-2")
def test_waiter_registered_at_call(run: Run) -> None:
    async def scenario(k: Kit) -> None:
        a = k.agent()
        k.model.push(fakes.text("A").timing(first=1.0))
        a.send("A")
        waiter = a.when_idle()  # registered now, awaited only later
        await k.until(lambda: bool(k.model.requests), "A's model call")
        await k.idle(a, waiter)
        assert k.types(a).count("turn/end") == 1

    run(scenario)


@pytest.mark.rule("STATUS-2")
def test_listener_throwing_on_running_is_contained(run: Run) -> None:
    # A listener that throws on the running flip only: the transition stands (the status is
    # running inside the turn), the turn runs to completion, and the agent settles idle.
    async def scenario(k: Kit) -> None:
        k.record("agent/status")
        a = k.agent()
        during: list[str] = []
        k.on("agent/status", lambda _a, status: boom() if status == "running" else None)
        k.model.push(fakes.text("A").hook(lambda: during.append(a.status)), fakes.text("B"))
        a.send("A")
        await k.idle(a)
        assert during == ["running"], "the running transition must stand"
        assert k.reasons(a) == [{"kind": "completed"}], "the turn runs as usual"
        assert a.status == "idle"
        a.send("B")
        await k.idle(a)
        assert k.statuses() == ["running", "idle", "running", "idle"]
        assert k.prompts(a) == [["A"], ["B"]]

    run(scenario)


@pytest.mark.rule("STATUS-1")
def test_a_new_agent_is_idle(run: Run) -> None:
    # Before anything ran, the agent's status is idle: the first transition is idle -> running.
    async def scenario(k: Kit) -> None:
        k.record("agent/status")
        a = k.agent()
        assert a.status == "idle"
        await k.settle()
        assert a.status == "idle" and k.statuses() == [], "nothing to do: no transition"
        a.send("one")
        await k.idle(a)
        assert k.statuses() == ["running", "idle"]

    run(scenario)


@pytest.mark.rule("STATUS-2", "ERR-8")
def test_status_listener_failure_if_announced_carries_turn_and_error(run: Run) -> None:
    # ERR-8 allows announcing a throwing agent/status listener through agent/error; if the
    # implementation does, the announcement has the taxonomy's shape: (agent, turn, step,
    # error) with a turn number and the listener's own error.
    async def scenario(k: Kit) -> None:
        k.record("agent/error")
        failure = RuntimeError("status listener failed")

        def throwing(*_args: object) -> None:
            raise failure

        k.on("agent/status", throwing)
        a = k.agent()
        a.send("one")
        await k.idle(a)
        for turn, step, error in k.noted("agent/error"):
            assert isinstance(turn, int) and isinstance(step, int), (turn, step)
            assert error is failure or str(error) == "status listener failed", error
        assert a.status == "idle"

    run(scenario)


@pytest.mark.rule("IDLE-1")
def test_when_idle_from_the_idle_listener_resolves_at_once(run: Run) -> None:
    # Inside agent/status('idle') the agent is not running and nothing is queued: a when_idle()
    # called there resolves without waiting for another transition (none will come).
    async def scenario(k: Kit) -> None:
        a = k.agent()
        watches: list[Watch] = []
        k.on("agent/status", once_on("idle", lambda: watches.append(Watch(k, a))))
        a.send("A")
        await k.idle(a)
        await k.settle()
        assert watches, "agent/status('idle') was never emitted"
        await watches[0].wait()
        assert watches[0].status_at_release == "idle"
        assert watches[0].turn_ends_at_release() == 1

    run(scenario)


@pytest.mark.rule("IDLE-2")
@pytest.mark.parametrize("where", ["agent/turn-end", "session/flush"])
def test_when_idle_during_the_turns_close_waits_for_the_idle_transition(run: Run, where: str) -> None:
    # After turn/end the agent is still running until the awaited flush is done and it parks:
    # a when_idle() called there (in agent/turn-end, or in a flush listener) resolves on the
    # transition out of running, not at once because the log has no open turn.
    async def scenario(k: Kit) -> None:
        a = k.agent()
        gate = k.gate()
        log: list[str] = []
        watches: list[Watch] = []
        if where == "agent/turn-end":
            k.on("agent/turn-end", lambda *_args: watches.append(Watch(k, a)) if not watches else None)
            _slow_flush(k, log, gate=gate, needs="a flush held open while the waiter is checked")
        else:
            async def flush(*_args: object) -> None:
                watches.append(Watch(k, a))
                log.append("start")
                k.poke()
                await gate.wait()

            k.on("session/flush", flush, needs="a when_idle() from inside the turn's flush")
        a.send("A")
        await k.until(lambda: bool(log) and bool(watches), "the turn's flush")
        await k.settle()
        assert a.status == "running", "the agent parked before its flush returned (LOOP-4: the flush is awaited)"
        assert not watches[0].released, f"when_idle() called in {where} resolved while the agent was still running"
        gate.set()
        await watches[0].wait()
        assert watches[0].status_at_release == "idle"

    run(scenario)
