"""A recorded stream replayed through the reference loop on the simulator, cancelled between two
recorded chunks: the turn ends ``aborted`` with exactly the chunks before the cancel, every run,
for every provider's stream format (SSE, Gemini's SSE without a terminator, Bedrock's binary
frames)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from cassettes.eventstream import EventStreamFraming
from cassettes.llm_cassette import Cassette
from cassettes.model import CassetteModel
from cassettes.providers import ADAPTERS
from cassettes.providers.base import SSEFraming
from reference_loop.vocabulary import Chunk

from .conftest import SHIPPED

simulator = pytest.importorskip("simulator")
service_module = pytest.importorskip("reference_loop.service")
if not hasattr(simulator, "run") or not hasattr(service_module, "AgentLoopService"):
    pytest.skip("the simulator or the reference loop is not there yet", allow_module_level=True)

PATH = SHIPPED / "openai-chat" / "tools.yaml"


def chunks_of_first_events(count: int, path: Any = PATH) -> list[Chunk]:
    """What the adapter yields for the first ``count`` recorded events, computed directly."""
    interaction = Cassette.load(path).interactions[0]
    assert interaction.events is not None
    translator = ADAPTERS[path.parent.name]().translator()
    framing = EventStreamFraming() if interaction.is_eventstream else SSEFraming()
    out: list[Chunk] = []
    for event in interaction.events[:count]:
        for decoded in framing.feed(event.data):
            out += translator.feed(decoded)
    if count >= len(interaction.events):
        out += translator.end()
    return out


def run_once(cancel_at: float, path: Any = PATH) -> dict[str, Any]:
    async def main() -> list[dict[str, Any]]:
        service = service_module.AgentLoopService()
        service.register_model("recorded", CassetteModel(path))
        agent = service.create("agent", {"model": "recorded"})
        agent.send("What is the weather in Paris and Tokyo?")
        asyncio.get_running_loop().call_at(cancel_at, agent.cancel)
        await agent.when_idle()
        return json.loads(json.dumps(agent.session.events))

    result = simulator.run(main, seed=7)
    assert result.outcome == "completed", result.traceback
    return {"events": result.value, "virtual_time": result.virtual_time}


def test_cancel_between_two_recorded_chunks_ends_the_turn_aborted_deterministically() -> None:
    events = Cassette.load(PATH).interactions[0].events
    assert events is not None
    # Between the arrival of event 9 and event 10: mid tool-call arguments.
    k = 9
    assert events[k].offset < events[k + 1].offset
    cancel_at = (events[k].offset + events[k + 1].offset) / 2
    expected = chunks_of_first_events(k + 1)
    assert expected and expected[-1]["type"] == "tool-call-delta"  # the cut lands inside a call

    first = run_once(cancel_at)
    log = first["events"]
    chunks = [e["data"]["chunk"] for e in log if e["type"] == "assistant/chunk"]
    assert chunks == expected
    ends = [e["data"]["reason"] for e in log if e["type"] == "turn/end"]
    assert ends == [{"kind": "aborted", "reason": "cancelled"}]
    assert not any(e["type"] in ("tool/call", "error") for e in log)
    # Identical on every run, to the byte (times included).
    again = run_once(cancel_at)
    assert json.dumps(again, sort_keys=True) == json.dumps(first, sort_keys=True)


@pytest.mark.parametrize("adapter", sorted(ADAPTERS))
def test_a_cancel_between_two_recorded_chunks_of_any_provider_keeps_exactly_the_earlier_ones(adapter: str) -> None:
    path = SHIPPED / adapter / "tools.yaml"
    events = Cassette.load(path).interactions[0].events
    assert events is not None
    k = len(events) // 2
    assert events[k].offset < events[k + 1].offset
    expected = chunks_of_first_events(k + 1, path)
    assert expected and expected[-1]["type"] != "finish"  # the cut lands mid-stream
    first = run_once((events[k].offset + events[k + 1].offset) / 2, path)
    log = first["events"]
    assert [e["data"]["chunk"] for e in log if e["type"] == "assistant/chunk"] == expected
    assert [e["data"]["reason"] for e in log if e["type"] == "turn/end"] == [{"kind": "aborted", "reason": "cancelled"}]
    assert not any(e["type"] in ("tool/call", "error") for e in log)
    again = run_once((events[k].offset + events[k + 1].offset) / 2, path)
    assert json.dumps(again, sort_keys=True) == json.dumps(first, sort_keys=True)


@pytest.mark.parametrize("adapter", sorted(ADAPTERS))
def test_without_cancel_the_whole_recording_plays_in_virtual_time(adapter: str) -> None:
    path = SHIPPED / adapter / "tools.yaml"
    events = Cassette.load(path).interactions[0].events
    assert events is not None
    run = run_once(3600.0, path)
    log = run["events"]
    chunks = [e["data"]["chunk"] for e in log if e["type"] == "assistant/chunk" and e["data"]["step"] == 1]
    assert chunks == chunks_of_first_events(len(events), path)
    assert chunks[-1] == {"type": "finish", "reason": {"kind": "tool-calls"}}
    # The recorded gaps passed in virtual time: the first step's last chunk came at the last offset.
    last = max(e["time"] for e in log if e["type"] == "assistant/chunk" and e["data"]["step"] == 1)
    first = min(e["time"] for e in log)
    assert last - first == pytest.approx(events[-1].offset * 1000, abs=1)
    # The tool calls then run (unknown tool here) and the next request finds the cassette spent:
    # the turn fails with the cassette's one-line error.
    (end,) = [e["data"]["reason"] for e in log if e["type"] == "turn/end"]
    assert end["kind"] == "error" and "no recorded interaction for POST" in end["message"]
