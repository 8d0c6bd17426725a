"""The command's own output and interrupts, kept apart from what the implementation under test
does in the command's process.

An implementation runs in the command's process: it may print at import or in a listener,
replace ``sys.stdout``, or close it. While it is imported and runs (:func:`guarded`), what it
writes to ``sys.stdout`` goes to stderr, and the streams it sees cannot be closed; after, the
command's streams are put back whatever it did to them, so the timeline, the report and the JSON
a command prints on stdout reach it whole. A ``KeyboardInterrupt`` it raises itself (no Ctrl-C
came from the terminal) is an :class:`ImplementationInterrupt`, not the user's interrupt: typer
would end the command with exit 130 and no word. Wire children it leaves are closed by
:func:`close_wire_children` before a process ends without its exit hooks.
"""

from __future__ import annotations

import contextlib
import io
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any, TextIO


class _Forward(io.TextIOBase):
    """A text stream writing to ``target``; closing it leaves ``target`` open."""

    def __init__(self, target: TextIO) -> None:
        super().__init__()
        self._target = target

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self._target, "encoding", None) or "utf-8"

    @property
    def buffer(self) -> Any:
        return getattr(self._target, "buffer", None)

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        with contextlib.suppress(ValueError, OSError):  # the target itself was closed behind our back
            self._target.write(text)
        return len(text)

    def flush(self) -> None:
        with contextlib.suppress(ValueError, OSError):
            self._target.flush()

    def isatty(self) -> bool:
        return False

    def close(self) -> None:
        pass


_CONTROLS = {c: f"\\x{c:02x}" for c in (*range(0x09), *range(0x0B, 0x20), 0x7F, *range(0x80, 0xA0))}


def printable(text: str) -> str:
    """``text`` safe to print on a terminal: its control characters other than newline and tab
    (an escape sequence, a carriage return, a bell in an implementation's message or name) shown
    as ``\\xNN`` instead of acted on. The kit's own lines have none, so every line it prints
    passes through here; reports written to files keep the text as it was."""
    return text.translate(_CONTROLS)


def shown(text: Any) -> str:
    """``text`` for rich's console: :func:`printable`, and its square brackets escaped (rich would
    read ``[/x]`` in an implementation's message as markup, and fail on it)."""
    from rich.markup import escape

    return escape(printable(str(text)))


STDOUT = "-"
"""A report path meaning standard output (``--json -``): the command's own output then goes to
stderr (:func:`to_stderr`), so stdout carries the report alone, for a pipe."""


@contextlib.contextmanager
def to_stderr(active: bool = True) -> Iterator[None]:
    """While active, what the command prints for a person (its table, progress and notes, and
    whatever reaches file descriptor 1) goes to stderr; stdout is back in place after, for the
    report written to it (:data:`STDOUT`)."""
    if not active:
        yield
        return
    out = sys.stdout
    with contextlib.suppress(ValueError, OSError):
        out.flush()
    saved: int | None = None
    try:
        fd = out.fileno()
        saved = os.dup(fd)
        os.dup2(sys.stderr.fileno(), fd)
    except (AttributeError, ValueError, OSError, io.UnsupportedOperation):  # no descriptor (a test's capture)
        fd = -1
    sys.stdout = _Forward(sys.stderr)
    try:
        yield
    finally:
        with contextlib.suppress(ValueError, OSError):
            sys.stderr.flush()
        sys.stdout = out
        if saved is not None:
            os.dup2(saved, fd)
            os.close(saved)


SELF_INTERRUPT = ("the implementation raised KeyboardInterrupt itself (no interrupt came from the terminal): a loop "
                  "must not raise it into the caller")
"""What the kit says of a ``KeyboardInterrupt`` no signal caused (here, ``explore``, the suite)."""


class ImplementationInterrupt(Exception):
    """The implementation raised ``KeyboardInterrupt`` (no SIGINT came) or ``SystemExit`` itself,
    out of a call the kit made (one line; the command exits 2)."""


@contextlib.contextmanager
def guarded(signalled: Callable[[], bool] | None = None) -> Iterator[None]:
    """Import and run the implementation inside: its stdout goes to stderr, and the command's
    ``sys.stdout`` and ``sys.stderr`` are back in place after, whatever it did to them; a
    ``KeyboardInterrupt`` no SIGINT caused, or a ``SystemExit``, is an
    :class:`ImplementationInterrupt`. A command that handles SIGINT itself (``Interrupts``) says
    through ``signalled`` whether a signal came."""
    out, err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = _Forward(err), _Forward(err)
    heard = [False]
    previous = signal.getsignal(signal.SIGINT)
    own = (signalled is None and previous is signal.default_int_handler
           and threading.current_thread() is threading.main_thread())
    told = signalled if signalled is not None else (lambda: heard[0]) if own else None
    if own:
        def interrupted(signum: int, frame: Any) -> None:
            heard[0] = True
            raise KeyboardInterrupt

        signal.signal(signal.SIGINT, interrupted)
    try:
        yield
    except KeyboardInterrupt as exc:
        if told is None or told() or type(exc) is not KeyboardInterrupt:
            raise  # unknowable here, the user's Ctrl-C, or the kit's own wall-clock alarm (a subclass)
        raise ImplementationInterrupt(SELF_INTERRUPT) from None
    except SystemExit as exc:  # raised, not sys.exit() (the simulator's tripwire catches that call)
        raise ImplementationInterrupt(f"the implementation raised SystemExit({exc.code!r}): a loop must not end "
                                      "its caller's process") from None
    finally:
        sys.stdout, sys.stderr = out, err
        if own:
            signal.signal(signal.SIGINT, previous)


def close_wire_children(*, graceful: bool = True) -> None:
    """Close the wire children this process started, if it started any (the wire module is not
    imported otherwise): a process ending by ``os._exit`` (the preflight's child, a pool worker,
    the ``loopkit`` program itself) runs no ``atexit`` hook, and a child deaf to the end of its
    input would outlive the kit, in a session of its own that no signal to the kit reaches.
    ``graceful``: end of input first, killed a second later (a worker has no second: its parent
    kills it half a second after its last unit)."""
    child = sys.modules.get("conformance.wire.child")
    if child is not None:
        with contextlib.suppress(Exception):
            child.close_all(graceful=graceful)
