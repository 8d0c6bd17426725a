"""The errors of the fakes: one scripted failure class and the "script misuse" assertions."""

from __future__ import annotations


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
