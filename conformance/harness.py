"""The rule tests' view of the world: a thin helper over :class:`~conformance.scenario.world.World`.

A rule test is ``async def scenario(k: Kit)``; ``run_scenario`` runs it as the body of a
scenario, through the one engine, on the implementation under test and under a schedule
(``fifo``, ``random-N``, ``pct-N``). ``k.model`` is the fake model registered as ``fake`` (it
answers ``"ok"`` past its script); the rest drives and observes agents through the adapter.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import os
from collections import Counter
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from simulator.sources import EPOCH_MS

from . import schedules
from .adapter import AgentHandle, Implementation, ServiceHandle, current_events, observer
from .fakes import FakeModel, FakeTool, Gate, fails, hangs, respond
from .hooks import NeedsHook, require_notification
from .invariants import clock_violations, log_violations
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
        self._calls: Counter[str] = Counter()  # hook -> calls of the listeners registered here
        self._needs: dict[str, str] = {}  # hook -> why the test needs it (see conformance.hooks)

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

    def on(self, event: str, listener: Callable[..., Any], *, needs: str | None = None) -> Callable[[], object]:
        """Register a listener on the service's bus.

        ``needs``: the test relies on this hook although its rule does not name it; if the
        implementation never calls the listener, the test fails as ``needs hook EVENT: NEEDS``
        (``conformance.hooks``) instead of with whatever the missing hook broke.
        """
        if needs is not None:
            self._needs.setdefault(event, needs)
        return self.service.on(event, self._counted(event, listener))

    def record(self, *events: str, needs: str | None = None) -> None:
        """Record the listed notifications into ``notes`` as ``(event, *args_without_agent)``.

        ``session/event`` is recorded as ``("session/event", event_type)``; ``needs`` as for
        ``on``.
        """
        for name in events:
            self.on(name, self._recorder(name), needs=needs)

    def _counted(self, event: str, listener: Callable[..., Any]) -> Callable[..., Any]:
        """``listener``, counting its calls. The wrapper keeps what a bus may inspect: a
        coroutine function stays one, and the signature is the listener's (``wraps``)."""
        if inspect.iscoroutinefunction(listener):

            @functools.wraps(listener)
            async def counted_async(*args: Any, **kwargs: Any) -> Any:
                self._calls[event] += 1
                return await listener(*args, **kwargs)

            return counted_async

        @functools.wraps(listener)
        def counted(*args: Any, **kwargs: Any) -> Any:
            self._calls[event] += 1
            return listener(*args, **kwargs)

        return counted

    def calls(self, hook: str) -> int:
        """How often the listeners this test registered on ``hook`` were called."""
        return self._calls[hook]

    def require(self, hook: str, reason: str) -> None:
        """Fail as ``needs hook HOOK: REASON`` now unless a listener on ``hook`` was called."""
        require_notification(self, hook, reason)

    def missing_hook(self) -> NeedsHook | None:
        """The first hook declared with ``needs`` that was never called, as the failure to raise."""
        for hook, reason in self._needs.items():
            if self._calls[hook] == 0:
                return NeedsHook(hook, reason)
        return None

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

    async def inject(self, agent: AgentHandle, content: Any, source: Any = None) -> None:
        """Call ``agent.inject`` and await what it returns when that is awaitable: INJ-4 allows
        an ``async`` inject and a synchronous one (whose flush may still be scheduled)."""
        pending = self.start_inject(agent, content, source)
        if pending is not None:
            await pending

    def start_inject(self, agent: AgentHandle, content: Any, source: Any = None) -> Awaitable[Any] | None:
        """Call ``agent.inject`` now, in this synchronous stretch: what an ``async`` inject returns
        (to await), or ``None`` when it was a synchronous one."""
        result: Any = agent.inject(content) if source is None else agent.inject(content, source)
        return result if inspect.isawaitable(result) else None

    # ------------------------------------------------------------------ waiting
    async def idle(self, agent: AgentHandle, waiter: Awaitable[Any] | None = None, *, what: str = "") -> None:
        """Await ``agent.when_idle()`` (or a waiter obtained earlier), failing if it hangs; ``what``
        says what the test expected to end by then (the likely cause of a hang)."""
        try:
            await asyncio.wait_for(_as_coro(waiter if waiter is not None else agent.when_idle()), self.timeout)
        except TimeoutError:
            cause = f": {what}" if what else ""
            raise AssertionError(f"when_idle() of {agent.id} did not resolve (status {agent.status}){cause}"
                                 f"{self.why()}") from None

    def clock_jumps(self) -> int:
        """How many times the run's clock has jumped because nothing was ready. The same before
        and after an ``await``: it ended "at once" (IDLE-1), with no wait on time, whatever the
        schedule (one that fires a polling loop's timer early moves ``loop.time()`` meanwhile)."""
        loop: Any = asyncio.get_running_loop()
        return int(loop.clock_jumps)

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
        """A hint for a timeout message: a runaway model, and what each agent's driver task is
        doing (died of an exception, and where; finished; still running or parked, and where)."""
        hints: list[str] = []
        if self.model.runaway:
            hints.append(f"the model was called more than {MAX_CALLS} times (a turn that never stops?)")
        for agent in self.agents:
            state = self.driver_state(agent)
            if state:
                hints.append(f"{agent.id}: {state}")
        return "".join(f"; {hint}" for hint in hints)

    def driver_task(self, agent: AgentHandle, reason: str) -> asyncio.Task[Any]:
        """``agent``'s driver task, to cancel (PY-1); ``needs hook driver_task: REASON`` when the
        adapter names none at this moment (``ServiceHandle.driver_task`` may return ``None``: a
        callback-driven loop runs its driver on short-lived tasks, none while it waits for work)."""
        task = self.service.driver_task(agent)
        if task is None:
            raise NeedsHook("driver_task", reason)
        return task

    async def driver_ended(self, agent: AgentHandle, what: str) -> None:
        """Wait until ``agent``'s driver ended: its task done; with no task named at this moment
        (see :meth:`driver_task`), the agent disposed (its exit is then IDLE-4's, through
        ``when_idle()``)."""
        task = self.service.driver_task(agent)
        if task is None:
            await self.until(lambda: agent.status == "disposed", f"{what} (the agent disposed)")
        else:
            await self.until(task.done, what)

    def driver_state(self, agent: AgentHandle) -> str:
        """What ``agent``'s driver task (``service.driver_task``) is doing, in words."""
        try:
            task = self.service.driver_task(agent)
        except Exception as exc:  # an adapter without the hook, or a broken one: say so, go on
            return f"driver_task() raised {type(exc).__name__}: {_first_line(exc)}"
        if task is None:
            return ""
        if not isinstance(task, asyncio.Future):
            return f"driver_task() returned {type(task).__name__}, not an asyncio task"
        if task.cancelled():
            return "its driver task was cancelled"
        if task.done():
            died = task.exception()
            if died is None:
                return "its driver task has finished"
            return f"its driver task died of {type(died).__name__}: {_first_line(died)}{_raised_at(died)}"
        where = _parked_at(task)
        return f"its driver task is still running, parked {where}" if where else "its driver task is still running"

    async def settle(self, seconds: float = 0.5) -> None:
        """Let every runnable task run for a while (virtual time)."""
        await asyncio.sleep(seconds)

    # ------------------------------------------------------------------ observing
    @staticmethod
    def events(agent: AgentHandle, *types: str) -> list[dict[str, Any]]:
        """The agent's session events, optionally only those of the given types (read where the
        log lives: over the wire, once the caller's in-place edits reached it)."""
        evs: list[dict[str, Any]] = [dict(e) for e in current_events(agent.session)]
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
                events = self.events(agent)
                problems = log_violations(events) + clock_violations(events, EPOCH_MS)
                assert not problems, f"log invariant broken for {agent.id}: {problems[0]}"


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else "(no message)"


def _raised_at(exc: BaseException) -> str:
    """`` at FILE:LINE in FUNCTION``: the innermost frame the exception was raised in."""
    import traceback

    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return ""
    last = frames[-1]
    return f" (raised at {last.filename.rsplit('/', 1)[-1]}:{last.lineno} in {last.name})"


_ASYNCIO_DIR = os.path.dirname(asyncio.__file__)


def _parked_at(task: asyncio.Future[Any]) -> str:
    """``at FILE:LINE in FUNCTION``: where a suspended task waits (its innermost frame)."""
    # Task.get_stack() gives a suspended task's outermost coroutine frame only: follow what
    # each coroutine awaits (cr_await; a generator-based one's gi_yieldfrom) to the innermost.
    coro = task.get_coro() if isinstance(task, asyncio.Task) else None
    frame = None
    for _ in range(100):  # a bound: an awaitable chain is short, a cycle is not ours to loop on
        current = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
        if current is None:
            break
        if not current.f_code.co_filename.startswith(_ASYNCIO_DIR):  # asyncio.sleep's own frame says nothing
            frame = current
        coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
    if frame is None:
        return ""
    return f"at {frame.f_code.co_filename.rsplit('/', 1)[-1]}:{frame.f_lineno} in {frame.f_code.co_name}"


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
        failure: Exception | None = None
        try:
            await body(kit)
        except Exception as exc:
            failure = exc
        except BaseException:
            with contextlib.suppress(Exception):
                await kit.close()
            raise
        # A hook the test relies on that never fired explains the failure better than the
        # failure itself (and a pass without it observed nothing): report it as such.
        missing = kit.missing_hook()
        if failure is not None or missing is not None:
            # Close even after a failure so no driver is left running; keep the first error.
            with contextlib.suppress(Exception):
                await kit.close()
            if missing is not None:
                raise missing from failure
            assert failure is not None
            raise failure
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

