"""The wire implementation: an :class:`~conformance.adapter.Implementation` whose service, agents
and sessions are proxies for an agent loop running in a child process (any language), spoken to
over the wire protocol (``docs/wire-protocol.md``).

The suite drives these proxies from inside the simulation exactly like an in-process
implementation. Every command that answers is a synchronous round trip (registrations are posted:
they travel with the next message); between two of them the child's own event loop does not run, so a stretch of caller code (``send(A); when_idle(); cancel(); send(B)``)
reaches it as one synchronous stretch. The child's queued work runs when the driver says ``run``
(a callback the simulated loop schedules after the first command, a choice point like any
other): it runs until its microtask queue drains, calling back the driver's listeners
synchronously on the way, and answers at quiescence. Model calls stream from the Python models
and tool calls run the Python tools, both as tasks of the simulated loop, delivering chunks and
results back to the child. Virtual time, uuids and the seed come from the driver's sources.

The proxies keep a mirror of each agent's status and log, fed by the child's ``status`` and
``log`` events (and a waiter's release carries the status it was released in), so reading
``agent.status`` or ``session.events`` costs nothing and is exact at every point the driver can
observe; each quiescence reconciles the mirror with the child.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import logging
import os
import sys
from collections.abc import Awaitable, Callable, Generator, Mapping
from typing import Any

import simulator
from conformance.adapter import OBSERVER, AgentHandle, Disposer, ServiceHandle
from conformance.catalogue import FEATURES, Feature
from reference_loop.abort import AbortController, AbortSignal
from reference_loop.sources import Sources, default_sources

from .child import Child
from .protocol import Decoder, Opaque, ProtocolError, RemoteError, WireError, encode, error_info

WATERFALLS = frozenset({"agent/request", "agent/step-result", "agent/turn-continuation", "tools/execute", "system-prompt"})
AWAITED = frozenset({"session/flush"})


def _kind(event: str) -> str:
    if event in WATERFALLS:
        return "waterfall"
    return "awaited" if event in AWAITED else "notification"


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[0] if text else type(error).__name__


def _interrupt(exc: BaseException) -> bool:
    """The pytest plugin's wall-clock alarm: never contained as a listener failure."""
    plugin = sys.modules.get("conformance.plugin")
    return plugin is not None and isinstance(exc, plugin.WallTimeout)


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
        return self._agent._call("append", {"event_type": type, "data": data})

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
        self._call("send", _with_source({"content": content}, source))

    def steer(self, content: Any, source: Any = None) -> None:
        self._call("steer", _with_source({"content": content}, source))

    def inject(self, content: Any, source: Any = None) -> WirePromise:
        return self._conn.promise(self._call("inject", _with_source({"content": content}, source)))

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
        registration = self._conn.register_listener(listener)
        passive = bool(getattr(listener, OBSERVER, False))
        return self._registration("on", registration, {"event": event, "kind": _kind(event), "passive": passive})

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


class Connection:
    """One child process and the state of the current simulation run on both sides.

    Handle ids restart at every run (the ``reset`` call), so one scenario gives the same bytes on
    the wire whatever ran before it in the same child.
    """

    def __init__(self, impl: WireImplementation, child: Child, hello: dict[str, Any]) -> None:
        self.impl = impl
        self.child = child
        self.hello = hello
        self.dead: WireError | None = None
        self.epoch = 0
        self._decoder = Decoder(self)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._sources: Sources = default_sources()
        self._reset()

    @property
    def _logger(self) -> logging.Logger:
        return logging.getLogger(getattr(self.impl, "logger_name", "loopkit.wire"))

    def _reset(self) -> None:
        self.epoch += 1
        self._ids = itertools.count(1)
        self._agents: dict[str, WireAgent] = {}
        self._promises: dict[str, WirePromise] = {}
        self._listeners: dict[int, Callable[..., Any]] = {}
        self._models: dict[int, Any] = {}
        self._tools: dict[int, Any] = {}
        self._signals: dict[str, AbortController] = {}
        self._signal_ids: dict[int, str] = {}
        self._streams: dict[str, asyncio.Task[Any]] = {}
        self._defers: dict[str, asyncio.Future[Any]] = {}
        self._errors: list[BaseException] = []
        self._outbox: list[dict[str, Any]] = []
        self._pump_scheduled = False
        self._in_run = False
        self._in_events = False
        self._clock: int | None = None
        self._tripped: WireError | None = None

    # ------------------------------------------------------------------ runs and calls

    def bind_run(self) -> None:
        """Start from scratch when a new event loop (a new simulation run) uses the child."""
        self.check()
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            raise WireError("a wire implementation is driven from an event loop (the suite builds its "
                            "services inside a simulation)") from None
        if loop is self._loop:
            return
        self._loop = loop
        self._reset()
        if self.child.transcript is not None:
            self.child.transcript = []  # a transcript covers one run, from its reset
        self._sources = default_sources()
        seed = int(getattr(self._sources, "seed", 0) or 0) & 0xFFFFFFFF
        self.post("reset", {"seed": seed})

    def check(self, epoch: int | None = None) -> None:
        if self.dead is not None:
            raise WireError(str(self.dead))
        if epoch is not None and epoch != self.epoch:
            raise WireError("a wire handle from an earlier simulation run was used")

    def new_id(self) -> int:
        return next(self._ids)

    def call(self, op: str, args: dict[str, Any], *, mutates: bool = True, epoch: int | None = None) -> Any:
        """A synchronous call: write it (after any pending deliveries) and serve the child's
        events and requests until it returns. A mutating call outside a run schedules one."""
        self.check(epoch)
        if self._in_events:
            raise WireError(f"{op}() was called while the driver read the child's events: a listener marked "
                            "as an observer (conformance.adapter.observer) must not act on the implementation")
        call_id = next(self._ids)
        messages = self._take_outbox()
        messages.append({"type": "call", "id": call_id, "op": op, "args": self.encode(args)})
        returned = self._exchange(messages, call_id)
        if mutates and not self._in_run:
            self._schedule_run()
        if "error" in returned:
            raise self.error(returned["error"])  # the call threw on the child's side
        return returned.get("value")

    def post(self, op: str, args: dict[str, Any], *, epoch: int | None = None) -> None:
        """A command that returns nothing and starts no work (a registration, the reset): it goes
        out with the next message; should the child refuse it, a ``post_failed`` event says so."""
        self.check(epoch)
        self._outbox.append({"type": "post", "op": op, "args": self.encode(args)})

    def _exchange(self, messages: list[dict[str, Any]], call_id: int) -> dict[str, Any]:
        """Write, then serve the child until the call's ``return`` message (returned whole)."""
        try:
            self._write(messages)
            return self._wait(call_id)
        except WireError as exc:
            self.fail(exc)
            raise
        except BaseException as exc:
            # Interrupted mid-exchange (the wall-clock alarm, ^C): the child waits for an
            # answer that will never come. It cannot be trusted any more.
            self.fail(WireError(f"the exchange with the wire child was interrupted ({type(exc).__name__})"))
            raise

    def _write(self, messages: list[dict[str, Any]]) -> None:
        now = self._sources.now_ms()
        if now != self._clock:
            messages.insert(0, {"type": "clock", "now": now})
            self._clock = now
        self.child.write(messages)

    def _wait(self, call_id: int) -> dict[str, Any]:
        while True:
            message = self.child.read(self._decoder)
            kind = message["type"]
            if kind == "event":
                self._event(message)
            elif kind == "request":
                self._serve(message)
            elif kind == "return":
                if message.get("id") != call_id:
                    raise ProtocolError(f"the child returned call {message.get('id')!r} while call {call_id} was pending")
                return message
            else:
                raise ProtocolError(f"the child sent an unexpected {kind!r} message")

    def _take_outbox(self) -> list[dict[str, Any]]:
        messages, self._outbox = self._outbox, []
        return messages

    def deliver(self, message: dict[str, Any]) -> None:
        """Queue a delivery (a chunk, a tool result, a listener's late value); it is written with
        the next message and its effect runs at the next run."""
        if self.dead is not None:
            return
        self._outbox.append({"type": "deliver", **self.encode(message)})
        if not self._in_run:
            self._schedule_run()

    def _schedule_run(self) -> None:
        if self._pump_scheduled or self.dead is not None or self._loop is None:
            return
        self._pump_scheduled = True
        self._loop.call_soon(self._run)

    def _run(self) -> None:
        """Let the child run until quiescent (a callback of the simulated loop)."""
        self._pump_scheduled = False
        if self.dead is not None:
            return
        self._in_run = True
        try:
            value = self.call("run", {}, mutates=False)
        except WireError:
            return  # failed and reported (every pending awaitable raises it)
        finally:
            self._in_run = False
        if self._tripped is not None:
            self.fail(self._tripped)
            return
        self._reconcile(value.get("agents", {}) if isinstance(value, dict) else {})
        if self._outbox:
            self._schedule_run()

    def _reconcile(self, agents: Mapping[str, Any]) -> None:
        for handle, state in agents.items():
            agent = self._agents.get(handle)
            if agent is None or not isinstance(state, list) or len(state) != 2:
                continue
            status, length = state
            agent._status = str(status)
            if length != len(agent._events):  # a log event the mirror missed: ask
                agent._events = list(self.call("events", {"agent": handle}, mutates=False))

    def fail(self, error: WireError) -> None:
        """The child is gone or untrustworthy: every later use raises ``error``, every pending
        awaitable raises it now, the run's verdict records it, and the child is killed."""
        if self.dead is not None:
            return
        self.dead = error
        promises, self._promises = self._promises, {}
        for promise in promises.values():
            promise._reject(WireError(str(error)))
        for future in self._defers.values():
            if not future.done():
                future.set_exception(WireError(str(error)))
        if self._loop is not None and simulator.current_loop() is self._loop:
            simulator.observe("problem", check="wire", message=_first_line(error))
        self.child.close()

    # ------------------------------------------------------------------ promises and ids

    def promise(self, value: Any, agent: WireAgent | None = None) -> WirePromise:
        """The awaitable of a child promise returned by a call (``{"promise", "settled"?}``)."""
        assert self._loop is not None
        promise = WirePromise(self._loop)
        if not isinstance(value, dict) or "promise" not in value:
            raise ProtocolError(f"expected a promise, got {value!r}")
        if value.get("settled"):
            if agent is not None and "status" in value:
                agent._status = str(value["status"])
            promise._settle(None)
        else:
            self._promises[str(value["promise"])] = promise
        return promise

    def defer(self, ticks: int, op: str, args: dict[str, Any], *, epoch: int) -> asyncio.Future[Any]:
        assert self._loop is not None
        value = self.call("defer", {"ticks": int(ticks), "op": op, "args": args}, epoch=epoch)
        future: asyncio.Future[Any] = self._loop.create_future()
        self._defers[str(value["defer"])] = future
        return future

    def register_listener(self, fn: Callable[..., Any]) -> int:
        registration = self.new_id()
        self._listeners[registration] = fn
        return registration

    def register_model(self, adapter: Any) -> int:
        registration = self.new_id()
        self._models[registration] = adapter
        return registration

    def register_tool(self, tool: Any) -> int:
        registration = self.new_id()
        self._tools[registration] = tool
        return registration

    # Refs (protocol.Refs): live objects <-> tags.

    def encode(self, value: Any) -> Any:
        return encode(value, self)

    def ref_of(self, value: Any) -> dict[str, Any] | None:
        if isinstance(value, WireAgent):
            return {"$agent": value._handle}
        if isinstance(value, WireSession):
            return {"$session": value._agent._handle}
        if isinstance(value, AbortSignal):
            handle = self._signal_ids.get(id(value))
            return {"$signal": handle} if handle is not None else None
        return None

    def error_json(self, error: BaseException) -> dict[str, Any]:
        """An exception as the ``error`` field of a message (it comes back as itself)."""
        return error_info(error, self.error_origin(error))

    def error_origin(self, error: BaseException) -> int:
        self._errors.append(error)
        return len(self._errors) - 1

    def agent(self, handle: str) -> WireAgent:
        try:
            return self._agents[handle]
        except KeyError:
            raise ProtocolError(f"the child referred to agent {handle!r} before announcing it") from None

    def session(self, handle: str) -> WireSession:
        return self.agent(handle).session

    def signal(self, handle: str) -> AbortSignal:
        controller = self._signals.get(handle)
        if controller is None:
            controller = self._signals[handle] = AbortController()
            self._signal_ids[id(controller.signal)] = handle
        return controller.signal

    def error(self, info: Mapping[str, Any]) -> BaseException:
        origin = info.get("origin")
        if isinstance(origin, int) and 0 <= origin < len(self._errors):
            return self._errors[origin]  # a Python error that went through the child comes back as itself
        code = info.get("code")
        return RemoteError(str(info.get("message", "")), str(info.get("name", "Error")),
                           code if isinstance(code, str) else None)

    # ------------------------------------------------------------------ the child's events

    def _event(self, message: dict[str, Any]) -> None:
        handler = _EVENTS.get(str(message.get("ev")))
        if handler is None:
            raise ProtocolError(f"the child sent an unknown event {message.get('ev')!r}")
        self._in_events = True
        try:
            handler(self, message)
        finally:
            self._in_events = False

    def _on_agent(self, m: dict[str, Any]) -> None:
        handle = str(m["agent"])
        self._agents[handle] = WireAgent(self, handle, str(m["id"]), str(m["session"]), str(m["status"]),
                                         list(m.get("events") or []))

    def _on_status(self, m: dict[str, Any]) -> None:
        self.agent(str(m["agent"]))._status = str(m["status"])

    def _on_log(self, m: dict[str, Any]) -> None:
        self.agent(str(m["agent"]))._events.append(m["event"])

    def _on_notify(self, m: dict[str, Any]) -> None:
        listener = self._listeners.get(m["listener"])
        if listener is None:
            return
        try:
            listener(*m["args"])
        except Exception:  # an observer that fails must not break the exchange
            self._logger.exception("an observer listener failed")

    def _on_abort(self, m: dict[str, Any]) -> None:
        self.signal(str(m["signal"]))
        self._signals[str(m["signal"])].abort(str(m.get("reason") or "aborted"))

    def _on_tool(self, m: dict[str, Any]) -> None:
        tool = self._tools.get(m["tool"])
        call = str(m["call"])
        assert self._loop is not None
        self._loop.create_task(self._execute(call, tool, m.get("arguments"), m.get("context") or {}),
                               name=f"wire-tool-{call}")

    async def _execute(self, call: str, tool: Any, arguments: Any, context: dict[str, Any]) -> None:
        epoch = self.epoch
        try:
            if tool is None:
                raise RemoteError("the tool was unregistered", "LookupError")
            value = await tool.execute(arguments, context)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if epoch == self.epoch:
                self.deliver({"op": "settle", "call": call, "error": self.error_json(exc)})
            return
        if epoch == self.epoch:
            self.deliver({"op": "settle", "call": call, "value": value})

    def _on_stream_closed(self, m: dict[str, Any]) -> None:
        task = self._streams.pop(str(m["stream"]), None)
        if task is not None:
            task.cancel()  # the loop stopped reading: so does the driver (as a consumer would)

    def _on_settled(self, m: dict[str, Any]) -> None:
        promise = self._promises.pop(str(m["promise"]), None)
        if "status" in m and m.get("agent") in self._agents and m["status"] is not None:
            self._agents[m["agent"]]._status = str(m["status"])  # the status it was released in
        if promise is None:
            return
        if "error" in m:
            promise._reject(self.error(m["error"]))
        else:
            promise._settle(m.get("value"))

    def _on_post_failed(self, m: dict[str, Any]) -> None:
        error = self.error(m.get("error") or {})
        message = f"the implementation refused {m.get('op')}(): {error}"
        self._logger.warning("%s", message)
        if self._loop is not None and simulator.current_loop() is self._loop:
            simulator.observe("problem", check="wire", message=message)

    def _on_warning(self, m: dict[str, Any]) -> None:
        self._logger.warning("%s", m.get("message", ""))

    def _on_tripwire(self, m: dict[str, Any]) -> None:
        found = m.get("resources") or []
        where = ", ".join(f"{r.get('type')} at {r.get('at')}" for r in found[:3] if isinstance(r, dict))
        self._tripped = WireError(
            f"the implementation created timers or I/O during a run ({where}): quiescence over the wire "
            "is ambiguous with them (see docs/wire-protocol.md, 'Quiescence')")

    def _on_deferred(self, m: dict[str, Any]) -> None:
        future = self._defers.pop(str(m["defer"]), None)
        if future is None or future.done():
            return
        if "error" in m:
            future.set_exception(self.error(m["error"]))
        else:
            future.set_result(m.get("value"))

    # ------------------------------------------------------------------ the child's requests

    def _serve(self, message: dict[str, Any]) -> None:
        reply: dict[str, Any] = {"type": "reply", "id": message.get("id")}
        op = str(message.get("op"))
        handler = _REQUESTS.get(op)
        try:
            if handler is None:
                raise ProtocolError(f"the child sent an unknown request {op!r}")
            handler(self, message, reply)
        except WireError:
            raise
        except Exception as exc:
            reply.pop("value", None)
            reply.pop("pending", None)
            reply["error"] = self.error_json(exc)
            if _interrupt(exc):
                raise
        messages = self._take_outbox()
        messages.append(self.encode(reply))
        self._write(messages)

    def _listener(self, message: dict[str, Any]) -> Callable[..., Any] | None:
        return self._listeners.get(message.get("listener"))  # type: ignore[arg-type]

    def _rq_listener(self, m: dict[str, Any], reply: dict[str, Any]) -> None:
        listener = self._listener(m)
        if listener is not None:
            result = listener(*m.get("args", []))
            if inspect.iscoroutine(result):
                result.close()  # like an in-process bus: a notification cannot await it
                raise TypeError("a listener of a notification returned a coroutine (notifications are synchronous)")
        reply["value"] = None

    def _rq_waterfall(self, m: dict[str, Any], reply: dict[str, Any]) -> None:
        listener = self._listener(m)
        call = str(m["call"])
        next_fn = _Next(self, call, self.epoch)
        value = m.get("value")
        result = listener(*m.get("args", []), value, next_fn) if listener is not None else next_fn()
        self._answer(call, result, reply)

    def _rq_awaited(self, m: dict[str, Any], reply: dict[str, Any]) -> None:
        listener = self._listener(m)
        result = listener(*m.get("args", [])) if listener is not None else None
        self._answer(str(m["call"]), result, reply)

    def _answer(self, call: str, result: Any, reply: dict[str, Any]) -> None:
        if not inspect.isawaitable(result):
            reply["value"] = result
            return
        # Awaited later: the child's listener returns a promise the driver settles.
        reply["pending"] = True
        assert self._loop is not None
        # A coroutine runs as the task itself (a task never started is closed cleanly).
        work = result if inspect.iscoroutine(result) else _await(result)
        task = self._loop.create_task(work, name=f"wire-listener-{call}")
        epoch = self.epoch

        def settle(done: asyncio.Task[Any]) -> None:
            if done.cancelled() or epoch != self.epoch:
                return
            error = done.exception()
            if error is not None:
                self.deliver({"op": "settle", "call": call, "error": self.error_json(error)})
            else:
                self.deliver({"op": "settle", "call": call, "value": done.result()})

        task.add_done_callback(settle)

    def _on_stream(self, m: dict[str, Any]) -> None:
        """The loop called a model: the Python adapter sees the request now (in the order of
        the child's events) and is consumed by a task, delivering what it yields."""
        sid = str(m["stream"])
        assert self._loop is not None
        adapter = self._models.get(m["model"])
        try:
            if adapter is None:
                raise RemoteError("the model was unregistered", "LookupError")
            stream = adapter.stream(m.get("request") or {})
        except Exception as exc:  # FINISH-2: raised by stream(): the loop's first read fails
            self.deliver({"op": "fail", "stream": sid, "error": self.error_json(exc)})
            return
        self._streams[sid] = self._loop.create_task(self._consume(sid, stream), name=f"wire-stream-{sid}")

    async def _consume(self, sid: str, stream: Any) -> None:
        epoch = self.epoch
        try:
            if inspect.isawaitable(stream) and not hasattr(stream, "__anext__"):
                stream = await stream  # an ``async def stream()`` returning an iterator
            async for chunk in stream:
                if epoch != self.epoch or sid not in self._streams:
                    return
                self.deliver({"op": "chunk", "stream": sid, "chunk": chunk})
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if epoch == self.epoch and self._streams.pop(sid, None) is not None:
                self.deliver({"op": "fail", "stream": sid, "error": self.error_json(exc)})
            return
        if epoch == self.epoch and self._streams.pop(sid, None) is not None:
            self.deliver({"op": "end", "stream": sid})

    def _rq_uuid(self, m: dict[str, Any], reply: dict[str, Any]) -> None:
        reply["value"] = self._sources.uuid()

    def _rq_next_id(self, m: dict[str, Any], reply: dict[str, Any]) -> None:
        reply["value"] = self._sources.next_id(str(m.get("prefix", "id")))


async def _await(awaitable: Awaitable[Any]) -> Any:
    return await awaitable


class _Next:
    """A waterfall's ``next()`` on the driver's side: runs the rest of the child's chain."""

    __slots__ = ("_call", "_conn", "_epoch")

    def __init__(self, conn: Connection, call: str, epoch: int) -> None:
        self._conn = conn
        self._call = call
        self._epoch = epoch

    def __call__(self) -> WirePromise:
        return self._conn.promise(self._conn.call("next", {"call": self._call}, epoch=self._epoch))


_EVENTS: dict[str, Callable[[Connection, dict[str, Any]], None]] = {
    "agent": Connection._on_agent,
    "status": Connection._on_status,
    "log": Connection._on_log,
    "notify": Connection._on_notify,
    "abort": Connection._on_abort,
    "tool": Connection._on_tool,
    "stream": Connection._on_stream,
    "stream_closed": Connection._on_stream_closed,
    "post_failed": Connection._on_post_failed,
    "settled": Connection._on_settled,
    "warning": Connection._on_warning,
    "tripwire": Connection._on_tripwire,
    "deferred": Connection._on_deferred,
}

_REQUESTS: dict[str, Callable[[Connection, dict[str, Any], dict[str, Any]], None]] = {
    "listener": Connection._rq_listener,
    "waterfall": Connection._rq_waterfall,
    "awaited": Connection._rq_awaited,
    "uuid": Connection._rq_uuid,
    "next_id": Connection._rq_next_id,
}


class WireImplementation:
    """``--impl wire:COMMAND``: the loop a child process runs, checked over the wire.

    The child is started (and its handshake checked) when this object is built, so a command
    that is not a bridge is a one-line setup error before anything runs. It is reused from one
    test to the next; a child that crashed, hung or broke the protocol fails the test it was in
    and the next service gets a fresh one.
    """

    def __init__(self, command: str, *, cwd: str | None = None, timeout: float | None = None,
                 transcript: bool = False) -> None:
        import shlex

        self.command = command
        self.argv = shlex.split(command)
        if not self.argv:
            raise WireError("missing COMMAND (expected --impl 'wire:COMMAND', e.g. 'wire:node bridge.mjs')")
        self.cwd = cwd
        self.timeout = timeout
        self.record_transcript = transcript
        self._conn: Connection | None = None
        self.hello = self._connection().hello
        info = self.hello.get("implementation") or {}
        runtime = self.hello.get("runtime") or {}
        self.name = str(info.get("name") or self.argv[0])
        self.version = str(info.get("version") or "")
        self.runtime = str(runtime.get("name") or "unknown")
        self.runtime_version = str(runtime.get("version") or "")
        declared = [f for f in self.hello.get("features") or [] if f in FEATURES]
        self.features: frozenset[Feature] = frozenset(declared)
        self.logger_name = f"loopkit.wire.{self.name}"

    @property
    def info(self) -> dict[str, Any]:
        """What reports and race cassettes record about the implementation."""
        return {"kind": "wire", "name": self.name, "version": self.version, "runtime": self.runtime,
                "runtime_version": self.runtime_version, "protocol": self.hello.get("protocol")}

    def _connection(self) -> Connection:
        conn = self._conn
        if conn is not None and conn.child.owner != os.getpid():
            conn.child.abandon()  # inherited through fork: the parent's child, not ours
            conn = None
        if conn is not None and conn.dead is not None:
            conn.child.close()
            conn = None
        if conn is None:
            child = Child(self.argv, cwd=self.cwd, timeout=self.timeout)
            if self.record_transcript:
                child.transcript = []
            try:
                hello = child.handshake()
            except BaseException:
                child.close()
                raise
            conn = self._conn = Connection(self, child, hello)
        return conn

    def transcript(self) -> list[str]:
        """Every line exchanged in the last simulation run (``transcript=True``), ``>`` for the
        driver's and ``<`` for the child's: the same scenario and seed give the same lines."""
        conn = self._conn
        return list(conn.child.transcript or []) if conn is not None else []

    @property
    def connection(self) -> Connection:
        """The current child's connection (a fresh child when the last one failed)."""
        return self._connection()

    def create_service(self, *, persistence: object | None = None) -> ServiceHandle:
        conn = self._connection()
        conn.bind_run()
        args: dict[str, Any] = {}
        if persistence is not None:
            if not isinstance(persistence, WirePersistence) or persistence._conn is not conn:
                raise TypeError(f"not a persistence backend of this wire implementation: {persistence!r}")
            conn.check(persistence._epoch)
            args["persistence"] = persistence._handle
        value = conn.call("service", args, mutates=False)
        return WireService(conn, str(value["service"]))

    def new_persistence(self) -> object:
        if "persistence" not in self.features:
            raise NotImplementedError(f"{self.name} declares no persistence")
        conn = self._connection()
        conn.bind_run()
        value = conn.call("new_persistence", {}, mutates=False)
        return WirePersistence(conn, str(value["persistence"]))

    def close(self) -> None:
        """Stop the child (it also stops on its own when this process exits)."""
        if self._conn is not None:
            self._conn.child.close()
            self._conn = None


__all__ = ["Opaque", "RemoteError", "WireAgent", "WireError", "WireImplementation", "WirePromise", "WireService"]
