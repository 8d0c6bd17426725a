"""Section 8: cancellation (ABORT-1, CANCEL-*, MARKER-1). Race rules: run under many schedules."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from conformance import fakes
from conformance.adapter import AgentHandle
from conformance.fakes import respond
from conformance.harness import Kit
from reference_loop import vocabulary as v

from ._support import (
    COMPLETED,
    Run,
    Watch,
    aborted,
    delivered,
    once,
    once_on_event,
    request_texts,
    texts,
)


async def _parked(k: Kit) -> AgentHandle:
    """An agent whose driver has started and parked at the idle wait."""
    a = k.agent()
    await k.settle()
    return a


def _ran(k: Kit, agent: object) -> list[str]:
    return [p for turn in k.prompts(agent) for p in turn]  # type: ignore[arg-type]


LATER_COMPLETES = "the later prompt's turn must complete, not inherit the cancel"


async def _runs_alone_and_completes(k: Kit, a: AgentHandle, prompt: str) -> None:
    """Send ``prompt`` after a cancel: it runs, alone, in a turn that completes (MARKER-1: the
    cancel governed one turn and did not leak), after whatever turns came before. Waits for
    that turn itself, not quiescence."""
    before = len(k.reasons(a))
    a.send(prompt)
    await k.idle(a)
    await k.until(lambda: len(k.reasons(a)) == before + 1, f"{prompt}'s turn to end")
    assert k.prompts(a)[before:] == [[prompt]]
    assert k.reasons(a)[before:] == [COMPLETED], LATER_COMPLETES


def _slow_first_call(k: Kit, waterfall: str, needs: str) -> asyncio.Event:
    """A ``waterfall`` listener that holds the first step for 5 s; the event says it has begun."""
    entered = asyncio.Event()

    async def slow(*args: object) -> object:
        if not entered.is_set():  # the first step only
            entered.set()
            await asyncio.sleep(5.0)
        return await args[-1]()  # type: ignore[operator]

    k.on(waterfall, slow, needs=needs)
    return entered


@pytest.mark.rule("ABORT-1")
def test_abort_only_in_flight_step(run: Run) -> None:
    async def scenario(k: Kit) -> None:
        a = k.agent()
        k.model.push(respond.hang(), respond.hang())
        a.send("A")
        await k.until(lambda: len(k.model.requests) == 1, "A's model call")
        a.send("B")
        a.abort()
        await k.until(lambda: len(k.model.requests) == 2, "B's model call")
        a.abort("stop B")
        await k.idle(a)
        assert k.reasons(a) == [aborted(), aborted("stop B")], "queued prompts still run"
        assert k.prompts(a) == [["A"], ["B"]]

    run(scenario)


@pytest.mark.rule("CANCEL-1", "MARKER-1")
@pytest.mark.parametrize("verb", ["cancel", "abort"])
def test_a_prompt_an_abort_observer_queues_while_the_step_is_stopped_runs(run: Run, verb: str) -> None:
    # A listener on the step's abort signal (an adapter's or a plugin's abort observer: the
    # signal calls it synchronously, inside cancel() or abort()) queues a follow-up prompt R. R
    # came after the cancel was called: CANCEL-1 clears what is queued when it is called, and a
    # cancel never drops a later prompt (MARKER-1). A loop that aborts the step before it clears
    # its queues drops R (upstream's "replays replacement work queued synchronously by an abort
    # observer"). abort() clears nothing: R runs there too (ABORT-1).
    async def scenario(k: Kit) -> None:
        a = k.agent()
        k.model.push(respond.hang())
        a.send("A")
        await k.until(lambda: len(k.model.requests) == 1, "A's model call")
        signal = k.model.signals[0]
        heard: list[object] = []

        def observer(reason: object) -> None:
            heard.append(reason)
            a.send("R")

        signal.add_listener(observer)
        a.cancel() if verb == "cancel" else a.abort()
        await k.idle(a)
        assert heard, f"the step's abort signal never fired on {verb}() (CANCEL-1, ABORT-1)"
        assert k.prompts(a) == [["A"], ["R"]], (
            f"a prompt queued by a listener on the step's abort signal, while {verb}() ran, did not run as the "
            f"next turn: turns' prompts {k.prompts(a)} (CANCEL-1 clears what was queued when it was called; "
            "MARKER-1: a cancel never drops a later prompt)")
        assert k.reasons(a) == [aborted("cancelled" if verb == "cancel" else "aborted"), COMPLETED]

    run(scenario)


@pytest.mark.rule("ABORT-1")
def test_abort_aborts_its_own_agents_step(run: Run) -> None:
    # ABORT-1: abort() aborts *the* in-flight step: the agent's own, not the step another agent
    # of the same service started since.
    async def scenario(k: Kit) -> None:
        a, b = k.agent("a"), k.agent("b")
        gate = k.gate()
        k.model.push(respond.hang(), respond.text("b done").gate(gate))
        a.send("A")
        await k.until(lambda: len(k.model.requests) == 1, "a's model call")
        b.send("B")
        await k.until(lambda: len(k.model.requests) == 2, "b's model call, started after a's")
        a.abort("stop a")
        await k.idle(a)
        gate.open()
        await k.idle(b)
        assert k.reasons(a) == [aborted("stop a")], "a's own step is aborted"
        assert k.reasons(b) == [COMPLETED], "b's step is not a's to abort"

    run(scenario)


@pytest.mark.rule("ABORT-1")
def test_abort_without_step_does_nothing(run: Run) -> None:
    async def scenario(k: Kit) -> None:
        a = await _parked(k)
        a.abort()
        a.send("A")
        await k.idle(a)
        assert k.reasons(a) == [COMPLETED], "abort is not deferred to a later step"

    run(scenario)


@pytest.mark.rule("ABORT-1")
@pytest.mark.parametrize("boundary", ["agent/turn-start", "agent/step-start", "agent/step-end",
                                      "agent/turn-continuation"])
def test_abort_between_steps_of_a_running_turn_does_nothing(run: Run, schedule: str, boundary: str) -> None:
    # A turn runs but no step is in flight: before its first step (agent/turn-start), as a step
    # opens (agent/step-start: "before any step's abort handle exists", CANCEL-STEP), after a
    # step closed (agent/step-end follows step/end), at the continuation gate. The abort is
    # not latched for the step: it runs and the turn completes.
    async def scenario(k: Kit) -> None:
        k.tool("echo")
        a = await _parked(k)
        hit = once(lambda *_: a.abort("too early"))
        if boundary == "agent/turn-continuation":
            async def gate(*args: object) -> object:
                hit()
                return await args[-1]()  # type: ignore[operator]

            k.on(boundary, gate, needs="the abort lands at the continuation gate")
        else:
            k.on(boundary, hit, needs="the abort lands while no step is in flight")
        k.model.push(fakes.tool_calls(("c1", "echo", "{}")), fakes.text("done"))
        a.send("A")
        await k.idle(a)
        assert k.reasons(a) == [COMPLETED], "an abort with no step in flight is not deferred to a later step"
        assert len(k.model.requests) == 2, "both steps run"

    run(scenario)


async def _stopped_in_a_step_waterfall(k: Kit, waterfall: str, verb: str) -> tuple[AgentHandle, fakes.FakeTool]:
    """Prompt ``A`` (a step that would call ``echo``), and ``abort``/``cancel`` it with reason
    ``during <waterfall>`` while a slow ``waterfall`` listener holds its first step; returns
    once the agent is idle again."""
    echo = k.tool("echo")
    a = await _parked(k)
    entered = _slow_first_call(k, waterfall, f"the {verb} lands while it runs")
    k.model.push(fakes.tool_calls(("c1", "echo", "{}")))
    a.send("A")
    await asyncio.wait_for(entered.wait(), k.timeout)
    getattr(a, verb)("during " + waterfall)
    await k.idle(a)
    return a, echo


@pytest.mark.rule("ABORT-1")
@pytest.mark.parametrize("waterfall", ["agent/request", "agent/step-result"])
def test_abort_while_a_step_waterfall_runs(run: Run, waterfall: str) -> None:
    # The step is in flight while a slow agent/request or agent/step-result listener runs (no
    # cancel marker is armed: only the step's abort): the turn ends aborted with the caller's
    # reason, nothing of the step is dispatched, no further model step runs.
    async def scenario(k: Kit) -> None:
        a, echo = await _stopped_in_a_step_waterfall(k, waterfall, "abort")
        assert k.reasons(a) == [aborted("during " + waterfall)]
        assert echo.calls == [], "nothing of the aborted step is dispatched"
        assert len(k.model.requests) == (0 if waterfall == "agent/request" else 1), "no further model step runs"
        k.model.push(fakes.text("B's answer"))  # after the unused answer, if agent/request stopped A
        await _runs_alone_and_completes(k, a, "B")

    run(scenario)


@pytest.mark.rule("ABORT-1")
@pytest.mark.parametrize("event", ["assistant/message", "usage"])
def test_abort_once_a_step_without_tools_logged_its_message_still_aborts_it(run: Run, event: str) -> None:
    # The step is in flight until its step/end: an abort() from a session/event listener on its
    # assistant/message or usage, with no tool call to run, still ends the turn aborted{reason}
    # (ABORT-1). A loop that looks at the step's signal again only after running tool calls
    # closes it normally and ends the turn completed (session 56's adversarial blind round: the
    # suite and the hunt passed it).
    async def scenario(k: Kit) -> None:
        a = k.agent()

        def on_event(_session: object, e: dict[str, Any]) -> None:
            if e["type"] == event:
                a.abort("stop")

        k.on("session/event", on_event)
        k.model.push(fakes.text("A", usage=(3, 4)))
        a.send("A")
        await k.idle(a)
        assert k.reasons(a) == [aborted("stop")], (
            f"abort() on the step's {event}, before its step/end, must end the turn aborted (ABORT-1): {k.types(a)}")
        assert len(k.model.requests) == 1

    run(scenario)


@pytest.mark.rule("ABORT-1", "CANCEL-1")
def test_abort_keeps_the_callers_reason_even_empty(run: Run) -> None:
    # An empty reason is still the caller's: only an omitted one takes the default.
    async def scenario(k: Kit) -> None:
        a = await _parked(k)
        k.model.push(respond.hang(), respond.hang())
        a.send("A")
        await k.until(lambda: len(k.model.requests) == 1, "A's model call")
        a.abort("")
        await k.until(lambda: len(k.reasons(a)) == 1, "A's turn to end")
        a.send("B")
        await k.until(lambda: len(k.model.requests) == 2, "B's model call")
        a.cancel("")
        await k.idle(a)
        assert k.reasons(a) == [aborted(""), aborted("")], "an empty reason is kept, not replaced by the default"

    run(scenario)


@pytest.mark.rule("CANCEL-2", "LOOP-9", "IDLE-2")
@pytest.mark.parametrize("verb", ["cancel", "when_idle"])
def test_a_prompt_is_queued_when_agent_queued_announces_it(run: Run, schedule: str, verb: str) -> None:
    # LOOP-9: send() emits agent/queued for the prompt it queued: a listener reacting to it sees
    # the prompt queued. Its cancel() drops it (CANCEL-2: queued, not started, never runs;
    # CANCEL-3 arms a cancel when queued work exists), its when_idle() waits for it (IDLE-2).
    async def scenario(k: Kit) -> None:
        a = k.agent()
        watch: list[Watch] = []

        def act(*_args: object) -> None:
            if verb == "cancel":
                a.cancel("from agent/queued")
            else:
                watch.append(Watch(k, a))

        k.on("agent/queued", once(act), needs="the listener acts as the prompt is queued")
        a.send("A")
        await k.idle(a)
        if verb == "cancel":
            a.send("B")
            await k.idle(a)
            assert k.prompts(a) == [["B"]], "A was queued when agent/queued announced it: the cancel dropped it"
        else:
            await watch[0].wait()
            assert watch[0].types_at_release is not None and "turn/end" in watch[0].types_at_release, (
                "when_idle() from agent/queued resolved before the prompt it announced had run")

    run(scenario)


@pytest.mark.rule("CANCEL-1", "CANCEL-2")
def test_cancel_clears_fifos_and_aborts(run: Run, schedule: str) -> None:
    async def scenario(k: Kit) -> None:
        a = await _parked(k)
        k.model.push(respond.hang())
        a.send("A")
        await k.until(lambda: len(k.model.requests) == 1, "A's model call")
        a.send("queued")
        a.steer("steering")
        a.cancel("user stop")
        await k.idle(a)
        assert k.reasons(a) == [aborted("user stop")]
        a.send("C")
        await k.idle(a)
        assert k.prompts(a) == [["A"], ["C"]], "queued work was cleared by cancel"
        assert k.reasons(a)[-1:] == [COMPLETED], LATER_COMPLETES
        assert k.events(a, "steering/message") == []

    run(scenario)


@pytest.mark.rule("CANCEL-1")
def test_cancel_default_reason(run: Run, schedule: str) -> None:
    async def scenario(k: Kit) -> None:
        a = await _parked(k)
        k.model.push(respond.hang())
        a.send("A")
        await k.until(lambda: len(k.model.requests) == 1, "A's model call")
        a.cancel()
        await k.idle(a)
        assert k.reasons(a) == [aborted("cancelled")]

    run(scenario)


@pytest.mark.rule("CANCEL-2", "CANCEL-W1")
def test_queued_prompt_never_runs(run: Run, schedule: str) -> None:
    async def scenario(k: Kit) -> None:
        k.record("agent/status")
        a = await _parked(k)
        a.send("A")
        a.send("B")
        a.cancel()
        await k.idle(a)
        await k.settle()
        assert k.events(a) == [], "a cancelled, unstarted prompt must not open a turn"
        assert k.statuses() == [], "no agent/status for a dropped turn"
        await _runs_alone_and_completes(k, a, "C")

    run(scenario)


@pytest.mark.rule("CANCEL-3", "MARKER-1")
def test_cancel_with_nothing_to_cancel_is_noop(run: Run, schedule: str) -> None:
    async def scenario(k: Kit) -> None:
        a = await _parked(k)
        a.cancel()
        a.send("A")
        await k.idle(a)
        a.cancel()
        await k.settle()
        a.send("B")
        await k.idle(a)
        assert k.prompts(a) == [["A"], ["B"]]
        assert k.reasons(a) == [COMPLETED, COMPLETED]

    run(scenario)


@pytest.mark.rule("CANCEL-3")
def test_cancel_on_fresh_agent_is_noop(run: Run, schedule: str) -> None:
    async def scenario(k: Kit) -> None:
        a = k.agent()
        a.cancel()
        await k.settle()
        a.send("A")
        await k.idle(a)
        assert k.prompts(a) == [["A"]]

    run(scenario)


async def _late_steering_after_cancel(k: Kit) -> AgentHandle:
    """A is cancelled mid-stream with steering pending; an agent/turn-end listener then steers."""
    a = await _parked(k)
    k.model.push(respond.hang())
    k.on("agent/turn-end", once(lambda *_: a.steer("late")), needs="the test steers from it while the cancelled turn closes")
    a.send("A")
    await k.until(lambda: len(k.model.requests) == 1, "A's model call")
    a.steer("pending")
    a.cancel()
    await k.idle(a)
    await k.until(lambda: len(k.reasons(a)) == 2, "the late steering's turn to end")
    return a


@pytest.mark.rule("CANCEL-4")
def test_pending_steering_dropped_late_steering_requeued(run: Run, schedule: str) -> None:
    async def scenario(k: Kit) -> None:
        a = await _late_steering_after_cancel(k)
        assert "pending" not in _ran(k, a) and k.events(a, "steering/message") == []
        assert k.prompts(a) == [["A"], ["late"]], "steering added after the cancel is re-queued"

    run(scenario)


@pytest.mark.rule("MARKER-1")
def test_requeued_late_steering_not_cancelled(run: Run, schedule: str) -> None:
    async def scenario(k: Kit) -> None:
        a = await _late_steering_after_cancel(k)
        assert k.reasons(a) == [aborted("cancelled"), COMPLETED], "the cancel leaked onto the next turn"

    run(scenario)


EMPTY_REASON = pytest.param("", id="empty-reason")
"""An empty reason is a reason (CANCEL-1): a marker tested for truthiness loses such a cancel."""


def _cancel(a: AgentHandle, reason: str | None) -> None:
    a.cancel() if reason is None else a.cancel(reason)


@pytest.mark.rule("CANCEL-W1")
@pytest.mark.parametrize("reason", [None, EMPTY_REASON])
def test_window1_replacement_runs_before_waiter(run: Run, schedule: str, reason: str | None) -> None:
    async def scenario(k: Kit) -> None:
        k.record("agent/status")
        a = await _parked(k)
        k.model.push(fakes.text("B").timing(first=1.0))
        a.send("A")
        watch = Watch(k, a)
        _cancel(a, reason)
        a.send("B")
        await watch.wait()
        # What the waiter saw at its release first: an early release is the bug this names.
        assert watch.turn_ends_at_release() == 1, "when_idle() resolved while B was still queued"
        assert watch.status_at_release == "idle", "when_idle() resolved while the agent was running"
        await k.until(lambda: len(k.reasons(a)) == 1, "B's turn to end")
        assert k.prompts(a) == [["B"]], "A never runs, B runs once"
        assert k.reasons(a) == [COMPLETED], LATER_COMPLETES

    run(scenario)


@pytest.mark.rule("CANCEL-W1")
@pytest.mark.parametrize("reason", ["nope", EMPTY_REASON])
def test_window1_drop_releases_waiters(run: Run, schedule: str, reason: str) -> None:
    async def scenario(k: Kit) -> None:
        k.record("agent/status")
        a = await _parked(k)
        a.send("A")
        watch = Watch(k, a)
        a.cancel(reason)
        await watch.wait()
        await k.settle()
        assert k.events(a) == [] and k.statuses() == []

    run(scenario)


async def _actor_race(k: Kit) -> tuple[AgentHandle, Watch, bool]:
    """An actor sends A, registers a waiter, yields once, then cancels and sends B: depending on
    the schedule the cancel lands in window 1 (A never starts), during A's turn, or (a schedule
    that runs A's whole turn first) once the agent is idle again and the waiter released. The
    flag says whether the waiter was known to be pending as the actor's ``cancel(); send(B)``
    began: only then must it resolve after B's turn (CANCEL-W1, IDLE-2)."""
    a = await _parked(k)
    k.model.push(fakes.text("reply").timing(first=0.5), fakes.text("reply").timing(first=0.5))
    sent_b_before_release: list[bool] = []

    async def actor() -> Watch:
        a.send("A")
        watch = Watch(k, a)
        await asyncio.sleep(0)
        sent_b_before_release.append(watch.pending_now() is True)
        a.cancel()
        a.send("B")
        return watch

    watch = await asyncio.create_task(actor())
    await watch.wait()
    await k.until(lambda: "B" in _ran(k, a) and k.types(a)[-1] == "turn/end", "B's turn to end")
    return a, watch, sent_b_before_release[0]


@pytest.mark.rule("CANCEL-W1")
def test_window1_actor_races_driver(run: Run, schedule: str) -> None:
    async def scenario(k: Kit) -> None:
        a, watch, b_before_release = await _actor_race(k)
        if b_before_release:
            # B was queued while the waiter was pending: it resolves only after B's turn.
            assert watch.types_at_release == k.types(a), "when_idle() resolved before B's turn ended"
            assert watch.status_at_release == "idle", "when_idle() resolved while the agent was running"
        ran = _ran(k, a)
        assert ["A", "B"] not in k.prompts(a), "A must never be batched with B"
        assert ran.count("B") == 1 and ran[-1] == "B", f"B must run exactly once, last: {k.prompts(a)}"
        assert ran.count("A") <= 1

    run(scenario)


@pytest.mark.rule("MARKER-1")
def test_actor_cancel_never_leaks_onto_b(run: Run, schedule: str) -> None:
    async def scenario(k: Kit) -> None:
        a, _watch, _ = await _actor_race(k)
        assert k.reasons(a)[-1] == COMPLETED, f"B's turn inherited the cancel: {k.reasons(a)}"

    run(scenario)


def _on_first_running(action: Callable[[], object]) -> Callable[..., None]:
    fired = [False]

    def listener(_agent: object, status: str) -> None:
        if status == "running" and not fired[0]:
            fired[0] = True
            action()

    return listener


@pytest.mark.rule("CANCEL-W2")
@pytest.mark.parametrize("reason", ["w2", EMPTY_REASON])
def test_window2_cancel_settles_idle(run: Run, schedule: str, reason: str) -> None:
    async def scenario(k: Kit) -> None:
        k.record("agent/status")
        a = await _parked(k)
        k.on("agent/status", _on_first_running(lambda: a.cancel(reason)))
        a.send("A")
        watch = Watch(k, a)
        await watch.wait()
        assert k.events(a, "turn/start") == [], "the dropped turn writes no turn/start"
        assert k.statuses() == ["running", "idle"], "a real transition back to idle"
        assert a.status == "idle"
        await _runs_alone_and_completes(k, a, "C")

    run(scenario)


@pytest.mark.rule("CANCEL-W2")
@pytest.mark.parametrize("reason", ["w2", EMPTY_REASON])
def test_window2_replacement_runs_before_waiter(run: Run, schedule: str, reason: str) -> None:
    async def scenario(k: Kit) -> None:
        k.record("agent/status")
        a = await _parked(k)
        k.model.push(fakes.text("B").timing(first=1.0))

        def cancel_and_replace() -> None:
            a.cancel(reason)
            a.send("B")

        k.on("agent/status", _on_first_running(cancel_and_replace))
        a.send("A")
        watch = Watch(k, a)
        await watch.wait()
        # The release comes first: released while B was still queued is the seed's bug
        # (issue 13: a later assertion must not name a consequence of it instead).
        assert watch.turn_ends_at_release() == 1, "when_idle() resolved while B was still queued"
        assert watch.status_at_release == "idle", "when_idle() resolved while the agent was running"
        await k.until(lambda: len(k.reasons(a)) == 1, "B's turn to end")
        assert k.prompts(a) == [["B"]], "A is dropped, B runs"
        assert k.statuses() == ["running", "idle"], "B runs in the same running period"
        assert k.reasons(a) == [COMPLETED], LATER_COMPLETES

    run(scenario)


@pytest.mark.rule("CANCEL-W2", "IDLE-2")
def test_window2_work_the_idle_listener_queues_runs(run: Run, schedule: str) -> None:
    # The running listener cancels (window 2): the agent goes back to idle, a real transition,
    # and a prompt an idle listener queues then counts as arriving after it (IDLE-2) and runs
    # (LOOP-1). A loop that parks at once after that transition strands it (session 59's blind
    # round J).
    async def scenario(k: Kit) -> None:
        k.record("agent/status")
        a = await _parked(k)
        k.on("agent/status", _on_first_running(lambda: a.cancel("w2")))
        queued = [False]

        def follow_up(_agent: object, status: str) -> None:
            if status == "idle" and not queued[0]:
                queued[0] = True
                a.send("B")

        k.on("agent/status", follow_up)
        a.send("A")
        await k.until(lambda: len(k.reasons(a)) == 1, "the turn of the prompt the idle listener queued to end")
        assert k.prompts(a) == [["B"]], "A is dropped, B runs"
        assert k.reasons(a) == [COMPLETED], LATER_COMPLETES
        await k.idle(a)
        assert k.statuses() == ["running", "idle", "running", "idle"], "B runs in a running period of its own"

    run(scenario)


@pytest.mark.rule("CANCEL-W2", "CANCEL-4")
def test_window2_steering_after_the_cancel_is_requeued(run: Run, schedule: str) -> None:
    # The running listener cancels, then steers (the agent is running, so it is steering):
    # steering added after the cancel while the cancelled turn closes is late steering and is
    # re-queued (CANCEL-4, LOOP-8); the dropped prompt never runs, the steering runs as a turn.
    async def scenario(k: Kit) -> None:
        a = await _parked(k)

        def cancel_then_steer() -> None:
            a.cancel("w2")
            a.steer("late")

        k.on("agent/status", _on_first_running(cancel_then_steer))
        a.send("A")
        await k.idle(a)
        await k.until(lambda: len(k.reasons(a)) == 1, "the late steering's turn to end")
        assert k.prompts(a) == [["late"]], "A is dropped, the late steering runs as a prompt"
        assert k.reasons(a) == [COMPLETED], LATER_COMPLETES

    run(scenario)


@pytest.mark.rule("CANCEL-W0")
def test_window0_right_after_creation(run: Run, schedule: str) -> None:
    async def scenario(k: Kit) -> None:
        a = k.agent()
        a.send("A")
        watch = Watch(k, a)
        a.cancel()
        await watch.wait()
        await k.settle()
        assert k.events(a) == []
        await _runs_alone_and_completes(k, a, "B")

    run(scenario)


@pytest.mark.rule("CANCEL-W0", "MARKER-1")
@pytest.mark.parametrize("waiter", [False, True], ids=["send-cancel", "send-when_idle-cancel"])
def test_window0_idle_listener_sends_then_cancels(run: Run, schedule: str, waiter: bool) -> None:
    # With ``waiter`` the listener takes a when_idle() between its send and its cancel: taken
    # while Y was queued, it is not released at once (IDLE-1), and once the cancel dropped Y the
    # agent is quiescent: CANCEL-W0 says the waiters are released and the driver parks (a loop
    # that released its waiters before the idle event only, and parks, leaves it hanging until
    # some later turn ends).
    async def scenario(k: Kit) -> None:
        a = await _parked(k)
        fired = [False]
        watches: list[Watch] = []

        def listener(_agent: object, status: str) -> None:
            if status == "idle" and not fired[0]:
                fired[0] = True
                a.send("Y")
                if waiter:
                    watches.append(Watch(k, a))
                a.cancel()

        k.on("agent/status", listener)
        a.send("X")
        await k.idle(a)
        await k.settle()
        await k.idle(a)
        assert fired[0]
        if watches:
            await watches[0].wait()
            assert watches[0].turn_ends_at_release() == 1, watches[0].types_at_release
        a.send("Z")
        await k.idle(a)
        assert k.prompts(a) == [["X"], ["Z"]]
        assert k.reasons(a)[-1:] == [COMPLETED], LATER_COMPLETES

    run(scenario)


@pytest.mark.rule("CANCEL-STEP")
@pytest.mark.parametrize("boundary", ["agent/turn-start", "agent/step-start"])
def test_cancel_before_step(run: Run, schedule: str, boundary: str) -> None:
    async def scenario(k: Kit) -> None:
        k.record("agent/step-start", "agent/step-end")
        a = await _parked(k)
        k.on(boundary, once(lambda *_: a.cancel("early")))
        a.send("A")
        await k.idle(a)
        assert k.types(a) == ["turn/start", "user/message", "step/start", "step/end", "turn/end"]
        assert k.reasons(a) == [aborted("early")]
        assert k.model.requests == [], "the model is not called"
        assert k.noted("agent/step-start") == [(1, 1)] and k.noted("agent/step-end") == [(1, 1)]

    run(scenario)


@pytest.mark.rule("CANCEL-CONT", "CANCEL-1")
@pytest.mark.parametrize("vote", ["continue", "stop"])
def test_cancel_at_continuation_gate(run: Run, schedule: str, vote: str) -> None:
    # The turn ends aborted whatever the waterfall voted: "even when it voted to continue"
    # (CANCEL-CONT), and a fortiori when it voted to stop (CANCEL-1: a cancelled turn ends
    # aborted{reason} in every window).
    async def scenario(k: Kit) -> None:
        k.tool("echo")
        a = await _parked(k)

        async def listener(agent: object, turn: int, decision: object, next: object) -> object:
            a.cancel("gate")
            await next()  # type: ignore[operator]
            return vote == "continue"

        k.on("agent/turn-continuation", listener)
        k.model.push(fakes.tool_calls(("c1", "echo", "{}")))
        a.send("A")
        await k.idle(a)
        assert k.reasons(a) == [aborted("gate")]
        assert len(k.model.requests) == 1, "no further step runs"

    run(scenario)


@pytest.mark.rule("CANCEL-1", "CANCEL-CONT")
@pytest.mark.parametrize("step", ["text", "tool"])
def test_cancel_after_a_step_with_no_continuation_listener(run: Run, schedule: str, step: str) -> None:
    # A cancel from an agent/step-end listener: the step is closed, the continuation gate comes
    # next, and nobody listens on agent/turn-continuation. A loop that skips the gate when no
    # listener would vote may not skip the cancel with it: the turn ends aborted{reason} (CANCEL-1,
    # "in every window"), a text step's turn not completed, a tool step's opening no further
    # step (CANCEL-CONT). (Session 61's blind round M.)
    async def scenario(k: Kit) -> None:
        k.tool("echo")
        k.record("agent/step-start", needs="the test counts the steps it announces")
        a = await _parked(k)
        k.on("agent/step-end", once(lambda *_: a.cancel("after the step")), needs="the cancel lands as the step ends")
        k.model.push(fakes.tool_calls(("c1", "echo", "{}")) if step == "tool" else fakes.text("the answer"),
                     fakes.text("unused"))
        a.send("A")
        await k.idle(a)
        assert k.reasons(a) == [aborted("after the step")], (
            f"cancelled after its step, the turn ended {k.reasons(a)} (CANCEL-1: aborted with the caller's reason)")
        assert len(k.model.requests) == 1 and k.noted("agent/step-start") == [(1, 1)], "no further step runs"

    run(scenario)


@pytest.mark.rule("CANCEL-CONT")
@pytest.mark.parametrize("when", ["before-next", "after-next"])
def test_cancel_at_continuation_gate_opens_no_further_step(run: Run, schedule: str, when: str) -> None:
    # "No further step runs" is stronger than "the model is not called again": a loop that lets
    # the continuation vote stand and relies on the next step's own cancel check (CANCEL-STEP)
    # still opens an empty step 2. Only the log and the step notifications show that.
    async def scenario(k: Kit) -> None:
        k.tool("echo")
        k.record("agent/step-start", "agent/step-end", needs="the test counts the steps they announce")
        a = await _parked(k)

        async def listener(agent: object, turn: int, decision: object, next: object) -> object:
            if when == "before-next":
                a.cancel("gate")
                await next()  # type: ignore[operator]
            else:
                # The cancel lands after the rest of the waterfall has voted (the tool call's
                # default is "continue"), as late as a cancel can still be "during" it.
                await next()  # type: ignore[operator]
                await asyncio.sleep(0.01)
                a.cancel("gate")
            return True

        k.on("agent/turn-continuation", listener)
        k.model.push(fakes.tool_calls(("c1", "echo", "{}")))
        a.send("A")
        await k.idle(a)
        assert k.reasons(a) == [aborted("gate")]
        steps = [(e["type"], e["data"]["step"]) for e in k.events(a, "step/start", "step/end")]
        assert steps == [("step/start", 1), ("step/end", 1)], f"a further (empty) step opened: {steps}"
        assert k.noted("agent/step-start") == [(1, 1)], "agent/step-start for a step after the gate"
        assert k.noted("agent/step-end") == [(1, 1)]
        assert len(k.model.requests) == 1, "no further step runs"

    run(scenario)


@pytest.mark.rule("CANCEL-CONT", "CANCEL-4")
@pytest.mark.parametrize("vote", ["continue", "stop"])
def test_steering_sent_after_a_cancel_at_the_gate_opens_no_further_step(run: Run, schedule: str, vote: str) -> None:
    # A continuation listener cancels, then steers: the cancel still ends the turn at the gate
    # (no further step runs, CANCEL-CONT) and the steering, added after the cancel while the turn
    # closes, is late steering: it runs as the next prompt (CANCEL-4, LOOP-8). A loop that lets
    # waiting steering override the stop vote (CONT-2) before it looks at the cancel opened step 2
    # with it (session 55's blind round: only the hunt found it).
    async def scenario(k: Kit) -> None:
        k.tool("echo")
        k.record("agent/step-start", needs="the test counts the steps they announce")
        a = await _parked(k)
        fired: list[bool] = []

        async def listener(agent: object, turn: int, decision: object, next: object) -> object:
            if fired:
                return await next()  # type: ignore[operator]  # later gates: the default decision
            fired.append(True)
            a.cancel("gate")
            a.steer("S")
            await next()  # type: ignore[operator]
            return vote == "continue"

        k.on("agent/turn-continuation", listener)
        k.model.push(fakes.tool_calls(("c1", "echo", "{}")), fakes.text("after S"))
        a.send("A")
        await k.idle(a)
        assert k.reasons(a)[0] == aborted("gate")
        first = [e["type"] for e in k.events(a, "turn/start", "step/start")][:3]
        assert first == ["turn/start", "step/start", "turn/start"], f"a further step opened in the cancelled turn: {first}"
        assert k.noted("agent/step-start")[:1] == [(1, 1)] and (1, 2) not in k.noted("agent/step-start")
        assert k.prompts(a)[1:] == [["S"]], "the steering sent after the cancel runs as the next prompt"
        assert k.reasons(a)[1:] == [COMPLETED]

    run(scenario)


@pytest.mark.rule("CANCEL-MID")
@pytest.mark.parametrize("where", ["stream", "tool"])
def test_cancel_mid_step(run: Run, schedule: str, where: str) -> None:
    async def scenario(k: Kit) -> None:
        tool = k.tool("hang", hang=True)
        a = await _parked(k)
        if where == "stream":
            k.model.push(respond.hang())
        else:
            k.model.push(fakes.tool_calls(("c1", "hang", "{}")))
        a.send("A")
        if where == "stream":
            await k.until(lambda: bool(k.model.requests), "the model call")
        else:
            await k.until(lambda: bool(tool.calls), "the tool call")
        a.cancel("mid")
        await k.idle(a)
        assert k.reasons(a) == [aborted("mid")]
        assert len(k.model.requests) == 1

    run(scenario)


class _Babbler:
    """A model adapter deaf to the step's signal whose stream never ends: one text delta after
    another, a bare suspension apart (a provider still sending on a connection nobody closed)."""

    def __init__(self) -> None:
        self.yielded = 0

    def stream(self, request: Any) -> Any:
        return self._chunks()

    async def _chunks(self) -> Any:
        yield v.block_start(0, "text")
        while True:
            await asyncio.sleep(0)
            self.yielded += 1
            yield v.text_delta(0, "la ")


@pytest.mark.rule("CANCEL-MID", "ABORT-1")
@pytest.mark.parametrize("verb", ["abort", "cancel"])
def test_a_step_stops_reading_a_deaf_stream_that_never_ends(run: Run, schedule: str, verb: str) -> None:
    # CANCEL-MID: a cancel during a model stream aborts that step and ends the turn aborted
    # (ABORT-1: so does abort()). A stream that ignores the signal and keeps streaming, a bare
    # suspension between chunks, must not hold the step: the loop stops reading it. Session 49's
    # review: a loop that gave each read after the abort a few event-loop passes, taking whatever
    # arrived within them, read such a stream for ever.
    async def scenario(k: Kit) -> None:
        babbler = _Babbler()
        k.service.register_model("babbler", babbler)
        a = k.agent("b", model="babbler")

        stopped: list[bool] = []

        def stop_at_the_third(*args: Any) -> None:
            # once, at the first chunk logged after the stream yielded its third: a loop may read
            # ahead of its log (a buffer of chunks), so the log need not show that very count
            # (indie80, a one-slot queue between its reader and its step)
            if not stopped and args[-1].get("type") == "assistant/chunk" and babbler.yielded >= 3:
                stopped.append(True)
                getattr(a, verb)("stop")

        k.on("session/event", stop_at_the_third, needs="the stop lands once the stream's third delta is read")
        a.send("A")
        await k.idle(a, what=f"{verb}() mid-stream ends the turn although the stream never does (CANCEL-MID)")
        assert k.reasons(a) == [aborted("stop")]

    run(scenario)


async def _stopped_stream_ended_aborted(k: Kit, a: AgentHandle, verb: str, where: str, why: str) -> None:
    """The outcome of a stream stopped by ``abort("stop")`` or ``cancel("stop")`` with ``B`` queued:
    the turn ends aborted{stop} (the queued prompt still runs after an abort, ABORT-1; a cancel
    cleared it), with no error event and no agent/error (FINISH-1, CANCEL-MID)."""
    await k.idle(a, what=f"{verb}() {where} ends the turn aborted: {why} (CANCEL-MID, ABORT-1)")
    expected = [aborted("stop"), COMPLETED] if verb == "abort" else [aborted("stop")]
    assert k.reasons(a) == expected, f"a stream stopped {where} by {verb}() must end the turn aborted: {k.reasons(a)}"
    assert k.events(a, "error") == [] and k.noted("agent/error") == [], "the abort is not a failure"


@pytest.mark.rule("ABORT-1", "CANCEL-MID", "FINISH-1")
@pytest.mark.parametrize("adapter", ["finish", "return", "raise", "fail", "ignore"])
@pytest.mark.parametrize("verb", ["abort", "cancel"])
def test_a_stream_stopped_by_the_abort_ends_the_turn_aborted_whatever_the_adapter_does(
        run: Run, verb: str, adapter: str) -> None:
    # The adapter honours the step's signal its own way: it yields finish{aborted}, ends the
    # stream silently, or fails its pending read (as fetch's reader and httpx's stream do, its
    # listener on the signal registered when the request was made, before the loop's own), with
    # an abort error or with an error of its own (`fail`: a closed connection's); or
    # it ignores the signal and hangs on (a network read nobody cancels): the loop must stop
    # waiting for it. In each case the step's own signal fired: the turn ends aborted{reason}
    # (FINISH-1, CANCEL-MID), with no error event and no agent/error, and the queued prompt
    # still runs (ABORT-1).
    async def scenario(k: Kit) -> None:
        k.record("agent/error")
        a = k.agent()
        k.model.push(respond.text("partial").hang(after=1).on_abort(adapter), fakes.text("B"))  # type: ignore[arg-type]
        a.send("A")
        await k.until(lambda: any(e["type"] == "assistant/chunk" for e in k.events(a)), "A's first chunk")
        a.send("B")  # queued: an abort leaves it to run, a cancel clears it
        if verb == "abort":
            a.abort("stop")
        else:
            a.cancel("stop")
        await _stopped_stream_ended_aborted(k, a, verb, f"during a stream ({adapter})",
                                            "the loop must not wait for a stream its signal stopped")

    run(scenario)


@pytest.mark.rule("ABORT-1", "CANCEL-MID", "FINISH-1")
@pytest.mark.parametrize("adapter", ["finish", "ignore"])
@pytest.mark.parametrize("verb", ["abort", "cancel"])
def test_a_stream_stopped_between_two_reads_ends_the_turn_aborted_whatever_the_adapter_does(
        run: Run, verb: str, adapter: str) -> None:
    # The stop comes from an agent/stream-chunk listener, between two reads: no read is pending,
    # and an adapter that ignores the signal hangs on the next one for ever. The loop hears that
    # the step's signal fired before it reads again (an AbortSignal calls no listener added
    # after it fired): the turn ends aborted{reason}, and the queued prompt still runs (ABORT-1).
    async def scenario(k: Kit) -> None:
        k.record("agent/error")
        a = k.agent()
        k.model.push(respond.text("partial").hang(after=1).on_abort(adapter), fakes.text("B"))  # type: ignore[arg-type]

        def stop(*_: object) -> None:
            a.send("B")  # queued: an abort leaves it to run, a cancel clears it
            getattr(a, verb)("stop")
        k.on("agent/stream-chunk", once(stop), needs="the stop lands between two reads of the stream")
        a.send("A")
        await _stopped_stream_ended_aborted(k, a, verb, f"between two reads ({adapter})",
                                            "the loop must see that the step's signal already fired before it reads again")

    run(scenario)


@pytest.mark.rule("MARKER-1")
def test_marker_does_not_drop_later_prompt(run: Run, schedule: str) -> None:
    async def scenario(k: Kit) -> None:
        a = await _parked(k)
        k.model.push(respond.hang())
        a.send("A")
        await k.until(lambda: bool(k.model.requests), "A's model call")
        a.cancel()
        await k.idle(a)
        a.send("B")
        await k.idle(a)
        assert k.prompts(a) == [["A"], ["B"]]
        assert k.reasons(a) == [aborted("cancelled"), COMPLETED]

    run(scenario)


@pytest.mark.rule("MARKER-1")
def test_prompt_sent_during_cancelled_flush_runs(run: Run, schedule: str) -> None:
    async def scenario(k: Kit) -> None:
        a = await _parked(k)
        flushes = [0]
        flushing = asyncio.Event()

        async def flush(*_args: object) -> None:
            flushes[0] += 1
            if flushes[0] == 1:
                flushing.set()
                a.send("B")
                await asyncio.sleep(0.5)

        k.on("session/flush", flush)
        k.model.push(respond.hang())
        a.send("A")
        await k.until(lambda: bool(k.model.requests), "A's model call")
        a.cancel()
        await asyncio.wait_for(flushing.wait(), k.timeout)
        await k.idle(a)
        assert k.prompts(a) == [["A"], ["B"]], "a prompt sent while the cancelled turn flushed must run"
        assert k.reasons(a)[-1:] == [COMPLETED], LATER_COMPLETES

    run(scenario)


@pytest.mark.rule("MARKER-1")
def test_cancel_during_a_flush_spares_the_prompt_sent_after_it(run: Run, schedule: str) -> None:
    # A cancel while a completed turn flushes (the agent still running, its turn closed) governs
    # that turn's iteration: the prompt sent right after it is a later prompt, and runs.
    async def scenario(k: Kit) -> None:
        a = await _parked(k)
        flushes = [0]

        async def flush(*_args: object) -> None:
            flushes[0] += 1
            if flushes[0] == 1:
                a.cancel("late")
                a.send("B")
                await asyncio.sleep(0.5)

        k.on("session/flush", flush)
        a.send("A")
        await k.idle(a)
        await k.until(lambda: len(k.reasons(a)) == 2, "B's turn to end")
        assert k.prompts(a) == [["A"], ["B"]], "a prompt sent after a cancel during the flush must run"
        assert k.reasons(a) == [COMPLETED, COMPLETED], LATER_COMPLETES

    run(scenario)


@pytest.mark.rule("MARKER-1", "CANCEL-W1")
def test_marker_reset_after_dropped_turn(run: Run, schedule: str) -> None:
    async def scenario(k: Kit) -> None:
        a = await _parked(k)
        a.send("A")
        a.cancel()
        await k.idle(a)
        await k.settle()
        await _runs_alone_and_completes(k, a, "B")

    run(scenario)


@pytest.mark.rule("CANCEL-4")
def test_steering_pending_in_a_tool_dropped_steering_after_cancel_requeued(run: Run, schedule: str) -> None:
    # Steering waiting while a tool runs is dropped by the cancel; steering the caller adds in
    # the same synchronous stretch right after cancel() (the cancelled turn has not closed yet)
    # is late steering and runs as the next turn, which the cancel does not govern.
    async def scenario(k: Kit) -> None:
        a = await _parked(k)
        # A gated tool, opened right after the cancel: the turn closes whether or not the abort
        # reaches the tool (that is CANCEL-MID's), and the cancel surely lands during it.
        gate = k.gate()
        tool = k.tool("held", gate=gate)
        k.model.push(fakes.tool_calls(("c1", "held", "{}")), fakes.text("late reply"))
        a.send("A")
        await k.until(lambda: bool(tool.calls), "the tool call")
        a.steer("pending")
        a.cancel("stop")
        a.steer("after")
        gate.open()
        await k.idle(a)
        await k.until(lambda: len(k.reasons(a)) == 2, "the late steering's turn to end")
        assert "pending" not in _ran(k, a), "steering pending at the cancel must be dropped"
        assert k.events(a, "steering/message") == []
        assert k.prompts(a) == [["A"], ["after"]], "steering added after the cancel is re-queued"
        assert k.reasons(a)[1:] == [COMPLETED], "the re-queued steering's turn is not governed by the cancel"

    run(scenario)


@pytest.mark.rule("CANCEL-4", "CANCEL-STEP", "LOOP-8")
def test_steering_added_after_a_cancel_from_turn_start_runs_as_the_next_prompt(run: Run) -> None:
    # An agent/turn-start listener cancels the turn and then steers: the step is dropped
    # (CANCEL-STEP: opened and closed empty), and the steering, given after the cancel while the
    # cancelled turn closes, is late steering: re-queued as the next turn's prompt (CANCEL-4,
    # LOOP-8), not logged into the dropped step, where no model ever reads it.
    async def scenario(k: Kit) -> None:
        a = k.agent()

        def cancel_then_steer(*_args: object) -> None:
            a.cancel("stop")
            a.steer("late")

        k.on("agent/turn-start", once(cancel_then_steer), needs="a cancel and a steer from inside agent/turn-start")
        k.model.push(fakes.text("for late"))
        a.send("A")
        await k.idle(a)
        await k.until(lambda: len(k.reasons(a)) == 2, "the late steering's turn to end")
        steering = [texts(e["data"]["content"]) for e in k.events(a, "steering/message")]
        assert steering == [], f"steering given after the cancel was logged into the cancelled turn: {steering}"
        assert k.prompts(a) == [["A"], ["late"]], f"the late steering runs as the next prompt: {k.prompts(a)}"
        assert k.reasons(a) == [aborted("stop"), COMPLETED], k.reasons(a)
        assert len(k.model.requests) == 1 and "late" in request_texts(k.model.requests[0])

    run(scenario)


@pytest.mark.rule("CANCEL-4", "LOOP-8")
def test_steering_added_after_a_cancel_as_the_steps_message_is_logged_runs_as_the_next_prompt(run: Run) -> None:
    # A session/event listener on the step's assistant/message cancels the turn and steers. The
    # step is still in flight (its tools and its steering drain are ahead), and the steering came
    # after the cancel while the cancelled turn closes: late steering, re-queued as the next
    # turn's prompt (CANCEL-4, LOOP-8), not drained into the cancelled step (indie60a, an
    # independent loop of session 48: found by the hunt, `reply: after
    # session/event(assistant/message)#1: cancel; steer`).
    async def scenario(k: Kit) -> None:
        a = k.agent()

        def cancel_then_steer() -> None:
            a.cancel("stop")
            a.steer("late")

        k.on("session/event", once_on_event("assistant/message", cancel_then_steer))
        k.model.push(fakes.text("first"), fakes.text("for late"))
        a.send("A")
        await k.idle(a)
        await k.until(lambda: len(k.reasons(a)) == 2, "the late steering's turn to end")
        steering = [texts(e["data"]["content"]) for e in k.events(a, "steering/message")]
        assert steering == [], f"steering given after the cancel was logged into the cancelled turn: {steering}"
        assert k.prompts(a) == [["A"], ["late"]], f"the late steering runs as the next prompt: {k.prompts(a)}"
        assert k.reasons(a) == [aborted("stop"), COMPLETED], k.reasons(a)

    run(scenario)


@pytest.mark.rule("CANCEL-4", "ERR-1")
def test_steering_a_cancel_dropped_stays_dropped_when_the_cancelling_listener_throws(run: Run) -> None:
    # Two steering messages wait while a tool runs; a session/event listener on the first
    # steering/message the step's drain logs cancels, then throws. The second was waiting when
    # cancel() was called: dropped (CANCEL-4), not made a prompt because the listener's throw
    # failed the turn (ERR-1 ends the turn, it does not undo the cancel's clearing). The loop goes
    # on (indie60d, an independent loop of session 48: found by the hunt, `steer: after
    # session/event(steering/message)#1: cancel; raise`).
    async def scenario(k: Kit) -> None:
        a = await _parked(k)
        gate = k.gate()
        tool = k.tool("held", gate=gate)
        k.model.push(fakes.tool_calls(("c1", "held", "{}")), fakes.text("never"), fakes.text("next"))

        def cancel_then_throw() -> None:
            a.cancel("stop")
            raise RuntimeError("listener failed after its cancel")

        k.on("session/event", once_on_event("steering/message", cancel_then_throw))
        a.send("A")
        await k.until(lambda: bool(tool.calls), "the tool call")
        a.steer("first")
        a.steer("second")
        gate.open()
        await k.idle(a)
        a.send("B")
        await k.idle(a)
        assert "second" not in delivered(k, a), (f"steering waiting when cancel() was called ran after the cancelling listener "
                                     f"threw: turns' prompts {k.prompts(a)}, log {k.types(a)}")
        assert k.prompts(a) == [["A"], ["B"]], f"the loop goes on with the next prompt: {k.prompts(a)}"

    run(scenario)


@pytest.mark.rule("CANCEL-4")  # as its sibling above: the re-queue is CANCEL-4's own sentence
@pytest.mark.parametrize(("waiting", "earlier"), [(1, False), (2, False), (2, True)],
                         ids=["one-waiting", "two-waiting", "two-waiting-after-an-earlier-cancel"])
def test_steering_added_after_a_cancel_made_while_steering_is_logged_is_requeued(run: Run, waiting: int,
                                                                                 earlier: bool) -> None:
    # The cancel comes from a session/event listener on the first steering/message a step's
    # drain logs, and the listener steers again right after it: that steering came after the
    # cancel, while the cancelled turn closes, so it is late steering, re-queued as the next
    # turn's prompt (CANCEL-4, LOOP-8), not logged into the cancelled turn by a drain that reads
    # the steering queue again (indie43, session 42: found by the hunt, `steer` workload). Also
    # after a cancel earlier in the agent's life: a drain that tells this cancel by a count of
    # cancels must not take that one for it (a mutmut survivor, session 46).
    async def scenario(k: Kit) -> None:
        a = await _parked(k)
        if earlier:
            a.send("dropped")
            a.cancel("earlier")  # before the driver took it: dropped, no turn (CANCEL-W1, MARKER-1)
            await k.settle()
        gate = k.gate()
        tool = k.tool("held", gate=gate)
        k.model.push(fakes.tool_calls(("c1", "held", "{}")), fakes.text("never"), fakes.text("late reply"))

        def cancel_then_steer() -> None:
            a.cancel("stop")
            a.steer("after")

        k.on("session/event", once_on_event("steering/message", cancel_then_steer))
        a.send("A")
        await k.until(lambda: bool(tool.calls), "the tool call")
        a.steer("before")
        if waiting == 2:  # a drain that goes on after the cancel must not take what came after it
            a.steer("before too")
        gate.open()
        await k.idle(a)  # the re-queued steering runs before the agent goes idle (LOOP-8)
        steering = [texts(e["data"]["content"]) for e in k.events(a, "steering/message")]
        assert ["after"] not in steering, f"steering added after the cancel was logged into the cancelled turn: {steering}"
        assert k.prompts(a)[1:] == [["after"]], (
            f"steering added after the cancel is re-queued as the next turn's prompt: turns' prompts {k.prompts(a)}, "
            f"log {k.types(a)}")
        assert k.reasons(a) == [aborted("stop"), COMPLETED], k.reasons(a)

    run(scenario)


@pytest.mark.rule("CANCEL-STEP")
def test_cancel_before_a_later_step(run: Run, schedule: str) -> None:
    # The cancel comes from agent/step-start of step 2 (after a tool step): step 2 is opened
    # and closed empty, the model is called once, the turn ends aborted with the reason.
    async def scenario(k: Kit) -> None:
        k.tool("echo")
        k.record("agent/step-start", "agent/step-end")
        a = await _parked(k)

        def on_step_start(_agent: object, _turn: int, step: int) -> None:
            if step == 2:
                a.cancel("before step 2")

        k.on("agent/step-start", on_step_start)
        k.model.push(fakes.tool_calls(("c1", "echo", "{}")))
        a.send("A")
        await k.idle(a)
        assert k.reasons(a) == [aborted("before step 2")]
        assert len(k.model.requests) == 1, "the model is not called for the dropped step"
        types = k.types(a)
        last_start = len(types) - 1 - types[::-1].index("step/start")
        assert types[last_start:] == ["step/start", "step/end", "turn/end"], f"step 2 must be empty: {types}"
        assert k.noted("agent/step-start") == [(1, 1), (1, 2)] and k.noted("agent/step-end") == [(1, 1), (1, 2)]

    run(scenario)


@pytest.mark.rule("CANCEL-MID")
@pytest.mark.parametrize("where", ["stream", "tool"])
def test_cancel_from_inside_the_step(run: Run, schedule: str, where: str) -> None:
    # The cancel is called from inside the step itself: by the model while it streams (after
    # its first chunks) or by the tool while it runs; a tool call after it never runs.
    async def scenario(k: Kit) -> None:
        a = await _parked(k)
        tool = k.tool("canceller", hook=lambda _args: a.cancel("inside"))
        after = k.tool("after")
        if where == "stream":
            k.model.push(fakes.text("streaming", finish=None).hook(lambda: a.cancel("inside"), before=2).hang(before=2))
        else:
            k.model.push(fakes.tool_calls(("c1", "canceller", "{}"), ("c2", "after", "{}")))
        a.send("A")
        await k.idle(a)
        assert k.reasons(a) == [aborted("inside")]
        assert len(k.model.requests) == 1, "no further step runs"
        assert after.calls == []
        if where == "tool":
            assert len(tool.calls) == 1

    run(scenario)


@pytest.mark.rule("CANCEL-1")
@pytest.mark.parametrize("waterfall", ["system-prompt", "agent/request", "agent/step-result"])
def test_cancel_while_a_step_waterfall_runs(run: Run, schedule: str, waterfall: str) -> None:
    # "With the caller's reason in every window": the cancel lands while a slow system-prompt,
    # agent/request or agent/step-result listener is still running (during the system prompt's
    # assembly no abort handle may exist yet: the marker still governs the step); the turn ends
    # aborted with that reason, nothing of the step is dispatched and a later prompt runs normally.
    async def scenario(k: Kit) -> None:
        a, echo = await _stopped_in_a_step_waterfall(k, waterfall, "cancel")
        assert k.reasons(a) == [aborted("during " + waterfall)]
        assert echo.calls == [], "nothing of the cancelled step is dispatched"
        await _runs_alone_and_completes(k, a, "B")

    run(scenario)

