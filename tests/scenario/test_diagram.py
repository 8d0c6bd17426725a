"""Sequence diagrams: lifelines, arrows with virtual times, deviations and the failing check."""

from __future__ import annotations

import re
from pathlib import Path

from conformance.impl import resolve
from conformance.scenario import diagram
from conformance.scenario import race as cassette
from conformance.scenario import race as races

SHIPPED = Path(__file__).parents[2] / "cassettes" / "races"


def test_window1_diagram_highlights_deviation_and_failure() -> None:
    report = cassette.replay(races.load(SHIPPED / "window1.yaml"), resolve("mutant:w1-release-with-replacement"))
    text = diagram.mermaid(report)
    assert text.startswith("sequenceDiagram")
    for lifeline in ("caller", "racer", "driver a", "listeners", "model"):
        assert f" as {lifeline}" in text
    assert "rect rgb(255, 224, 178)" in text and "schedule deviation" in text
    assert "rect rgb(255, 205, 210)" in text and "released_after_turn" in text
    assert re.search(r"caller->>driver_a: \d+\.\d{3}s send\(\"A\"\)", text)


def test_html_is_self_contained() -> None:
    report = cassette.replay(races.load(SHIPPED / "window2.yaml"), resolve("mutant:w2-settle-unconditionally"))
    page = diagram.html_page(report, impl="mutant:w2-settle-unconditionally")
    assert "<svg" in page and "sequenceDiagram" in page and "FAILED" in page
    assert "<script" not in page and "http://" not in page.replace("http://www.w3.org/2000/svg", "")
    assert "https://" not in page


def test_passing_run_has_no_highlight() -> None:
    report = cassette.replay(races.load(SHIPPED / "window2.yaml"), resolve(None))
    assert "255, 205, 210" not in diagram.mermaid(report)
    assert "all checks hold" in diagram.html_page(report)


def test_a_model_or_tool_call_is_drawn_in_the_lane_of_the_agent_it_served() -> None:
    # A loop chaining callbacks on futures runs agent a's step in whichever task resolved it:
    # b's step started in between, and a's model call and tool call were drawn in b's lane.
    from conformance.scenario.rows import rows

    timeline = [
        {"kind": "agent/created", "agent": "a", "model": "fake"},
        {"kind": "agent/created", "agent": "b", "model": "fake-b"},
        {"kind": "agent/step-start", "agent": "a", "turn": 1, "step": 1},
        {"kind": "agent/step-start", "agent": "b", "turn": 1, "step": 1},
        {"kind": "model/request", "model": "fake", "call": 1, "messages": 1},
        {"kind": "log", "agent": "a", "seq": 3, "type": "tool/call", "data": {"call_id": "c1"}},
        {"kind": "agent/step-start", "agent": "b", "turn": 1, "step": 2},
        {"kind": "tool/start", "tool": "lookup", "call_id": "c1"},
        {"kind": "model/request", "model": "shared", "call": 2, "messages": 1},  # no one model's: the last step's lane
    ]
    drawn = {(r.label.split(" ")[0], r.src) for r in rows(timeline, [], []) if r.style == "call"}
    assert ("request", "driver a") in drawn and ("lookup", "driver a") in drawn and ("request", "driver b") in drawn
