"""The hunt over the wire (needs node): it finds the JavaScript loop's marker bug by itself, on
windows that act by listener and by actor; the model-call window is an actor's only there."""

from __future__ import annotations

from conformance.hunt import driver, search
from conformance.hunt.workloads import by_name
from conformance.impl import resolve

from ._wire import JS_LOOP, MARKER_NOT_RESET, THROWN_UNNORMALISED, requires_node

pytestmark = requires_node

SMALL = search.Config(workloads=("reply",), depth=2, nth=1, verbs=("send", "cancel"), dfs=0, random=0, pct=0)


def test_the_hunt_finds_the_marker_variant_over_the_wire() -> None:
    spec = f"wire:{MARKER_NOT_RESET}"
    rep = driver.hunt(resolve(spec), spec, SMALL, first=True).report
    assert rep["findings"], "cancel; send from a running-status window must show the stale marker"
    assert "MARKER-1" in rep["findings"][0]["rules"]


def test_the_fixed_loop_passes_and_no_model_call_window_acts_by_listener() -> None:
    spec = f"wire:{JS_LOOP}"
    impl = resolve(spec)
    (wp,) = search.plan(by_name(["reply"]), impl, SMALL)
    at_model = [w for w in wp.windows if w.point.on == "model/request"]
    assert at_model and all(w.mode == "actor" for w in at_model)
    rep = driver.hunt(impl, spec, SMALL).report
    assert rep["findings"] == [] and rep["complete"]


def test_a_raise_alone_throws_a_value_that_is_no_error_and_finds_a_loop_that_reads_its_message() -> None:
    # ERR-2: a plugin may `throw "text"`; the hunt's raise alone does (a ThrownValue over the
    # wire), so a loop logging `error.message` unchecked is found with no scenario written for it
    config = search.Config(workloads=("reply",), depth=1, nth=1, verbs=("raise",), dfs=0, random=0, pct=0)
    found = driver.hunt(resolve(f"wire:{THROWN_UNNORMALISED}"), THROWN_UNNORMALISED, config, first=True).report
    assert found["findings"], "an error event without its message must be found"
    assert driver.hunt(resolve(f"wire:{JS_LOOP}"), JS_LOOP, config).report["findings"] == []
