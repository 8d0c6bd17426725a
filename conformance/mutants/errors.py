"""Mutants of spec section 7: error containment, first failure wins, error codes."""

from __future__ import annotations

from ._build import Mutant, Patch

MUTANTS = [
    Mutant(
        "throwing-listener-ends-loop",
        "the turn contains only the loop's own LoopError: a plugin's exception escapes to the "
        "driver, which disposes the agent, so the next queued prompt never runs",
        ("ERR-1", "ERR-2"),
        "7",
        (
            Patch(
                "agent",
                "        except Exception as exc:  # ERR-1: a throwing plugin ends the turn, never the loop\n",
                "        except LoopError as exc:  # ERR-1: a failed step ends the turn, never the loop\n",
            ),
        ),
    ),
    Mutant(
        "late-failure-warned-under-newest-turn",
        "a late failure (a throwing agent/turn-end listener, a failing flush) is warned naming the log's newest "
        "turn: once an idle inject's one-shot turn is in the log, turn 1's failing flush is warned as turn 2's",
        ("ERR-12",),
        "7",
        (
            Patch("agent", '        self._warn(turn.number, f"{what} failed", exc)\n',
                  '        self._warn(self._session.last_turn(), f"{what} failed", exc)\n'),
        ),
        notes="Blind round Q (session 62, r08): the suite and the hunt missed it until "
              "`test_a_late_failure_is_warned_under_the_turn_it_belongs_to` and WARNED's late failures, "
              "named by the turn their announcement names.",
    ),
    Mutant(
        "empty-code-dropped-from-error-event",
        "the error event's code is tested for truth, the turn-end reason's for None: an error coded with the "
        "empty string logs an error event without it and a turn/end with it",
        ("ERR-7",),
        "7",
        (
            Patch("agent", "            if code is not None:\n                data[\"code\"] = code  # ERR-7: no code key at all without one\n",
                  "            if code:\n                data[\"code\"] = code  # ERR-7: no code key at all without one\n"),
        ),
        notes="Blind round Q (session 62, r10): the suite and the hunt missed it until "
              "`test_an_empty_string_code_is_a_code` and the call-raises workload's second response.",
    ),
    Mutant(
        "no-step-end-on-error",
        "closing a failed turn skips the open step's step/end, so turn/end follows an open step",
        ("ERR-2", "LOG-5"),
        "7",
        (
            Patch(
                "agent",
                "        if turn.step_open:  # ERR-2: an open step gets its step/end first\n",
                "        if turn.step_open and turn.failure is None:  # a clean close ends its step\n",
            ),
        ),
    ),
    Mutant(
        "error-code-null",
        "an error without a code is logged with \"code\": null instead of no code key",
        ("ERR-7",),
        "7",
        (
            Patch(
                "agent",
                "            if code is not None:\n                data[\"code\"] = code  # ERR-7: no code key at all without one\n",
                "            data[\"code\"] = code\n",
            ),
        ),
    ),
    Mutant(
        "late-failure-announced-twice",
        "a failure after turn/end (a throwing agent/turn-end listener, a failing flush) is "
        "announced even when the turn already failed, so a failed turn is announced twice",
        ("ERR-9",),
        "7",
        (
            Patch(
                "agent",
                "        if self._disposed or turn.failure is not None:\n            return\n        turn.failure = exc\n",
                "        if self._disposed:\n            return\n        turn.failure = exc\n",
            ),
        ),
    ),
    Mutant(
        "flush-failure-announced-at-step-zero",
        "a failing session/flush listener is warned and announced at step 0 directly, as an idle "
        "inject's flush is (INJ-2), not as the turn's late failure: a driver turn that had failed is "
        "announced twice (blind round 59b, in a structured-concurrency loop)",
        ("ERR-9",), "7",
        (Patch("agent",
               '            self._late_failure(turn, exc, "a session/flush listener")\n',
               '            self._warn(turn.number, "a session/flush listener failed", exc)\n'
               "            self._announce(turn.number, 0, exc)\n"),),
    ),
    Mutant(
        "late-failure-not-recorded",
        "a failure after turn/end (a throwing agent/turn-end listener, a failing flush, a throwing "
        "session/event listener in an idle inject's one-shot turn) is announced but not recorded as the "
        "turn's failure, so every further late failure of that turn is announced again",
        ("ERR-9",), "7",
        (Patch("agent",
               "        if self._disposed or turn.failure is not None:\n"
               "            return\n"
               "        turn.failure = exc\n"
               "        self._announce(turn.number, turn.step, exc)\n",
               "        if self._disposed or turn.failure is not None:\n"
               "            return\n"
               "        self._announce(turn.number, turn.step, exc)  # turn/end is written: nothing to record\n"),),
    ),
    Mutant(
        "step-end-throw-swallowed",
        "agent/step-end is emitted under a local try/except that only warns, so a throwing step-end "
        "listener neither fails the turn nor stops further steps",
        ("ERR-3", "ERR-2"), "7",
        (Patch("agent",
               "        self._append_step_event(turn, \"step/end\")\n"
               "        self._bus.emit(\"agent/step-end\", self, turn.number, turn.step)\n",
               "        self._append_step_event(turn, \"step/end\")\n"
               "        try:\n"
               "            self._bus.emit(\"agent/step-end\", self, turn.number, turn.step)\n"
               "        except Exception as exc:  # a progress UI must not break the turn\n"
               "            self._warn(turn.number, \"an agent/step-end listener failed\", exc)\n"),),
    ),
    Mutant(
        "err-code-not-in-reason",
        "the turn-end reason of a failed turn carries the error's message but not its code (the code "
        "is only written into the error event)",
        ("ERR-7", "FINISH-1"),
        "7",
        (
            Patch(
                "agent",
                "            return v.turn_end_error(error_message(failure), error_code(failure))  # ERR-7\n",
                "            return v.turn_end_error(error_message(failure))  # the code is in the error event\n",
            ),
        ),
    ),
    Mutant(
        "finish-error-code-dropped",
        "a stream that finishes error{message, code} fails the turn with the message alone: the "
        "model's code reaches neither the error event nor the turn-end reason",
        ("FINISH-1", "ERR-7"),
        "7",
        (
            Patch(
                "agent",
                'raise LoopError(str(finish.get("message") or "model error"), finish.get("code"))',
                'raise LoopError(str(finish.get("message") or "model error"))',
            ),
        ),
        notes="Blind check of 2026-12-03 (sixth round): the suite killed it; the hunt missed it until "
              "ASSEMBLY compared a failed step's error event with the error its finish chunk gave.",
    ),
    Mutant(
        "agent-error-listener-silent",
        "a throwing agent/error listener is contained silently (no warning): reporting the failure "
        "of a failure report is skipped",
        ("ERR-12", "ERR-5"),
        "7",
        (
            Patch(
                "agent",
                "        except Exception as inner:\n"
                '            self._warn(turn, "an agent/error listener failed", inner)\n',
                "        except Exception:\n"
                "            pass  # a broken error reporter: nothing left to report it to\n",
            ),
        ),
    ),
    Mutant(
        "announce-wraps-error",
        "a failed turn is announced through agent/error with a new error made of the original's "
        "message (as a port that rethrows a plain error does), so its type and code are lost",
        ("ERR-9", "ERR-10"),
        "7",
        (
            Patch(
                "agent",
                '            self._bus.emit("agent/error", self, turn, step, exc)\n',
                '            self._bus.emit("agent/error", self, turn, step, RuntimeError(str(exc)))\n',
            ),
        ),
        notes="Found by the blind check of 2026-12-03 (not in the catalogue then): the hunt missed "
              "it until ERR-9's oracle compared the announced error's code with the error event's.",
    ),
    Mutant(
        "stream-call-error-wrapped",
        "an error raised by the adapter's stream() call itself is wrapped in a LoopError of the same "
        "message and code, chained to it (raise ... from exc): agent/error carries the wrapper",
        ("ERR-9", "FINISH-2"),
        "7",
        (
            Patch("agent",
                  "        stream = adapter.stream(request)  # FINISH-2: may raise here or while iterating\n"
                  "        if asyncio.iscoroutine(stream):\n"
                  "            stream = await stream  # tolerate ``async def stream()`` returning an iterator\n",
                  "        try:\n"
                  "            stream = adapter.stream(request)  # FINISH-2: may raise here or while iterating\n"
                  "            if asyncio.iscoroutine(stream):\n"
                  "                stream = await stream\n"
                  "        except Exception as exc:  # the adapter could not open the stream\n"
                  "            raise LoopError(error_message(exc), error_code(exc)) from exc\n"),
        ),
        notes="Session 61's blind round N (r05): the suite and the hunt passed it until the fake model could "
              "raise from stream() itself (the call-raises workload) and a wrapper chained to the original no "
              "longer counted as carrying it (ORIGINAL; test_failed_turn_is_announced_with_its_original_error).",
    ),
    Mutant(
        "announce-step-zero",
        "a failed turn is announced through agent/error with step 0 (as if it failed before turn/start), "
        "not the step its error event names",
        ("ERR-9", "ERR-8"),
        "7",
        (
            Patch(
                "agent",
                '                self._warn(turn.number, "a session/event listener on error failed", inner)\n'
                "        self._announce(turn.number, step, exc)",
                '                self._warn(turn.number, "a session/event listener on error failed", inner)\n'
                "        self._announce(turn.number, 0, exc)",
            ),
        ),
        notes="Blind check of 2026-12-03 (fifth round): the suite killed it; the hunt missed it until "
              "ERR-9 compared agent/error's step with the error event's.",
    ),
    Mutant(
        "flush-failure-drops-queue",
        "a failing session/flush listener clears the agent's queue: a prompt sent while the turn flushed "
        "never runs",
        ("ERR-6", "ERR-1"),
        "7",
        (
            Patch(
                "agent",
                "        except Exception as exc:\n"
                '            self._late_failure(turn, exc, "a session/flush listener")',
                "        except Exception as exc:\n"
                '            self._late_failure(turn, exc, "a session/flush listener")\n'
                "            self._inbox.clear()",
            ),
        ),
        notes="Blind check of 2026-12-03 (ninth round): the suite killed it; the hunt missed it until a "
              "contained failure excused only the prompts its own turn drained (ERR-8, ERR-11).",
    ),
    Mutant(
        "turn-start-throw-requeues",
        "a turn whose turn/start listener threw queues its prompts again (a retry): a consumed prompt runs "
        "in the next turn",
        ("ERR-11",),
        "7",
        (
            Patch(
                "agent",
                "            turn.opened = True\n"
                "            raise\n"
                "        except BaseException:",
                "            turn.opened = True\n"
                "            for item in drained:\n"
                "                self._inbox.enqueue(item)\n"
                "            raise\n"
                "        except BaseException:",
            ),
        ),
        notes="Blind check of 2026-12-03 (ninth round): the suite killed it; the hunt found it under "
              "CANCEL-2 only (a cancel, then the throw) until the prompts oracle knew what a failed "
              "turn/start consumed.",
    ),
    Mutant(
        "queued-listener-debug",
        "a throwing agent/queued listener that send() contains is logged at debug level, not as a warning",
        ("ERR-12",),
        "7",
        (
            Patch(
                "agent",
                '            self._warn(self._session.last_turn(), "an agent/queued listener failed", exc)',
                '            logger.debug("agent/queued listener failed: %s", exc)',
            ),
        ),
        notes="Blind check of 2026-12-03 (ninth round): both missed it until "
              "test_a_contained_agent_queued_failure_is_warned and WARNED's clause for a throw that "
              "did not reach the caller's send().",
    ),
    Mutant(
        "error-listener-skips-announce",
        "the error event's append and the turn's announcement share one try: a session/event listener throwing on "
        "the error event (contained, ERR-4) skips agent/error, and the failed turn is never announced",
        ("ERR-9", "ERR-4"),
        "7",
        (
            Patch(
                "agent",
                "            try:\n"
                "                self._session.append(\"error\", data)\n"
                "            except Exception as inner:  # ERR-4: a throwing listener on `error` is contained\n"
                "                self._warn(turn.number, \"a session/event listener on error failed\", inner)\n"
                "        self._announce(turn.number, step, exc)\n",
                "            try:\n"
                "                self._session.append(\"error\", data)\n"
                "                self._announce(turn.number, step, exc)\n"
                "            except Exception as inner:  # ERR-4: a throwing listener on `error` is contained\n"
                "                self._warn(turn.number, \"a session/event listener on error failed\", inner)\n"
                "            return\n"
                "        self._announce(turn.number, step, exc)\n",
            ),
        ),
        notes="Round 41 (session 41, written blind in upport as error-append-swallows-announce): the suite passed "
              "it until test_a_failed_turn_is_announced_though_a_listener_throws_on_its_error_event; the hunt "
              "found it (ERR-9, the finish-aborted workload).",
    ),
    Mutant(
        "rejected-start-unannounced",
        "a turn/start the session rejects (a queued prompt whose source cannot be logged) is only warned about: "
        "no agent/error announces the failure",
        ("ERR-8",),
        "7",
        (
            Patch(
                "agent",
                '                self._warn(turn.number, "turn/start was rejected", exc)\n'
                "                self._announce(turn.number, 0, exc)\n",
                '                self._warn(turn.number, "turn/start was rejected", exc)\n',
            ),
        ),
        notes="Session 43: the hunt's bad-source workload (a send whose source cannot be logged) and its REJECTED "
              "oracle.",
    ),
    Mutant(
        "rejected-start-opens-turn",
        "a rejected turn/start is taken for a throwing turn/start listener: the turn counts as opened, so an error "
        "event and a turn/end are logged for a turn that never started",
        ("ERR-8", "LOG-4"),
        "7",
        (
            Patch(
                "agent",
                "            if len(self._session) == before:\n"
                "                # ERR-8: nothing opened",
                "            if len(self._session) == before and not drained:\n"
                "                # ERR-8: nothing opened",
            ),
        ),
        notes="Round 44 (session 42, written blind in examples/spec_loop as unstarted-turn-error-logged): the suite "
              "killed it; the hunt missed it until session 43's bad-source workload.",
    ),
    Mutant(
        "flush-failure-charged-to-running-turn",
        "a failing session/flush is charged to the turn running when it fails: an idle inject's flush failing once "
        "the next turn opened is announced as that turn's failure (and that turn's own failure is then ignored)",
        ("INJ-2", "ERR-9"),
        "7",
        (
            Patch(
                "agent",
                '            self._late_failure(turn, exc, "a session/flush listener")',
                '            self._late_failure(self._turn or turn, exc, "a session/flush listener")',
            ),
        ),
        notes="Round 46 (session 43, written blind in examples/spec_loop as inject-flush-announce-live-turn): the "
              "suite passed it until test_an_inject_flush_failing_late_is_announced_with_its_own_turn; the hunt "
              "found it (ANNOUNCED, the inject workload).",
    ),
    Mutant(
        "disposed-turn-logs-failures",
        "a failure once the agent is disposed is recorded like any other: a listener that disposes the agent and "
        "then throws gets an error event logged into the disposed turn",
        ("DISP-5", "DISP-4"),
        "9",
        (
            Patch(
                "agent",
                "        if turn.failure is not None or self._disposed:\n"
                "            # ERR-9 (a later failure)",
                "        if turn.failure is not None:\n"
                "            # ERR-9 (a later failure)",
            ),
        ),
        notes="Round 46 (session 43, written blind in examples/spec_loop as fail-ignores-agent-disposed): the suite "
              "passed it until test_a_listener_throwing_after_it_disposed_the_agent_logs_no_error; the hunt found it "
              "(MAXTOK's DISP-5 clause).",
    ),
    Mutant(
        'late-failure-silent-after-abort',
        "a failure after turn/end (a throwing agent/turn-end listener, a failing flush) is not announced when the turn ended aborted, as if the abort were a failure that came first",
        ('ERR-10', 'ERR-6'),
        '7',
        (
            Patch('agent',
                  '        if self._disposed or turn.failure is not None:\n            return\n        turn.failure = exc\n',
                  '        if self._disposed or turn.failure is not None or turn.aborted is not None:\n            return\n        turn.failure = exc\n'),
        ),
        notes="indie49 (session 44, a seventh independent loop) had this bug: the default hunt found it (ANNOUNCED, "
              "the hang workload's aborted turn and a window's throwing agent/turn-end listener), the suite missed it "
              "until test_a_late_failure_after_an_aborted_turn_is_announced.",
    ),
]
