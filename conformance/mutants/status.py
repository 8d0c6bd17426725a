"""Mutants of spec section 2: status transitions and when_idle() quiescence."""

from __future__ import annotations

from ._build import Mutant, Patch

_RELEASE_FIRST = """\
        if status == "idle":
            self._release_waiters()  # IDLE-3: before the event, so a throwing listener can't hang it
        try:
            self._bus.emit("agent/status", self, status)
"""

MUTANTS = [
    Mutant(
        "waiter-release-ignores-cancelled",
        "a when_idle() waiter awaits its future unshielded and is released by set_result() without "
        "looking: a waiter whose awaiter gave up (wait_for timing out cancels the future) raises "
        "InvalidStateError inside the idle transition, which kills the driver",
        ("IDLE-2", "LOOP-1"),
        "2",
        (
            Patch(
                "agent",
                "        if self._future is not None and not self._future.done():\n"
                "            self._future.set_result(None)\n",
                "        if self._future is not None:\n"
                "            self._future.set_result(None)\n",
            ),
            Patch(
                "agent",
                "            # Shielded: one cancelled awaiter must not cancel the shared future.\n"
                "            await asyncio.shield(self._future)\n",
                "            await self._future\n",
            ),
        ),
        notes="Blind round 54 (session 45, 2026-12-06), `cancelled-waiter-crashes-driver` in the "
              "reference's form: the suite and the hunt missed it until "
              "`test_a_waiter_whose_awaiter_gave_up_harms_neither_the_other_waiters_nor_the_driver`; "
              "no window gives up on a waiter, so the hunt still does not reach it.",
    ),
    Mutant(
        "waiter-exit-read-before-await",
        "a when_idle() waiter reads the driver's exit it must also wait for (IDLE-4) before it awaits "
        "its release, and trusts that stale read after: an await begun while the agent ran returns at "
        "dispose(), before the driver has exited",
        ("IDLE-4",),
        "2",
        (
            Patch(
                "agent",
                "    async def _wait(self) -> None:\n"
                "        if not self._done:\n",
                "    async def _wait(self) -> None:\n"
                "        after = self._after  # IDLE-4: the driver's exit, when released by disposal\n"
                "        if not self._done:\n",
            ),
            Patch(
                "agent",
                "        if self._after is not None and not self._after.done():\n"
                "            await asyncio.shield(self._after)\n",
                "        if after is not None and not after.done():\n"
                "            await asyncio.shield(after)\n",
            ),
        ),
        notes="Blind round 53 (session 45, 2026-12-06): the suite missed it until "
              "`test_when_idle_on_disposal_waits_for_driver_exit` also awaited the waiter before dispose().",
    ),
    Mutant(
        "waiters-after-status",
        "when_idle() waiters are released after the agent/status event instead of before, so a "
        "throwing idle listener leaves them hanging",
        ("IDLE-3", "STATUS-2"),
        "2",
        (
            Patch(
                "agent",
                _RELEASE_FIRST,
                """\
        try:
            self._bus.emit("agent/status", self, status)
            if status == "idle":
                self._release_waiters()  # listeners first see the agent idle, then waiters
""",
            ),
        ),
    ),
    Mutant(
        "idle-ignores-queue",
        "when_idle() resolves at once whenever the status is not running, even with a prompt "
        "queued that the driver has not picked up yet",
        ("IDLE-1", "IDLE-2"),
        "2",
        (
            Patch(
                "agent",
                '        if self._status != "running" and not self._inbox.has_queued:\n            waiter._release()  # IDLE-1\n',
                '        if self._status != "running":\n            waiter._release()  # IDLE-1\n',
            ),
        ),
        interleaving=True,
    ),
    Mutant(
        "disposed-waiter-early",
        "disposal releases the when_idle() waiters registered while running at once, before the "
        "driver loop has closed and flushed the turn and exited",
        ("IDLE-4",),
        "2",
        (
            Patch(
                "agent",
                "            self._release_waiters(self._pending_exit())\n",
                "            self._release_waiters()  # disposed: nothing more will run\n",
            ),
        ),
    ),
    Mutant(
        "dispose-via-idle",
        "dispose() settles waiters through an idle transition first, so an agent disposed while "
        "running traces running -> idle -> disposed",
        ("STATUS-1", "DISP-5"),
        "2",
        (
            Patch(
                "agent",
                '            self._inbox.wake()\n            self._status = "disposed"\n',
                '            self._inbox.wake()\n            self._set_status("idle")  # settle waiters first\n'
                '            self._status = "disposed"\n',
            ),
        ),
    ),
    Mutant(
        "idle-release-rechecks-queue",
        "idle waiters are released after the agent/status('idle') listeners ran (in a finally) and "
        "only if the agent is still quiescent then, so work queued by an idle listener holds them",
        ("IDLE-3", "IDLE-2"),
        "2",
        (
            Patch(
                "agent",
                "        if status == \"idle\":\n"
                "            self._release_waiters()  # IDLE-3: before the event, so a throwing listener can't hang it\n",
                "",
            ),
            Patch(
                "agent",
                "            self._announce(turn, 0, exc)\n\n    def _release_waiters(",
                "            self._announce(turn, 0, exc)\n"
                "        finally:\n"
                "            # release only if still quiescent once the listeners have run\n"
                "            if status == \"idle\" and self._status == \"idle\" and not self._inbox.has_queued:\n"
                "                self._release_waiters()\n\n    def _release_waiters(",
            ),
        ),
        interleaving=True,
    ),
    Mutant(
        "status-committed-after-emit",
        "_set_status notifies agent/status first and commits the new status afterwards: an idle "
        "listener's when_idle() sees 'running' and waits for a later idle transition, and its steer() "
        "goes to the steering FIFO of a turn that is over",
        ("IDLE-1", "STEER-1", "LOOP-8"), "2",
        (Patch("agent",
               "        self._status = status\n"
               "        if status == \"idle\":\n"
               "            self._release_waiters()  # IDLE-3",
               "        if status == \"idle\":\n"
               "            self._release_waiters()  # IDLE-3"),
         Patch("agent",
               "            self._announce(turn, 0, exc)\n",
               "            self._announce(turn, 0, exc)\n"
               "        self._status = status  # committed once every listener has seen the transition\n"),),
        interleaving=True,
    ),
    Mutant(
        "when-idle-from-log",
        "when_idle() treats 'no turn open in the log and nothing queued' as idle, so a waiter registered "
        "after turn/end (agent/turn-end listener, session/flush) or by a running listener that cancelled "
        "resolves at once while the agent is still running",
        ("IDLE-1", "IDLE-2"), "2",
        (Patch("agent",
               "        if self._status != \"running\" and not self._inbox.has_queued:\n"
               "            waiter._release()  # IDLE-1\n",
               "        if self._session.open_turn() is None and not self._inbox.has_queued:\n"
               "            waiter._release()  # IDLE-1: no turn open, nothing queued (decided from the log)\n"),),
        interleaving=True,
    ),
    Mutant(
        "idle-release-any-agent",
        "when_idle() waiters are released by an agent/status('idle') listener each agent registers on "
        "the service's shared bus, without checking the notified agent: any agent going idle releases "
        "every agent's waiters",
        ("IDLE-2",), "2",
        (Patch("agent",
               "        self._waiters: list[IdleWaiter] = []\n",
               "        self._waiters: list[IdleWaiter] = []\n"
               "        # IDLE-2: waiters settle on the idle transition, observed on the bus\n"
               "        self._bus.on(\"agent/status\", lambda _agent, status: status == \"idle\" and self._release_waiters())\n"),
         Patch("agent",
               "        if status == \"idle\":\n"
               "            self._release_waiters()  # IDLE-3: before the event, so a throwing listener can't hang it\n",
               ""),),
        interleaving=True,
    ),
    Mutant(
        'waiter-future-per-await',
        'each await of a when_idle() waiter makes a fresh future, so of two tasks awaiting one waiter only the last is ever woken',
        ('IDLE-2',),
        '2',
        (
            Patch('agent',
                  '            if self._future is None:\n                self._future = asyncio.get_running_loop().create_future()\n',
                  '            self._future = asyncio.get_running_loop().create_future()\n'),
        ),
        interleaving=True,
        notes="Round 12: the suite passed it until test_a_waiter_awaited_twice_still_resolves_its_first_await; out of the hunt's reach (the world awaits each waiter once).",
    ),
]
