"""Worker processes that never outlive their parent.

A worker process of a search (``simulator.explore(workers=N)``) or of the conformance runner
calls :func:`die_with_parent` first thing. Whatever ends the parent (a SIGKILL included, which
no handler sees), the worker goes too, instead of running on under init and holding the
parent's output pipe open (which makes ``loopkit explore ... | tee`` wait forever):

* on Linux the kernel does it: ``prctl(PR_SET_PDEATHSIG, SIGKILL)`` asks for a SIGKILL when
  the parent thread that forked the worker ends;
* everywhere, a daemon thread polls ``os.getppid()`` (a few times a second) and ends the worker
  when the parent is gone (re-parented processes see another parent id).
"""

from __future__ import annotations

import _signal
import contextlib
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

PR_SET_PDEATHSIG = 1
"""From ``<linux/prctl.h>``."""

WATCH_INTERVAL = 0.25
"""Seconds between two checks of the portable watchdog."""


def _pdeathsig(signum: int) -> bool:
    """Ask the Linux kernel to send ``signum`` when the parent dies; whether it took."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(PR_SET_PDEATHSIG, signum, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def _watch(parent: int) -> None:
    while True:
        time.sleep(WATCH_INTERVAL)
        if os.getppid() != parent:
            os._exit(1)


def die_with_parent(parent: int | None = None) -> None:
    """End this process when ``parent`` (default: the current parent) dies, by any signal.

    Call it in the child right after it starts. If the parent already died before the call (the
    fork raced its death), the child exits at once."""
    expected = os.getppid() if parent is None else parent
    _pdeathsig(signal.SIGKILL)
    if os.getppid() != expected:  # the parent died before prctl took effect
        os._exit(1)
    with contextlib.suppress(RuntimeError):  # no threads (an interpreter shutting down): prctl only
        threading.Thread(target=_watch, args=(expected,), name="loopkit-parent-watch", daemon=True).start()


# --------------------------------------------------------------------------- wall-clock limit

WALL_GRACE = 0.5
"""Seconds between the repeated alarms after the first, while the program does not stop."""
WALL_MAX = 1e8
"""Limits at or beyond this many seconds (infinity included) mean no limit."""
WALL_ALARMS = 4
"""Alarms after which a program that swallows every one of them ends the process (exit 1)."""


class WallClockExceeded(KeyboardInterrupt):
    """A simulated run exceeded its wall-clock limit: the program never yields to the event loop
    (a busy loop, or blocking code the simulator does not intercept). Every wait of a simulation
    is virtual, so wall time spent means a spin.

    A ``KeyboardInterrupt`` so that asyncio's callback wrappers and the program's own
    ``except Exception`` let it through to the simulator's run loop."""

    def __init__(self, limit: float, where: str) -> None:
        self.limit = limit
        self.where = where
        super().__init__(f"exceeded the wall-clock limit ({limit:g}s) spinning in {where}: every wait of a "
                         "simulation is virtual, so the program never yields to the event loop (a busy loop, "
                         "or blocking code)")


WAIT_HINT = "_loopkit_waiting_on"
"""A local variable of this name (a string) in a frame on the stack at an alarm says what that
frame blocks on: the report names it instead of a file and line. A process that waits for
another process's answer spins in that other process, which no Python frame shows."""


def waiting_on(frame: Any) -> str | None:
    """The innermost :data:`WAIT_HINT` on ``frame``'s stack, if any."""
    f = frame
    while f is not None:
        hint = f.f_locals.get(WAIT_HINT)
        if isinstance(hint, str):
            return hint
        f = f.f_back
    return None


def spinning_frame(frame: Any, skip: Callable[[str], bool] = lambda _path: False) -> traceback.FrameSummary | None:
    """Where a program spins at an alarm: the innermost frame of ``frame``'s stack whose file
    ``skip`` does not exclude (the innermost of all when it excludes every one)."""
    stack = traceback.extract_stack(frame) if frame is not None else []
    for entry in reversed(stack):
        if not skip(entry.filename):
            return entry
    return stack[-1] if stack else None


def _where(frame: Any) -> str:
    hint = waiting_on(frame)
    if hint is not None:
        return hint
    entry = spinning_frame(frame)
    if entry is None:
        return "an unknown place"
    return f"{entry.name} ({os.path.basename(entry.filename)}:{entry.lineno})"


real_exit = getattr(os._exit, "__wrapped__", os._exit)
"""The real ``os._exit``: inside a run the simulator guards it, and a last resort must exit."""


# Every run arms and disarms: the C module's functions, without the ``signal`` module's enum
# conversions (a tenth of the cost; they take and return plain ints).
_HAVE_TIMER = hasattr(_signal, "setitimer")
_HAVE_MASK = hasattr(_signal, "pthread_sigmask")
_SIGALRM: int = getattr(_signal, "SIGALRM", 14)
_ITIMER_REAL: int = getattr(_signal, "ITIMER_REAL", 0)
_SIG_BLOCK: int = getattr(_signal, "SIG_BLOCK", 0)
_SIG_UNBLOCK: int = getattr(_signal, "SIG_UNBLOCK", 1)
_SIG_DFL: int = _signal.SIG_DFL
_ALRM_SET = frozenset({_SIGALRM})


WORKER_BROKE = 70
"""The exit code of a worker process whose pipe to its parent broke under it (EX_SOFTWARE): the
program under test closed file descriptors it does not own. The worker dies quietly, and its
parent reports the death in one line (the hunt's and explore's pools alike)."""

WORKER_SPUN = 71
"""The exit code of a worker process whose program swallowed every wall-clock alarm (a worker
calls :func:`exit_on_swallowed_alarms` with it): its parent reports a spin, a finding, where a
process of its own ends with exit 1."""

_swallowed_exit = 1


def exit_on_swallowed_alarms(code: int) -> None:
    """The exit code this process ends with when a program swallows every alarm (default 1)."""
    global _swallowed_exit
    _swallowed_exit = code


def _quiet_unraisable(previous: Any) -> Callable[[Any], None]:
    def hook(unraisable: Any) -> None:
        # An alarm that landed in a finalizer or a weakref callback (a collection ran just then)
        # cannot propagate: Python would print "Exception ignored in ..." with a traceback. It is
        # dropped quietly; the next alarm, WALL_GRACE later, lands in the program.
        if not isinstance(unraisable.exc_value, WallClockExceeded):
            previous(unraisable)
    hook.quiets_alarms = True  # type: ignore[attr-defined]
    return hook


def _quiet_alarms_in_finalizers() -> None:
    if not getattr(sys.unraisablehook, "quiets_alarms", False):
        sys.unraisablehook = _quiet_unraisable(sys.unraisablehook)


class WallClock:
    """The wall-clock limit of one run: :meth:`arm` before the program runs, :meth:`disarm`
    after; while armed, :class:`WallClockExceeded` is raised in whatever runs once ``limit`` wall
    seconds have passed, and again every :data:`WALL_GRACE` seconds until disarmed. A program
    that swallows :data:`WALL_ALARMS` of them ends the process: one ``FAILED`` line on stderr,
    exit 1 (the verdict on it, as for any failing run).

    It only arms on the main thread of a POSIX process, with a finite positive ``limit``, and
    when no timer is running already (a supervisor outside, such as the conformance plugin's,
    keeps time then). :meth:`disarm` is race-free: an alarm due at that moment is dropped, and
    the previous ``SIGALRM`` handler is back when it returns."""

    def __init__(self, limit: float | None) -> None:
        self.limit = limit
        self.armed = False
        self._alarms = 0
        self._first = ""
        self._previous: Any = None

    def arm(self) -> None:
        limit = self.limit
        if (self.armed or not limit or not 0 < limit < WALL_MAX or not _HAVE_TIMER
                or threading.current_thread() is not threading.main_thread()
                or _signal.getitimer(_ITIMER_REAL)[0] > 0):
            return
        _quiet_alarms_in_finalizers()
        if _HAVE_MASK:  # a program that blocked SIGALRM (at import, say) would turn the limit off
            _signal.pthread_sigmask(_SIG_UNBLOCK, _ALRM_SET)
        self._previous = _signal.signal(_SIGALRM, self._on_alarm)
        self.armed = True
        # Armed again after an alarm (the program unwinding): it gets the grace period only.
        _signal.setitimer(_ITIMER_REAL, WALL_GRACE if self._first else limit)

    def disarm(self) -> None:
        if not self.armed:
            return
        if _HAVE_MASK:
            _signal.pthread_sigmask(_SIG_BLOCK, _ALRM_SET)
        try:
            _signal.setitimer(_ITIMER_REAL, 0)
            if _HAVE_MASK and _SIGALRM in _signal.sigpending():
                _signal.sigwait(_ALRM_SET)  # an alarm that came due meanwhile: dropped
            _signal.signal(_SIGALRM, self._previous if self._previous is not None else _SIG_DFL)
            self.armed = False
        finally:
            if _HAVE_MASK:
                _signal.pthread_sigmask(_SIG_UNBLOCK, _ALRM_SET)

    def _on_alarm(self, _signum: int, frame: Any) -> None:
        self._alarms += 1
        where = _where(frame)
        self._first = self._first or where
        if self._alarms > WALL_ALARMS:
            sys.stderr.write(f"FAILED: the program under test did not stop after {WALL_ALARMS} wall-clock alarms "
                             f"(spinning in {self._first}): every wait of a simulation is virtual, so it never "
                             "yields; ending the process\n")
            sys.stderr.flush()
            real_exit(_swallowed_exit)
        _signal.setitimer(_ITIMER_REAL, WALL_GRACE)
        assert self.limit is not None
        raise WallClockExceeded(self.limit, where)
