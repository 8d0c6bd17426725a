"""``AgentLoopService``: one bus, the model/tool/system-prompt registries, and the live agents.

Creating (SVC-1, SVC-2), resuming from a persistence backend (SVC-3), agents from configuration
(SVC-4), lookup and removal on disposal (SVC-6), closing (SVC-7). Time and ids come from the
``Sources`` read when the service is created (PY-3).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Mapping
from typing import Any

from .agent import ReactLoopAgent
from .bus import EventBus, Listener
from .config import ConfigError, read_config
from .persistence import SessionPersistence
from .protocols import ModelAdapter, Tool
from .session import Session, make_header
from .sources import Sources, default_sources
from .system_prompt import SystemPromptSections
from .tools import ToolRegistry


class ServiceError(RuntimeError):
    """A service call that cannot be honoured (duplicate id, no persistence, closed service)."""


class AgentLoopService:
    """Creates and owns ``ReactLoopAgent``s that share one ``EventBus``.

    ``agent_class`` is the class instantiated for every agent: a subclass (for example a
    deliberately broken variant checked by the conformance suite) plugs in by overriding it.
    """

    agent_class: type[ReactLoopAgent] = ReactLoopAgent

    def __init__(
        self, sources: Sources | None = None, persistence: SessionPersistence | None = None
    ) -> None:
        self.sources: Sources = sources if sources is not None else default_sources()
        self.persistence = persistence
        self.bus = EventBus()
        self.tools = ToolRegistry()
        self.prompts = SystemPromptSections()
        self._models: dict[str, ModelAdapter] = {}
        self._agents: dict[str, ReactLoopAgent] = {}
        self._created: list[ReactLoopAgent] = []
        self._closed = False
        if persistence is not None:
            # Persistence is just two listeners on the bus (session/event + session/flush).
            self.bus.on(
                "session/event", lambda session, event: persistence.record(session.id, event)
            )
            self.bus.on("session/flush", lambda session: persistence.flush(session.id))

    # ------------------------------------------------------------------ registries

    def on(self, event: str, listener: Listener) -> Callable[[], None]:
        """Shorthand for ``bus.on``."""
        return self.bus.on(event, listener)

    def register_model(self, name: str, adapter: ModelAdapter) -> Callable[[], None]:
        """Serve requests whose ``model`` is ``name`` with ``adapter``; returns a disposer."""
        if not isinstance(name, str) or not name:
            raise TypeError(f"register_model: name must be a non-empty string, got {name!r}")
        if not callable(getattr(adapter, "stream", None)):
            raise TypeError(f"register_model({name!r}): adapter has no stream(request) method")
        self._models[name] = adapter

        def dispose() -> None:
            if self._models.get(name) is adapter:
                del self._models[name]

        return dispose

    def model_adapter(self, name: str) -> ModelAdapter | None:
        """The adapter registered under ``name``."""
        return self._models.get(name)

    def register_tool(self, tool: Tool) -> Callable[[], None]:
        """Register a tool for the default ``tools/execute`` handler; returns a disposer."""
        return self.tools.register(tool)

    def add_system_prompt_section(self, name: str, text: str) -> Callable[[], None]:
        """Add a system-prompt section (SVC-5); returns a disposer."""
        return self.prompts.add(name, text)

    # ------------------------------------------------------------------ agents

    def create(self, agent_id: str, options: Mapping[str, Any] | None = None) -> ReactLoopAgent:
        """SVC-1: an agent on a fresh session ``{agent_id}-session-{uuid}``."""
        self._check_new(agent_id)
        opts = _options(options)
        return self._make(agent_id, f"{agent_id}-session-{self.sources.uuid()}", opts, None, ())  # no cwd

    def create_agent(
        self,
        agent_id: str,
        session_id: str,
        meta: Mapping[str, Any] | None = None,
        agent_options: Mapping[str, Any] | None = None,
    ) -> ReactLoopAgent:
        """SVC-2: an agent on the caller's session id, taken as given."""
        self._check_new(agent_id)
        if not isinstance(session_id, str) or not session_id:
            raise ValueError(
                f"create_agent: session_id must be a non-empty string, got {session_id!r}"
            )
        return self._make(agent_id, session_id, _options(agent_options), meta, ())

    async def resume(
        self,
        agent_id: str,
        resume_session_id: str,
        agent_options: Mapping[str, Any] | None = None,
    ) -> ReactLoopAgent:
        """SVC-3: an agent on a persisted session; turns and history continue from its log."""
        if self.persistence is None:
            raise ServiceError(
                f"cannot resume session {resume_session_id!r}: this service has no session "
                "persistence backend (create it with persistence=...)"
            )
        self._check_new(agent_id)
        opts = _options(agent_options)
        events = await self.persistence.load(resume_session_id)
        if events is None:
            raise ServiceError(f"cannot resume: no persisted session {resume_session_id!r}")
        load_header = getattr(self.persistence, "load_header", None)
        header = await load_header(resume_session_id) if load_header is not None else None
        self._check_new(agent_id)  # the load awaited: someone may have taken the id meanwhile
        if header is None:  # a backend (or a log) without headers: what the log itself tells
            header = {"created": events[0]["time"] if events else int(self.sources.now_ms()),
                      "cwd": None, "parent_session": None}
        return self._make(agent_id, resume_session_id, opts, None, events, header)

    def _make(
        self,
        agent_id: str,
        session_id: str,
        options: dict[str, Any],
        meta: Mapping[str, Any] | None,
        events: Any,
        header: Mapping[str, Any] | None = None,
    ) -> ReactLoopAgent:
        if header is None:  # a new session: its header, kept by the backend for a later resume
            header = make_header(session_id, self.sources, meta)
            record_header = getattr(self.persistence, "record_header", None)
            if record_header is not None:
                record_header(session_id, dict(header))
        session = Session(session_id, self.bus, self.sources, events, header)
        agent = self.agent_class(self, agent_id, session, options, meta, on_dispose=self._forget)
        self._agents[agent_id] = agent
        self._created.append(agent)
        return agent

    def _forget(self, agent: ReactLoopAgent) -> None:
        """SVC-6: disposal removes the agent from the registry."""
        if self._agents.get(agent.id) is agent:
            del self._agents[agent.id]

    def _check_new(self, agent_id: str) -> None:
        if self._closed:
            raise ServiceError("the service is closed")
        if not isinstance(agent_id, str) or not agent_id:
            raise ValueError(f"agent id must be a non-empty string, got {agent_id!r}")
        if agent_id in self._agents:  # SVC-2: rejected before any session is created
            raise ServiceError(f"an agent with id {agent_id!r} already exists")

    def get(self, agent_id: str) -> ReactLoopAgent | None:
        """SVC-6: the live agent with this id."""
        return self._agents.get(agent_id)

    def agents(self) -> list[ReactLoopAgent]:
        """The live agents, in creation order."""
        return list(self._agents.values())

    def driver_task(self, agent: ReactLoopAgent) -> asyncio.Task[None] | None:
        """The task running ``agent``'s driver loop."""
        return agent.driver_task

    def load_config(
        self, config: str | os.PathLike[str] | Mapping[str, Any]
    ) -> list[ReactLoopAgent]:
        """SVC-4: create the agents a configuration (YAML file or mapping) lists.

        The whole configuration is validated first; ``ConfigError`` names the bad field.
        """
        entries = read_config(config)
        for index, entry in enumerate(entries):
            if entry.id in self._agents:
                raise ConfigError(
                    f"agents[{index}].id: an agent with id {entry.id!r} already exists"
                )
        return [self.create(entry.id, entry.options()) for entry in entries]

    async def close(self) -> None:
        """SVC-7: dispose every agent this service created and wait for their drivers."""
        self._closed = True
        for agent in list(self._created):
            agent.dispose()
        for agent in list(self._created):
            if agent.in_driver():
                continue  # a plugin on this agent's driver awaits the close: the driver exits once it returns
            await agent.wait_exited()


def _options(options: Mapping[str, Any] | None) -> dict[str, Any]:
    """Agent options: ``model`` and ``system_prompt`` must be strings when given."""
    if options is None:
        return {}
    if not isinstance(options, Mapping):
        raise TypeError(f"agent options must be a mapping, got {type(options).__name__}")
    for key in ("model", "system_prompt"):
        value = options.get(key)
        if value is not None and not isinstance(value, str):
            raise TypeError(f"agent options: {key} must be a string, got {value!r}")
    return dict(options)
