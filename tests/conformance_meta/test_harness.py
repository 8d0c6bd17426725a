"""The harness's own diagnostics."""

from __future__ import annotations

import asyncio

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
