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
    return copied.with_traceback(None)
