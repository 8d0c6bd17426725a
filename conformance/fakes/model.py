"""The fake model: a ``ModelAdapter`` that plays back a script of responses.

One scripted response per model call, in order::

    from conformance.fakes import FakeModel, respond

    model = FakeModel([
        respond.text("Let me look.") + respond.tool_call("search", {"q": "cats"}, fragments=3),
        respond.text("Found 3 cats.", deltas=2).usage(120, 9),
        respond.text("a long essay ...").truncate(3),          # finish max-tokens
        respond.error("overloaded", code="OVERLOADED"),        # finish error
        respond.hang(),                                        # until the step is aborted
        respond.text("steered").hook(lambda: agent.steer("S")),  # code run inside the stream
        lambda request: respond.text(f"{len(request['messages'])} messages"),
    ], default=respond.text("ok"))                             # past the script: "ok"

A response is an immutable value built from blocks (``text``, ``reasoning``, ``tool_call``,
raw ``chunks``) joined with ``+``, then refined with methods that each return a new response:
``usage``, ``finish``, ``no_finish``, ``truncate``, ``timing``, ``gate``, ``hang``, ``raises``,
``hook``, ``on_abort``. ``Response.build()`` shows the exact chunks it streams.

Streaming follows the adapter contract of ``reference_loop.protocols.ModelAdapter``: block chunks,
then ``usage`` (when given), then ``finish``, nothing after it. Every chunk is preceded by one
suspension of the stream (``first`` seconds of virtual time before the first chunk, ``between``
before each later one; ``0`` is a bare yield to the event loop, ``None`` no suspension at all),
and the request's abort signal is honoured at each of those points. Faults, hooks and gates happen
at a *position* ``k``: the point just before chunk ``k`` is yielded (negative ``k`` counts from
the end, so ``before=-1`` is just before ``finish``). At a position the stream waits on its
gates, then sleeps its delay, then checks the abort signal, then runs its hooks, then hangs or
raises if told to, then yields.

The model records every request (a deep copy without the signal) and, past the end of its
script, either answers ``default`` or fails clearly (``ScriptExhausted``, raised from the stream
and kept in ``problems()``); with ``assert_all_used()`` or ``strict=True`` (checked by the
scenario engine) unused responses are a problem too. ``max_calls`` guards against a loop that
never stops stepping: calls beyond it park until their step is aborted. Nothing here reads a
clock or randomness: the same script streams the same chunks.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import copy
import hashlib
import inspect
import json
import re
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from dataclasses import dataclass, field, replace
from typing import Any, Literal, NoReturn, TypeAlias, cast

import simulator
from cassettes.toolspecs import ENTRY_FIELDS
from reference_loop import vocabulary as v
from reference_loop.abort import AbortController, AbortError, AbortSignal
from reference_loop.protocols import ModelRequest

from .errors import FakeError, ScriptExhausted, UnusedResponses, fresh
from .gate import wait_abortable

__all__ = ["FakeModel", "Response", "ScriptEntry", "relayed", "respond"]

_RELAYED: contextvars.ContextVar[bool] = contextvars.ContextVar("loopkit_relayed_stream", default=False)


@contextlib.contextmanager
def relayed() -> Iterator[None]:
    """Streams opened inside are read by a relay (the wire connection, which forwards each chunk
    to a loop in another process at once), not by the loop: a chunk they yield may still be in
    flight when the step's signal fires, so ``model/aborted`` says nothing of what was handed over."""
    token = _RELAYED.set(True)
    try:
        yield
    finally:
        _RELAYED.reset(token)

OnAbort: TypeAlias = Literal["finish", "return", "raise", "fail", "ignore"]


class StreamClosed(ConnectionError):
    """What an ``on_abort("fail")`` stream raises once the step's signal fired: an error of the
    client's own, not an abort error (an HTTP client whose connection the abort closed raises
    its read error). The step's own signal fired, so the turn still ends ``aborted``, not
    ``error`` (FINISH-1, CANCEL-MID, ABORT-1)."""

    code = "E_CLOSED"

    def __init__(self, message: str = "the connection was closed while reading the response") -> None:
        super().__init__(message)


def _observe(loop: Any, kind: str, **data: Any) -> None:
    """Record an observable event in the timeline of the simulation ``loop`` belongs to, when it
    is still the running one (a no-op outside one: a stream finalised by the garbage collector
    during a later run must not write into that run)."""
    if loop is not None and simulator.current_loop() is loop:
        simulator.observe(kind, **data)


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
class BlockPart:
    """One content block of a response: its kind, its content (the text, or a tool call's raw
    arguments), how it streams (``pieces``: a count, or the pieces themselves), a tool call's
    name and id."""

    kind: Literal["text", "reasoning", "tool-call"]
    content: str  # the text, or the tool call's raw arguments
    pieces: int | tuple[str, ...] = 1
    name: str = ""
    id: str | None = None


@dataclass(frozen=True)
class RawPart:
    """A raw chunk streamed verbatim (``respond.chunks``)."""

    chunk: Mapping[str, Any]


Part: TypeAlias = BlockPart | RawPart


class _Infer:
    def __repr__(self) -> str:
        return "INFER"


_INFER = _Infer()


@dataclass(frozen=True)
class Response:
    """One scripted model response. Immutable: every method returns a modified copy."""

    parts: tuple[Part, ...] = ()
    usage_value: v.Usage | None = None
    finish_value: v.FinishReason | _Infer | None = _INFER
    truncate_at: int | None = None
    first: float | None = 0.0
    between: float | None = 0.0
    gates: tuple[tuple[int, Any], ...] = ()
    hang_at: int | None = None
    raise_at: tuple[int, BaseException] | None = None
    raise_on_call: bool = False
    """``raise_at``'s error is raised by ``stream()`` itself, synchronously, before it returns a
    stream (FINISH-2: an adapter may fail by raising from ``stream()``, as a client validating
    its request or finding no connection does), not by the stream's first read."""
    hooks: tuple[tuple[int, Callable[[], object]], ...] = ()
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
        for name in ("gates", "hooks"):
            if name in changes:
                changes[name] = getattr(self, name) + getattr(other, name)
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

    def hook(self, fn: Callable[[], object], before: int = 0) -> Response:
        """Call ``fn()`` synchronously at position ``before`` (default: before the first chunk),
        inside the stream: code that acts while the model is streaming (a steer, a cancel)."""
        return self._with(hooks=(*self.hooks, (before, fn)))

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
        on_call: bool = False,
    ) -> Response:
        """Raise from the stream at a position (default 0: before any chunk); ``on_call``: from
        ``stream()`` itself, synchronously, before any stream is returned (no position then).

        ``error`` is a message (raised as ``FakeError`` with ``code`` when given), an
        exception instance or class.
        """
        if on_call and (before is not None or after is not None):
            raise ValueError("a raise on call has no position: give on_call=True alone")
        if isinstance(error, str):
            exc: BaseException = FakeError(error, code)
        elif isinstance(error, type):
            exc = error()
        else:
            exc = error
        if code is not None and not isinstance(error, str):
            exc.code = code  # type: ignore[attr-defined]
        if on_call:
            return self._with(raise_at=(0, exc), raise_on_call=True)
        return self._with(raise_at=(_position(before, after), exc))

    def on_abort(self, mode: OnAbort) -> Response:
        """What the stream does once the abort signal fired: ``finish`` (yield ``finish{aborted}``,
        the default), ``return`` (end silently), ``raise`` (raise ``AbortError``), ``fail``
        (raise an error of its own, :class:`StreamClosed`, as a client library whose connection
        the abort closed does) or ``ignore`` (nothing: the stream never looks at the signal,
        its delays and hangs last as long as they would; the loop has to stop waiting for it,
        ABORT-1, CANCEL-MID)."""
        if mode not in ("finish", "return", "raise", "fail", "ignore"):
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
            if isinstance(part, RawPart):
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
        return Response(parts=(BlockPart("tool-call", args, pieces, name=name, id=id),))

    def chunks(self, *chunks: Mapping[str, Any]) -> Response:
        """Raw chunks, streamed verbatim (no ``finish`` is added unless you set one).

        An escape hatch for malformed or unusual streams (deltas after ``block-end``, a block
        that never closes, ...): you are responsible for the contract here.
        """
        return Response(parts=tuple(RawPart(dict(c)) for c in chunks), finish_value=None)

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
        on_call: bool = False,
    ) -> Response:
        """A stream that raises before its first chunk (``on_call``: ``stream()`` itself raises)."""
        return Response().raises(error, code=code, on_call=on_call)

    def hang(self) -> Response:
        """A stream that yields nothing until the request's signal fires, then ``finish{aborted}``."""
        return Response().hang()


def _block(kind: Literal["text", "reasoning"], text: str | Sequence[str], deltas: int) -> BlockPart:
    if isinstance(text, str):
        return BlockPart(kind, text, deltas)
    pieces = tuple(text)
    return BlockPart(kind, "".join(pieces), pieces)


respond = _Respond()

_RUNAWAY = respond.hang()
"""What a call beyond ``max_calls`` answers."""

ScriptEntry: TypeAlias = (
    Response | str | Callable[[ModelRequest], "Response | str | Awaitable[Response | str]"]
)


# --------------------------------------------------------------------------- the model


def _copy(value: Any) -> Any:
    """A deep copy of plain data (dicts, lists, tuples of JSON values), fast; anything else
    through ``copy.deepcopy``."""
    kind = type(value)
    if kind is str or kind is int or kind is float or kind is bool or value is None:
        return value
    if kind is dict:
        return {k: _copy(v) for k, v in value.items()}
    if kind is list:
        return [_copy(v) for v in value]
    if kind is tuple:
        return tuple(_copy(v) for v in value)
    return copy.deepcopy(value)


_DIGEST_JSON = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
"""The encoder of ``history_digest``, built once (``json.dumps`` with options builds one per call)."""


def _digest_encoder() -> Callable[[Any, int], Any] | None:
    """``_DIGEST_JSON``'s own C encoder (what its ``encode`` builds per call), built once: its
    circular-reference markers are empty again after every encoding that succeeds, and a
    failed one builds it anew. ``None`` without the C accelerator."""
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:
        return None
    enc = _DIGEST_JSON
    return make({}, enc.default, json.encoder.encode_basestring, None, enc.key_separator,
                enc.item_separator, enc.sort_keys, enc.skipkeys, enc.allow_nan)


_DIGEST_C = _digest_encoder()


def history_digest(messages: Any) -> str:
    """A short digest of a request's messages (canonical JSON): what an oracle compares with the
    history the session log derives (LOG-7) without storing the whole history in the timeline."""
    global _DIGEST_C
    try:
        if _DIGEST_C is not None and type(messages) is not str:
            text = "".join(_DIGEST_C(messages, 0))
        else:
            text = _DIGEST_JSON.encode(messages)
    except (TypeError, ValueError):
        _DIGEST_C = _digest_encoder()
        return "unserialisable"
    except BaseException:
        _DIGEST_C = _digest_encoder()
        raise
    return hashlib.sha1(text.encode()).hexdigest()[:16]


def _chunk_copy(chunk: Any) -> Any:
    """A chunk's own copy: flat fields shared (immutable), nested blocks and reasons copied."""
    out = dict(chunk)
    for key, value in out.items():
        if type(value) is dict:
            out[key] = _copy(value)
    return out


def _snapshot(request: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in sorted(request):
        if key == "signal":
            continue
        try:
            out[key] = _copy(request[key])
        except Exception:  # not copyable: keep a description, never the live object
            out[key] = f"<{type(request[key]).__name__}>"
    return out


class FakeModel:
    """A ``ModelAdapter`` that streams its script, one response per ``stream()`` call.

    ``requests`` holds a deep copy of every request (without the signal), ``outcomes`` how each
    call ended (the finish kind, ``aborted``, ``raised``, ``exhausted``, ``ended`` without a
    finish chunk, ``cancelled`` with its task, or ``closed`` when the consumer stopped early).
    ``problems()`` lists what a test should fail on: calls past the end of the script, and with
    ``strict=True`` unused responses. With ``edits_requests=True`` it overwrites every text of
    each request's messages once recorded, as an adapter converting a request in place may (a
    loop whose log or history shares those objects shows it).
    """

    def __init__(
        self,
        script: Iterable[ScriptEntry] = (),
        *,
        name: str = "fake",
        strict: bool = False,
        observe: bool = True,
        default: ScriptEntry | None = None,
        max_calls: int | None = None,
        on_request: Callable[[], object] | None = None,
        edits_requests: bool = False,
    ) -> None:
        self.name = name
        self.edits_requests = edits_requests
        self.strict = strict
        self.observe = observe
        self.script: list[ScriptEntry] = list(script)
        self.default = default
        """What a call past the end of the script answers (``None``: ``ScriptExhausted``)."""
        self.max_calls = max_calls
        """Calls beyond this many park until their step is aborted, then finish ``aborted``: a
        loop that never stops stepping would otherwise spin forever in virtual time."""
        self.on_request = on_request
        self.requests: list[dict[str, Any]] = []
        self.signals: list[Any] = []
        self.outcomes: list[str] = []
        self.handed_at_abort: dict[int, int] = {}
        """Call number -> how many chunks its stream had yielded when the step's signal fired (LOG-3:
        the loop logs each); a call whose signal never fired, or a relayed one, is absent."""
        self.exhausted: list[ScriptExhausted] = []
        self.raised: list[BaseException] = []
        """The errors its streams raised as scripted (each a fresh copy of the script's, marked:
        ``errors.mark``), in order: the objects an ``agent/error`` announcement must carry (ERR-9)."""
        self._next = 0
        self._tool_ids = 0

    @property
    def runaway(self) -> bool:
        """Whether the model was called more than ``max_calls`` times."""
        return self.max_calls is not None and len(self.requests) > self.max_calls

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

    def _prepared(self, response: Response) -> tuple[list[v.Chunk], _Faults]:
        """The chunks and fault positions of ``response``, built once per response value when
        no tool call needs an id from this model's counter."""
        cached = response.__dict__.get("_prepared")
        if cached is not None:
            return cached
        needs_ids = any(isinstance(p, BlockPart) and p.kind == "tool-call" and p.id is None for p in response.parts)
        chunks = response.build(self._next_tool_id)
        prepared = (chunks, _Faults(response, chunks))
        if not needs_ids:
            object.__setattr__(response, "_prepared", prepared)
        return prepared

    def stream(self, request: ModelRequest) -> AsyncIterator[v.Chunk]:
        """Record the request and return the stream of the next scripted response."""
        snapshot = _snapshot(request)
        self.requests.append(snapshot)
        self.signals.append(request.get("signal"))
        call = len(self.requests)
        entry: ScriptEntry | None = None
        error: ScriptExhausted | None = None
        if self.max_calls is not None and call > self.max_calls:
            entry = _RUNAWAY
        elif self._next < len(self.script):
            entry = self.script[self._next]
        elif self.default is not None:
            entry = self.default
        else:
            error = ScriptExhausted(
                f"fake model {self.name!r}: call #{call} but the script has only "
                f"{len(self.script)} response(s) (last message: {_last_message(snapshot)})"
            )
            self.exhausted.append(error)
        self._next += 1
        loop = simulator.current_loop()
        # chunks yielded to the loop so far (``model/aborted`` says how many, LOG-3), unless relayed
        handed: list[int] | None = None if _RELAYED.get() else [0]
        if self.observe:
            _observe(
                loop,
                "model/request",
                model=self.name,
                call=call,
                messages=len(snapshot.get("messages", ())),
                history=history_digest(snapshot.get("messages", ())),
                **_request_extras(snapshot, self.name),
            )
        raising = entry.raise_at if isinstance(entry, Response) and entry.raise_on_call else None
        if raising is None:  # a call that raises returns no stream: no abort to watch
            _watch_abort(loop if self.observe else None, request.get("signal"), self.name, call, handed,
                         self.handed_at_abort)
        if self.on_request is not None:
            self.on_request()
        if raising is not None:
            self._raise_on_call(raising[1], call, loop)
        if isinstance(entry, Response) and entry.abort_mode in ("raise", "fail"):
            early = _early_signal(request.get("signal"))
            if early is not None:  # the stream's waits hear the abort before the loop does
                request = cast(ModelRequest, {**request, "signal": early})
        if not self.edits_requests:
            return self._play(request, call, entry, error, loop, handed)
        # The adapter owns the request now and edits its messages in place, as an adapter
        # converting them to a provider's format may: the loop's log and the next step's history
        # must not change with them (LOG-1, LOG-7). Responses are resolved on the snapshot.
        played = cast(ModelRequest, {**snapshot, "signal": request.get("signal")})  # the early signal, if any
        _edit_messages(request)
        return self._play(played, call, entry, error, loop, handed)

    def _raise_on_call(self, error: BaseException, call: int, loop: Any) -> NoReturn:
        """``stream()`` raising ``error`` itself (FINISH-2), recorded as a stream that raised
        before its first chunk is."""
        raised = fresh(error)
        self.raised.append(raised)
        self.outcomes.append("raised")
        if self.observe:
            _observe(loop, "model/done", model=self.name, call=call, outcome="raised", chunks=0, on_call=True,
                     **_raised_fields(raised))
        raise raised

    async def _play(
        self,
        request: ModelRequest,
        call: int,
        entry: ScriptEntry | None,
        error: ScriptExhausted | None,
        loop: Any,
        handed: list[int] | None,
    ) -> AsyncIterator[v.Chunk]:
        outcome = "closed"
        i = 0
        unread = 0  # chunks left when the loop closed the stream early (LOOP-5: each is logged)
        chunks: list[v.Chunk] = []
        usage: Any = None  # the last usage chunk streamed (ASM-4: the step's usage)
        raised: BaseException | None = None  # the scripted raise, once made
        signalled = False  # the stream stopped at the step's abort signal
        fails_on_abort = isinstance(entry, Response) and entry.abort_mode == "fail"
        signal: Any = None
        try:
            if error is not None:
                outcome = "exhausted"
                raise error
            assert entry is not None
            response = await _resolve_entry(entry, request)
            signal = request.get("signal") if response.abort_mode != "ignore" else None
            chunks, faults = self._prepared(response)
            while True:
                if i < len(chunks) or faults.pending(i):
                    delay = response.first if i == 0 else response.between
                    for gate in faults.gates(i):
                        if not await wait_abortable(
                            signal, gate=gate, task_name=f"{self.name}:gate"
                        ):
                            break
                    if (signal is None or not signal.aborted) and i < len(chunks):
                        if delay == 0:  # the common case: one bare suspension, inline
                            await asyncio.sleep(0)
                        elif delay is not None:
                            await wait_abortable(signal, delay=delay)
                    if signal is not None and signal.aborted:
                        outcome, signalled = "aborted", True
                        if response.abort_mode == "raise":
                            raise AbortError(signal.reason if signal.reason is not None else "aborted")
                        if response.abort_mode == "fail":
                            raise StreamClosed()
                        if response.abort_mode == "finish" and not _finished(chunks[:i]):
                            yield v.finish("aborted")
                        return
                    for fn in faults.hooks(i):
                        fn()
                    if faults.hang_at == i:
                        await wait_abortable(signal, forever=True)
                        continue  # the signal fired: handled at the top of the loop
                    if faults.raise_at is not None and faults.raise_at[0] == i:
                        outcome = "raised"
                        raised = fresh(faults.raise_at[1])
                        self.raised.append(raised)
                        raise raised
                if i >= len(chunks):
                    break
                chunk = _chunk_copy(chunks[i])  # the consumer's own copy: a cached list is shared
                i += 1
                kind = chunk.get("type")
                if kind == "finish":
                    outcome = chunk["reason"]["kind"]
                elif kind == "usage":
                    usage = chunk.get("usage")
                if handed is not None:
                    handed[0] = i
                try:
                    yield chunk
                except GeneratorExit:
                    unread = len(chunks) - i  # the loop stopped reading here, and closed the stream
                    raise
            if outcome == "closed":
                outcome = "ended"
        except asyncio.CancelledError:
            outcome = "cancelled"
            if not signalled and not (signal is not None and signal.aborted):
                unread = len(chunks) - i  # cancelled by its reader (a bridge whose loop stopped reading)
            if fails_on_abort and signal is not None and signal.aborted:
                # a client whose connection the abort closed turns the cancelled read into its own error
                outcome, signalled = "aborted", True
                raise StreamClosed() from None
            raise
        except Exception:
            if outcome == "closed":  # a response function raised, or a foreign gate failed
                outcome = "raised"
            raise
        finally:
            self.outcomes.append(outcome)
            if self.observe:
                # ``chunks``: how many the loop was given (LOG-3/LOOP-5: each is logged)
                _observe(loop, "model/done", model=self.name, call=call, outcome=outcome, chunks=i,
                         **({} if usage is None else {"usage": copy.deepcopy(usage)}), **_raised_fields(raised),
                         **({"signalled": True} if signalled else {}), **({"unread": unread} if unread else {}))


def _watch_abort(loop: Any, signal: Any, model: str, call: int, handed: list[int] | None,
                 seen: dict[int, int]) -> None:
    """When the request's signal fires, note how many chunks the stream had yielded to the loop
    by then (``seen[call]``: each is logged, LOG-3) and, observing (``loop`` given), record
    ``model/aborted`` (with that ``handed`` count), synchronously, inside the loop's ``abort()`` /
    ``cancel()`` / ``dispose()`` as an adapter's own listener on the signal runs: a listener on
    that world point acts there (an abort observer queueing work while the loop cancels, which a
    loop clearing its queues after the abort drops, CANCEL-1/MARKER-1)."""
    add = getattr(signal, "add_listener", None)
    if not callable(add) or getattr(signal, "aborted", False) or (loop is None and handed is None):
        return

    def fired(_reason: Any = None) -> None:
        if handed is not None:
            seen[call] = handed[0]
        if loop is not None:
            _observe(loop, "model/aborted", model=model, call=call, **({} if handed is None else {"handed": handed[0]}))

    add(fired)


def _early_signal(signal: Any) -> AbortSignal | None:
    """The step's signal as an HTTP client holding it sees it (``on_abort: raise``): a signal of
    the stream's own, fired by one listener registered on the step's signal when the request is
    made, before any the loop adds for its reads. A read pending at an abort thus fails first, as
    fetch's reader or an httpx stream does: the loop must still end the step ``aborted``
    (ABORT-1), not count the adapter's error as a failure. ``None`` when ``signal`` has no
    listeners to add."""
    if signal is None or not callable(getattr(signal, "add_listener", None)):
        return None
    relay = AbortController()
    signal.add_listener(relay.abort)
    return relay.signal


def _raised_fields(raised: BaseException | None) -> dict[str, Any]:
    """What a scripted raise told the loop (FINISH-2: the turn ends with its message and code)."""
    if raised is None:
        return {}
    code = getattr(raised, "code", None)
    return {"error": str(raised), **({"code": code} if isinstance(code, str) else {})}


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
        self._hooks: dict[int, list[Callable[[], object]]] = {}
        for pos, fn in response.hooks:
            self._hooks.setdefault(_resolve_pos(pos, n, last, "hook"), []).append(fn)
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

    def hooks(self, i: int) -> list[Callable[[], object]]:
        return self._hooks.get(i, [])

    def pending(self, i: int) -> bool:
        return (
            i in self._gates
            or i in self._hooks
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


_TOOL_ENTRY = tuple(sorted(key for key, _, _ in ENTRY_FIELDS))  # 0b's keys, read where --tools files are checked
"""The keys of a request's ``tools`` entry (0b, SVC-5)."""


REQUEST_KEYS = frozenset(("model", "messages", "system", "tools", "signal"))
"""0b's request keys; any other is one an ``agent/request`` listener added (ROUTED reads them)."""


def _request_extras(snapshot: Mapping[str, Any], name: str) -> dict[str, Any]:
    """What ``model/request`` records of a request besides its messages, when present: the
    system prompt and the names of the tools sent (SVC-5; the REQUEST oracle compares them with
    the agent's own prompt and the tools the world registered); the entries not of 0b's shape
    (``tools_shape``); the model the request names when it is not this fake's (``requested``:
    the loop called another adapter than the request names, LOOP-10); and the keys beyond 0b's
    (``extra``: a plugin's provider options). Recorded only when off, so
    a sound run's timeline is what it always was."""
    out: dict[str, Any] = {}
    system = snapshot.get("system")
    if system:
        out["system"] = system if isinstance(system, str) else repr(system)
    tools = snapshot.get("tools")
    if tools:
        names = [t.get("name") if isinstance(t, Mapping) else repr(t) for t in tools] if isinstance(tools, list) else [repr(tools)]
        out["tools"] = sorted(str(n) for n in names)
        shapes = [_tool_shape(t) for t in tools] if isinstance(tools, list) else [f"not a list: {type(tools).__name__}"]
        if any(shapes):
            out["tools_shape"] = [s for s in shapes if s]
    if snapshot.get("model") != name:
        out["requested"] = str(snapshot.get("model"))
    extra = sorted(str(k) for k in snapshot if k not in REQUEST_KEYS)
    if extra:
        out["extra"] = extra  # keys a plugin added (LOOP-10: the adapter receives them)
    return out


def _tool_shape(entry: Any) -> str | None:
    """What is wrong with one ``tools`` entry of a request (``None``: it has 0b's shape)."""
    if not isinstance(entry, Mapping):
        return f"an entry that is not an object: {type(entry).__name__}"
    keys = sorted(str(k) for k in entry)
    label = entry.get("name", "?")
    missing = [k for k in _TOOL_ENTRY if k not in entry]  # more keys than 0b's: not judged
    if missing:
        return f"{label}: no {', '.join(missing)} (its keys: {', '.join(keys)}; 0b: {', '.join(_TOOL_ENTRY)})"
    if not isinstance(entry["input_schema"], Mapping):
        return f"{label}: input_schema is a {type(entry['input_schema']).__name__}, not a JSON Schema object"
    return None


EDITED = "edited by the model adapter"


def _edit_messages(request: Any) -> None:
    """Overwrite every text of the request's messages in place, at any depth (a tool result's
    blocks too), and mark every object of a block's ``provider_data`` (see ``FakeModel.stream``):
    a loop whose log shares an object nested anywhere in its history shows it."""
    messages = request.get("messages") if isinstance(request, Mapping) else None
    if not isinstance(messages, list):
        return
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list):
            _edit_blocks(content)


def _edit_blocks(blocks: list[Any]) -> None:
    for block in blocks:
        if not isinstance(block, dict):
            continue
        if isinstance(block.get("text"), str):
            block["text"] = EDITED
        inner = block.get("content")
        if isinstance(inner, list):  # a tool result's blocks
            _edit_blocks(inner)
        data = block.get("provider_data")
        if isinstance(data, dict):
            _mark(data)


def _mark(value: Any) -> None:
    """Mark every object of an opaque value in place (an adapter converting it may)."""
    if isinstance(value, dict):
        for v in value.values():
            _mark(v)
        value[EDITED] = True
    elif isinstance(value, list):
        for v in value:
            _mark(v)


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
