"""Assembling a step's assistant message from its chunk stream (spec ASM-1..4).

Tolerant of malformed streams: a ``block-end`` carries the authoritative block and later deltas
of that index are ignored (ASM-1); blocks that never close are kept as built from their deltas,
a tool call included (ASM-2); blocks keep the stream's index order (ASM-3); no ``finish`` means
``stop`` and the last ``usage`` wins (ASM-4).

A ``block-end`` block is kept as it came, so any ``provider_data`` it carries (spec 0b: an opaque
object a provider needs back on a later request) reaches ``assistant/message`` and derived history
unchanged (LOG-7); deltas never carry it, so a block built from deltas alone has none.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from . import vocabulary as v


@dataclass
class _Partial:
    """A block being built from deltas (its type is known from block-start or the first delta)."""

    block_type: str
    text: str = ""
    call_id: str = ""
    name: str = ""
    arguments: str = ""

    def build(self) -> v.Block | None:
        if self.block_type == "text":
            return v.text(self.text)
        if self.block_type == "reasoning":
            return v.reasoning(self.text)
        if self.block_type == "tool-call":
            return v.tool_call(self.call_id, self.name, self.arguments)
        return None  # an announced image/tool-result block without block-end carries nothing


@dataclass
class BlockAssembler:
    """Feed chunks with ``add``; read ``message()``, ``finish`` and ``usage`` at the end."""

    _closed: dict[int, v.Block] = field(default_factory=dict)
    _open: dict[int, _Partial] = field(default_factory=dict)
    finish: v.FinishReason | None = None
    usage: v.Usage | None = None

    def add(self, chunk: Any) -> None:
        """Fold one chunk in; unknown or malformed chunks are ignored."""
        if not isinstance(chunk, dict):
            return
        kind, index = chunk.get("type"), chunk.get("index")
        if kind == "usage" and isinstance(chunk.get("usage"), dict):
            self.usage = chunk["usage"]  # ASM-4: the last one wins
            return
        if kind == "finish" and isinstance(chunk.get("reason"), dict):
            self.finish = chunk["reason"]
            return
        if not isinstance(index, int) or index in self._closed:
            return  # ASM-1: nothing changes a block after its block-end
        if kind == "block-end":
            block = chunk.get("block")
            if isinstance(block, dict):
                self._closed[index] = block  # type: ignore[assignment]
                self._open.pop(index, None)
            return
        if kind == "block-start":
            self._open.setdefault(index, _Partial(str(chunk.get("block_type", "text"))))
            return
        if kind in ("text-delta", "reasoning-delta"):
            partial = self._open.setdefault(index, _Partial(kind.removesuffix("-delta")))
            partial.text += str(chunk.get("text", ""))
        elif kind == "tool-call-delta":
            partial = self._open.setdefault(index, _Partial("tool-call"))
            partial.call_id = str(chunk.get("id") or partial.call_id)
            if chunk.get("name"):
                partial.name = str(chunk["name"])
            partial.arguments += str(chunk.get("arguments_delta", ""))

    @property
    def finish_reason(self) -> v.FinishReason:
        """The stream's finish reason; ``stop`` when it never sent one (ASM-4)."""
        return self.finish if self.finish is not None else {"kind": "stop"}

    def content(self) -> list[v.Block]:
        """The blocks in index order (ASM-3), unclosed ones as built from deltas (ASM-2)."""
        blocks: list[v.Block] = []
        for index in sorted(set(self._closed) | set(self._open)):
            if index in self._closed:
                blocks.append(self._closed[index])
            else:
                built = self._open[index].build()
                if built is not None:
                    blocks.append(built)
        return blocks

    def message(self) -> v.Message:
        """The assembled assistant message."""
        return v.message("assistant", self.content())
