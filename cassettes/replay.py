"""Replay one recorded interaction through the adapter its URL names, collecting its chunks.

This is what ``loopkit cassette show`` prints and what the tests check on every cassette. Each
result also says what the replay may have lost (``report()``): the visible characters recorded
(read from the payloads directly, ``cassettes.visible``) against those in the chunk stream, the
events and fields the adapter skipped, whether usage came through and the finish kind.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeGuard

from reference_loop.protocols import ModelRequest
from reference_loop.vocabulary import Chunk

from .errors import CassetteError, ProviderError
from .llm_cassette import Cassette, ReplayTransport
from .providers import FINISH_VOCABULARY, adapter_for_url, replay_settings
from .visible import recorded_chars, stream_chars

# Adapter failures that, on replay, mean the cassette itself is broken.
CASSETTE_DEFECTS = {"STREAM_TRUNCATED": "truncated stream", "BAD_EVENT": "unreadable event", "BAD_RESPONSE": "unreadable response"}


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
    recorded_chars: int | None = None
    skipped: list[str] = field(default_factory=list)

    @property
    def stream_chars(self) -> int:
        return stream_chars(self.chunks)

    def warnings(self) -> list[str]:
        """What a user must know about this replay: anything lost, skipped or off-vocabulary."""
        found: list[str] = []
        if self.recorded_chars is not None and self.recorded_chars != self.stream_chars:
            found.append(f"{self.recorded_chars - self.stream_chars} of {self.recorded_chars} recorded visible characters are not in the chunk stream")
        found += [f"skipped {name}" for name in self.skipped]
        finish = self._last("finish", "reason")
        if finish is not None and finish.get("kind") not in FINISH_VOCABULARY:
            found.append(f"finish kind {finish.get('kind')!r} is not in the kit's vocabulary")
        return found

    def _last(self, kind: str, key: str) -> Any:
        found = [dict(c)[key] for c in self.chunks if c.get("type") == kind]
        return found[-1] if found else None

    def report(self) -> dict[str, Any]:
        return {
            "recorded_chars": self.recorded_chars,
            "stream_chars": self.stream_chars,
            "usage": self._last("usage", "usage"),
            "finish": self._last("finish", "reason"),
            "warnings": self.warnings(),
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "url": self.url,
            "status": self.status,
            "adapter": self.adapter,
            "streaming": self.streaming,
            "chunks": self.chunks,
            "error": self.error,
            "report": self.report(),
        }


async def replay_interaction(cassette: Cassette, position: int, *, pace: bool = False) -> ReplayResult:
    """Replay interaction ``position`` (0-based) alone. A truncated stream raises ``CassetteError``."""
    interaction = cassette.interactions[position]
    cls = adapter_for_url(interaction.uri, interaction.request_json)
    result = ReplayResult(interaction.method, interaction.uri, interaction.status, cls.name if cls else "", interaction.streaming)
    if cls is None:
        result.error = f"no adapter speaks {interaction.uri}"
        return result
    single = Cassette(cassette.path, [interaction], cassette.meta)
    settings = replay_settings(interaction.uri, cls, interaction.request_json, interaction.is_stream)
    adapter = cls(**settings, transport=ReplayTransport(single, pace=pace))
    data = interaction.request_json or {}
    request: ModelRequest = {"model": str(data.get("model") or "recorded"), "messages": []}
    try:
        async for chunk in adapter.stream(request):
            result.chunks.append(chunk)
    except CassetteError:
        raise
    except Exception as exc:
        if not is_recorded_answer(exc):
            raise cassette_defect(cassette.path, exc, f"interaction {position + 1}: ") from exc
        result.error, result.error_status, result.error_code = str(exc), exc.status, exc.code
    # Counted after the replay: a payload the adapter cannot read is reported by the adapter, naming the event.
    result.recorded_chars = recorded_chars(cls.name, interaction)
    result.skipped = adapter.skipped.report()
    return result


def is_recorded_answer(exc: Exception) -> TypeGuard[ProviderError]:
    """Whether a replay's failure is the provider's recorded answer (an error status, an error
    event), which the loop sees as it would live; anything else means the cassette is broken."""
    return isinstance(exc, ProviderError) and exc.code not in CASSETTE_DEFECTS


def cassette_defect(path: Path, exc: Exception, where: str = "") -> CassetteError:
    """The one-line ``CassetteError`` for a replay failure that is no recorded answer (``where``
    prefixes the problem: the interaction). Every replay path uses it: none lets a traceback out."""
    if isinstance(exc, ProviderError) and exc.code in CASSETTE_DEFECTS:
        return CassetteError(path, f"{where}{CASSETTE_DEFECTS[exc.code]}: {exc.message}")
    # recorded bytes the adapter or httpx cannot take (a header it cannot encode, a wrong type...)
    return CassetteError(path, f"{where}cannot replay: {type(exc).__name__}: {exc}")


def replay_file(path: str) -> tuple[Cassette, list[ReplayResult]]:
    """Load a cassette and replay each interaction (no pacing); raises ``CassetteError``."""
    cassette = Cassette.load(path)

    async def run() -> list[ReplayResult]:
        return [await replay_interaction(cassette, n) for n in range(len(cassette.interactions))]

    return cassette, asyncio.run(run())
