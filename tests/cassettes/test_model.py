"""The cassette-backed model: order, strictness, repeats, pacing, abort, the pytest fixture."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from cassettes.errors import CassetteError, UnmatchedRequestError
from cassettes.model import CassetteModel
from reference_loop.abort import AbortController
from reference_loop.protocols import ModelRequest
from reference_loop.vocabulary import Chunk

from .conftest import SHIPPED

REQUEST: ModelRequest = {"model": "m", "messages": []}


def chat_chunk(delta: dict[str, Any], finish: str | None = None) -> str:
    return "data: " + json.dumps({"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}) + "\n\n"


def timed_cassette(path: Path, offsets: list[float], repeat: int = 1) -> Path:
    """Our format: one record per event, at the given offsets (text deltas, then stop + [DONE])."""
    texts = [chat_chunk({"content": f"w{n} "}) for n in range(len(offsets) - 2)]
    texts += [chat_chunk({}, "stop"), "data: [DONE]\n\n"]
    events = [{"offset": o, "data": t} for o, t in zip(offsets, texts, strict=True)]
    interaction = {
        "request": {"method": "POST", "uri": "https://api.openai.com/v1/chat/completions", "body": '{"stream": true}'},
        "response": {"status": {"code": 200, "message": "OK"}, "headers": {"content-type": ["text/event-stream"]},
                     "body": {"string": "".join(texts)}, "events": events},
    }
    path.write_text(json.dumps({"interactions": [interaction] * repeat, "version": 1}))  # JSON is YAML
    return path


async def collect(model: CassetteModel, request: ModelRequest = REQUEST) -> list[Chunk]:
    return [c async for c in model.stream(request)]


def test_interactions_answer_in_order_then_run_out(tmp_path: Path) -> None:
    model = CassetteModel(timed_cassette(tmp_path / "c.yaml", [0, 0, 0, 0], repeat=2), pace=False)

    async def run() -> None:
        first, second = await collect(model), await collect(model)
        assert first == second and first[-1]["type"] == "finish"
        assert model.transport.played == [0, 1]
        with pytest.raises(UnmatchedRequestError):
            await collect(model)

    asyncio.run(run())


def test_playback_repeats_when_allowed(tmp_path: Path) -> None:
    model = CassetteModel(timed_cassette(tmp_path / "c.yaml", [0, 0, 0]), pace=False, allow_playback_repeats=True)

    async def run() -> None:
        assert await collect(model) == await collect(model)

    asyncio.run(run())


def test_repeats_play_every_unused_interaction_first(tmp_path: Path) -> None:
    # vcrpy's own allow_playback_repeats would answer #1 every time (turn one of a conversation
    # forever); loopkit's replay plays #2 before repeating.
    model = CassetteModel(timed_cassette(tmp_path / "c.yaml", [0, 0, 0], repeat=2), pace=False, allow_playback_repeats=True)

    async def run() -> None:
        for _ in range(3):
            await collect(model)

    asyncio.run(run())
    assert model.transport.played == [0, 1, 0]
    model.assert_all_played()


def test_recorded_gaps_are_slept_between_events(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    slept: list[float] = []
    real_sleep = asyncio.sleep

    async def fake_sleep(delay: float) -> None:
        slept.append(round(delay, 6))
        await real_sleep(0)

    monkeypatch.setattr("cassettes.llm_cassette.asyncio.sleep", fake_sleep)
    model = CassetteModel(timed_cassette(tmp_path / "c.yaml", [0.5, 0.75, 2.0, 2.0]))
    asyncio.run(collect(model))
    assert slept == [0.5, 0.25, 1.25, 0.0]


def test_abort_stops_the_stream_at_once_with_nothing_more(tmp_path: Path) -> None:
    # A 30 s gap after the second event: the stream must not sit it out once aborted.
    model = CassetteModel(timed_cassette(tmp_path / "c.yaml", [0.0, 0.01, 30.0, 30.0, 30.0]))
    controller = AbortController()
    request: ModelRequest = {**REQUEST, "signal": controller.signal}

    async def run() -> list[Chunk]:
        asyncio.get_running_loop().call_later(0.05, controller.abort, "user cancelled")
        return await collect(model, request)

    started = time.monotonic()
    chunks = asyncio.run(run())
    assert time.monotonic() - started < 5
    assert [c["type"] for c in chunks] == ["block-start", "text-delta", "text-delta"]


def test_already_aborted_signal_sends_nothing(tmp_path: Path) -> None:
    model = CassetteModel(timed_cassette(tmp_path / "c.yaml", [0, 0, 0]), pace=False)
    controller = AbortController()
    controller.abort()
    assert asyncio.run(collect(model, {**REQUEST, "signal": controller.signal})) == []
    assert model.transport.played == []


def test_fixture_strict_mode_fails_on_unplayed_interactions(llm_cassette: Callable[..., CassetteModel]) -> None:
    model = llm_cassette(SHIPPED / "anthropic" / "text.yaml", strict=True, pace=False)
    chunks = asyncio.run(collect(model))
    assert chunks[-1] == {"type": "finish", "reason": {"kind": "stop"}}
    model.assert_all_played()  # played: no error
    unplayed = CassetteModel(SHIPPED / "anthropic" / "text.yaml")
    with pytest.raises(CassetteError, match=r"1 interaction\(s\) never played: #1 POST"):
        unplayed.assert_all_played()


def test_provider_errors_carry_status_and_code(llm_cassette: Callable[..., CassetteModel]) -> None:
    from cassettes.errors import ProviderError

    model = llm_cassette(SHIPPED / "anthropic" / "error_401.yaml", pace=False)
    with pytest.raises(ProviderError) as info:
        asyncio.run(collect(model))
    assert (info.value.status, info.value.code) == (401, "authentication_error")
