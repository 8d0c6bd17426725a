"""The reference ``ReactLoopAgent``: the agent-loop contract of ``shared/spec/agent-loop-spec.md``.

Public API::

    from reference_loop import AgentLoopService
    svc = AgentLoopService()                      # sources/persistence optional
    svc.register_model("m", adapter); svc.register_tool(tool)
    agent = svc.create("a", {"model": "m"})
    agent.send("hello"); await agent.when_idle()
    agent.session.events; agent.session.derive_messages()
"""

from .abort import AbortController, AbortError, AbortSignal
from .agent import AgentDisposedError, IdleWaiter, LoopError, ReactLoopAgent
from .bus import EventBus
from .config import AgentConfig, ConfigError
from .persistence import InMemoryPersistence, JsonlPersistence, PersistenceError, SessionPersistence
from .service import AgentLoopService, ServiceError
from .session import Session, SessionValidationError

__all__ = [
    "AbortController",
    "AbortError",
    "AbortSignal",
    "AgentConfig",
    "AgentDisposedError",
    "AgentLoopService",
    "ConfigError",
    "EventBus",
    "IdleWaiter",
    "InMemoryPersistence",
    "JsonlPersistence",
    "LoopError",
    "PersistenceError",
    "ReactLoopAgent",
    "ServiceError",
    "Session",
    "SessionPersistence",
    "SessionValidationError",
]
