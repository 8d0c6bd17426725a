"""Window 2 written in Python: what a YAML file cannot say (here: a listener that decides from
the agent's state, and a check of our own over the trace)."""

from __future__ import annotations

from typing import Any

from conformance.fakes import respond
from conformance.scenario import (
    LoopCheck,
    TraceView,
    Violation,
    World,
    loop_scenario,
    released_after_turn,
)


def _b_ran_once(view: TraceView) -> Violation | None:
    turns = [t for t in view.turns("a") if "B" in t["prompts"]]
    return None if len(turns) == 1 else Violation(f"B ran in {len(turns)} turns, expected 1")


@loop_scenario(name="window2-python", checks=[released_after_turn("w", "B"), LoopCheck("b-once", _b_ran_once)])
async def window2(w: World) -> None:
    """A running-status listener cancels A and sends B; when_idle() resolves after B's turn."""
    w.model([respond.text("reply to B").timing(first=3.0)])
    agent = w.agent("a")
    fired: list[bool] = []

    def on_status(_agent: Any, status: str) -> None:
        if status == "running" and not fired:
            fired.append(True)
            w.cancel(agent, "w2", by="listener")
            w.send(agent, "B", by="listener")

    w.listen("agent/status", on_status)
    w.send(agent, "A")
    w.when_idle(agent, "w")
    await w.wait_idle("w")
