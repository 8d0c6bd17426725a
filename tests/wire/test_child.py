"""A child that crashes, hangs, prints garbage, breaks the protocol or trips the tripwire fails
the test it was in with a clear message (and the tail of its output); the next test gets a fresh
child; nothing hangs. Bad commands are one-line errors."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from _wire import FAULTY, command, requires_node

from conformance.harness import Kit, run_scenario
from conformance.impl import ImplError, resolve
from conformance.wire import WireError, WireImplementation
from conformance.wire.child import ChildDied, ChildHung

pytestmark = requires_node


@pytest.fixture(scope="module")
def faulty() -> WireImplementation:
    # 2 s: the hello falls under it too, and a loaded CI machine may take over 1 s to start node
    impl = WireImplementation(command(FAULTY), timeout=2.0)
    yield impl
    impl.close()


def _sending(text: str) -> Callable[[Kit], object]:
    async def body(k: Kit) -> None:
        a = k.agent()
        a.send(text)
        await k.idle(a)
        assert k.reasons(a) == [{"kind": "completed"}]

    return body


def _fails_then_recovers(impl: WireImplementation, text: str, error: type[BaseException]) -> str:
    before = impl.connection.child.pid
    with pytest.raises(error) as info:
        run_scenario(impl, _sending(text))
    run_scenario(impl, _sending("fine"))  # the next test runs, on a fresh child
    assert impl.connection.child.pid != before
    return str(info.value)


def test_a_crash_names_the_exit_and_quotes_the_output(faulty: WireImplementation) -> None:
    message = _fails_then_recovers(faulty, "crash", ChildDied)
    first = message.splitlines()[0]
    assert "died (exit code 3)" in first and "faulty: crashing on purpose" in first


def test_a_hang_is_killed_after_the_timeout(faulty: WireImplementation) -> None:
    started = time.monotonic()
    message = _fails_then_recovers(faulty, "hang", ChildHung)
    assert time.monotonic() - started < 10
    assert "hung (no answer within 2s wall time) and was killed" in message


def _orphans() -> list[str]:
    """The faulty child's leftover processes (their command lines name them)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError):
            if b"loopkit-faulty-orphan" in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(pid)
    return found


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs Linux's /proc to see the leftover process")
@pytest.mark.parametrize("mode", ["orphan", "orphan-detached"])
def test_a_child_that_exits_leaving_its_pipes_held_is_named_and_its_holder_killed(
        faulty: WireImplementation, mode: str) -> None:
    # The child exits while a process it started (in its group, or in a session of its own that
    # the group kill does not reach) holds the pipes and never answers: no end of file comes.
    # The driver must not block on the pipe for ever, must not call it a spin, and must not
    # leave that process behind.
    started = time.monotonic()
    message = _fails_then_recovers(faulty, mode, ChildHung)
    assert time.monotonic() - started < 10
    assert "exited (exit code 0) but a process it started kept its pipes open" in message
    deadline = time.monotonic() + 5
    while _orphans() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _orphans(), "the process holding the child's pipes was left running"


def test_garbage_on_the_stream_is_a_protocol_error(faulty: WireImplementation) -> None:
    message = _fails_then_recovers(faulty, "garbage", WireError)
    assert "broke the protocol" in message and "'this is not JSON'" in message


def test_a_mirror_that_missed_log_events_fails_the_test_naming_it(faulty: WireImplementation) -> None:
    # The child stops sending `log` events (wire §7.2): the run's reconciliation finds the log
    # longer than the mirror, and says so, rather than letting a test blame the loop.
    message = _fails_then_recovers(faulty, "unmirrored", WireError)
    assert "agent 'a': its log holds" in message and "the driver's mirror holds" in message
    assert "(wire protocol §7.2)" in message


def test_a_timer_trips_the_tripwire(faulty: WireImplementation) -> None:
    message = _fails_then_recovers(faulty, "timer", WireError)
    assert "created timers or I/O during a run (Timeout at Faulty.send" in message and "faulty.mjs" in message


def test_the_implementations_own_output_never_corrupts_the_stream(faulty: WireImplementation) -> None:
    run_scenario(faulty, _sending("print"))
    assert "hello from the implementation on stdout" in faulty.connection.child.tail()


@pytest.mark.parametrize(("spec", "fragment"), [
    ("wire:", "missing COMMAND"),
    ("wire:/nonexistent/loopkit-child", "cannot start '/nonexistent/loopkit-child'"),
    ("wire:false", "is not a loopkit wire bridge: it never said hello (exit code 1)"),
    ("wire:python3 -c print(42)", "it never said hello (exit code 0); its output ends: 42"),
])
def test_bad_commands_are_one_line_errors(spec: str, fragment: str) -> None:
    with pytest.raises(ImplError) as info:
        resolve(spec)
    assert fragment in str(info.value) and "\n" not in str(info.value)


def test_a_child_that_never_says_hello_is_not_waited_for(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOOPKIT_WIRE_TIMEOUT", "0.5")
    started = time.monotonic()
    with pytest.raises(ImplError, match=r"never said hello \(no answer within 0\.5s"):
        resolve("wire:sleep 30")
    assert time.monotonic() - started < 10
