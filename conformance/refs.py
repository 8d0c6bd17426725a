"""``MODULE:ATTR`` references: how ``--impl`` and Python scenarios name an object.

Modules are looked up on ``sys.path`` and, failing that, in the current directory (as pytest
does for its rootdir), so ``--impl mypkg.adapter:impl`` works from a project's root without
``PYTHONPATH=.``.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any


class RefError(LookupError):
    """A reference cannot be resolved (the message is one line)."""


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def split(ref: str) -> tuple[str, str] | None:
    """``("module", "attr.path")`` of ``"module:attr.path"``, or ``None`` when it is not one."""
    module_name, sep, attr = ref.strip().partition(":")
    if not sep or not module_name or not attr:
        return None
    return module_name, attr


def _import(module_name: str) -> Any:
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        cwd = os.getcwd()
        top = module_name.split(".")[0]
        if exc.name != top or cwd in sys.path or "" in sys.path:
            raise
        sys.path.insert(0, cwd)  # the project's root, as pytest's rootdir
        try:
            return importlib.import_module(module_name)
        except ModuleNotFoundError as again:
            if again.name == top:
                sys.path.remove(cwd)
                raise ModuleNotFoundError(
                    f"No module named {top!r} (looked on sys.path and in {cwd}; run from the "
                    "directory that holds it, or add it to PYTHONPATH)", name=top) from None
            raise


def resolve(ref: str) -> Any:
    """The object ``ref`` (``MODULE:ATTR``, ``ATTR`` possibly dotted) names."""
    parts = split(ref)
    if parts is None:
        raise RefError(f"{ref!r} is not a MODULE:ATTR reference")
    module_name, attr = parts
    if module_name.startswith("."):  # importlib's word for it is "the 'package' argument is required"
        raise RefError(f"{ref!r}: a relative module name has no package to be relative to; give the module's "
                       "full dotted name (mypkg.adapter:implementation)")
    try:
        target: Any = _import(module_name)
    except Exception as exc:
        raise RefError(f"cannot import {module_name!r}: {_one_line(exc)}") from exc
    for part in attr.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise RefError(f"module {module_name!r} has no attribute {attr!r}") from None
    return target
