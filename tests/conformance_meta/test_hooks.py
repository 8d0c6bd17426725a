""""Needs hook" failures: a test that relies on a hook its rule does not name reports the missing
hook; a test whose rule names the hook reports a violation."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from conformance.harness import Body, Kit, run_scenario
from conformance.hooks import PREFIX, NeedsHook, hook_of
from conformance.tests import test_loop, test_python, test_tools

from .broken_adapters import WithoutHooks


def _runner(impl: Any) -> Callable[[Body], None]:
    def run(body: Body) -> None:
        run_scenario(impl, body, "fifo")

    return run


def test_message_and_parse() -> None:
    error = NeedsHook("agent/queued", "the test observes it")
    assert str(error) == "needs hook agent/queued: the test observes it"
    assert str(error).startswith(PREFIX) and isinstance(error, AssertionError)
    assert hook_of(str(error)) == "agent/queued"
    assert hook_of(f"conformance.hooks.NeedsHook: {error}") == "agent/queued"
    assert hook_of("AssertionError: when_idle() never resolved") is None


def test_a_test_needing_a_hook_its_rule_does_not_name_reports_it() -> None:
    # PY-2's first test observes a synchronous notification through agent/queued.
    with pytest.raises(NeedsHook) as info:
        test_python.test_sync_and_async_listeners(_runner(WithoutHooks("agent/queued")))
    assert info.value.hook == "agent/queued"
    # TOOL-1 traced through tools/execute: needs it; observed through the tools: passes.
    impl = WithoutHooks("tools/execute")
    with pytest.raises(NeedsHook, match=r"^needs hook tools/execute: "):
        test_tools.test_tools_run_in_order_one_at_a_time(_runner(impl))
    test_tools.test_tools_run_in_order_seen_from_the_tools_and_the_log(_runner(impl))


def test_a_test_whose_rule_names_the_hook_reports_a_violation() -> None:
    # LOOP-9 is about agent/queued: without it, it is a plain failure, not a missing hook.
    with pytest.raises(AssertionError) as info:
        test_loop.test_queued_notifications(_runner(WithoutHooks("agent/queued")))
    assert not isinstance(info.value, NeedsHook)


def test_a_pass_that_never_saw_its_hook_is_a_needs_hook_failure() -> None:
    # A test that passes without its needed hook ever firing observed nothing: it says so.
    async def scenario(k: Kit) -> None:
        k.on("agent/turn-end", lambda *_: None, needs="the test reads it")
        a = k.agent()
        a.send("hi")
        await k.idle(a)

    run_scenario(WithoutHooks(), scenario)
    with pytest.raises(NeedsHook, match=r"^needs hook agent/turn-end: the test reads it$"):
        run_scenario(WithoutHooks("agent/turn-end"), scenario)


def test_listener_wrapping_keeps_what_a_bus_may_inspect() -> None:
    # Kit counts calls through a wrapper: coroutine functions stay coroutine functions, and the
    # signature is the listener's own (a bus may dispatch on either).
    import inspect

    seen: list[Any] = []

    async def scenario(k: Kit) -> None:
        async def waterfall(agent: object, turn: int, step: int, value: object, next: Any) -> object:
            return await next()

        registered: list[Any] = []
        original_on = k.service.on

        def spy(event: str, listener: Any) -> Any:
            registered.append(listener)
            return original_on(event, listener)

        k.service.on = spy  # type: ignore[method-assign]
        k.on("agent/step-result", waterfall)
        wrapped = registered[-1]
        seen.extend([inspect.iscoroutinefunction(wrapped), list(inspect.signature(wrapped).parameters)])
        a = k.agent()
        a.send("hi")
        await k.idle(a)
        seen.append(k.calls("agent/step-result"))

    run_scenario(WithoutHooks(), scenario)
    assert seen == [True, ["agent", "turn", "step", "value", "next"], 1]
