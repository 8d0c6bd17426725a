"""loopkit adapter for spec_loop."""

from __future__ import annotations

from typing import Any

from .core import Sources
from .service import Service
from .session import MemoryPersistence


def _sources() -> Sources:
    try:
        from simulator.sources import current_sources
        inner = current_sources()
    except Exception:
        inner = None
    return Sources(inner)


class SpecLoopImplementation:
    name = "spec_loop"
    features: frozenset[Any] = frozenset({"persistence", "configuration", "injection"})
    logger_name = "spec_loop"

    def create_service(self, *, persistence: object | None = None) -> Service:
        return Service(persistence=persistence, sources=_sources())  # type: ignore[arg-type]

    def new_persistence(self) -> object:
        return MemoryPersistence()


implementation = SpecLoopImplementation()
