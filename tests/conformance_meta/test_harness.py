"""The harness's own diagnostics."""

from __future__ import annotations

import asyncio
from pathlib import Path

from conformance.harness import _parked_at


def test_a_hung_task_is_named_where_it_really_waits() -> None:
    # Task.get_stack() gives only the outermost coroutine: a loop whose driver awaits a state
    # machine that awaits a tool was reported at the driver (an independent loop's note).
    async def innermost() -> None:
        await asyncio.sleep(10)

    async def middle() -> None:
        await innermost()

    async def outer() -> None:
        await middle()

    async def main() -> str:
        task = asyncio.ensure_future(outer())
        await asyncio.sleep(0)
        where = _parked_at(task)
        task.cancel()
        return where

    where = asyncio.run(main())
    assert where.startswith("at test_harness.py:") and where.endswith("in innermost"), where
    assert _parked_at(asyncio.Future.__new__(asyncio.Future)) == ""  # not a task: nothing to say


def test_a_pytest_internal_error_is_named_with_its_exception(tmp_path: Path) -> None:
    """A suite pytest itself stopped (exit 3: an implementation that broke the test process)
    says so, with the exception line of the ``INTERNALERROR>`` traceback, not pytest's summary."""
    from conformance.runner import _Collector, _stop_reason

    output = ("INTERNALERROR> Traceback (most recent call last):\n"
              "INTERNALERROR>   File \"x.py\", line 1, in f\n"
              "INTERNALERROR> RecursionError: maximum recursion depth exceeded\n"
              "= 140 failed, 8 warnings in 2.36s =\n")
    reason = _stop_reason(_Collector(tmp_path), 0, 0, False, 3, output)
    assert reason.startswith("pytest stopped with an internal error (exit 3: RecursionError: maximum recursion")
    assert "140 failed" not in reason
    other = _stop_reason(_Collector(tmp_path), 0, 0, False, 1, "= 2 failed in 1.00s =\n")
    assert other == "no result came back (pytest exit 1: = 2 failed in 1.00s =)"


def test_a_watch_knows_its_waiter_resolved_before_its_own_task_sees_it() -> None:
    # CANCEL-W1's actor race asks that a waiter pending when B is sent resolves after B's turn.
    # The watch's task sees a release a step late: a schedule that ran A's whole turn first once
    # had an AnyIO loop (indie66) fail for a waiter it had rightly released at A's idle.
    import simulator
    from conformance.tests._support import Watch

    class Waiter:
        def __init__(self) -> None:
            self.event = asyncio.Event()

        def done(self) -> bool:
            return self.event.is_set()

        def __await__(self):  # type: ignore[no-untyped-def]
            return self.event.wait().__await__()

    class Session:
        events: tuple[dict[str, object], ...] = ()

    class Agent:
        id = "a"
        status = "running"
        session = Session()

        def __init__(self, waiter: object) -> None:
            self.waiter = waiter

        def when_idle(self) -> object:
            return self.waiter

    async def main() -> list[bool | None]:
        seen: list[bool | None] = []
        with_done = Agent(Waiter())
        watch = Watch(None, with_done)  # type: ignore[arg-type]
        seen.append(watch.pending_now())
        with_done.waiter.event.set()  # type: ignore[attr-defined]
        with_done.status = "idle"
        seen.append(watch.pending_now())  # its task has not run since: done() says it all
        plain = Agent(asyncio.sleep(1))  # a coroutine: no done() to ask
        coro = Watch(None, plain)  # type: ignore[arg-type]
        seen.append(coro.pending_now())  # running: a release now would break IDLE-2
        plain.status = "idle"
        seen.append(coro.pending_now())  # idle: it may have been released a step ago
        await asyncio.gather(watch.task, coro.task)
        seen.append(coro.pending_now())
        return seen

    r = simulator.run(main)
    assert r.ok, r.report()
    assert r.value == [True, False, True, None, False]
