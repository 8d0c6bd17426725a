"""The suite's scripted model and tools.

Small and self-contained on purpose: every rule test states its model responses inline, step
by step. A response is a list of *actions*: chunks to yield, plus a few control actions (wait
for a gate, hang until the step's abort signal fires, raise, call a function at that point of
the stream). When the script runs out, the model answers ``"ok"`` and stops.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from reference_loop import vocabulary as v
from reference_loop.protocols import ModelRequest, ToolContext


class FakeError(Exception):
    """An error raised by the fakes, with an optional string ``code``."""

    def __init__(self, message: str, code: str | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code


@dataclass
class Gate:
    """Wait until ``event`` is set."""

    event: asyncio.Event


@dataclass
class Hang:
    """Wait until the step's abort signal fires, then end with ``finish{aborted}``."""


@dataclass
class Raise:
    """Raise ``FakeError(message, code)`` from the stream."""

    message: str
    code: str | None = None


@dataclass
class Call:
    """Call ``fn()`` at this point of the stream (e.g. to steer or cancel mid-stream)."""

    fn: Callable[[], object]


@dataclass
class Sleep:
    """Sleep ``seconds`` (virtual time under the simulator)."""

    seconds: float


Action = Any
"""A chunk dict (``reference_loop.vocabulary``) or one of the control actions above."""


def text(value: str = "ok", *, finish: str | None = "stop", usage: tuple[int, int] | None = None) -> list[Action]:
    """A text answer: one text block, optional usage, then ``finish``."""
    out: list[Action] = [v.block_start(0, "text"), v.text_delta(0, value), v.block_end(0, v.text(value))]
    if usage is not None:
        out.append(v.usage(*usage))
    if finish is not None:
        out.append(v.finish(finish))
    return out


def tools(*calls: tuple[str, str, str], finish: str = "tool-calls", prefix: str | None = None) -> list[Action]:
    """Tool calls ``(id, name, raw_arguments)``, optionally after a text block."""
    out: list[Action] = []
    index = 0
    if prefix is not None:
        out += [v.block_start(0, "text"), v.text_delta(0, prefix), v.block_end(0, v.text(prefix))]
        index = 1
    for call_id, name, arguments in calls:
        out += [
            v.block_start(index, "tool-call"),
            v.tool_call_delta(index, call_id, arguments, name=name),
            v.block_end(index, v.tool_call(call_id, name, arguments)),
        ]
        index += 1
    out.append(v.finish(finish))
    return out


MAX_CALLS = 100
"""Model calls per scenario before the fake model suspects a runaway continuation loop."""


class ScriptedModel:
    """A ``ModelAdapter`` answering from a script, one response per ``stream()`` call.

    ``requests`` records every request received (without its signal), ``signals`` the signals.
    """

    def __init__(
        self, responses: Sequence[Sequence[Action]] = (), on_request: Callable[[], object] | None = None
    ) -> None:
        self.responses: list[list[Action]] = [list(r) for r in responses]
        self.on_request = on_request
        self.requests: list[dict[str, Any]] = []
        self.signals: list[Any] = []
        self.max_calls = MAX_CALLS

    @property
    def runaway(self) -> bool:
        """Whether the model was called more than ``max_calls`` times."""
        return len(self.requests) > self.max_calls

    def push(self, *responses: Sequence[Action]) -> None:
        """Append responses to the script."""
        self.responses.extend(list(r) for r in responses)

    async def stream(self, request: ModelRequest) -> AsyncIterator[Any]:
        """Yield the next scripted response."""
        self.requests.append({k: val for k, val in request.items() if k != "signal"})
        signal = request.get("signal")
        self.signals.append(signal)
        if self.on_request is not None:
            self.on_request()
        if len(self.requests) > self.max_calls:
            # A loop that never stops stepping would spin forever in virtual time (no timer
            # ever fires): park this call until the step is aborted, so waits time out.
            if signal is not None:
                await signal.wait()
            else:  # pragma: no cover
                await asyncio.Event().wait()
            yield v.finish("aborted")
            return
        script = self.responses.pop(0) if self.responses else text("ok")
        for action in script:
            if signal is not None and signal.aborted:
                yield v.finish("aborted")
                return
            # A real stream suspends between chunks: give schedules a point to interleave.
            await asyncio.sleep(0)
            if isinstance(action, Gate):
                await action.event.wait()
            elif isinstance(action, Sleep):
                await asyncio.sleep(action.seconds)
            elif isinstance(action, Hang):
                if signal is not None:
                    await signal.wait()
                else:  # pragma: no cover - an implementation without signals hangs forever
                    await asyncio.Event().wait()
                yield v.finish("aborted")
                return
            elif isinstance(action, Raise):
                raise FakeError(action.message, action.code)
            elif isinstance(action, Call):
                action.fn()
            else:
                yield action


def user_texts(request: dict[str, Any]) -> list[str]:
    """All text of the request's messages, flattened, in order (for easy assertions)."""
    out: list[str] = []
    for message in request.get("messages", []):
        for block in message.get("content", []):
            if block.get("type") == "text":
                out.append(block["text"])
            elif block.get("type") == "tool-result":
                out.extend(b.get("text", "") for b in block["content"] if b.get("type") == "text")
    return out


@dataclass
class FakeTool:
    """A ``Tool``: returns ``result``, or raises ``FakeError(error, code)``, optionally after a
    gate or hanging until its abort signal fires. ``calls`` records ``(arguments, context)``."""

    name: str
    result: Any = "done"
    error: str | None = None
    code: str | None = None
    gate: asyncio.Event | None = None
    hang: bool = False
    delay: float = 0.0
    hook: Callable[[Any], object] | None = None
    on_call: Callable[[], object] | None = None
    description: str = "a fake tool"
    input_schema: dict[str, Any] = field(default_factory=lambda: {"type": "object"})
    calls: list[tuple[Any, Any]] = field(default_factory=list)
    finished: list[Any] = field(default_factory=list)

    async def execute(self, arguments: Any, context: ToolContext) -> Any:
        """Run the fake tool."""
        self.calls.append((arguments, context))
        if self.on_call is not None:
            self.on_call()
        if self.hook is not None:
            self.hook(arguments)
        if self.gate is not None:
            await self.gate.wait()
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.hang:
            signal = context.get("signal") if isinstance(context, dict) else None
            if signal is not None:
                await signal.wait()
            raise FakeError("tool aborted", "ABORTED")
        if self.error is not None:
            raise FakeError(self.error, self.code)
        self.finished.append(arguments)
        return self.result


def dumps(value: Any) -> str:
    """Canonical JSON text (for byte comparisons)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"))
