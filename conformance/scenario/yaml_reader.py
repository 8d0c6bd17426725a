"""Reading YAML with line numbers, for validation errors that name the line and the field.

``parse(text, origin)`` composes the document (PyYAML's node tree keeps each node's position)
and returns a :class:`Node`; accessors raise :class:`ScenarioError` as
``"<origin>:<line>: <field path>: <problem>"`` (one line).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import yaml
from yaml.constructor import SafeConstructor

from .model import ScenarioError

_PLAIN = (str, int, float, bool, type(None))
_EXPONENT = re.compile(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)[eE][-+]?[0-9]+")
_TIMESTAMP = "tag:yaml.org,2002:timestamp"


def _scalar(node: yaml.ScalarNode) -> Any:
    """A scalar's value, or ``ValueError`` saying why it is none a scenario takes: JSON's plain
    values only (``!!binary`` bytes, an application tag, a number past Python's digit limit are
    refused), a date or time read as the text it is written as (YAML 1.1 would make it a
    ``datetime``, which no JSON field can hold)."""
    if node.tag == _TIMESTAMP:
        return node.value
    try:
        # A fresh constructor per scalar: SafeConstructor keeps per-document state.
        value = SafeConstructor().construct_object(node, deep=True)
    except yaml.YAMLError:
        raise ValueError(f"unsupported YAML tag {node.tag!r}") from None
    except ValueError as exc:  # an int past sys.get_int_max_str_digits()
        first = str(exc).strip().splitlines()
        raise ValueError(f"unreadable value ({first[0] if first else type(exc).__name__})") from None
    if not isinstance(value, _PLAIN):
        raise ValueError(f"{type(value).__name__} (YAML tag {node.tag!r}) is not a value a scenario takes")
    return value


@dataclass(frozen=True)
class Node:
    """A YAML node with its field path and file position."""

    node: yaml.Node
    path: str
    origin: str
    line_offset: int = 0

    # ---------------------------------------------------------------- position and errors

    @property
    def line(self) -> int:
        """The 1-based line of the node in the file."""
        return self.node.start_mark.line + 1 + self.line_offset

    def error(self, message: str) -> ScenarioError:
        """A one-line error naming the file, line and field."""
        where = f"{self.path}: " if self.path else ""
        return ScenarioError(f"{self.origin}:{self.line}: {where}{message}")

    def _child(self, node: yaml.Node, part: str | int) -> Node:
        if isinstance(part, int):
            path = f"{self.path}[{part}]"
        else:
            path = f"{self.path}.{part}" if self.path else part
        return Node(node, path, self.origin, self.line_offset)

    # ---------------------------------------------------------------- shape

    @property
    def kind(self) -> str:
        if isinstance(self.node, yaml.MappingNode):
            return "a mapping"
        if isinstance(self.node, yaml.SequenceNode):
            return "a list"
        value = self.value()
        if value is None:
            return "nothing (null)"
        return {bool: "a boolean", int: "a number", float: "a number", str: "a string"}.get(
            type(value), type(value).__name__
        )

    def is_map(self) -> bool:
        return isinstance(self.node, yaml.MappingNode)

    def is_list(self) -> bool:
        return isinstance(self.node, yaml.SequenceNode)

    def is_scalar(self) -> bool:
        return isinstance(self.node, yaml.ScalarNode)

    def value(self) -> Any:
        """The plain Python value (scalars; mappings and lists converted recursively)."""
        if isinstance(self.node, yaml.ScalarNode):
            try:
                return _scalar(self.node)
            except ValueError as exc:
                raise self.error(str(exc)) from None
        if self.is_list():
            return [item.value() for item in self.items()]
        return {k: v.value() for k, v in self.entries()}

    # ---------------------------------------------------------------- mappings

    def entries(self) -> list[tuple[str, Node]]:
        """The (key, value) pairs of a mapping, rejecting duplicate and non-string keys."""
        if not self.is_map():
            raise self.error(f"expected a mapping, got {self.kind}")
        out: list[tuple[str, Node]] = []
        seen: set[str] = set()
        assert isinstance(self.node, yaml.MappingNode)
        for key_node, value_node in self.node.value:
            # Field names are taken as written: YAML 1.1 would read ``on:`` as the boolean true.
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else None
            if not isinstance(key, str):
                raise Node(key_node, self.path, self.origin, self.line_offset).error(
                    f"keys must be strings, got {Node(key_node, '', '').kind}")
            if key in seen:
                raise self._child(key_node, key).error("duplicate field")
            seen.add(key)
            out.append((key, self._child(value_node, key)))
        return out

    def keys(self, allowed: tuple[str, ...], required: tuple[str, ...] = ()) -> dict[str, Node]:
        """The mapping's fields, checked against ``allowed`` and ``required``."""
        found = dict(self.entries())
        for key, child in found.items():
            if key not in allowed:
                raise child.error(f"unknown field (expected one of: {', '.join(allowed)})")
        for key in required:
            if key not in found:
                raise self.error(f"missing required field {key!r}")
        return found

    # ---------------------------------------------------------------- lists

    def items(self) -> list[Node]:
        if not self.is_list():
            raise self.error(f"expected a list, got {self.kind}")
        assert isinstance(self.node, yaml.SequenceNode)
        return [self._child(n, i) for i, n in enumerate(self.node.value)]

    def __iter__(self) -> Iterator[Node]:
        return iter(self.items())

    # ---------------------------------------------------------------- typed scalars

    def string(self) -> str:
        value = self.value() if self.is_scalar() else None
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise self.error(f"expected a string, got {self.kind}")
        return str(value)

    def text(self) -> str:
        """A prompt's text: a string only (``send: 5`` or ``send: -1e9`` is a typo until quoted)."""
        value = self.value() if self.is_scalar() else None
        if not isinstance(value, str):
            got = f"the number {value!r}" if isinstance(value, int | float) and not isinstance(value, bool) else self.kind
            raise self.error(f"expected text (a string; quote it if it is a number), got {got}")
        return value

    def number(self, *, minimum: float | None = 0.0) -> float:
        value = self.value() if self.is_scalar() else None
        if isinstance(value, str) and not getattr(self.node, "style", None) and _EXPONENT.fullmatch(value):
            value = float(value)  # 1e3: YAML 1.2's number, which YAML 1.1 reads as text
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.error(f"expected a number, got {self.kind}")
        if minimum is not None and value < minimum:
            raise self.error(f"must be >= {minimum:g}, got {value}")
        return float(value)

    def integer(self, *, minimum: int | None = 0) -> int:
        value = self.value() if self.is_scalar() else None
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.error(f"expected an integer, got {self.kind}")
        if minimum is not None and value < minimum:
            raise self.error(f"must be >= {minimum}, got {value}")
        return value

    def boolean(self) -> bool:
        value = self.value() if self.is_scalar() else None
        if not isinstance(value, bool):
            raise self.error(f"expected true or false, got {self.kind}")
        return value

    def choice(self, options: tuple[str, ...]) -> str:
        value = self.string()
        if value not in options:
            raise self.error(f"expected one of {', '.join(options)}, got {value!r}")
        return value

    def scalars(self) -> dict[str, Any]:
        """A mapping of scalar values (a ``where`` filter)."""
        out: dict[str, Any] = {}
        for key, child in self.entries():
            if not child.is_scalar():
                raise child.error(f"expected a plain value, got {child.kind}")
            out[key] = child.value()
        return out


MAX_DEPTH = 64
"""Nesting levels a document may have: no scenario or cassette needs more, and deeper input
(``[[[[...`` 500 levels) would exhaust the recursion of the YAML composer and of every reader."""


MAX_NODES = 1_000_000
"""Values a document may hold once its aliases are expanded: a recorded cassette of a long run
has tens of thousands; ten nested aliases of ten (a "billion laughs", 553 bytes) have 10^10,
and every reader would walk them all."""


def _too_big(root: yaml.Node) -> tuple[yaml.Node, str] | None:
    """The first node nested deeper than :data:`MAX_DEPTH`, or the root when the document,
    its aliases expanded, holds more than :data:`MAX_NODES` values (with what is wrong), or
    None. Each node is visited once (an alias reuses its anchor's node), so the walk is
    linear in the text however the aliases multiply."""
    height: dict[int, int] = {}  # id(node) -> levels below it, itself included
    size: dict[int, int] = {}  # id(node) -> values in its expansion
    # (node, depth, its children once they are pushed: the node is then summed up)
    stack: list[tuple[yaml.Node, int, list[yaml.Node] | None]] = [(root, 1, None)]
    while stack:
        node, depth, children = stack.pop()
        key = id(node)
        if children is not None:
            height[key] = 1 + max((height[id(c)] for c in children), default=0)
            size[key] = 1 + sum(size[id(c)] for c in children)
            if size[key] > MAX_NODES:
                return root, f"holds more than {MAX_NODES:,} values once its aliases are expanded"
            continue
        if depth + height.get(key, 1) - 1 > MAX_DEPTH:  # an alias seen before: its deepest level
            return node, f"nested deeper than {MAX_DEPTH} levels"
        if key in height:
            continue
        below = (node.value if isinstance(node, yaml.SequenceNode)
                 else [c for pair in node.value for c in pair] if isinstance(node, yaml.MappingNode) else [])
        stack.append((node, depth, below))
        stack.extend((child, depth + 1, None) for child in below)
    return None


def _flow_too_deep(text: str) -> int | None:
    """The 0-based line where ``[``/``{`` flow collections nest deeper than :data:`MAX_DEPTH`, by
    one scan of the text (quoted strings and comments skipped): the composer would otherwise
    spend seconds recursing into ``[[[[...`` before failing."""
    depth = line = 0
    quote = ""
    comment = False
    previous = "\n"
    for char in text:
        if char == "\n":
            line += 1
            comment = False
            if quote == "'":  # single-quoted scalars may span lines; plain ones end here
                pass
        elif comment:
            pass
        elif quote:
            if char == quote:
                quote = ""
        elif char in "\"'" and previous in " \t\n[{,:":
            quote = char
        elif char == "#" and previous in " \t\n":
            comment = True
        elif char in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                return line
        elif char in "]}" and depth:
            depth -= 1
        previous = char
    return None


_LOADER: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""libyaml's composer when present (the same nodes and marks, several times faster)."""


def parse(text: str, origin: str, *, line_offset: int = 0) -> Node:
    """Compose ``text`` into a :class:`Node` (syntax errors become a one-line ``ScenarioError``)."""
    deep_line = _flow_too_deep(text)
    if deep_line is not None:
        raise ScenarioError(f"{origin}:{deep_line + 1 + line_offset}: nested deeper than {MAX_DEPTH} levels")
    try:
        node = yaml.compose(text, Loader=_LOADER)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = (mark.line + 1 + line_offset) if mark is not None else "?"
        raise ScenarioError(f"{origin}:{line}: YAML syntax error: {exc.problem or exc.context}") from None
    except yaml.YAMLError as exc:
        raise ScenarioError(f"{origin}: YAML error: {str(exc).splitlines()[0]}") from None
    except RecursionError:
        raise ScenarioError(f"{origin}: nested too deeply (more than {MAX_DEPTH} levels)") from None
    if node is None:
        raise ScenarioError(f"{origin}:1: the file is empty")
    found = _too_big(node)
    if found is not None:
        where, what = found
        raise ScenarioError(f"{origin}:{where.start_mark.line + 1 + line_offset}: {what}")
    return Node(node, "", origin, line_offset)


SCENARIO_KEYS = frozenset({"model", "models", "agents", "tools", "sections", "listeners", "actors", "checks",
                           "limits"})
"""Top-level keys only a scenario has."""


def document_kind(root: Node) -> str | None:
    """What a YAML document looks like, to name a mix-up rather than a field: ``"scenario"``,
    ``"race"`` (a race cassette), ``"llm"`` (a recorded LLM cassette), or ``None``."""
    if not root.is_map():
        return None
    keys = {key for key, _ in root.entries()}
    if "format" in keys:
        value = dict(root.entries())["format"].node
        if isinstance(value, yaml.ScalarNode) and str(value.value).startswith("loopkit-race"):
            return "race"
    if "interactions" in keys:
        return "llm"
    if keys & SCENARIO_KEYS and "format" not in keys:
        return "scenario"
    return None


def mixed_up(root: Node, wanted: str, path: str) -> ScenarioError | None:
    """A one-line error when ``root`` is a document of another kind than ``wanted``."""
    kind = document_kind(root)
    if kind is None or kind == wanted:
        return None
    hint = {
        "scenario": f"a scenario, not a race cassette: run it with `loopkit run {path}`, search it with "
                    f"`loopkit explore {path}`",
        "race": f"a race cassette, not a scenario: replay it with `loopkit replay {path}`",
        "llm": f"an LLM cassette, not a {'scenario' if wanted == 'scenario' else 'race cassette'}: read it "
               f"with `loopkit cassette show {path}`",
    }[kind]
    return ScenarioError(f"{root.origin}: this is {hint}")
