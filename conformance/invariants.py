"""The session-log invariants of spec section 1 (LOG-3..6), checked after every suite run.

Pure functions over a list of session events: they return human-readable violations (an empty
list when the log is sound), so the suite, the property tests and the scenario checks share them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def _where(index: int, kind: Any) -> str:
    return f"event {index} ({kind})"  # only when there is a violation to say: most logs are sound


def log_violations(events: Sequence[dict[str, Any]], *, allow_open_turn: bool = False) -> list[str]:
    """Violations of LOG-3 (contiguous seq), LOG-4 (turns pair and nest, nothing outside a turn),
    LOG-5 (steps nest, chunks inside a step; 0b: steps count from 1 within their turn) and LOG-6
    (results follow their calls)."""
    out: list[str] = []
    turn: int | None = None
    step: int | None = None
    last_step = 0  # the turn's last step number
    calls: set[str] = set()
    for index, event in enumerate(events):
        kind = event.get("type")
        data = event.get("data", {})
        if event.get("seq") != index:
            out.append(f"LOG-3: {_where(index, kind)} has seq {event.get('seq')}, expected {index}")
        if kind == "turn/start":
            if turn is not None:
                out.append(f"LOG-4: {_where(index, kind)} opens turn {data.get('turn')} while turn {turn} is open")
            turn, step, last_step = data.get("turn"), None, 0
            continue
        if turn is None:
            out.append(f"LOG-4: {_where(index, kind)} lies outside a turn")
            continue
        if "turn" in data and data["turn"] != turn:
            out.append(f"LOG-4: {_where(index, kind)} names turn {data['turn']} inside turn {turn}")
        if kind == "turn/end":
            if step is not None:
                out.append(f"LOG-5: {_where(index, kind)} closes turn {turn} with step {step} still open")
            turn, step = None, None
        elif kind == "step/start":
            if step is not None:
                out.append(f"LOG-5: {_where(index, kind)} opens step {data.get('step')} while step {step} is open")
            elif data.get("step") != last_step + 1:
                out.append(f"LOG-5: {_where(index, kind)} opens step {data.get('step')} of turn {turn}, expected step "
                           f"{last_step + 1} (0b: steps count from 1, one by one, within their turn)")
            step = data.get("step")
            last_step = step if isinstance(step, int) else last_step + 1
        elif kind == "step/end":
            if step is None or data.get("step") != step:
                out.append(f"LOG-5: {_where(index, kind)} closes step {data.get('step')} but open step is {step}")
            step = None
        elif kind == "assistant/chunk":
            if step is None:
                out.append(f"LOG-5: {_where(index, kind)} lies outside a step")
        elif kind == "tool/call":
            calls.add(str(data.get("call_id")))
        elif kind == "tool/result" and str(data.get("call_id")) not in calls:
            out.append(f"LOG-6: {_where(index, kind)} has no earlier tool/call {data.get('call_id')!r}")
    if turn is not None and not allow_open_turn:
        out.append(f"LOG-4: turn {turn} never ended")
    return out
