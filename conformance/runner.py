"""Running the suite in-process and collecting one result per test.

``run_suite`` resolves the implementation, checks that it can build a service and an agent
(a failure there is a setup error, exit 2), then runs ``pytest --pyargs conformance.tests`` with
the plugin's options and a collector plugin, isolated from the caller's pytest configuration.
"""

from __future__ import annotations

import contextlib
import io
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from . import catalogue, schedules
from .adapter import Implementation
from .harness import SetupError
from .impl import ImplError, resolve


class SuiteError(Exception):
    """A usage or setup error (the CLI prints the one-line message and exits 2)."""


@dataclass
class TestResult:
    """One test run: its short id, the rules it checks, its outcome and failure message."""

    __test__ = False  # not a pytest test class, despite its name

    id: str
    rules: list[str]
    outcome: str  # passed | failed | not-applicable | skipped
    message: str = ""


@dataclass
class SuiteRun:
    """The results of one suite run."""

    implementation: str
    impl: Implementation
    results: list[TestResult] = field(default_factory=list)
    selected_rules: list[str] = field(default_factory=list)


def short_id(nodeid: str) -> str:
    """``.../conformance/tests/test_x.py::test_y[fifo]`` -> ``test_x.py::test_y[fifo]``."""
    path, sep, rest = nodeid.partition("::")
    return f"{Path(path).name}{sep}{rest}"


def base_id(test_id: str) -> str:
    """A test id without its parametrization: ``test_x.py::test_y``."""
    return test_id.split("[", 1)[0]


def _one_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[0] if lines else "failed"


class _Collector:
    """A pytest plugin recording each test's outcome (the worst of its phases)."""

    def __init__(self) -> None:
        self.rules: dict[str, list[str]] = {}
        self.results: dict[str, TestResult] = {}
        self.order: list[str] = []
        self.collect_errors: list[str] = []

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        from .plugin import rule_ids

        for item in items:
            self.rules[item.nodeid] = rule_ids(item)

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            self.collect_errors.append(f"{report.nodeid}: {_one_line(str(report.longrepr))}")

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        nodeid = report.nodeid
        if nodeid not in self.rules:
            return
        current = self.results.get(nodeid)
        if current is None:
            current = TestResult(short_id(nodeid), self.rules[nodeid], "passed")
            self.results[nodeid] = current
            self.order.append(nodeid)
        if report.failed and current.outcome != "failed":
            current.outcome = "failed"
            current.message = _failure_message(report)
        elif report.skipped and current.outcome == "passed":
            reason = _skip_reason(report)
            current.outcome = "not-applicable" if reason.startswith("not-applicable") else "skipped"
            current.message = reason


def _failure_message(report: pytest.TestReport) -> str:
    crash = getattr(report.longrepr, "reprcrash", None)
    message = getattr(crash, "message", None) or str(report.longrepr)
    prefix = "" if report.when == "call" else f"({report.when}) "
    return prefix + _one_line(message)


def _skip_reason(report: pytest.TestReport) -> str:
    longrepr: Any = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


def preflight(impl: Implementation) -> None:
    """Build a service and an agent in a simulation: raise ``SuiteError`` if that fails."""
    import simulator

    from .scenario.engine import main_of
    from .scenario.model import AgentSpec, Scenario

    scenario = Scenario(name="preflight", agents=(AgentSpec("preflight"),), models=(), settle=False)
    result = simulator.run(main_of(scenario, impl))
    if isinstance(result.error, SetupError):
        raise SuiteError(f"setup failed: {result.error}")
    if result.error is not None:
        raise SuiteError(f"setup failed: {impl.name}: {type(result.error).__name__}: {_one_line(str(result.error))}")
    if result.outcome != "completed":
        raise SuiteError(f"setup failed: {impl.name}: building a service and an agent ended {result.outcome}")


class _Inject:
    """Hands an implementation object (rather than a ``--loopkit-impl`` string) to the plugin."""

    def __init__(self, impl: Implementation) -> None:
        self.impl = impl

    @pytest.hookimpl(trylast=True)
    def pytest_configure(self, config: pytest.Config) -> None:
        from .plugin import set_implementation

        set_implementation(config, self.impl)


def run_suite(
    impl_spec: str | Implementation | None = None,
    *,
    rules: list[str] | None = None,
    schedule_count: int = schedules.DEFAULT_SCHEDULES,
    junit: str | None = None,
    extra_args: list[str] | None = None,
    verbose: bool = False,
) -> SuiteRun:
    """Run the rule tests against ``impl_spec`` (an ``--impl`` string, or an ``Implementation``
    object such as a mutant); raise ``SuiteError`` on usage/setup errors. Can be called many
    times in one process (the self-check runs it once per mutant)."""
    rules = list(rules or [])
    unknown = catalogue.unknown_ids(rules)
    if unknown:
        raise SuiteError(f"unknown rule id(s): {', '.join(unknown)} (see `loopkit rules`)")
    if schedule_count < 0:
        raise SuiteError("--schedules must be >= 0")
    if impl_spec is None or isinstance(impl_spec, str):
        try:
            impl = resolve(impl_spec)
        except ImplError as exc:
            raise SuiteError(str(exc)) from None
        label = impl_spec or "reference"
    else:
        impl, label = impl_spec, str(getattr(impl_spec, "name", "implementation"))
    preflight(impl)

    import conformance

    package_root = Path(conformance.__file__).resolve().parent.parent
    args = [
        "--pyargs", "conformance.tests",
        "-c", os.devnull,  # isolate from the caller's pytest configuration
        "--rootdir", str(package_root),
        "-p", "no:cacheprovider",
        "--import-mode=importlib",
        "--loopkit-schedules", str(schedule_count),
        "-q",
        "--tb=native",  # one line is reported: pytest's source-annotated tracebacks cost seconds
    ]
    plugins: list[object] = [collector := _Collector()]
    if isinstance(impl_spec, str) and impl_spec:
        args += ["--loopkit-impl", impl_spec]
    elif impl_spec is not None:
        plugins.append(_Inject(impl))
    for rid in rules:
        args += ["--loopkit-rule", rid]
    if junit:
        args += ["--junitxml", junit]
    if os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD"):
        args += ["-p", "conformance.plugin"]
    args += list(extra_args or [])

    output = io.StringIO()
    with contextlib.redirect_stdout(output) if not verbose else contextlib.nullcontext():
        code = pytest.main(args, plugins=plugins)
    if collector.collect_errors:
        raise SuiteError(f"the suite could not be collected: {collector.collect_errors[0]}")
    if code in (pytest.ExitCode.INTERNAL_ERROR, pytest.ExitCode.USAGE_ERROR):
        raise SuiteError(f"pytest failed (exit {int(code)}): {_last_line(output.getvalue())}")
    run = SuiteRun(implementation=label, impl=impl, selected_rules=rules)
    run.results = [collector.results[n] for n in collector.order]
    return run


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else "no output"
