"""``loopkit conformance``: exit codes and one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli import app

HERE = Path(__file__).resolve().parent


@pytest.fixture(autouse=True)
def _importable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(HERE))


def _invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["conformance", *args])
    return result.exit_code, result.output


def _assert_one_line_error(code: int, output: str, fragment: str) -> None:
    assert code == 2, output
    lines = [line for line in output.splitlines() if line.strip()]
    assert len(lines) == 1, f"expected one line, got: {output!r}"
    assert lines[0].startswith("error: ") and fragment in lines[0], lines[0]
    assert "Traceback" not in output


@pytest.mark.parametrize(
    ("impl", "fragment"),
    [
        ("no_such_module_xyz:thing", "cannot import 'no_such_module_xyz'"),
        (".adapter:implementation", "a relative module name has no package to be relative to"),
        ("broken_adapters:missing", "has no attribute 'missing'"),
        ("broken_adapters", "expected MODULE:ATTR"),
        ("broken_adapters:not_an_implementation", "is not a conformance Implementation"),
        # a bare number ended in "pytest failed (exit 3): no tests ran", or passed with --rule LOOP-1
        ("broken_adapters:features_not_names", "features must be a set of feature names (strings), got 7"),
        ("broken_adapters:factory_that_raises", "factory exploded"),
        ("broken_adapters:raises_on_create", "cannot build agents today"),
        ("broken_adapters:no_agent_on_create", "create('preflight') returned None, not an agent"),
        ("mutant:no-such-mutant", "no-such-mutant"),
        ("", "it names no implementation"),  # ran the reference (session 58's probe)
        (" ", "it names no implementation"),
    ],
)
def test_bad_impl_is_a_one_line_error(impl: str, fragment: str) -> None:
    _assert_one_line_error(*_invoke("--impl", impl), fragment)


def test_unknown_rule_is_a_one_line_error() -> None:
    _assert_one_line_error(*_invoke("--rule", "LOOP-2", "--rule", "NOPE-1"), "NOPE-1")


def test_bad_baseline_is_a_one_line_error(tmp_path: Path) -> None:
    _assert_one_line_error(*_invoke("--baseline", str(tmp_path / "missing.txt")), "cannot read baseline")
    bad = tmp_path / "bad.txt"
    bad.write_text("LOOP-2\nWHAT-9\n")
    _assert_one_line_error(*_invoke("--baseline", str(bad)), "bad.txt:2")


def test_negative_schedules_is_a_usage_error() -> None:
    _assert_one_line_error(*_invoke("--schedules", "-1"), "--schedules")


def test_two_reports_on_one_path_are_refused_before_the_run(tmp_path: Path) -> None:
    same = str(tmp_path / "report.x")
    _assert_one_line_error(*_invoke("--json", same, "--junit", same), "are the same file: each needs its own")
    baseline = tmp_path / "baseline.txt"
    baseline.write_text("LOOP-2\n")
    _assert_one_line_error(*_invoke("--baseline", str(baseline), "--json", str(baseline)),
                           "is the baseline (--baseline): writing there would replace it")
    assert baseline.read_text() == "LOOP-2\n"


@pytest.mark.parametrize(("args", "fragment"), [
    # each used to run: 10^23 schedules filled the memory, 10^11 actions deep spun, 100,000
    # workers forked, and the hunt's options were ignored without --hunt (session 58's probe)
    (["--schedules", "100000000000000000000000"], "--schedules must be between 0 and 10,000"),
    (["--workers", "100000"], "--workers 100000 is more processes than this machine can use"),
    (["--hunt", "--hunt-depth", "100000000000"], "--hunt-depth 100000000000 with 17 actions makes more action sequences"),
    (["--hunt", "--hunt-workloads", ","], "--hunt-workloads ',' names no workload"),
    (["--hunt-depth", "3"], "--hunt-out, --hunt-workloads and --hunt-depth need --hunt"),
    (["--timeout", "0.0001"], "--timeout 0.0001 is shorter than the suite's own work around a test"),
])
def test_an_option_value_past_its_bounds_is_refused_before_the_run(args: list[str], fragment: str) -> None:
    _assert_one_line_error(*_invoke(*args), fragment)


def _cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    # A separate process: the suite runs pytest in-process, which must not nest in this session.
    return subprocess.run(
        [sys.executable, "-m", "cli", "conformance", *args],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
        env={**__import__("os").environ, "PYTHONPATH": str(HERE)},
    )


def test_selected_rules_pass_on_reference_and_write_reports(tmp_path: Path) -> None:
    report, junit = tmp_path / "r.json", tmp_path / "j.xml"
    proc = _cli(tmp_path, "--rule", "LOOP-2", "--rule", "ASM-1", "--schedules", "1",
                "--json", str(report), "--junit", str(junit))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(report.read_text())
    assert [(r["id"], r["status"]) for r in data["rules"]] == [("LOOP-2", "passed"), ("ASM-1", "passed")]
    assert data["rules"][0]["tests"] == [
        *(f"test_loop.py::test_burst_is_one_turn[{schedule}]" for schedule in ("fifo", "random-0", "pct-0")),
        *(f"test_loop.py::test_late_steering_joins_the_queue_behind_a_prompt_sent_before_it[{schedule}-{late}]"
          for schedule in ("fifo", "random-0", "pct-0") for late in ("agent/turn-end", "session/flush")),
        *(f"test_loop.py::test_burst_during_a_turn_is_the_next_turn[{schedule}]"
          for schedule in ("fifo", "random-0", "pct-0")),
        *(f"test_loop.py::test_a_prompt_sent_while_a_turn_logs_its_prompts_waits_for_the_next_turn[{schedule}-{b}]"
          for schedule in ("fifo", "random-0", "pct-0") for b in ("turn/start", "user/message")),
    ]
    assert data["summary"] == {"passed": 2, "failed": 0, "not_applicable": 0, "not_checked": 0, "expected": 0}
    assert data["complete"] is True and data["interrupted"] is False
    assert "<testsuite" in junit.read_text()


def test_failing_rule_exits_1_and_baseline_and_stale(tmp_path: Path) -> None:
    # In the command's process (--workers 0): what is checked is the exit codes and the baseline.
    tiny = "examples.tiny_loop.adapter:implementation"
    proc = _cli(tmp_path, "--impl", tiny, "--rule", "MAXTOK-1", "--rule", "DISP-3", "--schedules", "0", "--workers", "0")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "MAXTOK-1" in proc.stdout
    baseline = tmp_path / "baseline.txt"
    baseline.write_text("MAXTOK-1  # tiny_loop has no max-tokens reason\n")
    proc = _cli(tmp_path, "--impl", tiny, "--rule", "MAXTOK-1", "--rule", "DISP-3", "--schedules", "0", "--workers", "0",
                "--baseline", str(baseline))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    baseline.write_text("MAXTOK-1\nDISP-3\n")
    proc = _cli(tmp_path, "--impl", tiny, "--rule", "MAXTOK-1", "--rule", "DISP-3", "--schedules", "0", "--workers", "0",
                "--baseline", str(baseline))
    assert proc.returncode == 1 and "stale" in proc.stdout
