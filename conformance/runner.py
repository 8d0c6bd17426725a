"""Running the suite and collecting one result per test, under supervision.

``run_suite`` resolves the implementation, checks that it can build a service and an agent (a
failure there is a setup error, exit 2), then runs ``pytest --pyargs conformance.tests`` with
the plugin's options and a collector plugin, isolated from the caller's pytest configuration.

Supervision (see docs/conformance.md, "How the suite runs"):

* An implementation named by a string runs in **worker processes** (pytest-xdist, ``workers``
  of them): this process runs none of its code. A worker that dies (``os._exit``, a segfault,
  a signal) is reported by xdist as a failure of the test it was in, and replaced; the run goes
  on. The preflight (building a service and an agent) runs in a forked child with the same
  wall-clock limit, so a spin or an exit in ``create_service`` is a one-line setup error.
* Every rule test has a **wall-clock limit** covering setup, call and teardown (the plugin's
  alarm, ``--loopkit-timeout``): every wait is virtual, so wall time means a spin. After
  ``max_hangs`` tests exceeded it the run stops and says so.
* Output the implementation prints is **bounded** per test (the head is kept).
* The run is **checked for completeness**: a test that was collected but has no result (its
  worker died past the restart budget, the run stopped) is reported ``not-run`` with the
  reason, never as passed, so an incomplete run never exits 0.
* **Interrupts**: the first SIGINT/SIGTERM stops the workers at their next test; the run comes
  back ``interrupted`` with what it had (the CLI then exits 130 and marks the report
  incomplete). ``workers=0`` runs in this process (trusted implementations: the reference and
  the mutants of the self-check, and ``Implementation`` objects, which workers cannot import).
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import shutil
import signal
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from unittest import mock

import pytest

from . import catalogue, schedules
from . import preflight as _preflight
from .adapter import Implementation
from .impl import ImplError, resolve
from .interrupts import Interrupts
from .limits import DEFAULT_WORKERS, MAX_HANGS, WALL_TIMEOUT
from .plugin import WALL_MESSAGE

MESSAGE_LIMIT = 20_000
"""Characters of one failure message kept (a full assertion diff fits; a 5 MB repr does not)."""
NEEDS_HOOK = "needs hook "
"""The prefix of a failure raised by ``conformance.hooks.NeedsHook``: ``needs hook NAME: ...``."""


class SuiteError(Exception):
    """A usage or setup error (the CLI prints the one-line message and exits 2)."""


@dataclass
class TestResult:
    """One test: its short id, the rules it checks, its outcome and failure message."""

    __test__ = False  # not a pytest test class, despite its name

    id: str
    rules: list[str]
    outcome: str  # passed | failed | not-applicable | skipped | not-run
    message: str = ""
    nodeid: str = ""
    command: str = ""
    """How to reproduce it when not by pytest (a hunt finding: its ``loopkit replay``)."""

    @property
    def schedule(self) -> str:
        """The schedule the test ran under (``fifo``, ``pct-2``...), from its parametrization;
        ``hunt`` for a hunt's result (its schedule is in its race cassette)."""
        if self.nodeid == "hunt":
            return "hunt"
        found = re.search(r"\b(fifo|random-\d+|pct-\d+)\b", self.id.partition("[")[2])
        return found.group(1) if found else "fifo"

    @property
    def needs_hook(self) -> str | None:
        """The hook a ``needs hook NAME: ...`` failure names (the adapter lacks it), else None."""
        text = (self.message.removeprefix("(setup) ").removeprefix("conformance.hooks.")
                .removeprefix("NeedsHook: "))
        if self.outcome == "failed" and text.startswith(NEEDS_HOOK):
            return text[len(NEEDS_HOOK):].split(":", 1)[0].strip() or None
        return None

    @property
    def summary(self) -> str:
        """The first line of the message."""
        return _one_line(self.message) if self.message else ""


@dataclass
class SuiteRun:
    """The results of one suite run.

    ``complete``: every collected test has a result (``not-run`` ones make it false);
    ``stopped``: why the run stopped early (too many hangs, worker crashes), else None;
    ``interrupted``: the signal that interrupted it, else None."""

    implementation: str
    impl: Implementation
    results: list[TestResult] = field(default_factory=list)
    selected_rules: list[str] = field(default_factory=list)
    spec: str | None = None
    stopped: str | None = None
    interrupted: int | None = None

    @property
    def complete(self) -> bool:
        return bool(self.results) and all(r.outcome != "not-run" for r in self.results)

    @property
    def ran(self) -> int:
        """Tests that ran (any outcome but ``not-run``)."""
        return sum(r.outcome != "not-run" for r in self.results)

    def reproduce(self, result: TestResult) -> str:
        """The command that runs one test again, alone and verbosely."""
        if result.command:
            return result.command
        module, _, name = result.nodeid.partition("::")
        dotted = module.removesuffix(".py").replace("/", ".").replace(os.sep, ".")
        if not dotted.startswith("conformance."):
            dotted = f"conformance.tests.{Path(module).stem}"
        # quoted as a shell word: a wire spec (``wire:node bridge.mjs --variant x``) has spaces
        impl = f" --loopkit-impl {shlex.quote(self.spec)}" if self.spec else ""
        test = shlex.quote(f"{dotted}::{name or result.id.partition('::')[2]}")
        return f"pytest --pyargs {test}{impl} -p no:cacheprovider -vv"


def short_id(nodeid: str) -> str:
    """``.../conformance/tests/test_x.py::test_y[fifo]`` -> ``test_x.py::test_y[fifo]``."""
    path, sep, rest = nodeid.partition("::")
    return f"{Path(path).name}{sep}{rest}"


def base_id(test_id: str) -> str:
    """A test id without its parametrization: ``test_x.py::test_y``."""
    return test_id.split("[", 1)[0]


_one_line = _preflight.first_line


def _rules_by_test() -> dict[str, list[str]]:
    """``test_x.py::test_y`` -> its rule ids (for reports the workers did not label)."""
    out: dict[str, list[str]] = {}
    for rid, names in catalogue.test_index().items():
        for name in names:
            out.setdefault(name, []).append(rid)
    return out


class _Collector:
    """A pytest plugin recording each test's outcome (the worst of its phases), in this process
    or, under xdist, in the controller (reports come from the workers)."""

    def __init__(self, state: Path) -> None:
        self.state = state
        self.rules: dict[str, list[str]] = {}
        self.results: dict[str, TestResult] = {}
        self.collected: list[str] = []
        self.collect_errors: list[str] = []
        self.crashes = 0
        self._index: dict[str, list[str]] | None = None

    def rules_of(self, nodeid: str) -> list[str]:
        if nodeid in self.rules:
            return self.rules[nodeid]
        if self._index is None:
            self._index = _rules_by_test()
        return list(self._index.get(base_id(short_id(nodeid)), []))

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        from .plugin import rule_ids

        for item in items:
            self.rules[item.nodeid] = rule_ids(item)
        self.collected = [item.nodeid for item in items if self.rules[item.nodeid]]

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        if not self.collected:  # every test of conformance.tests checks a rule
            self.collected = list(ids)

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        # Every result is in: end the workers now. xdist's own shutdown waits seconds for
        # each worker to wind down, which is most of a short run and of an interrupt's delay.
        # The pids are of this process's own children, not yet reaped: they cannot have been
        # reused by another process.
        # The wire children they had not closed go too (``wire-PID``: each leads a session of its
        # own, which their death does not reach: one deaf to the end of its input would outlive
        # the run). Workers first: "pid-" sorts before "wire-".
        with contextlib.suppress(OSError):
            for name in sorted(os.listdir(self.state)):
                kind, _, number = name.partition("-")
                with contextlib.suppress(OSError, ValueError):
                    if kind == "pid":
                        os.kill(int(number), signal.SIGKILL)
                    elif kind == "wire":
                        os.killpg(int(number), signal.SIGKILL)

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            self.collect_errors.append(f"{report.nodeid}: {_one_line(str(report.longrepr))}")

    @pytest.hookimpl(optionalhook=True)
    def pytest_handlecrashitem(self, crashitem: str, report: pytest.TestReport, sched: Any) -> None:
        # The worker running this test died: say why when the worker left a note (it ended
        # itself after a test that would not stop), else what can have done it.
        self.crashes += 1
        note = self._note("crash", crashitem)
        report.longrepr = note or (
            "the worker process running this test died (the implementation ended its process: "
            "os._exit(), a fatal signal, a crash in native code); the run went on in a new worker")
        report.when = "call"

    def _note(self, kind: str, nodeid: str) -> str | None:
        with contextlib.suppress(OSError):
            for name in os.listdir(self.state):
                if name.startswith(f"{kind}-"):
                    first, _, rest = (self.state / name).read_text(encoding="utf-8").partition("\n")
                    if first == nodeid:
                        return rest.strip()
        return None

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        nodeid = report.nodeid
        labelled = dict(report.user_properties).get("loopkit_rules") if report.user_properties else None
        rules = str(labelled).split(",") if labelled else self.rules_of(nodeid)
        if not rules:
            return
        current = self.results.get(nodeid)
        if current is None:
            current = TestResult(short_id(nodeid), rules, "passed", nodeid=nodeid)
            self.results[nodeid] = current
        if report.failed and current.outcome != "failed":
            current.outcome = "failed"
            current.message = _failure_message(report)
        elif report.skipped and current.outcome == "passed":
            reason = _skip_reason(report)
            current.outcome = "not-applicable" if reason.startswith("not-applicable") else "skipped"
            current.message = reason

    def hangs(self) -> int:
        with contextlib.suppress(OSError):
            return sum(1 for name in os.listdir(self.state) if name.startswith("hang-"))
        return 0


def _failure_message(report: pytest.TestReport) -> str:
    """The failure's message, whole (an assertion's full diff included), bounded in size."""
    crash = getattr(report.longrepr, "reprcrash", None)
    message = getattr(crash, "message", None) or str(report.longrepr)
    prefix = "" if report.when == "call" else f"({report.when}) "
    lines = [line.rstrip() for line in message.strip().splitlines()]
    text = "\n".join(line for line in lines if line.strip()) or "failed"
    if len(text) > MESSAGE_LIMIT:
        text = text[:MESSAGE_LIMIT] + f"\n[... {len(text) - MESSAGE_LIMIT} more characters]"
    return prefix + text


def _skip_reason(report: pytest.TestReport) -> str:
    longrepr: Any = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


# --------------------------------------------------------------------------- preflight


def preflight(impl: Implementation) -> None:
    """Build a service and an agent in a simulation: raise ``SuiteError`` if that fails."""
    try:
        _preflight.preflight(impl)
    except _preflight.PreflightError as exc:
        raise SuiteError(str(exc)) from None


def _resolve(spec: str | None) -> Implementation:
    try:
        return resolve(spec)
    except ImplError as exc:
        raise SuiteError(str(exc)) from None


def isolated_preflight(spec: str | None, timeout: float) -> None:
    """:func:`conformance.preflight.isolated`, its failures a ``SuiteError``."""
    try:
        _preflight.isolated(spec, timeout)
    except (_preflight.PreflightError, ImplError) as exc:
        raise SuiteError(str(exc)) from None


# --------------------------------------------------------------------------- the run


class _Inject:
    """Hands an implementation object (rather than a ``--loopkit-impl`` string) to the plugin."""

    def __init__(self, impl: Implementation) -> None:
        self.impl = impl

    @pytest.hookimpl(trylast=True)
    def pytest_configure(self, config: pytest.Config) -> None:
        from .plugin import set_implementation

        set_implementation(config, self.impl)


class _Stop:
    """In the controller (or the in-process run): turn the interrupt flag into a stop request
    the workers see before their next test (the ``stop`` file of the state directory)."""

    def __init__(self, interrupts: Interrupts, state: Path) -> None:
        self.interrupts = interrupts
        self.state = state

    def __call__(self, signum: int, frame: Any) -> None:
        self.interrupts._handle(signum, frame)  # a second signal raises KeyboardInterrupt here
        (self.state / "stop").touch()


trusted = _preflight.trusted


def _listing_wire_children(state: Path) -> dict[str, str]:
    """The environment that has the workers list the wire children they start in ``state``
    (:data:`conformance.wire.child.REGISTRY`), for :meth:`_Collector.pytest_sessionfinish`."""
    from .wire.child import REGISTRY

    return {REGISTRY: str(state)}


def _targets(rules: list[str]) -> list[str]:
    """What pytest collects: the whole suite, or only the test functions of the selected rules
    (each worker collects what it is given, and a worker replaced after a crash collects again:
    collecting the whole suite to keep one rule's tests cost seconds each time)."""
    if not rules:
        return ["conformance.tests"]
    import importlib

    def where(name: str) -> tuple[str, int]:  # the whole suite's order: modules by name, tests as written
        module, function = name.split(".py::")
        test = getattr(importlib.import_module(f"conformance.tests.{module}"), function)
        return module, test.__code__.co_firstlineno

    names = sorted({name for rid in rules for name in catalogue.tests_for(rid)}, key=where)
    return [f"conformance.tests.{name.replace('.py::', '::')}" for name in names] or ["conformance.tests"]


def run_suite(
    impl_spec: str | Implementation | None = None,
    *,
    rules: list[str] | None = None,
    schedule_count: int = schedules.DEFAULT_SCHEDULES,
    extra_args: list[str] | None = None,
    verbose: bool = False,
    workers: int | None = None,
    timeout: float = WALL_TIMEOUT,
    max_hangs: int = MAX_HANGS,
    interrupts: Interrupts | None = None,
) -> SuiteRun:
    """Run the rule tests against ``impl_spec`` (an ``--impl`` string, or an ``Implementation``
    object such as a mutant); raise ``SuiteError`` on usage/setup errors. Can be called many
    times in one process (the self-check runs it once per mutant).

    ``workers``: processes to run the tests in (default: 0, this process, for the reference
    and the mutants, :data:`DEFAULT_WORKERS` for any other spec; always 0 for an object); ``timeout``: wall seconds per
    test (0 disables); ``max_hangs``: stop after that many tests timed out (0: never);
    ``interrupts``: the command's :class:`Interrupts` (its flag stops the run at the next test).
    """
    rules = list(rules or [])
    problem = catalogue.unknown_ids_problem(rules)
    if problem:
        raise SuiteError(problem)
    if schedule_count < 0:
        raise SuiteError("--schedules must be >= 0")
    if timeout < 0 or timeout != timeout:
        raise SuiteError("--timeout must be a number of seconds >= 0")
    if workers is not None and workers < 0:
        raise SuiteError("--workers must be >= 0")
    spec: str | None = None
    if impl_spec is None or isinstance(impl_spec, str):
        spec = (impl_spec or "").strip() or None
        label = spec or "reference"
        if workers is None:  # the kit's own implementations are trusted to run in this process
            workers = 0 if trusted(spec) else DEFAULT_WORKERS
        if not trusted(spec):  # a spin or an exit while building a service must not take us along
            isolated_preflight(spec, timeout)
        impl = _resolve(spec)
        if trusted(spec):
            preflight(impl)
    else:
        impl, label = impl_spec, str(getattr(impl_spec, "name", "implementation"))
        workers = 0
        preflight(impl)

    import conformance

    package_root = Path(conformance.__file__).resolve().parent.parent
    state = Path(tempfile.mkdtemp(prefix="loopkit-run-"))
    args = [
        "--pyargs", *_targets(rules),
        "-c", os.devnull,  # isolate from the caller's pytest configuration
        "--rootdir", str(package_root),
        "-p", "no:cacheprovider",
        "-p", "no:logging",  # an implementation logging megabytes is not kept in memory
        "-p", "no:hypothesispytest",  # its summary imports hypothesis: seconds, after every run
        "--import-mode=importlib",
        "--loopkit-schedules", str(schedule_count),
        "--loopkit-timeout", str(timeout),
        "--loopkit-max-hangs", str(max_hangs),
        "--loopkit-state", str(state),
        "--loopkit-bound-output", "-s",  # the plugin bounds what the implementation prints
        "-o", "verbosity_assertions=2",  # whole assertion diffs, not "...t_tokens': 7}]"
        "-q",
        "--tb=native",  # one line is reported: pytest's source-annotated tracebacks cost seconds
    ]
    plugins: list[object] = [collector := _Collector(state)]
    if spec:
        args += ["--loopkit-impl", spec]
    elif impl_spec is not None and not isinstance(impl_spec, str):
        plugins.append(_Inject(impl))
    for rid in rules:
        args += ["--loopkit-rule", rid]
    if os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD"):
        args += ["-p", "conformance.plugin"]
        if workers:
            args += ["-p", "xdist.plugin"]
    if workers:
        # A worker that dies is replaced; past this many the run stops (the rest is not-run).
        args += ["-n", str(workers), "--max-worker-restart", str(4 * workers)]
    else:
        args += ["-p", "no:xdist"]
    args += list(extra_args or [])

    own = interrupts is None
    interrupts = interrupts or Interrupts()
    output = io.StringIO()
    previous: dict[int, Any] = {}
    try:
        with interrupts if own else contextlib.nullcontext():
            if interrupts.requested:
                (state / "stop").touch()
            for signum in (signal.SIGINT, signal.SIGTERM):
                with contextlib.suppress(ValueError):  # not the main thread: no handlers
                    previous[signum] = signal.signal(signum, _Stop(interrupts, state))
            listed = _listing_wire_children(state) if workers and spec and spec.startswith("wire:") else {}
            try:
                with contextlib.redirect_stdout(output) if not verbose else contextlib.nullcontext(), \
                        mock.patch.dict(os.environ, listed):  # the workers inherit it
                    code = pytest.main(args, plugins=plugins)
            finally:
                for number, handler in previous.items():
                    signal.signal(number, handler)
        if collector.collect_errors:
            raise SuiteError(f"the suite could not be collected: {collector.collect_errors[0]}")
        if code in (pytest.ExitCode.INTERNAL_ERROR, pytest.ExitCode.USAGE_ERROR) and not collector.results:
            raise SuiteError(f"pytest failed (exit {int(code)}): {_last_line(output.getvalue())}")
        run = SuiteRun(implementation=label, impl=impl, selected_rules=rules, spec=spec)
        run.interrupted = interrupts.signum
        reason = _stop_reason(collector, max_hangs, workers, run.interrupted is not None, code, output.getvalue())
        order = collector.collected or list(collector.results)
        ordered = set(order)
        for nodeid in order:
            result = collector.results.get(nodeid)
            if result is None:
                result = TestResult(short_id(nodeid), collector.rules_of(nodeid), "not-run",
                                    f"not run: {reason}", nodeid=nodeid)
            run.results.append(result)
        run.results += [r for n, r in collector.results.items() if n not in ordered]
        if not run.complete and run.interrupted is None:
            run.stopped = reason
        return run
    finally:
        shutil.rmtree(state, ignore_errors=True)


def _stop_reason(collector: _Collector, max_hangs: int, workers: int, interrupted: bool, code: int,
                 output: str) -> str:
    """Why some collected tests have no result."""
    if interrupted:
        return "the run was interrupted"
    hangs = collector.hangs()
    if max_hangs and hangs >= max_hangs:
        return (f"the run stopped after {hangs} tests {WALL_MESSAGE} (--max-hangs {max_hangs}; 0 "
                "runs every test)")
    if workers and collector.crashes:
        return f"the run stopped after {collector.crashes} worker processes died (the implementation ends its process?)"
    if code == pytest.ExitCode.INTERNAL_ERROR:
        return (f"pytest stopped with an internal error (exit {int(code)}: {_internal_error(output)}): the "
                "implementation broke the test process?")
    return f"no result came back (pytest exit {int(code)}: {_last_line(output)})"


def _internal_error(text: str) -> str:
    """The exception line of pytest's ``INTERNALERROR>`` traceback (its last line otherwise)."""
    errors = [line.removeprefix("INTERNALERROR>").strip() for line in text.splitlines()
              if line.startswith("INTERNALERROR>")]
    named = [line for line in errors if re.match(r"^[A-Za-z_.]+(Error|Exception|Exit|Interrupt)\b", line)]
    return named[-1] if named else errors[-1] if errors and errors[-1] else _last_line(text)


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else "no output"
