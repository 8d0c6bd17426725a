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

import contextlib
import os
import signal
import sys
import threading
import time

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
