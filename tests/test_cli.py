"""The ``loopkit`` entry point itself."""

from __future__ import annotations

from typer.testing import CliRunner

from cli import app, kit_version


def test_version() -> None:
    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.output.strip() == f"loopkit {kit_version()}"


def test_help_lists_the_tool() -> None:
    result = CliRunner().invoke(app, ["--help"])
    assert result.exit_code == 0
    assert "agent loops" in result.output
