"""vcrpy as the cassette engine: a user's own client recorded and replayed, strictness, formats."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import vcr
import yaml
from vcr.errors import CannotOverwriteExistingCassetteException

from cassettes.errors import CassetteError
from cassettes.llm_cassette import Cassette
from cassettes.loopkit_vcr import SERIALIZER, LoopkitVCR, make_vcr
from cassettes.model import CassetteModel
from cassettes.providers import ADAPTERS
from cassettes.testserver import serve
from reference_loop.protocols import ModelRequest
from reference_loop.vocabulary import Chunk

from .conftest import SHIPPED, external_files, shipped_files

KEY = "sk-user-FAKE-0a1b2c3d4e5f6789"
BODY = {"model": "tools", "stream": True, "messages": [{"role": "user", "content": "weather?"}]}
REQUEST: ModelRequest = {"model": "tools", "messages": []}


async def user_client_call(base_url: str) -> str:
    """What a user's own provider client does: POST a streaming chat completion, read the text."""
    async with httpx.AsyncClient() as client:
        headers = {"authorization": f"Bearer {KEY}", "openai-organization": "org-FAKE-123456789"}
        async with client.stream("POST", f"{base_url}/chat/completions", json=BODY, headers=headers) as response:
            return "".join([piece async for piece in response.aiter_text()])


def test_a_users_client_recorded_by_vcrpy_replays_with_and_without_loopkit(tmp_path: Path) -> None:
    path = tmp_path / "cassettes" / "llm" / "openai-chat" / "user.yaml"
    with serve(delay=0.004) as server:
        with make_vcr(record_mode="once").use_cassette(path, comment="recorded by a user's test"):
            live = asyncio.run(user_client_call(server.base_url))

        async def adapter_live() -> list[Chunk]:
            return [c async for c in ADAPTERS["openai-chat"](base_url=server.base_url).stream(REQUEST)]

        adapter_chunks = asyncio.run(adapter_live())
    # The server is gone: everything below is replay.
    text = path.read_text()
    assert KEY not in text and "org-FAKE-123456789" not in text
    response = yaml.safe_load(text)["interactions"][0]["response"]
    offsets = [e["offset"] for e in response["events"]]
    assert len(offsets) > 10 and offsets == sorted(offsets) and offsets[-1] > offsets[0] + 0.02
    # 1. Through loopkit's VCR (record mode none by default), strictly: the same bytes back.
    with make_vcr().use_cassette(path, strict=True) as cassette:
        assert asyncio.run(user_client_call(server.base_url)) == live
    assert cassette.all_played
    # 2. Through stock vcrpy and its own YAML serializer: the joined body is a plain vcrpy body.
    with vcr.VCR(record_mode="none").use_cassette(str(path)):
        assert asyncio.run(user_client_call(server.base_url)) == live
    # 3. Through loopkit's adapter, event by event, as the loop under test sees it.
    model = CassetteModel(path, pace=False)
    assert asyncio.run(_collect(model)) == adapter_chunks
    assert model.adapter.name == "openai-chat"


def test_a_sync_client_is_timed_too_and_per_cassette_headers_are_scrubbed(tmp_path: Path) -> None:
    path = tmp_path / "sync.yaml"
    token = "trace-SECRET-0123456789"
    headers = {"x-api-key": KEY, "x-trace-token": token}
    with serve(delay=0.004) as server, make_vcr(record_mode="once").use_cassette(path, filter_headers=["X-Trace-Token"]):
        with httpx.Client() as client:
            reply = client.post(f"{server.base_url}/messages", json={**BODY, "model": "text"}, headers=headers)
    assert reply.status_code == 200 and server.requests[0].headers["x-trace-token"] == token
    text = path.read_text()
    assert KEY not in text and token not in text
    interaction = yaml.safe_load(text)["interactions"][0]
    assert interaction["request"]["headers"]["x-trace-token"] == ["<filtered>"]
    events = interaction["response"]["events"]
    assert events[-1]["offset"] > events[0]["offset"]
    assert "".join(e["data"] for e in events) == reply.text


async def _collect(model: CassetteModel) -> list[Chunk]:
    return [c async for c in model.stream(REQUEST)]


def test_replay_never_reaches_the_network_and_names_the_unmatched_request() -> None:
    path = SHIPPED / "openai-chat" / "text.yaml"
    uri = Cassette.load(path).interactions[0].uri
    with make_vcr().use_cassette(path):
        with pytest.raises(CannotOverwriteExistingCassetteException) as info:
            httpx.post(uri.replace("/chat/completions", "/embeddings"), json={})
    assert f"POST {uri.replace('/chat/completions', '/embeddings')}" in str(info.value)
    assert "record_mode 'none'" in str(info.value)


def test_strict_use_fails_on_an_unplayed_interaction_in_one_line() -> None:
    path = SHIPPED / "anthropic" / "text.yaml"
    with make_vcr().use_cassette(path):
        pass  # not strict: nothing requested is fine
    with pytest.raises(CassetteError) as info:
        with make_vcr().use_cassette(path, strict=True):
            pass
    message = str(info.value)
    assert message.startswith(f"{path}: 1 interaction(s) never played: #1 POST http://127.0.0.1:")
    assert "\n" not in message


def test_strict_decorator_form_checks_too() -> None:
    calls: list[int] = []

    @make_vcr().use_cassette(SHIPPED / "anthropic" / "text.yaml", strict=True)
    def never_calls() -> None:
        calls.append(1)

    with pytest.raises(CassetteError, match="never played"):
        never_calls()
    with pytest.raises(CassetteError, match="never played"):
        never_calls()  # vcrpy re-enters a fresh cassette on every call
    assert calls == [1, 1]


def test_record_mode_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("LOOPKIT_RECORD_MODE", raising=False)
    with make_vcr().use_cassette(tmp_path / "a.yaml") as cassette:
        assert cassette.record_mode == "none"
    monkeypatch.setenv("LOOPKIT_RECORD_MODE", "new_episodes")
    with make_vcr().use_cassette(tmp_path / "a.yaml") as cassette:
        assert cassette.record_mode == "new_episodes"
    with make_vcr(record_mode="all").use_cassette(tmp_path / "a.yaml") as cassette:
        assert cassette.record_mode == "all"  # an explicit mode wins


def test_the_fixture_is_a_configured_vcr(loopkit_vcr: LoopkitVCR) -> None:
    assert isinstance(loopkit_vcr, vcr.VCR) and loopkit_vcr.serializer == "loopkit"
    with loopkit_vcr.use_cassette(SHIPPED / "anthropic" / "max_tokens.yaml") as cassette:
        assert len(cassette) == 1


@pytest.mark.parametrize("text, problem", [("interactions: [\n", "bad YAML at line"), ("version: 1\n", "not a vcrpy cassette")])
def test_a_malformed_cassette_is_a_one_line_error_not_an_empty_one(tmp_path: Path, text: str, problem: str) -> None:
    # vcrpy's own file persister would log a warning and treat it as empty (and `once` would
    # record over it); loopkit's persister refuses it.
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(CassetteError) as info:
        with make_vcr(record_mode="once").use_cassette(path):
            pass
    assert str(info.value).startswith(f"{path}: {problem}") and "\n" not in str(info.value)
    assert path.read_text() == text


def test_new_episodes_appends_and_keeps_the_header(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    with serve(delay=0.0) as server:
        recorder = make_vcr(record_mode="new_episodes")
        with recorder.use_cassette(path, comment="first line\nsecond line", meta={"adapter": "openai-chat"}):
            httpx.post(f"{server.base_url}/chat/completions", json={"model": "text"})
        with recorder.use_cassette(path):
            httpx.post(f"{server.base_url}/chat/completions", json={"model": "text"})  # replayed
            httpx.post(f"{server.base_url}/messages", json={"model": "text"})  # recorded
    text = path.read_text()
    assert text.startswith("# first line\n# second line\nloopkit:\n  adapter: openai-chat\n")
    assert [i.uri.rsplit("/", 1)[1] for i in Cassette.load(path).interactions] == ["completions", "messages"]


@pytest.fixture(scope="module")
def client() -> Iterator[httpx.Client]:
    """One client for the module (its SSL context costs more than a replay); vcrpy patches the
    transport class, so a client made before the cassette is intercepted all the same."""
    with httpx.Client() as shared:
        yield shared


def _replay_all_through_vcrpy(path: Path, client: httpx.Client) -> list[bytes]:
    """Every interaction of ``path`` requested in order through httpx, answered by vcrpy."""
    cassette = Cassette.load(path)
    bodies = []
    with make_vcr().use_cassette(path, strict=True, allow_playback_repeats=False):
        for interaction in cassette.interactions:
            content = (interaction.request_body or "").encode()
            reply = client.request(interaction.method, interaction.uri, content=content)
            assert reply.status_code == interaction.status
            bodies.append(reply.content)
    return bodies


@pytest.mark.parametrize("path", shipped_files() + external_files(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_vcrpy_plays_every_cassette_loopkit_reads(path: Path, client: httpx.Client) -> None:
    """Shipped and external files (parsed_body, gzip ``!!binary``...), through loopkit's serializer."""
    expected = [i.body_bytes for i in Cassette.load(path).interactions]
    assert _replay_all_through_vcrpy(path, client) == expected


@pytest.mark.parametrize("path", shipped_files() + external_files(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_the_serializer_round_trips(path: Path) -> None:
    before = Cassette.load(path)
    text = SERIALIZER.serialize({"version": 1, "interactions": [i.to_vcr() for i in before.interactions]})
    after = Cassette.parse(text, path)
    assert _comparable(after) == _comparable(before)


def _comparable(cassette: Cassette) -> list[dict[str, Any]]:
    def plain(value: object) -> str:  # binary bodies (event-stream frames) compared as hex
        return value.hex() if isinstance(value, bytes) else str(value)

    return [json.loads(json.dumps(i.to_vcr(), default=plain)) | {"events": [(e.offset, e.data) for e in i.events or []]} for i in cassette.interactions]


def test_arrival_offsets_survive_a_gzip_encoded_stream() -> None:
    """vcrpy decodes the body before ``before_record_response``; the read log is decoded to match."""
    import gzip

    from cassettes.loopkit_vcr import ArrivalLog

    events = [f"data: {{\"n\": {n}}}\n\n" for n in range(4)]
    packed = gzip.compress("".join(events).encode())
    log = ArrivalLog()
    arrival = log.open([(b"Content-Type", b"text/event-stream"), (b"Content-Encoding", b"gzip")])
    assert arrival is not None and log.open([(b"content-type", b"application/json")]) is None
    third = len(packed) // 3
    for n, piece in enumerate([packed[:third], packed[third : 2 * third], packed[2 * third :]]):
        arrival.reads.append((0.5 * n, piece))  # as the timed stream records them
    # What vcrpy hands the hook: decoded body, content-encoding gone (decode_compressed_response).
    response = {"status": {"code": 200}, "headers": {"Content-Type": ["text/event-stream"], "Content-Length": ["99"]},
                "body": {"string": "".join(events).encode()}}
    out = log.attach_events(response)
    assert [e["data"] for e in out["events"]] == events
    assert out["events"][-1]["offset"] == 1.0 and out["events"][0]["offset"] in (0.0, 0.5, 1.0)
    assert "Content-Length" not in out["headers"]
    # Consumed: a second identical body finds no timing and stays in the plain format.
    again = {"status": {"code": 200}, "headers": {"content-type": ["text/event-stream"]}, "body": {"string": "".join(events)}}
    assert "events" not in log.attach_events(again)
