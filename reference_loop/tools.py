"""The tool registry and the default ``tools/execute`` handler (spec section 5).

The loop runs each call through the ``tools/execute`` waterfall; its default (the chain's end)
dispatches to the registered tool by name. Whatever fails along the way (the tool, an unknown
name, a listener) becomes an error result, never a crash (TOOL-3).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from . import vocabulary as v
from .protocols import Tool, ToolContext, ToolSchema


class UnknownToolError(LookupError):
    """The model called a tool nobody registered (code ``UNKNOWN_TOOL``)."""

    code = "UNKNOWN_TOOL"


class ToolRegistry:
    """Registered tools by name, in registration order."""

    def __init__(self) -> None:
        self._tools: dict[str, Tool] = {}

    def register(self, tool: Tool) -> Callable[[], None]:
        """Register ``tool`` under its name (a later registration replaces an earlier one)."""
        for attr in ("name", "description", "input_schema", "execute"):
            if not hasattr(tool, attr):
                raise TypeError(f"tool {tool!r} has no {attr!r}: see reference_loop.protocols.Tool")
        name = tool.name
        if not isinstance(name, str) or not name:
            raise TypeError(f"tool name must be a non-empty string, got {name!r}")
        self._tools[name] = tool

        def dispose() -> None:
            if self._tools.get(name) is tool:
                del self._tools[name]

        return dispose

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def schemas(self) -> list[ToolSchema]:
        """What the model is told about the tools (SVC-5)."""
        return [
            {"name": t.name, "description": t.description, "input_schema": dict(t.input_schema)}
            for t in self._tools.values()
        ]

    async def execute(self, execution: dict[str, Any]) -> dict[str, Any]:
        """The default ``tools/execute`` handler: run the named tool, raise when it is unknown."""
        name = execution["name"]
        tool = self._tools.get(name)
        if tool is None:
            raise UnknownToolError(f"unknown tool {name!r}")
        agent = execution.get("agent")
        context: ToolContext = {
            "call_id": execution["call_id"],
            "agent_id": getattr(agent, "id", ""),
            "signal": execution["signal"],
        }
        content = await tool.execute(execution["arguments"], context)
        return {"call_id": execution["call_id"], "content": content, "is_error": False}


def parse_arguments(raw: str) -> Any:
    """TOOL-2: JSON-parse; an empty string is ``{}``; text that is not JSON passes through raw."""
    if not isinstance(raw, str):
        return raw
    if not raw.strip():
        return {}
    try:
        return json.loads(raw, parse_constant=_not_json)  # NaN, Infinity: not JSON (RFC 8259)
    except RecursionError:  # nested past the parser's depth: not JSON to it (nothing crashes)
        return raw
    except ValueError:
        return raw


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON")


def normalise_content(content: Any) -> list[v.Block]:
    """A tool's content as blocks: a string becomes one text block."""
    if isinstance(content, str):
        return [v.text(content)]
    if isinstance(content, list):
        blocks: list[Any] = [
            item if isinstance(item, dict) else v.text(str(item)) for item in content
        ]
        return blocks
    return [v.text(str(content))]


def error_result(exc: BaseException) -> dict[str, Any]:
    """TOOL-3: ``Error: <message>``, plus ``error{name, code}`` when the exception has a code."""
    result: dict[str, Any] = {"content": [v.text(f"Error: {error_message(exc)}")], "is_error": True}
    code = error_code(exc)
    if code is not None:
        result["error"] = {"name": type(exc).__name__, "code": code}
    return result


def error_message(exc: BaseException) -> str:
    """An exception's message (its type name when it has none, or when reading it raises: ERR-1,
    a plugin's failure never ends the loop); for LookupError, not ``repr``."""
    try:
        if isinstance(exc, KeyError) and exc.args:
            return str(exc.args[0])
        return str(exc) or type(exc).__name__
    except Exception:
        return type(exc).__name__


def error_code(exc: BaseException) -> str | None:
    """ERR-7: a string ``code`` attribute, or nothing."""
    code = getattr(exc, "code", None)
    return code if isinstance(code, str) else None
