"""``examples/spec_loop`` with bugs of blind rounds the hunt missed until a workload reached them.

``NewestTurnLoop`` announces a late failure (a throwing ``agent/turn-end`` listener, a failing
flush) under the log's newest turn rather than the turn it belongs to (session 58's round I,
poll_loop and runner_loop): once an idle ``inject()`` wrote a one-shot turn while the driver's
turn was being flushed, that one-shot turn is announced twice and the flushed turn never (ERR-9,
ERR-6). ``LateDropLoop`` applies a cancel that dropped the turn about to start (window 2) at the
``idle`` transition that follows, dropping what that transition's listeners queued (session 59's
round J, promise_loop, stranded such work: IDLE-2, MARKER-1). ``HandOffLoop`` yields once between
back-to-back turns, correct and with session 58's round H bug (svc_loop): when a cancel from
elsewhere (another agent's listener) emptied its queue there, it waits for work still ``running``
(LOOP-8, IDLE-2). Session 60's round K (anyio_loop, pipe_loop) gave three more:
``CopiedErrorLoop`` announces a failure as a new error made of the raised one's message and code
(ERR-9: "carrying the original error"), and round N of session 61 the same made as a wrapper
chained to the original (``WrappedErrorLoop``), and ``OpeningDrainLoop``: a throwing
``agent/steering`` listener at the drain that opens a step taken for a boundary failure, the
turn's ``agent/turn-end`` never emitted (LOOP-4), and ``UnaskedGateLoop``: no cancel check at the
continuation gate when nobody listens there (CANCEL-1); ``DefaultOverrideLoop`` lets waiting steering override
only a default stop, not one a continuation listener forced (CONT-2); ``HeadRequeueLoop``
re-queues late steering at the head of the queue, ahead of prompts sent before it (LOOP-8,
INBOX-1). Round L (trampoline_loop) one: ``ToolWaitLoop`` awaits the ``tools/execute``
waterfall without the step's abort, so a tool that ignores its signal holds the aborted step
(TOOL-5). ``LateStatusLoop`` is correct: when its driver task is cancelled (PY-1) it
announces ``disposed`` a dozen callbacks after the task ended, on a later pass of what the
task's end woke, as svc_loop's scheduler does (session 59: a pct schedule passing that chain over
while the world yielded a fixed number of times made it a false PY-1 finding)."""

from __future__ import annotations

import asyncio
import functools
from typing import Any

from examples.spec_loop.adapter import SpecLoopImplementation, _sources
from examples.spec_loop.agent import Agent, ListenerFailure
from examples.spec_loop.service import Service


class _NewestTurnAgent(Agent):
    def _announce(self, turn: int, step: int, error: BaseException) -> None:
        if step == 0:  # the bug: a late failure named by the newest turn/start in the log
            starts = [e["data"]["turn"] for e in self._session.raw_events() if e["type"] == "turn/start"]
            turn = starts[-1] if starts else turn
        super()._announce(turn, step, error)


class _LateDropAgent(Agent):
    _dropping = False

    def cancel(self, reason: str | None = "cancelled") -> None:
        # window 2: running, no turn opened yet (the cancel drops the turn about to start)
        self._dropping = self._status == "running" and self._turn is None
        super().cancel(reason)

    def _set_status(self, status: str) -> None:
        super()._set_status(status)
        if status == "idle" and self._dropping:
            self._dropping = False
            self._queued.clear()  # the bug: the drop taken again, after the idle listeners queued


class _HandOffAgent(Agent):
    parks_running = False

    async def _run_turn(self, batch: list[tuple[list[Any], Any]]) -> None:
        await super()._run_turn(batch)
        if self._queued and not self._disposed:
            # between back-to-back turns the driver yields once: another agent's listener may act
            await asyncio.sleep(0)
            if self.parks_running and not self._queued and not self._disposed:
                # the bug: the work was withdrawn meanwhile, and the driver waits for more
                # without its idle transition (LOOP-8, IDLE-2)
                await self._park()


class _LateStatusAgent(Agent):
    hops = 12
    _late = False

    def _mark_disposed(self) -> None:
        task = self._task
        if task is None or asyncio.current_task() is not task or not task.cancelling() or self._status == "disposed":
            super()._mark_disposed()
            return
        # PY-1 from the driver's own cancellation: all but the status now, the status flip later
        self._late, status = True, self._status
        self._status = "disposed"  # so that super() leaves the flip and its announcement to us
        super()._mark_disposed()
        self._status = status

    def _driver_exited(self, task: asyncio.Future[None]) -> None:
        if not self._late:
            super()._driver_exited(task)
            return
        loop = asyncio.get_running_loop()

        def hop(left: int) -> None:
            if left:
                loop.call_soon(hop, left - 1)
                return
            self._status = "disposed"
            self._bus.emit("agent/status", self, "disposed")
            super(_LateStatusAgent, self)._driver_exited(task)

        loop.call_soon(hop, self.hops)


class _CopiedErrorAgent(Agent):
    def _announce(self, turn: int, step: int, error: BaseException) -> None:
        copied = RuntimeError(str(error))  # the bug: a new error made of the original's message and code
        code = getattr(error, "code", None)
        if code is not None:
            copied.code = code  # type: ignore[attr-defined]
        super()._announce(turn, step, copied)


class _WrappedErrorAgent(Agent):
    def _announce(self, turn: int, step: int, error: BaseException) -> None:
        # the bug: the failure announced as a wrapper of its own that chains the original
        try:
            raise RuntimeError(f"turn {turn} failed: {error}") from error
        except RuntimeError as wrapper:
            super()._announce(turn, step, wrapper)


class _OpeningDrainAgent(Agent):
    def _drain_steering(self, t: Any) -> bool:
        try:
            return super()._drain_steering(t)
        except ListenerFailure:
            if not t.step_open:
                t.boundary_failure = True  # the bug: a throw as the next step opens taken for a boundary's
            raise


class _UnaskedGateAgent(Agent):
    def _cancelled_at_gate(self, t: Any) -> bool:
        # the bug: with nobody listening at the gate, its default stands, cancel or not
        return self._bus.has("agent/turn-continuation") and super()._cancelled_at_gate(t)


class _DefaultOverrideAgent(Agent):
    def _continues(self, decision: object, default: bool) -> bool:
        # the bug: steering overrides a stop only when the stop was the default decision
        return bool(decision) or (bool(self._steering) and decision == default)


class _HeadRequeueAgent(Agent):
    def _requeue_late_steering(self) -> None:
        # the bug: late steering goes ahead of the prompts already waiting
        self._queued.extendleft(reversed(self._steering))
        self._steering.clear()


class _ToolWaitAgent(Agent):
    async def _abortable(self, awaitable: Any, signal: Any) -> Any:
        if getattr(getattr(awaitable, "cr_code", None), "co_name", None) == "waterfall":
            return await awaitable  # the bug: the tools/execute waterfall awaited without the step's abort
        return await super()._abortable(awaitable, signal)


class _ParkingAgent(_HandOffAgent):
    parks_running = True


@functools.cache
def _service_of(agent_class: type[Agent]) -> type[Service]:
    """spec_loop's service creating agents of ``agent_class`` (one class per variant)."""
    return type(f"{agent_class.__name__}Service", (Service,), {"agent_class": agent_class})


class _Variant(SpecLoopImplementation):
    agent_class: type[Agent] = Agent

    def create_service(self, *, persistence: object | None = None) -> Service:
        return _service_of(self.agent_class)(persistence=persistence, sources=_sources())  # type: ignore[call-arg]


def _variant(agent_class: type[Agent], name: str, doc: str) -> type[_Variant]:
    """A spec_loop implementation whose agents are of ``agent_class`` (``name``: its report name)."""
    title = agent_class.__name__.strip("_").removesuffix("Agent") + "Loop"
    return type(title, (_Variant,), {"__doc__": doc, "name": name, "agent_class": agent_class})


NewestTurnLoop = _variant(_NewestTurnAgent, "spec_loop (late failures named by the newest turn)",
                          "spec_loop naming each late failure by the log's newest turn.")
LateDropLoop = _variant(_LateDropAgent, "spec_loop (a window-2 cancel drops the idle transition's work)",
                        "spec_loop dropping what the idle listeners queued after a window-2 cancel.")
LateStatusLoop = _variant(_LateStatusAgent, "spec_loop (a cancelled driver's disposal announced on a later pass)",
                          "spec_loop announcing a cancelled driver's disposal a dozen callbacks after the task ended.")
CopiedErrorLoop = _variant(_CopiedErrorAgent, "spec_loop (failures announced as copies)",
                           "spec_loop announcing each failure as a new error made of the original's message and code.")
WrappedErrorLoop = _variant(_WrappedErrorAgent, "spec_loop (failures announced wrapped)",
                            "spec_loop announcing each failure as a wrapper chained to the original.")
OpeningDrainLoop = _variant(_OpeningDrainAgent, "spec_loop (a steering throw as a step opens silences the turn's end)",
                            "spec_loop taking a throwing agent/steering listener at a step's opening drain for a "
                            "boundary failure (no agent/turn-end).")
UnaskedGateLoop = _variant(_UnaskedGateAgent, "spec_loop (no gate, no cancel, when nobody listens there)",
                           "spec_loop skipping the gate's cancel check when no agent/turn-continuation listener "
                           "is registered.")
DefaultOverrideLoop = _variant(_DefaultOverrideAgent, "spec_loop (steering overrides the default stop only)",
                               "spec_loop letting waiting steering override a default stop only.")
HeadRequeueLoop = _variant(_HeadRequeueAgent, "spec_loop (late steering re-queued at the head)",
                           "spec_loop re-queueing late steering at the head of the queue.")
ToolWaitLoop = _variant(_ToolWaitAgent, "spec_loop (the tool waterfall awaited without the abort)",
                        "spec_loop awaiting the tools/execute waterfall without the step's abort.")


class HandOffLoop(_Variant):
    """spec_loop whose driver yields between back-to-back turns; ``parks_running``: when a cancel
    from elsewhere emptied its queue there, it waits for work still ``running``."""

    def __init__(self, *, parks_running: bool = False) -> None:
        self.agent_class = _ParkingAgent if parks_running else _HandOffAgent
        self.name = "spec_loop (yielding between turns" + (", parks running)" if parks_running else ")")
