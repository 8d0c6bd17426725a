"""Python scenarios: a decorated function found by module:attr, with its own checks."""

from __future__ import annotations

import pytest

from conformance.impl import resolve
from conformance.scenario import engine, load, loop_scenario


def test_python_scenario_by_reference() -> None:
    sc = load("conformance.scenario.examples.python_window2:window2")
    assert sc.name == "window2-python" and sc.source == {"python": "conformance.scenario.examples.python_window2:window2"}
    assert engine.run_one(sc, resolve(None)).ok
    failing = engine.run_one(sc, resolve("mutant:w2-settle-unconditionally"))
    assert {name for name, _ in failing.violations} >= {"released_after_turn(w, B)", "IDLE-2"}


def test_decorator_needs_async() -> None:
    with pytest.raises(TypeError):
        loop_scenario(lambda world: None)  # type: ignore[arg-type]
