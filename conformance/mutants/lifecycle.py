"""Mutants of spec sections 9 to 12: disposal, injection, the service, Python specifics."""

from __future__ import annotations

from ._build import Mutant, Patch

_FINALLY_FORGET = "            self._leave_registry()  # SVC-6: whatever threw before\n"
_NOTICE_FORGET = """\
            self._leave_registry()
            try:
                self._bus.emit("agent/status", self, "disposed")
"""

MUTANTS = [
    Mutant(
        "disposed-input-ignored",
        "send(), steer() and inject() on a disposed agent return silently instead of raising",
        ("DISP-3",),
        "9",
        (
            Patch(
                "agent",
                '            raise AgentDisposedError(f"agent {self._id!r} is disposed: cannot {verb}()")  # DISP-3\n',
                "            return  # a disposed agent ignores input\n",
            ),
        ),
    ),
    Mutant(
        "inject-flush-raises",
        "the one-shot turn of an idle inject() awaits session/flush unguarded, so a failing flush "
        "is raised into the caller instead of being reported through agent/error",
        ("INJ-2", "INJ-4"),
        "10",
        (
            Patch(
                "agent",
                "            turn.step = 0  # INJ-2: a failing flush is reported with step 0\n"
                "            await self._flush(turn, driver=False)\n",
                '            await self._bus.parallel("session/flush", self._session)\n',
            ),
        ),
    ),
    Mutant(
        "inject-open-from-status",
        "inject() decides whether a turn is open from the status instead of the log, so an "
        "inject while the turn flushes (still running, turn closed) writes context outside a turn",
        ("INJ-1", "INJ-2"),
        "10",
        (
            Patch(
                "agent",
                "        if self._session.open_turn() is not None:\n",
                '        if self._status == "running":\n',
            ),
        ),
        interleaving=True,
    ),
    Mutant(
        "svc-duplicate-id",
        "creating a second live agent with an id already in use is accepted and replaces the first",
        ("SVC-2",),
        "11",
        (
            Patch(
                "service",
                "        if agent_id in self._agents:  # SVC-2: rejected before any session is created\n"
                '            raise ServiceError(f"an agent with id {agent_id!r} already exists")\n',
                "",
            ),
        ),
    ),
    Mutant(
        "svc-forget-after-status",
        "disposal removes the agent from the registry after the status event, inside its try, so a "
        "throwing status listener leaves the disposed agent registered",
        ("SVC-6",),
        "11",
        (
            Patch(
                "agent",
                _NOTICE_FORGET,
                "            try:\n"
                '                self._bus.emit("agent/status", self, "disposed")\n'
                "                if self._on_dispose is not None:\n"
                "                    self._on_dispose(self)  # leave the registry\n",
            ),
            Patch("agent", _FINALLY_FORGET, "            pass\n"),
        ),
    ),
    Mutant(
        "py-cancel-contained",
        "the turn's containment catches BaseException, so cancelling the driver task is contained "
        "as a plugin error instead of ending the driver and disposing the agent",
        ("PY-1",),
        "12",
        (
            Patch(
                "agent",
                "        except Exception as exc:  # ERR-1: a throwing plugin ends the turn, never the loop\n",
                "        except BaseException as exc:  # ERR-1: whatever a plugin throws ends the turn\n",
            ),
            # and a step's model or tool task, cut short, is a plugin's failure like any other
            Patch(
                "agent",
                "            self.dispose()\n            task.cancel()\n            raise\n",
                "            task.cancel()\n            raise\n",
            ),
        ),
    ),
    Mutant(
        "dispose-flag-late",
        "dispose() sets its disposed flag only after the agent/status('disposed') listeners ran (so "
        "they 'can still use the agent'): a listener's send() on the disposed agent is accepted and "
        "lost, and its when_idle() does not wait for the driver to exit",
        ("DISP-3", "IDLE-4"),
        "9",
        (
            Patch(
                "agent",
                "        if self._disposed:\n            return\n        self._disposed = True\n        try:\n"
                "            controller = self._step_abort\n",
                "        if self._status == \"disposed\":\n            return\n        try:\n"
                "            controller = self._step_abort\n",
            ),
            Patch(
                "agent",
                "        finally:\n            self._release_waiters(self._pending_exit())\n",
                "        finally:\n            self._disposed = True  # listeners above could still use the agent\n"
                "            self._release_waiters(self._pending_exit())\n",
            ),
        ),
        interleaving=True,
    ),
    Mutant(
        "resume-no-recheck",
        "resume() checks the agent id before awaiting the persisted log but not after: a create() or a "
        "second resume() of the same id during the load yields two live agents, the later replacing the first",
        ("SVC-2",), "11",
        (Patch("service",
               "        self._check_new(agent_id)  # the load awaited: someone may have taken the id meanwhile\n",
               ""),),
        interleaving=True,
    ),
    Mutant(
        "inject-check-then-yield",
        "an idle inject() decides from the log that no turn is open, then yields once before writing its "
        "one-shot turn: a driver that wakes in that gap opens a turn, and the one-shot turn lands inside it",
        ("INJ-2", "LOG-4"), "10",
        (Patch("agent",
               "        # INJ-2: no turn open: a one-shot turn, balanced whatever throws, then flushed.\n",
               "        # INJ-2: no turn open: a one-shot turn, balanced whatever throws, then flushed.\n"
               "        await asyncio.sleep(0)  # let a flush in progress settle before writing the turn\n"),),
        interleaving=True,
    ),
    Mutant(
        "dispose-in-flush-runs-queued",
        "the driver's back-to-back loop checks only whether more work is queued, not whether the agent "
        "was disposed: a dispose() during session/flush with a prompt queued makes the disposed agent "
        "open (and close as disposed) one more turn for it",
        ("DISP-2",), "9",
        (Patch("agent",
               "                    if self._disposed or not self._inbox.has_queued:\n"
               "                        break\n",
               "                    if not self._inbox.has_queued:  # _run_turn notices a disposal itself\n"
               "                        break\n"),),
        interleaving=True,
    ),
    Mutant(
        "disp-reason-aborted",
        "the end reason checks an aborted step before disposal, so a turn disposed mid-step (whose "
        "step was aborted with reason 'disposed') ends aborted{disposed} instead of disposed",
        ("DISP-1",),
        "9",
        (
            Patch(
                "agent",
                "        if self._disposed:\n"
                "            return v.turn_end_disposed()  # DISP-1 / DISP-4\n"
                "        if turn.aborted is not None:\n"
                "            return v.turn_end_aborted(turn.aborted)  # ABORT-1 / CANCEL-1\n",
                "        if turn.aborted is not None:  # an aborted step decides first\n"
                "            return v.turn_end_aborted(turn.aborted)  # ABORT-1 / CANCEL-1\n"
                "        if self._disposed:\n"
                "            return v.turn_end_disposed()  # DISP-1 / DISP-4\n",
            ),
        ),
    ),
    Mutant(
        "resume-fresh-session-id",
        "resume() loads the persisted log but runs it on a fresh session id {id}-session-{uuid} "
        "(a resumed run is a new run), so the live session id is not the resumed id",
        ("SVC-3",),
        "11",
        (
            Patch(
                "service",
                "        return self._make(agent_id, resume_session_id, opts, None, events, header)\n",
                "        # a resumed run continues the loaded history on a session of its own\n"
                '        session_id = f"{agent_id}-session-{self.sources.uuid()}"\n'
                "        return self._make(agent_id, session_id, opts, None, events, header)\n",
            ),
        ),
    ),
    Mutant(
        "dispose-no-wake",
        "dispose() does not wake a driver parked at the idle wait: an idle agent's driver never "
        "exits, so a disposed agent's when_idle() and the service's close() never return",
        ("DISP-2", "SVC-7", "IDLE-4"),
        "9",
        (
            Patch(
                "agent",
                "            self._cut_plugin()\n"
                "            self._inbox.wake()\n",
                "            self._cut_plugin()\n",
            ),
        ),
        notes="Found by the blind check of 2026-12-03: the hunt found it in every workload but stopped "
              "as bad input (exit 2) at the resume workload, whose persisted session the world could not "
              "write (its close hung); a workload's failed set-up is now a finding of that workload.",
    ),
    Mutant(
        "context-source-dropped",
        "inject() into an open turn logs its context/message with the default source {kind: user} "
        "instead of the caller's, so derived history wraps a plugin's context as the user's",
        ("INJ-1", "INJ-3", "LOG-7"),
        "10",
        (
            Patch(
                "agent",
                '                self._session.append("context/message", {"content": blocks, "source": src})\n'
                "            except Exception as exc:\n"
                "                if len(self._session) == before:\n",
                '                self._session.append("context/message", {"content": blocks, "source": {"kind": "user"}})\n'
                "            except Exception as exc:\n"
                "                if len(self._session) == before:\n",
            ),
        ),
        notes="Blind check of 2026-12-03: the suite killed it (INJ-1, INJ-3); the hunt missed it until "
              "the SOURCES oracle.",
    ),
    Mutant(
        "disposed-turn-end-silent",
        "a turn closed by a disposal logs turn/end{disposed} but emits no agent/turn-end",
        ("DISP-1", "LOOP-4"),
        "9",
        (
            Patch(
                "agent",
                "        if turn.notify_end:  # LOOP-4: not after a boundary failure (already announced)",
                "        if turn.notify_end and not self._disposed:",
            ),
        ),
        notes="Blind check of 2026-12-03 (fourth round): the suite passed it until "
              "test_a_disposed_turn_is_notified_ended; the hunt missed it until NOTIFIED judged "
              "disposed turns' agent/turn-end.",
    ),
    Mutant(
        "disposed-turn-not-flushed",
        "a turn closed by a disposal logs its turn/end{disposed} but is never flushed: the driver "
        "exits without its session/flush",
        ("LOOP-4", "DISP-1"),
        "9",
        (
            Patch(
                "agent",
                "            await self._flush(turn)  # LOOP-4: the awaited session/flush comes last",
                "            if not self._disposed:\n"
                "                await self._flush(turn)",
            ),
        ),
        notes="Blind check of 2026-12-03 (eighth round, written into the JavaScript loop): both "
              "passed it until test_a_disposed_turn_is_flushed and FLUSH's disposed-turn clause.",
    ),
    Mutant(
        "tools-first-step-only",
        "the registered tools' schemas are sent with a turn's first request only: the request after a "
        "tool step carries no tools",
        ("SVC-5",),
        "11",
        (
            Patch(
                "agent",
                '                "tools": self._service.tools.schemas(),',
                '                "tools": self._service.tools.schemas() if step == 1 else [],',
            ),
        ),
        notes="Blind check of 2026-12-03 (ninth round): both passed it until "
              "test_every_request_of_a_turn_carries_the_system_prompt_and_tools and the REQUEST oracle.",
    ),
    Mutant(
        'subtask-orphaned-on-driver-cancel',
        "the driver's subtask (a model stream, a tool) is left running when the driver's own task is cancelled: a stream still going logs its chunks after the disposed turn's turn/end",
        ('PY-1',),
        '12',
        (
            Patch('agent',
                  '        try:\n            await asyncio.wait([task])\n        except BaseException:\n            # PY-1: the driver itself is being cancelled, and the agent ends disposed: dispose now,\n            # while the step is in flight, so its signal fires (a model or tool watching it is told,\n            # and a chunk it still hands over is not logged after the turn closed)\n            self.dispose()\n            task.cancel()\n            raise\n        finally:\n            undo()',
                  '        try:\n            await asyncio.wait([task])\n        finally:\n            undo()'),
        ),
        notes="Round 13 (2026-12-03, written blind by a helper): the suite passed it until test_cancelling_driver_task_mid_step_stops_the_step_it_was_running (the earlier PY-1 tests cancelled the driver while its model call hung); the hunt finds it since windows may cancel the driver's task (cancel_driver, session 32).",
    ),
    Mutant(
        'driver-cancelled-unstarted',
        "a driver task cancelled before its first step is closed unstarted, so _drive's handler never runs: the agent stays idle with no driver, its prompts never run, and a disposing when_idle() never learns the driver exited",
        ('PY-1',),
        '12',
        (
            Patch('agent',
                  '        self._task.add_done_callback(self._driver_ended)\n',
                  ''),
        ),
        notes="Found in the reference itself (session 32) by the hunt's first cancel_driver windows (after creation of a: cancel_driver); the fix, a done callback, is what this removes. test_cancelling_driver_task_before_it_first_ran_disposes.",
    ),
    Mutant(
        'close-iterates-live-registry',
        'close() iterates the live registry while dispose() removes from it: it raises after the first agent, the others stay running',
        ('SVC-7', 'SVC-6'),
        '11',
        (
            Patch('service',
                  '        for agent in list(self._created):\n            agent.dispose()',
                  '        for agent in self._agents.values():\n            agent.dispose()'),
        ),
        notes="Round 13: the suite reported it as a setup failure (exit 2) until a raising close() became an SVC-7 finding of the world's own close too; the report names the one failure behind the rules it fails (common_failure).",
    ),
    Mutant(
        'tool-schema-parameters-key',
        'tool schemas are sent under the key `parameters` instead of `input_schema`',
        ('SVC-5',),
        '11',
        (
            Patch('tools',
                  '            {"name": t.name, "description": t.description, "input_schema": dict(t.input_schema)}',
                  '            {"name": t.name, "description": t.description, "parameters": dict(t.input_schema)}'),
        ),
        notes="Round 13: the suite killed it (SVC-5 on the stated shape); the hunt found it once the fake model recorded tools entries not of 0b's shape (REQUEST).",
    ),
    Mutant(
        'history-derived-before-prompt',
        "the step's history is derived before the awaited system-prompt waterfall and the request built from that copy: context injected while an async system-prompt listener runs is in the log but missing from that step's request",
        ('INJ-3',),
        '10',
        (
            Patch('agent',
                  '        assembly = await self._agent_waterfall(\n            "system-prompt",',
                  '        history = self._session.derive_messages()  # derived while the prompt is assembled\n        assembly = await self._agent_waterfall(\n            "system-prompt",'),
            Patch('agent',
                  '            request = self._build_request(assembly, signal)\n',
                  '            request = self._build_request(assembly, signal, history)\n'),
            Patch('agent',
                  '    def _build_request(self, assembly: Any, signal: AbortSignal) -> dict[str, Any]:',
                  '    def _build_request(self, assembly: Any, signal: AbortSignal, history: Any = None) -> dict[str, Any]:'),
            Patch('agent',
                  '        request["messages"] = self._session.derive_messages()',
                  '        request["messages"] = history if history is not None else self._session.derive_messages()'),
        ),
        interleaving=True,
        notes="Round 14 (session 32, 2026-12-03, written blind by a helper): the suite passed it until test_context_injected_while_the_system_prompt_is_assembled_reaches_that_steps_request; out of the hunt's reach on the reference: its inject() is a coroutine a window starts as a task, which lands once the request is built, and no window awaits inside system-prompt.",
    ),
    Mutant(
        'inject-flush-before-turn-end',
        "an idle inject() awaits its flush before writing its one-shot turn's turn/end: work sent during a slow flush runs inside the still-open injection turn",
        ('INJ-2', 'LOG-4'),
        '10',
        (
            Patch('agent',
                  '            except Exception as exc:\n                self._late_failure(turn, exc, "a session/event listener on context/message")\n        finally:\n            try:\n                self._session.append(\n                    "turn/end", {"turn": turn.number, "reason": v.turn_end_completed()}\n                )\n            except Exception as exc:\n                self._late_failure(turn, exc, "a session/event listener on turn/end")\n            turn.step = 0  # INJ-2: a failing flush is reported with step 0\n            await self._flush(turn, driver=False)',
                  '            except Exception as exc:\n                self._late_failure(turn, exc, "a session/event listener on context/message")\n            turn.step = 0  # INJ-2: a failing flush is reported with step 0\n            await self._flush(turn, driver=False)  # make the context durable as soon as it is written\n        finally:\n            try:\n                self._session.append(\n                    "turn/end", {"turn": turn.number, "reason": v.turn_end_completed()}\n                )\n            except Exception as exc:\n                self._late_failure(turn, exc, "a session/event listener on turn/end")'),
        ),
        interleaving=True,
        notes='Round 14 (session 32, 2026-12-03, written blind by a helper): the suite passed it until test_idle_inject_writes_one_shot_turn recorded what the log ends with when the flush runs; the hunt found it (LOG-4).',
    ),
    Mutant(
        'close-flag-set-after-dispose',
        'close() marks the service closed only after disposing a snapshot of its agents: an agent a status listener re-creates as one is disposed is accepted and left live after close() returns',
        ('SVC-7',),
        '11',
        (
            Patch('service',
                  '        self._closed = True\n        for agent in list(self._created):\n            agent.dispose()\n        for agent in list(self._created):\n',
                  '        agents = list(self._created)  # one snapshot for both passes\n        for agent in agents:\n            agent.dispose()\n        self._closed = True\n        for agent in agents:\n'),
        ),
        interleaving=True,
        notes="Round 14 (session 32, 2026-12-03, written blind by a helper): the suite passed it until test_an_agent_created_while_the_service_closes_is_not_left_live (which also failed examples/spec_loop, the JS example and two independent loops); out of the hunt's reach: no window creates a new agent.",
    ),
    Mutant(
        'resume-reserves-id-on-failure',
        'resume() reserves the agent id across its awaits but releases it only on success: after a failed resume (an unknown session) create() of that id is rejected as already live',
        ('SVC-3', 'SVC-2'),
        '11',
        (
            Patch('service',
                  '        self._closed = False\n',
                  '        self._closed = False\n        self._reserved: set[str] = set()\n'),
            Patch('service',
                  '        if agent_id in self._agents:  # SVC-2: rejected before any session is created',
                  '        if agent_id in self._agents or agent_id in self._reserved:  # SVC-2'),
            Patch('service',
                  '        self._check_new(agent_id)\n        opts = _options(agent_options)\n        events = await self.persistence.load(resume_session_id)',
                  '        self._check_new(agent_id)\n        self._reserved.add(agent_id)  # hold the id while the log loads\n        opts = _options(agent_options)\n        events = await self.persistence.load(resume_session_id)'),
            Patch('service',
                  '        self._check_new(agent_id)  # the load awaited: someone may have taken the id meanwhile\n',
                  '        self._reserved.discard(agent_id)\n'),
        ),
        notes="Round 14 (session 32, 2026-12-03, written blind by a helper): the suite passed it until test_a_failed_resume_leaves_its_id_free; out of the hunt's reach: no workload resumes an unknown session.",
    ),
    Mutant(
        'emit-live-listener-list',
        'a notification iterates its live listener list: a listener that removes itself while notified makes the one registered after it miss that event',
        ('PY-2',),
        '12',
        (
            Patch('bus',
                  '        for listener in [reg.fn for reg in regs]:  # a snapshot: a listener may register another\n            try:',
                  '        for reg in regs:\n            listener = reg.fn\n            try:'),
        ),
        interleaving=True,
        notes="Round 13 (written blind): judged outside the contract then (no unsubscription in the spec); the adapter's on() returns a disposer and PY-2 says emit runs its listeners in registration order, and a fourth-loop blind round (session 32) wrote the same bug: test_a_listener_removing_itself_does_not_cost_the_next_one_the_event.",
    ),
    Mutant(
        'prompt-assembled-once-per-turn',
        "the system prompt and tool schemas are assembled once per turn and kept on it: a section or tool registered during the turn is missing from its later steps' requests",
        ('SVC-5', 'LOOP-5'),
        '11',
        (
            Patch('agent',
                  '    max_tokens: bool = False  # MAXTOK-2: sticky for the turn; MAXTOK-4: a fresh _Turn per turn\n',
                  '    max_tokens: bool = False  # MAXTOK-2: sticky for the turn; MAXTOK-4: a fresh _Turn per turn\n    assembly: Any = None  # the system prompt + tools, assembled once per turn\n'),
            Patch('agent',
                  '        assembly = await self._agent_waterfall(\n            "system-prompt",\n            {\n                "system": join_prompt(*(s["text"] for s in self._service.prompts.sections())),\n                "tools": self._service.tools.schemas(),\n            },\n            self,\n        )\n',
                  '        if turn.assembly is None:  # sections and tools do not change within a turn\n            turn.assembly = await self._agent_waterfall(\n                "system-prompt",\n                {\n                    "system": join_prompt(*(s["text"] for s in self._service.prompts.sections())),\n                    "tools": self._service.tools.schemas(),\n                },\n                self,\n            )\n        assembly = turn.assembly\n'),
        ),
        interleaving=True,
        notes="Round 14 (written blind by a helper): the suite killed it (LOOP-5, SVC-5); out of the hunt's reach until session 33's reconfigure verb (no window changed sections or tools while a turn ran).",
    ),
    Mutant(
        'resume-after-close-creates',
        'after its load, resume() re-checks only the id, not whether the service closed: a resume loading during close() leaves a live agent',
        ('SVC-7', 'SVC-3'),
        '11',
        (
            Patch('service',
                  '        self._check_new(agent_id)  # the load awaited: someone may have taken the id meanwhile',
                  '        if agent_id in self._agents:  # the load awaited: someone may have taken the id meanwhile\n            raise ServiceError(f"an agent with id {agent_id!r} already exists")'),
        ),
        interleaving=True,
        notes="Round 15 (written blind): the suite passed it until test_a_resume_loading_while_the_service_closes_leaves_no_live_agent; the hunt finds it since a window may close the service inside a resume's load (the world then judges the resumed agent).",
    ),
    Mutant(
        'registry-left-until-driver-exit',
        'a disposed agent leaves the registry only when its driver exits, not when dispose() returns: until then get(id) hands it out and create(id) is refused',
        ('SVC-6', 'SVC-2'),
        '11',
        (
            Patch('agent', _NOTICE_FORGET,
                  '            try:  # the driver\'s exit removes it (below)\n                self._bus.emit("agent/status", self, "disposed")\n'),
            Patch('agent', _FINALLY_FORGET, '            pass\n'),
            Patch('agent',
                  '        finally:\n            if self._exited is not None and not self._exited.done():\n                self._exited.set_result(None)\n\n    # ------------------------------------------------------------------ one turn',
                  '        finally:\n            if self._on_dispose is not None:\n                self._on_dispose(self)  # the agent is gone once its driver is\n            if self._exited is not None and not self._exited.done():\n                self._exited.set_result(None)\n\n    # ------------------------------------------------------------------ one turn'),
        ),
        interleaving=True,
        notes="Round 29 (session 39, written blind in altloop as forget-on-exit): the suite killed it (test_lookup_and_removal); the hunt missed it until the world judged the registry right after a dispose() that disposed the agent (SVC-6).",
    ),
    Mutant(
        'dispose-fire-unguarded',
        "dispose() fires the step's abort signal unguarded: an adapter's or a tool's abort observer that throws escapes dispose(), which leaves the agent running and unannounced",
        ('DISP-2', 'DISP-1'),
        '9',
        (
            Patch('agent',
                  '                _fire(controller, "disposed", self)\n',
                  '                controller.abort("disposed")\n'),
        ),
        interleaving=True,
        notes="Round 33 (session 40, written blind in the reference): the suite passed it until "
              "test_dispose_unbroken_by_a_throwing_listener_on_the_steps_signal; the hunt found it once the hang "
              "workload disposed its agent mid-stream (a window's raise as the signal fires inside dispose(), "
              "judged by the world's DISP-2 check of dispose() raising).",
    ),
    Mutant(
        'waterfall-live-chain',
        "a waterfall's next() reads the live listener list at every link: a one-shot listener that removes itself "
        "makes the chain skip the listener after it (its force-stop of the turn is lost)",
        ('CONT-1',),
        '4',
        (
            Patch('bus',
                  '        chain = self.listeners(name)\n\n        async def run(index: int) -> Any:\n'
                  '            if index >= len(chain):',
                  '        async def run(index: int) -> Any:\n            chain = self.listeners(name)\n'
                  '            if index >= len(chain):'),
        ),
        notes="Round 42 (session 41, written blind in the JS loop as waterfall-live-chain): the suite and the hunt "
              "passed it until test_a_forced_stop_holds_when_an_earlier_listener_removes_itself; out of the hunt's "
              "reach (no window removes a listener).",
    ),
    Mutant(
        'waterfall-chain-eager',
        "a waterfall runs the rest of its chain before calling the listener and hands it the result: a tools/execute "
        "listener that answers a call itself, never calling next(), cannot keep the tool from running",
        ('LOOP-5', 'TOOL-4'),
        '5',
        (
            Patch('bus',
                  '            def next_() -> Awaitable[Any]:\n                return run(index + 1)\n',
                  '            later = await run(index + 1)\n\n'
                  '            async def next_() -> Any:\n                return later\n'),
        ),
        notes="Round 44 (session 42, written blind in examples/spec_loop as waterfall-next-eager): the suite killed "
              "it (TOOL-4's short-circuit test), the hunt missed it until session 43's answer verb (a tools/execute "
              "listener answering the call itself) and the ANSWERED oracle.",
    ),
    Mutant(
        'tool-dispose-by-name',
        "a tool registration's disposer removes whatever tool has the name: a plugin re-registering a tool and then "
        "releasing the first registration unregisters the second",
        ('SVC-5',),
        '11',
        (
            Patch('tools',
                  '            if self._tools.get(name) is tool:\n                del self._tools[name]',
                  '            self._tools.pop(name, None)'),
        ),
        notes="Round 42 (session 41, written blind in the JS loop as tool-unregister-by-name; the kit's own JS loop "
              "had the same bug for prompt sections): the suite passed it until "
              "test_releasing_a_registration_leaves_a_later_one_of_the_same_name; out of the hunt's reach (no "
              "window registers a tool twice).",
    ),
    Mutant(
        'session-id-per-agent-id',
        "create() derives the session's uuid from the agent id (uuid5, for reproducible ids): an id created again "
        "once its agent was disposed gets the disposed agent's session",
        ('SVC-1',),
        '11',
        (
            Patch('service', 'import os\n', 'import os\nimport uuid\n'),
            Patch('service',
                  'f"{agent_id}-session-{self.sources.uuid()}"',
                  'f"{agent_id}-session-{uuid.uuid5(uuid.NAMESPACE_URL, agent_id)}"'),
        ),
        notes="Round 43 (session 42, written blind in altloop as session-uuid-per-service): the suite killed it; "
              "the hunt missed it until session 43's dispose-then-create windows (RECREATE).",
    ),
    Mutant(
        'config-system-prompt-camel',
        "an agent created from configuration gets its system prompt under the key systemPrompt (the TypeScript "
        "spelling): the configured prompt never reaches the model",
        ('SVC-4', 'SVC-5'),
        '11',
        (
            Patch('config', '            opts["system_prompt"] = self.system_prompt\n',
                  '            opts["systemPrompt"] = self.system_prompt\n'),
        ),
        notes="Round 48 (session 43, written blind in the reference): the suite killed it; the hunt missed it until "
              "the two-step workload's agent was created from configuration (REQUEST).",
    ),
    Mutant(
        'error-outranks-disposed',
        "a turn that failed and is disposed before it closes (an agent/error listener disposing, say) ends error, not disposed",
        ('DISP-1',),
        '9',
        (
            Patch('agent',
                  '        if self._disposed:\n            return v.turn_end_disposed()  # DISP-1 / DISP-4\n',
                  '        if turn.failure is not None:  # the failure first\n'
                  '            return v.turn_end_error(error_message(turn.failure), error_code(turn.failure))\n'
                  '        if self._disposed:\n            return v.turn_end_disposed()  # DISP-1 / DISP-4\n'),
        ),
        notes="Round 49 (session 44, written blind in the reference): the suite killed it (DISP-1); the hunt missed it "
              "while its MAXTOK oracle let a turn whose error was logged before the dispose keep `error`, a reading "
              "the suite's DISP-1 tests do not take; found since (MAXTOK, DISP-1).",
    ),
    Mutant(
        'repair-recloses-closed-step',
        "the backend's repair of a turn left open forgets that step/end closes a step: a session whose writer died between two steps gets a second step/end",
        ('LOG-5', 'SVC-3'),
        '11',
        (
            Patch('persistence',
                  '        elif kind == "step/end":\n            open_step = None\n',
                  ''),
        ),
        notes="Round 52 (session 44, written blind in indie47): the suite killed it; the hunt found it once a "
              "waterfall listener's reload held the chain until the second service had loaded (the load then sees "
              "the log between two steps).",
    ),
    Mutant(
        "dispose-deaf-between-step-signals",
        "dispose() does not cut short the system-prompt and agent/turn-continuation waterfalls, awaited "
        "where no step's abort signal exists: a plugin listener there that never returns keeps a "
        "disposed agent's driver (and its when_idle()) waiting for ever",
        ("DISP-2", "IDLE-4"),
        "9",
        (
            Patch("agent",
                  "            self._cut_plugin()\n",
                  ""),
        ),
        notes="The reference's own bug until session 46, found by blind round 54's dispose-trusts-step-signal "
              "(in examples/spec_loop's form, the step's waterfalls): the suite kills it since "
              "`test_dispose_while_a_waterfall_listener_never_returns_still_ends_the_driver`, the hunt since its "
              "`stall` windows.",
    ),
    Mutant(
        "dispose-deaf-in-step-waterfalls",
        "the step's agent/request and agent/step-result waterfalls are awaited directly, trusting the step's "
        "abort signal to stop the step: a plugin listener there that never returns keeps a disposed agent's "
        "driver waiting for ever",
        ("DISP-2", "IDLE-4"),
        "9",
        (
            Patch("agent",
                  '        completed = await self._in_subtask(run(), signal, name.removeprefix("agent/"))\n'
                  '        return box["value"] if completed else value\n',
                  "        await run()\n"
                  '        return box["value"]\n'),
        ),
        notes="Blind round 54's dispose-trusts-step-signal (session 45, in examples/spec_loop) in the reference's "
              "form: both the suite and the hunt missed it then.",
    ),
    Mutant(
        "dispose-deaf-in-flush",
        "the turn's session/flush is awaited directly: a persistence plugin's flush listener that never "
        "returns keeps a disposed agent's driver (and its when_idle()) waiting for ever",
        ("DISP-2", "IDLE-4"),
        "9",
        (
            Patch("agent",
                  "            await (self._cuttable(flushing, None) if driver else flushing)\n",
                  "            await flushing\n"),
        ),
        notes="The reference's own bug until session 50 (a reviewer's finding, shared by indie60d, indie60e and "
              "indie61c): killed by test_dispose_while_a_flush_listener_never_returns_still_ends_the_driver; the "
              "hunt finds it since its `stall` windows act inside session/flush too.",
    ),
    Mutant(
        "disposed-at-turn-start-left-open",
        "a dispose() from a session/event listener on turn/start stops the driver before the turn counts as "
        "opened: its turn/start is never closed (no turn/end{disposed}, no flush)",
        ("DISP-1", "LOG-4"),
        "9",
        (
            Patch("agent",
                  "            raise\n"
                  "        turn.opened = True\n"
                  "        try:\n"
                  "            for item in drained:",
                  "            raise\n"
                  "        if self._disposed:\n"
                  "            return  # disposed as the turn opened: nothing more to run\n"
                  "        turn.opened = True\n"
                  "        try:\n"
                  "            for item in drained:"),
        ),
        notes="Blind session 48's sans-IO loop (indie60b), written from the spec alone, in the reference's form: "
              "the suite missed it until `DISPOSED_DURING` disposed from a turn/start log listener; the hunt found "
              "it first (`reply: after session/event(turn/start)#1: dispose`).",
    ),
    Mutant(
        "flush-cancelled-listener-dropped",
        "a session/flush listener that raises CancelledError is dropped from the gathered outcomes "
        "(a return_exceptions result filtered on Exception): the driver goes on, where PY-1 never "
        "swallows a CancelledError",
        ("PY-1",),
        "12",
        (
            Patch("bus",
                  "                    raise outcome  # CancelledError & co. are never contained (PY-1)\n",
                  "                    continue  # a cancelled listener has nothing to report\n"),
        ),
        notes="Session 49 (a reviewer's finding: six independent loops and examples/spec_loop dropped it, or "
              "reported it as the listener's failure): the suite passed it until "
              "test_a_plugin_raising_cancelled_error_in_a_task_of_its_own_is_not_swallowed; out of the hunt's "
              "reach (no window makes a plugin raise CancelledError).",
    ),
    Mutant(
        "inject-context-failure-announced-apart",
        "an idle inject's one-shot turn announces a throwing context/message listener at once, without "
        "recording it as the turn's failure: a failing flush of the same turn is announced again",
        ("INJ-2", "ERR-9"),
        "10",
        (
            Patch("agent",
                  '                self._late_failure(turn, exc, "a session/event listener on context/message")\n',
                  '                self._warn(turn.number, "a session/event listener on context/message failed", exc)\n'
                  "                self._announce(turn.number, 0, exc)  # told at once, not the turn's record\n"),
        ),
        notes="Session 49 (a reviewer's finding in examples/spec_loop, shared by indie61c, indie60a and indie60d): "
              "killed by test_an_idle_injects_turn_is_announced_failed_once; out of the hunt's reach (two failures "
              "of one idle inject's turn: a window acts at one point; flush-throws' flushes fail by themselves, but "
              "its only idle injects are a window's own, in whose turn no other listener throws).",
    ),
    Mutant(
        "resume-checks-id-after-load",
        "resume() checks the agent id only once the persisted log is loaded: a resume under a live agent's id "
        "is still refused, but its load has repaired the live session's open turn in the store (a turn/end "
        "{interrupted} written into the middle of the running turn)",
        ("SVC-2", "SVC-3"),
        "11",
        (
            Patch("service",
                  "        self._check_new(agent_id)\n        opts = _options(agent_options)\n",
                  "        opts = _options(agent_options)\n"),
        ),
        notes="Session 63's blind round S, v46 (a UI's reopen clicked while the agent runs): killed by "
              "test_a_resume_under_a_live_agents_own_id_is_refused_and_leaves_its_session_as_written; the hunt finds "
              "it through the create verb's resume under the live id in the resume workload (the backend's check "
              "at the end of the run).",
    ),
]
