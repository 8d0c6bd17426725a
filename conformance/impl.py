"""Resolving ``--impl``: which implementation the suite (and later commands) check.

* ``None``, ``""`` or ``"reference"``: the reference loop (``conformance.reference_adapter``).
* ``"mutant:NAME"``: a buggy variant registered in ``conformance.mutants`` (looked up lazily, so
  this works as soon as that package exists: it must expose ``get(name) -> Implementation`` or a
  ``MUTANTS`` mapping).
* ``"module:attr"``: an ``Implementation`` object, or a zero-argument callable returning one.
* ``"wire:COMMAND"``: a loop in another process (any language) behind the wire protocol
  (``conformance.wire``, docs/wire-protocol.md), e.g. ``wire:node examples/js_loop/bridge.mjs``.

Every failure raises ``ImplError`` with a one-line message, for the CLI to print and exit 2.
"""

from __future__ import annotations

import importlib
from typing import Any

from . import refs
from .adapter import Implementation

REFERENCE = "conformance.reference_adapter:reference"
IMPL_HELP = ("Implementation: MODULE:ATTR (an Implementation or a factory; modules are found on sys.path and in the "
             "current directory), 'reference' (default), 'mutant:NAME', or 'wire:COMMAND' (a loop in another "
             "process, any language: docs/wire-protocol.md).")
"""The ``--impl`` help of every command that takes one."""
_REQUIRED = ("name", "features", "create_service")


class ImplError(Exception):
    """The implementation could not be resolved (message is one line)."""


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def resolve(spec: str | None = None) -> Implementation:
    """The implementation named by ``spec`` (see module docstring)."""
    if spec is not None and not spec.strip():
        raise ImplError(f"bad --impl {spec!r}: it names no implementation (expected MODULE:ATTR, 'reference', "
                        "'mutant:NAME' or 'wire:COMMAND')")
    spec = (spec or "").strip()
    if spec in ("", "reference"):
        spec = REFERENCE
    if spec.startswith("mutant:"):
        return _mutant(spec.removeprefix("mutant:"))
    if spec.startswith("wire:"):
        return _wire(spec.removeprefix("wire:"))
    if refs.split(spec) is None:
        raise ImplError(f"bad --impl {spec!r}: expected MODULE:ATTR, 'reference', 'mutant:NAME' or 'wire:COMMAND'")
    try:
        target = refs.resolve(spec)
    except refs.RefError as exc:
        raise ImplError(f"{exc} (--impl {spec})") from exc
    except SystemExit as exc:  # an import that calls sys.exit() must not end the command (exit 0)
        raise ImplError(f"--impl {spec}: importing it called sys.exit({exc.code!r})") from None
    return _check(_instantiate(target, spec), spec)


def _instantiate(target: Any, spec: str) -> Any:
    if all(hasattr(target, name) for name in _REQUIRED) and not isinstance(target, type):
        return target
    if callable(target):
        try:
            return target()
        except Exception as exc:
            raise ImplError(f"--impl {spec}: building the implementation raised {_one_line(exc)}") from exc
        except SystemExit as exc:  # ``--impl sys:exit`` exited 0 with no report: an error instead
            raise ImplError(f"--impl {spec}: building the implementation called sys.exit({exc.code!r}) "
                            "(not an Implementation or a factory of one)") from None
    return target


def _check(impl: Any, spec: str) -> Implementation:
    missing = [name for name in _REQUIRED if not hasattr(impl, name)]
    if missing:
        raise ImplError(
            f"--impl {spec} is not a conformance Implementation (missing {', '.join(missing)}); "
            "see docs/conformance.md"
        )
    features = impl.features
    if isinstance(features, (str, bytes)) or not _strings(features):
        raise ImplError(f"--impl {spec}: features must be a set of feature names (strings), got {features!r:.80}; "
                        "see docs/conformance.md")
    checked: Implementation = impl
    return checked


def _strings(value: Any) -> bool:
    """Whether ``value`` is an iterable of strings (without raising)."""
    try:
        return all(isinstance(item, str) for item in value)
    except Exception:
        return False


def _mutant(name: str) -> Implementation:
    try:
        mutants = importlib.import_module("conformance.mutants")
    except ModuleNotFoundError as exc:
        if exc.name != "conformance.mutants":
            raise ImplError(f"cannot load mutants: {_one_line(exc)}") from exc
        raise ImplError(f"unknown mutant {name!r}: no mutants are installed") from None
    getter = getattr(mutants, "get", None)
    try:
        if callable(getter):
            impl = getter(name)
        else:
            impl = dict(getattr(mutants, "MUTANTS", {}))[name]
    except KeyError:
        names = ", ".join(sorted(getattr(mutants, "MUTANTS", {}))) or "none"
        raise ImplError(f"unknown mutant {name!r} (known: {names})") from None
    return _check(_instantiate(impl, f"mutant:{name}"), f"mutant:{name}")


def _wire(command: str) -> Implementation:
    if not command.strip():
        raise ImplError("bad --impl 'wire:': missing COMMAND (e.g. --impl \"wire:node examples/js_loop/bridge.mjs\")")
    from .wire import WireError, implementation

    try:
        return implementation(command)
    except (WireError, ValueError) as exc:
        raise ImplError(f"--impl wire:{command}: {_one_line(exc).removeprefix(type(exc).__name__ + ': ')}") from None


def describe(spec: str | None) -> str:
    """The name a report uses for ``spec`` (``reference`` by default)."""
    return (spec or "").strip() or "reference"
