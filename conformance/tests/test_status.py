"""Section 2: status and quiescence (STATUS-1..2, IDLE-1..4)."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import Callable

import pytest

from conformance import fakes
from conformance.fakes import respond
from conformance.harness import Kit

from ._support import Run, Watch, boom

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

            k.on("session/flush", flush)
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
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        await k.idle(a)
        assert loop.time() == t0, "a fresh agent's when_idle() resolves without waiting"
        a.send("one")
        await k.idle(a)
        t1 = loop.time()
        await k.idle(a)
        assert loop.time() == t1, "an idle agent's when_idle() resolves without waiting"

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
        assert watch.status_at_release == "idle"
        assert watch.turn_ends_at_release() == 2, "released before the queued prompt B ran"

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


def once_on(status: str, action: Callable[[], object]) -> Callable[..., None]:
    fired = [False]

    def listener(_agent: object, value: str) -> None:
        if value == status and not fired[0]:
            fired[0] = True
            action()

    return listener


@pytest.mark.rule("IDLE-3")
def test_throwing_idle_listener_cannot_strand_waiter(run: Run) -> None:
    async def scenario(k: Kit) -> None:
        a = k.agent()
        waiters: list[object] = []
        released_first: list[bool] = []

        def listener(_agent: object, value: str) -> None:
            if value == "idle":
                for w in waiters:
                    if hasattr(w, "done"):
                        released_first.append(bool(w.done()))
                raise RuntimeError("idle listener fails")

        k.on("agent/status", listener)
        a.send("A")
        waiter = a.when_idle()
        waiters.append(asyncio.ensure_future(waiter) if asyncio.iscoroutine(waiter) else waiter)
        await k.idle(a, waiters[0])  # type: ignore[arg-type]
        assert all(released_first), "waiters must be released before agent/status('idle') is emitted"

    run(scenario)


@pytest.mark.rule("IDLE-4")
def test_when_idle_on_disposal_waits_for_driver_exit(run: Run) -> None:
    async def scenario(k: Kit) -> None:
        a = k.agent()
        flush: list[str] = []

        async def slow_flush(*_args: object) -> None:
            flush.append("start")
            await asyncio.sleep(1.0)
            flush.append("end")

        k.on("session/flush", slow_flush)
        k.model.push(respond.hang())
        a.send("A")
        await k.until(lambda: bool(k.model.requests), "A's model call")
        watch = Watch(k, a)
        a.dispose()
        await watch.wait()
        assert flush in ([], ["start", "end"]), f"released while the driver was still flushing: {flush}"
        task = k.service.driver_task(a)
        assert task is None or task.done(), "released before the driver task exited"
        late = Watch(k, a)
        await late.wait()
        assert task is None or task.done()

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
