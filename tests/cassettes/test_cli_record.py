"""``loopkit cassette record``: the key from the environment, the test-server header, failures."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

from typer.testing import CliRunner

from cassettes.llm_cassette import Cassette
from cassettes.model import CassetteModel
from cli import app

KEY = "sk-ant-FAKE-cli-0123456789abcdef"


def test_record_against_the_test_server_with_a_key_from_the_environment(tmp_path: Path) -> None:
    out = tmp_path / "anthropic" / "hello.yaml"
    result = CliRunner().invoke(
        app,
        ["cassette", "record", str(out), "--adapter", "anthropic", "--model", "max-tokens", "--test-server"],
        env={"ANTHROPIC_API_KEY": KEY},
    )
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith(f"wrote {out}: ")
    text = out.read_text()
    assert KEY not in text and "x-api-key:\n      - <filtered>" in text
    assert "against the local test server" in text.splitlines()[0] + text.splitlines()[1]
    cassette = Cassette.load(out)
    assert cassette.meta == {"adapter": "anthropic", "recorded_against": "loopkit local test server"}
    model = CassetteModel(out, pace=False)

    async def run() -> list[dict[str, object]]:
        return [dict(c) async for c in model.stream({"model": "max-tokens", "messages": []})]

    assert asyncio.run(run())[-1] == {"type": "finish", "reason": {"kind": "max-tokens"}}


def test_record_with_nothing_listening_exits_2_and_writes_nothing(tmp_path: Path) -> None:
    with socket.socket() as sock:  # a port that was free a moment ago: nothing listens there
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    out = tmp_path / "c.yaml"
    result = CliRunner().invoke(app, ["cassette", "record", str(out), "--model", "m", "--base-url", f"http://127.0.0.1:{port}/v1"])
    assert result.exit_code == 2
    assert result.stderr.startswith("error: NETWORK_ERROR") and len(result.stderr.strip().splitlines()) == 1
    assert not out.exists()


def test_unknown_adapter_exits_2(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["cassette", "record", str(tmp_path / "c.yaml"), "--adapter", "nope", "--model", "m"])
    assert result.exit_code == 2 and "unknown adapter 'nope'" in result.stderr


def test_problems_report_like_the_fake_llm(tmp_path: Path) -> None:
    shipped = Path(__file__).resolve().parents[2] / "cassettes" / "llm" / "openai-chat" / "text.yaml"
    strict = CassetteModel(shipped, strict=True, pace=False)
    assert strict.name == "text"
    (problem,) = strict.problems()
    assert "never played" in problem
    lenient = CassetteModel(shipped, pace=False)
    assert lenient.problems() == []


def test_record_anthropic_through_bedrock_invoke_model(tmp_path: Path) -> None:
    out = tmp_path / "bedrock.yaml"
    result = CliRunner().invoke(
        app, ["cassette", "record", str(out), "--adapter", "anthropic", "--platform", "bedrock", "--model", "text", "--test-server"],
        env={"AWS_BEARER_TOKEN_BEDROCK": KEY})
    assert result.exit_code == 0, result.output
    text = out.read_text()
    assert "/model/anthropic.text/invoke-with-response-stream" in text and KEY not in text
    assert "--model text --test-server --platform bedrock" in text  # the regenerate line gives the scenario, not the id
    model = CassetteModel(out, pace=False)

    async def run() -> list[dict[str, object]]:
        return [dict(c) async for c in model.stream({"model": "text", "messages": []})]

    assert asyncio.run(run())[-1] == {"type": "finish", "reason": {"kind": "stop"}}
    wrong = CliRunner().invoke(app, ["cassette", "record", str(tmp_path / "w.yaml"), "--adapter", "gemini", "--platform", "bedrock",
                                     "--model", "text", "--test-server"])
    assert wrong.exit_code == 2 and "--platform 'bedrock': only 'bedrock' (or 'anthropic'), with --adapter anthropic" in wrong.stderr


def test_record_from_a_stream_without_end_is_cut_at_the_timeout(tmp_path: Path) -> None:
    # httpx bounds each read, not the answer: a server streaming one event every 10 ms for ever
    # kept the command running (session 54's hostile probe)
    import threading
    import time

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port = server.getsockname()[1]
    stop = threading.Event()

    def endless() -> None:
        conn, _ = server.accept()
        conn.recv(65536)
        conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n")
        event = (b'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":'
                 b'[{"index":0,"delta":{"content":"x"},"finish_reason":null}]}\n\n')
        while not stop.is_set():
            try:
                conn.sendall(event)
            except OSError:
                break
            time.sleep(0.01)
        conn.close()

    thread = threading.Thread(target=endless, daemon=True)
    thread.start()
    out = tmp_path / "c.yaml"
    try:
        result = CliRunner().invoke(app, ["cassette", "record", str(out), "--model", "m", "--base-url",
                                          f"http://127.0.0.1:{port}/v1", "--timeout", "0.5"], env={"OPENAI_API_KEY": "x"})
    finally:
        stop.set()
        server.close()
    assert result.exit_code == 2, result.output
    assert result.stderr.strip() == (f"error: http://127.0.0.1:{port}/v1: no complete answer within 0.5s of wall time "
                                     "(--timeout); nothing recorded")
    assert not out.exists()
