"""Hostile implementations: the reference with one deliberately broken behaviour each.

Each must end ``loopkit conformance`` in a clear per-rule verdict in bounded time (exit 1, or 2
for a setup error), never exit 0, never hang. Used by ``test_hostile.py`` (a rule subset each)
and ``bench/hostile.py`` (the whole suite each). Run from this directory:
``loopkit conformance --impl hostile_adapters:spin``.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import socket
import sys
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

from conformance.reference_adapter import ReferenceImplementation

Hook = Callable[[], None]


class _Agent:
    """An agent handle whose ``send`` (or ``steer``) does something hostile first."""

    def __init__(self, agent: Any, hook: Hook, on_steer: Hook | None = None) -> None:
        self._agent = agent
        self._hook = hook
        self._on_steer = on_steer

    def __getattr__(self, name: str) -> Any:
        return getattr(self._agent, name)

    def send(self, content: Any, source: Any = None) -> None:
        self._hook()
        self._agent.send(content, source)

    def steer(self, content: Any, source: Any = None) -> None:
        if self._on_steer is not None:
            self._on_steer()
        self._agent.steer(content, source)


class _Service:
    """A service handle wrapping every agent it makes (and ``close`` when asked)."""

    def __init__(self, service: Any, hook: Hook, on_close: Hook | None, on_steer: Hook | None = None) -> None:
        self._service = service
        self._hook = hook
        self._on_close = on_close
        self._on_steer = on_steer
        self._agents: dict[int, _Agent] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._service, name)

    def _wrap(self, agent: Any) -> Any:
        if agent is None:
            return None
        return self._agents.setdefault(id(agent), _Agent(agent, self._hook, self._on_steer))

    def create(self, agent_id: str, options: Any = None) -> Any:
        return self._wrap(self._service.create(agent_id, options))

    def create_agent(self, agent_id: str, session_id: str, meta: Any = None, agent_options: Any = None) -> Any:
        return self._wrap(self._service.create_agent(agent_id, session_id, meta, agent_options))

    async def resume(self, agent_id: str, resume_session_id: str, agent_options: Any = None) -> Any:
        return self._wrap(await self._service.resume(agent_id, resume_session_id, agent_options))

    def get(self, agent_id: str) -> Any:
        return self._wrap(self._service.get(agent_id))

    def driver_task(self, agent: Any) -> Any:
        return self._service.driver_task(getattr(agent, "_agent", agent))

    async def close(self) -> None:
        if self._on_close is not None:
            self._on_close()
        await self._service.close()


class Hostile(ReferenceImplementation):
    """The reference, with ``on_send`` run in every ``send`` (and ``on_create``/``on_close``)."""

    def __init__(self, name: str, on_send: Hook = lambda: None, on_create: Hook | None = None,
                 on_close: Hook | None = None, on_steer: Hook | None = None) -> None:
        super().__init__(name=name)
        self._on_send, self._on_create, self._on_close, self._on_steer = on_send, on_create, on_close, on_steer

    def create_service(self, *, persistence: object | None = None) -> Any:
        if self._on_create is not None:
            self._on_create()
        return _Service(super().create_service(persistence=persistence), self._on_send, self._on_close,
                        self._on_steer)


def _raise_in_close() -> None:
    raise RuntimeError("close failed on purpose")


def _spin() -> None:
    while True:  # a busy loop that never yields to the event loop
        pass


_STALLED: list[bool] = []


def _stall_once() -> None:
    """The first call in a process is slow past any small limit (a loaded machine), then never."""
    if not _STALLED:
        _STALLED.append(True)
        end = time.monotonic() + 1.0
        while time.monotonic() < end:
            pass


def _spin_swallowing() -> None:
    while True:  # a busy loop that swallows every interruption, even BaseException
        try:
            while True:
                pass
        except BaseException:
            pass


def _hang() -> None:
    threading.Event().wait()  # blocks the thread forever (no simulator escape for this one)


def _flood() -> None:
    sys.stdout.write("x" * 5_000_000 + "\n")


def _connect() -> None:
    with socket.socket() as sock:
        sock.settimeout(0.2)
        try:
            sock.connect(("127.0.0.1", 9))  # the discard port of this machine: nothing listens
        except OSError:
            pass


def _thread() -> None:
    threading.Thread(target=lambda: None).start()


def _kill_self() -> None:
    # The real ``os.kill``: the simulator stops a signal to its own process (``signal_self``);
    # this stands for a death no tripwire can stop (a crash in C code, the OOM killer).
    getattr(os.kill, "__wrapped__", os.kill)(os.getpid(), signal.SIGKILL)


def _signal_self() -> None:
    os.kill(os.getpid(), signal.SIGTERM)


class _SpinningText(Exception):
    """An error whose text never comes: reading it (``str``, a traceback) spins."""

    def __str__(self) -> str:
        _spin()
        return ""


def _raises_spinning_text() -> None:
    raise _SpinningText()


def _refuses_and_exits_zero_at_exit() -> None:
    # a broken send, and exit-time code that would turn the failing check into exit 0, print after
    # the report, then spin
    atexit.register(_spin)
    atexit.register(os._exit, 0)
    atexit.register(lambda: print("printed at exit"))
    weakref.finalize(_KEPT, os._exit, 0)
    raise RuntimeError("send refused")


_KEPT = type("Kept", (), {})()


def _traces_into_the_kit() -> None:
    # a tracer left set after the run: it spins once the kit's own report code runs
    def tracer(frame: object, event: str, arg: object) -> object:
        if frame.f_code.co_filename.endswith(("commands.py", "output.py")):  # type: ignore[attr-defined]  # the kit's, after the run
            _spin()
        return tracer

    sys.settrace(tracer)


def _masks_alarm() -> None:
    signal.signal(signal.SIGALRM, signal.SIG_IGN)


def _masks_alarm_then_spins() -> None:
    # Its own SIGALRM handler would disable the wall-clock limit, and the spin would then never end.
    with contextlib.suppress(Exception):
        signal.signal(signal.SIGALRM, signal.SIG_IGN)
    _spin()


class _DyingAgent:
    """An agent whose driver task dies of an uncaught exception at the first send, while
    ``when_idle()`` never resolves: what a wait then reports must name the death."""

    def __init__(self, agent: Any) -> None:
        self._agent = agent
        self.task: Any = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._agent, name)

    @property
    def status(self) -> str:
        return "running" if self.task is not None else self._agent.status

    def send(self, content: Any, source: Any = None) -> None:
        import asyncio

        async def drive() -> None:
            await asyncio.sleep(0)
            raise RuntimeError("driver exploded")

        self.task = asyncio.get_running_loop().create_task(drive())

    def when_idle(self) -> Any:
        import asyncio

        if self.task is None:
            return self._agent.when_idle()
        return asyncio.get_running_loop().create_future()  # never resolved: the driver is dead


class _DyingService(_Service):
    def _wrap(self, agent: Any) -> Any:
        if agent is None:
            return None
        return self._agents.setdefault(id(agent), _DyingAgent(agent))  # type: ignore[arg-type]

    def driver_task(self, agent: Any) -> Any:
        return getattr(agent, "task", None)


class Dying(ReferenceImplementation):
    """The reference, whose agents' driver task dies at the first send."""

    def create_service(self, *, persistence: object | None = None) -> Any:
        return _DyingService(super().create_service(persistence=persistence), lambda: None, None)


spin = Hostile("spin", on_send=_spin)
hang = Hostile("hang", on_send=_hang)
exits = Hostile("exit", on_send=lambda: sys.exit(3))
os_exit = Hostile("os-exit", on_send=lambda: os._exit(0))
kill_self = Hostile("kill-self", on_send=_kill_self)
signal_self = Hostile("signal-self", on_send=_signal_self)
masks_alarm = Hostile("masks-alarm", on_send=_masks_alarm)
spinning_text = Hostile("spinning-text", on_send=_raises_spinning_text)
exits_zero_at_exit = Hostile("exits-zero-at-exit", on_send=_refuses_and_exits_zero_at_exit)
traces_into_the_kit = Hostile("traces-into-the-kit", on_send=_traces_into_the_kit)
masks_alarm_then_spins = Hostile("masks-alarm-then-spins", on_send=_masks_alarm_then_spins)
print_flood = Hostile("print-flood", on_send=_flood)
sockets = Hostile("socket", on_send=_connect)
sleeps = Hostile("sleep", on_send=lambda: time.sleep(0.2))
threads = Hostile("thread", on_send=_thread)
spin_in_create = Hostile("spin-in-create", on_create=_spin)
exit_in_create = Hostile("exit-in-create", on_create=lambda: os._exit(0))
spin_in_close = Hostile("spin-in-close", on_close=_spin)
raise_in_close = Hostile("raise-in-close", on_close=_raise_in_close)  # every test's teardown fails: exit 1, not 2
spin_on_steer = Hostile("spin-on-steer", on_steer=_spin)  # only windows that steer spin (the hunt)
spin_swallowing = Hostile("spin-swallowing", on_send=_spin_swallowing)
stalls_once = Hostile("stalls-once", on_steer=_stall_once)  # one slow window: not a spin
dies = Dying(name="driver-dies")


def _raise_unencodable() -> None:
    raise RuntimeError("lone surrogate \udcff and \x00 NUL")  # UTF-8 and XML hold neither as they are


unencodable = Hostile("unencodable", on_send=_raise_unencodable)


def _interrupt() -> None:
    raise KeyboardInterrupt  # as if Ctrl-C, though no signal came


interrupts = Hostile("interrupts", on_send=_interrupt)

ALL = {
    "spin": spin, "hang": hang, "exits": exits, "os_exit": os_exit, "kill_self": kill_self, "signal_self": signal_self,
    "masks_alarm": masks_alarm, "masks_alarm_then_spins": masks_alarm_then_spins, "spinning_text": spinning_text,
    "exits_zero_at_exit": exits_zero_at_exit, "traces_into_the_kit": traces_into_the_kit,
    "print_flood": print_flood, "sockets": sockets, "sleeps": sleeps, "threads": threads,
    "spin_in_create": spin_in_create, "exit_in_create": exit_in_create, "spin_in_close": spin_in_close,
    "dies": dies,
}
"""Every hostile implementation by its attribute name (``--impl hostile_adapters:NAME``)."""
