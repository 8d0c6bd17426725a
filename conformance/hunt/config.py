"""What a hunt covers and how hard it searches: the actions and modes windows are made of, and
the hunt's :class:`Config`. A module of its own, free of the engine, so ``loopkit hunt --help``
shows the defaults without loading the simulation."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

VERBS = ("send", "steer", "inject", "cancel", "abort", "dispose", "when_idle", "raise", "close", "create",
         "cancel_driver", "reconfigure", "reload", "stop", "answer", "stall", "bad_inject")
"""The actions a window may do: a caller's, ``raise`` (the listener throws, as a plugin might:
last in a sequence, and only where a listener acts) and ``close`` (the service's ``close()``,
SVC-7: last in a sequence, after nothing or after the work or waiter it must deal with) and
``create`` (``service.create`` of the window's agent's id while it is live, SVC-2: alone) and
``cancel_driver`` (``Task.cancel()`` of the agent's driver task, PY-1: alone, and only on an
in-process Python implementation: one over the wire has no driver task here) and ``reconfigure``
(the service's first system-prompt section removed and one added, and its last tool removed when
two or more are registered, else a tool registered, SVC-5: alone) and ``reload`` (the agent's
session resumed on a second service over the same backend while it runs, as after a process that
died there, SVC-3 and the repair of a turn left open: alone, and only where the implementation has
the ``persistence`` feature) and ``stop`` (an ``agent/turn-continuation`` listener's vote to stop
the turn, as a plugin's force-stop, CONT-1: alone, by a listener, at that waterfall only) and
``answer`` (a ``tools/execute`` listener answering the call itself, never calling ``next()``, as
a caching or guarding plugin does: the tool must not run, and the call's result is the answer, 0b:
alone, by a listener, before that waterfall's ``next()`` only) and ``stall`` (a waterfall listener
that never returns, deaf to the step's signal, as a plugin's network call without a timeout: last
in a sequence, after nothing or a ``cancel`` or ``abort``, by a listener, before a
waterfall's ``next()`` only; the world disposes the agent when it does not settle, and disposal
must end the driver all the same, DISP-2) and ``bad_inject`` (an ``inject`` of content JSON cannot
encode, INJ-4: it raises once its one-shot turn is closed, and its flush has run by the time
``when_idle()`` resolves; alone or followed by a ``when_idle``, and only where the implementation
has the ``injection`` feature)."""

MODES = ("listener", "actor")
"""How a window acts: synchronously in a listener at its point, or by an actor started there."""


@dataclass(frozen=True)
class Config:
    """What a hunt covers and how hard it searches each window."""

    workloads: tuple[str, ...] = ()
    """The workloads by name (empty: every one the implementation's features allow)."""
    depth: int = 2
    nth: int = 3
    verbs: tuple[str, ...] = VERBS
    """The actions windows are made of (``inject`` only where the implementation has it,
    ``cancel_driver`` only in process)."""
    modes: tuple[str, ...] = MODES
    dfs: int = 2
    """Schedules of the bounded search from the window's point: one deviation from FIFO each, at
    the choice points right after the window acted, nearest first (``AnchoredStrategy``)."""
    random: int = 1
    pct: int = 1
    explore_all: bool = False
    """Explore the schedules of every reached, passing window, not only of the first window of
    each distinct trace: a slower, deeper hunt (each window's seeds are its own)."""
    twins: bool = True
    """Run one of each set of twin actor windows in phase 1 (their plain-order runs are the same
    run: :func:`~conformance.hunt.windows.twins`); ``False`` runs every window."""
    seed: int = 0
    cassettes: int = 1
    """Race cassettes per failure signature and workload (the first windows that show it)."""
    against: str | None = None
    """The implementation (spec) traces are compared with, window by window (``None``: none)."""

    def to_dict(self) -> dict[str, Any]:
        return {"workloads": list(self.workloads), "depth": self.depth, "nth": self.nth, "verbs": list(self.verbs),
                "modes": list(self.modes),
                "dfs": self.dfs, "random": self.random, "pct": self.pct, "explore_all": self.explore_all, "twins": self.twins, "seed": self.seed,
                "cassettes": self.cassettes, "against": self.against}
