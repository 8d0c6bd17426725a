"""Units of hunt work run on forked worker processes, results returned in unit order.

The work (the plans, the implementation) is set up in the parent before the fork and inherited;
only unit numbers travel to the workers and small results come back, so the result is the same
whatever the number of workers and whatever order the units finish in. A worker that dies is a
:class:`PoolError` naming the unit it was running; workers die with the parent, ignore SIGINT
and SIGTERM (the parent decides: a terminal and ``timeout(1)`` signal the whole process group),
and stop taking units when ``should_stop()`` says so (the results then
lack the units never run: ``None`` in their place). Units still running :data:`STOP_GRACE`
seconds after the stop was asked for are abandoned (their workers killed, ``None`` in their
place too): a slow or stuck unit never holds a stopped command, and its partial report, hostage.
"""

from __future__ import annotations

import contextlib
import gc
import os
import signal
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from conformance.output import close_wire_children
from simulator.supervise import WORKER_BROKE, WORKER_SPUN, die_with_parent, exit_on_swallowed_alarms

R = TypeVar("R")


STOP_GRACE = 3.0
"""Wall seconds the units running when a stop is asked for get to finish."""


class PoolError(Exception):
    """A worker failed or died (one-line message naming the unit)."""


class WorkerSpun(PoolError):
    """A worker's program swallowed every wall-clock alarm: it spins (a finding, not bad input)."""


_JOB: tuple[Callable[[Any], Any], Sequence[Any]] | None = None


def _worker(tasks: Any, results: Any) -> None:
    die_with_parent()
    exit_on_swallowed_alarms(WORKER_SPUN)
    # What the implementation prints goes nowhere: the parent's stdout carries the report
    # (``--json``: one JSON document), which a print from a window's run would corrupt. What
    # this process inherited unflushed from the parent is dropped with it, not printed twice.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.close(devnull)
    # ... and so does what it prints through ``sys.stdout``, which the parent's command pointed
    # at its stderr while the implementation runs (conformance.output.guarded)
    sys.stdout = open(os.devnull, "w", encoding="utf-8")
    # The parent decides: ``timeout(1)`` and a terminal signal the whole process group, and a
    # worker dying of it first would turn a stop into a "worker died" error with no report.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    # What the parent built (plans, the implementation, imported modules) lives as long as the
    # worker: out of the collector's sight, full collections stay cheap and pages stay shared.
    gc.freeze()
    assert _JOB is not None
    fn, units = _JOB
    try:
        while True:
            i = tasks.get()
            if i is None:
                break
            results.put(("start", i, os.getpid()))
            try:
                results.put(("done", i, fn(units[i])))
            except BaseException as exc:  # reported by the parent, naming the unit
                line = traceback.format_exception_only(type(exc), exc)[-1].strip()
                results.put(("error", i, line))
                break
    except BaseException:
        # The queues themselves broke: an implementation that closes file descriptors it does not
        # own closed the worker's pipe. Die quietly (no traceback on the user's terminal): the
        # parent reports the death in one line, naming the unit the worker was running.
        close_wire_children(graceful=False)
        os._exit(WORKER_BROKE)
    close_wire_children(graceful=False)  # multiprocessing ends a worker by os._exit: no atexit hook would


def _signalled(code: int | None) -> str:
    """`` (killed by SIGKILL)`` for a worker a signal ended (its exit code is minus the signal)."""
    if code is None or code >= 0:
        return ""
    try:
        return f" (killed by {signal.Signals(-code).name})"
    except ValueError:
        return f" (killed by signal {-code})"


def run(fn: Callable[[Any], R], units: Sequence[Any], *, workers: int = 1,
        done: Callable[[int, R], None] | None = None,
        should_stop: Callable[[], bool] | None = None,
        describe: Callable[[Any], str] = str, isolate: bool = False) -> list[R | None]:
    """``[fn(u) for u in units]`` on ``workers`` processes; ``done(i, result)`` as each ends.
    With one worker (or one unit) the units run in this process, unless ``isolate``: then on one
    forked worker all the same, so code that kills its process (``os.kill(os.getpid(), SIGKILL)``,
    a crash in C) ends a worker, reported as a :class:`PoolError`, never the caller."""
    stop = should_stop or (lambda: False)
    out: list[R | None] = [None] * len(units)
    if not units:
        return out
    if (workers <= 1 or len(units) <= 1) and not isolate:
        for i, unit in enumerate(units):
            if stop():
                break
            out[i] = fn(unit)
            if done is not None:
                done(i, out[i])  # type: ignore[arg-type]
        return out
    import multiprocessing as mp

    global _JOB
    ctx = mp.get_context("fork")
    tasks, results = ctx.SimpleQueue(), ctx.SimpleQueue()
    _JOB = (fn, units)
    count = max(1, min(workers, len(units)))
    procs = [ctx.Process(target=_worker, args=(tasks, results), daemon=True) for _ in range(count)]
    running: dict[int, int] = {}  # pid -> unit
    finished = 0
    sent = 0
    stopped_at: float | None = None
    try:
        for p in procs:
            p.start()
        for _ in range(count * 2):  # two units in flight per worker keep them all busy
            if sent < len(units):
                tasks.put(sent)
                sent += 1
        while finished < sent:
            if stopped_at is None and stop():
                stopped_at = time.monotonic()
            elif stopped_at is not None and time.monotonic() - stopped_at > STOP_GRACE:
                break  # the units still running are abandoned (``None``); ``finally`` ends their workers
            while not results.empty():
                what, i, payload = results.get()
                if what == "start":
                    running[payload] = i
                    continue
                if what == "error":
                    raise PoolError(f"{describe(units[i])}: {payload}")
                out[i] = payload
                finished += 1
                if done is not None:
                    done(i, payload)
                if sent < len(units) and not stop():
                    tasks.put(sent)
                    sent += 1
            for p in procs:
                # one a signal killed once a stop was asked for (SIGKILL by hand, say) is a stop too
                signalled = stopped_at is not None and (p.exitcode or 0) < 0
                if not p.is_alive() and p.exitcode not in (0, None) and not signalled:
                    time.sleep(0.05)
                    if not results.empty():
                        break
                    unit = running.get(p.pid or -1)
                    where = f" while running {describe(units[unit])}" if unit is not None else ""
                    if p.exitcode == WORKER_SPUN:
                        raise WorkerSpun(f"the program under test swallowed every wall-clock alarm{where}: it spins "
                                         "and never yields (a busy loop catching every interruption)")
                    why = (" (its pipe to this process broke: does the implementation close file descriptors "
                           "it does not own?)") if p.exitcode == WORKER_BROKE else _signalled(p.exitcode)
                    raise PoolError(f"a worker died (exit code {p.exitcode}){where}{why}")
            time.sleep(0.002)
    finally:
        _JOB = None
        for _ in procs:
            with contextlib.suppress(Exception):
                tasks.put(None)
        for p in procs:
            p.join(timeout=0.5)
            if p.is_alive():
                p.kill()  # SIGKILL: a worker ignores SIGTERM (above)
                p.join(timeout=2)
    return out


__all__ = ["PoolError", "WorkerSpun", "run"]
