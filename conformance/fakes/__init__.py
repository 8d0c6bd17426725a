"""The kit's fakes: the one scripted model, the fake tools and gates.

Every scenario (a rule test, a YAML file, a generated property example, a race cassette) scripts
its model with :class:`FakeModel` and its tools with :class:`FakeTool`; see docs/fakes.md::

    from conformance.fakes import FakeModel, FakeTool, Gate, respond, text, tool_calls

    model = FakeModel([text("hi", usage=(3, 1)), tool_calls(("c1", "echo", "{}")), respond.hang()])

``text`` and ``tool_calls`` are the suite's shorthands for the two most common responses; every
other shape (gates, hangs, hooks run inside the stream, faults at a chunk position, truncation,
timing) is a method of :class:`Response`.
"""

from __future__ import annotations

from .errors import FakeError, ScriptExhausted, UnusedResponses
from .gate import Gate, wait_abortable
from .model import FakeModel, Response, ScriptEntry, respond
from .tools import FakeTool, Outcome, ToolBox, ToolCall, fails, hangs, returns

__all__ = [
    "FakeError",
    "FakeModel",
    "FakeTool",
    "Gate",
    "Outcome",
    "Response",
    "ScriptEntry",
    "ScriptExhausted",
    "ToolBox",
    "ToolCall",
    "UnusedResponses",
    "fails",
    "hangs",
    "respond",
    "returns",
    "text",
    "tool_calls",
    "wait_abortable",
]


def text(value: str = "ok", *, finish: str | None = "stop", usage: tuple[int, int] | None = None) -> Response:
    """A text answer: one text block, optional usage, then ``finish`` (``None``: no finish chunk)."""
    response = respond.text(value)
    if usage is not None:
        response = response.usage(*usage)
    return response.finish(finish)


def tool_calls(*calls: tuple[str, str, str], finish: str = "tool-calls", prefix: str | None = None) -> Response:
    """Tool calls ``(id, name, raw_arguments)`` in order, optionally after a text block."""
    response = respond.text(prefix) if prefix is not None else respond()
    for call_id, name, arguments in calls:
        response = response + respond.tool_call(name, arguments, id=call_id)
    return response.finish(finish)
