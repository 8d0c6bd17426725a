"""The command line's contract: usage errors are one line (not a box), flags show no ``<bool>``,
``--impl sys:exit`` is an error, scenario/cassette mix-ups are named, and ``loopkit run`` fails
when an element of the scenario never fired (unless marked optional)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli import app

ROOT = Path(__file__).resolve().parent.parent
WINDOW1_RACE = ROOT / "cassettes" / "races" / "window1.yaml"
WINDOW1 = ROOT / "conformance" / "scenario" / "examples" / "window1.yaml"


def _loopkit(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "cli", *args], capture_output=True, text=True, timeout=120,
                          cwd=cwd or ROOT, env={**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "120"})


@pytest.mark.parametrize(("args", "says"), [
    (["conformance", "--bogus"], "error: No such option: --bogus (see 'loopkit conformance --help')"),
    (["conformance", "--schedules", "x"], "error: Invalid value for '--schedules'"),
    (["conformance", "--timeout", "nan"], "error: --timeout must be a finite number of seconds >= 0, got nan"),
    (["conformance", "--workers", "-1"], "error: --workers must be at least 0 (got -1)"),
    (["run"], "error: Missing argument 'SCENARIO'."),
    (["run", str(WINDOW1), "--timeout", "inf"], "error: --timeout must be a finite number of seconds, at least 0 (got inf)"),
    (["explore", str(WINDOW1), "--timeout", "-1"], "error: --timeout must be a finite number of seconds, at least 0 (got -1.0)"),
    (["hunt", "--timeout", "nan"], "error: --timeout must be a finite number of seconds, at least 0 (got nan)"),
    (["explore", str(WINDOW1), "--budget", "many"], "error: Invalid value for '--budget'"),
    (["bogus"], "error: No such command 'bogus'."),
    (["conformance", "--impl", "sys:exit"], "error: --impl sys:exit: building the implementation called sys.exit(None)"),
])
def test_usage_errors_are_one_line_and_exit_2(args: list[str], says: str) -> None:
    proc = _loopkit(*args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(says), proc.stderr
    assert "╭" not in proc.stderr and "Traceback" not in proc.stderr


def test_flags_are_shown_as_flags() -> None:
    result = CliRunner().invoke(app, ["conformance", "--help"], env={"COLUMNS": "200"})
    line = next(line for line in result.output.splitlines() if "--failures-only" in line)
    assert "<bool>" not in line and "BOOLEAN" not in line


@pytest.mark.parametrize(("command", "path", "says"), [
    ("replay", WINDOW1, "this is a scenario, not a race cassette: run it with `loopkit run"),
    ("run", WINDOW1_RACE, "this is a race cassette, not a scenario: replay it with `loopkit replay"),
])
def test_scenario_and_cassette_mix_ups_are_named(command: str, path: Path, says: str) -> None:
    result = CliRunner().invoke(app, [command, str(path)])
    assert result.exit_code == 2
    assert result.output.strip().startswith(f"error: {path}: {says}"), result.output


UNFIRED = """\
name: unfired
model: ["a", "b", "c"]
listeners:
  - {name: on-dispose, on: agent/status, where: {status: running, agent: a}, nth: 5, do: [{send: B}]}
  - {name: spare, on: agent/status, where: {status: running}, nth: 9, optional: true, do: [{send: B}]}
actors:
  - {name: caller, at: 0, do: [{send: A}]}
  - {name: follower, after: {event: listener, where: {name: on-dispose}}, do: [{send: C}]}
"""


def test_run_fails_when_an_element_never_fired(tmp_path: Path) -> None:
    path = tmp_path / "unfired.yaml"
    path.write_text(UNFIRED)
    result = CliRunner().invoke(app, ["run", str(path)])
    assert result.exit_code == 1, result.output
    assert "FAILED: scenario 'unfired' (fifo, seed 0): never fired: 'follower', 'on-dispose'" in result.output
    assert "note: optional element(s) never fired: 'spare'" in result.output
    path.write_text(UNFIRED.replace("nth: 5,", "nth: 5, optional: true,").replace(
        "{name: follower,", "{name: follower, optional: true,"))
    result = CliRunner().invoke(app, ["run", str(path)])
    assert result.exit_code == 0, result.output
