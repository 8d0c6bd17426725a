"""The world every scenario runs in: one service of the implementation under test, built inside
the simulation, with the kit's fake models and tools registered and everything observable
recorded in the run's timeline.

A scenario (declarative parts, a Python body, a rule test) only talks to the implementation
through a :class:`World`:

* building: ``model(script)``, ``tool(name, ...)``, ``gate(name)``, ``agent(id)``;
* acting: ``send``, ``steer``, ``inject``, ``cancel``, ``abort``, ``dispose``, ``when_idle`` /
  ``wait_idle`` (each recorded as an ``op`` entry naming who acted, the agent's status, and the
  event a listener acted on), or ``do(action)`` for an :class:`~.model.Action`;
* reacting: ``install(listener)`` (a :class:`~.model.Listener` on the implementation's bus),
  ``listen(event, fn)`` (a raw bus listener), actors (``at``, ``after``, ``spawn``), and
  ``on(kind, fn)`` / ``wait_for(kind)`` on observed events.

Timeline entries (``kind``): ``op`` / ``op/error``, every ``agent/*`` notification (flattened,
see ``events``), ``log`` (session events), ``listener`` (a listener acted), ``waiter/released``
(with the agent's status and log length at that moment), ``model/*`` and ``tool/*`` (from the
fakes), ``flush`` (a flush listener on every flush started or returned), ``warning`` (one
under the implementation's logger, ERR-12), ``actor/run`` / ``actor/error``, ``problem`` (what
the world saw go wrong), ``untriggered`` (an element that never acted), ``world/closing`` /
``world/closed``.

A waiter's release is *sampled*: whenever anything is observed (and before every operation),
the world asks each pending ``when_idle()`` awaitable whether it is done, so the release is
placed exactly between the observations it happened between. Awaitables without ``done()`` are
seen when their awaiting task resumes (and the IDLE-2 oracle judges those conservatively).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import copy
import inspect
import json
import logging
import math
import weakref
from collections.abc import Callable, Coroutine, Iterable, Mapping, MutableMapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import simulator
from conformance.adapter import (
    AgentHandle,
    Implementation,
    ServiceHandle,
    Source,
    ThrownValue,
    current_events,
    observer,
    waterfall_observer,
)
from conformance.catalogue import PYTHON, runtime_of
from conformance.fakes import FakeModel, FakeTool, Gate, ScriptEntry, ToolBox, respond
from conformance.fakes import errors as fake_errors
from conformance.invariants import clock_violations, event_key, repair_violations
from simulator import current_loop as simulator_current_loop
from simulator import observe as simulator_observe
from simulator import observe_fields as simulator_observe_fields
from simulator.sources import EPOCH_MS

from . import events as ev
from .model import Action, Actor, AgentSpec, Listener, Scenario, ToolSpec

if TYPE_CHECKING:  # imported where used: httpx and vcrpy load only for a scenario with a cassette
    from cassettes.model import CassetteModel

Observer = Callable[[dict[str, Any]], Any]


class ScenarioSetupError(Exception):
    """The implementation failed while building the service or an agent (exit 2 at the CLI)."""


class Waiter:
    """A ``when_idle()`` registered by the world, watched from the moment it was called."""

    def __init__(self, name: str, agent: str, awaitable: Any) -> None:
        self.name = name
        self.agent = agent
        self.awaitable = awaitable
        done = getattr(awaitable, "done", None)
        self.done: Callable[[], bool] | None = done if callable(done) else None
        self.released = asyncio.get_running_loop().create_future()
        self.task: asyncio.Task[Any] | None = None
        self.driver: asyncio.Future[Any] | None = None
        """The agent's driver task (the adapter's ``driver_task``) when the waiter was registered
        while the agent was running or disposed, the waiters IDLE-4 names: it asks that task to
        have exited by the release."""
        self.status: str | None = None
        """The agent's status when the release was recorded."""

    @property
    def is_released(self) -> bool:
        return self.released.done()


async def _began(coro: Coroutine[Any, Any, Any], by: str, agent: str, text: str) -> Any:
    """An inject's coroutine, marked in the timeline as its body begins."""
    simulator.observe("inject/began", by=by, agent=agent, text=text)
    return await coro


def _describe(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__


def _status_of(agent: AgentHandle) -> str:
    """The agent's status, or ``?`` when reading it fails (a broken implementation)."""
    try:
        return str(agent.status)
    except Exception:
        return "?"


async def _as_coro(awaitable: Any) -> Any:
    if inspect.isawaitable(awaitable):
        return await awaitable
    return awaitable


class World:
    """The implementation's service plus the fakes, driven and observed (see module docstring)."""

    def __init__(self, scenario: Scenario, impl: Implementation, *, persistence: object | None = None,
                 positions: list[tuple[dict[str, Any], int | None]] | None = None) -> None:
        self._loop = simulator.current_loop()
        if self._loop is None:
            raise RuntimeError("a World lives inside a simulation (run it with conformance.scenario.engine)")
        self.scenario = scenario
        self.impl = impl
        # The world's tasks (actors, waiter watchers) run in the caller's context, not in that of
        # the implementation's callback they are started from: a caller's task is its own.
        self._context = contextvars.copy_context()
        # (event, simulator.ready_position()) for each event, as an actor armed after the
        # scenario's own hears it: where the hunt's twin actor windows would start (hunt/windows.py)
        self._positions = positions
        self._in_process = runtime_of(impl) == PYTHON  # error objects reach the loop itself (ERR-9)
        self._raised: list[BaseException] = []  # errors the world's listeners raised: _raised_by_world
        self.idle_timeout = scenario.limits.idle_timeout
        self._store: object | None = None  # the persistence backend resumed agents load from
        self._flushed: dict[str, int] = {}  # agent -> its log's length when its last whole flush began
        self._final_logs: dict[str, list[Any]] = {}  # agent -> its log once the service closed
        self._resuming: dict[str, str] = {}  # agent id -> session id, while its resume() is in flight
        self._reloaded: list[tuple[str, str, list[Any]]] = []  # (agent, session, loaded log): reload()
        self._reloads_of: set[str] = set()  # the sessions a reload() was made of (only the first is judged)
        self._reopened: set[str] = set()  # the sessions a create verb's resume under the live id was refused
        if persistence is None and (any(a.resume is not None for a in scenario.agents) or _reloads(scenario)):
            persistence = self._persistence()
        try:
            self.service: ServiceHandle = impl.create_service(persistence=persistence)
        except Exception as exc:
            raise ScenarioSetupError(f"{impl.name}: create_service() raised {_describe(exc)}") from exc
        self.models: dict[str, FakeModel | CassetteModel] = {}
        self.tools = ToolBox()
        self._sections: list[tuple[str, Callable[[], object]]] = []  # the sections added (SVC-5): text, disposer
        self._tool_disposers: dict[str, Callable[[], object]] = {}  # registered tools, in order
        self._reconfigured = 0
        self._resumed_closed: list[str] = []  # agents a resume() returned once the service was closing
        self._recreated: list[tuple[str, AgentHandle]] = []  # agents a create() made during the close
        self._created_sessions: set[str] = set()  # the session ids create() made (SVC-1)
        self._one_shots: list[tuple[str, str, list[int]]] = []  # (name, event, notified counts): _one_shot
        self.gates: dict[str, Gate] = {}
        self.agents: dict[str, AgentHandle] = {}
        self.waiters: dict[str, Waiter] = {}
        self.closed = False
        self._close_returned = False  # the implementation's close() has returned (or failed)
        self._disposing: list[str] = []  # agents whose dispose() the world is inside
        self._dead_service: object | None = None  # the service of a persisted run that died mid-turn
        self._pending: list[Waiter] = []
        self._sessions: dict[str, str] = {}
        self._passed: list[Any] = []  # the mutable arguments given to the implementation (LOG-1)
        self._tasks: list[asyncio.Task[Any]] = []
        self._observers: list[tuple[str | None, Mapping[str, Any] | None, Observer]] = []
        self._elements: dict[str, int] = {}  # listener / actor name -> times it acted
        self._optional: set[str] = set()
        self._flush_recorded = False  # a flush listener records every flush (FLUSH reads world/closed)
        # the world's own recorder on agent/turn-continuation (CONTINUED reads world/closed)
        self._continuations_recorded = scenario.observe and scenario.record_continuations
        self._settles = 0
        self._injections: list[asyncio.Future[Any]] = []
        self._reloading: asyncio.Future[Any] | None = None  # the latest reload's task (a waterfall listener waits)
        # Each injection's failure is recorded once, by its done callback or, for one a listener
        # started while the service closed, by the close itself (the run ends right after).
        self._retrievers: dict[asyncio.Future[Any], Callable[[asyncio.Future[Any]], None]] = {}  # not yet recorded
        # Each inject's awaitable, with what the report of one that never settles says of it.
        self._inject_calls: dict[asyncio.Future[Any], tuple[str, str, str]] = {}  # task -> (by, agent, text)
        self._stuck: set[asyncio.Future[Any]] = set()  # injections still pending a bounded wait after the actors
        self._op_counts: dict[tuple[str, str, str], int] = {}  # ops per (actor, kind, agent)
        self._flush_count = 0  # flushes the recorder saw begin
        self._warnings = _WarningRecorder()
        self._closing: asyncio.Future[None] | None = None  # a close an actor or a listener started
        self._models_of: dict[str, str] = {}  # agent id -> the model it was created on
        self._cancelled_drivers: dict[str, asyncio.Task[Any]] = {}  # agent id -> its driver task a caller cancelled
        self._driverless: set[str] = set()  # agents whose cancelled driver was judged (PY-1): not settled
        self._stalled: set[str] = set()  # agents a waterfall listener stalled for ever: disposed if they hang
        # Per agent, the current step's chunks logged and notified, and the first notification
        # that came after a later chunk was logged or ahead of an earlier one's append (judged
        # when the step ends: _judge_chunks)
        self._chunk_marks: dict[str | None, list[int]] = {}
        self._chunks_flagged = False
        # The observers come first on the bus, so an event is in the timeline before any
        # scenario listener reacts to it (and a diagram shows cause before effect).
        if scenario.observe:
            for name in ev.OBSERVED:
                self.service.on(name, self._notification_observer(name))
            self.service.on("session/event", self._log_observer())
            self.service.on("agent/stream-chunk", self._chunk_observer())
            # The one waterfall every step ends with (LOOP-5): CONTINUED judges that it ran and
            # what it was told (CONT-1). A pass-through listener, first in the chain, so it sees
            # the loop's own default; over the wire a passive waterfall (no round trip).
            if self._continuations_recorded:
                self.service.on("agent/turn-continuation", self._continuation_observer())
        simulator.on_observe(self._notify)

    # ------------------------------------------------------------------ building

    def model(
        self,
        script: Iterable[ScriptEntry] = (),
        *,
        name: str = "fake",
        default: ScriptEntry | None = None,
        max_calls: int | None = None,
        strict: bool = False,
        edits_requests: bool = False,
    ) -> FakeModel:
        """A fake model (``conformance.fakes.FakeModel``) registered on the service as ``name``."""
        if name in self.models:
            raise ValueError(f"a model named {name!r} already exists")
        fake = FakeModel(script, name=name, default=default, max_calls=max_calls, strict=strict,
                         edits_requests=edits_requests)
        self.models[name] = fake
        self.service.register_model(name, fake)
        return fake

    def cassette(self, path: str | Path, *, name: str | None = None, strict: bool = False, **options: Any) -> CassetteModel:
        """A model replaying the recorded LLM cassette at ``path`` (``cassettes.model``: the
        recorded provider traffic through the real adapter, its gaps slept in virtual time),
        registered as ``name`` (default: the file's stem). Its problems (a request it cannot
        answer, with ``strict`` unplayed interactions) fail the run like a fake model's; a
        missing or malformed file raises ``CassetteError`` here."""
        from cassettes.model import CassetteModel

        name = name if name is not None else Path(path).stem
        if name in self.models:
            raise ValueError(f"a model named {name!r} already exists")
        recorded = CassetteModel(path, name=name, strict=strict, **options)
        self.models[name] = recorded
        self.service.register_model(name, recorded)
        return recorded

    def tool(self, name: str, result: Any = None, **options: Any) -> FakeTool:
        """A fake tool (``conformance.fakes.FakeTool``) registered on the service."""
        tool = FakeTool(name, result, **options) if result is not None else FakeTool(name, **options)
        return self.add_tool(tool)

    def add_tool(self, tool: FakeTool) -> FakeTool:
        """Register a fake tool built elsewhere."""
        self.tools.add(tool)
        self._tool_disposers[tool.name] = self.service.register_tool(tool)
        return tool

    def section_texts(self) -> list[str]:
        """The texts of the sections added now, in order (SVC-5: what a system prompt assembles)."""
        return [text for text, _dispose in self._sections]

    def registered_tools(self) -> list[str]:
        """The names of the tools registered now, sorted (SVC-5: what a request offers)."""
        return sorted(self._tool_disposers)

    def section(self, name: str, text: str) -> None:
        """Add a system-prompt section to the service (SVC-5); agents created after it record it."""
        try:
            disposer = self.service.add_system_prompt_section(name, text)
        except Exception as exc:
            raise ScenarioSetupError(f"{self.impl.name}: add_system_prompt_section({name!r}) raised "
                                     f"{_describe(exc)}") from exc
        self._sections.append((text, disposer))

    def reconfigure(self, *, by: str = "caller", on: str | None = None) -> None:
        """A caller changes the service's configuration while the agents run (SVC-5): removes the
        first section (when there is one), adds a section, and removes the last tool registered
        when two or more are, or else registers a tool (so a cache that only one of the two
        clears is caught, whichever it is, in one workload or another). Recorded as an ``op``
        carrying the sections' texts and the tools' names now: every request of a step that
        opened after it must carry them (the REQUEST oracle). A call that raises is an
        ``op/error``."""
        self._reconfigured += 1
        k = self._reconfigured
        entry: dict[str, Any] = {"by": by, "op": "reconfigure"}
        if on is not None:
            entry["on"] = on
        try:
            if self._sections:
                self._sections.pop(0)[1]()
            text = f"Section window-{k}."
            self._sections.append((text, self.service.add_system_prompt_section(f"window-{k}", text)))
            registered = list(self._tool_disposers)
            if len(registered) >= 2:
                self._tool_disposers.pop(registered[-1])()
            else:
                self.add_tool(FakeTool(f"window_tool_{k}", "ok"))
        except Exception as exc:
            simulator.observe("op", **entry)
            simulator.observe("op/error", by=by, op="reconfigure", error=_describe(exc))
            return
        simulator.observe("op", **entry, sections=self.section_texts(), tools=self.registered_tools())

    def gate(self, name: str) -> Gate:
        """The gate called ``name`` (created on first use)."""
        if name not in self.gates:
            self.gates[name] = Gate(name)
        return self.gates[name]

    def agent(
        self, agent_id: str = "a", *, model: str = "fake", system_prompt: str | None = None,
        configured: bool = False, **options: Any
    ) -> AgentHandle:
        """Create an agent (``service.create``) on ``model``; ``configured``: from configuration
        (``service.load_config``, SVC-4) where the implementation has the feature."""
        if configured and "configuration" in getattr(self.impl, "features", ()):
            return self._configured(agent_id, model, system_prompt)
        try:
            handle = self.service.create(agent_id, _options(model, system_prompt, **options))
        except Exception as exc:
            raise ScenarioSetupError(f"{self.impl.name}: create({agent_id!r}) raised {_describe(exc)}") from exc
        if handle is None:
            raise ScenarioSetupError(f"{self.impl.name}: create({agent_id!r}) returned None, not an agent")
        self._fresh_session(agent_id, handle)
        self._created(agent_id, handle, model, system_prompt)
        return handle

    def _configured(self, agent_id: str, model: str, system_prompt: str | None) -> AgentHandle:
        """An agent listed in configuration (SVC-4: ``agents: [{id, model?, system_prompt?}]``),
        looked up by id once created (SVC-6); its requests must carry its system prompt (SVC-5,
        REQUEST), whatever key a loop keeps it under."""
        entry: dict[str, Any] = {"id": agent_id, "model": model}
        if system_prompt is not None:
            entry["system_prompt"] = system_prompt
        try:
            self.service.load_config({"agents": [entry]})
            handle = self.service.get(agent_id)
        except Exception as exc:
            raise ScenarioSetupError(f"{self.impl.name}: load_config(agents: [{agent_id!r}]) raised "
                                     f"{_describe(exc)}") from exc
        if handle is None:
            raise ScenarioSetupError(f"{self.impl.name}: load_config(agents: [{agent_id!r}]) created no agent "
                                     f"{agent_id!r} (SVC-4, SVC-6: get() found none)")
        self._created(agent_id, handle, model, system_prompt)
        return handle

    def _fresh_session(self, agent_id: str, handle: AgentHandle) -> None:
        """SVC-1: ``create(id)`` makes its agent on a fresh session ``{id}-session-{uuid}``, a new
        one for each agent it makes."""
        try:
            session = str(handle.session.id)
        except Exception as exc:
            self.problem("SVC-1", f"agent {agent_id!r}: its session id could not be read: {_describe(exc)}",
                         rules=("SVC-1",))
            return
        prefix = f"{agent_id}-session-"
        if not session.startswith(prefix) or session == prefix:
            self.problem("SVC-1", f"create({agent_id!r}) made session {session!r}, not a fresh "
                         f"'{prefix}{{uuid}}'", rules=("SVC-1",))
        elif session in self._created_sessions:
            self.problem("SVC-1", f"create({agent_id!r}) made session {session!r} again: each create gets a "
                         "new session", rules=("SVC-1",))
        self._created_sessions.add(session)

    def _created(self, agent_id: str, handle: AgentHandle, model: str, system_prompt: str | None = None,
                 **fields: Any) -> None:
        """Watch a new agent and record ``agent/created``: the window right after creation,
        before the driver first runs (CANCEL-W0); listeners on it act inside this call. The entry
        carries the agent's own system prompt, the sections and the tools registered, when there
        are (SVC-5: what each of its requests must carry)."""
        self.adopt(agent_id, handle)
        self._models_of[agent_id] = model
        self._looked_up(agent_id, handle)
        if system_prompt is not None:
            fields["system_prompt"] = system_prompt
        if self._sections:
            fields["sections"] = self.section_texts()
        if self._tool_disposers:
            fields["tools"] = self.registered_tools()
        simulator.observe("agent/created", agent=agent_id, model=model, **fields)

    def _hands_out(self, agent_id: str, handle: AgentHandle) -> bool | None:
        """Whether ``service.get(agent_id)`` returns ``handle`` (``None``: the lookup failed, and
        there is nothing to say about the registry)."""
        try:
            return self.service.get(agent_id) is handle
        except Exception:
            return None

    def _looked_up(self, agent_id: str, handle: AgentHandle) -> None:
        """SVC-6: a live agent can be looked up by id as soon as its create() or resume() returned."""
        if self.closed or handle.status == "disposed" or self._hands_out(agent_id, handle) is not False:
            return
        self.problem("SVC-6", f"agent {agent_id!r}: service.get({agent_id!r}) does not return it once its "
                     "create() or resume() returned (SVC-6: live agents can be looked up by id)", rules=("SVC-6",))

    def _persistence(self) -> object:
        """A fresh backend of the implementation for the scenario's resumed (or reloaded) agents
        (SVC-3), its ``load()`` observed as the ``persistence/load`` point: where the backend has
        one in this process, or, for one living elsewhere that can be held (the wire's
        ``WirePersistence.hold``), through that."""
        if "persistence" not in set(getattr(self.impl, "features", ())):
            raise ScenarioSetupError(f"{self.impl.name}: the scenario resumes or reloads an agent, which needs "
                                     "the 'persistence' feature")
        try:
            self._store = self.impl.new_persistence()
        except Exception as exc:
            raise ScenarioSetupError(f"{self.impl.name}: new_persistence() raised {_describe(exc)}") from exc
        if observe_loads(self._store, self):
            return self._store
        hold = getattr(self._store, "hold", None)
        if callable(hold):  # a backend in the implementation's process (the wire)
            hold(self._held_load)
        return self._store

    async def _held_load(self, session_id: str) -> None:
        """A load of a backend living elsewhere, held as :func:`observe_loads` holds one here."""
        simulator.observe("persistence/load", agent=self.loading(session_id), session=session_id)
        await asyncio.sleep(LOAD_HOLD)

    async def _seed(self, specs: list[AgentSpec]) -> None:
        """Write the persisted runs of ``specs`` into the backend: each agent, on a service of
        its own over the same backend, runs its history a turn per prompt under its resume
        session id, then that service closes. A run that is ``interrupted`` dies inside one more
        turn, its model streaming: that service is left as a dead process's is, never closed
        (:meth:`_bury` closes it once the run is judged). Nothing of it is observed: the resumed
        log is recorded when it is loaded."""
        quiet = _QUIET_LOADS.set(True)
        try:
            service = self.impl.create_service(persistence=self._store)
            # one answer per turn, in the order the turns run; a run about to die gets a stream that
            # never ends (its process dies while it streams)
            script = [entry for spec in specs for entry in (
                *(respond.text("earlier") for _ in spec.history), *((respond.hang(),) if spec.interrupted else ()))]
            called = asyncio.Event()
            seed = FakeModel(script, default=respond.text("earlier"), name="seed", observe=False,
                             on_request=called.set)
            service.register_model("seed", seed)
            died = False
            for spec in specs:
                h = service.create_agent(spec.id, str(spec.resume), None, _options("seed", spec.system_prompt))
                for prompt in spec.history:
                    h.send(prompt)
                    await asyncio.wait_for(_as_coro(h.when_idle()), self.idle_timeout)
                if spec.interrupted:  # one more turn, cut where its process died: the model streaming
                    called.clear()
                    h.send(_DYING)
                    await asyncio.wait_for(called.wait(), self.idle_timeout)
                    died = True
            if died:
                self._dead_service = service  # never closed (a close would end those turns): it died
                return
            await asyncio.wait_for(_as_coro(service.close()), self.idle_timeout)
        except TimeoutError:
            raise ScenarioSetupError(f"{self.impl.name}: writing the persisted session of a resumed agent: the "
                                     f"agent or its service did not settle within {self.idle_timeout:g} s") from None
        except Exception as exc:
            raise ScenarioSetupError(f"{self.impl.name}: writing the persisted session of a resumed agent "
                                     f"raised {_describe(exc)}") from exc
        finally:
            _QUIET_LOADS.reset(quiet)

    async def resume(self, spec: AgentSpec, *, by: str = "world") -> AgentHandle | None:
        """``service.resume(id, session)`` (SVC-3), recorded as an ``op`` naming the session; once
        it returns, the loaded log is recorded (``log`` entries marked ``loaded``) and then
        ``agent/created`` (with ``resumed`` and the live ``session`` id). A resume that raises is
        an ``op/error``, and a problem unless a ``create`` took the id during its load (SVC-2
        lets either win)."""
        agent_id, session = spec.id, str(spec.resume)
        simulator.observe("op", by=by, op="resume", agent=agent_id, session=session)
        self._resuming[agent_id] = session
        try:
            handle: AgentHandle = await _as_coro(
                self.service.resume(agent_id, session, _options(spec.model, spec.system_prompt)))
        except Exception as exc:
            simulator.observe("op/error", by=by, op="resume", agent=agent_id, error=_describe(exc))
            if agent_id not in self.agents and not self.closed:  # a closed service may refuse it (SVC-7)
                self.problem("SVC-3", f"resume({agent_id!r}, {session!r}) of a persisted session raised "
                             f"{_describe(exc)}", rules=("SVC-3",))
            return None
        finally:
            self._resuming.pop(agent_id, None)
        if self.closed:
            self._resumed_closed.append(agent_id)  # judged once the close is done (_late_agents)
        for event in handle.session.events:
            simulator.observe("log", agent=agent_id, seq=event.get("seq"), type=event.get("type"),
                              data=ev.compact_data(event), loaded=True)
        self._created(agent_id, handle, spec.model, spec.system_prompt, resumed=session, session=handle.session.id)
        return handle

    def reload(self, agent: str | AgentHandle | None, *, by: str = "caller", on: str | None = None) -> None:
        """The agent's session resumed by a second service over the same backend while this one
        still runs it, as a process restarted after its writer died there would (SVC-3): recorded
        as an ``op``, the resume a task the run waits for, its service closed once it loaded.
        What it loaded is judged once the run is over (:meth:`_judge_reloads`): the writer's log
        as far as it was persisted, then at most the backend's repair of the turn left open (its
        open step's ``step/end``, the turn's ``turn/end{interrupted}``), balanced (LOG-4, LOG-5).
        The world's later check of the backend skips a reloaded session: two writers touched it."""
        if self._store is None:
            raise RuntimeError("reload needs a persistence backend: the world makes one for a scenario whose "
                               "actions include reload")
        h = self.handle(agent)
        agent_id = self._id_of(h)
        self._record_op(by, "reload", h, on)
        # Not judged when it raises before any flush (a backend may hold a session from its first
        # flush), nor after an earlier reload of the session (its repair may be in the store,
        # which the writer goes on appending to: what a load makes of that is no rule's).
        session = h.session.id
        first = session not in self._reloads_of
        self._reloads_of.add(session)
        task = asyncio.ensure_future(self._reload(agent_id, session, first, agent_id in self._flushed, by))
        self._injections.append(task)  # the run waits for it like an actor
        self._reloading = task

    async def _held_reload(self) -> None:
        """Wait (a virtual second at most) for the reload a waterfall listener just started: a
        backend that makes a second service's load wait for the writer's turn gets it later, as
        an actor's reload would, and is judged the same."""
        task = self._reloading
        if task is None:
            return
        try:
            await asyncio.wait_for(asyncio.shield(task), 1.0)
        except TimeoutError:
            pass

    async def _reload(self, agent_id: str, session: str, first: bool, flushed: bool, by: str) -> None:
        _QUIET_LOADS.set(True)  # this task's own context: the check's load is no point of the run
        service: Any = None
        reloaded = f"{agent_id}-reloaded-{len(self._reloaded) + 1}"
        try:
            service = self.impl.create_service(persistence=self._store)
            again = await asyncio.wait_for(_as_coro(service.resume(
                reloaded, session, {"model": self._models_of.get(agent_id, "fake")})), self.idle_timeout)
            loaded = [dict(e) if isinstance(e, Mapping) else e for e in again.session.events]
            simulator.observe("reload/loaded", agent=agent_id, session=session, events=len(loaded))
            if first:
                self._reloaded.append((agent_id, session, loaded))
        except TimeoutError:
            self.problem("SVC-3", f"resume({reloaded!r}, {session!r}) on a second service over the same backend, "
                         "while the writer ran, did not finish", rules=("SVC-3",))
        except Exception as exc:
            simulator.observe("op/error", by=by, op="reload", agent=agent_id, error=_describe(exc))
            if first and flushed:
                self.problem("SVC-3", f"resume({reloaded!r}, {session!r}) on a second service over the same "
                             f"backend, after the session was flushed, raised {_describe(exc)}", rules=("SVC-3",))
        finally:
            if service is not None:
                try:
                    await asyncio.wait_for(_as_coro(service.close()), self.idle_timeout)
                except Exception:  # this service is the check's: its close is not what is judged
                    pass

    def loading(self, session_id: str) -> str | None:
        """The agent whose resume() loads ``session_id`` now (``None``: none)."""
        return next((a for a, s in self._resuming.items() if s == session_id), None)

    def adopt(self, agent_id: str, handle: AgentHandle) -> None:
        """Watch an agent created some other way (``create_agent``, ``resume``, configuration)."""
        self.agents[agent_id] = handle
        self._sessions[handle.session.id] = agent_id

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
        # The observers hold the world weakly: the implementation's objects (often in reference
        # cycles of their own) then keep no world, loop or timeline alive after the run. The
        # world lives as long as the run does (the loop's observers hold it). Each observer
        # repeats this guard inline: a shared wrapper is one more call per event, 2-3% of a run.
        loop = self._loop
        world = weakref.ref(self)

        def observe(*args: Any) -> None:
            # An implementation's leftover code finalised during a later run writes nothing there.
            if simulator_current_loop() is loop:
                w = world()
                if w is not None:
                    simulator_observe_fields(name, w._notification_fields(name, args))

        observe.__qualname__ = f"observe:{name}"
        return observer(observe)

    def _continuation_observer(self) -> Callable[..., Any]:
        loop = self._loop
        world = weakref.ref(self)

        def record(agent: Any, turn: Any, decision: Any) -> None:
            if simulator_current_loop() is loop:
                w = world()
                if w is not None:
                    simulator_observe("continuation", agent=w.agent_id(agent), turn=turn,
                                      decision=decision if isinstance(decision, bool) else ev.jsonable(decision))

        return waterfall_observer(record)

    def _log_observer(self) -> Callable[..., None]:
        loop = self._loop
        world = weakref.ref(self)

        def observe(session: Any, event: Mapping[str, Any]) -> None:
            if simulator_current_loop() is not loop:
                return
            w = world()
            if w is None:
                return
            agent = w._sessions.get(getattr(session, "id", None) or "", None)
            kind = event.get("type")
            if kind == "assistant/chunk":
                w._marks(agent)[0] += 1
            elif kind == "step/start" or kind == "step/end":
                w._judge_chunks(agent)
            # ev.compact_log's fields, passed as they are made (no intermediate dict)
            simulator_observe("log", agent=agent, seq=event.get("seq"), type=kind, data=ev.compact_data(event))

        observe.__qualname__ = "observe:session/event"
        return observer(observe)

    def _chunk_observer(self) -> Callable[..., None]:
        loop = self._loop
        world = weakref.ref(self)

        def observe(*args: Any) -> None:
            if simulator_current_loop() is not loop:
                return
            w = world()
            if w is None:
                return
            marks = w._marks(w.agent_id(args[0]) if args else None)
            marks[1] += 1
            if marks[0] > marks[1] and not marks[2]:
                marks[2] = marks[1]  # the first chunk notified after a later one was logged
            elif marks[1] - marks[0] > 1 and not marks[3]:
                marks[3] = marks[1]  # the first chunk notified while an earlier one was not logged yet

        observe.__qualname__ = "observe:agent/stream-chunk"
        return observer(observe)

    def _marks(self, agent: str | None) -> list[int]:
        """The agent's step marks: chunks logged, chunks notified, the first chunk notified late,
        the first notified ahead of an earlier chunk's append (0: none)."""
        marks = self._chunk_marks.get(agent)
        if marks is None:
            marks = self._chunk_marks[agent] = [0, 0, 0, 0]
        return marks

    def _judge_chunks(self, agent: str | None) -> None:
        """PY-2, LOOP-5, at a step's end: each chunk is notified as it is appended (or just
        before), never after a later chunk was logged. Judged once every chunk of the step was
        notified: a step whose notifications merely stopped is not this check's to judge."""
        marks = self._chunk_marks.pop(agent, None)
        if marks is None or not (marks[2] or marks[3]) or marks[0] != marks[1] or self._chunks_flagged:
            return
        self._chunks_flagged = True
        if marks[2]:
            self.problem("PY-2", f"agent {agent!r}: agent/stream-chunk #{marks[2]} of a step was notified after a "
                         "later chunk was logged (PY-2: a notification runs its listeners before emit returns; "
                         "LOOP-5: each chunk is appended and emitted as it arrives)", rules=("PY-2", "LOOP-5"))
        else:
            self.problem("LOOP-5", f"agent {agent!r}: agent/stream-chunk #{marks[3]} of a step was notified while "
                         "an earlier chunk was not yet logged (LOOP-5: each chunk is appended as assistant/chunk "
                         "as it arrives, not in a batch)", rules=("LOOP-5", "LOG-3"))

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
                out[arg_name] = self.agent_id(value) if arg_name == "agent" else value
            if name == "agent/turn-continuation" and len(args) > len(names):
                out["decision"] = bool(args[len(names)])
            return out
        return self._notification_fields(name, args)

    def _notification_fields(self, name: str, args: tuple[Any, ...]) -> dict[str, Any]:
        """``fields`` of a notification (``agent/*``): what the world records of every one."""
        if not args:
            return {"agent": None}
        out: dict[str, Any] = {"agent": self.agent_id(args[0])}
        plain, shaped = ev.PLAIN, ev.SHAPED
        for arg_name, value in zip(ev.NOTIFICATIONS.get(name, ()), args[1:], strict=False):
            if type(value) in plain and arg_name not in shaped:
                out[arg_name] = value  # what ev.flatten gives, without its dict
            else:
                out.update(ev.flatten(arg_name, value))
        copied = self._copied(args[3]) if name == "agent/error" and len(args) > 3 else None
        if copied is not None:
            out["copied"] = copied  # only then: the timelines of every other run stay as they were
        return out

    def _raised_by_world(self, error: BaseException, on: str | None) -> BaseException:
        """``error``, marked and kept as one the world raises into the implementation (ERR-9). Not
        kept when a status listener throws it: no turn fails of it, and ERR-8 leaves announcing it
        open, so what an announcement of it carries is not ERR-9's question."""
        fake_errors.mark(error)
        if on != "agent/status":
            self._raised.append(error)
        return error

    def _copied(self, error: Any) -> str | None:
        """ERR-9, in process: the message of an error the world raised (a fake model's scripted
        failure, a listener told to throw) when an ``agent/error`` announcement's ``error`` is
        another value standing for it: a new error made of its message, or a wrapper whose cause
        or context chain reaches it (``raise New(...) from exc``). Either way the original is
        not what the listeners get (its type, its attributes, the object a plugin may compare).
        ``None`` otherwise, and over the wire, where no object crosses. (The ORIGINAL oracle
        judges it only when that raise was made in the announced turn.)"""
        if not self._in_process or not isinstance(error, BaseException | str):
            return None
        raised = [*self._raised, *(e for m in self.models.values() for e in getattr(m, "raised", ()))]
        origin = fake_errors.origin_of(error)
        if origin == "original":
            return None
        try:
            if origin == "chained":
                # the link the chain reaches, when it is one the world raised (not a status
                # listener's throw, which ERR-8 leaves unannounced or announced as it likes)
                link = next((e for e in fake_errors.causes(error)[1:] if any(e is r for r in raised)), None)
                return None if link is None else str(link)
            text = str(error)
            return text if any(text == str(e) for e in raised) else None
        except Exception:  # an error whose str() raises (a hostile one): nothing to compare
            return None

    def _notify(self, event: dict[str, Any]) -> None:
        if self._pending:
            self._sample()
        if not self._observers or event.get("loaded"):
            return  # a resumed log's events ran before this run: nothing waits for them
        for kind, where, fn in tuple(self._observers):
            if kind is not None and event.get("kind") != kind:
                continue
            if where and not ev.matches(event, where):
                continue
            fn(event)

    def _sample(self) -> None:
        """Record every pending waiter that is now released (see the module docstring)."""
        for waiter in tuple(self._pending):
            if waiter.done is not None and waiter.done():
                self._released(waiter, precise=True)

    def _released(self, waiter: Waiter, *, precise: bool) -> None:
        if waiter.is_released:
            return
        if waiter in self._pending:
            self._pending.remove(waiter)
        h = self.agents.get(waiter.agent)
        waiter.status = h.status if h is not None else None
        simulator.observe(
            "waiter/released", waiter=waiter.name, agent=waiter.agent,
            status=waiter.status,
            log_len=len(h.session.events) if h is not None else 0, precise=precise,
        )
        waiter.released.set_result(None)

    def on(self, kind: str | None, fn: Observer, *, where: Mapping[str, Any] | None = None) -> Callable[[], None]:
        """Call ``fn(event)`` synchronously for every later observed event of ``kind`` (``None``:
        all) matching ``where`` (not a resumed log's ``loaded`` entries). Returns a disposer."""
        entry = (kind, dict(where) if where else None, fn)
        self._observers.append(entry)

        def dispose() -> None:
            if entry in self._observers:
                self._observers.remove(entry)

        return dispose

    async def wait_for(self, kind: str, where: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Wait until an event of ``kind`` matching ``where`` has been observed (at once if it has)."""
        for event in simulator.current_timeline():
            if event.get("kind") == kind and not event.get("loaded") and ev.matches(event, where):
                return event
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()

        def hit(event: dict[str, Any]) -> None:
            if not fut.done():
                fut.set_result(event)

        dispose = self.on(kind, hit, where=where)
        try:
            return await fut
        finally:
            dispose()

    def _sourced(self, text: Any, source: Mapping[str, Any] | None) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """The arguments of ``send``/``steer``/``inject`` (the source only when one is given: the
        default is the implementation's) and the ``op`` entry's extra field. The objects passed
        are kept: the close edits them, and the log must not change with them (LOG-1)."""
        args: tuple[Any, ...] = (text,) if source is None else (text, cast(Source, dict(source)))
        self._passed.extend(a for a in args if isinstance(a, (list, dict)))
        if source is None:
            return args, {}
        if _unserialisable(source):
            # a source JSON cannot encode (INJ-4's bad input; ERR-8's failure before turn/start):
            # the timeline keeps JSON only, the source less what JSON cannot encode
            return args, {"bad_source": True, "source": {k: v for k, v in source.items() if not _unserialisable(v)}}
        return args, {"source": dict(source)}

    def _log_drift(self, logs: Mapping[str, Sequence[Mapping[str, Any]]]) -> None:
        """LOG-1, once the agents are done: the caller edits what it passed (prompts' blocks,
        sources), and every log entry must still hold what its ``session/event`` notification
        carried. An entry that changed kept a live object: the caller's, or one the loop edited
        after the append. Chunks are left out (many, and the loop's own)."""
        for value in [*self._passed, *(r for tool in self.tools for r in tool.returned)]:
            _scramble(value)  # what the caller passed, a plugin returned, a tool returned
        self._passed.clear()
        logs = self._relogged(logs)
        sessions: dict[str, int] = {}
        for agent_id in self._sessions.values():
            sessions[agent_id] = sessions.get(agent_id, 0) + 1
        seen = {(e.get("agent"), e.get("seq")): e for e in simulator.current_timeline() if e.get("kind") == "log"}
        for agent_id, events in logs.items():
            if sessions.get(agent_id, 0) != 1:
                continue  # an id that had two sessions: its entries cannot be told apart by seq
            for event in events:
                kind = event.get("type")
                entry = seen.get((agent_id, event.get("seq")))
                if kind == "assistant/chunk" or entry is None or entry.get("type") != kind:
                    continue
                now = ev.compact_data(event)
                if now != entry.get("data"):
                    self.problem("LOG-1", f"agent {agent_id!r}'s log entry {event.get('seq')} ({kind}) changed after "
                                 f"it was appended: {_brief(entry.get('data'))} became {_brief(now)} (the "
                                 "log holds a snapshot, not an object the caller or the loop edits later)",
                                 rules=("LOG-1",))
                    return

    def _clocks(self, logs: Mapping[str, Sequence[Mapping[str, Any]]]) -> None:
        """PY-3, once the agents are done: no log mixes the injected clock's times with a direct
        read of the real clock (``invariants.clock_violations``)."""
        for agent_id, events in logs.items():
            found = clock_violations(events, EPOCH_MS)
            if found:
                self.problem("PY-3", f"agent {agent_id!r}: {found[0]}", rules=("PY-3",))
                return

    def _relogged(self, logs: Mapping[str, Sequence[Mapping[str, Any]]]) -> Mapping[str, Sequence[Mapping[str, Any]]]:
        """``logs`` read again once the world's edits are made (a loop's ``session.events`` may hand
        out copies, read before them); where they live elsewhere (the wire) as they are there, the
        edits made to them first (``current_events``)."""
        out = dict(logs)
        try:
            for agent_id, h in self.agents.items():
                if agent_id in out:
                    out[agent_id] = list(current_events(h.session))
        except Exception:  # a log that cannot be read any more: as it was read before
            return logs
        return out

    def problem(self, check: str, message: str, *, rules: tuple[str, ...] = ()) -> None:
        """Record something the world saw go wrong (the ``problems`` oracle fails the run)."""
        simulator.observe("problem", check=check, message=message, **({"rules": list(rules)} if rules else {}))

    # ------------------------------------------------------------------ acting

    def _op(self, by: str, op: str, agent: AgentHandle, fn: Callable[[], Any], on: str | None = None,
            **data: Any) -> Any:
        """Record an ``op`` and perform it; an error is recorded as ``op/error`` (the verdict
        comes from the checks, e.g. DISP-3 expects ``send`` on a disposed agent to raise)."""
        entry = self._record_op(by, op, agent, on, **data)
        try:
            return fn()
        except Exception as exc:
            simulator.observe("op/error", by=by, op=op, agent=entry["agent"], error=_describe(exc))
            return None

    def _record_op(self, by: str, op: str, agent: AgentHandle | str, on: str | None, **data: Any) -> dict[str, Any]:
        """Record the ``op`` timeline entry of an operation about to be done (and count it); an
        agent given by id has no handle yet (its status is ``None``)."""
        if self._pending:
            self._sample()  # a release before this operation is recorded before it
        agent_id, status = (agent, None) if isinstance(agent, str) else (self._id_of(agent), agent.status)
        entry: dict[str, Any] = {"by": by, "op": op, "agent": agent_id, "status": status, **data}
        if on is not None:
            entry["on"] = on
        key = (by, op, entry["agent"])
        self._op_counts[key] = self._op_counts.get(key, 0) + 1
        simulator.observe("op", **entry)
        return entry

    def _raising(self, agent: str | AgentHandle | None, by: str, on: str | None, code: str | None = None,
                 message: str | None = None) -> None:
        """Record a listener's ``raise`` as an ``op`` (the oracles judge what a throwing plugin
        causes, ERR-2/ERR-11; ERR-7 the ``code`` it carries), before it raises."""
        try:
            h = self.handle(agent)
        except LookupError:
            return
        self._record_op(by, "raise", h, on, **({} if code is None else {"code": code, "message": message}))

    def _id_of(self, h: AgentHandle) -> str:
        for agent_id, handle in self.agents.items():
            if handle is h:
                return agent_id
        return str(getattr(h, "id", "?"))

    def send(self, agent: str | AgentHandle | None, text: Any, *, by: str = "caller", on: str | None = None,
             source: Mapping[str, Any] | None = None) -> None:
        """``agent.send(text[, source])``."""
        h = self.handle(agent)
        args, extra = self._sourced(text, source)
        self._op(by, "send", h, lambda: h.send(*args), on, text=ev.texts(text), **extra)

    def steer(self, agent: str | AgentHandle | None, text: Any, *, by: str = "caller", on: str | None = None,
              source: Mapping[str, Any] | None = None) -> None:
        """``agent.steer(text[, source])``."""
        h = self.handle(agent)
        args, extra = self._sourced(text, source)
        self._op(by, "steer", h, lambda: h.steer(*args), on, text=ev.texts(text), **extra)

    def inject(self, agent: str | AgentHandle | None, text: Any, *, by: str = "caller",
               on: str | None = None, source: Mapping[str, Any] | None = None) -> asyncio.Future[Any] | None:
        """``agent.inject(text[, source])``: its awaitable, started as a task (``None`` when the
        call raised). A failure of the injection is recorded as ``op/error``."""
        h = self.handle(agent)
        agent_id = self._id_of(h)
        args, extra = self._sourced(text, source)

        def start() -> asyncio.Future[Any]:
            # INJ-4: a coroutine, another awaitable, or a plain call that returned. A coroutine
            # becomes the task itself, so a task cancelled before it starts closes it; its body
            # runs when the task first runs, which the timeline marks (``inject/began``): whether
            # a turn was open then, by the log, is what INJ-1 decides from.
            result = h.inject(*args)
            if inspect.iscoroutine(result):
                return asyncio.ensure_future(_began(result, by, agent_id, ev.texts(text)))
            return asyncio.ensure_future(_as_coro(result))

        if "bad_source" not in extra and _unserialisable(text):
            extra["unserialisable"] = True  # INJ-4's bad input: it must raise (judged by INJ-2's oracle)
        task = self._op(by, "inject", h, start, on, text=ev.texts(text), **extra)
        # Which inject a later failure answers: others of the same caller may have come since.
        nth = self._op_counts[(by, "inject", agent_id)]
        if task is not None:
            self._injections.append(task)  # work the world started: settled before it closes

            def retrieve(done: asyncio.Future[Any]) -> None:
                if self._retrievers.pop(done, None) is None:
                    return  # recorded already
                if not done.cancelled() and done.exception() is not None:
                    simulator.observe("op/error", by=by, op="inject", agent=agent_id, nth=nth,
                                      error=_describe(done.exception()))  # type: ignore[arg-type]

            task.add_done_callback(retrieve)
            self._retrievers[task] = retrieve
            self._inject_calls[task] = (by, agent_id, ev.texts(text))
        return task

    async def inject_wait(self, agent: str | AgentHandle | None, text: Any, *, by: str = "caller",
                          source: Mapping[str, Any] | None = None) -> None:
        """``await agent.inject(text)``: returns once the injection was taken or refused, or
        after the world's idle timeout (virtual): one that never settles is reported when the
        run ends (:meth:`_settle_injections`), and the actor goes on meanwhile."""
        task = self.inject(agent, text, by=by, source=source)
        if task is not None:
            await asyncio.wait({task}, timeout=self.idle_timeout)

    def cancel(self, agent: str | AgentHandle | None = None, reason: str | None = None, *, by: str = "caller",
               on: str | None = None) -> None:
        """``agent.cancel(reason)``."""
        h = self.handle(agent)
        self._op(by, "cancel", h, lambda: h.cancel() if reason is None else h.cancel(reason), on, reason=reason)

    def abort(self, agent: str | AgentHandle | None = None, reason: str | None = None, *, by: str = "caller",
              on: str | None = None) -> None:
        """``agent.abort(reason)``."""
        h = self.handle(agent)
        self._op(by, "abort", h, lambda: h.abort() if reason is None else h.abort(reason), on, reason=reason)

    def dispose(self, agent: str | AgentHandle | None = None, *, by: str = "caller", on: str | None = None) -> None:
        """``agent.dispose()``; once it returned with the agent disposed, the service must no longer
        hand it out (SVC-6: disposal removes an agent from the registry; a new agent a listener
        created under the id meanwhile is another agent)."""
        h = self.handle(agent)
        before = h.status
        entry = self._record_op(by, "dispose", h, on)
        self._disposing.append(entry["agent"])
        try:
            h.dispose()
        except Exception as exc:
            simulator.observe("op/error", by=by, op="dispose", agent=entry["agent"], error=_describe(exc))
            self.problem("DISP-2", f"agent {entry['agent']!r}: dispose() raised {_describe(exc)} (0b: dispose() is "
                         "synchronous and cannot fail; DISP-2: no throwing listener breaks it)", rules=("DISP-2",))
        finally:
            self._disposing.remove(entry["agent"])
        if before == "disposed" or h.status != "disposed":
            return  # a dispose of a disposed agent (within its disposal, say) did not do the disposal
        agent_id = self._id_of(h)
        if self._hands_out(agent_id, h):
            self.problem("SVC-6", f"agent {agent_id!r}: service.get({agent_id!r}) still returns it once its dispose() "
                         "returned (SVC-6: disposal removes an agent from the registry)", rules=("SVC-6",))

    def cancel_driver(self, agent: str | AgentHandle | None = None, *, by: str = "caller", on: str | None = None) -> None:
        """``service.driver_task(agent).cancel()`` (PY-1: the driver ends, the agent ends
        ``disposed`` with a balanced log; judged when the run ends, :meth:`_drivers_cancelled`).
        An implementation without a driver task here (one over the wire) records ``op/error``."""
        h = self.handle(agent)

        def driver() -> asyncio.Future[Any]:
            task = self.service.driver_task(h)
            if not isinstance(task, asyncio.Future):
                raise LookupError("no driver task (service.driver_task returned None)")
            return task

        task = self._op(by, "cancel_driver", h, driver, on)
        if task is None or task.done():  # no task (op/error), or an ended driver: nothing PY-1 says
            return
        task.cancel()
        self._cancelled_drivers.setdefault(self._id_of(h), task)

    async def _drivers_cancelled(self) -> None:
        """PY-1: a driver task a caller cancelled has ended (bounded wait), and its agent is
        ``disposed``. Judged once the actors are done, before the agents are settled: an agent
        left without a driver never settles, and its wait would only hide the cause."""
        judged, self._cancelled_drivers = self._cancelled_drivers, {}
        for agent_id, task in judged.items():
            self._driverless.add(agent_id)
            if not task.done():
                await asyncio.wait([task], timeout=self.idle_timeout)
            h = self.agents.get(agent_id)
            # the task's done-callbacks run once it is done: one may be what disposes the agent (a
            # driver cancelled before it first ran never runs its own code, and a loop may dispose
            # on its scheduler's next pass), so let all they set off run first; a number of
            # yields would not do, as a schedule may pass those callbacks over for longer
            if h is not None and h.status != "disposed" and task.done():
                await simulator.wait_quiescent()
            if not task.done():
                self.problem("PY-1", f"agent {agent_id!r}: its driver task was cancelled but still runs "
                             f"{self.idle_timeout:g}s later (status {h.status if h is not None else '?'}): "
                             "the cancellation was swallowed", rules=("PY-1",))
            elif h is not None and h.status != "disposed":
                self.problem("PY-1", f"agent {agent_id!r}: its driver task was cancelled and ended, but the agent "
                             f"is {h.status!r}, not 'disposed'", rules=("PY-1",))

    def when_idle(self, agent: str | AgentHandle | None = None, name: str | None = None, *, by: str = "caller",
                  on: str | None = None) -> Waiter:
        """Call ``agent.when_idle()`` now and watch it: its release is recorded as
        ``waiter/released`` with the agent's status and log length at that moment."""
        h = self.handle(agent)
        name = name or f"w{len(self.waiters) + 1}"
        if name in self.waiters:
            raise ValueError(f"a waiter named {name!r} already exists")
        held = _status_of(h) in ("running", "disposed")
        awaitable = self._op(by, "when_idle", h, h.when_idle, on, waiter=name)
        waiter = Waiter(name, self._id_of(h), awaitable)
        waiter.driver = self._driver_of(h) if held else None
        self.waiters[name] = waiter
        if awaitable is None:  # when_idle() itself raised (recorded as op/error)
            self.problem("IDLE-2", f"when_idle() {name!r} of agent {waiter.agent!r} raised", rules=("IDLE-1", "IDLE-2"))
            waiter.released.set_result(None)
            return waiter
        self._pending.append(waiter)
        self._sample()  # released at once when the agent is quiescent (IDLE-1)
        if not waiter.is_released:
            waiter.task = self._spawn_task(self._watch(waiter), f"waiter-{name}")
        return waiter

    async def _watch(self, waiter: Waiter) -> None:
        await _as_coro(waiter.awaitable)
        # Nothing observable happened since the release when the awaitable tells when it was
        # released (a sample would have seen it), so only an awaitable without done() is late.
        self._released(waiter, precise=waiter.done is not None)
        if waiter.driver is not None and waiter.status == "disposed" and waiter.done is not None:
            self._driver_exited(waiter)

    def _driver_of(self, h: AgentHandle) -> asyncio.Future[Any] | None:
        """The agent's driver task, as the adapter names it (``None``: it names none, as over the
        wire, or a loop that runs no task while it waits)."""
        try:
            task = self.service.driver_task(h)
        except Exception:
            return None
        return task if isinstance(task, asyncio.Future) else None

    def _driver_exited(self, waiter: Waiter) -> None:
        """IDLE-4, as the waiter's awaiter resumes: a waiter registered while running (or on the
        disposed agent) and released by the disposal waits for the driver loop to have exited, so
        the driver task the adapter named when the waiter was registered is done by now (its
        awaiter resumes only after the step that released it: a driver still running then
        released it and went on), unless the adapter names no running task for the agent now.
        Both: a loop that starts a task per prompt names a later one once its driver exits (a
        task that will find the agent disposed and do nothing), and one driving every agent from
        one scheduler task names that task while the agent runs, and none once it left it.
        Judged of a waiter that tells when it was released (``done()``), so its status then is
        known."""
        task = waiter.driver
        h = self.agents.get(waiter.agent)
        now = self._driver_of(h) if h is not None else None
        if task is not None and not task.done() and now is not None and not now.done():
            self.problem("IDLE-4", f"when_idle() {waiter.name!r} of agent {waiter.agent!r} was released by its disposal "
                         "while its driver task still ran (IDLE-4: a waiter registered while running, or on the "
                         "disposed agent, waits for the driver loop to have exited)", rules=("IDLE-4",))

    async def wait_idle(self, name: str) -> bool:
        """Await the waiter called ``name`` for at most the idle timeout; ``False`` (and a
        ``waiter/timeout`` entry) when it did not resolve: liveness is judged at the end."""
        try:
            waiter = self.waiters[name]
        except KeyError:
            raise LookupError(f"no waiter {name!r} (when_idle first)") from None
        try:
            await asyncio.wait_for(asyncio.shield(waiter.released), self.idle_timeout)
        except TimeoutError:
            simulator.observe("waiter/timeout", waiter=name, agent=waiter.agent)
            return False
        return True

    def do(self, action: Action, by: str, on: str | None = None, subject: str | None = None) -> Any:
        """Perform one :class:`~.model.Action`; an awaiting action returns its awaitable.
        ``subject``: the agent a ``raise`` without one fails (the listener's event's agent)."""
        verb, agent = action.verb, action.agent
        if verb == "send":
            self.send(agent, _content(action), by=by, on=on, source=_source(action))
        elif verb == "steer":
            self.steer(agent, _content(action), by=by, on=on, source=action.source)
        elif verb == "inject":
            source = _source(action)
            if action.wait:
                return self.inject_wait(agent, _content(action), by=by, source=source)
            self.inject(agent, _content(action), by=by, on=on, source=source)
        elif verb == "cancel":
            self.cancel(agent, action.reason, by=by, on=on)
        elif verb == "abort":
            self.abort(agent, action.reason, by=by, on=on)
        elif verb == "dispose":
            self.dispose(agent, by=by, on=on)
        elif verb == "when_idle":
            self.when_idle(agent, action.name, by=by, on=on)
        elif verb == "close":
            self.close_soon(by=by, on=on)
        elif verb == "create":
            self.create_taken(agent, by=by, on=on)
        elif verb == "cancel_driver":
            self.cancel_driver(agent, by=by, on=on)
        elif verb == "reconfigure":
            self.reconfigure(by=by, on=on)
        elif verb in ("stop", "answer"):  # the listener's own return value (see install)
            self._record_op(by, verb, self.handle(agent), on)
        elif verb == "reload":
            self.reload(agent, by=by, on=on)
        elif verb == "raise":
            self._raising(agent if agent is not None else subject, by, on, action.code, action.message)
            if action.thrown:
                raise self._raised_by_world(ThrownValue(action.message or "listener failure"), on)
            # a TypeError, what a plugin's own bug throws (an attribute of None; in JavaScript,
            # of undefined): a loop that reads one from an append as "the data was no JSON" meets it
            error = TypeError(action.message or "listener failure")
            if action.code is not None:
                error.code = action.code  # type: ignore[attr-defined]  # ERR-7: a raised error's code
            raise self._raised_by_world(error, on)
        elif verb == "sleep":
            return asyncio.sleep(action.seconds or 0.0)
        elif verb == "wait_idle":
            return self.wait_idle(str(action.name))
        elif verb == "wait_for":
            return self.wait_for(str(action.event), action.where)
        else:
            raise ValueError(f"unknown action {verb!r}")
        return None

    # ------------------------------------------------------------------ reacting

    def listen(self, event: str, fn: Callable[..., Any]) -> Callable[[], object]:
        """Register ``fn`` on the implementation's bus (the raw listener signature)."""
        return self.service.on(event, fn)

    def install(self, listener: Listener, index: int = 0) -> None:
        """Put a :class:`~.model.Listener` on the implementation's bus."""
        name = listener.name or f"listener-{index + 1}"
        event, where, nth = listener.on, dict(listener.where), listener.nth
        always = listener.times == "always"
        self._elements.setdefault(name, 0)
        if listener.optional:
            self._optional.add(name)
        seen = [0]

        def fire(fields: Callable[[], Mapping[str, Any]]) -> bool:
            if self._elements[name] and not always:
                return False
            got = fields() if where or event == "session/event" else None
            if event == "session/event" and got is not None and got.get("agent") is None:
                # an append to a session no agent of the world holds yet: a backend's repair
                # of a resumed log, if the loop announces it (the agent comes with the resume's
                # return); no window acts there, nor counts it
                return False
            if where and not ev.matches(got or {}, where):
                return False
            seen[0] += 1
            if seen[0] < nth:
                return False
            self._elements[name] += 1
            # whose event (the fields, made once): FLUSH judges a flush's listeners ran
            # concurrently (0a), UNRETURNED whose step-result waterfall a stop was made in, and a
            # raise fails that agent
            subject = (got if got is not None else fields()).get("agent")
            subject = subject if isinstance(subject, str) else None
            # a plugin's rewrite names the fields it rewrites: REQUEST judges what it leaves alone
            rewrites = {"rewrites": sorted(listener.rewrite)} if listener.rewrite else {}
            if subject is not None:
                simulator.observe("listener", name=name, on=event, agent=subject, **rewrites)
            else:
                simulator.observe("listener", name=name, on=event, **rewrites)
            for action in listener.do:
                self.do(action, name, on=event, subject=subject if action.verb == "raise" else None)
            return True

        def react(args: tuple[Any, ...]) -> bool:
            return fire(lambda: self.fields(event, args))

        if event in ev.WORLD_POINTS:

            def observed(fields: dict[str, Any]) -> None:
                fire(lambda: fields)

            self.on(event, observed)
        elif event in ev.WATERFALLS:
            after = listener.when == "after"
            rewrite = dict(listener.rewrite) if listener.rewrite else None
            rewrote = copy.deepcopy(rewrite)  # what the timeline says it returned (never handed to the loop)
            edit = dict(listener.edit) if listener.edit else None
            # CONT-1: a continuation listener's vote to stop the turn (a plugin's force-stop)
            stops = event == "agent/turn-continuation" and any(a.verb == "stop" for a in listener.do)
            # 0b: a tools/execute listener answering the call itself, never calling next(): the
            # tool must not run (ANSWERED), and the result logged is its answer
            answers = event == "tools/execute" and any(a.verb == "answer" for a in listener.do)
            if answers and always and isinstance(where.get("name"), str):
                # a plugin serving a tool nobody registered: every call of it must reach the
                # listener (LOOP-5: each call goes through the waterfall; ANSWERED)
                simulator.observe("waterfall/serves", on=event, listener=name, tool=where["name"])

            # a waterfall listener's reload holds the chain until the second service has loaded:
            # the load sees the log exactly as the window left it (between two steps, say, where
            # a backend's repair must not close a step again: LOG-5, SVC-3)
            reloads = any(a.verb == "reload" for a in listener.do)

            hold = listener.hold

            async def waterfall(*args: Any) -> Any:
                fired = False if after else react(args[:-1])
                if fired and reloads:
                    await self._held_reload()
                if fired and hold:
                    await self._hold(hold, event, args[:-1])
                if fired and answers:
                    fields = self.fields(event, args[:-1])
                    call_id = fields.get("call_id")
                    simulator.observe("waterfall/answered", on=event, listener=name, call_id=call_id,
                                      agent=fields.get("agent"))
                    return {"call_id": f"answer:{call_id}", "content": [dict(ev.ANSWER)], "is_error": False}
                if fired and event == "agent/step-result":
                    await asyncio.sleep(0)  # a moderating plugin yields before it passes the message on
                if fired and edit is not None and isinstance(args[0], MutableMapping):
                    # a plugin adjusting the call in place (next() takes no argument): TOOL-4 keeps
                    # the model's call id in the log all the same; the view maps the fake tools'
                    # records of an edited id back to the call's
                    simulator.observe("waterfall/edited", on=event, listener=name, call_id=args[0].get("call_id"),
                                      fields=copy.deepcopy(edit))
                    args[0].update(copy.deepcopy(edit))
                value = await _as_coro(args[-1]())
                if after:
                    fired = react(args[:-1])
                    if fired and reloads:
                        await self._held_reload()
                    if fired and hold:
                        await self._hold(hold, event, args[:-1])
                if fired and event == "agent/step-result":
                    # UNRETURNED: a message logged before this returns is not what the waterfall returned
                    simulator.observe("waterfall/returned", on=event, listener=name)
                if fired and stops:
                    return False
                if fired and rewrite is not None and event == "system-prompt":
                    # a plugin adding a line to the assembled prompt, whatever shape its value has
                    # (the contract gives none): SYSTEM judges the request carries it
                    added = _appended_system(value, str(rewrite.get("system")))
                    if added is None:
                        return value
                    simulator.observe("waterfall/rewrote", on=event, listener=name, fields=rewrote,
                                      agent=self.fields(event, args[:-1]).get("agent"))
                    return added
                if fired and rewrite is not None and isinstance(value, Mapping):
                    # a plugin's rewrite of the chain's value: its own objects, which it may edit
                    # later (LOG-1: the log keeps a snapshot; edited once the run is over)
                    own = copy.deepcopy(rewrite)
                    self._passed.extend(v for v in own.values() if isinstance(v, (list, dict)))
                    # LOOP-10: the adapter the request names receives it as returned (ROUTED)
                    # MESSAGE: of a step's message, which agent's step (LOOP-6: the log records it)
                    step = ({k: v for k, v in self.fields(event, args[:-1]).items() if k in ("agent", "turn", "step")}
                            if event == "agent/step-result" else {})
                    simulator.observe("waterfall/rewrote", on=event, listener=name, fields=rewrote, **step)
                    return {**value, **own}
                return value

            waterfall.__qualname__ = f"listener:{name}"
            self.listen(event, waterfall)
        elif event == "session/flush":
            hold = listener.hold
            # The first flush listener on every flush (a persistence plugin) records when each
            # flush of an agent starts and ends: the FLUSH oracle judges that it was awaited
            # (LOOP-4). One recorder: a second would number each flush twice.
            records = always and not where and nth == 1 and not listener.plain and not self._flush_recorded

            async def flush(*args: Any) -> None:
                agent = self.fields(event, args)["agent"] if records else None
                if records:
                    # numbered: an agent's flushes may overlap (an inject's beside the driver's), and
                    # INJ-4 asks after one flush's end
                    self._flush_count += 1
                    number = self._flush_count
                    simulator.observe("flush", phase="start", agent=agent, listener=name, n=number)
                    logged = self._log_length(agent) if self._store is not None else None
                ended = "end"
                try:
                    fired = react(args)
                    if hold and (not math.isinf(hold) or (fired and self._stallable_flush(args))):
                        # a persistence plugin's write on every flush; a stall's, for ever, where it acts
                        try:
                            await self._hold(hold, event, args)
                        except asyncio.CancelledError:
                            ended = "cut"  # a disposal may cut the flush (DISP-2): it has ended all the same
                            raise
                except Exception:
                    ended = "failed"  # the listener threw (ERR-6): its flush is over, nothing persisted
                    raise
                finally:
                    if records:
                        simulator.observe("flush", phase=ended, agent=agent, listener=name, n=number)
                        if ended == "end" and logged is not None and isinstance(agent, str):
                            self._flushed[agent] = logged  # what the backend holds once the run is over

            def plain_flush(*args: Any) -> None:
                react(args)  # PY-2: a plain function is a flush listener too; its throw comes at the call

            chosen = plain_flush if listener.plain else flush
            chosen.__qualname__ = f"listener:{name}"
            self.listen(event, chosen)
            self._flush_recorded = self._flush_recorded or records  # registered: it hears every flush
        elif always:

            def notified(*args: Any) -> None:
                react(args)

            notified.__qualname__ = f"listener:{name}"
            self.listen(event, notified)
        else:
            self._one_shot(name, event, react)

    def _stallable_flush(self, args: tuple[Any, ...]) -> bool:
        """Whether a stall may hold this flush for ever: the driver's flush of a live agent's turn,
        which a later dispose() must cut (DISP-2). Not a disposed agent's (the flush of its
        disposed turn: no later dispose() could cut it, and no rule bounds it), nor an idle
        ``inject()``'s one-shot turn's, which its caller awaits (INJ-4)."""
        h = self.agents.get(self.fields("session/flush", args)["agent"] or "")
        if h is None or _status_of(h) == "disposed":
            return False
        return not _injection_flush(args)

    async def _hold(self, seconds: float, event: str, args: tuple[Any, ...]) -> None:
        """A slow plugin's wait inside a waterfall or a flush: ``seconds`` of virtual time, or for ever
        (``math.inf``: a network call without a timeout, which only a cancellation of its task
        ends). A stalled plugin marks its agent, which the world then disposes when it does not
        settle (:meth:`_settle`)."""
        if not math.isinf(seconds):
            await asyncio.sleep(seconds)
            return
        agent = self.fields(event, args).get("agent")
        if isinstance(agent, str):
            self._stalled.add(agent)
        await asyncio.get_running_loop().create_future()

    def _one_shot(self, name: str, event: str, react: Callable[[tuple[Any, ...]], bool]) -> None:
        """A listener that acts once on a notification removes itself as it acts, as a one-shot
        plugin does, and a listener registered right after it counts what it is notified of:
        PY-2 (a notification runs its listeners in registration order) is broken when that one
        misses the event (an ``emit`` iterating its live list). Judged by :meth:`_late_listeners`."""
        counts = [0, 0]  # events the one-shot listener was notified of, and the listener after it
        disposer: list[Callable[[], object]] = []

        def notified(*args: Any) -> None:
            counts[0] += 1
            try:
                fired = react(args)
            except BaseException:
                counts[0] -= 1  # whether the listeners after a raising one run is not in the contract (0b)
                raise
            if fired:
                try:
                    disposer[0]()
                except Exception:  # a disposer that fails leaves it registered: it acts no more
                    pass

        def after(*_args: Any) -> None:
            counts[1] += 1

        notified.__qualname__ = f"listener:{name}"
        disposer.append(self.listen(event, notified))
        self.listen(event, observer(after))  # passive: over the wire, no round trip of its own
        self._one_shots.append((name, event, counts))

    def _spawn_task(self, coro: Any, name: str) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro, name=name, context=self._context.copy())
        self._tasks.append(task)
        return task

    def arm(self, actor: Actor, index: int = 0) -> None:
        """Start a :class:`~.model.Actor` at its time, or once its event has been observed."""
        name = actor.name or f"actor-{index + 1}"
        self._elements.setdefault(name, 0)
        if actor.optional:
            self._optional.add(name)

        async def act() -> None:
            self._elements[name] += 1
            for action in actor.do:
                result = self.do(action, name)
                if action.awaits:
                    await result

        if actor.at is not None:
            self.at(actor.at, act, name=name)
        else:
            assert actor.after is not None
            self.after(actor.after, act, where=actor.where, name=name, nth=actor.nth)

    def at(self, t: float, fn: Callable[..., Any], *, name: str) -> None:
        """Run ``fn`` (sync or async) as a task named ``actor:<name>`` at virtual time ``t``."""
        delay = t - asyncio.get_running_loop().time()
        self._spawn_task(self._run_actor(name, fn, delay), f"actor:{name}")

    def after(self, kind: str, fn: Callable[..., Any], *, where: Mapping[str, Any] | None = None, name: str,
              nth: int = 1) -> None:
        """Start ``fn`` as a task once the ``nth`` event of ``kind`` matching ``where`` was observed."""
        self._elements.setdefault(name, 0)
        seen = [0]

        def fire(_event: dict[str, Any]) -> None:
            seen[0] += 1
            if seen[0] < nth:
                return
            dispose()
            self._spawn_task(self._run_actor(name, fn, None), f"actor:{name}")

        dispose = self.on(kind, fire, where=where)

    def spawn(self, fn: Callable[[], Any], *, name: str) -> asyncio.Task[Any]:
        """Start ``fn`` now as a task the world waits for before it settles."""
        return self._spawn_task(self._run_actor(name, fn, None), f"actor:{name}")

    async def _run_actor(self, name: str, fn: Callable[..., Any], delay: float | None) -> None:
        if delay is not None:
            await asyncio.sleep(max(delay, 0.0))
        simulator.observe("actor/run", actor=name)
        try:
            await _as_coro(fn())
        except Exception as exc:
            simulator.observe("actor/error", actor=name, error=_describe(exc))
            self.problem(f"actor:{name}", f"raised {_describe(exc)}")

    def pending_actors(self) -> list[asyncio.Future[Any]]:
        """Actor tasks started so far that have not finished (waiter watchers excluded), and the
        injections the world started that are still in flight."""
        return [*(t for t in self._tasks if not t.done() and not t.get_name().startswith("waiter-")),
                *(t for t in self._injections if not t.done())]

    # ------------------------------------------------------------------ the run

    async def run(self) -> None:
        """Build the scenario's world, run its body, settle and close (see ``Scenario``)."""
        if not self.scenario.observe:
            await self._run()
            return
        # ERR-12: contained failures are warnings under the implementation's logger; the timeline
        # records them (``warning`` events) for the WARNED oracle.
        logger = logging.getLogger(getattr(self.impl, "logger_name", "") or "loopkit.impl")
        if not logger.isEnabledFor(logging.WARNING):  # configured off: the oracle cannot judge
            await self._run()
            return
        self._warnings.active = True
        logger.addHandler(self._warnings)
        try:
            await self._run()
        finally:
            logger.removeHandler(self._warnings)

    async def _run(self) -> None:
        sc = self.scenario
        resumed = [a for a in sc.agents if a.resume is not None]
        if resumed:
            await self._seed(resumed)
        # Actors first: their tasks exist before any driver's, so at time 0 a caller acts before
        # a fresh agent's driver first runs (the window right after creation, CANCEL-W0).
        for i, actor in enumerate(sc.actors):
            self.arm(actor, i)
        positions = self._positions
        if positions is not None:
            self.on(None, lambda event: positions.append((event, simulator.ready_position())))
        for spec in sc.models:
            self.model(spec.script, name=spec.name, default=spec.default, edits_requests=spec.edits_requests)
        for tool in sc.tools:
            self.add_tool(build_tool(tool))
        for section, text in sc.sections:
            self.section(section, text)
        for i, listener in enumerate(sc.listeners):
            self.install(listener, i)
        for agent in sc.agents:
            if agent.resume is None:
                self.agent(agent.id, model=agent.model, system_prompt=agent.system_prompt, configured=agent.configured)
            else:
                await self.resume(agent)
        try:
            if sc.body is not None:
                await sc.body(self)
            await self.finish()
        finally:
            await self._bury()

    async def _bury(self) -> None:
        """Close the service of a persisted run that died mid-turn, once everything is judged (a
        close before would write into the session the resumed agent writes to): its hung stream
        must not outlive the run."""
        service, self._dead_service = self._dead_service, None
        if service is None:
            return
        try:
            await asyncio.wait_for(_as_coro(cast(Any, service).close()), self.idle_timeout)
        except Exception:  # the dead run's service is the world's device, not what is judged
            pass

    async def finish(self) -> None:
        """Wait for the actors, settle every agent (when the scenario says so), judge liveness,
        then close the service, so every log is closed when the checks read it."""
        for _ in range(1000):
            pending = [t for t in self.pending_actors() if t not in self._stuck]
            if pending:
                await self._await_actors(pending)
            if self._cancelled_drivers:
                await self._drivers_cancelled()
            if self.scenario.settle and not self.closed:
                await self._settle_all()
            if not [t for t in self.pending_actors() if t not in self._stuck]:
                break
        if not self.closed:
            if self.scenario.settle:
                await self._liveness()
            await self.close()
        elif self._closing is not None and self.scenario.settle:
            await self._liveness()  # SVC-7: a close releases every pending waiter
        self._late_agents()
        self._late_listeners()
        await self._persisted()
        self._judge_reloads()
        for name, count in self._elements.items():
            if not count:
                simulator.observe("untriggered", name=name, optional=name in self._optional)
        for label, fakes in (("model", list(self.models.values())), ("tool", list(self.tools))):
            for fake in fakes:
                for problem in fake.problems():
                    self.problem(f"{label}:{fake.name}", problem)
        for task in self._tasks:
            if not task.done():
                task.cancel()

    async def _await_actors(self, pending: list[asyncio.Future[Any]]) -> None:
        """The actors' tasks to their end (each of their own waits is bounded), and the world's
        injections for at most the idle timeout (virtual): an injection still pending then may
        never settle (INJ-2), and the run goes on to settle and close the agents, which may
        settle it yet; one that outlives the close too is reported (:meth:`_settle_injections`)."""
        injections = set(self._injections)
        actors = [t for t in pending if t not in injections]
        if actors:
            await asyncio.gather(*actors, return_exceptions=True)
        late = [t for t in pending if t in injections and not t.done()]
        if late:
            _, still = await asyncio.wait(late, timeout=self.idle_timeout)
            self._stuck.update(still)

    def _late_agents(self) -> None:
        """SVC-7: an agent a ``resume()`` returned after ``close()`` was called must be disposed
        once the close is done (the close disposes every agent the service created); refusing
        the resume is the other way to keep it."""
        for agent_id in self._resumed_closed:
            h = self.agents.get(agent_id)
            if h is not None and h.status != "disposed":
                self.problem("SVC-7", f"resume({agent_id!r}) returned a live agent (status {h.status}) after "
                             "service.close() was called, and the close left it so (SVC-7: closing the service "
                             "disposes every agent it created)", rules=("SVC-7", "SVC-3"))
        for agent_id, again in self._recreated:
            status = _status_of(again)
            if status != "disposed":
                self.problem("SVC-7", f"create({agent_id!r}), called once service.close() was, "
                             f"returned an agent the close left live (status {status}) (SVC-7: closing the "
                             "service disposes every agent it created)", rules=("SVC-7",))

    def _log_length(self, agent: Any) -> int | None:
        h = self.agents.get(agent) if isinstance(agent, str) else None
        try:
            return len(h.session.events) if h is not None else None
        except Exception:  # a broken implementation: nothing to compare with
            return None

    async def _persisted(self) -> None:
        """SVC-3, LOG-2: once the run is over, the backend holds each flushed session as it was
        logged. Resumed on a fresh service over the same backend, a session's loaded log has
        every event logged before its last whole flush began, each as logged (one a listener
        threw on included: LOG-2 pushes it first), and past those only events of its log (or a
        backend's repair, a ``turn/end{interrupted}``)."""
        if self._store is None or not self._flushed:
            return
        service: Any = None
        quiet = _QUIET_LOADS.set(True)
        try:
            service = self.impl.create_service(persistence=self._store)
            for agent_id, upto in self._flushed.items():
                logged, h = self._final_logs.get(agent_id), self.agents.get(agent_id)
                if logged is None or h is None or h.session.id in self._reloads_of:
                    continue  # a reloaded session had two writers (see reload)
                session = h.session.id
                again = await asyncio.wait_for(_as_coro(service.resume(
                    agent_id, session, {"model": self._models_of.get(agent_id, "fake")})), self.idle_timeout)
                self._judge_persisted(agent_id, session, upto, logged, list(again.session.events))
        except TimeoutError:
            self.problem("SVC-3", "resuming a flushed session once the run was over did not finish", rules=("SVC-3",))
        except Exception as exc:
            reopened = f"; {_REOPENED}" if self._reopened else ""
            self.problem("SVC-3", f"resuming a flushed session once the run was over raised {_describe(exc)}"
                         + reopened, rules=("SVC-3", "SVC-2") if reopened else ("SVC-3",))
        finally:
            if service is not None:
                try:
                    await asyncio.wait_for(_as_coro(service.close()), self.idle_timeout)
                except Exception:  # judged by SVC-7 in the run itself; this service is the check's
                    pass
            _QUIET_LOADS.reset(quiet)

    def _judge_persisted(self, agent: str, session: str, upto: int, logged: list[Any], loaded: list[Any]) -> None:
        for i, event in enumerate(loaded):
            if i < len(logged) and event_key(event) == event_key(logged[i]):
                continue
            repaired = (i == len(loaded) - 1 and event_key(event)[0] == "turn/end"
                        and (event.get("data") or {}).get("reason", {}).get("kind") == "interrupted")
            if repaired and i >= upto:
                return
            key = event_key(event)
            had = event_key(logged[i]) if i < len(logged) else None
            # what differs: the type and seq, or else the data (shortened)
            said: Any = key[:2]
            was: Any = "nothing" if had is None else had[:2]
            if had is not None and had[:2] == key[:2]:
                said, was = _brief(key[2]), _brief(had[2])
            reopened = session in self._reopened
            self.problem("SVC-3", f"agent {agent}: session {session!r} resumed once the run was over: its event "
                         f"{i} has {said} where the log had {was} (SVC-3: "
                         "resume loads the persisted session; LOG-2: an event is pushed before its listeners run"
                         + (f"; {_REOPENED}" if reopened else "") + ")",
                         rules=("SVC-3", "LOG-2", "SVC-2") if reopened else ("SVC-3", "LOG-2"))
            return
        if len(loaded) < upto:
            self.problem("SVC-3", f"agent {agent}: session {session!r} resumed once the run was over has "
                         f"{len(loaded)} events, though {upto} were logged before its last flush began (SVC-3: "
                         "resume loads the persisted session; LOOP-4: each turn is flushed)", rules=("SVC-3", "LOOP-4"))

    def _judge_reloads(self) -> None:
        """What each :meth:`reload` loaded: the writer's log as far as it was persisted, then
        only the repair of a turn it left open, balanced (:func:`~conformance.invariants.repair_violations`).
        Only a session's first reload: a backend may write its repair into the store, which the
        writer then goes on appending to, and what a later load makes of two writers' events is
        no rule's."""
        for agent, session, loaded in self._reloaded:
            logged = self._final_logs.get(agent)
            if logged is None:
                continue
            found = repair_violations(logged, loaded)
            if found:
                rule = found[0].split(":", 1)[0]
                self.problem("reload", f"agent {agent}: session {session!r} resumed on a second service while its "
                             f"writer was still running (as after a process that died there): {found[0]}",
                             rules=tuple(dict.fromkeys(("SVC-3", rule))))

    def _late_listeners(self) -> None:
        """PY-2: the listener registered after a one-shot one heard every event that one did."""
        for name, event, (heard, after) in self._one_shots:
            if after < heard:
                self.problem("PY-2", f"listener {name!r} removed itself while notified of {event}, and the "
                             "listener registered after it missed that event (PY-2: a notification runs its "
                             "listeners in registration order)", rules=("PY-2",))

    async def _settle_all(self) -> None:
        for agent_id, h in list(self.agents.items()):
            if agent_id in self._driverless:
                continue  # its driver was cancelled: nothing runs it any more (PY-1 judged it)
            if not await self._settle(h):
                self.problem("quiescence", f"agent {agent_id!r} never settled (status {h.status})",
                             rules=("IDLE-2", "LOOP-1"))

    async def _settle(self, h: AgentHandle) -> bool:
        """Wait for quiescence; abort a hung step (dropping no prompt) until it comes, and again
        while listeners keep queueing work after the idle transition."""
        budget = 4 + 2 * len(self.scenario.listeners) + sum(len(m.script) for m in self.scenario.models)
        for _ in range(budget):
            if h.status == "disposed":
                return True
            ops = len(simulator.current_timeline())
            self._settles += 1
            waiter = self.when_idle(h, f"settle-{self._settles}", by="world")
            try:
                await asyncio.wait_for(asyncio.shield(waiter.released), self.idle_timeout)
            except TimeoutError:
                if self._id_of(h) in self._stalled:
                    # a plugin stalled for ever: no abort need stop it (CANCEL-MID names the model
                    # and the tools), a dispose() must (DISP-2: disposal ends the driver)
                    self.dispose(h, by="world")
                else:
                    self.abort(h, by="world")
                continue
            await asyncio.sleep(0)
            later = simulator.current_timeline()[ops:]
            if h.status != "running" and not any(e.get("kind") == "op" and e.get("by") != "world" and e.get("op") != "raise"
                                                 for e in later):
                return True
        return h.status != "running"

    async def _liveness(self) -> None:
        """Once nothing is left to act, every waiter has resolved (IDLE-2)."""
        self._sample()
        # A bounded wait, not a short sleep: a waiter released by disposal also waits for the
        # driver to exit (IDLE-4), and a schedule may fire a near timer ahead of ready work.
        # a listener may register a waiter while the world waits here
        await self._wait_for_all(lambda: [w.released for w in self.waiters.values() if not w.is_released])
        for waiter in list(self.waiters.values()):
            if not waiter.is_released:
                h = self.agents.get(waiter.agent)
                # after a caller's close, SVC-7: closing releases every pending waiter
                closed = self._closing is not None
                status = _status_of(h) if h is not None else "?"
                rules: tuple[str, ...] = ("SVC-7", "IDLE-2") if closed else ("IDLE-2",)
                why = ""
                if status == "disposed":  # its driver never exited: something it awaits outlived the disposal
                    rules += ("IDLE-4", "DISP-2")
                    why = ("; a disposed agent's when_idle() waits for its driver to exit (IDLE-4), which disposal "
                           "ends (DISP-2)")
                self.problem("SVC-7" if closed else "IDLE-2",
                             f"when_idle() {waiter.name!r} of agent {waiter.agent!r} never resolved although "
                             f"{'the service was closed' if closed else 'the agent settled'} (status {status}){why}",
                             rules=rules)

    async def _wait_for_all(self, pending: Callable[[], list[asyncio.Future[Any]]]) -> None:
        """Wait until ``pending()`` is empty, what it names arriving meanwhile included, or until
        one wait of the idle timeout leaves some pending (the caller judges those)."""
        while late := pending():
            _, left = await asyncio.wait(late, timeout=self.idle_timeout)
            if left:
                return

    async def _settle_injections(self) -> None:
        """Injections a listener started while the service closed (on a ``disposed`` status,
        say): waited for, and their failures recorded now, before ``world/closed``; a schedule
        may otherwise end the run before their done callbacks run, and DISP-3 would read an
        ``inject()`` on a disposed agent that did not raise."""
        # an actor may inject while the world waits here (session 53's indie74)
        await self._wait_for_all(lambda: [t for t in self._injections if not t.done() and t is not self._closing])
        for task, retrieve in list(self._retrievers.items()):
            if task.done():
                retrieve(task)
            elif task in self._inject_calls:
                self._unsettled(task)

    def _unsettled(self, task: asyncio.Future[Any]) -> None:
        """An ``inject()`` whose awaitable is still pending once the service was closed: it was
        neither taken (INJ-1, INJ-2: it resolves once its context is written, a one-shot turn's
        once flushed) nor refused (DISP-3), and even the agent's disposal left it so (DISP-2)."""
        by, agent_id, text = self._inject_calls.pop(task)
        self._retrievers.pop(task, None)
        h = self.agents.get(agent_id)
        self.problem("INJ-2", f"inject({text!r}) by {by} on agent {agent_id!r} never settled: its awaitable was "
                     f"still pending after the agent settled and the service closed (status "
                     f"{_status_of(h) if h is not None else '?'}); an inject resolves once its context is "
                     "written (INJ-1, INJ-2) or raises (DISP-3), and disposal ends the driver's work (DISP-2)",
                     rules=("INJ-1", "INJ-2", "DISP-2"))

    def _registered(self, agent_id: str) -> bool:
        try:
            return self.service.get(agent_id) is not None
        except Exception:  # a failing lookup: nothing to say about the registry
            return False

    async def _caller_close(self, by: str) -> None:
        # ``world/closing`` as the implementation's close() starts, in this task (wait_for would
        # start it a task later, and a schedule may put anything between the two).
        simulator.observe("world/closing", by=by)
        async with asyncio.timeout(self.idle_timeout):
            await _as_coro(self.service.close())

    def create_taken(self, agent: str | AgentHandle | None, *, by: str = "caller", on: str | None = None) -> None:
        """``service.create(id)`` with the id of a live agent (SVC-2: rejected, the live agent
        kept), recorded as an ``op`` (``op/error`` when it raised). Not called once the agent is
        disposed: its id may be free then, and a second agent under it is not this verb's
        question. While ``close()`` runs it creates ``{id}-restarted`` instead, as a supervisor
        restarting its agents would (SVC-7: refused, or disposed by the close too); once the
        close returned, nothing (what a closed service does with a create is not SVC-7's).
        One accepted while the agent is live is disposed at once, so it runs nothing."""
        if isinstance(agent, str) and agent not in self.agents and agent in self._resuming:
            self._create_while_resuming(agent, by=by, on=on)
            return
        h = self.handle(agent)
        agent_id = self._id_of(h)
        # inside the agent's own dispose() (a listener on its step's signal, say): the agent is on
        # its way out, and whether its id is free yet is not SVC-2's question: nothing is created
        disposing = agent_id in self._disposing
        # while close() runs the create is of {id}-restarted (``instead``), not of the live id
        instead = f"{agent_id}-restarted" if self.closed and not disposing else None
        self._record_op(by, "create", h, on, **({"disposing": True} if disposing else {}),
                        **({"instead": instead} if instead is not None else {}))
        if disposing:
            return
        if instead is not None:
            if not self._close_returned:  # once it returned, what a closed service does is not SVC-7's
                self._create_while_closing(instead, by=by)
            return
        if h.status == "disposed":
            return
        if self._store is not None:  # the session persisted: it is reopened under the live id too
            self._reopen(h, agent_id)
        again = self._try_create(agent_id, self._models_of.get(agent_id, "fake"), by=by)
        if again is None:
            return
        try:
            again.dispose()
        except Exception:  # the run fails SVC-2 already: its duplicate is not judged
            pass

    def _reopen(self, h: AgentHandle, agent_id: str) -> None:
        """The create verb's second way to take a live id where sessions persist:
        ``service.resume(id, its own session)`` on this service while the agent runs (a UI's
        "reopen" clicked while the agent is busy). SVC-2: rejected before any session is created,
        so the backend is left as the writer left it, which the backend's check at the end of the
        run judges (:meth:`_persisted`: a repair written by the rejected load is an event the
        log never had). Accepted while the agent is still live, it is a problem (SVC-2); its
        duplicate is disposed and the session, written by two, no longer judged."""
        session = h.session.id
        try:  # called here, where the agent is live: an async resume may check the id as it starts
            call = self.service.resume(agent_id, session, _options(self._models_of.get(agent_id, "fake"), None))
        except Exception:  # rejected at once
            return

        async def reopen() -> None:
            try:
                again: AgentHandle = await asyncio.wait_for(_as_coro(call), self.idle_timeout)
            except TimeoutError:
                self.problem("SVC-2", f"resume({agent_id!r}, {session!r}) under the live agent's own id did not "
                             "finish", rules=("SVC-2",))
                return
            except Exception:  # rejected, as SVC-2 asks: what the backend holds is judged at the end
                self._reopened.add(session)
                return
            self._reloads_of.add(session)
            if h.status != "disposed" and agent_id not in self._disposing:
                self.problem("SVC-2", f"agent {agent_id}: resume({agent_id!r}, {session!r}) was accepted while the "
                             "agent was live: a second live agent under an id in use is rejected (SVC-2)",
                             rules=("SVC-2",))
            with contextlib.suppress(Exception):
                again.dispose()

        self._injections.append(asyncio.ensure_future(reopen()))  # settled before the world closes, like an actor

    def _try_create(self, agent_id: str, model: str, *, by: str) -> AgentHandle | None:
        """``service.create(agent_id, {model})``; ``None``, recorded as ``op/error``, when it raised."""
        try:
            handle = self.service.create(agent_id, {"model": model})
        except Exception as exc:
            simulator.observe("op/error", by=by, op="create", agent=agent_id, error=_describe(exc))
            return None
        self._fresh_session(agent_id, handle)
        return handle

    def _create_while_closing(self, agent_id: str, *, by: str) -> None:
        """``create()`` of a new agent while ``close()`` runs, as a supervisor restarting the
        agents the close disposes would: refused, or the close disposes it too (SVC-7), which
        the world judges once the close is done (:meth:`_late_agents`)."""
        again = self._try_create(agent_id, self._models_of.get(agent_id, "fake"), by=by)
        if again is not None:
            self._recreated.append((agent_id, again))

    def _create_while_resuming(self, agent_id: str, *, by: str, on: str | None) -> None:
        """``create(id)`` while a resume() of that id loads: the id is free, so it may succeed;
        then it is the live agent (and the resume must not make a second, SVC-2)."""
        self._record_op(by, "create", agent_id, on)
        spec = next((a for a in self.scenario.agents if a.id == agent_id), AgentSpec(agent_id))
        handle = self._try_create(agent_id, spec.model, by=by)
        if handle is not None:
            self._created(agent_id, handle, spec.model)

    def close_soon(self, *, by: str, on: str | None = None) -> None:
        """``service.close()`` called by an actor or a listener (SVC-7): recorded as an ``op`` now,
        the close itself a task (a listener cannot await it; its ``world/closing`` entry, naming
        ``by``, is where it starts) that the run waits for; every agent must end disposed, every
        waiter released. A second close once the service is closing is recorded and does
        nothing."""
        entry: dict[str, Any] = {"by": by, "op": "close"}
        if on is not None:
            entry["on"] = on
        simulator.observe("op", **entry)
        if self.closed:
            return
        self.closed = True
        self._closing = asyncio.ensure_future(self._close_service(by))
        self._injections.append(self._closing)  # the run waits for it like an actor

    async def close(self) -> None:
        """Close the service (it disposes the agents); idempotent."""
        if self.closed:
            return
        self.closed = True
        simulator.observe("world/closing")
        await self._close_service()

    async def _close_service(self, by: str | None = None) -> None:
        try:
            if by is None:
                await asyncio.wait_for(_as_coro(self.service.close()), self.idle_timeout)
            else:
                await self._caller_close(by)
        except TimeoutError:
            self.problem("quiescence", "service.close() did not finish", rules=("SVC-7",))
        except Exception as exc:  # SVC-7 names no reason for close() to raise, the world's or a caller's
            self.problem("SVC-7", f"service.close() raised {_describe(exc)}", rules=("SVC-7",))
        self._close_returned = True
        await self._settle_injections()
        self._sample()
        # What the oracles compare with the observed run: the final logs' lengths (LOG-2: an
        # event notified but never pushed), and the agents still registered (SVC-6).
        registered = [k for k in self.agents if self._registered(k)]
        logs = {k: list(h.session.events) for k, h in self.agents.items()}
        self._final_logs = logs
        self._log_drift(logs)
        self._clocks(logs)
        simulator.observe("world/closed", agents={k: h.status for k, h in self.agents.items()},
                          logs={k: len(events) for k, events in logs.items()},
                          registered=registered,
                          **({"warnings": self._warnings.count} if self._warnings.active else {}),
                          **({"flushes": "recorded"} if self._flush_recorded else {}),
                          **({"continuations": "recorded"} if self._continuations_recorded else {}))


def _injection_flush(args: tuple[Any, ...]) -> bool:
    """Whether a flush is an idle ``inject()``'s one-shot turn's: the last turn its log closed
    (a flush follows its turn's ``turn/end``; by the time a listener's body runs, the driver may
    have opened another) was opened by an injection. Its caller awaits that flush (INJ-4), not the
    driver, and a stall there would hold it for ever with no rule asking disposal to cut it."""
    try:
        events = list(getattr(args[0], "events", ()) or ())
    except Exception:  # a broken implementation's session: a turn's flush, as far as we know
        return False
    closed = None
    for e in reversed(events):
        if not isinstance(e, Mapping):
            continue
        data = e.get("data") or {}
        if closed is None and e.get("type") == "turn/end":
            closed = data.get("turn")
        elif closed is not None and e.get("type") == "turn/start" and data.get("turn") == closed:
            trigger = data.get("trigger")
            return isinstance(trigger, Mapping) and trigger.get("kind") == "injection"
    return False


def _reloads(scenario: Scenario) -> bool:
    """Whether an action of the scenario reloads a session (the world then makes a backend)."""
    return any(a.verb == "reload" for x in scenario.listeners for a in x.do) or any(
        a.verb == "reload" for x in scenario.actors for a in x.do)


_REOPENED = ("SVC-2: a resume under a live agent's id, refused during the run, is rejected before any session is "
             "created")
"""What the backend's check adds where a create verb's resume under the live id was refused."""


def _options(model: str, system_prompt: str | None, **options: Any) -> dict[str, Any]:
    """The agent options of a create or resume: the model, and the system prompt when given."""
    opts: dict[str, Any] = {"model": model, **options}
    if system_prompt is not None:
        opts["system_prompt"] = system_prompt
    return opts


def _content(action: Action) -> Any:
    """What a ``send``/``steer``/``inject`` passes: the text, or a fresh list of one text block
    (carrying a set, which JSON cannot encode, when the action is ``unserialisable``)."""
    if action.unserialisable:
        return [{"type": "text", "text": action.text, "tags": {action.text}}]
    return [{"type": "text", "text": action.text}] if action.blocks else action.text


_DYING = "interrupted"
"""The prompt of a persisted run's last turn, cut where its process died (``AgentSpec.interrupted``)."""


def _source(action: Action) -> Mapping[str, Any] | None:
    """The source an ``inject`` or a ``send`` passes: the action's, or, for a ``bad_source``, one
    carrying a set, which JSON cannot encode."""
    if action.bad_source:
        return {"kind": "plugin", "name": action.text, "tags": {action.text}}
    return action.source


def _unserialisable(value: Any) -> bool:
    """Whether JSON cannot encode ``value`` (INJ-4's bad input)."""
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return True
    return False


def _brief(value: Any, width: int = 160) -> str:
    text = json.dumps(value, sort_keys=True, default=repr)
    return text if len(text) <= width else text[: width - 3] + "..."


SCRAMBLED = "edited by the caller after the run"


def _scramble(value: Any) -> None:
    """Edit a caller's object in place, every string in it and every list longer (LOG-1)."""
    if isinstance(value, dict):
        for key, item in list(value.items()):
            if isinstance(item, str):
                value[key] = SCRAMBLED
            else:
                _scramble(item)
    elif isinstance(value, list):
        for item in value:
            _scramble(item)
        value.append(SCRAMBLED)


class _WarningRecorder(logging.Handler):
    """Records each warning (or worse) of the implementation's logger in the timeline."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.count = 0
        self.active = False

    def emit(self, record: logging.LogRecord) -> None:
        self.count += 1
        try:
            simulator.observe("warning", logger=record.name, message=record.getMessage())
        except Exception:  # a record whose arguments do not format: counted, not recorded
            pass


def build_tool(spec: ToolSpec) -> FakeTool:
    """The fake tool a :class:`~.model.ToolSpec` describes."""
    options: dict[str, Any] = {"latency": spec.latency, "abort_aware": spec.abort_aware,
                               "repeat_last": spec.repeat_last, "consumes_args": spec.consumes_args}
    if spec.results is not None:
        return FakeTool(spec.name, results=list(spec.results), **options)
    if spec.result is not None:
        return FakeTool(spec.name, spec.result, **options)
    return FakeTool(spec.name, **options)


LOAD_HOLD = 0.01
"""Virtual seconds an observed load of a persistence backend takes (:func:`observe_loads`)."""

_QUIET_LOADS: contextvars.ContextVar[bool] = contextvars.ContextVar("loopkit_quiet_loads", default=False)
"""Set in the world's own resumes (a reload's second service, the end-of-run check): their loads
are the checks', not points of the run."""


def observe_loads(store: object, world: World) -> bool:
    """Make the asynchronous ``load()`` of the implementation's persistence backend a point of
    the run: awaited, it is observed as ``persistence/load`` (the agent resuming, the session)
    and then takes :data:`LOAD_HOLD` of virtual time, as a database or a file read would, before
    the backend's own load. The backend object itself is what the implementation's services get
    (an implementation may check that it is the one ``new_persistence()`` made): the hold is its
    instance's own ``load``. False when its ``load`` is synchronous (no caller can act inside it)
    or cannot be replaced (then loads are not points)."""
    inner = getattr(store, "load", None)
    if not inspect.iscoroutinefunction(inner):
        return False
    ref = weakref.ref(world)

    async def load(session_id: str, *args: Any, **kwargs: Any) -> Any:
        if not _QUIET_LOADS.get():
            w = ref()
            simulator.observe("persistence/load", agent=w.loading(session_id) if w is not None else None,
                              session=session_id)
            await asyncio.sleep(LOAD_HOLD)
        return await inner(session_id, *args, **kwargs)

    try:
        store.load = load  # type: ignore[attr-defined]
    except (AttributeError, TypeError):  # __slots__, a frozen or built-in backend
        return False
    return True


def _appended_system(value: Any, text: str) -> Any:
    """The ``system-prompt`` waterfall's value with ``text`` added as a last paragraph: a string
    value, or a mapping's ``system`` string (or ``None``); ``None`` for any other shape (a mapping
    without ``system`` says nothing of where its prompt is)."""
    if isinstance(value, str) or value is None:
        return f"{value}\n\n{text}" if value else text
    if isinstance(value, Mapping) and "system" in value and (value["system"] is None or isinstance(value["system"], str)):
        system = value.get("system")
        return {**value, "system": f"{system}\n\n{text}" if system else text}
    return None
