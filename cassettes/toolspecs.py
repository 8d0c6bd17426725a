"""A ``--tools`` file: the tool schemas a recorded request sends, in the spec's 0b shape.

Each entry is ``{"name": s, "description": s, "input_schema": {...}}`` (spec 0b, SVC-5). It is
checked when read, so a wrong shape is a one-line error naming the file and the entry, not a
``KeyError`` from deep inside an adapter once the recording has started.
"""

from __future__ import annotations

import json
import os
from typing import Any

from reference_loop.protocols import ToolSchema

from .inputs import read_text

ENTRY_FIELDS: tuple[tuple[str, type, str], ...] = (
    ("name", str, "a non-empty string"),
    ("description", str, "a string"),
    ("input_schema", dict, "a JSON Schema object"),
)
"""Each field of a tools entry, its JSON type and what the error says it must be."""


def load_tools(path: str | os.PathLike[str]) -> list[ToolSchema]:
    """The tools list in the JSON file ``path``. An unreadable file raises ``OSError``, a wrong
    shape ``ValueError``; either message is one line (the caller names the file)."""
    try:
        data = json.loads(read_text(path), parse_constant=_refuse_constant)
    except RecursionError:
        raise ValueError("not JSON: nested too deeply") from None
    if not isinstance(data, list):
        raise ValueError(f"not a list of tools but {_json_type(data)} (each entry is "
                         "{\"name\", \"description\", \"input_schema\"})")
    for n, entry in enumerate(data, 1):
        problem = tool_problem(entry)
        if problem is not None:
            raise ValueError(f"tool {n}{_label(entry)}: {problem}")
    return data


def tool_problem(entry: Any) -> str | None:
    """What is wrong with one tools entry (``None``: it has the 0b shape; more keys are allowed)."""
    if not isinstance(entry, dict):
        return f"{_json_type(entry)}, not an object"
    for key, kind, expected in ENTRY_FIELDS:
        if key not in entry:
            return f"no {key!r}"
        value = entry[key]
        if not isinstance(value, kind) or (value == "" and key == "name"):
            return f"{key!r} is {_json_type(value)}, expected {expected}"
    return None


def _label(entry: Any) -> str:
    """`` ('get_weather')`` when the entry has a usable name, to find it in the file."""
    name = entry.get("name") if isinstance(entry, dict) else None
    return f" ({name!r})" if isinstance(name, str) and name else ""


_JSON_TYPES = {bool: "a boolean", int: "a number", float: "a number", list: "a list", dict: "an object"}


def _json_type(value: Any) -> str:
    """What a JSON value is, in JSON's words (the user wrote JSON, not Python)."""
    if isinstance(value, str):
        return f"the string {value[:40]!r}"
    return "null" if value is None else _JSON_TYPES.get(type(value), type(value).__name__)


def _refuse_constant(name: str) -> Any:
    # NaN and Infinity: Python's json reads them, but no JSON API takes them in a schema
    raise ValueError(f"not JSON: {name}")


__all__ = ["ENTRY_FIELDS", "load_tools", "tool_problem"]
