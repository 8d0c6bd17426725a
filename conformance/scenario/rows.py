"""A run as rows of a sequence diagram: who talks to whom, when, and what is highlighted.

Shared by the text timeline of ``loopkit run`` and by ``diagram`` (Mermaid and HTML). Lifelines:
one per actor (the callers), one driver per agent, ``listeners`` (the bus's notifications and
the scenario's listeners), ``model`` and ``tools``. Session events other than turn boundaries,
stream chunks and the scenario's own bookkeeping are left out: they do not interleave.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .checks import Violation


@dataclass
class Row:
    """One diagram row: an arrow ``src -> dst`` (or a note over ``src`` when ``dst`` is None)."""

    t_us: int
    src: str
    dst: str | None
    label: str
    style: str = "call"  # call | reply | event | note | deviation | failure
    index: int | None = None  # the timeline index (None for inserted rows)
    failed: bool = False


def _driver(agent: Any) -> str:
    return f"driver {agent}"


def _quote(text: Any) -> str:
    return f'"{text}"'


def rows(timeline: Sequence[dict[str, Any]], deviations: Sequence[dict[str, Any]] = (),
         violations: Sequence[tuple[str, Violation]] = ()) -> list[Row]:
    """The rows of a run (see module docstring), deviations and failed checks inserted."""
    out: list[Row] = []
    waiter_owner: dict[str, str] = {}
    listeners = {str(e.get("name")) for e in timeline if e.get("kind") == "listener"}
    last_agent = next((e.get("agent") for e in timeline if isinstance(e.get("agent"), str)), "a")
    dev_at: dict[int, list[dict[str, Any]]] = {}
    for d in deviations:
        dev_at.setdefault(int(d.get("at", 0)), []).append(d)
    fail_at: dict[int | None, list[tuple[str, Violation]]] = {}
    for name, v in violations:
        fail_at.setdefault(v.at if v.at is not None and v.at < len(timeline) else None, []).append((name, v))
    owners = _owners(timeline)
    for i, e in enumerate(timeline):
        t = int(e.get("t_us", 0))
        owner = owners(e)
        if owner is not None and e.get("agent") is None:
            e = {**e, "agent": owner}  # a model's or a tool's event: the lane of the agent it served
        for d in dev_at.get(i, []):
            out.append(Row(t, "", None, f"schedule deviation #{d.get('choice')}: ran {_label(d, 'ran')} "
                           f"instead of {_label(d, 'instead_of')}", "deviation"))
        row = _row(e, i, t, waiter_owner, last_agent, listeners)
        if isinstance(e.get("agent"), str) and str(e.get("kind", "")).startswith("agent/step"):
            last_agent = e["agent"]
        if row is None and i in fail_at:
            row = Row(t, _driver(last_agent), None, _short(e), "note", i)
        if row is not None:
            if i in fail_at:
                row.failed = True
            out.append(row)
        for name, v in fail_at.get(i, []):
            out.append(Row(t, "", None, f"check {name} FAILED: {v.message}", "failure"))
    end = int(timeline[-1].get("t_us", 0)) if timeline else 0
    for d in dev_at.get(len(timeline), []):
        out.append(Row(end, "", None, f"schedule deviation #{d.get('choice')}: ran {_label(d, 'ran')}", "deviation"))
    for name, v in fail_at.get(None, []):
        out.append(Row(end, "", None, f"check {name} FAILED: {v.message}", "failure"))
    return out


def _owners(timeline: Sequence[dict[str, Any]]) -> Any:
    """``owner(event)``: the agent a model's or a tool's event served, where the timeline tells:
    a tool call by its ``call_id`` (the agent whose log holds that ``tool/call``), a model call by
    its model's name when one agent alone was created on it. Otherwise ``None`` (the lane of the
    last agent whose step started): a loop that runs each agent's steps in whichever task resolved
    them (callbacks chained on futures) interleaves two agents' steps."""
    calls: dict[Any, Any] = {}
    models: dict[Any, set[Any]] = {}
    for e in timeline:
        kind = e.get("kind")
        if kind == "log" and e.get("type") == "tool/call" and isinstance(e.get("data"), dict):
            calls.setdefault(e["data"].get("call_id"), e.get("agent"))
        elif kind == "agent/created":
            models.setdefault(e.get("model"), set()).add(e.get("agent"))

    def owner(e: dict[str, Any]) -> Any:
        kind = e.get("kind")
        if kind in ("tool/start", "tool/done"):
            return calls.get(e.get("call_id"))
        if kind in ("model/request", "model/done"):
            agents = models.get(e.get("model"), set())
            return next(iter(agents)) if len(agents) == 1 else None
        return None

    return owner


def _label(d: dict[str, Any], key: str) -> str:
    task = d.get(f"{key}_task")
    label = str(d.get(key, "?"))
    if label.startswith("timer:"):
        return f"an early timer of {task}" if task else "a timer fired early"
    return str(task) if task else label


def _short(e: dict[str, Any]) -> str:
    keys = [k for k in ("op", "status", "type", "text", "waiter", "actor", "check") if k in e]
    return f"{e.get('kind')} " + " ".join(f"{k}={e[k]}" for k in keys)


def _row(e: dict[str, Any], i: int, t: int, waiter_owner: dict[str, str], last_agent: Any,
         listeners: set[str]) -> Row | None:
    kind = str(e.get("kind", ""))
    agent = e.get("agent") if isinstance(e.get("agent"), str) else last_agent
    driver = _driver(agent)
    if kind == "op":
        op, by = e.get("op"), str(e.get("by"))
        src = "listeners" if by in listeners else by
        prefix = f"{by}: " if by in listeners else ""
        if op in ("send", "steer", "inject"):
            label = f"{op}({_quote(e.get('text'))})"
        elif op in ("cancel", "abort"):
            label = f"{op}({_quote(e['reason']) if e.get('reason') else ''})"
        elif op == "when_idle":
            waiter_owner[str(e.get("waiter"))] = src
            label = f"when_idle() -> {e.get('waiter')}"
        else:
            label = f"{op}()"
        return Row(t, src, driver, prefix + label, "call", i)
    if kind == "op/error":
        return Row(t, driver, str(e.get("by", "caller")), f"{e.get('op')} raised {e.get('error')}", "reply", i)
    if kind == "waiter/released":
        owner = waiter_owner.get(str(e.get("waiter")), "caller")
        return Row(t, driver, owner, f"when_idle() {e.get('waiter')} resolved (agent {e.get('status')})", "reply", i)
    if kind == "waiter/timeout":
        return Row(t, driver, None, f"when_idle() {e.get('waiter')} never resolved", "note", i)
    if kind == "listener":
        return Row(t, "listeners", None, f"listener {e.get('name')} fires on {e.get('on')}", "note", i)
    if kind.startswith("agent/"):
        if kind in ("agent/step-start", "agent/step-end", "agent/stream-chunk"):
            return None
        return Row(t, driver, "listeners", _notification(kind, e), "event", i)
    if kind == "log":
        data = e.get("data") or {}
        loaded = " (loaded)" if e.get("loaded") else ""  # a resumed log: it ran before this run
        if e.get("type") == "turn/start":
            return Row(t, driver, None, f"turn {data.get('turn')} starts{loaded}", "note", i)
        if e.get("type") == "turn/end":
            reason = data.get("reason") or {}
            return Row(t, driver, None, f"turn {data.get('turn')} ends {reason.get('kind')}{loaded}", "note", i)
        if e.get("type") == "user/message":
            content = data.get("content") or []
            text = " ".join(b.get("text", "") for b in content if isinstance(b, dict))
            return Row(t, driver, None, f"user/message {_quote(text)}{loaded}", "note", i)
        return None
    if kind == "persistence/load":
        return Row(t, driver, None, f"loading session {e.get('session')}", "note", i)
    if kind == "reload/loaded":  # a second service over the same backend (World.reload)
        return Row(t, driver, None, f"session reloaded by a second service: {e.get('events')} events", "note", i)
    if kind == "model/request":
        return Row(t, driver, "model", f"request #{e.get('call')} ({e.get('messages')} messages)", "call", i)
    if kind == "model/done":
        return Row(t, "model", driver, f"#{e.get('call')} done: {e.get('outcome')}", "reply", i)
    if kind == "tool/start":
        return Row(t, driver, "tools", f"{e.get('tool')} ({e.get('call_id')})", "call", i)
    if kind == "tool/done":
        return Row(t, "tools", driver, f"{e.get('tool')}: {e.get('outcome')}", "reply", i)
    if kind == "actor/error":
        return Row(t, str(e.get("actor")), None, f"raised {e.get('error')}", "note", i)
    return None


def _notification(kind: str, e: dict[str, Any]) -> str:
    name = kind
    if kind == "agent/status":
        return f"{name}({e.get('status')})"
    if kind == "agent/queued":
        return f"{name}({_quote(e.get('text'))}{', steering' if e.get('steering') else ''})"
    if kind == "agent/turn-end":
        return f"{name}({e.get('turn')}, {e.get('reason')})"
    if kind in ("agent/turn-start",):
        return f"{name}({e.get('turn')})"
    if kind == "agent/error":
        return f"{name}({e.get('error')})"
    return name


def lifelines(rows_: Sequence[Row]) -> list[str]:
    """Columns in a stable order: callers, drivers, listeners, model, tools."""
    names: list[str] = []
    for r in rows_:
        for n in (r.src, r.dst):
            if n and n not in names:
                names.append(n)

    def rank(n: str) -> tuple[int, int]:
        order = 1 if n.startswith("driver ") else 2 if n == "listeners" else 3 if n == "model" else 4 if n == "tools" else 0
        return order, names.index(n)

    return sorted(names, key=rank)


def seconds(t_us: int) -> str:
    """Virtual time as ``1.500s``."""
    return f"{t_us / 1_000_000:.3f}s"
