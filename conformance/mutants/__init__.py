"""The mutant catalogue: small, realistic bugs the conformance suite must kill.

Each mutant is the reference loop with one bug, stated as a few textual patches of its source
(see ``_build``), documented in one line, with the rule ids that should catch it. Every mutant is
addressable wherever an implementation is chosen, as ``--impl mutant:NAME``
(``conformance.impl`` looks names up here through ``get``).

    from conformance import mutants
    mutants.names()                      # catalogue order
    mutants.MUTANTS["w2-settle-unconditionally"].rules
    impl = mutants.get("w2-settle-unconditionally")   # a conformance Implementation
"""

from __future__ import annotations

from functools import cache

from conformance.reference_adapter import ReferenceImplementation

from . import cancellation, errors, gaps, lifecycle, log, loop, status, tools, turn_end
from ._build import Mutant, MutantError, Patch, build, build_parts

__all__ = ["GAPS", "MUTANTS", "Mutant", "MutantError", "Patch", "get", "implementation", "names"]

_SECTIONS = (log, status, loop, tools, turn_end, errors, cancellation, lifecycle)

MUTANTS: dict[str, Mutant] = {m.name: m for section in _SECTIONS for m in section.MUTANTS}
"""Every mutant by name, in spec-section order (the suite must kill each)."""

GAPS: dict[str, Mutant] = {m.name: m for m in gaps.GAPS}
"""Mutants the suite does not kill yet (left out of the self-check; see ``gaps``)."""


def names() -> list[str]:
    """The mutant names, in catalogue order."""
    return list(MUTANTS)


@cache
def implementation(name: str) -> ReferenceImplementation:
    """The conformance ``Implementation`` of mutant ``name`` (built once per process)."""
    mutant = MUTANTS[name] if name in MUTANTS else GAPS[name]  # KeyError: unknown name
    service, modules = build_parts(mutant)
    backend = modules.get("persistence")
    if backend is None:
        return ReferenceImplementation(name=f"mutant:{name}", service_factory=service)
    # the adapter makes the backend: a mutant of the backend's code needs its patched class
    return ReferenceImplementation(name=f"mutant:{name}", service_factory=service,
                                   persistence_factory=backend.InMemoryPersistence)


def get(name: str) -> ReferenceImplementation:
    """``--impl mutant:NAME``: the implementation of mutant ``name`` (``KeyError`` if unknown)."""
    return implementation(name)
