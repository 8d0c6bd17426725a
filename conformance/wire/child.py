"""The child process behind ``--impl wire:COMMAND``: spawning, framing, and never hanging.

The child gets two pipes of its own, named in ``LOOPKIT_WIRE_FDS="IN,OUT"`` (it reads the
driver's messages from IN and writes its own to OUT), so whatever the implementation prints on
stdout or stderr cannot corrupt the stream. Both of those go to an anonymous temporary file whose
tail every error message quotes. stdin is ``/dev/null``.

Reads and writes are plain ``os.read`` / ``os.write`` on the pipe descriptors (no sockets), each
waited for with ``poll`` in slices. A watchdog thread bounds each of them: a child that takes
longer than ``timeout`` wall-clock seconds to answer one message is killed with its process
group, and the caller gets a :class:`ChildHung` naming the timeout, with the tail of the child's
output. The slices are what make that sure: a process the child started in a session of its own
keeps the pipes open past the kill, and a read blocked on them would never see end of file.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import select
import signal
import subprocess
import tempfile
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from typing import IO, Any

import simulator

from .protocol import PROTOCOL, ProtocolError, WireError, dumps, loads

DEFAULT_TIMEOUT = 20.0
"""Wall-clock seconds the child may take over one message before it is declared hung
(``LOOPKIT_WIRE_TIMEOUT`` overrides it). Virtual time costs nothing, so a healthy child answers
in microseconds to milliseconds."""
HELLO_TIMEOUT = 15.0
TAIL_BYTES = 2000
_SLICE_MS = 100
"""How long one wait on a pipe lasts before the waiting thread looks whether the watchdog has
declared the child hung."""


class ChildDied(WireError):
    """The child exited (or closed its end of the pipe)."""


class ChildHung(WireError):
    """The child did not answer within the timeout and was killed."""


def _now() -> float:
    # The simulator pins time.monotonic() and friends to virtual time inside a run (freezegun);
    # the watchdog needs the real clock.
    return time.clock_gettime(time.CLOCK_MONOTONIC)


_ALLOW_BLOCKING: Callable[[], contextlib.AbstractContextManager[Any]] = getattr(
    simulator, "allow_blocking", contextlib.nullcontext)


def blocking() -> contextlib.AbstractContextManager[Any]:
    """The simulator's exemption for the kit's own blocking wire I/O (a no-op on simulators
    that do not police blocking calls)."""
    return _ALLOW_BLOCKING()


class _Watchdog:
    """One daemon thread per process killing children that stopped answering."""

    def __init__(self) -> None:
        self._children: weakref.WeakSet[Child] = weakref.WeakSet()
        self._lock = threading.Lock()
        self._pid: int | None = None
        self._wake = threading.Event()

    def watch(self, child: Child) -> None:
        with self._lock:
            self._children.add(child)
            if self._pid != os.getpid():  # first use, or a forked worker (threads do not fork)
                self._pid = os.getpid()
                thread = threading.Thread(target=self._run, name="loopkit-wire-watchdog", daemon=True)
                _start_thread(thread)

    def _run(self) -> None:
        while True:
            self._wake.wait(0.1)
            now = _now()
            with self._lock:
                children = list(self._children)
            for child in children:
                since = child.busy_since
                if since and now - since > child.timeout:
                    child.declare_hung()


def _start_thread(thread: threading.Thread) -> None:
    """Start the watchdog, also from inside a simulation: the simulator refuses thread starts
    there (a thread would escape its scheduler), but the watchdog never touches the simulation,
    it only kills a child that stopped answering, so it uses the unguarded start."""
    from simulator import _runtime

    if simulator.current_loop() is None:
        thread.start()
    else:
        _runtime._real_thread_start(thread)


_WATCHDOG = _Watchdog()


def close_all(*, graceful: bool = True) -> None:
    """End this process's children (``graceful``: end of input, a bridge exits on its own;
    otherwise killed at once)."""
    with _WATCHDOG._lock:
        children = list(_WATCHDOG._children)
    for child in children:
        if child.owner == os.getpid():
            child.close(graceful=graceful)


atexit.register(close_all)

REGISTRY = "LOOPKIT_WIRE_REGISTRY"
"""An environment variable naming a directory where each child started is listed (``wire-PID``,
removed as it is closed): the suite's runner sets it for its test workers, which it ends by
SIGKILL, so that it can end their children too (a child deaf to the end of its input, in a
session of its own, would outlive them)."""


def _listing(pid: int) -> str | None:
    """Where a child is listed (:data:`REGISTRY`), or ``None`` when no one asked."""
    directory = os.environ.get(REGISTRY)
    return os.path.join(directory, f"wire-{pid}") if directory else None


class Child:
    """A running wire child: its pipes, its output file, its handshake."""

    def __init__(self, argv: Sequence[str], *, cwd: str | None = None, timeout: float | None = None,
                 env: dict[str, str] | None = None) -> None:
        self.argv = list(argv)
        self.command = " ".join(self.argv)
        self.explicit_timeout = timeout if timeout is not None else _timeout_from_env()
        self.timeout = self.explicit_timeout if self.explicit_timeout is not None else DEFAULT_TIMEOUT
        self.busy_since = 0.0
        self.hung = False
        self.exited: int | None = None
        """The child's return code if it had exited when the watchdog declared it hung."""
        self._pollers: dict[int, select.poll] = {}
        self.owner = os.getpid()
        self.transcript: list[str] | None = None
        self._lines: deque[bytes] = deque()
        self._partial = bytearray()
        self._closed = False
        self._listed: str | None = None
        self._log: IO[bytes] = tempfile.TemporaryFile(prefix="loopkit-wire-")
        child_in, self._to_child = os.pipe()
        self._from_child, child_out = os.pipe()
        environment = dict(os.environ if env is None else env)
        environment["LOOPKIT_WIRE_FDS"] = f"{child_in},{child_out}"
        try:
            with blocking():
                self.process = subprocess.Popen(
                    self.argv, cwd=cwd, env=environment, stdin=subprocess.DEVNULL, stdout=self._log,
                    stderr=self._log, pass_fds=(child_in, child_out), start_new_session=True,
                )
        except OSError as exc:
            for fd in (child_in, child_out, self._to_child, self._from_child):
                os.close(fd)
            self._log.close()
            self._closed = True
            raise WireError(f"cannot start {self.command!r}: {exc.strerror or exc}") from None
        finally:
            if not self._closed:
                os.close(child_in)
                os.close(child_out)
        self._listed = _listing(self.process.pid)
        if self._listed is not None:
            with contextlib.suppress(OSError):
                open(self._listed, "x").close()
        _WATCHDOG.watch(self)

    @property
    def pid(self) -> int:
        return self.process.pid

    # ------------------------------------------------------------------ framing

    def write(self, messages: Sequence[dict[str, Any]]) -> None:
        """Write messages, one line each, in one go."""
        lines = [dumps(m) for m in messages]
        if self.transcript is not None:
            self.transcript.extend(f"> {line}" for line in lines)
        data = ("\n".join(lines) + "\n").encode("utf-8")
        with self._busy("writing to"):
            view = memoryview(data)
            while view:
                if not self._ready(self._to_child, select.POLLOUT):
                    raise self._died("writing to")
                try:
                    written = os.write(self._to_child, view)
                except BrokenPipeError:
                    raise self._died("writing to") from None
                view = view[written:]

    def read(self, hook: Callable[[dict[str, Any]], Any] | None = None) -> dict[str, Any]:
        """The next message (blocking, bounded by the watchdog)."""
        # What a wall-clock alarm here reports (simulator.supervise.WAIT_HINT): the child spins.
        _loopkit_waiting_on = f"the wire child {self.command!r}, which has not answered its last message"
        while not self._lines:
            with self._busy("waiting for"):
                data = os.read(self._from_child, 1 << 16) if self._ready(self._from_child, select.POLLIN) else b""
            if not data:
                raise self._died("waiting for")
            if b"\n" not in data:
                self._partial += data  # in place: a long line read piece by piece stays linear
                continue
            first, *complete, rest = data.split(b"\n")
            self._partial += first
            complete.insert(0, bytes(self._partial))
            self._partial = bytearray(rest)
            self._lines.extend(line for line in complete if line.strip())
        line = self._lines.popleft()
        if self.transcript is not None:
            self.transcript.append(f"< {line.decode('utf-8', 'replace')}")
        try:
            message: dict[str, Any] = loads(line, hook)
        except ProtocolError as exc:
            tail = self.tail()
            raise ProtocolError(f"wire child {self.command!r} broke the protocol: {exc}"
                                + (f"\n--- output of the child (tail) ---\n{tail}" if tail else "")) from None
        return message

    @contextlib.contextmanager
    def _busy(self, what: str) -> Iterator[None]:
        if self._closed:
            raise self._died(what)
        self.busy_since = _now()
        try:
            with blocking():
                yield
        finally:
            self.busy_since = 0.0

    def _ready(self, fd: int, event: int) -> bool:
        """Wait until ``fd`` can be read or written (or its other end closed): ``False`` once the
        watchdog has declared the child hung."""
        poller = self._pollers.get(fd)
        if poller is None:
            poller = self._pollers[fd] = select.poll()
            poller.register(fd, event)
        while not self.hung:
            if poller.poll(_SLICE_MS):
                return True
        return False

    # ------------------------------------------------------------------ the handshake

    def handshake(self) -> dict[str, Any]:
        """Read the child's ``hello``, check the protocol version, answer ``welcome``."""
        saved = self.timeout
        if self.explicit_timeout is None:
            self.timeout = max(self.timeout, HELLO_TIMEOUT)  # a cold start of the runtime
        try:
            try:
                hello = self.read()
            except ProtocolError as exc:
                reason = str(exc).splitlines()[0].split("broke the protocol: ", 1)[-1]
                raise ProtocolError(f"{self.command!r} is not a loopkit wire bridge: {reason}") from None
            except WireError as exc:
                first = str(exc).splitlines()[0]
                reason = first.split(" and was killed")[0].split(") while")[0].split("died (")[-1] if not self.hung else "it hung"
                raise WireError(f"{self.command!r} is not a loopkit wire bridge: it never said hello "
                                f"({'no answer within ' + format(self.timeout, 'g') + 's' if self.hung else reason}); "
                                f"its output ends: {(self.tail().splitlines() or ['no output'])[-1]}") from None
        finally:
            self.timeout = saved
        if hello.get("type") != "hello":
            raise ProtocolError(f"{self.command!r} is not a loopkit wire bridge: its first message is "
                                f"{hello.get('type')!r}, not 'hello'")
        if hello.get("protocol") != PROTOCOL:
            self.write([{"type": "refuse", "message": f"this driver speaks protocol {PROTOCOL}"}])
            raise ProtocolError(f"{self.command!r} speaks wire protocol {hello.get('protocol')!r}; "
                                f"this loopkit speaks {PROTOCOL}")
        self.write([{"type": "welcome", "protocol": PROTOCOL}])
        return hello

    # ------------------------------------------------------------------ ending

    def declare_hung(self) -> None:
        """Called by the watchdog: kill the child; the waiting read or write gives up."""
        if self.owner == os.getpid():
            self.exited = self.process.poll()  # it may have exited, a process it started holding the pipes
        self.hung = True
        self.kill()
        if self.exited is not None and self.owner == os.getpid():
            for pid in _holders(self._from_child):  # outside its process group: not reached by the kill
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)

    def kill(self) -> None:
        """Kill the child (if this process started it) and close the pipes."""
        if self.owner != os.getpid():
            return  # a forked worker's copy: the child belongs to the parent
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            self.process.kill()

    def close(self, *, graceful: bool = False) -> None:
        """Stop the child and release everything (idempotent). ``graceful``: close its input and
        give it a moment to exit by itself before killing it."""
        if self._closed:
            return
        self._closed = True
        if not graceful:
            self.kill()
        for fd in (self._to_child, self._from_child):
            with contextlib.suppress(OSError):
                os.close(fd)
        if self.owner == os.getpid():
            try:
                with blocking():
                    self.process.wait(timeout=1 if graceful else 5)
            except subprocess.TimeoutExpired:
                self.kill()
        with contextlib.suppress(OSError):
            self._log.close()
        if self._listed is not None and self.owner == os.getpid():
            with contextlib.suppress(OSError):
                os.unlink(self._listed)

    def abandon(self) -> None:
        """Drop a child inherited through fork without touching it (it is the parent's)."""
        self._closed = True
        for fd in (self._to_child, self._from_child):
            with contextlib.suppress(OSError):
                os.close(fd)

    def tail(self) -> str:
        """The last lines the child printed (stdout and stderr)."""
        try:
            self._log.flush()
            size = self._log.seek(0, os.SEEK_END)
            self._log.seek(max(0, size - TAIL_BYTES))
            text = self._log.read().decode("utf-8", "replace")
        except (OSError, ValueError):
            return ""
        lines = [line.rstrip() for line in text.splitlines() if line.strip()]
        return "\n".join(lines[-15:])

    def _died(self, what: str) -> WireError:
        code = None
        if self.owner == os.getpid():
            with contextlib.suppress(subprocess.TimeoutExpired), blocking():
                code = self.process.wait(timeout=2)
        self._closed = True
        tail = self.tail()
        last = tail.splitlines()[-1] if tail else "no output"
        if self.hung and self.exited is not None:
            head = (f"wire child {self.command!r} exited ({_status(self.exited)}) but a process it started kept "
                    f"its pipes open and did not answer within {self.timeout:g}s wall time; it was killed")
            error: WireError = ChildHung(f"{head}; its output ends: {last}")
        elif self.hung:
            head = f"wire child {self.command!r} hung (no answer within {self.timeout:g}s wall time) and was killed"
            error = ChildHung(f"{head}; its output ends: {last}")
        else:
            error = ChildDied(f"wire child {self.command!r} died ({_status(code)}) while the driver was {what} it; "
                              f"its output ends: {last}")
        if tail:
            error.args = (f"{error.args[0]}\n--- output of the child (tail) ---\n{tail}",)
        return error


def _holders(fd: int) -> list[int]:
    """The processes outside this one's session holding the pipe ``fd`` is an end of (Linux's
    ``/proc``; none found elsewhere). The child was started in a session of its own: what it
    started is there or in one of its own, never in ours, where this process's own forked
    workers (which may hold an inherited copy) are."""
    try:
        wanted = f"pipe:[{os.fstat(fd).st_ino}]"
        ours = os.getsid(0)
        pids = [int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) != os.getpid()]
    except OSError:
        return []
    out = []
    for pid in pids:
        with contextlib.suppress(OSError):
            base = f"/proc/{pid}/fd"
            if os.getsid(pid) != ours and any(os.readlink(f"{base}/{f}") == wanted for f in os.listdir(base)):
                out.append(pid)
    return out


def _status(code: int | None) -> str:
    """How a child ended, from its return code."""
    return f"exit code {code}" if code is not None and code >= 0 else f"signal {-code}" if code else "it closed the pipe"


def _timeout_from_env() -> float | None:
    value = os.environ.get("LOOPKIT_WIRE_TIMEOUT", "")
    try:
        return float(value) if value else None
    except ValueError:
        return None
