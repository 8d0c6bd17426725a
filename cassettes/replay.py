"""Replay one recorded interaction through the adapter its URL names, collecting its chunks.

This is what ``loopkit cassette show`` prints and what the tests check on every cassette.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from reference_loop.protocols import ModelRequest
from reference_loop.vocabulary import Chunk

from .errors import CassetteError, ProviderError
from .llm_cassette import Cassette, ReplayTransport
from .providers import adapter_for_url, base_url_of

# Adapter failures that, on replay, mean the cassette itself is broken.
CASSETTE_DEFECTS = {"STREAM_TRUNCATED": "truncated SSE", "BAD_EVENT": "unreadable event"}


@dataclass
class ReplayResult:
    """One interaction's replay: its identity, the chunks the adapter yielded and its error."""

    method: str
    url: str
    status: int
    adapter: str
    streaming: bool
    chunks: list[Chunk] = field(default_factory=list)
    error: str | None = None
    error_status: int | None = None
    error_code: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "url": self.url,
            "status": self.status,
            "adapter": self.adapter,
            "streaming": self.streaming,
            "chunks": self.chunks,
            "error": self.error,
        }


async def replay_interaction(cassette: Cassette, position: int, *, pace: bool = False) -> ReplayResult:
    """Replay interaction ``position`` (0-based) alone. A truncated stream raises ``CassetteError``."""
    interaction = cassette.interactions[position]
    cls = adapter_for_url(interaction.uri)
    result = ReplayResult(interaction.method, interaction.uri, interaction.status, cls.name if cls else "", interaction.streaming)
    if cls is None:
        result.error = f"no adapter speaks {interaction.uri}"
        return result
    single = Cassette(cassette.path, [interaction], cassette.meta)
    adapter = cls(base_url=base_url_of(interaction.uri, cls), stream=interaction.streaming, transport=ReplayTransport(single, pace=pace))
    data = interaction.request_json or {}
    request: ModelRequest = {"model": str(data.get("model") or "recorded"), "messages": []}
    try:
        async for chunk in adapter.stream(request):
            result.chunks.append(chunk)
    except ProviderError as exc:
        if exc.code in CASSETTE_DEFECTS:
            raise CassetteError(cassette.path, f"interaction {position + 1}: {CASSETTE_DEFECTS[exc.code]}: {exc.message}") from exc
        result.error, result.error_status, result.error_code = str(exc), exc.status, exc.code
    return result


def replay_file(path: str) -> tuple[Cassette, list[ReplayResult]]:
    """Load a cassette and replay each interaction (no pacing); raises ``CassetteError``."""
    cassette = Cassette.load(path)

    async def run() -> list[ReplayResult]:
        return [await replay_interaction(cassette, n) for n in range(len(cassette.interactions))]

    return cassette, asyncio.run(run())
