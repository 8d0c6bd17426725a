"""The one world: building, acting, listening, actors, waiter sampling, settling, traces."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

import simulator
from conformance import mutants
from conformance.fakes import respond
from conformance.impl import resolve
from conformance.scenario import World, engine, load, loop_scenario
from conformance.scenario.model import Action, Actor, Listener, ModelSpec, Scenario, ToolSpec
from conformance.scenario.trace import Trace
from conformance.scenario.world import ScenarioSetupError
from conformance.scenario.yaml_format import dump, load_text
from simulator.strategies import RandomStrategy

from ..conformance_meta.broken_adapters import (
    OwnBackendsOnly,
    RepairAnnounced,
    SlowInject,
    StrandedInject,
    SupervisedDriver,
)

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "cassettes" / "llm"
WINDOWS = ROOT / "tests" / "hunt_windows"  # hunt windows kept as regressions, on their schedule
REFERENCE = resolve(None)


def _kinds(trace: Trace, *keep: str) -> list[str]:
    return [e["kind"] for e in trace.timeline if not keep or e["kind"] in keep]


def _ops(trace: Trace) -> list[tuple[str, str, Any]]:
    return [(e["by"], e["op"], e.get("text") or e.get("waiter") or e.get("reason")) for e in trace.timeline
            if e["kind"] == "op"]


# --------------------------------------------------------------------------- actors


def test_actors_act_at_their_times_and_after_events() -> None:
    sc = load_text(textwrap.dedent("""\
        name: actors
        model: {script: ["one", "two", "three"], default: ok}
        actors:
          - {name: late, at: 2.5, do: [{send: C}]}
          - {name: early, at: 1, do: [{send: A}, {sleep: 0.5}, {send: B}]}
          - {name: follower, after: {event: agent/turn-end, where: {turn: 1}}, do: [{steer: after-one}]}
        """))
    report = engine.run_one(sc, REFERENCE)
    assert report.ok, report.trace.summary()
    runs = [(e["t_us"], e["actor"]) for e in report.trace.timeline if e["kind"] == "actor/run"]
    assert runs == [(1_000_000, "early"), (1_000_000, "follower"), (2_500_000, "late")]
    assert [op for op in _ops(report.trace) if op[0] != "world"] == [
        ("early", "send", "A"), ("follower", "steer", "after-one"), ("early", "send", "B"), ("late", "send", "C")]


def test_an_actor_that_raises_is_a_problem_and_the_run_goes_on() -> None:
    @loop_scenario(agents=(), models=())
    async def raises(w: World) -> None:
        w.model(["fine"])
        w.agent("a")
        w.spawn(lambda: 1 / 0, name="broken")
        w.send("a", "hi")

    report = engine.run_one(raises, REFERENCE)
    assert not report.ok
    assert [f["check"] for f in report.trace.failures] == ["problems"]
    assert "actor:broken: raised ZeroDivisionError" in report.trace.failures[0]["message"]
    assert "actor/error" in _kinds(report.trace)
    assert any(e["kind"] == "log" and e["type"] == "turn/end" for e in report.trace.timeline), "the run went on"


def test_a_model_called_past_its_script_fails_the_run() -> None:
    sc = Scenario("exhausted", models=(ModelSpec("fake", (respond.text("only"),)),),
                  actors=(Actor((Action("send", text="A"), Action("when_idle", name="w"), Action("wait_idle", name="w"),
                                 Action("send", text="B")), at=0.0),))
    report = engine.run_one(sc, REFERENCE)
    assert not report.ok
    assert "model:fake" in report.trace.failures[0]["message"] and "call #2" in report.trace.failures[0]["message"]


def test_untriggered_listeners_and_actors_are_recorded() -> None:
    sc = Scenario("untriggered",
                  listeners=(Listener("agent/error", (Action("cancel"),), name="on-error", optional=True),),
                  actors=(Actor((Action("send", text="A"),), name="caller", at=0.0),
                          Actor((Action("send", text="B"),), name="never", after="agent/error")),
                  models=(ModelSpec("fake", (), respond.text("ok")),))
    report = engine.run_one(sc, REFERENCE)
    assert report.ok, report.trace.summary()
    assert report.trace.untriggered == ["never", "on-error"]
    untriggered = {e["name"]: e["optional"] for e in report.trace.timeline if e["kind"] == "untriggered"}
    assert untriggered == {"on-error": True, "never": False}


# --------------------------------------------------------------------------- listeners


def test_a_waterfall_listener_acts_before_or_after_next() -> None:
    def run(when: str) -> list[str]:
        sc = Scenario("wf", models=(ModelSpec("fake", (respond.tool_call("slow"),), respond.text("ok")),),
                      tools=(ToolSpec("slow", latency=1.0),),
                      listeners=(Listener("tools/execute", (Action("steer", text=f"S-{when}"),), name="l", when=when),),
                      actors=(Actor((Action("send", text="A"),), at=0.0),))
        report = engine.run_one(sc, REFERENCE)
        assert report.ok, report.trace.summary()
        return [e["kind"] if e["kind"] != "op" else f"op:{e['op']}" for e in report.trace.timeline]

    before, after = run("before"), run("after")
    assert before.index("op:steer") < before.index("tool/start")  # the tool runs inside next()
    assert after.index("op:steer") > after.index("tool/done")


def test_a_listener_acting_on_the_nth_event_counts_matching_events() -> None:
    sc = Scenario("nth", models=(ModelSpec("fake", (), respond.text("ok")),),
                  listeners=(Listener("agent/status", (Action("send", text="from-listener"),), name="l",
                                      where={"status": "idle"}, nth=2),),
                  actors=(Actor((Action("send", text="A"), Action("when_idle", name="w"), Action("wait_idle", name="w"),
                                 Action("send", text="B")), at=0.0),))
    report = engine.run_one(sc, REFERENCE)
    assert report.ok, report.trace.summary()
    fired = [e for e in report.trace.timeline if e["kind"] == "listener"]
    assert len(fired) == 1
    before = [e for e in report.trace.timeline[: report.trace.timeline.index(fired[0])] if e["kind"] == "agent/status"]
    assert [e["status"] for e in before] == ["running", "idle", "running", "idle"]


# --------------------------------------------------------------------------- waiters


def test_a_waiter_release_is_sampled_between_the_observations_it_happened_between() -> None:
    sc = load("conformance/scenario/examples/window2.yaml")
    report = engine.run_one(sc, REFERENCE)
    assert report.ok
    tl = report.trace.timeline
    rel = next(i for i, e in enumerate(tl) if e["kind"] == "waiter/released" and e["waiter"] == "w")
    assert tl[rel]["precise"] is True
    # Released on B's running -> idle transition, before its status event reached any listener.
    assert tl[rel - 1]["kind"] == "agent/status" and tl[rel - 1]["status"] == "idle"
    assert tl[rel]["status"] == "idle" and tl[rel]["log_len"] == sum(1 for e in tl[:rel] if e["kind"] == "log")

    buggy = engine.run_one(sc, resolve("mutant:w2-settle-unconditionally"))
    early = next(e for e in buggy.trace.timeline if e["kind"] == "waiter/released" and e["waiter"] == "w")
    assert early["log_len"] == 0, "the buggy loop releases w before B's turn even starts"


def test_a_waiter_that_never_resolves_is_a_liveness_problem() -> None:
    class Stuck:
        """A when_idle() that never resolves (and has no done())."""

        def __await__(self) -> Any:
            return asyncio.get_running_loop().create_future().__await__()

    @loop_scenario(agents=(), models=())
    async def stuck(w: World) -> None:
        w.model([], default=respond.text("ok"))
        agent = w.agent("a")
        agent.when_idle = Stuck  # type: ignore[method-assign]
        w.when_idle("a", "w")

    report = engine.run_one(stuck, REFERENCE)
    problems = [f["message"] for f in report.trace.failures]
    assert any("'w'" in m and "never resolved although the agent settled" in m for m in problems), problems


def test_a_waiter_registered_while_the_world_waits_for_the_others_is_waited_for() -> None:
    # The world's last check waits for the pending waiters; one registered meanwhile (here once
    # the first resolves, as a listener may) is waited for too, not judged at once.
    calls: list[int] = []

    class Later:
        """A when_idle() resolving ten virtual seconds after it is awaited, the first time (w1);
        half a second after, later (the world's own settling waiters)."""

        def __init__(self) -> None:
            calls.append(1)
            self.delay = 10.0 if len(calls) == 1 else 0.5

        def __await__(self) -> Any:
            return asyncio.sleep(self.delay).__await__()

    @loop_scenario(agents=(), models=())
    async def chained(w: World) -> None:
        w.model([], default=respond.text("ok"))
        agent = w.agent("a")
        agent.when_idle = Later  # type: ignore[method-assign]
        w.when_idle("a", "w1")

        async def then() -> None:
            await asyncio.sleep(5.0)  # the world is waiting for w1 in its last check by now
            agent.when_idle = lambda: asyncio.sleep(10.0)  # type: ignore[method-assign]
            w.when_idle("a", "w2")

        later.append(asyncio.ensure_future(then()))

    later: list[asyncio.Future[None]] = []
    report = engine.run_one(chained, REFERENCE)
    assert report.ok, report.trace.summary()
    released = [e["waiter"] for e in report.trace.timeline if e["kind"] == "waiter/released"]
    assert [name for name in released if not name.startswith("settle-")] == ["w1", "w2"], released


def test_an_inject_that_never_settles_is_a_named_problem_not_a_deadlock() -> None:
    sc = load_text(textwrap.dedent("""\
        name: stranded-inject
        model: {script: ["one"], default: ok}
        actors:
          - {name: injector, at: 0, do: [{inject: {text: C, wait: true}}, {dispose: a}]}
        """))
    report = engine.run_one(sc, StrandedInject())
    assert report.trace.outcome == "completed", report.trace.summary()
    [failure] = report.trace.failures
    assert failure["check"] == "problems" and failure["rules"] == ["INJ-1", "INJ-2", "DISP-2"], failure
    assert "inject('C') by injector on agent 'a' never settled" in failure["message"]
    assert any(e["kind"] == "op" and e["op"] == "dispose" for e in report.trace.timeline), "the actor went on"
    assert engine.run_one(sc, REFERENCE).ok


def test_an_inject_made_while_the_world_settles_injections_is_waited_for() -> None:
    # A listener closes the service; an actor's slow (async) inject is pending, and another
    # actor injects while the world waits for the first: both settle (the disposed agent's
    # inject raising, DISP-3), and neither is judged "never settled" (session 53's indie74: the
    # world judged the second the moment the first settled).
    sc = load_text(textwrap.dedent("""\
        name: inject-while-closing
        model: {script: ["one"], default: ok}
        listeners:
          - {name: closer, on: agent/turn-end, do: [{close: null}]}
        actors:
          - {name: caller, at: 0, do: [{send: A}]}
          - {name: first, at: 0, do: [{inject: {text: C, wait: true}}]}
          - {name: second, at: 1.0, do: [{inject: {text: D, wait: true}}]}
        """))
    report = engine.run_one(sc, SlowInject())
    assert report.ok, report.trace.summary()
    raised = [e["by"] for e in report.trace.timeline if e["kind"] == "op/error" and e["op"] == "inject"]
    assert sorted(raised) == ["first", "second"], raised


def test_a_deadlocked_run_says_what_was_left_waiting() -> None:
    @loop_scenario(agents=(), models=())
    async def stuck(w: World) -> None:
        w.model(["fine"])
        w.agent("a")
        await asyncio.get_running_loop().create_future()  # nothing will ever resolve it

    trace = engine.run_one(stuck, REFERENCE).trace
    assert trace.outcome == "deadlock"
    message = trace.outcome_message()
    assert message.startswith("the run ended deadlock with 2 task(s) pending: ") and "main (scenario:stuck)" in message


def test_the_settle_aborts_a_hung_step_and_drops_no_prompt() -> None:
    sc = Scenario("hang", models=(ModelSpec("fake", (respond.hang(),), respond.text("ok")),),
                  actors=(Actor((Action("send", text="A"), Action("sleep", seconds=1.0), Action("send", text="B")),
                                at=0.0),))
    report = engine.run_one(sc, REFERENCE)
    assert report.ok, report.trace.summary()
    assert ("world", "abort", None) in _ops(report.trace)
    ends = [e["data"]["reason"]["kind"] for e in report.trace.timeline if e["kind"] == "log" and e["type"] == "turn/end"]
    assert ends == ["aborted", "completed"]


# --------------------------------------------------------------------------- models


def _request(text: str) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": text}]}]}


def test_a_world_plays_a_shipped_llm_cassette_in_virtual_time() -> None:
    path = SHIPPED / "openai-chat" / "text.yaml"

    @loop_scenario(agents=(), models=())
    async def recorded(w: World) -> None:
        model = w.cassette(path)
        assert w.models["text"] is model
        w.agent("a", model="text")
        w.send("a", "What is the weather in Paris and Tokyo?")
        w.when_idle("a", "done")
        await w.wait_idle("done")

    report = engine.run_one(recorded, REFERENCE, seed=4)
    assert report.ok, report.trace.summary()
    assert report.trace.virtual_time_us > 0, "the recorded gaps pass in virtual time"
    chunks = [e for e in report.trace.timeline if e["kind"] == "log" and e["type"] == "assistant/chunk"]
    assert chunks and chunks[-1]["data"]["chunk"] == {"type": "finish", "reason": {"kind": "stop"}}
    assert engine.run_one(recorded, REFERENCE, seed=4).trace.to_json() == report.trace.to_json()


def test_cassette_problems_fail_the_run_like_a_fake_models() -> None:
    from cassettes.errors import CassetteError

    path = SHIPPED / "anthropic" / "text.yaml"

    @loop_scenario(agents=(), models=())
    async def asks_twice(w: World) -> None:
        w.cassette(path, name="claude")
        with pytest.raises(ValueError, match="already exists"):
            w.cassette(path, name="claude")
        with pytest.raises(CassetteError):
            w.cassette(ROOT / "no-such-cassette.yaml")
        w.agent("a", model="claude")
        for text in ("one", "two"):  # one interaction recorded: the second is unanswerable
            w.send("a", text)
            w.when_idle("a", text)
            await w.wait_idle(text)

    report = engine.run_one(asks_twice, REFERENCE)
    assert not report.ok
    assert any("model:claude" in f["message"] for f in report.trace.failures), report.trace.failures


# --------------------------------------------------------------------------- traces


def test_trace_json_is_byte_stable_and_round_trips() -> None:
    sc = load("conformance/scenario/examples/cancel_in_tool.yaml")
    first = engine.run_one(sc, REFERENCE, RandomStrategy(), seed=3)
    again = engine.run_one(sc, REFERENCE, RandomStrategy(), seed=3)
    assert first.trace.to_json() == again.trace.to_json()
    loaded = Trace.from_json(first.trace.to_json())
    assert loaded.to_json() == first.trace.to_json()
    replayed = engine.run_one(sc, REFERENCE, schedule=first.trace.schedule_object())
    assert replayed.trace.timeline == first.trace.timeline


def test_same_trace_bytes_in_two_processes_with_different_hash_seeds() -> None:
    code = textwrap.dedent("""\
        from conformance.impl import resolve
        from conformance.scenario import engine, load
        from simulator.strategies import RandomStrategy
        sc = load("conformance/scenario/examples/steer_during_tool.yaml")
        print(engine.run_one(sc, resolve(None), RandomStrategy(), seed=5).trace.to_json())
        """)
    outs = []
    for hash_seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env,
                              check=True, timeout=120)
        outs.append(proc.stdout)
    assert outs[0] == outs[1] and json.loads(outs[0])["outcome"] == "completed"


def test_a_world_lives_inside_a_simulation() -> None:
    with pytest.raises(RuntimeError, match="inside a simulation"):
        World(Scenario("x"), REFERENCE)
    assert simulator.current_loop() is None


CLOSE_MID_TURN = """
name: close-mid-turn
model: [{text: slow, delay: 3}]
listeners:
  - on: agent/status
    where: {status: running}
    do: [{send: B}, {close: null}]
actors:
  - name: caller
    at: 0
    do: [{send: A}, {when_idle: w}, {wait_idle: w}]
"""


def test_a_listener_closes_the_service_and_the_run_waits_for_the_close() -> None:
    # SVC-7 from a caller's close(): recorded as an op where it is called, world/closing (naming
    # who) where the implementation's close() starts; every agent ends disposed, the waiter is
    # released, and the world does not close the service a second time.
    sc = load_text(CLOSE_MID_TURN, origin="close.yaml")
    report = engine.run_one(sc, REFERENCE)
    assert report.ok, report.trace.failure_messages()
    tl = report.trace.timeline
    kinds = [e["kind"] for e in tl]
    op = next(i for i, e in enumerate(tl) if e["kind"] == "op" and e["op"] == "close")
    closing = [e for e in tl if e["kind"] == "world/closing"]
    assert tl[op]["by"] == "listener-1" and tl[op]["on"] == "agent/status"
    assert len(closing) == 1 and closing[0]["by"] == "listener-1" and kinds.index("world/closing") > op
    assert kinds.count("world/closed") == 1 and tl[kinds.index("world/closed")]["agents"] == {"a": "disposed"}
    assert any(e["kind"] == "waiter/released" and e["waiter"] == "w" for e in tl)
    end = next(e for e in tl if e["kind"] == "log" and e["type"] == "turn/end")
    assert end["data"]["reason"]["kind"] == "disposed"
    # the window's close reads back from YAML as it was written
    assert load_text(dump(sc), origin="again.yaml").listeners == sc.listeners


class _Patched:
    """``base`` (default: the reference) whose every service ``patch(service)`` edits in place."""

    def __init__(self, name: str, patch: Any, base: Any = REFERENCE) -> None:
        self.name, self.features, self.logger_name = name, base.features, base.logger_name
        self._base, self._patch = base, patch

    def create_service(self, *, persistence: object | None = None) -> Any:
        service = self._base.create_service(persistence=persistence)
        self._patch(service)
        return service

    def new_persistence(self) -> object:
        return self._base.new_persistence()


def _closed_by(name: str, make: Any) -> _Patched:
    """The reference with another ``close()``: ``make(service)`` returns the coroutine function."""
    return _Patched(name, lambda service: setattr(service, "close", make(service)))


def test_a_close_that_leaves_an_agent_running_fails_svc_7() -> None:
    sc = load_text(CLOSE_MID_TURN, origin="close.yaml")

    def sparing(service: Any) -> Any:
        async def close() -> None:  # it spares running agents
            for agent in list(service._created):
                if agent.status != "running":
                    agent.dispose()
        return close

    report = engine.run_one(sc, _closed_by("lenient", sparing))  # type: ignore[arg-type]
    found = [f for f in report.trace.failures if f["check"] == "CLOSED"]
    assert found and "SVC-7" in found[0]["rules"] and "still running after service.close()" in found[0]["message"]


def test_a_create_under_a_live_agents_id_is_refused_and_recorded() -> None:
    sc = load_text("""
name: create-taken
model: [{text: hi}]
listeners:
  - on: agent/status
    where: {status: running}
    do: [{create: a}]
actors:
  - {name: caller, at: 0, do: [{send: A}, {when_idle: w}, {wait_idle: w}]}
""", origin="create.yaml")
    report = engine.run_one(sc, REFERENCE)
    assert report.ok, report.trace.failure_messages()
    tl = report.trace.timeline
    op = next(i for i, e in enumerate(tl) if e["kind"] == "op" and e["op"] == "create")
    assert tl[op]["status"] == "running"
    assert tl[op + 1]["kind"] == "op/error" and tl[op + 1]["op"] == "create"  # SVC-2: rejected
    assert load_text(dump(sc), origin="again.yaml").listeners == sc.listeners
    # the mutant that accepts it fails SVC-2, and says so first
    failed = engine.run_one(sc, mutants.get("svc-duplicate-id")).trace.failures
    assert failed and failed[0]["check"] == "SVC-2", failed


def _session_named(base: Any, name: Any) -> _Patched:
    """``base`` whose ``create()`` names every session ``name(agent_id)``."""
    def patch(service: Any) -> None:
        create = service.create

        def named(agent_id: str, options: Any = None) -> Any:
            agent = create(agent_id, options)
            agent.session._id = name(agent_id)
            return agent
        service.create = named
    return _Patched("session-named", patch, base)


@pytest.mark.parametrize(("base", "name", "says"), [
    ("reference", lambda agent_id: f"session-{agent_id}", "made session 'session-a', not a fresh 'a-session-{uuid}'"),
    ("reference", lambda agent_id: f"{agent_id}-session-", "not a fresh"),
    # a second create of a live id, wrongly accepted (SVC-2), on the session of the first
    ("svc-duplicate-id", lambda agent_id: f"{agent_id}-session-fixed", "made session 'a-session-fixed' again"),
])
def test_a_create_that_reuses_or_misnames_its_session_fails_svc_1(base: str, name: Any, says: str) -> None:
    # SVC-1: create(id) makes its agent on a fresh session `{id}-session-{uuid}`, each run anew.
    sc = load_text("""
name: recreate
model: [{text: hi}]
listeners:
  - on: agent/status
    where: {status: running}
    do: [{create: a}]
actors:
  - {name: caller, at: 0, do: [{send: A}, {when_idle: w}, {wait_idle: w}]}
""", origin="recreate.yaml")
    impl = REFERENCE if base == "reference" else mutants.get(base)
    assert not [f for f in engine.run_one(sc, impl).trace.failures if "SVC-1" in f.get("rules", ())]
    failed = [f for f in engine.run_one(sc, _session_named(impl, name)).trace.failures if "SVC-1" in f.get("rules", ())]
    assert failed and says in failed[0]["message"], failed


_CANCEL_DRIVER = """
name: cancel-driver
model: [{text: "one two three four", deltas: 4, between: 1}]
actors:
  - {name: caller, at: 0, do: [{send: A}]}
  - {name: stopper, at: 1.5, do: [{cancel_driver: a}]}
"""


def _round_trip_and_run(text: str, origin: str, part: str) -> tuple[Scenario, engine.RunReport]:
    """The YAML scenario ``text``: its ``part`` reads back from its dump as it was written, and it
    passes on the reference."""
    sc = load_text(text, origin=origin)
    assert getattr(load_text(dump(sc), origin="again.yaml"), part) == getattr(sc, part)
    report = engine.run_one(sc, REFERENCE)
    assert report.ok, report.trace.failure_messages()
    return sc, report


def test_cancelling_the_driver_task_is_a_verb_and_ends_the_agent_disposed() -> None:
    # PY-1: an actor cancels the agent's driver task mid-stream; the reference ends the turn
    # disposed, and the disposal it causes excuses the dropped rest (no DISPOSAL finding)
    _, report = _round_trip_and_run(_CANCEL_DRIVER, "cancel-driver.yaml", "actors")
    tl = report.trace.timeline
    assert any(e["kind"] == "op" and e["op"] == "cancel_driver" and e["status"] == "running" for e in tl)
    assert tl[-1]["kind"] == "world/closed" and tl[-1]["agents"] == {"a": "disposed"}


@pytest.mark.parametrize(("mutant", "says"), [
    ("py-cancel-contained", "the cancellation was swallowed"),  # the driver lives on
    ("driver-cancelled-unstarted", "but the agent is 'idle'"),  # the driver ended, the agent did not
])
def test_a_cancelled_driver_that_does_not_end_the_agent_disposed_is_a_py1_problem(mutant: str, says: str) -> None:
    text = _CANCEL_DRIVER
    if mutant == "driver-cancelled-unstarted":  # cancelled as the agent is made: unstarted
        text = text.replace("  - {name: stopper, at: 1.5, do: [{cancel_driver: a}]}\n", "") + \
            "listeners: [{on: agent/created, do: [{cancel_driver: a}]}]\n"
    report = engine.run_one(load_text(text, origin="cancel-driver.yaml"), mutants.get(mutant))
    found = [f["message"] for f in report.trace.failures if "PY-1" in f["rules"]]
    assert any(says in m for m in found), report.trace.failure_messages()


@pytest.mark.parametrize("when", ["mid-stream", "unstarted"])
def test_a_driver_that_disposes_its_agent_from_a_done_callback_meets_py1(when: str) -> None:
    # PY-1 asks that a cancelled driver ends the agent disposed: a supervisor task whose
    # done-callback disposes it (a few callbacks after the task ended) does
    text = _CANCEL_DRIVER
    if when == "unstarted":
        text = text.replace("  - {name: stopper, at: 1.5, do: [{cancel_driver: a}]}\n", "") + \
            "listeners: [{on: agent/created, do: [{cancel_driver: a}]}]\n"
    report = engine.run_one(load_text(text, origin="cancel-driver.yaml"), SupervisedDriver())
    assert report.ok, report.trace.failure_messages()
    assert report.trace.timeline[-1]["agents"] == {"a": "disposed"}


def test_a_waterfall_listener_rewrites_the_value_next_returned() -> None:
    # a plugin returning the tool's result under an id of its own: TOOL-4 keeps the model's call id
    sc = load_text("""
name: rekeyed
model: [{tool_call: {name: lookup, id: c1}}, done]
tools: {lookup: {results: [found]}}
listeners:
  - {name: plugin, on: tools/execute, when: after, rewrite: {call_id: plugin-id}}
actors:
  - {name: caller, at: 0, do: [{send: A}, {when_idle: w}, {wait_idle: w}]}
""", origin="rekeyed.yaml")
    assert sc.listeners[0].rewrite == {"call_id": "plugin-id"} and sc.listeners[0].do == ()
    assert load_text(dump(sc), origin="again.yaml").listeners == sc.listeners
    report = engine.run_one(sc, REFERENCE)
    assert report.ok, report.trace.failure_messages()
    results = [e["data"] for e in report.trace.timeline if e["kind"] == "log" and e["type"] == "tool/result"]
    assert [r["call_id"] for r in results] == ["c1"]
    failed = {f["check"]: f for f in engine.run_one(sc, mutants.get("tool-result-listener-id")).trace.failures}
    assert failed["TOOLS"]["rules"] == ["TOOL-4"] and "plugin-id" in failed["TOOLS"]["message"], failed
    assert failed["LOG"]["rules"] == ["LOG-6"], failed  # a result with no call of its id before it


RESUMED = """
name: resumed
agents: [{id: a, resume: sess-1, history: [H1]}]
model: [{text: hi}]
actors:
  - {name: caller, after: agent/created, do: [{send: A}, {when_idle: w}, {wait_idle: w}]}
"""


def test_a_resumed_agent_continues_its_persisted_session() -> None:
    # SVC-3: the history ran on a service of its own; the world records the loaded log, then the
    # agent's creation, and the run's own turn continues it
    sc = load_text(RESUMED, origin="resumed.yaml")
    report = engine.run_one(sc, REFERENCE)
    assert report.ok, report.trace.failure_messages()
    tl = report.trace.timeline
    assert next((e["op"], e.get("session")) for e in tl if e["kind"] == "op" and e["by"] == "world") == ("resume", "sess-1")
    loaded = [e for e in tl if e["kind"] == "log" and e.get("loaded")]
    assert [e["data"].get("turn") for e in loaded if e["type"] == "turn/start"] == [1]
    assert any(e["type"] == "user/message" and e["data"]["content"][0]["text"] == "H1" for e in loaded)
    created = next(e for e in tl if e["kind"] == "agent/created")
    assert created["resumed"] == created["session"] == "sess-1" and tl.index(created) > tl.index(loaded[-1])
    live = [e["data"]["turn"] for e in tl if e["kind"] == "log" and not e.get("loaded") and e["type"] == "turn/start"]
    assert live == [2]
    assert any(e["kind"] == "persistence/load" for e in tl)  # the reference's load is awaited: a point
    assert load_text(dump(sc), origin="again.yaml").agents == sc.agents
    # the mutant that resumes onto a fresh session id fails SVC-3
    failed = engine.run_one(sc, mutants.get("resume-fresh-session-id")).trace.failures
    assert failed and failed[0]["check"] == "SVC-3" and failed[0]["rules"] == ["SVC-3"], failed


def test_an_actor_after_a_session_event_waits_for_this_runs_not_the_loaded_logs() -> None:
    # the loaded log is a record of an earlier run: an actor after turn/start acts at the run's own
    sc = load_text(RESUMED + "  - {name: late, after: {event: log, where: {type: turn/start}}, do: [{cancel: x}]}\n",
                   origin="late.yaml")
    report = engine.run_one(sc, REFERENCE)
    assert report.ok, report.trace.failure_messages()
    tl = report.trace.timeline
    live = next(i for i, e in enumerate(tl) if e["kind"] == "log" and e["type"] == "turn/start" and not e.get("loaded"))
    acted = next(i for i, e in enumerate(tl) if e["kind"] == "actor/run" and e["actor"] == "late")
    assert acted > live


def test_a_create_during_a_resumes_load_takes_the_id_and_the_resume_is_rejected() -> None:
    # SVC-2: the id is free while the persisted log loads; once create() took it, resume() raises
    sc = load_text(RESUMED + "listeners:\n  - on: persistence/load\n    do: [{create: a}]\n", origin="taken.yaml")
    report = engine.run_one(sc, REFERENCE)
    assert report.ok, report.trace.failure_messages()
    tl = report.trace.timeline
    kinds = [(e["kind"], e.get("op")) for e in tl if e["kind"] in ("op", "op/error", "persistence/load")]
    assert kinds[:3] == [("op", "resume"), ("persistence/load", None), ("op", "create")]
    # SVC-2 leaves open which one wins, but exactly one does: the reference rejects the resume
    # (the caller's send to the created agent may come first), so no log is loaded
    refused = {op for kind, op in kinds if kind == "op/error"}
    assert refused == {"resume"} and not any(e.get("loaded") for e in tl)
    failed = engine.run_one(sc, mutants.get("resume-no-recheck")).trace.failures
    assert failed and failed[0]["check"] == "SVC-3" and failed[0]["rules"] == ["SVC-2"], failed


def test_resuming_needs_the_persistence_feature() -> None:
    tiny = resolve("examples.tiny_loop.adapter:implementation")
    with pytest.raises(ScenarioSetupError, match="needs the 'persistence' feature"):
        engine.run_one(load_text(RESUMED, origin="resumed.yaml"), tiny)


RELOAD_MID_TOOL = """
name: reload-mid-tool
model:
  - {blocks: [{text: "let me look"}, {tool_call: {name: slow}}]}
  - "second answer"
tools:
  slow: {result: "late", latency: 5}
listeners:
  - {name: crash, on: tools/execute, do: [{reload: null}]}
actors:
  - {name: caller, at: 0, do: [{send: first}, {when_idle: w}, {wait_idle: w}]}
"""


def test_a_reload_resumes_the_session_on_a_second_service_while_the_writer_runs() -> None:
    # SVC-3 and the repair of a turn whose writer died: the session loaded mid-tool is the
    # writer's log so far plus its open step's step/end and turn/end{interrupted}; the world
    # makes the backend (a scenario whose actions reload needs one) and judges what was loaded
    sc, report = _round_trip_and_run(RELOAD_MID_TOOL, "reload.yaml", "listeners")
    tl = report.trace.timeline
    op = next(e for e in tl if e["kind"] == "op" and e["op"] == "reload")
    assert op["by"] == "crash" and op["status"] == "running"
    loaded = next(e for e in tl if e["kind"] == "reload/loaded")
    assert 0 < loaded["events"] < tl[-1]["logs"]["a"]  # loaded mid-turn: fewer than the end's
    # a backend whose repair takes the step's message for its end leaves the step open (round 28)
    failed = engine.run_one(sc, mutants.get("repair-message-closes-step")).trace.failures
    assert failed and failed[0]["check"] == "problems", failed
    assert failed[0]["rules"] == ["SVC-3", "LOG-5"] and "step 1 still open" in failed[0]["message"], failed


RESUMED_INTERRUPTED = """
name: resumed-interrupted
agents: [{id: a, resume: sess-1, history: [H1], interrupted: true}]
model: [{text: hi}]
listeners:
  - {name: persist, on: session/flush, times: always, hold: 0.01}
actors:
  - {name: caller, after: agent/created, do: [{send: A}, {when_idle: w}, {wait_idle: w}]}
"""


def test_a_persisted_run_that_died_mid_turn_is_resumed_repaired() -> None:
    # AgentSpec.interrupted: the seeded run dies inside one more turn, its model streaming (its
    # service is never closed, as a dead process's is not); the resume loads that turn repaired
    # (turn/end{interrupted}, SVC-3, LOG-5), and the world's end-of-run resume of the flushed
    # session reads what the agent logged after it (a backend that handed the repair back
    # without keeping it fails there: the store has a gap)
    sc, report = _round_trip_and_run(RESUMED_INTERRUPTED, "interrupted.yaml", "agents")
    loaded = [e for e in report.trace.timeline if e["kind"] == "log" and e.get("loaded")]
    assert [e["type"] for e in loaded if e["type"] in ("turn/start", "turn/end")] == [
        "turn/start", "turn/end", "turn/start", "turn/end"]
    assert loaded[-1]["data"]["reason"] == {"kind": "interrupted"}
    failed = engine.run_one(sc, mutants.get("repair-not-stored")).trace.failures
    assert failed and failed[0]["rules"] == ["SVC-3"] and "resuming a flushed session" in failed[0]["message"], failed


def test_a_window_on_a_resumed_logs_repair_appends_does_not_act() -> None:
    # A loop may notify session/event for its backend's repair of a resumed log, before resume()
    # returns the agent: no agent of the world holds that session yet, so a window's listener
    # does not act there (its send would name an agent the world does not have) nor count it.
    sc = load_text(RESUMED_INTERRUPTED.replace(
        "listeners:\n", "listeners:\n  - {name: window, on: session/event, where: {type: step/end}, "
        "do: [{send: W}]}\n").replace("model: [{text: hi}]", "model: {script: [{text: hi}], default: ok}"),
        origin="repair.yaml")
    report = engine.run_one(sc, RepairAnnounced(name="repair-announced"))
    assert report.ok, report.trace.failure_messages()
    sends = [e for e in report.trace.timeline if e["kind"] == "op" and e.get("by") == "window"]
    assert len(sends) == 1 and sends[0]["agent"] == "a"  # at the live turn's step/end


def test_a_persisted_event_that_differs_in_its_data_says_what_differs() -> None:
    # The same type and seq with other data (a backend that kept a dead run's turn under the
    # seqs the live agent wrote): the message shows both datas, not two equal (type, seq).
    def logged(text: str) -> dict[str, Any]:
        return {"seq": 0, "time": 0, "type": "user/message", "data": {"content": [{"type": "text", "text": text}]}}

    async def main() -> list[str]:
        world = World(Scenario("x"), REFERENCE)
        world._judge_persisted("a", "s-1", 1, [logged("A")], [logged("interrupted")])
        return [e["message"] for e in simulator.current_loop().timeline() if e["kind"] == "problem"]

    (message,) = simulator.run(main).value
    assert '"text": "interrupted"' in message and '"text": "A"' in message, message


def test_only_a_sessions_first_reload_is_judged() -> None:
    # the reference's backend writes its repair into the store, and the writer goes on appending
    # after it: a second load reads two writers' events, which no rule speaks of
    twice = RELOAD_MID_TOOL.replace("do: [{reload: null}]}", "do: [{reload: null}]}\n"
                                    "  - {name: again, on: agent/turn-end, do: [{reload: null}]}")
    report = engine.run_one(load_text(twice, origin="twice.yaml"), REFERENCE)
    assert report.ok, report.trace.failure_messages()
    assert sum(e["kind"] == "op" and e["op"] == "reload" for e in report.trace.timeline) == 2


def test_services_get_the_backend_new_persistence_made_and_its_loads_are_still_points() -> None:
    # the world holds an awaited load on the backend itself (persistence/load, SVC-2's window)
    # rather than handing the implementation a stand-in; the loads of its own checks (a reload's
    # second service, the end-of-run resume) are not points of the run
    impl = OwnBackendsOnly()
    report = engine.run_one(load_text(RESUMED, origin="resumed.yaml"), impl)
    assert report.ok, report.trace.failure_messages()
    assert [e["session"] for e in report.trace.timeline if e["kind"] == "persistence/load"] == ["sess-1"]
    report = engine.run_one(load_text(RELOAD_MID_TOOL, origin="reload.yaml"), impl)
    assert report.ok, report.trace.failure_messages()
    tl = report.trace.timeline
    assert any(e["kind"] == "reload/loaded" for e in tl) and not any(e["kind"] == "persistence/load" for e in tl)


def test_reloading_needs_the_persistence_feature() -> None:
    tiny = resolve("examples.tiny_loop.adapter:implementation")
    with pytest.raises(ScenarioSetupError, match="resumes or reloads an agent, which needs the 'persistence' feature"):
        engine.run_one(load_text(RELOAD_MID_TOOL, origin="reload.yaml"), tiny)


@pytest.mark.parametrize("how", ["raises", "hangs"])
def test_a_callers_close_that_raises_or_hangs_is_a_problem_not_a_crash(how: str) -> None:
    sc = load_text(CLOSE_MID_TURN, origin="close.yaml")

    def broken(_service: Any) -> Any:
        async def close() -> None:
            if how == "raises":
                raise RuntimeError("close failed")
            await asyncio.get_running_loop().create_future()  # never returns
        return close

    report = engine.run_one(sc, _closed_by("broken", broken))  # type: ignore[arg-type]
    assert report.trace.outcome == "completed"
    messages = report.trace.failure_messages()
    said = "service.close() raised RuntimeError: close failed" if how == "raises" else "service.close() did not finish"
    assert any(said in m for m in messages), messages
    assert any("SVC-7" in f.get("rules", []) for f in report.trace.failures)


def test_an_injection_started_as_the_world_closes_has_its_refusal_recorded() -> None:
    # DISP-3 on an inject() a listener makes on the world's own close (the agent disposed): the
    # refusal comes when the injection's task ends, and on this schedule (a hunt's random run of
    # the steer workload) the run ended first, so the oracle read an inject() on a disposed agent
    # that "returned without raising". The close now waits for such work and records it.
    sc = load(str(WINDOWS / "inject-as-closed.yaml"))
    report = engine.run_one(sc, REFERENCE, RandomStrategy(), seed=1568718867)
    assert report.ok, report.trace.failure_messages()
    tl = report.trace.timeline
    kinds = [e["kind"] for e in tl]
    refused = kinds.index("op/error")
    assert tl[refused]["op"] == "inject" and tl[refused]["by"] == "window"
    assert kinds.index("world/closing") < refused < kinds.index("world/closed")


def test_the_close_edits_what_the_caller_passed_and_the_log_must_not_change() -> None:
    # LOG-1: the world edits the block lists and sources its callers passed once the service is
    # closed; each log entry must still hold what its session/event notification carried.
    sc = load_text("""
name: snapshot
model: [{text: hi}]
actors:
  - {name: caller, at: 0, do: [{send: {text: A, blocks: true, source: {kind: plugin, plugin: p}}}]}
""", origin="snapshot.yaml")
    assert sc.actors[0].do[0].blocks
    assert load_text(dump(sc), origin="again.yaml").actors == sc.actors  # `blocks` round-trips
    report = engine.run_one(sc, REFERENCE)
    assert report.ok, report.trace.failure_messages()
    op = next(e for e in report.trace.timeline if e["kind"] == "op" and e["op"] == "send")
    assert op["text"] == "A" and op["source"] == {"kind": "plugin", "plugin": "p"}
    # a log that keeps the caller's blocks changes with them: a problem naming LOG-1
    failed = engine.run_one(sc, mutants.get("log-snapshot-shallow")).trace.failures
    assert [f["check"] for f in failed] == ["problems"], failed
    assert "LOG-1" in failed[0]["message"] and "user/message" in failed[0]["message"], failed


def test_a_reconfigure_changes_sections_and_tools_and_binds_the_next_steps_request() -> None:
    # SVC-5: a tool step's call reconfigures the service (its first section removed, one added, a
    # tool registered); the op records what is registered now, and the next step's request must
    # carry it: the reference does, a loop assembling once per turn fails REQUEST.
    sc = load_text("""
name: reconfigure
model: [{tool_call: {name: lookup, args: "{}"}}, {text: done}]
tools: {lookup: {result: found}}
sections: {one: "Section A."}
listeners:
  - {on: tools/execute, do: [{reconfigure: null}]}
actors:
  - {name: caller, at: 0, do: [{send: hi}]}
""", origin="reconfigure.yaml")
    assert load_text(dump(sc), origin="again.yaml").listeners == sc.listeners
    report = engine.run_one(sc, REFERENCE)
    assert report.ok, report.trace.failure_messages()
    (op,) = [e for e in report.trace.timeline if e["kind"] == "op" and e["op"] == "reconfigure"]
    assert op["sections"] == ["Section window-1."] and op["tools"] == ["lookup", "window_tool_1"]
    failed = engine.run_one(sc, mutants.get("prompt-assembled-once-per-turn")).trace.failures
    assert "REQUEST" in [f["check"] for f in failed], failed


def test_chunks_of_a_burst_are_each_notified_before_the_next_is_logged() -> None:
    # PY-2, LOOP-5: a stream whose chunks arrive in one burst (`between: null`, no suspension);
    # the world counts each step's logged and notified chunks, and a notification made after a
    # later chunk was logged is a problem naming PY-2 (a loop deferring the emit to the event loop).
    sc = load_text("""
name: burst
model: [{chunks: [{type: block-start, index: 0, block_type: text}, {type: text-delta, index: 0, text: a},
                  {type: text-delta, index: 0, text: b}, {type: block-end, index: 0, block: {type: text, text: ab}},
                  {type: finish, reason: {kind: stop}}], between: null}]
actors:
  - {name: caller, at: 0, do: [{send: hi}]}
""", origin="burst.yaml")
    assert sc.models[0].script[0].between is None
    assert load_text(dump(sc), origin="again.yaml").models == sc.models  # `between: null` round-trips
    report = engine.run_one(sc, REFERENCE)
    assert report.ok, report.trace.failure_messages()
    failed = engine.run_one(sc, mutants.get("stream-chunk-notified-soon")).trace.failures
    assert failed and "PY-2" in failed[0]["message"], failed


def test_a_model_that_edits_its_requests_shows_a_log_sharing_them() -> None:
    # edits_requests: the fake model overwrites every text of a request's messages once it has
    # recorded it; a loop whose history hands out the log's own blocks has its log rewritten, a
    # problem naming LOG-1 (the reference copies them). The option round-trips through YAML.
    sc = load_text("""
name: edits
model: {script: ["one", "two"], edits_requests: true}
actors:
  - {name: caller, at: 0, do: [{send: A}, {when_idle: w}, {wait_idle: w}, {send: B}]}
""", origin="edits.yaml")
    assert sc.models[0].edits_requests
    assert load_text(dump(sc), origin="again.yaml").models == sc.models
    report = engine.run_one(sc, REFERENCE)
    assert report.ok, report.trace.failure_messages()
    failed = engine.run_one(sc, mutants.get("derive-shares-log-blocks")).trace.failures
    assert failed and "LOG-1" in failed[0]["message"], failed


@pytest.mark.parametrize("mutant", ["derive-shares-tool-result-blocks", "derive-shares-provider-data"])
def test_a_model_that_edits_its_requests_edits_nested_objects_too(mutant: str) -> None:
    # A tool result's blocks and a block's provider_data are edited in place as well: a history
    # sharing them with the log (a copy one level deep) has its log rewritten (LOG-1)
    sc = load_text("""
name: edits-nested
model:
  script:
    - {tool_call: {name: lookup, id: c1}}
    - chunks:
        - {type: block-start, index: 0, block_type: text}
        - {type: text-delta, index: 0, text: done}
        - {type: block-end, index: 0, block: {type: text, text: done, provider_data: {signature: s1}}}
        - {type: finish, reason: {kind: stop}}
    - two
  edits_requests: true
tools: {lookup: {result: found}}
actors:
  - {name: caller, at: 0, do: [{send: A}, {when_idle: w}, {wait_idle: w}, {send: B}]}
""", origin="edits-nested.yaml")
    report = engine.run_one(sc, REFERENCE)
    assert report.ok, report.trace.failure_messages()
    failed = engine.run_one(sc, mutants.get(mutant)).trace.failures
    assert failed and "LOG-1" in failed[0]["message"], failed


def test_the_worlds_tasks_run_in_a_callers_context_not_the_implementations() -> None:
    """An actor started from inside an implementation's callback is a caller's task all the same:
    it sees none of the context variables that callback set (and so two actor windows started
    at the same place in FIFO order run alike: hunt twins)."""
    import contextvars

    var: contextvars.ContextVar[str] = contextvars.ContextVar("where", default="caller")
    seen: list[str] = []

    async def main() -> None:
        world = World(Scenario("context"), REFERENCE)
        var.set("implementation")  # as the callback a world observer runs in might
        await world.spawn(lambda: seen.append(var.get()), name="reader")

    result = simulator.run(main)
    assert result.error is None and seen == ["caller"]


DISPOSED_AFTER_A_TURN = """
name: disposed-after-a-turn
model: [{text: hi}]
actors:
  - {name: caller, at: 0, do: [{send: A}, {when_idle: w}, {wait_idle: w}, {dispose: a}]}
"""


def test_a_registry_that_does_not_hand_out_a_live_agent_or_keeps_a_disposed_one_fails_svc_6() -> None:
    # SVC-6: a live agent is found by id as soon as create() returned, and a disposed one no more
    # once its dispose() returned
    sc = load_text(DISPOSED_AFTER_A_TURN, origin="lookup.yaml")
    blind = _Patched("blind-registry", lambda service: setattr(service, "get", lambda agent_id: None))
    failures = engine.run_one(sc, blind).trace.failures
    assert failures and failures[0]["rules"] == ["SVC-6"] and "create() or resume()" in failures[0]["message"], failures

    def never_forgets(service: Any) -> None:
        service.get = lambda agent_id: next((a for a in service._created if a.id == agent_id), None)

    failures = engine.run_one(sc, _Patched("never-forgets", never_forgets)).trace.failures
    # (the close's check that nothing is left registered fails too: the world's says when it showed)
    assert any(f["rules"] == ["SVC-6"] and "once its dispose() returned" in f["message"] for f in failures), failures
    assert engine.run_one(sc, REFERENCE).ok


def test_a_tool_result_of_blocks_round_trips_through_yaml_and_is_edited_once_the_run_is_over() -> None:
    # LOG-1: the blocks a tool returned are its own; the world edits them after the run, and a
    # loop that logged them rather than a snapshot shows it (the reference snapshots; its mutant
    # keeping a top-level copy only does not)
    text = """
name: blocks-result
model:
  - {blocks: [{tool_call: {name: lookup}}]}
  - done
tools:
  lookup: {result: [{type: text, text: found}], latency: 0.01}
actors:
  - {name: caller, at: 0, do: [{send: A}, {when_idle: w}, {wait_idle: w}]}
"""
    sc, _ = _round_trip_and_run(text, "blocks.yaml", "tools")
    failures = engine.run_one(sc, mutants.get("log-snapshot-shallow")).trace.failures
    assert failures and failures[0]["rules"] == ["LOG-1"] and "(tool/result) changed" in failures[0]["message"], failures
    with pytest.raises(Exception, match="list of content blocks"):
        load_text(text.replace("[{type: text, text: found}]", "[found]"), origin="bad.yaml")


def test_a_trace_with_non_finite_numbers_is_still_written() -> None:
    # An implementation that logs a NaN: `loopkit run --trace` ended in a traceback, its
    # verdict and its trace file lost. JSON has no NaN: the trace names what was there.
    import json
    import math

    from conformance.scenario.trace import dumps

    text = dumps({"data": [math.nan, {"b": math.inf, "a": -math.inf}, 1.5], "n": 1})
    assert json.loads(text) == {"data": ["NaN", {"a": "-Infinity", "b": "Infinity"}, 1.5], "n": 1}
    assert dumps({"b": 1, "a": [2.5]}) == '{"a":[2.5],"b":1}'


def test_one_flush_listener_records_the_flushes_and_a_throwing_one_ends_its_flush() -> None:
    # Two listeners on every flush: the first records (one numbered start and end per flush); a
    # second would number each flush twice, and INJ-4's "its flush has run" would wait for the
    # end a throwing one never recorded (session 59's flush-throws workload on the reference).
    sc = load_text(textwrap.dedent("""\
        name: two flush listeners
        model: ["one", "two"]
        listeners:
          - {on: session/flush, name: first, times: always, do: [{raise: boom}]}
          - {on: session/flush, name: second, times: always, hold: 0.01}
        actors:
          - at: 0
            do: [{send: A}, {when_idle: w}, {wait_idle: w}, {send: B}, {when_idle: v}, {wait_idle: v}]
        """))
    flushes = [e for e in engine.run_one(sc, resolve(None)).trace.timeline if e["kind"] == "flush"]
    assert {e["listener"] for e in flushes} == {"first"}
    assert [(e["n"], e["phase"]) for e in flushes] == [(1, "start"), (1, "failed"), (2, "start"), (2, "failed")]
