"""Reading a file a user named: a scenario, a cassette, a report, a baseline, a tools list.

One place for what any such read must refuse before it reads: a path that is not a regular file
(a FIFO with no writer would block the command for ever, ``/dev/zero`` would fill the memory),
and a file too large to be what it claims. It lives in the lowest layer that reads user files
(``cassettes``); ``conformance`` reads through it too."""

from __future__ import annotations

import os
import stat
from pathlib import Path

MAX_BYTES = 64 * 1024 * 1024
"""The largest input read (64 MiB): far past any scenario, cassette or report the kit writes."""


class InputFileError(OSError):
    """An input file that cannot be read; ``str()`` is the reason alone (callers name the file)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.strerror = reason

    def __str__(self) -> str:
        return self.strerror or ""


class MissingInputError(InputFileError, FileNotFoundError):
    """The file does not exist (a ``FileNotFoundError`` too)."""


def read_bytes(path: str | os.PathLike[str], *, limit: int = MAX_BYTES) -> bytes:
    """The bytes of the regular file ``path``; :class:`InputFileError` (an ``OSError``) when it
    is missing, not a regular file, unreadable or larger than ``limit`` bytes."""
    p = Path(path)
    try:
        info = p.stat()
    except FileNotFoundError:
        raise MissingInputError("no such file") from None
    except OSError as exc:
        raise InputFileError(exc.strerror or str(exc)) from None
    if stat.S_ISDIR(info.st_mode):
        raise InputFileError("is a directory")
    if not stat.S_ISREG(info.st_mode):
        raise InputFileError("not a regular file (a pipe, a device or a socket)")
    if info.st_size > limit:
        raise InputFileError(f"too large ({info.st_size:,} bytes; at most {limit:,})")
    try:
        with open(p, "rb") as f:
            data = f.read(limit + 1)
    except OSError as exc:
        raise InputFileError(exc.strerror or str(exc)) from None
    if len(data) > limit:  # it grew since the stat
        raise InputFileError(f"too large (more than {limit:,} bytes)")
    return data


def read_text(path: str | os.PathLike[str], *, limit: int = MAX_BYTES) -> str:
    """The UTF-8 text of the regular file ``path`` (see :func:`read_bytes`); a file that is not
    UTF-8 raises :class:`InputFileError` naming the first bad byte's offset."""
    data = read_bytes(path, limit=limit)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputFileError(f"not UTF-8 text (byte {exc.start})") from None


__all__ = ["MAX_BYTES", "InputFileError", "MissingInputError", "read_bytes", "read_text"]
