"""The tiny loop itself: one service, agents with a driver task each."""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import Callable
from typing import Any

from reference_loop import vocabulary as v
from reference_loop.abort import AbortController
from reference_loop.sources import default_sources


class Bus:
    """Listeners by event name: notifications and waterfalls."""

    def __init__(self) -> None:
        self.listeners: dict[str, list[Callable[..., Any]]] = {}

    def on(self, name: str, fn: Callable[..., Any]) -> Callable[[], None]:
        self.listeners.setdefault(name, []).append(fn)
        return lambda: self.listeners[name].remove(fn)

    def emit(self, name: str, *args: Any) -> None:
        for fn in list(self.listeners.get(name, [])):
            fn(*args)

    async def waterfall(self, name: str, *args: Any, value: Any, default: Callable[[Any], Any]) -> Any:
        chain = list(self.listeners.get(name, []))

        async def run(i: int) -> Any:
            if i == len(chain):
                return default(value)
            result = chain[i](*args, value, lambda: run(i + 1))
            while inspect.isawaitable(result):
                result = await result
            return result

        return await run(0)


class TinySession:
    """An append-only list of events."""

    def __init__(self, session_id: str, bus: Bus) -> None:
        self.id = session_id
        self.events: list[dict[str, Any]] = []
        self._bus = bus

    def append(self, type: str, data: Any) -> dict[str, Any]:
        event = {"type": type, "seq": len(self.events), "time": default_sources().now_ms(),
                 "data": json.loads(json.dumps(data))}
        self.events.append(event)
        self._bus.emit("session/event", self, event)
        return event

    def derive_messages(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for e in self.events:
            if e["type"] == "user/message":
                out.append({"role": "user", "content": e["data"]["content"]})
            elif e["type"] == "assistant/message":
                out.append({"role": "assistant", "content": e["data"]["content"]})
            elif e["type"] == "tool/result":
                d = e["data"]
                out.append({"role": "user", "content": [v.tool_result(d["call_id"], d["content"], d["is_error"])]})
        return out


class TinyAgent:
    """An agent: a queue, a driver task, a status."""

    def __init__(self, service: TinyService, agent_id: str, session: TinySession, options: dict[str, Any]) -> None:
        self.id, self.session, self.options = agent_id, session, options
        self.status = "idle"
        self._service = service
        self._queue: list[tuple[list[Any], Any]] = []
        self._wake = asyncio.Event()
        self._idle: list[asyncio.Future[None]] = []
        self._abort: AbortController | None = None
        self.task = asyncio.get_running_loop().create_task(self._drive())

    def _status(self, status: str) -> None:
        if status != self.status:
            self.status = status
            self._service.bus.emit("agent/status", self, status)

    def send(self, content: Any, source: Any = None) -> None:
        if self.status == "disposed":
            raise RuntimeError("agent is disposed")
        blocks = [v.text(content)] if isinstance(content, str) else list(content)
        self._queue.append((blocks, source or v.user_source()))
        self._service.bus.emit("agent/queued", self, blocks, {"source": source or v.user_source(), "steering": False})
        self._wake.set()

    steer = send  # no steering: a steer is just another prompt

    async def inject(self, content: Any, source: Any = None) -> None:
        raise NotImplementedError("tiny_loop has no injection")

    def abort(self, reason: str = "aborted") -> None:
        if self._abort is not None:
            self._abort.abort(reason)

    def cancel(self, reason: str = "cancelled") -> None:
        self._queue.clear()
        self.abort(reason)

    def when_idle(self) -> asyncio.Future[None]:
        fut = asyncio.get_running_loop().create_future()
        if self.status != "running" and not self._queue:
            fut.set_result(None)
        else:
            self._idle.append(fut)
        return fut

    def dispose(self) -> None:
        self._status("disposed")
        self.task.cancel()
        for fut in self._idle:
            if not fut.done():
                fut.set_result(None)

    async def _drive(self) -> None:
        turn = 0
        while True:
            await self._wake.wait()
            self._wake.clear()
            if not self._queue:
                continue
            self._status("running")
            batch, self._queue = self._queue, []
            turn += 1
            await self._turn(turn, batch)
            self._status("idle")
            for fut in self._idle:
                if not fut.done():
                    fut.set_result(None)
            self._idle.clear()

    async def _turn(self, turn: int, batch: list[tuple[list[Any], Any]]) -> None:
        bus, log = self._service.bus, self.session.append
        log("turn/start", {"turn": turn, "trigger": {"kind": "message", "source": batch[0][1]}})
        for blocks, source in batch:
            log("user/message", {"content": blocks, "source": source})
        reason: v.TurnEndReason = v.turn_end_completed()
        try:
            bus.emit("agent/turn-start", self, turn)
            step = 0
            while True:
                step += 1
                again, reason = await self._step(turn, step)
                if not again:
                    break
        except Exception as exc:
            reason = v.turn_end_error(str(exc))
            log("error", {"turn": turn, "step": 0, "message": str(exc)})
        log("turn/end", {"turn": turn, "reason": reason})
        bus.emit("agent/turn-end", self, turn, reason)
        for fn in list(bus.listeners.get("session/flush", [])):
            result = fn(self.session)
            if inspect.isawaitable(result):
                await result

    async def _step(self, turn: int, step: int) -> tuple[bool, v.TurnEndReason]:
        bus, log, svc = self._service.bus, self.session.append, self._service
        log("step/start", {"turn": turn, "step": step})
        bus.emit("agent/step-start", self, turn, step)
        self._abort = AbortController()
        request = {"model": self.options.get("model"), "messages": self.session.derive_messages(),
                   "signal": self._abort.signal}
        request = await bus.waterfall("agent/request", self, turn, step, value=request, default=lambda r: r)
        blocks: dict[int, Any] = {}
        finish = "stop"
        async for chunk in svc.models[request["model"]].stream(request):
            log("assistant/chunk", {"turn": turn, "step": step, "chunk": chunk})
            bus.emit("agent/stream-chunk", self, turn, step, chunk)
            if chunk["type"] == "block-end":
                blocks[chunk["index"]] = chunk["block"]
            elif chunk["type"] == "finish":
                finish = chunk["reason"]["kind"]
        self._abort = None
        message = {"role": "assistant", "content": [blocks[i] for i in sorted(blocks)]}
        message = await bus.waterfall("agent/step-result", self, turn, step, value=message, default=lambda m: m)
        log("assistant/message", {"turn": turn, "step": step, "content": message["content"]})
        calls = [b for b in message["content"] if b["type"] == "tool-call"]
        for call in calls:
            log("tool/call", {"turn": turn, "step": step, "call_id": call["id"], "name": call["name"],
                              "arguments": call["arguments"]})
            tool = svc.tools[call["name"]]
            output = await tool.execute(json.loads(call["arguments"] or "{}"), {"call_id": call["id"]})
            content = [v.text(output)] if isinstance(output, str) else output
            log("tool/result", {"turn": turn, "step": step, "call_id": call["id"], "content": content,
                                "is_error": False})
        log("step/end", {"turn": turn, "step": step})
        bus.emit("agent/step-end", self, turn, step)
        reason = v.turn_end_aborted() if finish == "aborted" else v.turn_end_completed()
        again = await bus.waterfall("agent/turn-continuation", self, turn, value=bool(calls), default=lambda d: d)
        return bool(again) and finish != "aborted", reason


class TinyService:
    """Models, tools, a bus and the agents."""

    def __init__(self) -> None:
        self.bus = Bus()
        self.models: dict[str, Any] = {}
        self.tools: dict[str, Any] = {}
        self.agents: dict[str, TinyAgent] = {}
        self.sections: list[str] = []

    def register_model(self, name: str, adapter: Any) -> Callable[[], None]:
        self.models[name] = adapter
        return lambda: self.models.pop(name, None)

    def register_tool(self, tool: Any) -> Callable[[], None]:
        self.tools[tool.name] = tool
        return lambda: self.tools.pop(tool.name, None)

    def create_agent(self, agent_id: str, session_id: str, options: dict[str, Any] | None = None) -> TinyAgent:
        agent = TinyAgent(self, agent_id, TinySession(session_id, self.bus), dict(options or {}))
        self.agents[agent_id] = agent
        return agent

    async def close(self) -> None:
        for agent in self.agents.values():
            agent.dispose()
