"""The seams between the loop and the outside world: model adapters and tools (spec 0b).

A model adapter turns a request into a stream of chunks; the fake LLM of the simulator, the
cassette-backed model and the real provider adapters all implement ``ModelAdapter``. A tool is
what the default ``tools/execute`` handler dispatches to by name; the simulator's fake tools
implement ``Tool``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, NotRequired, Protocol, TypedDict, runtime_checkable

from .abort import AbortSignal
from .vocabulary import Block, Chunk, Message


class ToolSchema(TypedDict):
    """What the model is told about a tool: sent with every request (spec SVC-5)."""

    name: str
    description: str
    input_schema: dict[str, Any]


class ModelRequest(TypedDict):
    """``{"model", "messages", "system"?, "tools"?}`` plus the step's abort ``signal``."""

    model: str
    messages: list[Message]
    system: NotRequired[str]
    tools: NotRequired[list[ToolSchema]]
    signal: NotRequired[AbortSignal]


@runtime_checkable
class ModelAdapter(Protocol):
    """Streams one model response.

    Contract (spec section 0): yield chunks of the vocabulary; ``usage`` comes before ``finish``;
    nothing comes after ``finish``; a failure either raises from the iterator (optionally with a
    string ``code`` attribute) or ends with ``finish{error}``. An adapter should stop promptly
    once ``request["signal"]`` fires (yielding ``finish{aborted}`` or simply returning).
    """

    def stream(self, request: ModelRequest) -> AsyncIterator[Chunk]: ...


class ToolContext(TypedDict):
    """What a tool sees of its call besides the arguments."""

    call_id: str
    agent_id: str
    signal: AbortSignal


class ToolError(Exception):
    """A tool failure with an optional machine-readable ``code`` (spec TOOL-3)."""

    def __init__(self, message: str, code: str | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code


@runtime_checkable
class Tool(Protocol):
    """A named tool. ``execute`` returns its result content: a string or a list of blocks.

    To fail, raise; an exception with a string ``code`` attribute carries that code into the
    ``tool/result`` (``error{name, code}``).
    """

    @property
    def name(self) -> str: ...

    @property
    def description(self) -> str: ...

    @property
    def input_schema(self) -> dict[str, Any]: ...

    async def execute(self, arguments: Any, context: ToolContext) -> str | list[Block]: ...
