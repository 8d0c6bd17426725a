"""Hangs are reported, quickly, with the stuck tasks named.

"Quickly" is asserted in loop steps, which are deterministic; the wall time (about 0.1 s and
0.4 s here) is measured by bench/peers.py row 7. The wall-clock bound below only says "it was
reported, not hung", loose enough for a loaded CI machine."""

from __future__ import annotations

import asyncio
import sys
import time
import types
from typing import Any

import pytest

import simulator

_CLOCK = (time.perf_counter,)  # real clock, out of freezegun's reach


def test_heartbeat_deadlock_reported_promptly() -> None:
    async def main() -> None:
        never = asyncio.Event()

        async def heartbeat() -> None:
            while True:
                await asyncio.sleep(1.0)

        async def waiter() -> None:
            await never.wait()

        beat = asyncio.ensure_future(heartbeat())
        await waiter()
        beat.cancel()

    t0 = _CLOCK[0]()
    r = simulator.run(main)
    assert _CLOCK[0]() - t0 < 10.0
    assert r.outcome == "deadlock" and r.stalled
    # The progress watchdog: 10,000 timer advances with no task but the heartbeat progressing.
    assert r.steps <= 25_000, r.steps
    rep = r.report()
    assert "main" in rep and "waiter" in rep and "Event.wait" in rep
    assert "main.1" in rep and "heartbeat" in rep


def test_a_poller_does_not_stall_a_bounded_wait_past_it() -> None:
    # A poller finding nothing to do fires only re-armed timers, like a heartbeat; but a timer
    # pending since the stall began (a bounded wait's timeout) still brings progress: the clock
    # jumps to it (the poller's timers fire late, as on a busy loop), and the run goes on.
    async def main() -> float:
        loop = asyncio.get_running_loop()
        never = asyncio.Event()

        async def poll() -> None:
            while True:
                await asyncio.sleep(0.001)

        poller = asyncio.ensure_future(poll())
        try:
            await asyncio.wait_for(never.wait(), 30.0)
        except TimeoutError:
            pass
        poller.cancel()
        return loop.time()

    r = simulator.run(main)
    assert r.outcome == "completed" and not r.stalled, r.report()
    assert r.value == 30.0 and r.steps <= 60_000, (r.value, r.steps)
    # a strategy's run replays to the same bytes
    from simulator.strategies import RandomStrategy

    again = simulator.run(main, strategy=RandomStrategy(seed=4))
    assert again.ok and 30.0 <= again.value < 31.0
    assert simulator.replay(main, again.schedule).value == again.value


def _spinner(*delays: float) -> Any:
    """A main that spins on ``sleep(0)`` until a worker, having slept ``delays`` in turn, says
    it is done; it returns how often it spun and the virtual time it ended at."""

    async def main() -> tuple[int, float]:
        done: list[int] = []

        async def worker() -> None:
            for delay in delays:
                await asyncio.sleep(delay)
            done.append(1)

        task = asyncio.ensure_future(worker())
        spins = 0
        while not done:
            spins += 1
            await asyncio.sleep(0)
        await task
        return spins, asyncio.get_running_loop().time()

    return main


def test_a_spin_waiting_for_a_timer_lets_it_come_due() -> None:
    # ``while not done: await asyncio.sleep(0)``: on a real loop time passes while it spins and
    # the worker's timers come due; here a stretch of callbacks that observed nothing, created
    # or ended no task and saw the clock stand still costs 10 us of virtual time per callback.
    from simulator.strategies import PCTStrategy

    for strategy in (None, PCTStrategy(seed=2)):
        r = simulator.run(_spinner(0.01, 0.05), strategy=strategy)
        assert r.outcome == "completed" and 0.06 <= r.value[1] < 0.08, r.report()
        assert r.steps < 20_000, r.steps


def test_a_long_computation_in_small_chunks_does_not_reach_a_far_timeout() -> None:
    # ... but a spin is told from work only by what it changes, so the cost is that of real
    # callbacks: 3,000 sleep(0) chunks take 30 ms, not the 30 s a timeout allows.
    async def main() -> float:
        async with asyncio.timeout(30):
            total = 0
            for i in range(3_000):
                total += i
                await asyncio.sleep(0)
        return asyncio.get_running_loop().time()

    r = simulator.run(main)
    assert r.outcome == "completed" and r.value < 0.1, r.report()


def test_a_spin_past_max_time_is_over_budget() -> None:
    r = simulator.run(_spinner(100), max_time=0.5, max_steps=None)
    assert r.outcome == "budget-exceeded" and r.budget_reason == "time", r.report()


def test_a_heartbeat_beside_a_poller_is_still_a_stall() -> None:
    # The watchdog jumps to a timer pending since the stall began once; if that brought no
    # progress (a slow heartbeat re-arming), the run is stalled.
    async def main() -> None:
        async def every(period: float) -> None:
            while True:
                await asyncio.sleep(period)

        beats = [asyncio.ensure_future(every(0.001)), asyncio.ensure_future(every(60.0))]
        await asyncio.Event().wait()
        await asyncio.gather(*beats)

    r = simulator.run(main, max_steps=None, wall_limit=20)
    assert r.outcome == "deadlock" and r.stalled, r.report()


def test_a_priority_strategy_cannot_starve_ready_work_behind_a_spinner() -> None:
    # pct may give a spinning task (``while not x: await sleep(0)``) the top priority: it is
    # always ready, so the task it waits for would never run. asyncio runs what is ready in
    # turn; so does the simulator once an origin has been passed over for a spell of callbacks.
    from simulator.strategies import PCTStrategy, RandomStrategy

    main = _spinner(0)
    runs = [simulator.run(main, strategy=PCTStrategy(depth=1, seed=s)) for s in range(20)]
    assert all(r.outcome == "completed" and r.steps < 10_000 for r in runs), [r.outcome for r in runs]
    assert any(r.value[0] > 100 for r in runs)  # some schedule did prefer the spinner
    again = simulator.run(main, strategy=RandomStrategy(seed=3))
    assert simulator.replay(main, again.schedule).value == again.value


def test_spin_loop_reported_promptly() -> None:
    async def main() -> None:
        flag = [False]

        async def spinner() -> None:
            while not flag[0]:
                await asyncio.sleep(0)

        await spinner()

    t0 = _CLOCK[0]()
    r = simulator.run(main)
    assert _CLOCK[0]() - t0 < 10.0
    assert r.outcome == "budget-exceeded" and r.budget_reason == "steps"
    assert r.steps <= 100_010, r.steps  # the default step budget, not a million steps
    assert "spinner" in r.report()


# --------------------------------------------------------------------------- wall-clock limit


def test_a_spin_is_stopped_by_the_wall_clock_limit_and_named() -> None:
    import signal

    async def main() -> None:
        await asyncio.sleep(1.0)
        while True:
            try:
                while True:  # a busy loop that never yields
                    pass
            except Exception:  # the program's own handler does not swallow the limit
                pass

    before = signal.getsignal(signal.SIGALRM)
    t0 = _CLOCK[0]()
    result = simulator.run(main, wall_limit=0.2)
    assert _CLOCK[0]() - t0 < 5.0
    assert result.outcome == "budget-exceeded" and result.budget_reason == "wall"
    assert isinstance(result.error, simulator.WallClockExceeded)
    assert "exceeded the wall-clock limit (0.2s) spinning in main (test_hangs.py:" in str(result.error)
    assert signal.getsignal(signal.SIGALRM) == before and signal.getitimer(signal.ITIMER_REAL)[0] == 0
    assert simulator.run(main, wall_limit=0.2).timeline == result.timeline  # the same virtual run


@pytest.mark.skipif(not hasattr(__import__("signal"), "setitimer"), reason="needs POSIX interval timers")
def test_a_limit_shorter_than_arming_it_is_the_runs_verdict_not_an_escape() -> None:
    # ``loopkit run --timeout 1e-6`` ended with exit 130 and no word: the alarm fired inside the
    # arming itself, before the run's handler (session 58's hostile probe)
    import signal

    async def main() -> int:
        await asyncio.sleep(1.0)
        return 7

    before = signal.getsignal(signal.SIGALRM)
    for limit in (1e-9, 1e-300):
        result = simulator.run(main, wall_limit=limit)
        assert result.outcome == "budget-exceeded" and result.budget_reason == "wall", result.outcome
        assert isinstance(result.error, simulator.WallClockExceeded)
    assert signal.getsignal(signal.SIGALRM) == before and signal.getitimer(signal.ITIMER_REAL)[0] == 0


def test_a_run_that_yields_is_not_limited_and_an_outer_timer_is_left_alone() -> None:
    import signal

    async def main() -> int:
        await asyncio.sleep(3600.0)  # an hour of virtual time: no wall time at all
        return 7

    assert simulator.run(main, wall_limit=0.5).value == 7
    fired: list[int] = []
    previous = signal.signal(signal.SIGALRM, lambda *_: fired.append(1))
    try:
        signal.setitimer(signal.ITIMER_REAL, 30.0)  # somebody else's supervisor keeps time
        assert simulator.run(main, wall_limit=0.01).value == 7
        assert signal.getitimer(signal.ITIMER_REAL)[0] > 25.0, "the outer timer is not disturbed"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert fired == []


def test_the_limit_covers_the_program_not_the_simulators_bookkeeping(monkeypatch: object) -> None:
    import signal

    from simulator import _runtime

    real = _runtime._collect_unretrieved

    def slow(*args: object) -> object:
        t0 = _CLOCK[0]()
        while _CLOCK[0]() - t0 < 0.4:  # bookkeeping past the limit, after the program ended
            pass
        return real(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(_runtime, "_collect_unretrieved", slow)  # type: ignore[attr-defined]

    async def main() -> int:
        await asyncio.sleep(1.0)
        return 5

    before = signal.getsignal(signal.SIGALRM)
    result = simulator.run(main, wall_limit=0.2)
    assert result.outcome == "completed" and result.value == 5
    assert signal.getsignal(signal.SIGALRM) == before and signal.getitimer(signal.ITIMER_REAL)[0] == 0


def test_a_frame_that_says_what_it_blocks_on_is_named_instead_of_its_line() -> None:
    # A process blocked on another's answer (the wire) spins in that other process: the frame
    # waiting says so through simulator.supervise.WAIT_HINT, and the report names it.
    from simulator.supervise import WAIT_HINT

    def blocked_on_a_child() -> None:
        _loopkit_waiting_on = "the child 'node x.mjs', which has not answered"
        assert WAIT_HINT == "_loopkit_waiting_on" and _loopkit_waiting_on
        while True:
            pass

    async def main() -> None:
        blocked_on_a_child()

    result = simulator.run(main, wall_limit=0.2)
    assert isinstance(result.error, simulator.WallClockExceeded)
    assert "spinning in the child 'node x.mjs', which has not answered:" in str(result.error)


def test_an_alarm_landing_in_a_finalizer_is_dropped_quietly_and_the_next_stops_the_spin(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # An alarm raised inside a finalizer (a collection running just then) cannot propagate:
    # Python would print "Exception ignored in ..." with a traceback. It is dropped without a
    # word, and the next alarm, WALL_GRACE later, lands in the spinning program.
    told: list[Any] = []
    monkeypatch.setattr(sys, "unraisablehook", told.append)

    class Slow:
        def __del__(self) -> None:
            while True:  # the first alarm lands here
                pass

    async def main() -> None:
        x = Slow()
        del x
        while True:  # then the program itself spins
            pass

    result = simulator.run(main, wall_limit=0.2)
    assert isinstance(result.error, simulator.WallClockExceeded)
    assert told == []
    # other unraisable errors still reach the hook that was there
    sys.unraisablehook(types.SimpleNamespace(exc_value=ValueError("x")))
    assert len(told) == 1
