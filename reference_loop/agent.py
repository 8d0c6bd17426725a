"""``ReactLoopAgent`` and its driver loop: the decision points of spec sections 2, 3, 4, 6, 7, 8, 9.

Read top to bottom: ``_drive`` (one loop per agent lifetime: idle wait, the cancellation windows,
one turn, late steering, idle), ``_run_turn`` / ``_open_turn`` / ``_steps`` (turn and step shape,
continuation, cancellation gates), ``_run_step`` (request, stream, step result, tools),
``_close_turn`` (end reason precedence, balanced close), then the public verbs. Every decision
point carries the id of the rule it implements.

Containment (ERR-*): every failure inside a turn is an ``Exception`` that propagates to
``_run_turn``, which records it once (``_fail``: first failure wins, one ``error`` event, one
``agent/error``) and closes the turn balanced. ``CancelledError``, ``KeyboardInterrupt`` and
``SystemExit`` are ``BaseException``s and are never contained (PY-1): they dispose the agent,
close the turn synchronously, and propagate.

Abortable work (the ``agent/request`` and ``agent/step-result`` waterfalls, the model stream, each
tool call) runs in a child task named ``agent:{id}:{what}`` that the step's abort signal cancels,
so a model, tool or listener that ignores the signal still stops; the driver task itself is named
``agent:{id}:driver``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine, Generator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from . import vocabulary as v
from .abort import AbortController, AbortError, AbortSignal
from .assembler import BlockAssembler
from .inbox import Inbox, InboxMessage
from .session import Session, SessionValidationError, json_snapshot
from .system_prompt import join_prompt
from .tools import error_code, error_message, error_result, normalise_content, parse_arguments

if TYPE_CHECKING:
    from .service import AgentLoopService

logger = logging.getLogger("reference_loop")
"""Contained failures are warned about here (ERR-12)."""


class AgentDisposedError(RuntimeError):
    """``send``/``steer``/``inject`` on a disposed agent (DISP-3)."""


class LoopError(Exception):
    """A failure the loop itself raises (no model, no adapter, a failed stream, a bad value)."""

    def __init__(self, message: str, code: str | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code


class IdleWaiter:
    """What ``when_idle()`` returns: registered when created, awaitable any number of times.

    Released at quiescence; when released by disposal it also waits for the driver to have
    exited (IDLE-4).
    """

    __slots__ = ("_after", "_done", "_future")

    def __init__(self) -> None:
        self._done = False
        self._future: asyncio.Future[None] | None = None
        self._after: asyncio.Future[None] | None = None

    def done(self) -> bool:
        """Whether the waiter has been released (and, after disposal, the driver has exited)."""
        return self._done and (self._after is None or self._after.done())

    def _release(self, after: asyncio.Future[None] | None = None) -> None:
        if self._done:
            return
        self._done = True
        self._after = after
        if self._future is not None and not self._future.done():
            self._future.set_result(None)

    def __await__(self) -> Generator[Any, None, None]:
        return self._wait().__await__()

    async def _wait(self) -> None:
        if not self._done:
            if self._future is None:
                self._future = asyncio.get_running_loop().create_future()
            # Shielded: one cancelled awaiter must not cancel the shared future.
            await asyncio.shield(self._future)
        if self._after is not None and not self._after.done():
            await asyncio.shield(self._after)


@dataclass
class _Turn:
    """The driver's bookkeeping for the turn it is running."""

    number: int
    step: int = 0  # the current (or last) step number; 0 = no step yet
    opened: bool = False  # turn/start is in the log
    step_open: bool = False  # step/start is in the log without its step/end
    closed: bool = False  # turn/end is in the log
    notify_end: bool = False  # emit agent/turn-end (LOOP-4: not after a boundary failure)
    failure: BaseException | None = None  # ERR-9: the first failure wins
    aborted: str | None = None  # the abort/cancel reason, when the turn was aborted
    max_tokens: bool = False  # MAXTOK-2: sticky for the turn; MAXTOK-4: a fresh _Turn per turn


class _StepOutcome:
    """How a step ended when it did not fail: ``aborted`` or done (with or without tool calls)."""

    __slots__ = ("aborted", "had_tool_calls")

    def __init__(self, *, aborted: str | None = None, had_tool_calls: bool = False) -> None:
        self.aborted = aborted
        self.had_tool_calls = had_tool_calls


class ReactLoopAgent:
    """One agent: an inbox, a session log, and the driver loop that runs its turns.

    Create agents through ``AgentLoopService``; the driver task (named ``agent:{id}:driver``) is
    created at once when an event loop is running, else on first use.
    """

    def __init__(
        self,
        service: AgentLoopService,
        agent_id: str,
        session: Session,
        options: Mapping[str, Any] | None = None,
        meta: Mapping[str, Any] | None = None,
        on_dispose: Callable[[ReactLoopAgent], None] | None = None,
    ) -> None:
        self._service = service
        self._bus = service.bus
        self._id = agent_id
        self._session = session
        self._options: dict[str, Any] = dict(options or {})
        self.meta: dict[str, Any] = dict(meta or {})
        self._on_dispose = on_dispose
        self._status: v.AgentStatus = "idle"
        self._inbox = Inbox()  # INBOX-1
        self._marker: str | None = None  # CANCEL-1: the turn-scoped cancel marker (its reason)
        self._step_abort: AbortController | None = None  # the in-flight step's abort handle
        # DISP-2: while the driver awaits a waterfall outside a step's signal (system-prompt,
        # agent/turn-continuation), dispose() cancels it there, so a listener that never returns
        # cannot keep the driver alive (see _agent_waterfall)
        self._in_plugin = False
        self._plugin_cut = False
        self._waiters: list[IdleWaiter] = []
        self._disposed = False
        self._turn: _Turn | None = None
        self._task: asyncio.Task[None] | None = None
        self._exited: asyncio.Future[None] | None = None
        self._ensure_driver()

    # ------------------------------------------------------------------ properties

    @property
    def id(self) -> str:
        """The agent id."""
        return self._id

    @property
    def options(self) -> dict[str, Any]:
        """The agent's options (``model``, ``system_prompt``)."""
        return self._options

    @property
    def session(self) -> Session:
        """The agent's session log."""
        return self._session

    @property
    def status(self) -> v.AgentStatus:
        """``idle``, ``running`` or ``disposed``."""
        return self._status

    @property
    def driver_task(self) -> asyncio.Task[None] | None:
        """The asyncio task running the driver loop (``None`` before a loop was available)."""
        return self._task

    def __repr__(self) -> str:
        return f"ReactLoopAgent(id={self._id!r}, status={self._status!r})"

    # ================================================================== the driver loop

    def _ensure_driver(self) -> None:
        if self._task is not None or self._disposed:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # created outside a loop: the first send/when_idle inside one starts it
        self._exited = loop.create_future()
        self._task = loop.create_task(self._drive(), name=f"agent:{self._id}:driver")
        self._task.add_done_callback(self._driver_ended)

    def _driver_ended(self, task: asyncio.Task[None]) -> None:
        # PY-1: a driver task cancelled before its first step never enters _drive's handler
        # (the coroutine is closed unstarted): the agent still ends disposed, its exit known.
        # Registered only until _drive's first step, which takes it off again: a callback at
        # every driver's end would be one more step for no purpose.
        if not self._disposed:
            self.dispose()
        if self._exited is not None and not self._exited.done():
            self._exited.set_result(None)

    async def _drive(self) -> None:
        """LOOP-1: one driver per agent lifetime: wait (idle), run one turn, repeat."""
        if self._task is not None:
            self._task.remove_done_callback(self._driver_ended)  # started: the handler below covers it
        try:
            while not self._disposed:
                # LOOP-1: park until something is queued. A cancel marker wakes it too, so work
                # queued and cancelled before the driver parks (or first ran) is settled here.
                await self._inbox.wait_for_queued(
                    lambda: self._disposed or self._marker is not None
                )
                if self._disposed:
                    break
                # CANCEL-W0 / CANCEL-W1: the wait woke (or never parked) and a cancel came before
                # the running flip: drop the turn (no turn/start, no status event). MARKER-1: reset.
                if self._marker is not None:
                    self._marker = None
                    if not self._inbox.has_queued:
                        self._release_waiters()  # quiescent: not running, nothing queued
                        continue
                    # CANCEL-W1: a prompt queued after the cancel runs normally.
                self._set_status("running")
                if self._disposed:
                    break
                # CANCEL-W2: a synchronous agent/status('running') listener cancelled.
                if self._marker is not None:
                    self._marker = None  # MARKER-1
                    # LOOP-8: steering the listener added after its cancel is never stranded.
                    for late in self._inbox.drain_steering():
                        self._inbox.enqueue(late)
                    if not self._inbox.has_queued:
                        self._set_status("idle")  # a real transition: releases waiters
                        continue
                    # The listener also queued a replacement: run it in this running period, so
                    # when_idle() resolves only after it (the seed's window-2 fix).
                # LOOP-8: turns run back to back while work is queued, with no idle transition.
                while True:
                    await self._run_turn()
                    # MARKER-1: reset once per iteration, after the turn returns: a cancel governs
                    # exactly one turn, so a prompt sent while the cancelled turn was flushing runs.
                    self._marker = None
                    # LOOP-8: steering that arrived too late for the turn becomes the next prompt.
                    for late in self._inbox.drain_steering():
                        self._inbox.enqueue(late)
                    if self._disposed or not self._inbox.has_queued:
                        break
                if self._disposed:
                    break  # DISP-5: running -> disposed, no idle in between
                self._set_status("idle")
        except BaseException:
            # PY-1: cancellation / interrupt ends the driver; the agent ends disposed.
            self.dispose()
            raise
        finally:
            if self._exited is not None and not self._exited.done():
                self._exited.set_result(None)

    # ------------------------------------------------------------------ one turn

    async def _run_turn(self) -> None:
        """Drain the queue into one turn, run it error-contained, close it, flush it (LOOP-4)."""
        drained = self._inbox.drain_queued()  # LOOP-2: a burst of sends is one turn
        if not drained:
            return
        turn = _Turn(self._session.last_turn() + 1)  # LOOP-3: numbers continue from the log
        self._turn = turn
        try:
            try:
                await self._open_turn(turn, drained)
            except Exception as exc:  # ERR-1: a throwing plugin ends the turn, never the loop
                self._fail(turn, exc, turn.step)  # (a listener of its error event may raise PY-1's)
        except BaseException:
            # PY-1: never contained; leave the log balanced, disposed, and let it propagate.
            self.dispose()
            if turn.opened and not turn.closed:
                self._close_turn(turn)
            self._turn = None
            raise
        if turn.opened:
            self._close_turn(turn)
            await self._flush(turn)  # LOOP-4: the awaited session/flush comes last
        self._turn = None

    async def _open_turn(self, turn: _Turn, drained: list[InboxMessage]) -> None:
        """turn/start, the drained user/messages, agent/turn-start, then the steps (LOOP-4)."""
        trigger = {"kind": "message", "source": drained[0].source}  # LOOP-2: first's source
        before = len(self._session)
        try:
            self._session.append("turn/start", {"turn": turn.number, "trigger": trigger})
        except Exception as exc:
            if len(self._session) == before:
                # ERR-8: nothing opened (the event was rejected): announce with step 0, no turn.
                turn.failure = exc
                self._warn(turn.number, "turn/start was rejected", exc)
                self._announce(turn.number, 0, exc)
                return
            # ERR-11: a session/event listener threw on turn/start: the turn ends error, the
            # prompt is consumed (no user/message, no model call). LOOP-4: no agent/turn-end.
            turn.opened = True
            raise
        except BaseException:
            # PY-1: never contained; a listener raised it once turn/start was in the log, which
            # the driver's exit must still close (LOG-4)
            turn.opened = len(self._session) > before
            raise
        turn.opened = True
        try:
            for item in drained:  # LOOP-2: one user/message per send, in order
                self._session.append("user/message", {"content": item.content, "source": item.source})
        except Exception:
            # LOOP-4: a session/event listener on user/message is no boundary listener: the
            # turn it fails (ERR-1) is notified ended
            turn.notify_end = True
            raise
        self._bus.emit("agent/turn-start", self, turn.number)  # a throw: LOOP-4 boundary failure
        turn.notify_end = True
        await self._steps(turn)

    async def _steps(self, turn: _Turn) -> None:
        """The step loop: steering, step boundaries, the step, continuation (LOOP-5, CONT-*)."""
        while True:
            if self._disposed:
                return  # DISP-1: the turn closes as disposed
            turn.step += 1
            step = turn.step
            # LOOP-5 / STEER-2 / CONT-2: steering queued since the last request joins this one,
            # unless a turn-start listener cancelled the turn: steering given after that cancel
            # is late for the dropped step and is re-queued after the turn (CANCEL-4, LOOP-8).
            if self._marker is None:
                self._drain_steering(turn)
            # LOOP-5: step/start is appended before agent/step-start is emitted. A session/event
            # listener throwing on step/start fails the turn (ERR-1) but is no boundary listener:
            # its end is still notified (LOOP-4).
            self._append_step_event(turn, "step/start")
            try:
                self._bus.emit("agent/step-start", self, turn.number, step)
            except Exception:
                turn.notify_end = False  # LOOP-4: boundary failure, announced via agent/error
                raise
            # CANCEL-STEP: a cancel from agent/turn-start or agent/step-start (before any abort
            # handle exists) drops the step: opened and closed empty, the model is not called.
            if self._marker is not None:
                turn.aborted = self._marker
                self._end_step(turn)
                return
            if self._disposed:
                return
            outcome = await self._run_step(turn, step)
            if outcome.aborted is not None:
                # ABORT-1 / CANCEL-MID / TOOL-5: the step ends, no further step runs. Its late
                # steering stays in the FIFO and is re-queued after the turn (STEER-3).
                turn.aborted = outcome.aborted
                self._end_step(turn)
                return
            # LOOP-5: steering drained again after the tools, then step/end, agent/step-end.
            steered = self._drain_steering(turn)
            self._end_step(turn)  # ERR-3: a throw here ends the turn error, no further step
            if self._disposed:
                return
            # CONT-1: continue when the step had tool calls or steering was drained after it.
            default = outcome.had_tool_calls or steered
            decision = await self._agent_waterfall(
                "agent/turn-continuation", default, self, turn.number
            )
            # CANCEL-CONT: a cancel during the continuation waterfall wins over "continue".
            if self._marker is not None:
                turn.aborted = self._marker
                return
            if self._disposed:
                return
            # CONT-2: steering added by agent/step-end or continuation listeners overrides stop.
            if not decision and self._inbox.has_steering:
                decision = True
            if not decision:
                return

    async def _run_step(self, turn: _Turn, step: int) -> _StepOutcome:
        """Request, stream, step result, usage, tools (LOOP-5); failures raise."""
        assembly = await self._agent_waterfall(
            "system-prompt",
            {
                "system": join_prompt(*(s["text"] for s in self._service.prompts.sections())),
                "tools": self._service.tools.schemas(),
            },
            self,
        )
        controller = AbortController()
        self._step_abort = controller  # from here on abort()/cancel() abort this step
        signal = controller.signal
        try:
            # CANCEL-STEP: a cancel while the system prompt was assembled (no handle existed yet).
            if self._marker is not None:
                return _StepOutcome(aborted=self._marker)
            # DISP-2: a dispose() then ended the driver's work as it would a step in flight: no
            # model call, no tool run for a disposed agent (the turn closes disposed, DISP-1).
            if self._disposed:
                return _StepOutcome(aborted="disposed")
            request = self._build_request(assembly, signal)
            request = await self._step_waterfall("agent/request", turn, step, request, signal)
            if signal.aborted:
                return _StepOutcome(aborted=_abort_reason(signal))
            if not isinstance(request, Mapping):
                raise LoopError(
                    f"agent/request must return a request mapping, got {type(request).__name__}",
                    "BAD_REQUEST",
                )
            model = request.get("model")
            if not model:  # LOOP-7
                raise LoopError(
                    f"agent {self._id!r} has no model: set one in its options (model) "
                    "or through an agent/request listener",
                    "NO_MODEL",
                )
            adapter = self._service.model_adapter(str(model))
            if adapter is None:
                raise LoopError(f"no model adapter registered for model {model!r}", "NO_ADAPTER")
            # LOOP-10: the adapter receives exactly what agent/request returned.
            assembler = BlockAssembler()
            completed = await self._in_subtask(
                self._consume_stream(turn, step, adapter, request, signal, assembler),
                signal,
                "model",
            )
            if not completed or signal.aborted:
                return _StepOutcome(aborted=_abort_reason(signal))
            finish = assembler.finish_reason
            if finish.get("kind") == "error":  # FINISH-1
                raise LoopError(str(finish.get("message") or "model error"), finish.get("code"))
            if finish.get("kind") == "aborted":  # FINISH-1: the step's own signal did not fire
                raise LoopError("model stream aborted", "ABORTED")
            max_tokens = finish.get("kind") == "max-tokens"
            if max_tokens:
                turn.max_tokens = True  # MAXTOK-1 / MAXTOK-2: sticky for the whole turn
            message: Any = assembler.message()
            if max_tokens:
                message = _without_tool_calls(message)  # MAXTOK-5: before agent/step-result
            message = await self._step_waterfall("agent/step-result", turn, step, message, signal)
            if signal.aborted:
                return _StepOutcome(aborted=_abort_reason(signal))
            message = _check_message(message)
            if max_tokens:
                message = _without_tool_calls(message)  # MAXTOK-5: and again after it
            # LOOP-6: the log records what agent/step-result returned; tools use the same message.
            if message["content"] or not max_tokens:
                self._session.append(
                    "assistant/message",
                    {"turn": turn.number, "step": step, "content": message["content"]},
                )
            if assembler.usage is not None:
                self._session.append(
                    "usage", {"turn": turn.number, "step": step, "usage": assembler.usage}
                )
            calls = [
                b
                for b in message["content"]
                if isinstance(b, dict) and b.get("type") == "tool-call"
            ]
            for call in calls:  # TOOL-1: one after another, in the model's order
                if signal.aborted:
                    break
                await self._run_tool(turn, step, call, signal)
            if signal.aborted:  # TOOL-5: an abort during a tool ends the step
                return _StepOutcome(aborted=_abort_reason(signal))
            return _StepOutcome(had_tool_calls=bool(calls))  # MAXTOK-5: none for max-tokens
        finally:
            self._step_abort = None

    async def _step_waterfall(
        self, name: str, turn: _Turn, step: int, value: Any, signal: AbortSignal
    ) -> Any:
        """A step waterfall, abortable: a listener that hangs still stops when the step aborts
        (the caller checks ``signal.aborted`` and ignores the value then)."""
        box: dict[str, Any] = {}

        async def run() -> None:
            box["value"] = await self._bus.waterfall(
                name, self, turn.number, step, value=value, default=_identity
            )

        completed = await self._in_subtask(run(), signal, name.removeprefix("agent/"))
        return box["value"] if completed else value

    async def _agent_waterfall(self, name: str, value: Any, *args: Any) -> Any:
        """A waterfall awaited where no step's signal exists, which dispose() cuts short
        (:meth:`_cuttable`): ``value`` then, and the caller sees ``_disposed`` and closes the turn."""
        return await self._cuttable(self._bus.waterfall(name, *args, value=value, default=_identity), value)

    async def _cuttable(self, plugin: Awaitable[Any], cut: Any) -> Any:
        """Await a plugin (a waterfall, the turn's session/flush) where dispose() must still end
        the driver though a listener never returns (DISP-2): ``cut`` when it did. dispose()
        cancels the driver's task while it waits here (:meth:`_cut_plugin`), and that one
        cancellation is taken back here; not a task per plugin call, which every step would pay
        for."""
        self._in_plugin = True
        try:
            return await plugin
        except asyncio.CancelledError:
            if not self._plugin_cut:
                raise  # PY-1: the driver's task itself was cancelled
            return cut
        finally:
            self._in_plugin = False
            if self._plugin_cut:  # also when a listener swallowed the cancellation
                self._plugin_cut = False
                task = asyncio.current_task()
                if task is not None:
                    task.uncancel()

    def _cut_plugin(self) -> None:
        """dispose() while the driver awaits a plugin outside a step: cancel it there (a dispose
        from the driver's own task, a listener's, cannot: the listener returns to the driver)."""
        task = self._task
        if self._in_plugin and not self._plugin_cut and task is not None and not task.done():
            try:
                current = asyncio.current_task()
            except RuntimeError:
                current = None
            if current is not task:
                self._plugin_cut = True
                task.cancel()

    def _build_request(self, assembly: Any, signal: AbortSignal) -> dict[str, Any]:
        """``{"model"?, "messages", "system"?, "tools"?, "signal"}`` (SVC-5)."""
        request: dict[str, Any] = {}
        if self._options.get("model"):
            request["model"] = self._options["model"]
        request["messages"] = self._session.derive_messages()
        assembly = assembly if isinstance(assembly, Mapping) else {}
        system = join_prompt(assembly.get("system"), self._options.get("system_prompt"))
        if system:
            request["system"] = system
        if assembly.get("tools"):
            request["tools"] = list(assembly["tools"])
        request["signal"] = signal
        return request

    async def _consume_stream(
        self,
        turn: _Turn,
        step: int,
        adapter: Any,
        request: Any,
        signal: AbortSignal,
        assembler: BlockAssembler,
    ) -> None:
        """LOOP-5: each chunk appended as assistant/chunk, emitted as agent/stream-chunk."""
        stream = adapter.stream(request)  # FINISH-2: may raise here or while iterating
        if asyncio.iscoroutine(stream):
            stream = await stream  # tolerate ``async def stream()`` returning an iterator
        try:
            async for chunk in stream:
                if signal.aborted:
                    break
                event = self._session.append(
                    "assistant/chunk", {"turn": turn.number, "step": step, "chunk": chunk}
                )
                self._bus.emit(
                    "agent/stream-chunk", self, turn.number, step, event["data"]["chunk"]
                )
                assembler.add(event["data"]["chunk"])
        finally:
            aclose = getattr(stream, "aclose", None)
            if aclose is not None:
                await aclose()

    async def _run_tool(
        self, turn: _Turn, step: int, call: Mapping[str, Any], signal: AbortSignal
    ) -> None:
        """tool/call, the tools/execute waterfall, tool/result (LOOP-5, TOOL-2..5; LOG-6: the call is
        logged before its result)."""
        call_id, name = str(call.get("id", "")), str(call.get("name", ""))
        raw = call.get("arguments", "")
        self._session.append(
            "tool/call",
            {"turn": turn.number, "step": step, "call_id": call_id, "name": name, "arguments": raw},
        )
        execution = {
            "call_id": call_id,
            "name": name,
            "arguments": parse_arguments(raw),  # TOOL-2
            "agent": self,
            "signal": signal,
        }
        box: dict[str, Any] = {}

        async def execute() -> None:
            box["result"] = await self._bus.waterfall(
                "tools/execute", value=execution, default=self._service.tools.execute
            )

        try:
            if await self._in_subtask(execute(), signal, "tool"):
                result = _tool_result(box["result"])
            else:
                result = error_result(AbortError(_abort_reason(signal)))
        except Exception as exc:  # TOOL-3: a failing/unknown tool or listener is a result
            self._warn(turn.number, f"tool {name!r} (call {call_id}) failed", exc)
            result = error_result(exc)
        data = {"turn": turn.number, "step": step, "call_id": call_id, **result}  # TOOL-4
        data["call_id"] = call_id
        try:
            self._session.append("tool/result", data)
        except SessionValidationError as exc:  # content not JSON: still a (failed) result
            self._warn(turn.number, f"tool {name!r} returned unserialisable content", exc)
            self._session.append("tool/result", {**data, **error_result(exc)})

    async def _in_subtask(
        self, coro: Coroutine[Any, Any, None], signal: AbortSignal, label: str
    ) -> bool:
        """Run ``coro`` in a task cancelled when ``signal`` fires, so a model or tool that ignores
        the signal still stops. True when it completed; its failure propagates."""
        task = asyncio.get_running_loop().create_task(coro, name=f"agent:{self._id}:{label}")
        undo = signal.add_listener(lambda _reason: task.cancel())
        try:
            await asyncio.wait([task])
        except BaseException:
            # PY-1: the driver itself is being cancelled, and the agent ends disposed: dispose now,
            # while the step is in flight, so its signal fires (a model or tool watching it is told,
            # and a chunk it still hands over is not logged after the turn closed)
            self.dispose()
            task.cancel()
            raise
        finally:
            undo()
        if task.cancelled():
            if signal.aborted:
                return False
            # PY-1: a CancelledError raised in it (a listener's) is never a plugin error
            raise asyncio.CancelledError(f"{label} task was cancelled")
        exc = task.exception()
        if exc is not None:
            if signal.aborted:
                return False  # e.g. the adapter raised AbortError once the signal fired
            raise exc
        return True

    def _drain_steering(self, turn: _Turn) -> bool:
        """steering/message + agent/steering for each message waiting now (LOOP-9), taken one
        at a time: when a listener throws (the turn fails, ERR-1), the ones not yet logged are
        still waiting, ahead of any a listener added, and become the next prompts (LOOP-8);
        a ``cancel()`` a listener made dropped them, and steering given after it is late for this
        turn (CANCEL-4)."""
        waiting = self._inbox.steering_count
        clears = self._inbox.clears
        for _ in range(waiting):
            if self._inbox.clears != clears:
                break  # a listener's cancel() cleared the FIFO
            item = self._inbox.take_steering()
            self._session.append(
                "steering/message",
                {"turn": turn.number, "content": item.content, "source": item.source},
            )
            self._bus.emit("agent/steering", self, turn.number, item.content, item.source)
        return bool(waiting)

    def _append_step_event(self, turn: _Turn, kind: str) -> None:
        """Append step/start or step/end, tracking whether the step is open (the event is in
        the log even when a session/event listener throws)."""
        before = len(self._session)
        try:
            self._session.append(kind, {"turn": turn.number, "step": turn.step})
        finally:
            if len(self._session) > before:
                turn.step_open = kind == "step/start"

    def _end_step(self, turn: _Turn) -> None:
        """step/end then agent/step-end."""
        self._append_step_event(turn, "step/end")
        self._bus.emit("agent/step-end", self, turn.number, turn.step)

    # ------------------------------------------------------------------ closing a turn

    def _end_reason(self, turn: _Turn) -> v.TurnEndReason:
        """MAXTOK-3: disposed, aborted and error take precedence over max-tokens."""
        if self._disposed:
            return v.turn_end_disposed()  # DISP-1 / DISP-4
        if turn.aborted is not None:
            return v.turn_end_aborted(turn.aborted)  # ABORT-1 / CANCEL-1
        if turn.failure is not None:
            failure = turn.failure
            return v.turn_end_error(error_message(failure), error_code(failure))  # ERR-7
        if turn.max_tokens:
            return v.turn_end_max_tokens()  # MAXTOK-1 / MAXTOK-2
        return v.turn_end_completed()

    def _close_turn(self, turn: _Turn) -> None:
        """Balanced close (LOG-4, LOG-5): the open step's step/end, one turn/end, then agent/turn-end."""
        if turn.step_open:  # ERR-2: an open step gets its step/end first
            try:
                try:
                    self._append_step_event(turn, "step/end")
                except Exception as exc:
                    self._fail(turn, exc, turn.step)
            except BaseException:
                # PY-1: a listener's CancelledError (on step/end, or on its failure's error event)
                # propagates once the turn is closed too (LOG-4)
                turn.step_open = False
                self._close_turn(turn)
                raise
            turn.step_open = False
        reason = self._end_reason(turn)
        try:
            self._session.append("turn/end", {"turn": turn.number, "reason": reason})
        except Exception as exc:
            # ERR-4 / DISP-4: the event is in the log with its reason; append nothing after it.
            turn.closed = True
            self._late_failure(turn, exc, "a session/event listener on turn/end")
        turn.closed = True
        if turn.notify_end:  # LOOP-4: not after a boundary failure (already announced)
            try:
                self._bus.emit("agent/turn-end", self, turn.number, reason)
            except Exception as exc:
                self._late_failure(turn, exc, "an agent/turn-end listener")  # ERR-10

    async def _flush(self, turn: _Turn, *, driver: bool = True) -> None:
        """LOOP-4: await session/flush; a failure is reported, never appended (ERR-6). On the
        driver a dispose() cuts a listener that never returns, the others with it (DISP-2); an
        idle inject()'s flush is its caller's to await."""
        flushing = self._bus.parallel("session/flush", self._session)
        try:
            await (self._cuttable(flushing, None) if driver else flushing)
        except Exception as exc:
            self._late_failure(turn, exc, "a session/flush listener")

    # ------------------------------------------------------------------ failures

    def _fail(self, turn: _Turn, exc: BaseException, step: int) -> None:
        """Record a turn failure: ERR-9 first failure wins; one error event; one agent/error."""
        if turn.failure is not None or self._disposed:
            # ERR-9 (a later failure) / DISP-5 (disposal is not a failure): warn only.
            self._warn(turn.number, "a further failure was ignored", exc)
            return
        turn.failure = exc
        self._warn(turn.number, "turn failed", exc)
        if turn.opened and not turn.closed:
            data: dict[str, Any] = {
                "turn": turn.number,
                "step": step,
                "message": error_message(exc),
            }
            code = error_code(exc)
            if code is not None:
                data["code"] = code  # ERR-7: no code key at all without one
            try:
                self._session.append("error", data)
            except Exception as inner:  # ERR-4: a throwing listener on `error` is contained
                self._warn(turn.number, "a session/event listener on error failed", inner)
        self._announce(turn.number, step, exc)

    def _late_failure(self, turn: _Turn, exc: BaseException, what: str) -> None:
        """A failure after turn/end: announced once (unless disposing), never logged (ERR-10)."""
        self._warn(turn.number, f"{what} failed", exc)
        if self._disposed or turn.failure is not None:
            return
        turn.failure = exc
        self._announce(turn.number, turn.step, exc)

    def _announce(self, turn: int, step: int, exc: BaseException) -> None:
        """agent/error(agent, turn, step, error) with the original error; ERR-5: contained."""
        try:
            self._bus.emit("agent/error", self, turn, step, exc)
        except Exception as inner:
            self._warn(turn, "an agent/error listener failed", inner)

    def _warn(self, turn: int, what: str, exc: BaseException) -> None:
        """ERR-12: every contained failure is a warning naming the agent and the turn."""
        logger.warning(
            "agent %s turn %d: %s: %s: %s", self._id, turn, what, type(exc).__name__, error_message(exc)
        )

    # ------------------------------------------------------------------ status and waiters

    def _set_status(self, status: v.AgentStatus) -> None:
        """STATUS-1: legal transitions only; repeating the current status emits nothing."""
        if status == self._status or self._status == "disposed":
            return
        self._status = status
        if status == "idle":
            self._release_waiters()  # IDLE-3: before the event, so a throwing listener can't hang it
        try:
            self._bus.emit("agent/status", self, status)
        except Exception as exc:  # STATUS-2: the transition stands, the loop goes on
            turn = self._turn.number if self._turn else self._session.last_turn()
            self._warn(turn, f"an agent/status({status!r}) listener failed", exc)
            self._announce(turn, 0, exc)

    def _release_waiters(self, after: asyncio.Future[None] | None = None) -> None:
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            waiter._release(after)

    # ================================================================== public verbs

    def send(self, content: Any, source: v.Source | None = None) -> None:
        """Queue a prompt for the next turn; emits ``agent/queued`` (LOOP-9)."""
        self._check_live("send")
        item = InboxMessage(_content(content, "send"), _source(source, "send"))
        self._inbox.enqueue(item)
        self._ensure_driver()
        self._emit_queued(item, steering=False)

    def steer(self, content: Any, source: v.Source | None = None) -> None:
        """Add steering for the running turn; like ``send`` when not running (STEER-1)."""
        self._check_live("steer")
        if self._status != "running":
            self.send(content, source)
            return
        item = InboxMessage(_content(content, "steer"), _source(source, "steer"))
        self._inbox.steer(item)
        self._emit_queued(item, steering=True)

    def _emit_queued(self, item: InboxMessage, *, steering: bool) -> None:
        try:
            self._bus.emit(
                "agent/queued", self, item.content, {"source": item.source, "steering": steering}
            )
        except Exception as exc:  # a UI listener must not lose the caller's prompt
            self._warn(self._session.last_turn(), "an agent/queued listener failed", exc)

    async def inject(self, content: Any, source: v.Source | None = None) -> None:
        """Add context without running the model (INJ-1..4)."""
        self._check_live("inject")
        blocks = _content(content, "inject")
        src = _source(source, "inject")
        json_snapshot(src, "inject source")  # INJ-4: a bad source raises, nothing written
        if self._session.open_turn() is not None:
            # INJ-1: a turn is open (decided from the log): the context joins it.
            before = len(self._session)
            try:
                self._session.append("context/message", {"content": blocks, "source": src})
            except Exception as exc:
                if len(self._session) == before:
                    raise  # bad input: nothing was written
                self._warn(self._session.last_turn(), "a session/event listener failed", exc)
            return
        # INJ-2: no turn open: a one-shot turn, balanced whatever throws, then flushed.
        turn = _Turn(self._session.last_turn() + 1)
        bad_input: Exception | None = None
        try:
            try:
                self._session.append(
                    "turn/start",
                    {"turn": turn.number, "trigger": {"kind": "injection", "source": src}},
                )
            except Exception as exc:
                self._late_failure(turn, exc, "a session/event listener on turn/start")
            try:
                self._session.append("context/message", {"content": blocks, "source": src})
            except SessionValidationError as exc:
                bad_input = exc  # INJ-4: raised to the caller once the turn is closed
            except Exception as exc:
                self._late_failure(turn, exc, "a session/event listener on context/message")
        finally:
            try:
                self._session.append(
                    "turn/end", {"turn": turn.number, "reason": v.turn_end_completed()}
                )
            except Exception as exc:
                self._late_failure(turn, exc, "a session/event listener on turn/end")
            turn.step = 0  # INJ-2: a failing flush is reported with step 0
            await self._flush(turn, driver=False)
        if bad_input is not None:
            raise bad_input

    def abort(self, reason: str | None = None) -> None:
        """ABORT-1: abort only the in-flight step (nothing to do without one); with no reason
        (``None``) it is ``aborted``. A reason that is not a string raises ``TypeError`` (0b:
        ``aborted{reason: s}``, which the log must hold)."""
        reason = _reason(reason, "aborted", "abort")
        controller = self._step_abort
        if self._disposed or controller is None:
            return
        _fire(controller, reason, self)

    def cancel(self, reason: str | None = None) -> None:
        """CANCEL-1: clear both FIFOs, abort the in-flight step, arm the turn-scoped marker; with
        no reason (``None``) it is ``cancelled``, one that is not a string raises ``TypeError``."""
        reason = _reason(reason, "cancelled", "cancel")
        if self._disposed:
            return
        controller = self._step_abort
        pending = (
            self._status == "running"
            or controller is not None
            or self._inbox.has_queued
            or self._inbox.has_steering
        )
        if not pending:
            return  # CANCEL-3: nothing to cancel: the next prompt runs
        self._inbox.clear()  # CANCEL-2 / CANCEL-4
        self._marker = reason
        if controller is not None:
            _fire(controller, reason, self)  # CANCEL-MID
        self._inbox.wake()  # CANCEL-W0 / W1: a parked driver settles the marker

    def when_idle(self) -> IdleWaiter:
        """An awaitable registered now, released at quiescence (IDLE-1..4)."""
        waiter = IdleWaiter()
        if self._disposed:
            waiter._release(self._pending_exit())  # IDLE-4: after the driver has exited
            return waiter
        if self._status != "running" and not self._inbox.has_queued:
            waiter._release()  # IDLE-1
            return waiter
        self._ensure_driver()
        self._waiters.append(waiter)  # IDLE-2: released on the next idle transition
        return waiter

    def dispose(self) -> None:
        """DISP-1/2: synchronous, idempotent, cannot fail; ends the driver, releases waiters."""
        if self._disposed:
            return
        self._disposed = True
        try:
            controller = self._step_abort
            if controller is not None:
                _fire(controller, "disposed", self)
            self._cut_plugin()
            self._inbox.wake()
            self._status = "disposed"
            # SVC-6 before the notification: a listener that hears of the disposal (a supervisor
            # re-creating the agent) finds the id free, as SVC-2 asks of an id no live agent holds
            self._leave_registry()
            try:
                self._bus.emit("agent/status", self, "disposed")
            except Exception as exc:  # DISP-2: swallowed
                self._warn(
                    self._session.last_turn(), "an agent/status('disposed') listener failed", exc
                )
        finally:
            self._release_waiters(self._pending_exit())
            self._leave_registry()  # SVC-6: whatever threw before

    def _leave_registry(self) -> None:
        """SVC-6: the service's dispose hook takes this agent out of its registry (a failure of
        the hook is warned about: dispose() cannot fail, DISP-2)."""
        if self._on_dispose is not None:
            try:
                self._on_dispose(self)  # idempotent: the service removes this agent, not its id's next one
            except Exception as exc:
                self._warn(self._session.last_turn(), "dispose hook failed", exc)

    async def wait_exited(self) -> None:
        """Wait until the driver loop has exited (after disposal)."""
        pending = self._pending_exit()
        if pending is not None:
            await asyncio.shield(pending)

    def in_driver(self) -> bool:
        """Whether the caller runs on this agent's driver task (a listener the driver awaits):
        waiting there for the driver's exit would wait for ever (SVC-7's close())."""
        try:
            return self._task is not None and asyncio.current_task() is self._task
        except RuntimeError:
            return False

    def _pending_exit(self) -> asyncio.Future[None] | None:
        if self._exited is None or self._exited.done():
            return None
        return self._exited

    def _check_live(self, verb: str) -> None:
        if self._disposed:
            raise AgentDisposedError(f"agent {self._id!r} is disposed: cannot {verb}()")  # DISP-3


# ---------------------------------------------------------------------- helpers


def _identity(value: Any) -> Any:
    return value


def _abort_reason(signal: AbortSignal) -> str:
    """The reason a fired signal carries: the caller's, even an empty one (ABORT-1, CANCEL-1)."""
    reason = signal.reason
    return "aborted" if reason is None else reason


def _reason(reason: object, default: str, verb: str) -> str:
    """A caller's abort or cancel reason: the default for ``None``; bad input (not a string) is
    raised to the caller, before anything is touched, not found by the log at ``turn/end``."""
    if reason is None:
        return default
    if not isinstance(reason, str):
        raise TypeError(f"{verb}() reason must be a string, got {type(reason).__name__}")
    return reason


def _fire(controller: AbortController, reason: str, agent: ReactLoopAgent) -> None:
    """Fire an abort; a throwing signal callback (a tool's) must not break abort/cancel/dispose."""
    try:
        controller.abort(reason)
    except Exception as exc:
        agent._warn(agent.session.last_turn(), "an abort-signal callback failed", exc)


def _content(content: Any, verb: str) -> list[v.Block]:
    """A string is one text block; a list of blocks is taken as given (copied)."""
    if isinstance(content, str):
        return [v.text(content)]
    if isinstance(content, list):
        return list(content)
    if isinstance(content, dict):
        return [content]  # type: ignore[list-item]
    raise TypeError(
        f"{verb}(): content must be a string or a list of blocks, got {type(content).__name__}"
    )


def _source(source: Any, verb: str) -> v.Source:
    """LOOP-9: the default source is ``{kind: user}``."""
    if source is None:
        return v.user_source()
    if not isinstance(source, Mapping) or "kind" not in source:
        raise TypeError(f"{verb}(): source must be a mapping with a 'kind', got {source!r}")
    return dict(source)  # type: ignore[return-value]


def _without_tool_calls(message: Any) -> Any:
    """MAXTOK-5: the message minus its tool-call blocks."""
    if not isinstance(message, Mapping) or not isinstance(message.get("content"), list):
        return message
    kept = [
        b for b in message["content"] if not (isinstance(b, dict) and b.get("type") == "tool-call")
    ]
    return {**message, "content": kept}


def _check_message(message: Any) -> v.Message:
    """What agent/step-result returned must be a message with a content list."""
    if not isinstance(message, Mapping) or not isinstance(message.get("content"), list):
        raise LoopError(
            f"agent/step-result must return a message with a 'content' list, got {message!r}",
            "BAD_STEP_RESULT",
        )
    return {"role": message.get("role", "assistant"), "content": list(message["content"])}


def _tool_result(result: Any) -> dict[str, Any]:
    """A tools/execute result as tool/result data (without turn/step/call_id)."""
    if isinstance(result, str):
        return {"content": [v.text(result)], "is_error": False}
    if not isinstance(result, Mapping):
        raise LoopError(
            f"tools/execute must return a result mapping, got {result!r}", "BAD_TOOL_RESULT"
        )
    data: dict[str, Any] = {
        "content": normalise_content(result.get("content", "")),
        "is_error": bool(result.get("is_error", False)),
    }
    if isinstance(result.get("error"), Mapping):
        data["error"] = dict(result["error"])
    return data
