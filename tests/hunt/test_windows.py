"""Windows: points found by a probe, stable names, exhaustive enumeration within the bounds."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from conformance.hunt import search, shards
from conformance.hunt import windows as win
from conformance.hunt.workloads import by_name, workloads
from conformance.impl import resolve
from conformance.scenario.yaml_format import dump, load_text

REF = resolve(None)


def test_the_base_workloads_of_the_issue_are_there() -> None:
    names = {w.name for w in workloads()}
    assert {"reply", "tool", "two-step", "max-tokens", "model-error", "two-prompts", "steer", "two-agents"} <= names


@pytest.mark.parametrize("workload", workloads(), ids=lambda w: w.name)
def test_every_workload_has_a_yaml_form(workload: Any) -> None:
    # A finding's race cassette holds its scenario as YAML: a workload without one would end a
    # hunt that found something as bad input (model-error's stream raising mid-answer once had
    # none). Exceptions compare by identity, so the dumps are compared.
    text = dump(workload.scenario)
    assert dump(load_text(text)) == text


def test_unknown_workload_is_a_key_error_naming_the_choices() -> None:
    with pytest.raises(ValueError, match=r"unknown workload 'nope'.*reply"):
        by_name(["nope"])


def test_points_of_a_plain_reply_cover_every_kind_of_window() -> None:
    reply = by_name(["reply"])[0]
    pts = win.points(reply, win.probe(reply, REF), 3)
    labels = [p.label for p in pts]
    assert "after creation of a" in labels  # before the driver first ran
    assert "after agent/status(running)#1" in labels
    assert "after agent/status(idle)#1" in labels
    assert "after session/event(turn/start)#1" in labels
    assert "after session/event(assistant/chunk)#3" in labels  # between stream chunks
    assert "before agent/turn-continuation next()#1" in labels
    assert "after agent/turn-continuation next()#1" in labels
    assert "inside session/flush#1" in labels
    assert "at model call#1" in labels
    assert {p.kind for p in pts} == {"notification", "log", "waterfall", "flush", "world"}
    assert all(p.nth <= 3 for p in pts)
    assert len(labels) == len(set(labels))


def test_a_tool_workload_has_a_window_inside_the_tool_call() -> None:
    tool = by_name(["tool"])[0]
    labels = [p.label for p in win.points(tool, win.probe(tool, REF), 1)]
    assert "inside tool call#1" in labels
    assert "before tools/execute next()#1" in labels


def test_sequences_are_every_product_up_to_the_depth_shortest_first() -> None:
    seqs = win.sequences(("send", "cancel"), 2)
    assert seqs == [("send",), ("cancel",), ("send", "send"), ("send", "cancel"), ("cancel", "send"),
                    ("cancel", "cancel")]
    # 17 alone; 7 x 7 pairs of the rest; raise last after any of those 7; close last after send,
    # steer, inject or when_idle; stall last after cancel or abort; bad_inject followed by
    # when_idle; stop last after steer (CONT-2's override); create, cancel_driver, reconfigure,
    # reload and answer only alone; the three WITHDRAWN triples (a waiter taken for queued work,
    # then the work withdrawn)
    assert len(win.sequences(win.VERBS, 2)) == 17 + 7 * 7 + 7 + 4 + 2 + 1 + 1 + 3
    assert win.sequences(win.VERBS, 2)[-3:] == list(win.WITHDRAWN)
    assert ("send", "when_idle", "cancel") not in win.sequences(("send", "when_idle"), 2)  # its verbs only
    assert win.sequences(win.VERBS, 3).count(("send", "when_idle", "cancel")) == 1  # depth 3 has them anyway
    for alone in ("create", "cancel_driver", "reconfigure", "reload", "answer"):
        assert [seq for seq in win.sequences(win.VERBS, 2) if alone in seq] == [(alone,)]
    assert [seq for seq in win.sequences(win.VERBS, 2) if "stop" in seq] == [("stop",), ("steer", "stop")]
    assert ("send", "raise") in win.sequences(win.VERBS, 2) and ("raise", "send") not in win.sequences(win.VERBS, 2)
    assert all("raise" not in seq for seq in win.sequences(win.VERBS, 2, "actor"))  # an actor cannot throw
    assert ("reload",) not in win.sequences(win.VERBS, 2, "actor")  # a reload is its own task already
    assert ("stop",) not in win.sequences(win.VERBS, 2, "actor")  # a vote is a listener's return value
    assert ("answer",) not in win.sequences(win.VERBS, 2, "actor")  # so is an answer
    for mode in ("listener", "actor"):  # INJ-4's bad input: alone, or with a waiter taken after it
        assert [seq for seq in win.sequences(win.VERBS, 2, mode) if "bad_inject" in seq] == list(win.BAD_INJECTS)
    stalls = [seq for seq in win.sequences(win.VERBS, 2) if "stall" in seq]
    assert stalls == [("stall",), ("cancel", "stall"), ("abort", "stall")]  # a listener's own wait, last
    assert not [seq for seq in win.sequences(win.VERBS, 2, "actor") if "stall" in seq]
    closes = [seq for seq in win.sequences(win.VERBS, 2, "actor") if "close" in seq]
    assert closes == [("close",), ("send", "close"), ("steer", "close"), ("inject", "close"), ("when_idle", "close")]


def test_cancel_driver_is_a_verb_of_in_process_python_implementations_only() -> None:
    # PY-1 is about the driver's asyncio task: a loop over the wire has none here
    assert "cancel_driver" in search.verbs_for(REF)

    class Wired:
        runtime = "node"
        features = frozenset({"injection"})

    assert "cancel_driver" not in search.verbs_for(Wired())  # type: ignore[arg-type]
    assert "inject" in search.verbs_for(Wired())  # type: ignore[arg-type]


def test_reload_is_a_verb_of_implementations_with_a_persistence_backend() -> None:
    # a second service resumes the session from the backend: without one there is nothing to load
    assert "reload" in search.verbs_for(REF)

    class Bare:
        features = frozenset({"injection"})

    assert "reload" not in search.verbs_for(Bare())  # type: ignore[arg-type]


def test_window_names_are_stable_and_say_where_and_what() -> None:
    w = win.Window("two-prompts", win.Point("agent/status", (("status", "idle"),), nth=1), ("send", "cancel"))
    assert w.name == "two-prompts: after agent/status(idle)#1: send; cancel"
    a = win.Window("tool", win.Point("tool/start"), ("abort",), "actor")
    assert a.name == "tool: actor inside tool call#1: abort"
    f = win.Window("reply", win.Point("agent/turn-continuation", when="before"), ("cancel", "send"))
    assert f.name == "reply: before agent/turn-continuation next()#1: cancel; send"


def test_a_cross_window_acts_on_the_other_agent_from_a_listener_of_its_point() -> None:
    # a listener of b's notification cancelling a: named with its target, its action on a
    point = win.Point("agent/turn-start", (("agent", "b"),), nth=1)
    w = win.Window("hand-off", point, ("cancel",), "listener", "a")
    assert w.name == "hand-off: after agent/turn-start of b#1: cancel a"
    hand_off = by_name(["hand-off"])[0]
    listener = w.scenario(hand_off.scenario).listeners[-1]
    assert listener.where == {"agent": "b"} and [a.agent for a in listener.do] == ["a"]
    own = win.Window("hand-off", point, ("cancel",))
    assert own.name == "hand-off: after agent/turn-start of b#1: cancel"
    assert [a.agent for a in own.scenario(hand_off.scenario).listeners[-1].do] == ["b"]


def test_hand_off_has_only_cross_windows_and_two_agents_none() -> None:
    hand_off, two = by_name(["hand-off", "two-agents"])
    wp = search.plan((hand_off,), REF, search.Config(depth=2, nth=1))[0]
    assert wp.windows and all(w.target is not None and w.mode == "listener" and len(w.actions) == 1
                              for w in wp.windows)
    assert {w.actions[0] for w in wp.windows} == set(win.CROSS_VERBS)
    # from each agent's own events to the other, never from an unqualified waterfall or world point
    assert {(dict(w.point.where)["agent"], w.target) for w in wp.windows} == {("a", "b"), ("b", "a")}
    assert all(w.point.kind in ("notification", "log") for w in wp.windows)
    assert not any(w.target for w in search.plan((two,), REF, search.Config(depth=1, nth=1))[0].windows)
    # the verbs a hunt leaves out are left out of its cross windows too
    cancels = search.plan((hand_off,), REF, search.Config(depth=1, nth=1, verbs=("cancel",)))[0]
    assert {w.actions for w in cancels.windows} == {("cancel",)}


def test_waterfall_and_flush_points_have_no_actor_windows() -> None:
    reply = by_name(["reply"])[0]
    wp = search.plan((reply,), REF, search.Config(depth=1, nth=1))[0]
    for w in wp.windows:
        if w.point.kind in ("waterfall", "flush"):
            assert w.mode == "listener" or (w.point.kind == "flush" and w.mode == "plain" and w.actions[-1] == "raise")
    modes = {(w.point.label, w.mode) for w in wp.windows}
    assert ("after agent/status(idle)#1", "actor") in modes
    # PY-2: at a flush, the throwing sequences again by a plain-function listener (its throw at the call)
    assert ("inside session/flush#1", "plain") in modes


def test_a_plain_flush_window_is_a_plain_function_listener_in_yaml_too() -> None:
    reply = by_name(["reply"])[0]
    wp = search.plan((reply,), REF, search.Config(depth=1, nth=1))[0]
    plain = next(w for w in wp.windows if w.mode == "plain")
    assert plain.name == "reply: plain listener inside session/flush#1: raise"
    sc = plain.scenario(reply.scenario)
    assert sc.listeners[-1].plain and load_text(dump(sc)).listeners[-1].plain


def test_the_plan_is_exhaustive_within_the_bounds() -> None:
    reply = by_name(["reply"])[0]
    pts = win.points(reply, win.probe(reply, REF), 3)
    wp = search.plan((reply,), REF, search.Config(depth=2, nth=3))[0]
    verbs = search.verbs_for(REF)
    listener, actor = len(win.sequences(verbs, 2)), len(win.sequences(verbs, 2, "actor"))
    created = sum(1 for s in win.sequences(verbs, 2) if "raise" in s)  # not thrown into the world's setup
    # a stop only where a continuation listener votes: before its next()
    voting = [p for p in pts if p.on == "agent/turn-continuation" and p.when == "before"]
    throwing = sum(1 for s in win.sequences(verbs, 2) if s[-1] == "raise")  # again by a plain flush listener
    # an answer only where a tools/execute listener answers: before its next() (the reply has none)
    answering = [p for p in pts if p.on == "tools/execute" and p.when == "before"]
    # a stall only where a waterfall listener awaits, before its next(), or a flush listener
    stalling = [p for p in pts if (p.kind == "waterfall" and p.when == "before") or p.kind == "flush"]
    stalls = sum(1 for s in win.sequences(verbs, 2) if "stall" in s)
    stops = sum(1 for s in win.sequences(verbs, 2) if "stop" in s)  # alone, and after a steer
    expected = sum(listener + (0 if p.actor_after is None else actor) - (created if p.on == "agent/created" else 0)
                   - (0 if p in voting else stops) - (0 if p in answering else 1) + (throwing if p.kind == "flush" else 0)
                   - (0 if p in stalling else stalls)
                   for p in pts)
    assert voting and sum(1 for w in wp.windows if w.actions == ("stop",)) == len(voting)
    assert not answering and not any(w.actions == ("answer",) for w in wp.windows)
    assert stalling and sum(1 for w in wp.windows if w.actions == ("stall",)) == len(stalling)
    assert len(wp.windows) == expected
    assert len({w.name for w in wp.windows}) == len(wp.windows)


def test_a_stall_acts_inside_a_flush_only_where_the_listener_can_be_cancelled() -> None:
    # in process, dispose() must cut a flush listener that never returns; over the wire a loop
    # can only abandon it, so no stall acts inside session/flush there
    reply = by_name(["reply"])[0]
    pts = [p for p in win.points(reply, win.probe(reply, REF), 1) if p.kind == "flush"]
    verbs = search.verbs_for(REF)
    here = [w for w in win.enumerate_windows(reply, pts, verbs, 2) if "stall" in w.actions]
    assert pts and here and all(w.point.kind == "flush" for w in here)
    assert not [w for w in win.enumerate_windows(reply, pts, verbs, 2, flush_stalls=False) if "stall" in w.actions]


def test_a_window_is_ordinary_scenario_data() -> None:
    reply = by_name(["reply"])[0]
    wp = search.plan((reply,), REF, search.Config(depth=1, nth=1))[0]
    listener = next(w for w in wp.windows if w.mode == "listener")
    sc = listener.scenario(reply.scenario)
    assert [lst.name for lst in sc.listeners][-1] == "window"
    actor = next(w for w in wp.windows if w.mode == "actor")
    assert [a.name for a in actor.scenario(reply.scenario).actors][-1] == "window"


def test_a_bad_inject_window_injects_content_json_cannot_encode() -> None:
    # INJ-4: an actor awaits the call (its waiter is taken once the error reached it), a listener
    # cannot; both only where the implementation declares the injection feature
    reply = by_name(["reply"])[0]
    point = win.Point("agent/status", (("status", "idle"),))
    for mode, waits in (("listener", False), ("actor", True)):
        sc = win.Window("reply", point, ("bad_inject", "when_idle"), mode).scenario(reply.scenario)
        element = sc.listeners[-1] if mode == "listener" else sc.actors[-1]
        inject, waiter = element.do
        assert (inject.verb, inject.unserialisable, inject.wait, waiter.verb) == ("inject", True, waits, "when_idle")

    class Bare:
        features = frozenset({"persistence"})

    assert "bad_inject" in search.verbs_for(REF) and "bad_inject" not in search.verbs_for(Bare())  # type: ignore[arg-type]


def test_shard_spec_parsing() -> None:
    assert shards.parse("2/3") == (2, 3)
    for bad in ("0/2", "3/2", "x", "1/0", "1-2", "1/99999999999999999999"):  # the last overflowed at assign
        with pytest.raises(shards.ShardError, match="--shard"):
            shards.parse(bad)
    assert shards.parse(f"1/{shards.MAX_SHARDS}") == (1, shards.MAX_SHARDS)


def test_shards_take_whole_workloads_largest_first() -> None:
    # 50 -> 1; 30 -> 2; 20 -> 2 (30 < 50); 10 -> 1 (50 = 50: the lower shard)
    assert shards.assign([10, 50, 30, 20], 2) == [1, 1, 2, 2]
    owner = shards.assign([10, 50, 30, 20], 2)
    loads = [sum(s for s, o in zip([10, 50, 30, 20], owner, strict=True) if o == k) for k in (1, 2)]
    assert sorted(loads) == [50, 60]
    assert shards.assign([5, 5], 3) == [1, 2]


def test_inside_a_resumes_load_a_window_takes_the_id_or_closes_the_service() -> None:
    # No agent exists yet while resume() awaits its load: a caller can take its id (SVC-2) or
    # close the service (SVC-7: the resumed agent must then be refused or disposed).
    (resume,) = by_name(["resume"])
    timeline = win.probe(resume, REF)
    points = [p for p in win.points(resume, timeline, 3) if p.on == "persistence/load"]
    assert points, "the resume workload's load is a point"
    found = list(win.enumerate_windows(resume, points, search.verbs_for(REF), 2))
    assert sorted({w.actions for w in found}) == [("close",), ("create",)]
    assert all(w.name.startswith("resume: ") and "inside the persisted log's load of a" in w.name for w in found)


def test_twins_are_later_actor_windows_with_the_same_actions_and_run_alike() -> None:
    """An actor window started where nothing was scheduled since an earlier one's event starts
    its actor at the same place in FIFO order: the same run (the trace signature, reached, and
    the verdict, here of a mutant that fails some of them)."""
    from conformance import mutants

    impl = mutants.get("idle-between-queued-turns")
    wp = search.plan(by_name(["two-prompts"]), impl, search.Config(depth=1, verbs=("send", "cancel", "when_idle")))[0]
    assert wp.twins
    failing = 0
    for index, twin in wp.twins.items():
        a, b = wp.windows[index], wp.windows[twin]
        assert twin < index and a.mode == b.mode == "actor" and a.actions == b.actions and a.point != b.point
        mine, its = (search.plain(wp, i, i + 1, impl)[0] for i in (index, twin))
        assert mine is not None and its is not None
        assert (mine.reached, mine.signature) == (its.reached, its.signature)
        assert (mine.failure or {}).get("checks") == (its.failure or {}).get("checks")
        failing += mine.failure is not None
    assert failing
    # not every pair of actor windows with the same actions: only where nothing ran between
    actors = [i for i, w in enumerate(wp.windows) if w.mode == "actor"]
    assert len(actors) - len(wp.twins) > len({wp.windows[i].actions for i in actors})


def test_plain_skips_twins_only_when_asked_and_with_twins_fills_them_in() -> None:
    wp = search.plan(by_name(["reply"]), REF, search.Config(depth=1, nth=1, verbs=("cancel",)))[0]
    index, twin = next(iter(wp.twins.items()))
    results = [search.plain(wp, i, i + 1, REF, skip_twins=True)[0] for i in range(len(wp.windows))]
    assert results[index] is None and results[twin] is not None
    search.with_twins(wp, results)
    assert results[index] == dataclasses.replace(results[twin], twin=twin)  # type: ignore[arg-type]
    assert search.plain(wp, index, index + 1, REF)[0] is not None
    assert search.plan(by_name(["reply"]), REF, search.Config(depth=1, nth=1, verbs=("cancel",), twins=False))[0].twins == {}
