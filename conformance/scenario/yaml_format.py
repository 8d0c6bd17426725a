"""The YAML scenario format: validated into the scenario model (errors name the line and the
field), and written back from it. The full schema is in docs/scenarios.md; in short::

    name: window2                       # required
    description: a running-status listener cancels A and sends B
    limits: {max_time: 3600, idle_timeout: 600}      # virtual seconds
    agents: [a]                         # ids, or {id, model, system_prompt, resume, history, interrupted, configured}; default [a]
    model:                              # the script of model "fake" (or models: {name: [...]})
      - "plain text reply"
      - {text: "slow reply", delay: 3}  # text|reasoning|tool_call|blocks|error|raises|hang|empty|aborted
      - {raises: unavailable, code: E, raise_on_call: true}   # stream() itself raises (FINISH-2)
      - {text: "cut", finish: {kind: error, message: overloaded, code: E}}
    tools:
      search: {results: ["3 cats", {fails: "rate limited", code: RATE}], latency: 1}
    sections: {rules: "Answer briefly."} # system-prompt sections, in order (SVC-5)
    listeners:
      - on: agent/status                # a notification, a waterfall, session/event or session/flush
        where: {status: running}        # filter on the event's fields
        nth: 1                          # act from the n-th matching event on (default 1)
        times: once                     # once (default) | always
        do: [{cancel: w2}, {send: B}]   # cancel|send|steer|inject|abort|dispose|raise|when_idle|close|create
    actors:
      - name: caller
        at: 0                           # or after: {event: KIND, where: {...}}
        do: [{send: A}, {when_idle: w}, {wait_idle: w}]   # + sleep, wait_for, inject: {text, wait: true}
    checks:
      - released_after_turn: {waiter: w, prompt: B}

``load_text`` / ``load_file`` read it; ``dump`` writes a scenario (for example a generated one)
as YAML that reads back to the same scenario. A scenario holding what YAML cannot say (a Python
body or check, a gate, a hook, a raw chunk) raises :class:`Undumpable`.
"""

from __future__ import annotations

import difflib
import json
import math
import re
from pathlib import Path
from typing import Any

import yaml

from cassettes import inputs
from conformance.fakes import Outcome, Response, fails, hangs, respond, returns
from conformance.fakes.errors import FakeError
from conformance.fakes.model import BlockPart, RawPart
from reference_loop.vocabulary import CHUNK_TYPES

from . import checks as ck
from . import events as ev
from .model import (
    ACTOR_VERBS,
    DEFAULT_IDLE_TIMEOUT,
    DEFAULT_MAX_STEPS,
    DEFAULT_MAX_TIME,
    LISTENER_VERBS,
    Action,
    Actor,
    AgentSpec,
    CheckSpec,
    Limits,
    Listener,
    ModelSpec,
    Scenario,
    ScenarioError,
    ToolSpec,
    edit_problem,
    rewrite_problem,
)
from .yaml_reader import Node, mixed_up, parse

TOP = ("name", "description", "limits", "agents", "model", "models", "tools", "sections", "listeners",
       "actors", "checks", "record_continuations")
RESPONSE_KINDS = ("text", "reasoning", "tool_call", "blocks", "chunks", "error", "raises", "hang", "empty", "aborted")
RESPONSE_MODIFIERS = ("deltas", "code", "usage", "finish", "truncate", "delay", "between",
                      "hang_after", "raise_after", "raise_on_call", "on_abort")
FINISH_KINDS = ("stop", "tool-calls", "max-tokens", "aborted", "error")
LISTENER_FIELDS = ("name", "on", "where", "nth", "times", "when", "hold", "plain", "rewrite", "edit", "optional", "do")
ACTOR_FIELDS = ("name", "at", "after", "nth", "optional", "do")
EVENT_FIELDS: dict[str, tuple[str, ...]] = {
    "agent/status": ("agent", "status"),
    "agent/queued": ("agent", "text", "steering", "source"),
    "agent/turn-start": ("agent", "turn"),
    "agent/turn-end": ("agent", "turn", "reason", "detail"),
    "agent/step-start": ("agent", "turn", "step"),
    "agent/step-end": ("agent", "turn", "step"),
    "agent/stream-chunk": ("agent", "turn", "step", "chunk"),
    "agent/steering": ("agent", "turn", "text", "source"),
    "agent/error": ("agent", "turn", "step", "error"),
    "session/event": ("agent", "type", "seq", "turn", "step"),
    "agent/request": ("agent", "turn", "step"),
    "agent/step-result": ("agent", "turn", "step"),
    "agent/turn-continuation": ("agent", "turn", "decision"),
    "tools/execute": ("agent", "name", "call_id"),
    "system-prompt": ("agent",),
    "session/flush": ("agent",),
    **ev.WORLD_POINTS,
}
"""Every event a listener may be registered on, and the fields its ``where`` may filter on."""

STATUSES = ("idle", "running", "disposed")
"""The values of ``agent/status``."""

MAX_AGENTS = 1_000
"""Agents a scenario may create: the judge reads each agent's log, and a run of thousands would
take minutes past ``--timeout`` (which limits the implementation, not the kit's judging)."""
MAX_SECONDS = 1e9
"""The largest virtual time a scenario may name (about 31 years): anything larger is a typo."""


_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)  # libyaml when present: ~20x faster


class Undumpable(ValueError):
    """The scenario holds something YAML cannot say (the message says what)."""


# --------------------------------------------------------------------------- entry points


def load_file(path: str | Path) -> Scenario:
    """Load and validate a scenario file."""
    try:
        text = inputs.read_text(path)
    except FileNotFoundError:
        raise ScenarioError(f"{path}: no such scenario file") from None
    except OSError as exc:
        raise ScenarioError(f"{path}: cannot read the scenario: {exc}") from None
    return load_text(text, origin=str(path), path=str(path))


def load_text(text: str, *, origin: str = "<scenario>", path: str | None = None, line_offset: int = 0) -> Scenario:
    """Validate YAML scenario text into a :class:`Scenario` (``origin`` names it in errors)."""
    root = parse(text, origin, line_offset=line_offset)
    mix_up = mixed_up(root, "scenario", path or origin)
    if mix_up is not None:
        raise mix_up
    source: dict[str, Any] = {"yaml": text}
    if path is not None:
        source["path"] = path
    return read_scenario(root).with_source(source)


# --------------------------------------------------------------------------- reading


_FINISH_KIND = re.compile(r"[a-z][a-z0-9_-]*")


def _finish_kind(node: Node) -> str:
    """A finish kind: one of ``FINISH_KINDS``, or another lower-case word (section 0: the set is
    open, and an unknown kind counts as a success; a provider's ``content-filter``, say)."""
    value = node.string()
    if value not in FINISH_KINDS and not _FINISH_KIND.fullmatch(value):
        raise node.error(f"expected one of {', '.join(FINISH_KINDS)} or another lower-case kind, got {value!r}")
    return value


def _pause(node: Node) -> float | None:
    """A response's ``delay``/``between``: seconds, or null for no suspension at all."""
    return None if node.value() is None else _seconds(node)


def _name(node: Node, what: str) -> str:
    """A name (an agent's id): a string with something in it."""
    value = node.string()
    if not value.strip():
        raise node.error(f"{what} cannot be empty, got {value!r}")
    return value


def _seconds(node: Node, *, minimum: float = 0.0) -> float:
    value = node.number(minimum=minimum)
    if not math.isfinite(value) or value > MAX_SECONDS:
        raise node.error(f"must be a finite number of seconds up to {MAX_SECONDS:g}, got {value}")
    return value


def read_scenario(root: Node) -> Scenario:
    """A :class:`Scenario` from a composed scenario document."""
    fields = root.keys(TOP, required=("name",))
    name = fields["name"].string()
    description = fields["description"].string() if "description" in fields else ""
    limits = Limits()
    if "limits" in fields:
        lf = fields["limits"].keys(("max_time", "idle_timeout", "max_steps"))
        limits = Limits(
            max_time=_seconds(lf["max_time"], minimum=1.0) if "max_time" in lf else DEFAULT_MAX_TIME,
            max_steps=lf["max_steps"].integer(minimum=1) if "max_steps" in lf else DEFAULT_MAX_STEPS,
            idle_timeout=_seconds(lf["idle_timeout"], minimum=0.001) if "idle_timeout" in lf else DEFAULT_IDLE_TIMEOUT,
        )
    agents, agent_nodes = _agents(fields.get("agents"))
    agent_ids = [a.id for a in agents]
    if "model" in fields and "models" in fields:
        raise fields["models"].error("give either 'model' (the script of model 'fake') or 'models', not both")
    models: list[ModelSpec] = []
    if "model" in fields:
        models.append(_model("fake", fields["model"]))
    for model_name, node in (fields["models"].entries() if "models" in fields else []):
        models.append(_model(model_name, node))
    if not models:
        models.append(ModelSpec())
    for agent, node in zip(agents, agent_nodes, strict=False):
        if agent.model not in {m.name for m in models}:
            raise node.error(f"agent {agent.id!r} uses model {agent.model!r}, which the scenario does not define")
    tools = tuple(_tool(n, node) for n, node in (fields["tools"].entries() if "tools" in fields else []))
    sections = tuple((n, node.string()) for n, node in (fields["sections"].entries() if "sections" in fields else []))
    listener_nodes = fields["listeners"].items() if "listeners" in fields else []
    listeners = tuple(_listener(node, agent_ids) for node in listener_nodes)
    actor_nodes = fields["actors"].items() if "actors" in fields else []
    actors = tuple(_actor(node, agent_ids) for node in actor_nodes)
    for actor, node in zip(actors, actor_nodes, strict=True):
        if actor.at is not None and actor.at >= limits.max_time:
            # the run's virtual time ends first: the actor would never act, and the run be over budget
            raise node.keys(ACTOR_FIELDS)["at"].error(f"{actor.at:g} is not before the scenario's limits.max_time "
                                                      f"({limits.max_time:g} seconds)")
    _check_names(listeners, listener_nodes, actors, actor_nodes)
    waiters = _check_waiters(listeners, listener_nodes, actors, actor_nodes)
    checks = tuple(_check(node, agent_ids, waiters) for node in fields["checks"].items()) if "checks" in fields else ()
    # false: the world adds no listener of its own to agent/turn-continuation (see Scenario)
    record = fields["record_continuations"].boolean() if "record_continuations" in fields else True
    return Scenario(name=name, description=description, agents=agents, models=tuple(models), tools=tools,
                    sections=sections, listeners=listeners, actors=actors, checks=checks, limits=limits,
                    record_continuations=record)


def _agents(node: Node | None) -> tuple[tuple[AgentSpec, ...], list[Node]]:
    if node is None:
        return (AgentSpec("a"),), []
    out: list[AgentSpec] = []
    items = node.items()
    if not items:
        raise node.error("needs at least one agent")
    if len(items) > MAX_AGENTS:
        raise node.error(f"{len(items):,} agents: a scenario has at most {MAX_AGENTS:,}")
    for item in items:
        if item.is_scalar():
            out.append(AgentSpec(_name(item, "an agent id")))
            continue
        f = item.keys(("id", "model", "system_prompt", "resume", "history", "interrupted", "configured"),
                      required=("id",))
        for key in ("history", "interrupted"):
            if key in f and "resume" not in f:
                raise f[key].error(f"{'a history' if key == 'history' else 'an interrupted run'} needs a session to "
                                   "resume (resume: SESSION)")
        if "configured" in f and "resume" in f and f["configured"].boolean():
            raise f["configured"].error("an agent is configured or resumed, not both")
        out.append(AgentSpec(
            _name(f["id"], "an agent id"),
            f["model"].string() if "model" in f else "fake",
            f["system_prompt"].string() if "system_prompt" in f else None,
            f["resume"].string() if "resume" in f else None,
            tuple(h.string() for h in f["history"].items()) if "history" in f else (),
            f["interrupted"].boolean() if "interrupted" in f else False,
            f["configured"].boolean() if "configured" in f else False,
        ))
    seen: set[str] = set()
    for agent, item in zip(out, items, strict=True):
        if agent.id in seen:
            raise item.error(f"duplicate agent id {agent.id!r}")
        seen.add(agent.id)
    return tuple(out), items


# --------------------------------------------------------------------------- the model


def _model(name: str, node: Node) -> ModelSpec:
    if node.is_map():
        f = node.keys(("script", "default", "edits_requests"))
        script = tuple(_response(item) for item in f["script"].items()) if "script" in f else ()
        default = _response(f["default"]) if "default" in f else None
        edits = f["edits_requests"].boolean() if "edits_requests" in f else False
        return ModelSpec(name, script, default, edits)
    return ModelSpec(name, tuple(_response(item) for item in node.items()))


def _response(node: Node) -> Response:
    if node.is_scalar():
        return respond.text(node.string())
    f = node.keys(RESPONSE_KINDS + RESPONSE_MODIFIERS)
    kinds = [k for k in RESPONSE_KINDS if k in f]
    # `raises` beside content is a modifier: the stream raises once that content is out (or
    # after `raise_after` chunks), as a connection lost mid-answer does
    raising = len(kinds) == 2 and "raises" in kinds and kinds[0] in ("text", "reasoning", "tool_call", "blocks")
    if raising:
        kinds.remove("raises")
    if len(kinds) != 1:
        raise node.error(f"a response needs exactly one of: {', '.join(RESPONSE_KINDS)} (got {kinds or 'none'})")
    kind = kinds[0]
    value = f[kind]
    code = f["code"].string() if "code" in f else None
    response: Response
    if kind in ("text", "reasoning"):
        deltas = f["deltas"].integer(minimum=1) if "deltas" in f else 1
        response = getattr(respond, kind)(value.string(), deltas=deltas)
    elif kind == "tool_call":
        response = _tool_call(value)
    elif kind == "blocks":
        response = respond()
        for block in value.items():
            bf = block.keys(("text", "reasoning", "tool_call"))
            if len(bf) != 1:
                raise block.error("a block is one of: text, reasoning, tool_call")
            (bkind, bnode), = bf.items()
            response = response + (_tool_call(bnode) if bkind == "tool_call" else getattr(respond, bkind)(bnode.string()))
    elif kind == "chunks":
        # Raw chunks, streamed verbatim (a malformed or unusual stream: deltas after block-end,
        # blocks closing out of order); the scenario is responsible for the adapter contract.
        chunks = []
        for item in value.items():
            if not item.is_map() or item.keys(tuple(k for k, _ in item.entries())).get("type") is None:
                raise item.error("a chunk is a mapping with a 'type'")
            chunk = item.value()
            if chunk["type"] not in CHUNK_TYPES:
                raise item.error(f"unknown chunk type {chunk['type']!r} (expected one of: {', '.join(sorted(CHUNK_TYPES))})")
            chunks.append(chunk)
        response = respond.chunks(*chunks)
    elif kind == "error":
        response = respond.error(value.string(), code)
    elif kind == "raises":
        # raise_on_call: stream() itself raises, before it returns a stream (FINISH-2)
        on_call = "raise_on_call" in f and f["raise_on_call"].boolean()
        if on_call and "raise_after" in f:
            raise f["raise_on_call"].error("raise_on_call has no position: leave raise_after out")
        position = f["raise_after"].integer() + 1 if "raise_after" in f else 0
        response = Response().raises(value.string(), code=code, on_call=True) if on_call \
            else Response().raises(value.string(), code=code, before=position)
    elif kind == "hang":
        if not value.boolean():
            raise value.error("use hang: true (or leave it out)")
        response = respond.hang()
    elif kind == "empty":
        response = respond.empty()
    else:
        response = respond.aborted()
    if "usage" in f:
        usage = f["usage"].items()
        if len(usage) != 2:
            raise f["usage"].error("expected [input_tokens, output_tokens]")
        response = response.usage(usage[0].integer(), usage[1].integer())
    if "finish" in f:
        fin = f["finish"]
        if fin.is_map():
            ff = fin.keys(("kind", "message", "code"), required=("kind",))
            response = response.finish(_finish_kind(ff["kind"]),
                                       ff["message"].string() if "message" in ff else None,
                                       ff["code"].string() if "code" in ff else None)
        else:
            response = response.finish(_finish_kind(fin))
    if "truncate" in f:
        response = response.truncate(f["truncate"].integer())
    if "delay" in f or "between" in f:
        # null: no suspension at all (chunks arriving in one burst, as from one network read)
        first = _pause(f["delay"]) if "delay" in f else 0.0
        between = _pause(f["between"]) if "between" in f else 0.0
        response = response.timing(first=first, between=between)
    if "hang_after" in f:
        response = response.hang(after=f["hang_after"].integer())
    if raising:
        position = f["raise_after"].integer(minimum=1) + 1 if "raise_after" in f else -1
        response = response.raises(f["raises"].string(), code=code, before=position)
    elif "raise_after" in f and kind != "raises":
        raise f["raise_after"].error("raise_after goes with raises: MESSAGE")
    if "raise_on_call" in f and (kind != "raises" or raising):
        raise f["raise_on_call"].error("raise_on_call goes with raises: MESSAGE alone (no content)")
    if "on_abort" in f:
        response = response.on_abort(f["on_abort"].choice(("finish", "return", "raise", "fail", "ignore")))  # type: ignore[arg-type]
    try:
        response.build()
    except ValueError as exc:
        raise node.error(str(exc)) from None
    return response


def _tool_call(node: Node) -> Response:
    if node.is_scalar():
        return respond.tool_call(node.string())
    f = node.keys(("name", "args", "id", "fragments"), required=("name",))
    args: Any = None
    if "args" in f:
        args = f["args"].value() if not f["args"].is_scalar() else f["args"].string()
    return respond.tool_call(
        f["name"].string(), args,
        id=f["id"].string() if "id" in f else None,
        fragments=f["fragments"].integer(minimum=1) if "fragments" in f else 1,
    )


# --------------------------------------------------------------------------- tools


def _tool(name: str, node: Node) -> ToolSpec:
    if not name.strip():
        raise node.error(f"a tool needs a name, got {name!r}")
    if node.is_scalar():
        return ToolSpec(name, returns(node.string()))
    f = node.keys(("result", "results", "fails", "code", "hangs", "latency", "abort_aware", "repeat_last",
                   "consumes_args"))
    given = [k for k in ("result", "results", "fails", "hangs") if k in f]
    if len(given) > 1:
        raise node.error(f"give one of result, results, fails, hangs (got {', '.join(given)})")
    if "code" in f and "fails" not in f:
        raise f["code"].error("code goes with fails: MESSAGE")
    result: Outcome | None = None
    results: tuple[Outcome, ...] | None = None
    if "result" in f:
        result = returns(_result(f["result"]))
    elif "fails" in f:
        result = fails(f["fails"].string(), code=f["code"].string() if "code" in f else None)
    elif "hangs" in f:
        if not f["hangs"].boolean():
            raise f["hangs"].error("use hangs: true (or leave it out)")
        result = hangs()
    elif "results" in f:
        results = tuple(_tool_outcome(item) for item in f["results"].items())
    return ToolSpec(
        name, result, results,
        latency=_seconds(f["latency"]) if "latency" in f else 0.0,
        abort_aware=f["abort_aware"].boolean() if "abort_aware" in f else True,
        repeat_last=f["repeat_last"].boolean() if "repeat_last" in f else False,
        consumes_args=f["consumes_args"].boolean() if "consumes_args" in f else False,
    )


def _tool_outcome(node: Node) -> Outcome:
    if node.is_scalar():
        return returns(node.string())
    f = node.keys(("result", "fails", "code", "hangs", "latency"))
    latency: dict[str, Any] = {"latency": _seconds(f["latency"])} if "latency" in f else {}
    if "fails" in f:
        return fails(f["fails"].string(), code=f["code"].string() if "code" in f else None, **latency)
    if "hangs" in f:
        return hangs(**latency)
    if "result" in f:
        return returns(_result(f["result"]), **latency)
    raise node.error("a result is a string or one of {result: ...}, {fails: ...}, {hangs: true}")


def _result(node: Node) -> Any:
    """A tool's result: a string, or a list of content blocks (``[{type: text, text: ...}]``)."""
    if not node.is_list():
        return node.string()
    blocks = node.value()
    for i, block in enumerate(blocks):
        if not isinstance(block, dict) or not isinstance(block.get("type"), str):
            raise node.items()[i].error("a tool result is a string or a list of content blocks, each a mapping "
                                        "with a type ({type: text, text: ...})")
    return blocks


# --------------------------------------------------------------------------- actions


def _agent_ref(node: Node, agents: list[str]) -> str:
    agent = node.string()
    if agent not in agents:
        raise node.error(f"unknown agent {agent!r} (agents: {', '.join(agents)})")
    return agent


_SOURCE_KINDS = {"user": (), "plugin": ("plugin",), "agent": ("agent_id",)}


def _source(node: Node) -> dict[str, Any]:
    """A message source (spec section 0): ``{kind: user}``, ``{kind: plugin, plugin: NAME}`` or
    ``{kind: agent, agent_id: ID}``."""
    if not node.is_map():
        raise node.error("a source is a mapping like {kind: plugin, plugin: NAME}")
    fields = node.scalars()
    kind = fields.get("kind")
    if kind not in _SOURCE_KINDS:
        raise node.error(f"a source has kind user, plugin or agent, got {kind!r}")
    missing = [k for k in _SOURCE_KINDS[kind] if k not in fields]
    if missing:
        raise node.error(f"a source of kind {kind} needs {missing[0]!r}")
    return dict(fields)


def _action(node: Node, agents: list[str], allowed: tuple[str, ...]) -> Action:
    """One action: ``{VERB: ARGUMENT}``."""
    if not node.is_map():
        raise node.error(f"an action is a mapping like {{send: TEXT}}, got {node.kind}")
    entries = node.entries()
    if len(entries) != 1:
        raise node.error(f"an action has exactly one verb (one of: {', '.join(allowed)})")
    verb, arg = entries[0]
    if verb not in allowed:
        where = "in a listener (listeners run synchronously inside the emitter) " if verb in ACTOR_VERBS else ""
        raise arg.error(f"unknown action {verb!r} {where}(expected one of: {', '.join(allowed)})")
    if verb in ("send", "steer", "inject"):
        if arg.is_map():
            f = arg.keys(("text", "agent", "source", "blocks", "wait", "unserialisable", "bad_source") if verb == "inject"
                         else ("text", "agent", "source", "blocks", "bad_source") if verb == "send"
                         else ("text", "agent", "source", "blocks"), required=("text",))
            wait = f["wait"].boolean() if "wait" in f else False
            if wait and "wait_idle" not in allowed:
                raise f["wait"].error("an inject in a listener cannot wait (listeners run synchronously "
                                      "inside the emitter)")
            return Action(verb, _agent_ref(f["agent"], agents) if "agent" in f else None, text=f["text"].text(),
                          wait=wait, source=_source(f["source"]) if "source" in f else None,
                          blocks=f["blocks"].boolean() if "blocks" in f else False,
                          unserialisable=f["unserialisable"].boolean() if "unserialisable" in f else False,
                          bad_source=f["bad_source"].boolean() if "bad_source" in f else False)
        return Action(verb, text=arg.text())
    if verb in ("cancel", "abort"):
        if arg.is_map():
            f = arg.keys(("reason", "agent"))
            return Action(verb, _agent_ref(f["agent"], agents) if "agent" in f else None,
                          reason=f["reason"].string() if "reason" in f else None)
        return Action(verb, reason=None if arg.value() is None else arg.string())
    if verb in ("dispose", "create", "cancel_driver", "reload"):  # create: AGENT, whose live id it takes again (SVC-2)
        if arg.is_map():
            return Action(verb, _agent_ref(arg.keys(("agent",), required=("agent",))["agent"], agents))
        return Action(verb, None if arg.value() is None else _agent_ref(arg, agents))
    if verb == "raise":
        if arg.is_map():
            f = arg.keys(("message", "code", "thrown"))
            if "code" in f and "thrown" in f and f["thrown"].boolean():
                raise arg.error("a thrown value (thrown: true) is no error object: it has no code")
            return Action(verb, message=f["message"].string() if "message" in f else "listener failure",
                          code=f["code"].string() if "code" in f else None,
                          thrown=f["thrown"].boolean() if "thrown" in f else False)
        return Action(verb, message=arg.string() if arg.value() is not None else "listener failure")
    if verb in ("close", "reconfigure"):
        if arg.value() is not None:
            raise arg.error(f"{verb} takes no argument (it acts on the service: {{{verb}: null}})")
        return Action(verb)
    if verb == "stop":
        if arg.value() is not None:
            raise arg.error("stop takes no argument (the listener votes to stop the turn: {stop: null})")
        return Action(verb)
    if verb == "answer":
        if arg.value() is not None:
            raise arg.error("answer takes no argument (the listener answers the tool call itself: {answer: null})")
        return Action(verb)
    if verb == "when_idle":
        if arg.is_map():
            f = arg.keys(("name", "agent"), required=("name",))
            return Action(verb, _agent_ref(f["agent"], agents) if "agent" in f else None, name=f["name"].string())
        return Action(verb, name=arg.string())
    if verb == "sleep":
        return Action(verb, seconds=_seconds(arg))
    if verb == "wait_idle":
        return Action(verb, name=arg.string())
    f = arg.keys(("event", "where"), required=("event",))
    return Action("wait_for", event=_timeline_kind(f["event"]), where=f["where"].scalars() if "where" in f else None)


def _timeline_kind(node: Node) -> str:
    """An event kind an actor's ``after``, a ``wait_for`` or a check names: one a run records
    (``events.TIMELINE_KINDS``). A typo here is an actor that never starts or a check that never
    holds, a failing run that blames the implementation: it is bad input."""
    kind = node.string()
    if kind not in ev.TIMELINE_KINDS:
        near = difflib.get_close_matches(kind, sorted(ev.TIMELINE_KINDS), n=1)
        hint = f"did you mean {near[0]!r}? " if near else ""
        raise node.error(f"unknown event kind {kind!r} ({hint}the timeline's kinds are listed in docs/scenarios.md)")
    return kind


def _actions(node: Node, agents: list[str], allowed: tuple[str, ...]) -> tuple[Action, ...]:
    items = node.items()
    if not items:
        raise node.error("needs at least one action")
    return tuple(_action(item, agents, allowed) for item in items)


def _optional(f: dict[str, Node]) -> bool:
    return f["optional"].boolean() if "optional" in f else False


def _listener(node: Node, agents: list[str]) -> Listener:
    f = node.keys(LISTENER_FIELDS, required=("on",))
    event = f["on"].string()
    if event not in EVENT_FIELDS:
        raise f["on"].error(f"unknown event {event!r} (expected one of: {', '.join(EVENT_FIELDS)})")
    where = f["where"].scalars() if "where" in f else {}
    for key in where:
        if key not in EVENT_FIELDS[event]:
            raise f["where"].error(f"{event} has no field {key!r} (fields: {', '.join(EVENT_FIELDS[event])})")
    if "agent" in where and where["agent"] not in agents:
        raise f["where"].error(f"unknown agent {where['agent']!r}")
    if event == "agent/status" and "status" in where and where["status"] not in STATUSES:
        # A typo here is a listener that never fires, and a scenario that passes vacuously.
        raise f["where"].error(f"unknown status {where['status']!r} (expected one of: {', '.join(STATUSES)})")
    hold = 0.0
    if "hold" in f:
        if event != "session/flush" and event not in ev.WATERFALLS:
            raise f["hold"].error("hold goes with on: session/flush (a slow flush) or a waterfall (a slow plugin: "
                                  f"{', '.join(ev.WATERFALLS)})")
        # forever: a plugin awaiting what never comes (a network call without a timeout)
        if f["hold"].value() == "forever":
            hold = math.inf
        else:
            hold = _seconds(f["hold"])
    plain = False
    if "plain" in f:
        if event != "session/flush" or hold:
            raise f["plain"].error("plain (a plain-function flush listener) goes with on: session/flush, without hold")
        plain = f["plain"].boolean()
    when = "before"
    if "when" in f:
        if event not in ev.WATERFALLS:
            raise f["when"].error("when (before or after next()) goes with a waterfall "
                                  f"({', '.join(ev.WATERFALLS)})")
        when = f["when"].choice(("before", "after"))
    rewrite = None
    if "rewrite" in f:
        if event not in ev.WATERFALLS:
            raise f["rewrite"].error("rewrite (fields of the value next() returned) goes with a waterfall "
                                     f"({', '.join(ev.WATERFALLS)})")
        rewrite = {key: child.value() for key, child in f["rewrite"].entries()}  # any JSON value
        if not rewrite:
            raise f["rewrite"].error("rewrite needs at least one field")
        problem = rewrite_problem(event, rewrite)
        if problem is not None:
            raise f["rewrite"].error(problem)
    edit = None
    if "edit" in f:
        edit = {key: child.value() for key, child in f["edit"].entries()}  # any JSON value
        problem = edit_problem(event, when, edit)
        if problem is not None:
            raise f["edit"].error(problem)
        if not edit:
            raise f["edit"].error("edit needs at least one field")
    if "do" in f:
        do = _actions(f["do"], agents, LISTENER_VERBS)
        if any(a.verb == "stop" for a in do) and event != "agent/turn-continuation":
            raise f["do"].error("stop is a vote of an agent/turn-continuation listener (on: agent/turn-continuation)")
        if any(a.verb == "answer" for a in do) and event != "tools/execute":
            raise f["do"].error("answer is a tools/execute listener's own result (on: tools/execute)")
    elif hold or rewrite or edit:
        do = ()  # a slow flush or plugin, or a rewriting or editing plugin, that does nothing else
    else:
        raise node.error("missing required field 'do' (only a listener with hold (a slow flush or plugin), or a "
                         "waterfall listener with rewrite or edit, may do nothing)")
    return Listener(
        on=event,
        do=do,
        name=f["name"].string() if "name" in f else "",
        where=where,
        nth=f["nth"].integer(minimum=1) if "nth" in f else 1,
        times=f["times"].choice(("once", "always")) if "times" in f else "once",  # type: ignore[arg-type]
        when=when,  # type: ignore[arg-type]
        hold=hold,
        optional=_optional(f),
        rewrite=rewrite,
        plain=plain,
        edit=edit,
    )


def _actor(node: Node, agents: list[str]) -> Actor:
    f = node.keys(ACTOR_FIELDS, required=("do",))
    if ("at" in f) == ("after" in f):
        raise node.error("an actor needs exactly one of 'at: SECONDS' or 'after: {event: KIND}'")
    at = _seconds(f["at"]) if "at" in f else None
    after = where = None
    if "after" in f:
        af = f["after"]
        if af.is_scalar():
            after = _timeline_kind(af)
        else:
            a = af.keys(("event", "where"), required=("event",))
            after = _timeline_kind(a["event"])
            where = a["where"].scalars() if "where" in a else None
    if "nth" in f and after is None:
        raise f["nth"].error("nth goes with after: (act on the n-th matching event)")
    return Actor(do=_actions(f["do"], agents, ACTOR_VERBS), name=f["name"].string() if "name" in f else "",
                 at=at, after=after, where=where, optional=_optional(f),
                 nth=f["nth"].integer(minimum=1) if "nth" in f else 1)


def _check_names(listeners: tuple[Listener, ...], listener_nodes: list[Node], actors: tuple[Actor, ...],
                 actor_nodes: list[Node]) -> None:
    """Listener and actor names are unique; an actor ``after`` a listener names one that exists."""
    names: dict[str, Node] = {}
    pairs: list[tuple[Listener | Actor, Node]] = [*zip(listeners, listener_nodes, strict=True),
                                                  *zip(actors, actor_nodes, strict=True)]
    for element, node in pairs:
        if element.name and element.name in names:
            raise node.error(f"duplicate name {element.name!r} (listener and actor names are unique)")
        if element.name:
            names[element.name] = node
    listener_names = {lst.name for lst in listeners if lst.name}
    for actor, node in zip(actors, actor_nodes, strict=True):
        if actor.after == "listener" and actor.where and "name" in actor.where:
            wanted = actor.where["name"]
            if wanted not in listener_names:
                raise node.error(f"after: no listener is named {wanted!r} (listeners: "
                                 f"{', '.join(sorted(listener_names)) or 'none'})")


def _check_waiters(listeners: tuple[Listener, ...], listener_nodes: list[Node], actors: tuple[Actor, ...],
                   actor_nodes: list[Node]) -> set[str]:
    """``wait_idle: NAME`` must name a waiter some ``when_idle`` registers; returns the names."""
    declared: set[str] = set()
    pairs: list[tuple[Listener | Actor, Node]] = [*zip(listeners, listener_nodes, strict=True),
                                                  *zip(actors, actor_nodes, strict=True)]
    for element, node in pairs:
        for action in element.do:
            if action.verb == "when_idle" and action.name:
                if action.name in declared:  # the world refuses the second when_idle() under it
                    raise node.error(f"when_idle: a waiter named {action.name!r} is registered twice (waiter "
                                     "names are unique)")
                declared.add(action.name)
    for actor, node in zip(actors, actor_nodes, strict=True):
        for action, item in zip(actor.do, node.keys(ACTOR_FIELDS)["do"].items(), strict=True):
            if action.verb == "wait_idle" and action.name not in declared:
                raise item.error(f"wait_idle: no when_idle registers a waiter named {action.name!r}")
    return declared


# --------------------------------------------------------------------------- checks


def _check(node: Node, agents: list[str], waiters: set[str]) -> CheckSpec:
    if not node.is_map() or len(node.entries()) != 1:
        raise node.error(f"a check is a mapping with one of: {', '.join(ck.CHECK_KINDS)}")
    (kind, arg), = node.entries()
    if kind not in ck.CHECK_KINDS:
        raise arg.error(f"unknown check {kind!r} (expected one of: {', '.join(ck.CHECK_KINDS)})")
    if kind == "released_after_turn":
        f = arg.keys(("waiter", "prompt"), required=("waiter", "prompt"))
        waiter = f["waiter"].string()
        if waiter not in waiters:
            raise f["waiter"].error(f"no when_idle registers a waiter named {waiter!r}")
        return CheckSpec(kind, {"waiter": waiter, "prompt": f["prompt"].string()})
    if kind in ("ran", "not_ran"):
        if arg.is_scalar():
            return CheckSpec(kind, {"prompt": arg.string()})
        f = arg.keys(("prompt", "times", "agent"), required=("prompt",))
        args: dict[str, Any] = {"prompt": f["prompt"].string()}
        if "times" in f:
            args["times"] = f["times"].integer()
        if "agent" in f:
            args["agent"] = _agent_ref(f["agent"], agents)
        return CheckSpec(kind, args)
    if kind == "same_turn":
        agent = None
        if arg.is_list():
            items = arg.items()
        else:
            f = arg.keys(("prompts", "agent"), required=("prompts",))
            items = f["prompts"].items()
            agent = _agent_ref(f["agent"], agents) if "agent" in f else None
        if len(items) < 2:
            raise arg.error(f"same_turn needs at least two prompts, got {len(items)}")
        return CheckSpec(kind, {"prompts": [i.string() for i in items], **({"agent": agent} if agent else {})})
    if kind in ("statuses", "turn_ends"):
        agent = None
        if arg.is_list():
            values = [i.string() for i in arg.items()]
        else:
            f = arg.keys(("agent", "expect"), required=("expect",))
            values = [i.string() for i in f["expect"].items()]
            agent = _agent_ref(f["agent"], agents) if "agent" in f else None
        return CheckSpec(kind, {"expect": values, **({"agent": agent} if agent else {})})
    if kind in ("event", "no_event"):
        f = arg.keys(("kind", "where", "count") if kind == "event" else ("kind", "where"), required=("kind",))
        args = {"kind": _timeline_kind(f["kind"])}
        if "where" in f:
            args["where"] = f["where"].scalars()
        if "count" in f:
            args["count"] = f["count"].integer()
        return CheckSpec(kind, args)
    f = arg.keys(("first", "then"), required=("first", "then"))
    pair: dict[str, Any] = {}
    for key in ("first", "then"):
        g = f[key].keys(("kind", "where"), required=("kind",))
        pair[key] = {"kind": _timeline_kind(g["kind"]), "where": g["where"].scalars() if "where" in g else {}}
    return CheckSpec(kind, pair)


# --------------------------------------------------------------------------- writing


def dump(scenario: Scenario) -> str:
    """The scenario as YAML text that ``load_text`` reads back to the same scenario."""
    return yaml.dump(to_document(scenario), Dumper=_DUMPER, sort_keys=False, width=100, allow_unicode=True)


def to_document(scenario: Scenario) -> dict[str, Any]:
    """The scenario as a plain YAML document (see ``dump``)."""
    if scenario.body is not None:
        raise Undumpable(f"scenario {scenario.name!r} has a Python body")
    doc: dict[str, Any] = {"name": scenario.name}
    if scenario.description:
        doc["description"] = scenario.description
    limits: dict[str, Any] = {}
    if scenario.limits.max_time != DEFAULT_MAX_TIME:
        limits["max_time"] = scenario.limits.max_time
    if scenario.limits.max_steps != DEFAULT_MAX_STEPS:
        limits["max_steps"] = scenario.limits.max_steps
    if scenario.limits.idle_timeout != DEFAULT_IDLE_TIMEOUT:
        limits["idle_timeout"] = scenario.limits.idle_timeout
    if limits:
        doc["limits"] = limits
    if scenario.agents != (AgentSpec("a"),):
        doc["agents"] = [_agent_out(a) for a in scenario.agents]
    if len(scenario.models) == 1 and scenario.models[0].name == "fake":
        if scenario.models[0] != ModelSpec():
            doc["model"] = _model_out(scenario.models[0])
    elif scenario.models:
        doc["models"] = {m.name: _model_out(m) for m in scenario.models}
    if scenario.tools:
        doc["tools"] = {t.name: _tool_out(t) for t in scenario.tools}
    if scenario.sections:
        doc["sections"] = dict(scenario.sections)
    if scenario.listeners:
        doc["listeners"] = [_listener_out(lst) for lst in scenario.listeners]
    if scenario.actors:
        doc["actors"] = [_actor_out(a) for a in scenario.actors]
    if not scenario.record_continuations:
        doc["record_continuations"] = False
    if scenario.checks:
        doc["checks"] = [_check_out(c) for c in scenario.checks]
    return doc


def _agent_out(agent: AgentSpec) -> Any:
    if agent == AgentSpec(agent.id):
        return agent.id
    out: dict[str, Any] = {"id": agent.id}
    if agent.model != "fake":
        out["model"] = agent.model
    if agent.system_prompt is not None:
        out["system_prompt"] = agent.system_prompt
    if agent.resume is not None:
        out["resume"] = agent.resume
    if agent.history:
        out["history"] = list(agent.history)
    if agent.interrupted:
        out["interrupted"] = True
    if agent.configured:
        out["configured"] = True
    return out


def _model_out(model: ModelSpec) -> Any:
    script = [response_out(r) for r in model.script]
    if model.default is None and not model.edits_requests:
        return script
    out: dict[str, Any] = {"script": script}
    if model.default is not None:
        out["default"] = response_out(model.default)
    if model.edits_requests:
        out["edits_requests"] = True
    return out


def response_out(r: Response) -> Any:
    """One response as its YAML value (see the format above)."""
    if r.gates or r.hooks:
        raise Undumpable("a response with a gate or a hook has no YAML form")
    raw = [p.chunk for p in r.parts if isinstance(p, RawPart)]
    if raw and len(raw) == len(r.parts) and r.raise_at is None and r.hang_at is None and r.usage_value is None:
        out_raw: dict[str, Any] = {"chunks": [dict(c) for c in raw]}
        if r.first or r.first is None:
            out_raw["delay"] = r.first
        if r.between or r.between is None:
            out_raw["between"] = r.between
        return out_raw
    blocks = [b for b in r.parts if isinstance(b, BlockPart)]
    if len(blocks) != len(r.parts):
        raise Undumpable("a response mixing raw chunks and blocks has no YAML form")
    unset = object()
    finish: Any = r.finish_value if "finish_value" in r._fields_set else unset
    out: dict[str, Any] = {}
    raising: dict[str, Any] = {}  # a raise once the content is out: written after it
    if r.raise_at is not None:
        position, exc = r.raise_at
        at_end = position == -1  # just before the finish: once the content is out
        if type(exc) is not FakeError or (position < 0 and not blocks) or (blocks and not at_end and position < 2):
            raise Undumpable("only a stream raising a message (and code) before any block, or once its blocks "
                             "are out (at their end or after raise_after >= 1 chunks), has a YAML form")
        raising["raises"] = str(exc)
        if getattr(exc, "code", None) is not None:
            raising["code"] = exc.code
        if position > 0:
            raising["raise_after"] = position - 1
        if r.raise_on_call:
            raising["raise_on_call"] = True
    if r.raise_at is not None and not blocks:
        out.update(raising)
        raising = {}
    elif not blocks:
        if isinstance(finish, dict) and finish.get("kind") == "error":
            out["error"] = finish.get("message", "")
            if finish.get("code") is not None:
                out["code"] = finish["code"]
            finish = unset
        elif isinstance(finish, dict) and finish == {"kind": "aborted"}:
            out["aborted"] = True
            finish = unset
        elif r.hang_at == 0:
            out["hang"] = True
        else:
            out["empty"] = True
    elif len(blocks) == 1:
        out.update(_block_out(blocks[0]))
    else:
        if any(b.kind != "tool-call" and b.pieces != 1 for b in blocks):
            raise Undumpable("blocks with their own deltas have no YAML form")
        out["blocks"] = [_block_out(b) for b in blocks]
    if r.usage_value is not None:
        if set(r.usage_value) != {"input_tokens", "output_tokens"}:
            raise Undumpable("usage beyond input and output tokens has no YAML form")
        out["usage"] = [r.usage_value["input_tokens"], r.usage_value["output_tokens"]]
    if finish is not unset:
        if (not isinstance(finish, dict) or not _FINISH_KIND.fullmatch(str(finish.get("kind")))
                or set(finish) - {"kind", "message", "code"}):
            raise Undumpable(f"finish {finish!r} has no YAML form")
        out["finish"] = finish["kind"] if len(finish) == 1 else dict(finish)
    if r.truncate_at is not None:
        out["truncate"] = r.truncate_at
    if r.first or r.first is None:
        out["delay"] = r.first
    if r.between or r.between is None:
        out["between"] = r.between
    if r.hang_at is not None and "hang" not in out:
        if r.hang_at < 1:
            raise Undumpable("a hang before the first chunk of a response with content has no YAML form")
        out["hang_after"] = r.hang_at - 1
    if r.abort_mode != "finish":
        out["on_abort"] = r.abort_mode
    out.update(raising)
    if list(out) == ["text"]:
        return out["text"]
    return out


def _block_out(block: Any) -> dict[str, Any]:
    if block.kind == "tool-call":
        call: dict[str, Any] = {"name": block.name}
        try:
            args = json.loads(block.content) if block.content else ""
        except ValueError:
            args = block.content
        if block.content != "{}":
            if isinstance(args, dict | list) and json.dumps(args, separators=(", ", ": ")) == block.content:
                call["args"] = args
            else:
                call["args"] = block.content
        if block.id is not None:
            call["id"] = block.id
        if block.pieces != 1:
            if not isinstance(block.pieces, int):
                raise Undumpable("tool-call fragments given as pieces have no YAML form")
            call["fragments"] = block.pieces
        return {"tool_call": call}
    if not isinstance(block.pieces, int):
        raise Undumpable("text given as explicit pieces has no YAML form")
    out: dict[str, Any] = {block.kind: block.content}
    if block.pieces != 1:
        out["deltas"] = block.pieces
    return out


def _outcome_out(o: Outcome) -> Any:
    latency = {} if not isinstance(o.latency, int | float) else {"latency": o.latency}
    if o.hang:
        return {"hangs": True, **latency}
    if o.error is not None:
        out: dict[str, Any] = {"fails": str(o.error)}
        if getattr(o.error, "code", None) is not None:
            out["code"] = o.error.code  # type: ignore[attr-defined]
        return {**out, **latency}
    if isinstance(o.value, list):  # content blocks: always under result (a list alone is no outcome)
        return {"result": o.value, **latency}
    if not isinstance(o.value, str):
        raise Undumpable("a tool result that is neither a string nor a list of blocks has no YAML form")
    return {"result": o.value, **latency} if latency else o.value


def _tool_out(t: ToolSpec) -> Any:
    out: dict[str, Any] = {}
    if t.results is not None:
        out["results"] = [_outcome_out(o) for o in t.results]
    elif t.result is not None:
        value = _outcome_out(t.result)
        out.update(value if isinstance(value, dict) else {"result": value})
    if t.latency is None:
        raise Undumpable("a tool that does not suspend has no YAML form")
    if t.latency:
        out["latency"] = t.latency
    if not t.abort_aware:
        out["abort_aware"] = False
    if t.repeat_last:
        out["repeat_last"] = True
    if t.consumes_args:
        out["consumes_args"] = True
    if list(out) == ["result"]:
        return out["result"]
    return out or {"result": "ok"}


def _action_out(a: Action) -> dict[str, Any]:
    verb = a.verb
    if verb in ("send", "steer", "inject"):
        if a.agent is None and not a.wait and a.source is None and not a.blocks and not a.unserialisable \
                and not a.bad_source:
            return {verb: a.text}
        value: dict[str, Any] = {"text": a.text}
        if a.agent is not None:
            value["agent"] = a.agent
        if a.source is not None:
            value["source"] = dict(a.source)
        if a.blocks:
            value["blocks"] = True
        if a.wait:
            value["wait"] = True
        if a.unserialisable:
            value["unserialisable"] = True
        if a.bad_source:
            value["bad_source"] = True
        return {verb: value}
    if verb in ("cancel", "abort"):
        if a.agent is None:
            return {verb: a.reason}
        return {verb: {"agent": a.agent, **({"reason": a.reason} if a.reason is not None else {})}}
    if verb in ("dispose", "create", "cancel_driver", "reload"):
        return {verb: a.agent}
    if verb == "raise":
        if a.thrown:
            return {verb: {"message": a.message, "thrown": True}}
        return {verb: a.message} if a.code is None else {verb: {"message": a.message, "code": a.code}}
    if verb in ("close", "reconfigure", "stop", "answer"):
        return {verb: None}
    if verb == "when_idle":
        return {verb: a.name if a.agent is None else {"name": a.name, "agent": a.agent}}
    if verb == "sleep":
        return {verb: a.seconds}
    if verb == "wait_idle":
        return {verb: a.name}
    return {"wait_for": {"event": a.event, **({"where": dict(a.where)} if a.where else {})}}


def _listener_out(lst: Listener) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if lst.name:
        out["name"] = lst.name
    out["on"] = lst.on
    if lst.where:
        out["where"] = dict(lst.where)
    if lst.nth != 1:
        out["nth"] = lst.nth
    if lst.times != "once":
        out["times"] = lst.times
    if lst.when != "before":
        out["when"] = lst.when
    if lst.hold:
        out["hold"] = "forever" if math.isinf(lst.hold) else lst.hold
    if lst.plain:
        out["plain"] = True
    if lst.rewrite:
        out["rewrite"] = dict(lst.rewrite)
    if lst.edit:
        out["edit"] = dict(lst.edit)
    if lst.optional:
        out["optional"] = True
    if lst.do or not (lst.hold or lst.rewrite or lst.edit):
        out["do"] = [_action_out(a) for a in lst.do]
    return out


def _actor_out(actor: Actor) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if actor.name:
        out["name"] = actor.name
    if actor.at is not None:
        out["at"] = actor.at
    else:
        out["after"] = {"event": actor.after, **({"where": dict(actor.where)} if actor.where else {})}
        if actor.nth != 1:
            out["nth"] = actor.nth
    if actor.optional:
        out["optional"] = True
    out["do"] = [_action_out(a) for a in actor.do]
    return out


def _check_out(c: Any) -> dict[str, Any]:
    if not isinstance(c, CheckSpec):
        raise Undumpable(f"check {getattr(c, 'name', c)!r} is Python code")
    if c.kind in ("ran", "not_ran") and list(c.args) == ["prompt"]:
        return {c.kind: c.args["prompt"]}
    return {c.kind: dict(c.args)}
