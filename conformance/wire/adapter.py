"""The wire implementation: an :class:`~conformance.adapter.Implementation` whose service, agents
and sessions are proxies (``handles.py``) for an agent loop running in a child process (any
language), spoken to over the wire protocol (``docs/wire-protocol.md``, ``connection.py``).

The suite drives these proxies from inside the simulation exactly like an in-process
implementation. Every command that answers is a synchronous round trip (registrations are posted:
they travel with the next message); between two of them the child's own event loop does not run, so a stretch of caller code (``send(A); when_idle(); cancel(); send(B)``)
reaches it as one synchronous stretch. The child's queued work runs when the driver says ``run``
(a callback the simulated loop schedules after the first command, a choice point like any
other): it runs until its microtask queue drains, calling back the driver's listeners
synchronously on the way, and answers at quiescence. Model calls stream from the Python models
and tool calls run the Python tools, both as tasks of the simulated loop, delivering chunks and
results back to the child. Virtual time, uuids and the seed come from the driver's sources.

The proxies keep a mirror of each agent's status and log, fed by the child's ``status`` and
``log`` events (and a waiter's release carries the status it was released in), so reading
``agent.status`` or ``session.events`` costs nothing and is exact at every point the driver can
observe; each quiescence reconciles the mirror with the child.
"""

from __future__ import annotations

import os
from typing import Any

from conformance.adapter import ServiceHandle
from conformance.catalogue import FEATURES, Feature

from .child import Child
from .connection import Connection
from .handles import WireAgent, WirePersistence, WirePromise, WireService
from .protocol import Opaque, RemoteError, WireError


class WireImplementation:
    """``--impl wire:COMMAND``: the loop a child process runs, checked over the wire.

    The child is started (and its handshake checked) when this object is built, so a command
    that is not a bridge is a one-line setup error before anything runs. It is reused from one
    test to the next; a child that crashed, hung or broke the protocol fails the test it was in
    and the next service gets a fresh one.
    """

    reentrant_model = False
    """The kit's model is called while the driver reads the child's events: a caller action
    from inside a model call would re-enter the child, which the protocol refuses."""

    def __init__(self, command: str, *, cwd: str | None = None, timeout: float | None = None,
                 transcript: bool = False) -> None:
        import shlex

        self.command = command
        self.argv = shlex.split(command)
        if not self.argv:
            raise WireError("missing COMMAND (expected --impl 'wire:COMMAND', e.g. 'wire:node bridge.mjs')")
        self.cwd = cwd
        self.timeout = timeout
        self.record_transcript = transcript
        self._conn: Connection | None = None
        self.hello = self._connection().hello
        info = self.hello.get("implementation") or {}
        runtime = self.hello.get("runtime") or {}
        self.name = str(info.get("name") or self.argv[0])
        self.version = str(info.get("version") or "")
        self.runtime = str(runtime.get("name") or "unknown")
        self.runtime_version = str(runtime.get("version") or "")
        declared = [f for f in self.hello.get("features") or [] if f in FEATURES]
        self.features: frozenset[Feature] = frozenset(declared)
        self.logger_name = f"loopkit.wire.{self.name}"

    @property
    def info(self) -> dict[str, Any]:
        """What reports and race cassettes record about the implementation."""
        return {"kind": "wire", "name": self.name, "version": self.version, "runtime": self.runtime,
                "runtime_version": self.runtime_version, "protocol": self.hello.get("protocol")}

    def _connection(self) -> Connection:
        conn = self._conn
        if conn is not None and conn.child.owner != os.getpid():
            conn.child.abandon()  # inherited through fork: the parent's child, not ours
            conn = None
        if conn is not None and conn.dead is not None:
            conn.child.close()
            conn = None
        if conn is None:
            child = Child(self.argv, cwd=self.cwd, timeout=self.timeout)
            if self.record_transcript:
                child.transcript = []
            try:
                hello = child.handshake()
            except BaseException:
                child.close()
                raise
            conn = self._conn = Connection(self, child, hello)
        return conn

    def transcript(self) -> list[str]:
        """Every line exchanged in the last simulation run (``transcript=True``), ``>`` for the
        driver's and ``<`` for the child's: the same scenario and seed give the same lines."""
        conn = self._conn
        return list(conn.child.transcript or []) if conn is not None else []

    @property
    def connection(self) -> Connection:
        """The current child's connection (a fresh child when the last one failed)."""
        return self._connection()

    def create_service(self, *, persistence: object | None = None) -> ServiceHandle:
        conn = self._connection()
        conn.bind_run()
        args: dict[str, Any] = {}
        if persistence is not None:
            if not isinstance(persistence, WirePersistence) or persistence._conn is not conn:
                raise TypeError(f"not a persistence backend of this wire implementation: {persistence!r}")
            conn.check(persistence._epoch)
            args["persistence"] = persistence._handle
        value = conn.call("service", args, mutates=False)
        return WireService(conn, str(value["service"]))

    def new_persistence(self) -> object:
        if "persistence" not in self.features:
            raise NotImplementedError(f"{self.name} declares no persistence")
        conn = self._connection()
        conn.bind_run()
        value = conn.call("new_persistence", {}, mutates=False)
        return WirePersistence(conn, str(value["persistence"]))

    def close(self) -> None:
        """Stop the child (it also stops on its own when this process exits)."""
        if self._conn is not None:
            self._conn.child.close()
            self._conn = None


__all__ = ["Opaque", "RemoteError", "WireAgent", "WireError", "WireImplementation", "WirePromise", "WireService"]
