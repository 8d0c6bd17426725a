"""The pytest plugin of the conformance suite (entry point ``pytest11: loopkit``).

Options:

* ``--loopkit-impl MODULE:ATTR`` (also ``reference`` or ``mutant:NAME``): the implementation
  the rule tests check; the reference by default.
* ``--loopkit-schedules N``: seeded ``random`` and ``pct`` schedules (N of each) that the race
  rules run under besides ``fifo`` (default 3).
* ``--loopkit-rule ID`` (repeatable): only the tests of these rules.

``pytest --pyargs conformance`` then checks the chosen implementation. Tests of rules whose
optional feature the implementation does not declare (or about another runtime: PY-* over the
wire) are skipped as ``not-applicable``.

The plugin is loaded in every pytest run of an environment where loopkit is installed, so it
does nothing outside the rule tests: it only adds options, the ``rule`` marker and fixtures.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Generator
from typing import Any

import pytest

from . import catalogue, schedules
from .adapter import Implementation
from .harness import Body, run_scenario
from .impl import ImplError, resolve

NOT_APPLICABLE = "not-applicable"
WALL_TIMEOUT = 60.0


class WallTimeout(Exception):
    """A rule test exceeded its wall-clock limit (the implementation is stuck in a busy loop)."""


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    # Virtual time makes every wait of the suite cost nothing, so a test that takes long in
    # wall time is stuck (typically a driver looping without ever suspending). An alarm turns
    # that into a failure instead of hanging the whole run. Main thread / POSIX only.
    limit = item.config.getoption("--loopkit-timeout", default=0) or 0
    armed = bool(rule_ids(item)) and limit > 0 and hasattr(signal, "setitimer") and (
        threading.current_thread() is threading.main_thread()
    )
    if not armed:
        yield
        return

    def on_alarm(_signum: int, _frame: object) -> None:
        raise WallTimeout(f"test exceeded {limit:g}s of wall time (the implementation hangs?)")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, limit)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("loopkit", "loopkit conformance suite")
    group.addoption("--loopkit-impl", default=None, metavar="MODULE:ATTR",
                    help="implementation to check: MODULE:ATTR, 'reference' (default) or 'mutant:NAME'")
    group.addoption("--loopkit-schedules", type=int, default=schedules.DEFAULT_SCHEDULES, metavar="N",
                    help="seeded random and pct schedules (each) for the race rules (default %(default)s)")
    group.addoption("--loopkit-rule", action="append", default=[], metavar="ID",
                    help="only run the tests of this rule id (repeatable)")
    group.addoption("--loopkit-timeout", type=float, default=WALL_TIMEOUT, metavar="SECONDS",
                    help="wall-clock limit per rule test, against implementations that hang (default %(default)s)")


def pytest_configure(config: pytest.Config) -> None:
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
    # Race rules run under fifo plus N seeded random and pct schedules.
    if "schedule" not in metafunc.fixturenames:
        return
    ids = [rid for m in metafunc.definition.iter_markers("rule") for rid in m.args]
    if any(catalogue.RULES_BY_ID[r].race for r in ids if r in catalogue.RULES_BY_ID):
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
