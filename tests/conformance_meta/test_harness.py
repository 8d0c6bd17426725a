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
