"""The service: create, create on a session id, resume (memory and JSONL), configuration."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from conformance.fakes.model import FakeModel, respond
from reference_loop import (
    AgentLoopService,
    ConfigError,
    InMemoryPersistence,
    JsonlPersistence,
    PersistenceError,
    ServiceError,
)
from reference_loop.config import parse_config

from .conftest import turn_ends


class FixedSources:
    def __init__(self) -> None:
        self.n = 0

    def now_ms(self) -> int:
        return 42

    def uuid(self) -> str:
        self.n += 1
        return f"uuid-{self.n}"

    def next_id(self, prefix: str) -> str:
        return f"{prefix}-1"


def test_create_session_ids_and_duplicates(arun: Any) -> None:
    async def body() -> None:
        svc = AgentLoopService(sources=FixedSources())
        a = svc.create("a", {"model": "m"})
        assert a.session.id == "a-session-uuid-1" and a.options == {"model": "m"}
        b = svc.create_agent(agent_id="b", session_id="acp-123", meta={"cwd": "/x"})
        assert b.session.id == "acp-123" and b.meta == {"cwd": "/x"}
        with pytest.raises(ServiceError, match="'a' already exists"):
            svc.create("a")
        with pytest.raises(TypeError, match="model must be a string"):
            svc.create("c", {"model": 3})
        assert svc.get("a") is a
        a.dispose()
        assert svc.get("a") is None
        assert svc.create("a").session.id == "a-session-uuid-2"
        await svc.close()
        assert svc.agents() == []

    arun(body)


def test_dispose_removes_from_registry_even_when_status_listener_throws(arun: Any) -> None:
    async def body() -> None:
        svc = AgentLoopService()
        svc.bus.on("agent/status", lambda *_: 1 / 0)
        agent = svc.create("a")
        agent.dispose()
        assert svc.get("a") is None and agent.status == "disposed"

    arun(body)


def test_resume_from_memory_continues_turns_and_history(arun: Any) -> None:
    async def body() -> None:
        store = InMemoryPersistence()
        first = AgentLoopService(persistence=store)
        first.register_model("m", FakeModel([respond.text("one")]))
        agent = first.create("a", {"model": "m"})
        agent.send("hello")
        await agent.when_idle()
        session_id = agent.session.id
        await first.close()

        second = AgentLoopService(persistence=store)
        model = FakeModel([respond.text("two")])
        second.register_model("m", model)
        resumed = await second.resume("a", session_id, {"model": "m"})
        assert resumed.session.id == session_id
        resumed.send("again")
        await resumed.when_idle()
        starts = [e["data"]["turn"] for e in resumed.session.events if e["type"] == "turn/start"]
        assert starts == [1, 2]
        assert [m["role"] for m in model.requests[0]["messages"]] == ["user", "assistant", "user"]
        with pytest.raises(ServiceError, match="no persisted session 'nope'"):
            await second.resume("z", "nope")

    arun(body)


def test_resume_without_persistence_is_rejected(arun: Any) -> None:
    async def body() -> None:
        with pytest.raises(ServiceError, match="no session persistence backend"):
            await AgentLoopService().resume("a", "s")

    arun(body)


def test_jsonl_round_trip_and_repair_of_unclosed_turn(arun: Any, tmp_path: Path) -> None:
    async def body() -> None:
        store = JsonlPersistence(tmp_path)
        svc = AgentLoopService(persistence=store)
        svc.register_model("m", FakeModel([respond.text("one")]))
        agent = svc.create_agent("a", "s/1")
        agent.options["model"] = "m"
        agent.send("hi")
        await agent.when_idle()
        path = store.path("s/1")
        assert path.name == "s%2F1.jsonl"
        header, *lines = path.read_text().splitlines()
        assert json.loads(header) == {"header": {"id": "s/1", "created": agent.session.header["created"],
                                                 "cwd": None, "parent_session": None}}
        assert [json.loads(line)["type"] for line in lines][:2] == ["turn/start", "user/message"]
        # Simulate a process that died mid-turn: a turn/start and step/start, no end.
        t = json.loads(lines[-1])["time"]
        with path.open("a") as handle:
            for event in (
                {
                    "type": "turn/start",
                    "seq": len(lines),
                    "time": t,
                    "data": {"turn": 2, "trigger": {"kind": "message", "source": {"kind": "user"}}},
                },
                {
                    "type": "step/start",
                    "seq": len(lines) + 1,
                    "time": t,
                    "data": {"turn": 2, "step": 1},
                },
            ):
                handle.write(json.dumps(event) + "\n")
            handle.write('{"type": "torn')
        await svc.close()

        again = AgentLoopService(persistence=JsonlPersistence(tmp_path))
        resumed = await again.resume("a", "s/1")
        tail = resumed.session.events[-2:]
        assert [e["type"] for e in tail] == ["step/end", "turn/end"]
        assert tail[-1]["data"] == {"turn": 2, "reason": {"kind": "interrupted"}}
        assert [e["seq"] for e in resumed.session.events] == list(
            range(len(resumed.session.events))
        )
        # The repair was written back: loading again needs no further repair.
        reloaded = await JsonlPersistence(tmp_path).load("s/1")
        assert reloaded is not None and reloaded[-1]["data"]["reason"] == {"kind": "interrupted"}
        assert len(reloaded) == len(resumed.session.events)

    arun(body)


def test_jsonl_corrupt_line_names_file_and_line(arun: Any, tmp_path: Path) -> None:
    (tmp_path / "s.jsonl").write_text(
        '{"type": "turn/start", "seq": 0, "time": 1, "data": {}}\nnot json\n{}\n'
    )

    async def body() -> None:
        with pytest.raises(PersistenceError, match=r"s\.jsonl:2: not a JSON event"):
            await JsonlPersistence(tmp_path).load("s")

    arun(body)


@pytest.mark.parametrize(
    ("document", "message"),
    [
        (None, "config: must be a mapping"),
        ({}, "config: agents: required"),
        ({"agents": {}}, "agents: must be a list"),
        ({"agents": [{"model": "m"}]}, r"agents\[0\]\.id: required"),
        ({"agents": [{"id": ""}]}, r"agents\[0\]\.id: must be a non-empty string"),
        ({"agents": [{"id": "a"}, {"id": "a"}]}, r"agents\[1\]\.id: duplicate"),
        ({"agents": [{"id": "a", "model": 3}]}, r"agents\[0\]\.model: must be a string"),
        (
            {"agents": [{"id": "a", "systemPrompt": "x"}]},
            r"agents\[0\]\.systemPrompt: unknown field",
        ),
        ({"agents": [], "extra": 1}, "config: extra: unknown field"),
    ],
)
def test_bad_configuration_names_the_field(document: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_config(document)


def test_load_config_from_yaml_creates_agents(arun: Any, tmp_path: Path) -> None:
    good = tmp_path / "loopkit.yml"
    good.write_text("agents:\n  - id: a\n    model: m\n    system_prompt: Be brief.\n  - id: b\n")
    bad = tmp_path / "bad.yml"
    bad.write_text("agents:\n  - id: a\n    model: [1\n")

    async def body() -> None:
        svc = AgentLoopService()
        agents = svc.load_config(good)
        assert [a.id for a in agents] == ["a", "b"]
        assert svc.get("a") is agents[0] and agents[0].options == {
            "model": "m",
            "system_prompt": "Be brief.",
        }
        assert agents[0].session.id.startswith("a-session-")
        with pytest.raises(
            ConfigError, match=r"agents\[0\]\.id: an agent with id 'a' already exists"
        ):
            svc.load_config({"agents": [{"id": "a"}]})
        with pytest.raises(ConfigError, match=r"bad\.yml:\d+: invalid YAML"):
            svc.load_config(bad)
        with pytest.raises(ConfigError, match="cannot read configuration"):
            svc.load_config(tmp_path / "missing.yml")
        await svc.close()

    arun(body)


def test_queued_prompts_after_dispose_and_close(arun: Any) -> None:
    async def body() -> None:
        svc = AgentLoopService()
        svc.register_model("m", FakeModel([respond.text("x")]))
        agent = svc.create("a", {"model": "m"})
        agent.send("go")
        await agent.when_idle()
        await svc.close()
        assert turn_ends(agent) == [{"kind": "completed"}]
        with pytest.raises(ServiceError, match="closed"):
            svc.create("b")

    arun(body)


def test_agent_class_is_overridable(arun: Any) -> None:
    from reference_loop import ReactLoopAgent

    class Custom(ReactLoopAgent):
        pass

    class CustomService(AgentLoopService):
        agent_class = Custom

    async def body() -> None:
        svc = CustomService()
        assert type(svc.create("a")) is Custom
        await svc.close()

    arun(body)
