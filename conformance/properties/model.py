"""Generated whole scenarios: the data model and its hypothesis strategies.

A ``PropScenario`` is plain, frozen data (so hypothesis can shrink it and ``repr`` prints it as
ready-to-run Python): concurrent *actors* issuing operations on one agent, *listeners* that act
on the n-th occurrence of an event, the model's scripted *responses* (one per model call), and
the behaviour of two tools. The schedule is not part of it: it is drawn separately, through the
simulator's hypothesis strategy, so a failing example shrinks in both.
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import strategies as st

VERBS = ("send", "steer", "inject", "cancel", "abort", "dispose", "wait", "waiter", "sleep")
"""Actor operations. ``wait`` awaits ``when_idle()``; ``waiter`` registers one and awaits it in
the background (so it can be released while the actor goes on); ``sleep`` waits virtual time."""

EVENTS = (
    "status:running",
    "status:idle",
    "agent/turn-start",
    "agent/step-start",
    "agent/step-end",
    "agent/turn-end",
    "agent/turn-continuation",
    "session/flush",
)
"""Where a listener can act (``status:X``: an ``agent/status(X)`` notification)."""

ACTIONS = ("cancel", "send", "steer", "cancel+send", "send+cancel", "abort", "raise", "inject")
"""What a listener does when it fires (``raise`` throws from the listener; ``inject`` starts an
``inject()`` that runs at the listener's next suspension)."""

RESPONSES = (
    "text", "tools", "max-tokens", "max-tokens-tools", "error", "finish-aborted", "raise", "hang", "slow",
)
"""One model call: a clean text answer, tool calls, a ``max-tokens`` finish (with text, or with
tool calls that must not run), a ``finish{error}``, a raising stream, a stream that hangs until
its step is aborted, a ``finish{aborted}`` its step's signal did not cause, or a slow (virtual
0.5 s) text answer."""

TOOL_BEHAVIOURS = ("ok", "fail", "hang", "slow")
"""A tool succeeds, raises, hangs until its step is aborted, or takes virtual time."""


@dataclass(frozen=True)
class Op:
    """One actor operation (``seconds`` only for ``sleep``)."""

    verb: str
    seconds: float = 0.0


@dataclass(frozen=True)
class ListenerSpec:
    """Do ``action`` on the ``nth`` occurrence (1-based) of ``event``, once."""

    event: str
    action: str
    nth: int = 1


@dataclass(frozen=True)
class PropScenario:
    """A whole generated scenario (see the module docstring)."""

    actors: tuple[tuple[Op, ...], ...]
    listeners: tuple[ListenerSpec, ...] = ()
    responses: tuple[str, ...] = ()
    tools: tuple[str, str] = ("ok", "ok")


# Weighted by repetition: prompts are the point, disposal ends everything so it is rare.
_OPS: list[Op] = [
    *[Op("send")] * 6,
    *[Op("steer")] * 3,
    Op("inject"),
    *[Op("cancel")] * 3,
    Op("abort"),
    *[Op("wait")] * 2,
    *[Op("waiter")] * 2,
    *[Op("sleep", s) for s in (0.0, 0.0, 0.1, 0.6, 2.0)],
]


def ops() -> st.SearchStrategy[Op]:
    """One actor operation (disposal about 1 in 24)."""
    return st.sampled_from([*_OPS, Op("dispose")])


def scenarios(*, max_actors: int = 3, max_ops: int = 6) -> st.SearchStrategy[PropScenario]:
    """Whole scenarios: 1..``max_actors`` actors of 1..``max_ops`` operations, up to 3 listeners,
    up to 6 scripted responses, and the two tools' behaviour."""
    actor = st.lists(ops(), min_size=1, max_size=max_ops).map(tuple)
    # Biased towards acting early and towards the cancel-and-replace pair, where the races are.
    listener = st.builds(
        ListenerSpec,
        event=st.sampled_from(EVENTS),
        action=st.sampled_from([*ACTIONS, "cancel+send", "cancel+send", "steer"]),
        nth=st.sampled_from([1, 1, 1, 2, 3]),
    )
    return st.builds(
        PropScenario,
        actors=st.lists(actor, min_size=1, max_size=max_actors).map(tuple),
        listeners=st.lists(listener, min_size=1, max_size=3).map(tuple),
        responses=st.lists(st.sampled_from(RESPONSES), max_size=6).map(tuple),
        tools=st.tuples(st.sampled_from(TOOL_BEHAVIOURS), st.sampled_from(TOOL_BEHAVIOURS)),
    )
