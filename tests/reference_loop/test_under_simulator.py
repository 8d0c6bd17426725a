"""The loop runs unmodified under the simulator: explored schedules, invariants, byte replay."""

from __future__ import annotations

import json
from typing import Any

import pytest

import simulator
from conformance.fakes.model import FakeModel, respond
from reference_loop import AgentLoopService
from simulator.strategies import PCTStrategy, RandomStrategy

from .conftest import EchoTool


def balanced(events: list[dict[str, Any]]) -> None:
    """LOG-3/4/5: contiguous seq, turns and steps pair and nest, nothing outside a turn."""
    turn: int | None = None
    step: int | None = None
    for index, event in enumerate(events):
        assert event["seq"] == index
        kind, data = event["type"], event["data"]
        if kind == "turn/start":
            assert turn is None
            turn = data["turn"]
            continue
        assert turn is not None, f"{kind} outside a turn"
        if kind == "turn/end":
            assert step is None and data["turn"] == turn
            turn = None
        elif kind == "step/start":
            assert step is None
            step = data["step"]
        elif kind == "step/end":
            assert step == data["step"]
            step = None
        elif kind == "assistant/chunk":
            assert step is not None
    assert turn is None


def scenario() -> Any:
    async def main() -> str:
        svc = AgentLoopService()
        svc.register_model(
            "m",
            FakeModel(
                [
                    respond.text("a") + respond.tool_call("echo", {"n": 1}),
                    respond.text("b"),
                    respond.text("c"),
                    respond.text("d"),
                    respond.text("e"),
                ]
            ),
        )
        svc.register_tool(EchoTool())
        agent = svc.create("a", {"model": "m"})
        released: list[tuple[str, bool]] = []

        def on_status(_a: Any, status: str) -> None:
            if status == "running" and not released:
                agent.cancel("w2")
                agent.send("replacement")

        svc.bus.on("agent/status", on_status)
        agent.send("first")
        await agent.when_idle()
        released.append((agent.status, agent._inbox.has_queued))
        agent.send("second")
        agent.steer("steer me")
        waiter = agent.when_idle()
        agent.cancel()
        agent.send("third")
        await waiter
        released.append((agent.status, agent._inbox.has_queued))
        await svc.close()
        events = agent.session.events
        balanced(events)  # type: ignore[arg-type]
        assert all(status == "idle" and not queued for status, queued in released)
        return json.dumps(events, sort_keys=True)

    return main


@pytest.mark.parametrize("seed", range(6))
def test_explored_schedules_keep_invariants(seed: int) -> None:
    for strategy in (RandomStrategy(seed=seed), PCTStrategy(depth=2, seed=seed)):
        result = simulator.run(scenario(), strategy=strategy, seed=seed)
        assert result.outcome == "completed", (result.outcome, result.error)


def test_same_seed_same_bytes() -> None:
    first = simulator.run(scenario(), strategy=RandomStrategy(seed=3), seed=3)
    second = simulator.run(scenario(), strategy=RandomStrategy(seed=3), seed=3)
    assert first.outcome == second.outcome == "completed"
    assert first.value == second.value
    events = json.loads(first.value)
    assert events[0]["time"] == events[0]["time"] // 1  # stamped by the simulated clock
    users = [e["data"]["content"][0]["text"] for e in events if e["type"] == "user/message"]
    assert users == ["replacement", "third"]
