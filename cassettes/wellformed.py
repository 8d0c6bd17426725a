"""A checker for the adapter contract on a finished chunk stream (spec section 0).

Used by the tests on every replayed cassette, and available to users checking their own adapter:
blocks open, fill and close consistently (indexes 0, 1, 2... in start order, deltas of the right
kind only while open, each ``block-end`` carrying what its deltas built), usage before finish,
exactly one ``finish`` and it comes last.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from reference_loop.vocabulary import CHUNK_TYPES, Chunk

_DELTA_BLOCK = {"text-delta": "text", "reasoning-delta": "reasoning", "tool-call-delta": "tool-call"}


def stream_problems(chunks: Sequence[Chunk]) -> list[str]:
    """Every contract violation in ``chunks`` (empty list: well-formed)."""
    problems: list[str] = []
    started: dict[int, str] = {}
    open_: dict[int, dict[str, Any]] = {}
    finishes = [n for n, c in enumerate(chunks) if c.get("type") == "finish"]
    if len(finishes) != 1:
        problems.append(f"{len(finishes)} finish chunks (expected exactly one)")
    elif finishes[0] != len(chunks) - 1:
        problems.append(f"finish at position {finishes[0]} is not last")
    for n, chunk in enumerate(chunks):
        kind = chunk.get("type")
        where = f"chunk {n} ({kind})"
        if kind not in CHUNK_TYPES:
            problems.append(f"{where}: unknown chunk type")
            continue
        raw: dict[str, Any] = dict(chunk)
        index: int = raw.get("index", -1)
        if kind == "block-start":
            if index != len(started):
                problems.append(f"{where}: index {index}, expected {len(started)}")
            if index in started:
                continue
            started[index] = raw["block_type"]
            open_[index] = {"text": "", "arguments": "", "id": None, "name": None}
        elif kind in _DELTA_BLOCK:
            state = open_.get(index)
            if state is None:
                problems.append(f"{where}: block {index} is not open")
                continue
            if started[index] != _DELTA_BLOCK[kind]:
                problems.append(f"{where}: delta for a {started[index]} block")
            if kind == "tool-call-delta":
                if state["id"] is None:
                    if "name" not in raw:
                        problems.append(f"{where}: first tool-call delta has no name")
                    state["id"], state["name"] = raw["id"], raw.get("name")
                elif raw["id"] != state["id"]:
                    problems.append(f"{where}: id {raw['id']!r} changed from {state['id']!r}")
                state["arguments"] += raw["arguments_delta"]
            else:
                state["text"] += raw["text"]
        elif kind == "block-end":
            state = open_.pop(index, None)
            if state is None:
                problems.append(f"{where}: block {index} is not open")
                continue
            block = raw["block"]
            if block.get("type") != started[index]:
                problems.append(f"{where}: ends a {block.get('type')} block started as {started[index]}")
            elif block["type"] == "tool-call":
                same = block["arguments"] == state["arguments"] or (state["arguments"] == "" and block["arguments"] == "{}")
                if not same:
                    problems.append(f"{where}: arguments {block['arguments']!r} != deltas {state['arguments']!r}")
                if (block["id"], block["name"]) != (state["id"], state["name"]):
                    problems.append(f"{where}: id/name {block['id']}/{block['name']} != deltas {state['id']}/{state['name']}")
            elif block.get("text") != state["text"]:
                problems.append(f"{where}: text {block.get('text')!r} != deltas {state['text']!r}")
        elif kind == "usage" and finishes and n > finishes[0]:
            problems.append(f"{where}: usage after finish")
        elif kind == "finish" and open_:
            problems.append(f"{where}: blocks {sorted(open_)} still open at finish")
    return problems
