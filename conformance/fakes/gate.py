"""Gates and abort-aware waiting, shared by the fake model and the fake tools.

A :class:`Gate` is a one-way door a stream or a tool call waits on until the scenario opens it;
:func:`wait_abortable` waits for a gate, a delay or forever, and stops as soon as the step's abort
signal fires. Both use futures and loop timers only, so waiting adds no task to the schedule.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from reference_loop.abort import AbortSignal

__all__ = ["Gate", "wait_abortable"]


class Gate:
    """A one-way door a stream (or a fake tool) waits on until the scenario opens it.

    Like ``asyncio.Event`` (``wait()``, ``set()``, ``is_set()``, ``clear()``), plus ``open()``;
    loop-agnostic (waiters are futures created on the running loop when awaited), and waitable
    without a helper task, so waiting on it adds no task to the schedule.
    """

    __slots__ = ("_callbacks", "_open", "name")

    def __init__(self, name: str = "gate") -> None:
        self.name = name
        self._open = False
        self._callbacks: list[Callable[[], object]] = []

    def __repr__(self) -> str:
        return f"Gate({self.name!r}, {'open' if self._open else 'closed'})"

    def is_set(self) -> bool:
        return self._open

    @property
    def is_open(self) -> bool:
        return self._open

    def open(self) -> None:
        if self._open:
            return
        self._open = True
        callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback()

    set = open

    def clear(self) -> None:
        self._open = False

    def add_callback(self, callback: Callable[[], object]) -> Callable[[], None]:
        """Call ``callback()`` when the gate opens (at once if it is open); returns a disposer."""
        if self._open:
            callback()
            return lambda: None
        self._callbacks.append(callback)

        def dispose() -> None:
            try:
                self._callbacks.remove(callback)
            except ValueError:
                pass

        return dispose

    async def wait(self) -> bool:
        if self._open:
            return True
        fut: asyncio.Future[bool] = asyncio.get_running_loop().create_future()

        def wake() -> None:
            if not fut.done():
                fut.set_result(True)

        dispose = self.add_callback(wake)
        try:
            return await fut
        finally:
            dispose()


async def wait_abortable(
    signal: AbortSignal | None,
    *,
    delay: float | None = None,
    gate: Any = None,
    forever: bool = False,
    task_name: str = "fake-gate",
) -> bool:
    """Wait for ``gate`` to open, then ``delay`` virtual seconds (or forever); stop at an abort.

    Returns ``False`` when ``signal`` fired first (or had already fired), ``True`` otherwise.
    ``delay=None`` does not suspend at all; ``delay=0`` yields to the loop once. ``gate`` is a
    ``Gate`` or any object with ``is_set()`` and an awaitable ``wait()`` (``asyncio.Event``).
    Uses futures and loop timers only (no helper task, except for a foreign gate type).
    """
    if signal is not None and signal.aborted:
        return False
    if gate is not None and not gate.is_set():
        if not await _wait_gate(signal, gate, task_name):
            return False
    if forever:
        return await _wait_signal(signal)
    if delay is None:
        return not (signal is not None and signal.aborted)
    if delay <= 0 or signal is None:
        await asyncio.sleep(max(delay, 0))
        return not (signal is not None and signal.aborted)
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[bool] = loop.create_future()
    handle = loop.call_later(delay, _resolve, fut, True)
    dispose = listen(signal, lambda _reason: _resolve(fut, False))
    try:
        return await fut
    finally:
        handle.cancel()
        dispose()


def listen(signal: AbortSignal, callback: Callable[[Any], object]) -> Callable[[], object]:
    """``signal.add_listener(callback)``, and what undoes it: the spec gives the step's signal no
    API, so a signal whose ``add_listener`` returns no disposer is taken as it is (the kit's
    callbacks only resolve a future once, so one left registered does no harm)."""
    dispose = signal.add_listener(callback)
    return dispose if callable(dispose) else _nothing


def _nothing() -> None:
    return None


def _resolve(fut: asyncio.Future[bool], value: bool) -> None:
    if not fut.done():
        fut.set_result(value)


async def _wait_signal(signal: AbortSignal | None) -> bool:
    """Hang until ``signal`` fires (forever without one); always returns ``False``."""
    fut: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
    dispose = listen(signal, lambda _r: _resolve(fut, False)) if signal is not None else None
    try:
        return await fut
    finally:
        if dispose is not None:
            dispose()


async def _wait_gate(signal: AbortSignal | None, gate: Any, task_name: str) -> bool:
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[bool] = loop.create_future()
    disposers: list[Callable[[], object]] = []
    if isinstance(gate, Gate):
        disposers.append(gate.add_callback(lambda: _resolve(fut, True)))
    else:
        task = loop.create_task(gate.wait(), name=task_name)
        task.add_done_callback(lambda _t: _resolve(fut, True))
        disposers.append(task.cancel)
    if signal is not None:
        disposers.append(listen(signal, lambda _r: _resolve(fut, False)))
    try:
        return await fut
    finally:
        for dispose in disposers:
            dispose()
