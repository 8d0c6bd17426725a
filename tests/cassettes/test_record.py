"""Recording through an adapter against the local test server: secrets scrubbed, events timed."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import yaml

from cassettes.errors import ProviderError
from cassettes.model import CassetteModel
from cassettes.providers import ADAPTERS
from cassettes.record import CassetteRecorder, RecordingTransport, record_cassette
from cassettes.testserver import WEATHER_TOOL, serve
from reference_loop.protocols import ModelRequest
from reference_loop.vocabulary import Chunk

KEY = "sk-loopkit-FAKE-7f3a9c1e5b2d4680"
SENSITIVE = ["authorization", "x-api-key", "api-key", "cookie", "openai-organization", "openai-project", "x-my-secret"]


def _request(model: str) -> ModelRequest:
    return {"model": model, "messages": [{"role": "user", "content": [{"type": "text", "text": "weather?"}]}], "tools": [WEATHER_TOOL]}


@pytest.mark.parametrize("adapter", sorted(ADAPTERS))
def test_fake_key_in_every_sensitive_header_never_reaches_disk(adapter: str, tmp_path: Path) -> None:
    out = tmp_path / "rec.yaml"
    headers = {name: f"{KEY}" for name in SENSITIVE}
    headers["authorization"] = f"Bearer {KEY}"

    async def run() -> None:
        recorder = CassetteRecorder(filter_headers=["X-My-Secret"], header="test recording")
        transport = RecordingTransport(recorder)
        model = ADAPTERS[adapter](base_url=server.base_url, api_key=KEY, headers=headers, transport=transport)
        async for _ in model.stream(_request("tools")):
            pass
        # An error answer (with the server's set-cookie) is recorded and scrubbed as well.
        with pytest.raises(ProviderError):
            async for _ in model.stream(_request("error-401")):
                pass
        recorder.save(out)

    with serve(delay=0.0) as server:
        asyncio.run(run())
    # The key really went over the wire, in every header...
    sent = server.requests[0].headers
    lowered = {k.lower(): v for k, v in sent.items()}
    assert all(KEY in lowered[name] for name in SENSITIVE)
    # ...and appears nowhere in the cassette.
    text = out.read_text()
    assert KEY not in text
    assert "server-cookie-value" not in text
    recorded = yaml.safe_load(text)["interactions"]
    for interaction in recorded:
        for name in SENSITIVE:
            assert interaction["request"]["headers"][name] == ["<filtered>"]
    assert recorded[1]["response"]["headers"]["set-cookie"] == ["<filtered>"]


def test_a_secret_echoed_in_a_body_is_erased_too(tmp_path: Path) -> None:
    recorder = CassetteRecorder()
    recorder.scrub_headers([("authorization", f"Bearer {KEY}")])
    recorder.add({"request": {"method": "POST", "uri": "http://x/v1/messages", "body": f"echo {KEY}"}, "response": {}})
    assert KEY not in recorder.dumps()


def _live(adapter: str, url: str, model: str) -> list[Chunk]:
    async def run() -> list[Chunk]:
        return [c async for c in ADAPTERS[adapter](base_url=url).stream(_request(model))]

    return asyncio.run(run())


@pytest.mark.parametrize("adapter", sorted(ADAPTERS))
def test_replay_gives_what_the_live_call_gave_with_one_record_per_event(adapter: str, tmp_path: Path) -> None:
    out = tmp_path / "rec.yaml"
    with serve(delay=0.003) as server:
        live = _live(adapter, server.base_url, "tools")
        path, chunks, error = asyncio.run(
            record_cassette(out, adapter=adapter, request=_request("tools"), base_url=server.base_url, header="h")
        )
    assert error is None and chunks == live
    response = yaml.safe_load(path.read_text())["interactions"][0]["response"]
    events = response["events"]
    assert len(events) > 10 and all(e["data"].endswith("\n\n") for e in events)
    offsets = [e["offset"] for e in events]
    assert offsets == sorted(offsets) and offsets[-1] > offsets[0]
    assert "".join(e["data"] for e in events) == response["body"]["string"]

    async def replay() -> list[Chunk]:
        return [c async for c in CassetteModel(path, pace=False).stream(_request("tools"))]

    assert asyncio.run(replay()) == live
