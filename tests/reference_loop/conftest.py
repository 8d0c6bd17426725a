"""Shared helpers for the reference loop's unit and end-to-end tests."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any, ClassVar

import pytest

from conformance.fakes.model import FakeModel
from reference_loop import AgentLoopService


class EchoTool:
    """A tool returning its arguments as JSON text."""

    name = "echo"
    description = "Echo the arguments back."
    input_schema: ClassVar[dict[str, Any]] = {"type": "object"}

    def __init__(self) -> None:
        self.calls: list[Any] = []

    async def execute(self, arguments: Any, context: Any) -> str:
        self.calls.append(arguments)
        return json.dumps(arguments)


class Recorder:
    """Records every agent/* notification of a service as ``(event, args...)`` tuples."""

    EVENTS = (
        "agent/status",
        "agent/queued",
        "agent/turn-start",
        "agent/turn-end",
        "agent/step-start",
        "agent/step-end",
        "agent/steering",
        "agent/error",
    )

    def __init__(self, svc: AgentLoopService) -> None:
        self.log: list[tuple[Any, ...]] = []
        for name in self.EVENTS:
            svc.bus.on(name, self._make(name))

    def _make(self, name: str) -> Callable[..., None]:
        def listener(agent: Any, *args: Any) -> None:
            self.log.append((name, *args))

        return listener

    def of(self, name: str) -> list[tuple[Any, ...]]:
        return [entry[1:] for entry in self.log if entry[0] == name]


def types(agent: Any) -> list[str]:
    """The session event types, assistant chunks left out."""
    return [e["type"] for e in agent.session.events if e["type"] != "assistant/chunk"]


def turn_ends(agent: Any) -> list[dict[str, Any]]:
    return [e["data"]["reason"] for e in agent.session.events if e["type"] == "turn/end"]


def make_service(*responses: Any, **kwargs: Any) -> tuple[AgentLoopService, FakeModel]:
    svc = AgentLoopService(**kwargs)
    model = FakeModel(list(responses))
    svc.register_model("m", model)
    return svc, model


@pytest.fixture
def arun() -> Callable[[Callable[[], Awaitable[Any]]], Any]:
    """Run an async test body under plain asyncio with a timeout (a hang fails, not blocks)."""

    def runner(body: Callable[[], Awaitable[Any]]) -> Any:
        async def guarded() -> Any:
            return await asyncio.wait_for(body(), timeout=5)

        return asyncio.run(guarded())

    return runner
