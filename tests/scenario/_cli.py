"""A typer app with the scenario commands registered (cli.py registers them for real)."""

from __future__ import annotations

import typer
from typer.testing import CliRunner, Result

from conformance.scenario.commands import register

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
register(app)


def invoke(*args: str) -> Result:
    """Run ``loopkit ARGS`` in-process."""
    return CliRunner().invoke(app, list(args))
