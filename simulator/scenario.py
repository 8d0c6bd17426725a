"""Scenarios: a world (setup), actors acting at virtual times or on events, and checks.

A scenario runs under ``simulator.run`` with a strategy and a seed and yields a :class:`Trace`:
the schedule, the timeline of observable events with virtual timestamps, the outcome and the
failed checks, as canonical JSON (``trace.to_json()``: the same text, byte for byte, for the same
scenario, strategy and seed)::

    from simulator.scenario import Scenario, scenario, expect_event

    @scenario(name="cancel-during-tool", checks=[expect_event("tool/done", outcome="aborted")])
    async def cancel_during_tool(ctx):
        model = ctx.model(["calling", respond.tool_call("slow"), "done"])
        slow = ctx.tool("slow", result="late", latency=10.0)
        ctx.at(5.0, lambda: ctx.state["controller"].abort("user"))
        ...                                   # drive the code under test

    trace = cancel_during_tool.run(seed=3)
    trace.assert_ok()

The module is generic: it knows the simulator, the fake model and tools (and, through
``ctx.cassette``, recorded LLM cassettes, imported only when asked for), and nothing of any agent
implementation. Whatever sits above (the conformance adapter, YAML scenario files) plugs into the
context: ``ctx.state`` (also reachable as attributes: ``ctx.agent = ...`` stores
``ctx.state["agent"]``), ``ctx.on(kind, fn)`` listeners on observed events, ``ctx.on_teardown(fn)``,
``ctx.check(fn)`` and ``ctx.register(fake)``.

A run goes: setup functions (in order), the body (the decorated function), then it waits for every
actor that was scheduled or triggered (and every task started with ``ctx.spawn``), then runs the
teardown functions, and waits for actors again. Actors registered with ``after`` whose event never
happens are listed in ``trace.untriggered`` (a failure only when ``required=True``). Then the
checks run over the trace, and the fakes' problems (calls past the end of a script, and unused
responses in strict mode) are added as failures.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

import simulator
from simulator.fake_llm import FakeModel, Gate, ScriptEntry
from simulator.fake_tools import FakeTool, ToolBox
from simulator.result import RunResult
from simulator.schedule import Schedule

if TYPE_CHECKING:  # the simulator does not import ``cassettes`` at run time (see ctx.cassette)
    from cassettes.model import CassetteModel

__all__ = [
    "Check",
    "Scenario",
    "ScenarioContext",
    "ScenarioFailed",
    "Trace",
    "event_before",
    "expect_event",
    "expect_no_event",
    "expect_outcome",
    "scenario",
]

TRACE_FORMAT = "loopkit-trace/1"

Event: TypeAlias = dict[str, Any]
Where: TypeAlias = Mapping[str, Any] | Callable[[Event], bool] | None
ActorFn: TypeAlias = Callable[..., Any]
CheckFn: TypeAlias = Callable[["Trace"], Any]
SetupFn: TypeAlias = Callable[["ScenarioContext"], Any]


class ScenarioFailed(AssertionError):
    """Raised by ``Trace.assert_ok()`` and by an in-run check (``Scenario.main(checks=True)``)."""


# --------------------------------------------------------------------------- JSON helpers


def _jsonable(value: Any) -> Any:
    """A JSON-safe, deterministic copy: tuples become lists, sets sorted lists, unknown objects
    ``"<TypeName>"`` (never a ``repr`` with a memory address), exceptions ``"Type: message"``."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, set | frozenset):
        items = [_jsonable(v) for v in value]
        return sorted(items, key=lambda x: json.dumps(x, sort_keys=True))
    if isinstance(value, BaseException):
        return f"{type(value).__name__}: {value}"
    to_dict = getattr(value, "to_dict", None)
    if callable(to_dict):
        return _jsonable(to_dict())
    return f"<{type(value).__name__}>"


def _dumps(obj: Any) -> str:
    return json.dumps(
        obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )


def _us(seconds: float) -> int:
    """Virtual seconds as integer microseconds (traces carry no floats from the clock)."""
    return round(seconds * 1_000_000)


def _matches(event: Event, kind: str | None, where: Where) -> bool:
    if kind is not None and event.get("kind") != kind:
        return False
    if where is None:
        return True
    if callable(where):
        return bool(where(event))
    return all(k in event and event[k] == v for k, v in where.items())


def _describe_where(kind: str | None, where: Where) -> str:
    text = f"kind={kind!r}" if kind is not None else "any kind"
    if where is None:
        return text
    if callable(where):
        return f"{text} matching {getattr(where, '__qualname__', 'a predicate')}"
    return f"{text} with " + ", ".join(f"{k}={v!r}" for k, v in where.items())


async def _maybe_await(value: Any) -> Any:
    if inspect.isawaitable(value):
        return await value
    return value


def _call_actor(fn: Any, event: Event | None) -> Any:
    """Call an actor with the triggering event when it takes an argument."""
    if inspect.iscoroutine(fn):
        return fn
    if event is not None and _takes_argument(fn):
        return fn(event)
    return fn()


def _takes_argument(fn: Callable[..., Any]) -> bool:
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return False
    return any(
        p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL) for p in params
    )


def _name_of(fn: Any, fallback: str) -> str:
    name = getattr(fn, "__name__", None) or getattr(getattr(fn, "cr_code", None), "co_name", None)
    return name if name and name != "<lambda>" else fallback


# --------------------------------------------------------------------------- the trace


@dataclass
class Trace:
    """What one scenario run did: JSON-serialisable (``to_json()``), comparable byte for byte.

    ``timeline`` entries are ``{"t_us": virtual microseconds, "kind": ..., **data}``;
    ``failures`` are ``{"check": name, "message": text}``. ``result`` (the ``RunResult``, with the
    traceback) and ``context`` (the ``ScenarioContext``) are kept for inspection, not serialised.
    """

    scenario: str
    seed: int
    strategy: str
    mode: str
    outcome: str
    error: str | None
    virtual_time_us: int
    steps: int
    schedule: dict[str, Any]
    timeline: list[Event]
    failures: list[dict[str, str]] = field(default_factory=list)
    untriggered: list[str] = field(default_factory=list)
    pending: list[dict[str, Any]] = field(default_factory=list)
    unretrieved: list[dict[str, Any]] = field(default_factory=list)
    result: RunResult | None = field(default=None, repr=False, compare=False)
    context: ScenarioContext | None = field(default=None, repr=False, compare=False)

    # ---------------------------------------------------------------- verdict

    @property
    def ok(self) -> bool:
        """Completed, and no check failed."""
        return self.outcome == "completed" and not self.failures

    def failure_messages(self) -> list[str]:
        return [f"{f['check']}: {f['message']}" for f in self.failures]

    def summary(self) -> str:
        lines = [
            f"scenario {self.scenario!r} (strategy {self.strategy}, seed {self.seed}): {self.outcome}"
        ]
        if self.error:
            lines.append(f"  error: {self.error}")
        for p in self.pending:
            lines.append(f"  pending: {p['task']} ({p['coro']})")
        for f in self.failures:
            lines.append(f"  failed check {f['check']}: {f['message']}")
        return "\n".join(lines)

    def assert_ok(self) -> None:
        """Raise ``ScenarioFailed`` with a summary (and the run's traceback) unless ``ok``."""
        if self.ok:
            return
        text = self.summary()
        if self.result is not None and self.result.error is not None:
            text += "\n" + self.result.traceback
        raise ScenarioFailed(text)

    # ---------------------------------------------------------------- queries

    def events(self, kind: str | None = None, where: Where = None, **fields: Any) -> list[Event]:
        """Timeline events of ``kind`` whose fields equal ``fields`` (and match ``where``)."""
        out = [e for e in self.timeline if _matches(e, kind, fields or None)]
        return [e for e in out if where is None or _matches(e, None, where)]

    def first(self, kind: str, **fields: Any) -> Event | None:
        found = self.events(kind, **fields)
        return found[0] if found else None

    def kinds(self) -> list[str]:
        return [e["kind"] for e in self.timeline]

    def schedule_object(self) -> Schedule:
        """The schedule as a ``simulator.Schedule`` (for replay)."""
        return Schedule.from_dict(self.schedule, source=f"trace of {self.scenario!r}")

    # ---------------------------------------------------------------- JSON

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": TRACE_FORMAT,
            "scenario": self.scenario,
            "seed": self.seed,
            "strategy": self.strategy,
            "mode": self.mode,
            "outcome": self.outcome,
            "error": self.error,
            "virtual_time_us": self.virtual_time_us,
            "steps": self.steps,
            "schedule": self.schedule,
            "timeline": self.timeline,
            "failures": self.failures,
            "untriggered": self.untriggered,
            "pending": self.pending,
            "unretrieved": self.unretrieved,
        }

    def to_json(self) -> str:
        """Canonical JSON (sorted keys, no whitespace, no NaN): stable across runs and processes."""
        return _dumps(self.to_dict())

    @classmethod
    def from_json(cls, text: str) -> Trace:
        """Load a trace written by ``to_json()`` (without ``result`` and ``context``)."""
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"trace: not JSON ({exc.msg} at line {exc.lineno})") from None
        if not isinstance(data, dict) or data.get("format") != TRACE_FORMAT:
            raise ValueError(f"trace: not a loopkit trace (expected format {TRACE_FORMAT!r})")
        fields_ = {k: data[k] for k in data if k != "format"}
        try:
            return cls(**fields_)
        except TypeError as exc:
            raise ValueError(f"trace: malformed ({exc})") from None


# --------------------------------------------------------------------------- checks


@dataclass(frozen=True)
class Check:
    """A named predicate over a ``Trace``: it passes by returning ``None`` or ``True``, fails by
    returning ``False`` or a message, or by raising (``AssertionError``'s text is the message)."""

    fn: CheckFn
    name: str

    def evaluate(self, trace: Trace) -> str | None:
        """The failure message, or ``None`` when the check passes."""
        try:
            verdict = self.fn(trace)
        except AssertionError as exc:
            return str(exc) or "assertion failed"
        except Exception as exc:
            return f"check raised {type(exc).__name__}: {exc}"
        if verdict is None or verdict is True:
            return None
        if verdict is False:
            return "check returned False"
        if isinstance(verdict, str):
            return verdict or "check failed"
        return f"check returned {verdict!r}"


def _as_check(fn: CheckFn | Check, name: str | None = None) -> Check:
    if isinstance(fn, Check):
        return fn if name is None else Check(fn.fn, name)
    return Check(fn, name or _name_of(fn, "check"))


def expect_event(kind: str, *, count: int | None = None, **fields: Any) -> Check:
    """At least one event of ``kind`` with these fields (exactly ``count`` when given)."""

    def check(trace: Trace) -> str | None:
        n = len(trace.events(kind, **fields))
        desc = _describe_where(kind, fields or None)
        if count is None and n == 0:
            return f"no event {desc} in the timeline (kinds seen: {sorted(set(trace.kinds()))})"
        if count is not None and n != count:
            return f"expected {count} event(s) {desc}, found {n}"
        return None

    return Check(check, f"expect_event({kind})")


def expect_no_event(kind: str, **fields: Any) -> Check:
    """No event of ``kind`` with these fields."""

    def check(trace: Trace) -> str | None:
        found = trace.events(kind, **fields)
        if found:
            return f"unexpected event {_describe_where(kind, fields or None)} at t_us={found[0]['t_us']}"
        return None

    return Check(check, f"expect_no_event({kind})")


def event_before(first: str, then: str) -> Check:
    """The first ``first`` event comes before the first ``then`` event (both must happen)."""

    def check(trace: Trace) -> str | None:
        kinds = trace.kinds()
        if first not in kinds or then not in kinds:
            missing = [k for k in (first, then) if k not in kinds]
            return f"missing event(s) {missing}"
        if kinds.index(first) > kinds.index(then):
            return f"{first!r} happened after {then!r}"
        return None

    return Check(check, f"event_before({first}, {then})")


def expect_outcome(outcome: str) -> Check:
    """The run ended with ``outcome`` (``completed``, ``failed``, ``deadlock``, ``budget-exceeded``)."""

    def check(trace: Trace) -> str | None:
        if trace.outcome != outcome:
            detail = f" ({trace.error})" if trace.error else ""
            return f"expected outcome {outcome!r}, got {trace.outcome!r}{detail}"
        return None

    return Check(check, f"expect_outcome({outcome})")


# --------------------------------------------------------------------------- actors


@dataclass
class _Actor:
    name: str
    fn: ActorFn
    at: float | None = None
    kind: str | None = None
    where: Where = None
    immediate: bool = False
    required: bool = False
    every: bool = False
    triggered: int = 0
    dispose: Callable[[], None] | None = None


# --------------------------------------------------------------------------- the context


class ScenarioContext:
    """What setup functions, the body and actors get: the world under construction.

    Unknown attributes live in ``state``: ``ctx.agent = a`` is ``ctx.state["agent"] = a``.
    """

    def __init__(self, scenario: Scenario, *, seed: int = 0, strategy: str = "fifo") -> None:
        object.__setattr__(self, "_frozen", False)
        self.scenario = scenario
        self.name = scenario.name
        self.seed = seed
        self.strategy = strategy
        self.state: dict[str, Any] = {}
        #: the scenario's models by name: fakes (``model``) and recorded ones (``cassette``)
        self.models: dict[str, FakeModel | CassetteModel] = {}
        self.tools = ToolBox()
        self.gates: dict[str, Gate] = {}
        self.checks: list[Check] = []
        self.failures: list[dict[str, str]] = []
        self._fakes: list[Any] = []
        self._actors: list[_Actor] = []
        self._listeners: list[tuple[str | None, Where, Callable[[Event], Any]]] = []
        self._tasks: list[asyncio.Task[Any]] = []
        self._teardown: list[Callable[[], Any]] = []
        self._running = False
        self._frozen = True

    # attributes beyond the built-in ones go to ``state``
    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            return self.__dict__["state"][name]
        except KeyError:
            raise AttributeError(
                f"scenario context has no attribute or state entry {name!r}"
            ) from None

    def __setattr__(self, name: str, value: Any) -> None:
        if not self.__dict__.get("_frozen") or name in self.__dict__ or name.startswith("_"):
            object.__setattr__(self, name, value)
        else:
            self.state[name] = value

    # ---------------------------------------------------------------- world

    def model(
        self, script: Iterable[ScriptEntry] = (), *, name: str = "fake", strict: bool | None = None
    ) -> FakeModel:
        """Create and register a ``FakeModel`` (strict when the scenario is, unless told)."""
        if name in self.models:
            raise ValueError(f"scenario {self.name!r}: a model named {name!r} already exists")
        fake = FakeModel(
            script, name=name, strict=self.scenario.strict if strict is None else strict
        )
        self.models[name] = fake
        self._fakes.append(fake)
        return fake

    def cassette(
        self,
        path: str | Path,
        *,
        name: str | None = None,
        strict: bool | None = None,
        **options: Any,
    ) -> CassetteModel:
        """Create and register a model replaying the recorded LLM cassette at ``path``
        (``cassettes.model.CassetteModel``: the recorded provider traffic through the real
        adapter, the recorded gaps slept in virtual time). Use it wherever a fake model goes.

        ``name`` defaults to the file's stem; ``strict`` (default: the scenario's) also reports
        interactions never requested; ``options`` go to ``CassetteModel`` (``adapter``,
        ``allow_playback_repeats``, ``pace``). Its problems (a request the cassette cannot
        answer, a truncated recording, unplayed interactions when strict) fail the scenario
        like a fake model's. A missing or malformed file raises ``CassetteError`` here.
        """
        # Imported here: the simulator does not depend on the cassettes package at import time.
        from cassettes.model import CassetteModel

        name = name if name is not None else Path(path).stem
        if name in self.models:
            raise ValueError(f"scenario {self.name!r}: a model named {name!r} already exists")
        recorded = CassetteModel(
            path,
            name=name,
            strict=self.scenario.strict if strict is None else strict,
            **options,
        )
        self.models[name] = recorded
        self._fakes.append(recorded)
        return recorded

    def tool(self, name: str, result: Any = None, **kwargs: Any) -> FakeTool:
        """Create a ``FakeTool`` in ``ctx.tools`` (``result=None``: every call returns ``"ok"``)."""
        kwargs.setdefault("strict", self.scenario.strict)
        tool = FakeTool(name, result, **kwargs) if result is not None else FakeTool(name, **kwargs)
        return self.add_tool(tool)

    def add_tool(self, tool: FakeTool) -> FakeTool:
        self.tools.add(tool)
        self._fakes.append(tool)
        return tool

    def gate(self, name: str) -> Gate:
        """The gate called ``name`` (created on first use)."""
        if name not in self.gates:
            self.gates[name] = Gate(name)
        return self.gates[name]

    def register(self, fake: Any) -> Any:
        """Have the run fail on ``fake.problems()`` (any object with that method)."""
        self._fakes.append(fake)
        return fake

    # ---------------------------------------------------------------- time and events

    def now(self) -> float:
        """Virtual time in seconds."""
        return asyncio.get_running_loop().time()

    @property
    def sources(self) -> Any:
        from simulator.sources import current_sources

        return current_sources()

    @property
    def random(self) -> Any:
        """The run's seeded ``random.Random``."""
        return self.sources.random

    @property
    def timeline(self) -> list[Event]:
        """The events observed so far (``{"t": seconds, "kind": ..., **data}``; a copy)."""
        return simulator.current_timeline()

    def events(self, kind: str | None = None, where: Where = None) -> list[Event]:
        return [e for e in self.timeline if _matches(e, kind, where)]

    def observe(self, kind: str, **data: Any) -> None:
        """Record an observable event (JSON-safe copies of ``data``) in the timeline."""
        simulator.observe(kind, **{k: _jsonable(v) for k, v in data.items()})

    def on(
        self, kind: str | None, fn: Callable[[Event], Any], *, where: Where = None
    ) -> Callable[[], None]:
        """Call ``fn(event)`` synchronously for every later event of ``kind`` (``None``: all).
        Returns a disposer."""
        entry = (kind, where, fn)
        self._listeners.append(entry)

        def dispose() -> None:
            if entry in self._listeners:
                self._listeners.remove(entry)

        return dispose

    async def wait_for(self, kind: str, where: Where = None) -> Event:
        """Wait until an event of ``kind`` matching ``where`` has happened (at once if it has)."""
        for event in self.events(kind, where):
            return event
        fut: asyncio.Future[Event] = asyncio.get_running_loop().create_future()

        def hit(event: Event) -> None:
            if not fut.done():
                fut.set_result(event)

        dispose = self.on(kind, hit, where=where)
        try:
            return await fut
        finally:
            dispose()

    # ---------------------------------------------------------------- actors

    def at(self, t: float, fn: ActorFn, *, name: str | None = None) -> None:
        """Run ``fn`` (sync, async, or a coroutine) at virtual time ``t`` (seconds from the start),
        as a task named ``actor:<name>``."""
        actor = _Actor(name or _name_of(fn, f"at-{len(self._actors) + 1}"), fn, at=float(t))
        self._actors.append(actor)
        if self._running:
            self._start_timed(actor)

    def later(self, delay: float, fn: ActorFn, *, name: str | None = None) -> None:
        """``at(now + delay, fn)``."""
        self.at(self.now() + delay if self._running else delay, fn, name=name)

    def after(
        self,
        kind: str,
        fn: ActorFn,
        *,
        where: Where = None,
        name: str | None = None,
        immediate: bool = False,
        required: bool = False,
        every: bool = False,
    ) -> None:
        """Run ``fn`` once an event of ``kind`` matching ``where`` (a dict of field values, or a
        predicate over the event) has been observed; ``fn`` gets the event if it takes an argument.

        By default the actor runs as a new task (a scheduling point the strategy can explore);
        ``immediate=True`` runs a synchronous ``fn`` inline, inside the observing call. If the
        event already happened, the actor triggers at once. ``every=True`` triggers on each
        matching event; ``required=True`` fails the scenario if it never triggers.
        """
        if immediate and inspect.iscoroutinefunction(fn):
            raise ValueError("after(immediate=True) needs a synchronous function")
        actor = _Actor(
            name or _name_of(fn, f"after-{kind}"),
            fn,
            kind=kind,
            where=where,
            immediate=immediate,
            required=required,
            every=every,
        )
        self._actors.append(actor)
        if self._running:
            self._arm(actor)

    def spawn(self, fn: ActorFn, *, name: str | None = None) -> asyncio.Task[Any]:
        """Start ``fn`` now as a task the scenario waits for before it ends."""
        actor = _Actor(name or _name_of(fn, f"spawn-{len(self._tasks) + 1}"), fn)
        return self._start(actor, None, delay=None)

    def on_teardown(self, fn: Callable[[], Any]) -> None:
        """Run ``fn`` (sync or async) after the body and the actors, before the run ends."""
        self._teardown.append(fn)

    def pending_actors(self) -> list[asyncio.Task[Any]]:
        """The actor tasks (``at``, ``later``, ``after``, ``spawn``) started so far that have not
        finished yet, in the order they were started."""
        return [t for t in self._tasks if not t.done()]

    async def wait_actors(self) -> None:
        """Wait until no actor task is pending, including actors started while waiting (an
        actor's failure is recorded by the context, not raised here)."""
        while True:
            pending = self.pending_actors()
            if not pending:
                return
            await asyncio.gather(*pending, return_exceptions=True)

    # ---------------------------------------------------------------- checks

    def check(self, fn: CheckFn | Check, name: str | None = None) -> None:
        """Add a check for this run (evaluated over the trace after the run)."""
        self.checks.append(_as_check(fn, name))

    def fail(self, message: str, *, check: str = "ctx.fail") -> None:
        """Record a failure now (the run goes on)."""
        self.failures.append({"check": check, "message": message})

    def expect(self, condition: Any, message: str, *, check: str = "ctx.expect") -> bool:
        """A soft assertion: record ``message`` as a failure when ``condition`` is false."""
        if not condition:
            self.fail(message, check=check)
        return bool(condition)

    # ---------------------------------------------------------------- machinery

    def _start(self, actor: _Actor, event: Event | None, delay: float | None) -> asyncio.Task[Any]:
        loop = asyncio.get_running_loop()
        task = loop.create_task(self._run_actor(actor, event, delay), name=f"actor:{actor.name}")
        self._tasks.append(task)
        return task

    def _start_timed(self, actor: _Actor) -> None:
        assert actor.at is not None
        self._start(actor, None, delay=actor.at - self.now())

    async def _run_actor(self, actor: _Actor, event: Event | None, delay: float | None) -> None:
        if delay is not None:
            await asyncio.sleep(max(delay, 0.0))
        simulator.observe("actor/run", actor=actor.name)
        try:
            await _maybe_await(_call_actor(actor.fn, event))
        except Exception as exc:
            self._actor_failed(actor, exc)

    def _actor_failed(self, actor: _Actor, exc: BaseException) -> None:
        simulator.observe("actor/error", actor=actor.name, error=f"{type(exc).__name__}: {exc}")
        self.fail(f"raised {type(exc).__name__}: {exc}", check=f"actor:{actor.name}")

    def _arm(self, actor: _Actor) -> None:
        def fire(event: Event) -> None:
            if actor.triggered and not actor.every:
                return
            actor.triggered += 1
            if not actor.every and actor.dispose is not None:
                actor.dispose()
            if actor.immediate:
                simulator.observe("actor/run", actor=actor.name)
                try:
                    _call_actor(actor.fn, event)
                except Exception as exc:
                    self._actor_failed(actor, exc)
            else:
                self._start(actor, event, delay=None)

        actor.dispose = self.on(actor.kind, fire, where=actor.where)
        for event in self.events(actor.kind, actor.where):
            fire(event)
            if not actor.every:
                break

    def _notify(self, event: Event) -> None:
        for kind, where, fn in list(self._listeners):
            if kind is not None and event.get("kind") != kind:
                continue
            try:
                if where is not None and not _matches(event, None, where):
                    continue
                fn(event)
            except Exception as exc:
                self.fail(f"listener raised {type(exc).__name__}: {exc}", check=f"listener:{kind}")

    async def _execute(self) -> Any:
        if simulator.current_loop() is None:
            raise RuntimeError("a scenario runs under simulator.run (use Scenario.run)")
        # Listeners and ``after`` actors hear of every event from now to the end of the run
        # (the registration ends with the run, so it is not disposed here).
        simulator.on_observe(self._notify)
        self._running = True
        for actor in self._actors:
            if actor.at is not None:
                self._start_timed(actor)
            elif actor.kind is not None:
                self._arm(actor)
        for setup in self.scenario.setups:
            await _maybe_await(setup(self))
        value = None
        if self.scenario.body is not None:
            value = await self.scenario.body(self)
        await self.wait_actors()
        for fn in self._teardown:
            await _maybe_await(fn())
        await self.wait_actors()
        return value

    def _untriggered(self) -> list[_Actor]:
        return [a for a in self._actors if a.kind is not None and not a.triggered]

    def _collect_failures(self, trace: Trace) -> list[dict[str, str]]:
        failures = list(self.failures)
        for actor in self._untriggered():
            if actor.required:
                failures.append(
                    {
                        "check": f"actor:{actor.name}",
                        "message": f"never triggered: no event {_describe_where(actor.kind, actor.where)}",
                    }
                )
        for check in [*self.scenario.checks, *self.checks]:
            message = check.evaluate(trace)
            if message is not None:
                failures.append({"check": check.name, "message": message})
        models = {id(m) for m in self.models.values()}
        for fake in self._fakes:
            for problem in fake.problems():
                label = (
                    "model"
                    if isinstance(fake, FakeModel) or id(fake) in models
                    else "tool"
                    if isinstance(fake, FakeTool)
                    else "fake"
                )
                failures.append(
                    {"check": f"{label}:{getattr(fake, 'name', '?')}", "message": problem}
                )
        return failures


# --------------------------------------------------------------------------- the scenario


class Scenario:
    """A reusable scenario: name, setup functions, a body, actors and checks.

    ``run(strategy=..., seed=...)`` gives a :class:`Trace`. A ``Scenario`` is also a ``main`` for
    ``simulator.run`` and the runtime's other entry points: calling it returns the coroutine of
    one run (a fresh context each time; see ``last_context`` and ``trace_of``).
    """

    def __init__(
        self,
        name: str,
        body: Callable[[ScenarioContext], Awaitable[Any]] | None = None,
        *,
        setup: SetupFn | Sequence[SetupFn] = (),
        actors: Sequence[tuple[Any, ...]] = (),
        checks: Sequence[CheckFn | Check] = (),
        description: str = "",
        strict: bool = False,
        max_steps: int | None = None,
        max_time: float | None = None,
    ) -> None:
        self.name = name
        self.body = body
        self.setups: list[SetupFn] = [setup] if callable(setup) else list(setup)
        self.actor_specs: list[tuple[Any, ...]] = list(actors)
        self.checks: list[Check] = [_as_check(c) for c in checks]
        self.description = description or (inspect.getdoc(body) or "" if body is not None else "")
        self.strict = strict
        self.max_steps = max_steps
        self.max_time = max_time
        self.last_context: ScenarioContext | None = None

    def __repr__(self) -> str:
        return f"Scenario({self.name!r})"

    # ---------------------------------------------------------------- building (decorators)

    def setup(self, fn: SetupFn) -> SetupFn:
        """Decorator: add a setup function ``fn(ctx)`` (sync or async)."""
        self.setups.append(fn)
        return fn

    def check(self, fn: CheckFn | None = None, *, name: str | None = None) -> Any:
        """Decorator (or call): add a check ``fn(trace)``."""
        if fn is None:
            return lambda f: self.check(f, name=name)
        self.checks.append(_as_check(fn, name))
        return fn

    def actor(
        self, *, at: float | None = None, after: str | None = None, **options: Any
    ) -> Callable[[ActorFn], ActorFn]:
        """Decorator: ``@sc.actor(at=2.0)`` or ``@sc.actor(after="model/request", where={...})``.
        The function gets the context (and the event, for ``after``, if it takes two arguments)."""
        if (at is None) == (after is None):
            raise ValueError("actor: give exactly one of at= or after=")

        def deco(fn: ActorFn) -> ActorFn:
            self.actor_specs.append(
                ("at", at, fn, options) if at is not None else ("after", after, fn, options)
            )
            return fn

        return deco

    # ---------------------------------------------------------------- running

    def context(self, *, seed: int = 0, strategy: str = "fifo") -> ScenarioContext:
        ctx = ScenarioContext(self, seed=seed, strategy=strategy)
        for how, when, fn, options in (_spec(s) for s in self.actor_specs):
            bound = _bind(fn, ctx)
            if how == "at":
                ctx.at(when, bound, name=options.get("name") or _name_of(fn, "actor"))
            else:
                opts = dict(options)
                opts.setdefault("name", _name_of(fn, "actor"))
                ctx.after(when, bound, **opts)
        return ctx

    def main(
        self, *, seed: int = 0, strategy: str = "fifo", checks: bool = False
    ) -> Callable[[], Any]:
        """A zero-argument ``main`` for ``simulator.run``/explore/replay: each call builds a fresh
        context (kept as ``last_context``). With ``checks=True`` the checks run at the end of the
        run itself, over the timeline so far, and a failure raises ``ScenarioFailed`` (so the run
        fails: what schedule exploration and shrinking look for)."""

        async def run_once() -> Any:
            from simulator.sources import current_sources

            sources = current_sources()
            ctx = self.context(
                seed=sources.seed if sources is not None else seed, strategy=strategy
            )
            self.last_context = ctx
            value = await ctx._execute()
            if checks:
                trace = _partial_trace(self, ctx, seed, strategy)
                failures = ctx._collect_failures(trace)
                if failures:
                    raise ScenarioFailed(
                        "; ".join(f"{f['check']}: {f['message']}" for f in failures)
                    )
            return value

        run_once.__qualname__ = f"scenario:{self.name}"
        return run_once

    def __call__(self) -> Any:
        return self.main()()

    def run(
        self,
        *,
        strategy: Any = None,
        seed: int = 0,
        max_steps: int | None = None,
        max_time: float | None = None,
        **run_options: Any,
    ) -> Trace:
        """Run once under ``strategy`` (``None``: FIFO) and ``seed``; return the trace."""
        strategy_name = getattr(strategy, "name", "fifo") if strategy is not None else "fifo"
        main = self.main(seed=seed, strategy=strategy_name)
        kwargs: dict[str, Any] = dict(run_options)
        steps = max_steps if max_steps is not None else self.max_steps
        if steps is not None:
            kwargs["max_steps"] = steps
        limit = max_time if max_time is not None else self.max_time
        if limit is not None:
            kwargs["max_time"] = limit
        result = simulator.run(main, strategy=strategy, seed=seed, scenario=self.name, **kwargs)
        return self.trace_of(result)

    def replay(
        self,
        schedule: Schedule | Trace | Mapping[str, Any] | str,
        *,
        strict: bool = True,
        **run_options: Any,
    ) -> Trace:
        """Re-run a recorded schedule (a ``Schedule``, a trace, its dict or JSON text)."""
        from simulator.strategies.replay import ReplayStrategy

        sched = _to_schedule(schedule, self.name)
        return self.run(
            strategy=ReplayStrategy(sched, strict=strict),
            seed=sched.seed,
            mode=sched.mode,
            vary_timers=sched.vary_timers,
            timer_window=sched.timer_window,
            **run_options,
        )

    def explore(
        self,
        *,
        strategy: Any = "random",
        budget: int = 100,
        seed: int = 0,
        **options: Any,
    ) -> Trace | None:
        """Search schedules (``simulator.explore``) for a run that fails: an outcome other than
        ``completed`` or a failed check (checks run in-run here). Returns the first failing
        run's trace (replayable with ``replay(trace)``), or ``None`` if none failed."""
        from simulator.explore import explore

        strategy_name = strategy if isinstance(strategy, str) else getattr(strategy, "name", "?")
        found = explore(
            self.main(strategy=strategy_name, checks=True),
            strategy=strategy,
            budget=budget,
            seed=seed,
            scenario=self.name,
            **options,
        )
        if found.first_failure is None:
            return None
        return self.trace_of(found.first_failure)

    def trace_of(self, result: RunResult, context: ScenarioContext | None = None) -> Trace:
        """The trace of a finished run of this scenario (its last context unless given)."""
        ctx = context or self.last_context
        if ctx is None:
            ctx = self.context(seed=result.seed, strategy=result.strategy)
        trace = Trace(
            scenario=self.name,
            seed=result.seed,
            strategy=result.strategy,
            mode=result.mode,
            outcome=result.outcome,
            error=result.error_text(),
            virtual_time_us=_us(result.virtual_time),
            steps=result.steps,
            schedule=_jsonable(result.schedule.to_dict()),
            timeline=[_event(e) for e in result.timeline],
            untriggered=sorted(a.name for a in ctx._untriggered()),
            pending=[{"task": p["task"], "coro": p["coro"]} for p in result.pending],
            unretrieved=[{"task": u["task"], "error": u["error"]} for u in result.unretrieved],
            result=result,
            context=ctx,
        )
        trace.failures = ctx._collect_failures(trace)
        return trace


def _event(raw: Mapping[str, Any]) -> Event:
    event = {k: _jsonable(v) for k, v in raw.items() if k != "t"}
    event["t_us"] = _us(float(raw.get("t", 0.0)))
    return event


def _partial_trace(sc: Scenario, ctx: ScenarioContext, seed: int, strategy: str) -> Trace:
    now = ctx.now()
    return Trace(
        scenario=sc.name,
        seed=seed,
        strategy=strategy,
        mode="",
        outcome="completed",
        error=None,
        virtual_time_us=_us(now),
        steps=0,
        schedule={},
        timeline=[_event(e) for e in ctx.timeline],
        untriggered=sorted(a.name for a in ctx._untriggered()),
        context=ctx,
    )


def _to_schedule(value: Any, scenario: str) -> Schedule:
    if isinstance(value, Schedule):
        return value
    if isinstance(value, Trace):
        return Schedule.from_dict(value.schedule, scenario=scenario, source="trace")
    if isinstance(value, str):
        data = json.loads(value) if value.lstrip().startswith("{") else None
        if isinstance(data, dict) and data.get("format") == TRACE_FORMAT:
            return Schedule.from_dict(data["schedule"], scenario=scenario, source="trace")
        return Schedule.from_json(value, scenario=scenario)
    return Schedule.from_dict(value, scenario=scenario)


def _spec(spec: tuple[Any, ...]) -> tuple[str, Any, ActorFn, dict[str, Any]]:
    """Normalise an actor spec: ``("at", t, fn[, options])`` or ``("after", kind, fn[, options])``."""
    if len(spec) == 3:
        how, when, fn = spec
        options: dict[str, Any] = {}
    elif len(spec) == 4:
        how, when, fn, options = spec
    else:
        raise ValueError(f"actor spec must be (how, when, fn[, options]), got {spec!r}")
    if how not in ("at", "after"):
        raise ValueError(f"actor spec: unknown kind {how!r} (use 'at' or 'after')")
    return how, when, fn, dict(options)


def _bind(fn: ActorFn, ctx: ScenarioContext) -> ActorFn:
    """Actors declared on a ``Scenario`` get the context first (and the event, if they take it)."""
    try:
        n = len(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        n = 1
    if n >= 2:
        return lambda event: fn(ctx, event)
    return lambda: fn(ctx)


def scenario(
    fn: Callable[[ScenarioContext], Awaitable[Any]] | None = None,
    *,
    name: str | None = None,
    checks: Sequence[CheckFn | Check] = (),
    setup: SetupFn | Sequence[SetupFn] = (),
    description: str = "",
    strict: bool = False,
    max_steps: int | None = None,
    max_time: float | None = None,
) -> Any:
    """Decorator: turn ``async def body(ctx)`` into a :class:`Scenario` (named after the function
    unless ``name`` is given). Use it bare (``@scenario``) or with options."""

    def deco(body: Callable[[ScenarioContext], Awaitable[Any]]) -> Scenario:
        return Scenario(
            name or body.__name__.replace("_", "-"),
            body,
            setup=setup,
            checks=checks,
            description=description,
            strict=strict,
            max_steps=max_steps,
            max_time=max_time,
        )

    if fn is not None:
        return deco(fn)
    return deco
