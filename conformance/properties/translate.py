"""A generated ``PropScenario`` as a YAML scenario of ``conformance.scenarios`` (docs/scenarios.md).

The translation keeps the operations, their texts (``world.prompt_name``), the listeners, the
model script and the tools, so ``loopkit run|explore|replay`` can play the generated example and a
race cassette can carry it inline. Every generated feature has a YAML form: a listener on the
n-th (n > 1) event is ``nth: n`` (the n-th ``agent/turn-start``/``agent/turn-end`` is turn n's,
``where: {turn: n}``), a listener on ``session/flush`` is one with ``hold: FLUSH_DELAY`` (the
property world's flush takes that long), an actor's ``inject`` is awaited (``inject: {text, wait:
true}``). ``Untranslatable`` is left for a kind the translation does not know.

What is approximated (the scenario engine has no such notion), and why it is close enough:

* a ``hang`` (model stream or tool) becomes a 30 s delay that an abort cuts short: the property
  world's settle aborts a hung step after 30 virtual seconds, the scenario world would instead
  wait for its idle timeout and fail the quiescence check;
* a ``finish{error}`` response has no text block before its finish;
* the model's script is padded with plain replies (the property model answers ``ok`` forever,
  the scenario model fails a call past the end of its script).
"""

from __future__ import annotations

from typing import Any

import yaml

from .model import ListenerSpec, PropScenario
from .world import FLUSH_DELAY, TOOLS, prompt_name

HANG = 30.0
"""Virtual seconds a translated hang lasts unless aborted (``world.WAIT_LIMIT``)."""

PADDING = 8
"""Plain replies appended to the model's script beyond two per prompt (a bound on the model
calls: one turn per prompt at most, plus one step per tool-call response and per steering)."""

_STATUS_EVENTS = {"status:running": "running", "status:idle": "idle"}
_COUNTED = {"agent/turn-start", "agent/turn-end"}
_LISTENABLE = {"agent/turn-start", "agent/step-start", "agent/step-end", "agent/turn-end",
               "agent/turn-continuation", "session/flush"}


class Untranslatable(ValueError):
    """The scenario uses a feature without a YAML form (the message says which): today only an
    operation, event, response kind or tool behaviour the translation does not know."""


def to_document(
    scenario: PropScenario, name: str = "property-example", checks: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """The YAML scenario document (a plain mapping) of ``scenario``."""
    doc: dict[str, Any] = {
        "name": name,
        "description": "a failing generated property example (conformance.properties)",
        "model": [*(_response(kind, i) for i, kind in enumerate(scenario.responses)), *["ok"] * _padding(scenario)],
        "tools": {tool: _tool(behaviour) for tool, behaviour in zip(TOOLS, scenario.tools, strict=True)},
    }
    listeners = [_listener(spec, i) for i, spec in enumerate(scenario.listeners)]
    if listeners:
        doc["listeners"] = listeners
    doc["actors"] = [_actor(ops, i) for i, ops in enumerate(scenario.actors)]
    if checks:
        doc["checks"] = list(checks)
    return doc


def to_yaml(
    scenario: PropScenario, name: str = "property-example", checks: list[dict[str, Any]] | None = None
) -> str:
    """The YAML scenario text of ``scenario`` (raises ``Untranslatable``)."""
    return yaml.safe_dump(to_document(scenario, name, checks), sort_keys=False, width=100)


def _padding(scenario: PropScenario) -> int:
    prompts = sum(op.verb in ("send", "steer", "inject") for ops in scenario.actors for op in ops)
    prompts += sum("send" in spec.action or spec.action in ("steer", "inject") for spec in scenario.listeners)
    return 2 * prompts + PADDING


def _response(kind: str, index: int) -> Any:
    text = f"r{index}"
    if kind == "text":
        return text
    if kind == "slow":
        return {"text": text, "delay": 0.5}
    if kind == "tools":
        return {"blocks": [{"tool_call": {"name": TOOLS[0], "args": {}}},
                           {"tool_call": {"name": TOOLS[1], "args": {"x": 1}}}]}
    if kind == "max-tokens":
        return {"text": text, "finish": "max-tokens"}
    if kind == "max-tokens-tools":
        return {"blocks": [{"text": text}, {"tool_call": {"name": TOOLS[0], "args": {}}}], "finish": "max-tokens"}
    if kind == "error":
        return {"error": "model error", "code": "E_MODEL"}
    if kind == "raise":
        return {"raises": "model raised", "code": "E_RAISE"}
    if kind == "finish-aborted":
        return {"text": text, "finish": "aborted"}
    if kind == "hang":
        return {"text": text, "delay": HANG}
    raise Untranslatable(f"unknown response kind {kind!r}")


def _tool(behaviour: str) -> Any:
    if behaviour == "ok":
        return "done"
    if behaviour == "fail":
        return {"fails": "tool failed"}
    if behaviour == "hang":
        return {"result": "done", "latency": HANG}
    if behaviour == "slow":
        return {"result": "done", "latency": 0.5}
    raise Untranslatable(f"unknown tool behaviour {behaviour!r}")


def _listener(spec: ListenerSpec, index: int) -> dict[str, Any]:
    where: dict[str, Any] = {}
    if spec.event in _STATUS_EVENTS:
        on = "agent/status"
        where["status"] = _STATUS_EVENTS[spec.event]
    elif spec.event in _LISTENABLE:
        on = spec.event
    else:
        raise Untranslatable(f"a listener on {spec.event!r} has no YAML form")
    nth = spec.nth if spec.nth > 1 and on not in _COUNTED else None
    if spec.nth > 1 and on in _COUNTED:
        where["turn"] = spec.nth  # the n-th turn-start/turn-end is turn n's
    text = prompt_name(None, index)
    do: list[dict[str, Any]] = []
    if spec.action == "raise":
        do.append({"raise": f"listener {index + 1} raised"})
    elif spec.action == "inject":
        do.append({"inject": text})
    else:
        for verb in spec.action.split("+"):
            do.append({verb: text} if verb in ("send", "steer") else {verb: None})
    out: dict[str, Any] = {"name": f"listener{index + 1}", "on": on}
    if where:
        out["where"] = where
    if nth is not None:
        out["nth"] = nth  # counted among the events that match ``where`` (as the property world does)
    out["times"] = "once"
    if on == "session/flush":
        out["hold"] = FLUSH_DELAY
    out["do"] = do
    return out


def _actor(ops: tuple[Any, ...], index: int) -> dict[str, Any]:
    do: list[dict[str, Any]] = []
    for position, op in enumerate(ops):
        text = prompt_name(index, position)
        if op.verb in ("send", "steer"):
            do.append({op.verb: text})
        elif op.verb == "inject":
            do.append({"inject": {"text": text, "wait": True}})  # the property actor awaits it
        elif op.verb in ("cancel", "abort", "dispose"):
            do.append({op.verb: None})
        elif op.verb == "sleep":
            do.append({"sleep": op.seconds})
        elif op.verb in ("wait", "waiter"):
            waiter = f"w{index + 1}.{position + 1}"
            do.append({"when_idle": waiter})
            if op.verb == "wait":
                do.append({"wait_idle": waiter})
        else:
            raise Untranslatable(f"unknown actor operation {op.verb!r}")
    return {"name": f"actor{index + 1}", "at": 0, "do": do}
