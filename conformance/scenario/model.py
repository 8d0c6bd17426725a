"""The scenario model: a scenario is data.

A :class:`Scenario` says what world to build (agents, the fake models' scripts, fake tools),
who acts in it (``actors`` at a virtual time or after an observed event; ``listeners`` on the
implementation's bus, acting synchronously inside the emitter or around a waterfall's
``next()``), and what must hold (``checks``, on top of the always-on oracles). Every way of
writing a scenario produces this one model:

* a YAML file compiles to it (``yaml_format.load_file``; ``yaml_format.dump`` writes it back);
* a Python function builds it (``@loop_scenario``: the function is the scenario's ``body``,
  which drives a :class:`~conformance.scenario.world.World` for what data cannot say);
* the property generator generates it (``generate.scenarios()``);
* a race cassette stores it with its schedule (``race``);
* the rule tests run their bodies as scenarios (``conformance.harness``).

One engine (``engine``) runs any scenario on any implementation through the adapter.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from conformance import refs
from conformance.fakes import Outcome, Response

if TYPE_CHECKING:
    from .checks import LoopCheck
    from .world import World

Body = Callable[["World"], Awaitable[Any]]

DEFAULT_MAX_TIME = 3600.0
DEFAULT_MAX_STEPS = 200_000
DEFAULT_IDLE_TIMEOUT = 600.0
"""Virtual seconds the world waits for quiescence (a waiter, the final settle, the close)."""

LISTENER_VERBS = ("send", "steer", "inject", "cancel", "abort", "dispose", "raise", "when_idle", "close", "create",
                  "cancel_driver", "reconfigure", "reload", "stop", "answer")
"""What a listener may do: synchronous verbs only (it runs inside the emitter); ``stop`` only on
``agent/turn-continuation``, ``answer`` only on ``tools/execute``."""

RETURNED_VERBS: dict[str, str] = {"stop": "agent/turn-continuation", "answer": "tools/execute"}
"""The verbs that are a waterfall listener's own return value, and the one waterfall each belongs
to: ``stop`` a continuation listener's vote (CONT-1), ``answer`` a ``tools/execute`` listener's
result in place of ``next()`` (0b)."""

ACTOR_VERBS = (*(v for v in LISTENER_VERBS if v not in RETURNED_VERBS), "sleep", "wait_idle", "wait_for")
"""What an actor may do: the listener verbs (but ``stop`` and ``answer``, a waterfall's own return)
plus the awaiting ones."""


class ScenarioError(Exception):
    """A scenario cannot be loaded (one-line message naming the file, line and field)."""


@dataclass(frozen=True)
class Action:
    """One verb of an actor or a listener, with its argument.

    ``send``/``steer``/``inject`` carry ``text`` (passed as one text block in a list when
    ``blocks``); ``cancel``/``abort`` an optional ``reason``;
    ``when_idle``/``wait_idle`` the waiter's ``name``; ``sleep`` ``seconds``; ``wait_for`` an
    ``event`` kind and ``where``; ``raise`` a ``message``; ``close`` (the service's
    ``close()``, SVC-7) nothing; ``create`` (``service.create`` of the agent's id while it is
    live, SVC-2) nothing; ``cancel_driver`` (``Task.cancel()`` of the agent's driver task, the
    Python caller's way to stop it, PY-1) nothing; ``reconfigure`` (the service's sections
    and tools changed while the agents run, SVC-5: see ``World.reconfigure``) nothing; ``reload``
    (the agent's session resumed on a second service over the same backend while it runs, as
    after a process that died there, SVC-3: see ``World.reload``) nothing; ``stop`` (an
    ``agent/turn-continuation`` listener's vote to stop the turn, a plugin's force-stop, CONT-1)
    nothing; ``answer`` (a ``tools/execute`` listener answering the call itself, without calling
    ``next()``: the tool must not run, 0b) nothing.
    ``agent`` is the agent acted on (the
    scenario's first agent when ``None``). ``wait`` makes an actor's ``inject`` await the
    injection.
    """

    verb: str
    agent: str | None = None
    text: str | None = None
    reason: str | None = None
    name: str | None = None
    seconds: float | None = None
    wait: bool = False
    event: str | None = None
    where: Mapping[str, Any] | None = None
    message: str | None = None
    source: Mapping[str, Any] | None = None
    """The message source a ``send``/``steer``/``inject`` passes (``None``: the default, ``{kind:
    user}``)."""
    blocks: bool = False
    """Whether a ``send``/``steer``/``inject`` passes ``[{type: text, text}]`` rather than the
    string: a list the caller owns, which the world edits once the run is over (LOG-1)."""
    code: str | None = None
    """The ``code`` attribute of the error a ``raise`` throws (ERR-7: carried into the error event
    and the turn-end reason of a failure it causes)."""
    thrown: bool = False
    """Whether a ``raise`` throws a value that is no error object (``conformance.adapter.ThrownValue``:
    JavaScript's ``throw "text"`` over the wire, a plain exception in Python), as a careless plugin
    does: the turn still fails with one error event carrying the text (ERR-2)."""
    unserialisable: bool = False
    """Whether an ``inject`` passes a text block carrying a value JSON cannot encode (a set):
    INJ-4's bad input, which raises to the caller once the one-shot turn is closed and still
    has its flush run."""
    bad_source: bool = False
    """Whether an ``inject`` or a ``send`` passes a source carrying a value JSON cannot encode (a
    set): INJ-4's other bad input, which raises and writes nothing; a queued prompt whose source
    cannot be logged, which fails before its turn opens (ERR-8: announced with step 0, no turn
    owed, the loop goes on) or, drained behind another prompt, fails the turn it joined."""

    @property
    def awaits(self) -> bool:
        """Whether an actor awaits this action before its next one."""
        return self.verb in ("sleep", "wait_idle", "wait_for") or (self.verb == "inject" and self.wait)


@dataclass(frozen=True)
class Listener:
    """Act on the implementation's bus: ``do`` runs when the ``nth`` event ``on`` matching
    ``where`` is emitted (then on every later one with ``times="always"``).

    For a waterfall, ``when`` says whether the listener acts ``before`` or ``after`` calling
    ``next()``, and ``rewrite`` (fields) makes it return what ``next()`` returned with those
    fields replaced, as a plugin rewriting the value does (e.g. a ``tools/execute`` result under
    another ``call_id``, TOOL-4; on ``system-prompt``, whose value has no shape in the contract,
    ``{"system": TEXT}`` adds TEXT as a last paragraph of the assembled prompt, SVC-5); ``hold`` is how long (virtual seconds) a ``session/flush``
    listener takes, or a waterfall listener waits on each call it acts on before ``next()``
    (after, with ``when="after"``; ``math.inf``: for ever, a plugin that never returns), and ``plain`` makes a ``session/flush`` listener a plain function rather than
    a coroutine function (PY-2 allows both where the event is awaited: a plain one's throw comes
    at the call, not when the loop awaits it).
    ``edit`` (fields, ``tools/execute`` only) makes the listener set those fields in place on the
    execution it was given before it calls ``next()``, as a plugin adjusting a call does (``next()``
    takes no argument, so editing the value in place is how a plugin changes what the rest of the
    chain sees): the log still records the model's call id (TOOL-4).
    ``optional`` marks a listener that may legitimately never fire (otherwise a listener that
    never fired fails the run: the scenario did not test what it says).
    """

    on: str
    do: tuple[Action, ...]
    name: str = ""
    where: Mapping[str, Any] = field(default_factory=dict)
    nth: int = 1
    times: Literal["once", "always"] = "once"
    when: Literal["before", "after"] = "before"
    hold: float = 0.0
    optional: bool = False
    rewrite: Mapping[str, Any] | None = None
    plain: bool = False
    edit: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        for problem in (rewrite_problem(self.on, self.rewrite), edit_problem(self.on, self.when, self.edit)):
            if problem is not None:
                raise ScenarioError(f"listener {self.name or self.on!r}: {problem}")


def rewrite_problem(on: str, rewrite: Mapping[str, Any] | None) -> str | None:
    """What is wrong with a listener's ``rewrite`` of its event's value, if anything (the one
    rule the YAML reader, which says where, and :class:`Listener` both apply)."""
    if on == "system-prompt" and rewrite is not None and (
            set(rewrite) != {"system"} or not isinstance(rewrite["system"], str)):
        return "a system-prompt rewrite is {system: TEXT}, a paragraph the plugin adds to the assembled prompt"
    return None


def edit_problem(on: str, when: str, edit: Mapping[str, Any] | None) -> str | None:
    """What is wrong with where a listener's ``edit`` stands, if anything (as :func:`rewrite_problem`)."""
    if edit is not None and (on != "tools/execute" or when != "before"):
        return "edit (fields set in place on the execution before next()) goes with on: tools/execute, when: before"
    return None


@dataclass(frozen=True)
class Actor:
    """A caller: runs ``do`` in order as its own task, ``at`` a virtual time or ``after`` the
    ``nth`` observed event of a timeline kind matching ``where``. ``optional`` as for listeners."""

    do: tuple[Action, ...]
    name: str = ""
    at: float | None = None
    after: str | None = None
    where: Mapping[str, Any] | None = None
    optional: bool = False
    nth: int = 1


@dataclass(frozen=True)
class AgentSpec:
    """An agent the world creates at the start (``service.create(id, options)``), or, with
    ``resume``, resumes from a persisted session (``service.resume(id, resume)``, SVC-3: feature
    ``persistence``) whose earlier run answered each of ``history``'s prompts in a turn of its own."""

    id: str
    model: str = "fake"
    system_prompt: str | None = None
    resume: str | None = None
    """The session id to resume from (``None``: a fresh ``create``)."""
    history: tuple[str, ...] = ()
    """The prompts of the persisted run, one turn each (only with ``resume``)."""
    interrupted: bool = False
    """Whether the persisted run died inside one more turn, its model streaming (only with
    ``resume``): the loaded log ends inside a step, which the resume repairs (SVC-3, LOG-5)."""
    configured: bool = False
    """Whether the world creates it from configuration, ``service.load_config({agents: [{id,
    model, system_prompt}]})`` (SVC-4: feature ``configuration``; a plain ``create`` where the
    implementation lacks it), rather than with ``create``."""

    def __post_init__(self) -> None:
        if self.history and self.resume is None:
            raise ScenarioError(f"agent {self.id!r}: a history needs a session to resume (resume: SESSION)")
        if self.configured and self.resume is not None:
            raise ScenarioError(f"agent {self.id!r}: an agent is configured or resumed, not both")


@dataclass(frozen=True)
class ModelSpec:
    """A fake model registered under ``name``: its ``script`` (one response per call), and the
    ``default`` answer past the end of it (``None``: a call past the end is a failure)."""

    name: str = "fake"
    script: tuple[Response, ...] = ()
    default: Response | None = None
    edits_requests: bool = False
    """Whether the model edits the messages of each request it receives in place, as an adapter
    converting them to its provider's format may (the hunt's models do): the loop's log and later
    histories must not change with them (LOG-1, LOG-7)."""


@dataclass(frozen=True)
class ToolSpec:
    """A fake tool: every call has ``result`` (default ``"ok"``), or the calls go through
    ``results`` in order (``repeat_last`` keeps the last); ``latency`` in virtual seconds."""

    name: str
    result: Outcome | None = None
    results: tuple[Outcome, ...] | None = None
    latency: float | None = 0.0
    abort_aware: bool = True
    repeat_last: bool = False
    consumes_args: bool = False
    """The tool empties the arguments it receives (they are its own: TOOL-2)."""


@dataclass(frozen=True)
class CheckSpec:
    """A declared check: its ``kind`` (see ``checks.CHECK_KINDS``) and arguments."""

    kind: str
    args: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Limits:
    """Bounds of one run, in virtual seconds and simulator steps."""

    max_time: float = DEFAULT_MAX_TIME
    max_steps: int = DEFAULT_MAX_STEPS
    idle_timeout: float = DEFAULT_IDLE_TIMEOUT


@dataclass(frozen=True)
class Scenario:
    """A whole scenario (see the module docstring).

    The world builds, in order: the models, the tools, the agents, the listeners, the actors;
    then runs ``body`` (when there is one), waits for the actors, settles the agents (waits for
    quiescence, aborting a step that hangs) and closes the service. ``settle=False`` skips the
    settling (the rule tests close the service themselves); ``observe=False`` keeps the
    implementation's notifications and log out of the timeline (the rule tests read the log
    through the adapter; what they do not record costs nothing). ``source`` says where the scenario
    came from (``{"yaml": text, "path": ...}`` or ``{"python": "module:attr"}``): a race cassette
    stores it, so the scenario travels with the cassette.
    """

    name: str
    description: str = ""
    agents: tuple[AgentSpec, ...] = (AgentSpec("a"),)
    models: tuple[ModelSpec, ...] = (ModelSpec(),)
    tools: tuple[ToolSpec, ...] = ()
    sections: tuple[tuple[str, str], ...] = ()
    """System-prompt sections ``(name, text)`` the world adds to the service before the agents
    (SVC-5: every request's system prompt is the sections, then the agent's own, blank-line joined)."""
    listeners: tuple[Listener, ...] = ()
    actors: tuple[Actor, ...] = ()
    checks: tuple[CheckSpec | LoopCheck, ...] = ()
    limits: Limits = Limits()
    body: Body | None = field(default=None, compare=False)
    settle: bool = True
    observe: bool = True
    record_continuations: bool = True
    """Whether the world records the ``agent/turn-continuation`` waterfall (a pass-through
    listener, first in the chain: the CONTINUED oracle's input). ``False`` leaves the waterfall
    as the scenario's own listeners make it, often with none: a loop that reads "no listener"
    as "nothing to ask" must still honour what the gate decides without them (CANCEL-CONT)."""
    source: Mapping[str, Any] = field(default_factory=dict, compare=False)

    @property
    def agent_ids(self) -> list[str]:
        return [a.id for a in self.agents]

    def with_source(self, source: Mapping[str, Any]) -> Scenario:
        """The same scenario with another ``source``."""
        from dataclasses import replace

        return replace(self, source=dict(source))


def loop_scenario(
    fn: Body | None = None,
    *,
    name: str | None = None,
    checks: Sequence[CheckSpec | LoopCheck] = (),
    description: str = "",
    limits: Limits = Limits(),
    **parts: Any,
) -> Any:
    """Decorator: ``async def body(world)`` -> a :class:`Scenario` whose ``body`` it is (named
    after the function, dashes for underscores, unless ``name`` is given). The body builds what
    it needs through the world (``world.model``, ``world.agent``, ...); declarative ``parts``
    (``agents=``, ``models=``, ``listeners=``, ...) are built first. Bare or with options."""

    def deco(body: Body) -> Scenario:
        if not inspect.iscoroutinefunction(body):
            raise TypeError(f"@loop_scenario needs an async function, got {body!r}")
        parts.setdefault("agents", ())
        parts.setdefault("models", ())
        return Scenario(
            name=name or body.__name__.replace("_", "-"),
            description=description or inspect.getdoc(body) or "",
            checks=tuple(checks),
            limits=limits,
            body=body,
            source={"python": f"{body.__module__}:{body.__qualname__}"},
            **parts,
        )

    return deco(fn) if fn is not None else deco


def load(ref: str) -> Scenario:
    """A scenario from a YAML path or a ``module:attr`` reference (``ScenarioError`` otherwise)."""
    ref = ref.strip()
    if ref.endswith((".yaml", ".yml")) or Path(ref).is_file():
        from .yaml_format import load_file

        return load_file(ref)
    if refs.split(ref) is None:
        raise ScenarioError(f"{ref or repr(ref)}: not a scenario file (.yaml) or MODULE:ATTR reference")
    try:
        target = refs.resolve(ref)
    except refs.RefError as exc:
        raise ScenarioError(f"{ref}: {exc}") from None
    if not isinstance(target, Scenario):
        raise ScenarioError(f"{ref}: not a scenario (decorate an async function with @loop_scenario)")
    return target.with_source({"python": ref})


def from_source(source: Mapping[str, Any], *, origin: str = "cassette", line_offset: int = 0) -> Scenario:
    """Rebuild a scenario from its ``source`` (as stored in a race cassette)."""
    if "yaml" in source:
        from .yaml_format import load_text

        return load_text(str(source["yaml"]), origin=origin, path=source.get("path"), line_offset=line_offset)
    if "python" in source:
        return load(str(source["python"]))
    raise ScenarioError(f"{origin}: scenario: expected a 'yaml' text or a 'python' reference")
