"""The implementation adapter: what an agent loop provides to be checked by the suite.

An implementation is checked through one object satisfying ``Implementation``. Its
``create_service()`` returns a ``ServiceHandle``; the suite registers the kit's fake model and
fake tools on it, registers listeners, creates agents (``AgentHandle``) and drives them. The
shapes of everything that crosses this boundary are the spec's (section 0b): plain JSON dicts
with snake_case keys, compared literally.

The protocol deliberately mirrors the reference's public API, so a thin wrapper is enough: for
the reference, the service and agent objects *are* the handles. Rules of the suite:

* The suite builds every service *inside* a simulation (``create_service`` is called from the
  simulated event loop), so an implementation that takes time and ids from
  ``reference_loop.sources.default_sources()`` (or ``simulator.sources.current_sources()``) is
  reproducible to the byte (PY-3).
* Listeners receive the implementation's own agent object first (notifications and the
  ``agent/*`` waterfalls); the suite never calls methods on that argument, it uses the
  ``AgentHandle`` it was given, so a wrapper need not translate listener arguments.
* ``features`` lists the optional features supported: ``"persistence"`` (``resume``),
  ``"configuration"`` (``load_config``) and ``"injection"`` (``inject``). Rules of unsupported
  features report ``not-applicable``; the methods may then raise ``NotImplementedError``.
* A failure while building a service or an agent is a setup error: the command reports it in
  one line and exits 2.
* Listeners the kit only uses to observe are marked with :func:`observer`. An adapter may call
  such a listener after the event rather than inside it (in order with everything else it
  reports), for example without a round trip over the wire (``conformance.wire``).
* The step's abort signal (``request["signal"]`` of a model request, ``execution["signal"]``
  of a tool call) is what the kit's fake model and tools read, so it has: ``aborted`` (bool),
  ``reason`` (the reason once fired, else None), ``add_listener(callback)`` (the callback gets
  the reason, synchronously, once; at once when already fired; it may return a disposer),
  ``await wait()`` (resolves with the reason) and ``throw_if_aborted()`` (raises an error whose
  ``code`` is ``"ABORTED"``). The spec gives the signal no API; this is the reference's.
* ``reentrant_model`` (optional, default true): whether a caller may act on the implementation
  synchronously from inside a model call (the kit's fake model's ``stream()``). An adapter
  that calls the model where it cannot be re-entered (``conformance.wire``) says false, and
  the hunt then lands its model-call windows by actor only.

See ``docs/conformance.md`` for a worked example and ``examples/tiny_loop`` for a third-party
implementation.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Protocol, TypeVar, runtime_checkable

from reference_loop.protocols import ModelAdapter, Tool
from reference_loop.vocabulary import Message, SessionEvent, Source

from .catalogue import Feature

Disposer = Callable[[], object]
"""Returned by every registration; calling it undoes the registration."""

OBSERVER = "__loopkit_observer__"
_F = TypeVar("_F", bound=Callable[..., Any])


class ThrownValue(Exception):
    """A failure that is not an error object: JavaScript lets a plugin ``throw "text"`` (any
    value). In Python it is an exception whose text is the value; over the wire the child throws
    the text itself, a string (wire protocol 6.3, ``thrown``), so a loop that reads
    ``error.message`` without normalising what was thrown shows it (ERR-2)."""


def observer(listener: _F) -> _F:
    """Mark ``listener`` as a pure observer: it records what it is given, and never calls the
    implementation, raises or awaits. An in-process implementation calls it like any listener;
    an adapter for a loop in another process may deliver it after the event, batched, instead of
    stopping the loop for a round trip."""
    setattr(listener, OBSERVER, True)
    return listener


RECORD = "__loopkit_record__"


def waterfall_observer(record: Callable[..., None]) -> Callable[..., Any]:
    """A waterfall listener that only records its call: ``record(*args, value)`` (the
    waterfall's arguments and the value it was handed), then the rest of the chain runs unchanged.
    In process it is an ``async`` listener that awaits ``next()``; an adapter for a loop in
    another process may run the chain itself and deliver ``record``'s arguments after the fact,
    batched, like an :func:`observer`'s (the wire protocol's passive waterfalls)."""

    async def listener(*args: Any) -> Any:
        record(*args[:-1])
        value = args[-1]()
        return await value if inspect.isawaitable(value) else value

    setattr(listener, RECORD, record)
    return observer(listener)


def current_events(session: SessionHandle) -> Sequence[SessionEvent]:
    """The session's log as it is now where it lives: ``events``, or, for a session whose log
    lives in another process and whose ``events`` mirrors it as notified (the wire), its
    ``current_events()`` (the caller's in-place edits of what it passed sent there first)."""
    current = getattr(session, "current_events", None)
    return current() if callable(current) else session.events


@runtime_checkable
class SessionHandle(Protocol):
    """An agent's session log."""

    @property
    def id(self) -> str:
        """The session id."""
        ...

    @property
    def events(self) -> list[SessionEvent]:
        """The events so far, ``{"type", "seq", "time", "data"}`` each (a copy is fine)."""
        ...

    @property
    def header(self) -> Mapping[str, Any]:
        """The session's creation metadata, read-only: ``{"id", "created", "cwd",
        "parent_session"}`` (``created`` in epoch milliseconds from the sources' clock, so seeded
        in a simulation; ``cwd`` and ``parent_session`` from ``create_agent(meta=...)``, None for
        ``create``). A resumed session has the header it was created with. No rule id states it
        (the suite does not check it); the reference persists it, as the original loop does."""
        ...

    def derive_messages(self) -> list[Message]:
        """The conversation history derived from the log (spec LOG-7)."""
        ...

    def append(self, type: str, data: Mapping[str, Any]) -> SessionEvent:
        """Append an event (validated, snapshotted, then ``session/event`` notified)."""
        ...


@runtime_checkable
class AgentHandle(Protocol):
    """One agent, driven by the suite."""

    @property
    def id(self) -> str: ...

    @property
    def status(self) -> str:
        """``idle``, ``running`` or ``disposed``."""
        ...

    @property
    def session(self) -> SessionHandle: ...

    def send(self, content: Any, source: Source | None = None) -> None:
        """Queue a prompt (a string or a list of blocks)."""
        ...

    def steer(self, content: Any, source: Source | None = None) -> None:
        """Add steering for the running turn (like ``send`` when not running)."""
        ...

    def inject(self, content: Any, source: Source | None = None) -> Awaitable[None]:
        """Inject context (optional feature ``injection``)."""
        ...

    def abort(self, reason: str = "aborted") -> None: ...

    def cancel(self, reason: str = "cancelled") -> None: ...

    def when_idle(self) -> Awaitable[None]:
        """Register a waiter *now*; the returned awaitable resolves at quiescence."""
        ...

    def dispose(self) -> None:
        """Synchronous, idempotent, cannot fail."""
        ...


@runtime_checkable
class ServiceHandle(Protocol):
    """A service owning one event bus, the model and tool registries, and its agents."""

    def on(self, event: str, listener: Callable[..., Any]) -> Disposer:
        """Register a listener on the service's bus (notifications, waterfalls, session events)."""
        ...

    def register_model(self, name: str, adapter: ModelAdapter) -> Disposer: ...

    def register_tool(self, tool: Tool) -> Disposer: ...

    def add_system_prompt_section(self, name: str, text: str) -> Disposer: ...

    def create(self, agent_id: str, options: Mapping[str, Any] | None = None) -> AgentHandle:
        """Create on a fresh session id ``{agent_id}-session-{uuid}``. Options: ``model``,
        ``system_prompt``."""
        ...

    def create_agent(
        self,
        agent_id: str,
        session_id: str,
        meta: Mapping[str, Any] | None = None,
        agent_options: Mapping[str, Any] | None = None,
    ) -> AgentHandle:
        """Create on the caller's session id."""
        ...

    async def resume(
        self, agent_id: str, resume_session_id: str, agent_options: Mapping[str, Any] | None = None
    ) -> AgentHandle:
        """Resume from the persistence backend (feature ``persistence``)."""
        ...

    def get(self, agent_id: str) -> AgentHandle | None: ...

    def load_config(self, config: Mapping[str, Any]) -> object:
        """Create the agents a configuration lists (feature ``configuration``); raise on bad
        configuration with a message naming the field."""
        ...

    async def close(self) -> None: ...

    def driver_task(self, agent: AgentHandle) -> asyncio.Task[Any] | None:
        """The asyncio task running ``agent``'s driver loop (spec PY-1, IDLE-4)."""
        ...


@runtime_checkable
class Implementation(Protocol):
    """The object that ``--impl module:attr`` names."""

    name: str
    """A short name for reports."""

    features: frozenset[Feature]
    """The optional features supported."""

    logger_name: str
    """The ``logging`` logger under which contained failures are warned about (ERR-12)."""

    def create_service(self, *, persistence: object | None = None) -> ServiceHandle:
        """A new service. ``persistence`` is a backend from ``new_persistence()`` (shared by two
        services to check resume) or ``None`` for no persistence."""
        ...

    def new_persistence(self) -> object:
        """A fresh, empty in-memory persistence backend (feature ``persistence``)."""
        ...
