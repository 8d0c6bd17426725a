"""Section 9: disposal (DISP-1..5)."""

from __future__ import annotations

import asyncio
import inspect
import re
from collections.abc import Awaitable
from typing import Any

import pytest

from conformance import fakes
from conformance.adapter import AgentHandle
from conformance.fakes import Gate, respond
from conformance.harness import Kit

from ._support import (
    DISPOSED,
    FLUSH_DONE,
    Run,
    Watch,
    assert_driver_exited,
    boom,
    driver_exit_at_release,
    in_process_only,
    once,
    once_on,
    once_on_event,
    passthrough,
    texts,
)


async def _mid_turn(k: Kit) -> AgentHandle:
    a = k.agent()
    k.model.push(respond.hang())
    a.send("A")
    await k.until(lambda: bool(k.model.requests), "A's model call")
    return a


@pytest.mark.rule("DISP-1")
def test_dispose_mid_turn(run: Run) -> None:
    async def scenario(k: Kit) -> None:
        k.record("agent/status")
        a = await _mid_turn(k)
        a.dispose()
        await k.idle(a)
        assert k.statuses()[-1] == "disposed"
        assert k.reasons(a) == [DISPOSED]
        assert k.types(a)[-2:] == ["step/end", "turn/end"], "the open step is closed first"

    run(scenario)


DISPOSED_DURING = ["model call", "tool call", "agent/turn-start listener", "turn/start event listener"]
"""Where ``_disposed_during`` disposes: from outside, during the model call or the tool call, or
from a listener of the turn's own ``agent/turn-start`` notification or of its ``turn/start``
session event (inside the driver: a ``dispose()`` that cancels the driver's task leaves a
cancellation pending there, and it lands in what follows; one that only flags the driver must
still close the turn it has just opened)."""


async def _disposed_during(k: Kit, where: str) -> AgentHandle:
    """An agent sent ``A`` and disposed at ``where`` (``DISPOSED_DURING``), once its driver
    exited (a when_idle() on the disposed agent resolved); its one turn ended disposed."""
    a = k.agent()
    if where == "model call":
        k.model.push(respond.hang())
    elif where == "tool call":
        k.tool("slow", gate=k.gate())
        k.model.push(fakes.tool_calls(("c1", "slow", "{}")))
    elif where == "agent/turn-start listener":
        k.model.push(respond.hang())
        k.on("agent/turn-start", once(lambda *_args: a.dispose()),
             needs="a dispose() from inside the driver, as the turn starts")
    else:
        k.model.push(respond.hang())
        k.on("session/event", once_on_event("turn/start", a.dispose),
             needs="a dispose() from inside the driver, as turn/start is logged")
    a.send("A")
    if not where.endswith("listener"):
        await k.until(lambda: "tool/call" in k.types(a) if where == "tool call" else bool(k.model.requests), where)
        a.dispose()
    else:
        await k.until(lambda: a.status == "disposed", "the dispose() from agent/turn-start")
    await k.idle(a)
    assert k.reasons(a) == [DISPOSED]
    return a


@pytest.mark.rule("DISP-1", "LOOP-4")
@pytest.mark.parametrize("where", DISPOSED_DURING)
def test_a_disposed_turn_is_notified_ended(run: Run, where: str) -> None:
    # LOOP-4: turn/end, then agent/turn-end; its one exemption is a boundary listener's failure,
    # and ERR-10 swallows a throwing agent/turn-end listener *during disposal*: a turn disposed
    # mid-step is notified ended too, with the reason it logged, after its turn/end.
    async def scenario(k: Kit) -> None:
        k.record("agent/turn-end", "session/event")
        await _disposed_during(k, where)
        assert k.noted("agent/turn-end") == [(1, DISPOSED)], "one agent/turn-end, reason disposed"
        order = [n[0] if n[0] != "session/event" else n[1] for n in k.notes]
        assert order.index("agent/turn-end") > order.index("turn/end"), "agent/turn-end follows turn/end"

    run(scenario)


@pytest.mark.rule("DISP-1", "LOOP-4")
@pytest.mark.parametrize("where", DISPOSED_DURING)
def test_a_disposed_turn_is_flushed(run: Run, where: str) -> None:
    # LOOP-4's turn shape ends with the awaited session/flush, and DISP-1 changes a disposed
    # turn's reason, not its shape: the log that ends turn/end{disposed} is flushed (a persistence
    # plugin keeps it through session/flush; left unflushed, a resume would find the turn open).
    # Flushed once the driver has exited, that is by the time a when_idle() on the disposed agent
    # resolves (IDLE-4). Both kinds of flush listener: a plain one, and a coroutine one, which a
    # cancellation left pending in the driver (a dispose() from inside it) would stop at once.
    async def scenario(k: Kit) -> None:
        flushed: list[list[str]] = []
        awaited: list[str] = []

        async def persist(session: Any) -> None:
            awaited.append("start")
            await asyncio.sleep(0)
            awaited.append("end")

        k.on("session/flush", lambda session: flushed.append([e["type"] for e in session.events]))
        k.on("session/flush", persist)
        await _disposed_during(k, where)
        assert flushed and flushed[-1][-1] == "turn/end", f"the disposed turn is flushed after its turn/end: {flushed}"
        assert awaited[:2] == ["start", "end"], (
            f"the disposed turn's session/flush did not run its coroutine listener to its end ({awaited}): the "
            "flush is awaited (LOOP-4), and a disposed turn keeps its shape (DISP-1)")

    run(scenario)


@pytest.mark.rule("DISP-2")
def test_dispose_idempotent_and_unbreakable(run: Run) -> None:
    async def scenario(k: Kit) -> None:
        k.on("agent/status", boom)
        k.on("agent/turn-end", boom)
        a = await _mid_turn(k)
        watch = Watch(k, a)
        a.dispose()
        a.dispose()
        assert a.status == "disposed"
        await watch.wait()
        await k.settle()
        task = k.service.driver_task(a)
        assert task is None or task.done(), "disposal ends the driver"
        a.dispose()
        assert k.reasons(a) == [DISPOSED]

    run(scenario)


@pytest.mark.rule("DISP-2", "DISP-1")
@pytest.mark.parametrize("where", ["mid-stream", "mid-tool"])
def test_dispose_unbroken_by_a_throwing_listener_on_the_steps_signal(run: Run, where: str) -> None:
    # An adapter's or a tool's own listener on the step's abort signal throws when the signal
    # fires (a client closing its connection, say). dispose() fires that signal, and "cannot be
    # broken by a throwing listener" (DISP-2; 0b: dispose() is synchronous and cannot fail): it
    # returns, the agent is disposed at once and announced so, and the turn ends disposed,
    # balanced (DISP-1); a later agent of the service still runs.
    async def scenario(k: Kit) -> None:
        k.record("agent/status", needs="the test checks the disposed status is announced")
        signals: list[Any] = []
        a = k.agent()
        if where == "mid-stream":
            k.model.push(respond.hang())
        else:
            k.tool("wait", hang=True, hook=lambda _args, context: signals.append(context.get("signal")))
            k.model.push(respond.tool_call("wait", {}))
        a.send("A")
        if where == "mid-stream":
            await k.until(lambda: bool(k.model.requests), "A's model call")
            signals.append(k.model.signals[0])
        else:
            await k.until(lambda: bool(signals), "the tool call")
        signal = signals[0]
        if signal is None or not callable(getattr(signal, "add_listener", None)):
            pytest.skip("the step's signal takes no listeners here")
        signal.add_listener(boom)
        try:
            a.dispose()
        except Exception as exc:
            raise AssertionError(f"dispose() {where} raised {exc!r} from a throwing listener on the step's abort "
                                 "signal: disposal cannot be broken by a throwing listener (DISP-2)") from exc
        assert a.status == "disposed", f"dispose() {where} left the agent {a.status!r} (DISP-2)"
        await k.idle(a)
        assert k.statuses()[-1] == "disposed", f"the disposal was not announced: statuses {k.statuses()} (DISP-1)"
        assert k.reasons(a) == [DISPOSED], k.reasons(a)
        b = k.agent("b")
        k.model.push(respond.text("b's answer"))
        b.send("B")
        await k.idle(b)
        assert k.reasons(b) == [{"kind": "completed"}]

    run(scenario)


def _clear(exc: BaseException) -> bool:
    """A clear error says why: "disposed" (or "closed") in its message or its type's name. The
    exact wording is the implementation's."""
    return bool(re.search(r"(?i)dispos|closed", f"{type(exc).__name__}: {exc}"))


async def _rejects_input(k: Kit, agent: AgentHandle) -> None:
    """send(), steer() and (with the feature) inject() on a disposed agent raise a clear error."""
    names = ["send", "steer", *(["inject"] if "injection" in k.impl.features else [])]
    for name in names:
        try:
            if name == "inject":
                await k.inject(agent, "late")
            else:
                getattr(agent, name)("late")
        except AssertionError:
            raise
        except Exception as exc:
            assert _clear(exc), f"{name}() on a disposed agent raised an unclear error: {exc!r}"
        else:
            raise AssertionError(f"{name}() on a disposed agent did not raise")


@pytest.mark.rule("DISP-3")
def test_disposed_agent_rejects_input(run: Run) -> None:
    async def scenario(k: Kit) -> None:
        a = k.agent()
        a.dispose()
        await _rejects_input(k, a)
        assert k.events(a) == []

    run(scenario)


@pytest.mark.rule("DISP-4")
@pytest.mark.parametrize("listener", ["session/event", "agent/turn-end"])
def test_throwing_turn_end_listener_during_disposal(run: Run, listener: str) -> None:
    async def scenario(k: Kit) -> None:
        if listener == "session/event":
            k.on("session/event", lambda _s, e: boom() if e["type"] == "turn/end" else None)
        else:
            k.on("agent/turn-end", boom)
        a = await _mid_turn(k)
        a.dispose()
        await k.idle(a)
        assert k.reasons(a) == [DISPOSED]

    run(scenario)


@pytest.mark.rule("DISP-5")
@pytest.mark.parametrize("where", ["mid-turn", "running listener"])
def test_disposal_is_not_a_failure(run: Run, where: str) -> None:
    # "running listener": dispose() from a synchronous agent/status('running') listener, before
    # any turn opened (window 2): whatever the driver had drained, nothing of it is a failure.
    async def scenario(k: Kit) -> None:
        k.record("agent/status", "agent/error")
        if where == "mid-turn":
            a = await _mid_turn(k)
            a.dispose()
        else:
            a = k.agent()
            k.on("agent/status", once_on("running", a.dispose))
            a.send("one")
        await k.idle(a)
        assert k.events(a, "error") == []
        assert k.statuses() == ["running", "disposed"]
        assert k.noted("agent/error") == []

    run(scenario)


@pytest.mark.rule("DISP-5", "DISP-4")
@pytest.mark.parametrize("where", ["agent/turn-start", "agent/step-end", "session/event step/end"])
def test_a_listener_throwing_after_it_disposed_the_agent_logs_no_error(run: Run, where: str) -> None:
    # DISP-5: disposal is not a failure. A listener that disposes the agent and then throws (a
    # plugin shutting the agent down, then failing) throws while the disposed turn closes: as
    # ERR-10 and DISP-4 say of a turn-end listener's throw during disposal, no error event is
    # logged for it, and the turn ends disposed.
    async def scenario(k: Kit) -> None:
        a = k.agent()
        k.model.push(fakes.text("the reply"))

        def dispose_then_throw(*_args: Any) -> None:
            a.dispose()
            raise RuntimeError("failed after disposing")

        if where == "session/event step/end":
            fired: list[bool] = []

            def on_event(_session: Any, event: dict[str, Any]) -> None:
                if event["type"] == "step/end" and not fired:
                    fired.append(True)
                    dispose_then_throw()

            k.on("session/event", on_event)
        else:
            k.on(where, once(dispose_then_throw))
        a.send("A")
        await k.idle(a)
        assert k.events(a, "error") == [], "an error event was logged for a throw made once the agent was disposed"
        assert k.reasons(a) == [DISPOSED]

    run(scenario)


@pytest.mark.rule("DISP-1")
def test_dispose_during_a_tool(run: Run) -> None:
    # Disposed from inside a tool call: the status event, the turn ends disposed, the open
    # step is closed before the one turn/end, and no later tool or step runs.
    async def scenario(k: Kit) -> None:
        k.record("agent/status")
        a = k.agent()
        k.tool("disposer", hook=lambda _args: a.dispose())
        after = k.tool("after")
        k.model.push(fakes.tool_calls(("c1", "disposer", "{}"), ("c2", "after", "{}")))
        a.send("A")
        await k.idle(a)
        assert k.statuses()[-1] == "disposed"
        assert k.reasons(a) == [DISPOSED]
        types = k.types(a)
        assert types[-2:] == ["step/end", "turn/end"] and types.count("turn/end") == 1, types
        assert after.calls == [] and len(k.model.requests) == 1

    run(scenario)


@pytest.mark.rule("DISP-1")
@pytest.mark.parametrize(("where", "stop"), [("agent/step-end", "abort"), ("session/event", "abort"),
                                             ("session/event", "error")])
def test_disposed_while_a_stopped_step_closes_the_turn_ends_disposed(run: Run, where: str, stop: str) -> None:
    # The step was aborted (or its model failed), and while it closes a watchdog disposes the
    # agent: from agent/step-end, or from a session/event listener on step/end (a failed step's
    # closing need not be notified, but it is logged). The turn is still open, so it ends
    # `disposed` (DISP-1), however the loop decided the step's own outcome.
    async def scenario(k: Kit) -> None:
        a = k.agent()

        def watchdog(*args: Any) -> None:
            if where == "agent/step-end" or (isinstance(args[-1], dict) and args[-1].get("type") == "step/end"):
                a.dispose()

        k.on(where, watchdog, needs="the test disposes from it" if where == "agent/step-end" else None)
        k.model.push(respond.hang() if stop == "abort" else respond.error("model failed", code="E_MODEL"))
        a.send("A")
        if stop == "abort":
            await k.until(lambda: bool(k.model.requests), "A's model call")
            a.abort("stop")
        await k.idle(a)
        assert a.status == "disposed"
        assert k.reasons(a) == [DISPOSED], f"the turn was open when the agent was disposed: {k.reasons(a)}"
        assert k.types(a).count("turn/end") == 1

    run(scenario)


@pytest.mark.rule("DISP-2")
def test_dispose_from_listeners_and_twice(run: Run) -> None:
    # Disposal started by a listener (agent/step-start) while another status listener throws
    # and a waiter is pending, then disposed again from agent/turn-end and by the caller: one
    # disposed status, the waiter released, the driver ended, a later when_idle() resolves.
    async def scenario(k: Kit) -> None:
        k.record("agent/status", needs="the test counts the disposed status")
        k.on("agent/status", boom)
        a = k.agent()
        k.on("agent/step-start", lambda *_: a.dispose(), needs="the test disposes from it")
        k.on("agent/turn-end", lambda *_: a.dispose())
        a.send("A")
        watch = Watch(k, a)
        await watch.wait()
        a.dispose()
        assert a.status == "disposed"
        assert k.statuses().count("disposed") == 1
        await k.settle()
        task = k.service.driver_task(a)
        assert task is None or task.done(), "disposal ends the driver"
        await k.idle(a)
        assert k.reasons(a) == [DISPOSED]
        assert k.model.requests == [], "disposed before the model call"

    run(scenario)


@pytest.mark.rule("DISP-3")
def test_agent_disposed_while_running_rejects_input(run: Run) -> None:
    # Disposed mid-turn (not idle) and by the service's close(): input still raises clearly and
    # the log gets nothing from it.
    async def scenario(k: Kit) -> None:
        k.check_invariants = False  # the disposed turn's balance is DISP-1's
        a = await _mid_turn(k)
        b = k.agent("b")
        a.dispose()
        await k.idle(a)
        before = k.events(a)
        await _rejects_input(k, a)
        assert k.events(a) == before
        await k.service.close()
        await _rejects_input(k, b)
        assert k.events(b) == []

    run(scenario)


@pytest.mark.rule("DISP-4")
@pytest.mark.parametrize("listener", ["session/event", "agent/turn-end"])
def test_throwing_turn_end_listener_during_close(run: Run, listener: str) -> None:
    # The disposal is the service's close() and the turn is inside a tool: the reason stays
    # disposed whatever the turn/end listener throws.
    async def scenario(k: Kit) -> None:
        if listener == "session/event":
            k.on("session/event", lambda _s, e: boom() if e["type"] == "turn/end" else None)
        else:
            k.on("agent/turn-end", boom)
        hanging = k.tool("hang", hang=True)
        a = k.agent()
        k.model.push(fakes.tool_calls(("c1", "hang", "{}")))
        a.send("A")
        await k.until(lambda: bool(hanging.calls), "the tool call")
        await k.service.close()
        assert k.reasons(a) == [DISPOSED]

    run(scenario)


def _verbs(k: Kit) -> list[str]:
    """The input verbs DISP-3 names: send(), steer() and, with the feature, inject()."""
    return ["send", "steer", *(["inject"] if "injection" in k.impl.features else [])]


@pytest.mark.rule("DISP-3")
@pytest.mark.parametrize("when", ["idle", "mid-turn"])
def test_input_from_the_disposed_status_listener_raises(run: Run, when: str) -> None:
    # A synchronous agent/status listener seeing status disposed calls send(), steer() and
    # inject(): the agent is disposed, so each raises a clear error, and nothing of them is
    # logged or run afterwards. An inject() that returns an awaitable (an async inject) may
    # raise when it is awaited (right after dispose() returned), as in the tests above.
    async def scenario(k: Kit) -> None:
        k.check_invariants = when == "idle"  # the disposed turn's balance is DISP-1's
        names = _verbs(k)
        outcomes: dict[str, BaseException | None] = {}
        pending: dict[str, Awaitable[Any]] = {}
        agents: list[Any] = []

        def on_status(_agent: object, status: str) -> None:
            if status != "disposed" or outcomes or pending:
                return
            for name in names:
                try:
                    result = getattr(agents[0], name)("late")
                except Exception as exc:
                    outcomes[name] = exc
                else:
                    if name == "inject" and inspect.isawaitable(result):
                        pending[name] = result
                    else:
                        outcomes[name] = None

        k.on("agent/status", on_status, needs="the test calls the verbs from the disposed status listener")
        if when == "idle":
            a = k.agent()
            agents.append(a)
            a.send("A")
            await k.idle(a)
        else:
            k.model.push(respond.hang())
            a = k.agent()
            agents.append(a)
            a.send("A")
            await k.until(lambda: bool(k.model.requests), "A's model call")
        requests = len(k.model.requests)
        a.dispose()
        for name, awaitable in pending.items():
            try:
                await awaitable
            except Exception as exc:
                outcomes[name] = exc
            else:
                outcomes[name] = None
        for name in names:
            assert name in outcomes, f"the disposed status listener did not call {name}()"
            raised = outcomes[name]
            assert raised is not None, f"{name}() from the agent/status('disposed') listener did not raise"
            assert _clear(raised), f"{name}() on a disposed agent raised an unclear error: {raised!r}"
        await k.idle(a)
        await k.settle()
        late = [
            e for e in k.events(a, "user/message", "steering/message", "context/message")
            if "late" in texts(e["data"]["content"])
        ]
        assert late == [], f"input refused by a disposed agent was logged: {late}"
        assert len(k.model.requests) == requests, "input refused by a disposed agent ran the model"

    run(scenario)


def _slow_flush(k: Kit, log: list[str], gate: Gate | None = None, needs: str | None = None) -> None:
    """A session/flush listener taking a virtual second (or until ``gate`` opens); ``log``
    gets start, then end (or cancelled)."""

    async def flush(*_args: object) -> None:
        log.append("start")
        k.poke()  # wake k.until() waiting for the flush to begin
        try:
            await (gate.wait() if gate is not None else asyncio.sleep(1.0))
        except asyncio.CancelledError:
            log.append("cancelled")
            raise
        log.append("end")

    k.on("session/flush", flush, needs=needs)


@pytest.mark.rule("IDLE-4")
@pytest.mark.parametrize("where", ["in-the-flush", "mid-turn"])
def test_when_idle_from_the_disposed_status_listener_waits_for_driver_exit(run: Run, schedule: str, where: str) -> None:
    # when_idle() called by a synchronous agent/status listener seeing status disposed: the
    # agent is disposed, so the waiter resolves only once the driver loop has exited, seen
    # through the driver's flush (disposed while the driver is inside the turn's awaited
    # flush, or mid-turn with a slow flush) and the driver task (when the adapter exposes it).
    async def scenario(k: Kit) -> None:
        k.check_invariants = where == "in-the-flush"  # the disposed turn's balance is DISP-1's
        flush: list[str] = []
        gate = k.gate() if where == "in-the-flush" else None
        needs = "the test disposes while the driver is inside the flush" if gate is not None else None
        _slow_flush(k, flush, gate=gate, needs=needs)
        waiters: list[Any] = []
        agents: list[Any] = []

        def on_status(_agent: object, status: str) -> None:
            if status == "disposed" and not waiters:
                waiters.append(agents[0].when_idle())

        k.on("agent/status", on_status, needs="the test calls when_idle() from the disposed status listener")
        a = k.agent()
        agents.append(a)
        if gate is None:
            k.model.push(respond.hang())
        a.send("A")
        if gate is None:
            await k.until(lambda: bool(k.model.requests), "A's model call")
        else:
            await k.until(lambda: flush == ["start"], "the turn's flush")
        task = k.service.driver_task(a)
        a.dispose()
        assert len(waiters) == 1, "the disposed status listener did not call when_idle()"

        async def released() -> tuple[list[str], bool | None]:
            await waiters[0]
            return driver_exit_at_release(flush, task)

        watcher = asyncio.ensure_future(released())
        await k.settle()  # a waiter released too early resolves now, with the driver still busy
        if gate is not None:
            gate.open()
        try:
            seen = await asyncio.wait_for(asyncio.shield(watcher), k.timeout)
        except TimeoutError:
            raise AssertionError(f"when_idle() from the disposed status listener never resolved{k.why()}") from None
        assert_driver_exited(seen, FLUSH_DONE[1:] if gate is not None else FLUSH_DONE)

    run(scenario)


@pytest.mark.rule("DISP-2")
@pytest.mark.parametrize("where", ["agent/turn-end", "session/flush"])
def test_disposal_ends_the_driver_with_work_queued(run: Run, where: str) -> None:
    # A listener queues B and then disposes, as the turn closes: disposal ends the driver, so no
    # turn starts after it (B is dropped with the agent), and no model call is made for B.
    async def scenario(k: Kit) -> None:
        a = k.agent()
        fired: list[bool] = []

        def queue_then_dispose() -> None:
            if not fired:
                fired.append(True)
                a.send("B")
                a.dispose()

        if where == "agent/turn-end":
            k.on("agent/turn-end", lambda *_args: queue_then_dispose())
        else:
            async def flush(*_args: object) -> None:
                queue_then_dispose()

            k.on("session/flush", flush, needs="a dispose() from inside the turn's flush")
        a.send("A")
        await k.idle(a)
        await k.settle()
        assert fired, f"{where} was never called"
        assert a.status == "disposed"
        assert len(k.events(a, "turn/start")) == 1, "a turn started after dispose() (disposal ends the driver)"
        assert len(k.model.requests) == 1, "the model was called after dispose()"

    run(scenario)


@pytest.mark.rule("DISP-2", "IDLE-4")
@pytest.mark.parametrize("where", ["parked", "idle listener"])
def test_disposing_an_idle_agent_ends_its_parked_driver(run: Run, where: str) -> None:
    # An idle agent's driver is parked, waiting for work: dispose() must end it too, so a
    # when_idle() after the disposal (which waits for the driver to have exited) resolves.
    # Also a dispose() from the agent/status('idle') listener, as the driver is about to park.
    async def scenario(k: Kit) -> None:
        a = k.agent()
        if where == "idle listener":
            k.on("agent/status", once_on("idle", a.dispose), needs="the test disposes from the idle status listener")
        a.send("A")
        await k.idle(a)
        await k.settle()
        if where == "parked":
            a.dispose()
        await k.idle(a)
        assert a.status == "disposed"
        task = k.service.driver_task(a)
        assert task is None or task.done(), "disposal ends the driver"

    run(scenario)


@pytest.mark.rule("DISP-1", "SVC-7")
@pytest.mark.parametrize("how", ["dispose", "close"])
def test_disposed_while_the_system_prompt_is_assembled_no_model_call_is_left_waiting(run: Run, how: str) -> None:
    # The step is open (step/start logged) while its system-prompt waterfall runs; a dispose()
    # (or the service's close()) there ends the turn disposed. The model, once called, would wait
    # on the network until its step is aborted: a loop that makes the step's abort signal only
    # after the waterfall aborts nothing, and its turn never ends.
    async def scenario(k: Kit) -> None:
        a = k.agent()
        k.model.push(respond.hang())
        closing: list[Any] = []

        async def assemble(*args: Any) -> Any:
            if not closing:
                if how == "close":
                    closing.append(asyncio.ensure_future(k.service.close()))
                else:
                    closing.append(None)
                    a.dispose()
            return await args[-1]()

        k.on("system-prompt", assemble, needs="the agent is disposed while its system prompt is assembled")
        a.send("hi")
        await k.idle(a)
        if closing and closing[0] is not None:
            await asyncio.wait_for(closing[0], k.timeout)
        assert a.status == "disposed"
        assert k.reasons(a) == [DISPOSED], f"the turn must end disposed: {k.types(a)}"

    run(scenario)


HELD_WATERFALLS = ["system-prompt", "agent/request", "agent/step-result", "tools/execute", "agent/turn-continuation"]
"""The waterfalls awaited inside a turn, where a plugin's listener may wait on what never comes."""


async def _stall_once(k: Kit, held: list[bool]) -> None:
    """A plugin's first call waits on what never comes (a network call without a timeout, deaf to
    the step's signal), marked in ``held``; later calls go on."""
    if not held:
        held.append(True)
        k.poke()
        await asyncio.get_running_loop().create_future()  # never set


@pytest.mark.rule("DISP-2", "DISP-1", "IDLE-4")
@pytest.mark.parametrize("waterfall", HELD_WATERFALLS)
def test_dispose_while_a_waterfall_listener_never_returns_still_ends_the_driver(run: Run, waterfall: str) -> None:
    # A plugin's waterfall listener awaits what never comes (a network call without a timeout)
    # and does not watch the step's abort signal. dispose() "ends the driver" (DISP-2): a loop
    # that trusts the step's signal to stop the step, and so waits on the plugin, never ends it.
    # The turn ends disposed, balanced (DISP-1), and when_idle() on the disposed agent resolves
    # once its driver exited (IDLE-4).
    async def scenario(k: Kit) -> None:
        a = k.agent()
        if waterfall == "tools/execute":
            k.tool("look", result="found")
            k.model.push(fakes.tool_calls(("c1", "look", "{}")))
        held: list[bool] = []

        async def plugin(*args: Any) -> Any:
            await _stall_once(k, held)
            return await passthrough(*args)

        k.on(waterfall, plugin, needs=f"the agent is disposed while a {waterfall} listener waits")
        a.send("A")
        await k.until(lambda: bool(held), f"the {waterfall} listener")
        a.dispose()
        await k.idle(a, what=f"dispose() must end the driver though a {waterfall} listener never returns (DISP-2)")
        assert a.status == "disposed"
        task = k.service.driver_task(a)
        assert task is None or task.done(), "disposal ends the driver (DISP-2)"
        assert k.reasons(a) == [DISPOSED], f"the turn must end disposed: {k.types(a)} (DISP-1)"

    run(scenario)


@pytest.mark.rule("DISP-2", "IDLE-4", "LOOP-4")
def test_dispose_while_a_flush_listener_never_returns_still_ends_the_driver(run: Run) -> None:
    # The same for the turn's awaited session/flush (LOOP-4): a persistence plugin's listener
    # waits on a write that never completes. dispose() "ends the driver" (DISP-2) all the same,
    # and when_idle() on the disposed agent resolves once it exited (IDLE-4). The turn closed
    # before its flush: it keeps its one turn/end, and nothing is appended after it. Session
    # 50's review: the reference cut a never-returning waterfall listener, but not a flush one.
    # Python implementations: ending the driver there means cancelling the listener's task (one
    # over the wire could only abandon it, which IDLE-4's tests take for a driver still flushing).
    async def scenario(k: Kit) -> None:
        in_process_only(k, "a flush listener in this process, which only a Python loop can cancel")
        a = k.agent()
        k.model.push(respond.text("the reply"))
        held: list[bool] = []

        async def persist(*_args: Any) -> None:
            await _stall_once(k, held)

        k.on("session/flush", persist, needs="the agent is disposed while a session/flush listener waits")
        a.send("A")
        await k.until(lambda: bool(held), "the session/flush listener")
        a.dispose()
        await k.idle(a, what="dispose() must end the driver though a session/flush listener never returns (DISP-2)")
        assert a.status == "disposed"
        task = k.service.driver_task(a)
        assert task is None or task.done(), "disposal ends the driver (DISP-2)"
        types = k.types(a)
        assert types.count("turn/end") == 1 and types[-1] == "turn/end", \
            f"the turn closed before its flush keeps its one turn/end, nothing after it: {types}"

    run(scenario)


@pytest.mark.rule("IDLE-4")
def test_a_waiter_taken_in_the_turns_flush_waits_for_the_driver_exit_after_dispose(run: Run) -> None:
    # The same as the status listener's waiter above, for one taken before the disposal: the
    # turn is over and its flush runs when the caller takes a waiter and disposes the agent. "A
    # waiter registered while running and released by disposal also waits for that exit"
    # (IDLE-4). A loop releasing its waiters inside dispose() once the turn was over released
    # this one at once, its driver still in the flush (session 57's blind round G: the suite and
    # the hunt passed it).
    async def scenario(k: Kit) -> None:
        flush: list[str] = []
        gate = k.gate()
        _slow_flush(k, flush, gate=gate, needs="the test disposes while the driver is inside the flush")
        a = k.agent()
        a.send("A")
        await k.until(lambda: flush == ["start"], "the turn's flush")
        waiter = a.when_idle()
        task = k.service.driver_task(a)
        a.dispose()
        done = getattr(waiter, "done", None)  # a future tells at once; a coroutine only once awaited
        if callable(done) and done() and task is not None:
            assert task.done(), (
                "when_idle(), taken during the turn's flush, was released by dispose() itself, its driver task "
                "still running (IDLE-4: a waiter released by disposal waits for the driver's exit)")

        async def released() -> tuple[list[str], bool | None]:
            await waiter
            return driver_exit_at_release(flush, task)

        watcher = asyncio.ensure_future(released())
        await k.settle()  # a waiter released too early resolves now, with the driver still busy
        gate.open()
        try:
            seen = await asyncio.wait_for(asyncio.shield(watcher), k.timeout)
        except TimeoutError:
            raise AssertionError(f"when_idle() taken in the flush never resolved after dispose(){k.why()}") from None
        assert_driver_exited(seen, FLUSH_DONE[1:])

    run(scenario)
