"""Hostile input to the cassettes layer: one line on stderr naming the file, exit 2, never a traceback.

Corrupt cassettes are the repo's own (``cassettes/llm``) with their answer swapped for payloads
whose fields have the wrong JSON type; each must fail the same way through every reader
(``cassette show``, ``--json``, the replay model the ``llm_cassette`` fixture builds). Then the
options of ``cassette record`` (``--tools``, the output path, ``--base-url``, ``--max-tokens``)
and files that are not regular files (a FIFO would block for ever, a device never ends).
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from cassettes.errors import CassetteError, ProviderError
from cassettes.eventstream import encode_frame
from cassettes.llm_cassette import Cassette
from cassettes.loopkit_vcr import make_vcr
from cassettes.model import CassetteModel
from cassettes.record import record_cassette
from cassettes.toolspecs import load_tools
from cassettes.visible import recorded_chars
from cli import app

from .conftest import SHIPPED

# --------------------------------------------------------------------------- building corrupt cassettes

Payloads = list[Any] | dict[str, Any]


def _body(content_type: str, payloads: Payloads) -> str | bytes:
    """The response body that carries ``payloads`` in the wire format ``content_type`` names."""
    if "eventstream" in content_type:  # Bedrock: (event type, payload) pairs as binary frames
        return b"".join(encode_frame({":event-type": kind, ":content-type": "application/json", ":message-type": "event"},
                                     json.dumps(payload).encode()) for kind, payload in payloads)
    if "event-stream" in content_type:
        return "".join(f"data: {json.dumps(p)}\n\n" for p in payloads)
    return json.dumps(payloads)


def corrupt(tmp_path: Path, source: str, payloads: Payloads, *, whole: bool = False) -> Path:
    """The shipped cassette ``source``, its first interaction only, answering ``payloads`` instead.

    ``whole``: the answer becomes a whole JSON response (``application/json``)."""
    data = yaml.safe_load((SHIPPED / source).read_text(encoding="utf-8"))
    interaction = data["interactions"][0]
    response = interaction["response"]
    response.pop("events", None)  # the recorded arrivals would replay the original answer
    headers = {k: v for k, v in response["headers"].items() if k.lower() not in ("content-length", "content-type")}
    content_type = "application/json" if whole else response["headers"]["content-type"][0]
    response["headers"] = {**headers, "content-type": [content_type]}
    response["body"] = {"string": _body(content_type, payloads)}
    path = tmp_path / f"corrupt-{source.replace('/', '-')}"
    path.write_text(yaml.safe_dump({"interactions": [interaction], "version": 1}), encoding="utf-8")
    return path


MESSAGE_START = {"type": "message_start", "message": {"id": "m", "content": [], "usage": {}}}
TEXT_START = {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}

# name: (shipped cassette, payloads, whole response?, what the error line says)
WRONG_TYPES: dict[str, tuple[str, Payloads, bool, str]] = {
    "chat delta a string": ("openai-chat/text.yaml", [{"choices": [{"index": 0, "delta": "hello"}]}], False, '"delta": "hello"'),
    "chat choices a number": ("openai-chat/text.yaml", [{"choices": 5}], False, '"choices": 5'),
    "chat message a string": ("openai-chat/text_whole_response.yaml",
                              {"choices": [{"index": 0, "message": "hello", "finish_reason": "stop"}]}, True, "malformed response"),
    "anthropic block a string": ("anthropic/text.yaml", [MESSAGE_START, {**TEXT_START, "content_block": "text"}], False,
                                 '"content_block": "text"'),
    "anthropic delta a list": ("anthropic/text.yaml", [MESSAGE_START, TEXT_START, {"type": "content_block_delta", "index": 0, "delta": ["a"]}],
                               False, '"delta": ["a"]'),
    "responses output item a string": ("openai-responses/text.yaml",
                                       {"object": "response", "id": "r", "status": "completed", "output": ["hello"]}, True, "malformed response"),
    "responses content a string": ("openai-responses/text.yaml", {"object": "response", "id": "r", "status": "completed",
                                                                  "output": [{"type": "message", "content": "hello"}]}, True, "malformed response"),
    "responses summary item a string": ("openai-responses/text.yaml", {"object": "response", "id": "r", "status": "completed",
                                                                       "output": [{"type": "reasoning", "summary": ["a"]}]}, True, "malformed response"),
    "gemini candidates a number": ("gemini/text.yaml", [{"candidates": 5}], False, '"candidates": 5'),
    "gemini candidate a string": ("gemini/text.yaml", [{"candidates": ["x"]}], False, '"candidates": ["x"]'),
    "gemini content a string": ("gemini/text.yaml", [{"candidates": [{"content": "x"}]}], False, '"content": "x"'),
    "interactions delta a string": ("gemini-interactions/text.yaml", [{"event_type": "content.delta", "delta": "x"}], False, "interaction 1"),
    "interactions summary a number": ("gemini-interactions/text.yaml",
                                      [{"event_type": "content.start", "content": {"type": "thought", "summary": 5}}], False, '"summary": 5'),
    "interactions steps a number": ("gemini-interactions/tools_whole_response.yaml", {"status": "completed", "steps": 5}, True,
                                    "'steps' is a JSON int, expected a list"),
    "bedrock output a string": ("bedrock/tools_whole_response.yaml", {"output": "x", "stopReason": "end_turn"}, True,
                                "'output' is a JSON str, expected an object"),
    "bedrock message a string": ("bedrock/tools_whole_response.yaml", {"output": {"message": "x"}, "stopReason": "end_turn"}, True,
                                 "'output.message' is a JSON str"),
    "bedrock content item a string": ("bedrock/tools_whole_response.yaml", {"output": {"message": {"content": ["x"]}}, "stopReason": "end_turn"},
                                      True, "'output.message.content' item 1 is a JSON str, expected an object"),
    "bedrock reasoning a string": ("bedrock/tools_whole_response.yaml",
                                   {"output": {"message": {"content": [{"reasoningContent": "x"}]}}, "stopReason": "end_turn"}, True,
                                   "'content item 1 reasoningContent' is a JSON str"),
    "bedrock stream reasoning a string": ("bedrock/text.yaml", [("messageStart", {"role": "assistant"}),
                                                                ("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"reasoningContent": "x"}})],
                                          False, "interaction 1"),
    "chat finish reason an object": ("openai-chat/text.yaml",
                                     [{"choices": [{"index": 0, "delta": {"content": "hi"}, "finish_reason": {"a": 1}}]}], False, "interaction 1"),
}


def _one_line_exit_2(args: list[str]) -> str:
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, (result.output, result.exception)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


@pytest.fixture(params=sorted(WRONG_TYPES))
def wrong_type(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[Path, str]:
    source, payloads, whole, says = WRONG_TYPES[request.param]
    return corrupt(tmp_path, source, payloads, whole=whole), says


def test_the_visible_count_reads_any_payload_without_raising(wrong_type: tuple[Path, str]) -> None:
    # `cassette show` counts what the payloads said before the adapter reads them: a field of the
    # wrong type counts nothing there, so the adapter is the one that reports it
    path, _ = wrong_type
    interaction = Cassette.load(path).interactions[0]
    for api in ("openai-chat", "anthropic", "openai-responses", "gemini", "gemini-interactions", "bedrock"):
        assert isinstance(recorded_chars(api, interaction), int)


@pytest.mark.parametrize("as_json", [False, True])
def test_show_names_the_file_and_the_interaction(wrong_type: tuple[Path, str], as_json: bool) -> None:
    path, says = wrong_type
    line = _one_line_exit_2(["cassette", "show", str(path), *(["--json"] if as_json else [])])
    assert line.startswith(f"error: {path}: interaction 1: ") and says in line


def test_the_replay_model_raises_a_cassette_error(wrong_type: tuple[Path, str]) -> None:
    # what the llm_cassette fixture and a scenario's cassette model replay through
    path, _ = wrong_type
    model = CassetteModel(path, pace=False)

    async def drain() -> None:
        async for _ in model.stream({"model": "m", "messages": []}):
            pass

    with pytest.raises(CassetteError) as info:
        asyncio.run(drain())
    assert str(info.value).startswith(f"{path}: ") and "\n" not in str(info.value)
    assert model.problems() == [str(info.value)]


def test_a_port_out_of_range_in_a_recorded_uri_is_refused_on_load(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    text = (SHIPPED / "openai-chat/text.yaml").read_text(encoding="utf-8")
    path.write_text(text.replace("uri: http://127.0.0.1:37633/", "uri: http://127.0.0.1:99999/"), encoding="utf-8")
    with pytest.raises(CassetteError, match=r"interaction 1: request uri 'http://127\.0\.0\.1:99999/.*' is not an http"):
        Cassette.load(path)


# --------------------------------------------------------------------------- files that are no regular file


@pytest.fixture
def fifo(tmp_path: Path) -> Iterator[Path]:
    """A FIFO no one writes to; should a reader open it anyway, a writer comes along after a few
    seconds, so the test fails instead of hanging."""
    path = tmp_path / "fifo.yaml"
    os.mkfifo(path)
    done = threading.Event()

    def unblock() -> None:
        if not done.wait(5):
            with open(path, "w"):
                pass

    thread = threading.Thread(target=unblock, daemon=True)
    thread.start()
    yield path
    done.set()
    thread.join()


def test_show_refuses_a_fifo_and_a_device(fifo: Path, tmp_path: Path) -> None:
    device = tmp_path / "device.yaml"
    device.symlink_to(os.devnull)  # a character device (the probe used /dev/zero, which never ends)
    for path in (fifo, device):
        line = _one_line_exit_2(["cassette", "show", str(path)])
        assert line == f"error: {path}: cannot read: not a regular file (a pipe, a device or a socket)"


def test_vcr_refuses_a_fifo_and_a_directory(fifo: Path, tmp_path: Path) -> None:
    # not a "new cassette" to record over: the path is there, and is no file
    for path in (fifo, tmp_path):
        with pytest.raises(CassetteError, match=r"cannot read: (not a regular file|is a directory)"):
            with make_vcr().use_cassette(str(path)):
                pass


def test_the_llm_cassette_fixture_refuses_a_fifo(fifo: Path) -> None:
    with pytest.raises(CassetteError, match="not a regular file"):
        CassetteModel(fifo)


# --------------------------------------------------------------------------- cassette record's options


@pytest.mark.parametrize(
    ("tools", "says"),
    [
        ('{"name": "x"}', "not a list of tools but an object"),
        ("[1, 2]", "tool 1: a number, not an object"),
        ('[{"name": 5, "input_schema": "x"}]', "tool 1: 'name' is a number, expected a non-empty string"),
        ('[{"name": "w", "input_schema": {}}]', "tool 1 ('w'): no 'description'"),
        ('[{"name": "w", "description": "d", "input_schema": {}}, {"name": "", "description": "d", "input_schema": {}}]',
         "tool 2: 'name' is the string '', expected a non-empty string"),
        ('[{"name": "w", "description": "d", "input_schema": "x"}]', "tool 1 ('w'): 'input_schema' is the string 'x', expected a JSON Schema object"),
        ("[NaN]", "not JSON: NaN"),
    ],
)
def test_a_tools_file_of_the_wrong_shape_names_the_file_and_the_entry(tools: str, says: str, tmp_path: Path) -> None:
    path = tmp_path / "tools.json"
    path.write_text(tools, encoding="utf-8")
    out = tmp_path / "r.yaml"
    line = _one_line_exit_2(["cassette", "record", str(out), "--test-server", "--model", "text", "--tools", str(path)])
    assert line.startswith(f"error: {path}: {says}")
    assert not out.exists()


def test_a_tools_file_in_the_specs_shape_is_read(tmp_path: Path) -> None:
    path = tmp_path / "tools.json"
    tools = [{"name": "w", "description": "d", "input_schema": {"type": "object"}, "extra": 1}]
    path.write_text(json.dumps(tools), encoding="utf-8")
    assert load_tools(path) == tools


def test_a_tools_fifo_is_refused(fifo: Path, tmp_path: Path) -> None:
    line = _one_line_exit_2(["cassette", "record", str(tmp_path / "r.yaml"), "--test-server", "--model", "text", "--tools", str(fifo)])
    assert line == f"error: {fifo}: not a regular file (a pipe, a device or a socket)"


@pytest.mark.parametrize("value", ["0", "-1"])
def test_max_tokens_must_be_positive(value: str, tmp_path: Path) -> None:
    line = _one_line_exit_2(["cassette", "record", str(tmp_path / "r.yaml"), "--test-server", "--model", "text", "--max-tokens", value])
    assert line == f"error: --max-tokens must be a positive whole number (got {value})"


def test_an_output_path_no_cassette_can_be_written_to_is_refused(fifo: Path, tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("", encoding="utf-8")
    cases = {tmp_path: "cannot write: is a directory", fifo: "cannot write: not a regular file",
             blocker / "r.yaml": f"cannot write: cannot create a file in {blocker}"}
    for out, says in cases.items():
        line = _one_line_exit_2(["cassette", "record", str(out), "--test-server", "--model", "text"])
        assert line.startswith(f"error: {out}: {says}")


def test_the_output_path_is_checked_before_any_request(tmp_path: Path) -> None:
    # the URL would fail at send time (NETWORK_ERROR): the path's error comes first, nothing sent
    request: Any = {"model": "m", "messages": []}
    with pytest.raises(CassetteError, match="is a directory"):
        asyncio.run(record_cassette(tmp_path, adapter="openai-chat", request=request, base_url="http://127.0.0.1:99999/"))


@pytest.mark.parametrize("url", ["http://127.0.0.1:99999/", "http://127.0.0.1:-5/", "http://[::1", "http://:80/"])
def test_a_base_url_nothing_can_answer_is_a_network_error(url: str, tmp_path: Path) -> None:
    out = tmp_path / "r.yaml"
    line = _one_line_exit_2(["cassette", "record", str(out), "--model", "m", "--base-url", url])
    assert line.startswith("error: NETWORK_ERROR: InvalidURL: ")
    assert not out.exists()


def test_the_adapter_refuses_a_port_out_of_range_as_a_provider_error() -> None:
    from cassettes.providers import OpenAIChatAdapter

    async def drain() -> None:
        async for _ in OpenAIChatAdapter(base_url="http://127.0.0.1:70000/v1", api_key="k").stream({"model": "m", "messages": []}):
            pass

    with pytest.raises(ProviderError) as info:
        asyncio.run(drain())
    assert info.value.code == "NETWORK_ERROR" and "Port out of range" in str(info.value)
