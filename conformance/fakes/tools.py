"""Fake tools: scripted ``reference_loop.protocols.Tool`` implementations.

::

    from conformance.fakes import FakeTool, ToolBox, fails, hangs, returns

    search = FakeTool("search", results=["3 cats", fails("rate limited", code="RATE_LIMIT")])
    clock = FakeTool("clock", result="12:00", latency=2.0)          # 2 virtual seconds per call
    echo = FakeTool("echo", handler=lambda args: args["text"])      # a function of the arguments
    stuck = FakeTool("stuck", result=hangs())                       # until the call is aborted
    boom = FakeTool("boom", hook=lambda args: agent.cancel())       # code run inside the call
    held = FakeTool("held", gate=Gate("g"))                         # until the gate opens

    box = ToolBox(search, clock, fetch="<html>", ping=["pong", "pong again"])

A call runs, in this order: the ``hook`` (sync or async, given the arguments, and the context if
it takes two arguments), the ``gate`` (abort-aware), the latency (virtual seconds; ``0`` yields to the loop once, ``None`` does not suspend), a check of
``context["signal"]``, then the outcome: a result (a string or a list of blocks), an error raised
as ``ToolError`` with its ``code``, or a hang until the signal fires. A tool is abort-aware by
default: once the call's signal has fired it stops waiting and raises ``AbortError`` (code
``ABORTED``); ``abort_aware=False`` makes it ignore the signal (a hang then never ends).

Every call is recorded (``calls``: arguments deep-copied, call id, agent id, virtual start and end
times, outcome). Running past the end of a ``results`` script raises ``ScriptExhausted`` and is
kept in ``problems()``, which the scenario runner turns into a failed check, since the loop itself
contains tool failures and would hide it.
"""

from __future__ import annotations

import asyncio
import copy
import inspect
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

import simulator
from reference_loop import vocabulary as v
from reference_loop.abort import AbortError, AbortSignal
from reference_loop.protocols import ToolContext, ToolError, ToolSchema

from .errors import ScriptExhausted, UnusedResponses, fresh
from .gate import wait_abortable
from .model import _observe

__all__ = [
    "FakeTool",
    "Outcome",
    "ToolBox",
    "ToolCall",
    "fails",
    "hangs",
    "returns",
]

ToolResult: TypeAlias = str | list[v.Block]


class _Default:
    def __repr__(self) -> str:
        return "DEFAULT"


_DEFAULT = _Default()


@dataclass(frozen=True)
class Outcome:
    """What one call does: return ``value``, raise ``error``, or hang; ``latency``, when given,
    overrides the tool's latency for this call."""

    value: ToolResult | None = None
    error: BaseException | None = None
    hang: bool = False
    latency: float | _Default | None = _DEFAULT


def returns(value: ToolResult, *, latency: float | _Default | None = _DEFAULT) -> Outcome:
    """A successful result (a string or a list of content blocks)."""
    return Outcome(value=value, latency=latency)


def fails(
    error: str | BaseException = "fake tool failure",
    *,
    code: str | None = None,
    latency: float | _Default | None = _DEFAULT,
) -> Outcome:
    """A failure: ``ToolError(message, code)``, or the given exception (``code`` is set on it)."""
    if isinstance(error, str):
        exc: BaseException = ToolError(error, code)
    else:
        exc = error
        if code is not None:
            exc.code = code  # type: ignore[attr-defined]
    return Outcome(error=exc, latency=latency)


def hangs(*, latency: float | _Default | None = _DEFAULT) -> Outcome:
    """Hang until the call's abort signal fires (then raise ``AbortError``)."""
    return Outcome(hang=True, latency=latency)


ScriptItem: TypeAlias = "ToolResult | Outcome | BaseException | type[BaseException]"
Handler: TypeAlias = Callable[..., Any]
Hook: TypeAlias = Callable[..., "Awaitable[None] | None"]


@dataclass
class ToolCall:
    """The record of one call of a fake tool."""

    tool: str
    index: int  # 1-based, per tool
    call_id: str
    agent_id: str
    arguments: Any
    started: float
    ended: float | None = None
    outcome: str = "running"  # ok | error | aborted | cancelled | exhausted
    result: Any = None
    error: str | None = None
    code: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "tool": self.tool,
            "index": self.index,
            "call_id": self.call_id,
            "agent_id": self.agent_id,
            "arguments": self.arguments,
            "outcome": self.outcome,
            **({"result": self.result} if self.outcome == "ok" else {}),
            **({"error": self.error} if self.error is not None else {}),
            **({"code": self.code} if self.code is not None else {}),
        }


_UNSET: Any = object()


def _to_outcome(item: Any) -> Outcome:
    if isinstance(item, Outcome):
        return item
    if isinstance(item, BaseException):
        return Outcome(error=item)
    if isinstance(item, type) and issubclass(item, BaseException):
        return Outcome(error=item())
    if isinstance(item, str | list):
        return Outcome(value=item)
    raise TypeError(
        f"a fake tool result must be a str, a list of blocks or an Outcome, got {type(item).__name__}"
    )


def _arity(fn: Callable[..., Any]) -> int:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return 1
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return 2
    return len(positional)


class FakeTool:
    """A scripted tool. Give at most one of ``result`` (every call), ``results`` (one per call, in
    order; ``repeat_last`` keeps answering with the last one) or ``handler`` (a sync or async
    function of ``(arguments)`` or ``(arguments, context)`` returning a result or an ``Outcome``,
    or raising). Without any, every call returns ``"ok"``. ``consumes_args``: the tool empties
    the arguments it receives once recorded, as a tool popping what it reads does (a loop
    sharing one parsed object between calls, or with its log, shows it: TOOL-2, LOG-1)."""

    def __init__(
        self,
        name: str,
        result: Any = _UNSET,
        *,
        results: Sequence[Any] | None = None,
        handler: Handler | None = None,
        description: str | None = None,
        input_schema: Mapping[str, Any] | None = None,
        latency: float | None = 0.0,
        hook: Hook | None = None,
        gate: Any = None,
        abort_aware: bool = True,
        repeat_last: bool = False,
        strict: bool = False,
        observe: bool = True,
        consumes_args: bool = False,
    ) -> None:
        given = sum(x is not None for x in (results, handler)) + (result is not _UNSET)
        if given > 1:
            raise ValueError(f"fake tool {name!r}: give one of result=, results= or handler=")
        if latency is not None and latency < 0:
            raise ValueError("latency must be >= 0")
        self._name = name
        self._description = description if description is not None else f"Fake tool {name}."
        self._input_schema: dict[str, Any] = (
            dict(input_schema) if input_schema is not None else {"type": "object"}
        )
        self.result = (
            _to_outcome("ok" if result is _UNSET else result)
            if results is None and handler is None
            else None
        )
        self.results: list[Outcome] | None = (
            None if results is None else [_to_outcome(r) for r in results]
        )
        self.handler = handler
        self._handler_arity = _arity(handler) if handler is not None else 0
        self.latency = latency
        self.hook = hook
        self._hook_arity = _arity(hook) if hook is not None else 0
        self.gate = gate
        self.abort_aware = abort_aware
        self.repeat_last = repeat_last
        self.strict = strict
        self.observe = observe
        self.consumes_args = consumes_args
        self.calls: list[ToolCall] = []
        self.returned: list[Any] = []
        """The lists and dicts ``execute`` returned: the tool's own objects, which a world edits
        once the run is over (LOG-1: the log holds a snapshot of a tool's result)."""
        self.exhausted: list[ScriptExhausted] = []
        self._sink: list[ToolCall] | None = None

    def __repr__(self) -> str:
        return f"FakeTool({self._name!r}, {len(self.calls)} call(s))"

    # ---------------------------------------------------------------- Tool protocol

    @property
    def name(self) -> str:
        return self._name

    @property
    def description(self) -> str:
        return self._description

    @property
    def input_schema(self) -> dict[str, Any]:
        return self._input_schema

    def schema(self) -> ToolSchema:
        return {
            "name": self._name,
            "description": self._description,
            "input_schema": dict(self._input_schema),
        }

    # ---------------------------------------------------------------- script

    def push(self, *items: Any) -> None:
        """Append results to a ``results`` script."""
        if self.results is None:
            raise ValueError(f"fake tool {self._name!r} has no results= script to extend")
        self.results.extend(_to_outcome(i) for i in items)

    @property
    def call_args(self) -> list[Any]:
        """The arguments of every call, in order."""
        return [c.arguments for c in self.calls]

    @property
    def remaining(self) -> int:
        if self.results is None or self.repeat_last:
            return 0
        return max(len(self.results) - len(self.calls), 0)

    def problems(self, strict: bool | None = None) -> list[str]:
        out = [str(e) for e in self.exhausted]
        if (self.strict if strict is None else strict) and self.remaining:
            out.append(self._unused_message())
        return out

    def assert_all_used(self) -> None:
        if self.exhausted:
            raise self.exhausted[0]
        if self.remaining:
            raise UnusedResponses(self._unused_message())

    def _unused_message(self) -> str:
        total = len(self.results or ())
        return f"fake tool {self._name!r}: {self.remaining} of {total} scripted results never used ({len(self.calls)} call(s))"

    def _pick(self, index: int) -> Outcome | None:
        if self.result is not None:
            return self.result
        if self.results is not None:
            if index <= len(self.results):
                return self.results[index - 1]
            if self.repeat_last and self.results:
                return self.results[-1]
            error = ScriptExhausted(
                f"fake tool {self._name!r}: call #{index} but the script has only {len(self.results)} result(s)"
            )
            self.exhausted.append(error)
            raise error
        return None  # the handler decides

    # ---------------------------------------------------------------- execute

    async def execute(self, arguments: Any, context: ToolContext) -> ToolResult:
        ctx: Mapping[str, Any] = context if isinstance(context, Mapping) else {}
        signal: AbortSignal | None = ctx.get("signal") if self.abort_aware else None
        loop = asyncio.get_running_loop()
        sim_loop = simulator.current_loop()
        record = ToolCall(
            tool=self._name,
            index=len(self.calls) + 1,
            call_id=str(ctx.get("call_id", "")),
            agent_id=str(ctx.get("agent_id", "")),
            arguments=_copy(arguments),
            started=loop.time(),
        )
        self.calls.append(record)
        if self._sink is not None:
            self._sink.append(record)
        if self.observe:
            _observe(sim_loop, "tool/start", tool=self._name, call_id=record.call_id, index=record.index,
                     arguments=record.arguments)
        if self.consumes_args and isinstance(arguments, dict | list):
            arguments.clear()  # as a tool popping what it reads does: its arguments are its own (TOOL-2)
        try:
            outcome = self._pick(record.index)
            if self.hook is not None:
                maybe = self.hook(arguments, context) if self._hook_arity >= 2 else self.hook(arguments)
                if inspect.isawaitable(maybe):
                    await maybe
            if self.gate is not None and not await wait_abortable(signal, gate=self.gate):
                raise AbortError(_reason(signal))
            latency = self.latency
            if outcome is not None and not isinstance(outcome.latency, _Default):
                latency = outcome.latency
            if not await wait_abortable(signal, delay=latency):
                raise AbortError(_reason(signal))
            if outcome is None:
                assert self.handler is not None
                value = (
                    self.handler(arguments, context)
                    if self._handler_arity >= 2
                    else self.handler(arguments)
                )
                if inspect.isawaitable(value):
                    value = await value
                outcome = _to_outcome(value)
                if not isinstance(outcome.latency, _Default) and outcome.latency is not None:
                    if not await wait_abortable(signal, delay=outcome.latency):
                        raise AbortError(_reason(signal))
            if outcome.hang:
                await wait_abortable(signal, forever=True)
                raise AbortError(_reason(signal))
            if outcome.error is not None:
                raise fresh(outcome.error)
            value = copy.deepcopy(outcome.value)
            record.outcome = "ok"
            record.result = _copy(value)
            if isinstance(value, (list, dict)):
                self.returned.append(value)  # the tool's own object: it may reuse it later (LOG-1)
            return value  # type: ignore[return-value]
        except asyncio.CancelledError:
            record.outcome = "cancelled"
            raise
        except ScriptExhausted as exc:
            record.outcome = "exhausted"
            record.error = str(exc)
            record.code = exc.code
            raise
        except AbortError as exc:
            record.outcome = "aborted"
            record.error = str(exc)
            record.code = exc.code
            raise
        except Exception as exc:
            record.outcome = "error"
            record.error = _message(exc)
            code = getattr(exc, "code", None)
            record.code = code if isinstance(code, str) else None
            raise
        finally:
            record.ended = asyncio.get_running_loop().time()
            if self.observe:
                extra = {"error": record.error} if record.error is not None else {}
                _observe(sim_loop, "tool/done", tool=self._name, call_id=record.call_id, outcome=record.outcome, **extra)


def _message(exc: BaseException) -> str:
    """What a tool raised, for the record: its type's name when its message cannot be read (a
    test's hostile error, whose ``__str__`` raises, must reach the loop as it was raised)."""
    try:
        return str(exc)
    except Exception:
        return type(exc).__name__


def _reason(signal: AbortSignal | None) -> str:
    reason = signal.reason if signal is not None else None
    return reason if reason is not None else "aborted"


def _copy(value: Any) -> Any:
    try:
        return copy.deepcopy(value)
    except Exception:
        return f"<{type(value).__name__}>"


# --------------------------------------------------------------------------- toolbox


class ToolBox:
    """Several fake tools at once: ``ToolBox(tool, ..., name=spec, ...)``.

    A keyword ``spec`` is a dict of ``FakeTool`` keyword arguments, a list or tuple (a ``results``
    script; a list of content blocks is one result), a function (a ``handler``), or a single
    result (a string, an ``Outcome`` or an exception). ``calls`` lists every call of every tool in
    the order the calls started.
    """

    def __init__(self, *tools: FakeTool, **specs: Any) -> None:
        self.tools: dict[str, FakeTool] = {}
        self.calls: list[ToolCall] = []
        for tool in tools:
            self.add(tool)
        for name, spec in specs.items():
            self.add(_tool_from_spec(name, spec))

    def add(self, tool: FakeTool) -> FakeTool:
        if tool.name in self.tools:
            raise ValueError(f"ToolBox: a tool named {tool.name!r} is already registered")
        self.tools[tool.name] = tool
        tool._sink = self.calls
        return tool

    def tool(self, name: str, result: Any = _UNSET, **kwargs: Any) -> FakeTool:
        """Create, add and return a ``FakeTool``."""
        return self.add(FakeTool(name, result, **kwargs))

    def __getitem__(self, name: str) -> FakeTool:
        return self.tools[name]

    def __contains__(self, name: object) -> bool:
        return name in self.tools

    def __iter__(self) -> Iterator[FakeTool]:
        return iter(self.tools.values())

    def __len__(self) -> int:
        return len(self.tools)

    @property
    def names(self) -> list[str]:
        return list(self.tools)

    def as_list(self) -> list[FakeTool]:
        return list(self.tools.values())

    def schemas(self) -> list[ToolSchema]:
        return [t.schema() for t in self.tools.values()]

    def problems(self) -> list[str]:
        return [p for t in self.tools.values() for p in t.problems()]

    def assert_all_used(self) -> None:
        for tool in self.tools.values():
            tool.assert_all_used()


def _tool_from_spec(name: str, spec: Any) -> FakeTool:
    if isinstance(spec, FakeTool):
        raise ValueError(f"ToolBox: pass FakeTool {spec.name!r} positionally, not as {name}=")
    if isinstance(spec, Mapping):
        return FakeTool(name, **dict(spec))
    if isinstance(spec, tuple | list) and not _is_blocks(spec):
        return FakeTool(name, results=list(spec))
    if callable(spec) and not isinstance(spec, type):
        return FakeTool(name, handler=spec)
    return FakeTool(name, spec)


def _is_blocks(value: Iterable[Any]) -> bool:
    items = list(value)
    return bool(items) and all(isinstance(i, Mapping) and "type" in i for i in items)
