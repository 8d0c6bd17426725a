"""Errors raised by the provider adapters and the cassette machinery.

Two families: ``ProviderError`` (the model endpoint said no: HTTP status, provider error code, or a
broken stream) which the loop sees as a failed step, and ``CassetteError`` (the cassette file itself
is unusable: bad YAML, no matching interaction, truncated stream), whose message is one line that
names the file, so the CLI can print it and exit 2 without a traceback.
"""

from __future__ import annotations


class ProviderError(Exception):
    """A failure reported by (or while talking to) a model provider.

    ``status`` is the HTTP status (``None`` for in-stream errors), ``code`` the provider's error
    code or type (``model_not_found``, ``authentication_error``...) or a kit code such as
    ``HTTP_503`` when the body carries none. The loop carries ``code`` into the turn's error.
    """

    def __init__(self, message: str, *, status: int | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.code = code or (f"HTTP_{status}" if status is not None else "PROVIDER_ERROR")

    def __str__(self) -> str:
        prefix = f"HTTP {self.status} " if self.status is not None else ""
        return f"{prefix}{self.code}: {self.message}"


class RateLimitError(ProviderError):
    """HTTP 429 (or a provider's rate-limit/overloaded error): retrying later may succeed."""


class StreamTruncatedError(ProviderError):
    """The event stream ended before the provider's terminal event."""

    def __init__(self, message: str) -> None:
        super().__init__(message, code="STREAM_TRUNCATED")


class CassetteError(Exception):
    """A cassette that cannot be used; the message is one line naming the file and the problem."""

    def __init__(self, path: object, problem: str) -> None:
        self.path = str(path)
        self.problem = " ".join(problem.split())  # one line, whatever the cause's formatting
        super().__init__(f"{self.path}: {self.problem}")


class UnmatchedRequestError(CassetteError):
    """Replay met a request that no (unused) recorded interaction matches."""
