"""Playing a generated scenario against an implementation, recording what the checks need.

Everything observable goes on one *moment* line, in the order it happened (all synchronous, so
the order is exact): each actor or listener operation, each session event appended, each status
notification. After every moment the pending ``when_idle()`` waiters are sampled (when the
awaitable exposes ``done()``, as the reference's and asyncio's do), which brackets the instant a
waiter was released without relying on when its awaiting task resumes.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Any

from reference_loop import vocabulary as v

from .. import fakes
from ..adapter import AgentHandle
from ..harness import Kit
from .model import ListenerSpec, Op, PropScenario

WAIT_LIMIT = 30.0
"""Virtual seconds an actor's ``wait`` gives ``when_idle()`` (a hung model or tool may hold it)."""

TOOLS = ("t0", "t1")

FLUSH_DELAY = 0.2
"""Virtual seconds a generated ``session/flush`` listener takes (a persistence flush takes time:
the agent is still running, its turn closed)."""


def prompt_name(actor: int | None, position: int) -> str:
    """The text an operation sends: ``a<actor>.<op>`` for an actor's operation (both 1-based),
    ``l<listener>`` for a listener's (each acts once, with at most one send or steer)."""
    return f"l{position + 1}" if actor is None else f"a{actor + 1}.{position + 1}"


@dataclass
class Prompt:
    """A prompt the scenario sent (``send`` or ``steer``), by its unique text."""

    text: str
    moment: int
    verb: str  # send | steer
    by: str
    status: str = "idle"
    """The agent's status when it was sent (a steer while running is steering, else a send)."""

    @property
    def queued(self) -> bool:
        """Whether it went to the queued FIFO (a send, or a steer while not running)."""
        return self.verb == "send" or self.status != "running"


@dataclass
class Waiter:
    """One ``when_idle()`` call and what was seen of its release."""

    moment: int
    by: str
    last_pending: int
    """The last moment at which the waiter was seen unreleased (its call, at least)."""
    released_at: int | None = None
    """The first moment at which it was seen released (or its awaiting task resumed)."""
    log_at_release: int | None = None
    """The log length at ``released_at``."""
    task: asyncio.Task[Any] | None = None
    awaitable: Any = None


@dataclass
class Observation:
    """What one run recorded."""

    moments: list[tuple[str, ...]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    """The session events as notified through ``session/event``."""
    event_moment: list[int] = field(default_factory=list)
    """For each notified session event, the moment it was appended at."""
    final_events: list[dict[str, Any]] = field(default_factory=list)
    """The agent's log at the end (``session.events``)."""
    statuses: list[str] = field(default_factory=list)
    prompts: list[Prompt] = field(default_factory=list)
    cancels: list[int] = field(default_factory=list)
    aborts: list[int] = field(default_factory=list)
    disposals: list[int] = field(default_factory=list)
    waiters: list[Waiter] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    """Failures seen while playing (a final when_idle() that never resolved, ...)."""


class World:
    """One scenario being played on one agent of the implementation under test."""

    def __init__(self, kit: Kit, scenario: PropScenario) -> None:
        self.kit = kit
        self.scenario = scenario
        self.obs = Observation()
        self._counter = 0
        self._seen: dict[str, int] = {}
        # Injects started by listeners run as tasks; keep them referenced until the run ends.
        self._background: list[asyncio.Future[None]] = []
        for name, behaviour in zip(TOOLS, scenario.tools, strict=True):
            kit.tool(
                name,
                error="tool failed" if behaviour == "fail" else None,
                hang=behaviour == "hang",
                delay=0.5 if behaviour == "slow" else 0.0,
            )
        self.hangs = sum(r == "hang" for r in scenario.responses) + sum(b == "hang" for b in scenario.tools)
        kit.model.push(*(_response(r, i) for i, r in enumerate(scenario.responses)))
        kit.on("session/event", self._on_event)
        kit.on("agent/status", self._on_status)
        for spec in scenario.listeners:
            self._install(spec)
        self.agent: AgentHandle = kit.agent("a")

    # ------------------------------------------------------------------ the moment line
    def _moment(self, *what: str) -> int:
        index = len(self.obs.moments)
        self.obs.moments.append(what)
        self._sample(index)
        return index

    def _sample(self, index: int) -> None:
        for waiter in self.obs.waiters:
            if waiter.released_at is not None:
                continue
            done = getattr(waiter.awaitable, "done", None)
            if callable(done) and done():
                waiter.released_at, waiter.log_at_release = index, len(self.obs.events)
            else:
                waiter.last_pending = index

    def _on_event(self, _session: Any, event: dict[str, Any]) -> None:
        self.obs.events.append(dict(event))
        self.obs.event_moment.append(len(self.obs.moments))
        self._moment("log", str(event.get("type")))

    def _on_status(self, _agent: Any, status: str) -> None:
        self.obs.statuses.append(status)
        self._moment("status", status)

    # ------------------------------------------------------------------ operations
    def _text(self, name: str | None) -> str:
        # Static names (``prompt_name``) when the caller knows which operation it plays, so the
        # scenario's translation to YAML (``translate``) sends the very same texts; a counter
        # otherwise.
        self._counter += 1
        return name if name is not None else f"m{self._counter}"

    def do(self, verb: str, by: str, name: str | None = None) -> None:
        """Perform one synchronous operation (``send``, ``steer``, ``cancel``, ``abort``,
        ``dispose``), recording it; a disposed agent's refusal is expected and ignored. ``name``
        is the text of a ``send``/``steer`` (see ``prompt_name``)."""
        agent = self.agent
        if verb in ("send", "steer"):
            text = self._text(name)
            status = agent.status
            try:
                getattr(agent, verb)(text)
            except Exception:
                self._moment("refused", verb, text, by)
                return
            index = self._moment(verb, text, by)
            self.obs.prompts.append(Prompt(text, index, verb, by, status))
        elif verb == "cancel":
            agent.cancel()
            self.obs.cancels.append(self._moment("cancel", by))
        elif verb == "abort":
            agent.abort()
            self.obs.aborts.append(self._moment("abort", by))
        elif verb == "dispose":
            agent.dispose()
            self.obs.disposals.append(self._moment("dispose", by))
        else:  # pragma: no cover - the model has no other synchronous verbs
            raise ValueError(verb)

    def watch(self, by: str) -> Waiter:
        """Call ``when_idle()`` now and await it in a background task."""
        awaitable = self.agent.when_idle()
        index = self._moment("when_idle", by)
        waiter = Waiter(index, by, last_pending=index, awaitable=awaitable)
        self.obs.waiters.append(waiter)
        self._sample(index)

        async def wait() -> None:
            await _await(awaitable)
            if waiter.released_at is None:  # no done(): its resumption bounds the release
                waiter.released_at, waiter.log_at_release = len(self.obs.moments), len(self.obs.events)

        waiter.task = asyncio.ensure_future(wait())
        return waiter

    async def act(self, index: int, ops: tuple[Op, ...]) -> None:
        """One actor: its operations in order."""
        by = f"actor{index}"
        for position, op in enumerate(ops):
            name = prompt_name(index, position)
            if op.verb == "sleep":
                await asyncio.sleep(op.seconds)
            elif op.verb == "inject":
                await self._inject(by, name)
            elif op.verb in ("wait", "waiter"):
                waiter = self.watch(by)
                if op.verb == "wait":
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(asyncio.shield(waiter.task), WAIT_LIMIT)  # type: ignore[arg-type]
            else:
                self.do(op.verb, by, name)

    async def _inject(self, by: str, name: str | None = None) -> None:
        with contextlib.suppress(Exception):  # refused on a disposed agent
            await self.agent.inject(self._text(name))
        self._moment("inject", by)

    # ------------------------------------------------------------------ listeners
    def _install(self, spec: ListenerSpec) -> None:
        number = len(self._seen)
        key = f"{spec.event}#{number}"
        self._seen[key] = 0
        name = prompt_name(None, number)
        by = f"listener({spec.event}#{spec.nth}:{spec.action})"

        def fire() -> None:
            self._seen[key] += 1
            if self._seen[key] != spec.nth:
                return
            if spec.action == "raise":
                self._moment("raise", by)
                raise RuntimeError(f"{by} raised")
            if spec.action == "inject":
                self._background.append(asyncio.ensure_future(self._inject(by, name)))
                return
            for verb in spec.action.split("+"):
                self.do(verb, by, name)

        if spec.event.startswith("status:"):
            wanted = spec.event.removeprefix("status:")
            self.kit.on("agent/status", lambda _a, status: fire() if status == wanted else None)
        elif spec.event == "agent/turn-continuation":

            async def continuation(*args: Any) -> Any:
                fire()
                return await args[-1]()

            self.kit.on(spec.event, continuation)
        elif spec.event == "session/flush":

            async def flush(*_args: Any) -> None:
                fire()
                # A persistence flush takes time: the agent is still running, its turn closed.
                await asyncio.sleep(FLUSH_DELAY)

            self.kit.on(spec.event, flush)
        else:
            self.kit.on(spec.event, lambda *_args: fire())

    # ------------------------------------------------------------------ the whole run
    async def play(self) -> Observation:
        """Run the actors concurrently, then settle the agent and close the service."""
        tasks = [asyncio.ensure_future(self.act(i, ops)) for i, ops in enumerate(self.scenario.actors)]
        await asyncio.gather(*tasks, return_exceptions=True)
        await self._settle()
        # Let released waiters' tasks resume. A bounded wait, not a short sleep: a schedule may
        # fire a near timer ahead of ready work, so "soon" is not guaranteed, "eventually" is.
        pending = [w.task for w in self.obs.waiters if w.task is not None and not w.task.done()]
        if pending:
            await asyncio.wait(pending, timeout=WAIT_LIMIT)
        for waiter in self.obs.waiters:
            if waiter.task is not None and not waiter.task.done():
                self.obs.problems.append(
                    f"IDLE-2: the when_idle() called by {waiter.by} at moment {waiter.moment} never "
                    "resolved although the agent settled"
                )
        # Closing disposes the agent: anything still queued is excused from then on.
        self.obs.disposals.append(self._moment("close", "final"))
        with contextlib.suppress(Exception):
            await asyncio.wait_for(_await(self.kit.service.close()), WAIT_LIMIT)
        for waiter in self.obs.waiters:
            if waiter.task is not None and not waiter.task.done():
                waiter.task.cancel()
        self.obs.final_events = [dict(e) for e in self.agent.session.events]
        return self.obs

    async def _settle(self) -> None:
        """Wait for quiescence; abort hung steps (never dropping prompts) until it comes, and
        again while listeners keep queueing work after the idle transition."""
        budget = self.hangs + 3 + 2 * len(self.scenario.listeners)
        while budget > 0:
            budget -= 1
            sent = len(self.obs.prompts)
            waiter = self.watch("final")
            try:
                await asyncio.wait_for(asyncio.shield(waiter.task), WAIT_LIMIT)  # type: ignore[arg-type]
            except TimeoutError:
                self.do("abort", "final")
                continue
            await asyncio.sleep(0)
            if len(self.obs.prompts) == sent and self.agent.status != "running":
                return
        self.obs.problems.append(f"IDLE-2: the agent never settled (status {self.agent.status})")


async def _await(awaitable: Awaitable[Any]) -> Any:
    return await awaitable


def _response(kind: str, index: int) -> list[Any]:
    """The scripted model actions of one response kind."""
    if kind == "text":
        return fakes.text(f"r{index}")
    if kind == "slow":
        return [fakes.Sleep(0.5), *fakes.text(f"r{index}")]
    if kind == "tools":
        return fakes.tools((f"c{index}a", TOOLS[0], "{}"), (f"c{index}b", TOOLS[1], '{"x": 1}'))
    if kind == "max-tokens":
        return fakes.text(f"r{index}", finish="max-tokens")
    if kind == "max-tokens-tools":
        return fakes.tools((f"c{index}a", TOOLS[0], "{}"), finish="max-tokens", prefix=f"r{index}")
    if kind == "error":
        return [*fakes.text(f"r{index}", finish=None), v.finish("error", "model error", "E_MODEL")]
    if kind == "raise":
        return [fakes.Raise("model raised", "E_RAISE")]
    if kind == "finish-aborted":
        return [*fakes.text(f"r{index}", finish=None), v.finish("aborted")]
    if kind == "hang":
        return [fakes.Hang()]
    raise ValueError(f"unknown response kind {kind!r}")
