"""Section 11: the service (SVC-1..7)."""

from __future__ import annotations

import re

import pytest

from conformance import fakes
from conformance.fakes import FakeModel, respond
from conformance.harness import MODEL, Kit

from ._support import COMPLETED, Run, Watch, boom, request_texts


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
        with pytest.raises(Exception, match="beta"):
            k.service.create("beta", {"model": MODEL})
        with pytest.raises(Exception, match="beta"):
            k.service.create_agent("beta", "other-session", agent_options={"model": MODEL})
        assert k.service.get("beta") is a

    run(scenario)


@pytest.mark.rule("SVC-3")
def test_resume_continues_session(run: Run) -> None:
    async def scenario(k: Kit) -> None:
        store = k.impl.new_persistence()
        first = k.impl.create_service(persistence=store)
        first.register_model(MODEL, FakeModel([fakes.text("one-reply")], default=respond.text("ok")))
        a = first.create_agent("gamma", "sess-1", agent_options={"model": MODEL})
        a.send("one")
        await k.idle(a)
        history = a.session.derive_messages()
        await first.close()

        second = k.impl.create_service(persistence=store)
        model = FakeModel(default=respond.text("ok"))
        second.register_model(MODEL, model)
        b = await second.resume("gamma", "sess-1", agent_options={"model": MODEL})
        assert b.session.id == "sess-1"
        assert b.session.derive_messages() == history
        b.send("two")
        await k.idle(b)
        assert [e["data"]["turn"] for e in b.session.events if e["type"] == "turn/start"] == [1, 2]
        assert request_texts(model.requests[0]) == ["one", "one-reply", "two"]
        await second.close()

        with pytest.raises(Exception, match=r"(?i)persist"):
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
