"""Before a command runs an implementation it has never seen: import it and build a service and
an agent, in a forked child, within a wall-clock limit.

A module that spins at import, calls ``os._exit(0)`` there, or blocks in ``create_service``
would otherwise hang the command or end it silently with exit 0. Here each is a
:class:`PreflightError`, one line that says which stage failed (importing the module, or
building a service and an agent), which every command prints with exit 2.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import time

from simulator.supervise import die_with_parent, real_exit

from .adapter import Implementation
from .harness import SetupError
from .impl import ImplError, resolve
from .output import close_wire_children

_IMPORTED = b"\x00"
"""What the child writes once the module is imported (the stage a later failure is in)."""


IMPORT_SECONDS = 10.0
"""The least wall time :func:`resolve_checked` gives an import and a set-up."""


class PreflightError(Exception):
    """The implementation could not be imported or set up (one line; the CLI exits 2)."""


def trusted(spec: str | None) -> bool:
    """The kit's own implementations (the reference, the mutants): they may run in-process."""
    return spec in (None, "", "reference") or (spec or "").startswith("mutant:")


def first_line(text: str) -> str:
    """The first non-blank line of ``text`` (``"failed"`` when there is none)."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[0] if lines else "failed"


def preflight(impl: Implementation) -> None:
    """Build a service and an agent in a simulation: raise :class:`PreflightError` if that fails."""
    import simulator

    from .scenario.engine import main_of
    from .scenario.model import AgentSpec, Scenario

    scenario = Scenario(name="preflight", agents=(AgentSpec("preflight"),), models=(), settle=False)
    result = simulator.run(main_of(scenario, impl))
    if isinstance(result.error, SetupError):
        raise PreflightError(f"setup failed: {result.error}")
    if result.error is not None:
        raise PreflightError(f"setup failed: {impl.name}: {type(result.error).__name__}: "
                             f"{first_line(str(result.error))}")
    if result.outcome != "completed":
        raise PreflightError(f"setup failed: {impl.name}: building a service and an agent ended {result.outcome}")


def isolated(spec: str | None, timeout: float, *, limit: str = "--timeout") -> None:
    """Resolve ``spec`` and run :func:`preflight` in a forked child, within ``timeout`` wall
    seconds (0: an hour): a spin, a hang or an exit while importing it or building a service
    is a :class:`PreflightError` (an unknown module an ``ImplError``) here instead of a hung or
    vanished command. Where ``fork`` does not exist it runs in this process."""
    if not hasattr(os, "fork"):
        preflight(resolve(spec))
        return
    read_end, write_end = os.pipe()
    pid = _fork_child(spec, read_end, write_end)
    os.close(write_end)
    chunks: list[bytes] = []
    status: int | None = None
    try:
        deadline = time.monotonic() + (timeout if timeout > 0 else 3600.0)
        while status is None:
            left = deadline - time.monotonic()
            if left <= 0:
                _stop(pid)
                if b"".join(chunks).startswith(_IMPORTED):
                    what, where = "building a service and an agent", " (in create_service, create, or a listener during close()?)"
                elif (spec or "").startswith("wire:"):
                    what, where = f"starting the wire implementation {spec!r}", " (it has not said hello)"
                else:
                    what, where = f"importing the implementation {spec!r}", " at import"
                raise PreflightError(f"setup failed: {what} did not finish within {timeout:g}s of wall time ({limit}): "
                                     f"the implementation spins or blocks{where}")
            ready, _, _ = select.select([read_end], [], [], min(left, 0.1))
            if ready:
                chunk = os.read(read_end, 4096)
                if not chunk:
                    break
                chunks.append(chunk)
                continue
            # The child may have ended while a process it forked (a daemon the implementation
            # started) still holds the pipe open: no end of file would come. Its exit is the end.
            done, code = os.waitpid(pid, os.WNOHANG)
            if done:
                status = code
                chunks.extend(_drain(read_end))
    finally:
        os.close(read_end)
        if status is None:
            status = 0
            with contextlib.suppress(ChildProcessError):  # reaped already by _stop
                _, status = os.waitpid(pid, 0)
    data = b"".join(chunks)
    imported = data.startswith(_IMPORTED)
    message = data.removeprefix(_IMPORTED).decode("utf-8", "replace")
    if not message:
        code = os.waitstatus_to_exitcode(status)
        how = f"signal {-code}" if code < 0 else f"exit code {code}"
        where = "building a service and an agent" if imported else f"importing {spec!r}"
        raise PreflightError(f"setup failed: the implementation ended the process ({how}) while {where}")
    if message.startswith("impl: "):
        raise ImplError(message.removeprefix("impl: "))
    if message != "ok":
        raise PreflightError(message)


def _drain(fd: int) -> list[bytes]:
    """What is in the pipe now, without waiting for more."""
    out = []
    while select.select([fd], [], [], 0)[0]:
        chunk = os.read(fd, 4096)
        if not chunk:
            break
        out.append(chunk)
    return out


def resolve_checked(spec: str | None, timeout: float) -> Implementation:
    """The implementation ``spec`` names (``"reference"`` or nothing: the reference), one the
    kit has never seen first imported and set up in a forked child (:func:`isolated`, within
    ``timeout`` wall seconds) before this process imports it."""
    spec = None if spec in (None, "reference") else spec
    if spec is not None and not spec.strip():
        return resolve(spec)  # names nothing: its one-line error, without a child to import it
    if not trusted(spec):
        # the limit of one run, but never below IMPORT_SECONDS: importing a heavy module is slow
        limit = max(timeout, IMPORT_SECONDS) if timeout else 0
        isolated(spec, limit, limit="--timeout" if limit == timeout else f"--timeout, but at least {IMPORT_SECONDS:g}s here")
    return resolve(spec)


def _fork_child(spec: str | None, read_end: int, write_end: int) -> int:
    """Fork the child that imports and sets up ``spec``, reporting on ``write_end``."""
    import sys

    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid:
        return pid
    # the child: report one line, then leave without running any cleanup
    me = os.getpid()  # a process the implementation forks returns through here too: it says nothing
    message = "ok"
    stage = f"importing {spec!r}"
    try:
        os.close(read_end)
        die_with_parent()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, _terminated)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        try:
            impl = resolve(spec)
        except ImplError as exc:
            message = f"impl: {exc}"
        else:
            if os.getpid() == me:
                os.write(write_end, _IMPORTED)
            stage = "building a service and an agent"
            preflight(impl)
    except PreflightError as exc:
        message = str(exc)
    except BaseException as exc:  # KeyboardInterrupt, SystemExit, ... raised by the implementation
        message = f"setup failed: {stage} raised {type(exc).__name__}: {first_line(str(exc) or type(exc).__name__)}"
    if os.getpid() == me:
        with contextlib.suppress(OSError):
            os.write(write_end, message.encode("utf-8", "replace")[:4000])
        close_wire_children(graceful=False)
    real_exit(0)
    raise AssertionError("unreachable")  # pragma: no cover


def _terminated(signum: int, frame: object) -> None:
    """SIGTERM in the child: close the wire children it started (each in a session of its own,
    so no signal to this process reaches them), then go."""
    close_wire_children(graceful=False)
    real_exit(1)


def _stop(pid: int) -> None:
    """End the child: SIGTERM first (it closes its wire children), SIGKILL after a second."""
    with contextlib.suppress(OSError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done:
            return
        time.sleep(0.02)
    with contextlib.suppress(OSError):
        os.kill(pid, signal.SIGKILL)
