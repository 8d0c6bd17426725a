"""The reference behind adapters that differ in one way: failing as the CLI must report in one
line (test_cli), lacking hooks (test_hooks), or made differently from it in ways the contract
allows (a persistence backend checked, a supervising driver task)."""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

from conformance.reference_adapter import ReferenceImplementation


class _Wrapped:
    """A service handle passing everything on to the reference's service but what it overrides."""

    def __init__(self, service: Any) -> None:
        self._service = service

    def __getattr__(self, name: str) -> Any:
        return getattr(self._service, name)


class _RaisingService(_Wrapped):
    def create(self, agent_id: str, options: Any = None) -> Any:
        raise RuntimeError("cannot build agents today\nsecond line that must not be printed")


class RaisingOnCreate(ReferenceImplementation):
    """The reference, except that building an agent raises."""

    def create_service(self, *, persistence: object | None = None) -> Any:
        return _RaisingService(super().create_service(persistence=persistence))


raises_on_create = RaisingOnCreate(name="raises-on-create")


class _NoAgentService(_Wrapped):
    def create(self, agent_id: str, options: Any = None) -> Any:
        return None


class NoAgentOnCreate(ReferenceImplementation):
    """The reference, except that ``create`` returns None."""

    def create_service(self, *, persistence: object | None = None) -> Any:
        return _NoAgentService(super().create_service(persistence=persistence))


no_agent_on_create = NoAgentOnCreate(name="no-agent-on-create")


def factory_that_raises() -> Any:
    raise ValueError("factory exploded")


not_an_implementation = 42


features_not_names = ReferenceImplementation(name="features-not-names")
object.__setattr__(features_not_names, "features", 7)  # a number, not a set of feature names


class _DeafService(_Wrapped):
    """A service whose bus never calls the listeners of some events (as if it had no such hook)."""

    def __init__(self, service: Any, deaf: frozenset[str]) -> None:
        super().__init__(service)
        self._deaf = deaf

    def on(self, event: str, listener: Any) -> Any:
        if event in self._deaf:
            return lambda: None
        return self._service.on(event, listener)


class WithoutHooks(ReferenceImplementation):
    """The reference without some notifications or waterfalls: listeners on them never run."""

    def __init__(self, *events: str) -> None:
        super().__init__(name=f"without {', '.join(events)}")
        self.deaf = frozenset(events)

    def create_service(self, *, persistence: object | None = None) -> Any:
        return _DeafService(super().create_service(persistence=persistence), self.deaf)


class OwnBackendsOnly(ReferenceImplementation):
    """The reference behind an adapter that takes only the persistence backends it made, as an
    implementation may check (the adapter protocol: a backend from ``new_persistence()``)."""

    def __init__(self) -> None:
        super().__init__(name="own-backends-only")
        self.made: list[object] = []

    def new_persistence(self) -> object:
        self.made.append(super().new_persistence())
        return self.made[-1]

    def create_service(self, *, persistence: object | None = None) -> Any:
        if persistence is not None and not any(persistence is p for p in self.made):
            raise TypeError("persistence must come from new_persistence()")
        return super().create_service(persistence=persistence)


class _SupervisedService(_Wrapped):
    """A service whose agents' driver task is a supervisor of its own: cancelled, its
    done-callback disposes the agent a few callbacks later (``hops``), as a loop that runs turns
    in tasks of their own and supervises them may."""

    def __init__(self, service: Any, hops: int) -> None:
        super().__init__(service)
        self._hops = hops
        self._tasks: dict[str, Any] = {}

    def driver_task(self, agent: Any) -> Any:
        task = self._tasks.get(agent.id)
        if task is None:
            loop = asyncio.get_running_loop()
            task = self._tasks[agent.id] = loop.create_task(asyncio.sleep(3600), name=f"supervisor-{agent.id}")

            def hop(left: int) -> None:
                if left:
                    loop.call_soon(hop, left - 1)
                else:
                    agent.dispose()

            task.add_done_callback(lambda _task: hop(self._hops))
        return task


class SupervisedDriver(ReferenceImplementation):
    """The reference, its driver task a supervisor whose cancellation disposes the agent from a
    done-callback (PY-1 holds: the agent ends disposed once the cancellation landed)."""

    def __init__(self, hops: int = 3) -> None:
        super().__init__(name="supervised-driver")
        self.hops = hops

    def create_service(self, *, persistence: object | None = None) -> Any:
        return _SupervisedService(super().create_service(persistence=persistence), self.hops)


class _StrandingAgent(_Wrapped):
    """An agent whose ``inject()`` writes nothing and returns an awaitable that never settles,
    as a loop whose inject waits on a driver that disposal ended may leave it."""

    def inject(self, content: Any, source: Any = None) -> Any:
        return asyncio.get_running_loop().create_future()


class _AgentWrappingService(_Wrapped):
    """A service handle whose agents are wrapped in ``wrap``."""

    def __init__(self, service: Any, wrap: type[_Wrapped]) -> None:
        super().__init__(service)
        self._wrap = wrap
        self._agents: dict[str, _Wrapped] = {}

    def create(self, agent_id: str, options: Any = None) -> Any:
        self._agents[agent_id] = self._wrap(self._service.create(agent_id, options))
        return self._agents[agent_id]

    def get(self, agent_id: str) -> Any:
        return self._agents.get(agent_id) if self._service.get(agent_id) is not None else None


class StrandedInject(ReferenceImplementation):
    """The reference, its ``inject()`` awaitable pending for ever (INJ-2)."""

    def __init__(self) -> None:
        super().__init__(name="stranded-inject")

    def create_service(self, *, persistence: object | None = None) -> Any:
        return _AgentWrappingService(super().create_service(persistence=persistence), _StrandingAgent)


class _SlowInjectAgent(_Wrapped):
    """An agent whose ``inject()`` is a coroutine that takes two virtual seconds before it does
    what the reference's does (writes, or raises on a disposed agent: INJ-4 lets an async
    inject await before raising)."""

    async def inject(self, content: Any, source: Any = None) -> None:
        await asyncio.sleep(2.0)
        result = self._service.inject(content, source)
        if inspect.isawaitable(result):
            await result


class SlowInject(ReferenceImplementation):
    """The reference, its ``inject()`` a slow coroutine (allowed)."""

    def __init__(self) -> None:
        super().__init__(name="slow-inject")

    def create_service(self, *, persistence: object | None = None) -> Any:
        return _AgentWrappingService(super().create_service(persistence=persistence), _SlowInjectAgent)


class _RepairAnnouncingService(_Wrapped):
    async def resume(self, agent_id: str, session_id: str, options: Any = None) -> Any:
        # an append announced before the agent exists, as a loop whose backend repairs the
        # loaded log through a session of its own does (session/event follows each append);
        # on a session of another id, so that the store the world keeps stays the reference's
        session = type("RepairedSession", (), {"id": f"{session_id}-repair"})()
        self._service.bus.emit("session/event", session,
                               {"seq": 0, "time": 0, "type": "step/end", "data": {"turn": 1, "step": 1}})
        return await self._service.resume(agent_id, session_id, options)


class RepairAnnounced(ReferenceImplementation):
    """The reference, with a resume that notifies ``session/event`` for its backend's repair of
    the loaded log before the agent exists (allowed: no rule says it is not)."""

    def create_service(self, *, persistence: object | None = None) -> Any:
        return _RepairAnnouncingService(super().create_service(persistence=persistence))


class _DriverNamedWhileRunning(_Wrapped):
    def __init__(self, service: Any, always: bool) -> None:
        super().__init__(service)
        self._always = always

    def driver_task(self, agent: Any) -> Any:
        waiting = agent.status == "idle" and not agent._inbox.has_queued  # the reference's own queue
        if self._always or waiting:
            return None
        return self._service.driver_task(agent)


class DriverPerTurn(ReferenceImplementation):
    """The reference, its adapter naming the driver task only while the agent has work (running,
    or something queued), as a loop that starts a task per turn has none while it waits
    (``always``: an adapter naming none at all)."""

    def __init__(self, always: bool = False) -> None:
        super().__init__(name="no-driver-task" if always else "driver-per-turn")
        self.always = always

    def create_service(self, *, persistence: object | None = None) -> Any:
        return _DriverNamedWhileRunning(super().create_service(persistence=persistence), self.always)
