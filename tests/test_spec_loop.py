"""The loop written from the spec alone (``examples/spec_loop``) passes the rules where a test
once asserted the reference's choice instead of the contract (the whole suite runs in CI)."""

from __future__ import annotations

import pytest

from conformance.runner import run_suite

IMPL = "examples.spec_loop.adapter:implementation"


@pytest.mark.parametrize("rule", ["ERR-9", "INJ-2", "ABORT-1"])
def test_the_independent_loop_passes_where_readings_diverged(rule: str) -> None:
    run = run_suite(IMPL, rules=[rule], workers=0)
    failed = [r for r in run.results if r.outcome == "failed"]
    assert run.results and not failed, [f"{r.nodeid}: {r.message[:300]}" for r in failed]
