"""The reference loop behind the adapter protocol.

The reference's service, agents and sessions already have the adapter's shape (the protocol
mirrors its public API), so there is no wrapper at all. A buggy variant (a mutant) plugs in with
one line::

    broken = ReferenceImplementation(name="mutant:w2", service_factory=MyBrokenService)

where ``service_factory(sources=None, persistence=...)`` builds an ``AgentLoopService`` (or a
subclass creating a patched agent class).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .adapter import ServiceHandle
from .catalogue import Feature


def _default_factory(**kwargs: Any) -> Any:
    from reference_loop import AgentLoopService

    return AgentLoopService(**kwargs)


def _default_persistence() -> object:
    from reference_loop import InMemoryPersistence

    return InMemoryPersistence()


@dataclass
class ReferenceImplementation:
    """The reference (or a variant of it built by ``service_factory``)."""

    name: str = "reference"
    service_factory: Callable[..., Any] = _default_factory
    persistence_factory: Callable[[], object] = _default_persistence
    """What ``new_persistence()`` returns a fresh one of (a mutant of the backend's code passes its own)."""
    features: frozenset[Feature] = field(
        default_factory=lambda: frozenset({"persistence", "configuration", "injection"})
    )
    logger_name: str = "reference_loop"

    def create_service(self, *, persistence: object | None = None) -> ServiceHandle:
        """A fresh service (``persistence`` from ``new_persistence()`` or ``None``)."""
        service: ServiceHandle = self.service_factory(sources=None, persistence=persistence)
        return service

    def new_persistence(self) -> object:
        """An empty in-memory persistence backend (``persistence_factory()``)."""
        return self.persistence_factory()


reference = ReferenceImplementation()
"""What ``--impl reference`` (the default) resolves to."""
