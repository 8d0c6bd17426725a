"""Unusable cassettes give one-line errors naming the file and the problem (exit 2 at the CLI)."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cassettes.errors import CassetteError, UnmatchedRequestError
from cassettes.llm_cassette import Cassette
from cassettes.model import CassetteModel
from cli import app

GOOD_SSE = "data: {\\\"choices\\\":[{\\\"index\\\":0,\\\"delta\\\":{\\\"content\\\":\\\"hi\\\"},\\\"finish_reason\\\":null}]}\\n\\n"


def cassette_text(body: str, uri: str = "https://api.openai.com/v1/chat/completions", content_type: str = "text/event-stream") -> str:
    return f"""interactions:
- request:
    method: POST
    uri: {uri}
    body: '{{"model": "m", "stream": true}}'
  response:
    status: {{code: 200, message: OK}}
    headers: {{Content-Type: [{content_type}]}}
    body: {{string: "{body}"}}
version: 1
"""


Writer = Callable[..., Path]

CASES = {
    "bad YAML": ("interactions: [\n  - request: {method: POST\n", "bad YAML at line"),
    "no interactions key": ("version: 1\n", "no 'interactions' list"),
    "empty interactions": ("interactions: []\nversion: 1\n", "no interactions recorded"),
    "no response": ("interactions:\n- request: {method: POST, uri: 'http://x/v1/messages'}\n", "interaction 1: needs a 'request' and a 'response'"),
    "cut mid-event": (cassette_text(GOOD_SSE + 'data: {\\"choi'), "interaction 1: truncated SSE: the stream ends mid-event"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_malformed_cassette_is_a_one_line_error_naming_the_file(case: str, tmp_cassette: Writer) -> None:
    text, expected = CASES[case]
    path = tmp_cassette(text)
    with pytest.raises(CassetteError) as info:
        Cassette.load(path)
    message = str(info.value)
    assert message.startswith(f"{path}: ") and expected in message
    assert "\n" not in message


def test_stream_without_its_terminal_event_is_truncated(tmp_cassette: Writer) -> None:
    path = tmp_cassette(cassette_text(GOOD_SSE))  # complete events, but no finish_reason / [DONE]
    model = CassetteModel(path, pace=False)

    async def run() -> None:
        async for _ in model.stream({"model": "m", "messages": []}):
            pass

    with pytest.raises(CassetteError, match=r"truncated stream: event stream ended before its finish_reason"):
        asyncio.run(run())


def test_bad_gzip_body_names_the_interaction(tmp_cassette: Writer) -> None:
    junk = base64.b64encode(b"\x1f\x8bnot really gzip").decode()
    text = cassette_text("x", content_type="application/json").replace('body: {string: "x"}', f"body: {{string: !!binary '{junk}'}}")
    path = tmp_cassette(text.replace("headers: {Content-Type", "headers: {Content-Encoding: [gzip], Content-Type"))
    with pytest.raises(CassetteError, match="interaction 1: body says content-encoding gzip but does not decompress"):
        Cassette.load(path)


def test_unsafe_yaml_tags_are_refused(tmp_cassette: Writer) -> None:
    path = tmp_cassette("!!python/object/apply:os.system ['echo pwned']\n")
    with pytest.raises(CassetteError, match="bad YAML"):
        Cassette.load(path)


def test_unmatched_request_names_the_request(tmp_cassette: Writer) -> None:
    path = tmp_cassette(cassette_text(GOOD_SSE + "data: [DONE]\\n\\n"))
    model = CassetteModel(path, pace=False)

    async def run() -> None:
        for _ in range(2):
            async for _ in model.stream({"model": "m", "messages": []}):
                pass

    with pytest.raises(UnmatchedRequestError, match=r"no recorded interaction for POST https://api.openai.com/v1/chat/completions \(all matching interactions already played\)"):
        asyncio.run(run())


@pytest.mark.parametrize("case", ["bad YAML", "cut mid-event"])
def test_cli_exits_2_with_one_line_and_no_traceback(case: str, tmp_cassette: Writer) -> None:
    path = tmp_cassette(CASES[case][0])
    result = CliRunner().invoke(app, ["cassette", "show", str(path), "--json"])
    assert result.exit_code == 2
    assert result.stdout == "" or json.loads(result.stdout) is None
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {path}: ")
    assert "Traceback" not in result.output


def test_a_last_event_without_its_blank_line_is_still_whole(tmp_cassette: Writer) -> None:
    # Serializers that strip trailing newlines must not turn a complete stream into a "truncated" one.
    body = GOOD_SSE + 'data: {\\"choices\\":[{\\"index\\":0,\\"delta\\":{},\\"finish_reason\\":\\"stop\\"}]}\\n\\ndata: [DONE]'
    model = CassetteModel(tmp_cassette(cassette_text(body)), pace=False)

    async def run() -> list[dict[str, object]]:
        return [dict(c) async for c in model.stream({"model": "m", "messages": []})]

    chunks = asyncio.run(run())
    assert chunks[-1] == {"type": "finish", "reason": {"kind": "stop"}}
    assert chunks[1] == {"type": "text-delta", "index": 0, "text": "hi"}


def test_an_event_that_is_not_json_names_the_interaction(tmp_cassette: Writer) -> None:
    path = tmp_cassette(cassette_text(GOOD_SSE + "data: {not json}\\n\\ndata: [DONE]\\n\\n"))
    result = CliRunner().invoke(app, ["cassette", "show", str(path)])
    assert result.exit_code == 2
    assert result.stderr.startswith(f"error: {path}: interaction 1: unreadable event: malformed event '{{not json}}'")
    with pytest.raises(CassetteError, match="unreadable event"):
        asyncio.run(_drain(CassetteModel(path, pace=False)))


async def _drain(model: CassetteModel) -> None:
    async for _ in model.stream({"model": "m", "messages": []}):
        pass


# --------------------------------------------------------------------------- the input contract (issue 13)


def _one_line_exit_2(args: list[str], path: Path | None = None) -> str:
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    if path is not None:
        assert lines[0].startswith(f"error: {path}: ")
    assert "Traceback" not in result.output
    return lines[0]


@pytest.mark.parametrize(
    ("old", "new", "problem"),
    [
        ("status: {code: 200, message: OK}", "status: {code: -1, message: OK}", "response status -1 is not an HTTP status"),
        ("status: {code: 200, message: OK}", "status: {code: 99999, message: OK}", "response status 99999 is not an HTTP status"),
        ("status: {code: 200, message: OK}", "status: {code: true, message: OK}", "no integer status code"),
        ("uri: https://api.openai.com/v1/chat/completions", "uri: 5", "request uri '5' is not an http(s) URL"),
        ("method: POST", "method: 5", "request method 5 is not an HTTP method"),
        ("method: POST", "method: POST\n    headers: {accept: []}", "request header 'accept' has no value"),
        ("headers: {Content-Type: [text/event-stream]}", "headers: {Content-Type: [{a: 1}]}", "response header 'Content-Type' holds a dict"),
    ],
)
def test_a_bad_field_is_one_line_naming_file_and_field(old: str, new: str, problem: str, tmp_cassette: Writer) -> None:
    text = cassette_text(GOOD_SSE + "data: [DONE]\\n\\n")
    assert old in text
    path = tmp_cassette(text.replace(old, new, 1))
    line = _one_line_exit_2(["cassette", "show", str(path)], path)
    assert problem in line and "interaction 1" in line


def test_a_bad_header_inside_vcrpy_is_one_line_too(tmp_cassette: Writer) -> None:
    from cassettes.loopkit_vcr import make_vcr

    path = tmp_cassette(cassette_text(GOOD_SSE + "data: [DONE]\\n\\n").replace("method: POST", "method: POST\n    headers: {accept: []}", 1))
    with pytest.raises(CassetteError) as info:
        with make_vcr().use_cassette(path):
            pass
    assert str(info.value) == f"{path}: interaction 1: request header 'accept' has no value"


def test_deep_nesting_is_a_one_line_error(tmp_cassette: Writer) -> None:
    path = tmp_cassette("interactions: " + "[" * 5000 + "]" * 5000 + "\n")
    line = _one_line_exit_2(["cassette", "show", str(path)], path)
    assert "nested too deeply" in line or "bad YAML" in line
    shallow = tmp_cassette("interactions: " + "[" * 500 + "]" * 500 + "\n", "shallow.yaml")
    _one_line_exit_2(["cassette", "show", str(shallow)], shallow)


def test_cassette_with_no_command_and_record_with_an_unknown_scenario(tmp_path: Path) -> None:
    assert "needs a command" in _one_line_exit_2(["cassette"])
    assert "unknown test-server scenario 'gpt-9'" in _one_line_exit_2(
        ["cassette", "record", str(tmp_path / "c.yaml"), "--model", "gpt-9", "--test-server"])
    assert not (tmp_path / "c.yaml").exists()


# --------------------------------------------------------------------------- other projects' serializers


def _show_json(path: Path) -> dict:
    result = CliRunner().invoke(app, ["cassette", "show", str(path), "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_pydantic_ais_typed_bodies_are_read(tmp_cassette: Writer) -> None:
    # pydantic-ai's serializer (2026): a bare status and ``body: {type: json|text, content}``, a
    # JSON body stored as its value (not text). Its streams replay like any other.
    events = ('data: {"choices":[{"index":0,"delta":{"content":"4"},"finish_reason":null}]}\n\n'
              'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}],'
              '"usage":{"prompt_tokens":5,"completion_tokens":1}}\n\ndata: [DONE]\n\n')
    text = ("interactions:\n- request:\n    method: POST\n    uri: https://openrouter.ai/api/v1/chat/completions\n"
            "    body:\n      type: json\n      content:\n        model: m\n        stream: true\n"
            "  response:\n    status: 200\n    headers: {content-type: [text/event-stream]}\n"
            "    body:\n      type: text\n      content: " + json.dumps(events) + "\nversion: 1\n")
    (one,) = _show_json(tmp_cassette(text))["interactions"]
    assert one["adapter"] == "openai-chat" and one["error"] is None
    assert one["report"]["recorded_chars"] == one["report"]["stream_chars"] == 1
    assert one["report"]["finish"] == {"kind": "stop"} and one["report"]["usage"]["output_tokens"] == 1
    whole = ("interactions:\n- request:\n    method: POST\n    uri: https://api.openai.com/v1/chat/completions\n"
             "    body: {type: json, content: {model: m}}\n  response:\n    status: 200\n"
             "    headers: {content-type: [application/json]}\n    body:\n      type: json\n      content:\n"
             "        choices: [{index: 0, message: {role: assistant, content: hi}, finish_reason: length}]\n"
             "version: 1\n")
    (one,) = _show_json(tmp_cassette(whole, "whole.yaml"))["interactions"]
    assert one["report"]["stream_chars"] == 2 and one["report"]["finish"] == {"kind": "max-tokens"}


def test_a_header_yaml_typed_as_a_date_is_its_text(tmp_cassette: Writer) -> None:
    # ``openai-version: 2020-10-01`` unquoted loads as a date: it is the text it was written as
    text = cassette_text(GOOD_SSE + "data: [DONE]\\n\\n").replace(
        "headers: {Content-Type: [text/event-stream]}", "headers: {Content-Type: [text/event-stream], openai-version: [2020-10-01]}")
    cassette = Cassette.load(tmp_cassette(text))
    assert cassette.interactions[0].headers["openai-version"] == ["2020-10-01"]


def test_an_aws_error_type_in_the_body_is_the_code() -> None:
    from cassettes.providers.base import RateLimitError, error_from_body

    throttled = error_from_body(429, '{"message": "Rate exceeded", "__type": "ThrottlingException"}')
    assert throttled.code == "ThrottlingException" and isinstance(throttled, RateLimitError)
    failed = error_from_body(500, '{"__type": "com.amazon.coral.service#InternalServerException"}')
    assert failed.code == "InternalServerException" and failed.status == 500
    header = error_from_body(400, '{"__type": "Other"}', headers={"x-amzn-ErrorType": "ValidationException:http://x"})
    assert header.code == "ValidationException"  # the header, when there is one


def test_a_choices_obfuscation_padding_is_no_warning(tmp_cassette: Writer) -> None:
    # Bedrock's OpenAI-compatible endpoint pads each choice (OpenAI pads the chunk): metadata
    sse = ('data: {\\"choices\\":[{\\"index\\":0,\\"delta\\":{\\"content\\":\\"hi\\"},\\"finish_reason\\":null,'
           '\\"obfuscation\\":\\"xyz\\"}]}\\n\\ndata: {\\"choices\\":[{\\"index\\":0,\\"delta\\":{},'
           '\\"finish_reason\\":\\"stop\\"}]}\\n\\ndata: [DONE]\\n\\n')
    (one,) = _show_json(tmp_cassette(cassette_text(sse)))["interactions"]
    assert one["report"]["warnings"] == [] and one["report"]["stream_chars"] == 2


def test_a_cassette_of_no_api_the_kit_speaks_is_bad_input(tmp_cassette: Writer) -> None:
    path = tmp_cassette(cassette_text(GOOD_SSE, uri="https://example.com/generate"))
    line = _one_line_exit_2(["cassette", "show", str(path)], path)
    assert "no interaction is an API loopkit's adapters speak" in line and "https://example.com/generate" in line


def test_anthropic_on_vertex_ai_replays_through_the_anthropic_adapter(tmp_cassette: Writer) -> None:
    # Vertex AI's publisher URL (the model in it, `anthropic_version` in the body): Anthropic's events
    url = ("https://us-east5-aiplatform.googleapis.com/v1/projects/p/locations/us-east5/publishers/anthropic/"
           "models/claude-haiku-4-5@20251001:streamRawPredict")
    events = ('event: message_start\ndata: {"type":"message_start","message":{"usage":{"input_tokens":3,'
              '"output_tokens":1}}}\n\nevent: content_block_start\ndata: {"type":"content_block_start","index":0,'
              '"content_block":{"type":"text","text":""}}\n\nevent: content_block_delta\ndata: {"type":'
              '"content_block_delta","index":0,"delta":{"type":"text_delta","text":"cut"}}\n\n'
              'event: content_block_stop\ndata: {"type":"content_block_stop","index":0}\n\nevent: message_delta\n'
              'data: {"type":"message_delta","delta":{"stop_reason":"max_tokens"},"usage":{"output_tokens":5}}\n\n'
              'event: message_stop\ndata: {"type":"message_stop"}\n\n')
    text = (f"interactions:\n- request:\n    method: POST\n    uri: {url}\n"
            "    body: '{\"anthropic_version\": \"vertex-2023-10-16\", \"stream\": true}'\n"
            "  response:\n    status: {code: 200, message: OK}\n    headers: {content-type: [text/event-stream]}\n"
            f"    body: {{string: {json.dumps(events)}}}\nversion: 1\n")
    (one,) = _show_json(tmp_cassette(text))["interactions"]
    assert one["adapter"] == "anthropic" and one["error"] is None
    assert one["report"]["stream_chars"] == 3 and one["report"]["finish"] == {"kind": "max-tokens"}
    from cassettes.providers import AnthropicMessagesAdapter, replay_settings

    settings = replay_settings(url, AnthropicMessagesAdapter, None, True)
    adapter = AnthropicMessagesAdapter(**settings, api_key="token")
    request = {"model": "ignored", "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]}
    assert adapter.endpoint(request) == url  # type: ignore[arg-type]
    body = adapter.build_body(request)  # type: ignore[arg-type]
    assert "model" not in body and body["anthropic_version"] == "vertex-2023-10-16"
    assert adapter.auth_headers() == {"authorization": "Bearer token"}


def _whole(uri: str, body: object, *, status: str = "{code: 200, message: OK}", request: str = '{"model": "m"}') -> str:
    """One whole-response interaction (the body a JSON document) as cassette text."""
    return (f"- request:\n    method: POST\n    uri: {uri}\n    body: {json.dumps(request)}\n"
            f"  response:\n    status: {status}\n    headers: {{content-type: [application/json]}}\n"
            f"    body: {{string: {json.dumps(json.dumps(body))}}}\n")


CHAT = "https://api.openai.com/v1/chat/completions"
MESSAGES = "https://api.anthropic.com/v1/messages"
RESPONSES = "https://api.openai.com/v1/responses"
ANSWER = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}]}


def test_vcrpys_older_httpx_form_is_read(tmp_cassette: Writer) -> None:
    # vcrpy before 4.3 stored an httpx response as {status_code, http_version, headers, content}
    # (dd-trace-py's 2023 cassettes); vcrpy itself still reads it, and so does the kit
    text = ("interactions:\n- request:\n    method: POST\n    uri: https://api.openai.com/v1/chat/completions\n"
            "    body: '{\"model\": \"m\"}'\n  response:\n    headers: {Content-Type: [application/json]}\n"
            f"    http_version: HTTP/1.1\n    status_code: 200\n    content: {json.dumps(json.dumps(ANSWER))}\nversion: 1\n")
    (one,) = _show_json(tmp_cassette(text))["interactions"]
    assert one["status"] == 200 and one["adapter"] == "openai-chat" and one["error"] is None
    assert one["report"]["stream_chars"] == 2 and one["report"]["finish"] == {"kind": "stop"}


@pytest.mark.parametrize("uri", [CHAT, MESSAGES, RESPONSES, "https://bedrock-runtime.us-east-1.amazonaws.com/model/m/converse"])
def test_a_200_body_that_is_not_the_apis_answer_is_unreadable_not_an_empty_answer(uri: str, tmp_cassette: Writer) -> None:
    # pydantic-ai's test_invalid_response: a chat endpoint answered {"x": 42}; read leniently it was
    # a clean, empty `stop`, which a loop would take for the model's answer
    path = tmp_cassette("interactions:\n" + _whole(uri, {"x": 42}) + "version: 1\n")
    line = _one_line_exit_2(["cassette", "show", str(path)], path)
    assert "interaction 1: unreadable response" in line and "'x'" in line


def test_calls_that_are_no_model_call_are_passed_over(tmp_cassette: Writer) -> None:
    # a recording opening with a token count (pydantic-ai's usage limits) replays its model call:
    # the model is picked from the first interaction an adapter speaks, and strict mode does not
    # ask for the count, which no loop makes
    count = _whole(MESSAGES + "/count_tokens?beta=true", {"input_tokens": 12})
    answer = _whole(MESSAGES + "?beta=true", {"type": "message", "role": "assistant", "content": [{"type": "text", "text": "ok"}],
                                              "stop_reason": "end_turn", "usage": {"input_tokens": 12, "output_tokens": 1}})
    path = tmp_cassette("interactions:\n" + count + answer + "version: 1\n")
    model = CassetteModel(path, pace=False, strict=True)
    assert model.adapter.name == "anthropic"

    async def ask() -> list[dict]:
        return [dict(c) async for c in model.stream({"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]})]

    chunks = asyncio.run(ask())
    assert chunks[-1] == {"type": "finish", "reason": {"kind": "stop"}} and model.problems() == []
    shown = _show_json(path)["interactions"]
    assert [i["adapter"] for i in shown] == ["", "anthropic"]  # the count is shown as no adapter's, not misread
    only = tmp_cassette("interactions:\n" + count + "version: 1\n", "only.yaml")
    with pytest.raises(CassetteError, match="no interaction is an API loopkit's adapters speak"):
        CassetteModel(only)


def test_a_background_response_still_queued_is_an_error_not_an_empty_answer(tmp_cassette: Writer) -> None:
    queued = {"id": "resp_1", "object": "response", "status": "queued", "background": True, "output": []}
    path = tmp_cassette("interactions:\n" + _whole(RESPONSES, queued) + "version: 1\n")
    (one,) = _show_json(path)["interactions"]
    assert one["chunks"] == [] and "still queued" in one["error"] and "BACKGROUND_RESPONSE" in one["error"]
    cancelled = {**queued, "status": "cancelled"}
    (one,) = _show_json(tmp_cassette("interactions:\n" + _whole(RESPONSES, cancelled) + "version: 1\n", "c.yaml"))["interactions"]
    assert one["report"]["finish"]["kind"] == "error" and one["report"]["finish"]["code"] == "cancelled"


def test_a_whole_gemini_answer_without_a_finish_reason_ended(tmp_cassette: Writer) -> None:
    # a complete body (a cut one is no JSON) whose candidate carries no finishReason: it stopped;
    # a body with no candidate at all is no answer
    uri = "https://generativelanguage.googleapis.com/v1beta/models/gemini-1.5-flash:generateContent"
    answer = {"candidates": [{"content": {"parts": [{"text": "Hello"}], "role": "model"}}], "usageMetadata": {"promptTokenCount": 2}}
    (one,) = _show_json(tmp_cassette("interactions:\n" + _whole(uri, answer) + "version: 1\n"))["interactions"]
    assert one["error"] is None and one["report"]["finish"] == {"kind": "stop"} and one["report"]["stream_chars"] == 5
    path = tmp_cassette("interactions:\n" + _whole(uri, {"modelVersion": "x"}) + "version: 1\n", "none.yaml")
    assert "unreadable response" in _one_line_exit_2(["cassette", "show", str(path)], path)


def test_timing_and_moderation_metadata_are_no_warning(tmp_cassette: Writer) -> None:
    # Cerebras' time_info, OpenAI's moderation verdicts, Azure's latency marks and Groq's usage
    # split ride beside the answer: no model output lost
    body = {**ANSWER, "time_info": {"queue_time": 0.1}, "moderation": {"input": {"results": [{"flagged": False}]}},
            "latency_checkpoint": {"t": 1}, "usage_breakdown": {"models": []}}
    (one,) = _show_json(tmp_cassette("interactions:\n" + _whole(CHAT, body) + "version: 1\n"))["interactions"]
    assert one["report"]["warnings"] == [] and one["report"]["stream_chars"] == 2


def _sse_text(uri: str, events: list[dict], done: bool = True) -> str:
    """One streamed chat interaction (``data:`` events, then ``[DONE]``) as cassette text."""
    stream = "".join(f"data: {json.dumps(e)}\n\n" for e in events) + ("data: [DONE]\n\n" if done else "")
    return (f"interactions:\n- request:\n    method: POST\n    uri: {uri}\n    body: '{{\"model\": \"m\", \"stream\": true}}'\n"
            f"  response:\n    status: {{code: 200, message: OK}}\n    headers: {{content-type: [text/event-stream]}}\n"
            f"    body: {{string: {json.dumps(stream)}}}\nversion: 1\n")


def test_a_chat_custom_tool_call_keeps_its_name_and_input_and_goes_back_custom(tmp_cassette: Writer) -> None:
    # GPT-5's free-form tools on chat completions: {"type": "custom", "custom": {name, input}} (dd-trace-py)
    call = {"id": "call_1", "type": "custom", "custom": {"name": "math_exp", "input": "4 + 4"}}
    whole = {"choices": [{"index": 0, "message": {"role": "assistant", "content": None, "tool_calls": [call]},
                          "finish_reason": "tool_calls"}]}
    (one,) = _show_json(tmp_cassette("interactions:\n" + _whole(CHAT, whole) + "version: 1\n"))["interactions"]
    block = next(c["block"] for c in one["chunks"] if c["type"] == "block-end")
    assert (block["name"], block["arguments"]) == ("math_exp", "4 + 4") and one["report"]["finish"] == {"kind": "tool-calls"}
    from cassettes.providers import OpenAIChatAdapter

    body = OpenAIChatAdapter(api_key="k").build_body({"model": "m", "messages": [{"role": "assistant", "content": [block]}]})
    assert body["messages"][0]["tool_calls"] == [call]  # the loop's next request sends it back as the API gave it


def test_a_chat_stream_ending_with_calls_and_no_finish_reason_finishes_tool_calls(tmp_cassette: Writer) -> None:
    # a host (Novita through OpenRouter) that streams a tool call and [DONE] with no finish_reason
    delta = {"tool_calls": [{"index": 0, "id": "0", "type": "function", "function": {"name": "llm_version", "arguments": "{}"}}]}
    path = tmp_cassette(_sse_text(CHAT, [{"choices": [{"index": 0, "delta": delta, "finish_reason": None}]}]))
    (one,) = _show_json(path)["interactions"]
    assert one["report"]["finish"] == {"kind": "tool-calls"} and one["report"]["warnings"] == []


def test_vertex_ais_numbered_finish_reasons_are_named(tmp_cassette: Writer) -> None:
    # the google-cloud-aiplatform client asks `$alt=json;enum-encoding=int`: finishReason 1 is STOP
    uri = ("https://us-central1-aiplatform.googleapis.com/v1/projects/p/locations/us-central1/publishers/google/models/"
           "gemini-1.5-flash-002:generateContent")
    answer = {"candidates": [{"content": {"parts": [{"functionCall": {"name": "f", "args": {}}}], "role": "model"}, "finishReason": 1}]}
    (one,) = _show_json(tmp_cassette("interactions:\n" + _whole(uri, answer) + "version: 1\n"))["interactions"]
    assert one["report"]["finish"] == {"kind": "tool-calls"}  # STOP after a call
    answer["candidates"][0]["finishReason"] = 2
    (one,) = _show_json(tmp_cassette("interactions:\n" + _whole(uri, answer) + "version: 1\n", "m.yaml"))["interactions"]
    assert one["report"]["finish"]["kind"] == "max-tokens"


def test_a_scrubbed_placeholder_in_a_recorded_path_still_matches(tmp_cassette: Writer) -> None:
    # dd-trace-py scrubs the project into `<project-id>`, stored as typed; the adapter sends it encoded
    uri = ("https://us-central1-aiplatform.googleapis.com/v1beta1/projects/<project-id>/locations/us-central1/publishers/google/"
           "models/gemini-2.0-flash-001:generateContent")
    answer = {"candidates": [{"content": {"parts": [{"text": "blue"}], "role": "model"}, "finishReason": "STOP"}]}
    model = CassetteModel(tmp_cassette("interactions:\n" + _whole(uri, answer) + "version: 1\n"), pace=False, strict=True)

    async def ask() -> list[dict]:
        return [dict(c) async for c in model.stream({"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": "why"}]}]})]

    assert asyncio.run(ask())[-1] == {"type": "finish", "reason": {"kind": "stop"}} and model.problems() == []


def test_a_brotli_encoded_body_is_read(tmp_cassette: Writer) -> None:
    # weave's recordings keep OpenAI's `content-encoding: br` body as it came (!!binary)
    import brotli

    packed = base64.b64encode(brotli.compress(json.dumps(ANSWER).encode())).decode()
    text = (f"interactions:\n- request:\n    method: POST\n    uri: {CHAT}\n    body: '{{\"model\": \"m\"}}'\n"
            "  response:\n    status: {code: 200, message: OK}\n"
            "    headers: {content-type: [application/json], content-encoding: [br]}\n"
            f"    body: {{string: !!binary '{packed}'}}\nversion: 1\n")
    (one,) = _show_json(tmp_cassette(text))["interactions"]
    assert one["error"] is None and one["report"]["stream_chars"] == 2
    broken = tmp_cassette(text.replace(packed, base64.b64encode(b"not brotli").decode()), "bad.yaml")
    assert "content-encoding br but does not decompress" in _one_line_exit_2(["cassette", "show", str(broken)], broken)
