"""The vocabulary of the agent-loop contract (spec sections 0 and 0b) as typed, JSON-friendly data.

Everything here is a plain ``dict`` at run time (``TypedDict`` for the type checker), with the
snake_case keys the spec fixes, so values cross every boundary of the kit unchanged: the session
log, the conformance adapter, scenario files, cassettes and JSON reports all speak these shapes.

The small constructor functions build well-formed values; they add optional keys only when they
carry a value (the spec compares data literally, so ``"code": None`` is not the same as no code).
"""

from __future__ import annotations

from typing import Any, Literal, NotRequired, TypeAlias, TypedDict

JSON: TypeAlias = Any
"""A JSON-serialisable value (dicts, lists, str, int, float, bool, None)."""

# --------------------------------------------------------------------------- content blocks


class TextBlock(TypedDict):
    type: Literal["text"]
    text: str
    provider_data: NotRequired[dict[str, Any]]  # spec 0b: opaque, carried unchanged (LOG-7)


class ReasoningBlock(TypedDict):
    type: Literal["reasoning"]
    text: str
    provider_data: NotRequired[dict[str, Any]]


class ToolCallBlock(TypedDict):
    type: Literal["tool-call"]
    id: str
    name: str
    arguments: str  # the model's RAW JSON text
    provider_data: NotRequired[dict[str, Any]]


class ToolResultBlock(TypedDict):
    type: Literal["tool-result"]
    tool_call_id: str
    content: list[Block]
    is_error: bool
    provider_data: NotRequired[dict[str, Any]]


class ImageBlock(TypedDict):
    type: Literal["image"]
    url: str
    mime_type: NotRequired[str]
    provider_data: NotRequired[dict[str, Any]]


Block: TypeAlias = TextBlock | ReasoningBlock | ToolCallBlock | ToolResultBlock | ImageBlock
BlockType: TypeAlias = Literal["text", "reasoning", "tool-call", "tool-result", "image"]
Role: TypeAlias = Literal["system", "user", "assistant"]


class Message(TypedDict):
    role: Role
    content: list[Block]


# --------------------------------------------------------------------------- sources, triggers


class UserSource(TypedDict):
    kind: Literal["user"]


class PluginSource(TypedDict):
    kind: Literal["plugin"]
    plugin: str


class AgentSource(TypedDict):
    kind: Literal["agent"]
    agent_id: str


Source: TypeAlias = UserSource | PluginSource | AgentSource


class MessageTrigger(TypedDict):
    kind: Literal["message"]
    source: Source


class InjectionTrigger(TypedDict):
    kind: Literal["injection"]
    source: Source


class ContinuationTrigger(TypedDict):
    kind: Literal["continuation"]


Trigger: TypeAlias = MessageTrigger | InjectionTrigger | ContinuationTrigger

# --------------------------------------------------------------------------- stream chunks


class Usage(TypedDict):
    input_tokens: int
    output_tokens: int
    cache_read_tokens: NotRequired[int]
    cache_write_tokens: NotRequired[int]
    reasoning_tokens: NotRequired[int]


class FinishReason(TypedDict):
    """``kind`` is ``stop``, ``tool-calls``, ``max-tokens``, ``aborted`` or ``error`` (open set)."""

    kind: str
    message: NotRequired[str]
    code: NotRequired[str]
    raw: NotRequired[str]  # a provider adapter's own finish string, when it is not the plain one


class BlockStartChunk(TypedDict):
    type: Literal["block-start"]
    index: int
    block_type: BlockType


class TextDeltaChunk(TypedDict):
    type: Literal["text-delta"]
    index: int
    text: str


class ReasoningDeltaChunk(TypedDict):
    type: Literal["reasoning-delta"]
    index: int
    text: str


class ToolCallDeltaChunk(TypedDict):
    type: Literal["tool-call-delta"]
    index: int
    id: str
    arguments_delta: str
    name: NotRequired[str]


class BlockEndChunk(TypedDict):
    type: Literal["block-end"]
    index: int
    block: Block


class UsageChunk(TypedDict):
    type: Literal["usage"]
    usage: Usage


class FinishChunk(TypedDict):
    type: Literal["finish"]
    reason: FinishReason


Chunk: TypeAlias = (
    BlockStartChunk
    | TextDeltaChunk
    | ReasoningDeltaChunk
    | ToolCallDeltaChunk
    | BlockEndChunk
    | UsageChunk
    | FinishChunk
)
CHUNK_TYPES: frozenset[str] = frozenset(
    {"block-start", "text-delta", "reasoning-delta", "tool-call-delta", "block-end", "usage", "finish"}
)
FINISH_KINDS: frozenset[str] = frozenset({"stop", "tool-calls", "max-tokens", "aborted", "error"})

# --------------------------------------------------------------------------- turn ends, status


class TurnEndReason(TypedDict):
    """``kind`` is ``completed``, ``aborted``, ``error``, ``disposed``, ``max-tokens`` or ``interrupted``."""

    kind: str
    reason: NotRequired[str]  # aborted
    message: NotRequired[str]  # error
    code: NotRequired[str]  # error, only when there is one


AgentStatus: TypeAlias = Literal["idle", "running", "disposed"]


class SessionEvent(TypedDict):
    """One entry of the session log: ``seq`` is the log length before the append, ``time`` epoch ms."""

    type: str
    seq: int
    time: int
    data: dict[str, Any]


EVENT_TYPES: frozenset[str] = frozenset(
    {
        "turn/start",
        "turn/end",
        "step/start",
        "step/end",
        "user/message",
        "context/message",
        "steering/message",
        "assistant/chunk",
        "assistant/message",
        "tool/call",
        "tool/result",
        "usage",
        "error",
    }
)

# --------------------------------------------------------------------------- constructors


def text(value: str) -> TextBlock:
    return {"type": "text", "text": value}


def reasoning(value: str) -> ReasoningBlock:
    return {"type": "reasoning", "text": value}


def tool_call(id: str, name: str, arguments: str) -> ToolCallBlock:
    return {"type": "tool-call", "id": id, "name": name, "arguments": arguments}


def tool_result(tool_call_id: str, content: list[Block], is_error: bool = False) -> ToolResultBlock:
    return {"type": "tool-result", "tool_call_id": tool_call_id, "content": content, "is_error": is_error}


def image(url: str, mime_type: str | None = None) -> ImageBlock:
    block: ImageBlock = {"type": "image", "url": url}
    if mime_type is not None:
        block["mime_type"] = mime_type
    return block


def message(role: Role, content: list[Block]) -> Message:
    return {"role": role, "content": content}


def user_source() -> UserSource:
    return {"kind": "user"}


def plugin_source(plugin: str) -> PluginSource:
    return {"kind": "plugin", "plugin": plugin}


def agent_source(agent_id: str) -> AgentSource:
    return {"kind": "agent", "agent_id": agent_id}


def block_start(index: int, block_type: BlockType) -> BlockStartChunk:
    return {"type": "block-start", "index": index, "block_type": block_type}


def text_delta(index: int, value: str) -> TextDeltaChunk:
    return {"type": "text-delta", "index": index, "text": value}


def reasoning_delta(index: int, value: str) -> ReasoningDeltaChunk:
    return {"type": "reasoning-delta", "index": index, "text": value}


def tool_call_delta(
    index: int, id: str, arguments_delta: str, name: str | None = None
) -> ToolCallDeltaChunk:
    chunk: ToolCallDeltaChunk = {
        "type": "tool-call-delta",
        "index": index,
        "id": id,
        "arguments_delta": arguments_delta,
    }
    if name is not None:
        chunk["name"] = name
    return chunk


def block_end(index: int, block: Block) -> BlockEndChunk:
    return {"type": "block-end", "index": index, "block": block}


def usage(
    input_tokens: int,
    output_tokens: int,
    *,
    cache_read_tokens: int | None = None,
    cache_write_tokens: int | None = None,
    reasoning_tokens: int | None = None,
) -> UsageChunk:
    value: Usage = {"input_tokens": input_tokens, "output_tokens": output_tokens}
    if cache_read_tokens is not None:
        value["cache_read_tokens"] = cache_read_tokens
    if cache_write_tokens is not None:
        value["cache_write_tokens"] = cache_write_tokens
    if reasoning_tokens is not None:
        value["reasoning_tokens"] = reasoning_tokens
    return {"type": "usage", "usage": value}


def finish(
    kind: str, message: str | None = None, code: str | None = None, *, raw: str | None = None
) -> FinishChunk:
    reason: FinishReason = {"kind": kind}
    if message is not None:
        reason["message"] = message
    if code is not None:
        reason["code"] = code
    if raw is not None:
        reason["raw"] = raw
    return {"type": "finish", "reason": reason}


def turn_end_completed() -> TurnEndReason:
    return {"kind": "completed"}


def turn_end_aborted(reason: str = "aborted") -> TurnEndReason:
    return {"kind": "aborted", "reason": reason}


def turn_end_error(message: str, code: str | None = None) -> TurnEndReason:
    value: TurnEndReason = {"kind": "error", "message": message}
    if code is not None:
        value["code"] = code
    return value


def turn_end_disposed() -> TurnEndReason:
    return {"kind": "disposed"}


def turn_end_max_tokens() -> TurnEndReason:
    return {"kind": "max-tokens"}


def turn_end_interrupted() -> TurnEndReason:
    return {"kind": "interrupted"}
