"""The session header through the adapter: creation metadata (``cwd``, a parent session, the
seeded creation time) on ``SessionHandle.header``, persisted by both backends and restored on
resume, as the original loop does."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import simulator
from conformance.adapter import ServiceHandle
from conformance.reference_adapter import reference
from reference_loop import JsonlPersistence
from reference_loop.session import SessionValidationError


def _in_simulation(body: Any) -> Any:
    result = simulator.run(body, seed=3)
    if result.error is not None:
        raise result.error
    return result.value


def _backends(tmp_path: Path) -> dict[str, Any]:
    return {"memory": reference.new_persistence(), "jsonl": JsonlPersistence(tmp_path / "sessions")}


@pytest.mark.parametrize("backend", ["memory", "jsonl"])
def test_header_is_exposed_persisted_and_restored_on_resume(tmp_path: Path, backend: str) -> None:
    store = _backends(tmp_path)[backend]

    async def body() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        first: ServiceHandle = reference.create_service(persistence=store)
        agent = first.create_agent("a", "s-1", meta={"cwd": "/work/project", "parent_session": "s-0"})
        created = dict(agent.session.header)
        agent.session.append("turn/start", {"turn": 1, "trigger": {"kind": "prompt"}})
        agent.session.append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
        await store.flush("s-1")
        await first.close()
        fresh = reference.create_service()
        plain = dict(fresh.create("b").session.header)
        second = reference.create_service(persistence=store)
        resumed = await second.resume("a2", "s-1")
        return created, dict(resumed.session.header), plain

    created, restored, plain = _in_simulation(body)
    assert created == {"id": "s-1", "created": 1767225600000, "cwd": "/work/project", "parent_session": "s-0"}
    assert restored == created  # the header it was created with, not a new one
    assert plain["cwd"] is None and plain["parent_session"] is None and plain["id"].startswith("b-session-")


def test_header_is_read_only() -> None:
    async def body() -> dict[str, Any]:
        service = reference.create_service()
        session = service.create_agent("a", "s-1", meta={"cwd": "/x"}).session
        session.header["cwd"] = "/elsewhere"
        return dict(session.header)

    assert _in_simulation(body)["cwd"] == "/x"


def test_header_fields_must_be_strings() -> None:
    async def body() -> None:
        reference.create_service().create_agent("a", "s-1", meta={"cwd": 42})

    with pytest.raises(SessionValidationError, match="'cwd' must be a string"):
        _in_simulation(body)


def test_a_log_without_a_header_still_resumes(tmp_path: Path) -> None:
    directory = tmp_path / "old"
    directory.mkdir()
    (directory / "s-1.jsonl").write_text(
        '{"data": {"turn": 1, "trigger": {"kind": "prompt"}}, "seq": 0, "time": 5, "type": "turn/start"}\n'
        '{"data": {"turn": 1, "reason": {"kind": "completed"}}, "seq": 1, "time": 6, "type": "turn/end"}\n')

    async def body() -> dict[str, Any]:
        service = reference.create_service(persistence=JsonlPersistence(directory))
        return dict((await service.resume("a", "s-1")).session.header)

    assert _in_simulation(body) == {"id": "s-1", "created": 5, "cwd": None, "parent_session": None}
