"""The agent: inbox, status, waiters, and the driver loop that runs turns and steps."""

from __future__ import annotations

import asyncio
import copy
import inspect
import json
from collections import deque
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .core import (
    AbortController,
    AbortError,
    DisposedError,
    ListenerFailure,
    LoopError,
    NotSerialisable,
    code_of,
    log,
    message_of,
    snapshot,
)
from .session import Session, text_block, to_blocks

if TYPE_CHECKING:
    from .service import Service

USER = {"kind": "user"}


class _Stop(BaseException):
    """Internal: leave the turn body now (its outcome is already recorded)."""


class _Turn:
    def __init__(self, number: int) -> None:
        self.number = number
        self.step = 0
        self.step_open = False
        self.step_announced = False
        self.failure: BaseException | None = None
        self.failure_reason: dict[str, Any] | None = None
        self.aborted: str | None = None
        self.disposed = False
        self.max_tokens = False
        self.boundary_failure = False
        self.closed = False


def _error_reason(message: str, code: str | None) -> dict[str, Any]:
    reason: dict[str, Any] = {"kind": "error", "message": message}
    if code is not None:
        reason["code"] = code
    return reason


class _Assembler:
    """Builds a step's blocks from its chunks (ASM-1..4)."""

    def __init__(self) -> None:
        self.entries: dict[Any, dict[str, Any]] = {}
        self.order: list[Any] = []
        self.usage: Any = None
        self.finish: Any = None

    def _entry(self, index: Any, kind: str) -> dict[str, Any]:
        if index not in self.entries:
            self.entries[index] = {"kind": kind, "text": "", "id": None, "name": None, "args": "",
                                   "final": None, "closed": False}
            self.order.append(index)
        return self.entries[index]

    def feed(self, chunk: Mapping[str, Any]) -> None:
        kind = chunk.get("type")
        index = chunk.get("index")
        if kind == "block-start":
            self._entry(index, str(chunk.get("block_type", "text")))
        elif kind in ("text-delta", "reasoning-delta"):
            e = self._entry(index, "text" if kind == "text-delta" else "reasoning")
            if not e["closed"]:
                e["text"] += str(chunk.get("text", ""))
        elif kind == "tool-call-delta":
            e = self._entry(index, "tool-call")
            if not e["closed"]:
                if chunk.get("id") and not e["id"]:
                    e["id"] = chunk["id"]
                if chunk.get("name") and not e["name"]:
                    e["name"] = chunk["name"]
                e["args"] += str(chunk.get("arguments_delta", "") or "")
        elif kind == "block-end":
            block = chunk.get("block")
            e = self._entry(index, (block or {}).get("type", "text") if isinstance(block, Mapping) else "text")
            if not e["closed"]:
                e["closed"] = True
                e["final"] = copy.deepcopy(block)
        elif kind == "usage":
            self.usage = copy.deepcopy(chunk.get("usage"))
        elif kind == "finish":
            self.finish = copy.deepcopy(chunk.get("reason"))

    def blocks(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for index in sorted(self.order, key=lambda i: (not isinstance(i, (int, float)), i if isinstance(i, (int, float)) else 0)):
            e = self.entries[index]
            if e["closed"] and isinstance(e["final"], Mapping):
                out.append(dict(e["final"]))
            elif e["kind"] in ("text", "reasoning"):
                out.append({"type": e["kind"], "text": e["text"]})
            elif e["kind"] in ("tool-call", "tool_call"):
                out.append({"type": "tool-call", "id": e["id"] or "", "name": e["name"] or "",
                            "arguments": e["args"]})
        return out


def _reason(reason: object, default: str, verb: str) -> str:
    """A caller's abort/cancel reason: the default for None; not a string is bad input (0b: s)."""
    if reason is None:
        return default
    if not isinstance(reason, str):
        raise TypeError(f"{verb}() reason must be a string, got {type(reason).__name__}")
    return reason


def _parse_arguments(raw: Any) -> Any:
    if not isinstance(raw, str):
        return raw
    if raw.strip() == "":
        return {}
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):  # TOOL-2: nested past the parser's depth is passed through raw
        return raw


def _result_content(value: Any) -> list[Any]:
    if value is None:
        return []
    if isinstance(value, str):
        return [text_block(value)]
    if isinstance(value, Mapping):
        return [dict(value)]
    if isinstance(value, (list, tuple)):
        return [text_block(v) if isinstance(v, str) else v for v in value]
    return [text_block(str(value))]


def _error_result(exc: BaseException) -> dict[str, Any]:
    result: dict[str, Any] = {"content": [text_block(f"Error: {message_of(exc)}")], "is_error": True}
    code = code_of(exc)
    if code is not None:
        result["error"] = {"name": type(exc).__name__, "code": code}
    return result


class Agent:
    def __init__(self, service: Service, agent_id: str, session: Session, options: Mapping[str, Any]) -> None:
        self._service = service
        self._id = agent_id
        self._session = session
        self.options = dict(options)
        self._status = "idle"
        self._queued: deque[tuple[list[Any], Any]] = deque()
        self._steering: deque[tuple[list[Any], Any]] = deque()
        self._marker: str | None = None
        self._controller: AbortController | None = None
        self._waiters: list[asyncio.Future[None]] = []
        self._wake: asyncio.Future[None] | None = None
        self._disposed = False
        self._turn: _Turn | None = None
        self._inject_flushes: set[asyncio.Future[Any]] = set()
        loop = asyncio.get_running_loop()
        self._task = loop.create_task(self._drive(), name=f"spec_loop:{agent_id}")
        self._task.add_done_callback(self._driver_exited)

    # ------------------------------------------------------------------ read
    @property
    def id(self) -> str:
        return self._id

    @property
    def status(self) -> str:
        return self._status

    @property
    def session(self) -> Session:
        return self._session

    @property
    def task(self) -> asyncio.Task[None]:
        return self._task

    def __repr__(self) -> str:
        return f"<spec_loop Agent {self._id} {self._status}>"

    # ------------------------------------------------------------------ helpers
    @property
    def _bus(self):  # type: ignore[no-untyped-def]
        return self._service.bus

    def _turn_label(self) -> int:
        return self._turn.number if self._turn is not None else self._session.last_turn_number()

    def _warn(self, what: str, exc: BaseException | None = None, turn: int | None = None) -> None:
        t = self._turn_label() if turn is None else turn
        if exc is None:
            log.warning("agent %s, turn %s: %s", self._id, t, what)
        else:
            log.warning("agent %s, turn %s: %s: %s: %s", self._id, t, what, type(exc).__name__, message_of(exc))

    def _announce(self, turn: int, step: int, error: BaseException) -> None:
        try:
            self._bus.emit("agent/error", self, turn, step, error)
        except ListenerFailure as lf:
            self._warn("an agent/error listener raised", lf.original, turn)

    def _set_status(self, status: str) -> None:
        if self._status == status or self._status == "disposed":
            return
        self._status = status
        if status == "idle":
            self._release_waiters()
        try:
            self._bus.emit("agent/status", self, status)
        except ListenerFailure as lf:
            self._warn(f"an agent/status({status!r}) listener raised", lf.original)

    def _resolve(self, fut: asyncio.Future[None]) -> None:
        pending = [t for t in self._inject_flushes if not t.done()]
        if not pending:
            if not fut.done():
                fut.set_result(None)
            return
        gathered = asyncio.gather(*pending, return_exceptions=True)

        def done(_: Any) -> None:
            if fut.done():
                return
            if not self._disposed and self._work_arrived():
                self._waiters.append(fut)  # work arrived meanwhile: wait for real quiescence
            elif self._disposed and not self._task.done():
                self._waiters.append(fut)  # released when the driver has exited
            else:
                self._resolve(fut)

        gathered.add_done_callback(done)

    def _work_arrived(self) -> bool:
        """Whether the agent has work again (IDLE-2: a waiter is released at quiescence only)."""
        return self._status == "running" or bool(self._queued)

    def _release_waiters(self) -> None:
        waiters, self._waiters = self._waiters, []
        for fut in waiters:
            self._resolve(fut)

    def _driver_exited(self, _task: asyncio.Future[None]) -> None:
        # PY-1: a task cancelled before its first step never ran _drive's handler
        if not self._disposed:
            self._mark_disposed()
        self._release_waiters()

    # ------------------------------------------------------------------ public API
    def _check_live(self, what: str) -> None:
        if self._disposed:
            raise DisposedError(f"agent {self._id!r} is disposed: cannot {what}()")

    def send(self, content: Any, source: Any = None) -> None:
        self._check_live("send")
        self._enqueue(to_blocks(content), dict(source) if isinstance(source, Mapping) else (source or dict(USER)), steering=False)

    def steer(self, content: Any, source: Any = None) -> None:
        self._check_live("steer")
        src = dict(source) if isinstance(source, Mapping) else (source or dict(USER))
        self._enqueue(to_blocks(content), src, steering=self._status == "running")

    def _enqueue(self, blocks: list[Any], source: Any, steering: bool) -> None:
        # the listeners' copies first: what cannot be copied raises here, with nothing queued
        told = copy.deepcopy(blocks), {"source": copy.deepcopy(source), "steering": steering}
        (self._steering if steering else self._queued).append((blocks, source))
        try:
            self._bus.emit("agent/queued", self, *told)
        except ListenerFailure as lf:
            self._warn("an agent/queued listener raised", lf.original)
        if not steering and self._wake is not None and not self._wake.done():
            self._wake.set_result(None)

    def abort(self, reason: str | None = "aborted") -> None:
        reason = _reason(reason, "aborted", "abort")
        if self._disposed:
            return
        if self._controller is not None:
            self._controller.abort(reason)

    def cancel(self, reason: str | None = "cancelled") -> None:
        reason = _reason(reason, "cancelled", "cancel")
        if self._disposed:
            return
        something = (self._status == "running" or self._controller is not None
                     or bool(self._queued) or bool(self._steering))
        if not something:
            return
        self._queued.clear()
        self._steering.clear()
        if self._marker is None:
            self._marker = reason
        if self._controller is not None:
            self._controller.abort(reason)
        if self._wake is not None and not self._wake.done():
            self._wake.set_result(None)

    def when_idle(self) -> asyncio.Future[None]:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self._disposed:
            if self._task.done():
                self._resolve(fut)
            else:
                self._waiters.append(fut)
        elif self._status != "running" and not self._queued:
            self._resolve(fut)
        else:
            self._waiters.append(fut)
        return fut

    def dispose(self) -> None:
        if self._disposed:
            return
        self._mark_disposed()
        try:
            current = asyncio.current_task()
        except RuntimeError:
            current = None
        if current is not self._task and not self._task.done():
            self._task.cancel()

    def _mark_disposed(self) -> None:
        self._disposed = True
        self._queued.clear()
        self._service._forget(self)
        if self._controller is not None:
            self._controller.abort("disposed")
        if self._wake is not None and not self._wake.done():
            self._wake.set_result(None)
        if self._status != "disposed":
            self._status = "disposed"
            try:
                self._bus.emit("agent/status", self, "disposed")
            except ListenerFailure as lf:
                self._warn("an agent/status('disposed') listener raised", lf.original)

    # ------------------------------------------------------------------ injection
    def inject(self, content: Any, source: Any = None) -> asyncio.Future[None]:
        """Plain function: writes synchronously, returns the (scheduled) flush as an awaitable."""
        self._check_live("inject")
        src = dict(source) if isinstance(source, Mapping) else (source or dict(USER))
        snapshot(src, "source")  # a bad source raises and writes nothing
        blocks = to_blocks(content)
        data = {"content": blocks, "source": src}
        loop = asyncio.get_running_loop()
        if self._session.open_turn() is not None:
            try:
                self._session._append("context/message", data)
            except ListenerFailure as lf:
                self._warn("a session/event listener raised on context/message", lf.original)
            done: asyncio.Future[None] = loop.create_future()
            done.set_result(None)
            return done
        number = self._session.last_turn_number() + 1
        self._session._push("turn/start", {"turn": number, "trigger": {"kind": "injection", "source": src}})
        failure: BaseException | None = None
        raise_later: BaseException | None = None
        try:
            self._bus.emit("session/event", self._session, copy.deepcopy(self._session.raw_events()[-1]))
        except ListenerFailure as lf:
            failure = lf
        if failure is None and not self._disposed:
            try:
                self._session._append("context/message", data)
            except NotSerialisable as exc:
                failure = raise_later = exc
            except ListenerFailure as lf:
                failure = lf
        reason: dict[str, Any] = {"kind": "completed"}
        announced = False  # ERR-9: the one-shot turn's first failure is announced, once
        if self._disposed:  # disposal is not a failure: the turn ends disposed
            if failure is not None:
                self._warn("failure during disposal (ignored)", failure, number)
            reason = {"kind": "disposed"}
        elif failure is not None:
            original = failure.original if isinstance(failure, ListenerFailure) else failure
            reason = _error_reason(message_of(failure), code_of(original))
            self._warn("the injection failed", failure, number)
            try:
                self._session._append("error", {"turn": number, "step": 0, "message": reason["message"],
                                                **({"code": reason["code"]} if "code" in reason else {})})
            except ListenerFailure as lf:
                self._warn("a session/event listener raised on error", lf.original, number)
            self._announce(number, 0, original)
            announced = True
            if self._disposed:  # disposed by a listener of the failure: the turn ends disposed (DISP-1)
                reason = {"kind": "disposed"}
        try:
            self._session._append("turn/end", {"turn": number, "reason": reason})
        except ListenerFailure as lf:
            self._warn("a session/event listener raised on turn/end", lf.original, number)
            if failure is None and not self._disposed:
                self._announce(number, 0, lf.original)
                announced = True
        task = asyncio.ensure_future(self._inject_flush(number, announced))
        self._inject_flushes.add(task)
        task.add_done_callback(lambda done: self._inject_flushes.discard(done))  # not a bound set method: the simulator's random strategy hashes callback owners
        if raise_later is not None:
            raise raise_later
        return task

    async def _inject_flush(self, number: int, announced: bool) -> None:
        for exc in await self._bus.flush(self._session):
            self._warn("a session/flush listener failed", exc, number)
            if not announced:
                self._announce(number, 0, exc)
                announced = True

    # ------------------------------------------------------------------ the driver
    async def _park(self) -> None:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._wake = fut
        try:
            await fut
        finally:
            self._wake = None

    async def _drive(self) -> None:
        try:
            while not self._disposed:
                if not self._queued:
                    # between iterations: a cancel of work that is gone already is spent
                    self._marker = None
                    if self._status != "running":
                        self._release_waiters()
                    else:
                        self._set_status("idle")
                    await self._park()
                    continue
                # window 1: whatever a cancel dropped is gone; what is queued now came after it
                self._marker = None
                self._set_status("running")
                if self._disposed:
                    break
                if self._marker is not None:  # window 2
                    self._marker = None
                    self._requeue_late_steering()  # steering that arrived after the cancel
                    if not self._queued:
                        self._set_status("idle")
                        continue
                batch = list(self._queued)
                self._queued.clear()
                await self._run_turn(batch)
                self._marker = None
                if self._disposed:
                    break
                self._requeue_late_steering()  # late steering becomes prompts of the next turn
                if not self._queued:
                    self._set_status("idle")
        except (asyncio.CancelledError, KeyboardInterrupt, SystemExit):
            if not self._disposed:
                self._mark_disposed()
            raise

    # ------------------------------------------------------------------ a turn
    def _append(self, t: _Turn, type: str, data: Mapping[str, Any]) -> dict[str, Any]:
        event = self._session._append(type, data)
        if self._disposed:
            t.disposed = True
            raise _Stop
        return event

    def _emit(self, t: _Turn, event: str, *args: Any) -> None:
        self._bus.emit(event, self, *args)
        if self._disposed:
            t.disposed = True
            raise _Stop

    def _fail(self, t: _Turn, exc: BaseException, step: int | None = None) -> None:
        """Record a failure of the turn: the first one is written and announced."""
        original = exc.original if isinstance(exc, ListenerFailure) else exc
        if self._disposed or t.disposed:
            self._warn("failure during disposal (ignored)", exc, t.number)
            return
        if t.failure is not None or t.aborted is not None or t.closed:
            self._warn("a further failure in the turn (not recorded)", exc, t.number)
            return
        step = t.step if step is None else step
        message = message_of(exc)
        code = code_of(original)
        t.failure = original
        t.failure_reason = _error_reason(message, code)
        self._warn(f"the turn failed in step {step}", exc, t.number)
        data: dict[str, Any] = {"turn": t.number, "step": step, "message": message}
        if code is not None:
            data["code"] = code
        try:
            self._session._append("error", data)
        except ListenerFailure as lf:
            self._warn("a session/event listener raised on error", lf.original, t.number)
        self._announce(t.number, step, original)

    def _abort_turn(self, t: _Turn, reason: str | None) -> None:
        if t.failure is None and t.aborted is None:
            t.aborted = reason if reason is not None else "aborted"

    def _reason(self, t: _Turn) -> dict[str, Any]:
        if t.disposed or self._disposed:
            return {"kind": "disposed"}
        if t.failure_reason is not None:
            return t.failure_reason
        if t.aborted is not None:
            return {"kind": "aborted", "reason": t.aborted}
        if t.max_tokens:
            return {"kind": "max-tokens"}
        return {"kind": "completed"}

    async def _run_turn(self, batch: list[tuple[list[Any], Any]]) -> None:
        number = self._session.last_turn_number() + 1
        t = _Turn(number)
        try:
            self._session._push("turn/start", {"turn": number, "trigger": {"kind": "message", "source": batch[0][1]}})
        except NotSerialisable as exc:  # nothing opened: no turn is owed
            self._warn("the turn could not start", exc, number)
            self._announce(number, 0, exc)
            return
        self._turn = t
        try:
            try:
                self._bus.emit("session/event", self._session, copy.deepcopy(self._session.raw_events()[-1]))
            except ListenerFailure as lf:
                t.boundary_failure = True
                self._fail(t, lf, 0)
                raise _Stop from None
            if self._disposed:
                t.disposed = True
                raise _Stop
            for blocks, source in batch:
                self._append(t, "user/message", {"content": blocks, "source": source})
            try:
                self._emit(t, "agent/turn-start", number)
            except ListenerFailure as lf:
                t.boundary_failure = True
                self._fail(t, lf, 0)
                raise _Stop from None
            while True:
                again = await self._run_step(t)
                if not again:
                    break
        except _Stop:
            pass
        except (asyncio.CancelledError, KeyboardInterrupt, SystemExit):
            if not self._disposed:
                self._mark_disposed()
            t.disposed = True
            self._controller = None
            await self._close_turn(t)
            raise
        except Exception as exc:
            self._fail(t, exc)
        self._controller = None
        await self._close_turn(t)

    def _close_step(self, t: _Turn) -> None:
        if not t.step_open:
            return
        t.step_open = False
        try:
            self._session._append("step/end", {"turn": t.number, "step": t.step})
        except ListenerFailure as lf:
            self._fail(t, lf)
        if t.step_announced:
            t.step_announced = False
            try:
                self._bus.emit("agent/step-end", self, t.number, t.step)
            except ListenerFailure as lf:
                self._fail(t, lf)
        if self._disposed:
            t.disposed = True

    async def _close_turn(self, t: _Turn) -> None:
        if t.closed:
            return
        if self._disposed:
            t.disposed = True
        self._close_step(t)
        reason = self._reason(t)
        try:
            self._session._append("turn/end", {"turn": t.number, "reason": reason})
        except ListenerFailure as lf:
            if t.failure is None and not t.disposed:
                self._warn("a session/event listener raised on turn/end", lf.original, t.number)
                self._announce(t.number, t.step, lf.original)
                t.failure = lf.original
            else:
                self._warn("a session/event listener raised on turn/end (ignored)", lf.original, t.number)
        t.closed = True
        self._turn = None
        if not t.boundary_failure:
            try:
                self._bus.emit("agent/turn-end", self, t.number, copy.deepcopy(reason))
            except ListenerFailure as lf:
                if t.disposed or self._disposed:
                    self._warn("an agent/turn-end listener raised during disposal (ignored)", lf.original, t.number)
                elif t.failure is None:
                    self._warn("an agent/turn-end listener raised", lf.original, t.number)
                    self._announce(t.number, 0, lf.original)
                    t.failure = lf.original
                else:
                    self._warn("an agent/turn-end listener raised (not announced again)", lf.original, t.number)
        failures = await self._bus.flush(self._session)
        for exc in failures:
            if t.failure is None and not self._disposed:
                self._warn("a session/flush listener failed", exc, t.number)
                self._announce(t.number, 0, exc)
                t.failure = exc
            else:
                self._warn("a session/flush listener failed (not announced again)", exc, t.number)

    def _drain_steering(self, t: _Turn) -> bool:
        drained = False
        while self._steering and self._marker is None:  # a cancelled turn drains no more: the rest is late (CANCEL-4)
            blocks, source = self._steering.popleft()
            drained = True
            self._append(t, "steering/message", {"turn": t.number, "content": blocks, "source": source})
            self._emit(t, "agent/steering", t.number, copy.deepcopy(blocks), copy.deepcopy(source))
        return drained

    def _system_prompt(self) -> str | None:
        parts = [text for _name, text in self._service.sections() if text]
        own = self.options.get("system_prompt")
        if own:
            parts.append(own)
        return "\n\n".join(parts) if parts else None

    async def _run_step(self, t: _Turn) -> bool:
        """One step; True when the turn goes on with another step."""
        t.step += 1
        s = t.step
        self._drain_steering(t)
        t.step_open = True  # open as soon as step/start is in the log (a listener may dispose)
        self._append(t, "step/start", {"turn": t.number, "step": s})
        try:
            self._emit(t, "agent/step-start", t.number, s)
        except ListenerFailure as lf:
            t.boundary_failure = True
            self._fail(t, lf)
            raise _Stop from None
        t.step_announced = True
        if self._marker is not None:  # a cancel before the step's abort handle exists
            self._abort_turn(t, self._marker)
            self._close_step(t)
            raise _Stop
        controller = AbortController()
        self._controller = controller
        signal = controller.signal

        system = self._system_prompt()
        if self._bus.has("system-prompt"):
            try:
                system = await self._bus.waterfall("system-prompt", (self,), system, lambda v: v)
            except Exception as exc:
                raise ListenerFailure("system-prompt", exc) from None
        request: dict[str, Any] = {"model": self.options.get("model"),
                                   "messages": self._session.derive_messages()}
        if system:
            request["system"] = system
        tools = self._service.tool_schemas()
        if tools:
            request["tools"] = tools
        request["signal"] = signal
        try:
            request = await self._bus.waterfall("agent/request", (self, t.number, s), request, lambda v: v)
        except Exception as exc:
            raise ListenerFailure("agent/request", exc) from None
        self._after_await(t)
        if signal.aborted:
            self._abort_turn(t, signal.reason)
            raise _Stop
        model = request.get("model") if isinstance(request, Mapping) else None
        if not model:
            raise LoopError(
                f"agent {self._id!r} has no model: set one in its options (model=...) "
                f"or through an agent/request listener", code="NO_MODEL")
        adapter = self._service.model(model)
        if adapter is None:
            raise LoopError(f"no model adapter is registered under {model!r}", code="NO_ADAPTER")
        if isinstance(request, dict) and "signal" not in request:
            request["signal"] = signal

        asm = await self._stream(t, adapter, request, signal)
        if signal.aborted:
            self._abort_turn(t, signal.reason)
            raise _Stop
        finish = asm.finish if isinstance(asm.finish, Mapping) else {"kind": "stop"}
        kind = finish.get("kind")
        if kind == "error":
            raise LoopError(str(finish.get("message") or "model error"),
                            code=finish.get("code") if isinstance(finish.get("code"), str) else None)
        if kind == "aborted":
            raise LoopError("model stream aborted", code="ABORTED")
        max_tokens = kind == "max-tokens"
        blocks = asm.blocks()
        if max_tokens:
            t.max_tokens = True
            blocks = [b for b in blocks if not (isinstance(b, Mapping) and b.get("type") == "tool-call")]
        message = {"role": "assistant", "content": blocks}
        try:
            message = await self._bus.waterfall("agent/step-result", (self, t.number, s), message, lambda v: v)
        except Exception as exc:
            raise ListenerFailure("agent/step-result", exc) from None
        self._after_await(t)
        if signal.aborted:
            self._abort_turn(t, signal.reason)
            raise _Stop
        content = list(message.get("content") or []) if isinstance(message, Mapping) else []
        if max_tokens:
            content = [b for b in content if not (isinstance(b, Mapping) and b.get("type") == "tool-call")]
        if not (max_tokens and not content):
            self._append(t, "assistant/message", {"turn": t.number, "step": s, "content": content})
        if asm.usage is not None:
            self._append(t, "usage", {"turn": t.number, "step": s, "usage": asm.usage})

        calls = [b for b in content if isinstance(b, Mapping) and b.get("type") == "tool-call"]
        for block in calls:
            if signal.aborted:
                break
            await self._run_tool(t, s, block, signal)
        if signal.aborted:
            self._abort_turn(t, signal.reason)
            raise _Stop
        self._controller = None

        steered = self._drain_steering(t)
        t.step_open = False
        self._append(t, "step/end", {"turn": t.number, "step": s})
        t.step_announced = False
        self._emit(t, "agent/step-end", t.number, s)

        default = bool(calls) or steered
        try:
            decision = await self._bus.waterfall("agent/turn-continuation", (self, t.number), default, lambda v: v)
        except Exception as exc:
            raise ListenerFailure("agent/turn-continuation", exc) from None
        self._after_await(t)
        if self._cancelled_at_gate(t):
            return False
        return self._continues(decision, default)

    def _cancelled_at_gate(self, t: _Turn) -> bool:
        """CANCEL-CONT: a cancel armed by the time the gate has voted ends the turn aborted,
        whatever it voted."""
        if self._marker is None:
            return False
        self._abort_turn(t, self._marker)
        return True

    def _requeue_late_steering(self) -> None:
        """LOOP-8: steering too late for its turn joins the queued FIFO, behind what waits there."""
        while self._steering:
            self._queued.append(self._steering.popleft())

    def _continues(self, decision: object, default: bool) -> bool:
        """CONT-1/CONT-2: the continuation waterfall's ``decision`` stands, unless steering waits
        at the gate: that overrides any stop, the default's or one a listener forced."""
        return bool(self._steering) or bool(decision)

    def _after_await(self, t: _Turn) -> None:
        if self._disposed:
            t.disposed = True
            raise _Stop

    async def _stream(self, t: _Turn, adapter: Any, request: Any, signal: Any) -> _Assembler:
        asm = _Assembler()
        try:
            stream = adapter.stream(request)
            if inspect.isawaitable(stream) and not hasattr(stream, "__aiter__"):
                stream = await stream
        except Exception:
            if signal.aborted:
                return asm
            raise
        self._after_await(t)
        if hasattr(stream, "__aiter__"):
            iterator = stream.__aiter__()
            try:
                while not signal.aborted:
                    try:
                        chunk = await self._next_chunk(iterator, signal)
                    except StopAsyncIteration:
                        break
                    except _AbortedRead:
                        break
                    except Exception:
                        if signal.aborted:
                            break
                        raise
                    self._after_await(t)
                    self._on_chunk(t, asm, chunk)
            finally:
                aclose = getattr(iterator, "aclose", None)
                if aclose is not None:
                    try:
                        await aclose()
                    except Exception as exc:  # a generator that fails to close
                        self._warn("the model stream failed to close", exc, t.number)
        else:
            for chunk in stream:
                if signal.aborted:
                    break
                self._on_chunk(t, asm, chunk)
        return asm

    def _on_chunk(self, t: _Turn, asm: _Assembler, chunk: Any) -> None:
        self._append(t, "assistant/chunk", {"turn": t.number, "step": t.step, "chunk": chunk})
        self._emit(t, "agent/stream-chunk", t.number, t.step, copy.deepcopy(chunk))
        if isinstance(chunk, Mapping):
            asm.feed(chunk)

    async def _next_chunk(self, iterator: Any, signal: Any) -> Any:
        loop = asyncio.get_running_loop()
        read = asyncio.ensure_future(iterator.__anext__())
        stop: asyncio.Future[None] = loop.create_future()

        def on_abort(_reason: Any) -> None:
            if not stop.done():
                stop.set_result(None)

        remove = signal.add_listener(on_abort)
        try:
            await asyncio.wait({read, stop}, return_when=asyncio.FIRST_COMPLETED)
        except BaseException:
            read.cancel()
            try:
                await read
            except BaseException:
                pass
            raise
        finally:
            remove()
        if read.done():
            return read.result()
        read.cancel()
        try:
            await read
        except BaseException:
            pass
        raise _AbortedRead

    async def _run_tool(self, t: _Turn, s: int, block: Mapping[str, Any], signal: Any) -> None:
        call_id = block.get("id")
        name = block.get("name")
        raw = block.get("arguments", "")
        arguments = _parse_arguments(raw)
        self._append(t, "tool/call", {"turn": t.number, "step": s, "call_id": call_id, "name": name,
                                      "arguments": raw})
        execution = {"call_id": call_id, "name": name, "arguments": arguments, "agent": self, "signal": signal}

        async def default(ex: Mapping[str, Any]) -> Any:
            tool = self._service.tool(ex.get("name"))
            if tool is None:
                raise LoopError(f"unknown tool {ex.get('name')!r}", code="UNKNOWN_TOOL")
            context = {"signal": ex.get("signal", signal), "call_id": ex.get("call_id", call_id),
                       "agent_id": self._id, "agent": self, "turn": t.number, "step": s}
            out = tool.execute(ex.get("arguments"), context)
            while inspect.isawaitable(out):
                out = await out
            return {"call_id": ex.get("call_id", call_id), "content": _result_content(out), "is_error": False}

        try:
            result = await self._abortable(self._bus.waterfall("tools/execute", (), execution, default), signal)
            if isinstance(result, Mapping) and ("content" in result or "is_error" in result):
                normal: dict[str, Any] = {"content": _result_content(result.get("content")),
                                          "is_error": bool(result.get("is_error", False))}
                if isinstance(result.get("error"), Mapping):
                    normal["error"] = dict(result["error"])
            else:
                normal = {"content": _result_content(result), "is_error": False}
        except Exception as exc:
            if signal.aborted and not isinstance(exc, AbortError):
                exc = AbortError(signal.reason)
            elif not signal.aborted:  # TOOL-3 contains it; ERR-12 warns of it
                self._warn(f"tool call {call_id} ({name!r}) failed", exc, t.number)
            normal = _error_result(exc)
        self._after_await(t)
        try:
            snapshot(normal, "tool result")
        except NotSerialisable as exc:
            self._warn(f"tool call {call_id} ({name!r}) returned what cannot be logged", exc, t.number)
            normal = _error_result(LoopError(f"the tool's result cannot be logged ({exc})", code="BAD_RESULT"))
        data = {"turn": t.number, "step": s, "call_id": call_id, **normal}
        self._append(t, "tool/result", data)

    async def _abortable(self, awaitable: Any, signal: Any) -> Any:
        """Await ``awaitable`` in its own task; an abort of ``signal`` stops waiting (and cancels
        it), raising AbortError: a tool that ignores its signal cannot hold the step."""
        task = asyncio.ensure_future(awaitable)
        stop: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def on_abort(_reason: Any) -> None:
            if not stop.done():
                stop.set_result(None)

        remove = signal.add_listener(on_abort)
        try:
            await asyncio.wait({task, stop}, return_when=asyncio.FIRST_COMPLETED)
        except BaseException:
            task.cancel()
            raise
        finally:
            remove()
        if task.done():
            return task.result()
        task.cancel()
        try:
            await task
        except BaseException:
            pass
        raise AbortError(signal.reason)


class _AbortedRead(Exception):
    pass
