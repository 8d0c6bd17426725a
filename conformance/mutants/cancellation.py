"""Mutants of spec section 8 (cancellation): the windows, the marker, what cancel() clears."""

from __future__ import annotations

from ._build import Mutant, Patch

_W2_SETTLE = """\
                    if not self._inbox.has_queued:
                        self._set_status("idle")  # a real transition: releases waiters
                        continue
"""

_W1 = """\
                if self._marker is not None:
                    self._marker = None
                    if not self._inbox.has_queued:
                        self._release_waiters()  # quiescent: not running, nothing queued
                        continue
"""

_TURN_LOOP_RESET = """\
                    await self._run_turn()
                    # MARKER-1: reset once per iteration, after the turn returns: a cancel governs
                    # exactly one turn, so a prompt sent while the cancelled turn was flushing runs.
                    self._marker = None
"""

_IDLE_FLIP = """\
                    break  # DISP-5: running -> disposed, no idle in between
                self._set_status("idle")
"""

_PENDING = """\
        if not pending:
            return  # CANCEL-3: nothing to cancel: the next prompt runs
"""

MUTANTS = [
    Mutant(
        "w2-settle-unconditionally",
        "window 2 (seed's pre-fix bug): after a cancel from a running listener the driver settles "
        "idle unconditionally, releasing when_idle() while the listener's replacement is queued",
        ("CANCEL-W2", "IDLE-2"),
        "8",
        (Patch("agent", _W2_SETTLE, '                    self._set_status("idle")\n                    continue\n'),),
        interleaving=True,
    ),
    Mutant(
        "w1-release-with-replacement",
        "window 1 releases when_idle() waiters as soon as it drops the cancelled turn, even when a "
        "replacement prompt was queued after the cancel",
        ("CANCEL-W1", "IDLE-2"),
        "8",
        (
            Patch(
                "agent",
                _W1,
                _W1.replace(
                    "                    if not self._inbox.has_queued:\n"
                    "                        self._release_waiters()  # quiescent: not running, nothing queued\n",
                    "                    self._release_waiters()  # the dropped turn settles its waiters\n"
                    "                    if not self._inbox.has_queued:\n",
                ),
            ),
        ),
        interleaving=True,
    ),
    Mutant(
        "w1-drops-replacement",
        "window 1 drops everything queued when it drops the cancelled turn, so a prompt sent after "
        "the cancel (send(A); cancel(); send(B)) never runs",
        ("CANCEL-W1",),
        "8",
        (
            Patch(
                "agent",
                _W1,
                _W1.replace(
                    "                    self._marker = None\n",
                    "                    self._marker = None\n"
                    "                    self._inbox.drain_queued()  # the cancelled turn's prompts\n",
                ),
            ),
        ),
        interleaving=True,
    ),
    Mutant(
        "marker-kept-in-window2",
        "the marker is not reset when window 2 drops the turn, so the replacement queued by the "
        "running listener inherits the cancel and ends aborted",
        ("MARKER-1", "CANCEL-W2"),
        "8",
        (
            Patch(
                "agent",
                "                    self._marker = None  # MARKER-1\n",
                "",
            ),
        ),
        interleaving=True,
    ),
    Mutant(
        "cancel-idle-arms-marker",
        "cancel() on an idle agent with nothing pending arms the marker anyway, and window 1 "
        "reads an armed marker as 'drop the turn about to start': the next prompt is dropped",
        ("CANCEL-3", "MARKER-1"),
        "8",
        (
            Patch("agent", _PENDING, ""),
            Patch(
                "agent",
                _W1,
                _W1.replace(
                    "                    self._marker = None\n",
                    "                    self._marker = None\n"
                    "                    self._inbox.drain_queued()  # the cancelled turn's prompts\n",
                ),
            ),
        ),
    ),
    Mutant(
        "cancel-ignores-queued",
        "cancel() counts only running work as pending, so send(A); cancel() on an idle agent is a "
        "no-op and the queued prompt still runs",
        ("CANCEL-2", "CANCEL-3", "CANCEL-W1"),
        "8",
        (
            Patch(
                "agent",
                "            or self._inbox.has_queued\n            or self._inbox.has_steering\n",
                "",
            ),
        ),
    ),
    Mutant(
        "marker-reset-on-idle-only",
        "the marker is reset only on the idle transition, not after each turn, so a prompt sent "
        "while the cancelled turn flushes runs into the still-armed marker and is dropped",
        ("MARKER-1",),
        "8",
        (
            Patch("agent", _TURN_LOOP_RESET, "                    await self._run_turn()\n"),
            Patch(
                "agent",
                _IDLE_FLIP,
                _IDLE_FLIP.replace(
                    '                self._set_status("idle")\n',
                    "                self._marker = None  # MARKER-1: a cancel lasts until idle\n"
                    '                self._set_status("idle")\n',
                ),
            ),
        ),
        interleaving=True,
    ),
    Mutant(
        "steering-requeued-after-cancel",
        "cancel() clears only the queued FIFO; steering waiting at the cancel survives and is "
        "re-queued as a new turn after the cancelled one",
        ("CANCEL-1", "CANCEL-4"),
        "8",
        (
            Patch(
                "agent",
                "        self._inbox.clear()  # CANCEL-2 / CANCEL-4\n",
                "        self._inbox.drain_queued()  # CANCEL-2\n",
            ),
        ),
    ),
    Mutant(
        "cancel-gate-ignored",
        "the continuation gate does not check the marker: a cancel during the continuation "
        "waterfall lets a further (empty) step open before the next step's gate drops it",
        ("CANCEL-CONT",),
        "8",
        (
            Patch(
                "agent",
                """\
            # CANCEL-CONT: a cancel during the continuation waterfall wins over "continue".
            if self._marker is not None:
                turn.aborted = self._marker
                return
""",
                "",
            ),
        ),
    ),
    Mutant(
        "abort-deferred-to-next-step",
        "abort() while a turn runs but no step is in flight (turn-start, between steps, continuation) "
        "is latched and fires the turn's next step instead of doing nothing",
        ("ABORT-1",),
        "8",
        (
            Patch(
                "agent",
                "        self._turn: _Turn | None = None\n",
                "        self._turn: _Turn | None = None\n"
                "        self._pending_abort: str | None = None  # an abort that came between steps\n",
            ),
            Patch(
                "agent",
                "        self._turn = turn\n",
                "        self._turn = turn\n        self._pending_abort = None  # turn-scoped\n",
            ),
            Patch(
                "agent",
                "        self._step_abort = controller  # from here on abort()/cancel() abort this step\n",
                "        self._step_abort = controller  # from here on abort()/cancel() abort this step\n"
                "        if self._pending_abort is not None:  # don't lose an abort that came between steps\n"
                "            pending, self._pending_abort = self._pending_abort, None\n"
                "            _fire(controller, pending, self)\n",
            ),
            Patch(
                "agent",
                "        if self._disposed or controller is None:\n            return\n"
                "        _fire(controller, reason, self)\n",
                "        if self._disposed:\n            return\n"
                "        if controller is None:\n"
                "            if self._turn is not None:\n"
                "                self._pending_abort = reason  # between steps: abort the next one\n"
                "            return\n"
                "        _fire(controller, reason, self)\n",
            ),
        ),
        interleaving=True,
    ),
    Mutant(
        "cancel-mid-default-reason",
        "cancel() aborts the in-flight step through self.abort() without passing its reason, so a "
        "turn cancelled mid-stream or mid-tool ends aborted{aborted}, not aborted{caller's reason}",
        ("CANCEL-1", "CANCEL-MID"),
        "8",
        (
            Patch(
                "agent",
                "            _fire(controller, reason, self)  # CANCEL-MID\n",
                "            self.abort()  # CANCEL-MID: abort the in-flight step\n",
            ),
        ),
    ),
    Mutant(
        "park-ignores-marker",
        "the driver's idle wait wakes only for queued work or disposal, not for an armed marker: "
        "work queued and cancelled before the driver parks leaves its when_idle() waiters hanging",
        ("CANCEL-W0", "IDLE-2"),
        "8",
        (
            Patch(
                "agent",
                "                    lambda: self._disposed or self._marker is not None\n",
                "                    lambda: self._disposed\n",
            ),
        ),
        interleaving=True,
    ),
    Mutant(
        "abort-handle-after-request",
        "the step's AbortController is published (self._step_abort) only after the agent/request "
        "waterfall returned: an abort() or cancel() while that waterfall runs does not fire the step's "
        "signal, so the model is called (and a cancelled turn runs a full step)",
        ("CANCEL-1", "ABORT-1", "CANCEL-MID"), "8",
        (Patch("agent",
               "        self._step_abort = controller  # from here on abort()/cancel() abort this step\n",
               ""),
         Patch("agent",
               "            request = await self._step_waterfall(\"agent/request\", turn, step, request, signal)\n",
               "            request = await self._step_waterfall(\"agent/request\", turn, step, request, signal)\n"
               "            self._step_abort = controller  # the request is ready: from here on the step can be aborted\n"),),
        interleaving=True,
    ),
    Mutant(
        "w2-strands-steering",
        "when window 2 drops the turn (a running listener cancelled), steering the listener added after "
        "its cancel is left in the steering FIFO instead of being re-queued: the agent goes idle with it "
        "stranded (it only surfaces inside whatever turn runs next)",
        ("LOOP-8",), "8",
        (Patch("agent",
               "                    # LOOP-8: steering the listener added after its cancel is never stranded.\n"
               "                    for late in self._inbox.drain_steering():\n"
               "                        self._inbox.enqueue(late)\n",
               ""),),
        interleaving=True,
    ),
    Mutant(
        "cancelled-turn-drops-late-steering",
        "after a cancelled turn the driver discards the steering left in the FIFO instead of re-queueing "
        "it; cancel() had already dropped the steering waiting at the cancel, so what is discarded is "
        "steering given after the cancel while the turn was closing",
        ("CANCEL-4", "LOOP-8"), "8",
        (Patch("agent",
               "                    self._marker = None\n"
               "                    # LOOP-8: steering that arrived too late for the turn becomes the next prompt.\n"
               "                    for late in self._inbox.drain_steering():\n"
               "                        self._inbox.enqueue(late)\n",
               "                    cancelled = self._marker is not None\n"
               "                    self._marker = None\n"
               "                    # LOOP-8: steering that arrived too late for the turn becomes the next prompt.\n"
               "                    for late in self._inbox.drain_steering():\n"
               "                        if not cancelled:  # CANCEL-4: a cancelled turn's steering is dropped\n"
               "                            self._inbox.enqueue(late)\n"),),
        interleaving=True,
    ),
    Mutant(
        "marker-reset-before-flush",
        "the marker is reset when the turn closes, before its flush, instead of after the turn "
        "returns: a cancel during the flush arms it again and drops the prompt sent after it",
        ("MARKER-1",),
        "8",
        (
            Patch(
                "agent",
                "            self._close_turn(turn)\n"
                "            await self._flush(turn)  # LOOP-4: the awaited session/flush comes last\n",
                "            self._close_turn(turn)\n"
                "            self._marker = None  # the turn is over: its cancel is spent\n"
                "            await self._flush(turn)  # LOOP-4: the awaited session/flush comes last\n",
            ),
            Patch("agent", _TURN_LOOP_RESET, "                    await self._run_turn()\n"),
        ),
        interleaving=True,
        notes="Blind check of 2026-12-03: the hunt found it; the suite passed it until "
              "test_cancel_during_a_flush_spares_the_prompt_sent_after_it.",
    ),
    Mutant(
        "abort-shared-across-agents",
        "abort() fires the step controller the service's agents last started, not the agent's own "
        "in-flight step",
        ("ABORT-1",),
        "8",
        (
            Patch(
                "agent",
                "        self._step_abort = controller  # from here on abort()/cancel() abort this step\n",
                "        self._step_abort = controller  # from here on abort()/cancel() abort this step\n"
                "        type(self)._last_step = controller\n",
            ),
            Patch(
                "agent",
                "        controller = self._step_abort\n"
                "        if self._disposed or controller is None:\n"
                "            return\n"
                "        _fire(controller, reason, self)",
                "        controller = self._step_abort and getattr(type(self), \"_last_step\", None)\n"
                "        if self._disposed or controller is None:\n"
                "            return\n"
                "        _fire(controller, reason, self)",
            ),
        ),
        notes="Blind check of 2026-12-03 (fourth round): the hunt found it (two-agents); the suite "
              "passed it until test_abort_aborts_its_own_agents_step.",
    ),
    Mutant(
        "queued-before-enqueue",
        "send() emits agent/queued before the prompt is in the queue: a cancel() from that listener "
        "finds nothing to cancel and a when_idle() resolves at once",
        ("CANCEL-2", "LOOP-9", "IDLE-2"),
        "8",
        (
            Patch(
                "agent",
                "        self._inbox.enqueue(item)\n"
                "        self._ensure_driver()\n"
                "        self._emit_queued(item, steering=False)\n",
                "        self._emit_queued(item, steering=False)\n"
                "        self._inbox.enqueue(item)\n"
                "        self._ensure_driver()\n",
            ),
        ),
        notes="Blind check of 2026-12-03 (fourth round): the hunt found it; the suite passed it until "
              "test_a_prompt_is_queued_when_agent_queued_announces_it.",
    ),
    Mutant(
        "abort-default-cancelled",
        "abort() with no reason ends the turn aborted{cancelled} (cancel()'s default), not aborted{aborted}",
        ("ABORT-1",),
        "8",
        (
            Patch(
                "agent",
                '        reason = _reason(reason, "aborted", "abort")\n',
                '        reason = _reason(reason, "cancelled", "abort")\n',
            ),
        ),
        notes="Blind check of 2026-12-03 (fourth round): the suite killed it; the hunt missed it until "
              "its actor windows cancelled and aborted with no reason (the defaults), its listener "
              "windows with one of their own.",
    ),
    Mutant(
        "cancel-cont-only-when-continuing",
        "a cancel during the continuation waterfall is honoured only when the waterfall voted to "
        "continue: a turn cancelled at a stop vote ends completed",
        ("CANCEL-CONT", "CANCEL-1"),
        "8",
        (
            Patch(
                "agent",
                '            # CANCEL-CONT: a cancel during the continuation waterfall wins over "continue".\n'
                "            if self._marker is not None:",
                '            # CANCEL-CONT: a cancel during the continuation waterfall wins over "continue".\n'
                "            if decision and self._marker is not None:",
            ),
        ),
        interleaving=True,
        notes="Blind check of 2026-12-03 (tenth round): both passed it until "
              "test_cancel_at_continuation_gate[stop] and CANCEL-1's clause that a turn cancelled "
              "while open ends aborted (the hunt had found it only with a steer after the cancel).",
    ),
    Mutant(
        "park-check-yields",
        "the driver's park loop yields between its check and registering its wake-up: a prompt sent "
        "in between is never noticed and the agent stays idle with work queued",
        ("LOOP-1", "IDLE-2"),
        "3",
        (
            Patch(
                "inbox",
                "        while not (self._queued or also()):\n"
                "            waker = asyncio.get_running_loop().create_future()",
                "        while not (self._queued or also()):\n"
                "            await asyncio.sleep(0)\n"
                "            waker = asyncio.get_running_loop().create_future()",
            ),
        ),
        interleaving=True,
        notes="Blind check of 2026-12-03 (tenth round): a lost wake-up; the suite and the hunt "
              "killed it at once.",
    ),
    Mutant(
        'marker-truthiness',
        "windows 1 and 2 test the cancel marker for truthiness, so a cancel('') there is not settled: the dropped turn flips running/idle, and a replacement inherits the marker",
        ('CANCEL-W1', 'CANCEL-W2', 'MARKER-1'),
        '8',
        (
            Patch('agent',
                  '                if self._marker is not None:\n                    self._marker = None\n                    if not self._inbox.has_queued:',
                  '                if self._marker:\n                    self._marker = None\n                    if not self._inbox.has_queued:'),
            Patch('agent',
                  '                if self._marker is not None:\n                    self._marker = None  # MARKER-1',
                  '                if self._marker:\n                    self._marker = None  # MARKER-1'),
        ),
        interleaving=True,
        notes="Round 12: the suite passed it until the window tests gave an empty reason too; the hunt found it once a listener's cancel gave an empty reason.",
    ),
    Mutant(
        'prompt-assembly-cancel-missed',
        "the marker check after the system prompt's assembly is dropped: a cancel() while an async system-prompt listener runs no longer stops the step; the model is called and its tools run",
        ('CANCEL-1', 'CANCEL-STEP'),
        '8',
        (
            Patch('agent',
                  '            # CANCEL-STEP: a cancel while the system prompt was assembled (no handle existed yet).\n            if self._marker is not None:\n                return _StepOutcome(aborted=self._marker)\n',
                  ''),
        ),
        interleaving=True,
        notes='Round 14 (session 32, 2026-12-03, written blind by a helper): the suite passed it until test_cancel_while_a_step_waterfall_runs[system-prompt]; the hunt found it once system-prompt became a waterfall point (before system-prompt next(): cancel).',
    ),
    Mutant(
        'signalled-raise-is-error',
        "a subtask (a model read, a tool) that raised an error of its own once the step's signal fired counts as a failure: an adapter closing its connection at the abort ends the turn error, not aborted",
        ('ABORT-1', 'CANCEL-MID', 'FINISH-1'),
        '8',
        (
            Patch('agent',
                  '            if signal.aborted:\n                return False  # e.g. the adapter raised AbortError once the signal fired\n',
                  ''),
        ),
        interleaving=True,
        notes="Round 33 (session 40, written blind in the reference as abort-raise-is-error): the suite passed it until "
              "the `fail` case of test_a_stream_stopped_by_the_abort_ends_the_turn_aborted_whatever_the_adapter_does "
              "(an adapter raising StreamClosed, on_abort('fail')); the hunt found it in the steer workload (SIGNALLED).",
    ),
    Mutant(
        'cancelled-turn-skips-empty-step',
        "the cancel marker is checked at the top of the step loop, before step/start: a cancel from agent/turn-start ends the turn aborted with no step, where CANCEL-STEP opens and closes the dropped step empty",
        ('CANCEL-STEP',),
        '8',
        (
            Patch('agent',
                  '            if self._disposed:\n                return  # DISP-1: the turn closes as disposed\n            turn.step += 1\n',
                  '            if self._disposed:\n                return  # DISP-1: the turn closes as disposed\n            if self._marker is not None:\n                turn.aborted = self._marker\n                return\n            turn.step += 1\n'),
        ),
        notes="Round 36 (session 40, written blind in altloop as cancel-step-unopened): the suite killed it "
              "(CANCEL-STEP's tests); the hunt missed it until the CANCEL-STEP oracle (a cancel from "
              "agent/turn-start before the first step leaves an empty step).",
    ),
    Mutant(
        'w1-flips-status',
        "work queued and cancelled before the running flip (windows 0 and 1) is dropped through an empty running period: the agent emits running then idle for a turn that never starts",
        ('CANCEL-W1', 'CANCEL-W0'),
        '8',
        (
            Patch('agent',
                  '                    if not self._inbox.has_queued:\n                        self._release_waiters()  # quiescent: not running, nothing queued\n                        continue\n                    # CANCEL-W1: a prompt queued after the cancel runs normally.\n',
                  '                    # CANCEL-W1: with nothing queued the running period is empty and settles the waiters.\n'),
        ),
        notes="Round 48 (session 43, written blind in the reference): the suite killed it (CANCEL-W1's tests); "
              "the hunt missed it until the CANCEL-W1 oracle (session 44: a cancel on an idle agent, then "
              "`running` with no work given since).",
    ),
    Mutant(
        'early-step-end-notified-first',
        "a step closed early (dropped by a cancel before it, or aborted mid-stream) is notified ended before its step/end is appended",
        ('LOOP-5', 'CANCEL-STEP', 'CANCEL-MID'),
        '8',
        (
            Patch('agent',
                  '                turn.aborted = self._marker\n                self._end_step(turn)\n                return\n',
                  '                turn.aborted = self._marker\n                self._bus.emit("agent/step-end", self, turn.number, turn.step)\n                self._append_step_event(turn, "step/end")\n                return\n'),
            Patch('agent',
                  '                turn.aborted = outcome.aborted\n                self._end_step(turn)\n                return\n',
                  '                turn.aborted = outcome.aborted\n                self._bus.emit("agent/step-end", self, turn.number, turn.step)\n                self._append_step_event(turn, "step/end")\n                return\n'),
        ),
        notes="Round 50 (session 44, written blind in examples/spec_loop as step-end-notified-before-log-on-close): "
              "the suite passed it until test_a_step_ended_early_is_logged_closed_before_it_is_notified; the hunt "
              "found it at once (SHAPE).",
    ),
    Mutant(
        "abort-after-message-unseen-without-tools",
        "the step reads its abort signal after the tools only when it had tool calls: a cancel from a listener of "
        "a text-only step's assistant/message is seen at the continuation gate, after the step's drain has logged "
        "steering given after the cancel into the cancelled turn",
        ("CANCEL-4", "LOOP-8"),
        "8",
        (
            Patch("agent",
                  "            if signal.aborted:  # TOOL-5: an abort during a tool ends the step\n",
                  "            if calls and signal.aborted:  # TOOL-5: an abort during a tool ends the step\n"),
        ),
        notes="Session 48's actor loop (indie60a), written from the spec alone, in the reference's form: the suite "
              "missed it until `test_steering_added_after_a_cancel_as_the_steps_message_is_logged_runs_as_the_next_"
              "prompt`; the hunt found it first (`reply: after session/event(assistant/message)#1: cancel; steer`).",
    ),
    Mutant(
        "failed-drain-restores-cancelled-steering",
        "the step's drain takes the waiting steering at once and, when a listener throws, puts back the messages "
        "it had not logged: a listener that cancelled before throwing has its cancel's clearing undone, and the "
        "dropped steering runs as the next prompt",
        ("CANCEL-4", "ERR-1"),
        "8",
        (
            Patch("agent",
                  '        waiting = self._inbox.steering_count\n'
                  '        clears = self._inbox.clears\n'
                  '        for _ in range(waiting):\n'
                  '            if self._inbox.clears != clears:\n'
                  "                break  # a listener's cancel() cleared the FIFO\n"
                  '            item = self._inbox.take_steering()\n'
                  '            self._session.append(\n'
                  '                "steering/message",\n'
                  '                {"turn": turn.number, "content": item.content, "source": item.source},\n'
                  '            )\n'
                  '            self._bus.emit("agent/steering", self, turn.number, item.content, item.source)\n'
                  '        return bool(waiting)\n',
                  '        taken = self._inbox.drain_steering()\n'
                  '        for k, item in enumerate(taken):\n'
                  '            try:\n'
                  '                self._session.append(\n'
                  '                    "steering/message",\n'
                  '                    {"turn": turn.number, "content": item.content, "source": item.source},\n'
                  '                )\n'
                  '                self._bus.emit("agent/steering", self, turn.number, item.content, item.source)\n'
                  '            except Exception:\n'
                  '                for rest in taken[k + 1:]:\n'
                  '                    self._inbox.steer(rest)  # the ones not yet logged wait again (LOOP-8)\n'
                  '                raise\n'
                  '        return bool(taken)\n'),
        ),
        notes="Session 48's phase-per-task loop (indie60d), written from the spec alone, in the reference's form: the "
              "suite missed it until `test_steering_a_cancel_dropped_stays_dropped_when_the_cancelling_listener_throws`; "
              "the hunt found it (`steer: after session/event(steering/message)#1: cancel; raise`).",
    ),
]
