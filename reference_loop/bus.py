"""The event bus: notifications, waterfalls, serial and parallel events (spec 0, 0b, PY-2).

One bus serves every agent of a service. Four ways to fire an event:

* ``emit(name, *args)`` — a notification: listeners run synchronously, in registration order,
  before ``emit`` returns. All listeners run; the first exception is re-raised afterwards, so the
  emitter can contain it (the spec leaves "do later listeners still run" open; running them keeps
  e.g. a persistence listener recording even when a UI listener throws).
* ``await waterfall(name, *args, value=..., default=...)`` — each listener is called as
  ``listener(*args, value, next)``; ``next()`` (no argument) runs the rest of the chain and returns
  its value, the chain ending in ``default(value)``. A listener rewrites by returning something
  else and short-circuits by not calling ``next()``.
* ``await serial(name, *args)`` — awaited listeners one after another.
* ``await parallel(name, *args)`` — all listeners concurrently, awaited together.

Listeners of awaited events may be plain or coroutine functions; a notification listener must be
synchronous (a coroutine it returns is closed and reported as an error, since nothing could await
it deterministically).
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from typing import Any

Listener = Callable[..., Any]
Disposer = Callable[[], None]


class AsyncNotificationListenerError(TypeError):
    """A notification listener returned an awaitable (notifications are synchronous, PY-2)."""


async def _resolve(value: Any) -> Any:
    """Await ``value`` while it is awaitable (a sync listener may return ``next()``'s coroutine)."""
    while inspect.isawaitable(value):
        value = await value
    return value


def _close_unstarted(value: Any) -> None:
    if inspect.iscoroutine(value) and inspect.getcoroutinestate(value) == inspect.CORO_CREATED:
        value.close()


class EventBus:
    """Named events with ordered listeners; every ``on()`` returns a disposer."""

    def __init__(self) -> None:
        self._listeners: dict[str, list[_Registration]] = {}

    def on(self, name: str, listener: Listener) -> Disposer:
        """Register ``listener`` for ``name``; call the returned function to unregister it."""
        if not isinstance(name, str) or not name:
            raise TypeError(f"event name must be a non-empty string, got {name!r}")
        if not callable(listener):
            raise TypeError(f"listener for {name!r} is not callable: {listener!r}")
        # A registration object: the same function registered twice gets two disposers.
        holder = _Registration(listener)
        self._listeners.setdefault(name, []).append(holder)

        def dispose() -> None:
            try:
                self._listeners.get(name, []).remove(holder)
            except ValueError:
                pass

        return dispose

    def listeners(self, name: str) -> list[Listener]:
        """The listeners of ``name`` in registration order (a snapshot)."""
        return [reg.fn for reg in self._listeners.get(name, ())]

    def has_listeners(self, name: str) -> bool:
        """Whether anything listens to ``name``."""
        return bool(self._listeners.get(name))

    def emit(self, name: str, *args: Any) -> None:
        """Notify synchronously, in registration order; re-raise the first failure after all ran."""
        regs = self._listeners.get(name)
        if not regs:
            return
        first: BaseException | None = None
        for listener in [reg.fn for reg in regs]:  # a snapshot: a listener may register another
            try:
                result = listener(*args)
                if result is not None and inspect.isawaitable(result):
                    if inspect.iscoroutine(result):
                        result.close()
                    raise AsyncNotificationListenerError(
                        f"listener {_name(listener)} of notification {name!r} is asynchronous; "
                        "notifications are synchronous"
                    )
            except Exception as exc:
                if first is None:
                    first = exc
        if first is not None:
            raise first

    async def waterfall(
        self,
        name: str,
        *args: Any,
        value: Any,
        default: Callable[[Any], Any],
    ) -> Any:
        """Run the ``next()`` chain of ``name`` over ``value``; ``default(value)`` ends it."""
        chain = self.listeners(name)

        async def run(index: int) -> Any:
            if index >= len(chain):
                return await _resolve(default(value))

            def next_() -> Awaitable[Any]:
                return run(index + 1)

            return await _resolve(chain[index](*args, value, next_))

        return await run(0)

    async def serial(self, name: str, *args: Any) -> None:
        """Await each listener in turn; the first failure stops the chain and propagates."""
        for listener in self.listeners(name):
            await _resolve(listener(*args))

    async def parallel(self, name: str, *args: Any) -> None:
        """Run every listener concurrently and await them all; re-raise the first failure
        (in registration order, so the outcome does not depend on the schedule)."""
        calls: list[Awaitable[Any]] = []
        first: BaseException | None = None
        for listener in self.listeners(name):
            try:
                result = listener(*args)
            except Exception as exc:
                first = first or exc
                continue
            except BaseException:
                # CancelledError & co. pass (PY-1): the earlier listeners' coroutines will never
                # be gathered, so close them rather than leave them to warn "never awaited"
                for call in calls:
                    _close_unstarted(call)
                raise
            if inspect.isawaitable(result):
                calls.append(result)
        if calls:
            try:
                outcomes = await asyncio.gather(*map(_resolve, calls), return_exceptions=True)
            except BaseException:
                # cancelled (a disposal cutting the flush, PY-1): a listener's coroutine whose
                # task never ran is closed, not left to warn "never awaited" when collected (a
                # finalizer that closed it at collection held it, and all it held, for ever)
                for call in calls:
                    _close_unstarted(call)
                raise
            for outcome in outcomes:
                if isinstance(outcome, BaseException) and not isinstance(outcome, Exception):
                    raise outcome  # CancelledError & co. are never contained (PY-1)
                if isinstance(outcome, Exception) and first is None:
                    first = outcome
        if first is not None:
            raise first


class _Registration:
    """One registration (identity matters: the disposer removes exactly this one)."""

    __slots__ = ("fn",)

    def __init__(self, fn: Listener) -> None:
        self.fn = fn


def _name(listener: Listener) -> str:
    return getattr(listener, "__qualname__", None) or repr(listener)
