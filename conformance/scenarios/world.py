"""The world a loop scenario runs in: one service of the implementation under test, built inside
the simulation, with the kit's fake model and tools registered and every observable thing
recorded in the run's timeline.

A scenario (YAML or Python) only talks to the implementation through a :class:`World`:

* building: ``model(script)``, ``tool(name, ...)``, ``agent(id)``;
* acting: ``send``, ``steer``, ``inject``, ``cancel``, ``abort``, ``dispose``, ``when_idle`` /
  ``wait_idle`` (each recorded as an ``op`` entry naming who acted);
* reacting: ``listen(event, fn)`` (a listener on the implementation's bus) and actors
  (``at(t, fn)``, ``after(kind, fn)``) which are the simulator scenario's own.

Timeline entries (``kind``): ``op``, ``agent/*`` notifications (flattened, see ``events``),
``log`` (session events), ``listener`` (a scenario listener fired), ``waiter/released``,
``model/*`` and ``tool/*`` (from the fakes), ``world/closed``.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

import simulator
from conformance.adapter import AgentHandle, Implementation, ServiceHandle
from simulator.fake_llm import FakeModel, ScriptEntry
from simulator.fake_tools import FakeTool
from simulator.scenario import ScenarioContext

from . import events as ev

if TYPE_CHECKING:
    from .model import LoopScenario

DEFAULT_IDLE_TIMEOUT = 600.0
"""Virtual seconds the world waits for quiescence (a waiter, the final idle, the close)."""


class ScenarioSetupError(Exception):
    """The implementation failed while building the service or an agent (exit 2 at the CLI)."""


class Waiter:
    """A ``when_idle()`` registered by the scenario, watched from the moment it was created."""

    def __init__(self, name: str, agent: str) -> None:
        self.name = name
        self.agent = agent
        self.released = asyncio.get_running_loop().create_future()

    async def wait(self) -> None:
        """Until the waiter resolved (the watcher enforces the timeout)."""
        await asyncio.shield(self.released)


class World:
    """The implementation's service plus the fakes, driven and observed (see module docstring)."""

    def __init__(
        self, ctx: ScenarioContext, impl: Implementation, scenario: LoopScenario | None = None
    ) -> None:
        self.ctx = ctx
        self.impl = impl
        self.scenario = scenario
        self.idle_timeout = scenario.idle_timeout if scenario is not None else DEFAULT_IDLE_TIMEOUT
        try:
            self.service: ServiceHandle = impl.create_service(persistence=None)
        except Exception as exc:
            raise ScenarioSetupError(
                f"{impl.name}: create_service() raised {type(exc).__name__}: {exc}"
            ) from exc
        self.agents: dict[str, AgentHandle] = {}
        self.waiters: dict[str, Waiter] = {}
        self._sessions: dict[str, str] = {}
        # The observers come first on the bus, so an event is in the timeline before any
        # scenario listener reacts to it (and the diagram shows cause before effect).
        for name in ev.OBSERVED:
            self.service.on(name, self._notification_observer(name))
        self.service.on("session/event", self._log_observer)
        ctx.on_teardown(self.finish)

    # ------------------------------------------------------------------ building

    def model(self, script: Iterable[ScriptEntry] = (), *, name: str = "fake") -> FakeModel:
        """A fake model (``simulator.fake_llm``) registered on the service under ``name``."""
        fake = self.ctx.model(script, name=name)
        self.service.register_model(name, fake)
        return fake

    def tool(self, name: str, result: Any = None, **options: Any) -> FakeTool:
        """A fake tool (``simulator.fake_tools``) registered on the service."""
        tool = self.ctx.tool(name, result, **options)
        self.service.register_tool(tool)
        return tool

    def agent(
        self, agent_id: str = "a", *, model: str = "fake", system_prompt: str | None = None
    ) -> AgentHandle:
        """Create an agent (``service.create``) on ``model``."""
        options: dict[str, Any] = {"model": model}
        if system_prompt is not None:
            options["system_prompt"] = system_prompt
        try:
            handle = self.service.create(agent_id, options)
        except Exception as exc:
            raise ScenarioSetupError(
                f"{self.impl.name}: create({agent_id!r}) raised {type(exc).__name__}: {exc}"
            ) from exc
        self.agents[agent_id] = handle
        self._sessions[handle.session.id] = agent_id
        return handle

    def handle(self, agent: str | AgentHandle | None) -> AgentHandle:
        """The handle of ``agent`` (an id, a handle, or ``None`` for the first agent)."""
        if agent is None:
            if not self.agents:
                raise LookupError("the scenario has no agent")
            return next(iter(self.agents.values()))
        if isinstance(agent, str):
            try:
                return self.agents[agent]
            except KeyError:
                raise LookupError(f"no agent {agent!r} (agents: {sorted(self.agents)})") from None
        return agent

    def agent_id(self, obj: Any) -> str | None:
        """The id of the agent a listener received (the implementation's own object)."""
        for agent_id, handle in self.agents.items():
            if handle is obj:
                return agent_id
        found = getattr(obj, "id", None)
        if isinstance(found, str):
            return found
        return next(iter(self.agents)) if len(self.agents) == 1 else None

    # ------------------------------------------------------------------ observing

    def _notification_observer(self, name: str) -> Callable[..., None]:
        def observe(*args: Any) -> None:
            simulator.observe(name, **self.fields(name, args))

        observe.__qualname__ = f"observe:{name}"
        return observe

    def fields(self, name: str, args: tuple[Any, ...]) -> dict[str, Any]:
        """The flattened fields of an event's arguments (the ``where`` vocabulary)."""
        if name == "session/event":
            session, event = args[0], args[-1]
            data = event.get("data") or {}
            out: dict[str, Any] = {
                "agent": self._sessions.get(getattr(session, "id", None) or "", None),
                "type": event.get("type"),
                "seq": event.get("seq"),
            }
            for key in ("turn", "step"):
                if key in data:
                    out[key] = data[key]
            return out
        if name == "session/flush":
            return {"agent": self._sessions.get(getattr(args[0], "id", None) or "", None) if args else None}
        if name == "tools/execute":
            execution = args[0] if args else {}
            execution = execution if isinstance(execution, Mapping) else {}
            return {
                "agent": self.agent_id(execution.get("agent")),
                "name": execution.get("name"),
                "call_id": execution.get("call_id"),
            }
        if name in ev.WATERFALLS:
            names = ev.WATERFALLS[name]
            out = {}
            for arg_name, value in zip(names, args, strict=False):
                out["agent" if arg_name == "agent" else arg_name] = (
                    self.agent_id(value) if arg_name == "agent" else value
                )
            if name == "agent/turn-continuation" and len(args) > len(names):
                out["decision"] = bool(args[len(names)])
            return out
        out = {"agent": self.agent_id(args[0]) if args else None}
        for arg_name, value in zip(ev.NOTIFICATIONS.get(name, ()), args[1:], strict=False):
            out.update(ev.flatten(arg_name, value))
        return out

    def _log_observer(self, session: Any, event: Mapping[str, Any]) -> None:
        agent = self._sessions.get(getattr(session, "id", None) or "", None)
        simulator.observe("log", agent=agent, **ev.compact_log(event))

    # ------------------------------------------------------------------ acting

    def _op(self, by: str, op: str, agent: AgentHandle, fn: Callable[[], Any], **data: Any) -> Any:
        """Record an ``op`` and perform it; an error is recorded (the scenario's verdict comes
        from the checks, e.g. DISP-3 expects ``send`` on a disposed agent to raise)."""
        entry = {"by": by, "op": op, "agent": agent.id, "status": agent.status, **data}
        simulator.observe("op", **entry)
        try:
            return fn()
        except Exception as exc:
            simulator.observe("op/error", by=by, op=op, agent=agent.id, error=f"{type(exc).__name__}: {exc}")
            return None

    def send(self, agent: str | AgentHandle | None, text: Any, *, by: str = "caller") -> None:
        """``agent.send(text)``."""
        h = self.handle(agent)
        self._op(by, "send", h, lambda: h.send(text), text=ev.texts(text))

    def steer(self, agent: str | AgentHandle | None, text: Any, *, by: str = "caller") -> None:
        """``agent.steer(text)``."""
        h = self.handle(agent)
        self._op(by, "steer", h, lambda: h.steer(text), text=ev.texts(text))

    def inject(self, agent: str | AgentHandle | None, text: Any, *, by: str = "caller") -> Any:
        """``agent.inject(text)`` (returns its awaitable, already started as a task, or ``None``
        when the call raised; ``inject_wait`` awaits it)."""
        h = self.handle(agent)

        def start() -> Any:
            return asyncio.ensure_future(_as_coro(h.inject(text)))

        task = self._op(by, "inject", h, start, text=ev.texts(text))
        if task is not None:
            task.add_done_callback(_retrieve)
        return task

    async def inject_wait(self, agent: str | AgentHandle | None, text: Any, *, by: str = "caller") -> None:
        """``await agent.inject(text)``: returns once the injection was taken (or refused; a
        refusal or failure is recorded as ``op/error``, as for ``inject``)."""
        task = self.inject(agent, text, by=by)
        if task is not None:
            await asyncio.wait({task})

    def cancel(self, agent: str | AgentHandle | None = None, reason: str | None = None, *, by: str = "caller") -> None:
        """``agent.cancel(reason)``."""
        h = self.handle(agent)
        self._op(by, "cancel", h, lambda: h.cancel() if reason is None else h.cancel(reason), reason=reason)

    def abort(self, agent: str | AgentHandle | None = None, reason: str | None = None, *, by: str = "caller") -> None:
        """``agent.abort(reason)``."""
        h = self.handle(agent)
        self._op(by, "abort", h, lambda: h.abort() if reason is None else h.abort(reason), reason=reason)

    def dispose(self, agent: str | AgentHandle | None = None, *, by: str = "caller") -> None:
        """``agent.dispose()``."""
        h = self.handle(agent)
        self._op(by, "dispose", h, h.dispose)

    def when_idle(self, agent: str | AgentHandle | None = None, name: str | None = None, *, by: str = "caller") -> Waiter:
        """Call ``agent.when_idle()`` now and watch it: its release is recorded as
        ``waiter/released`` with the agent's status and log length at that moment."""
        h = self.handle(agent)
        name = name or f"w{len(self.waiters) + 1}"
        if name in self.waiters:
            raise ValueError(f"a waiter named {name!r} already exists")
        waiter = Waiter(name, h.id)
        self.waiters[name] = waiter
        awaitable = self._op(by, "when_idle", h, h.when_idle, waiter=name)
        # A function, not a coroutine: a run cut short before the task starts leaves nothing
        # un-awaited behind.
        self.ctx.spawn(lambda: self._watch(waiter, h, awaitable), name=f"waiter-{name}")
        return waiter

    async def _watch(self, waiter: Waiter, h: AgentHandle, awaitable: Awaitable[Any] | None) -> None:
        if awaitable is None:  # when_idle() itself raised (recorded as op/error)
            self.ctx.fail(f"when_idle() {waiter.name!r} of agent {h.id!r} raised", check="IDLE-2")
            waiter.released.set_result(None)
            return
        try:
            await asyncio.wait_for(_as_coro(awaitable), self.idle_timeout)
        except TimeoutError:
            simulator.observe("waiter/timeout", waiter=waiter.name, agent=h.id)
            self.ctx.fail(
                f"when_idle() {waiter.name!r} of agent {h.id!r} did not resolve within "
                f"{self.idle_timeout:g}s of virtual time (status {h.status})",
                check="IDLE-2",
            )
        else:
            simulator.observe(
                "waiter/released", waiter=waiter.name, agent=h.id, status=h.status,
                log_len=len(h.session.events),
            )
        if not waiter.released.done():
            waiter.released.set_result(None)

    async def wait_idle(self, name: str) -> None:
        """Await the waiter called ``name`` (registered by ``when_idle``)."""
        try:
            waiter = self.waiters[name]
        except KeyError:
            raise LookupError(f"no waiter {name!r} (when_idle first)") from None
        await waiter.wait()

    # ------------------------------------------------------------------ reacting

    def listen(self, event: str, fn: Callable[..., Any]) -> Callable[[], object]:
        """Register ``fn`` on the implementation's bus (the raw listener signature)."""
        return self.service.on(event, fn)

    def at(self, t: float, fn: Callable[..., Any], *, name: str | None = None) -> None:
        """An actor at virtual time ``t`` (see ``ScenarioContext.at``)."""
        self.ctx.at(t, fn, name=name)

    def after(self, kind: str, fn: Callable[..., Any], *, where: Mapping[str, Any] | None = None, name: str | None = None) -> None:
        """An actor started once an event of ``kind`` matching ``where`` was observed."""
        self.ctx.after(kind, fn, where=dict(where) if where else None, name=name)

    # ------------------------------------------------------------------ the end

    async def finish(self) -> None:
        """Teardown: wait until every live agent is idle and no actor is left running (an actor
        triggered by the last turn may queue more work: wait again), then close the service
        (which disposes the agents), so every log is closed when the checks read it."""
        for _ in range(1000):
            await self._idle_all()
            pending = self.ctx.pending_actors()
            if not pending:
                break
            await asyncio.gather(*pending, return_exceptions=True)
        simulator.observe("world/closing")
        try:
            await asyncio.wait_for(self.service.close(), self.idle_timeout)
        except TimeoutError:
            self.ctx.fail("service.close() did not finish", check="quiescence")
        simulator.observe("world/closed", agents={k: h.status for k, h in self.agents.items()})

    async def _idle_all(self) -> None:
        for agent_id, h in self.agents.items():
            if h.status == "disposed":
                continue
            try:
                await asyncio.wait_for(_as_coro(h.when_idle()), self.idle_timeout)
            except TimeoutError:
                self.ctx.fail(
                    f"agent {agent_id!r} did not become idle within {self.idle_timeout:g}s of "
                    f"virtual time after the actors finished (status {h.status})",
                    check="quiescence",
                )
                return


async def _as_coro(awaitable: Any) -> Any:
    if inspect.isawaitable(awaitable):
        return await awaitable
    return awaitable


def _retrieve(task: asyncio.Future[Any]) -> None:
    # An inject() that raised is recorded, not left as an unretrieved task exception.
    if not task.cancelled() and task.exception() is not None:
        simulator.observe("op/error", op="inject", error=f"{type(task.exception()).__name__}: {task.exception()}")
