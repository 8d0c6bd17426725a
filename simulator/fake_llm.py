"""A scriptable fake LLM: a ``ModelAdapter`` that plays back a script of responses.

One scripted response per model call, in order::

    from simulator.fake_llm import FakeModel, respond

    model = FakeModel([
        respond.text("Let me look.") + respond.tool_call("search", {"q": "cats"}, fragments=3),
        respond.text("Found 3 cats.", deltas=2).usage(120, 9),
        respond.text("a long essay ...").truncate(3),          # finish max-tokens
        respond.error("overloaded", code="OVERLOADED"),        # finish error
        respond.hang(),                                        # until the step is aborted
        lambda request: respond.text(f"{len(request['messages'])} messages"),
    ])

A response is an immutable value built from blocks (``text``, ``reasoning``, ``tool_call``,
raw ``chunks``) joined with ``+``, then refined with methods that each return a new response:
``usage``, ``finish``, ``no_finish``, ``truncate``, ``timing``, ``gate``, ``hang``, ``raises``,
``on_abort``. ``Response.build()`` shows the exact chunks it streams.

Streaming follows the adapter contract of ``reference_loop.protocols.ModelAdapter``: block chunks,
then ``usage`` (when given), then ``finish``, nothing after it. Every chunk is preceded by one
suspension of the stream (``first`` seconds of virtual time before the first chunk, ``between``
before each later one; ``0`` is a bare yield to the event loop, ``None`` no suspension at all),
and the request's abort signal is honoured at each of those points. Faults and gates happen at a
*position* ``k``: the point just before chunk ``k`` is yielded (negative ``k`` counts from the
end, so ``before=-1`` is just before ``finish``). At a position the stream waits on its gates,
then sleeps its delay, then checks the abort signal, then hangs or raises if told to, then yields.

The model records every request (a deep copy without the signal) and fails clearly on a call past
the end of the script (``ScriptExhausted``, raised from the stream and kept in ``problems()``) and,
with ``assert_all_used()`` or ``strict=True`` (checked by the scenario runner), on unused
responses. Nothing here reads a clock or randomness: the same script streams the same chunks.
"""

from __future__ import annotations

import asyncio
import copy
import inspect
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, TypeAlias

from reference_loop import vocabulary as v
from reference_loop.abort import AbortError, AbortSignal
from reference_loop.protocols import ModelRequest

__all__ = [
    "FakeModel",
    "FakeModelError",
    "Gate",
    "Response",
    "ScriptEntry",
    "ScriptExhausted",
    "UnusedResponses",
    "respond",
]

OnAbort: TypeAlias = Literal["finish", "return", "raise"]


def _observe(kind: str, **data: Any) -> None:
    """Forward to ``simulator.observe`` when the runtime provides it (a no-op otherwise)."""
    import simulator

    observe = getattr(simulator, "observe", None)
    if observe is not None:
        observe(kind, **data)


# --------------------------------------------------------------------------- errors


class FakeModelError(Exception):
    """A scripted model failure (``raises("message", code=...)``); ``code`` only when given."""

    def __init__(self, message: str, code: str | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code


class ScriptExhausted(AssertionError):
    """The fake model was called more times than its script has responses."""

    code = "SCRIPT_EXHAUSTED"


class UnusedResponses(AssertionError):
    """``assert_all_used()``: some scripted responses were never requested."""


# --------------------------------------------------------------------------- gate


class Gate:
    """A one-way door a stream (or a fake tool) waits on until the scenario opens it.

    Like ``asyncio.Event`` (``wait()``, ``set()``, ``is_set()``, ``clear()``), plus ``open()``;
    loop-agnostic (waiters are futures created on the running loop when awaited), and waitable
    without a helper task, so waiting on it adds no task to the schedule.
    """

    __slots__ = ("_callbacks", "_open", "name")

    def __init__(self, name: str = "gate") -> None:
        self.name = name
        self._open = False
        self._callbacks: list[Callable[[], object]] = []

    def __repr__(self) -> str:
        return f"Gate({self.name!r}, {'open' if self._open else 'closed'})"

    def is_set(self) -> bool:
        return self._open

    @property
    def is_open(self) -> bool:
        return self._open

    def open(self) -> None:
        if self._open:
            return
        self._open = True
        callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback()

    set = open

    def clear(self) -> None:
        self._open = False

    def add_callback(self, callback: Callable[[], object]) -> Callable[[], None]:
        """Call ``callback()`` when the gate opens (at once if it is open); returns a disposer."""
        if self._open:
            callback()
            return lambda: None
        self._callbacks.append(callback)

        def dispose() -> None:
            try:
                self._callbacks.remove(callback)
            except ValueError:
                pass

        return dispose

    async def wait(self) -> bool:
        if self._open:
            return True
        fut: asyncio.Future[bool] = asyncio.get_running_loop().create_future()

        def wake() -> None:
            if not fut.done():
                fut.set_result(True)

        dispose = self.add_callback(wake)
        try:
            return await fut
        finally:
            dispose()


# --------------------------------------------------------------------------- abort-aware waits


async def wait_abortable(
    signal: AbortSignal | None,
    *,
    delay: float | None = None,
    gate: Any = None,
    forever: bool = False,
    task_name: str = "fake-gate",
) -> bool:
    """Wait for ``gate`` to open, then ``delay`` virtual seconds (or forever); stop at an abort.

    Returns ``False`` when ``signal`` fired first (or had already fired), ``True`` otherwise.
    ``delay=None`` does not suspend at all; ``delay=0`` yields to the loop once. ``gate`` is a
    ``Gate`` or any object with ``is_set()`` and an awaitable ``wait()`` (``asyncio.Event``).
    Uses futures and loop timers only (no helper task, except for a foreign gate type).
    """
    if signal is not None and signal.aborted:
        return False
    if gate is not None and not gate.is_set():
        if not await _wait_gate(signal, gate, task_name):
            return False
    if forever:
        return await _wait_signal(signal)
    if delay is None:
        return not (signal is not None and signal.aborted)
    if delay <= 0 or signal is None:
        await asyncio.sleep(max(delay, 0))
        return not (signal is not None and signal.aborted)
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[bool] = loop.create_future()
    handle = loop.call_later(delay, _resolve, fut, True)
    dispose = signal.add_listener(lambda _reason: _resolve(fut, False))
    try:
        return await fut
    finally:
        handle.cancel()
        dispose()


def _resolve(fut: asyncio.Future[bool], value: bool) -> None:
    if not fut.done():
        fut.set_result(value)


async def _wait_signal(signal: AbortSignal | None) -> bool:
    """Hang until ``signal`` fires (forever without one); always returns ``False``."""
    fut: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
    dispose = signal.add_listener(lambda _r: _resolve(fut, False)) if signal is not None else None
    try:
        return await fut
    finally:
        if dispose is not None:
            dispose()


async def _wait_gate(signal: AbortSignal | None, gate: Any, task_name: str) -> bool:
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[bool] = loop.create_future()
    disposers: list[Callable[[], object]] = []
    if isinstance(gate, Gate):
        disposers.append(gate.add_callback(lambda: _resolve(fut, True)))
    else:
        task = loop.create_task(gate.wait(), name=task_name)
        task.add_done_callback(lambda _t: _resolve(fut, True))
        disposers.append(task.cancel)
    if signal is not None:
        disposers.append(signal.add_listener(lambda _r: _resolve(fut, False)))
    try:
        return await fut
    finally:
        for dispose in disposers:
            dispose()


# --------------------------------------------------------------------------- response model


_TOKEN = re.compile(r"\s*\S+")


def _token_ends(text: str) -> list[int]:
    """End offsets of the tokens of ``text`` (a token: a word with its leading whitespace)."""
    return [m.end() for m in _TOKEN.finditer(text)]


def _split(text: str, pieces: int | Sequence[str]) -> list[str]:
    if not isinstance(pieces, int):
        return [p for p in pieces if p]
    if pieces < 1:
        raise ValueError(f"deltas/fragments must be >= 1, got {pieces}")
    n = min(pieces, len(text))
    if n == 0:
        return []
    size, extra = divmod(len(text), n)
    out: list[str] = []
    start = 0
    for i in range(n):
        end = start + size + (1 if i < extra else 0)
        out.append(text[start:end])
        start = end
    return out


def _clip(pieces: list[str], length: int) -> list[str]:
    out: list[str] = []
    used = 0
    for piece in pieces:
        if used >= length:
            break
        take = piece[: length - used]
        out.append(take)
        used += len(take)
    return out


@dataclass(frozen=True)
class _Block:
    kind: Literal["text", "reasoning", "tool-call"]
    content: str  # the text, or the tool call's raw arguments
    pieces: int | tuple[str, ...] = 1
    name: str = ""
    id: str | None = None


@dataclass(frozen=True)
class _Raw:
    chunk: Mapping[str, Any]


_Part: TypeAlias = _Block | _Raw


class _Infer:
    def __repr__(self) -> str:
        return "INFER"


_INFER = _Infer()


@dataclass(frozen=True)
class Response:
    """One scripted model response. Immutable: every method returns a modified copy."""

    parts: tuple[_Part, ...] = ()
    usage_value: v.Usage | None = None
    finish_value: v.FinishReason | _Infer | None = _INFER
    truncate_at: int | None = None
    first: float | None = 0.0
    between: float | None = 0.0
    gates: tuple[tuple[int, Any], ...] = ()
    hang_at: int | None = None
    raise_at: tuple[int, BaseException] | None = None
    abort_mode: OnAbort = "finish"
    _fields_set: frozenset[str] = field(default=frozenset(), repr=False, compare=False)

    # ---------------------------------------------------------------- building

    def _with(self, **changes: Any) -> Response:
        return replace(self, _fields_set=self._fields_set | frozenset(changes), **changes)

    def __add__(self, other: Response) -> Response:
        """Concatenate blocks; the other settings come from ``other`` where it set them."""
        if not isinstance(other, Response):
            return NotImplemented
        changes = {name: getattr(other, name) for name in other._fields_set}
        if "gates" in changes:
            changes["gates"] = self.gates + other.gates
        merged = replace(self, parts=self.parts + other.parts, **changes)
        return replace(merged, _fields_set=self._fields_set | other._fields_set)

    def usage(self, input_tokens: int, output_tokens: int, **extra: int) -> Response:
        """Stream a ``usage`` chunk (before ``finish``); ``extra``: ``cache_read_tokens``, ..."""
        chunk = v.usage(input_tokens, output_tokens, **extra)
        return self._with(usage_value=chunk["usage"])

    def finish(
        self, kind: str | None, message: str | None = None, code: str | None = None
    ) -> Response:
        """Set the finish reason (``None``: stream no ``finish`` chunk at all)."""
        if kind is None:
            return self._with(finish_value=None)
        return self._with(finish_value=v.finish(kind, message, code)["reason"])

    def no_finish(self) -> Response:
        """End the stream without a ``finish`` chunk (the loop counts it as ``stop``)."""
        return self.finish(None)

    def truncate(self, tokens: int) -> Response:
        """Cut the output after ``tokens`` tokens and finish ``max-tokens`` (if anything was cut).

        A token is a word with its leading whitespace, counted over the blocks in order (a tool
        call's raw arguments included). A text or reasoning block cut midway still closes, with the
        kept text; a tool call cut midway streams its kept fragments and never closes; blocks after
        the cut are dropped. An explicit ``finish(...)`` still wins over the inferred ``max-tokens``.
        """
        if tokens < 0:
            raise ValueError("truncate: tokens must be >= 0")
        return self._with(truncate_at=tokens)

    def timing(self, first: float | None = 0.0, between: float | None = 0.0) -> Response:
        """Virtual seconds before the first chunk and before each later one.

        ``0`` yields to the loop once (a scheduling point); ``None`` does not suspend at all.
        """
        for value in (first, between):
            if value is not None and value < 0:
                raise ValueError("timing: delays must be >= 0")
        return self._with(first=first, between=between)

    def gate(self, gate: Any, before: int = 0) -> Response:
        """Wait at position ``before`` until ``gate`` opens (abort-aware)."""
        return self._with(gates=(*self.gates, (before, gate)))

    def hang(self, before: int | None = None, after: int | None = None) -> Response:
        """Hang at a position until the request's abort signal fires (forever without one).

        Default position 0: after the first delay, before any chunk.
        """
        return self._with(hang_at=_position(before, after))

    def raises(
        self,
        error: str | BaseException | type[BaseException] = "fake model failure",
        *,
        code: str | None = None,
        before: int | None = None,
        after: int | None = None,
    ) -> Response:
        """Raise from the stream at a position (default 0: before any chunk).

        ``error`` is a message (raised as ``FakeModelError`` with ``code`` when given), an
        exception instance or class.
        """
        if isinstance(error, str):
            exc: BaseException = FakeModelError(error, code)
        elif isinstance(error, type):
            exc = error()
        else:
            exc = error
        if code is not None and not isinstance(error, str):
            exc.code = code  # type: ignore[attr-defined]
        return self._with(raise_at=(_position(before, after), exc))

    def on_abort(self, mode: OnAbort) -> Response:
        """What the stream does once the abort signal fired: ``finish`` (yield ``finish{aborted}``,
        the default), ``return`` (end silently) or ``raise`` (raise ``AbortError``)."""
        if mode not in ("finish", "return", "raise"):
            raise ValueError(f"on_abort: unknown mode {mode!r}")
        return self._with(abort_mode=mode)

    # ---------------------------------------------------------------- chunks

    def build(self, ids: Callable[[], str] | None = None) -> list[v.Chunk]:
        """The chunks this response streams (``ids`` names tool calls without an explicit id)."""
        counter = iter(range(1, 1 << 30))
        next_id = ids or (lambda: f"call-{next(counter)}")
        chunks: list[v.Chunk] = []
        remaining = self.truncate_at
        cut = False
        closed_tool_call = False
        index = 0
        for part in self.parts:
            if cut:
                break
            if isinstance(part, _Raw):
                chunks.append(copy.deepcopy(dict(part.chunk)))  # type: ignore[arg-type]
                continue
            content = part.content
            keep = len(content)
            if remaining is not None:
                ends = _token_ends(content)
                if len(ends) > remaining:
                    keep = ends[remaining - 1] if remaining > 0 else 0
                    cut = True
                    remaining = 0
                else:
                    remaining -= len(ends)
            if cut and keep == 0:
                break
            pieces = _split(
                content, part.pieces if isinstance(part.pieces, int) else list(part.pieces)
            )
            if keep < len(content):
                pieces = _clip(pieces, keep)
            kept = content[:keep]
            chunks.append(v.block_start(index, part.kind))
            if part.kind == "tool-call":
                call_id = part.id if part.id is not None else next_id()
                for i, piece in enumerate(pieces or [""]):
                    chunks.append(
                        v.tool_call_delta(index, call_id, piece, part.name if i == 0 else None)
                    )
                if keep == len(content):
                    chunks.append(v.block_end(index, v.tool_call(call_id, part.name, content)))
                    closed_tool_call = True
            else:
                make_delta = v.text_delta if part.kind == "text" else v.reasoning_delta
                for piece in pieces:
                    chunks.append(make_delta(index, piece))
                block = v.text(kept) if part.kind == "text" else v.reasoning(kept)
                chunks.append(v.block_end(index, block))
            index += 1
        if self.usage_value is not None:
            chunks.append({"type": "usage", "usage": copy.deepcopy(self.usage_value)})
        finish = self.finish_value
        if isinstance(finish, _Infer):
            if cut:
                finish = {"kind": "max-tokens"}
            elif closed_tool_call:
                finish = {"kind": "tool-calls"}
            else:
                finish = {"kind": "stop"}
        if finish is not None:
            chunks.append({"type": "finish", "reason": copy.deepcopy(finish)})
        return chunks


def _position(before: int | None, after: int | None) -> int:
    if before is not None and after is not None:
        raise ValueError("give either before= or after=, not both")
    if after is not None:
        if after < 0:
            raise ValueError("after= must be >= 0 (use before=-1 for 'just before finish')")
        return after + 1
    return 0 if before is None else before


def _args_text(arguments: str | Mapping[str, Any] | Sequence[Any] | None) -> str:
    if arguments is None:
        return ""
    if isinstance(arguments, str):
        return arguments
    import json

    return json.dumps(arguments, separators=(", ", ": "))


class _Respond:
    """Builders for scripted responses (use the module-level ``respond``)."""

    def __call__(self, *parts: Response | str) -> Response:
        """Join responses (strings are text blocks): ``respond("hi", respond.tool_call(...))``."""
        out = Response()
        for part in parts:
            out = out + (self.text(part) if isinstance(part, str) else part)
        return out

    def text(self, text: str | Sequence[str], deltas: int = 1) -> Response:
        """A text block streamed in ``deltas`` even pieces (or the given list of pieces)."""
        return Response(parts=(_block("text", text, deltas),))

    def reasoning(self, text: str | Sequence[str], deltas: int = 1) -> Response:
        """A reasoning block streamed in ``deltas`` pieces."""
        return Response(parts=(_block("reasoning", text, deltas),))

    def tool_call(
        self,
        name: str,
        arguments: str | Mapping[str, Any] | Sequence[Any] | None = None,
        *,
        id: str | None = None,
        fragments: int | Sequence[str] = 1,
    ) -> Response:
        """A tool call whose raw JSON ``arguments`` (a dict is dumped; default ``{}``) stream in
        ``fragments`` ``tool-call-delta`` chunks (the first carries the name), then a ``block-end``
        with the full block. ``fragments`` may also be the list of pieces itself. Without ``id``
        the model numbers its calls ``call-1``, ``call-2``, ... (per model, in stream order)."""
        if isinstance(fragments, int):
            args = "{}" if arguments is None else _args_text(arguments)
        else:
            args = "".join(fragments)
            if arguments is not None and _args_text(arguments) != args:
                raise ValueError("tool_call: the fragments do not join to the arguments")
        pieces: int | tuple[str, ...] = (
            fragments if isinstance(fragments, int) else tuple(fragments)
        )
        return Response(parts=(_Block("tool-call", args, pieces, name=name, id=id),))

    def chunks(self, *chunks: Mapping[str, Any]) -> Response:
        """Raw chunks, streamed verbatim (no ``finish`` is added unless you set one).

        An escape hatch for malformed or unusual streams (deltas after ``block-end``, a block
        that never closes, ...): you are responsible for the contract here.
        """
        return Response(parts=tuple(_Raw(dict(c)) for c in chunks), finish_value=None)

    def empty(self) -> Response:
        """No blocks, finish ``stop``."""
        return Response()

    def error(self, message: str, code: str | None = None) -> Response:
        """A stream that ends with ``finish{error, message, code?}`` (no blocks)."""
        return Response().finish("error", message, code)

    def aborted(self) -> Response:
        """A stream that ends with ``finish{aborted}`` of its own accord (no abort signal)."""
        return Response().finish("aborted")

    def raises(
        self,
        error: str | BaseException | type[BaseException] = "fake model failure",
        *,
        code: str | None = None,
    ) -> Response:
        """A stream that raises before its first chunk."""
        return Response().raises(error, code=code)

    def hang(self) -> Response:
        """A stream that yields nothing until the request's signal fires, then ``finish{aborted}``."""
        return Response().hang()


def _block(kind: Literal["text", "reasoning"], text: str | Sequence[str], deltas: int) -> _Block:
    if isinstance(text, str):
        return _Block(kind, text, deltas)
    pieces = tuple(text)
    return _Block(kind, "".join(pieces), pieces)


respond = _Respond()

ScriptEntry: TypeAlias = (
    Response | str | Callable[[ModelRequest], "Response | str | Awaitable[Response | str]"]
)


# --------------------------------------------------------------------------- the model


def _snapshot(request: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in sorted(request):
        if key == "signal":
            continue
        try:
            out[key] = copy.deepcopy(request[key])
        except Exception:  # not copyable: keep a description, never the live object
            out[key] = f"<{type(request[key]).__name__}>"
    return out


class FakeModel:
    """A ``ModelAdapter`` that streams its script, one response per ``stream()`` call.

    ``requests`` holds a deep copy of every request (without the signal), ``outcomes`` how each
    call ended (the finish kind, ``aborted``, ``raised``, ``exhausted``, ``ended`` without a
    finish chunk, ``cancelled`` with its task, or ``closed`` when the consumer stopped early).
    ``problems()`` lists what a test should fail on: calls past the end of the script, and with
    ``strict=True`` unused responses.
    """

    def __init__(
        self,
        script: Iterable[ScriptEntry] = (),
        *,
        name: str = "fake",
        strict: bool = False,
        observe: bool = True,
    ) -> None:
        self.name = name
        self.strict = strict
        self.observe = observe
        self.script: list[ScriptEntry] = list(script)
        self.requests: list[dict[str, Any]] = []
        self.outcomes: list[str] = []
        self.exhausted: list[ScriptExhausted] = []
        self._next = 0
        self._tool_ids = 0

    def __repr__(self) -> str:
        return f"FakeModel({self.name!r}, {self._next}/{len(self.script)} used)"

    # ---------------------------------------------------------------- script

    def push(self, *entries: ScriptEntry) -> None:
        """Append responses to the script (for example from an actor, mid-run)."""
        self.script.extend(entries)

    @property
    def calls(self) -> int:
        return len(self.requests)

    @property
    def used(self) -> int:
        return min(self._next, len(self.script))

    @property
    def remaining(self) -> int:
        return max(len(self.script) - self._next, 0)

    def problems(self, strict: bool | None = None) -> list[str]:
        """Messages for calls past the end and (``strict``) unused responses; empty when fine."""
        out = [str(e) for e in self.exhausted]
        if (self.strict if strict is None else strict) and self.remaining:
            out.append(self._unused_message())
        return out

    def assert_all_used(self) -> None:
        """Raise ``UnusedResponses`` if a scripted response was never requested (and
        ``ScriptExhausted`` first if a call went past the end)."""
        if self.exhausted:
            raise self.exhausted[0]
        if self.remaining:
            raise UnusedResponses(self._unused_message())

    def _unused_message(self) -> str:
        first = self._next
        return (
            f"fake model {self.name!r}: {self.remaining} of {len(self.script)} scripted responses "
            f"never requested (responses #{first + 1}..#{len(self.script)}; the model was called "
            f"{self.calls} time(s))"
        )

    def _next_tool_id(self) -> str:
        self._tool_ids += 1
        return f"call-{self._tool_ids}"

    # ---------------------------------------------------------------- adapter

    def stream(self, request: ModelRequest) -> AsyncIterator[v.Chunk]:
        """Record the request and return the stream of the next scripted response."""
        snapshot = _snapshot(request)
        self.requests.append(snapshot)
        call = len(self.requests)
        entry: ScriptEntry | None = None
        error: ScriptExhausted | None = None
        if self._next < len(self.script):
            entry = self.script[self._next]
        else:
            error = ScriptExhausted(
                f"fake model {self.name!r}: call #{call} but the script has only "
                f"{len(self.script)} response(s) (last message: {_last_message(snapshot)})"
            )
            self.exhausted.append(error)
        self._next += 1
        if self.observe:
            _observe(
                "model/request",
                model=self.name,
                call=call,
                messages=len(snapshot.get("messages", ())),
            )
        return self._play(request, call, entry, error)

    async def _play(
        self,
        request: ModelRequest,
        call: int,
        entry: ScriptEntry | None,
        error: ScriptExhausted | None,
    ) -> AsyncIterator[v.Chunk]:
        outcome = "closed"
        try:
            if error is not None:
                outcome = "exhausted"
                raise error
            assert entry is not None
            response = await _resolve_entry(entry, request)
            signal = request.get("signal")
            chunks = response.build(self._next_tool_id)
            faults = _Faults(response, chunks)
            i = 0
            while True:
                if i < len(chunks) or faults.pending(i):
                    delay = response.first if i == 0 else response.between
                    for gate in faults.gates(i):
                        if not await wait_abortable(
                            signal, gate=gate, task_name=f"{self.name}:gate"
                        ):
                            break
                    if (signal is None or not signal.aborted) and i < len(chunks):
                        await wait_abortable(signal, delay=delay)
                    if signal is not None and signal.aborted:
                        outcome = "aborted"
                        if response.abort_mode == "raise":
                            raise AbortError(signal.reason or "aborted")
                        if response.abort_mode == "finish" and not _finished(chunks[:i]):
                            yield v.finish("aborted")
                        return
                    if faults.hang_at == i:
                        await wait_abortable(signal, forever=True)
                        continue  # the signal fired: handled at the top of the loop
                    if faults.raise_at is not None and faults.raise_at[0] == i:
                        outcome = "raised"
                        raise faults.raise_at[1]
                if i >= len(chunks):
                    break
                chunk = chunks[i]
                i += 1
                if chunk.get("type") == "finish":
                    outcome = chunk["reason"]["kind"]  # type: ignore[typeddict-item]
                yield chunk
            if outcome == "closed":
                outcome = "ended"
        except asyncio.CancelledError:
            outcome = "cancelled"
            raise
        except Exception:
            if outcome == "closed":  # a response function raised, or a foreign gate failed
                outcome = "raised"
            raise
        finally:
            self.outcomes.append(outcome)
            if self.observe:
                _observe("model/done", model=self.name, call=call, outcome=outcome)


def _finished(chunks: Sequence[Mapping[str, Any]]) -> bool:
    return any(c.get("type") == "finish" for c in chunks)


class _Faults:
    """The response's fault positions, resolved against the built chunk list."""

    def __init__(self, response: Response, chunks: Sequence[Mapping[str, Any]]) -> None:
        n = len(chunks)
        # nothing may happen after ``finish``: the last position is just before it
        last = n - 1 if n and chunks[-1].get("type") == "finish" else n
        self._gates: dict[int, list[Any]] = {}
        for pos, gate in response.gates:
            self._gates.setdefault(_resolve_pos(pos, n, last, "gate"), []).append(gate)
        self.hang_at = (
            None if response.hang_at is None else _resolve_pos(response.hang_at, n, last, "hang")
        )
        self.raise_at = (
            None
            if response.raise_at is None
            else (_resolve_pos(response.raise_at[0], n, last, "raises"), response.raise_at[1])
        )

    def gates(self, i: int) -> list[Any]:
        return self._gates.get(i, [])

    def pending(self, i: int) -> bool:
        return (
            i in self._gates
            or self.hang_at == i
            or (self.raise_at is not None and self.raise_at[0] == i)
        )


def _resolve_pos(pos: int, n: int, last: int, what: str) -> int:
    resolved = pos + n if pos < 0 else pos
    if not 0 <= resolved <= last:
        where = "after finish" if resolved == n and last < n else "outside the stream"
        raise ValueError(f"{what}: position {pos} is {where} ({n} chunk(s); positions 0..{last})")
    return resolved


async def _resolve_entry(entry: ScriptEntry, request: ModelRequest) -> Response:
    value: Any = entry
    if callable(value) and not isinstance(value, Response):
        value = value(request)
        if inspect.isawaitable(value):
            value = await value
    if isinstance(value, str):
        return respond.text(value)
    if not isinstance(value, Response):
        raise TypeError(
            f"a scripted response must be a Response or a str, got {type(value).__name__}"
        )
    return value


def _last_message(snapshot: Mapping[str, Any]) -> str:
    messages = snapshot.get("messages") or []
    if not messages:
        return "none"
    last = messages[-1]
    texts = [
        b.get("text", b.get("type", "?")) for b in last.get("content", []) if isinstance(b, dict)
    ]
    summary = " ".join(str(t) for t in texts)
    if len(summary) > 60:
        summary = summary[:57] + "..."
    return f"{last.get('role', '?')}: {summary!r}"
