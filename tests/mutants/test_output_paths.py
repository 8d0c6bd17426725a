"""Report paths are checked before running: a typo in ``--json``/``--junit`` must not cost a
whole self-check (minutes) or suite run before the error.

``loopkit conformance``'s other CLI tests live in ``tests/conformance_meta``; its report-path
check shares ``output_path_error`` with ``loopkit selfcheck`` and is tested here with it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli import app
from conformance import runner, selfcheck
from conformance.commands import output_path_error


def _never(*_args: object, **_kwargs: object) -> object:
    raise AssertionError("ran although the report path is unwritable")


def _one_line_error(code: int, output: str, fragment: str) -> None:
    assert code == 2, output
    lines = [line for line in output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and fragment in lines[0], output


@pytest.fixture
def bad(tmp_path: Path) -> str:
    return str(tmp_path / "no-such-dir" / "x.json")


def test_selfcheck_rejects_a_missing_directory_before_running(monkeypatch: pytest.MonkeyPatch, bad: str) -> None:
    monkeypatch.setattr(selfcheck, "run_selfcheck", _never)
    result = CliRunner().invoke(app, ["selfcheck", "--json", bad])
    _one_line_error(result.exit_code, result.output, "no such directory")


@pytest.mark.parametrize("option", ["--json", "--junit"])
def test_conformance_rejects_a_missing_directory_before_running(
    monkeypatch: pytest.MonkeyPatch, bad: str, option: str
) -> None:
    monkeypatch.setattr(runner, "run_suite", _never)
    result = CliRunner().invoke(app, ["conformance", option, bad])
    _one_line_error(result.exit_code, result.output, f"({option}): no such directory")


def test_output_path_error(tmp_path: Path) -> None:
    assert output_path_error("--json", str(tmp_path / "r.json")) is None
    assert output_path_error("--json", "relative.json") is None  # the current directory
    assert "is a directory" in (output_path_error("--json", str(tmp_path)) or "")
    assert "no such directory" in (output_path_error("--json", str(tmp_path / "a" / "b.json")) or "")


def test_a_dash_is_stdout_only_where_the_option_takes_it() -> None:
    assert output_path_error("--json", "-", stdout=True) is None
    # elsewhere ``-`` is refused: a file named ``-`` is not what anyone writing it means (it
    # was written as one until session 58's probe); ``./-`` still names that file
    assert "writes a file, not standard output" in (output_path_error("--trace", "-") or "")
    assert output_path_error("--trace", "./-") is None


def test_conformance_refuses_two_reports_on_stdout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runner, "run_suite", _never)
    result = CliRunner().invoke(app, ["conformance", "--json", "-", "--junit", "-"])
    _one_line_error(result.exit_code, result.output, "cannot both write to stdout")


def test_atomic_write_to_a_dash_writes_stdout(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from conformance.files import atomic_write

    monkeypatch.chdir(tmp_path)
    atomic_write("-", '{"ok": true}\n')
    assert capsys.readouterr().out == '{"ok": true}\n'
    assert not (tmp_path / "-").exists()


@pytest.mark.parametrize("option", ["--json", "--junit"])
def test_conformance_report_on_stdout_alone(tmp_path: Path, option: str) -> None:
    """``--json -``: stdout carries the report and nothing else (the table goes to stderr), so
    it can be piped; no file named ``-`` is made."""
    import json
    import os
    import subprocess
    import sys
    import xml.etree.ElementTree as ET

    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root)}
    done = subprocess.run([sys.executable, "-m", "cli", "conformance", "--rule", "TOOL-1", option, "-", "--workers", "0"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    if option == "--json":
        assert [(r["id"], r["status"]) for r in json.loads(done.stdout)["rules"]] == [("TOOL-1", "passed")]
    else:
        assert ET.fromstring(done.stdout).tag == "testsuites"
    assert "TOOL-1" in done.stderr and "passed 1" in done.stderr  # the table, on stderr
    assert not (tmp_path / "-").exists()
