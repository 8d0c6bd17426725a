"""How a mutant is built: textual patches applied to the reference's own source.

A mutant is the reference loop with one small, realistic bug. Rather than copying a large method
to change one line of it, each mutant states its bug as a few ``Patch(file, old, new)`` edits of
``reference_loop/<file>.py``; ``build`` applies them to the source (each ``old`` must occur
exactly once, so a patch can never silently stop applying when the reference changes), executes
the patched modules under private names, and returns an ``AgentLoopService`` subclass that
creates the patched agent class. The diff *is* the bug, which keeps every mutant reviewable.

Modules other than ``agent`` and ``service`` (``session``, ``inbox``, ``assembler``, ...) are
patched the same way; fresh copies of ``agent`` and ``service`` are then executed with their
imported names rebound to the patched objects, so the real ``reference_loop`` is never touched.
"""

from __future__ import annotations

import importlib
import inspect
import sys
import types
from dataclasses import dataclass, field
from typing import Any

PACKAGE = "reference_loop"


class MutantError(Exception):
    """A patch does not apply (its anchor text is missing or ambiguous)."""


@dataclass(frozen=True)
class Patch:
    """Replace the one occurrence of ``old`` by ``new`` in ``reference_loop/<file>.py``."""

    file: str
    old: str
    new: str


@dataclass(frozen=True)
class Mutant:
    """One catalogued bug: what it breaks, which rules should catch it, and its patches."""

    name: str
    description: str
    rules: tuple[str, ...]
    section: str
    patches: tuple[Patch, ...]
    interleaving: bool = False
    """Whether the bug shows only under some interleaving of concurrent actors / listeners."""
    notes: str = field(default="", compare=False)

    @property
    def files(self) -> list[str]:
        """The reference modules this mutant patches, in first-patch order."""
        return list(dict.fromkeys(p.file for p in self.patches))


def patched_source(file: str, patches: list[Patch], *, who: str = "mutant") -> str:
    """The source of ``reference_loop/<file>.py`` with ``patches`` applied, in order."""
    source = inspect.getsource(importlib.import_module(f"{PACKAGE}.{file}"))
    for patch in patches:
        count = source.count(patch.old)
        if count != 1:
            where = "not found" if count == 0 else f"found {count} times"
            first = patch.old.strip().splitlines()[0] if patch.old.strip() else "<empty>"
            raise MutantError(f"{who}: patch anchor {where} in {PACKAGE}/{file}.py: {first!r}")
        source = source.replace(patch.old, patch.new)
    return source


def _exec_module(label: str, file: str, source: str) -> types.ModuleType:
    """Execute ``source`` as a private module of the ``reference_loop`` package."""
    name = f"{PACKAGE}._mutant_{label}_{file}"
    module = types.ModuleType(name)
    module.__package__ = PACKAGE  # relative imports resolve to the real reference modules
    module.__file__ = f"<{label}:{PACKAGE}/{file}.py>"
    # dataclasses look their module up in sys.modules while the class body executes.
    sys.modules[name] = module
    exec(compile(source, module.__file__, "exec"), module.__dict__)
    return module


def _rebind(module: types.ModuleType, replacements: dict[str, types.ModuleType]) -> None:
    """Point the names ``module`` imported from a patched module at the patched objects."""
    for attr, value in list(vars(module).items()):
        origin = getattr(value, "__module__", None)
        if not isinstance(origin, str) or not origin.startswith(f"{PACKAGE}."):
            continue
        patched = replacements.get(origin.removeprefix(f"{PACKAGE}."))
        if patched is not None and hasattr(patched, attr):
            setattr(module, attr, getattr(patched, attr))


def build(mutant: Mutant) -> type[Any]:
    """An ``AgentLoopService`` subclass whose agents carry ``mutant``'s bug."""
    return build_parts(mutant)[0]


def build_parts(mutant: Mutant) -> tuple[type[Any], dict[str, types.ModuleType]]:
    """``build``'s service class, and the patched modules by file (a backend a mutant patches,
    ``persistence``, is made by the adapter, not the service: see ``conformance.mutants``)."""
    label = mutant.name.replace("-", "_")
    by_file: dict[str, list[Patch]] = {}
    for patch in mutant.patches:
        by_file.setdefault(patch.file, []).append(patch)
    modules = {
        file: _exec_module(label, file, patched_source(file, patches, who=mutant.name))
        for file, patches in by_file.items()
    }
    others = {f: m for f, m in modules.items() if f not in ("agent", "service")}
    # agent and service pick up the other patched modules through their imported names.
    for file in ("agent", "service"):
        if file not in modules and (others or file == "agent"):
            modules[file] = _exec_module(label, file, patched_source(file, [], who=mutant.name))
    for module in modules.values():
        _rebind(module, others)
    if "service" in modules:
        base: type[Any] = modules["service"].AgentLoopService
    else:
        from reference_loop import AgentLoopService as base
    agent_class = modules["agent"].ReactLoopAgent
    service = type(
        f"MutantService_{label}",
        (base,),
        {"agent_class": agent_class, "__doc__": f"The reference with mutant {mutant.name!r}."},
    )
    return service, modules
