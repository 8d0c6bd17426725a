"""The ``loopkit`` command line (typer).

Each part of the kit contributes its subcommands from a ``commands`` module of its own package
(``register(app)``), so this file stays an index: it wires them together and handles the global
``--version`` flag.
"""

from __future__ import annotations

import sys
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _dist_version
from typing import Any

import typer
from typer.core import TyperGroup, TyperOption

try:  # recent typer carries its own copy of click, whose exceptions are not the click package's
    from typer._click import exceptions as click_errors
except ImportError:  # pragma: no cover - older typer, on the click package
    from click import exceptions as click_errors  # type: ignore[no-redef]


class OneLineErrors(TyperGroup):
    """The command group, with usage errors as one line on stderr instead of a box.

    ``loopkit conformance --bogus`` prints ``error: No such option: --bogus (see 'loopkit
    conformance --help')`` and exits 2, like every other input error of the kit (typer's rich
    error panel is several lines, and ``rich_markup_mode=None`` only makes it click's three-line
    usage text). A Ctrl-C that reaches here is exit 130 with one line."""

    def main(self, *args: Any, standalone_mode: bool = True, **extra: Any) -> Any:
        try:
            # The program is loopkit, whether started as ``loopkit`` or ``python -m cli``.
            rv = super().main(*args, **{"prog_name": "loopkit", **extra, "standalone_mode": False})
        except click_errors.NoArgsIsHelpError as exc:  # bare ``loopkit``: the help, as usual
            typer.echo(exc.ctx.get_help() if exc.ctx is not None else "", nl=False)
            rv = exc.exit_code
        except click_errors.UsageError as exc:
            where = exc.ctx.command_path if exc.ctx is not None else "loopkit"
            message = " ".join(exc.format_message().split())
            typer.echo(f"error: {message} (see '{where} --help')", err=True)
            rv = exc.exit_code
        except click_errors.ClickException as exc:
            typer.echo(f"error: {' '.join(exc.format_message().split())}", err=True)
            rv = exc.exit_code
        except typer.Abort:
            typer.echo("interrupted", err=True)
            rv = 130
        if not standalone_mode:
            return rv
        sys.exit(rv if isinstance(rv, int) else 0)


# Flags are flags: typer (with click >= 8.2) shows a ``<bool>`` type after every boolean option
# (``--failures-only <bool>``), as if it took a value.
_display_type_rich = TyperOption.display_type_rich


def _flag_type(self: TyperOption, ctx: Any) -> str | None:
    return None if self.is_flag else _display_type_rich(self, ctx)


TyperOption.display_type_rich = _flag_type  # type: ignore[method-assign]

app = typer.Typer(
    name="loopkit",
    help="Deterministic simulation and conformance test kit for LLM agent loops.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    cls=OneLineErrors,
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


def run() -> None:
    """The ``loopkit`` program: the app, then an exit that nothing the implementation under test
    left in this process can change.

    An implementation runs in the command's process (``run``, ``explore``, ``replay``, the suite
    on ``--workers 0``) and may leave exit-time code there: an ``atexit`` handler or a
    ``weakref.finalize`` calling ``os._exit(0)`` turned a failing check into exit 0, one that
    spins hung the process after its report, one that prints wrote after a ``--json`` document.
    Once the command has its exit code and its output is flushed, the kit's own exit-time work
    (closing wire children) is done here and the process ends at once, running none of it."""
    code: int = 0
    try:
        app()
    except SystemExit as exc:
        if isinstance(exc.code, int):
            code = exc.code
        elif exc.code is not None:  # sys.exit("text"): Python prints it and exits 1
            sys.stderr.write(f"{exc.code}\n")
            code = 1
    from conformance.output import close_wire_children
    from simulator.supervise import real_exit  # the real os._exit: the simulator guards it

    close_wire_children()
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):  # a reader that went away, a stream closed: nothing more to say
            pass
    real_exit(code)


if __name__ == "__main__":
    run()
