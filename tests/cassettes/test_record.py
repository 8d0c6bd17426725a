"""Recording through an adapter and vcrpy against the local test server: secrets scrubbed, events timed."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import yaml

from cassettes.errors import ProviderError
from cassettes.eventstream import split_frames
from cassettes.loopkit_vcr import LoopkitVCR, Scrubber
from cassettes.model import CassetteModel
from cassettes.providers import ADAPTERS
from cassettes.record import record_cassette
from cassettes.testserver import WEATHER_TOOL, serve
from reference_loop.protocols import ModelRequest
from reference_loop.vocabulary import Chunk

KEY = "sk-loopkit-FAKE-7f3a9c1e5b2d4680"
SENSITIVE = ["authorization", "x-api-key", "api-key", "x-goog-api-key", "cookie", "openai-organization", "openai-project", "x-my-secret"]


def _request(model: str, prompt: str = "weather?") -> ModelRequest:
    return {"model": model, "messages": [{"role": "user", "content": [{"type": "text", "text": prompt}]}], "tools": [WEATHER_TOOL]}


@pytest.mark.parametrize("adapter", sorted(ADAPTERS))
def test_fake_key_in_every_sensitive_header_never_reaches_disk(adapter: str, tmp_path: Path) -> None:
    out = tmp_path / "rec.yaml"
    headers = {name: f"{KEY}" for name in SENSITIVE}
    headers["authorization"] = f"Bearer {KEY}"
    recorder = LoopkitVCR(record_mode="all", filter_headers=["X-My-Secret"])

    async def run() -> None:
        model = ADAPTERS[adapter](base_url=server.base_url, api_key=KEY, headers=headers)
        with recorder.use_cassette(out, comment="test recording"):
            # The prompt echoes the key: it is erased from the request body as well.
            async for _ in model.stream(_request("tools", prompt=f"my key is {KEY}")):
                pass
            # An error answer (with the server's set-cookie) is recorded and scrubbed as well.
            with pytest.raises(ProviderError):
                async for _ in model.stream(_request("error-401")):
                    pass

    with serve(delay=0.0) as server:
        asyncio.run(run())
    # The key really went over the wire, in every header and in the body...
    sent = server.requests[0].headers
    lowered = {k.lower(): v for k, v in sent.items()}
    assert all(KEY in lowered[name] for name in SENSITIVE)
    assert KEY in server.requests[0].body
    # ...and appears nowhere in the cassette.
    text = out.read_text()
    assert KEY not in text
    assert "server-cookie-value" not in text
    assert text.startswith("# test recording\n")
    recorded = yaml.safe_load(text)["interactions"]
    assert len(recorded) == 2
    for interaction in recorded:
        for name in SENSITIVE:
            assert interaction["request"]["headers"][name] == ["<filtered>"]
    assert "my key is <filtered>" in recorded[0]["request"]["body"]
    assert recorded[1]["response"]["headers"]["set-cookie"] == ["<filtered>"]


def test_a_sigv4_signed_bedrock_recording_keeps_no_credential(tmp_path: Path) -> None:
    """Bedrock signed with AWS credentials (botocore's SigV4): the signature header, the session
    token and the signing date are scrubbed, and the access key id appears nowhere."""
    from botocore.credentials import Credentials

    out = tmp_path / "sigv4.yaml"
    access, secret, token = "AKIAFAKELOOPKIT12345", "fake/secret/key/0123456789abcdefghij", "FwoGZXIvYXdzEFAKE-session-token-0123456789"

    async def run() -> None:
        model = ADAPTERS["bedrock"](base_url=server.base_url, credentials=Credentials(access, secret, token))
        with LoopkitVCR(record_mode="all").use_cassette(out):
            async for _ in model.stream(_request("tools")):
                pass

    with serve(delay=0.0) as server:
        asyncio.run(run())
    sent = {k.lower(): v for k, v in server.requests[0].headers.items()}
    assert sent["authorization"].startswith(f"AWS4-HMAC-SHA256 Credential={access}/") and sent["x-amz-security-token"] == token
    text = out.read_text()
    assert access not in text and secret not in text and token not in text and sent["x-amz-date"] not in text
    headers = {k.lower(): v for k, v in yaml.safe_load(text)["interactions"][0]["request"]["headers"].items()}
    names = ("authorization", "x-amz-date", "x-amz-security-token")
    assert {name: headers[name] for name in names} == {key: ["<filtered>"] for key in names}


def test_key_like_query_parameters_are_filtered(tmp_path: Path) -> None:
    out = tmp_path / "q.yaml"

    async def run() -> None:
        # A base URL's query goes on every endpoint URL (Gemini takes its key as ?key=).
        model = ADAPTERS["gemini"](base_url=f"{server.base_url}?key={KEY}")
        with LoopkitVCR(record_mode="all").use_cassette(out):
            async for _ in model.stream(_request("text")):
                pass

    with serve(delay=0.0) as server:
        asyncio.run(run())
    assert server.requests[0].path.endswith(f":streamGenerateContent?alt=sse&key={KEY}")
    text = out.read_text()
    assert KEY not in text and "key=%3Cfiltered%3E" in text


def test_a_secret_echoed_in_a_response_is_erased_too() -> None:
    scrubber = Scrubber(["authorization"])
    scrubber.replace("authorization", f"Bearer {KEY}", None)
    response = {"headers": {"x-echo": [KEY], "set-cookie": ["id=1"]}, "body": {"string": f"echo {KEY}"}}
    text = scrubber.erase(yaml.safe_dump(response))
    assert KEY not in text and "Bearer" not in scrubber.secrets  # a scheme word is not a secret
    assert "echo <filtered>" in text


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
    # One record per event: per server-sent event (its blank line included) or per binary frame.
    assert len(events) > 5
    if adapter == "bedrock":
        assert all(isinstance(e["data"], bytes) for e in events)
        assert [len(split_frames(e["data"])[0]) for e in events] == [1] * len(events)
        assert b"".join(e["data"] for e in events) == response["body"]["string"]
    else:
        assert all(e["data"].endswith("\n\n") for e in events)
        assert "".join(e["data"] for e in events) == response["body"]["string"]
    offsets = [e["offset"] for e in events]
    # Measured under vcrpy, at the network reads: they grow with the server's 3 ms gaps (on a
    # loaded machine several events may share a read, so only one gap is certain).
    assert offsets == sorted(offsets) and offsets[-1] - offsets[0] >= 0.003

    async def replay() -> list[Chunk]:
        return [c async for c in CassetteModel(path, pace=False).stream(_request("tools"))]

    assert asyncio.run(replay()) == live


def test_record_replaces_the_output_file(tmp_path: Path) -> None:
    out = tmp_path / "rec.yaml"
    out.write_text("not: [a cassette\n")  # even a broken one: `record` overwrites
    with serve(delay=0.0) as server:
        asyncio.run(record_cassette(out, adapter="anthropic", request=_request("text"), base_url=server.base_url, header="one"))
        asyncio.run(record_cassette(out, adapter="anthropic", request=_request("max-tokens"), base_url=server.base_url, header="two",
                                    meta={"recorded_against": "here"}))
    text = out.read_text()
    assert text.startswith("# two\n")
    data = yaml.safe_load(text)
    assert data["loopkit"] == {"adapter": "anthropic", "recorded_against": "here"}
    assert len(data["interactions"]) == 1 and '"max-tokens"' in data["interactions"][0]["request"]["body"]


@pytest.mark.parametrize("stream", [True, False], ids=["invoke-with-response-stream", "invoke"])
def test_anthropic_on_bedrock_invoke_model_records_and_replays_what_the_live_call_gave(stream: bool, tmp_path: Path) -> None:
    """Anthropic's API through Bedrock's InvokeModel (``platform="bedrock"``): its base64 events in
    event-stream frames, an exception frame mid-stream and AWS's error answers, recorded by vcrpy
    and replayed through the adapter ``adapter_for_url`` picks from the recorded URL alone."""
    from cassettes.providers import AnthropicMessagesAdapter

    out = tmp_path / "invoke.yaml"
    scenarios = ("tools", "stream-error", "rate-limit") if stream else ("tools", "rate-limit")

    async def live(model: str) -> tuple[list[Chunk], str | None]:
        adapter = AnthropicMessagesAdapter(platform="bedrock", base_url=server.base_url, stream=stream, api_key=KEY)
        chunks: list[Chunk] = []
        try:
            async for chunk in adapter.stream({**_request(model), "model": f"anthropic.{model}"}):
                chunks.append(chunk)
        except ProviderError as exc:
            return chunks, exc.code
        return chunks, None

    async def record() -> list[tuple[list[Chunk], str | None]]:
        with LoopkitVCR(record_mode="all").use_cassette(out):
            return [await live(model) for model in scenarios]

    with serve(delay=0.0) as server:
        recorded = asyncio.run(record())
    sent = server.requests[0]
    assert sent.path == f"/v1/model/anthropic.tools/{'invoke-with-response-stream' if stream else 'invoke'}"
    body = yaml.safe_load(sent.body)
    assert body["anthropic_version"] == "bedrock-2023-05-31" and "model" not in body and "stream" not in body
    chunks, error = recorded[0]
    assert error is None and [c for c in chunks if c["type"] == "finish"] == [{"type": "finish", "reason": {"kind": "tool-calls"}}]
    assert [c["block"]["name"] for c in chunks if c["type"] == "block-end" and c["block"]["type"] == "tool-call"] == ["get_weather", "get_weather"]
    assert recorded[-1][1] == "ThrottlingException"  # AWS's error type, from x-amzn-ErrorType
    if stream:
        assert recorded[1][0][-1]["reason"] == {"kind": "error", "message": "The model stream failed", "code": "modelStreamErrorException"}
    assert KEY not in out.read_text()

    # The model is in the URL: each interaction replays through the adapter its own URL names
    from cassettes.llm_cassette import Cassette
    from cassettes.replay import replay_interaction

    cassette = Cassette.load(out)
    replayed = [asyncio.run(replay_interaction(cassette, n)) for n in range(len(scenarios))]
    assert [(r.chunks, r.error_code) for r in replayed] == recorded
    assert all(r.adapter == "anthropic" and r.streaming is stream for r in replayed)

    async def through_the_model() -> list[Chunk]:
        model = CassetteModel(out, pace=False)
        assert model.adapter.bedrock  # type: ignore[attr-defined]
        return [c async for c in model.stream(_request("tools"))]

    assert asyncio.run(through_the_model()) == recorded[0][0]
