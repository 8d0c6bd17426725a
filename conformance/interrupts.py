"""Interrupts: the first Ctrl-C stops a long command at its next safe point, with what it found.

Every long command (``conformance``, ``selfcheck``, ``explore``, ``hunt``) runs inside
:class:`Interrupts`::

    with Interrupts() as stop:
        for item in work:
            if stop.requested:              # a safe point: between two tests, runs, mutants
                break
            ...
    if stop.requested:
        print(stop.message(done, "tests"))   # "interrupted after 12 tests (SIGINT)"
        raise typer.Exit(stop.exit_code)     # 130 for SIGINT, 143 for SIGTERM

The first SIGINT or SIGTERM only sets the flag (the work in progress finishes, and an
implementation under test that swallows ``KeyboardInterrupt`` cannot eat it); a second one
raises ``KeyboardInterrupt`` at once, for when the safe point never comes. The handlers are
restored on exit. ``Interrupted`` is what code that cannot return a partial result raises at a
safe point (``check()``).
"""

from __future__ import annotations

import signal
import threading
from types import FrameType
from typing import Any

EXIT_CODE = 130
"""The exit status of a command stopped by SIGINT (128 + 2), as shells report it."""

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(Exception):
    """The user asked to stop (raised at a safe point by :meth:`Interrupts.check`)."""

    def __init__(self, signum: int = signal.SIGINT) -> None:
        self.signum = signum
        super().__init__(f"interrupted ({signal.Signals(signum).name})")


def exit_code(signum: int) -> int:
    """The conventional exit status after signal ``signum`` (130 for SIGINT, 143 for SIGTERM)."""
    return 128 + int(signum)


class Interrupts:
    """Install SIGINT/SIGTERM handlers that set a flag (see the module docstring)."""

    def __init__(self, signals: tuple[int, ...] = SIGNALS) -> None:
        self.signals = signals
        self.signum: int | None = None
        self._previous: dict[int, Any] = {}

    @property
    def requested(self) -> bool:
        """Whether a stop was asked for."""
        return self.signum is not None

    def __call__(self) -> bool:
        """``requested``, as a callable for code below this layer (``should_stop=stop``)."""
        return self.signum is not None

    @property
    def exit_code(self) -> int:
        """The status to exit with (130 when nothing was asked for, as after a SIGINT)."""
        return exit_code(self.signum) if self.signum is not None else EXIT_CODE

    def check(self) -> None:
        """Raise :class:`Interrupted` if a stop was asked for (call it at a safe point)."""
        if self.signum is not None:
            raise Interrupted(self.signum)

    def message(self, done: int, unit: str) -> str:
        """``interrupted after N UNIT (SIGNAL)``: the one wording every command prints."""
        name = signal.Signals(self.signum).name if self.signum is not None else "SIGINT"
        return f"interrupted after {done} {unit} ({name})"

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        if self.signum is not None:
            raise KeyboardInterrupt  # the second signal: stop now, wherever we are
        self.signum = signum

    def __enter__(self) -> Interrupts:
        if threading.current_thread() is threading.main_thread():  # signals go to the main thread
            for signum in self.signals:
                self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
        self._previous.clear()


def echo(text: str = "", *, err: bool = False) -> None:
    """Print a line; if the reader of stdout went away (``loopkit explore ... | head -1``), carry
    on silently instead of dying of ``BrokenPipeError`` before the command's files are written.

    After a broken pipe, stdout is pointed at ``/dev/null`` so that later prints and the
    interpreter's final flush do not fail either."""
    import os
    import sys

    import typer

    from .output import printable

    try:
        typer.echo(printable(text), err=err)
        (sys.stderr if err else sys.stdout).flush()
    except BrokenPipeError:
        stream = sys.stderr if err else sys.stdout
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, stream.fileno())
            os.close(devnull)
        except (OSError, ValueError):  # not a real file descriptor (a test's capture)
            pass
