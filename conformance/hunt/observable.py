"""What a caller can observe of a run, for the differential hunt (``--against``).

Two implementations of the contract may differ in wording and in bookkeeping, never in what a
caller sees happen: the notifications and their arguments, the session log, what each call
returned or raised, when each waiter was released, what the model was asked (how many messages,
what history), the state each agent was left in. :func:`observed` keeps exactly that of a
timeline (error texts reduced to their type and code: the contract does not fix wording), and
:func:`difference` says where two runs of one window first part. A difference is not a
violation: it is for judgement (and for a baseline once judged), see ``docs/hunt.md``.
"""

from __future__ import annotations

import re
from typing import Any

from ..scenario.trace import Trace

_INTERNAL = frozenset(("listener", "actor/run", "model/done", "waiter/timeout"))
_DROP = ("t_us", "t", "precise", "log_len", "history_len")
_ERROR_TEXT = re.compile(r"^(\w+)(?::.*)?$", re.S)


def _error(value: Any) -> Any:
    if isinstance(value, str):
        m = _ERROR_TEXT.match(value)
        return m.group(1) if m else "error"
    return value


def _event(e: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in e.items() if k not in _DROP}
    if "error" in out:
        out["error"] = _error(out["error"])
    if out.get("kind") == "log" and isinstance(out.get("data"), dict) and "error" in out["data"]:
        data = dict(out["data"])
        err = data["error"]
        data["error"] = {k: v for k, v in err.items() if k != "message"} if isinstance(err, dict) else _error(err)
        out["data"] = data
    return out


def observed(trace: Trace) -> list[dict[str, Any]]:
    """The caller-observable events of a run, in order."""
    return [_event(e) for e in trace.timeline if e.get("kind") not in _INTERNAL]


def short(event: dict[str, Any] | None) -> str:
    """One event in a few words (``log(turn/end, aborted)``, ``agent/status(idle)``)."""
    if event is None:
        return "nothing (the run ended)"
    kind = str(event.get("kind"))
    if kind == "log":
        data = event.get("data") or {}
        extra = ""
        if event.get("type") == "turn/end" and isinstance(data.get("reason"), dict):
            extra = f", {data['reason'].get('kind')}"
        return f"log({event.get('type')}{extra})"
    keys = [k for k in ("op", "by", "status", "reason", "text", "waiter", "turn", "step", "error") if k in event]
    return f"{kind}(" + ", ".join(f"{k}={event[k]}" for k in keys) + ")"


def difference(reference: Trace, candidate: Trace, ref_reached: bool = True,
               reached: bool = True) -> dict[str, Any] | None:
    """Where ``candidate`` first departs from ``reference`` (``None``: they agree), as
    ``{"at": index, "reference": "...", "impl": "..."}``; a window reached by one only says so."""
    if ref_reached != reached:
        return {"at": -1, "reference": "reached" if ref_reached else "not reached",
                "impl": "reached" if reached else "not reached"}
    a, b = observed(reference), observed(candidate)
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return {"at": i, "reference": short(x), "impl": short(y)}
    if len(a) != len(b):
        i = min(len(a), len(b))
        return {"at": i, "reference": short(a[i] if i < len(a) else None),
                "impl": short(b[i] if i < len(b) else None)}
    return None


__all__ = ["difference", "observed", "short"]
