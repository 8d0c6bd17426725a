# mypy: disable-error-code="attr-defined,override,unused-ignore,misc"
"""The deterministic event loop and :func:`run`.

Model (see docs/simulator.md for the full statement):

* Ready callbacks are partitioned by *origin*: the callback (or task step) that was running
  when they were scheduled. Within an origin they run FIFO; a due timer is an origin of its
  own. Concatenating the origins in creation order gives exactly asyncio's FIFO ``_ready``
  order, so the FIFO strategy reproduces plain asyncio.
* A *choice point* exists only when more than one option is available: several origins with
  ready work, and/or (``vary_timers``) a pending timer due within ``timer_window`` virtual
  seconds that may fire before the remaining ready work (as if the external event that made that
  work ready had arrived later). The strategy returns an option index; ``0`` is always FIFO.
* ``mode="wide"`` makes every ready callback its own origin (not realisable in general; it is
  named in the schedule).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import heapq
import itertools
import sys
import threading
import traceback
import types
from asyncio import base_events, events
from collections import deque
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

from simulator import _anyio, _freeze, _pool
from simulator import supervise as _supervise
from simulator.errors import SimulationError
from simulator.sources import SimSources

if TYPE_CHECKING:
    from simulator.result import RunResult
    from simulator.strategies.base import Strategy

_Task = asyncio.Task
_Handle = events.Handle
_heappop = heapq.heappop

#: The loop of the simulation running on this process (one at a time), or None.
_CURRENT: SimLoop | None = None

DEFAULT_MAX_STEPS = 100_000
DEFAULT_STALL_ADVANCES = 10_000
_STALL_INTERVAL = 1_000
#: callbacks of ready work in a row with nothing observed, no task created or finished and the
#: clock still: a spin, which costs virtual time (``_SPIN_COST`` per callback, see
#: ``SimLoop._spun``); and how long the oldest ready origin may be passed over
_SPIN_STEPS = 1_000
_SPIN_COST = 10e-6
DEFAULT_TIMER_WINDOW = 1.0
CLEANUP_STEPS = 20_000

MODES = ("realisable", "wide")


# --------------------------------------------------------------------------------------------
# Escapes: threads


_real_thread_start = threading.Thread.start


_MISSING = object()

ESCAPE = "simulation/escape"
"""The timeline kind of an escape: every escape the tripwires stop is also observed as
``{"kind": "simulation/escape", "call", "message"}`` where it happened, so a program that catches
the error and goes on (a loop containing its plugins' failures) is still seen to have tried."""


def _escaped(call: str, message: str) -> SimulationError:
    """The error an escape raises, observed first in the running simulation's timeline."""
    loop = _CURRENT
    if loop is not None and loop._recording and loop._thread_id == threading.get_ident():
        _record(loop, {"t": loop._now, "kind": ESCAPE, "call": call, "message": message})
    return SimulationError(message)


def _is_sim_loop(loop: asyncio.AbstractEventLoop) -> bool:
    """Whether ``loop`` is the running simulation's, on its thread (``_anyio``'s routing)."""
    return loop is _CURRENT and loop._thread_id == threading.get_ident()


def _sim_loop_here() -> SimLoop | None:
    """The running simulation's loop when the calling thread runs it, else None (``_pool``)."""
    loop = _CURRENT
    return loop if loop is not None and loop._thread_id == threading.get_ident() else None


def _guarded_thread_start(self: threading.Thread) -> None:
    loop = _CURRENT
    if loop is not None and loop._thread_id == threading.get_ident():
        raise _escaped("threading.Thread.start()",
                       f"threading.Thread.start() called inside a simulation (thread {self.name!r}): "
                       "threads escape the deterministic scheduler")
    _real_thread_start(self)


threading.Thread.start = _guarded_thread_start  # type: ignore[method-assign]


_NOT_SIMULATED = ("real I/O, executors, subprocesses and signal handlers are not simulated; use a fake (for "
                  "agent loops: conformance.fakes) instead")


def _escape(call: str) -> SimulationError:
    return _escaped(call, f"{call} called inside a simulation: {_NOT_SIMULATED}")


# --------------------------------------------------------------------------------------------
# Escapes: blocking calls
#
# A call that blocks the thread (a real sleep, a socket, a subprocess, select) inside a
# simulation stalls the whole simulated world in *wall* time, while virtual time stands still:
# the program is nondeterministic and slow at once (a ``time.sleep(0.2)`` per send turns a
# two-second suite into five minutes). They are made errors like threads are, naming the call,
# so a loop that blocks its event loop fails at the call instead of passing slowly. The guards
# live on module attributes and classes, never on the loop's hot path: outside a run (or on
# another thread) each costs one global read and one comparison, then calls the real function.

_blocking_allowed = 0
"""Depth of :func:`allow_blocking` blocks in force (the checks are off while it is > 0)."""


def _blocks(call: str) -> SimulationError:
    return _escaped(call,
        f"{call} blocks the event loop inside a simulation: it stalls every simulated task in "
        "wall time while virtual time stands still; await an asyncio equivalent (asyncio.sleep "
        "is virtual), use a fake, or wrap deliberate blocking I/O in simulator.allow_blocking()"
    )


def _simulating() -> bool:
    """Whether the calling thread is running a simulation with the blocking checks on."""
    loop = _CURRENT
    return loop is not None and not _blocking_allowed and loop._thread_id == threading.get_ident()


class allow_blocking:  # lower case: used like a function, ``with simulator.allow_blocking():``
    """Suspend the blocking-call escapes (``time.sleep``, sockets, ``select``, subprocesses, ...)
    inside its block, for code that blocks on purpose: an adapter that speaks to a child process
    over pipes wraps its own spawning and pipe I/O in it. Re-entrant; threads stay escapes."""

    def __enter__(self) -> allow_blocking:
        global _blocking_allowed
        _blocking_allowed += 1
        return self

    def __exit__(self, *exc: object) -> None:
        global _blocking_allowed
        _blocking_allowed -= 1


def _guard(real: Callable[..., Any], call: str) -> Callable[..., Any]:
    def guarded(*args: Any, **kwargs: Any) -> Any:
        if _simulating():
            raise _blocks(call)
        return real(*args, **kwargs)

    guarded.__name__ = getattr(real, "__name__", call)
    guarded.__qualname__ = getattr(real, "__qualname__", call)
    guarded.__doc__ = getattr(real, "__doc__", None)
    guarded.__wrapped__ = real  # type: ignore[attr-defined]
    return guarded


def _install_blocking_guards() -> None:
    import builtins
    import os
    import select
    import selectors
    import socket
    import subprocess
    import time

    for module, name in ((time, "sleep"), (select, "select"), (socket, "getaddrinfo"),
                         (socket, "gethostbyname"), (socket, "gethostbyname_ex"),
                         (socket, "create_connection"), (os, "system"), (os, "fork"),
                         (os, "wait"), (os, "waitpid"), (builtins, "input")):
        real = getattr(module, name, None)
        if real is not None and not hasattr(real, "__wrapped__"):
            setattr(module, name, _guard(real, f"{module.__name__}.{name}()"))
    for name in ("poll", "epoll", "devpoll", "kqueue"):
        real = getattr(select, name, None)
        if real is not None and not isinstance(real, type):  # the classes stay subclassable
            setattr(select, name, _guard(real, f"select.{name}()"))
    for cls_name in ("SelectSelector", "PollSelector", "EpollSelector", "DevpollSelector", "KqueueSelector"):
        cls = getattr(selectors, cls_name, None)
        if cls is not None and "select" in vars(cls):
            cls.select = _guard(vars(cls)["select"], f"selectors.{cls_name}.select()")
    for method in ("connect", "connect_ex", "accept", "send", "sendall", "sendto", "sendmsg", "sendfile",
                   "recv", "recv_into", "recvfrom", "recvfrom_into", "recvmsg"):
        real = getattr(socket.socket, method, None)
        if real is not None:
            setattr(socket.socket, method, _guard(real, f"socket.{method}()"))
    subprocess.Popen.__init__ = _guard(subprocess.Popen.__init__, "subprocess.Popen()")  # type: ignore[method-assign]  # run, call, check_output


def _tripwire(real: Callable[..., Any], call: str, why: str,
              applies: Callable[[str, tuple[Any, ...]], bool] | None = None) -> Callable[..., Any]:
    """``real``, an escape instead on the running simulation's thread (where ``applies(call,
    args)`` says so, when given): ``{call} called inside a simulation: {why}``. Unlike the
    blocking guards, ``allow_blocking`` does not lift it."""
    def guarded(*args: Any, **kwargs: Any) -> Any:
        if _sim_loop_here() is not None and (applies is None or applies(call, args)):
            raise _escaped(call, f"{call} called inside a simulation: {why}")
        return real(*args, **kwargs)

    guarded.__name__ = getattr(real, "__name__", call)
    guarded.__doc__ = getattr(real, "__doc__", None)
    guarded.__wrapped__ = real  # type: ignore[attr-defined]
    return guarded


_ENDS_PROCESS = "the program tried to end the process (an agent loop must not)"
"""Ending the process from inside a simulation would end the whole check with the
implementation's exit status (``os._exit(0)`` looked like a clean pass)."""

_SIGNALS_ITSELF = "the program tried to signal its own process (an agent loop must not)"
"""A signal to its own process would stop the whole check as if the user had (a SIGTERM's exit
143, with no word), or run a handler outside the scheduler."""


def _own_process(call: str, args: tuple[Any, ...]) -> bool:
    """Whether a signal call targets this process: ``os.kill`` of its pid, of its group (``0``,
    ``-pgid``), ``os.killpg`` of its group; ``raise_signal`` and ``pthread_kill`` always do. A
    signal to another process (an adapter stopping its child) is no escape."""
    import os

    if call in ("signal.raise_signal()", "signal.pthread_kill()"):
        return True
    target = args[0] if args else None
    if not isinstance(target, int) or (len(args) > 1 and args[1] == 0):  # signal 0 only asks if it exists
        return False
    if call == "os.killpg()":
        return target in (0, os.getpgrp())
    return target in (os.getpid(), 0, -os.getpgrp())


def _install_exit_guards() -> None:
    import os
    import signal

    # A signal handler, timer or mask set from inside a run acts outside the scheduler, and
    # outlives the run: a SIGALRM handler replaced (or the alarm masked) disables the wall-clock
    # limit, and a spin then hangs the check for ever. The kit's own supervision calls the C
    # module ``_signal`` directly, which these guards leave alone.
    wires: list[tuple[Any, str, str, Callable[[str, tuple[Any, ...]], bool] | None]] = [
        (os, "_exit", _ENDS_PROCESS, None), (sys, "exit", _ENDS_PROCESS, None), (os, "abort", _ENDS_PROCESS, None),
        *((module, name, _SIGNALS_ITSELF, _own_process)
          for module, name in ((os, "kill"), (os, "killpg"), (signal, "raise_signal"), (signal, "pthread_kill"))),
        *((signal, name, _NOT_SIMULATED, None)
          for name in ("signal", "setitimer", "alarm", "pthread_sigmask", "siginterrupt", "set_wakeup_fd")),
    ]
    for module, name, why, applies in wires:
        real = getattr(module, name, None)
        if real is not None and not hasattr(real, "__wrapped__"):
            setattr(module, name, _tripwire(real, f"{module.__name__}.{name}()", why, applies))


_install_blocking_guards()
_install_exit_guards()


# --------------------------------------------------------------------------------------------
# Labels


def _coro_name(coro: Any) -> str:
    return getattr(coro, "__qualname__", None) or type(coro).__name__


def _callback_name(cb: Any) -> str:
    name = getattr(cb, "__qualname__", None)
    if name is None:
        func = getattr(cb, "func", None)  # functools.partial
        name = getattr(func, "__qualname__", None) or type(cb).__name__
    return str(name)


def _executor_name(func: Any) -> str:
    # asyncio.to_thread(f) hands over functools.partial(context.run, f, ...): name f
    if isinstance(func, functools.partial) and isinstance(getattr(func.func, "__self__", None),
                                                          contextvars.Context) and func.args:
        return _callback_name(func.args[0])
    return _callback_name(func)


def task_label(task: asyncio.Task[Any]) -> str:
    return f"{task.get_name()}:{_coro_name(task.get_coro())}"


def handle_task(h: Any) -> asyncio.Task[Any] | None:
    """The task a ready handle steps, or (for a future-resolving callback) wakes, if any."""
    cb = h._callback
    owner = getattr(cb, "__self__", None)
    if isinstance(owner, _Task):
        return owner
    args = h._args
    if args:
        fut = args[0]
        if isinstance(fut, _Task):
            return None
        if isinstance(fut, asyncio.Future):
            for item in getattr(fut, "_callbacks", None) or ():
                c = item[0] if isinstance(item, tuple) else item
                o = getattr(c, "__self__", None)
                if isinstance(o, _Task):
                    return o
    return None


def handle_kind(h: Any) -> str:
    """``"step"`` (a task step or wakeup: runs user code), ``"glue"`` (an asyncio-internal
    callback: resolves futures, schedules wakeups) or ``"callback"`` (a user callback)."""
    cb = h._callback
    if isinstance(getattr(cb, "__self__", None), _Task):
        return "step"
    mod = getattr(cb, "__module__", None) or getattr(getattr(cb, "func", None), "__module__", "")
    if isinstance(mod, str) and mod.startswith("asyncio"):
        return "glue"
    return "callback"


def handle_label(h: Any) -> str:
    """Semantic label of what a handle runs: ``task-name:coroutine-qualname`` for task steps,
    ``cb:qualname`` (plus the task it concerns) for callbacks."""
    return callback_label(h._callback, h._args)


def callback_label(cb: Any, args: Any) -> str:
    owner = getattr(cb, "__self__", None)
    if isinstance(owner, _Task):
        return task_label(owner)
    name = _callback_name(cb)
    if args and isinstance(args[0], _Task):
        return f"cb:{name}({args[0].get_name()})"
    return f"cb:{name}"


def await_stack(task: asyncio.Task[Any]) -> list[str]:
    """Where a pending task waits: ``func (file:line)`` for each frame of its await chain."""
    out: list[str] = []
    coro: Any = task.get_coro()
    seen = 0
    while coro is not None and seen < 64:
        seen += 1
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None) or getattr(
            coro, "ag_frame", None
        )
        if frame is not None:
            code = frame.f_code
            out.append(f"{code.co_qualname if hasattr(code, 'co_qualname') else code.co_name} "
                       f"({code.co_filename}:{frame.f_lineno})")
        nxt = (
            getattr(coro, "cr_await", None)
            or getattr(coro, "gi_yieldfrom", None)
            or getattr(coro, "ag_await", None)
        )
        if nxt is None or (not isinstance(
            nxt, (types.CoroutineType, types.GeneratorType, types.AsyncGeneratorType)
        ) and not hasattr(nxt, "cr_frame")):
            if nxt is not None:
                out.append(f"<{type(nxt).__name__}>")
            break
        coro = nxt
    waiter = getattr(task, "_fut_waiter", None)
    if waiter is not None:
        out.append(f"waiting on {_describe_future(waiter)}")
    return out


def _describe_future(fut: Any) -> str:
    if isinstance(fut, _Task):
        return f"task {fut.get_name()}"
    cbs = []
    for item in getattr(fut, "_callbacks", None) or ():
        c = item[0] if isinstance(item, tuple) else item
        cbs.append(_callback_name(c))
    return f"{type(fut).__name__} (callbacks: {', '.join(cbs) or 'none'})"



# --------------------------------------------------------------------------------------------
# Dependency tracing (partial-order reduction; docs/simulator.md, "DPOR")
#
# A traced run (``SimLoop._use_tracing``, asked for by the dpor strategy) records, for every
# callback it runs, an *event*: a stable name, the process (origin) it belongs to, the event it
# structurally follows (the previous event of its origin, or the event that created the origin
# or timer), and its *footprint*: ``{key: 0 (read) | 1 (write)}`` over the asyncio objects it
# touched (keys are ``id()``s, plus the pseudo-keys below). Nothing here runs in FIFO or in
# untraced exploring runs: tracing swaps in its own driver and scheduling methods.

#: pseudo-keys (object ids are 16-byte aligned addresses, never this small)
CLOCK = 1  # the virtual clock: read by loop.time(), written by a timer firing
TIMERS = 2  # the timer queue (which timer is earliest): read by call_at, written by a fire
USER = 3  # plain Python state, in conservative mode: every callback running user code writes it
_FP = dict[int, int]


def touch(key: int, write: int = 1) -> None:
    """Record that the running (traced) callback reads (``write=0``) or writes ``key``."""
    loop = _CURRENT
    if loop is not None:
        fp = loop._tr_fp
        if fp is not None:
            fp[key] = fp.get(key, 0) | write


def obj_key(loop: SimLoop, obj: Any) -> int:
    """The footprint key of an object: its stable name when the run created it (the same in
    every run with the same causal history, which sleep sets compare across runs), else its
    ``id`` (an object from outside the run is the same object in every run)."""
    k = loop._tr_names.get(id(obj))
    return k if k is not None else id(obj)


def cancel_key(key: int) -> int:
    """The key of a task's cancellation request, next to the key of its completion."""
    return key - 1 if key < 0 else key + 1


def name_object(obj: Any) -> None:
    """Give an object created in a traced run its stable name: after the event creating it
    and how many things that event created before it (negative: never an id or pseudo-key)."""
    loop = _CURRENT
    if loop is not None:
        tr = loop._tr
        if tr is not None:
            k = loop._tr_k
            loop._tr_k = k + 1
            loop._tr_names[id(obj)] = -2 * tr.name(("o", loop._tr_sid, k))
            loop._tr_keep.append(obj)  # alive until the run ends: its id is not reused


def touch_object(obj: Any, write: int, cancel: bool = False) -> None:
    """Record an access to ``obj`` (its completion, or with ``cancel`` its cancellation
    request) by the running traced callback."""
    loop = _CURRENT
    if loop is not None:
        fp = loop._tr_fp
        if fp is not None:
            k = loop._tr_names.get(id(obj))
            if k is None:
                k = id(obj)
            if cancel:
                k = k - 1 if k < 0 else k + 1
            fp[k] = fp.get(k, 0) | write


#: asyncio functions whose reads of their children's state are bookkeeping: gather checks
#: ``child.done()`` (3.12+) only to choose between scheduling its done-callback now and
#: registering it, and either way the same callback runs (see traced_add_done_callback)
_AGGREGATORS = frozenset(("gather", "_gather"))
_getframe = sys._getframe


def _traced(orig: Any, write: int, cancel: bool = False) -> Callable[..., Any]:
    """``orig`` (a method) that first records an access to its object."""

    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        if write or _getframe(1).f_code.co_name not in _AGGREGATORS:
            touch_object(self, write, cancel)
        return orig(self, *args, **kwargs)

    method.__name__ = getattr(orig, "__name__", "method")
    method.__qualname__ = getattr(orig, "__qualname__", method.__name__)
    return method


def _is_glue(fn: Any) -> bool:
    """Whether a callback is asyncio's own code (gather's, TaskGroup's, ... bookkeeping)."""
    mod = getattr(fn, "__module__", None) or getattr(getattr(fn, "func", None), "__module__", "")
    return isinstance(mod, str) and mod.startswith("asyncio")


def traced_add_done_callback(orig: Any) -> Callable[..., Any]:
    """``add_done_callback`` that writes the future's completion state, unless the callback is
    asyncio's own: registering user code (a task's wake-up included) before or after the
    future completes decides where that code runs; registering asyncio's bookkeeping (gather,
    TaskGroup, wait) only moves a callback that is dependent on nothing it does not write."""

    def add_done_callback(self: Any, fn: Any, *args: Any, **kwargs: Any) -> Any:
        if not _is_glue(fn):
            touch_object(self, 1)
        return orig(self, fn, *args, **kwargs)

    return add_done_callback


# A future's completion state: read by done()/result()/awaiting it, written by resolving or
# cancelling it and by adding a done-callback (the order of callbacks is the order of wake-ups).
_FUTURE_READS = ("done", "cancelled", "result", "exception", "__await__", "__iter__")
_FUTURE_WRITES = ("set_result", "set_exception", "cancel", "remove_done_callback")


class SimTask(_Task):  # type: ignore[misc,valid-type]
    """The simulation's tasks: an ``asyncio.Task`` whose hash is its creation number in the run,
    not its address. A set of tasks (``TaskGroup``'s children, what ``asyncio.wait`` is given, a
    loop's own) then iterates in an order the run decides, the same in every process: a
    ``TaskGroup`` cancelling its children on an error did so in an order that followed memory
    addresses, and a failing schedule did not replay in another worker (tg_loop, session 60)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        loop = _CURRENT
        if loop is not None:
            loop._task_hashes += 1
            self._sim_hash = loop._task_hashes
        else:
            self._sim_hash = id(self) >> 4
        super().__init__(*args, **kwargs)

    def __hash__(self) -> int:
        return self._sim_hash


def _traced_class(base: type, name: str, extra: dict[str, Any]) -> type:
    ns: dict[str, Any] = {"__module__": __name__}
    for meth in _FUTURE_READS:
        ns[meth] = _traced(getattr(base, meth), 0)
    for meth in _FUTURE_WRITES:
        ns[meth] = _traced(getattr(base, meth), 1)
    ns["add_done_callback"] = traced_add_done_callback(base.add_done_callback)  # type: ignore[attr-defined]
    ns.update(extra)
    return type(name, (base,), ns)


#: ``loop.create_future()`` in a traced run
TracedFuture: type[asyncio.Future[Any]] = _traced_class(asyncio.Future, "TracedFuture", {})
#: ``loop.create_task()`` in a traced run. A task has two keys: its completion (``id``) and its
#: cancellation request (``id + 1``, read by each of its steps, written by ``cancel()``), so a
#: ``cancel()`` conflicts with the task's next step but not with a done-callback being added.
TracedTask: type[asyncio.Task[Any]] = _traced_class(SimTask, "TracedTask", {
    "cancel": _traced(asyncio.Task.cancel, 1, True),
    "uncancel": _traced(asyncio.Task.uncancel, 1, True),
    "cancelling": _traced(asyncio.Task.cancelling, 0, True),
})
_Future = asyncio.Future


class _Group(deque):  # type: ignore[type-arg]
    """An origin's ready callbacks, in a traced run: its stable name (``sid``), the trace
    position of the event that created it (``cpos``), how many of its callbacks ran (``n``)
    and the trace position of the last one (``last``)."""

    __slots__ = ("cpos", "last", "n", "sid")


class Tracer:
    """What a traced run reports to (owned by the strategy, kept across its runs).

    ``name(key)`` interns a causal name (a tuple of earlier names) to a small int, the same in
    every run that reaches the same causal history: an origin is named after the event that
    created it (and how many origins that event created before it), an event after its origin
    and its position in it, a timer after the event that set it. ``events`` receives one
    ``(name, origin name, structural predecessor position, footprint, choice index or -1)``
    per callback run. ``user``: callbacks running user code write :data:`USER` (conservative
    about plain Python state)."""

    def __init__(self, *, user: bool = True) -> None:
        self.user = user
        self.names: dict[tuple[Any, ...], int] = {}
        self.events: list[tuple[int, int, int, _FP, int]] = []

    def name(self, key: tuple[Any, ...]) -> int:
        n = self.names.get(key)
        if n is None:
            n = self.names[key] = len(self.names) + 1
        return n


# --------------------------------------------------------------------------------------------
# The loop


class _SimTimer(events.TimerHandle):
    """A timer ordered by (deadline, creation order): equal virtual deadlines fire in the order
    they were set, as they would on a real clock where setting takes time. (The loop's heap
    holds ``(deadline, creation order, timer)`` tuples; ``__lt__`` keeps the same order for any
    code that compares the timers themselves.)"""

    __slots__ = ("_seq",)

    def __lt__(self, other: Any) -> bool:
        w, ow = self._when, other._when
        return w < ow or (w == ow and self._seq < other._seq)


class _TracedTimer(_SimTimer):
    """A timer of a traced run: its stable name and the trace position of its creator."""

    __slots__ = ("_cpos", "_sid")


class SimLoop(base_events.BaseEventLoop):
    """A deterministic asyncio event loop with virtual time. Create it through :func:`run`."""

    #: the class of the tasks ``create_task`` makes (a tracing subclass when traced)
    _task_class: type[asyncio.Task[Any]] = SimTask

    def __init__(
        self,
        *,
        strategy: Strategy | None,
        seed: int,
        max_steps: int | None,
        max_time: float | None,
        mode: str,
        vary_timers: bool,
        timer_window: float,
        stall_advances: int | None = DEFAULT_STALL_ADVANCES,
    ) -> None:
        super().__init__()
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
        self._now = 0.0
        # The clock's last jump made because nothing was ready. A timer may fire early only
        # within ``timer_window`` of it, not of now: measured from now, a poller's timers
        # could each fire early in turn and move the clock on for ever while ready work
        # waits, which real asyncio cannot do.
        self._anchor = 0.0
        self._timer_seq = 0
        self._groups: deque[deque[Any]] = deque()
        self._cur_group: deque[Any] | None = None
        self._nready = 0
        self._wide = mode == "wide"
        self.mode = mode
        self._vary = vary_timers
        self._window = timer_window
        self._strategy = strategy
        self._choose: Callable[[int], int] | None = None
        self.seed = seed
        self._max_steps = max_steps if max_steps is not None else 1 << 62
        self._max_time = max_time
        self._steps = 0
        self._choices: list[tuple[int, int, Any, Any, bool]] = []
        self._record = True
        self._timeline: list[dict[str, Any]] = []
        self._recording = True  # off once the run is over (see _cleanup)
        #: callbacks called with each observed event (``on_observe``); this run only
        self._observers: list[_Observer] = []
        self._tasks: list[asyncio.Task[Any]] = []
        self._child_counts: dict[str, int] = {}
        self._cb_tasks = 0
        self._unhandled: list[dict[str, Any]] = []
        self._in_run = False
        self._sources = SimSources(seed, self)
        self._budget_reason: str | None = None
        self._fifo = False
        #: FIFO runs: handles appended to the ready queue so far (see ready_position)
        self._appended = 0
        # progress watchdog: every _STALL_INTERVAL idle time advances, compare a progress
        # signature (events observed, tasks created, tasks done); unchanged for
        # stall_advances advances = only timers fire = a deadlock kept alive by timers, unless a
        # timer pending all along (not re-armed: a bounded wait's) is still to come: the clock
        # then jumps to it, the re-armed ones (a poller's) firing late, as a busy loop's do
        self._advances = 0
        # the timers pending as the stall began, by id (held, so that no id is reused meanwhile)
        self._standing: dict[int, Any] | None = None
        # spin watchdog: ready work that only spins (``while not x: await sleep(0)``) stands for
        # time passing on a real loop, whose timers come due meanwhile (see _spun)
        self._next_spin_check = _SPIN_STEPS
        self._spin_sig: tuple[int, int, int, float] | None = None
        # fairness: the oldest ready origin, as last seen by _spun; passed over since then, it
        # runs next whatever the strategy would choose (asyncio runs what is ready in turn)
        self._front: tuple[Any, int] | None = None
        self._starved = False
        self._task_hashes = 0  # SimTask: the hash of the next task is its number in the run
        # wait_quiescent()'s futures: released by a timer due now, once nothing else is ready
        self._quiet: list[asyncio.Future[None]] = []
        self._spin_advances = 0  # the clock moved by spins (counted in clock_jumps)
        #: executor calls not run yet: the run's cleanup runs them, as asyncio.run waits for
        #: its default executor's work before it returns
        #: (a dict, not a set: cleanup runs them in the order they were made)
        self._executor_calls: dict[Callable[[], None], None] = {}
        self._stall_jump_sig: tuple[int, int, int] | None = None  # progress at the last stall jump
        self._stall_limit = stall_advances
        self._next_stall_check = _STALL_INTERVAL if stall_advances is not None else 1 << 62
        self._stall_sig: tuple[int, int, int] | None = None
        self._stalled_for = 0
        #: task -> step index it last ran at; maintained only when a strategy asks for it
        self._last_run: dict[Any, int] | None = None
        #: dependency tracing (``_use_tracing``): the tracer, and the footprint of the callback
        #: running now (``None`` outside a traced callback: touches are then dropped)
        self._tr: Tracer | None = None
        self._tr_fp: dict[int, int] | None = None
        self._tr_names: dict[int, int] = {}
        self._tr_keep: list[Any] = []

    def set_debug(self, enabled: bool) -> None:
        super().set_debug(enabled)
        # Every future made asks its loop get_debug(): a C callable answers, not a Python method.
        self.get_debug = itertools.repeat(self._debug).__next__  # type: ignore[method-assign]

    # -- clock ----------------------------------------------------------------------------
    def time(self) -> float:
        return self._now

    # -- scheduling -----------------------------------------------------------------------
    def call_at(  # type: ignore[override]
        self, when: float, callback: Callable[..., Any], *args: Any,
        context: contextvars.Context | None = None,
    ) -> events.TimerHandle:
        t = _SimTimer(when, callback, args, self, context)
        self._timer_seq = seq = self._timer_seq + 1
        t._seq = seq
        # Heap entries are (deadline, creation order, timer): tuples compare in C, so the heap
        # never calls a Python __lt__ (about a tenth of a timer-heavy run otherwise).
        heapq.heappush(self._scheduled, (when, seq, t))
        t._scheduled = True
        return t

    def call_later(  # type: ignore[override]
        self, delay: float, callback: Callable[..., Any], *args: Any,
        context: contextvars.Context | None = None,
    ) -> events.TimerHandle:
        return self.call_at(self._now + delay, callback, *args, context=context)

    def call_soon(  # type: ignore[override]
        self, callback: Callable[..., Any], *args: Any, context: contextvars.Context | None = None
    ) -> events.Handle:
        h = _Handle(callback, args, self, context)
        g = self._cur_group
        if g is None or self._wide:
            g = self._cur_group = deque()
            self._groups.append(g)
        g.append(h)
        self._nready += 1
        return h

    def _call_soon_fifo(
        self, callback: Callable[..., Any], *args: Any, context: contextvars.Context | None = None
    ) -> events.Handle:
        h = _Handle(callback, args, self, context)
        self._ready.append(h)
        self._appended += 1
        return h

    def _use_fifo(self) -> None:
        """FIFO runs keep asyncio's single ready queue: no origins, no choice points."""
        self._fifo = True
        self.call_soon = self._call_soon_fifo  # type: ignore[method-assign]

    # -- tracing (dpor) ---------------------------------------------------------------------
    def _use_tracing(self, tracer: Tracer) -> None:
        """Traced runs: origins and timers get stable names, every callback run becomes an
        event with a footprint (see :class:`Tracer`). Called by a strategy's ``begin``, before
        the main task exists; the run then uses :meth:`_drive_traced`."""
        self._tr = tracer
        self.unbounded_spins()
        tracer.events = []
        self._tr_names = {}
        self._tr_keep = []
        self._tr_sid = 0  # the name of the event running now (0: none, before the first)
        self._tr_pos = -1  # its position in tracer.events
        self._tr_k = 0  # origins / timers it created so far
        self._task_class = TracedTask
        self.call_soon = self._call_soon_traced  # type: ignore[method-assign]
        self.call_at = self._call_at_traced  # type: ignore[method-assign]
        self.time = self._time_traced  # type: ignore[method-assign]
        self.create_future = self._create_future_traced  # type: ignore[method-assign]
        self._timer_handle_cancelled = self._timer_cancelled_traced  # type: ignore[method-assign]

    def _new_group(self) -> _Group:
        tr = self._tr
        assert tr is not None
        k = self._tr_k
        self._tr_k = k + 1
        g = _Group()
        g.sid = tr.name((self._tr_sid, k))
        g.cpos = self._tr_pos
        g.n = 0
        g.last = -1
        return g

    def _call_soon_traced(
        self, callback: Callable[..., Any], *args: Any, context: contextvars.Context | None = None
    ) -> events.Handle:
        h = _Handle(callback, args, self, context)
        g = self._cur_group
        if g is None or self._wide:
            g = self._cur_group = self._new_group()
            self._groups.append(g)
        g.append(h)
        self._nready += 1
        fp = self._tr_fp
        if fp is not None and args and isinstance(args[0], _Future):
            # a future's done-callbacks being scheduled: the running callback completed it
            k = obj_key(self, args[0])
            fp[k] = 1
        return h

    def _call_at_traced(  # type: ignore[override]
        self, when: float, callback: Callable[..., Any], *args: Any,
        context: contextvars.Context | None = None,
    ) -> events.TimerHandle:
        tr = self._tr
        assert tr is not None
        t = _TracedTimer(when, callback, args, self, context)
        self._timer_seq = seq = self._timer_seq + 1
        t._seq = seq
        heapq.heappush(self._scheduled, (when, seq, t))
        t._scheduled = True
        k = self._tr_k
        self._tr_k = k + 1
        t._sid = tr.name(("t", self._tr_sid, k))
        t._cpos = self._tr_pos
        fp = self._tr_fp
        if fp is not None:
            # Reads the clock (call_later) and the timer queue. Timers with different deadlines
            # commute; equal deadlines fire in creation order, hence the per-deadline key.
            fp[CLOCK] = fp.get(CLOCK, 0)
            fp[TIMERS] = fp.get(TIMERS, 0)
            dk = hash(("deadline", when)) | 1 << 62  # never an object id
            fp[dk] = 1
        return t

    def _time_traced(self) -> float:
        fp = self._tr_fp
        if fp is not None and CLOCK not in fp:
            fp[CLOCK] = 0
        return self._now

    def _create_future_traced(self) -> asyncio.Future[Any]:
        fut = TracedFuture(loop=self)
        name_object(fut)
        return fut

    def _timer_cancelled_traced(self, handle: Any) -> None:
        fp = self._tr_fp
        if fp is not None:
            fp[TIMERS] = fp.get(TIMERS, 0)
            fp[getattr(handle, "_sid", 0) * -2 - 1] = 1  # the timer (a key of its own)
        if handle._scheduled:
            self._timer_cancelled_count += 1

    def option_sids(self) -> list[int]:
        """Traced runs: the stable name of each option's origin (the timer option's: the
        timer's), the same in every run that reaches this choice point."""
        sids = [g.sid for g in self._groups]
        t = self._timer_option()
        if t is not None:
            sids.append(t._sid)
        return sids

    def call_soon_threadsafe(  # type: ignore[override]
        self, callback: Callable[..., Any], *args: Any, context: contextvars.Context | None = None
    ) -> events.Handle:
        if self._thread_id is not None and threading.get_ident() != self._thread_id:
            raise SimulationError("call_soon_threadsafe() from another thread into a simulation")
        return self.call_soon(callback, *args, context=context)

    def _call_soon(self, callback: Any, args: Any, context: Any) -> events.Handle:  # type: ignore[override]
        return self.call_soon(callback, *args, context=context)

    def _write_to_self(self) -> None:
        pass

    def _process_events(self, event_list: Any) -> None:
        pass

    def create_task(  # type: ignore[override]
        self, coro: Any, *, name: str | None = None, context: contextvars.Context | None = None,
        **kwargs: Any,
    ) -> asyncio.Task[Any]:
        if name is None:
            parent = asyncio.current_task(self) if self._in_run else None
            if parent is not None:
                pname = parent.get_name()
                n = self._child_counts.get(pname, 0) + 1
                self._child_counts[pname] = n
                name = f"{pname}.{n}"
            else:
                self._cb_tasks += 1
                name = f"cb-task-{self._cb_tasks}"
        cls = self._task_class
        if context is None:
            task = cls(coro, loop=self, name=name)
        else:
            task = cls(coro, loop=self, name=name, context=context)
        self._tasks.append(task)
        if self._tr is not None:
            name_object(task)
        return task

    def call_exception_handler(self, context: dict[str, Any]) -> None:
        if not self._in_run:
            return  # after the run (garbage collection of abandoned tasks): nothing to report
        exc = context.get("exception")
        entry: dict[str, Any] = {"message": context.get("message", "")}
        if exc is not None:
            entry["error"] = f"{type(exc).__name__}: {exc}"
            entry["traceback"] = "".join(
                traceback.format_exception(type(exc), exc, exc.__traceback__)
            )
        self._unhandled.append(entry)

    # -- executors ------------------------------------------------------------------------
    def run_in_executor(self, executor: Any, func: Any, *args: Any) -> asyncio.Future[Any]:
        """Run ``func(*args)`` on this thread, in a ready callback of its own, and return a future
        of its result: a worker thread's call finishes at a moment the schedule picks among the
        ready work (strategies may run it before or after the others), in no virtual time.
        ``executor`` is not used. Blocking calls inside ``func`` are escapes still, as on the
        loop: a simulation cannot wait in wall time (``time.sleep`` in ``asyncio.to_thread``
        fails, as the whole run would stand still)."""
        self._check_closed()
        fut: asyncio.Future[Any] = self.create_future()

        def work() -> None:
            # a worker thread runs the call even if its caller gave up waiting (the future was
            # cancelled): only the result has nowhere to go
            try:
                value = func(*args)
            except (KeyboardInterrupt, SystemExit):
                raise
            except BaseException as exc:  # a worker's exception goes to its future
                if not fut.done():
                    fut.set_exception(exc)
            else:
                if not fut.done():
                    fut.set_result(value)

        self._worker_call(func, work)
        return fut

    def _worker_call(self, func: Any, work: Callable[[], None]) -> Callable[[], None]:
        """Schedule ``work``, a worker thread's call of ``func``, as a ready callback labelled
        ``cb:executor:<func>``, and return what runs it at once instead (a caller blocking on
        its result: the thread finishes while the caller waits). It runs once, whichever comes
        first: its callback, that call, or the run's cleanup."""
        pending = self._executor_calls

        def executor_call() -> None:
            if pending.pop(executor_call, _MISSING) is not _MISSING:
                work()

        executor_call.__qualname__ = f"executor:{_executor_name(func)}"
        pending[executor_call] = None
        # an origin of its own, as the thread's completion is an event from outside the loop:
        # not kept in order behind what the caller schedules next; in the thread's context (a
        # fresh one), not the caller's (asyncio.to_thread copies the caller's itself)
        caller, self._cur_group = self._cur_group, None
        handle = self.call_soon(executor_call, context=contextvars.Context())
        self._cur_group = caller

        def run_now() -> None:
            if executor_call in pending:
                handle.cancel()
                executor_call()

        return run_now

    def set_default_executor(self, executor: Any) -> None:
        pass  # run_in_executor uses no executor

    async def getaddrinfo(self, host: Any, *a: Any, **k: Any) -> Any:  # type: ignore[override]
        raise _escape(f"loop.getaddrinfo({host!r})")

    async def getnameinfo(self, *a: Any, **k: Any) -> Any:  # type: ignore[override]
        raise _escape("loop.getnameinfo()")

    async def create_connection(self, *a: Any, **k: Any) -> Any:  # type: ignore[override]
        raise _escape("loop.create_connection() (socket)")

    async def create_server(self, *a: Any, **k: Any) -> Any:  # type: ignore[override]
        raise _escape("loop.create_server() (socket)")

    async def create_datagram_endpoint(self, *a: Any, **k: Any) -> Any:  # type: ignore[override]
        raise _escape("loop.create_datagram_endpoint() (socket)")

    async def create_unix_connection(self, *a: Any, **k: Any) -> Any:  # type: ignore[override]
        raise _escape("loop.create_unix_connection() (socket)")

    async def create_unix_server(self, *a: Any, **k: Any) -> Any:  # type: ignore[override]
        raise _escape("loop.create_unix_server() (socket)")

    async def connect_accepted_socket(self, *a: Any, **k: Any) -> Any:  # type: ignore[override]
        raise _escape("loop.connect_accepted_socket() (socket)")

    async def sock_connect(self, *a: Any, **k: Any) -> Any:  # type: ignore[override]
        raise _escape("loop.sock_connect() (socket)")

    async def sock_accept(self, *a: Any, **k: Any) -> Any:  # type: ignore[override]
        raise _escape("loop.sock_accept() (socket)")

    async def sock_recv(self, *a: Any, **k: Any) -> Any:  # type: ignore[override]
        raise _escape("loop.sock_recv() (socket)")

    async def sock_recv_into(self, *a: Any, **k: Any) -> Any:  # type: ignore[override]
        raise _escape("loop.sock_recv_into() (socket)")

    async def sock_sendall(self, *a: Any, **k: Any) -> Any:  # type: ignore[override]
        raise _escape("loop.sock_sendall() (socket)")

    async def sock_sendfile(self, *a: Any, **k: Any) -> Any:  # type: ignore[override]
        raise _escape("loop.sock_sendfile() (socket)")

    async def sendfile(self, *a: Any, **k: Any) -> Any:  # type: ignore[override]
        raise _escape("loop.sendfile()")

    async def start_tls(self, *a: Any, **k: Any) -> Any:  # type: ignore[override]
        raise _escape("loop.start_tls()")

    async def connect_read_pipe(self, *a: Any, **k: Any) -> Any:  # type: ignore[override]
        raise _escape("loop.connect_read_pipe()")

    async def connect_write_pipe(self, *a: Any, **k: Any) -> Any:  # type: ignore[override]
        raise _escape("loop.connect_write_pipe()")

    async def subprocess_exec(self, *a: Any, **k: Any) -> Any:  # type: ignore[override]
        raise _escape("loop.subprocess_exec() (subprocess)")

    async def subprocess_shell(self, *a: Any, **k: Any) -> Any:  # type: ignore[override]
        raise _escape("loop.subprocess_shell() (subprocess)")

    def add_reader(self, *a: Any, **k: Any) -> Any:
        raise _escape("loop.add_reader()")

    def add_writer(self, *a: Any, **k: Any) -> Any:
        raise _escape("loop.add_writer()")

    def remove_reader(self, *a: Any, **k: Any) -> bool:
        return False

    def remove_writer(self, *a: Any, **k: Any) -> bool:
        return False

    def add_signal_handler(self, sig: Any, *a: Any, **k: Any) -> Any:
        raise _escape(f"loop.add_signal_handler({sig!r})")

    def remove_signal_handler(self, sig: Any) -> bool:
        return False

    # -- options (for strategies) ---------------------------------------------------------
    def _timer_option(self) -> Any:
        """The earliest pending timer if it may fire before the ready work, else None."""
        if not self._vary:
            return None
        sched = self._scheduled
        while sched and sched[0][2]._cancelled:
            _heappop(sched)
            self._timer_cancelled_count -= 1
        if sched and sched[0][0] - self._anchor <= self._window:
            return sched[0][2]
        return None

    def option_handles(self) -> list[Any]:
        """The handle each option at the current choice point would run (the timer option,
        when present, is last)."""
        hs = [g[0] for g in self._groups]
        t = self._timer_option()
        if t is not None:
            hs.append(t)
        return hs

    def option_labels(self) -> list[str]:
        """Semantic labels of the options at the current choice point."""
        labels = [handle_label(g[0]) for g in self._groups]
        t = self._timer_option()
        if t is not None:
            labels.append("timer:" + handle_label(t))
        return labels

    def option_kinds(self) -> list[str]:
        """``step`` / ``glue`` / ``callback`` per option; ``timer`` for the timer option."""
        kinds = [handle_kind(g[0]) for g in self._groups]
        if self._timer_option() is not None:
            kinds.append("timer")
        return kinds

    def option_tasks(self) -> list[asyncio.Task[Any] | None]:
        """The task each option steps or wakes (None when unknown)."""
        ts = [handle_task(g[0]) for g in self._groups]
        t = self._timer_option()
        if t is not None:
            ts.append(handle_task(t))
        return ts

    def track_runs(self) -> dict[Any, int]:
        """Ask the driver to record, per task, the step at which it last ran (costs a little
        per step; for strategies that favour switching tasks)."""
        if self._last_run is None:
            self._last_run = {}
        return self._last_run

    @property
    def steps(self) -> int:
        return self._steps

    @property
    def clock_jumps(self) -> int:
        """How many times this run's clock has jumped forward because nothing was ready.

        Unchanged across an ``await``, that await ended without waiting on time: a timer a
        strategy fires early (as if the ready work before it were slow) does not count, so
        this tells "at once" from "after a delay" under every schedule, where ``time()``
        cannot."""
        return self._advances + self._spin_advances

    @property
    def choice_index(self) -> int:
        """Index of the current choice point within the run (0-based)."""
        return len(self._choices)

    # -- observation ----------------------------------------------------------------------
    @property
    def timeline_length(self) -> int:
        """How many events have been observed so far in this run."""
        return len(self._timeline)

    def timeline(self) -> list[dict[str, Any]]:
        """A copy of the events observed so far (``{"t": seconds, "kind": ..., **data}``)."""
        return list(self._timeline)

    def add_observer(self, callback: Callable[[dict[str, Any]], Any]) -> Callable[[], None]:
        """Call ``callback(event)`` synchronously after each event is appended to this run's
        timeline, until the returned disposer is called or the run ends. Observers run in the
        order they were added; an exception from one propagates to the ``observe`` call."""
        observers = self._observers
        entry = _Observer(callback)  # a fresh object: the same callback may be added twice
        observers.append(entry)

        def dispose() -> None:
            try:
                observers.remove(entry)
            except ValueError:
                pass  # already disposed, or the run has ended

        return dispose

    def _progress(self) -> tuple[int, int, int]:
        """What the watchdogs call progress: events observed, tasks created, tasks finished."""
        tasks = self._tasks
        return len(self._timeline), len(tasks), sum(1 for t in tasks if t.done())

    def _stall_check(self) -> bool:
        self._next_stall_check += _STALL_INTERVAL
        sig = self._progress()
        if sig == self._stall_sig:
            self._stalled_for += _STALL_INTERVAL
            if self._standing is None:
                self._standing = {id(e[2]): e[2] for e in self._scheduled if not e[2]._cancelled}
        else:
            self._stall_sig = sig
            self._stalled_for = 0
            self._standing = None
        limit = self._stall_limit
        if limit is None or self._stalled_for < limit:
            return False
        standing: dict[int, Any] = self._standing or {}
        due = [when for when, _, h in self._scheduled if not h._cancelled and standing.get(id(h)) is h]
        if not due or sig == self._stall_jump_sig:
            return True  # nothing but re-armed timers, or the last jump brought no progress
        if self._max_time is not None and min(due) > self._max_time:
            return True  # the run is over before that timer: stalled all the same
        # Only re-armed timers fired (a poller finding nothing to do), but a timer pending
        # since the stall began may still bring progress (a bounded wait's timeout): jump to
        # it. The re-armed timers due before it fire late, which a busy asyncio loop does too.
        self._now = max(self._now, min(due))
        self._stalled_for = 0
        self._standing = None
        self._stall_jump_sig = sig
        return False

    def unbounded_spins(self) -> None:
        """Turn the spin bounds of :meth:`_spun` off for this run (before it starts): traced
        runs (DPOR) see every step as an event of their own, with no step forced and no clock
        moved between events, and a replay of such a run must do the same."""
        self._next_spin_check = 1 << 62

    def _spun(self, steps: int) -> bool:
        """Every ``_SPIN_STEPS`` callbacks: if none of them observed anything, created or ended a
        task, or saw the clock move, the ready work may be spinning, waiting for what a timer
        will bring. On a real loop time passes while it spins and the timer comes due: here
        such a stretch costs ``_SPIN_COST`` of virtual time per callback (10 ms per check), so
        a spin reaches a near timer (a 10 ms hold) and a long computation of ``sleep(0)``
        chunks does not reach a far one (a 30 s timeout), as on a real loop. And if the oldest
        ready origin has not run since the last check, a strategy has passed it over for that
        long (a priority strategy preferring a spinner): asyncio runs every callback ready at
        the start of an iteration within it, so it runs next (``_starved``). True when the
        spin's time runs past ``max_time`` (the run is over budget)."""
        self._next_spin_check = steps + _SPIN_STEPS
        groups = self._groups
        if groups:
            front = groups[0]
            if self._front is not None and self._front[0] is front and self._front[1] == len(front):
                self._starved = True
            self._front = (front, len(front))
        sig = (*self._progress(), self._now)
        if sig != self._spin_sig or self._starved:  # starved work runs first: it may be progress
            self._spin_sig = sig
            return False
        now = self._now + _SPIN_STEPS * _SPIN_COST
        if self._max_time is not None and now > self._max_time:
            self._budget_reason = "time"
            return True
        self._now = now
        self._spin_advances += 1
        self._spin_sig = None
        if self._quiet:
            # a spin never leaves nothing ready: as time passes on it, wait_quiescent()'s
            # waiters run, as a real loop's observer would in the end (FIFO and strategies)
            self._release_quiet()
        return False

    def _release_quiet(self) -> None:
        """Release wait_quiescent()'s waiters by a timer due now, which every driver (FIFO,
        strategies, traced) takes like any other, so no choice is special."""
        waiters, self._quiet = self._quiet, []
        self.call_at(self._now, _release_quiet, waiters)

    # -- the drivers ----------------------------------------------------------------------
    def _advance_clock(self) -> str | None:
        """Nothing is ready: jump virtual time to the next live timer. Returns how the run
        ends (``"deadlock"``, ``"budget"``, ``"stalled"``) when it cannot go on, else None."""
        sched = self._scheduled
        while sched and sched[0][2]._cancelled:
            _heappop(sched)
            self._timer_cancelled_count -= 1
        if self._quiet and not (sched and sched[0][0] <= self._now):
            self._release_quiet()  # quiescence
            return None
        if not sched:
            return "deadlock"
        when = sched[0][0]
        if self._max_time is not None and when > self._max_time:
            self._budget_reason = "time"
            return "budget"
        if when > self._now:
            self._now = when
            self._advances += 1
            if self._advances >= self._next_stall_check and self._stall_check():
                return "stalled"
        self._anchor = self._now
        return None

    def _drive_fifo(self, max_steps: int) -> str:
        """Plain asyncio's ``_run_once`` loop on virtual time: move due timers to the ready
        queue, run the callbacks that were ready at the start of the iteration, repeat."""
        ready = self._ready
        sched = self._scheduled
        steps = self._steps
        limit = steps + max_steps
        result = "stopped"
        try:
            while True:
                if self._stopping:
                    break
                if not ready:
                    end = self._advance_clock()
                    if end is not None:
                        result = end
                        break
                elif steps >= self._next_spin_check and self._spun(steps):
                    result = "budget"
                    break
                now = self._now
                while sched and sched[0][0] <= now:
                    t = _heappop(sched)[2]
                    if t._cancelled:
                        self._timer_cancelled_count -= 1
                        continue
                    t._scheduled = False
                    ready.append(t)
                    self._appended += 1
                ntodo = len(ready)
                popleft = ready.popleft
                for _ in range(ntodo):
                    h = popleft()
                    if h._cancelled:
                        ntodo -= 1  # not a step: a strategy's driver skips it uncounted too
                        continue
                    h._run()
                steps += ntodo
                if steps >= limit:
                    self._budget_reason = "steps"
                    result = "budget"
                    break
        finally:
            self._steps = steps
        return result

    def _drive(self, choose: Callable[[int], int] | None, record: bool, max_steps: int) -> str:
        """Run until the stop flag is set after a batch (``"stopped"``), nothing can run
        (``"deadlock"``) or a budget is exhausted (``"budget"``)."""
        groups = self._groups
        sched = self._scheduled
        choices = self._choices
        vary = self._vary
        window = self._window
        steps = self._steps
        limit = steps + max_steps
        track = self._last_run
        batch_left = 0
        result = "stopped"
        try:
            while True:
                if batch_left <= 0:
                    if self._stopping:
                        break
                    if not self._nready:
                        end = self._advance_clock()
                        if end is not None:
                            result = end
                            break
                    elif steps >= self._next_spin_check and self._spun(steps):
                        result = "budget"
                        break
                    now = self._now
                    while sched and sched[0][0] <= now:
                        t = _heappop(sched)[2]
                        if t._cancelled:
                            self._timer_cancelled_count -= 1
                            continue
                        t._scheduled = False
                        groups.append(deque((t,)))
                        self._nready += 1
                    batch_left = self._nready
                    if not batch_left:
                        continue
                ng = len(groups)
                topt = None
                if vary and sched:
                    while sched and sched[0][2]._cancelled:
                        _heappop(sched)
                        self._timer_cancelled_count -= 1
                    if sched and sched[0][0] - self._anchor <= window:
                        topt = sched[0][2]
                if self._starved:  # passed over for _SPIN_STEPS callbacks: no choice, it runs
                    self._starved = False
                    g = groups[0]
                    h = g.popleft()
                    if not g:
                        groups.popleft()
                elif ng > 1 or topt is not None:
                    n = ng + 1 if topt is not None else ng
                    i = choose(n) if choose is not None else 0
                    if topt is not None and i == ng:
                        t = _heappop(sched)[2]
                        t._scheduled = False
                        if record:
                            choices.append((i, n, t._callback, t._args, True))
                        if t._when > self._now:
                            self._now = t._when
                        self._cur_group = None
                        if track is not None:
                            track[handle_task(t)] = steps
                        t._run()
                        steps += 1
                        if steps >= limit:
                            self._budget_reason = "steps"
                            result = "budget"
                            break
                        continue
                    g = groups[i]
                    h = g.popleft()
                    if not g:
                        del groups[i]
                    if record:
                        choices.append((i, n, h._callback, h._args, False))
                else:
                    g = groups[0]
                    h = g.popleft()
                    if not g:
                        groups.popleft()
                self._nready -= 1
                batch_left -= 1
                if h._cancelled:
                    continue
                self._cur_group = None
                if track is not None:
                    owner = getattr(h._callback, "__self__", None)
                    if isinstance(owner, _Task):  # a task's step; other owners (a set's discard) may not hash
                        track[owner] = steps
                h._run()
                steps += 1
                if steps >= limit:
                    self._budget_reason = "steps"
                    result = "budget"
                    break
        finally:
            self._steps = steps
            self._cur_group = None
        return result


    def _drive_traced(self, choose: Callable[[int], int], max_steps: int) -> str:
        """:meth:`_drive` for traced runs (every choice recorded): the same scheduling, plus
        one event per callback run (see :class:`Tracer`)."""
        groups = self._groups
        sched = self._scheduled
        choices = self._choices
        vary = self._vary
        window = self._window
        steps = self._steps
        limit = steps + max_steps
        track = self._last_run
        tr = self._tr
        assert tr is not None
        trace = tr.events
        name = tr.name
        run_event = self._run_traced
        batch_left = 0
        result = "stopped"
        try:
            while True:
                if batch_left <= 0:
                    if self._stopping:
                        break
                    if not self._nready:
                        end = self._advance_clock()
                        if end is not None:
                            result = end
                            break
                    now = self._now  # no spin bounds here: see _spun (DPOR must see every step)
                    while sched and sched[0][0] <= now:
                        t = _heappop(sched)[2]
                        if t._cancelled:
                            self._timer_cancelled_count -= 1
                            continue
                        t._scheduled = False
                        g = _Group((t,))
                        g.sid, g.cpos, g.n, g.last = t._sid, t._cpos, 0, -1
                        groups.append(g)
                        self._nready += 1
                    batch_left = self._nready
                    if not batch_left:
                        continue
                ng = len(groups)
                topt = None
                if vary and sched:
                    while sched and sched[0][2]._cancelled:
                        _heappop(sched)
                        self._timer_cancelled_count -= 1
                    if sched and sched[0][0] - self._anchor <= window:
                        topt = sched[0][2]
                node = -1
                if ng > 1 or topt is not None:
                    n = ng + 1 if topt is not None else ng
                    node = len(choices)
                    i = choose(n)
                    if topt is not None and i == ng:
                        t = _heappop(sched)[2]
                        t._scheduled = False
                        choices.append((i, n, t._callback, t._args, True))
                        if t._when > self._now:
                            self._now = t._when
                        self._cur_group = None
                        if track is not None:
                            track[handle_task(t)] = steps
                        # fired early, the timer is the first (and only) event of its origin,
                        # named as if it had come due: the same event either way
                        run_event(t, t._sid, 0, t._cpos, node)
                        steps += 1
                        if steps >= limit:
                            self._budget_reason = "steps"
                            result = "budget"
                            break
                        continue
                    g = groups[i]  # type: ignore[assignment]
                    h = g.popleft()
                    if not g:
                        del groups[i]
                    choices.append((i, n, h._callback, h._args, False))
                else:
                    g = groups[0]  # type: ignore[assignment]
                    h = g.popleft()
                    if not g:
                        groups.popleft()
                self._nready -= 1
                batch_left -= 1
                idx = g.n
                g.n = idx + 1
                prev = g.last
                g.last = len(trace)
                dep = prev if prev >= 0 else g.cpos
                if h._cancelled:
                    trace.append((name((g.sid, idx)), g.sid, dep, {}, node))
                    continue
                self._cur_group = None
                if track is not None:
                    owner = getattr(h._callback, "__self__", None)
                    if isinstance(owner, _Task):  # a task's step; other owners (a set's discard) may not hash
                        track[owner] = steps
                run_event(h, g.sid, idx, dep, node)
                steps += 1
                if steps >= limit:
                    self._budget_reason = "steps"
                    result = "budget"
                    break
        finally:
            self._steps = steps
            self._cur_group = None
            self._tr_fp = None
        return result

    def _run_traced(self, h: Any, psid: int, idx: int, dep: int, node: int) -> None:
        """Run one callback as a traced event. The footprint starts with what the handle says
        (the task it steps, the future it was called with, a timer's clock and queue) and
        collects what the callback touches while it runs (``touch``, the traced futures,
        tasks, primitives and scheduling methods)."""
        tr = self._tr
        assert tr is not None
        trace = tr.events
        esid = tr.name((psid, idx))
        fp: dict[int, int] = {}
        cb = h._callback
        owner = getattr(cb, "__self__", None)
        args = h._args
        glue = False
        if isinstance(owner, _Task):
            fp[cancel_key(obj_key(self, owner))] = 0  # the step reads the cancellation request
            if tr.user:
                fp[USER] = 1
            if args and isinstance(args[0], _Future):
                fp[obj_key(self, args[0])] = 0  # a wake-up reads the future that woke it
        else:
            glue = _is_glue(cb)
            if not glue and tr.user:
                fp[USER] = 1
        self._tr_fp = fp
        self._tr_sid = esid
        self._tr_pos = len(trace)
        self._tr_k = 0
        try:
            h._run()
        finally:
            self._tr_fp = None
        if glue:
            # asyncio's own callbacks touch only asyncio objects. What they read is their own
            # bookkeeping (gather's done-callbacks read the aggregate and each other's
            # children; which of them completes the aggregate is not observable), so only
            # their writes count, plus a read of the future they were called for and a write
            # of the object a bound-method callback belongs to (TaskGroup, Timeout, ...).
            fp = {k: w for k, w in fp.items() if w}
            if args and isinstance(args[0], _Future):
                fp.setdefault(obj_key(self, args[0]), 0)
            if owner is not None:
                fp[obj_key(self, owner)] = 1
        elif isinstance(owner, _Task):
            waiter = owner._fut_waiter
            if waiter is not None:
                fp[obj_key(self, waiter)] = 1  # it now waits on it (a done-callback was added)
            if owner.done():
                fp[obj_key(self, owner)] = 1
        if isinstance(h, _TracedTimer):
            fp[CLOCK] = 1
            fp[TIMERS] = 1
            fp[h._sid * -2 - 1] = 1
        trace.append((esid, psid, dep, fp, node))


_RunResult: type[RunResult] | None = None


def _on_main_done(fut: Any) -> None:
    fut.get_loop()._stopping = True


# --------------------------------------------------------------------------------------------
# run()


def run(
    main: Callable[[], Any],
    *,
    strategy: Strategy | None = None,
    seed: int = 0,
    max_steps: int | None = DEFAULT_MAX_STEPS,
    max_time: float | None = None,
    mode: str = "realisable",
    vary_timers: bool = True,
    timer_window: float = DEFAULT_TIMER_WINDOW,
    scenario: str | None = None,
    stall_advances: int | None = DEFAULT_STALL_ADVANCES,
    wall_limit: float | None = None,
) -> RunResult:
    """Run ``main()`` (a zero-argument callable returning a coroutine) on a fresh deterministic
    loop and return a :class:`~simulator.result.RunResult`.

    ``strategy``: a strategy object from :mod:`simulator.strategies` (``None`` = FIFO, exactly
    plain asyncio's order). ``seed`` seeds the run's sources (``current_sources()``) and, unless
    the strategy has its own seed, the strategy. ``max_steps`` bounds the number of callbacks run
    and ``max_time`` the virtual clock (outcome ``"budget-exceeded"``). ``mode`` is
    ``"realisable"`` (default: only orders plain asyncio could produce under some timing of
    external events) or ``"wide"`` (any ready callback may run next). ``vary_timers`` lets the
    strategy fire a timer due within ``timer_window`` virtual seconds before the remaining ready
    work. ``scenario`` names the program in the recorded schedule (checked on replay).
    ``stall_advances``: the progress watchdog; when virtual time has jumped that many times
    with no task created or finished and nothing observed (only timers fire, e.g. a deadlock
    kept alive by a heartbeat), the run ends as a deadlock (``stalled=True``); None disables.
    ``wall_limit``: wall-clock seconds the run may take (``supervise.WallClock``); past them the
    program is interrupted where it spins and the outcome is ``"budget-exceeded"`` with
    ``budget_reason == "wall"`` and the :class:`~simulator.supervise.WallClockExceeded` as
    ``error`` (None: no limit).
    Never raises for the program's own errors: they become the outcome.
    """
    global _CURRENT, _RunResult
    if _RunResult is None:
        from simulator.result import RunResult as _RunResult  # (a cycle at import time)

    if _CURRENT is not None:
        raise SimulationError("simulator.run() called inside a running simulation")
    if events._get_running_loop() is not None:
        raise SimulationError("simulator.run() called from a running asyncio event loop")
    loop = SimLoop(
        strategy=strategy,
        seed=seed,
        max_steps=max_steps,
        max_time=max_time,
        mode=mode,
        vary_timers=vary_timers,
        timer_window=timer_window,
        stall_advances=stall_advances,
    )
    choose = None
    if strategy is not None:
        strategy.begin(loop, seed)
        choose = strategy.choose_fn()
    if choose is None:
        loop._use_fifo()
    _freeze.install()
    _anyio.install(_is_sim_loop)
    _pool.install(_sim_loop_here)
    _freeze.push(loop.time)
    old_hooks = __import__("sys").get_asyncgen_hooks()
    kept = _ProcessState()
    loop._thread_id = threading.get_ident()
    events._set_running_loop(loop)
    __import__("sys").set_asyncgen_hooks(
        firstiter=loop._asyncgen_firstiter_hook, finalizer=loop._asyncgen_finalizer_hook
    )
    _CURRENT = loop
    loop._in_run = True
    outcome = "completed"
    value: Any = None
    error: BaseException | None = None
    pending: list[dict[str, Any]] = []
    main_task: asyncio.Task[Any] | None = None
    state = ""
    wall = _supervise.WallClock(wall_limit)
    try:
        try:
            coro = main()
            if not isinstance(coro, Coroutine):
                coro = _wrap_awaitable(coro)
            main_task = loop.create_task(coro, name="main")
        except Exception as exc:  # main() itself raised
            outcome, error = "failed", exc
        if main_task is not None:
            main_task.add_done_callback(_on_main_done)
            try:
                wall.arm()  # inside the try: a limit shorter than arming itself fires in arm()
                if choose is None:
                    state = loop._drive_fifo(loop._max_steps)
                elif loop._tr is not None:
                    state = loop._drive_traced(choose, loop._max_steps)
                else:
                    state = loop._drive(choose, True, loop._max_steps)
            except _supervise.WallClockExceeded as exc:
                state, error = "wall", exc
                loop._budget_reason = "wall"
            except BaseException:
                wall.disarm()
                _cleanup(loop)
                raise
            finally:
                wall.disarm()  # what follows is the simulator's own bookkeeping: no alarm in it
            if state == "stopped":
                if main_task.cancelled():
                    outcome = "failed"
                    try:
                        main_task.result()
                    except BaseException as exc:
                        error = exc
                else:
                    exc2 = main_task.exception()
                    if exc2 is None:
                        value = main_task.result()
                    else:
                        outcome, error = "failed", exc2
            else:
                outcome = "budget-exceeded" if state in ("budget", "wall") else "deadlock"
                pending = [
                    {"task": t.get_name(), "coro": _coro_name(t.get_coro()),
                     "stack": await_stack(t)}
                    for t in loop._tasks
                    if not t.done()
                ]
        kept.restore()  # before the bookkeeping that follows, which the program's settings would break
        unretrieved = _collect_unretrieved(loop, main_task, wall)
        try:
            wall.arm()  # the program unwinds in the cleanup: it may spin there too
            _cleanup(loop)
        except _supervise.WallClockExceeded as exc:
            if error is None:
                outcome, error, loop._budget_reason = "budget-exceeded", exc, "wall"
        except Exception:
            if state != "wall":  # after an alarm the loop may be left mid-step: its cleanup may fail
                raise
        finally:
            wall.disarm()
    finally:
        wall.disarm()
        loop._in_run = False
        loop._observers.clear()  # observers belong to this run
        _CURRENT = None
        __import__("sys").set_asyncgen_hooks(*old_hooks)
        kept.restore()
        events._set_running_loop(None)
        loop._thread_id = None
        _freeze.pop()
    choices, loop._choices = loop._choices, []
    if strategy is not None:
        strategy.end(outcome)
    # The loop may outlive the run in a reference cycle (a finished task keeps its loop): the
    # run's timeline goes with the result alone, freed with it, not by the garbage collector.
    timeline, loop._timeline = loop._timeline, []
    return _RunResult(
        outcome=outcome,
        value=value,
        error=error,
        timeline=timeline,
        virtual_time=loop._now,
        steps=loop._steps,
        pending=pending,
        unretrieved=unretrieved,
        unhandled=loop._unhandled,
        budget_reason=loop._budget_reason if outcome == "budget-exceeded" else None,
        stalled=state == "stalled",
        seed=seed,
        strategy=strategy.name if strategy is not None else "fifo",
        mode=mode,
        vary_timers=vary_timers,
        timer_window=timer_window,
        scenario=scenario,
        raw_choices=choices,
    )


async def _wrap_awaitable(aw: Any) -> Any:
    return await aw


class _ProcessState:
    """What a run's program may set for the whole process and must not keep: a tracer or profiler
    (left set, it ran inside the kit's own code after the run, where no wall-clock limit is armed:
    one that spun hung the command) and the recursion limit (lowered to 30, the kit's report
    failed in ``RecursionError``). Taken as the run starts, put back as it ends."""

    def __init__(self) -> None:
        self.trace = sys.gettrace()
        self.profile = sys.getprofile()
        self.recursion = sys.getrecursionlimit()
        self.thread_trace = threading.gettrace()

    def restore(self) -> None:
        if sys.gettrace() is not self.trace:
            sys.settrace(self.trace)
        if sys.getprofile() is not self.profile:
            sys.setprofile(self.profile)
        if threading.gettrace() is not self.thread_trace:
            threading.settrace(self.thread_trace)  # type: ignore[arg-type]
        if sys.getrecursionlimit() != self.recursion:
            sys.setrecursionlimit(self.recursion)


def _collect_unretrieved(
    loop: SimLoop, main_task: asyncio.Task[Any] | None, wall: _supervise.WallClock
) -> list[dict[str, Any]]:
    out = []
    for t in loop._tasks:
        if t is main_task or not t.done() or t.cancelled():
            continue
        if getattr(t, "_log_traceback", False):
            exc = t.exception()
            t._log_traceback = False  # reported here, not by the garbage collector later
            assert exc is not None
            error, text = _described(exc, wall)
            out.append({"task": t.get_name(), "coro": _coro_name(t.get_coro()), "error": error, "traceback": text})
    return out


def _described(error: BaseException, wall: _supervise.WallClock) -> tuple[str, str]:
    """``Type: message`` and the traceback of a task's error. Its messages are the program's own
    ``__str__``, read under the wall-clock limit: one that spins (or raises) is named, and the
    check still ends. The source lines are read after, outside the limit (bookkeeping)."""
    kind = type(error).__name__
    try:
        wall.arm()
        summary = traceback.TracebackException(type(error), error, error.__traceback__, lookup_lines=False)
    except _supervise.WallClockExceeded:
        stand_in = f"{kind}: (its text did not come back within the wall-clock limit: its __str__ spins)"
        return stand_in, stand_in
    except Exception as exc:
        stand_in = f"{kind}: (its text cannot be read: {type(exc).__name__})"
        return stand_in, stand_in
    finally:
        wall.disarm()
    message = getattr(summary, "_str", None)  # the text it read (3.11-3.13); else the formatted last line
    if not isinstance(message, str):
        message = "".join(summary.format_exception_only()).rstrip("\n").partition(": ")[2]
    return f"{kind}: {message}", "".join(summary.format())


def _close_leftovers(loop: SimLoop) -> None:
    """Close the coroutine of every task still pending (one that ignores ``GeneratorExit``
    stays suspended: nothing more can be done for it)."""
    for task in [t for t in loop._tasks if not t.done()]:
        try:
            task.get_coro().close()
        except BaseException:  # it ignored GeneratorExit, or raised while closing
            pass


def _cleanup(loop: SimLoop) -> None:
    """Like asyncio.run: cancel what is still pending and let it unwind, then finalise async
    generators; FIFO, unrecorded, bounded."""
    try:
        loop._stopping = False
        loop._max_time = None
        loop._vary = False
        leftover: list[Any] | None = [t for t in loop._tasks if not t.done()]
        gathered: Any = None
        if leftover:
            for t in leftover:
                t.cancel()
            for t in leftover:
                t.add_done_callback(_noop)
            gathered = asyncio.gather(*leftover, return_exceptions=True)
            gathered.add_done_callback(_on_main_done)
            _drive_any(loop)
            loop._stopping = False
        if loop._asyncgens:
            fut = loop.create_task(loop.shutdown_asyncgens(), name="shutdown_asyncgens")
            fut.add_done_callback(_on_main_done)
            _drive_any(loop)
        for call in list(loop._executor_calls):  # asyncio.run's executor shutdown
            with contextlib.suppress(Exception):
                call()
        # A task that would not be cancelled (it swallows CancelledError) is closed now, while
        # this run's loop is still the running one: its finally blocks run here, unobserved,
        # rather than when the garbage collector gets to it, perhaps inside a later run.
        loop._recording = False
        leftover = gathered = None  # no reference of ours may keep a stubborn task alive
        _close_leftovers(loop)
        for t in loop._tasks:
            if t.done() and not t.cancelled() and getattr(t, "_log_traceback", False):
                t._log_traceback = False
    except Exception:  # cleanup must never mask the run's outcome
        pass
    finally:
        loop._groups.clear()
        loop._ready.clear()
        loop._scheduled.clear()
        loop._nready = 0
        loop._closed = True
        # Break the loop <-> task and loop <-> sources reference cycles now, so that reference
        # counting frees a finished run without waiting for the cyclic garbage collector.
        loop._tasks = []
        loop._sources._loop = None
        loop._last_run = None
        loop._cur_group = None
        for attr in _INSTANCE_HOOKS:
            loop.__dict__.pop(attr, None)
        loop._tr = None
        loop._tr_keep = []
        loop._strategy = None


#: methods a run may override on the loop instance (FIFO, tracing): dropped at cleanup, which
#: also breaks the loop <-> bound method reference cycles
_INSTANCE_HOOKS = ("call_soon", "call_at", "time", "create_future", "_timer_handle_cancelled",
                   "_task_class", "get_debug")


def _drive_any(loop: SimLoop) -> None:
    if loop._fifo:
        loop._drive_fifo(CLEANUP_STEPS)
    else:
        loop._drive(None, False, CLEANUP_STEPS)


def _noop(_: Any) -> None:
    pass


class _Observer:
    """One registration of an observer (identity, not equality, decides what a disposer
    removes, so registering the same function twice gives two independent registrations)."""

    __slots__ = ("fn",)

    def __init__(self, fn: Callable[[dict[str, Any]], Any]) -> None:
        self.fn = fn


def observe(kind: str, **data: Any) -> None:
    """Append ``{"t": virtual_time, "kind": kind, **data}`` to the running simulation's
    timeline and notify the run's observers (:func:`on_observe`); does nothing outside a
    simulation."""
    loop = _CURRENT
    if loop is not None and loop._recording:
        _record(loop, {"t": loop._now, "kind": kind, **data})


def observe_fields(kind: str, data: dict[str, Any]) -> None:
    """``observe(kind, **data)`` for fields already in a dict (one dict fewer per event)."""
    loop = _CURRENT
    if loop is not None and loop._recording:
        _record(loop, {"t": loop._now, "kind": kind, **data})


def _record(loop: SimLoop, ev: dict[str, Any]) -> None:
    loop._timeline.append(ev)
    observers = loop._observers
    if observers:
        if len(observers) == 1:
            observers[0].fn(ev)
        else:
            # a snapshot: an observer may add or dispose observers while being notified
            for entry in tuple(observers):
                entry.fn(ev)


def on_observe(callback: Callable[[dict[str, Any]], Any]) -> Callable[[], None]:
    """Call ``callback(event)`` synchronously after every event later observed in the running
    simulation (the event is already in the timeline). Valid for the current run only: it is
    dropped when the run ends. Returns a disposer (idempotent). An exception raised by the
    callback propagates to the code that called :func:`observe`.

    Raises :class:`~simulator.errors.SimulationError` outside a simulation."""
    loop = _CURRENT
    if loop is None:
        raise SimulationError("simulator.on_observe() called outside a simulation")
    return loop.add_observer(callback)


def timeline_length() -> int:
    """How many events the running simulation has observed so far (0 outside a simulation)."""
    loop = _CURRENT
    return len(loop._timeline) if loop is not None else 0


def _release_quiet(waiters: list[asyncio.Future[None]]) -> None:
    for fut in waiters:
        if not fut.done():
            fut.set_result(None)


async def wait_quiescent() -> None:
    """Wait until nothing else in the simulation is ready to run, before virtual time moves on
    (trio's ``wait_all_tasks_blocked``): every callback already scheduled, and all they schedule
    in turn, has run; the tasks left wait for a timer or a future. Unlike a number of
    ``sleep(0)`` yields, no schedule can end the wait early by passing those callbacks over, so
    what a caller observes then holds in every schedule. Outside a simulation it raises
    ``RuntimeError`` (a real loop cannot tell whether I/O is about to complete)."""
    loop = _CURRENT
    if loop is None or asyncio.get_running_loop() is not loop:
        raise RuntimeError("wait_quiescent() needs a running simulation (simulator.run)")
    fut: asyncio.Future[None] = loop.create_future()
    loop._quiet.append(fut)
    await fut


def current_timeline() -> list[dict[str, Any]]:
    """A copy of the running simulation's timeline so far (``[]`` outside a simulation)."""
    loop = _CURRENT
    return list(loop._timeline) if loop is not None else []


def ready_position() -> int | None:
    """In a FIFO run, how many callbacks have joined the ready queue so far (``None`` outside a
    simulation or in a run under a strategy). FIFO runs callbacks in the order they join, so a
    callback scheduled now runs at the same place in the run's order whatever happened since
    this figure last changed: two moments with the same figure are, for anything scheduled at
    them, the same moment."""
    loop = _CURRENT
    return loop._appended if loop is not None and loop._fifo else None


def current_loop() -> SimLoop | None:
    """The running simulation's loop, or None."""
    return _CURRENT
