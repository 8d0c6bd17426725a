"""AnyIO code on the simulated loop: its worker threads run as the loop's executor calls do."""

from __future__ import annotations

import contextvars
import threading
from typing import Any

import pytest
from simprogs import executor_orders

import simulator

anyio = pytest.importorskip("anyio", reason="AnyIO is not installed (httpx brings it)")


def _tools() -> Any:
    # Two synchronous tools handed to AnyIO's worker threads at once, as pydantic-ai runs a step's
    # calls: each finishes at a moment the schedule picks.
    async def main() -> list[str]:
        order: list[str] = []

        def tool(name: str) -> str:
            order.append(name)
            return name.upper()

        async def call(name: str) -> None:
            assert await anyio.to_thread.run_sync(tool, name) == name.upper()

        async with anyio.create_task_group() as tg:
            tg.start_soon(call, "a")
            tg.start_soon(call, "b")
        with pytest.raises(ZeroDivisionError):
            await anyio.to_thread.run_sync(lambda: 1 // 0)
        return order

    return main


def test_a_worker_thread_call_runs_on_the_loop_at_a_moment_the_schedule_picks() -> None:
    r = simulator.run(_tools())
    assert r.ok, r.report()
    assert r.value == ["a", "b"] and r.virtual_time == 0
    assert not any(e["kind"] == simulator.ESCAPE for e in r.timeline)
    orders = executor_orders(_tools)
    assert orders == {("a", "b"), ("b", "a")}, orders


def test_the_call_sees_the_callers_context_and_no_thread_is_started() -> None:
    var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="unset")
    threads: list[int] = []

    async def main() -> tuple[str, bool]:
        var.set("caller")

        def work() -> str:
            threads.append(threading.get_ident())
            return var.get()

        seen = await anyio.to_thread.run_sync(work)
        return seen, threads == [threading.get_ident()]

    r = simulator.run(main)
    assert r.ok and r.value == ("caller", True), r.report()
    assert not any(e["kind"] == simulator.ESCAPE for e in r.timeline)


def test_a_cancelled_caller_waits_for_the_call_unless_it_abandons_it() -> None:
    # AnyIO shields the wait (a thread cannot be stopped) unless abandon_on_cancel: a caller
    # cancelled while its call waits to run sees the cancellation at its first checkpoint after
    # the call returned; abandoning, at once. The call runs either way. (In plain order the canceller's own worker
    # call, started first, runs while the caller's is still pending.)
    async def main(abandon: bool) -> list[str]:
        log: list[str] = []
        scope = anyio.CancelScope()

        async def caller() -> None:
            with scope:
                await anyio.to_thread.run_sync(log.append, "ran", abandon_on_cancel=abandon)
                log.append("after the call")
                await anyio.sleep(0)  # the next checkpoint delivers the cancellation
                log.append("past a checkpoint")
            log.append("cancelled" if scope.cancelled_caught else "not cancelled")

        async with anyio.create_task_group() as tg:
            tg.start_soon(anyio.to_thread.run_sync, scope.cancel)
            tg.start_soon(caller)
        return log

    kept = simulator.run(lambda: main(False))
    assert kept.ok and kept.value == ["ran", "after the call", "cancelled"], (kept.report(), kept.value)
    gone = simulator.run(lambda: main(True))
    assert gone.ok and sorted(gone.value) == ["cancelled", "ran"], (gone.report(), gone.value)


def test_outside_a_run_anyio_still_uses_its_threads() -> None:
    simulator.run(_tools())  # the routing is in place once a run has begun

    async def main() -> bool:
        return await anyio.to_thread.run_sync(lambda: threading.current_thread() is not threading.main_thread())

    assert anyio.run(main) is True
