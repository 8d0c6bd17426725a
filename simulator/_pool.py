"""``concurrent.futures`` thread pools on the simulated loop.

Code that hands a synchronous tool or file write to a pool of its own,
``asyncio.wrap_future(pool.submit(f, ...))``, would start the pool's worker threads inside a
run (an escape), or, with a pool warmed up before the run, run ``f`` on a real thread the
scheduler cannot see. Inside a run ``ThreadPoolExecutor.submit`` therefore schedules ``f`` as
``loop.run_in_executor`` does: on the run's thread, in a ready callback of its own
(``cb:executor:f``) and a fresh context, at a moment the schedule picks. The returned
``concurrent.futures.Future`` behaves as a pool's: a future cancelled before its call began
never runs it, an exception (any ``BaseException``) goes to the future, and
``asyncio.wrap_future`` chains it to the loop as usual.

A caller that blocks on the result instead (``future.result()``, ``future.exception()``,
``concurrent.futures.wait``, ``as_completed``, ``pool.map``) would wait forever, the only thread
being its own: the call runs at once, the thread finishing while the caller waits, in no virtual
time. The pool's ``initializer`` is not run (no worker thread starts). Outside a run, and on
other threads, the real methods run.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import _base, thread
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from simulator._runtime import SimLoop

_installed = False


class WorkerFuture(concurrent.futures.Future[Any]):
    """A pool future whose call runs on the simulated loop; blocking on it runs the call now."""

    _run_now: Callable[[], None] | None = None

    def _finish_here(self) -> None:
        if self._run_now is not None and not self.done():
            self._run_now()

    def result(self, timeout: float | None = None) -> Any:
        self._finish_here()
        return super().result(timeout)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        self._finish_here()
        return super().exception(timeout)


def _finish(fs: Iterable[Any], first: bool) -> None:
    """Run the pending calls of ``fs``'s simulated futures now (only the first, when ``first``
    and none is done yet): what a caller blocking on them waits for."""
    mine = [f for f in fs if isinstance(f, WorkerFuture)]
    if first and any(f.done() for f in fs):
        return
    for f in mine:
        f._finish_here()
        if first:
            return


def install(sim_loop_here: Callable[[], SimLoop | None]) -> None:
    """Route ``ThreadPoolExecutor.submit`` (and waits on its futures) through the simulated
    loop when ``sim_loop_here()`` names one, that is on a run's own thread (once)."""
    global _installed
    if _installed:
        return
    _installed = True
    real_submit = thread.ThreadPoolExecutor.submit
    real_wait = _base.wait
    real_as_completed = _base.as_completed

    def submit(self: thread.ThreadPoolExecutor, fn: Callable[..., Any], /, *args: Any,
               **kwargs: Any) -> concurrent.futures.Future[Any]:
        loop = sim_loop_here()
        if loop is None:
            return real_submit(self, fn, *args, **kwargs)
        if getattr(self, "_shutdown", False):
            raise RuntimeError("cannot schedule new futures after shutdown")
        fut = WorkerFuture()

        def work() -> None:
            if not fut.set_running_or_notify_cancel():
                return  # cancelled before a worker took it, as a pool's work item
            try:
                value = fn(*args, **kwargs)
            except BaseException as exc:  # a pool's worker hands every exception to the future
                fut.set_exception(exc)
            else:
                fut.set_result(value)

        fut._run_now = loop._worker_call(fn, work)
        return fut

    def wait(fs: Iterable[Any], timeout: float | None = None,
             return_when: str = _base.ALL_COMPLETED) -> Any:
        fs = list(fs)
        if sim_loop_here() is not None:
            _finish(fs, first=return_when == _base.FIRST_COMPLETED)
        return real_wait(fs, timeout, return_when)

    def as_completed(fs: Iterable[Any], timeout: float | None = None) -> Iterator[Any]:
        fs = list(fs)
        if sim_loop_here() is not None:
            _finish(fs, first=False)
        return real_as_completed(fs, timeout)

    submit.__qualname__ = "ThreadPoolExecutor.submit"
    thread.ThreadPoolExecutor.submit = submit  # type: ignore[method-assign,assignment]
    for module in (_base, concurrent.futures):
        module.wait = wait  # type: ignore[attr-defined]
        module.as_completed = as_completed  # type: ignore[attr-defined]
