"""The round trip (issue 14, point 2): what a provider needs back reaches its next request.

For each provider, the reference loop runs a thinking-plus-tools turn against the local test
server through the real adapter: the model thinks (signed, and redacted where the API has it),
calls ``get_weather``, the tool answers, and the loop's next request must carry what the real
provider requires (``provider_data`` carried by the loop into history, sent back by the adapter),
or the server rejects it with the provider's own 400. Each test also proves the server is strict:
the same conversation with that data stripped on the way (a loop that drops ``provider_data``, or
for DeepSeek the reasoning itself) ends the turn in that error.
"""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import Callable
from typing import Any

import pytest

from cassettes.llm_cassette import Cassette
from cassettes.model import CassetteModel
from cassettes.providers import ADAPTERS
from cassettes.testserver import (
    ANSWER,
    ENCRYPTED,
    REASONING_DETAILS,
    REDACTED,
    ROUND_TRIP_SIGNATURE,
    SEARCH_RESULT,
    WEATHER_TOOL,
    serve,
)
from conformance.fakes import FakeTool
from reference_loop.service import AgentLoopService

from .conftest import SHIPPED

Strip = Callable[[dict[str, Any]], dict[str, Any]]


def drop_provider_data(message: dict[str, Any]) -> dict[str, Any]:
    """What a loop that does not carry ``provider_data`` would log and send back."""
    return {**message, "content": [{k: v for k, v in b.items() if k != "provider_data"} for b in message["content"]]}


def drop_reasoning(message: dict[str, Any]) -> dict[str, Any]:
    """What a loop that forgets reasoning would send back (DeepSeek's requirement is the text)."""
    return {**message, "content": [b for b in message["content"] if b["type"] != "reasoning"]}


async def run_turn(adapter: str, base_url: str, model: str, strip: Strip | None = None) -> list[dict[str, Any]]:
    service = AgentLoopService()
    service.register_model("m", ADAPTERS[adapter](base_url=base_url, model=model))
    service.register_tool(FakeTool("get_weather", "Sunny, 21 C.", description=WEATHER_TOOL["description"],
                                   input_schema=WEATHER_TOOL["input_schema"], latency=None))
    if strip is not None:
        async def rewrite(agent: Any, turn: int, step: int, message: dict[str, Any], next_: Any) -> Any:
            return strip(copy.deepcopy(await next_()))

        service.on("agent/step-result", rewrite)
    agent = service.create("a", {"model": "m"})
    agent.send("What is the weather in Paris?")
    await agent.when_idle()
    events = json.loads(json.dumps(agent.session.events))
    await service.close()
    return events


def turn_end(events: list[dict[str, Any]]) -> dict[str, Any]:
    (end,) = [e["data"]["reason"] for e in events if e["type"] == "turn/end"]
    return end  # type: ignore[no-any-return]


def last_text(events: list[dict[str, Any]]) -> str:
    messages = [e["data"]["content"] for e in events if e["type"] == "assistant/message"]
    return "".join(b.get("text", "") for b in messages[-1] if b["type"] == "text")


# adapter, what the second request must hold (a substring of its body), the stripping that breaks it
CASES = [
    ("openai-chat", '"reasoning_content": "The user wants the weather in Paris: call the tool."', drop_reasoning),
    ("anthropic", f'"signature": "{ROUND_TRIP_SIGNATURE}"', drop_provider_data),
    ("openai-responses", f'"encrypted_content": "{ENCRYPTED}"', drop_provider_data),
    ("gemini", f'"thoughtSignature": "{ROUND_TRIP_SIGNATURE}"', drop_provider_data),
    ("bedrock", f'"redactedContent": "{REDACTED}"', drop_provider_data),
    ("gemini-interactions", f'"signature": "{ROUND_TRIP_SIGNATURE}"', drop_provider_data),
]


@pytest.mark.parametrize(("adapter", "needle", "strip"), CASES, ids=[c[0] for c in CASES])
def test_thinking_plus_tools_round_trip_through_the_reference_loop(adapter: str, needle: str, strip: Strip) -> None:
    with serve(delay=0.0) as server:
        events = asyncio.run(run_turn(adapter, server.base_url, "thinking-tools"))
        second = server.requests[-1].body
        broken = asyncio.run(run_turn(adapter, server.base_url, "thinking-tools", strip))
    assert turn_end(events) == {"kind": "completed"}
    assert last_text(events) == ANSWER
    assert needle in json.dumps(json.loads(second)), "the follow-up must carry what the provider requires"
    end = turn_end(broken)
    assert end["kind"] == "error" and "HTTP 400" in end["message"] and end.get("code")
    assert [e["data"]["message"] for e in broken if e["type"] == "error"] == [end["message"]]


def test_server_tools_and_reasoning_details_survive_a_second_turn() -> None:
    """Anthropic's server-run search (with its result and citations), OpenRouter's
    reasoning_details, Responses' web search item and the Interactions API's search steps come
    back unchanged on the next turn's request."""

    async def two_turns(adapter: str, base_url: str, strip: Strip | None) -> list[dict[str, Any]]:
        service = AgentLoopService()
        service.register_model("m", ADAPTERS[adapter](base_url=base_url, model="server-tools"))
        if strip is not None:
            async def rewrite(agent: Any, turn: int, step: int, message: dict[str, Any], next_: Any) -> Any:
                return strip(copy.deepcopy(await next_()))

            service.on("agent/step-result", rewrite)
        agent = service.create("a", {"model": "m"})
        for prompt in ("Weather in Paris?", "And tomorrow?"):
            agent.send(prompt)
            await agent.when_idle()
        events = json.loads(json.dumps(agent.session.events))
        await service.close()
        return events

    with serve(delay=0.0) as server:
        for adapter, needle in (("anthropic", json.dumps(SEARCH_RESULT["content"])), ("openai-chat", json.dumps(REASONING_DETAILS[1])),
                                ("openai-responses", '"web_search_call"'), ("gemini-interactions", '"google_search_result"')):
            events = asyncio.run(two_turns(adapter, server.base_url, None))
            assert [turn_end_of(events, n) for n in (1, 2)] == [{"kind": "completed"}] * 2, adapter
            assert needle[1:-1] in json.dumps(json.loads(server.requests[-1].body)), adapter
            broken = asyncio.run(two_turns(adapter, server.base_url, drop_provider_data))
            assert turn_end_of(broken, 2)["kind"] == "error", adapter


def turn_end_of(events: list[dict[str, Any]], turn: int) -> dict[str, Any]:
    (end,) = [e["data"]["reason"] for e in events if e["type"] == "turn/end" and e["data"]["turn"] == turn]
    return end  # type: ignore[no-any-return]


@pytest.mark.parametrize("adapter", sorted(ADAPTERS))
def test_the_shipped_round_trip_cassette_replays_the_whole_turn(adapter: str) -> None:
    """The shipped ``thinking_tools`` cassettes (recorded with ``--answer-tools``) drive a whole
    thinking-plus-tools turn, and their second request shows what went back."""
    path = SHIPPED / adapter / "thinking_tools.yaml"

    async def run() -> list[dict[str, Any]]:
        service = AgentLoopService()
        model = CassetteModel(path, pace=False, strict=True)
        service.register_model("m", model)
        service.register_tool(FakeTool("get_weather", "Sunny, 21 C.", latency=None))
        agent = service.create("a", {"model": "m"})
        agent.send("Say hello.")
        await agent.when_idle()
        model.assert_all_played()
        events = json.loads(json.dumps(agent.session.events))
        await service.close()
        return events

    events = asyncio.run(run())
    assert turn_end(events) == {"kind": "completed"} and last_text(events) == ANSWER
    first, second = Cassette.load(path).interactions
    assert first.status == second.status == 200
    needle = dict((c[0], c[1]) for c in CASES)[adapter]
    assert needle in json.dumps(second.request_json)
