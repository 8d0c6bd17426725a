"""The rule tests' view of the world: a thin helper over :class:`~conformance.scenario.world.World`.

A rule test is ``async def scenario(k: Kit)``; ``run_scenario`` runs it as the body of a
scenario, through the one engine, on the implementation under test and under a schedule
(``fifo``, ``random-N``, ``pct-N``). ``k.model`` is the fake model registered as ``fake`` (it
answers ``"ok"`` past its script); the rest drives and observes agents through the adapter.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from . import schedules
from .adapter import AgentHandle, Implementation, ServiceHandle, observer
from .fakes import FakeModel, FakeTool, Gate, fails, hangs, respond
from .invariants import log_violations
from .scenario.model import Scenario
from .scenario.world import ScenarioSetupError, World

Body = Callable[["Kit"], Coroutine[Any, Any, Any]]

MODEL = "fake"
TIMEOUT = 60.0
"""Virtual seconds a rule test waits for anything (a waiter, a condition, the close)."""
MAX_CALLS = 100
"""Model calls per test before the fake model suspects a runaway continuation loop."""

SetupError = ScenarioSetupError


class Kit:
    """One rule test's world: the service under test, the fake model, recorders."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.impl: Implementation = world.impl
        self.service: ServiceHandle = world.service
        self.timeout = TIMEOUT
        self._poked = asyncio.Event()
        self.model: FakeModel = world.model(name=MODEL, default=respond.text("ok"), max_calls=MAX_CALLS)
        world.on(None, lambda _event: self._poked.set())  # the fakes' model and tool events
        if not world.scenario.observe:  # and what the world does not record
            for event in ("session/event", "agent/status"):
                self.service.on(event, observer(lambda *_args: self._poked.set()))
        self.agents: list[AgentHandle] = []
        self.notes: list[tuple[Any, ...]] = []
        self.check_invariants = True

    # ------------------------------------------------------------------ building
    def agent(self, agent_id: str = "a", **options: Any) -> AgentHandle:
        """Create an agent on the fake model (options: ``model``, ``system_prompt``...)."""
        agent = self.world.agent(agent_id, **{"model": MODEL, **options})
        self.agents.append(agent)
        return agent

    def tool(
        self,
        name: str,
        *,
        result: Any = "done",
        error: str | None = None,
        code: str | None = None,
        hang: bool = False,
        delay: float = 0.0,
        gate: Gate | None = None,
        **options: Any,
    ) -> FakeTool:
        """Register a fake tool: it returns ``result``, or fails with ``error`` (and ``code``), or
        hangs until aborted; after ``delay`` virtual seconds and once ``gate`` opens."""
        outcome: Any = fails(error, code=code) if error is not None else hangs() if hang else result
        return self.world.tool(name, outcome, latency=delay, gate=gate, **options)

    def gate(self, name: str = "gate") -> Gate:
        """A gate (``open()`` it to let what waits on it go on)."""
        return self.world.gate(name)

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
        """Wait until ``predicate()`` holds, re-checking whenever something is observed.

        Event-driven on purpose: a busy poll (``sleep(0.01)`` in a loop) can starve the agent
        under priority-based schedules (pct), which may fire the poll's timer ahead of ready work
        every time. Every observed event (a notification, a log append, a model or tool call)
        wakes it.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout
        while not predicate():
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise AssertionError(f"timed out waiting for {what}{self.why()}")
            self._poked.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._poked.wait(), min(remaining, 5.0))

    def why(self) -> str:
        """A hint for a timeout message."""
        if self.model.runaway:
            return f"; the model was called more than {MAX_CALLS} times (a turn that never stops?)"
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
            await asyncio.wait_for(_as_coro(self.service.close()), self.timeout)
        except TimeoutError:
            raise AssertionError("service.close() did not finish") from None
        self.world.closed = True
        if self.check_invariants:
            for agent in self.agents:
                problems = log_violations(self.events(agent))
                assert not problems, f"log invariant broken for {agent.id}: {problems[0]}"


def _blocks(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return list(content)


async def _as_coro(awaitable: Awaitable[Any]) -> Any:
    return await awaitable


def rule_scenario(body: Body, name: str = "rule-test") -> Scenario:
    """The scenario whose body is a rule test: no declared parts, no settling (the test closes
    the service itself and checks what its rule states)."""

    async def run(world: World) -> None:
        kit = Kit(world)
        try:
            await body(kit)
        except BaseException:
            # Close even after a failure so no driver is left running; keep the first error.
            with contextlib.suppress(Exception):
                await kit.close()
            raise
        await kit.close()

    return Scenario(name=name, agents=(), models=(), body=run, settle=False, observe=False)


def run_scenario(impl: Implementation, body: Body, schedule: str = "fifo") -> None:
    """Run one rule test under ``schedule`` and re-raise what it raised."""
    import simulator

    from .scenario.engine import main_of

    kind, seed = schedules.parse(schedule)
    result = simulator.run(main_of(rule_scenario(body), impl), strategy=schedules.strategy(kind, seed), seed=seed)
    if result.outcome == "completed":
        return
    if result.outcome == "failed" and result.error is not None:
        raise result.error
    raise schedules.ScheduleError(f"simulation under {schedule} ended {result.outcome}: {result.error or ''}".rstrip(": "))

