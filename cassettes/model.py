"""A cassette-backed ``ModelAdapter``: replays recorded provider traffic through the real adapter.

Each ``stream()`` call sends the adapter's request to a ``ReplayTransport``: vcrpy (a
``vcr.cassette.Cassette`` in record mode ``none``) picks the recorded interaction that answers it,
and the transport plays that interaction's events one by one, sleeping the recorded gaps with
``asyncio.sleep`` (vcrpy itself would hand back the whole body at once): under the simulator those
gaps pass in virtual time, so a ``cancel()`` can land between two recorded chunks, reproducibly.
Any file ``cassettes.loopkit_vcr`` recorded (a user's own client included) replays here. Register it on a service like any adapter (the fake LLM
included); ``llm_cassette`` (in ``cassettes.pytest_plugin``) is the pytest fixture.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

from reference_loop.protocols import ModelRequest
from reference_loop.vocabulary import Chunk

from .errors import CassetteError
from .llm_cassette import Cassette, ReplayTransport
from .providers import ADAPTERS, adapter_for_url, replay_settings
from .replay import cassette_defect, is_recorded_answer


class CassetteModel:
    """Replays ``path`` through the adapter its first interaction's URL names (or ``adapter``).

    ``allow_playback_repeats`` lets interactions answer more than once; ``pace=False`` drops the
    recorded gaps; ``assert_all_played()`` is the strict check (the fixture calls it when strict).
    Provider failures surface as the adapter raises them (``ProviderError`` with status and code);
    a request the cassette cannot answer raises ``UnmatchedRequestError``.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        adapter: str | None = None,
        allow_playback_repeats: bool = False,
        pace: bool = True,
        strict: bool = False,
        name: str | None = None,
    ) -> None:
        self.cassette = Cassette.load(path)
        self.name = name or Path(path).stem
        self.strict = strict
        self._problems: list[str] = []
        # The first interaction an adapter speaks: a recording may open with calls that are no
        # model call (token counting, a tracing upload, a connection warm-up); they never match.
        interactions = self.cassette.interactions
        speakers = [adapter_for_url(i.uri, i.request_json) for i in interactions]
        spoken = [(n, found) for n, found in enumerate(speakers) if found is not None]
        first = interactions[spoken[0][0]] if spoken else interactions[0]
        if adapter is not None:
            if adapter not in ADAPTERS:
                raise CassetteError(path, f"unknown adapter {adapter!r} (known: {', '.join(ADAPTERS)})")
            cls = ADAPTERS[adapter]
        elif spoken:
            cls = spoken[0][1]
        else:
            raise CassetteError(path, f"no interaction is an API loopkit's adapters speak (interaction 1: {first.method} "
                                      f"{first.uri}); pass adapter=")
        self._unspoken = set() if adapter is not None else {n for n, found in enumerate(speakers) if found is None}
        self.transport = ReplayTransport(self.cassette, allow_playback_repeats=allow_playback_repeats, pace=pace)
        settings = replay_settings(first.uri, cls, first.request_json, first.is_stream)
        self.adapter = cls(**settings, transport=self.transport)

    async def stream(self, request: ModelRequest) -> AsyncIterator[Chunk]:
        """The ``ModelAdapter`` contract, answered from the cassette."""
        try:
            async for chunk in self.adapter.stream(request):
                yield chunk
        except CassetteError as exc:
            self._problems.append(str(exc))
            raise
        except Exception as exc:
            if is_recorded_answer(exc):
                raise
            defect = cassette_defect(self.cassette.path, exc)
            self._problems.append(str(defect))
            raise defect from exc

    def problems(self) -> list[str]:
        """What went wrong so far (unanswerable requests, truncations; unplayed ones when strict).

        The same duck type as the fake LLM's ``problems()``, so a scenario runner can report both.
        """
        found = list(self._problems)
        if self.strict:
            try:
                self.assert_all_played()
            except CassetteError as exc:
                found.append(str(exc))
        return found

    def assert_all_played(self) -> None:
        """Raise ``CassetteError`` if some recorded model call was never requested (the
        interactions no adapter speaks are no model call: a loop never makes them)."""
        self.transport.assert_all_played(ignore=self._unspoken)

    assert_all_used = assert_all_played  # the fake LLM's name for the same check
