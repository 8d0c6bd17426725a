"""AnyIO's worker threads on the simulated loop.

``anyio.to_thread.run_sync`` (what pydantic-ai, Starlette's ``run_in_threadpool`` and other
AnyIO-based code hand a synchronous tool or file write to) starts a thread of AnyIO's own, which
escapes the deterministic scheduler. Inside a run it is routed through the loop's
``run_in_executor`` instead, as ``asyncio.to_thread`` is (see ``SimLoop.run_in_executor``): the
call runs on the run's thread in a ready callback of its own, in a copy of the caller's context,
and the caller resumes when the schedule picks that callback. Around it, AnyIO's own steps stay:
its checkpoint, its capacity limiter, and the cancel scope that shields the wait unless
``abandon_on_cancel``. Outside a run the real method runs.

``anyio.from_thread`` inside such a call is not supported (the call is not on an AnyIO worker
thread); AnyIO loaded only once a run started keeps its threads escapes (the routing is put in
place when a run begins and AnyIO is already imported, as an implementation's modules are).
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import sys
from collections.abc import Callable
from typing import Any

_installed = False


def install(simulating: Callable[[asyncio.AbstractEventLoop], bool]) -> None:
    """Route ``anyio.to_thread.run_sync`` through the loop when ``simulating(loop)`` (once; a
    no-op until AnyIO is imported, or when its asyncio backend is not the one this knows)."""
    global _installed
    if _installed or "anyio" not in sys.modules:
        return
    _installed = True
    try:
        from anyio._backends import _asyncio as backend
    except Exception:  # an AnyIO whose backend moved: its threads stay escapes
        return
    cls: Any = getattr(backend, "AsyncIOBackend", None)
    real = getattr(cls, "run_sync_in_worker_thread", None)
    set_library = getattr(backend, "set_current_async_library", None)
    scope_type = getattr(backend, "CancelScope", None)
    if real is None or set_library is None or scope_type is None:
        return
    real_fn = real.__func__

    async def run_sync_in_worker_thread(cls: Any, func: Callable[..., Any], args: tuple[Any, ...],
                                        abandon_on_cancel: bool = False, limiter: Any = None) -> Any:
        loop = asyncio.get_running_loop()
        if not simulating(loop):
            return await real_fn(cls, func, args, abandon_on_cancel=abandon_on_cancel, limiter=limiter)
        await cls.checkpoint()
        async with limiter or cls.current_default_thread_limiter():
            with scope_type(shield=not abandon_on_cancel):
                # the worker's context, as AnyIO makes it: the caller's, no async library in it
                context = contextvars.copy_context()
                context.run(set_library, None)
                return await loop.run_in_executor(None, functools.partial(context.run, func, *args))

    run_sync_in_worker_thread.__qualname__ = "AsyncIOBackend.run_sync_in_worker_thread"
    cls.run_sync_in_worker_thread = classmethod(run_sync_in_worker_thread)
