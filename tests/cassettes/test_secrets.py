"""No key reaches a written byte or a replayed stream, whatever its placement (issue 13).

Each test records against the local test server with a fake key placed where a real one has been
seen to leak: the base URL's query and userinfo, the request body only, a response that echoes it
a few characters per event, URL-encoded and base64-encoded, a body that is not UTF-8 (stored as
``!!binary``), Bedrock's binary frames. Then the file's bytes, decoded and raw, and the replayed
chunks must not hold it in any of those forms.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest
import yaml
from typer.testing import CliRunner

from cassettes.llm_cassette import Cassette
from cassettes.loopkit_vcr import make_vcr
from cassettes.model import CassetteModel
from cassettes.providers import ADAPTERS
from cassettes.record import record_cassette
from cassettes.scrub import Secrets, mask_sse
from cassettes.testserver import serve
from cli import app
from reference_loop.protocols import ModelRequest

KEY = "sk-loopkit-FAKE/plus+slash=0123456789abcdef"  # '/', '+' and '=' make its encoded forms differ
REQUEST: ModelRequest = {"model": "echo-key", "messages": [{"role": "user", "content": [{"type": "text", "text": "echo my key"}]}]}


def leaks(data: bytes | str) -> list[str]:
    """Every form of KEY found in ``data`` (the file's text, its !!binary bodies decoded, chunks)."""
    text = data.decode("latin-1") if isinstance(data, bytes) else data
    found = [form for form in Secrets([KEY]).forms() if form in text]
    return found


def file_leaks(path: Path) -> list[str]:
    raw = path.read_bytes()
    found = leaks(raw)
    for interaction in yaml.safe_load(raw)["interactions"]:  # !!binary bodies and frames, decoded
        response = interaction["response"]
        for value in [response["body"].get("string"), *[e["data"] for e in response.get("events") or []]]:
            if isinstance(value, bytes):
                found += leaks(value)
    return found


def replayed(path: Path) -> str:
    async def run() -> list[dict[str, object]]:
        model = CassetteModel(path, pace=False)
        return [dict(c) async for c in model.stream(REQUEST)]

    return json.dumps(asyncio.run(run()))


@pytest.mark.parametrize("adapter", sorted(ADAPTERS))
@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
def test_an_echoed_key_is_in_no_written_byte_and_no_replayed_chunk(adapter: str, stream: bool, tmp_path: Path) -> None:
    out = tmp_path / "echo.yaml"
    with serve(delay=0.0) as server:
        _, chunks, error = asyncio.run(record_cassette(out, adapter=adapter, request=REQUEST, base_url=server.base_url, api_key=KEY, stream=stream))
    assert error is None
    live = "".join(str(dict(c).get("text", "")) for c in chunks)
    assert KEY in live and quote(KEY, safe="") in live, "the server really echoed it, split and encoded"
    assert file_leaks(out) == []
    assert leaks(replayed(out)) == []
    if not stream:
        assert Cassette.load(out).interactions[0].raw is not None, "the ISO-8859-1 body was kept as bytes"


def test_a_key_in_the_base_urls_userinfo_and_query_is_scrubbed_header_included(tmp_path: Path) -> None:
    out = tmp_path / "url.yaml"
    with serve(delay=0.0) as server:
        base = server.base_url.replace("http://", f"http://user:{quote(KEY, safe='')}@") + f"?key={quote(KEY, safe='')}"
        result = CliRunner().invoke(app, ["cassette", "record", str(out), "--adapter", "gemini", "--model", "text", "--base-url", base])
    assert result.exit_code == 0, result.output
    text = out.read_text()
    assert file_leaks(out) == [] and "user:<filtered>@127.0.0.1" in text
    assert text.splitlines()[0].endswith("/v1?key=%3Cfiltered%3E.")  # the header names the URL, without its key


def test_a_key_only_in_the_request_body_is_scrubbed(tmp_path: Path) -> None:
    out = tmp_path / "body.yaml"
    with serve(delay=0.0) as server:
        with make_vcr(record_mode="once").use_cassette(out):
            reply = httpx.post(f"{server.base_url}/chat/completions", json={"model": "echo-key", "api_key": KEY, "messages": []})
    assert KEY in reply.text  # echoed back in the answer too
    assert file_leaks(out) == []


def test_explicit_secrets_and_environment_keys_are_scrubbed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    other = "env-only-FAKE-secret-value-0987654321"
    monkeypatch.setenv("MISTRAL_API_KEY", other)
    out = tmp_path / "env.yaml"
    with serve(delay=0.0) as server:
        with make_vcr(record_mode="once").use_cassette(out, secrets=["explicit-FAKE-secret-123456"]):
            httpx.post(f"{server.base_url}/chat/completions", json={"model": "text", "messages": [
                {"role": "user", "content": f"{other} explicit-FAKE-secret-123456"}]})
    text = out.read_text()
    assert other not in text and "explicit-FAKE-secret-123456" not in text


def test_a_split_key_is_masked_in_place_and_the_pieces_keep_their_lengths() -> None:
    pieces = ["data: " + json.dumps({"choices": [{"index": 0, "delta": {"content": part}}]}) + "\n\n" for part in ["Key: sk-", "abc", "def12", "3456 ok"]]
    masked = mask_sse(pieces, Secrets(["sk-abcdef123456"]))
    contents = [json.loads(p[6:])["choices"][0]["delta"]["content"] for p in masked]
    assert "".join(contents) == "Key: <filtered>***** ok"  # the same length as "Key: sk-abcdef123456 ok"
    assert [len(c) for c in contents] == [8, 3, 5, 7]  # each piece keeps its length
    assert all(p.startswith("data: ") and p.endswith("\n\n") for p in masked)
