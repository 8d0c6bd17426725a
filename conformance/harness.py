"""The harness every rule test runs in: one service of the implementation under test, built
inside a simulation, with the scripted model registered as ``fake`` and helpers to drive and
observe agents. Rule tests talk to the implementation only through this and the adapter.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from . import schedules
from .adapter import AgentHandle, Implementation, ServiceHandle
from .fakes import FakeTool, ScriptedModel
from .invariants import log_violations

Scenario = Callable[["Kit"], Coroutine[Any, Any, Any]]

MODEL = "fake"


class SetupError(Exception):
    """The implementation failed while building a service or an agent (exit 2 at the CLI)."""


class Kit:
    """One scenario's world: the service under test, the fake model, recorders."""

    def __init__(self, impl: Implementation, *, persistence: object | None = None) -> None:
        self.impl = impl
        self.timeout = 60.0 if schedules.virtual_time() else 5.0
        try:
            self.service: ServiceHandle = impl.create_service(persistence=persistence)
        except Exception as exc:
            raise SetupError(f"{impl.name}: create_service() raised {_describe(exc)}") from exc
        self._poked = asyncio.Event()
        self.model = ScriptedModel(on_request=self.poke)
        self.service.register_model(MODEL, self.model)
        for event in ("session/event", "agent/status"):
            self.service.on(event, lambda *_args: self.poke())
        self.agents: list[AgentHandle] = []
        self.notes: list[tuple[Any, ...]] = []
        self.check_invariants = True

    # ------------------------------------------------------------------ building
    def agent(self, agent_id: str = "a", **options: Any) -> AgentHandle:
        """Create an agent on the fake model (options: ``model``, ``system_prompt``...)."""
        opts = {"model": MODEL, **options}
        try:
            agent = self.service.create(agent_id, opts)
        except Exception as exc:
            raise SetupError(f"{self.impl.name}: create() raised {_describe(exc)}") from exc
        self.agents.append(agent)
        return agent

    def tool(self, name: str, **kwargs: Any) -> FakeTool:
        """Register a fake tool."""
        tool = FakeTool(name, on_call=self.poke, **kwargs)
        self.service.register_tool(tool)
        return tool

    def on(self, event: str, listener: Callable[..., Any]) -> Callable[[], object]:
        """Register a listener on the service's bus."""
        return self.service.on(event, listener)

    def record(self, *events: str) -> None:
        """Record the listed notifications into ``notes`` as ``(event, *args_without_agent)``.

        ``session/event`` is recorded as ``("session/event", event_type)``.
        """
        for name in events:
            self.service.on(name, self._recorder(name))

    def _recorder(self, name: str) -> Callable[..., None]:
        def listener(*args: Any) -> None:
            if name == "session/event":
                self.notes.append((name, args[-1]["type"]))
            else:
                self.notes.append((name, *args[1:]))

        return listener

    def noted(self, event: str) -> list[tuple[Any, ...]]:
        """The recorded argument tuples of one notification."""
        return [n[1:] for n in self.notes if n[0] == event]

    # ------------------------------------------------------------------ waiting
    async def idle(self, agent: AgentHandle, waiter: Awaitable[Any] | None = None) -> None:
        """Await ``agent.when_idle()`` (or a waiter obtained earlier), failing if it hangs."""
        try:
            await asyncio.wait_for(_as_coro(waiter if waiter is not None else agent.when_idle()), self.timeout)
        except TimeoutError:
            raise AssertionError(f"when_idle() of {agent.id} did not resolve (status {agent.status}){self.why()}") from None

    def poke(self) -> None:
        """Wake ``until()`` waiters to re-check their condition."""
        self._poked.set()

    async def until(self, predicate: Callable[[], bool], what: str = "condition") -> None:
        """Wait until ``predicate()`` holds, re-checking whenever something observable happens.

        Event-driven on purpose: a busy poll (``sleep(0.01)`` in a loop) can starve the agent
        under priority-based schedules (pct), which may fire the poll's timer ahead of ready work
        every time. The model, the tools, the log and the status all ``poke()``.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout
        while not predicate():
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise AssertionError(f"timed out waiting for {what}{self.why()}")
            self._poked.clear()
            try:
                await asyncio.wait_for(self._poked.wait(), min(remaining, 5.0))
            except TimeoutError:
                pass

    def why(self) -> str:
        """A hint for a timeout message."""
        if self.model.runaway:
            return f"; the model was called more than {self.model.max_calls} times (a turn that never stops?)"
        return ""

    async def settle(self, seconds: float = 0.5) -> None:
        """Let every runnable task run for a while (virtual time)."""
        await asyncio.sleep(seconds)

    # ------------------------------------------------------------------ observing
    @staticmethod
    def events(agent: AgentHandle, *types: str) -> list[dict[str, Any]]:
        """The agent's session events, optionally only those of the given types."""
        evs: list[dict[str, Any]] = [dict(e) for e in agent.session.events]
        return [e for e in evs if not types or e["type"] in types]

    @classmethod
    def types(cls, agent: AgentHandle) -> list[str]:
        """The event types of the agent's log, in order."""
        return [e["type"] for e in cls.events(agent)]

    @classmethod
    def reasons(cls, agent: AgentHandle) -> list[dict[str, Any]]:
        """The ``turn/end`` reasons of the log."""
        return [e["data"]["reason"] for e in cls.events(agent, "turn/end")]

    @classmethod
    def prompts(cls, agent: AgentHandle) -> list[list[str]]:
        """Per turn, the texts of its ``user/message`` events."""
        turns: list[list[str]] = []
        for e in cls.events(agent, "turn/start", "user/message"):
            if e["type"] == "turn/start":
                turns.append([])
            elif turns:
                turns[-1] += [b.get("text", "") for b in _blocks(e["data"]["content"])]
        return turns

    def statuses(self, agent: AgentHandle | None = None) -> list[str]:
        """The ``agent/status`` values recorded (``record("agent/status")`` first)."""
        return [n[1] for n in self.notes if n[0] == "agent/status"]

    # ------------------------------------------------------------------ closing
    async def close(self) -> None:
        """Close the service and check LOG-3..6 on every agent's log."""
        try:
            await asyncio.wait_for(self.service.close(), self.timeout)
        except TimeoutError:
            raise AssertionError("service.close() did not finish") from None
        if self.check_invariants:
            for agent in self.agents:
                problems = log_violations(self.events(agent))
                assert not problems, f"log invariant broken for {agent.id}: {problems[0]}"


def _describe(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__


def _blocks(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return list(content)


async def _as_coro(awaitable: Awaitable[Any]) -> Any:
    return await awaitable


def run_scenario(impl: Implementation, scenario: Scenario, schedule: str = "fifo") -> None:
    """Run one scenario under ``schedule``: build a ``Kit``, run the scenario, close, check."""

    async def main() -> None:
        kit = Kit(impl)
        try:
            result = scenario(kit)
            if inspect.isawaitable(result):
                await result
        except BaseException:
            # Close even after a failure so no driver is left running; keep the first error.
            with contextlib.suppress(Exception):
                await kit.close()
            raise
        await kit.close()

    schedules.run_under(main, schedule)
