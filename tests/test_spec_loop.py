"""The loop written from the spec alone (``examples/spec_loop``) passes the rules where a test
once asserted the reference's choice instead of the contract (the whole suite runs in CI)."""

from __future__ import annotations

from pathlib import Path

import pytest

from conformance.impl import resolve
from conformance.runner import run_suite
from conformance.scenario import engine
from conformance.scenario.model import load
from simulator.strategies import PCTStrategy

IMPL = "examples.spec_loop.adapter:implementation"
WINDOWS = Path(__file__).parent / "hunt_windows"  # hunt windows kept as regressions, on their schedule


@pytest.mark.parametrize("rule", ["ERR-9", "INJ-2", "ABORT-1"])
def test_the_independent_loop_passes_where_readings_diverged(rule: str) -> None:
    run = run_suite(IMPL, rules=[rule], workers=0)
    failed = [r for r in run.results if r.outcome == "failed"]
    assert run.results and not failed, [f"{r.nodeid}: {r.message[:300]}" for r in failed]


def test_a_late_listener_of_an_inject_flush_left_scheduled_is_that_turns_failure() -> None:
    # A hunt window of the inject workload on which a pct schedule delayed the idle inject's flush
    # (left scheduled, INJ-4) until the next turn's flush had started: its throwing listener is
    # the one-shot turn's, announced as such (step 0) after the next driver turn started, in time
    # (ERR-6 and INJ-2: by the close). The oracle once read it as the driver turn's, late.
    # (The model answers in 0.2 s: ready work waits at most the simulator's timer window.)
    sc = load(str(WINDOWS / "overlapping-flushes.yaml"))
    report = engine.run_one(sc, resolve(IMPL), PCTStrategy(seed=1654615998, horizon=64), 1654615998)
    starts = [e for e in report.trace.timeline if e["kind"] == "log" and e["type"] == "turn/start"]
    assert starts[0]["data"]["trigger"]["kind"] == "injection"  # the window this run must reach
    assert report.ok, report.trace.failure_messages()
    errors = [e for e in report.trace.timeline if e["kind"] == "agent/error"]
    assert [(e["turn"], e["step"]) for e in errors] == [(1, 0)]


def test_a_loop_that_polls_and_spins_passes_the_race_rules_it_once_failed() -> None:
    # spec_loop with a driver polling every millisecond and a close() spinning on sleep(0): under
    # pct these failed IDLE-1 and the cancel rules (budget-exceeded, "close() did not
    # finish") while asyncio runs them fine: the simulator's fairness bounds (docs/simulator.md).
    from .conformance_meta.waiting_loops import waiting_loop

    # the pct schedules alone, four seeds each (all ten took a minute: polling under pct runs
    # until the fairness bounds step in, which is what this checks)
    run = run_suite(waiting_loop, rules=["IDLE-1", "MARKER-1", "CANCEL-MID"], schedule_count=4, workers=0,
                    extra_args=["-k", "pct"])
    assert {r.schedule for r in run.results} == {f"pct-{i}" for i in range(4)}, {r.schedule for r in run.results}
    failed = [r for r in run.results if r.outcome == "failed"]
    assert run.results and not failed, [f"{r.nodeid}: {r.message[:300]}" for r in failed]


def test_a_coroutine_waiter_is_judged_by_the_future_it_awaits() -> None:
    # A when_idle() returning a coroutine has no done(): the suite reads the future it awaits
    # instead (conformance/tests/_support.Watch). Correct, the loop passes IDLE-2; with the bug
    # that only the hunt found in session 55 (a waiter released as an inject's flush ends, a
    # prompt sent meanwhile queued) it fails, as the same bug with a future waiter does.
    from .conformance_meta.waiting_loops import CoroutineWaiterLoop

    test = "test_a_prompt_sent_as_the_inject_flush_ends_holds_a_waiter_held_for_it"
    good = run_suite(CoroutineWaiterLoop(), rules=["IDLE-2"], schedule_count=3, workers=0)
    failed = [r for r in good.results if r.outcome == "failed"]
    assert good.results and not failed, [f"{r.nodeid}: {r.message[:300]}" for r in failed]
    bad = run_suite(CoroutineWaiterLoop(queue_blind=True), rules=["IDLE-2"], schedule_count=3, workers=0)
    failed = [r for r in bad.results if r.outcome == "failed"]
    assert failed and all(test in r.nodeid for r in failed), [f"{r.nodeid}: {r.message[:200]}" for r in failed]


def test_py1_asks_a_loop_with_no_task_while_idle_only_for_a_running_driver() -> None:
    # session 52's indie65 starts a task per turn: while it waits there is no driver task to
    # cancel, and PY-1's parked case is vacuous (skipped). An adapter naming no task at all
    # still fails PY-1 for want of the hook.
    from .conformance_meta.broken_adapters import DriverPerTurn

    per_turn = run_suite(DriverPerTurn(), rules=["PY-1"], workers=0)
    assert per_turn.results and not [r for r in per_turn.results if r.outcome == "failed"], [
        f"{r.nodeid}: {r.message[:300]}" for r in per_turn.results if r.outcome == "failed"]
    assert [r.id for r in per_turn.results if r.outcome == "skipped"] == [
        r.id for r in per_turn.results if "parked" in r.id]
    none = run_suite(DriverPerTurn(always=True), rules=["PY-1"], workers=0)
    failed = [r for r in none.results if r.outcome == "failed"]
    assert failed and all("needs hook driver_task" in r.message for r in failed), [r.message[:200] for r in failed]
