"""The conversation with one wire child, on the driver's side (``docs/wire-protocol.md``).

A :class:`Connection` holds the state of the current simulation run on both sides: handle ids
(restarted at every run, so one scenario gives the same bytes whatever ran before it), the
driver's listeners, models and tools, the child's promises and signals, and the outbox of posts
and deliveries that travel with the next message. ``call`` is a synchronous round trip that
serves the child's events and requests until its answer; ``_run`` (a callback of the simulated
loop) lets the child run until quiescent.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import logging
import sys
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

import simulator
from reference_loop.abort import AbortController, AbortSignal
from reference_loop.sources import Sources, default_sources

from ..fakes.model import relayed
from .child import Child
from .edits import Held
from .handles import WireAgent, WirePromise, WireSession
from .protocol import Decoder, ProtocolError, RemoteError, WireError, encode, error_info

if TYPE_CHECKING:
    from .adapter import WireImplementation


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[0] if text else type(error).__name__


def _interrupt(exc: BaseException) -> bool:
    """The pytest plugin's wall-clock alarm: never contained as a listener failure."""
    plugin = sys.modules.get("conformance.plugin")
    return plugin is not None and isinstance(exc, plugin.WallTimeout)


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
        self._load_hooks: dict[str, Callable[[str], Any]] = {}  # persistence id -> WirePersistence.hold's hook
        # what the driver's code handed the child and may edit later (§9.1): the caller's objects
        # a send, steer, inject or append passed, a tool's result, a plugin's new value
        self._passed: dict[int, dict[str, Held]] = {}
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
            if length != len(agent._events):
                # The mirror and the log differ: every reading of the log since was wrong, and a
                # test would blame the loop for it. The child broke §7.2 (or the loop appended
                # without notifying session/event, LOG-2): the run cannot be trusted.
                self.fail(ProtocolError(
                    f"wire child {self.child.command!r}: agent {agent.id!r}: its log holds {length} events but "
                    f"the driver's mirror holds {len(agent._events)}: the child must send one `log` event for every "
                    "session/event notification (wire protocol §7.2), or the loop appended without notifying "
                    "session/event (LOG-2)"))
                return

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
        self._signals[str(m["signal"])].abort(str(m["reason"]) if m.get("reason") is not None else "aborted")

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
            held = Held(arguments)
            try:
                value = await tool.execute(held.value, context)
            finally:  # a tool consuming its arguments in place consumes the loop's (§9.1)
                edit = held.edit()
                if edit is not None and epoch == self.epoch:
                    self.deliver({"op": "edit", "call": call, "edit": edit})
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if epoch == self.epoch:
                self.deliver({"op": "settle", "call": call, "error": self.error_json(exc)})
            return
        if epoch == self.epoch:  # the tool's own result, which it may edit later (§9.1)
            self.deliver(_passing({"op": "settle", "call": call, "value": value}, self.keep({"result": value})))

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

    def passing(self, args: dict[str, Any], fields: tuple[str, ...] = ("content", "source")) -> dict[str, Any]:
        """``args`` of a send, steer, inject (or append: ``fields`` ``data``), noting those of
        ``fields`` that are the caller's objects (a list, a dict): what the caller edits in them
        later reaches the child's decoded copies too (:meth:`sync_passed`, §9.1)."""
        ref = self.keep({name: args.get(name) for name in fields})
        return args if ref is None else {**args, "passed": ref}

    def keep(self, values: dict[str, Any]) -> int | None:
        """Note those of ``values`` that are objects (a list, a dict) the driver's code may edit
        in place once the child has its decoded copies; their ``passed`` reference (``None``:
        none is). Shared or cyclic values are not kept: they are no JSON, and a loop must reject
        them anyway (LOG-1)."""
        held: dict[str, Held] = {}
        for name, value in values.items():
            if isinstance(value, (list, dict)):
                try:
                    held[name] = Held(value)
                except ValueError:
                    pass
        if not held:
            return None
        ref = len(self._passed) + 1
        self._passed[ref] = held
        return ref

    def _rewrite(self, result: Any, chain: _Next | None) -> int | None:
        """A waterfall listener's result kept when it is an object of its own (a plugin's rewrite,
        which it may edit later), not the value it was handed (whose edits travel as ``edit``)
        nor what its ``next()`` gave it (the chain's, decoded)."""
        if chain is None or chain.handed(result):
            return None
        return self.keep({"result": result})

    def sync_passed(self, *, epoch: int | None = None) -> None:
        """Send the child what the driver's code has edited, in place, in what it handed over and
        kept (:meth:`keep`; the child applies each to its decoded copy: a loop that kept such an
        object in its log shows it)."""
        for ref, held in self._passed.items():
            for name, value in held.items():
                edit = value.edit()
                if edit is not None:
                    self.post("edit_passed", {"passed": ref, "field": name, "edit": edit}, epoch=epoch)

    def hold_loads(self, persistence: str, hook: Callable[[str], Any], *, epoch: int | None = None) -> None:
        """Have the child's backend ``persistence`` ask before each load (see ``WirePersistence.hold``)."""
        self._load_hooks[persistence] = hook
        self.post("hold_loads", {"persistence": persistence}, epoch=epoch)

    def _rq_load(self, m: dict[str, Any], reply: dict[str, Any]) -> None:
        """A held backend is about to load a session: its hook decides when it goes on."""
        hook = self._load_hooks.get(str(m.get("persistence")))
        self._answer(str(m["call"]), hook(str(m.get("session"))) if hook is not None else None, reply)

    def _rq_abort(self, m: dict[str, Any], reply: dict[str, Any]) -> None:
        """A signal fired inside the child's code (its ``abort()``): its listeners here run now,
        before the child's call returns, as an AbortSignal's do (§10; the ``abort`` event is the
        same, for a signal already fired when the child first sent it)."""
        self._on_abort(m)
        reply["value"] = None

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
        held = Held(m.get("value"))  # what the listener edits in place, the child's value gets too (§9.1)
        next_fn = _Next(self, call, self.epoch, held)
        try:
            result = listener(*m.get("args", []), held.value, next_fn) if listener is not None else next_fn()
        finally:
            _with_edit(reply, held)
        self._answer(call, result, reply, next_fn)

    def _rq_awaited(self, m: dict[str, Any], reply: dict[str, Any]) -> None:
        listener = self._listener(m)
        result = listener(*m.get("args", [])) if listener is not None else None
        self._answer(str(m["call"]), result, reply)

    def _answer(self, call: str, result: Any, reply: dict[str, Any], chain: _Next | None = None) -> None:
        """Reply to a listener call with ``result``, or ``pending`` and a ``settle`` once it is
        awaited; ``chain``: the ``next()`` a waterfall listener was given."""
        held = chain.held if chain is not None else None
        if not inspect.isawaitable(result):
            reply["value"] = result
            _passing(reply, self._rewrite(result, chain))
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
            message: dict[str, Any] = {"op": "settle", "call": call}
            if held is not None:
                _with_edit(message, held)
            if error is not None:
                self.deliver({**message, "error": self.error_json(error)})
            else:
                value = done.result()
                self.deliver(_passing({**message, "value": value}, self._rewrite(value, chain)))

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
            held = Held(m.get("request") or {})
            with relayed():  # the chunks are forwarded as read: in flight, not yet the loop's
                stream = adapter.stream(held.value)
            edit = held.edit()  # an adapter converting the request's messages in place (§9.1)
            if edit is not None:
                self.deliver({"op": "edit", "stream": sid, "edit": edit})
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


def _passing(message: dict[str, Any], ref: int | None) -> dict[str, Any]:
    """``message`` carrying ``passed: ref`` when the value it carries was kept (§9.1)."""
    if ref is not None:
        message["passed"] = ref
    return message


def _with_edit(message: dict[str, Any], held: Held) -> None:
    """Add to ``message`` the edit made in place to ``held`` since it was last reported (§9.1)."""
    edit = held.edit()
    if edit is not None:
        message["edit"] = edit


class _Next:
    """A waterfall's ``next()`` on the driver's side: runs the rest of the child's chain (with
    the value as the listener left it: its in-place edits reach the child first, §9.1)."""

    __slots__ = ("_call", "_conn", "_epoch", "_given", "held")

    def __init__(self, conn: Connection, call: str, epoch: int, held: Held) -> None:
        self._conn = conn
        self._call = call
        self._epoch = epoch
        self.held = held
        self._given: list[asyncio.Future[Any]] = []

    def __call__(self) -> WirePromise:
        args: dict[str, Any] = {"call": self._call}
        _with_edit(args, self.held)
        promise = self._conn.promise(self._conn.call("next", args, epoch=self._epoch))
        self._given.append(promise._future)
        return promise

    def handed(self, value: Any) -> bool:
        """Whether ``value`` is the value the listener was handed or one its ``next()`` gave."""
        return value is self.held.value or any(
            f.done() and not f.cancelled() and f.exception() is None and f.result() is value for f in self._given)


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
    "abort": Connection._rq_abort,
    "listener": Connection._rq_listener,
    "waterfall": Connection._rq_waterfall,
    "load": Connection._rq_load,
    "awaited": Connection._rq_awaited,
    "uuid": Connection._rq_uuid,
    "next_id": Connection._rq_next_id,
}
