"""``concurrent.futures`` thread pools on the simulated loop: ``pool.submit`` runs as the loop's
executor calls do, and blocking on its future runs the call at once."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import threading
from typing import Any

import pytest
from simprogs import executor_orders

import simulator

# warmed up before any run: its worker threads exist, so a submit that reached them would run
# the call on a real thread, unseen by the scheduler and without tripping the thread escape
POOL = concurrent.futures.ThreadPoolExecutor(2, thread_name_prefix="pool")
POOL.submit(lambda: None).result()


def _tools() -> Any:
    # Two synchronous tools handed to a pool of the loop's own at once: each finishes at a moment
    # the schedule picks.
    async def main() -> list[str]:
        order: list[str] = []

        def tool(name: str) -> str:
            order.append(name)
            return name.upper()

        got = await asyncio.gather(asyncio.wrap_future(POOL.submit(tool, "a")),
                                   asyncio.wrap_future(POOL.submit(tool, name="b")))
        assert got == ["A", "B"]
        with pytest.raises(ZeroDivisionError):
            await asyncio.wrap_future(POOL.submit(lambda: 1 // 0))
        return order

    return main


def _escapes(r: Any) -> list[Any]:
    return [e for e in r.timeline if e["kind"] == simulator.ESCAPE]


def test_a_submitted_call_runs_on_the_loop_at_a_moment_the_schedule_picks() -> None:
    r = simulator.run(_tools())
    assert r.ok and r.value == ["a", "b"] and not _escapes(r), r.report()
    assert executor_orders(_tools) == {("a", "b"), ("b", "a")}


def test_the_call_runs_on_the_runs_thread_in_a_fresh_context_in_no_virtual_time() -> None:
    var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="unset")

    async def main() -> tuple[str, str, float]:
        var.set("caller")
        seen = await asyncio.wrap_future(POOL.submit(lambda: (threading.current_thread().name, var.get())))
        return (*seen, asyncio.get_running_loop().time())

    r = simulator.run(main)
    assert r.ok and r.value == ("MainThread", "unset", 0), r.report()


def test_blocking_on_a_submitted_call_runs_it_at_once() -> None:
    # The caller's thread is the only one: waiting on the future runs the call, as a worker
    # thread finishing while the caller waits would; so do a pool's map, wait and as_completed.
    async def main() -> list[Any]:
        order: list[int] = []

        def work(n: int) -> int:
            order.append(n)
            return n * 10

        got: list[Any] = [POOL.submit(work, 1).result(), POOL.submit(lambda: 1 // 0).exception()]
        got.append(list(POOL.map(work, [2, 3])))
        done, not_done = concurrent.futures.wait([POOL.submit(work, 4), POOL.submit(work, 5)])
        got.append((sorted(f.result() for f in done), not_done))
        first = [POOL.submit(work, 6), POOL.submit(work, 7)]
        done, not_done = concurrent.futures.wait(first, return_when=concurrent.futures.FIRST_COMPLETED)
        got.append(([f.result() for f in done], len(not_done)))
        got.append(sorted(f.result() for f in concurrent.futures.as_completed([POOL.submit(work, 8), first[1]])))
        got.append(order)
        return got

    r = simulator.run(main)
    assert r.ok and not _escapes(r), r.report()
    one, error, mapped, waited, first, completed, order = r.value
    assert (one, type(error), mapped, waited) == (10, ZeroDivisionError, [20, 30], ([40, 50], set()))
    assert first == ([60], 1) and completed == [70, 80]
    assert order == [1, 2, 3, 4, 5, 6, 8, 7]  # as_completed ran its calls in the order given


def test_a_call_runs_as_a_pools_work_item_would() -> None:
    # Cancelled before a worker took it: never run. Its exception, even a BaseException, goes to
    # the future. A call still pending when main returns runs before the run ends, as the
    # loop's own executor calls do. A pool shut down refuses new work.
    log: list[str] = []

    class Stop(BaseException):
        pass

    def stop() -> None:
        raise Stop

    async def main() -> Any:
        pool = concurrent.futures.ThreadPoolExecutor(1)
        cancelled = pool.submit(log.append, "cancelled")
        assert cancelled.cancel()
        chained = asyncio.wrap_future(pool.submit(log.append, "abandoned-by-its-caller"))
        chained.cancel()  # too late under FIFO: the worker's call is ready before the cancel's
        await asyncio.sleep(0)
        return True

    async def main_ok() -> Any:
        pool = concurrent.futures.ThreadPoolExecutor(1)
        with pytest.raises(Stop):
            await asyncio.wrap_future(pool.submit(stop))
        pool.submit(log.append, "at-shutdown")
        pool.shutdown(wait=False)
        with pytest.raises(RuntimeError, match="after shutdown"):
            pool.submit(log.append, "refused")
        return True

    r = simulator.run(main)
    assert r.ok and r.value is True, r.report()
    assert log == ["abandoned-by-its-caller"], log
    r = simulator.run(main_ok)
    assert r.ok and r.value is True, r.report()
    assert log.count("at-shutdown") == 1 and "refused" not in log


def test_outside_a_run_the_pool_still_uses_its_threads() -> None:
    assert POOL.submit(lambda: threading.current_thread().name).result().startswith("pool")
    assert concurrent.futures.wait([POOL.submit(lambda: 1)]).done
