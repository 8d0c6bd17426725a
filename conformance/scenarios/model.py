"""Loop scenarios: implementation-independent scenarios, bound to an implementation to run.

A :class:`LoopScenario` is a name, a body ``async def body(world)`` (see ``world.World``), its own
checks, and limits. ``bind(impl)`` gives a ``simulator.scenario.Scenario`` whose checks are the
spec's invariants plus the scenario's own. Two ways to write one:

* a YAML file (``yaml_format``), compiled to a ``LoopScenario``;
* a decorated Python function, found by ``module:attr``::

      from conformance.scenarios import World, loop_scenario, released_after_turn

      @loop_scenario(checks=[released_after_turn("w", "B")])
      async def window2(w: World) -> None:
          ...

``load(ref)`` resolves either: a path ending in ``.yaml``/``.yml`` or a ``module:attr``.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conformance.adapter import Implementation
from simulator.scenario import Scenario, ScenarioContext

from .checks import INVARIANTS, LoopCheck
from .world import DEFAULT_IDLE_TIMEOUT, World

Body = Callable[[World], Awaitable[Any]]

DEFAULT_MAX_TIME = 3600.0
DEFAULT_MAX_STEPS = 200_000


class ScenarioError(Exception):
    """A scenario cannot be loaded (one-line message naming the file, line and field)."""


@dataclass
class LoopScenario:
    """A scenario over the adapter protocol (see module docstring).

    ``source`` says where it came from: ``{"yaml": text, "path": ...}`` or ``{"python": ref}``;
    a race cassette stores it so the scenario travels with the cassette.
    """

    name: str
    body: Body
    checks: list[LoopCheck] = field(default_factory=list)
    description: str = ""
    source: dict[str, Any] = field(default_factory=dict)
    max_time: float = DEFAULT_MAX_TIME
    max_steps: int = DEFAULT_MAX_STEPS
    idle_timeout: float = DEFAULT_IDLE_TIMEOUT

    @property
    def all_checks(self) -> list[LoopCheck]:
        """The spec's invariants, then the scenario's own checks."""
        return [*INVARIANTS, *self.checks]

    def bind(self, impl: Implementation) -> Scenario:
        """The simulator scenario running this one against ``impl``."""
        body = self.body

        async def run(ctx: ScenarioContext) -> None:
            world = World(ctx, impl, self)
            ctx.world = world
            await body(world)

        return Scenario(
            self.name,
            run,
            checks=[c.as_check() for c in self.all_checks],
            description=self.description,
            max_steps=self.max_steps,
            max_time=self.max_time,
        )


def loop_scenario(
    fn: Body | None = None,
    *,
    name: str | None = None,
    checks: Sequence[LoopCheck] = (),
    description: str = "",
    max_time: float = DEFAULT_MAX_TIME,
    idle_timeout: float = DEFAULT_IDLE_TIMEOUT,
) -> Any:
    """Decorator: ``async def body(world)`` -> :class:`LoopScenario` (named after the function,
    dashes for underscores, unless ``name`` is given). Bare (``@loop_scenario``) or with options."""

    def deco(body: Body) -> LoopScenario:
        if not inspect.iscoroutinefunction(body):
            raise TypeError(f"@loop_scenario needs an async function, got {body!r}")
        ref = f"{body.__module__}:{body.__qualname__}"
        return LoopScenario(
            name=name or body.__name__.replace("_", "-"),
            body=body,
            checks=list(checks),
            description=description or inspect.getdoc(body) or "",
            source={"python": ref},
            max_time=max_time,
            idle_timeout=idle_timeout,
        )

    return deco(fn) if fn is not None else deco


def load(ref: str) -> LoopScenario:
    """A scenario from a YAML path or a ``module:attr`` reference (``ScenarioError`` otherwise)."""
    ref = ref.strip()
    if ref.endswith((".yaml", ".yml")) or Path(ref).is_file():
        from .yaml_format import load_file

        return load_file(ref)
    module_name, sep, attr = ref.partition(":")
    if not sep or not module_name or not attr:
        raise ScenarioError(f"{ref}: not a scenario file (.yaml) or MODULE:ATTR reference")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        raise ScenarioError(f"{ref}: cannot import {module_name!r}: {type(exc).__name__}: {exc}") from None
    target: Any = module
    for part in attr.split("."):
        if not hasattr(target, part):
            raise ScenarioError(f"{ref}: module {module_name!r} has no attribute {attr!r}")
        target = getattr(target, part)
    if not isinstance(target, LoopScenario):
        raise ScenarioError(f"{ref}: not a scenario (decorate an async function with @loop_scenario)")
    target.source = {"python": ref}
    return target


def from_source(source: dict[str, Any], *, origin: str = "cassette") -> LoopScenario:
    """Rebuild a scenario from its ``source`` (as stored in a race cassette)."""
    if "yaml" in source:
        from .yaml_format import load_text

        return load_text(str(source["yaml"]), origin=origin, path=source.get("path"))
    if "python" in source:
        return load(str(source["python"]))
    raise ScenarioError(f"{origin}: scenario: expected a 'yaml' text or a 'python' reference")
