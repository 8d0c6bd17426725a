"""The block assembler over well-formed and malformed chunk streams (ASM-1..4)."""

from __future__ import annotations

from reference_loop import vocabulary as v
from reference_loop.assembler import BlockAssembler


def assemble(*chunks: object) -> BlockAssembler:
    asm = BlockAssembler()
    for chunk in chunks:
        asm.add(chunk)
    return asm


def test_block_end_is_authoritative_and_later_deltas_ignored() -> None:
    asm = assemble(
        v.block_start(0, "text"),
        v.text_delta(0, "hel"),
        v.block_end(0, v.text("hello")),
        v.text_delta(0, " ignored"),
        v.block_start(0, "reasoning"),
    )
    assert asm.content() == [v.text("hello")]


def test_unclosed_blocks_kept_and_tool_call_from_deltas() -> None:
    asm = assemble(
        v.text_delta(0, "partial"),
        v.tool_call_delta(1, "c1", '{"a":', name="search"),
        v.tool_call_delta(1, "c1", " 1}"),
        v.reasoning_delta(2, "hmm"),
    )
    assert asm.content() == [
        v.text("partial"),
        v.tool_call("c1", "search", '{"a": 1}'),
        v.reasoning("hmm"),
    ]


def test_index_order_whatever_the_close_order() -> None:
    asm = assemble(
        v.block_start(1, "text"),
        v.block_start(0, "text"),
        v.block_end(1, v.text("second")),
        v.block_end(0, v.text("first")),
    )
    assert asm.message() == {"role": "assistant", "content": [v.text("first"), v.text("second")]}


def test_no_finish_is_stop_and_last_usage_wins() -> None:
    asm = assemble(
        v.usage(1, 1), v.text_delta(0, "x"), v.usage(5, 7), "garbage", {"type": "text-delta"}
    )
    assert asm.finish_reason == {"kind": "stop"}
    assert asm.usage == {"input_tokens": 5, "output_tokens": 7}
    assert assemble(v.finish("max-tokens")).finish_reason == {"kind": "max-tokens"}
