"""The conformance adapter for ``tiny_loop``: what a third party writes to be checked.

Run it with ``loopkit conformance --impl examples.tiny_loop.adapter:implementation``.
``TinyHandle`` maps the suite's ``ServiceHandle`` onto ``TinyService``; the agents and sessions
already have the shape the suite drives, so they are passed through unchanged.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any

from conformance.adapter import AgentHandle

from .loop import TinyService


class TinyHandle:
    """``ServiceHandle`` over a ``TinyService``."""

    def __init__(self) -> None:
        self.service = TinyService()

    def on(self, event: str, listener: Callable[..., Any]) -> Callable[[], object]:
        return self.service.bus.on(event, listener)

    def register_model(self, name: str, adapter: Any) -> Callable[[], object]:
        return self.service.register_model(name, adapter)

    def register_tool(self, tool: Any) -> Callable[[], object]:
        return self.service.register_tool(tool)

    def add_system_prompt_section(self, name: str, text: str) -> Callable[[], object]:
        self.service.sections.append(text)  # stored, never sent: SVC-5 fails, as it should
        return lambda: None

    def create(self, agent_id: str, options: Mapping[str, Any] | None = None) -> AgentHandle:
        session_id = f"{agent_id}-session-{len(self.service.agents)}"
        return self.service.create_agent(agent_id, session_id, dict(options or {}))  # type: ignore[return-value]

    def create_agent(self, agent_id: str, session_id: str, meta: Mapping[str, Any] | None = None,
                     agent_options: Mapping[str, Any] | None = None) -> AgentHandle:
        return self.service.create_agent(agent_id, session_id, dict(agent_options or {}))  # type: ignore[return-value]

    async def resume(self, agent_id: str, resume_session_id: str,
                     agent_options: Mapping[str, Any] | None = None) -> AgentHandle:
        raise NotImplementedError("tiny_loop has no persistence")

    def get(self, agent_id: str) -> AgentHandle | None:
        return self.service.agents.get(agent_id)  # type: ignore[return-value]

    def load_config(self, config: Mapping[str, Any]) -> object:
        raise NotImplementedError("tiny_loop has no configuration")

    async def close(self) -> None:
        await self.service.close()

    def driver_task(self, agent: AgentHandle) -> asyncio.Task[Any] | None:
        return getattr(agent, "task", None)


class TinyImplementation:
    """The ``Implementation`` object the suite resolves."""

    name = "tiny_loop"
    features: frozenset[Any] = frozenset()  # no persistence, configuration or injection
    logger_name = "examples.tiny_loop"

    def create_service(self, *, persistence: object | None = None) -> TinyHandle:
        return TinyHandle()

    def new_persistence(self) -> object:
        raise NotImplementedError("tiny_loop has no persistence")


implementation = TinyImplementation()
