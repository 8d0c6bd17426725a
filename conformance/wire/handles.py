"""The driver's proxies for what lives in the wire child: its services, agents and sessions
(``ServiceHandle``, ``AgentHandle``, ``SessionHandle``), persistence backends and promises.

Every method is a call on the :class:`~conformance.wire.connection.Connection` (registrations
are posted). An agent's ``status`` and its session's ``events`` are the connection's mirror,
fed by the child's events, so reading them costs no round trip.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Generator, Mapping
from typing import TYPE_CHECKING, Any

from conformance.adapter import OBSERVER, RECORD, AgentHandle, Disposer

if TYPE_CHECKING:
    from .connection import Connection

WATERFALLS = frozenset({"agent/request", "agent/step-result", "agent/turn-continuation", "tools/execute", "system-prompt"})
AWAITED = frozenset({"session/flush"})


class _PassiveWaterfall:
    """A waterfall observer (``conformance.adapter.waterfall_observer``) over the wire. The child
    runs the chain itself and delivers the call afterwards as a ``notify`` of the arguments and
    the value; a child that does not know passive waterfalls asks as for any waterfall (the
    arguments, the value and ``next``), and the observer passes the chain through."""

    def __init__(self, listener: Callable[..., Any], record: Callable[..., None]) -> None:
        self.listener = listener
        self.record = record

    def __call__(self, *args: Any) -> Any:
        if args and callable(args[-1]):  # a waterfall request: args..., value, next
            return self.listener(*args)
        self.record(*args)  # a notify: args..., value
        return None


def _kind(event: str) -> str:
    if event in WATERFALLS:
        return "waterfall"
    return "awaited" if event in AWAITED else "notification"



class WirePromise:
    """A promise of the child, awaitable from the simulated loop; ``done()`` turns true at the
    point of the event stream where the child's promise settled (a waiter's release is placed
    exactly, as the world's sampling expects)."""

    __slots__ = ("_future",)

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._future: asyncio.Future[Any] = loop.create_future()

    def done(self) -> bool:
        return self._future.done()

    def __await__(self) -> Generator[Any, None, Any]:
        return self._future.__await__()

    def _settle(self, value: Any) -> None:
        if not self._future.done():
            self._future.set_result(value)

    def _reject(self, error: BaseException) -> None:
        if not self._future.done():
            self._future.set_exception(error)
            self._future.add_done_callback(_retrieved)


def _retrieved(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()  # a rejection nobody awaits is not an "unretrieved exception"


class WireSession:
    """An agent's session: its log is the driver's mirror; derive/append ask the child."""

    def __init__(self, agent: WireAgent, session_id: str) -> None:
        self._agent = agent
        self._id = session_id

    @property
    def id(self) -> str:
        return self._id

    @property
    def events(self) -> list[Any]:
        return list(self._agent._events)

    def derive_messages(self) -> list[Any]:
        value: list[Any] = self._agent._call("derive_messages", {}, mutates=False)
        return value

    def append(self, type: str, data: Mapping[str, Any]) -> Any:
        return self._agent._call("append", self._agent._conn.passing({"event_type": type, "data": data}, ("data",)))

    def current_events(self) -> list[Any]:
        """The log as the child holds it now, once the caller's in-place edits of what it passed
        have reached the child's copies (§9.1): what reading the log in one process shows
        (``events`` is the driver's mirror, each event as it was appended)."""
        self._agent._conn.sync_passed(epoch=self._agent._epoch)
        value: list[Any] = self._agent._call("events", {}, mutates=False)
        return value

    def __repr__(self) -> str:
        return f"WireSession({self._id!r})"


class _Handle:
    """Something of the child's: its connection, the run it belongs to, its id there."""

    def __init__(self, conn: Connection, handle: str) -> None:
        self._conn = conn
        self._epoch = conn.epoch
        self._handle = handle

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._handle!r})"


class WireAgent(_Handle):
    """An agent of the child (``AgentHandle``)."""

    def __init__(self, conn: Connection, handle: str, agent_id: str, session_id: str, status: str,
                 events: list[Any]) -> None:
        super().__init__(conn, handle)
        self._id = agent_id
        self._status = status
        self._events = list(events)
        self._session = WireSession(self, session_id)

    def __repr__(self) -> str:
        return f"WireAgent({self._id!r}, {self._status})"

    def _call(self, op: str, args: dict[str, Any], *, mutates: bool = True) -> Any:
        return self._conn.call(op, {"agent": self._handle, **args}, mutates=mutates, epoch=self._epoch)

    @property
    def id(self) -> str:
        return self._id

    @property
    def status(self) -> str:
        return self._status

    @property
    def session(self) -> WireSession:
        return self._session

    def send(self, content: Any, source: Any = None) -> None:
        self._call("send", self._conn.passing(_with_source({"content": content}, source)))

    def steer(self, content: Any, source: Any = None) -> None:
        self._call("steer", self._conn.passing(_with_source({"content": content}, source)))

    def inject(self, content: Any, source: Any = None) -> WirePromise:
        return self._conn.promise(self._call("inject", self._conn.passing(_with_source({"content": content}, source))))

    def abort(self, reason: str | None = None) -> None:
        self._call("abort", {} if reason is None else {"reason": reason})

    def cancel(self, reason: str | None = None) -> None:
        self._call("cancel", {} if reason is None else {"reason": reason})

    def when_idle(self) -> WirePromise:
        return self._conn.promise(self._call("when_idle", {}), agent=self)

    def dispose(self) -> None:
        self._call("dispose", {})

    def defer(self, ticks: int, verb: str, *args: Any) -> asyncio.Future[Any]:
        """Perform ``verb`` (``send``, ``steer``, ``cancel``, ``abort``, ``dispose``) ``ticks``
        microtask hops into the child's next run, rather than between two runs: how a recorded
        schedule lands an action inside one run of a JavaScript loop. Hop counts are an engine
        detail (they differ between V8 versions). The future resolves when it was performed."""
        names = {"send": ("content", "source"), "steer": ("content", "source"), "cancel": ("reason",),
                 "abort": ("reason",), "dispose": ()}
        if verb not in names:
            raise ValueError(f"cannot defer {verb!r} (choose from {', '.join(names)})")
        payload = {"agent": self._handle, **dict(zip(names[verb], args, strict=False))}
        return self._conn.defer(ticks, verb, payload, epoch=self._epoch)


def _with_source(args: dict[str, Any], source: Any) -> dict[str, Any]:
    if source is not None:
        args["source"] = source
    return args


class WirePersistence(_Handle):
    """A persistence backend living in the child (shared by two services to check resume)."""

    def hold(self, hook: Callable[[str], Any]) -> None:
        """From now on, each ``load(session_id)`` of this backend in the child first calls
        ``hook(session_id)`` here and, when it returns an awaitable, waits for it (a ``load``
        request, §10): where the caller can act inside a resume's load, as it can around an
        in-process backend's awaited ``load()``."""
        self._conn.hold_loads(self._handle, hook, epoch=self._epoch)


class WireService(_Handle):
    """A service of the child (``ServiceHandle``)."""


    def _call(self, op: str, args: dict[str, Any], *, mutates: bool = True) -> Any:
        return self._conn.call(op, {"service": self._handle, **args}, mutates=mutates, epoch=self._epoch)

    def _registration(self, op: str, registration: int, args: dict[str, Any]) -> Disposer:
        # Registrations are posted, not called: they return nothing and start no work, so they
        # travel with the next message instead of costing a round trip each.
        self._conn.post(op, {"service": self._handle, **args, _REGISTRATION_KEY[op]: registration}, epoch=self._epoch)

        def dispose() -> None:
            self._conn.post("unregister", {"service": self._handle, "registration": registration}, epoch=self._epoch)

        return dispose

    def on(self, event: str, listener: Callable[..., Any]) -> Disposer:
        kind = _kind(event)
        if kind == "waterfall":  # passive only when it says how to record after the fact
            record = getattr(listener, RECORD, None)
            passive = record is not None
            listener = _PassiveWaterfall(listener, record) if record is not None else listener
        else:
            passive = bool(getattr(listener, OBSERVER, False))
        registration = self._conn.register_listener(listener)
        return self._registration("on", registration, {"event": event, "kind": kind, "passive": passive})

    def register_model(self, name: str, adapter: Any) -> Disposer:
        return self._registration("register_model", self._conn.register_model(adapter), {"name": name})

    def register_tool(self, tool: Any) -> Disposer:
        schema = {"name": str(tool.name), "description": str(getattr(tool, "description", "") or ""),
                  "input_schema": dict(getattr(tool, "input_schema", None) or {"type": "object"})}
        return self._registration("register_tool", self._conn.register_tool(tool), schema)

    def add_system_prompt_section(self, name: str, text: str) -> Disposer:
        return self._registration("add_section", self._conn.new_id(), {"name": name, "text": text})

    def create(self, agent_id: str, options: Mapping[str, Any] | None = None) -> AgentHandle:
        agent: AgentHandle = self._call("create", {"agent_id": agent_id, "options": dict(options or {})})
        return agent

    def create_agent(self, agent_id: str, session_id: str, meta: Mapping[str, Any] | None = None,
                     agent_options: Mapping[str, Any] | None = None) -> AgentHandle:
        agent: AgentHandle = self._call("create_agent", {
            "agent_id": agent_id, "session_id": session_id, "meta": dict(meta or {}), "options": dict(agent_options or {}),
        })
        return agent

    async def resume(self, agent_id: str, resume_session_id: str,
                     agent_options: Mapping[str, Any] | None = None) -> AgentHandle:
        promise = self._conn.promise(self._call("resume", {
            "agent_id": agent_id, "session_id": resume_session_id, "options": dict(agent_options or {}),
        }))
        agent: AgentHandle = await promise
        return agent

    def get(self, agent_id: str) -> AgentHandle | None:
        found: AgentHandle | None = self._call("get", {"agent_id": agent_id}, mutates=False)
        return found

    def load_config(self, config: Mapping[str, Any]) -> object:
        return self._call("load_config", {"config": config})

    async def close(self) -> None:
        await self._conn.promise(self._call("close", {}))

    def driver_task(self, agent: AgentHandle) -> asyncio.Task[Any] | None:
        """No asyncio task drives a loop in another process."""
        return None


_REGISTRATION_KEY = {"on": "listener", "register_model": "model", "register_tool": "tool", "add_section": "section"}
