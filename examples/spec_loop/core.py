"""Small building blocks: errors, abort signals, JSON validation, the event bus, sources."""

from __future__ import annotations

import asyncio
import inspect
import logging
import math
import time
import uuid as _uuid
from collections.abc import Callable
from typing import Any

log = logging.getLogger("spec_loop")


# ----------------------------------------------------------------------------- errors
class LoopError(Exception):
    """An error raised by the loop itself, with an optional string ``code``."""

    def __init__(self, message: str, code: str | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code


class AbortError(LoopError):
    def __init__(self, reason: str | None = None) -> None:
        super().__init__(reason if reason is not None else "aborted", code="ABORTED")
        self.reason = reason


class DisposedError(RuntimeError):
    """Raised by send/steer/inject on a disposed agent."""


class NotSerialisable(TypeError):
    """Data given to the session log is not plain JSON."""


class ListenerFailure(Exception):
    """A listener of ``event`` raised ``original`` (used internally to tell listener failures
    from the emitter's own failures)."""

    def __init__(self, event: str, original: BaseException) -> None:
        super().__init__(f"{event} listener raised: {original}")
        self.event = event
        self.original = original


def code_of(exc: BaseException) -> str | None:
    code = getattr(exc, "code", None)
    return code if isinstance(code, str) else None


def message_of(exc: BaseException) -> str:
    try:
        text = str(exc)
    except Exception:  # ERR-1: an error whose message cannot be read still ends only the turn
        return type(exc).__name__
    return text if text else type(exc).__name__


# ----------------------------------------------------------------------------- abort
class AbortSignal:
    """Fires once with a reason. ``add_listener`` callbacks run synchronously."""

    def __init__(self) -> None:
        self.aborted = False
        self.reason: str | None = None
        self._callbacks: list[Callable[[str], Any]] = []

    def add_listener(self, callback: Callable[[str], Any]) -> Callable[[], None]:
        if self.aborted:
            callback(self.reason)  # type: ignore[arg-type]
            return lambda: None
        self._callbacks.append(callback)

        def remove() -> None:
            try:
                self._callbacks.remove(callback)
            except ValueError:
                pass

        return remove

    async def wait(self) -> str:
        if self.aborted:
            return self.reason  # type: ignore[return-value]
        fut: asyncio.Future[str] = asyncio.get_running_loop().create_future()

        def done(reason: str) -> None:
            if not fut.done():
                fut.set_result(reason)

        remove = self.add_listener(done)
        try:
            return await fut
        finally:
            remove()

    def throw_if_aborted(self) -> None:
        if self.aborted:
            raise AbortError(self.reason)

    def _fire(self, reason: str) -> None:
        if self.aborted:
            return
        self.aborted = True
        self.reason = reason
        callbacks, self._callbacks = self._callbacks, []
        for cb in callbacks:
            try:
                cb(reason)
            except Exception as exc:  # a broken abort listener must not break abort()
                log.warning("abort listener raised: %s", exc)


class AbortController:
    def __init__(self) -> None:
        self.signal = AbortSignal()

    def abort(self, reason: str = "aborted") -> None:
        self.signal._fire(reason)


# ----------------------------------------------------------------------------- JSON
MAX_DEPTH = 200
"""Nesting a snapshot follows: deeper is a cycle (which JSON cannot hold) or as good as one."""


def snapshot(value: Any, path: str = "data", depth: int = 0) -> Any:
    """A deep copy of ``value`` as plain JSON, or ``NotSerialisable``."""
    if depth > MAX_DEPTH:
        raise NotSerialisable(f"{path}: nested more than {MAX_DEPTH} levels deep (a cycle?)")
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise NotSerialisable(f"{path}: {value!r} is not a finite number")
        return value
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise NotSerialisable(f"{path}: key {k!r} is not a string")
            out[k] = snapshot(v, f"{path}.{k}", depth + 1)
        return out
    if isinstance(value, (list, tuple)):
        return [snapshot(v, f"{path}[{i}]", depth + 1) for i, v in enumerate(value)]
    raise NotSerialisable(f"{path}: {type(value).__name__} is not JSON-serialisable")


# ----------------------------------------------------------------------------- sources
class Sources:
    """Time and identity. Defaults to the running simulation's sources when there is one."""

    def __init__(self, inner: Any = None) -> None:
        self._inner = inner

    def now_ms(self) -> int:
        if self._inner is not None:
            return int(self._inner.now_ms())
        return int(time.time() * 1000)

    def uuid(self) -> str:
        if self._inner is not None:
            return str(self._inner.uuid())
        return str(_uuid.uuid4())


# ----------------------------------------------------------------------------- bus
class Bus:
    """One bus per service: notifications (sync), waterfalls (async), flush (concurrent)."""

    def __init__(self) -> None:
        self._listeners: dict[str, list[Callable[..., Any]]] = {}

    def on(self, event: str, listener: Callable[..., Any]) -> Callable[[], None]:
        entry = [listener]  # a unique wrapper so the same function can be registered twice
        self._listeners.setdefault(event, []).append(entry)  # type: ignore[arg-type]

        def off() -> None:
            lst = self._listeners.get(event, [])
            for i, e in enumerate(lst):
                if e is entry:
                    del lst[i]
                    return

        return off

    def listeners(self, event: str) -> list[Callable[..., Any]]:
        return [e[0] for e in self._listeners.get(event, [])]  # type: ignore[index]

    def has(self, event: str) -> bool:
        return bool(self._listeners.get(event))

    def emit(self, event: str, *args: Any) -> None:
        """Run every listener now, in order; the first exception (if any) is raised as
        ``ListenerFailure`` after all of them ran. A coroutine returned by a listener is
        scheduled, not awaited."""
        first: BaseException | None = None
        for fn in self.listeners(event):
            try:
                result = fn(*args)
            except Exception as exc:
                if first is None:
                    first = exc
                continue
            if inspect.isawaitable(result):
                task = asyncio.ensure_future(result)
                task.add_done_callback(_log_background_failure(event))
        if first is not None:
            raise ListenerFailure(event, first)

    async def waterfall(self, event: str, args: tuple[Any, ...], value: Any,
                        default: Callable[[Any], Any]) -> Any:
        chain = self.listeners(event)

        async def run(i: int, current: Any) -> Any:
            if i >= len(chain):
                result = default(current)
                while inspect.isawaitable(result):
                    result = await result
                return result
            called: list[Any] = []

            async def rest() -> Any:
                value_after = await run(i + 1, current)
                called.append(value_after)
                return value_after

            def next_() -> Any:
                return rest()

            result = chain[i](*args, current, next_)
            while inspect.isawaitable(result):
                result = await result
            if result is None:  # nothing returned: keep what the chain (or the input) gave
                return called[-1] if called else current
            return result

        return await run(0, value)

    async def flush(self, *args: Any) -> list[BaseException]:
        """Run all ``session/flush`` listeners concurrently; return their failures."""
        failures: list[BaseException] = []
        pending = []
        for fn in self.listeners("session/flush"):
            try:
                result = fn(*args)
            except Exception as exc:
                failures.append(exc)
                continue
            if inspect.isawaitable(result):
                pending.append(asyncio.ensure_future(result))
        if pending:
            try:
                results = await asyncio.gather(*pending, return_exceptions=True)
            except asyncio.CancelledError:
                for p in pending:
                    p.cancel()
                raise
            for r in results:
                if isinstance(r, BaseException):
                    if not isinstance(r, Exception):
                        raise r  # PY-1: a listener's CancelledError is no plugin failure
                    failures.append(r)
        return failures


def _log_background_failure(event: str) -> Callable[[asyncio.Future[Any]], None]:
    def cb(task: asyncio.Future[Any]) -> None:
        if not task.cancelled() and task.exception() is not None:
            log.warning("async %s listener raised: %s", event, task.exception())

    return cb
