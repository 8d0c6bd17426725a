"""The pytest plugin of the conformance suite (entry point ``pytest11: loopkit``).

Options:

* ``--loopkit-impl MODULE:ATTR`` (also ``reference`` or ``mutant:NAME``): the implementation
  the rule tests check; the reference by default.
* ``--loopkit-schedules N``: seeded ``random`` and ``pct`` schedules (N of each) that the race
  rules run under besides ``fifo`` (default 3).
* ``--loopkit-rule ID`` (repeatable): only the tests of these rules.
* ``--loopkit-timeout SECONDS``: wall-clock limit per rule test, setup and teardown included
  (default 5; 0 disables); ``--loopkit-max-hangs N``: stop after N tests exceeded it (default 3).

``pytest --pyargs conformance`` then checks the chosen implementation. Tests of rules whose
optional feature the implementation does not declare (or about another runtime: PY-* over the
wire) are skipped as ``not-applicable``.

The plugin is loaded in every pytest run of an environment where loopkit is installed, so it
does nothing outside the rule tests: it only adds options, the ``rule`` marker and fixtures.
"""

from __future__ import annotations

import _signal
import argparse
import contextlib
import inspect
import io
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Generator
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

from simulator.supervise import WALL_ALARMS, WALL_GRACE, real_exit, spinning_frame, waiting_on

from . import catalogue, schedules
from .adapter import Implementation
from .harness import Body, run_scenario
from .impl import ImplError, resolve
from .limits import MAX_HANGS, WALL_TIMEOUT
from .output import SELF_INTERRUPT

NOT_APPLICABLE = "not-applicable"
GRACE = WALL_GRACE
"""Seconds between the repeated alarms after the first, when a test does not stop."""
ALARMS = WALL_ALARMS
"""Alarms after which an xdist worker ends itself (the runner restarts it and reports the test)."""
OUTPUT_LIMIT = 8192
"""Characters of an implementation's stdout/stderr kept per test when output is bounded."""
WALL_MESSAGE = "exceeded the wall-clock limit"
"""The fixed part of a timed-out test's message (the runner counts hangs by it)."""

_real_exit = real_exit  # the simulator guards os._exit in a run


class WallTimeout(BaseException):
    """A rule test exceeded its wall-clock limit (the implementation never yields: a busy loop).

    A ``BaseException``, so that an implementation's ``except Exception`` cannot swallow it."""


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("loopkit", "loopkit conformance suite")
    group.addoption("--loopkit-impl", default=None, metavar="MODULE:ATTR",
                    help="implementation to check: MODULE:ATTR, 'reference' (default), 'mutant:NAME' or 'wire:COMMAND'")
    group.addoption("--loopkit-schedules", type=int, default=schedules.DEFAULT_SCHEDULES, metavar="N",
                    help="seeded random and pct schedules (each) for the race rules (default %(default)s)")
    group.addoption("--loopkit-rule", action="append", default=[], metavar="ID",
                    help="only run the tests of this rule id (repeatable)")
    group.addoption("--loopkit-timeout", type=float, default=WALL_TIMEOUT, metavar="SECONDS",
                    help="wall-clock limit per rule test, setup and teardown included, against "
                         "implementations that hang (default %(default)s; 0 disables)")
    group.addoption("--loopkit-max-hangs", type=int, default=MAX_HANGS, metavar="N",
                    help="stop after N rule tests exceeded the wall-clock limit (default %(default)s; 0: never)")
    # The runner's own plumbing (hidden): a directory shared with its workers, bounded output.
    group.addoption("--loopkit-state", default=None, metavar="DIR", help=argparse.SUPPRESS)
    group.addoption("--loopkit-bound-output", action="store_true", default=False, help=argparse.SUPPRESS)


# --------------------------------------------------------------------------- supervision
#
# Every wait of the suite runs in virtual time, so a rule test that takes long in *wall* time
# is an implementation that never yields to the event loop (a busy loop, blocking code the
# simulator does not catch). A SIGALRM covering the test's whole protocol (setup, call and
# teardown: a spin in create_service or in a listener firing during close() included) turns
# that into a failure of the test, naming where the code was spinning. The alarm repeats every
# GRACE seconds while the test goes on (the implementation may catch the first one); in an
# xdist worker, after ALARMS alarms the worker ends itself, leaving a note the runner turns
# into this test's failure. The runner's state directory also counts the hangs of the whole
# run (across workers) and carries the stop request of an interrupt.


class _Bounded(io.TextIOBase):
    """A text stream keeping the first ``limit`` characters written and counting the rest, so an
    implementation printing megabytes per call costs no memory (the report shows the head). It
    is a whole text stream (``writelines``, ``buffer``); closing it changes nothing, since the
    next test writes to it too."""

    def __init__(self, limit: int = OUTPUT_LIMIT) -> None:
        super().__init__()
        self.limit = limit
        self.parts: list[str] = []
        self.kept = 0
        self.dropped = 0
        self.buffer = _BoundedBytes(self)

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return "utf-8"

    def writable(self) -> bool:
        return True

    def close(self) -> None:
        pass

    def write(self, text: str) -> int:
        room = max(self.limit - self.kept, 0)
        if room:
            self.parts.append(text[:room])
            self.kept += min(room, len(text))
        self.dropped += max(0, len(text) - room)
        return len(text)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False

    def text(self) -> str:
        return "".join(self.parts) + (f"\n[... {self.dropped} more characters not kept]" if self.dropped else "")


class _BoundedBytes(io.RawIOBase):
    """``_Bounded.buffer``: bytes written are kept as text (UTF-8, undecodable bytes replaced)."""

    def __init__(self, text: _Bounded) -> None:
        super().__init__()
        self._text = text

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        raw = bytes(data)
        self._text.write(raw.decode("utf-8", "replace"))
        return len(raw)

    def close(self) -> None:
        pass


def _spinning_in(frame: FrameType | None) -> str:
    """The innermost frame of the implementation (not the kit, asyncio or pytest) at the alarm."""
    here = Path(__file__).resolve().parent
    kit = (str(here), str(here.parent / "simulator"))
    parts = ("asyncio", "_pytest", "pluggy", "contextlib", "threading")

    def skip(path: str) -> bool:
        return path.startswith(kit) or any(f"{os.sep}{part}{os.sep}" in path for part in parts)

    hint = waiting_on(frame)
    if hint is not None:
        return hint
    entry = spinning_frame(frame, skip)
    return f"{entry.name}() at {Path(entry.filename).name}:{entry.lineno}" if entry is not None else ""


class _Supervisor:
    """The wall-clock supervision, bounded output and safe-point stops: a plugin object, one per
    pytest process (each xdist worker has its own), acting only on rule tests."""

    def __init__(self, config: pytest.Config) -> None:
        self.limit = float(config.getoption("--loopkit-timeout") or 0)
        self.max_hangs = int(config.getoption("--loopkit-max-hangs") or 0)
        state = config.getoption("--loopkit-state")
        self.state = Path(state) if state else None
        self.worker = hasattr(config, "workerinput")
        self.bound_output = bool(config.getoption("--loopkit-bound-output"))
        self.alarms = 0
        self.alarm_phase = ""
        self.where = ""
        self.phase = ""
        self.nodeid = ""
        self.output: list[tuple[str, _Bounded]] = []

    # ------------------------------------------------------------------ state shared by workers
    def stop_reason(self) -> str | None:
        """Why no further test should start (an interrupt, too many hangs), or ``None``."""
        if self.state is None:
            return None
        if (self.state / "stop").exists():
            return "interrupted"
        if self.max_hangs > 0:
            hangs = sum(1 for name in os.listdir(self.state) if name.startswith("hang-"))
            if hangs >= self.max_hangs:
                return f"stopped after {hangs} tests exceeded the wall-clock limit"
        return None

    def note(self, kind: str, text: str) -> None:
        if self.state is not None:
            name = f"{kind}-{os.getpid()}-{abs(hash(self.nodeid)):x}"
            (self.state / name).write_text(f"{self.nodeid}\n{text}\n", encoding="utf-8")

    # ------------------------------------------------------------------ the alarm
    def message(self) -> str:
        return (f"{WALL_MESSAGE} ({self.limit:g}s, --timeout) in {self.alarm_phase or 'the test'}"
                + (f", spinning in {self.where}" if self.where else "")
                + ": every wait of the suite is virtual, so wall time means the implementation "
                  "never yields to the event loop (a busy loop, or blocking code)")

    def on_alarm(self, _signum: int, frame: FrameType | None) -> None:
        self.alarms += 1
        if self.alarms == 1:
            self.alarm_phase = self.phase
            self.where = _spinning_in(frame)
            self.note("hang", self.message())
        if self.worker and self.alarms >= ALARMS:
            self.note("crash", self.message() + f"; the test did not stop after {ALARMS} alarms, "
                      "so its worker process was ended")
            _real_exit(70)
        # the C function: an alarm comes inside a simulated run, where signal.setitimer is a tripwire
        _signal.setitimer(signal.ITIMER_REAL, GRACE)
        raise WallTimeout(self.message())

    def _armed(self) -> bool:
        return self.limit > 0 and hasattr(signal, "setitimer") and (
            threading.current_thread() is threading.main_thread())

    # ------------------------------------------------------------------ hooks
    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None) -> bool | None:
        # A safe point, between two tests: an interrupt or too many hangs stop the run here
        # (the runner reports the tests that did not run; it never counts them as failed).
        if not rule_ids(item):
            return None
        reason = self.stop_reason()
        if reason is not None:
            item.session.shouldstop = reason
            return True  # not run, no report
        from _pytest.runner import runtestprotocol

        self.nodeid, self.alarms, self.alarm_phase, self.where, self.phase = item.nodeid, 0, "", "", ""
        armed = self._armed()
        previous: Any = None
        if armed:
            previous = signal.signal(signal.SIGALRM, self.on_alarm)
            signal.setitimer(signal.ITIMER_REAL, self.limit)
        saved = sys.stdout, sys.stderr
        quiet = logging.NullHandler()
        if self.bound_output:
            self.output = [("stdout", _Bounded()), ("stderr", _Bounded())]
            sys.stdout, sys.stderr = self.output[0][1], self.output[1][1]
            # The runner turns pytest's log capture off (it keeps every record of every test);
            # without a handler, warnings would reach logging's last-resort printer instead.
            logging.getLogger().addHandler(quiet)
        try:
            item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
            runtestprotocol(item, nextitem=nextitem, log=True)
            item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
        finally:
            if armed:
                signal.setitimer(signal.ITIMER_REAL, 0)
                signal.signal(signal.SIGALRM, previous)
            if self.bound_output:
                sys.stdout, sys.stderr = saved
                logging.getLogger().removeHandler(quiet)
            self.nodeid = ""
        return True

    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        self.phase = "setup"

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, None, None]:
        self.phase = "call"
        try:
            return (yield)
        except KeyboardInterrupt as exc:
            # No interrupt came (the runner's signal handlers leave a ``stop`` file): the
            # implementation raised it, and pytest would end the whole run at this test as if
            # the user had pressed Ctrl-C. The wall-clock alarm's subclass is the kit's own.
            signalled = self.state is None or (self.state / "stop").exists()
            if type(exc) is not KeyboardInterrupt or signalled:
                raise
            raise AssertionError(SELF_INTERRUPT) from None

    def pytest_runtest_teardown(self, item: pytest.Item) -> None:
        self.phase = "teardown"

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, None]:
        outcome = yield
        report: pytest.TestReport = outcome.get_result()
        if self.nodeid != item.nodeid:
            return
        # The rule ids travel with the report (the runner's controller has no items under xdist).
        report.user_properties.append(("loopkit_rules", ",".join(rule_ids(item))))
        if self.alarms and report.when == self.alarm_phase:
            # Whatever the test then raised (the alarm may have ended the driver task, and the
            # test timed out waiting for it), the cause is the spin.
            report.outcome = "failed"
            report.longrepr = f"WallTimeout: {self.message()}"
        if report.when == "teardown":
            for name, stream in self.output:
                if stream.kept or stream.dropped:
                    report.sections.append((f"Captured {name} (bounded)", stream.text()))
            self.output = []
        _encodable(report)


def _encodable(report: pytest.TestReport) -> None:
    """Text of the report UTF-8 cannot encode (a lone surrogate in an implementation's error
    message) escaped: an xdist worker could not send the report, and its pool broke."""
    def clean(text: str) -> str:
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            return text.encode("utf-8", "backslashreplace").decode("utf-8")
        return text

    def scrub(value: Any, depth: int = 0) -> Any:
        # pytest's structured failure (its crash line, each entry's lines), kept structured
        if isinstance(value, str):
            return clean(value)
        if depth > 8 or value is None or isinstance(value, (int, float, bool)):
            return value
        if isinstance(value, list):
            value[:] = [scrub(v, depth + 1) for v in value]
            return value
        if isinstance(value, tuple):
            return tuple(scrub(v, depth + 1) for v in value)
        if isinstance(value, dict):
            for key in list(value):
                value[key] = scrub(value[key], depth + 1)
            return value
        for key, item in list(getattr(value, "__dict__", {}).items()):
            with contextlib.suppress(AttributeError, TypeError):
                setattr(value, key, scrub(item, depth + 1))
        return value

    if report.longrepr is not None:
        try:
            str(report.longrepr).encode("utf-8")
        except UnicodeEncodeError:
            report.longrepr = scrub(report.longrepr)
    report.sections = [(clean(title), clean(body)) for title, body in report.sections]


def _worker_setup(config: pytest.Config) -> None:
    """In an xdist worker of the runner: die with the parent whatever ends it, and turn a Ctrl-C
    (which reaches the whole process group) into a stop at the next test, like the runner."""
    from simulator.supervise import die_with_parent

    die_with_parent()
    state = config.getoption("--loopkit-state")
    (Path(state) / f"pid-{os.getpid()}").touch()  # the runner ends its workers once done
    if threading.current_thread() is threading.main_thread():

        heard = [0]

        def on_interrupt(_signum: int, _frame: FrameType | None) -> None:
            # A signal to the process group (Ctrl-C, timeout(1)) reaches the runner and every
            # worker at once: the runner may have asked to stop already. Only a second signal
            # this worker hears ends its test.
            heard[0] += 1
            if heard[0] > 1:
                raise KeyboardInterrupt
            (Path(state) / "stop").touch()

        signal.signal(signal.SIGINT, on_interrupt)
        signal.signal(signal.SIGTERM, on_interrupt)


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(_Supervisor(config), "loopkit-supervisor")
    if hasattr(config, "workerinput") and config.getoption("--loopkit-state"):
        _worker_setup(config)
    config.addinivalue_line("markers", "rule(*ids): the spec rule id(s) a conformance test checks")
    unknown = catalogue.unknown_ids(config.getoption("--loopkit-rule") or [])
    if unknown:
        raise pytest.UsageError(f"unknown rule id(s): {', '.join(unknown)}")
    if config.getoption("--loopkit-schedules") < 0:
        raise pytest.UsageError("--loopkit-schedules must be >= 0")
    spec = config.getoption("--loopkit-impl")
    if spec is not None:
        try:
            config.stash[_IMPL] = resolve(spec)
        except ImplError as exc:
            raise pytest.UsageError(str(exc)) from None


_IMPL = pytest.StashKey[Implementation]()


def set_implementation(config: pytest.Config, impl: Implementation) -> None:
    """Check ``impl`` (an object, not a ``--loopkit-impl`` string) in this pytest run."""
    config.stash[_IMPL] = impl


def rule_ids(item: pytest.Item | Any) -> list[str]:
    """The rule ids an item (or test function) is marked with."""
    marks = item.iter_markers("rule") if hasattr(item, "iter_markers") else getattr(item, "pytestmark", [])
    return [rid for mark in marks if mark.name == "rule" for rid in mark.args]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    # Race rules run under fifo plus N seeded random and pct schedules, and so does a test of
    # another rule that asks for ``schedule`` itself (it races something: an abort between
    # steps, an inject against a send).
    if "schedule" not in metafunc.fixturenames:
        return
    ids = [rid for m in metafunc.definition.iter_markers("rule") for rid in m.args]
    if "schedule" in inspect.signature(metafunc.function).parameters or any(
            catalogue.RULES_BY_ID[r].race for r in ids if r in catalogue.RULES_BY_ID):
        count = metafunc.config.getoption("--loopkit-schedules")
        metafunc.parametrize("schedule", schedules.schedule_names(count))


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    wanted = set(config.getoption("--loopkit-rule") or [])
    ours = [item for item in items if rule_ids(item)]
    if not ours:
        return
    if wanted:
        keep = [item for item in items if not rule_ids(item) or wanted & set(rule_ids(item))]
        deselected = [item for item in items if item not in keep]
        if deselected:
            config.hook.pytest_deselected(items=deselected)
            items[:] = keep
    impl = _impl_or_none(config)
    if impl is None:
        return
    for item in items:
        rules = [catalogue.RULES_BY_ID[r] for r in rule_ids(item) if r in catalogue.RULES_BY_ID]
        reasons = [catalogue.not_applicable(r, impl) for r in rules]
        if rules and all(reasons):
            why = ", ".join(sorted({str(r) for r in reasons}))
            item.add_marker(pytest.mark.skip(reason=f"{NOT_APPLICABLE}: {why}"))


def _impl_or_none(config: pytest.Config) -> Implementation | None:
    if _IMPL in config.stash:
        return config.stash[_IMPL]
    try:
        config.stash[_IMPL] = resolve(None)
    except ImplError:
        return None
    return config.stash[_IMPL]


@pytest.fixture(scope="session")
def impl(pytestconfig: pytest.Config) -> Implementation:
    """The implementation under test."""
    found = _impl_or_none(pytestconfig)
    if found is None:
        resolve(None)  # raises the resolution error
    assert found is not None
    return found


@pytest.fixture
def schedule() -> str:
    """The schedule of this run (race rules are parametrized over several)."""
    return "fifo"


@pytest.fixture
def run(impl: Implementation, schedule: str) -> Callable[[Body], None]:
    """``run(scenario)``: run ``async def scenario(kit)`` on the simulator under ``schedule``."""

    def runner(scenario: Body) -> None:
        run_scenario(impl, scenario, schedule)

    return runner
