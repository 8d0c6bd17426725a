"""The hunt end to end on small bounds: it finds a mutant by itself, its cassette replays, the
reference passes, shards merge into the one-machine report, and the bytes do not depend on the
hash seed or the number of workers."""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from conformance.hunt import driver, pool, report, search
from conformance.hunt import windows as win
from conformance.impl import resolve
from conformance.scenario import race

ROOT = Path(__file__).resolve().parents[2]
REF = resolve(None)
SMALL = search.Config(workloads=("reply", "two-prompts"), depth=2, nth=1, verbs=("send", "cancel"),
                      dfs=1, random=1, pct=1)
TINY = search.Config(workloads=("reply",), depth=1, nth=1, verbs=("send", "cancel", "when_idle"), dfs=1, random=1,
                     pct=0)


def _tiny(workload: str, verb: str) -> search.Config:
    """A hunt of one verb at depth 1 over ``workload`` (comma-separated names), FIFO runs only;
    ``verb`` ``a;b`` is the sequences of those two verbs at depth 2."""
    verbs = tuple(verb.split(";"))
    return search.Config(workloads=tuple(workload.split(",")), depth=len(verbs), nth=1, verbs=verbs, dfs=0, random=0,
                         pct=0)


@functools.cache
def _reference_findings(workload: str, verb: str) -> list[Any]:
    """The reference's findings in ``_tiny(workload, verb)`` (the same hunt for every mutant that
    shares it: run once per test process)."""
    return list(driver.hunt(REF, "reference", _tiny(workload, verb)).report["findings"])


@pytest.fixture(scope="module")
def whole() -> dict[str, Any]:
    return driver.hunt(REF, "reference", SMALL).report


def test_the_reference_passes_a_small_hunt_and_its_coverage_adds_up(whole: dict[str, Any]) -> None:
    rep = whole
    assert rep["findings"] == [] and rep["complete"] and rep["stopped"] is None
    t = rep["totals"]
    assert t["windows"] == sum(row["enumerated"] for row in rep["coverage"].values()) > 100
    assert 0 < t["distinct"] <= t["run"] <= t["windows"]
    assert t["explored"] <= t["distinct"]
    assert t["schedules"] + t["twins"] >= t["windows"] + t["explored"]  # a twin's plain run is another's
    assert [s["name"] for s in rep["workloads"]] == ["reply", "two-prompts"]


@pytest.mark.parametrize("impl", ["reference", "flush-not-awaited"])
def test_twin_actor_windows_change_nothing_in_the_report_but_the_runs_it_took(impl: str) -> None:
    """Windows.twins: an actor window whose plain run is an earlier window's is not run again;
    the report is the one every window run gives, findings included (LOOP-4 for the mutant)."""
    from conformance import mutants

    subject = REF if impl == "reference" else mutants.get(impl)
    config = search.Config(workloads=("two-prompts",), depth=1, nth=2, verbs=("send", "cancel", "when_idle"), dfs=1,
                           random=0, pct=0)
    reports = [driver.hunt(subject, impl, dataclasses.replace(config, twins=twins)).report for twins in (True, False)]
    assert reports[0]["totals"]["twins"] > 0 and reports[1]["totals"]["twins"] == 0
    assert reports[0]["totals"]["schedules"] == reports[1]["totals"]["schedules"] - reports[0]["totals"]["twins"]
    assert bool(reports[0]["findings"]) == (impl != "reference")
    for rep in reports:
        rep["config"].pop("twins")
        rep["totals"].pop("twins")
        rep["totals"].pop("schedules")
        for section in rep["workloads"]:
            section.pop("twins")
            section.pop("schedules")
    assert reports[0] == reports[1]


def test_the_hunt_finds_a_mutant_nobody_wrote_a_scenario_for(tmp_path: Path) -> None:
    impl = resolve("mutant:waiters-after-status")
    result = driver.hunt(impl, "mutant:waiters-after-status", TINY, out=tmp_path)
    rep = result.report
    assert rep["findings"], "the hunt must find a when_idle() released after the idle listeners ran"
    finding = rep["findings"][0]
    assert "IDLE-2" in finding["rules"]
    cassette = tmp_path / finding["examples"][0]["cassette"]
    assert cassette.exists() and cassette in result.cassettes
    record = race.load(cassette)
    assert not race.replay(record, impl).ok  # the race replays on the mutant
    assert race.replay(record, REF).ok  # and the reference passes it


def test_explore_all_explores_every_reached_window_not_only_each_new_trace() -> None:
    # The deeper hunt: every window's schedules, each with its own seeds (a schedule that shows a
    # race in one window of a trace need not in another of the same trace).
    base = driver.hunt(REF, "reference", TINY).report
    every = driver.hunt(REF, "reference", dataclasses.replace(TINY, explore_all=True)).report
    assert every["findings"] == [] and every["config"]["explore_all"] is True
    assert base["totals"]["explored"] <= base["totals"]["distinct"] < every["totals"]["explored"]
    assert every["totals"]["explored"] == every["totals"]["run"]  # the reference passes every window
    assert every["totals"]["schedules"] > base["totals"]["schedules"]


def test_first_stops_at_the_first_finding() -> None:
    impl = resolve("mutant:waiters-after-status")
    rep = driver.hunt(impl, "m", TINY, first=True).report
    assert rep["stopped"] == "first finding" and not rep["complete"] and rep["findings"]


def test_against_itself_reports_no_difference_and_a_mutant_differs() -> None:
    cfg = search.Config(workloads=("reply",), depth=1, nth=1, verbs=("send", "cancel", "when_idle"), dfs=0,
                        random=0, pct=0, against="reference")
    rep = driver.hunt(REF, "reference", cfg, against=REF).report
    assert rep["differences"] == []
    mutant = resolve("mutant:waiters-after-status")
    rep = driver.hunt(mutant, "m", cfg, against=REF).report
    assert rep["differences"], "a when_idle() released at another moment is a visible difference"
    assert all("reference" in d and "impl" in d for d in rep["differences"])


@pytest.fixture(scope="module")
def parts() -> list[dict[str, Any]]:
    return [driver.hunt(REF, "reference", SMALL, shard=(i, 2), workers=2).report for i in (1, 2)]


def test_shards_on_two_workers_merge_into_exactly_the_one_machine_report(
        whole: dict[str, Any], parts: list[dict[str, Any]]) -> None:
    assert all(not p["complete"] for p in parts)
    assert [p["shard"] for p in parts] == ["1/2", "2/2"]
    assert sorted(s["name"] for p in parts for s in p["workloads"]) == ["reply", "two-prompts"]
    merged = report.merge([(f"shard{i}", p) for i, p in enumerate(parts)])
    assert report.dumps(merged) == report.dumps(whole)
    assert report.dumps(report.merge([("b", parts[1]), ("a", parts[0])])) == report.dumps(whole)


def test_same_seed_same_bytes_whatever_the_hash_seed(tmp_path: Path) -> None:
    code = ("import sys; from conformance.hunt import driver, report, search; from conformance.impl import resolve; "
            "cfg = search.Config(workloads=('two-prompts',), depth=1, nth=1, verbs=('send', 'cancel'), dfs=1, "
            "random=1, pct=1); "
            "sys.stdout.write(report.dumps(driver.hunt(resolve('mutant:idle-ignores-queue'), 'm', cfg).report))")
    outs = []
    for hashseed in ("1", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": hashseed}
        proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=120)
        assert proc.returncode == 0, proc.stderr
        outs.append(proc.stdout)
    assert outs[0] == outs[1]
    assert json.loads(outs[0])["format"] == report.FORMAT


def test_merge_refuses_reports_of_another_hunt(parts: list[dict[str, Any]]) -> None:
    a = parts[0]
    b = dict(parts[1], config={**a["config"], "seed": 9})
    with pytest.raises(report.ReportError, match="another hunt"):
        report.merge([("a.json", a), ("b.json", b)])


def test_report_load_names_the_file_and_the_problem(tmp_path: Path) -> None:
    bad = tmp_path / "r.json"
    bad.write_text("{nope")
    with pytest.raises(report.ReportError, match=r"r\.json:1: not JSON"):
        report.load(bad)
    bad.write_text('{"format": "other"}')
    with pytest.raises(report.ReportError, match="not a hunt report"):
        report.load(bad)


@pytest.mark.parametrize(("edit", "says"), [
    (lambda r: b"\xff\xfe", "not UTF-8 text"),
    (lambda r: b"[" * 100_000 + b"]" * 100_000, "not a hunt report ("),
    (lambda r: json.dumps({**r, "config": {"depth": "NAN"}}).replace('"NAN"', "NaN").encode(), "NaN is not a JSON number"),
    (lambda r: json.dumps({**r, "extra": 0}).replace('"extra": 0', '"extra": ' + "9" * 5000).encode(),
     "not a hunt report ("),
    (lambda r: json.dumps({**r, "config": "x"}).encode(), "config is not an object"),
    (lambda r: json.dumps({**r, "workloads": None}).encode(), "workloads is not a list"),
    (lambda r: json.dumps({**r, "workloads": [5]}).encode(), "workloads[0] has no name"),
    (lambda r: json.dumps({**r, "workloads": [{**r["workloads"][0], "windows": -5}]}).encode(),
     "workloads[0].windows is not a count"),
    (lambda r: json.dumps({**r, "workloads": [{**r["workloads"][0], "coverage": None}]}).encode(),
     "workloads[0].coverage is not a table of counts"),
    (lambda r: json.dumps({**r, "workloads": [{**r["workloads"][0], "findings": [5]}]}).encode(),
     "workloads[0].findings is not a list of findings"),
    # session 58's probe: each merged with exit 0
    (lambda r: json.dumps({**r, "shard": "3/2"}).encode(), "shard is '3/2', not I/N"),
    (lambda r: json.dumps({**r, "shard": 1}).encode(), "shard is 1, not I/N"),
    (lambda r: json.dumps({**r, "workloads": [{**r["workloads"][0], "name": "zzz"}]}).encode(),
     "workloads[0] is workload 'zzz', which the hunt did not plan"),
    (lambda r: json.dumps({**r, "workloads": [{**r["workloads"][0], "findings": [
        {"signature": "s", "window": "w", "rules": "ERR-2", "index": "zero"}]}]}).encode(),
     "workloads[0].findings is not a list of findings"),
], ids=["binary", "deep", "nan", "huge-int", "config", "workloads", "workload", "count", "coverage", "findings",
        "shard-range", "shard-type", "unplanned", "finding-types"])
def test_a_report_that_is_not_what_a_hunt_writes_is_refused_naming_what(
        tmp_path: Path, parts: list[dict[str, Any]], edit: Any, says: str) -> None:
    # merge read only the top-level keys: a binary or deep file was a traceback, a NaN or a
    # negative count merged into a report that is not JSON (session 54's hostile probe)
    bad = tmp_path / "r.json"
    bad.write_bytes(edit(parts[0]))
    with pytest.raises(report.ReportError) as info:
        report.load(bad)
    assert str(info.value).startswith(f"{bad}: ") and says in str(info.value) and "\n" not in str(info.value)
    good = tmp_path / "good.json"
    good.write_text(report.dumps(parts[0]))
    assert report.load(good) == parts[0]


def _dies(unit: int) -> int:
    if unit == 3:
        os._exit(7)
    return unit * 2


def _raises(unit: int) -> int:
    if unit == 2:
        raise ValueError("broken unit")
    return unit


def test_pool_results_come_back_in_unit_order() -> None:
    assert pool.run(lambda u: u * 2, list(range(10)), workers=1) == [u * 2 for u in range(10)]
    assert pool.run(_dies, [0, 1, 2], workers=2) == [0, 2, 4]


def test_a_worker_that_dies_is_an_error_naming_its_unit() -> None:
    with pytest.raises(pool.PoolError, match=r"died \(exit code 7\) while running unit 3"):
        pool.run(_dies, list(range(6)), workers=2, describe=lambda u: f"unit {u}")


def _closes_fds(unit: int) -> int:
    if unit == 2:
        os.closerange(3, 1024)  # an implementation closing descriptors it does not own: the worker's pipes
    return unit


def test_a_worker_whose_pipes_were_closed_dies_quietly_and_is_named() -> None:
    # No traceback from the worker on the user's terminal: one error line, from the parent.
    with pytest.raises(pool.PoolError, match=r"died \(exit code 70\) while running unit 2 \(its pipe"):
        pool.run(_closes_fds, list(range(5)), workers=2, describe=lambda u: f"unit {u}")


def _sleeps(unit: int) -> int:
    if unit == 1:
        time.sleep(60)  # a stuck unit
    return unit


def test_a_stop_abandons_units_still_running_after_the_grace() -> None:
    # A stop asked for while a unit is stuck: the pool returns what finished, within the grace,
    # so a stopped hunt still writes its (partial) report.
    asked: list[float] = []

    def stop() -> bool:
        if not asked:
            asked.append(time.monotonic())
        return True
    t0 = time.monotonic()
    out = pool.run(_sleeps, [0, 1, 2, 3], workers=2, should_stop=stop)
    assert time.monotonic() - t0 < pool.STOP_GRACE + 5
    assert out[1] is None and out[0] == 0


def test_a_unit_that_raises_is_an_error_naming_it() -> None:
    with pytest.raises(pool.PoolError, match="unit 2: ValueError: broken unit"):
        pool.run(_raises, list(range(5)), workers=2, describe=lambda u: f"unit {u}")


def test_a_trace_signature_ignores_times_and_the_windows_own_calls_only() -> None:
    from conformance.hunt.windows import Point, Window
    from conformance.hunt.workloads import by_name
    from conformance.scenario import engine

    wl = by_name(["reply"])[0]
    point = Point("agent/status", (("status", "idle"),))
    trace = engine.run_one(Window("reply", point, ("send",)).scenario(wl.scenario), REF).trace
    sig = search.signature(trace)
    shifted = [{**e, "t_us": e["t_us"] + 7} for e in trace.timeline]
    renamed = [{**e, "text": "W2"} if e.get("text") == "W1" else e for e in trace.timeline]
    assert search.signature(type("T", (), {"timeline": shifted})()) == sig, "times are not the trace"
    assert search.signature(type("T", (), {"timeline": renamed})()) == sig, "the window's texts are anonymous"
    other = [e for e in trace.timeline if e.get("kind") != "agent/queued"]
    assert search.signature(type("T", (), {"timeline": other})()) != sig
    twice = engine.run_one(Window("reply", point, ("send", "send")).scenario(wl.scenario), REF).trace
    assert search.signature(twice) != sig, "a second prompt is a second turn"
    reordered = [dict(reversed(list(e.items()))) for e in trace.timeline]
    assert search.signature(type("T", (), {"timeline": reordered})()) == sig, "key order is not the trace"
    huge = [{**e, "data": {"n": 2 ** 70}} for e in trace.timeline]  # past orjson's 64 bits
    assert search.signature(type("T", (), {"timeline": huge})()) != sig


# Ordered by (workload, verb) when run: neighbours share their reference hunt (_reference_findings,
# once per test process), and xdist hands each worker a run of neighbours.
@pytest.mark.parametrize(("mutant", "workload", "verb", "check", "rule"), sorted([
    # a second late failure in one turn: the workload's plugin throws at every turn-end, a window too
    ("late-failure-not-recorded", "turn-end-throws", "raise", "ERR-9", "ERR-9"),
    # a create under a live agent's id that the mutant accepts
    ("svc-duplicate-id", "reply", "create", "SVC-2", "SVC-2"),
    # a create of the id a resume() is loading: the mutant's resume does not check it again
    ("resume-no-recheck", "resume", "create", "SVC-3", "SVC-2"),
    # a tool result logged under the id a plugin's tools/execute listener returned
    ("tool-result-listener-id", "tool-plugin", "send", "TOOLS", "TOOL-4"),
    # ... and under the id a plugin set in place on the execution before next() (blind round O)
    ("tool-result-id-read-back", "tool-plugin", "send", "TOOLS", "TOOL-4"),
    # session 62's round Q: nested objects of a history shared with the log (the fake model edits
    # them now), a late failure warned under the newest turn, a system-prompt plugin's return
    ("derive-shares-tool-result-blocks", "tool", "send", "problems", "LOG-1"),
    ("derive-shares-provider-data", "out-of-order", "send", "problems", "LOG-1"),
    ("derive-drops-empty-text-blocks", "out-of-order", "send", "HISTORY", "LOG-7"),
    ("empty-code-dropped-from-error-event", "call-raises", "send", "ASSEMBLY", "ERR-7"),
    ("late-failure-warned-under-newest-turn", "reply", "inject;raise", "WARNED", "ERR-12"),
    ("system-prompt-return-ignored", "two-step", "send", "SYSTEM", "SVC-5"),
    # a resumed agent on a session id of its own: any window shows it
    ("resume-fresh-session-id", "resume", "send", "SVC-3", "SVC-3"),
    # the blind check of 2026-12-03: the prompts' place (LOOP-4), the announced error's code (ERR-9)
    ("turn-start-before-prompts", "reply", "send", "SHAPE", "LOOP-4"),
    ("announce-wraps-error", "model-error", "send", "ERR-9", "ERR-9"),
    # and a disposed idle agent whose driver never exits, found though the resume workload
    # cannot even be set up on it (its persisted session's close hangs)
    ("dispose-no-wake", "reply,resume", "send", "problems", "SVC-7"),
    # the fourth and fifth blind rounds: each oracle clause they added
    ("disposed-turn-end-silent", "reply", "close", "NOTIFIED", "DISP-1"),
    ("tools-reversed", "two-step", "send", "TOOLS", "TOOL-1"),
    ("tool-failure-not-flagged", "failing-tool", "send", "TOOLS", "TOOL-3"),
    ("step-numbers-continue", "reply", "send", "LOG", "LOG-5"),
    ("turn-end-notified-after-flush", "reply", "send", "FLUSH", "LOOP-4"),
    ("abort-default-cancelled", "reply", "abort", "REASON", "ABORT-1"),
    ("announce-step-zero", "reply", "raise", "ERR-9", "ERR-9"),
    ("flush-gather-fail-fast", "reply", "raise", "FLUSH", "LOOP-4"),
    ("error-code-null", "reply", "raise", "TOOLS", "ERR-7"),
    ("steering-turn-prev", "reply", "steer", "QUEUED", "LOOP-9"),
    # the sixth blind round: the data shapes of spec 0/0b, a model error's code
    ("tool-error-no-name", "failing-tool", "send", "DATA", "TOOL-3"),
    ("finish-error-code-dropped", "model-error", "send", "ASSEMBLY", "FINISH-1"),
    ("maxtok-empty-message-appended", "max-tokens-tools", "send", "ASSEMBLY", "MAXTOK-5"),
    ("tool-args-empty-raw", "tool-plugin", "send", "ARGS", "TOOL-2"),
    # the seventh (races): steering waiting when the first step opens
    ("first-step-skips-steering", "reply", "steer", "STEP-ORDER", "LOOP-5"),
    ("disposed-turn-not-flushed", "reply", "dispose", "FLUSH", "DISP-1"),
    # the ninth: a prompt queued during a flush that fails, a consumed prompt, a contained throw in
    # send(), the order of steering, the tools of a turn's second request
    ("flush-failure-drops-queue", "reply", "send;raise", "prompts", "ERR-6"),
    ("turn-start-throw-requeues", "reply", "raise", "prompts", "ERR-11"),
    ("queued-listener-debug", "reply", "raise", "WARNED", "ERR-12"),
    ("steering-drained-lifo", "steer", "steer", "FIFO", "INBOX-1"),
    ("tools-first-step-only", "tool", "send", "REQUEST", "SVC-5"),
    # the tenth (races): a cancel at a stop vote of the continuation gate, a lost wake-up
    ("cancel-cont-only-when-continuing", "reply", "cancel", "CANCEL-1", "CANCEL-1"),
    ("park-check-yields", "reply", "send", "prompts", "LOOP-1"),
    # round 28: a backend's repair of a log whose writer died inside a tool call
    ("repair-message-closes-step", "tool", "reload", "problems", "LOG-5"),
    # round 29: a disposed agent still handed out by get(id) until its driver exits
    ("registry-left-until-driver-exit", "reply", "dispose", "problems", "SVC-6"),
    # round 33: an adapter's own error once the signal fired; a repair the backend does not keep
    # (the resume workload's persisted run died mid-turn)
    ("signalled-raise-is-error", "steer", "cancel", "SIGNALLED", "ABORT-1"),
    ("repair-not-stored", "resume", "send", "problems", "SVC-3"),
    # round 36: a forced stop at the continuation gate ignored after drained steering
    ("drained-steering-overrides-stop", "steer", "stop", "CONT-1", "CONT-1"),
    ("cancelled-turn-skips-empty-step", "reply", "cancel", "CANCEL-STEP", "CANCEL-STEP"),
    # round 53: a throwing agent/steering listener, and the steering waiting behind its message
    ("steering-taken-whole-before-notify", "steer", "raise", "prompts", "LOOP-8"),
    ("cancelled-step-drains-late-steering", "reply", "cancel;steer", "STEER-3", "CANCEL-4"),
    ("steering-drain-outlives-cancel", "steer", "cancel;steer", "STEER-3", "CANCEL-4"),
    ("tool-calls-deduped-by-id", "failing-tool", "send", "TOOLS", "LOOP-5"),
    # round 54: a throwing session/event listener on a prompt or a step/start is no boundary listener
    ("prompt-throw-silences-turn-end", "reply", "raise", "NOTIFIED", "LOOP-4"),
    ("step-start-event-throw-silences-turn-end", "reply", "raise", "NOTIFIED", "LOOP-4"),
], key=lambda case: (case[1], case[2])))
def test_the_hunt_reaches_what_its_later_workloads_and_verbs_are_for(
        mutant: str, workload: str, verb: str, check: str, rule: str) -> None:
    cfg = _tiny(workload, verb)
    assert _reference_findings(workload, verb) == []
    found = driver.hunt(resolve(f"mutant:{mutant}"), mutant, cfg, first=True).report["findings"]
    assert found and check in found[0]["checks"] and rule in found[0]["rules"], found


def test_an_abort_observer_throwing_inside_dispose_is_a_window_and_dispose_must_not_raise() -> None:
    # round 33: hang's second model call is stopped by a dispose(); its signal's second firing is
    # inside that dispose(), where a window's raise is an abort observer that throws. dispose()
    # cannot fail (0b, DISP-2): the world records one that raised as a problem naming DISP-2.
    cfg = replace(_tiny("hang", "raise"), nth=2)
    assert driver.hunt(REF, "reference", cfg).report["findings"] == []
    found = driver.hunt(resolve("mutant:dispose-fire-unguarded"), "dispose-fire-unguarded", cfg).report["findings"]
    assert found and "problems" in found[0]["checks"] and "DISP-2" in found[0]["rules"], found
    assert found[0]["first"] == "hang: as a model call's signal fires#2: raise", found[0]["first"]


def test_a_create_inside_the_agents_own_dispose_is_not_made() -> None:
    # examples/spec_loop leaves the registry before it fires the step's signal in dispose(): a
    # create of the id there (a window as hang's signal fires inside the dispose) may succeed, and
    # is no second live agent (the first is on its way out): the world makes no create there
    cfg = replace(_tiny("hang", "create"), nth=2)
    impl = resolve("examples.spec_loop.adapter:implementation")
    assert driver.hunt(impl, "spec_loop", cfg).report["findings"] == []


def test_explore_deviates_once_per_schedule_right_after_the_window_acted() -> None:
    """Phase 2's bounded search does not repeat phase 1's FIFO run: each of its schedules
    deviates once, and a listener window's deviation comes after the listener fired."""
    from conformance.hunt.workloads import by_name
    from conformance.scenario import engine
    from simulator.strategies import AnchoredStrategy

    cfg = search.Config(workloads=("reply",), depth=1, nth=1, verbs=("cancel",))
    wp = search.plan(by_name(["reply"]), REF, cfg)[0]
    modes = set()
    for index, window in enumerate(wp.windows):
        sc = wp.scenario(index)
        strategy = AnchoredStrategy(event=search.window_acted, task="actor:window")
        runs = 0
        while not strategy.exhausted and runs < 4:
            rep = engine.run_one(sc, REF, strategy, 0)
            runs += 1
            if strategy.exhausted:
                assert rep.deviations == [], "the run that finds no target is FIFO"
                break
            assert len(rep.deviations) == 1, window.name
            if window.mode == "listener":
                acted = next(i for i, e in enumerate(rep.trace.timeline) if search.window_acted(e))
                assert rep.deviations[0]["at"] > acted, window.name
            modes.add(window.mode)
    assert modes == {"listener", "actor"}


@pytest.mark.parametrize("impl", ["reference", "inject-check-then-yield"])
def test_explore_with_phase_1s_widths_makes_only_the_runs_that_deviate_and_finds_the_same(impl: str) -> None:
    """Phase 1's plain run measures the choice points phase 2's bounded search would deviate at
    (``Plain.widths``): given them, phase 2 skips the one FIFO run that told it it was done, and
    nothing else changes: same failures, same schedules."""
    from conformance import mutants
    from conformance.hunt.workloads import by_name

    subject = REF if impl == "reference" else mutants.get(impl)
    # three verbs: the mutant's inject, and a caller's send and cancel (every verb took a minute)
    cfg = search.Config(workloads=("two-prompts",), depth=1, nth=1, dfs=3, random=1, pct=0,
                        verbs=("send", "cancel", "inject"))
    wp = search.plan(by_name(["two-prompts"]), subject, cfg)[0]
    results = search.plain(wp, 0, len(wp.windows), subject)
    picks = search.distinct(results)
    assert picks
    saved = 0
    for index in picks:
        widths = results[index].widths  # type: ignore[union-attr]
        assert widths is not None
        blind, measured = search.explore(wp, index, subject, cfg), search.explore(wp, index, subject, cfg, widths)
        assert measured[1] == blind[1], wp.windows[index].name
        if measured[1] is None:
            assert measured[0] == min(cfg.dfs, sum(w - 1 for w in widths)) + cfg.random + cfg.pct
        saved += blind[0] - measured[0]
        assert 0 <= blind[0] - measured[0] <= 1
    assert saved > 0
    if impl != "reference":
        assert any(search.explore(wp, i, subject, cfg, results[i].widths)[1] for i in picks)  # type: ignore[union-attr]


class _NoBackend:
    """The reference, but its persistence backend cannot be made: the ``resume`` workload's own
    run fails while the world sets it up; every other workload runs as on the reference."""

    def __init__(self, base: Any) -> None:
        self._base = base
        self.name = "no-backend"

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._base, attr)

    def new_persistence(self) -> object:
        raise RuntimeError("backend offline")


def test_a_workload_the_implementation_fails_to_set_up_is_a_finding_and_the_others_are_hunted(
        tmp_path: Path) -> None:
    # Before: a ScenarioSetupError in one workload's probe ended the whole hunt as bad input
    # (exit 2), so a buggy loop whose close hangs was "bad input" instead of a finding.
    impl = _NoBackend(REF)
    cfg = dataclasses.replace(TINY, workloads=("reply", "resume"))
    rep = driver.hunt(impl, "no-backend", cfg, out=tmp_path).report
    (finding,) = rep["findings"]
    assert finding["checks"] == ["setup"] and finding["workloads"] == ["resume"]
    assert "new_persistence() raised RuntimeError: backend offline" in finding["message"]
    assert finding["examples"] == [{"window": "resume: its own run, with no window (set-up)"}]  # no cassette
    reply = next(s for s in rep["workloads"] if s["name"] == "reply")
    assert reply["run"] > 0 and reply["findings"] == []  # the other workload was hunted, and passes
    assert rep["complete"] and rep["stopped"] is None
    first = driver.hunt(impl, "no-backend", cfg, first=True).report
    assert first["stopped"] == "first finding" and first["totals"]["run"] == 0  # known before any window
    from conformance.scenario.world import ScenarioSetupError

    with pytest.raises(ScenarioSetupError, match="backend offline"):  # nothing can be hunted: bad input
        driver.hunt(impl, "no-backend", dataclasses.replace(TINY, workloads=("resume",)))


@pytest.mark.parametrize("workload", ["failing-tool", "model-error", "resume"])
def test_no_run_keeps_a_world_alive(workload: str) -> None:
    # A hunt runs a hundred thousand windows in one worker: whatever a run leaves reachable stays
    # for the rest of it, and every full collection walks it. A scripted error raised as the same
    # object each time once chained every run's traceback, and so its world, onto the script.
    import gc

    from conformance.hunt.workloads import by_name
    from conformance.scenario import engine
    from conformance.scenario.world import World

    def worlds() -> set[int]:
        gc.collect()
        return {id(o) for o in gc.get_objects() if isinstance(o, World)}

    ref = resolve(None)
    wp = search.plan(by_name([workload]), ref, search.Config())[0]
    before = worlds()  # an earlier test's leftovers are not this one's to judge
    for index in range(0, len(wp.windows), max(1, len(wp.windows) // 6)):
        engine.run_one(wp.scenario(index), ref)
    assert worlds() - before == set()


def test_a_waiter_released_by_dispose_itself_while_the_driver_runs_is_found() -> None:
    # IDLE-4: a waiter registered while running and released by the disposal waits for the
    # driver loop's exit. A loop releasing its waiters inside dispose() passed the hunt (session
    # 57's blind round G): the world now reads the driver task as the waiter's awaiter resumes.
    from tests.conformance_meta.waiting_loops import EagerReleaseLoop

    cfg = _tiny("reply", "when_idle;dispose")
    spec = resolve("examples.spec_loop.adapter:implementation")
    assert driver.hunt(spec, "spec_loop", cfg).report["findings"] == []
    found = driver.hunt(EagerReleaseLoop(), "eager", cfg).report["findings"]
    assert found and all(f["rules"] == ["IDLE-4"] for f in found), found
    # the turn still open at the release is the DISPOSAL oracle's; one already closed (the driver
    # in the turn's flush) only the driver task tells
    assert any("driver task still ran" in f["message"] for f in found), found


def test_a_cancel_from_another_agents_listener_between_two_turns_is_found() -> None:
    # LOOP-8, IDLE-2: a turn that ends with work queued runs the next back to back; when a
    # listener of another agent of the service withdraws that work in between, the agent goes
    # idle. A loop that waits for more work still running hangs every waiter (session 58's blind
    # round H, v01, on a service driving all agents from one task): only a window acting on one
    # agent from the other's listener reaches it (the hand-off workload).
    from tests.conformance_meta.variant_loops import HandOffLoop

    cfg = _tiny("hand-off", "cancel")
    assert driver.hunt(HandOffLoop(), "yielding", cfg).report["findings"] == []
    found = driver.hunt(HandOffLoop(parks_running=True), "parking", cfg).report["findings"]
    assert [f["rules"] for f in found] == [["IDLE-2", "LOOP-1"]], found
    assert found[0]["first"].endswith(": cancel a"), found
    # the same loop passes every window acting on its own agent
    assert driver.hunt(HandOffLoop(parks_running=True), "parking", _tiny("two-agents", "cancel")).report["findings"] == []


def test_a_listener_acting_on_another_agent_is_judged_as_acting_from_outside_its_turn() -> None:
    # The oracles read where an op was made from the listener's event; one of b's events is no
    # point of a's turn. Such windows were false alarms: b's step-start listener aborting a
    # (ABORT-1's "no step in flight" is a's, not b's) and a's disposal listener queueing on b
    # while the world's close disposes both (SVC-7: the close drops it) on the reference, and b's
    # step-end listener steering a (CONT-2 is a's own gate) on an independent loop.
    cfg = search.Config(workloads=("hand-off",), depth=1, nth=1, verbs=win.CROSS_VERBS, dfs=0, random=0, pct=0)
    report = driver.hunt(REF, "reference", cfg).report
    assert report["findings"] == [], report["findings"]
    assert report["totals"]["windows"] >= 80


def test_a_late_failure_announced_under_the_newest_turn_is_found() -> None:
    # ERR-9, ERR-6: a failing flush is announced for the turn it flushed, once. A loop naming it
    # by the log's newest turn, once an idle inject wrote a one-shot turn during the flush,
    # announces that one twice and the flushed turn never (session 58's blind round I, v02 and
    # v05): the flush-throws workload's failing persistence plugin and an inject window find it.
    from tests.conformance_meta.variant_loops import NewestTurnLoop

    cfg = _tiny("flush-throws", "inject")
    assert driver.hunt(resolve("examples.spec_loop.adapter:implementation"), "spec_loop", cfg).report["findings"] == []
    found = driver.hunt(NewestTurnLoop(), "newest", cfg).report["findings"]
    assert [f["signature"] for f in found] == ["ONCE [ERR-9]"], found
    assert "announced through agent/error twice" in found[0]["message"], found


def test_work_an_idle_listener_queues_after_a_dropped_turn_is_found() -> None:
    # CANCEL-W2, IDLE-2: a cancel from the running status listener drops the turn about to start
    # and the agent goes idle, a real transition; what its idle listener queues then counts as
    # arriving after it, and runs. promise_loop parked at once after that transition, stranding
    # it (session 59's blind round J, v02): the idle-plugin workload's auto-continue plugin
    # queues at the first idle transition, whatever ended the running period.
    from tests.conformance_meta.variant_loops import LateDropLoop

    cfg = _tiny("idle-plugin", "cancel")
    assert driver.hunt(resolve("examples.spec_loop.adapter:implementation"), "spec_loop", cfg).report["findings"] == []
    found = driver.hunt(LateDropLoop(), "late-drop", cfg).report["findings"]
    assert found and all("prompt 'F' was sent and never cancelled but never ran" in f["message"] for f in found), found
    # the same windows with no plugin queueing at that transition: nothing to strand
    assert driver.hunt(LateDropLoop(), "late-drop", _tiny("reply", "cancel")).report["findings"] == []


def test_a_disposal_announced_a_while_after_the_cancelled_driver_ended_is_no_finding() -> None:
    # PY-1: once the cancelled driver task has ended, the agent ends disposed. A loop may flip the
    # status on a later pass of whatever the task's end woke (svc_loop's scheduler does): the
    # world judges once nothing else is ready (simulator.wait_quiescent), in every schedule. With
    # a fixed number of yields instead, a pct schedule passing that chain over made it a false
    # finding on svc_loop (session 59), and a chain longer than the yields one even in FIFO order.
    from tests.conformance_meta.variant_loops import LateStatusLoop

    cfg = search.Config(workloads=("reply", "tool"), depth=1, nth=2, verbs=("cancel_driver",), dfs=2, random=2, pct=2)
    report = driver.hunt(LateStatusLoop(), "late-status", cfg).report
    assert report["totals"]["windows"] >= 20 and report["totals"]["explored"] >= 3, report["totals"]
    assert report["findings"] == [], report["findings"]


@pytest.mark.parametrize("variant,workloads,verbs,signature", [
    ("CopiedErrorLoop", "model-error", "send", "ORIGINAL [ERR-9]"),
    ("WrappedErrorLoop", "model-error", "send", "ERR-9+ORIGINAL [ERR-9]"),
    ("WrappedErrorLoop", "call-raises", "when_idle", "ERR-9+ORIGINAL [ERR-9]"),
    ("OpeningDrainLoop", "step-end-steer", "raise", "NOTIFIED [LOOP-4]"),
    ("UnaskedGateLoop", "reply", "cancel", "CANCEL-1 [CANCEL-1]"),
    ("DefaultOverrideLoop", "tool", "steer;stop", "STEERING [CONT-2]"),
    ("HeadRequeueLoop", "reply", "send;steer", "FIFO [INBOX-1, LOOP-8]"),
    ("ToolWaitLoop", "hang-tool", "send", "problems+prompts [IDLE-2, LOOP-1, MARKER-1]"),
])
def test_round_k_and_l_misses_are_found(variant: str, workloads: str, verbs: str, signature: str) -> None:
    # Session 60's blind rounds K and L, and session 61's M and N: bugs that passed the suite and
    # the hunt. Round N's wrapper chained to the original (ERR-9) raised from stream() itself
    # (FINISH-2: the call-raises workload); round M's throw at the drain opening a step (LOOP-4:
    # the step-end-steer workload, whose plugin steers after the first step's own drain); its
    # cancel check at the continuation gate skipped when nobody listens there (CANCEL-1: the
    # reply workload's world records no continuation, so nobody does). A failure
    # announced as a new error made of the raised one's message and code (ERR-9: carrying the
    # original error; the world marks what it raises, ORIGINAL); steering that overrides only a
    # default stop, not the one a continuation listener votes as it steers (CONT-2; a window may
    # now steer before its stop vote); late steering re-queued ahead of a prompt sent before it
    # (LOOP-8, INBOX-1: FIFO now places re-queued steering); a tool waterfall awaited without the
    # step's abort, so a tool ignoring its signal holds the aborted step (TOOL-5: the hang-tool
    # workload, whose stuck tool a plugin passes the call to). spec_loop passes the same windows.
    from tests.conformance_meta import variant_loops

    cfg = _tiny(workloads, verbs)
    assert driver.hunt(resolve("examples.spec_loop.adapter:implementation"), "spec_loop", cfg).report["findings"] == []
    found = driver.hunt(getattr(variant_loops, variant)(), variant, cfg).report["findings"]
    assert signature in [f["signature"] for f in found], found


def test_a_throwing_abort_observer_leaves_the_abort_its_effect_on_a_stuck_tool() -> None:
    # ABORT-1, TOOL-5: a model adapter's callback on the step's signal (the world's "as a model
    # call's signal fires" point) throws inside abort(); the loop's own callback, registered
    # later to stop waiting for the running tool, must still run. The reference's AbortSignal
    # stopped at the first throwing callback, and the step waited for ever for the hang-tool
    # workload's tool, which ignores its signal (session 60).
    cfg = search.Config(workloads=("hang-tool",), depth=1, nth=1, verbs=("raise",), dfs=0, random=0, pct=0)
    report = driver.hunt(REF, "reference", cfg).report
    assert report["findings"] == [], report["findings"]
    from conformance.hunt.workloads import by_name

    names = [w.name for w in search.plan(by_name(["hang-tool"]), REF, cfg)[0].windows]
    assert "hang-tool: as a model call's signal fires#1: raise" in names, names


def test_a_finding_whose_run_does_not_replay_is_reported_without_a_cassette(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    # A failing run that diverges when replayed on its own schedule (an implementation whose order
    # depends on object addresses) used to end the hunt with an error, its findings lost; the
    # finding stands, with why there is no cassette (the console prints it too).
    from simulator.errors import Divergence

    def diverges(*_args: object, **_kwargs: object) -> object:
        raise Divergence(3, "a:expected", "b:found")

    monkeypatch.setattr(search, "cassette", diverges)
    cfg = _tiny("reply", "cancel_driver")
    result = driver.hunt(resolve("mutant:py-cancel-contained"), "mutant", cfg, out=tmp_path)
    (finding, *_) = result.report["findings"]
    (example, *_) = finding["examples"]
    assert "cassette" not in example and "did not replay on its own schedule" in example["unreplayable"], example
    assert result.cassettes == [] and not (tmp_path / "cassettes").exists()


def test_a_resume_under_the_live_id_refused_only_after_its_load_is_found() -> None:
    # Session 63's blind round S (v46): resume(id, its own session) while the agent runs, refused
    # only once the load repaired the live session's open turn in the store. The create verb also
    # reopens the session under the live id where sessions persist; the backend's check at the end
    # of the run sees the repair the refused call wrote. Phase 2 reaches it (the load must land
    # while a turn is open in the store), so the schedules run here; spec_loop passes the same.
    cfg = search.Config(workloads=("resume",), depth=1, nth=1, verbs=("create",))
    assert driver.hunt(REF, "reference", cfg).report["findings"] == []
    assert driver.hunt(resolve("examples.spec_loop.adapter:implementation"), "spec_loop", cfg).report["findings"] == []
    found = driver.hunt(resolve("mutant:resume-checks-id-after-load"), "m", cfg, first=True).report["findings"]
    assert found and "problems" in found[0]["checks"] and "SVC-2" in found[0]["rules"], found
