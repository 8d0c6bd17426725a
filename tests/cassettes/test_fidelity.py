"""Nothing the model said is lost, in either direction (issue 14), wire format by wire format.

Each test replays a small recorded body shaped as the provider documents it (through the cassette
machinery, so the ``cassette show`` report is checked too) or builds a request from history, and
checks one decision of ``docs/cassettes.md``: refusals, list-valued content, usage shapes, the
finish vocabulary and its ``raw`` strings, error-after-finish precedence, and ``provider_data``
kept on the way in and sent back on the way out.
"""

from __future__ import annotations

import asyncio
import base64
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from cassettes.errors import CassetteError, ProviderError, RateLimitError
from cassettes.eventstream import encode_frame
from cassettes.llm_cassette import Cassette
from cassettes.providers import (
    FINISH_VOCABULARY,
    AnthropicMessagesAdapter,
    BedrockConverseAdapter,
    GeminiAdapter,
    OpenAIChatAdapter,
    OpenAIResponsesAdapter,
)
from cassettes.replay import ReplayResult, replay_interaction
from cassettes.wellformed import stream_problems
from reference_loop.protocols import ModelRequest

CHAT = "https://api.example.test/v1/chat/completions"
ANTHROPIC = "https://api.anthropic.com/v1/messages"
RESPONSES = "https://api.openai.com/v1/responses"
GEMINI = "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
GEMINI_WHOLE = "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-flash:generateContent"
BEDROCK = "https://bedrock-runtime.us-east-1.amazonaws.com/model/anthropic.claude-sonnet-4%3A0/converse-stream"
SSE = "text/event-stream"


def replay(tmp_path: Path, url: str, body: str | bytes, content_type: str = SSE, *, status: int = 200,
           request: dict[str, Any] | None = None, headers: dict[str, str] | None = None) -> ReplayResult:
    """One recorded interaction, written as a vcrpy cassette and replayed like ``cassette show``."""
    response_headers = {"content-type": [content_type], **{k: [v] for k, v in (headers or {}).items()}}
    interaction = {"request": {"method": "POST", "uri": url, "body": json.dumps(request or {"model": "m", "stream": True})},
                   "response": {"status": {"code": status, "message": "OK"}, "headers": response_headers, "body": {"string": body}}}
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"interactions": [interaction], "version": 1}))
    result = asyncio.run(replay_interaction(Cassette.load(path), 0))
    if result.error is None:
        assert stream_problems(result.chunks) == []
    return result


def sse(*payloads: Any, named: bool = False) -> str:
    out = ""
    for payload in payloads:
        if isinstance(payload, str):
            out += f"data: {payload}\n\n"
        else:
            name = f"event: {payload['type']}\n" if named else ""
            out += f"{name}data: {json.dumps(payload)}\n\n"
    return out


def blocks(result: ReplayResult) -> list[dict[str, Any]]:
    return [dict(c)["block"] for c in result.chunks if c["type"] == "block-end"]


def last(result: ReplayResult, kind: str) -> Any:
    found = [dict(c) for c in result.chunks if c["type"] == kind]
    return found[-1][{"finish": "reason", "usage": "usage"}[kind]] if found else None


def chat(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> dict[str, Any]:
    return {"id": "x", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}], **extra}


def assert_nothing_lost(result: ReplayResult) -> None:
    report = result.report()
    assert report["recorded_chars"] == report["stream_chars"] and report["warnings"] == []


# --------------------------------------------------------------------------- OpenAI chat and compatibles


def test_a_chat_refusal_is_text_plus_a_refusal_finish_not_an_empty_stop(tmp_path: Path) -> None:
    refused = replay(tmp_path, CHAT, sse(chat({"role": "assistant", "content": None, "refusal": ""}), chat({"refusal": "I can't "}),
                                         chat({"refusal": "help with that."}), chat({}, "stop"), "[DONE]"))
    assert blocks(refused) == [{"type": "text", "text": "I can't help with that.", "provider_data": {"openai-chat": {"refusal": True}}}]
    assert last(refused, "finish") == {"kind": "refusal", "message": "I can't help with that."}
    assert_nothing_lost(refused)
    empty = replay(tmp_path, CHAT, sse(chat({"role": "assistant", "content": ""}), chat({}, "stop"), "[DONE]"))
    assert blocks(empty) == [] and last(empty, "finish") == {"kind": "stop"}
    # Sent back as the API's own refusal field, not as content.
    body = OpenAIChatAdapter().build_body({"model": "m", "messages": [{"role": "assistant", "content": blocks(refused)}]})  # type: ignore[typeddict-item]
    assert body["messages"] == [{"role": "assistant", "content": None, "refusal": "I can't help with that."}]


def test_mistral_list_content_keeps_its_thinking_and_its_text(tmp_path: Path) -> None:
    thinking = {"type": "thinking", "thinking": [{"type": "text", "text": "Let me count: 2 + 2"}]}
    result = replay(tmp_path, CHAT, sse(chat({"role": "assistant", "content": [thinking]}), chat({"content": [{"type": "thinking", "thinking": [{"type": "text", "text": " is 4."}]}]}),
                                        chat({"content": [{"type": "text", "text": "The answer is 4."}]}), chat({"content": ""}, "stop"), "[DONE]"))
    assert blocks(result) == [{"type": "reasoning", "text": "Let me count: 2 + 2 is 4."}, {"type": "text", "text": "The answer is 4."}]
    assert_nothing_lost(result)


def test_groq_usage_in_x_groq_is_read(tmp_path: Path) -> None:
    usage = {"prompt_tokens": 18, "completion_tokens": 7, "total_tokens": 25, "queue_time": 0.01}
    result = replay(tmp_path, CHAT, sse(chat({"content": "Hi"}), chat({}, "stop", x_groq={"id": "req_1", "usage": usage}), "[DONE]"))
    assert last(result, "usage") == {"input_tokens": 18, "output_tokens": 7}


def test_deepseek_cache_hits_are_cache_reads(tmp_path: Path) -> None:
    usage = {"prompt_tokens": 30, "completion_tokens": 4, "prompt_cache_hit_tokens": 24, "prompt_cache_miss_tokens": 6,
             "completion_tokens_details": {"reasoning_tokens": 2}}
    result = replay(tmp_path, CHAT, sse(chat({"content": "Hi"}, "stop"), {"id": "x", "choices": [], "usage": usage}, "[DONE]"))
    assert last(result, "usage") == {"input_tokens": 30, "output_tokens": 4, "cache_read_tokens": 24, "reasoning_tokens": 2}


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ("stop", {"kind": "stop"}),
        ("length", {"kind": "max-tokens"}),
        ("tool_calls", {"kind": "tool-calls"}),
        ("eos", {"kind": "stop", "raw": "eos"}),  # Together
        ("content_filter", {"kind": "content-filter", "raw": "content_filter"}),
        ("model_length", {"kind": "max-tokens", "raw": "model_length"}),  # Mistral
        ("sensitive", {"kind": "content-filter", "raw": "sensitive"}),  # Z.AI
        ("network_error", {"kind": "error", "message": "the provider ended the response with network_error", "code": "network_error", "raw": "network_error"}),
        ("a_future_reason", {"kind": "stop", "raw": "a_future_reason"}),  # never a kind of its own
    ],
)
def test_chat_finish_strings_map_to_the_vocabulary_and_keep_the_raw_string(tmp_path: Path, raw: str, reason: dict[str, str]) -> None:
    result = replay(tmp_path, CHAT, sse(chat({"content": "x"}), chat({}, raw), "[DONE]"))
    assert last(result, "finish") == reason and reason["kind"] in FINISH_VOCABULARY
    assert result.report()["warnings"] == []


def test_an_error_after_a_finish_wins_and_keeps_its_usage(tmp_path: Path) -> None:
    """OpenRouter: ``length``, then an error chunk carrying usage. The error wins (the provider
    says the response failed); the usage still reaches the stream, before the finish."""
    error = {"id": "gen-1", "object": "chat.completion.chunk", "error": {"code": 502, "message": "Upstream error"},
             "choices": [{"index": 0, "delta": {"content": ""}, "finish_reason": "error"}],
             "usage": {"prompt_tokens": 11, "completion_tokens": 20}}
    result = replay(tmp_path, CHAT, sse(chat({"content": "partial"}), chat({}, "length"), error, "[DONE]"))
    assert [c["type"] for c in result.chunks][-2:] == ["usage", "finish"]
    assert last(result, "usage") == {"input_tokens": 11, "output_tokens": 20}
    assert last(result, "finish") == {"kind": "error", "message": "Upstream error", "code": "502"}
    assert blocks(result) == [{"type": "text", "text": "partial"}]


def test_openrouter_reasoning_details_are_merged_kept_and_sent_back(tmp_path: Path) -> None:
    first = {"type": "reasoning.text", "text": "Think", "signature": None, "format": "anthropic-claude-v1", "index": 0}
    result = replay(tmp_path, CHAT, sse(
        chat({"reasoning": "Think", "reasoning_details": [first]}),
        chat({"reasoning": "ing.", "reasoning_details": [{"type": "reasoning.text", "text": "ing.", "index": 0}]}),
        chat({"reasoning_details": [{"type": "reasoning.text", "text": "", "signature": "sig==", "index": 0},
                                    {"type": "reasoning.encrypted", "data": "ENC", "index": 1}]}),
        chat({"content": "Done."}, "stop"), "[DONE]"))
    details = [{"type": "reasoning.text", "text": "Thinking.", "signature": "sig==", "format": "anthropic-claude-v1", "index": 0},
               {"type": "reasoning.encrypted", "data": "ENC", "index": 1}]
    assert blocks(result)[0] == {"type": "reasoning", "text": "Thinking.", "provider_data": {"openai-chat": {"reasoning_details": details}}}
    assert_nothing_lost(result)
    history: ModelRequest = {"model": "m", "messages": [{"role": "assistant", "content": blocks(result)}]}  # type: ignore[typeddict-item]
    assert OpenAIChatAdapter().build_body(history)["messages"][0]["reasoning_details"] == details


def test_deepseek_reasoning_content_goes_back_only_with_tool_calls() -> None:
    call = {"type": "tool-call", "id": "c1", "name": "f", "arguments": "{}"}
    history: ModelRequest = {"model": "m", "messages": [
        {"role": "assistant", "content": [{"type": "reasoning", "text": "plan"}, {"type": "text", "text": "A"}]},
        {"role": "assistant", "content": [{"type": "reasoning", "text": "think"}, call]},  # type: ignore[list-item]
        # Another provider's signed thought is not this API's reasoning to replay.
        {"role": "assistant", "content": [{"type": "reasoning", "text": "signed", "provider_data": {"anthropic": {"signature": "s"}}}, call]},  # type: ignore[list-item]
    ]}
    sent = OpenAIChatAdapter().build_body(history)["messages"]
    assert "reasoning_content" not in sent[0]
    assert sent[1]["reasoning_content"] == "think"
    assert "reasoning_content" not in sent[2]


def test_an_unknown_field_is_reported_by_show(tmp_path: Path) -> None:
    result = replay(tmp_path, CHAT, sse(chat({"content": "Hi", "audio": {"transcript": "Hi"}}, citations=["https://x"]), chat({}, "stop"), "[DONE]"))
    assert result.report()["warnings"] == ["skipped chunk.citations", "skipped delta.audio"]


# --------------------------------------------------------------------------- Anthropic


def _anthropic_stream(*blocks_and_deltas: tuple[dict[str, Any], list[dict[str, Any]]], stop: str = "end_turn") -> str:
    events: list[Any] = [{"type": "message_start", "message": {"id": "m", "type": "message", "role": "assistant", "content": [], "usage": {"input_tokens": 9, "output_tokens": 1}}}]
    for index, (block, deltas) in enumerate(blocks_and_deltas):
        events.append({"type": "content_block_start", "index": index, "content_block": block})
        events += [{"type": "content_block_delta", "index": index, "delta": d} for d in deltas]
        events.append({"type": "content_block_stop", "index": index})
    events += [{"type": "message_delta", "delta": {"stop_reason": stop}, "usage": {"output_tokens": 30}}, {"type": "message_stop"}]
    return sse(*events, named=True)


def test_anthropic_server_tools_citations_redacted_and_signed_thinking_are_kept_and_sent_back(tmp_path: Path) -> None:
    use = {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}}
    found = {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": [{"type": "web_search_result", "url": "https://a.test", "title": "A", "encrypted_content": "E1"}]}
    citation = {"type": "web_search_result_location", "url": "https://a.test", "title": "A", "encrypted_index": "I1", "cited_text": "sunny"}
    result = replay(tmp_path, ANTHROPIC, _anthropic_stream(
        ({"type": "thinking", "thinking": "", "signature": ""}, [{"type": "thinking_delta", "thinking": "Search it."}, {"type": "signature_delta", "signature": "SIG1"}]),
        ({"type": "redacted_thinking", "data": "REDACTED1"}, []),
        (use, [{"type": "input_json_delta", "partial_json": '{"query": '}, {"type": "input_json_delta", "partial_json": '"weather"}'}]),
        (found, []),
        ({"type": "text", "text": ""}, [{"type": "citations_delta", "citation": citation}, {"type": "text_delta", "text": "It is sunny."}]),
    ))
    kept = blocks(result)
    assert kept == [
        {"type": "reasoning", "text": "Search it.", "provider_data": {"anthropic": {"signature": "SIG1"}}},
        {"type": "reasoning", "text": "", "provider_data": {"anthropic": {"block": {"type": "redacted_thinking", "data": "REDACTED1"}}}},
        {"type": "text", "text": "", "provider_data": {"anthropic": {"block": {**use, "input": {"query": "weather"}}}}},
        {"type": "text", "text": "", "provider_data": {"anthropic": {"block": found}}},
        {"type": "text", "text": "It is sunny.", "provider_data": {"anthropic": {"citations": [citation]}}},
    ]
    assert not [b for b in kept if b["type"] == "tool-call"], "a server-run tool is not the loop's to call"
    assert_nothing_lost(result)
    history: ModelRequest = {"model": "m", "messages": [{"role": "assistant", "content": kept}]}  # type: ignore[typeddict-item]
    assert AnthropicMessagesAdapter().build_body(history)["messages"][0]["content"] == [
        {"type": "thinking", "thinking": "Search it.", "signature": "SIG1"},
        {"type": "redacted_thinking", "data": "REDACTED1"},
        {**use, "input": {"query": "weather"}},
        found,
        {"type": "text", "text": "It is sunny.", "citations": [citation]},
    ]


def test_anthropic_refusal_and_unknown_stop_reasons(tmp_path: Path) -> None:
    text = ({"type": "text", "text": ""}, [{"type": "text_delta", "text": "No."}])
    refused = replay(tmp_path, ANTHROPIC, _anthropic_stream(text, stop="refusal"))
    assert last(refused, "finish") == {"kind": "refusal", "message": "the model declined to answer (stop_reason refusal)"}
    paused = replay(tmp_path, ANTHROPIC, _anthropic_stream(text, stop="pause_turn"))
    assert last(paused, "finish") == {"kind": "stop", "raw": "pause_turn"}


def test_an_anthropic_refusals_stop_details_are_its_message(tmp_path: Path) -> None:
    # Newer answers explain a refusal in message_delta.delta.stop_details (a real recording,
    # llm-anthropic's test_refusal_raises): its category and explanation are the finish's message.
    details = {"type": "refusal", "category": "reasoning_extraction", "explanation": "This request was blocked."}
    events: list[Any] = [
        {"type": "message_start", "message": {"id": "m", "type": "message", "role": "assistant", "content": [], "usage": {"input_tokens": 97, "output_tokens": 0}}},
        {"type": "message_delta", "delta": {"stop_reason": "refusal", "stop_sequence": None, "stop_details": details},
         "usage": {"input_tokens": 97, "output_tokens": 0, "output_tokens_details": {"thinking_tokens": 0}}},
        {"type": "message_stop"},
    ]
    result = replay(tmp_path, ANTHROPIC, sse(*events, named=True))
    assert last(result, "finish") == {"kind": "refusal", "message": "the model declined to answer (stop_reason refusal, "
                                      "category reasoning_extraction): This request was blocked."}
    assert last(result, "usage") == {"input_tokens": 97, "output_tokens": 0, "reasoning_tokens": 0}
    assert result.report()["warnings"] == []
    # stop_details on another stop, or an unknown delta field, is not silently dropped
    events[1]["delta"] = {"stop_reason": "end_turn", "stop_details": {"type": "other"}, "novel": 1}
    other = replay(tmp_path, ANTHROPIC, sse(*events, named=True))
    assert last(other, "finish") == {"kind": "stop"}
    assert other.report()["warnings"] == ["skipped message_delta.delta.novel", "skipped stop_details"]


def test_an_anthropic_usage_count_the_kit_has_no_field_for_is_reported(tmp_path: Path) -> None:
    # A server-run web search is billed per request (pydantic-ai's web-search recording): the
    # count is not a token count, so it is reported, not dropped; zero counts are not.
    def answered(server_tool_use: dict[str, int]) -> ReplayResult:
        start_usage = {"input_tokens": 9, "output_tokens": 1, "server_tool_use": {"web_search_requests": 0}}
        return replay(tmp_path, ANTHROPIC, sse(
            {"type": "message_start", "message": {"id": "m", "type": "message", "role": "assistant", "content": [], "usage": start_usage}},
            {"type": "message_delta", "delta": {"stop_reason": "end_turn"},
             "usage": {"output_tokens": 30, "server_tool_use": server_tool_use, "cache_creation": {"ephemeral_5m_input_tokens": 4}}},
            {"type": "message_stop"}, named=True))

    searched = answered({"web_search_requests": 2, "web_fetch_requests": 0})
    assert last(searched, "usage") == {"input_tokens": 9, "output_tokens": 30}
    assert searched.report()["warnings"] == ["skipped usage.server_tool_use"]
    assert answered({"web_search_requests": 0}).report()["warnings"] == []


def test_an_unsigned_thought_is_not_sent_to_anthropic() -> None:
    history: ModelRequest = {"model": "m", "messages": [{"role": "assistant", "content": [{"type": "reasoning", "text": "t"}, {"type": "text", "text": "A"}]}]}
    assert AnthropicMessagesAdapter().build_body(history)["messages"][0]["content"] == [{"type": "text", "text": "A"}]


# --------------------------------------------------------------------------- OpenAI Responses


def test_responses_refusal_events_make_a_refusal(tmp_path: Path) -> None:
    item = {"type": "message", "id": "msg_1", "role": "assistant", "content": []}
    done = {**item, "content": [{"type": "refusal", "refusal": "Sorry, no."}]}
    result = replay(tmp_path, RESPONSES, sse(
        {"type": "response.output_item.added", "output_index": 0, "item": item},
        {"type": "response.refusal.delta", "output_index": 0, "content_index": 0, "delta": "Sorry, "},
        {"type": "response.refusal.delta", "output_index": 0, "content_index": 0, "delta": "no."},
        {"type": "response.refusal.done", "output_index": 0, "content_index": 0, "refusal": "Sorry, no."},
        {"type": "response.output_item.done", "output_index": 0, "item": done},
        {"type": "response.completed", "response": {"status": "completed", "output": [done], "usage": {"input_tokens": 5, "output_tokens": 3}}},
        named=True))
    assert blocks(result) == [{"type": "text", "text": "Sorry, no.", "provider_data": {"openai-responses": {"refusal": True, "id": "msg_1"}}}]
    assert last(result, "finish") == {"kind": "refusal", "message": "Sorry, no."}
    assert_nothing_lost(result)


def test_responses_encrypted_reasoning_items_come_back_in_order(tmp_path: Path) -> None:
    reasoning = {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAAA-enc"}
    call = {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "f", "arguments": '{"a": 1}', "status": "completed"}
    result = replay(tmp_path, RESPONSES, sse(
        {"type": "response.output_item.added", "output_index": 0, "item": {**reasoning, "encrypted_content": None}},
        {"type": "response.output_item.done", "output_index": 0, "item": reasoning},
        {"type": "response.output_item.added", "output_index": 1, "item": {**call, "arguments": ""}},
        {"type": "response.function_call_arguments.delta", "output_index": 1, "delta": '{"a": 1}'},
        {"type": "response.output_item.done", "output_index": 1, "item": call},
        {"type": "response.completed", "response": {"status": "completed", "usage": {"input_tokens": 5, "output_tokens": 3}}},
        named=True))
    kept = blocks(result)
    assert kept == [
        {"type": "reasoning", "text": "", "provider_data": {"openai-responses": {"item": reasoning}}},
        {"type": "tool-call", "id": "call_1", "name": "f", "arguments": '{"a": 1}', "provider_data": {"openai-responses": {"id": "fc_1"}}},
    ]
    history: ModelRequest = {"model": "m", "messages": [{"role": "assistant", "content": kept}]}  # type: ignore[typeddict-item]
    assert OpenAIResponsesAdapter().build_body(history)["input"] == [
        reasoning, {"type": "function_call", "call_id": "call_1", "name": "f", "arguments": '{"a": 1}', "id": "fc_1"}]


# --------------------------------------------------------------------------- Gemini


def gemini(*parts: dict[str, Any], finish: str | None = None, usage: dict[str, Any] | None = None, **extra: Any) -> str:
    candidate: dict[str, Any] = {"content": {"parts": list(parts), "role": "model"}, "index": 0}
    if finish:
        candidate["finishReason"] = finish
    body: dict[str, Any] = {"candidates": [candidate], "modelVersion": "gemini-2.5-flash", "responseId": "r1", **extra}
    if usage is not None:
        body["usageMetadata"] = usage
    return "data: " + json.dumps(body) + "\r\n\r\n"


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ("STOP", {"kind": "stop"}),
        ("MAX_TOKENS", {"kind": "max-tokens"}),
        *[(r, {"kind": "content-filter", "raw": r}) for r in ("SAFETY", "RECITATION", "LANGUAGE", "BLOCKLIST", "PROHIBITED_CONTENT", "SPII", "IMAGE_SAFETY")],
        ("MALFORMED_FUNCTION_CALL", {"kind": "error", "message": "the provider ended the response with MALFORMED_FUNCTION_CALL",
                                     "code": "MALFORMED_FUNCTION_CALL", "raw": "MALFORMED_FUNCTION_CALL"}),
        ("OTHER", {"kind": "stop", "raw": "OTHER"}),
        ("FINISH_REASON_UNSPECIFIED", {"kind": "stop", "raw": "FINISH_REASON_UNSPECIFIED"}),
    ],
)
def test_gemini_finish_reasons(tmp_path: Path, raw: str, reason: dict[str, str]) -> None:
    result = replay(tmp_path, GEMINI, gemini({"text": "x"}, finish=raw))
    assert last(result, "finish") == reason


def test_a_gemini_finish_message_explains_an_error_or_a_filter(tmp_path: Path) -> None:
    def finished(reason: str, message: str) -> str:
        body = {"candidates": [{"content": {"parts": [{"text": "x"}], "role": "model"}, "index": 0,
                                "finishReason": reason, "finishMessage": message}]}
        return "data: " + json.dumps(body) + "\r\n\r\n"

    malformed = replay(tmp_path, GEMINI, finished("MALFORMED_FUNCTION_CALL", "Malformed function call: print(x"))
    assert last(malformed, "finish") == {"kind": "error", "message": "Malformed function call: print(x",
                                         "code": "MALFORMED_FUNCTION_CALL", "raw": "MALFORMED_FUNCTION_CALL"}
    filtered = replay(tmp_path, GEMINI, finished("SAFETY", "Blocked for safety."))
    assert last(filtered, "finish") == {"kind": "content-filter", "message": "Blocked for safety.", "raw": "SAFETY"}
    stopped = replay(tmp_path, GEMINI, finished("STOP", "All done."))
    assert last(stopped, "finish") == {"kind": "stop"}
    assert stopped.report()["warnings"] == ["skipped candidate.finishMessage"]


def test_an_empty_gemini_text_part_opens_no_block(tmp_path: Path) -> None:
    # Gemini ends a function-call answer with {"text": ""} beside its finishReason (real
    # recordings: pydantic-ai, llm-gemini): no empty text block for a consumer to skip.
    call = {"functionCall": {"name": "f", "args": {"a": 1}}}
    result = replay(tmp_path, GEMINI, gemini(call) + gemini({"text": ""}, finish="STOP"))
    assert [b["type"] for b in blocks(result)] == ["tool-call"]
    assert last(result, "finish") == {"kind": "tool-calls"}
    signed = replay(tmp_path, GEMINI, gemini({"text": "", "thoughtSignature": "U0lH"}, finish="STOP"))
    assert blocks(signed) == [{"type": "text", "text": "", "provider_data": {"gemini": {"thoughtSignature": "U0lH"}}}]


def test_gemini_usage_fields_and_the_last_event_wins(tmp_path: Path) -> None:
    early = {"promptTokenCount": 15, "totalTokenCount": 15}
    final = {"promptTokenCount": 40, "candidatesTokenCount": 8, "thoughtsTokenCount": 21, "cachedContentTokenCount": 32, "totalTokenCount": 69}
    result = replay(tmp_path, GEMINI, gemini({"text": "a"}, usage=early) + gemini({"text": "b"}, finish="STOP", usage=final))
    assert last(result, "usage") == {"input_tokens": 40, "output_tokens": 8, "cache_read_tokens": 32, "reasoning_tokens": 21}


def test_gemini_signatures_keep_their_part_boundaries_and_their_alphabet(tmp_path: Path) -> None:
    standard = base64.b64encode(b"\xfb\xff\xfe signed").decode()
    urlsafe = base64.urlsafe_b64encode(b"\xfe\xfb\xff other").decode()
    assert "+" in standard or "/" in standard
    result = replay(tmp_path, GEMINI, gemini({"text": "Thinking ", "thought": True}, {"text": "hard.", "thought": True})
                    + gemini({"functionCall": {"name": "f", "args": {"q": "x"}}, "thoughtSignature": standard},
                             {"functionCall": {"name": "f", "args": {"q": "y"}}})
                    + gemini({"text": "Done"}, {"text": "", "thoughtSignature": urlsafe}, finish="STOP"))
    kept = blocks(result)
    assert kept == [
        {"type": "reasoning", "text": "Thinking hard."},
        {"type": "tool-call", "id": "r1_call_0", "name": "f", "arguments": '{"q":"x"}', "provider_data": {"gemini": {"thoughtSignature": standard}}},
        {"type": "tool-call", "id": "r1_call_1", "name": "f", "arguments": '{"q":"y"}'},
        {"type": "text", "text": "Done"},
        {"type": "text", "text": "", "provider_data": {"gemini": {"thoughtSignature": urlsafe}}},  # a signed part joins nothing
    ]
    assert last(result, "finish") == {"kind": "tool-calls"}  # Gemini says STOP after function calls too
    history: ModelRequest = {"model": "m", "messages": [
        {"role": "assistant", "content": kept},  # type: ignore[typeddict-item]
        {"role": "user", "content": [{"type": "tool-result", "tool_call_id": "r1_call_0", "content": [{"type": "text", "text": "1"}], "is_error": False}]},
        {"role": "user", "content": [{"type": "tool-result", "tool_call_id": "r1_call_1", "content": [{"type": "text", "text": "2"}], "is_error": True}]},
    ]}
    assert GeminiAdapter().build_body(history)["contents"] == [
        {"role": "model", "parts": [
            {"functionCall": {"name": "f", "args": {"q": "x"}}, "thoughtSignature": standard},  # the unsigned thought is not sent
            {"functionCall": {"name": "f", "args": {"q": "y"}}},
            {"text": "Done"},
            {"text": "", "thoughtSignature": urlsafe},
        ]},
        # Both answers in one content, by name (the calls had no id).
        {"role": "user", "parts": [{"functionResponse": {"name": "f", "response": {"output": "1"}}},
                                   {"functionResponse": {"name": "f", "response": {"error": "2"}}}]},
    ]


def test_a_blocked_gemini_prompt_is_a_content_filter_finish(tmp_path: Path) -> None:
    body = "data: " + json.dumps({"promptFeedback": {"blockReason": "PROHIBITED_CONTENT"}, "usageMetadata": {"promptTokenCount": 12, "totalTokenCount": 12}}) + "\r\n\r\n"
    result = replay(tmp_path, GEMINI, body)
    assert last(result, "finish") == {"kind": "content-filter", "message": "the prompt was blocked (PROHIBITED_CONTENT)", "raw": "PROHIBITED_CONTENT"}
    assert last(result, "usage") == {"input_tokens": 12, "output_tokens": 0}


def test_gemini_errors_in_the_stream_and_over_http(tmp_path: Path) -> None:
    failed = replay(tmp_path, GEMINI, gemini({"text": "par"}, usage={"promptTokenCount": 3}) + "data: " + json.dumps({"error": {"code": 503, "message": "overloaded", "status": "UNAVAILABLE"}}) + "\r\n\r\n")
    assert [c["type"] for c in failed.chunks][-3:] == ["block-end", "usage", "finish"]
    assert last(failed, "finish") == {"kind": "error", "message": "overloaded", "code": "UNAVAILABLE"}
    limited = replay(tmp_path, GEMINI, json.dumps({"error": {"code": 429, "message": "quota", "status": "RESOURCE_EXHAUSTED"}}), "application/json", status=429)
    assert (limited.error_status, limited.error_code) == (429, "RESOURCE_EXHAUSTED")


def test_a_gemini_stream_without_a_finish_reason_is_truncated(tmp_path: Path) -> None:
    with pytest.raises(CassetteError, match="truncated stream: event stream ended before a candidate's finishReason"):
        replay(tmp_path, GEMINI, gemini({"text": "cut"}))


def test_a_whole_gemini_response_and_its_code_execution_parts(tmp_path: Path) -> None:
    code = {"executableCode": {"language": "PYTHON", "code": "print(2+2)"}}
    output = {"codeExecutionResult": {"outcome": "OUTCOME_OK", "output": "4\n"}}
    body = {"candidates": [{"content": {"parts": [code, output, {"text": "It prints 4."}], "role": "model"}, "finishReason": "STOP"}],
            "usageMetadata": {"promptTokenCount": 9, "candidatesTokenCount": 6}}
    result = replay(tmp_path, GEMINI_WHOLE, json.dumps(body), "application/json", request={"contents": []})
    assert blocks(result) == [
        {"type": "text", "text": "", "provider_data": {"gemini": {"part": code}}},
        {"type": "text", "text": "", "provider_data": {"gemini": {"part": output}}},
        {"type": "text", "text": "It prints 4."},
    ]
    assert not result.streaming and last(result, "finish") == {"kind": "stop"}


# --------------------------------------------------------------------------- Bedrock


def frame(event: str, payload: dict[str, Any]) -> bytes:
    return encode_frame({":event-type": event, ":content-type": "application/json", ":message-type": "event"}, json.dumps(payload).encode())


def bedrock_stream(*middle: bytes, stop: str = "end_turn", usage: bool = True) -> bytes:
    out = frame("messageStart", {"role": "assistant"}) + b"".join(middle) + frame("messageStop", {"stopReason": stop})
    if usage:
        out += frame("metadata", {"usage": {"inputTokens": 20, "outputTokens": 9, "cacheReadInputTokens": 5, "cacheWriteInputTokens": 2}, "metrics": {"latencyMs": 1}})
    return out


def delta(index: int, payload: dict[str, Any]) -> bytes:
    return frame("contentBlockDelta", {"contentBlockIndex": index, "delta": payload})


def test_bedrock_reasoning_tool_use_and_usage(tmp_path: Path) -> None:
    body = bedrock_stream(
        delta(0, {"reasoningContent": {"text": "Check "}}), delta(0, {"reasoningContent": {"text": "it."}}), delta(0, {"reasoningContent": {"signature": "SIGB"}}),
        frame("contentBlockStop", {"contentBlockIndex": 0}),
        delta(1, {"reasoningContent": {"redactedContent": "UkVE"}}), frame("contentBlockStop", {"contentBlockIndex": 1}),
        frame("contentBlockStart", {"contentBlockIndex": 2, "start": {"toolUse": {"toolUseId": "tu_1", "name": "f"}}}),
        delta(2, {"toolUse": {"input": '{"city":'}}), delta(2, {"toolUse": {"input": ' "Paris"}'}}),
        frame("contentBlockStop", {"contentBlockIndex": 2}), stop="tool_use")
    result = replay(tmp_path, BEDROCK, body, "application/vnd.amazon.eventstream", request={"messages": []})
    kept = blocks(result)
    assert kept == [
        {"type": "reasoning", "text": "Check it.", "provider_data": {"bedrock": {"signature": "SIGB"}}},
        {"type": "reasoning", "text": "", "provider_data": {"bedrock": {"redactedContent": "UkVE"}}},
        {"type": "tool-call", "id": "tu_1", "name": "f", "arguments": '{"city": "Paris"}'},
    ]
    assert last(result, "usage") == {"input_tokens": 20, "output_tokens": 9, "cache_read_tokens": 5, "cache_write_tokens": 2}
    assert last(result, "finish") == {"kind": "tool-calls"}
    assert_nothing_lost(result)
    history: ModelRequest = {"model": "m", "messages": [{"role": "assistant", "content": kept}]}  # type: ignore[typeddict-item]
    assert BedrockConverseAdapter().build_body(history)["messages"][0]["content"] == [
        {"reasoningContent": {"reasoningText": {"text": "Check it.", "signature": "SIGB"}}},
        {"reasoningContent": {"redactedContent": "UkVE"}},
        {"toolUse": {"toolUseId": "tu_1", "name": "f", "input": {"city": "Paris"}}},
    ]


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ("end_turn", {"kind": "stop"}), ("stop_sequence", {"kind": "stop"}), ("max_tokens", {"kind": "max-tokens"}),
        ("guardrail_intervened", {"kind": "content-filter", "raw": "guardrail_intervened"}),
        ("content_filtered", {"kind": "content-filter", "raw": "content_filtered"}),
        ("model_context_window_exceeded", {"kind": "max-tokens", "raw": "model_context_window_exceeded"}),
        ("malformed_tool_use", {"kind": "error", "message": "the provider ended the response with malformed_tool_use", "code": "malformed_tool_use", "raw": "malformed_tool_use"}),
        ("something_new", {"kind": "stop", "raw": "something_new"}),
    ],
)
def test_bedrock_stop_reasons(tmp_path: Path, raw: str, reason: dict[str, str]) -> None:
    result = replay(tmp_path, BEDROCK, bedrock_stream(delta(0, {"text": "x"}), stop=raw), "application/vnd.amazon.eventstream", request={})
    assert last(result, "finish") == reason


def test_a_bedrock_exception_frame_after_the_stop_wins_and_keeps_the_usage(tmp_path: Path) -> None:
    exception = encode_frame({":exception-type": "throttlingException", ":content-type": "application/json", ":message-type": "exception"},
                             b'{"message": "Too many requests"}')
    body = bedrock_stream(delta(0, {"text": "Hi"}), usage=True) + exception
    ok = replay(tmp_path, BEDROCK, body, "application/vnd.amazon.eventstream", request={})
    assert last(ok, "finish") == {"kind": "stop"}, "metadata is terminal: a frame after it is not read"
    body = frame("messageStart", {"role": "assistant"}) + delta(0, {"text": "Hi"}) + frame("messageStop", {"stopReason": "end_turn"}) + exception
    failed = replay(tmp_path, BEDROCK, body, "application/vnd.amazon.eventstream", request={})
    assert last(failed, "finish") == {"kind": "error", "message": "Too many requests", "code": "throttlingException"}


def test_bedrock_http_errors_carry_the_amzn_error_type(tmp_path: Path) -> None:
    result = replay(tmp_path, BEDROCK, '{"message":"Too many tokens"}', "application/json", status=429, request={},
                    headers={"x-amzn-ErrorType": "ThrottlingException:http://internal.amazon.com/coral/com.amazon.bedrock/"})
    assert (result.error_status, result.error_code) == (429, "ThrottlingException")
    assert isinstance(asyncio.run(_error(tmp_path)), RateLimitError)  # what the loop sees: retryable


async def _error(tmp_path: Path) -> ProviderError:
    from cassettes.model import CassetteModel

    try:
        async for _ in CassetteModel(tmp_path / "c.yaml", pace=False).stream({"model": "m", "messages": []}):
            pass
    except ProviderError as exc:
        return exc
    raise AssertionError("no error")


def test_a_corrupted_bedrock_frame_is_a_one_line_cassette_error(tmp_path: Path) -> None:
    good = bedrock_stream(delta(0, {"text": "Hi"}))
    broken = good[:30] + bytes([good[30] ^ 0xFF]) + good[31:]  # flips a byte: the CRC no longer holds
    with pytest.raises(CassetteError, match="interaction 1: malformed event stream"):
        replay(tmp_path, BEDROCK, broken, "application/vnd.amazon.eventstream", request={})
    with pytest.raises(CassetteError, match="truncated event stream: the body ends mid-frame"):
        replay(tmp_path, BEDROCK, good[:-5], "application/vnd.amazon.eventstream", request={})


# --------------------------------------------------------------------------- Anthropic on Bedrock (InvokeModel)

INVOKE = "https://bedrock-runtime.us-east-1.amazonaws.com/model/us.anthropic.claude-sonnet-4-20250514-v1%3A0/invoke-with-response-stream"


def invoke_chunk(event: dict[str, Any]) -> bytes:
    """One InvokeModelWithResponseStream frame: the Anthropic event, base64 in ``bytes``."""
    return frame("chunk", {"bytes": base64.b64encode(json.dumps(event).encode()).decode()})


def invoke_stream(*events: dict[str, Any]) -> bytes:
    start = {"type": "message_start", "message": {"id": "msg_bdrk_1", "type": "message", "role": "assistant", "content": [],
                                                  "usage": {"input_tokens": 16, "output_tokens": 1}}}
    return b"".join(invoke_chunk(e) for e in (start, *events))


def test_anthropic_on_bedrock_invoke_stream_keeps_thinking_tools_and_usage(tmp_path: Path) -> None:
    stop = {"type": "message_stop", "amazon-bedrock-invocationMetrics": {"inputTokenCount": 16, "outputTokenCount": 21,
                                                                           "invocationLatency": 738, "firstByteLatency": 378}}
    body = invoke_stream(
        {"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "Weather: ask."}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "SIGA"}},
        {"type": "content_block_stop", "index": 0},
        {"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "Checking."}},
        {"type": "content_block_stop", "index": 1},
        {"type": "content_block_start", "index": 2, "content_block": {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {}}},
        {"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": '{"city": '}},
        {"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": '"Paris"}'}},
        {"type": "content_block_stop", "index": 2},
        {"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": None}, "usage": {"output_tokens": 21}},
        stop)
    result = replay(tmp_path, INVOKE, body, "application/vnd.amazon.eventstream",
                    request={"anthropic_version": "bedrock-2023-05-31", "max_tokens": 200, "messages": []})
    assert result.adapter == "anthropic" and result.streaming
    assert blocks(result) == [
        {"type": "reasoning", "text": "Weather: ask.", "provider_data": {"anthropic": {"signature": "SIGA"}}},
        {"type": "text", "text": "Checking."},
        {"type": "tool-call", "id": "toolu_1", "name": "weather", "arguments": '{"city": "Paris"}'},
    ]
    assert last(result, "usage") == {"input_tokens": 16, "output_tokens": 21}
    assert last(result, "finish") == {"kind": "tool-calls"}
    assert_nothing_lost(result)  # the visible count reads the base64 events too


def test_anthropic_on_bedrock_invoke_exception_frame_and_cut_stream(tmp_path: Path) -> None:
    text = invoke_stream({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
                         {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hi"}})
    exception = encode_frame({":exception-type": "modelStreamErrorException", ":content-type": "application/json",
                              ":message-type": "exception"}, b'{"message": "The model stream failed"}')
    failed = replay(tmp_path, INVOKE, text + exception, "application/vnd.amazon.eventstream", request={})
    assert blocks(failed) == [{"type": "text", "text": "Hi"}]
    assert last(failed, "finish") == {"kind": "error", "message": "The model stream failed", "code": "modelStreamErrorException"}
    with pytest.raises(CassetteError, match="truncated"):  # no message_stop: cut, not a success
        replay(tmp_path, INVOKE, text, "application/vnd.amazon.eventstream", request={})
    not_base64 = frame("chunk", {"bytes": "%%%"})
    with pytest.raises(CassetteError, match=r"interaction 1: .*not base64"):
        replay(tmp_path, INVOKE, not_base64, "application/vnd.amazon.eventstream", request={})


def test_anthropic_on_bedrock_invoke_whole_response_and_http_error(tmp_path: Path) -> None:
    whole = INVOKE.replace("invoke-with-response-stream", "invoke")
    message = {"id": "msg_bdrk_2", "type": "message", "role": "assistant", "model": "claude-sonnet-4-20250514",
               "content": [{"type": "text", "text": "Hello there."}], "stop_reason": "max_tokens",
               "usage": {"input_tokens": 9, "output_tokens": 3}}
    result = replay(tmp_path, whole, json.dumps(message), "application/json", request={"anthropic_version": "bedrock-2023-05-31"})
    assert not result.streaming and blocks(result) == [{"type": "text", "text": "Hello there."}]
    assert last(result, "finish") == {"kind": "max-tokens"} and last(result, "usage") == {"input_tokens": 9, "output_tokens": 3}
    assert_nothing_lost(result)
    throttled = replay(tmp_path, INVOKE, '{"message":"Too many requests, please wait before trying again."}', "application/json",
                       status=429, request={}, headers={"x-amzn-ErrorType": "ThrottlingException:http://internal.amazon.com/coral/com.amazon.bedrock/"})
    assert (throttled.error_status, throttled.error_code) == (429, "ThrottlingException")


def test_anthropic_on_bedrock_through_an_inference_profile_is_known_by_its_body(tmp_path: Path) -> None:
    # An application inference profile's ARN names no vendor: the recorded body's
    # anthropic_version says it is Anthropic's messages API (a Titan body at the same URL is not)
    from cassettes.providers import adapter_for_url

    arn = "arn%3Aaws%3Abedrock%3Aus-east-1%3A123456789012%3Aapplication-inference-profile%2Fabc123"
    url = f"https://bedrock-runtime.us-east-1.amazonaws.com/model/{arn}/invoke-with-response-stream"
    body = invoke_stream({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
                         {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hi"}},
                         {"type": "content_block_stop", "index": 0},
                         {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 1}},
                         {"type": "message_stop"})
    result = replay(tmp_path, url, body, "application/vnd.amazon.eventstream",
                    request={"anthropic_version": "bedrock-2023-05-31", "max_tokens": 10, "messages": []})
    assert result.adapter == "anthropic" and blocks(result) == [{"type": "text", "text": "Hi"}]
    assert adapter_for_url(url) is None  # the URL alone cannot tell
    assert adapter_for_url(url, {"inputText": "hi", "textGenerationConfig": {}}) is None


def test_anthropic_legacy_text_completions_on_bedrock_are_refused_not_read_as_empty(tmp_path: Path) -> None:
    # claude-instant's `prompt`/`completion` format on the same URL: not the messages API, so a
    # one-line cassette error, never an empty answer that loses the completion
    legacy = {"completion": " Hello", "stop_reason": "stop_sequence", "stop": "\n\nHuman:"}
    url = "https://bedrock-runtime.us-east-1.amazonaws.com/model/anthropic.claude-instant-v1/invoke-with-response-stream"
    with pytest.raises(CassetteError, match="legacy Text Completions format"):
        replay(tmp_path, url, invoke_chunk(legacy), "application/vnd.amazon.eventstream", request={"prompt": "Human: hi"})
    with pytest.raises(CassetteError, match="legacy Text Completions format"):
        replay(tmp_path, url.replace("invoke-with-response-stream", "invoke"), json.dumps(legacy), "application/json",
               request={"prompt": "Human: hi"})


def test_anthropic_on_bedrock_sends_what_invoke_model_takes() -> None:
    from cassettes.providers import adapter_for_url, replay_settings

    assert adapter_for_url(INVOKE) is AnthropicMessagesAdapter
    # InvokeModel serves every vendor's model in its own format: only Anthropic's are this API
    assert adapter_for_url("https://bedrock-runtime.us-east-1.amazonaws.com/model/amazon.titan-text-express-v1/invoke") is None
    settings = replay_settings(INVOKE, AnthropicMessagesAdapter, None, True)
    assert settings == {"base_url": "https://bedrock-runtime.us-east-1.amazonaws.com", "platform": "bedrock", "stream": True,
                        "model": "us.anthropic.claude-sonnet-4-20250514-v1:0"}
    request: ModelRequest = {"model": "ignored", "system": "Be brief.", "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]}
    adapter = AnthropicMessagesAdapter(**settings, api_key="bedrock-key")
    assert adapter.endpoint(request) == INVOKE
    assert adapter.build_body(request) == {"anthropic_version": "bedrock-2023-05-31", "max_tokens": 1024, "system": "Be brief.",
                                           "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]}
    assert adapter.auth_headers() == {"authorization": "Bearer bedrock-key"}
    assert adapter.headers()["accept"] == "application/vnd.amazon.eventstream"
    import httpx
    from botocore.credentials import Credentials

    signed = AnthropicMessagesAdapter(**settings, credentials=Credentials("AKIDEXAMPLE", "secret"))
    sent = signed.sign(httpx.Request("POST", INVOKE, json=signed.build_body(request), headers=signed.headers()))
    assert sent.headers["authorization"].startswith("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/") and "/us-east-1/bedrock/" in sent.headers["authorization"]
    assert AnthropicMessagesAdapter().sign(httpx.Request("POST", ANTHROPIC)).headers.get("authorization") is None
    with pytest.raises(ValueError, match="unknown platform"):
        AnthropicMessagesAdapter(platform="azure")


def test_gemini_stream_without_alt_sse_is_one_json_array(tmp_path: Path) -> None:
    events = [{"candidates": [{"content": {"parts": [{"text": "Hel"}], "role": "model"}}]},
              {"candidates": [{"content": {"parts": [{"text": "lo"}], "role": "model"}, "finishReason": "STOP"}],
               "usageMetadata": {"promptTokenCount": 4, "candidatesTokenCount": 2}}]
    url = GEMINI.replace("?alt=sse", "")
    result = replay(tmp_path, url, json.dumps(events), "application/json", request={"contents": []})
    assert result.streaming and blocks(result) == [{"type": "text", "text": "Hello"}]
    assert last(result, "usage") == {"input_tokens": 4, "output_tokens": 2}
    assert_nothing_lost(result)


def test_groq_server_tools_are_kept_not_reported(tmp_path: Path) -> None:
    executed = [{"index": 0, "type": "search", "arguments": '{"query": "x"}', "output": "results"}]
    result = replay(tmp_path, CHAT, sse(chat({"executed_tools": executed}), chat({"content": "Found."}, "stop"), "[DONE]"))
    assert blocks(result) == [{"type": "text", "text": "Found.", "provider_data": {"openai-chat": {"executed_tools": executed}}}]
    assert_nothing_lost(result)


# --------------------------------------------------------------------------- Gemini Interactions API

INTERACTIONS = "https://generativelanguage.googleapis.com/v1beta/interactions"


def step_events(*events: dict[str, Any], done: bool = True) -> str:
    """An Interactions stream: each event named by its ``event_type`` (as the API sends them)."""
    out = "".join(f"event: {e['event_type']}\ndata: {json.dumps(e)}\n\n" for e in events)
    return out + ("event: done\ndata: [DONE]\n\n" if done else "")


def completed(status: str = "completed", **interaction: Any) -> dict[str, Any]:
    return {"event_type": "interaction.completed", "interaction": {"id": "v1_x", "status": status, "object": "interaction", **interaction}}


def test_an_interactions_thinking_stream_keeps_summary_signature_text_and_usage(tmp_path: Path) -> None:
    """Shaped like a real recording (gemini-2.5-flash): summary deltas with empty signature deltas
    between them, the signature last, usage in the events' metadata and in the terminal event."""
    early = {"total_tokens": 79, "total_input_tokens": 11, "total_cached_tokens": 0, "total_output_tokens": 0, "total_thought_tokens": 68}
    final = {"total_tokens": 179, "total_input_tokens": 11, "input_tokens_by_modality": [{"modality": "text", "tokens": 11}],
             "total_cached_tokens": 0, "total_output_tokens": 42, "total_tool_use_tokens": 0, "total_thought_tokens": 126}
    body = step_events(
        {"interaction": {"id": "v1_x", "status": "in_progress", "object": "interaction", "model": "gemini-2.5-flash"},
         "event_type": "interaction.created", "metadata": {"usage": early}},
        {"interaction_id": "v1_x", "status": "in_progress", "event_type": "interaction.status_update"},
        {"index": 0, "step": {"type": "thought"}, "event_type": "step.start"},
        {"index": 0, "delta": {"content": {"text": "**Clarifying**\n\nBlue light scatters.", "type": "text"}, "type": "thought_summary"}, "event_type": "step.delta"},
        {"index": 0, "delta": {"signature": "", "type": "thought_signature"}, "event_type": "step.delta"},
        {"index": 0, "delta": {"content": {"text": " Two sentences.", "type": "text"}, "type": "thought_summary"}, "event_type": "step.delta"},
        {"index": 0, "delta": {"signature": "CiQBDDnW/x+9==", "type": "thought_signature"}, "event_type": "step.delta", "metadata": {"usage": early}},
        {"index": 0, "event_type": "step.stop"},
        {"index": 1, "step": {"type": "model_output"}, "event_type": "step.start"},
        {"index": 1, "delta": {"text": "The sky is blue because", "type": "text"}, "event_type": "step.delta"},
        {"index": 1, "delta": {"text": " of Rayleigh scattering.", "type": "text"}, "event_type": "step.delta", "metadata": {"usage": final}},
        {"index": 1, "event_type": "step.stop"},
        completed(usage=final, created="2026-06-05T17:35:35Z", updated="2026-06-05T17:35:35Z", service_tier="standard", model="gemini-2.5-flash"),
    )
    result = replay(tmp_path, INTERACTIONS, body, request={"input": "Why is the sky blue?", "model": "gemini-2.5-flash", "stream": True})
    assert result.adapter == "gemini-interactions" and result.streaming
    assert blocks(result) == [
        {"type": "reasoning", "text": "**Clarifying**\n\nBlue light scatters. Two sentences.",
         "provider_data": {"gemini-interactions": {"signature": "CiQBDDnW/x+9=="}}},
        {"type": "text", "text": "The sky is blue because of Rayleigh scattering."},
    ]
    assert last(result, "usage") == {"input_tokens": 11, "output_tokens": 42, "cache_read_tokens": 0, "reasoning_tokens": 126}
    assert last(result, "finish") == {"kind": "stop"}
    assert_nothing_lost(result)


def test_an_interactions_function_call_streams_its_arguments_and_goes_back_signed(tmp_path: Path) -> None:
    """A thought, then a signed call whose arguments arrive as string fragments (one of them
    naming the thought's index), then ``requires_action``; the history goes back as steps."""
    body = step_events(
        {"index": 0, "step": {"type": "thought", "signature": "c2lnLXRob3VnaHQ="}, "event_type": "step.start"},
        {"index": 0, "event_type": "step.stop"},
        {"index": 1, "step": {"type": "function_call", "id": "fc_1", "name": "get_weather", "arguments": {}, "signature": "c2lnLWNhbGw="},
         "event_type": "step.start"},
        {"index": 1, "delta": {"type": "arguments_delta", "arguments": '{"city":'}, "event_type": "step.delta"},
        {"index": 0, "delta": {"type": "arguments_delta", "arguments": ' "Paris"}'}, "event_type": "step.delta"},
        {"index": 1, "event_type": "step.stop"},
        completed("requires_action", usage={"total_input_tokens": 66, "total_output_tokens": 16, "total_thought_tokens": 51}),
    )
    result = replay(tmp_path, INTERACTIONS, body)
    kept = blocks(result)
    assert kept == [
        {"type": "reasoning", "text": "", "provider_data": {"gemini-interactions": {"signature": "c2lnLXRob3VnaHQ="}}},
        {"type": "tool-call", "id": "fc_1", "name": "get_weather", "arguments": '{"city": "Paris"}',
         "provider_data": {"gemini-interactions": {"signature": "c2lnLWNhbGw="}}},
    ]
    assert {"type": "tool-call-delta", "index": 1, "id": "fc_1", "name": "get_weather", "arguments_delta": ""} in [dict(c) for c in result.chunks]
    assert last(result, "finish") == {"kind": "tool-calls"}
    assert last(result, "usage") == {"input_tokens": 66, "output_tokens": 16, "reasoning_tokens": 51}
    assert_nothing_lost(result)

    history: ModelRequest = {"model": "gemini-3-flash-preview", "system": "Be brief.", "messages": [
        {"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"}]},
        {"role": "assistant", "content": [{"type": "reasoning", "text": "unsigned, from another provider"}, *kept]},  # type: ignore[list-item]
        {"role": "user", "content": [{"type": "tool-result", "tool_call_id": "fc_1", "content": [{"type": "text", "text": "Sunny"}], "is_error": False}]},
        {"role": "assistant", "content": [{"type": "text", "text": "It is sunny."}]},
        {"role": "user", "content": [{"type": "text", "text": "And in Tokyo?"}]},
    ], "tools": [{"name": "get_weather", "description": "Weather.", "input_schema": {"type": "object"}}]}
    from cassettes.providers import GeminiInteractionsAdapter

    adapter = GeminiInteractionsAdapter(max_tokens=100, thinking_level="low", api_key="k")
    sent = adapter.build_body(history)
    assert sent["input"] == [
        {"type": "user_input", "content": [{"type": "text", "text": "Weather in Paris?"}]},
        {"type": "thought", "signature": "c2lnLXRob3VnaHQ="},  # the unsigned thought is not sent
        {"type": "function_call", "id": "fc_1", "name": "get_weather", "arguments": {"city": "Paris"}, "signature": "c2lnLWNhbGw="},
        {"type": "function_result", "call_id": "fc_1", "name": "get_weather", "result": "Sunny"},
        {"type": "model_output", "content": [{"type": "text", "text": "It is sunny."}]},
        {"type": "user_input", "content": [{"type": "text", "text": "And in Tokyo?"}]},
    ]
    assert sent["system_instruction"] == "Be brief." and sent["model"] == "gemini-3-flash-preview" and sent["stream"] is True
    assert sent["tools"] == [{"type": "function", "name": "get_weather", "description": "Weather.", "parameters": {"type": "object"}}]
    assert sent["generation_config"] == {"max_output_tokens": 100, "thinking_level": "low", "thinking_summaries": "auto"}
    assert adapter.headers()["x-goog-api-key"] == "k"
    failed_result: ModelRequest = {"model": "m", "messages": [
        {"role": "assistant", "content": [{"type": "tool-call", "id": "c1", "name": "f", "arguments": ""}]},
        {"role": "user", "content": [{"type": "tool-result", "tool_call_id": "c1", "content": [{"type": "text", "text": "boom"}], "is_error": True}]},
    ]}
    assert GeminiInteractionsAdapter(stream=False).build_body(failed_result) == {"model": "m", "input": [
        {"type": "function_call", "id": "c1", "name": "f", "arguments": {}},
        {"type": "function_result", "call_id": "c1", "name": "f", "result": "boom", "is_error": True},
    ]}


def test_the_older_interactions_stream_content_events_and_a_whole_call(tmp_path: Path) -> None:
    """The first generation: ``content.start/delta/stop``, a function call whole in one delta,
    ``interaction.complete`` and no ``[DONE]``."""
    body = step_events(
        {"event_type": "interaction.start", "interaction": {"id": "int_1", "status": "in_progress"}},
        {"event_type": "content.start", "index": 0, "content": {"type": "text", "text": "Let me "}},
        {"event_type": "content.delta", "index": 0, "delta": {"type": "text", "text": "check."}},
        {"event_type": "content.stop", "index": 0},
        {"event_type": "content.start", "index": 1, "content": {"type": "function_call"}},
        {"event_type": "content.delta", "index": 1, "delta": {"type": "function_call", "id": "call-1", "name": "get_weather",
                                                               "arguments": {"location": "Paris"}}},
        {"event_type": "content.stop", "index": 1},
        {"event_type": "interaction.complete", "interaction": {"id": "int_1", "status": "completed", "role": "model",
                                                               "usage": {"totalInputTokens": 13, "totalOutputTokens": 8, "totalCachedTokens": 5}}},
        done=False,
    )
    result = replay(tmp_path, INTERACTIONS, body)
    assert blocks(result) == [
        {"type": "text", "text": "Let me check."},
        {"type": "tool-call", "id": "call-1", "name": "get_weather", "arguments": '{"location":"Paris"}'},
    ]
    assert {"type": "tool-call-delta", "index": 1, "id": "call-1", "name": "get_weather", "arguments_delta": ""} in [dict(c) for c in result.chunks]
    assert last(result, "usage") == {"input_tokens": 13, "output_tokens": 8, "cache_read_tokens": 5}
    assert last(result, "finish") == {"kind": "tool-calls"}  # completed, after a function call
    assert_nothing_lost(result)


@pytest.mark.parametrize(
    ("status", "reason"),
    [
        ("completed", {"kind": "stop"}),
        ("incomplete", {"kind": "max-tokens"}),
        ("budget_exceeded", {"kind": "max-tokens", "raw": "budget_exceeded"}),
        ("failed", {"kind": "error", "message": "the interaction ended failed", "code": "failed"}),
        ("cancelled", {"kind": "error", "message": "the interaction ended cancelled", "code": "cancelled"}),
        ("requires_action", {"kind": "stop", "raw": "requires_action"}),  # no call of the loop's to answer
        ("queued", {"kind": "stop", "raw": "queued"}),
    ],
)
def test_interactions_statuses_map_to_the_vocabulary(tmp_path: Path, status: str, reason: dict[str, str]) -> None:
    body = step_events({"index": 0, "step": {"type": "model_output", "content": [{"type": "text", "text": "x"}]}, "event_type": "step.start"},
                       {"index": 0, "event_type": "step.stop"}, completed(status))
    result = replay(tmp_path, INTERACTIONS, body)
    assert last(result, "finish") == reason and reason["kind"] in FINISH_VOCABULARY
    assert_nothing_lost(result)


def test_interactions_errors_in_the_stream_in_the_interaction_and_over_http(tmp_path: Path) -> None:
    usage = {"total_input_tokens": 7, "total_output_tokens": 1}
    failed = replay(tmp_path, INTERACTIONS, step_events(
        {"index": 0, "step": {"type": "model_output"}, "event_type": "step.start"},
        {"index": 0, "delta": {"type": "text", "text": "par"}, "event_type": "step.delta", "metadata": {"usage": usage}},
        {"event_type": "error", "error": {"code": "UNAVAILABLE", "message": "overloaded"}},
        completed(),  # nothing after the error is read
        done=False))
    assert [c["type"] for c in failed.chunks][-3:] == ["block-end", "usage", "finish"]
    assert last(failed, "finish") == {"kind": "error", "message": "overloaded", "code": "UNAVAILABLE"}
    assert last(failed, "usage") == {"input_tokens": 7, "output_tokens": 1}
    in_interaction = replay(tmp_path, INTERACTIONS, step_events(completed("failed", error={"code": "INTERNAL", "message": "it broke"})))
    assert last(in_interaction, "finish") == {"kind": "error", "message": "it broke", "code": "INTERNAL"}
    limited = replay(tmp_path, INTERACTIONS, json.dumps({"error": {"code": 429, "message": "quota", "status": "RESOURCE_EXHAUSTED"}}),
                     "application/json", status=429)
    assert (limited.error_status, limited.error_code) == (429, "RESOURCE_EXHAUSTED")
    with pytest.raises(CassetteError, match=r"truncated stream: event stream ended before interaction\.completed"):
        replay(tmp_path, INTERACTIONS, step_events({"index": 0, "step": {"type": "model_output"}, "event_type": "step.start"},
                                                   {"index": 0, "delta": {"type": "text", "text": "cut"}, "event_type": "step.delta"}))


def test_a_whole_interaction_its_input_echo_and_its_server_tool_steps(tmp_path: Path) -> None:
    search = {"type": "google_search_call", "id": "gs_1", "arguments": {"queries": ["weather Paris"]}, "signature": "c2ln"}
    found = {"type": "google_search_result", "call_id": "gs_1", "result": [{"search_suggestions": "<div/>"}], "signature": "c2ln"}
    body = {"id": "v1_x", "status": "completed", "object": "interaction", "model": "gemini-3-flash-preview",
            "steps": [{"type": "user_input", "content": [{"type": "text", "text": "Weather in Paris?"}]},
                      {"type": "thought", "summary": [{"type": "text", "text": "Search it."}], "signature": "dGg="},
                      search, found,
                      {"type": "model_output", "content": [{"type": "text", "text": "Sunny, 21 degrees."}]}],
            "usage": {"total_input_tokens": 9, "total_output_tokens": 6}}
    result = replay(tmp_path, INTERACTIONS, json.dumps(body), "application/json", request={"model": "m", "input": "Weather in Paris?"})
    kept = blocks(result)
    assert kept == [
        {"type": "reasoning", "text": "Search it.", "provider_data": {"gemini-interactions": {"signature": "dGg="}}},
        {"type": "text", "text": "", "provider_data": {"gemini-interactions": {"step": search}}},
        {"type": "text", "text": "", "provider_data": {"gemini-interactions": {"step": found}}},
        {"type": "text", "text": "Sunny, 21 degrees."},
    ]
    assert not result.streaming and last(result, "finish") == {"kind": "stop"}
    assert_nothing_lost(result)
    from cassettes.providers import GeminiInteractionsAdapter

    history: ModelRequest = {"model": "m", "messages": [{"role": "assistant", "content": kept}]}  # type: ignore[typeddict-item]
    assert GeminiInteractionsAdapter().build_body(history)["input"] == [
        {"type": "thought", "signature": "dGg=", "summary": [{"type": "text", "text": "Search it."}]}, search, found,
        {"type": "model_output", "content": [{"type": "text", "text": "Sunny, 21 degrees."}]},
    ]
    older = {"id": "int_1", "status": "completed", "outputs": [{"type": "thought", "signature": "dGg="}, {"type": "text", "text": "Hi."}]}
    assert blocks(replay(tmp_path, INTERACTIONS, json.dumps(older), "application/json", request={"model": "m", "input": "x"})) == [
        {"type": "reasoning", "text": "", "provider_data": {"gemini-interactions": {"signature": "dGg="}}},
        {"type": "text", "text": "Hi."},
    ]


def test_an_unknown_interactions_delta_is_reported_and_the_endpoint_is_matched_alone(tmp_path: Path) -> None:
    from cassettes.providers import adapter_for_url

    result = replay(tmp_path, INTERACTIONS, step_events(
        {"index": 0, "step": {"type": "model_output"}, "event_type": "step.start"},
        {"index": 0, "delta": {"type": "audio", "data": "AAAA"}, "event_type": "step.delta"},
        {"index": 0, "event_type": "step.stop"}, {"event_type": "step.rewind", "index": 0}, completed()))
    assert result.report()["warnings"] == ["skipped delta audio", "skipped event step.rewind"]
    assert adapter_for_url("https://aiplatform.googleapis.com/v1beta1/projects/p/locations/global/interactions").name == "gemini-interactions"  # type: ignore[union-attr]
    for url in (GEMINI, GEMINI_WHOLE, CHAT, RESPONSES, ANTHROPIC, BEDROCK, f"{INTERACTIONS}/v1_x", f"{INTERACTIONS}/v1_x/cancel"):
        found = adapter_for_url(url)
        assert found is None or found.name != "gemini-interactions", url
