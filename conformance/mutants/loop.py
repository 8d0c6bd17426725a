"""Mutants of spec sections 3 and 4: the driver loop, turn shape, continuation, steering."""

from __future__ import annotations

from ._build import Mutant, Patch

_STEP_START = """\
            self._append_step_event(turn, "step/start")
            try:
                self._bus.emit("agent/step-start", self, turn.number, step)
"""

_DRAIN_HEAD = (
    "        waiting = self._inbox.steering_count\n"
    "        clears = self._inbox.clears\n"
    "        for _ in range(waiting):\n"
    "            if self._inbox.clears != clears:\n"
    "                break  # a listener's cancel() cleared the FIFO\n"
    "            item = self._inbox.take_steering()\n"
)
"""The head of the reference's steering drain (one message at a time, stopping at a cancel), which
the drain's mutants replace."""

MUTANTS = [
    Mutant(
        "system-prompt-return-ignored",
        "the system-prompt waterfall is awaited but its return value is dropped: the request is built from the "
        "value passed in, so only a plugin's in-place edits reach it, never a prompt it returns",
        ("SVC-5",),
        "4",
        (
            Patch(
                "agent",
                "        assembly = await self._agent_waterfall(\n"
                "            \"system-prompt\",\n"
                "            {\n"
                "                \"system\": join_prompt(*(s[\"text\"] for s in self._service.prompts.sections())),\n"
                "                \"tools\": self._service.tools.schemas(),\n"
                "            },\n"
                "            self,\n"
                "        )\n",
                "        assembly = {\n"
                "            \"system\": join_prompt(*(s[\"text\"] for s in self._service.prompts.sections())),\n"
                "            \"tools\": self._service.tools.schemas(),\n"
                "        }\n"
                "        await self._agent_waterfall(\"system-prompt\", assembly, self)  # plugins edit it in place\n",
            ),
        ),
        notes="Blind round Q (session 62, r02): the suite and the hunt missed it until "
              "`test_a_system_prompt_listener_rewrites_the_prompt_by_returning_it` and the two-step workload's "
              "system-prompt plugin (SYSTEM).",
    ),
    Mutant(
        "turn-per-send",
        "the inbox hands the driver one prompt at a time, so a burst of send()s becomes one turn "
        "per send instead of one batched turn",
        ("LOOP-2",),
        "3",
        (
            Patch(
                "inbox",
                "        drained = list(self._queued)\n        self._queued.clear()\n        return drained\n",
                "        return [self._queued.popleft()] if self._queued else []\n",
            ),
        ),
    ),
    Mutant(
        "late-steering-dropped",
        "steering that arrives too late for its turn is discarded after the turn instead of being "
        "re-queued as the next prompt",
        ("LOOP-8", "STEER-3", "CANCEL-4"),
        "3",
        (
            Patch(
                "agent",
                """\
                    # LOOP-8: steering that arrived too late for the turn becomes the next prompt.
                    for late in self._inbox.drain_steering():
                        self._inbox.enqueue(late)
""",
                "                    self._inbox.drain_steering()  # the turn is over: its steering is stale\n",
            ),
        ),
        interleaving=True,
    ),
    Mutant(
        "idle-between-queued-turns",
        "the driver runs one turn per wake-up and goes idle in between, even when the next prompt "
        "was queued during the turn",
        ("LOOP-8", "IDLE-2"),
        "3",
        (
            Patch(
                "agent",
                "                    if self._disposed or not self._inbox.has_queued:\n                        break\n",
                "                    break  # one turn per wake-up: the idle wait picks up the rest\n",
            ),
        ),
    ),
    Mutant(
        "turn-number-counter",
        "turn numbers come from a per-agent counter instead of the log, so they restart after a "
        "resume and collide with idle injections",
        ("LOOP-3", "SVC-3"),
        "3",
        (
            Patch(
                "agent",
                "        self._turn: _Turn | None = None\n",
                "        self._turn: _Turn | None = None\n        self._turns_run = 0\n",
            ),
            Patch(
                "agent",
                "        turn = _Turn(self._session.last_turn() + 1)  # LOOP-3: numbers continue from the log\n",
                "        self._turns_run += 1\n        turn = _Turn(self._turns_run)\n",
            ),
        ),
    ),
    Mutant(
        "step-start-after-notify",
        "agent/step-start is emitted before step/start is appended, so a step-start listener sees "
        "a log without its step",
        ("LOOP-5",),
        "3",
        (
            Patch(
                "agent",
                _STEP_START,
                """\
            try:
                self._bus.emit("agent/step-start", self, turn.number, step)
                self._append_step_event(turn, "step/start")
""",
            ),
        ),
    ),
    Mutant(
        "cont-ignores-late-steering",
        "steering added by an agent/step-end or continuation listener does not override a stop "
        "decision, so it waits for the next turn",
        ("CONT-2",),
        "4",
        (
            Patch(
                "agent",
                "            if not decision and self._inbox.has_steering:\n                decision = True\n",
                "",
            ),
        ),
    ),
    Mutant(
        "cont-default-ignores-steering",
        "the default continuation decision is 'the step had tool calls' only, so steering drained "
        "after a step never gets a model step",
        ("CONT-1", "STEER-2"),
        "4",
        (
            Patch(
                "agent",
                "            default = outcome.had_tool_calls or steered\n",
                "            default = outcome.had_tool_calls\n",
            ),
        ),
    ),
    Mutant(
        "steer-idle-stranded",
        "steer() always adds to the steering FIFO, so steering an idle agent is stranded instead of "
        "running like send()",
        ("STEER-1",),
        "4",
        (
            Patch(
                "agent",
                '        if self._status != "running":\n            self.send(content, source)\n            return\n',
                "",
            ),
        ),
    ),
    Mutant(
        "flush-not-awaited",
        "the driver starts session/flush as a background task instead of awaiting it, so the agent "
        "goes idle (and when_idle() resolves) before the turn's flush has run",
        ("LOOP-4",),
        "3",
        (
            Patch(
                "agent",
                "            await self._flush(turn)  # LOOP-4: the awaited session/flush comes last\n",
                "            # persistence must not hold up the loop: flush in the background\n"
                "            asyncio.get_running_loop().create_task(\n"
                "                self._flush(turn), name=f\"agent:{self._id}:flush\"\n"
                "            )\n",
            ),
        ),
        interleaving=True,
    ),
    Mutant(
        "abort-path-drains-steering",
        "an aborted step drains the steering FIFO into the aborted turn's log before its step/end "
        "(as a normal step does), so steering given during the step never reaches a model",
        ("STEER-3", "LOOP-8"),
        "4",
        (
            Patch(
                "agent",
                "                turn.aborted = outcome.aborted\n                self._end_step(turn)\n",
                "                turn.aborted = outcome.aborted\n"
                "                self._drain_steering(turn)  # LOOP-5: steering drained, then step/end\n"
                "                self._end_step(turn)\n",
            ),
        ),
        interleaving=True,
    ),
    Mutant(
        "turn-end-after-boundary-failure",
        "notify_end is set before agent/turn-start is emitted, so a turn closed because an "
        "agent/turn-start listener threw still gets an agent/turn-end notification",
        ("LOOP-4",),
        "3",
        (
            Patch(
                "agent",
                "        self._bus.emit(\"agent/turn-start\", self, turn.number)  # a throw: LOOP-4 boundary failure\n"
                "        turn.notify_end = True\n",
                "        turn.notify_end = True  # the turn is open: its end will be announced\n"
                "        self._bus.emit(\"agent/turn-start\", self, turn.number)\n",
            ),
        ),
    ),
    Mutant(
        "steering-cleared-after-log",
        "the step's steering drain snapshots the steering FIFO, logs and notifies each message, and only "
        "then clears the FIFO ('pop once logged'): steering added by an agent/steering or session/event "
        "listener during the drain is cleared without ever being logged",
        ("STEER-2", "LOOP-8"), "4",
        (Patch("agent",
               _DRAIN_HEAD,
               "        drained = list(self._inbox._steering)  # peek: pop only once logged, so a failed append loses nothing\n"
               "        waiting = len(drained)\n"
               "        for item in drained:\n"),
         Patch("agent",
               "            self._bus.emit(\"agent/steering\", self, turn.number, item.content, item.source)\n"
               "        return bool(waiting)\n",
               "            self._bus.emit(\"agent/steering\", self, turn.number, item.content, item.source)\n"
               "        self._inbox.drain_steering()  # now logged: consume it\n"
               "        return bool(waiting)\n"),),
        interleaving=True,
    ),
    Mutant(
        "late-steer-checked-early",
        "after a turn the driver decides whether more work is queued before it re-queues the late "
        "steering: late steering alone sends the agent through idle (releasing when_idle() waiters "
        "while it is queued) before the driver wakes again and runs it",
        ("LOOP-8", "IDLE-2"), "3",
        (Patch("agent",
               "                    # LOOP-8: steering that arrived too late for the turn becomes the next prompt.\n"
               "                    for late in self._inbox.drain_steering():\n"
               "                        self._inbox.enqueue(late)\n"
               "                    if self._disposed or not self._inbox.has_queued:\n",
               "                    more = self._inbox.has_queued\n"
               "                    # LOOP-8: steering that arrived too late for the turn becomes the next prompt.\n"
               "                    for late in self._inbox.drain_steering():\n"
               "                        self._inbox.enqueue(late)\n"
               "                    if self._disposed or not more:\n"),),
        interleaving=True,
    ),
    Mutant(
        "turn-start-before-prompts",
        "agent/turn-start is emitted before the drained prompts are appended as user/messages, so a "
        "turn-start listener sees a turn without its prompts (and one that throws loses them)",
        ("LOOP-4",),
        "3",
        (
            Patch(
                "agent",
                "        try:\n"
                "            for item in drained:  # LOOP-2: one user/message per send, in order\n",
                '        self._bus.emit("agent/turn-start", self, turn.number)  # moved before the prompts\n'
                "        try:\n"
                "            for item in drained:  # LOOP-2: one user/message per send, in order\n",
            ),
            Patch(
                "agent",
                "            raise\n"
                '        self._bus.emit("agent/turn-start", self, turn.number)  # a throw: LOOP-4 boundary failure\n'
                "        turn.notify_end = True\n",
                "            raise\n"
                "        turn.notify_end = True\n",
            ),
        ),
        notes="Found by the blind check of 2026-12-03: the hunt missed it until SHAPE checked the "
              "prompts' place (LOOP-4: turn/start, the drained user/messages, then agent/turn-start).",
    ),
    Mutant(
        "steer-from-log",
        "steer() decides whether the agent runs from the log (an open turn) instead of its status, so "
        "a steer between the running flip and turn/start, or during the flush, becomes a send()",
        ("STEER-1", "LOOP-9"),
        "4",
        (
            Patch(
                "agent",
                '        if self._status != "running":\n'
                "            self.send(content, source)\n"
                "            return\n",
                "        if self._session.open_turn() is None:  # no turn open: nothing to steer\n"
                "            self.send(content, source)\n"
                "            return\n",
            ),
        ),
        notes="Blind check of 2026-12-03: the hunt found it (QUEUED); the suite passed it until "
              "test_steer_from_the_running_listener_is_steering.",
    ),
    Mutant(
        "late-steer-before-flush",
        "late steering is re-queued when the turn closes, before its flush, and not after the turn "
        "returns: steering given during the flush is stranded in the steering FIFO",
        ("LOOP-8",),
        "3",
        (
            Patch(
                "agent",
                "            self._close_turn(turn)\n"
                "            await self._flush(turn)  # LOOP-4: the awaited session/flush comes last\n",
                "            self._close_turn(turn)\n"
                "            for late in self._inbox.drain_steering():  # LOOP-8, once the turn is closed\n"
                "                self._inbox.enqueue(late)\n"
                "            await self._flush(turn)  # LOOP-4: the awaited session/flush comes last\n",
            ),
            Patch(
                "agent",
                "                    # LOOP-8: steering that arrived too late for the turn becomes the next prompt.\n"
                "                    for late in self._inbox.drain_steering():\n"
                "                        self._inbox.enqueue(late)\n"
                "                    if self._disposed or not self._inbox.has_queued:\n",
                "                    if self._disposed or not self._inbox.has_queued:\n",
            ),
        ),
        interleaving=True,
        notes="Blind check of 2026-12-03: the hunt found it (IDLE-2+prompts); the suite passed it until "
              "test_steering_given_while_the_turn_flushes_becomes_the_next_prompt.",
    ),
    Mutant(
        "steering-source-dropped",
        "a drained steering message is logged with the default source {kind: user} instead of its "
        "own (agent/steering still carries it), so derived history wraps a plugin's steering as the user's",
        ("STEER-2", "LOOP-9", "LOG-7"),
        "4",
        (
            Patch(
                "agent",
                '                {"turn": turn.number, "content": item.content, "source": item.source},\n',
                '                {"turn": turn.number, "content": item.content, "source": {"kind": "user"}},\n',
            ),
        ),
        notes="Blind check of 2026-12-03: the suite and the hunt both passed it until "
              "test_steering_keeps_its_source_in_the_log_and_the_next_request and the SOURCES oracle.",
    ),
    Mutant(
        "flush-sequential",
        "session/flush awaits its listeners one after another instead of running them concurrently, "
        "so a listener that waits on another (or a slow one) holds the rest back",
        ("LOOP-4",),
        "3",
        (
            Patch(
                "bus",
                "            if inspect.isawaitable(result):\n"
                "                calls.append(result)\n",
                "            if inspect.isawaitable(result):\n"
                "                try:  # one after another, in registration order\n"
                "                    await _resolve(result)\n"
                "                except Exception as exc:\n"
                "                    first = first or exc\n",
            ),
        ),
        notes="Blind check of 2026-12-03: the suite and the hunt both passed it until "
              "test_flush_listeners_run_concurrently and FLUSH's concurrency clause (plain order only).",
    ),
    Mutant(
        "flush-gather-fail-fast",
        "session/flush gathers its listeners without return_exceptions: the first failure ends the "
        "await while the other listeners still run, so the driver goes idle (or runs the next turn) "
        "before a slow persistence listener has finished",
        ("LOOP-4", "ERR-6"),
        "3",
        (
            Patch(
                "bus",
                "                outcomes = await asyncio.gather(*map(_resolve, calls), return_exceptions=True)\n",
                "                try:\n"
                "                    outcomes = await asyncio.gather(*map(_resolve, calls))\n"
                "                except Exception as exc:\n"
                "                    outcomes = [exc]\n",
            ),
        ),
        notes="Blind round 17 (2026-12-04): the suite killed it; the hunt missed it until FLUSH judged a "
              "flush a window's listener raised in (the other listeners are awaited all the same).",
    ),
    Mutant(
        "continuation-skipped-after-tools",
        "a step that had tool calls continues the turn without running the agent/turn-continuation "
        "waterfall (the model must answer the results anyway), so a plugin cannot stop the turn there",
        ("CONT-1", "LOOP-5"),
        "4",
        (
            Patch(
                "agent",
                "            default = outcome.had_tool_calls or steered\n",
                "            default = outcome.had_tool_calls or steered\n"
                "            if outcome.had_tool_calls:\n"
                "                continue  # the model must answer the tool results: nothing to decide\n",
            ),
        ),
        notes="Blind check of 2026-12-03: the suite kills it (CONT-1, CANCEL-CONT); the hunt does not, "
              "as a window's run does not observe a waterfall's calls, only its listener windows act there.",
    ),
    Mutant(
        "prompts-after-turn-start-batched",
        "prompts queued once the turn opened (by its agent/turn-start listener) are drained into that "
        "turn after agent/turn-start instead of waiting for the next turn",
        ("LOOP-2", "LOOP-4", "INBOX-1"),
        "3",
        (
            Patch(
                "agent",
                '        self._bus.emit("agent/turn-start", self, turn.number)  # a throw: LOOP-4 boundary failure\n'
                "        turn.notify_end = True\n",
                '        self._bus.emit("agent/turn-start", self, turn.number)  # a throw: LOOP-4 boundary failure\n'
                "        turn.notify_end = True\n"
                "        for item in self._inbox.drain_queued():  # late arrivals join the turn that just started\n"
                '            self._session.append("user/message", {"content": item.content, "source": item.source})\n',
            ),
        ),
        notes="Blind check of 2026-12-03 (third round): the suite passed it until "
              "test_prompt_sent_once_the_turn_opened_is_the_next_turns.",
    ),
    Mutant(
        "turn-end-notified-after-flush",
        "agent/turn-end is emitted once the turn's session/flush finished, not between turn/end and the flush",
        ("LOOP-4",),
        "3",
        (
            Patch(
                "agent",
                "        if turn.opened:\n"
                "            self._close_turn(turn)\n"
                "            await self._flush(turn)  # LOOP-4: the awaited session/flush comes last\n",
                "        if turn.opened:\n"
                "            notify, turn.notify_end = turn.notify_end, False\n"
                "            self._close_turn(turn)\n"
                "            await self._flush(turn)\n"
                "            if notify:\n"
                "                try:\n"
                "                    self._bus.emit(\"agent/turn-end\", self, turn.number, self._end_reason(turn))\n"
                "                except Exception as exc:\n"
                "                    self._late_failure(turn, exc, \"an agent/turn-end listener\")\n",
            ),
        ),
        notes="Blind check of 2026-12-03 (fourth round): the suite killed it; the hunt missed it until "
              "FLUSH checked that a turn's flush starts after its agent/turn-end.",
    ),
    Mutant(
        "steering-turn-prev",
        "agent/steering names the previous turn (turn - 1), not the turn the steering is drained into",
        ("LOOP-9",),
        "4",
        (
            Patch(
                "agent",
                '            self._bus.emit("agent/steering", self, turn.number, item.content, item.source)',
                '            self._bus.emit("agent/steering", self, turn.number - 1, item.content, item.source)',
            ),
        ),
        notes="Blind check of 2026-12-03 (fifth round): the suite killed it; the hunt missed it until "
              "QUEUED checked agent/steering's turn against the open one.",
    ),
    Mutant(
        "first-step-skips-steering",
        "a turn's first step does not drain the steering waiting when it opens (from the running flip "
        "or agent/turn-start): it is drained after the step, so it reaches the model one step late",
        ("LOOP-5", "STEER-2"),
        "4",
        (
            Patch(
                "agent",
                "            if self._marker is None:\n"
                "                self._drain_steering(turn)\n",
                "            if self._marker is None and step > 1:\n"
                "                self._drain_steering(turn)\n",
            ),
        ),
        notes="Blind check of 2026-12-03 (seventh round): both passed it until "
              "`test_steering_waiting_when_the_first_step_opens_joins_its_request` and STEP-ORDER's "
              "clause that steering waiting when a step opens is drained before its step/start.",
    ),
    Mutant(
        "prompt-throw-silences-turn-end",
        "a session/event listener throwing on a prompt's user/message is taken for a boundary failure: "
        "the turn it fails is never notified ended (agent/turn-end)",
        ("LOOP-4", "ERR-1"),
        "3",
        (
            Patch(
                "agent",
                "            # LOOP-4: a session/event listener on user/message is no boundary listener: the\n"
                "            # turn it fails (ERR-1) is notified ended\n"
                "            turn.notify_end = True\n",
                "",
            ),
        ),
        notes="The reference's own code until session 45 (2026-12-06), found through blind round 54's "
              "`prompt-append-in-boundary-try` (a variant of examples/spec_loop that the suite passed).",
    ),
    Mutant(
        "step-start-event-throw-silences-turn-end",
        "a session/event listener throwing on step/start is taken for a boundary failure like a throwing "
        "agent/step-start listener: the turn it fails is never notified ended",
        ("LOOP-4", "ERR-1"),
        "3",
        (
            Patch(
                "agent",
                '            self._append_step_event(turn, "step/start")\n'
                "            try:\n"
                '                self._bus.emit("agent/step-start", self, turn.number, step)\n',
                "            try:\n"
                '                self._append_step_event(turn, "step/start")\n'
                '                self._bus.emit("agent/step-start", self, turn.number, step)\n',
            ),
        ),
        notes="The reference's own code until session 45 (2026-12-06): LOOP-4 exempts a session/event "
              "listener on turn/start only; every other loop we have notified the turn's end.",
    ),
    Mutant(
        "steering-drain-outlives-cancel",
        "the steering drain takes as many messages as were waiting when it began, whatever a listener "
        "did meanwhile: after a listener's cancel() and steer(), it logs the late steering into the "
        "cancelled turn",
        ("CANCEL-4", "LOOP-8"),
        "8",
        (
            Patch(
                "agent",
                "            if self._inbox.clears != clears:\n",
                "            if not self._inbox.has_steering:\n",
            ),
        ),
        notes="Written in session 45 (2026-12-06) beside the reference's drain of one message at a time: "
              "the count it drains must stop at a cancel.",
    ),
    Mutant(
        "cancelled-step-drains-late-steering",
        "the step drain runs even when an agent/turn-start listener has cancelled the turn: steering that "
        "listener gives after its cancel is logged into the dropped step and never reaches a model",
        ("CANCEL-4", "LOOP-8"),
        "8",
        (
            Patch(
                "agent",
                "            if self._marker is None:\n"
                "                self._drain_steering(turn)\n",
                "            self._drain_steering(turn)\n",
            ),
        ),
        notes="The reference's own code until session 45 (2026-12-06), left alone in earlier sessions and "
              "seen again by blind round 53's helper: an agent/turn-start listener's cancel() then steer().",
    ),
    Mutant(
        "steering-drained-lifo",
        "steering is drained last-in first-out: two steering messages reach the log and the model in "
        "reverse order",
        ("INBOX-1", "STEER-2"),
        "4",
        (
            Patch(
                "agent",
               _DRAIN_HEAD,
                "        drained = self._inbox.drain_steering()[::-1]\n"
                "        waiting = len(drained)\n"
                "        for item in drained:\n",
            ),
        ),
        notes="Blind check of 2026-12-03 (ninth round): the suite killed it; the hunt missed it until "
              "FIFO compared the order a turn logs its prompts and steering with the order given.",
    ),
    Mutant(
        "steering-taken-whole-before-notify",
        "the steering drain takes every waiting message off the FIFO before it logs and notifies the "
        "first: when an agent/steering listener throws on the first (the turn fails), the others are "
        "neither logged nor waiting any more, and are lost",
        ("LOOP-8", "ERR-1"),
        "4",
        (
            Patch(
                "agent",
               _DRAIN_HEAD,
                "        drained = self._inbox.drain_steering()\n"
                "        waiting = len(drained)\n"
                "        for item in drained:\n",
            ),
        ),
        notes="The reference's own code until session 45 (2026-12-06): blind round 53's helper saw it while "
              "reading the reference. The suite's LOOP-8 test of a throwing agent/steering listener kills it; "
              "the hunt reaches it through the steer workload's second steering message.",
    ),
    Mutant(
        'usage-only-with-message',
        'the usage append sits under the assistant/message condition: a max-tokens step left with only (removed) tool calls logs no usage although the model reported it',
        ('LOOP-5', 'ASM-4'),
        '3',
        (
            Patch('agent',
                  '                self._session.append(\n                    "assistant/message",\n                    {"turn": turn.number, "step": step, "content": message["content"]},\n                )\n            if assembler.usage is not None:\n                self._session.append(\n                    "usage", {"turn": turn.number, "step": step, "usage": assembler.usage}\n                )\n',
                  '                self._session.append(\n                    "assistant/message",\n                    {"turn": turn.number, "step": step, "content": message["content"]},\n                )\n                if assembler.usage is not None:\n                    self._session.append(\n                        "usage", {"turn": turn.number, "step": step, "usage": assembler.usage}\n                    )\n'),
        ),
        notes="Round 12 (2026-12-03, written blind by a helper): the suite passed it until test_max_tokens_step_with_only_tool_calls_still_logs_its_usage; the hunt's CHUNKS judged usage only beside a message until then, and max-tokens-tools now reports usage.",
    ),
    Mutant(
        'continuation-skipped-at-stop',
        'the agent/turn-continuation waterfall runs only when the default is to continue, so a plugin cannot force-continue after a text-only step',
        ('CONT-1', 'LOOP-5'),
        '4',
        (
            Patch('agent',
                  '            decision = await self._agent_waterfall(\n                "agent/turn-continuation", default, self, turn.number\n            )\n',
                  '            decision = False\n            if default:  # at a stop there is nothing to decide: only a continuation can be vetoed\n                decision = await self._agent_waterfall(\n                    "agent/turn-continuation", default, self, turn.number\n                )\n'),
        ),
        notes='Round 12: the suite killed it; the hunt found it once the world recorded every continuation call (CONTINUED).',
    ),
    Mutant(
        'turn-number-per-period',
        "turn numbers are read from the log once per running period and counted on, so an idle inject's one-shot turn written during a flush between back-to-back turns shares its number with the next turn",
        ('LOOP-3',),
        '3',
        (
            Patch('agent',
                  '    async def _run_turn(self) -> None:',
                  '    async def _run_turn(self, number: int | None = None) -> None:'),
            Patch('agent',
                  '        turn = _Turn(self._session.last_turn() + 1)  # LOOP-3: numbers continue from the log\n',
                  '        turn = _Turn(number or self._session.last_turn() + 1)  # LOOP-3: numbers continue from the log\n'),
            Patch('agent',
                  '                while True:\n                    await self._run_turn()\n',
                  '                number = self._session.last_turn()  # LOOP-3: continue from the log\n                while True:\n                    number += 1\n                    await self._run_turn(number)\n'),
        ),
        interleaving=True,
        notes="Round 12: the suite passed it until test_an_idle_inject_between_back_to_back_turns_takes_its_own_number; the hunt found it (two prompts: a listener's send; inject).",
    ),
    Mutant(
        'adapter-from-options',
        "the model adapter is looked up from the agent's configured model, not from the request the agent/request waterfall returned: a plugin's rewrite of the model no longer routes the call",
        ('LOOP-10',),
        '3',
        (
            Patch('agent',
                  '            adapter = self._service.model_adapter(str(model))',
                  '            adapter = self._service.model_adapter(str(self._options.get("model") or model))'),
        ),
        notes="Round 13: the suite killed it; the hunt found it once the two-agents workload had a plugin routing b's calls and the fake model recorded the model a request names (ROUTED).",
    ),
    Mutant(
        'adapter-per-turn',
        "the model adapter is looked up at a turn's first step and kept for the turn: a plugin routing only a later step (the answer after a tool, to a cheaper model) no longer routes it",
        ('LOOP-10',),
        '3',
        (
            Patch('agent',
                  '            adapter = self._service.model_adapter(str(model))',
                  '            adapter = getattr(turn, "adapter", None) or self._service.model_adapter(str(model))\n'
                  '            turn.adapter = adapter  # type: ignore[attr-defined]'),
        ),
        notes="Session 58's blind round H planted it in seedport_loop: the suite and the hunt passed it until test_each_step_is_routed_by_its_own_request and the two-step workload's plugin routing its second step (ROUTED).",
    ),
    Mutant(
        'turn-end-notice-reason-recomputed',
        'agent/turn-end is notified with a reason reckoned again at notification time instead of the logged one: a session/event listener on turn/end that throws or disposes makes it say error or disposed while turn/end says completed',
        ('LOOP-4', 'ERR-4', 'ERR-10'),
        '3',
        (
            Patch('agent',
                  '                self._bus.emit("agent/turn-end", self, turn.number, reason)',
                  '                self._bus.emit("agent/turn-end", self, turn.number, self._end_reason(turn))'),
        ),
        interleaving=True,
        notes="Round 14 (session 32, 2026-12-03, written blind by a helper): the suite passed it until test_agent_turn_end_names_the_reason_turn_end_logged; the hunt found it once NOTIFIED compared agent/turn-end's reason with the logged turn/end.",
    ),
    Mutant(
        'stream-chunk-notified-soon',
        'agent/stream-chunk is emitted with call_soon: a burst of chunks is notified after later chunks were logged',
        ('PY-2', 'LOOP-5'),
        '12',
        (
            Patch('agent',
                  '                self._bus.emit(\n                    "agent/stream-chunk", self, turn.number, step, event["data"]["chunk"]\n                )',
                  '                asyncio.get_running_loop().call_soon(  # UI listeners must not slow the stream\n                    self._bus.emit,\n                    "agent/stream-chunk", self, turn.number, step, event["data"]["chunk"],\n                )'),
        ),
        interleaving=True,
        notes="Round 15 (session 33, written blind by a helper): the suite passed it until test_each_stream_chunk_is_notified_before_the_next_is_logged; the hunt finds it since the out-of-order workload streams its chunks in one burst and the world judges each step's notifications against its logged chunks.",
    ),
    Mutant(
        'failed-turn-drops-steering',
        'a failed turn discards the steering waiting in the inbox: steering given during the failing step is silently dropped',
        ('LOOP-8', 'ERR-1'),
        '3',
        (
            Patch('agent',
                  '                self._fail(turn, exc, turn.step)  # (a listener of its error event may raise PY-1\'s)',
                  '                self._fail(turn, exc, turn.step)\n'
                  '                self._inbox.drain_steering()  # its steering was for the turn that just failed'),
        ),
        interleaving=True,
        notes='Round 15 (written blind): the suite passed it until test_steering_given_during_a_step_that_fails_still_runs.',
    ),
    Mutant(
        'tool-calls-collected-before-step-result',
        'the tool calls are collected from the assembled message before agent/step-result runs: a call a plugin removed is still dispatched',
        ('LOOP-6',),
        '3',
        (
            Patch('agent',
                  '            message = await self._step_waterfall("agent/step-result", turn, step, message, signal)',
                  '            calls = [\n                b\n                for b in message["content"]\n                if isinstance(b, dict) and b.get("type") == "tool-call"\n            ]  # collected up front: the step result only rewrites the text\n            message = await self._step_waterfall("agent/step-result", turn, step, message, signal)'),
            Patch('agent',
                  '            calls = [\n                b\n                for b in message["content"]\n                if isinstance(b, dict) and b.get("type") == "tool-call"\n            ]\n            for call in calls:',
                  '            for call in calls:'),
        ),
        interleaving=False,
        notes='Round 15 (written blind; the third loop round wrote it too): the suite killed it (LOOP-6); the hunt finds it since the step-result-plugin workload, whose plugin keeps only the first of two tool calls, and TOOLS dispatching no call the logged message lacks.',
    ),
    Mutant(
        'drained-steering-overrides-stop',
        "steering drained after the step overrides a forced stop of the continuation waterfall, as CONT-2's steering added by a listener does: a plugin's force-stop is ignored whenever the step drained steering",
        ('CONT-1', 'CONT-2'),
        '4',
        (
            Patch('agent',
                  '            if not decision and self._inbox.has_steering:\n',
                  '            if not decision and (self._inbox.has_steering or steered):\n'),
        ),
        notes="Round 36 (session 40, written blind in altloop): the suite passed it until "
              "test_a_forced_stop_holds_after_steering_was_drained (CONT-1: the waterfall may force-stop).",
    ),
    Mutant(
        'system-after-request-waterfall',
        "the system prompt is attached after the agent/request waterfall: a listener finds none in its request, "
        "and its rewrite or removal is overwritten before the adapter call",
        ('LOOP-10', 'LOOP-5'),
        '3',
        (
            Patch('agent',
                  '        if system:\n            request["system"] = system\n        if assembly.get("tools"):',
                  '        self._service.late_system = system\n        if assembly.get("tools"):'),
            Patch('agent',
                  '            model = request.get("model")\n            if not model:  # LOOP-7',
                  '            late = getattr(self._service, "late_system", None)\n'
                  '            if late:\n'
                  '                request = {**request, "system": late}\n'
                  '            model = request.get("model")\n            if not model:  # LOOP-7'),
        ),
        notes="Round 43 (session 42, written blind in altloop): the suite passed it until "
              "test_a_request_listener_sees_and_rewrites_the_system_prompt (round 42's tools-after-waterfall "
              "twin); out of the hunt's reach (the world's one request plugin rewrites the model name only).",
    ),
    Mutant(
        'flush-sync-throw-escapes',
        "session/flush calls its listeners outside the containment: a plain-function listener's throw escapes "
        "at the call, before the coroutine listeners called ahead of it are awaited",
        ('LOOP-4', 'ERR-6'),
        '3',
        (
            Patch('bus',
                  '            try:\n                result = listener(*args)\n            except Exception as exc:\n'
                  '                first = first or exc\n                continue\n            except BaseException:\n',
                  '            result = listener(*args)\n            if False:\n'),
        ),
        notes="Round 44 (session 42, written blind in examples/spec_loop as flush-sync-raise-escapes): the hunt "
              "missed it until a flush window's throwing sequences also ran by a plain-function listener (PY-2).",
    ),
    Mutant(
        'tools-need-tool-calls-finish',
        "a step's tool calls are collected only when its finish is tool-calls: a step finishing stop (or "
        "without a finish chunk) logs its calls and never runs them, and the turn ends after it",
        ('LOOP-5', 'LOOP-6', 'ASM-4'),
        '3',
        (
            Patch('agent',
                  '                if isinstance(b, dict) and b.get("type") == "tool-call"\n            ]',
                  '                if isinstance(b, dict) and b.get("type") == "tool-call"\n'
                  '                and finish.get("kind") == "tool-calls"\n            ]'),
        ),
        notes="Round 44 (session 42, written blind in examples/spec_loop): the suite killed it; the hunt missed it "
              "until the two-step workload's first stream ended without a finish chunk (ASM-4: a stop) and TOOLS "
              "asked a turn that ended normally to have dispatched every call of its steps' messages.",
    ),
    Mutant(
        "stream-stops-at-finish",
        "the loop stops reading the model's stream at its finish chunk: a usage (or any chunk) a provider sends "
        "after the finish is never logged, and the step's usage is the one before it",
        ("LOOP-5", "ASM-4"),
        "3",
        (
            Patch(
                "agent",
                '                assembler.add(event["data"]["chunk"])\n        finally:',
                '                assembler.add(event["data"]["chunk"])\n'
                '                if chunk.get("type") == "finish":\n'
                "                    break  # the model is done\n"
                "        finally:",
            ),
        ),
        notes="Round 47 (session 43, written blind in examples/js_loop): the suite and the hunt passed it until "
              "test_chunks_after_the_finish_are_logged_and_a_usage_there_is_the_steps and the tool workload's usage "
              "after its finish, which the fake model reports unread when the loop closes the stream early (CHUNKS).",
    ),
    Mutant(
        "step-end-throw-skips-turn-end",
        "a throwing agent/step-end listener is taken for a boundary failure: the turn ends error, but "
        "agent/turn-end is never emitted for it",
        ("LOOP-4",),
        "3",
        (
            Patch(
                "agent",
                "            steered = self._drain_steering(turn)\n"
                "            self._end_step(turn)  # ERR-3: a throw here ends the turn error, no further step\n",
                "            steered = self._drain_steering(turn)\n"
                "            try:\n"
                "                self._end_step(turn)  # ERR-3: a throw here ends the turn error, no further step\n"
                "            except Exception:\n"
                "                turn.notify_end = False  # announced through agent/error already\n"
                "                raise\n",
            ),
        ),
        notes="Round 47 (session 43, written blind in examples/js_loop): the suite passed it until "
              "test_turn_failed_by_another_listener_still_notifies_its_end.",
    ),
    Mutant(
        "failed-tools-stop-turn",
        "a step counts as having tool calls only when one of its calls succeeded: a step whose calls all failed "
        "(a failing tool, an unknown one) stops its turn instead of sending the error results back",
        ("CONT-1", "TOOL-3"),
        "4",
        (
            Patch(
                "agent",
                "            return _StepOutcome(had_tool_calls=bool(calls))  # MAXTOK-5: none for max-tokens\n",
                "            answered = any(e[\"type\"] == \"tool/result\" and e[\"data\"].get(\"turn\") == turn.number\n"
                "                           and e[\"data\"].get(\"step\") == step and not e[\"data\"].get(\"is_error\")\n"
                "                           for e in self._session.events)  # a result the model has to see\n"
                "            return _StepOutcome(had_tool_calls=answered)  # MAXTOK-5: none for max-tokens\n",
            ),
        ),
        notes="Round 48 (session 43, written blind in the reference): the suite killed it; the hunt found it through "
              "CONTINUED once the failing-tool workload's all-failing step was kept apart from its plugin-served call.",
    ),
    Mutant(
        'request-extra-keys-dropped',
        "the request is rebuilt from 0b's keys after the agent/request waterfall: a key a listener added (a provider option) never reaches the adapter",
        ('LOOP-10',),
        '4',
        (
            Patch('agent',
                  '            model = request.get("model")\n            if not model:  # LOOP-7\n',
                  '            request = {k: request[k] for k in ("model", "messages", "system", "tools") if k in request}\n            request["signal"] = signal  # a clean request with the step\'s own signal\n            model = request.get("model")\n            if not model:  # LOOP-7\n'),
        ),
        notes="Round 49 (session 44, written blind in the reference): the suite passed it until "
              "test_adapter_gets_rewritten_request asked for the keys a listener adds; the hunt found it once the "
              "two-agents workload's routing plugin added one (ROUTED).",
    ),
    Mutant(
        'continue-on-finish-kind',
        "the default continuation follows the model's finish kind (tool-calls) rather than the tool calls the step's message had: a tool-call step finished stop, or with no finish, ends the turn with its results unseen",
        ('CONT-1', 'LOOP-6'),
        '4',
        (
            Patch('agent',
                  '            return _StepOutcome(had_tool_calls=bool(calls))  # MAXTOK-5: none for max-tokens\n',
                  '            return _StepOutcome(had_tool_calls=finish.get("kind") == "tool-calls")\n'),
        ),
        notes="Round 51 (session 44, written blind in indie49): the suite passed it until "
              "test_the_default_continuation_follows_the_steps_tool_calls_not_its_finish; the hunt found it (the "
              "two-step workload's tool-call step has no finish chunk).",
    ),
    Mutant(
        "late-steering-requeued-only-after-an-opened-turn",
        "late steering is re-queued as the next prompt only after a turn that opened: steering given while a "
        "failure before turn/start is announced (ERR-8) is stranded, and the agent goes idle with it",
        ("LOOP-8", "IDLE-2"),
        "3",
        (
            Patch("agent",
                  '                    # LOOP-8: steering that arrived too late for the turn becomes the next prompt.\n'
                  '                    for late in self._inbox.drain_steering():\n'
                  '                        self._inbox.enqueue(late)\n'
                  '                    if self._disposed or not self._inbox.has_queued:\n',
                  '                    if self._disposed or not self._inbox.has_queued:\n'),
            Patch("agent",
                  '            await self._flush(turn)  # LOOP-4: the awaited session/flush comes last\n'
                  '        self._turn = None\n',
                  '            await self._flush(turn)  # LOOP-4: the awaited session/flush comes last\n'
                  '            for late in self._inbox.drain_steering():  # LOOP-8: late steering, the next prompt\n'
                  '                self._inbox.enqueue(late)\n'
                  '        self._turn = None\n'),
        ),
        notes="Session 48's seed-faithful loop (indie60f), written from the spec alone, in the reference's form: the "
              "suite missed it until `test_steering_given_as_a_failure_before_turn_start_is_announced_still_runs`; "
              "the hunt found it (`bad-source: after agent/error#1: steer`).",
    ),
]
