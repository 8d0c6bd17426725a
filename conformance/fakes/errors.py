"""The errors of the fakes: one scripted failure class and the "script misuse" assertions."""

from __future__ import annotations

import copy


class FakeError(Exception):
    """A scripted failure of a fake (a model stream or a listener told to raise); ``code`` is set
    only when given, so an implementation under test sees no ``code`` attribute otherwise."""

    def __init__(self, message: str, code: str | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code


class ScriptExhausted(AssertionError):
    """A fake model or tool was called more times than its script has entries."""

    code = "SCRIPT_EXHAUSTED"


class UnusedResponses(AssertionError):
    """``assert_all_used()``: some scripted responses (or results) were never requested."""


MARK = "_loopkit_raised"
"""The attribute that marks an error the kit raised into the implementation (a scripted model
failure, a listener told to throw): what an ``agent/error`` announcement carries is then
recognisable, in process, as that error, one chained to it, or neither (ERR-9)."""


def mark(error: BaseException) -> BaseException:
    """``error``, marked as raised by the kit (:data:`MARK`; an error that takes no attribute,
    ``__slots__`` say, stays unmarked)."""
    try:
        setattr(error, MARK, True)
    except (AttributeError, TypeError):
        pass
    return error


def causes(value: object, depth: int = 8) -> list[BaseException]:
    """``value`` (when it is an error) and the errors its ``__cause__`` or ``__context__`` chain
    reaches, a few links deep, each once."""
    out: list[BaseException] = []
    link = value if isinstance(value, BaseException) else None
    while link is not None and len(out) <= depth and all(link is not seen for seen in out):
        out.append(link)
        link = link.__cause__ or link.__context__
    return out


def origin_of(value: object) -> str | None:
    """``"original"`` when ``value`` is an error the kit raised (:func:`mark`), ``"chained"`` when
    it is an error whose ``__cause__`` or ``__context__`` chain (a few links deep) reaches one,
    else ``None``."""
    marked = [getattr(e, MARK, False) is True for e in causes(value)]
    if not any(marked):
        return None
    return "original" if marked[0] else "chained"


def fresh(error: BaseException) -> BaseException:
    """A copy of a scripted ``error`` to raise (the script keeps its own). Raising one object in
    every call chains each raise's traceback onto the last: the frames of every earlier run, and
    all they hold, would stay alive for as long as the script does (and a loop that keeps the
    error it caught would see a later call's traceback appear on it). An error ``copy`` cannot
    rebuild (an ``__init__`` the args do not fit) is raised as itself, its traceback cleared."""
    try:
        copied = copy.copy(error)
    except Exception:  # any failure to rebuild: fall back to the object itself
        copied = error
    copied.__cause__ = error.__cause__
    return mark(copied.with_traceback(None))
