"""The service: one bus, model and tool registries, system prompt sections, agents."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from .agent import Agent
from .core import Bus, LoopError, Sources
from .session import MemoryPersistence, Session


class ConfigError(ValueError):
    pass


class Service:
    agent_class: type[Agent] = Agent
    """The class of the agents it creates (a variant of the loop overrides it)."""

    def __init__(self, *, persistence: MemoryPersistence | None = None, sources: Sources | None = None) -> None:
        self.bus = Bus()
        self._sources = sources or Sources()
        self._persistence = persistence
        self._models: dict[str, list[Any]] = {}
        self._tools: dict[str, list[Any]] = {}
        self._sections: list[list[Any]] = []
        self._agents: dict[str, Agent] = {}
        self._created: list[Agent] = []
        self._closed = False

    # ---------------------------------------------------------------- registries
    def on(self, event: str, listener: Any):  # type: ignore[no-untyped-def]
        return self.bus.on(event, listener)

    def register_model(self, name: str, adapter: Any):  # type: ignore[no-untyped-def]
        entry = [adapter]
        self._models.setdefault(name, []).append(entry)
        return lambda: _remove(self._models.get(name, []), entry)

    def model(self, name: Any) -> Any:
        if not isinstance(name, str):
            return None
        entries = self._models.get(name)
        return entries[-1][0] if entries else None

    def register_tool(self, tool: Any):  # type: ignore[no-untyped-def]
        entry = [tool]
        self._tools.setdefault(tool.name, []).append(entry)
        return lambda: _remove(self._tools.get(tool.name, []), entry)

    def tool(self, name: Any) -> Any:
        if not isinstance(name, str):
            return None
        entries = self._tools.get(name)
        return entries[-1][0] if entries else None

    def tool_schemas(self) -> list[dict[str, Any]]:
        out = []
        for name, entries in self._tools.items():
            if not entries:
                continue
            tool = entries[-1][0]
            schema = getattr(tool, "input_schema", None)
            if callable(schema):
                schema = schema()
            out.append({"name": name, "description": str(getattr(tool, "description", "") or ""),
                        "input_schema": dict(schema) if isinstance(schema, Mapping) else {"type": "object"}})
        return out

    def add_system_prompt_section(self, name: str, text: str):  # type: ignore[no-untyped-def]
        entry = [name, text]
        self._sections.append(entry)
        return lambda: _remove(self._sections, entry)

    def sections(self) -> list[tuple[str, str]]:
        return [(e[0], e[1]) for e in self._sections]

    # ---------------------------------------------------------------- agents
    def _check_free(self, agent_id: Any) -> None:
        if self._closed:  # SVC-7: close() disposes every agent; none is made once it began
            raise RuntimeError("the service is closed")
        if not isinstance(agent_id, str) or not agent_id:
            raise ValueError("agent id must be a non-empty string")
        if agent_id in self._agents:
            raise ValueError(f"an agent with id {agent_id!r} is already live")

    def _start(self, agent_id: str, session: Session, options: Mapping[str, Any]) -> Agent:
        agent = self.agent_class(self, agent_id, session, options)
        self._agents[agent_id] = agent
        self._created.append(agent)
        return agent

    def _new_session(self, session_id: str, cwd: Any = None, parent: Any = None) -> Session:
        header = {"id": session_id, "created": self._sources.now_ms(), "cwd": cwd, "parent_session": parent}
        if self._persistence is not None:
            self._persistence._create(session_id, header)
        return Session(session_id, self.bus, self._sources, header, store=self._persistence)

    def create(self, agent_id: str, options: Mapping[str, Any] | None = None) -> Agent:
        self._check_free(agent_id)
        session = self._new_session(f"{agent_id}-session-{self._sources.uuid()}")
        return self._start(agent_id, session, dict(options or {}))

    def create_agent(self, agent_id: str, session_id: str, meta: Mapping[str, Any] | None = None,
                     agent_options: Mapping[str, Any] | None = None) -> Agent:
        self._check_free(agent_id)
        if not isinstance(session_id, str) or not session_id:
            raise ValueError("session id must be a non-empty string")
        meta = dict(meta or {})
        session = self._new_session(session_id, meta.get("cwd"), meta.get("parent_session"))
        return self._start(agent_id, session, dict(agent_options or {}))

    async def resume(self, agent_id: str, resume_session_id: str,
                     agent_options: Mapping[str, Any] | None = None) -> Agent:
        if self._persistence is None:
            raise LoopError("cannot resume: this service has no session persistence backend", code="NO_PERSISTENCE")
        self._check_free(agent_id)
        if not self._persistence.has(resume_session_id):
            raise LoopError(f"cannot resume: no persisted session {resume_session_id!r}", code="NO_SESSION")
        header, events = self._persistence.load(resume_session_id, self._sources.now_ms())
        session = Session(resume_session_id, self.bus, self._sources, header, events, store=self._persistence)
        return self._start(agent_id, session, dict(agent_options or {}))

    def get(self, agent_id: str) -> Agent | None:
        return self._agents.get(agent_id)

    def _forget(self, agent: Agent) -> None:
        if self._agents.get(agent.id) is agent:
            del self._agents[agent.id]

    def load_config(self, config: Mapping[str, Any]) -> list[Agent]:
        if not isinstance(config, Mapping):
            raise ConfigError("config: expected a mapping with an 'agents' list")
        if "agents" not in config:
            raise ConfigError("config.agents: is required (a list of {id, model?, system_prompt?})")
        agents = config["agents"]
        if not isinstance(agents, (list, tuple)):
            raise ConfigError("config.agents: expected a list of agent entries")
        entries = []
        seen: set[str] = set()
        for i, entry in enumerate(agents):
            where = f"agents[{i}]"
            if not isinstance(entry, Mapping):
                raise ConfigError(f"{where}: expected a mapping with an 'id'")
            if "id" not in entry:
                raise ConfigError(f"{where}.id: is required")
            if not isinstance(entry["id"], str) or not entry["id"]:
                raise ConfigError(f"{where}.id: expected a non-empty string, got {entry['id']!r}")
            for key in ("model", "system_prompt"):
                if key in entry and entry[key] is not None and not isinstance(entry[key], str):
                    raise ConfigError(f"{where}.{key}: expected a string, got {type(entry[key]).__name__}")
            if entry["id"] in seen or entry["id"] in self._agents:
                raise ConfigError(f"{where}.id: duplicate agent id {entry['id']!r}")
            seen.add(entry["id"])
            entries.append(entry)
        created = []
        for entry in entries:
            options = {k: entry[k] for k in ("model", "system_prompt") if entry.get(k) is not None}
            created.append(self.create(entry["id"], options))
        return created

    async def close(self) -> None:
        self._closed = True
        agents = list(self._created)
        for agent in agents:
            agent.dispose()
        # A plugin on an agent's own driver awaiting this close: that driver cannot end before the
        # close returns to it (SVC-7); it exits, and releases its waiters, once its listener returns.
        current = asyncio.current_task()
        others = [agent for agent in agents if agent.task is not current]
        for agent in others:
            task = agent.task
            if not task.done():
                try:
                    await asyncio.wait({task})
                except asyncio.CancelledError:
                    raise
        for agent in others:
            agent._release_waiters()

    def driver_task(self, agent: Any) -> asyncio.Task[Any] | None:
        return getattr(agent, "task", None)


def _remove(lst: list[Any], entry: Any) -> None:
    for i, e in enumerate(lst):
        if e is entry:
            del lst[i]
            return
