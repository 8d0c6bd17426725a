"""The event bus: notifications, waterfalls, serial and parallel events, disposers."""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from reference_loop.bus import AsyncNotificationListenerError, EventBus


def test_emit_is_synchronous_in_order_and_reraises_first_after_all() -> None:
    bus = EventBus()
    seen: list[str] = []
    bus.on("e", lambda x: seen.append(f"a{x}"))

    def boom(x: int) -> None:
        seen.append(f"b{x}")
        raise ValueError("first")

    bus.on("e", boom)
    bus.on("e", lambda x: (_ for _ in ()).throw(KeyError("second")))
    bus.on("e", lambda x: seen.append(f"d{x}"))
    with pytest.raises(ValueError, match="first"):
        bus.emit("e", 1)
    assert seen == ["a1", "b1", "d1"]


def test_disposer_removes_only_its_registration() -> None:
    bus = EventBus()
    seen: list[int] = []
    listener = seen.append
    first = bus.on("e", listener)
    bus.on("e", listener)
    first()
    first()  # idempotent
    bus.emit("e", 7)
    assert seen == [7]


def test_async_listener_on_notification_is_an_error() -> None:
    bus = EventBus()

    async def listener() -> None:
        return None

    bus.on("e", listener)
    with pytest.raises(AsyncNotificationListenerError, match="notification 'e'"):
        bus.emit("e")


def test_waterfall_chain_rewrite_and_short_circuit() -> None:
    bus = EventBus()
    order: list[str] = []

    async def outer(agent: str, value: int, nxt: Any) -> int:
        order.append("outer")
        return (await nxt()) * 10

    def inner(agent: str, value: int, nxt: Any) -> Any:
        order.append("inner")
        return nxt()  # a sync listener may return next()'s awaitable

    bus.on("w", outer)
    bus.on("w", inner)
    result = asyncio.run(bus.waterfall("w", "agent", value=2, default=lambda v: v + 1))
    assert result == 30 and order == ["outer", "inner"]

    bus.on("w2", lambda agent, value, nxt: "short")
    bus.on("w2", lambda agent, value, nxt: pytest.fail("not reached"))
    assert asyncio.run(bus.waterfall("w2", "a", value=1, default=lambda v: v)) == "short"
    assert asyncio.run(bus.waterfall("none", value=5, default=lambda v: v * 2)) == 10


def test_parallel_runs_concurrently_and_reports_first_in_order() -> None:
    bus = EventBus()
    events: list[str] = []

    async def slow(tag: str) -> None:
        events.append("slow-start")
        await asyncio.sleep(0.01)
        events.append("slow-end")
        raise RuntimeError("slow")

    async def fast(tag: str) -> None:
        events.append("fast")
        raise RuntimeError("fast")

    bus.on("p", slow)
    bus.on("p", fast)
    with pytest.raises(RuntimeError, match="slow"):
        asyncio.run(bus.parallel("p", "x"))
    assert events == ["slow-start", "fast", "slow-end"]


def _unawaited_warnings(main: Callable[[], Coroutine[Any, Any, None]]) -> list[str]:
    """The "never awaited" warnings of running ``main`` and collecting what it left."""
    import gc
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        asyncio.run(main())
        gc.collect()
    return [str(w.message) for w in caught if "never awaited" in str(w.message)]


def _persisting(bus: EventBus) -> list[str]:
    """A coroutine flush listener on ``bus``; the list records that it ran."""
    ran: list[str] = []

    async def persist() -> None:
        ran.append("persist")

    bus.on("session/flush", persist)
    return ran


def test_parallel_cut_before_its_listeners_ran_closes_them_without_a_warning() -> None:
    # A disposal may cancel a flush before its listeners' tasks first ran: their coroutines
    # never ran, and are closed with the cut, not left to warn "was never awaited".
    bus = EventBus()
    ran = _persisting(bus)

    async def main() -> None:
        flush = asyncio.ensure_future(bus.parallel("session/flush"))
        await asyncio.sleep(0)  # parallel() has gathered, the listener's task not yet run
        flush.cancel()
        with pytest.raises(asyncio.CancelledError):
            await flush

    assert _unawaited_warnings(main) == []
    assert ran == []


class _Holder:
    exc: BaseException


def _cut_flush_holding() -> weakref.ref[_Holder]:
    """A flush cut before its one listener ran, the listener holding an object that keeps the
    cut's error (whose traceback holds parallel()'s frame); a weak reference to that object."""
    bus = EventBus()
    holder = _Holder()

    async def persist() -> None:
        assert holder is not None

    bus.on("session/flush", persist)

    async def main() -> None:
        flush = asyncio.ensure_future(bus.parallel("session/flush"))
        await asyncio.sleep(0)
        flush.cancel()
        try:
            await flush
        except asyncio.CancelledError as exc:
            holder.exc = exc

    asyncio.run(main())
    return weakref.ref(holder)


def test_parallel_cut_before_its_listeners_ran_keeps_nothing_they_hold_alive() -> None:
    # A closer registered with weakref.finalize, waiting for the collection of the listener's
    # wrapper, held the listener's coroutine, and through its closure whatever the listener
    # holds: when that reached back to the wrapper, nothing was ever collected (in the hunt, a
    # world per run of a window cancelling the driver while it flushed).
    import gc

    kept = _cut_flush_holding()
    gc.collect()
    assert kept() is None


def test_parallel_listener_raising_base_exception_closes_the_earlier_ones_without_a_warning() -> None:
    # A later listener raising CancelledError synchronously ends parallel() before any gather:
    # the earlier listeners' coroutines never run, and must not warn "was never awaited".
    bus = EventBus()
    ran = _persisting(bus)

    def cut() -> None:
        raise asyncio.CancelledError

    bus.on("session/flush", cut)

    async def main() -> None:
        with pytest.raises(asyncio.CancelledError):
            await bus.parallel("session/flush")

    assert _unawaited_warnings(main) == []
    assert ran == []


def test_serial_awaits_in_order() -> None:
    bus = EventBus()
    seen: list[int] = []

    async def one() -> None:
        await asyncio.sleep(0.01)
        seen.append(1)

    bus.on("s", one)
    bus.on("s", lambda: seen.append(2))
    asyncio.run(bus.serial("s"))
    assert seen == [1, 2]


def test_on_validates_arguments() -> None:
    bus = EventBus()
    with pytest.raises(TypeError, match="not callable"):
        bus.on("e", 3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="event name"):
        bus.on("", print)
