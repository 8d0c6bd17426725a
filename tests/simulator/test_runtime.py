"""The deterministic loop: asyncio compatibility, virtual time, escapes, outcomes."""

from __future__ import annotations

import asyncio
import contextvars
import datetime
import os
import signal
import socket
import threading
import time
from typing import Any

import pytest

import simulator
from simulator.sources import EPOCH_MS, current_sources


def test_virtual_time_and_wall_clock_pinned() -> None:
    async def main() -> tuple[float, float, float, str]:
        loop = asyncio.get_running_loop()
        assert loop.time() == 0.0
        await asyncio.sleep(3600)
        return loop.time(), time.time(), time.monotonic(), datetime.datetime.now().isoformat()

    r = simulator.run(main)
    assert r.ok, r.report()
    t, wall, _mono, now = r.value
    assert t == 3600.0 and r.virtual_time == 3600.0
    # pinned to its own epoch, not the sources' EPOCH_MS: a direct read shows (PY-3)
    assert wall == 1_000_000_000 + 3600 and EPOCH_MS / 1000 > wall
    assert now == "2001-09-09T02:46:40"
    assert time.time() > 1.7e9 and datetime.datetime.now().year >= 2024  # real again after


def test_hour_of_sleeps_is_fast() -> None:
    async def main() -> None:
        async def sleeper(i: int) -> None:
            for _ in range(60):
                await asyncio.sleep(60 + i * 1e-3)

        await asyncio.gather(*(sleeper(i) for i in range(100)))

    t0 = time.perf_counter()
    r = simulator.run(main)
    wall = time.perf_counter() - t0
    assert r.ok and r.virtual_time >= 3600
    # About 30 ms here (bench/simulator.py measures it); the bound only rules out real sleeping.
    assert wall < 5.0


def test_observe_and_sources() -> None:
    async def main() -> None:
        src = current_sources()
        assert src is not None
        simulator.observe("a", x=1)
        await asyncio.sleep(1.5)
        simulator.observe("b", id=src.next_id("run"), id2=src.next_id("run"), now=src.now_ms())

    r = simulator.run(main, seed=3)
    assert r.timeline == [
        {"t": 0.0, "kind": "a", "x": 1},
        {"t": 1.5, "kind": "b", "id": "run-1", "id2": "run-2", "now": EPOCH_MS + 1500},
    ]
    assert current_sources() is None
    simulator.observe("outside")  # no-op

    async def uuids() -> list[str]:
        src = current_sources()
        assert src is not None
        return [src.uuid(), src.uuid(), str(src.random.random())]

    a, b, c = (simulator.run(uuids, seed=s).value for s in (1, 1, 2))
    assert a == b and a != c
    assert len(a[0]) == 36 and a[0][14] == "4"


def test_asyncio_primitives() -> None:
    var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="-")

    async def main() -> list[object]:
        loop = asyncio.get_running_loop()
        out: list[object] = []
        ev = asyncio.Event()
        lock = asyncio.Lock()
        cond = asyncio.Condition()
        sem = asyncio.Semaphore(2)
        q: asyncio.Queue[int] = asyncio.Queue(maxsize=1)

        async def setter() -> None:
            var.set("child")
            await asyncio.sleep(1)
            ev.set()
            async with cond:
                cond.notify_all()

        async def waiter() -> str:
            async with cond:
                await cond.wait()
            return var.get()

        async def guarded(i: int) -> int:
            async with sem, lock:
                await asyncio.sleep(0.1)
                return i

        var.set("main")
        w = asyncio.create_task(waiter())
        await asyncio.sleep(0)
        async with asyncio.TaskGroup() as tg:
            tg.create_task(setter())
            g = [tg.create_task(guarded(i)) for i in range(3)]
        await ev.wait()
        out.append(await w)
        out.append([t.result() for t in g])
        out.append(var.get())
        try:
            await asyncio.wait_for(asyncio.sleep(10), timeout=2)
        except TimeoutError:
            out.append(("wait_for timeout", loop.time()))
        try:
            async with asyncio.timeout(1):
                await asyncio.sleep(5)
        except TimeoutError:
            out.append(("timeout", loop.time()))
        fired: list[str] = []
        loop.call_soon(fired.append, "soon")
        loop.call_later(0.5, fired.append, "later")
        loop.call_at(loop.time() + 0.25, fired.append, "at")
        await asyncio.sleep(1)
        out.append(fired)

        async def producer() -> None:
            for i in range(3):
                await q.put(i)

        p = asyncio.create_task(producer())
        out.append([await q.get() for _ in range(3)])
        await p
        finals: list[str] = []

        async def agen():  # type: ignore[no-untyped-def]
            try:
                yield 1
                yield 2
            finally:
                finals.append("closed")

        async for _ in agen():
            break
        await asyncio.sleep(0)
        out.append(finals)
        res = await asyncio.gather(asyncio.sleep(1, "x"), asyncio.sleep(2, "y"))
        out.append(res)
        return out

    r = simulator.run(main)
    assert r.ok, r.report()
    assert r.value == [
        "main",  # contextvars: the waiter runs in a copy of main's context, not setter's
        [0, 1, 2],
        "main",
        ("wait_for timeout", pytest.approx(3.0)),
        ("timeout", pytest.approx(4.0)),
        ["soon", "at", "later"],
        [0, 1, 2],
        ["closed"],
        ["x", "y"],
    ]


def test_async_generator_finalised_at_end() -> None:
    finals: list[str] = []

    async def main() -> None:
        async def agen():  # type: ignore[no-untyped-def]
            try:
                yield 1
                yield 2
            finally:
                finals.append("closed")

        g = agen()
        await g.__anext__()
        simulator.observe("kept", g=str(type(g).__name__))
        main.keep = g  # type: ignore[attr-defined]

    r = simulator.run(main)
    assert r.ok
    assert finals == ["closed"]


@pytest.mark.parametrize(
    "escape, needle",
    [
        (lambda: asyncio.open_connection("example.com", 80), "create_connection"),
        (lambda: asyncio.create_subprocess_exec("true"), "subprocess_exec"),
        (lambda: asyncio.sleep(0, asyncio.get_running_loop().add_signal_handler(2, print)),
         "add_signal_handler"),
        (lambda: asyncio.sleep(0, threading.Thread(target=print).start()), "Thread.start"),
        (lambda: asyncio.get_running_loop().sock_connect(socket.socket(), ("x", 1)),
         "sock_connect"),
        # a signal to its own process would stop the whole check (SIGTERM: exit 143, no word)
        (lambda: asyncio.sleep(0, os.kill(os.getpid(), signal.SIGTERM)), "os.kill() called inside a simulation"),
        (lambda: asyncio.sleep(0, os.kill(0, signal.SIGTERM)), "tried to signal its own process"),
        (lambda: asyncio.sleep(0, os.killpg(os.getpgrp(), signal.SIGINT)), "os.killpg()"),
        (lambda: asyncio.sleep(0, signal.raise_signal(signal.SIGINT)), "signal.raise_signal()"),
        (lambda: asyncio.sleep(0, os.abort()), "os.abort() called inside a simulation"),
        # a handler, timer or mask set inside a run outlives it (and a SIGALRM one would disable
        # the wall-clock limit): an escape
        (lambda: asyncio.sleep(0, signal.signal(signal.SIGALRM, signal.SIG_IGN)), "signal.signal() called"),
        (lambda: asyncio.sleep(0, signal.setitimer(signal.ITIMER_REAL, 0)), "signal.setitimer()"),
        (lambda: asyncio.sleep(0, signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})), "signal.pthread_sigmask()"),
    ],
)
def test_escapes_raise_simulation_error(escape, needle) -> None:  # type: ignore[no-untyped-def]
    async def main() -> None:
        await escape()

    r = simulator.run(main)
    assert r.outcome == "failed"
    assert isinstance(r.error, simulator.SimulationError)
    assert needle in str(r.error)


def test_a_signal_elsewhere_or_a_liveness_check_is_no_escape() -> None:
    from simulator._runtime import _own_process

    async def main() -> None:
        os.kill(os.getpid(), 0)  # "does it exist": sends nothing

    assert simulator.run(main).ok
    assert not _own_process("os.kill()", (os.getppid() if os.getppid() != os.getpid() else 1, signal.SIGTERM))
    assert not _own_process("os.killpg()", (os.getpgrp() + 1, signal.SIGTERM))


def test_failed_outcome_has_traceback() -> None:
    async def main() -> None:
        await asyncio.sleep(1)
        raise ValueError("boom")

    r = simulator.run(main)
    assert r.outcome == "failed" and isinstance(r.error, ValueError)
    assert "boom" in r.traceback and "ValueError" in r.traceback


def test_deadlock_names_stuck_tasks_and_where_they_wait() -> None:
    async def main() -> None:
        lock_a, lock_b = asyncio.Lock(), asyncio.Lock()

        async def one() -> None:
            async with lock_a:
                await asyncio.sleep(1)
                async with lock_b:
                    pass

        async def two() -> None:
            async with lock_b:
                await asyncio.sleep(1)
                async with lock_a:
                    pass

        await asyncio.gather(one(), two())

    r = simulator.run(main)
    assert r.outcome == "deadlock"
    names = {p["task"]: p for p in r.pending}
    assert set(names) == {"main", "main.1", "main.2"}
    assert names["main.1"]["coro"].endswith("one")
    assert any("one" in fr for fr in names["main.1"]["stack"])
    assert any("Lock.acquire" in fr for fr in names["main.1"]["stack"])
    rep = r.report()
    assert "main.2" in rep and "two" in rep and "Lock.acquire" in rep


def test_budget_steps_and_time() -> None:
    async def spin() -> None:
        while True:
            await asyncio.sleep(0)

    r = simulator.run(spin, max_steps=1000)
    assert r.outcome == "budget-exceeded" and r.budget_reason == "steps"
    assert r.pending[0]["task"] == "main"

    async def slow() -> None:
        await asyncio.sleep(100)

    r = simulator.run(slow, max_time=10)
    assert r.outcome == "budget-exceeded" and r.budget_reason == "time"


def test_unretrieved_task_exceptions_are_collected() -> None:
    async def main() -> None:
        async def bad() -> None:
            raise KeyError("lost")

        asyncio.get_running_loop().create_task(bad())
        await asyncio.sleep(1)

    r = simulator.run(main)
    assert r.outcome == "completed"
    assert r.unretrieved and r.unretrieved[0]["task"] == "main.1"
    assert "KeyError" in r.unretrieved[0]["error"]
    assert "unretrieved" in r.report()


def test_callback_exceptions_are_collected() -> None:
    async def main() -> None:
        asyncio.get_running_loop().call_soon(lambda: 1 / 0)
        await asyncio.sleep(0.1)

    r = simulator.run(main)
    assert r.ok and "ZeroDivisionError" in r.unhandled[0]["error"]


def test_nested_run_is_an_error() -> None:
    async def main() -> None:
        simulator.run(main)

    r = simulator.run(main)
    assert isinstance(r.error, simulator.SimulationError)


def test_task_names_deterministic_per_run() -> None:
    async def main() -> list[str]:
        async def child() -> str:
            t = asyncio.create_task(asyncio.sleep(0))
            await t
            return t.get_name()

        a = asyncio.create_task(child())
        b = asyncio.create_task(child(), name="named")
        return [a.get_name(), await a, b.get_name(), await b]

    assert simulator.run(main).value == ["main.1", "main.1.1", "named", "named.1"]
    assert simulator.run(main).value == ["main.1", "main.1.1", "named", "named.1"]


def test_unwrap_returns_the_value_or_raises_how_the_run_ended() -> None:
    async def ok() -> int:
        return 7

    async def boom() -> None:
        raise ValueError("boom")

    async def stuck() -> None:
        await asyncio.Event().wait()

    assert simulator.run(ok).unwrap() == 7
    with pytest.raises(ValueError, match="boom"):
        simulator.run(boom).unwrap()
    with pytest.raises(AssertionError, match="deadlock"):
        simulator.run(stuck).unwrap()


def test_a_task_that_swallows_cancellation_is_closed_with_its_run() -> None:
    # Cancelled at the end of the run it goes on; its coroutine is then closed while the run's
    # loop is still the running one (its finally blocks run there), and what it does then is
    # not observed into the finished run's timeline.
    closed: list[str] = []

    async def stubborn() -> None:
        try:
            while True:
                try:
                    await asyncio.sleep(1000)
                except asyncio.CancelledError:
                    simulator.observe("stubborn/cancelled")
        finally:
            closed.append("closed")
            simulator.observe("stubborn/closing")

    async def main() -> None:
        asyncio.get_running_loop().create_task(stubborn())
        await asyncio.sleep(0)

    r = simulator.run(main)
    assert r.ok and closed == ["closed"]
    assert [e["kind"] for e in r.timeline] == ["stubborn/cancelled"]


def _worker_results() -> Any:
    # Two worker-thread calls beside a task: a worker's call finishes at a moment the schedule
    # picks, in no virtual time; its exception reaches its future.
    async def main() -> list[str]:
        order: list[str] = []
        loop = asyncio.get_running_loop()

        def work(name: str) -> str:
            order.append(name)
            return name.upper()

        async def task() -> None:
            order.append("task")

        t = asyncio.create_task(task())
        got = await asyncio.gather(asyncio.to_thread(work, "a"), loop.run_in_executor(None, work, "b"))
        await t
        assert got == ["A", "B"]
        with pytest.raises(ZeroDivisionError):
            await asyncio.to_thread(lambda: 1 // 0)
        assert loop.time() == 0
        return order

    return main


def test_executor_calls_run_on_the_loop_thread_in_an_order_the_schedule_picks() -> None:
    from simprogs import executor_orders

    # FIFO: b's call is submitted as gather's arguments are built, a's once to_thread's task runs
    assert simulator.run(_worker_results()).value == ["task", "b", "a"]
    orders = executor_orders(_worker_results)
    assert len(orders) > 1, orders


def test_an_executor_call_runs_as_a_worker_threads_would() -> None:
    # It runs even when its caller stopped waiting, a call still pending when main returns runs
    # before the run ends (asyncio.run waits for its default executor), and it runs in a fresh
    # context (to_thread hands it the caller's).
    var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="unset")
    log: list[str] = []

    async def main() -> tuple[str, str]:
        loop = asyncio.get_running_loop()
        var.set("caller")
        waiting = asyncio.ensure_future(loop.run_in_executor(None, log.append, "cancelled-caller"))
        await asyncio.sleep(0)
        waiting.cancel()
        loop.run_in_executor(None, log.append, "at-shutdown")
        fresh = await loop.run_in_executor(None, var.get)
        copied = await asyncio.to_thread(var.get)
        loop.run_in_executor(None, log.append, "after-main")
        return fresh, copied

    r = simulator.run(main)
    assert r.ok and r.value == ("unset", "caller"), r.report()
    assert sorted(log) == ["after-main", "at-shutdown", "cancelled-caller"]


def test_fifo_and_a_strategy_that_always_picks_the_first_option_count_the_same_steps() -> None:
    # A cancelled handle is no step: FIFO's fast path once counted it and a strategy's driver
    # did not, so the same run had two step counts (and the spin bounds, checked every so many
    # steps, came at different moments under the two drivers).
    from simulator.strategies.base import Strategy

    async def main() -> None:
        loop = asyncio.get_running_loop()
        for _ in range(5):
            loop.call_soon(lambda: None).cancel()
            loop.call_later(0.1, lambda: None).cancel()
        waiters = [asyncio.ensure_future(asyncio.sleep(1)) for _ in range(3)]
        await asyncio.sleep(0)
        for w in waiters:
            w.cancel()
        await asyncio.gather(*waiters, return_exceptions=True)

    fifo = simulator.run(main)
    first = simulator.run(main, strategy=Strategy())
    assert fifo.ok and first.ok
    assert fifo.steps == first.steps, (fifo.steps, first.steps)
