"""Whether a URL is one an HTTP request can go to: one rule for a recorded request's ``uri`` and
for an adapter's endpoint (a ``--base-url``)."""

from __future__ import annotations

from urllib.parse import urlsplit


def http_url_problem(url: str) -> str | None:
    """Why ``url`` is no http(s) URL a request can be sent to (``None``: it is one).

    The port is checked here because httpx is not the one to: it takes ``:99999`` and fails deep
    in the socket layer, as an ``ExceptionGroup`` out of anyio rather than a transport error."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018  (read for its check: a port that is no number, or past 65535)
    except ValueError as exc:
        return str(exc)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "not an http(s) URL with a host"
    return None


__all__ = ["http_url_problem"]
