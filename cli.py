"""The ``loopkit`` command line (typer).

Each part of the kit contributes its subcommands from a ``commands`` module of its own package
(``register(app)``), so this file stays an index: it wires them together and handles the global
``--version`` flag.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _dist_version

import typer

app = typer.Typer(
    name="loopkit",
    help="Deterministic simulation and conformance test kit for LLM agent loops.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def kit_version() -> str:
    """The installed distribution's version (``0+unknown`` when run from a bare checkout)."""
    try:
        return _dist_version("loopkit")
    except PackageNotFoundError:
        return "0+unknown"


def _version_callback(value: bool) -> None:
    if value:
        typer.echo(f"loopkit {kit_version()}")
        raise typer.Exit()


@app.callback()
def main(
    version: bool = typer.Option(
        False, "--version", help="Print the version and exit.", callback=_version_callback, is_eager=True
    ),
) -> None:
    """Deterministic simulation and conformance test kit for LLM agent loops."""


def _register_subcommands() -> None:
    # Each package owns its commands; the import order fixes the order in --help.
    from importlib import import_module

    for module_name in (
        "conformance.commands",
        "conformance.scenario.commands",
        "conformance.hunt.commands",
        "conformance.mutants.commands",
        "cassettes.commands",
    ):
        try:
            module = import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name != module_name:
                raise
            continue
        module.register(app)


_register_subcommands()

if __name__ == "__main__":
    app()
