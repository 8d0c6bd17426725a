"""Scratch buggy variants of the reference (the real catalogue lives in ``conformance.mutants``):
the two cancel-window races of the seed, for the scenario tests. Usable as ``--impl
buggy_loops:window1`` / ``buggy_loops:window2`` once this directory is on ``sys.path``."""

from __future__ import annotations

from typing import Any

from conformance.reference_adapter import ReferenceImplementation
from reference_loop import AgentLoopService
from reference_loop.agent import ReactLoopAgent
from reference_loop.session import Session


class _Agent(ReactLoopAgent):
    window1_bug = False
    window2_bug = False

    async def _drive(self) -> None:
        # The reference's driver loop with the two windows' pre-fix behaviour switchable.
        try:
            while not self._disposed:
                await self._inbox.wait_for_queued(lambda: self._disposed or self._marker is not None)
                if self._disposed:
                    break
                if self._marker is not None:
                    self._marker = None
                    if self.window1_bug:
                        self._release_waiters()  # BUG: even though a replacement is queued
                    if not self._inbox.has_queued:
                        self._release_waiters()
                        continue
                self._set_status("running")
                if self._disposed:
                    break
                if self._marker is not None:
                    self._marker = None
                    if self.window2_bug or not self._inbox.has_queued:
                        self._set_status("idle")  # BUG (window2_bug): settles idle unconditionally
                        continue
                await self._run_turn()
                self._marker = None
                for late in self._inbox.drain_steering():
                    self._inbox.enqueue(late)
                if self._disposed:
                    break
                if not self._inbox.has_queued:
                    self._set_status("idle")
        except BaseException:
            self.dispose()
            raise
        finally:
            if self._exited is not None and not self._exited.done():
                self._exited.set_result(None)


class _W1(_Agent):
    window1_bug = True


class _W2(_Agent):
    window2_bug = True


def _service(agent_class: type[ReactLoopAgent]) -> Any:
    class Service(AgentLoopService):
        def _make(self, agent_id: str, session_id: str, options: dict[str, Any], meta: Any, events: Any) -> ReactLoopAgent:
            session = Session(session_id, self.bus, self.sources, events)
            agent = agent_class(self, agent_id, session, options, meta, on_dispose=self._forget)
            self._agents[agent_id] = agent
            self._created.append(agent)
            return agent

    return Service


window1 = ReferenceImplementation(name="buggy:window1", service_factory=_service(_W1))
window2 = ReferenceImplementation(name="buggy:window2", service_factory=_service(_W2))
same = ReferenceImplementation(name="buggy:none", service_factory=_service(_Agent))
