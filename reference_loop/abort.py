"""The abort signal handed to each step's model request and tool calls.

An ``AbortController`` owns one ``AbortSignal``; ``abort(reason)`` fires it once. Consumers either
poll ``signal.aborted`` between chunks, register a synchronous callback with ``add_listener``, or
``await signal.wait()`` (for example raced against a network read so a hung stream stops promptly).
``wait()`` creates its future lazily on the running loop, so the signal itself is loop-agnostic and
works the same under plain asyncio and under the simulator.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable


class AbortError(Exception):
    """Raised by ``AbortSignal.throw_if_aborted`` once the signal has fired."""

    code = "ABORTED"

    def __init__(self, reason: str = "aborted") -> None:
        super().__init__(reason)
        self.reason = reason


class AbortSignal:
    """A one-shot, observable abort flag."""

    __slots__ = ("_aborted", "_listeners", "_reason", "_waiters")

    def __init__(self) -> None:
        self._aborted = False
        self._reason: str | None = None
        self._listeners: list[Callable[[str], object]] = []
        self._waiters: list[asyncio.Future[str]] = []

    @property
    def aborted(self) -> bool:
        return self._aborted

    @property
    def reason(self) -> str | None:
        return self._reason

    def add_listener(self, callback: Callable[[str], object]) -> Callable[[], None]:
        """Call ``callback(reason)`` when the signal fires (at once if it already has).

        Returns a disposer that unregisters the callback.
        """
        if self._aborted:
            callback(self._reason if self._reason is not None else "aborted")
            return lambda: None
        self._listeners.append(callback)

        def dispose() -> None:
            try:
                self._listeners.remove(callback)
            except ValueError:
                pass

        return dispose

    async def wait(self) -> str:
        """Wait until the signal fires; return its reason."""
        if self._aborted:
            return self._reason if self._reason is not None else "aborted"
        fut: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        try:
            return await fut
        finally:
            try:
                self._waiters.remove(fut)
            except ValueError:
                pass

    def throw_if_aborted(self) -> None:
        if self._aborted:
            raise AbortError(self._reason if self._reason is not None else "aborted")

    def _fire(self, reason: str) -> None:
        if self._aborted:
            return
        self._aborted = True
        self._reason = reason
        listeners, self._listeners = self._listeners, []
        # Every callback hears the abort, and every waiter, though one throws: an adapter's
        # throwing callback, registered first, must not keep the loop's own (which cancels the
        # step's tool) from running (TOOL-5, ABORT-1). The first failure is raised after.
        failure: Exception | None = None
        for callback in listeners:
            try:
                callback(reason)
            except Exception as exc:
                failure = failure or exc
        for fut in list(self._waiters):
            if not fut.done():
                fut.set_result(reason)
        if failure is not None:
            raise failure


class AbortController:
    """Owns one signal; ``abort()`` fires it (idempotent: the first reason wins)."""

    __slots__ = ("signal",)

    def __init__(self) -> None:
        self.signal = AbortSignal()

    def abort(self, reason: str = "aborted") -> None:
        self.signal._fire(reason)
