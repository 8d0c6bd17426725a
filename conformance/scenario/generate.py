"""Generated scenarios: hypothesis strategies producing the one scenario model.

``scenarios()`` draws whole :class:`~.model.Scenario` values: concurrent *actors* issuing
operations on one agent, *listeners* that act on the n-th occurrence of an event, the model's
scripted *responses* (one per model call, then ``"ok"``), and the behaviour of two tools. The
schedule is not part of it: it is drawn separately (for example through the simulator's
hypothesis strategy), so a failing example shrinks in both. A generated scenario is ordinary
data: ``yaml_format.dump`` writes it out, ``loopkit run`` plays it, and its failing schedule is
its race cassette, with the same choice points.

Texts are static so a printed example sends the very same prompts: actor ``i``'s ``j``-th
operation sends ``a<i>.<j>``, listener ``i`` sends ``l<i>`` (all 1-based).
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from conformance.fakes import Response, fails, hangs, respond, returns

from .model import Action, Actor, Limits, Listener, ModelSpec, Scenario, ToolSpec

VERBS = ("send", "steer", "inject", "cancel", "abort", "dispose", "wait", "waiter", "sleep")
"""Actor operations. ``wait`` registers a ``when_idle()`` and awaits it; ``waiter`` registers one
in the background (so it can be released while the actor goes on); ``sleep`` waits virtual time."""

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

TOOLS = ("t0", "t1")

WAIT_LIMIT = 30.0
"""Virtual seconds the world gives a waiter or a hung step before acting (the idle timeout)."""

FLUSH_DELAY = 0.2
"""Virtual seconds a generated ``session/flush`` listener takes (a persistence flush takes time:
the agent is still running, its turn closed)."""

# Weighted by repetition: prompts are the point, disposal ends everything so it is rare.
_OPS: list[tuple[str, float]] = [
    *[("send", 0.0)] * 6,
    *[("steer", 0.0)] * 3,
    ("inject", 0.0),
    *[("cancel", 0.0)] * 3,
    ("abort", 0.0),
    *[("wait", 0.0)] * 2,
    *[("waiter", 0.0)] * 2,
    *[("sleep", s) for s in (0.0, 0.0, 0.1, 0.6, 2.0)],
]


def response(kind: str, index: int) -> Response:
    """The scripted response of one response kind (``index``: its position in the script)."""
    text = f"r{index}"
    if kind == "text":
        return respond.text(text)
    if kind == "slow":
        return respond.text(text).timing(first=0.5)
    if kind == "tools":
        return respond.tool_call(TOOLS[0], "{}", id=f"c{index}a") + respond.tool_call(TOOLS[1], '{"x": 1}', id=f"c{index}b")
    if kind == "max-tokens":
        return respond.text(text).finish("max-tokens")
    if kind == "max-tokens-tools":
        return (respond.text(text) + respond.tool_call(TOOLS[0], "{}", id=f"c{index}a")).finish("max-tokens")
    if kind == "error":
        return respond.text(text).finish("error", "model error", "E_MODEL")
    if kind == "raise":
        return respond.raises("model raised", code="E_RAISE")
    if kind == "finish-aborted":
        return respond.text(text).finish("aborted")
    if kind == "hang":
        return respond.hang()
    raise ValueError(f"unknown response kind {kind!r}")


def tool(name: str, behaviour: str) -> ToolSpec:
    """The fake tool of one behaviour."""
    if behaviour == "ok":
        return ToolSpec(name, returns("done"))
    if behaviour == "fail":
        return ToolSpec(name, fails("tool failed"))
    if behaviour == "hang":
        return ToolSpec(name, hangs())
    if behaviour == "slow":
        return ToolSpec(name, returns("done"), latency=0.5)
    raise ValueError(f"unknown tool behaviour {behaviour!r}")


def actor(index: int, ops: list[tuple[str, float]]) -> Actor:
    """Actor ``index`` (0-based) doing ``ops`` from time 0."""
    do: list[Action] = []
    for position, (verb, seconds) in enumerate(ops):
        text = f"a{index + 1}.{position + 1}"
        if verb in ("send", "steer"):
            do.append(Action(verb, text=text))
        elif verb == "inject":
            do.append(Action("inject", text=text, wait=True))
        elif verb in ("cancel", "abort", "dispose"):
            do.append(Action(verb))
        elif verb == "sleep":
            do.append(Action("sleep", seconds=seconds))
        else:  # wait, waiter
            name = f"w{index + 1}.{position + 1}"
            do.append(Action("when_idle", name=name))
            if verb == "wait":
                do.append(Action("wait_idle", name=name))
    return Actor(do=tuple(do), name=f"actor{index + 1}", at=0.0)


def listener(index: int, event: str, action: str, nth: int) -> Listener:
    """Listener ``index`` (0-based): ``action`` on the ``nth`` ``event`` (see ``EVENTS``)."""
    text = f"l{index + 1}"
    where: dict[str, Any] = {}
    on = event
    if event.startswith("status:"):
        on, where = "agent/status", {"status": event.removeprefix("status:")}
    do: list[Action] = []
    if action == "raise":
        do.append(Action("raise", message=f"listener {index + 1} raised"))
    else:
        for verb in action.split("+"):
            do.append(Action(verb, text=text) if verb in ("send", "steer", "inject") else Action(verb))
    return Listener(on=on, do=tuple(do), name=f"listener{index + 1}", where=where, nth=nth,
                    hold=FLUSH_DELAY if on == "session/flush" else 0.0, optional=True)


def build(
    actors: list[list[tuple[str, float]]],
    listeners: list[tuple[str, str, int]] = (),  # type: ignore[assignment]
    responses: list[str] = (),  # type: ignore[assignment]
    tools: tuple[str, str] = ("ok", "ok"),
    name: str = "generated",
) -> Scenario:
    """A generated scenario from its plan (what ``scenarios()`` draws)."""
    return Scenario(
        name=name,
        description="a generated scenario (conformance.scenario.generate)",
        models=(ModelSpec("fake", tuple(response(k, i) for i, k in enumerate(responses)), respond.text("ok")),),
        tools=tuple(tool(n, b) for n, b in zip(TOOLS, tools, strict=True)),
        listeners=tuple(listener(i, *spec) for i, spec in enumerate(listeners)),
        actors=tuple(actor(i, ops) for i, ops in enumerate(actors)),
        limits=Limits(idle_timeout=WAIT_LIMIT),
    )


def ops() -> st.SearchStrategy[tuple[str, float]]:
    """One actor operation (disposal about 1 in 24)."""
    return st.sampled_from([*_OPS, ("dispose", 0.0)])


def scenarios(*, max_actors: int = 3, max_ops: int = 6) -> st.SearchStrategy[Scenario]:
    """Whole scenarios: 1..``max_actors`` actors of 1..``max_ops`` operations, up to 3 listeners,
    up to 6 scripted responses, and the two tools' behaviour."""
    actor_ops = st.lists(ops(), min_size=1, max_size=max_ops)
    # Biased towards acting early and towards the cancel-and-replace pair, where the races are.
    listener_spec = st.tuples(
        st.sampled_from(EVENTS),
        st.sampled_from([*ACTIONS, "cancel+send", "cancel+send", "steer"]),
        st.sampled_from([1, 1, 1, 2, 3]),
    )
    return st.builds(
        build,
        actors=st.lists(actor_ops, min_size=1, max_size=max_actors),
        listeners=st.lists(listener_spec, min_size=1, max_size=3),
        responses=st.lists(st.sampled_from(RESPONSES), max_size=6),
        tools=st.tuples(st.sampled_from(TOOL_BEHAVIOURS), st.sampled_from(TOOL_BEHAVIOURS)),
    )
