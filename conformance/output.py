"""The command's own output, kept apart from what the implementation under test prints.

An implementation runs in the command's process: it may print at import or in a listener,
replace ``sys.stdout``, or close it. While it is imported and runs (:func:`guarded`), what it
writes to ``sys.stdout`` goes to stderr, and the streams it sees cannot be closed; after, the
command's streams are put back whatever it did to them, so the timeline, the report and the JSON
a command prints on stdout reach it whole.
"""

from __future__ import annotations

import contextlib
import io
import sys
from collections.abc import Iterator
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


@contextlib.contextmanager
def guarded() -> Iterator[None]:
    """Import and run the implementation inside: its stdout goes to stderr, and the command's
    ``sys.stdout`` and ``sys.stderr`` are back in place after, whatever it did to them."""
    out, err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = _Forward(err), _Forward(err)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = out, err
