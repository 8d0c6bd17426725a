"""Small pieces: the inbox, tool-argument parsing and error results, prompt sections, waiters."""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar

import pytest

from reference_loop import vocabulary as v
from reference_loop.agent import IdleWaiter
from reference_loop.inbox import Inbox, InboxMessage
from reference_loop.protocols import ToolError
from reference_loop.system_prompt import SystemPromptSections, join_prompt
from reference_loop.tools import ToolRegistry, error_result, parse_arguments


def msg(text: str) -> InboxMessage:
    return InboxMessage([v.text(text)], v.user_source())


def test_inbox_fifos_and_wake() -> None:
    async def body() -> list[str]:
        inbox = Inbox()
        woke: list[str] = []

        async def waiter() -> None:
            await inbox.wait_for_queued()
            woke.append("woke")

        task = asyncio.ensure_future(waiter())
        await asyncio.sleep(0)
        inbox.steer(msg("s"))
        inbox.wake()  # a wake without queued work re-parks
        await asyncio.sleep(0)
        assert woke == []
        inbox.enqueue(msg("a"))
        inbox.enqueue(msg("b"))
        await task
        assert [m.content[0]["text"] for m in inbox.drain_queued()] == ["a", "b"]  # type: ignore[typeddict-item]
        assert inbox.has_steering and not inbox.has_queued
        inbox.clear()
        assert not inbox.has_steering
        return woke

    assert asyncio.run(body()) == ["woke"]


@pytest.mark.parametrize(
    ("raw", "parsed"),
    [("", {}), ("  ", {}), ('{"a": 1}', {"a": 1}), ("[1, 2]", [1, 2]), ("not json", "not json")],
)
def test_parse_arguments(raw: str, parsed: Any) -> None:
    assert parse_arguments(raw) == parsed


def test_error_result_carries_code_only_when_present() -> None:
    assert error_result(RuntimeError("boom")) == {
        "content": [v.text("Error: boom")],
        "is_error": True,
    }
    assert error_result(ToolError("nope", code="E1"))["error"] == {
        "name": "ToolError",
        "code": "E1",
    }


def test_tool_registry_schemas_and_dispose() -> None:
    class T:
        name = "t"
        description = "d"
        input_schema: ClassVar[Any] = {"type": "object"}

        async def execute(self, arguments: Any, context: Any) -> str:
            return "ok"

    registry = ToolRegistry()
    dispose = registry.register(T())
    assert registry.schemas() == [
        {"name": "t", "description": "d", "input_schema": {"type": "object"}}
    ]
    dispose()
    assert registry.schemas() == []
    with pytest.raises(TypeError, match="has no 'name'"):
        registry.register(object())  # type: ignore[arg-type]


def test_prompt_sections_and_join() -> None:
    sections = SystemPromptSections()
    sections.add("a", "A")
    drop = sections.add("b", "B")
    drop()
    assert sections.sections() == [{"name": "a", "text": "A"}]
    assert join_prompt("A", None, "", "C") == "A\n\nC"


def test_idle_waiter_registered_at_call_and_awaitable_twice() -> None:
    async def body() -> None:
        waiter = IdleWaiter()
        assert not waiter.done()
        task = asyncio.ensure_future(_await(waiter))
        await asyncio.sleep(0)
        assert not task.done()
        waiter._release()
        await task
        await waiter  # already released: returns at once
        assert waiter.done()

    asyncio.run(body())


async def _await(awaitable: Any) -> None:
    await awaitable


def test_a_throwing_signal_callback_leaves_the_others_and_the_waiters_their_abort() -> None:
    # An adapter's callback on the step's signal, registered before the loop's own (which cancels
    # the running tool), threw: every callback still hears the abort, every waiter is released,
    # and the first failure is raised after (the agent contains it). Before session 60 the loop's
    # callback never ran, and a tool that ignores its signal was waited for for ever (TOOL-5).
    async def main() -> None:
        from reference_loop.abort import AbortController

        controller = AbortController()
        heard: list[str] = []

        def adapter(_reason: str) -> None:
            raise RuntimeError("adapter's callback failed")

        controller.signal.add_listener(adapter)
        controller.signal.add_listener(heard.append)
        waiter = asyncio.ensure_future(controller.signal.wait())
        await asyncio.sleep(0)
        with pytest.raises(RuntimeError, match="adapter's callback failed"):
            controller.abort("stop")
        assert heard == ["stop"]
        assert await waiter == "stop"

    asyncio.run(main())
