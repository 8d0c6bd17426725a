"""Blocking calls inside a simulation are escapes (SimulationError naming the call), like
threads; ``simulator.allow_blocking()`` suspends the checks; outside a run nothing changes."""

from __future__ import annotations

import os
import select
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import pytest

import simulator

CALLS: dict[str, tuple[Callable[[], Any], str]] = {
    "sleep": (lambda: time.sleep(0.2), "time.sleep()"),
    "connect": (lambda: socket.socket().connect(("127.0.0.1", 9)), "socket.connect()"),
    "create_connection": (lambda: socket.create_connection(("127.0.0.1", 9)), "socket.create_connection()"),
    "getaddrinfo": (lambda: socket.getaddrinfo("localhost", 80), "socket.getaddrinfo()"),
    "select": (lambda: select.select([], [], [], 0.1), "select.select()"),
    "subprocess": (lambda: subprocess.run(["true"], check=False), "subprocess.Popen()"),
    "system": (lambda: os.system("true"), "os.system()"),
    "os._exit": (lambda: os._exit(0), "os._exit()"),
    "sys.exit": (lambda: sys.exit(0), "sys.exit()"),
}


@pytest.mark.parametrize("name", sorted(CALLS))
def test_blocking_call_inside_a_run_is_an_escape_naming_it(name: str) -> None:
    call, label = CALLS[name]

    async def main() -> None:
        call()

    started = time.monotonic()
    result = simulator.run(main)
    assert result.outcome == "failed"
    assert isinstance(result.error, simulator.SimulationError)
    assert str(result.error).startswith(label), str(result.error)
    assert time.monotonic() - started < 0.15  # it raised at once, it did not block first


@pytest.mark.parametrize("name", [*sorted(CALLS), "thread", "executor"])
def test_an_escape_the_program_swallows_is_still_in_the_timeline(name: str) -> None:
    # A loop containing its plugins' failures catches the SimulationError and goes on: the run
    # completes, but the timeline says where it tried to leave (what an oracle judges).
    import threading

    async def main() -> None:
        import asyncio

        try:
            if name == "thread":
                threading.Thread(target=lambda: None).start()
            elif name == "executor":  # a worker's call runs on the loop's thread: it may not block
                await asyncio.to_thread(time.sleep, 0.2)
            else:
                CALLS[name][0]()
        except simulator.SimulationError:
            pass

    result = simulator.run(main)
    assert result.outcome == "completed"
    (escape,) = [e for e in result.timeline if e["kind"] == simulator.ESCAPE]
    label = {"thread": "threading.Thread.start()", "executor": "time.sleep()"}.get(name) or CALLS[name][1]
    assert escape["call"].startswith(label) and escape["message"].startswith(label)
    async def allowed() -> None:  # deliberate blocking inside allow_blocking() is no escape
        with simulator.allow_blocking():
            time.sleep(0.001)

    assert not [e for e in simulator.run(allowed).timeline if e["kind"] == simulator.ESCAPE]


def test_allow_blocking_suspends_the_checks_and_nests() -> None:
    async def main() -> str:
        with simulator.allow_blocking():
            with simulator.allow_blocking():
                time.sleep(0.001)
            completed = subprocess.run(["true"], check=False)
        try:
            time.sleep(0.001)
        except simulator.SimulationError:
            return f"blocked again after the block ({completed.returncode})"
        return "not blocked"

    result = simulator.run(main)
    assert result.value == "blocked again after the block (0)"


def test_outside_a_run_the_real_calls_work() -> None:
    time.sleep(0.001)
    assert subprocess.run(["true"], check=False).returncode == 0
    assert select.select([], [], [], 0) == ([], [], [])
    with pytest.raises(SystemExit):
        sys.exit(0)
