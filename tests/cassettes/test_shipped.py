"""The cassettes shipped in cassettes/llm/: labelled, well-formed, and still what the server says."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cassettes.llm_cassette import Cassette
from cassettes.providers import ADAPTERS
from cassettes.replay import replay_interaction
from cassettes.testserver import WEATHER_TOOL, serve
from cassettes.wellformed import stream_problems
from cli import app
from reference_loop.protocols import ModelRequest
from reference_loop.vocabulary import Chunk

from .conftest import shipped_files


def test_every_provider_ships_cassettes() -> None:
    dirs = {p.parent.name for p in shipped_files()}
    assert dirs == set(ADAPTERS)


@pytest.mark.parametrize("path", shipped_files(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_shipped_cassette_is_labelled_and_replays_well_formed(path: Path) -> None:
    text = path.read_text()
    assert text.startswith("# Recorded through loopkit's") and "against the local test server" in text
    cassette = Cassette.load(path)
    assert cassette.meta["adapter"] == path.parent.name
    result = asyncio.run(replay_interaction(cassette, 0))
    assert result.adapter == path.parent.name
    if cassette.interactions[0].status >= 400:
        assert result.chunks == [] and result.error_status == cassette.interactions[0].status and result.error_code
    else:
        assert result.error is None and stream_problems(result.chunks) == []


@pytest.mark.parametrize("adapter", sorted(ADAPTERS))
def test_shipped_tools_cassette_matches_a_fresh_call_to_the_server(adapter: str) -> None:
    """Guards against the adapters or the server drifting from what was shipped."""
    path = Path(__file__).resolve().parents[2] / "cassettes" / "llm" / adapter / "tools.yaml"
    request: ModelRequest = {"model": "tools", "messages": [{"role": "user", "content": [{"type": "text", "text": "?"}]}], "tools": [WEATHER_TOOL]}

    async def live(url: str) -> list[Chunk]:
        return [c async for c in ADAPTERS[adapter](base_url=url).stream(request)]

    with serve(delay=0.0) as server:
        fresh = asyncio.run(live(server.base_url))
    replayed = asyncio.run(replay_interaction(Cassette.load(path), 0)).chunks
    assert replayed == fresh
    calls = [c["block"] for c in replayed if c["type"] == "block-end" and c["block"]["type"] == "tool-call"]
    assert [json.loads(c["arguments"]) for c in calls] == [{"city": "Paris"}, {"city": "Tokyo", "unit": "c"}]
    assert replayed[-1] == {"type": "finish", "reason": {"kind": "tool-calls"}}


def test_show_json_has_the_documented_shape() -> None:
    path = Path(__file__).resolve().parents[2] / "cassettes" / "llm" / "openai-chat" / "tools.yaml"
    result = CliRunner().invoke(app, ["cassette", "show", str(path), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert set(data) == {"file", "interactions"} and data["file"] == str(path)
    (entry,) = data["interactions"]
    assert set(entry) == {"method", "url", "status", "adapter", "streaming", "chunks", "error", "report"}
    assert (entry["method"], entry["status"], entry["adapter"], entry["streaming"], entry["error"]) == ("POST", 200, "openai-chat", True, None)
    text = "Let me check both cities."
    assert entry["report"] == {"recorded_chars": len(text), "stream_chars": len(text), "warnings": [],
                               "usage": {"input_tokens": 40, "output_tokens": 31}, "finish": {"kind": "tool-calls"}}
    assert {"type": "tool-call-delta", "index": 1, "id": "call_lk_1", "name": "get_weather", "arguments_delta": ""} in entry["chunks"]
    assert entry["chunks"][-1] == {"type": "finish", "reason": {"kind": "tool-calls"}}


def test_show_json_reports_an_error_interaction() -> None:
    path = Path(__file__).resolve().parents[2] / "cassettes" / "llm" / "openai-chat" / "error_404.yaml"
    result = CliRunner().invoke(app, ["cassette", "show", str(path), "--json"])
    entry = json.loads(result.stdout)["interactions"][0]
    assert entry["status"] == 404 and entry["chunks"] == []
    assert entry["error"].startswith("HTTP 404 model_not_found")


def test_show_text_lists_each_chunk() -> None:
    path = Path(__file__).resolve().parents[2] / "cassettes" / "llm" / "anthropic" / "max_tokens.yaml"
    result = CliRunner().invoke(app, ["cassette", "show", str(path)])
    assert result.exit_code == 0
    assert result.stdout.splitlines()[0].endswith("-> 200 (anthropic, streaming)")
    assert '{"type": "finish", "reason": {"kind": "max-tokens"}}' in result.stdout
