"""The YAML scenario format: validated (errors name the line and the field) and compiled to a
:class:`~conformance.scenarios.model.LoopScenario`. The full schema is in docs/scenarios.md;
in short::

    name: window2                       # required
    description: a running-status listener cancels A and sends B
    limits: {max_time: 3600, idle_timeout: 600}      # virtual seconds
    agents: [a]                         # ids, or {id, model, system_prompt}; default [a]
    model:                              # the script of model "fake" (or models: {name: [...]})
      - "plain text reply"
      - {text: "slow reply", delay: 3}  # text|reasoning|tool_call|blocks|error|raises|hang|empty|aborted
    tools:
      search: {results: ["3 cats", {fails: "rate limited", code: RATE}], latency: 1}
    listeners:
      - on: agent/status                # a notification, a waterfall, session/event or session/flush
        where: {status: running}        # filter on the event's fields
        nth: 1                          # act from the n-th matching event on (default 1)
        times: once                     # once (default) | always
        do: [{cancel: w2}, {send: B}]   # cancel|send|steer|inject|abort|dispose|raise
    actors:
      - name: caller
        at: 0                           # or after: {event: KIND, where: {...}}
        do: [{send: A}, {when_idle: w}, {wait_idle: w}]   # + sleep, wait_for, inject: {text, wait: true}
    checks:
      - released_after_turn: {waiter: w, prompt: B}
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from simulator.fake_llm import Response, respond
from simulator.fake_tools import fails, hangs, returns

from . import checks as ck
from . import events as ev
from .model import DEFAULT_MAX_TIME, LoopScenario, ScenarioError
from .world import DEFAULT_IDLE_TIMEOUT, World
from .yaml_reader import Node, parse

TOP = ("name", "description", "limits", "agents", "model", "models", "tools", "listeners",
       "actors", "checks")
RESPONSE_KINDS = ("text", "reasoning", "tool_call", "blocks", "error", "raises", "hang", "empty", "aborted")
RESPONSE_MODIFIERS = ("deltas", "code", "usage", "finish", "truncate", "delay", "between",
                      "hang_after", "raise_after", "on_abort")
LISTENER_FIELDS = ("name", "on", "where", "nth", "times", "hold", "do")
LISTENER_OPS = ("send", "steer", "inject", "cancel", "abort", "dispose", "raise", "when_idle")
ACTOR_OPS = (*LISTENER_OPS, "sleep", "wait_idle", "wait_for")
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
    "session/flush": ("agent",),
}
CHECKS = ("released_after_turn", "ran", "not_ran", "same_turn", "statuses", "turn_ends", "event", "no_event",
          "before")

Op = Callable[[World, str], Awaitable[None] | None]


@dataclass
class _Op:
    """One compiled action: ``run(world, by)``; ``wait`` marks the awaiting ones (actors only)."""

    run: Callable[[World, str], Any]
    wait: bool = False


# --------------------------------------------------------------------------- entry points


def load_file(path: str | Path) -> LoopScenario:
    """Load and validate a scenario file."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ScenarioError(f"{path}: no such scenario file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ScenarioError(f"{path}: cannot read ({type(exc).__name__}: {exc})") from None
    return load_text(text, origin=str(path), path=str(path))


def load_text(text: str, *, origin: str = "<scenario>", path: str | None = None, line_offset: int = 0) -> LoopScenario:
    """Validate and compile YAML scenario text (``origin`` names it in errors)."""
    root = parse(text, origin, line_offset=line_offset)
    scenario = compile_scenario(root)
    scenario.source = {"yaml": text}
    if path is not None:
        scenario.source["path"] = path
    return scenario


# --------------------------------------------------------------------------- the document


def compile_scenario(root: Node) -> LoopScenario:
    """A :class:`LoopScenario` from a composed scenario document."""
    fields = root.keys(TOP, required=("name",))
    name = fields["name"].string()
    description = fields["description"].string() if "description" in fields else ""
    max_time, idle_timeout = DEFAULT_MAX_TIME, DEFAULT_IDLE_TIMEOUT
    if "limits" in fields:
        limits = fields["limits"].keys(("max_time", "idle_timeout"))
        if "max_time" in limits:
            max_time = limits["max_time"].number(minimum=1.0)
        if "idle_timeout" in limits:
            idle_timeout = limits["idle_timeout"].number(minimum=0.001)
    agents = _agents(fields.get("agents"))
    agent_ids = [a["id"] for a in agents]
    if "model" in fields and "models" in fields:
        raise fields["models"].error("give either 'model' (the script of model 'fake') or 'models', not both")
    models: dict[str, list[Response]] = {}
    if "model" in fields:
        models["fake"] = _script(fields["model"])
    for model_name, script in (fields["models"].entries() if "models" in fields else []):
        models[model_name] = _script(script)
    if not models:
        models["fake"] = []
    for agent, node in zip(agents, _agent_nodes(fields.get("agents")), strict=False):
        if agent["model"] not in models:
            raise node.error(f"agent {agent['id']!r} uses model {agent['model']!r}, which the scenario does not define")
    tools = [_tool(n, node) for n, node in (fields["tools"].entries() if "tools" in fields else [])]
    listeners = [_listener(node, agent_ids, i) for i, node in enumerate(fields["listeners"].items())] if "listeners" in fields else []
    actors = [_actor(node, agent_ids, i) for i, node in enumerate(fields["actors"].items())] if "actors" in fields else []
    _check_waiters(actors, listeners, fields)
    checks = [_check(node, agent_ids) for node in fields["checks"].items()] if "checks" in fields else []

    async def body(world: World) -> None:
        for model_name, script in models.items():
            world.model(script, name=model_name)
        for build in tools:
            build(world)
        for agent in agents:
            world.agent(agent["id"], model=agent["model"], system_prompt=agent["system_prompt"])
        for install in listeners:
            install(world)
        for arm in actors:
            arm.install(world)

    return LoopScenario(
        name=name, body=body, checks=checks, description=description,
        max_time=max_time, idle_timeout=idle_timeout,
    )


def _agent_nodes(node: Node | None) -> list[Node]:
    return node.items() if node is not None else []


def _agents(node: Node | None) -> list[dict[str, Any]]:
    if node is None:
        return [{"id": "a", "model": "fake", "system_prompt": None}]
    out: list[dict[str, Any]] = []
    items = node.items()
    if not items:
        raise node.error("needs at least one agent")
    for item in items:
        if item.is_scalar():
            out.append({"id": item.string(), "model": "fake", "system_prompt": None})
            continue
        f = item.keys(("id", "model", "system_prompt"), required=("id",))
        out.append({
            "id": f["id"].string(),
            "model": f["model"].string() if "model" in f else "fake",
            "system_prompt": f["system_prompt"].string() if "system_prompt" in f else None,
        })
    ids = [a["id"] for a in out]
    for i, agent_id in enumerate(ids):
        if agent_id in ids[:i]:
            raise items[i].error(f"duplicate agent id {agent_id!r}")
    return out


# --------------------------------------------------------------------------- the model


def _script(node: Node) -> list[Response]:
    return [_response(item) for item in node.items()]


def _response(node: Node) -> Response:
    if node.is_scalar():
        return respond.text(node.string())
    f = node.keys(RESPONSE_KINDS + RESPONSE_MODIFIERS)
    kinds = [k for k in RESPONSE_KINDS if k in f]
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
    elif kind == "error":
        response = respond.error(value.string(), code)
    elif kind == "raises":
        position = f["raise_after"].integer() + 1 if "raise_after" in f else 0
        response = respond.raises(value.string(), code=code) if position == 0 else Response().raises(value.string(), code=code, before=position)
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
        response = response.finish(f["finish"].choice(("stop", "tool-calls", "max-tokens", "aborted", "error")))
    if "truncate" in f:
        response = response.truncate(f["truncate"].integer())
    if "delay" in f or "between" in f:
        first = f["delay"].number() if "delay" in f else 0.0
        between = f["between"].number() if "between" in f else 0.0
        response = response.timing(first=first, between=between)
    if "hang_after" in f:
        response = response.hang(after=f["hang_after"].integer())
    if "raise_after" in f and kind != "raises":
        raise f["raise_after"].error("raise_after goes with raises: MESSAGE")
    if "on_abort" in f:
        response = response.on_abort(f["on_abort"].choice(("finish", "return", "raise")))  # type: ignore[arg-type]
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


def _tool(name: str, node: Node) -> Callable[[World], Any]:
    if node.is_scalar():
        text = node.string()
        return lambda world: world.tool(name, text)
    f = node.keys(("result", "results", "fails", "code", "hangs", "latency", "abort_aware", "repeat_last"))
    given = [k for k in ("result", "results", "fails", "hangs") if k in f]
    if len(given) > 1:
        raise node.error(f"give one of result, results, fails, hangs (got {', '.join(given)})")
    options: dict[str, Any] = {}
    if "latency" in f:
        options["latency"] = f["latency"].number()
    if "abort_aware" in f:
        options["abort_aware"] = f["abort_aware"].boolean()
    if "repeat_last" in f:
        options["repeat_last"] = f["repeat_last"].boolean()
    result: Any = None
    if "result" in f:
        result = f["result"].string()
    elif "fails" in f:
        result = fails(f["fails"].string(), code=f["code"].string() if "code" in f else None)
    elif "hangs" in f:
        result = hangs()
    elif "results" in f:
        options["results"] = [_tool_outcome(item) for item in f["results"].items()]
    return lambda world: world.tool(name, result, **options)


def _tool_outcome(node: Node) -> Any:
    if node.is_scalar():
        return node.string()
    f = node.keys(("result", "fails", "code", "hangs", "latency"))
    latency: dict[str, Any] = {"latency": f["latency"].number()} if "latency" in f else {}
    if "fails" in f:
        return fails(f["fails"].string(), code=f["code"].string() if "code" in f else None, **latency)
    if "hangs" in f:
        return hangs(**latency)
    if "result" in f:
        return returns(f["result"].string(), **latency)
    raise node.error("a result is a string or one of {result: ...}, {fails: ...}, {hangs: true}")


# --------------------------------------------------------------------------- actions


def _agent_ref(node: Node, agents: list[str]) -> str:
    agent = node.string()
    if agent not in agents:
        raise node.error(f"unknown agent {agent!r} (agents: {', '.join(agents)})")
    return agent


def _op(node: Node, agents: list[str], allowed: tuple[str, ...]) -> _Op:
    """One action: ``{VERB: ARGUMENT}``."""
    if not node.is_map():
        raise node.error(f"an action is a mapping like {{send: TEXT}}, got {node.kind}")
    entries = node.entries()
    if len(entries) != 1:
        raise node.error(f"an action has exactly one verb (one of: {', '.join(allowed)})")
    verb, arg = entries[0]
    if verb not in allowed:
        where = "in a listener (listeners run synchronously inside the emitter)" if verb in ACTOR_OPS else ""
        raise arg.error(f"unknown action {verb!r} {where}(expected one of: {', '.join(allowed)})".replace("  ", " "))
    default_agent = agents[0]

    if verb == "inject" and arg.is_map():
        # {text, agent, wait}: an actor may await the injection (wait: true); a plain inject is
        # started, not awaited.
        text, agent = _text_arg(arg, agents, default_agent, ("wait",))
        wait_node = arg.keys(("text", "agent", "wait")).get("wait")
        if wait_node is not None and wait_node.boolean():
            if "wait_idle" not in allowed:
                raise wait_node.error("an inject in a listener cannot wait (listeners run synchronously "
                                      "inside the emitter)")
            return _Op(lambda w, by: w.inject_wait(agent, text, by=by), wait=True)
        return _Op(lambda w, by: w.inject(agent, text, by=by))
    if verb in ("send", "steer", "inject"):
        text, agent = _text_arg(arg, agents, default_agent)
        method = verb
        return _Op(lambda w, by: getattr(w, method)(agent, text, by=by))
    if verb in ("cancel", "abort"):
        reason, agent = _reason_arg(arg, agents, default_agent)
        method = verb
        return _Op(lambda w, by: getattr(w, method)(agent, reason, by=by))
    if verb == "dispose":
        agent = default_agent
        if arg.is_map():
            agent = _agent_ref(arg.keys(("agent",), required=("agent",))["agent"], agents)
        elif arg.value() is not None:
            agent = _agent_ref(arg, agents)
        return _Op(lambda w, by: w.dispose(agent, by=by))
    if verb == "raise":
        message = arg.string() if arg.value() is not None else "listener failure"

        def fail(w: World, by: str) -> None:
            raise RuntimeError(message)

        return _Op(fail)
    if verb == "when_idle":
        agent = default_agent
        if arg.is_map():
            f = arg.keys(("name", "agent"), required=("name",))
            name = f["name"].string()
            if "agent" in f:
                agent = _agent_ref(f["agent"], agents)
        else:
            name = arg.string()
        return _Op(lambda w, by: w.when_idle(agent, name, by=by))
    if verb == "sleep":
        seconds = arg.number()

        async def sleep(w: World, by: str) -> None:
            await asyncio.sleep(seconds)

        return _Op(sleep, wait=True)
    if verb == "wait_idle":
        name = arg.string()
        return _Op(lambda w, by: w.wait_idle(name), wait=True)
    # wait_for
    f = arg.keys(("event", "where"), required=("event",))
    event_kind = f["event"].string()
    event_where = f["where"].scalars() if "where" in f else None

    async def wait_for(w: World, by: str) -> None:
        await w.ctx.wait_for(event_kind, event_where)

    return _Op(wait_for, wait=True)


def _text_arg(node: Node, agents: list[str], default: str, extra: tuple[str, ...] = ()) -> tuple[str, str]:
    if node.is_map():
        f = node.keys(("text", "agent", *extra), required=("text",))
        return f["text"].string(), _agent_ref(f["agent"], agents) if "agent" in f else default
    return node.string(), default


def _reason_arg(node: Node, agents: list[str], default: str) -> tuple[str | None, str]:
    if node.is_map():
        f = node.keys(("reason", "agent"))
        reason = f["reason"].string() if "reason" in f else None
        return reason, _agent_ref(f["agent"], agents) if "agent" in f else default
    return (None if node.value() is None else node.string()), default


def _ops(node: Node, agents: list[str], allowed: tuple[str, ...]) -> list[_Op]:
    items = node.items()
    if not items:
        raise node.error("needs at least one action")
    return [_op(item, agents, allowed) for item in items]


# --------------------------------------------------------------------------- listeners


def _listener(node: Node, agents: list[str], index: int) -> Callable[[World], None]:
    f = node.keys(LISTENER_FIELDS, required=("on", "do"))
    event = f["on"].string()
    if event not in EVENT_FIELDS:
        raise f["on"].error(f"unknown event {event!r} (expected one of: {', '.join(EVENT_FIELDS)})")
    where = f["where"].scalars() if "where" in f else {}
    for key in where:
        if key not in EVENT_FIELDS[event]:
            raise f["where"].error(f"{event} has no field {key!r} (fields: {', '.join(EVENT_FIELDS[event])})")
    if "agent" in where and where["agent"] not in agents:
        raise f["where"].error(f"unknown agent {where['agent']!r}")
    always = f["times"].choice(("once", "always")) == "always" if "times" in f else False
    nth = f["nth"].integer(minimum=1) if "nth" in f else 1
    hold = 0.0
    if "hold" in f:
        if event != "session/flush":
            raise f["hold"].error("hold goes with on: session/flush (a slow flush)")
        hold = f["hold"].number()
    ops = _ops(f["do"], agents, LISTENER_OPS)
    name = f["name"].string() if "name" in f else f"listener-{index + 1}"

    def install(world: World) -> None:
        fired = [False]
        seen = [0]

        def react(args: tuple[Any, ...]) -> bool:
            if fired[0] and not always:
                return False
            if not ev.matches(world.fields(event, args), where):
                return False
            seen[0] += 1
            if seen[0] < nth:
                return False
            fired[0] = True
            world.ctx.observe("listener", name=name, on=event)
            for op in ops:
                op.run(world, name)
            return True

        if event in ev.WATERFALLS:

            async def waterfall(*args: Any) -> Any:
                react(args[:-1])
                return await args[-1]()

            world.listen(event, waterfall)
        elif event == "session/flush":

            async def flush(*args: Any) -> None:
                react(args)
                if hold:
                    await asyncio.sleep(hold)

            world.listen(event, flush)
        else:
            world.listen(event, lambda *args: react(args) and None)

    return install


# --------------------------------------------------------------------------- actors


@dataclass
class _Actor:
    name: str
    ops: list[_Op]
    at: float | None
    after: str | None
    where: dict[str, Any] | None
    waiters_used: list[tuple[str, Node]]

    def install(self, world: World) -> None:
        ops, name = self.ops, self.name

        async def act() -> None:
            for op in ops:
                result = op.run(world, name)
                if op.wait:
                    await result

        act.__name__ = name
        if self.at is not None:
            world.at(self.at, act, name=name)
        else:
            assert self.after is not None
            world.after(self.after, act, where=self.where, name=name)


def _actor(node: Node, agents: list[str], index: int) -> _Actor:
    f = node.keys(("name", "at", "after", "do"), required=("do",))
    if ("at" in f) == ("after" in f):
        raise node.error("an actor needs exactly one of 'at: SECONDS' or 'after: {event: KIND}'")
    at = f["at"].number() if "at" in f else None
    after = where = None
    if "after" in f:
        af = f["after"]
        if af.is_scalar():
            after = af.string()
        else:
            a = af.keys(("event", "where"), required=("event",))
            after = a["event"].string()
            where = a["where"].scalars() if "where" in a else None
    name = f["name"].string() if "name" in f else f"actor-{index + 1}"
    ops = _ops(f["do"], agents, ACTOR_OPS)
    used = [(item.entries()[0][1].string(), item) for item in f["do"].items()
            if item.entries()[0][0] == "wait_idle"]
    return _Actor(name, ops, at, after, where, used)


def _check_waiters(actors: list[_Actor], listeners: list[Any], fields: dict[str, Node]) -> None:
    """``wait_idle: NAME`` must name a waiter some ``when_idle`` registers."""
    declared: set[str] = set()
    for section in ("actors", "listeners"):
        if section not in fields:
            continue
        for item in fields[section].items():
            for op in item.keys(("name", "at", "after", *LISTENER_FIELDS))["do"].items():
                verb, arg = op.entries()[0]
                if verb == "when_idle":
                    declared.add(arg.keys(("name", "agent"))["name"].string() if arg.is_map() else arg.string())
    for actor in actors:
        for name, node in actor.waiters_used:
            if name not in declared:
                raise node.error(f"wait_idle: no when_idle registers a waiter named {name!r}")


# --------------------------------------------------------------------------- checks


def _check(node: Node, agents: list[str]) -> ck.LoopCheck:
    if not node.is_map() or len(node.entries()) != 1:
        raise node.error(f"a check is a mapping with one of: {', '.join(CHECKS)}")
    (kind, arg), = node.entries()
    if kind not in CHECKS:
        raise arg.error(f"unknown check {kind!r} (expected one of: {', '.join(CHECKS)})")
    if kind == "released_after_turn":
        f = arg.keys(("waiter", "prompt"), required=("waiter", "prompt"))
        return ck.released_after_turn(f["waiter"].string(), f["prompt"].string())
    if kind in ("ran", "not_ran"):
        if arg.is_scalar():
            return ck.ran(arg.string(), 0 if kind == "not_ran" else 1)
        f = arg.keys(("prompt", "times", "agent"), required=("prompt",))
        times = f["times"].integer() if "times" in f else (0 if kind == "not_ran" else 1)
        return ck.ran(f["prompt"].string(), times, _agent_ref(f["agent"], agents) if "agent" in f else None)
    if kind == "same_turn":
        if arg.is_list():
            items, agent = arg.items(), None
        else:
            f = arg.keys(("prompts", "agent"), required=("prompts",))
            items = f["prompts"].items()
            agent = _agent_ref(f["agent"], agents) if "agent" in f else None
        if len(items) < 2:
            raise arg.error(f"same_turn needs at least two prompts, got {len(items)}")
        return ck.same_turn([i.string() for i in items], agent)
    if kind in ("statuses", "turn_ends"):
        if arg.is_list():
            values, agent = [i.string() for i in arg.items()], None
        else:
            f = arg.keys(("agent", "expect"), required=("expect",))
            values = [i.string() for i in f["expect"].items()]
            agent = _agent_ref(f["agent"], agents) if "agent" in f else None
        return ck.statuses(values, agent) if kind == "statuses" else ck.turn_ends(values, agent)
    if kind in ("event", "no_event"):
        f = arg.keys(("kind", "where", "count") if kind == "event" else ("kind", "where"), required=("kind",))
        where = f["where"].scalars() if "where" in f else None
        if kind == "no_event":
            return ck.no_event(f["kind"].string(), where)
        return ck.event(f["kind"].string(), where, f["count"].integer() if "count" in f else None)
    f = arg.keys(("first", "then"), required=("first", "then"))
    pair = []
    for key in ("first", "then"):
        g = f[key].keys(("kind", "where"), required=("kind",))
        pair.append((g["kind"].string(), g["where"].scalars() if "where" in g else {}))
    return ck.before(pair[0], pair[1])
