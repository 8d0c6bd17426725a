"""The programs bench/peers.py runs, identically, under every runtime.

Every program is a zero-argument callable returning a fresh coroutine (the shape every
explorer needs: a schedule is re-executed from scratch). The programs record what they
observe themselves (which task ran which segment, whether an update was lost), so the
figures never depend on how a runtime labels its own trace: the same observation is
made under loopkit, each peer and plain asyncio.

Everything here is module level and picklable through functools.partial, because the
peers' multi-process explorers ship the workload to worker processes.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

Program = Callable[[], Coroutine[Any, Any, Any]]

# The real perf_counter, captured at import and kept inside a tuple: loopkit pins wall-clock
# reads to its virtual clock with freezegun while a run is going on, and freezegun rewrites
# module attributes that point at the real function, not the contents of a tuple.
_REAL_CLOCK = (time.perf_counter,)


class LostUpdate(AssertionError):
    """The race fired: two tasks read the same value and one write was lost."""


@dataclass
class Collector:
    """What the race program observed, one entry per run (schedule).

    ``logs[i]`` is the interleaving of run i (the sequence of (task, segment) it
    executed), ``hits[i]`` whether the update was lost, ``ends[i]`` the perf_counter
    reading when the run's main coroutine finished: the wall time to the first failure is
    read off these, whatever the explorer's own API reports.
    """

    logs: list[tuple[int, ...]] = field(default_factory=list)
    hits: list[bool] = field(default_factory=list)
    ends: list[float] = field(default_factory=list)

    def clear(self) -> None:
        self.logs.clear()
        self.hits.clear()
        self.ends.clear()

    def drop_first(self) -> None:
        # Calibration runs (simloom's pct:auto probe, simloop's PCT horizon measurement)
        # execute the program once before the campaign proper; they are not schedules.
        if self.logs:
            del self.logs[0], self.hits[0], self.ends[0]


# The collector the race program writes to. A module global rather than an argument
# because the peers' campaign APIs call the program with no arguments.
COLLECTOR = Collector()


#: How the race program makes its shared counter: ``list`` for every runtime, except that
#: loopkit's dpor row with ``shared="declared"`` sets ``simulator.shared`` (the declaration
#: of the one piece of state the tasks share; the benchmark's own log is not part of it).
SHARED: Callable[[list[int]], list[int]] = list


async def _race_main(tasks: int, awaits: int, staggered: bool, locked: bool, raise_on_hit: bool) -> None:
    shared = SHARED([0])
    log: list[int] = []
    lock = asyncio.Lock()

    async def worker(i: int) -> None:
        # The read-await-write lost update of the issue: v = shared; await sleep(0) x k;
        # shared = v + 1. Each segment logs (task, segment) as one int so the interleaving
        # of a run is a plain tuple we can count distinct values of.
        if locked:
            async with lock:
                v = shared[0]
                log.append(i * 16)
                for s in range(awaits):
                    await asyncio.sleep(0)
                    log.append(i * 16 + s + 1)
                shared[0] = v + 1
        else:
            v = shared[0]
            log.append(i * 16)
            for s in range(awaits):
                await asyncio.sleep(0)
                log.append(i * 16 + s + 1)
            shared[0] = v + 1

    running = []
    for i in range(tasks):
        if staggered and i:
            # "Staggered": the next task starts a few loop steps later, so asyncio's own FIFO
            # order lets the previous task finish its read-write first and passes; only a
            # schedule that deviates from FIFO loses the update. One step per await of
            # the worker, so FIFO lets the previous worker through all its awaits.
            for _ in range(awaits):
                await asyncio.sleep(0)
        running.append(asyncio.ensure_future(worker(i)))
    await asyncio.gather(*running)
    hit = shared[0] != tasks
    COLLECTOR.logs.append(tuple(log))
    COLLECTOR.hits.append(hit)
    COLLECTOR.ends.append(_REAL_CLOCK[0]())
    if hit and raise_on_hit:
        raise LostUpdate(f"lost update: shared={shared[0]}, expected {tasks}")


def race(tasks: int, awaits: int, *, staggered: bool, locked: bool = False, raise_on_hit: bool = False) -> Program:
    """The lost-update program; with ``raise_on_hit`` the race is a failing run."""
    return functools.partial(_race_main, tasks, awaits, staggered, locked, raise_on_hit)


# -- overhead: a queue pipeline with timers -------------------------------------------


async def _pipeline_main(scale: float) -> int:
    """10 tasks (4 producers, 4 workers, 2 sinks) pass 100 items through two queues.

    Producers put an item every 2.4 s (25 items each: 60 s of virtual time), workers take
    0.05 s per item under ``wait_for`` (a timer armed and cancelled per get), sinks count.
    ``scale`` multiplies every delay: plain asyncio runs it with a tiny scale so its timers
    stay real timers (heap, select timeout) without a minute of real waiting.
    """
    work: asyncio.Queue[int] = asyncio.Queue(maxsize=8)
    done: asyncio.Queue[int] = asyncio.Queue()
    total = [0]

    async def producer(p: int) -> None:
        for j in range(25):
            await asyncio.sleep(2.4 * scale)
            await work.put(p * 100 + j)

    async def worker() -> None:
        while True:
            try:
                item = await asyncio.wait_for(work.get(), timeout=600 * scale if scale else None)
            except TimeoutError:
                # An idle timeout, not the end of the work: on plain asyncio it is scaled to
                # ~60 us, so a GC pass or the OS scheduling another process fires it; a worker
                # that died of it would leave work.join() waiting forever.
                continue
            await asyncio.sleep(0.05 * scale)
            await done.put(item)
            work.task_done()

    async def sink() -> None:
        while True:
            item = await done.get()
            total[0] += item
            done.task_done()

    producers = [asyncio.ensure_future(producer(p)) for p in range(4)]
    helpers = [asyncio.ensure_future(worker()) for _ in range(4)]
    helpers += [asyncio.ensure_future(sink()) for _ in range(2)]
    await asyncio.gather(*producers)
    await work.join()
    await done.join()
    for h in helpers:
        h.cancel()
    await asyncio.gather(*helpers, return_exceptions=True)
    return total[0]


def pipeline(scale: float = 1.0) -> Program:
    return functools.partial(_pipeline_main, scale)


# -- virtual-time scale: many sleepers ------------------------------------------------


async def _sleepers_main(count: int, distinct: bool, scale: float) -> None:
    async def sleeper(i: int) -> None:
        # An hour each; "distinct" spreads the deadlines one second apart, so the timer
        # heap really has `count` different deadlines to order.
        await asyncio.sleep((3600.0 + (i if distinct else 0)) * scale)

    await asyncio.gather(*(sleeper(i) for i in range(count)))


def sleepers(count: int, *, distinct: bool, scale: float = 1.0) -> Program:
    return functools.partial(_sleepers_main, count, distinct, scale)


# -- the hangs ------------------------------------------------------------------------


async def _heartbeat_deadlock_main() -> None:
    """A deadlock kept "alive" by a periodic timer.

    ``waiter`` waits on an event nobody will ever set; a heartbeat task ticks every second
    forever, so the loop is never idle and virtual time runs on without end. Nothing but
    timers can make progress: a runtime has to notice that (a virtual-time horizon or a
    progress watchdog) to report it.
    """
    never = asyncio.Event()

    async def heartbeat() -> None:
        while True:
            await asyncio.sleep(1.0)

    async def waiter() -> None:
        await never.wait()

    beat = asyncio.ensure_future(heartbeat())
    await waiter()
    beat.cancel()


def heartbeat_deadlock() -> Program:
    return _heartbeat_deadlock_main


async def _spin_main() -> None:
    """A ``sleep(0)`` spin loop on a flag nothing will ever set (a livelock).

    Every step yields, so the loop is always busy and virtual time never moves.
    """
    flag = [False]

    async def spinner() -> None:
        while not flag[0]:
            await asyncio.sleep(0)

    await asyncio.ensure_future(spinner())


def spin_loop() -> Program:
    return _spin_main


# -- determinism: behaviour that depends on PYTHONHASHSEED ----------------------------

SET_OUTPUT: list[str] = []


async def _set_iteration_main() -> list[str]:
    """Start one task per name in a set of strings, so the start order (and therefore the
    observable output order) follows str hashing, i.e. PYTHONHASHSEED. A runtime's
    determinism check must see that two processes behave differently."""
    SET_OUTPUT.clear()
    names = {"alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel"}

    async def worker(name: str) -> None:
        await asyncio.sleep(0)
        SET_OUTPUT.append(name)

    await asyncio.gather(*(asyncio.ensure_future(worker(n)) for n in names))
    return list(SET_OUTPUT)


def set_iteration() -> Program:
    return _set_iteration_main


# -- the agent race: a plain-asyncio agent with the window-2 bug ---------------------------

AGENT_CHUNKS = 2  # model chunks per turn (each one await)


class AgentRaceFailure(AssertionError):
    """when_idle() was released while the replacement prompt was still queued (window 2)."""


class MiniAgent:
    """A minimal agent loop with the seed's window-2 bug (independent of loopkit's reference
    loop: plain asyncio, so every runtime runs it unmodified).

    ``send`` queues a prompt for the driver; ``cancel`` clears the queue and stops the running
    turn; ``when_idle`` returns an event set on the next idle transition. Status changes
    call the listeners synchronously (an event bus). The bug: when a synchronous
    status('running') listener cancels the turn about to start and queues a replacement, the
    driver settles idle unconditionally, releasing ``when_idle()`` waiters while the
    replacement is still queued (the fix checks the queue first).
    """

    def __init__(self) -> None:
        self.status = "idle"
        self.queue: list[str] = []
        self.ran: list[str] = []
        self.listeners: list[Callable[[str], None]] = []
        self.waiters: list[asyncio.Event] = []
        self.wake = asyncio.Event()
        self.cancelled = False
        self.closed = False

    def send(self, prompt: str) -> None:
        self.queue.append(prompt)
        self.wake.set()

    def cancel(self) -> None:
        self.queue.clear()
        self.cancelled = True
        self.wake.set()

    def when_idle(self) -> asyncio.Event:
        """An event set on the next idle transition (at once when idle with nothing queued)."""
        waiter = asyncio.Event()
        if self.status == "idle" and not self.queue:
            waiter.set()
        else:
            self.waiters.append(waiter)
        return waiter

    def close(self) -> None:
        self.closed = True
        self.wake.set()

    def _set_status(self, status: str) -> None:
        self.status = status
        if status == "idle":
            waiters, self.waiters = self.waiters, []
            for w in waiters:
                w.set()
        for listener in list(self.listeners):
            listener(status)

    async def drive(self) -> None:
        """The driver: park until something is queued, run one turn, repeat until closed."""
        while True:
            while not self.queue:
                if self.closed:
                    return
                self.wake.clear()
                await self.wake.wait()
            self.cancelled = False
            self._set_status("running")
            if self.cancelled:
                # Window 2: a running listener cancelled the turn about to start.
                self.cancelled = False
                self._set_status("idle")  # BUG: the replacement it queued is still waiting
                continue
            prompt = self.queue.pop(0)
            for _ in range(AGENT_CHUNKS):  # the model streams its reply
                await asyncio.sleep(0)
                if self.cancelled:
                    break
            if self.cancelled:
                self.cancelled = False
            else:
                self.ran.append(prompt)
            if not self.queue:
                self._set_status("idle")


class AgentRace:
    """The state of one agent-race run and its three actors (worker coroutines).

    The caller sends A and waits for idle; a moment later the user types a correction B: if
    A's turn is running the UI cancels it and sends B (the mid-turn path, correct), otherwise
    the UI's synchronous status listener swaps B in when the turn starts (window 2, where the
    bug releases ``when_idle()`` early). In asyncio's own order the driver starts A's turn
    before the user types, so the run passes; only a schedule where the user's step runs
    before the driver's wake-up fails. ``ok`` is the invariant: when ``when_idle()`` resolved,
    the agent was idle with nothing queued.
    """

    def __init__(self) -> None:
        self.agent = MiniAgent()
        self.drafts: list[str] = []
        self.ok = True
        self.agent.listeners.append(self._on_status)

    def _on_status(self, status: str) -> None:
        # The UI's listener: a correction typed before the turn started replaces the turn.
        if status == "running" and self.drafts:
            self.agent.cancel()
            self.agent.send(self.drafts.pop())

    async def driver(self) -> None:
        await self.agent.drive()

    async def caller(self) -> None:
        self.agent.send("A")
        await self.agent.when_idle().wait()
        agent = self.agent
        self.ok = agent.status == "idle" and not agent.queue
        agent.close()

    async def user(self) -> None:
        await asyncio.sleep(0)  # the user types a correction a moment later
        if self.agent.status == "running":
            self.agent.cancel()  # mid-turn: stop A, then send the correction
            self.agent.send("B")
        else:
            self.drafts.append("B")  # not started yet: the running listener swaps it in


def check_agent_race(state: AgentRace) -> bool:
    """The invariant, for explorers that check one after the workers finish (frontrun)."""
    return state.ok


async def _agent_race_main() -> bool:
    state = AgentRace()
    await asyncio.gather(state.driver(), state.caller(), state.user())
    COLLECTOR.hits.append(not state.ok)
    COLLECTOR.logs.append(())
    COLLECTOR.ends.append(_REAL_CLOCK[0]())
    if not state.ok:
        raise AgentRaceFailure("when_idle() released while the replacement was still queued")
    return True


def agent_race() -> Program:
    """The agent race as one program (every runtime but frontrun, which takes the workers)."""
    return _agent_race_main


# -- worker form (frontrun interleaves the worker coroutines it is given) ----------------


class Counter:
    """The race programs' shared state, for explorers that take (setup, workers, invariant)."""

    def __init__(self) -> None:
        self.value = 0
        self.lock = asyncio.Lock()


def _race_worker(i: int, awaits: int, staggered: bool, locked: bool) -> Callable[[Counter], Coroutine[Any, Any, None]]:
    async def worker(state: Counter) -> None:
        if staggered:
            # The same stagger as _race_main: worker i starts i * awaits loop steps later.
            for _ in range(i * awaits):
                await asyncio.sleep(0)
        if locked:
            async with state.lock:
                v = state.value
                for _ in range(awaits):
                    await asyncio.sleep(0)
                state.value = v + 1
        else:
            v = state.value
            for _ in range(awaits):
                await asyncio.sleep(0)
            state.value = v + 1

    return worker


def race_workers(program: Program) -> tuple[Callable[[], Any], list[Callable[[Any], Any]], Callable[[Any], bool]] | None:
    """The (setup, workers, invariant) form of a race program made by :func:`race` or of the
    agent race; None for other programs."""
    if program is _agent_race_main:
        return AgentRace, [AgentRace.driver, AgentRace.caller, AgentRace.user], check_agent_race
    func = getattr(program, "func", None)
    if func is not _race_main:
        return None
    tasks, awaits, staggered, locked, _raise = program.args  # type: ignore[attr-defined]
    workers = [_race_worker(i, awaits, staggered, locked) for i in range(tasks)]
    return Counter, workers, lambda state: state.value == tasks
