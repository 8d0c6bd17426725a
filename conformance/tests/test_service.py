"""Section 11: the service (SVC-1..7)."""

from __future__ import annotations

import asyncio
import inspect
import re
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from conformance import fakes
from conformance.adapter import AgentHandle, Implementation, ServiceHandle
from conformance.fakes import FakeModel, Gate, respond
from conformance.harness import MODEL, Kit
from conformance.invariants import (
    clock_violations,
    log_violations,
    persisted_prefix,
    repair_violations,
)
from simulator.sources import EPOCH_MS

from ._support import COMPLETED, DISPOSED, Run, Watch, boom, passthrough, request_texts, throws_on

_OPEN: dict[str, list[dict[str, int]]] = {"mid-tool": [{"turn": 2, "step": 1}], "mid-stream": [{"turn": 2, "step": 2}],
                                          "between-steps": []}
"""The step each death point of the resume test leaves open (the turn is open in all three)."""


def _log_problems(events: list[dict[str, Any]]) -> list[str]:
    """A resumed log's LOG-3..6 violations, and PY-3's: its repair stamped by the injected clock."""
    return log_violations(events) + clock_violations(events, EPOCH_MS)


@pytest.mark.rule("SVC-1")
def test_create_uses_fresh_session(run: Run) -> None:
    async def scenario(k: Kit) -> None:
        a = k.agent("alpha")
        first = a.session.id
        assert re.fullmatch(r"alpha-session-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", first), first
        a.dispose()
        b = k.agent("alpha")
        assert b.session.id != first and b.session.id.startswith("alpha-session-")

    run(scenario)


@pytest.mark.rule("SVC-2")
def test_programmatic_create_and_duplicates(run: Run) -> None:
    async def scenario(k: Kit) -> None:
        a = k.service.create_agent("beta", "acp-123", meta={"cwd": "/tmp"}, agent_options={"model": MODEL})
        k.agents.append(a)
        assert a.session.id == "acp-123" and a.id == "beta"
        a.send("hi")
        await k.idle(a)
        assert k.reasons(a) == [COMPLETED]
        # Rejected: any error (the spec does not fix its wording), never an assertion of ours.
        for create in (lambda: k.service.create("beta", {"model": MODEL}),
                       lambda: k.service.create_agent("beta", "other-session", agent_options={"model": MODEL})):
            with pytest.raises(Exception) as info:
                create()
            assert info.type is not AssertionError
        assert k.service.get("beta") is a

    run(scenario)


def _writer(k: Kit) -> tuple[Any, Any]:
    """A fresh backend and a first service writing to it, its model answering ``one-reply``
    once, then ``ok``."""
    store = k.impl.new_persistence()
    first = k.impl.create_service(persistence=store)
    first.register_model(MODEL, FakeModel([fakes.text("one-reply")], default=respond.text("ok")))
    return store, first


async def _resumed_log(k: Kit, store: object, agent_id: str, session_id: str) -> list[dict[str, Any]]:
    """The log ``resume(agent_id, session_id)`` loads on a second service over ``store`` (SVC-3),
    that service closed again."""
    second = k.impl.create_service(persistence=store)
    second.register_model(MODEL, FakeModel(default=respond.text("ok")))
    b = await second.resume(agent_id, session_id, agent_options={"model": MODEL})
    loaded = [dict(e) for e in b.session.events]
    await second.close()
    return loaded


@pytest.mark.rule("SVC-3", "LOG-2")
@pytest.mark.parametrize("boundary", ["turn/end", "user/message"])
def test_a_throwing_session_event_listener_does_not_keep_an_event_from_the_persisted_log(
        run: Run, impl: Implementation, boundary: str) -> None:
    # LOG-2: append pushes the event first, then notifies; a throwing listener leaves the event in
    # the log. SVC-3 loads "a persisted session": the event a listener threw on is in it as well,
    # so the resumed log is the live one, event for event (not a turn left open and repaired).
    _persistence_or_skip(impl)

    async def scenario(k: Kit) -> None:
        store, first = _writer(k)
        thrown: list[str] = []
        first.on("session/event", throws_on(boundary, thrown))
        a = first.create_agent("gamma", "sess-1", agent_options={"model": MODEL})
        a.send("one")
        await k.idle(a)
        assert thrown, f"the {boundary} listener never ran"
        logged = [dict(e) for e in a.session.events]
        await first.close()

        loaded = await _resumed_log(k, store, "gamma", "sess-1")
        assert [e["type"] for e in loaded] == [e["type"] for e in logged], (
            f"the persisted log differs from the live one after a throwing {boundary} listener: "
            f"{[e['type'] for e in loaded]} against {[e['type'] for e in logged]}")
        assert loaded == logged

    run(scenario)


@pytest.mark.rule("SVC-3", "LOG-3")
def test_an_event_appended_by_a_session_event_listener_is_persisted_after_the_event_it_heard(
        run: Run, impl: Implementation) -> None:
    # A session/event listener on turn/start injects (INJ-1: a context/message in the open
    # turn). The live log has turn/start, then the context/message; the persisted session, which
    # SVC-3 resumes, holds the same events in the same order with the same seq (LOG-3): a backend
    # written after the listeners ran would store the listener's append first.
    _persistence_or_skip(impl)
    if "injection" not in impl.features:
        pytest.skip("not-applicable: feature injection not supported")

    async def scenario(k: Kit) -> None:
        store, first = _writer(k)
        agents: list[Any] = []
        pending: list[Any] = []

        def listener(_session: object, event: dict[str, Any]) -> None:
            if event.get("type") == "turn/start" and agents and not pending:
                pending.append(agents[0].inject("a note"))

        first.on("session/event", listener)
        a = first.create_agent("delta", "sess-2", agent_options={"model": MODEL})
        agents.append(a)
        a.send("one")
        await k.idle(a)
        for p in pending:
            if inspect.isawaitable(p):
                await p
        logged = [dict(e) for e in a.session.events]
        assert "context/message" in [e["type"] for e in logged], "the listener's inject was not logged"
        await first.close()

        loaded = await _resumed_log(k, store, "delta", "sess-2")
        assert [(e["seq"], e["type"]) for e in loaded] == [(e["seq"], e["type"]) for e in logged], (
            "the persisted log is not the live one, in order: "
            f"{[e['type'] for e in loaded]} against {[e['type'] for e in logged]}")

    run(scenario)


@pytest.mark.rule("SVC-3", "LOG-1", "LOG-3")
def test_an_event_the_log_rejects_is_not_persisted_either(run: Run, impl: Implementation) -> None:
    # An idle inject() of content that cannot be serialised raises (INJ-4): the live log rejects
    # its context/message. SVC-3 resumes "a persisted session", the log the loop wrote: the
    # rejected event is not in the store either, nor does a later event reuse its seq (LOG-3).
    _persistence_or_skip(impl)
    if "injection" not in impl.features:
        pytest.skip("not-applicable: feature injection not supported")

    async def scenario(k: Kit) -> None:
        store, first = _writer(k)
        a = first.create_agent("epsilon", "sess-3", agent_options={"model": MODEL})
        try:
            result = a.inject([{"type": "text", "text": object()}])
            if inspect.isawaitable(result):
                await result
        except Exception:
            pass  # INJ-4: it raises; what matters here is what was stored
        a.send("one")
        await k.idle(a)
        logged = [dict(e) for e in a.session.events]
        await first.close()

        loaded = await _resumed_log(k, store, "epsilon", "sess-3")
        assert [(e["seq"], e["type"]) for e in loaded] == [(e["seq"], e["type"]) for e in logged], (
            "the persisted log is not the live one: "
            f"{[(e['seq'], e['type']) for e in loaded]} against {[(e['seq'], e['type']) for e in logged]}")

    run(scenario)


@pytest.mark.rule("SVC-3")
def test_resume_continues_session(run: Run) -> None:
    async def scenario(k: Kit) -> None:
        store, first = _writer(k)
        a = first.create_agent("gamma", "sess-1", agent_options={"model": MODEL})
        a.send("one")
        await k.idle(a)
        history = a.session.derive_messages()
        logged = [dict(e) for e in a.session.events]
        await first.close()

        second = k.impl.create_service(persistence=store)
        model = FakeModel(default=respond.text("ok"))
        second.register_model(MODEL, model)
        b = await second.resume("gamma", "sess-1", agent_options={"model": MODEL})
        assert b.session.id == "sess-1"
        assert b.id == "gamma" and second.get("gamma") is b, "the resumed agent has the id it was resumed under"
        assert [dict(e) for e in b.session.events] == logged, "the loaded log is the persisted one, event for event"
        assert b.session.derive_messages() == history
        b.send("two")
        await k.idle(b)
        assert [e["data"]["turn"] for e in b.session.events if e["type"] == "turn/start"] == [1, 2]
        assert request_texts(model.requests[0]) == ["one", "one-reply", "two"]
        await second.close()

        # "A clear error": it says what is missing, persistence (or its store, its backend).
        with pytest.raises(Exception, match=r"(?i)persist|store|backend"):
            await k.service.resume("gamma", "sess-1")

    run(scenario)


@pytest.mark.rule("SVC-4")
def test_configured_agents(run: Run) -> None:
    async def scenario(k: Kit) -> None:
        k.service.load_config({"agents": [{"id": "conf", "model": MODEL, "system_prompt": "Be brief."}]})
        a = k.service.get("conf")
        assert a is not None and a.id == "conf"
        k.agents.append(a)
        a.send("hi")
        await k.idle(a)
        assert k.model.requests[0]["system"].endswith("Be brief.")
        for bad, field in (
            ({"agents": [{"model": MODEL}]}, "id"),
            ({"agents": [{"id": 7}]}, "id"),
            ({"agents": [{"id": "x", "model": 3}]}, "model"),
            ({"agents": "nope"}, "agents"),
        ):
            with pytest.raises(Exception, match=field):
                k.service.load_config(bad)

    run(scenario)


@pytest.mark.rule("SVC-5")
def test_system_prompt_and_tools(run: Run) -> None:
    async def scenario(k: Kit) -> None:
        k.service.add_system_prompt_section("one", "Section A")
        k.service.add_system_prompt_section("two", "Section B")
        k.tool("echo", description="echoes", input_schema={"type": "object", "properties": {"x": {}}})
        a = k.agent(system_prompt="Own prompt")
        a.send("hi")
        await k.idle(a)
        request = k.model.requests[0]
        assert request["system"] == "Section A\n\nSection B\n\nOwn prompt"
        assert {"name": "echo", "description": "echoes", "input_schema": {"type": "object", "properties": {"x": {}}}} in request["tools"]

    run(scenario)


@pytest.mark.rule("SVC-5")
def test_a_system_prompt_listener_rewrites_the_prompt_by_returning_it(run: Run) -> None:
    # 0a: a waterfall listener rewrites by returning something else. A system-prompt plugin adds a
    # paragraph to the assembled prompt and returns it: the request carries it (a loop that awaits
    # the waterfall and keeps the value it passed in, taking only in-place edits, drops it).
    # The contract gives the waterfall's value no shape: a string, or a mapping's "system" string,
    # is what a plugin can add to. Observed in the agent/request waterfall and at the model.
    async def scenario(k: Kit) -> None:
        k.service.add_system_prompt_section("one", "Section A")
        shapes: list[str] = []

        async def add(*args: Any) -> Any:
            value = await args[-1]()
            if isinstance(value, str) or value is None:
                shapes.append("string")
                return f"{value}\n\nCite your sources." if value else "Cite your sources."
            if isinstance(value, dict) and "system" in value and isinstance(value["system"], (str, type(None))):
                shapes.append("mapping")
                system = value.get("system")
                return {**value, "system": f"{system}\n\nCite your sources." if system else "Cite your sources."}
            shapes.append(type(value).__name__)
            return value

        seen: list[Any] = []

        async def request(*args: Any) -> Any:
            seen.append(args[-2].get("system") if isinstance(args[-2], dict) else None)
            return await args[-1]()

        k.on("system-prompt", add, needs="a plugin adds to the assembled system prompt")
        k.on("agent/request", request)
        a = k.agent(system_prompt="Own prompt")
        a.send("hi")
        await k.idle(a)
        if shapes and shapes[0] not in ("string", "mapping"):
            pytest.skip(f"the system-prompt waterfall's value is a {shapes[0]}: no prompt text a plugin can add to")
        assert shapes, "the system-prompt listener never ran"
        for where, system in (("the agent/request waterfall", seen[0] if seen else None),
                              ("the model", k.model.requests[0].get("system"))):
            assert "Cite your sources." in str(system or ""), (
                f"{where} got system prompt {system!r}: the paragraph the system-prompt listener returned is "
                "missing (a listener rewrites by returning something else)")
            assert "Section A" in str(system) and "Own prompt" in str(system), system

    run(scenario)


@pytest.mark.rule("SVC-5")
def test_the_system_prompt_follows_sections_added_and_removed_between_turns(run: Run) -> None:
    # "The assembled sections": those registered when the request is made. A section removed
    # (its disposer called) and another added, the count unchanged, between two turns: the second
    # request carries the new one, not the removed one (as does a new agent's).
    async def scenario(k: Kit) -> None:
        remove = k.service.add_system_prompt_section("one", "Section A")
        a = k.agent()
        a.send("first")
        await k.idle(a)
        assert k.model.requests[0]["system"] == "Section A"
        remove()
        k.service.add_system_prompt_section("two", "Section B")
        a.send("second")
        await k.idle(a)
        assert k.model.requests[1]["system"] == "Section B", "turn 2's request, after one section left and one came"
        b = k.agent("other")
        b.send("third")
        await k.idle(b)
        assert k.model.requests[2]["system"] == "Section B", "a new agent's request"

    run(scenario)


@pytest.mark.rule("SVC-5")
@pytest.mark.parametrize("what", ["tool", "section"])
def test_releasing_a_registration_leaves_a_later_one_of_the_same_name(run: Run, what: str) -> None:
    # "Tool schemas of registered tools are sent", "the assembled sections": a tool (a section)
    # registered again under its name, then the first registration released (a plugin hot-swapping
    # it): the second was never released, so it is still registered and sent. (A loop may refuse
    # the second registration: then nothing is asked.)
    async def scenario(k: Kit) -> None:
        if what == "tool":
            first = k.service.register_tool(fakes.FakeTool("lookup", "v1", description="first"))
            again = lambda: k.service.register_tool(fakes.FakeTool("lookup", "v2", description="second"))  # noqa: E731
        else:
            first = k.service.add_system_prompt_section("rules", "First rules")
            again = lambda: k.service.add_system_prompt_section("rules", "Second rules")  # noqa: E731
        try:
            again()
        except Exception:  # a duplicate name refused: allowed
            return
        first()
        a = k.agent()
        a.send("hi")
        await k.idle(a)
        request = k.model.requests[0]
        if what == "tool":
            offered = [t.get("description") for t in request.get("tools") or [] if t.get("name") == "lookup"]
            assert offered == ["second"], f"the request offers lookup as {offered}, not the registration still held"
        else:
            assert request.get("system") == "Second rules", f"the system prompt is {request.get('system')!r}"

    run(scenario)


@pytest.mark.rule("SVC-5")
def test_every_request_of_a_turn_carries_the_system_prompt_and_tools(run: Run) -> None:
    # "The system prompt sent to the model" and "tool schemas ... sent with the request": every
    # request, not only a turn's first (a tool turn's second step is a model call like the first).
    async def scenario(k: Kit) -> None:
        k.service.add_system_prompt_section("one", "Section A")
        k.tool("echo", description="echoes", input_schema={"type": "object"})
        a = k.agent(system_prompt="Own prompt")
        k.model.push(fakes.tool_calls(("c1", "echo", "{}")), fakes.text("done"))
        a.send("hi")
        await k.idle(a)
        assert len(k.model.requests) == 2, "a tool step, then the step that answers"
        for number, request in enumerate(k.model.requests, 1):
            assert request.get("system") == "Section A\n\nOwn prompt", f"request {number}: {request.get('system')!r}"
            assert {"name": "echo", "description": "echoes", "input_schema": {"type": "object"}} in (
                request.get("tools") or []), f"request {number} carries no echo tool: {request.get('tools')!r}"

    run(scenario)


@pytest.mark.rule("SVC-5")
@pytest.mark.parametrize("change", ["add", "remove"])
def test_sections_and_tools_changed_during_a_turn_reach_its_next_step(run: Run, change: str) -> None:
    # "The system prompt sent to the model is the assembled sections" and "tool schemas of
    # registered tools are sent with the request": each request is made from what is registered
    # then. A tool running in step 1 removes a section and a tool, adds a section and a tool: step 2's
    # request (a step that opens after the change) carries the new configuration, not the
    # turn's first one.
    async def scenario(k: Kit) -> None:
        remove = k.service.add_system_prompt_section("one", "Section A")
        unregister = k.service.register_tool(fakes.FakeTool("old", "x", description="removed mid-turn"))

        def reconfigure(arguments: object) -> str:
            remove()
            k.service.add_system_prompt_section("two", "Section B")
            if change == "add":
                k.tool("late", description="registered mid-turn", input_schema={"type": "object"})
            else:
                unregister()
            return "reconfigured"

        k.world.add_tool(fakes.FakeTool("setup", handler=reconfigure, description="changes the configuration"))
        a = k.agent()
        k.model.push(fakes.tool_calls(("c1", "setup", "{}")), fakes.text("done"))
        a.send("hi")
        await k.idle(a)
        assert len(k.model.requests) == 2, "a tool step, then the step that answers"
        first, second = k.model.requests
        assert first.get("system") == "Section A"
        assert second.get("system") == "Section B", f"step 2's request carries {second.get('system')!r}"
        assert "old" in [t.get("name") for t in first.get("tools") or []]
        names = [t.get("name") for t in second.get("tools") or []]
        if change == "add":
            assert "late" in names, f"step 2's request offers {names}, not the tool registered in step 1"
        else:
            assert "old" not in names, f"step 2's request still offers the tool removed in step 1: {names}"

    run(scenario)


@pytest.mark.rule("SVC-5", "LOOP-5")
@pytest.mark.parametrize("where", ["agent/step-start", "step/start", "agent/turn-start", "turn/start"])
def test_sections_and_tools_changed_as_the_step_opens_reach_its_request(run: Run, where: str) -> None:
    # LOOP-5: step/start is appended, agent/step-start emitted, then the system prompt assembled
    # and the request made. A plugin that adds a section and registers a tool as the step opens
    # (an agent/step-start listener, a session/event listener on step/start; or earlier, as the
    # turn starts) changes what that step's request carries (SVC-5: the assembled sections, the
    # registered tools). A loop taking the configuration before the step opened sends the old one
    # (session 60's blind round L; every independent loop sends the new one).
    async def scenario(k: Kit) -> None:
        k.service.add_system_prompt_section("one", "Section A")
        a = k.agent()
        changed = [False]

        def change(*args: object) -> None:
            if changed[0]:
                return
            if where in ("step/start", "turn/start"):
                event = args[1] if len(args) > 1 else None
                if not isinstance(event, dict) or event.get("type") != where:
                    return
            changed[0] = True
            k.service.add_system_prompt_section("two", "Section B")
            k.tool("late", description="registered as the step opened", input_schema={"type": "object"})

        k.on(where if where.startswith("agent/") else "session/event", change,
             needs="the test reconfigures the service there")
        k.model.push(fakes.text("answer"))
        a.send("hi")
        await k.idle(a)
        assert changed[0], f"the {where} listener never ran"
        request = k.model.requests[0]
        assert request.get("system") == "Section A\n\nSection B", (
            f"the step's request carries system prompt {request.get('system')!r}: a section added by a {where} listener, "
            "before LOOP-5 assembles the prompt, is in it (SVC-5)")
        names = [t.get("name") for t in request.get("tools") or []]
        assert "late" in names, f"the step's request offers {names}, not the tool a {where} listener registered (SVC-5)"

    run(scenario)


@pytest.mark.rule("SVC-6")
def test_lookup_and_removal(run: Run) -> None:
    async def scenario(k: Kit) -> None:
        a = k.agent("delta")
        assert k.service.get("delta") is a
        assert k.service.get("nobody") is None
        k.on("agent/status", boom)
        a.dispose()
        assert k.service.get("delta") is None, "disposal removes the agent even when a listener throws"
        b = k.agent("delta")
        assert k.service.get("delta") is b

    run(scenario)


@pytest.mark.rule("SVC-3")  # and SVC-2; tagged SVC-3 alone: it needs the persistence feature
def test_a_failed_resume_leaves_its_id_free(run: Run) -> None:
    # resume() of a session the backend does not know: whether it is rejected (or starts afresh)
    # SVC-3 leaves open, but once no live agent has the id, a create() under it is no second live
    # agent (SVC-2) and must succeed.
    async def scenario(k: Kit) -> None:
        service = k.impl.create_service(persistence=k.impl.new_persistence())
        service.register_model(MODEL, FakeModel(default=respond.text("ok")))
        try:
            resumed = await service.resume("delta", "no-such-session", agent_options={"model": MODEL})
        except Exception:
            resumed = None
        if resumed is not None:
            resumed.dispose()
        assert service.get("delta") is None, "no live agent is left under the id"
        try:
            again = service.create("delta", {"model": MODEL})
        except Exception as exc:
            pytest.fail(f"create('delta') after a failed resume of that id raised {exc!r}: no live agent has the id "
                        "(SVC-2 rejects only a second live agent)")
        assert again.id == "delta" and service.get("delta") is again
        await service.close()

    run(scenario)


@pytest.mark.rule("SVC-7", "DISP-1", "DISP-2")
@pytest.mark.parametrize("waterfall", ["system-prompt", "agent/turn-continuation"])
def test_a_plugin_awaiting_close_inside_a_turn_ends_it(run: Run, waterfall: str) -> None:
    # A plugin's waterfall listener shuts the service down and awaits it (a "/quit" command):
    # close() disposes every agent (SVC-7), so the turn the listener is in ends disposed,
    # balanced (DISP-1), the driver ends (DISP-2), and a pending when_idle() resolves (SVC-7).
    # Session 50's review: the reference's close() waited for every driver to exit, this one
    # too, while that driver waited for the listener: nothing ended.
    async def scenario(k: Kit) -> None:
        a = k.agent()
        k.model.push(respond.text("the reply"))
        closing: list[bool] = []  # the listener began the close

        async def quit_plugin(*args: Any) -> Any:
            if not closing:
                closing.append(True)
                await k.service.close()  # how the await ends (it returns, or is cancelled) is not judged
            return await passthrough(*args)

        k.on(waterfall, quit_plugin, needs=f"the test closes the service from a {waterfall} listener")
        a.send("A")
        waiter = a.when_idle()
        await k.until(lambda: bool(closing), f"the {waterfall} listener")
        await k.idle(a, what="the pending when_idle() resolves once the service closed (SVC-7)")
        assert a.status == "disposed"
        task = k.service.driver_task(a)
        assert task is None or task.done(), "the closed service's agent's driver ended (DISP-2)"
        assert k.reasons(a) == [DISPOSED], f"the turn the close landed in ends disposed: {k.types(a)} (DISP-1)"
        try:
            await asyncio.wait_for(_awaited(waiter), k.timeout)
        except TimeoutError:
            raise AssertionError("a when_idle() registered before the close never resolved (SVC-7)") from None

    run(scenario)


async def _awaited(waiter: object) -> None:
    await waiter  # type: ignore[misc]


@pytest.mark.rule("SVC-7")
def test_an_agent_created_while_the_service_closes_is_not_left_live(run: Run) -> None:
    # A supervisor re-creates an agent when one is disposed; during close() that create is either
    # refused or its agent is disposed too: "closing the service disposes every agent it created".
    async def scenario(k: Kit) -> None:
        k.agent("worker")
        made: list[Any] = []

        def supervisor(agent: object, status: str, *_: object) -> None:
            if status == "disposed" and not made:
                try:
                    made.append(k.service.create("worker-restarted", {"model": MODEL}))
                except Exception as exc:  # refused while closing: allowed
                    made.append(exc)

        k.on("agent/status", supervisor, needs="the test re-creates an agent as one is disposed")
        await k.settle()
        await k.service.close()
        assert made, "close() disposed the worker"
        if not isinstance(made[0], Exception):
            assert made[0].status == "disposed", (
                f"an agent created during close() is {made[0].status!r} after close() returned (SVC-7)")
            assert k.service.get("worker-restarted") is None

    run(scenario)


@pytest.mark.rule("SVC-7")
def test_close_disposes_all(run: Run) -> None:
    async def scenario(k: Kit) -> None:
        a = k.agent("one")
        b = k.agent("two")
        k.model.push(respond.hang())
        a.send("A")
        await k.until(lambda: bool(k.model.requests), "A's model call")
        watch = Watch(k, a)
        await k.service.close()
        assert a.status == "disposed" and b.status == "disposed"
        await watch.wait()
        assert k.reasons(a) == [{"kind": "disposed"}]

    run(scenario)


SESSION_ID = r"{}-session-[0-9a-f]{{8}}-[0-9a-f]{{4}}-[0-9a-f]{{4}}-[0-9a-f]{{4}}-[0-9a-f]{{12}}"


@pytest.mark.rule("SVC-1")
def test_fresh_session_per_agent_and_per_service(run: Run) -> None:
    # Two agents of one service, and the same id in a second service (a second run): every
    # create() gets its own {id}-session-{uuid}.
    async def scenario(k: Kit) -> None:
        a = k.agent("alpha")
        b = k.agent("beta")
        other = k.impl.create_service()
        other.register_model(MODEL, FakeModel(default=respond.text("ok")))
        c = other.create("alpha", {"model": MODEL})
        ids = [a.session.id, b.session.id, c.session.id]
        for agent_id, session_id in zip(("alpha", "beta", "alpha"), ids, strict=True):
            assert re.fullmatch(SESSION_ID.format(agent_id), session_id), session_id
        assert len(set(ids)) == 3, ids
        c.send("hi")
        await k.idle(c)
        assert c.session.id == ids[2], "the session id is fixed for the agent's life"
        await other.close()

    run(scenario)


@pytest.mark.rule("SVC-2")
def test_duplicate_live_ids_only(run: Run) -> None:
    # A create_agent() with the id of a live agent made by create() is rejected and disturbs
    # nothing (the live agent keeps its session and runs); once that agent is disposed, the id
    # can be used again, with the caller's session id.
    async def scenario(k: Kit) -> None:
        a = k.agent("gamma")
        session = a.session.id
        with pytest.raises(Exception) as info:  # rejected, in the implementation's words
            k.service.create_agent("gamma", "caller-session", agent_options={"model": MODEL})
        assert info.type is not AssertionError
        assert k.service.get("gamma") is a and a.session.id == session
        a.send("hi")
        await k.idle(a)
        assert k.reasons(a) == [COMPLETED]
        a.dispose()
        b = k.service.create_agent("gamma", "caller-session", agent_options={"model": MODEL})
        k.agents.append(b)
        assert b.session.id == "caller-session" and k.service.get("gamma") is b

    run(scenario)


@pytest.mark.rule("SVC-6", "SVC-2")
@pytest.mark.parametrize("busy", [False, True])
def test_a_disposed_agents_exit_leaves_a_new_agent_of_its_id_registered(run: Run, busy: bool) -> None:
    # An agent disposed (idle, or mid-turn) and at once replaced by a new agent of the same id:
    # the new one is the live agent of that id (SVC-2 frees the id with the disposal), and
    # stays the one looked up (SVC-6) after the old driver has exited. A loop that forgets an
    # agent by its id as its driver exits removes the new one (session 56's adversarial blind
    # round: the suite and the hunt passed it).
    async def scenario(k: Kit) -> None:
        a = k.agent("gamma")
        if busy:
            k.model.push(respond.hang())
            a.send("A")
            await k.until(lambda: bool(k.model.requests), "A's model call")
        a.dispose()
        b = k.agent("gamma")
        k.model.push(fakes.text("B"))
        b.send("B")
        await k.idle(b)
        await k.idle(a)  # the old driver has exited (IDLE-4)
        await k.settle(1.5)
        assert k.service.get("gamma") is b, (
            "the live agent of id 'gamma' is the one created after the disposal, also once the old driver exited "
            "(SVC-6)")
        assert k.reasons(b) == [COMPLETED]

    run(scenario)


@pytest.mark.rule("SVC-2", "SVC-6")
def test_an_agent_re_created_as_its_disposal_is_announced_is_the_live_one(run: Run) -> None:
    # A supervisor's agent/status listener re-creates the agent as it hears of its disposal. The
    # disposed agent is no longer live, and SVC-2 rejects only "a second live agent with an id
    # already in use": the create succeeds, and the new agent is the one looked up (SVC-6). A loop
    # that takes the agent out of its registry only after announcing the disposal refuses it
    # (session 57's blind rounds planted that three times, and the reference did it too).
    async def scenario(k: Kit) -> None:
        a = k.agent("delta")
        made: list[Any] = []

        def supervisor(_agent: object, status: object, *_rest: object) -> None:
            if status == "disposed" and not made:
                try:
                    made.append(k.agent("delta"))
                except Exception as exc:  # what the create raised is the finding
                    made.append(exc)

        k.on("agent/status", supervisor, needs="the test re-creates the agent as its disposal is announced")
        a.dispose()
        await k.until(lambda: bool(made), "the disposal's agent/status('disposed')")
        assert not isinstance(made[0], BaseException), (
            f"re-creating 'delta' from an agent/status('disposed') listener raised {made[0]!r}: the disposed agent "
            "is no longer live (SVC-2 rejects a second live agent only; SVC-6: disposal removes it from the registry)")
        b: AgentHandle = made[0]
        k.model.push(fakes.text("B"))
        b.send("B")
        await k.idle(b)
        await k.idle(a)
        assert k.service.get("delta") is b, "the agent created after the disposal is the one of id 'delta' (SVC-6)"
        assert k.reasons(b) == [COMPLETED]

    run(scenario)


@pytest.mark.rule("SVC-2", "SVC-3")
def test_a_rejected_duplicate_create_leaves_the_backend_alone(run: Run) -> None:
    # SVC-2: a second live agent with an id in use is rejected *before any session is created*.
    # A create that made its session first would, named with the live agent's own session id,
    # start that session's persisted log again, and, named with a new one, leave a session no
    # agent owns. Right after the rejections, a second service over the same backend finds the
    # live agent's flushed turn, and no session under the new id.
    async def scenario(k: Kit) -> None:
        _persistence_or_skip(k.impl)
        store = k.impl.new_persistence()
        first = k.impl.create_service(persistence=store)
        first.register_model(MODEL, FakeModel(default=respond.text("ok")))
        a = first.create_agent("epsilon", "sess-live", agent_options={"model": MODEL})
        a.send("one")
        await k.idle(a)
        for session in ("sess-live", "sess-other"):
            with pytest.raises(Exception) as info:  # rejected, in the implementation's words
                first.create_agent("epsilon", session, agent_options={"model": MODEL})
            assert info.type is not AssertionError
        assert first.get("epsilon") is a
        second = k.impl.create_service(persistence=store)
        second.register_model(MODEL, FakeModel(default=respond.text("ok")))
        b = await second.resume("reader", "sess-live", agent_options={"model": MODEL})
        turns = [e["data"]["turn"] for e in b.session.events if e["type"] == "turn/start"]
        assert turns == [1], (f"the live agent's persisted session holds turns {turns} once a duplicate create of "
                              "its id and session was rejected: it is rejected before any session is created "
                              "(SVC-2), leaving the log as the live agent wrote it")
        try:
            stray = await second.resume("stray", "sess-other", agent_options={"model": MODEL})
        except Exception:
            stray = None  # no such session: nothing was created for the rejected create
        assert stray is None or not stray.session.events, (
            "a rejected create_agent left a session under its id in the backend (SVC-2: rejected before any "
            "session is created)")
        await second.close()
        await first.close()

    run(scenario)


@pytest.mark.rule("SVC-3")
def test_resume_continues_a_session_with_failed_turns(run: Run) -> None:
    # The persisted log holds a completed, a failed and an aborted turn: the resumed agent has
    # the same history and numbers its next turn after the last.
    async def scenario(k: Kit) -> None:
        store = k.impl.new_persistence()
        first = k.impl.create_service(persistence=store)
        first.register_model(MODEL, FakeModel([fakes.text("one-reply"), respond.raises("failed"), respond.hang()], default=respond.text("ok")))
        a = first.create_agent("delta", "sess-9", agent_options={"model": MODEL})
        for prompt in ("one", "two"):
            a.send(prompt)
            await k.idle(a)
        a.send("three")
        await k.settle()
        a.abort()
        await k.idle(a)
        history = a.session.derive_messages()
        await first.close()

        second = k.impl.create_service(persistence=store)
        model = FakeModel(default=respond.text("ok"))
        second.register_model(MODEL, model)
        b = await second.resume("delta", "sess-9", agent_options={"model": MODEL})
        assert b.session.id == "sess-9"
        assert b.session.derive_messages() == history
        b.send("four")
        await k.idle(b)
        assert [e["data"]["turn"] for e in b.session.events if e["type"] == "turn/start"] == [1, 2, 3, 4]
        assert request_texts(model.requests[0])[-1] == "four"
        await second.close()

    run(scenario)


@pytest.mark.rule("SVC-4")
def test_several_configured_agents(run: Run) -> None:
    # Every listed agent exists at once (model and system_prompt optional); each gets its own
    # options; a bad entry names its field.
    async def scenario(k: Kit) -> None:
        k.service.load_config({"agents": [
            {"id": "first", "model": MODEL, "system_prompt": "First prompt."},
            {"id": "second", "model": MODEL},
            {"id": "third"},
        ]})
        agents = [k.service.get(name) for name in ("first", "second", "third")]
        assert all(agent is not None for agent in agents), agents
        first, second, _third = agents
        assert first is not None and second is not None
        k.agents += [a for a in agents if a is not None]
        first.send("hi")
        await k.idle(first)
        second.send("hi")
        await k.idle(second)
        assert k.model.requests[0]["system"].endswith("First prompt.")
        assert "First prompt." not in (k.model.requests[1].get("system") or "")
        with pytest.raises(Exception, match=r"(?i)system_?prompt"):  # the field, in the loop's own casing
            k.service.load_config({"agents": [{"id": "bad", "system_prompt": 12}]})

    run(scenario)


@pytest.mark.rule("SVC-5")
def test_system_prompt_parts_and_tool_entries(run: Run) -> None:
    # Sections alone, the agent's prompt alone, and neither; every registered tool sent as an
    # entry of exactly the stated shape {name, description, input_schema}.
    async def scenario(k: Kit) -> None:
        plain = k.agent("plain")
        plain.send("hi")
        await k.idle(plain)
        assert not k.model.requests[0].get("system"), "no sections and no prompt: no system prompt"
        assert not k.model.requests[0].get("tools"), "no tools registered: none sent"
        own = k.agent("own", system_prompt="Only mine")
        own.send("hi")
        await k.idle(own)
        assert k.model.requests[1]["system"] == "Only mine"
        k.service.add_system_prompt_section("rules", "Section only")
        k.tool("alpha", description="first tool", input_schema={"type": "object", "properties": {"a": {"type": "string"}}})
        k.tool("beta", description="second tool", input_schema={"type": "object"})
        sections = k.agent("sections")
        sections.send("hi")
        await k.idle(sections)
        request = k.model.requests[2]
        assert request["system"] == "Section only"
        assert sorted(request["tools"], key=lambda t: t["name"]) == [
            {"name": "alpha", "description": "first tool", "input_schema": {"type": "object", "properties": {"a": {"type": "string"}}}},
            {"name": "beta", "description": "second tool", "input_schema": {"type": "object"}},
        ]

    run(scenario)


@pytest.mark.rule("SVC-6")
def test_lookup_of_every_kind_of_agent_and_removal(run: Run) -> None:
    # create(), create_agent() and (with the feature) configured agents are looked up by id;
    # an agent disposed while running leaves the registry at once; close() empties it.
    async def scenario(k: Kit) -> None:
        a = k.agent("made")
        b = k.service.create_agent("programmatic", "sess-p", agent_options={"model": MODEL})
        k.agents.append(b)
        ids = ["made", "programmatic"]
        if "configuration" in k.impl.features:
            k.service.load_config({"agents": [{"id": "configured", "model": MODEL}]})
            configured = k.service.get("configured")
            assert configured is not None and configured.id == "configured"
            k.agents.append(configured)
            ids.append("configured")
        assert k.service.get("made") is a and k.service.get("programmatic") is b
        k.model.push(respond.hang())
        a.send("A")
        await k.until(lambda: bool(k.model.requests), "A's model call")
        a.dispose()
        assert k.service.get("made") is None, "a disposed agent leaves the registry"
        await k.service.close()
        assert [k.service.get(i) for i in ids] == [None] * len(ids)

    run(scenario)


@pytest.mark.rule("SVC-7")
def test_close_disposes_busy_idle_and_queued_agents(run: Run) -> None:
    # One agent inside a tool, one whose prompt is queued but not started, one idle: close()
    # disposes all three and every pending waiter resolves.
    async def scenario(k: Kit) -> None:
        hanging = k.tool("hang", hang=True)
        busy = k.agent("busy")
        queued = k.agent("queued")
        idle = k.agent("idle")
        k.model.push(fakes.tool_calls(("c1", "hang", "{}")))
        busy.send("A")
        await k.until(lambda: bool(hanging.calls), "the tool call")
        queued.send("Q")
        watches = [Watch(k, busy), Watch(k, queued)]
        await k.service.close()
        assert [x.status for x in (busy, queued, idle)] == ["disposed"] * 3
        for watch in watches:
            await watch.wait()
        assert k.reasons(busy) == [{"kind": "disposed"}]
        assert len(k.reasons(queued)) == len(k.events(queued, "turn/start")), "balanced"

    run(scenario)


@pytest.mark.rule("SVC-3", "LOG-4")
def test_resume_of_a_log_whose_last_turn_never_closed(run: Run) -> None:
    # The first service is still inside a turn (a step open, the model streaming) when a second
    # service resumes the session, as after a process that died mid-turn. The resumed log is
    # the first log as far as it was persisted, balanced (LOG-4: its open step and turn closed;
    # the spec's reason for that is interrupted), and the next turn numbers after it. No rule
    # says when an event becomes durable: where the backend persisted every append (the
    # reference's does), the loaded history is the first log's and turn 2 ends interrupted.
    async def scenario(k: Kit) -> None:
        store = k.impl.new_persistence()
        first = k.impl.create_service(persistence=store)
        first.register_model(MODEL, FakeModel([fakes.text("one-reply"), respond.hang()], default=respond.text("ok")))
        a = first.create_agent("epsilon", "sess-open", agent_options={"model": MODEL})
        a.send("one")
        await k.idle(a)
        a.send("two")
        await k.until(lambda: sum(e["type"] == "step/start" for e in a.session.events) == 2, "the second turn's step")
        history = a.session.derive_messages()
        logged = [dict(e) for e in a.session.events]

        second = k.impl.create_service(persistence=store)
        model = FakeModel(default=respond.text("ok"))
        second.register_model(MODEL, model)
        b = await second.resume("epsilon-resumed", "sess-open", agent_options={"model": MODEL})
        events: list[dict[str, Any]] = [dict(e) for e in b.session.events]
        problems = repair_violations(logged, events) + clock_violations(events, EPOCH_MS)
        assert problems == [], problems
        if persisted_prefix(logged, events) == len(logged):
            turn_two_end = [e["data"]["reason"] for e in events if e["type"] == "turn/end" and e["data"]["turn"] == 2]
            assert turn_two_end == [{"kind": "interrupted"}], turn_two_end
            assert b.session.derive_messages() == history
        loaded_turns = [e["data"]["turn"] for e in events if e["type"] == "turn/start"]
        b.send("three")
        await k.idle(b)
        assert [e["data"]["turn"] for e in b.session.events if e["type"] == "turn/start"] == [
            *loaded_turns, max(loaded_turns, default=0) + 1]
        assert request_texts(model.requests[0])[-1] == "three"
        await second.close()
        await first.close()

    run(scenario)


@pytest.mark.rule("SVC-4")
@pytest.mark.parametrize(
    ("config", "field"),
    [
        ({"agents": "a"}, "agents"),
        ({"agents": [{"id": "ok"}, "not a mapping"]}, "agents"),
        ({"agents": [{"id": "ok"}, {"id": "ok"}]}, "id"),
        ({"agents": [{"id": "ok"}, {"id": "other", "model": 3}]}, "model"),
        ({"agents": [{"id": "ok"}, {"id": "other", "system_prompt": ["x"]}]}, r"(?i)system_?prompt"),
        # falsy, yet not strings: a check by truthiness lets them through
        ({"agents": [{"id": "ok"}, {"id": "other", "model": 0}]}, "model"),
        ({"agents": [{"id": "ok"}, {"id": "other", "model": False}]}, "model"),
        ({"agents": [{"id": "ok"}, {"id": "other", "system_prompt": []}]}, r"(?i)system_?prompt"),
    ],
    ids=["agents-not-a-list", "entry-not-a-mapping", "duplicate-id", "model-not-a-string", "prompt-not-a-string",
         "model-zero", "model-false", "prompt-empty-list"],
)
def test_bad_configuration_rejected_naming_the_field(run: Run, config: dict[str, Any], field: str) -> None:
    # "A bad configuration is rejected with a clear error that names the field", for the
    # shapes `agents: [{id, model?, system_prompt?}]` rules out. (Whether the agents listed
    # before a bad entry exist afterwards, whether an unknown field is bad, and whether a
    # configuration with no `agents` at all lists none or is bad, SVC-4 leaves open: it requires
    # `id` only. Two loops written from the spec alone read `{}` as no agents.)
    async def scenario(k: Kit) -> None:
        try:
            k.service.load_config(config)
        except Exception as exc:  # rejected: the error must name the field
            assert re.search(field, str(exc)), f"load_config({config!r}) was rejected, but its error {exc!r} does not name the field ({field!r})"
        else:
            pytest.fail(f"load_config({config!r}) was accepted: a bad configuration is rejected, naming the field "
                        f"({field!r}, SVC-4)")

    run(scenario)


@pytest.mark.rule("SVC-4", "SVC-2")
def test_configured_id_already_live_rejected_naming_the_field(run: Run) -> None:
    # A configuration listing an id a live agent already has is a bad configuration (SVC-2:
    # a second live agent with that id is rejected): the error names the field.
    async def scenario(k: Kit) -> None:
        k.service.load_config({"agents": [{"id": "conf"}]})
        first = k.service.get("conf")
        assert first is not None
        k.agents.append(first)
        with pytest.raises(Exception, match="id"):
            k.service.load_config({"agents": [{"id": "conf"}]})
        assert k.service.get("conf") is first

    run(scenario)


@pytest.mark.rule("SVC-3", "LOG-5")
@pytest.mark.parametrize("where", ["mid-tool", "mid-stream", "between-steps"])
def test_resume_of_a_log_interrupted_after_a_closed_step(run: Run, where: str) -> None:
    # The process "dies" inside the second turn: while its first step's tool call runs (the
    # step's assistant/message and tool/call logged, the step open), or, once that step has
    # closed, while the second step streams (a chunk logged, the step open) or between the steps
    # (a slow continuation listener, no step open). The resumed log is the writer's as far as
    # it was persisted plus what balances it: a step/end {turn, step} for a step left open, one
    # turn/end {interrupted} for the turn. No rule says when an event becomes durable (a
    # backend may write at its own checkpoints, session 53's indie72), so the prefix may be
    # shorter than what the writer logged; where the writer persists every append, as the
    # reference does, it is all of it and the repair closes the step each case leaves open.
    async def scenario(k: Kit) -> None:
        store = k.impl.new_persistence()
        first = k.impl.create_service(persistence=store)
        first.register_tool(k.tool("echo", hang=where == "mid-tool"))  # the kit's tool, on the first service too
        script = [fakes.text("one-reply"), fakes.tool_calls(("c1", "echo", "{}"))]
        script.append(respond.text("partial").hang(after=1) if where == "mid-stream" else fakes.text("never"))
        first.register_model(MODEL, FakeModel(script, default=respond.text("ok")))
        if where == "between-steps":
            async def slow(*args: Any) -> Any:
                if args[1] == 2:
                    await asyncio.sleep(60.0)
                return await args[-1]()

            first.on("agent/turn-continuation", slow)
        a = first.create_agent("zeta", "sess-cut", agent_options={"model": MODEL})
        a.send("one")
        await k.idle(a)
        a.send("two")
        if where == "mid-tool":
            await k.until(lambda: any(e["type"] == "tool/call" and e["data"]["turn"] == 2 for e in a.session.events), "the tool call")
            await k.settle()
        elif where == "mid-stream":
            await k.until(lambda: sum(e["type"] == "assistant/chunk" and e["data"]["step"] == 2 for e in a.session.events) >= 1, "the second step's chunk")
        else:
            await k.until(lambda: sum(e["type"] == "step/end" and e["data"]["turn"] == 2 for e in a.session.events) == 1, "the first step's end")
            await k.settle()
        logged = [dict(e) for e in a.session.events]

        second = k.impl.create_service(persistence=store)
        second.register_model(MODEL, FakeModel(default=respond.text("ok")))
        b = await second.resume("zeta-resumed", "sess-cut", agent_options={"model": MODEL})
        events: list[dict[str, Any]] = [dict(e) for e in b.session.events]
        problems = repair_violations(logged, events) + clock_violations(events, EPOCH_MS)
        assert problems == [], problems
        # repair_violations judges the shape (the writer's prefix, then only step/end and
        # turn/end {interrupted}) and the balance; a write-through backend's repair is exact
        if persisted_prefix(logged, events) == len(logged):
            repair = events[len(logged):]
            ends = [e["data"] for e in repair if e["type"] == "step/end"]
            assert ends == _OPEN[where] and [e["type"] for e in repair].count("turn/end") == 1, repair
        # The resumed agent runs on; resumed again later, its session is what it logged: the
        # repair is persisted with the rest, so later events do not follow a gap (SVC-3, LOG-3).
        b.send("three")
        await k.idle(b)
        relogged = [dict(e) for e in b.session.events]
        await second.close()
        again = await _resumed_log(k, store, "zeta-again", "sess-cut")
        assert [e["type"] for e in again] == [e["type"] for e in relogged], (
            "resumed a second time, the session is not what the resumed agent logged: "
            f"{[e['type'] for e in again]} against {[e['type'] for e in relogged]}")
        problems = _log_problems(again)
        assert problems == [], problems
        await first.close()

    run(scenario)


class HeldLoads:
    """The loads of a persistence backend held at a gate, as a database or a file read would
    be: a ``load()`` that returns an awaitable is held until the gate opens; a synchronous one
    cannot be held (no await, so nothing can land in it) and returns at once. The service is
    given the backend itself (an implementation may check that it is the one
    ``new_persistence()`` made): the held ``load`` is its instance's own (:meth:`installed`), or
    the backend's ``hold(hook)`` (:meth:`hooked`)."""

    def __init__(self, load: Callable[..., Any], gate: Gate, kit: Kit) -> None:
        self._load = load
        self._gate = gate
        self._kit = kit
        self.entered = 0
        """Calls of ``load()`` so far."""

    @classmethod
    def installed(cls, store: Any, gate: Gate, kit: Kit) -> HeldLoads | None:
        """Hold ``store``'s loads in place (``None``: its ``load`` cannot be replaced)."""
        held = cls(store.load, gate, kit)
        try:
            store.load = held.load
        except (AttributeError, TypeError):  # __slots__, a frozen or built-in backend
            return None
        return held

    @classmethod
    def hooked(cls, store: Any, gate: Gate, kit: Kit) -> HeldLoads:
        """Hold the loads of a backend living in the implementation's process, through its
        ``hold(hook)`` (the wire's: the child asks before each load)."""
        held = cls(store.load if callable(getattr(store, "load", None)) else _no_load, gate, kit)
        store.hold(held._hook)
        return held

    async def _hook(self, _session: str) -> None:
        self.entered += 1
        self._kit.poke()
        await self._gate.wait()

    def load(self, *args: Any, **kwargs: Any) -> Any:
        self.entered += 1
        self._kit.poke()
        result = self._load(*args, **kwargs)
        if not inspect.isawaitable(result):
            return result
        return self._held(result)

    async def _held(self, result: Awaitable[Any]) -> Any:
        await self._gate.wait()
        return await result


@pytest.mark.rule("CANCEL-W0", "IDLE-2")
@pytest.mark.parametrize("cancels", [1, 2])
def test_work_cancelled_right_after_a_resume_releases_its_waiter(run: Run, cancels: int) -> None:
    # CANCEL-W0 right after resume() (SVC-3) rather than create(): send(A); w = when_idle();
    # cancel() (and a second cancel(), with nothing left to cancel, CANCEL-3) before the resumed
    # agent's driver first runs. A is dropped, w is released, the next prompt runs (an
    # independent loop, 2026-12-05, left w hanging after two cancels of a resumed agent: the hunt's
    # `resume: actor after creation of a: cancel; cancel`).
    async def scenario(k: Kit) -> None:
        _persistence_or_skip(k.impl)
        store = k.impl.new_persistence()
        await _persisted(k, store, "r", "sess-r")
        second = k.impl.create_service(persistence=store)
        second.register_model(MODEL, FakeModel(default=respond.text("ok")))
        b = await second.resume("r", "sess-r", agent_options={"model": MODEL})
        loaded = len(b.session.events)
        b.send("A")
        watch = Watch(k, b)
        for _ in range(cancels):
            b.cancel()
        await watch.wait()
        await k.settle()
        assert len(b.session.events) == loaded, "the cancelled prompt opened a turn (CANCEL-W0)"
        b.send("B")
        await k.idle(b)
        started = [e for e in b.session.events[loaded:] if e["type"] == "turn/start"]
        assert len(started) == 1 and k.prompts(b)[-1] == ["B"], "B, sent after the dropped A, runs alone"
        await second.close()

    run(scenario)


def _no_load(*_args: Any, **_kwargs: Any) -> Any:
    raise AssertionError("a hooked backend's loads happen where it lives")


def _persistence_or_skip(impl: Implementation) -> None:
    if "persistence" not in impl.features:
        pytest.skip("not-applicable: feature persistence not supported")


def _opaque_skip(opaque: list[str]) -> None:
    if opaque:
        pytest.skip(f"not-applicable: the persistence backend ({opaque[0]}) cannot be held at a gate: it has no "
                    "load() in this process that can be replaced, nor a hold() to hold it where it lives")


async def _persisted(k: Kit, store: Any, agent_id: str, session_id: str) -> None:
    """A first service writes one completed turn of ``session_id`` to ``store``, then closes."""
    first = k.impl.create_service(persistence=store)
    first.register_model(MODEL, FakeModel(default=respond.text("ok")))
    a = first.create_agent(agent_id, session_id, agent_options={"model": MODEL})
    a.send("one")
    await k.idle(a)
    await first.close()


async def _held_service(k: Kit, opaque: list[str]) -> tuple[ServiceHandle, HeldLoads, Gate] | None:
    """A service over a store holding agent ``x``'s session ``sess-1``, whose ``load()`` waits
    at the returned gate; ``None`` (the backend's name noted in ``opaque``) when the backend has
    no ``load()`` in this process to hold."""
    store = k.impl.new_persistence()
    hooked = not callable(getattr(store, "load", None))
    if hooked and not callable(getattr(store, "hold", None)):
        opaque.append(type(store).__name__)
        return None
    await _persisted(k, store, "x", "sess-1")
    gate = k.gate("load")
    held = HeldLoads.hooked(store, gate, k) if hooked else HeldLoads.installed(store, gate, k)
    if held is None:
        opaque.append(type(store).__name__)
        return None
    service = k.impl.create_service(persistence=store)
    service.register_model(MODEL, FakeModel(default=respond.text("ok")))
    return service, held, gate


HeldBody = Callable[[Kit, ServiceHandle, HeldLoads, Gate], Awaitable[None]]


def _run_held(run: Run, impl: Implementation, body: HeldBody, *, close: bool = True) -> None:
    """Run ``body`` on a service whose persisted session ``sess-1`` of agent ``x`` loads only once
    its gate opens (:func:`_held_service`); the gate is opened and, with ``close``, the service
    closed afterwards whatever happened. Not applicable without persistence, or with a backend
    whose ``load()`` is not in this process."""
    _persistence_or_skip(impl)
    opaque: list[str] = []

    async def scenario(k: Kit) -> None:
        made = await _held_service(k, opaque)
        if made is None:
            return
        service, held, gate = made
        try:
            await body(k, service, held, gate)
        finally:
            gate.open()
            if close:
                await service.close()

    run(scenario)
    _opaque_skip(opaque)


async def _resuming(k: Kit, service: ServiceHandle, held: HeldLoads, n: int) -> asyncio.Future[AgentHandle]:
    """Start ``service.resume("x", "sess-1")`` as the ``n``-th load and wait until it is inside
    its load (or, with a load that cannot be held, done)."""
    task: asyncio.Future[AgentHandle] = asyncio.ensure_future(
        service.resume("x", "sess-1", agent_options={"model": MODEL}))
    task.add_done_callback(lambda _task: k.poke())
    await k.until(lambda: held.entered >= n or task.done(), f"resume() {n}'s load")
    return task


async def _outcome(k: Kit, task: asyncio.Future[AgentHandle]) -> tuple[AgentHandle | None, Exception | None]:
    try:
        return await asyncio.wait_for(asyncio.shield(task), k.timeout), None
    except TimeoutError:
        raise AssertionError("resume() did not finish once its load was released") from None
    except Exception as exc:
        assert not isinstance(exc, AssertionError), exc  # rejected in the implementation's words
        return None, exc


@pytest.mark.rule("SVC-2")
def test_create_while_a_resume_of_the_id_loads(run: Run, impl: Implementation) -> None:
    # resume("x") has checked the id and awaits the backend's load; create("x") lands in that
    # await. Exactly one of them makes the live agent x: the resume is rejected or the create
    # was, and the registry holds the one that succeeded (the created agent is not silently
    # replaced by the resumed one, nor left live beside it). Which one wins SVC-2 leaves open.
    async def body(k: Kit, service: ServiceHandle, held: HeldLoads, gate: Gate) -> None:
        resuming = await _resuming(k, service, held, 1)
        created: AgentHandle | None = None
        create_error: Exception | None = None
        try:
            created = service.create("x", {"model": MODEL})
        except Exception as exc:
            assert not isinstance(exc, AssertionError), exc
            create_error = exc
        gate.open()
        resumed, resume_error = await _outcome(k, resuming)
        assert (created is None) != (resumed is None), (
            "exactly one live agent x: "
            + ("create() and resume() both succeeded" if created is not None else
               f"create() failed ({create_error!r}) and resume() failed ({resume_error!r})"))
        winner = created if created is not None else resumed
        assert winner is not None
        assert service.get("x") is winner, (
            f"get('x') is not the agent that succeeded ({'create' if created is not None else 'resume'})")
        assert winner.status != "disposed", winner.status

    _run_held(run, impl, body)


@pytest.mark.rule("SVC-2")
def test_two_resumes_of_one_id_at_once(run: Run, impl: Implementation) -> None:
    # Two resume("x") of one stored session, the second started while the first awaits its
    # load: exactly one succeeds, and get("x") is that one (which of the two SVC-2 leaves open).
    async def body(k: Kit, service: ServiceHandle, held: HeldLoads, gate: Gate) -> None:
        tasks = [await _resuming(k, service, held, n) for n in (1, 2)]
        gate.open()
        outcomes = [await _outcome(k, task) for task in tasks]
        winners = [agent for agent, _error in outcomes if agent is not None]
        assert len(winners) == 1, (
            f"exactly one of two concurrent resume('x') succeeds; {len(winners)} did"
            + (f" (errors: {[repr(e) for _a, e in outcomes]})" if not winners else ""))
        assert service.get("x") is winners[0], "get('x') is not the resumed agent"
        assert winners[0].status != "disposed", winners[0].status

    _run_held(run, impl, body)


@pytest.mark.rule("SVC-7")
def test_a_resume_loading_while_the_service_closes_leaves_no_live_agent(run: Run, impl: Implementation) -> None:
    # "Closing the service disposes every agent it created": resume("x") awaits its load when
    # close() is called. Once both are done, the resume was rejected, or the agent it made is
    # disposed and out of the registry; never a live agent on a closed service.
    async def body(k: Kit, service: ServiceHandle, held: HeldLoads, gate: Gate) -> None:
        resuming = await _resuming(k, service, held, 1)
        closing = asyncio.ensure_future(service.close())
        closing.add_done_callback(lambda _task: k.poke())
        await asyncio.sleep(0)
        gate.open()
        resumed, _error = await _outcome(k, resuming)
        await k.until(closing.done, "close() to return")
        closing.result()
        if resumed is not None:
            assert resumed.status == "disposed", (
                f"resume() finished after close() began, and its agent is {resumed.status!r}, not disposed")
            assert service.get("x") is None, "a closed service still lists the resumed agent"

    _run_held(run, impl, body, close=False)  # the body closed it


@pytest.mark.rule("SVC-2", "SVC-3")
@pytest.mark.parametrize("where", ["mid-stream", "idle"])
def test_a_resume_under_a_live_agents_own_id_is_refused_and_leaves_its_session_as_written(run: Run,
                                                                                        where: str) -> None:
    # A "reopen" of a session while its agent is live (a UI clicked twice, a supervisor not
    # knowing the agent still runs): resume(id, its own session) on the same service. SVC-2: a
    # second live agent under an id in use is rejected before any session is created, so the
    # refused call leaves the backend as the writer left it. Observed two ways: the call raises
    # and the live agent goes on; and, resumed once it is done, the session is what the agent
    # logged (a loop that loads, and so repairs, the open turn before checking the id wrote a
    # turn/end {interrupted} into the middle of the live turn).
    async def scenario(k: Kit) -> None:
        _persistence_or_skip(k.impl)
        store = k.impl.new_persistence()
        service = k.impl.create_service(persistence=store)
        gate = k.gate()
        service.register_model(MODEL, FakeModel([fakes.text("one"), respond.text("two, slowly").gate(gate, before=2)],
                                                default=respond.text("ok")))
        a = service.create_agent("eta", "sess-live", agent_options={"model": MODEL})
        a.send("one")
        await k.idle(a)
        if where == "mid-stream":
            a.send("two")
            await k.until(lambda: any(e["type"] == "assistant/chunk" and e["data"]["turn"] == 2
                                      for e in a.session.events), "turn 2's first chunk")
        with pytest.raises(Exception) as info:  # rejected, in the implementation's words
            await service.resume("eta", "sess-live", agent_options={"model": MODEL})
        assert info.type is not AssertionError
        assert service.get("eta") is a and a.status != "disposed"
        gate.set()
        if where == "idle":
            a.send("two")
        await k.idle(a)
        logged = [dict(e) for e in a.session.events]
        await service.close()
        loaded = await _resumed_log(k, store, "eta-later", "sess-live")
        assert [e["type"] for e in loaded] == [e["type"] for e in logged], (
            "the session resumed once its agent was done is not what the agent logged: "
            f"{[e['type'] for e in loaded]} against {[e['type'] for e in logged]}")

    run(scenario)
