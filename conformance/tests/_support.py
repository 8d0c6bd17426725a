"""Small helpers shared by the rule tests."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from conformance.adapter import AgentHandle
from conformance.catalogue import PYTHON, runtime_of
from conformance.harness import Body, Kit
from conformance.hooks import NeedsHook

Run = Callable[[Body], None]

USER = {"kind": "user"}
COMPLETED = {"kind": "completed"}
MAXTOK = {"kind": "max-tokens"}
DISPOSED = {"kind": "disposed"}


def aborted(reason: str = "aborted") -> dict[str, Any]:
    return {"kind": "aborted", "reason": reason}


def in_process_only(k: Kit, why: str) -> None:
    """Skip the test (``why``) unless the implementation runs in this Python process: what it
    observes does not cross the wire."""
    if runtime_of(k.impl) != PYTHON:
        pytest.skip(why)


def texts(content: Any) -> list[str]:
    """The texts of a content value (a string or a list of blocks)."""
    if isinstance(content, str):
        return [content]
    return [b.get("text", "") for b in content if isinstance(b, dict)]


def cyclic_block() -> dict[str, Any]:
    """A text block that holds itself: JSON cannot hold a cycle, so it is not serialisable (LOG-1)."""
    block: dict[str, Any] = {"type": "text", "text": "x"}
    block["self"] = block
    return block


def request_texts(request: dict[str, Any]) -> list[str]:
    """Every text of a model request's messages, in order."""
    out: list[str] = []
    for message in request.get("messages", []):
        for block in message.get("content", []):
            if block.get("type") == "text":
                out.append(block["text"])
    return out


def once(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A listener body that acts only the first time it is called (a coroutine function stays
    one, so an awaited event awaits it like any async listener)."""
    done = [False]

    if inspect.iscoroutinefunction(fn):

        async def async_wrapper(*args: Any) -> Any:
            if done[0]:
                return None
            done[0] = True
            return await fn(*args)

        return async_wrapper

    def wrapper(*args: Any) -> Any:
        if done[0]:
            return None
        done[0] = True
        return fn(*args)

    return wrapper


def once_on(status: str, action: Callable[[], object]) -> Callable[..., None]:
    """An ``agent/status`` listener that calls ``action()`` at the first transition to ``status``."""
    fired = [False]

    def listener(_agent: object, value: str) -> None:
        if value == status and not fired[0]:
            fired[0] = True
            action()

    return listener


def once_on_event(kind: str, action: Callable[[], object]) -> Callable[[object, dict[str, Any]], None]:
    """A ``session/event`` listener that calls ``action()`` at the first event of type ``kind``
    (what ``action`` raises, the listener raises)."""
    fired = [False]

    def listener(_session: object, event: dict[str, Any]) -> None:
        if event.get("type") == kind and not fired[0]:
            fired[0] = True
            action()

    return listener


def delivered(k: Kit, agent: AgentHandle) -> list[str]:
    """Every text that reached one of the agent's turns: its prompts, then its logged steering."""
    prompts = [t for turn in k.prompts(agent) for t in turn]
    return prompts + [t for e in k.events(agent, "steering/message") for t in texts(e["data"]["content"])]


def throws_on(kind: str, fired: list[str]) -> Callable[[object, dict[str, Any]], None]:
    """A ``session/event`` listener that throws at the first event of type ``kind``, once, and
    notes ``kind`` in ``fired`` as it does."""

    def listener(_session: object, event: dict[str, Any]) -> None:
        if event.get("type") == kind and not fired:
            fired.append(kind)
            raise RuntimeError(f"a session/event listener failed on {kind}")

    return listener


def boom(*_args: Any) -> Any:
    """A listener that throws."""
    raise RuntimeError("boom")


async def passthrough(*args: Any) -> Any:
    """A waterfall listener that calls ``next()`` unchanged."""
    return await args[-1]()


class Watch:
    """Calls ``when_idle()`` now and records what the log and status were when it resolved."""

    def __init__(self, kit: Kit, agent: AgentHandle) -> None:
        self.kit = kit
        self.agent = agent
        self.types_at_release: list[str] | None = None
        self.status_at_release: str | None = None
        waiter = agent.when_idle()
        self._waiter = waiter
        self._awaiting: Any = None
        """The future a coroutine waiter awaits at this moment (what :meth:`pending_now` reads)."""
        self.task = asyncio.ensure_future(self._watch(waiter))

    async def _watch(self, waiter: Any) -> None:
        if inspect.iscoroutine(waiter):
            await self._step(waiter)
        else:
            await waiter
        self.types_at_release = Kit.types(self.agent)
        self.status_at_release = self.agent.status

    async def _step(self, coro: Any) -> None:
        """Await a coroutine waiter as a task would, one step at a time, keeping the future each
        step waits on: a coroutine has no ``done()``, but the future it awaits does, and the
        loop's release is that future's result (a callback before the coroutine returns)."""
        while True:
            try:
                yielded = coro.send(None)
            except StopIteration:
                return
            self._awaiting = yielded if asyncio.isfuture(yielded) else None
            if self._awaiting is not None:
                yielded._asyncio_future_blocking = False  # taken over, as a task does
            elif yielded is not None:  # what a task refuses too ("bad yield")
                coro.close()
                raise RuntimeError(f"when_idle()'s coroutine yielded {yielded!r}, which asyncio cannot await")
            try:
                await (asyncio.sleep(0) if yielded is None else yielded)  # a bare yield: one loop round
            except asyncio.CancelledError:
                if self.task.cancelling():
                    coro.close()
                    raise
                # else the future was cancelled: the coroutine reads that on its next step
            except Exception:  # the coroutine reads the future's error on its next step
                pass

    @property
    def released(self) -> bool:
        return self.task.done()

    def pending_now(self) -> bool | None:
        """Whether the waiter is still pending at this moment: its own ``done()`` when it has
        one (the watch's task sees a release only a step later, when other callbacks may have
        run in between), or that of the future a coroutine waiter awaits; else ``False`` once the
        watch saw it, and ``None`` (not known) while the agent is not running, where the loop may
        have released it a step before the watch saw."""
        done = getattr(self._waiter, "done", None)
        if callable(done):
            try:
                return not bool(done())
            except Exception:  # a broken done(): fall back to what the watch saw
                pass
        if self.task.done():
            return False
        if self._awaiting is not None:
            return not self._awaiting.done()
        return True if self.agent.status == "running" else None

    async def wait(self) -> None:
        try:
            await asyncio.wait_for(asyncio.shield(self.task), self.kit.timeout)
        except TimeoutError:
            raise AssertionError(
                f"when_idle() of {self.agent.id} never resolved (status {self.agent.status}){self.kit.why()}"
            ) from None

    def turn_ends_at_release(self) -> int:
        assert self.types_at_release is not None
        return self.types_at_release.count("turn/end")


FLUSH_DONE: tuple[list[str], ...] = ([], ["start", "end"], ["start", "cancelled"])
"""What the driver's flush listener (a ``start``/``end``/``cancelled`` log) may show once the
driver has exited: finished, cut by the disposal, or never begun (a loop need not flush a turn
disposal cut short before its flush)."""


def driver_exit_at_release(flush: list[str], task: asyncio.Task[Any] | None) -> tuple[list[str], bool | None]:
    """What IDLE-4 reads the moment a waiter of a disposed agent resolves: the driver's flush
    log, and whether the driver task the adapter named is done (``None``: it named none)."""
    return list(flush), None if task is None else task.done()


def assert_driver_exited(seen: tuple[list[str], bool | None], allowed: tuple[list[str], ...] = FLUSH_DONE) -> None:
    """IDLE-4: the waiter was released once the driver loop had exited, not at the status flip.

    Seen through the driver task where the adapter names one: it must be done, and a flush its
    driver abandoned may still run (the listener is plugin code: a loop may stop awaiting it
    rather than cut it, as a loop in a language without task cancellation must; session 53's
    indie73). With no task named, through the flush the driver was inside: a flush still
    running cannot tell a driver that abandoned it from one still awaiting it, so the test then
    needs the ``driver_task`` hook."""
    flush, done = seen
    if done is not None:
        assert done, "released before the driver task exited"
    elif flush not in allowed:
        raise NeedsHook("driver_task", f"when_idle() resolved while the driver's flush still ran ({flush}): only the "
                        "driver task tells a driver that abandoned its flush from one still inside it")


class WarningCapture(logging.Handler):
    """Every record at WARNING or above that reaches the implementation's logger."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@contextlib.contextmanager
def captured_warnings(k: Kit) -> Iterator[WarningCapture]:
    """The implementation's logger's warnings while the block runs."""
    logger = logging.getLogger(k.impl.logger_name)
    capture = WarningCapture()
    logger.addHandler(capture)
    try:
        yield capture
    finally:
        logger.removeHandler(capture)


def warnings_naming(k: Kit, capture: WarningCapture, agent_id: str, turn: int | None, *, any_turn: bool = False) -> list[str]:
    """The captured warnings of the implementation's logger (or a child of it) that name the
    agent and the turn (its number as a word of its own: "turn 2", "turn=2", "#2"...; any
    number for ``turn=None``; with ``any_turn``, a turn need not be named: none was running)."""
    root = k.impl.logger_name
    number = r"\d+" if turn is None else str(turn)
    out: list[str] = []
    for record in capture.records:
        message = record.getMessage()
        ours = record.name == root or record.name.startswith(root + ".")
        if ours and agent_id in message and (any_turn or re.search(rf"(?<![\w.]){number}(?![\w.])", message)):
            out.append(message)
    return out
