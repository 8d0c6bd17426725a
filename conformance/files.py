"""Writing report files: whole or not at all, and checked writable before the work that makes them
(a suite, a hunt or a search runs for minutes: it must not end in a failure to save), and never
over another output of the same command or over a file the command reads."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Sequence
from pathlib import Path


def atomic_write(path: str, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file in the same directory and a rename,
    so a reader never sees half a report. Through a symbolic link, the file it points to is
    written (the link stays); a path that is not a regular file (``/dev/stdout``, a pipe, a
    device) is written in place, never replaced by a file. Text an implementation put there
    that UTF-8 cannot encode (a lone surrogate) is written escaped. ``-`` is standard output."""
    data = text.encode("utf-8", "backslashreplace")
    if path == "-":
        out = getattr(sys.stdout, "buffer", None)
        if out is None:  # a text-only stream (a test's capture)
            sys.stdout.write(data.decode("utf-8"))
        else:
            out.write(data)
        sys.stdout.flush()
        return
    target = Path(os.path.realpath(path))
    if target.exists() and not target.is_file():
        with open(target, "wb") as out:
            out.write(data)
        return
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, target)
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()


def output_path_error(option: str, path: str | Path, *, make_parent: bool = False,
                      stdout: bool = False) -> str | None:
    """Why a report cannot be written to ``path`` (``None`` when it can).

    Checked before running: the suite (and the self-check, minutes) would otherwise run to the
    end only to fail on a typo in the report path. The parent directory must exist and be
    writable (``make_parent``: it is made first, as the commands that make it do); the file
    itself is written after the run. ``stdout``: the option takes ``-`` for standard output.
    """
    path = str(path)
    if path == "-":
        return None if stdout else f"{option} -: this option writes a file, not standard output (name a file)"
    parent = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        return f"cannot write {path!r} ({option}): it is a directory"
    if make_parent:
        try:
            os.makedirs(parent, exist_ok=True)
        except OSError as exc:
            return f"cannot write {path!r} ({option}): cannot create directory {parent!r} ({exc.strerror or exc})"
    if not os.path.isdir(parent):
        return f"cannot write {path!r} ({option}): no such directory {parent!r}"
    if not os.access(parent, os.W_OK):
        return f"cannot write {path!r} ({option}): directory {parent!r} is not writable"
    return None


def writable(directory: Path, what: str = "--out") -> None:
    """Make ``directory`` (and its parents) and check it can be written to, before any work:
    ``OSError`` naming the option and the reason otherwise."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OSError(f"{what} {directory}: cannot create the directory ({exc.strerror or exc})") from None
    if not directory.is_dir() or not os.access(directory, os.W_OK | os.X_OK):
        raise OSError(f"{what} {directory}: not a directory this process can write to")


Paths = Sequence[tuple[str, "str | Path | None"]]


def clash_error(outputs: Paths, inputs: Paths = ()) -> str | None:
    """Why two of ``outputs`` (``(option, path)``) would write one file, or one would replace a
    file the command reads (``inputs``: ``(what it is, path)``); ``None`` when neither. Checked
    before the run: ``explore --out`` over its own scenario replaced it with the race cassette,
    and ``run --trace F --diagram F`` kept only the diagram."""
    seen: dict[str, tuple[str, str]] = {}
    read = {os.path.realpath(p): what for what, p in inputs if p is not None and str(p) != "-"}
    for option, path in outputs:
        if path is None or str(path) == "-":
            continue
        key = os.path.realpath(path)
        if key in read:
            return f"{option} {str(path)!r} is {read[key]}: writing there would replace it"
        if key in seen:
            other, first = seen[key]
            return f"{other} {first!r} and {option} {str(path)!r} are the same file: each needs its own"
        seen[key] = (option, str(path))
    return None
