"""DPOR never misses a bug that plain dfs finds: both search the example race scenarios on the
reference loop and on the interleaving mutants, through the scenario engine's own path
(``run_one``, as ``loopkit explore --strategy dfs`` drives it), and what they find is compared.

dpor runs in its default mode (the reference loop declares no shared state)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from conformance.impl import resolve
from conformance.scenario.engine import run_one
from conformance.scenario.model import load
from simulator.strategies import DFSStrategy, DPORStrategy

EXAMPLES = Path(__file__).parents[1] / "conformance" / "scenario" / "examples"
BUDGET = 1000
"""Enough for either search to reach every failure dfs reaches here (dpor in its sound default
mode reorders only asyncio's own callbacks, so on an agent loop it needs about as many runs)."""

# (scenario, implementation): the race scenarios with the mutants each one catches under dfs,
# and the reference (no failure: both searches must agree on that too).
# (w1-drops-replacement is left out: on window1 both searches reach it at exactly the runs they
# reach w1-release-with-replacement, 430 and 646, so it proved nothing the first pair does not.)
PAIRS = [
    ("window1", "mutant:w1-release-with-replacement"),
    ("window1", "mutant:idle-ignores-queue"),
    ("window2", "mutant:w2-settle-unconditionally"),
    ("window2", "mutant:idle-ignores-queue"),
    ("window2", "reference"),
    ("steer_during_tool", "mutant:idle-ignores-queue"),
    ("steer_during_tool", "reference"),
]


def _search(strategy: Any, scenario: Any, impl: Any) -> tuple[int, tuple[str, ...] | None, bool]:
    """Runs, the failure found first (its failed checks), whether the tree was exhausted."""
    runs = 0
    while runs < BUDGET and not strategy.exhausted:
        rep = run_one(scenario, impl, strategy, 0)
        runs += 1
        if not rep.ok:
            return runs, rep.failure_key, strategy.exhausted
    return runs, None, strategy.exhausted


@pytest.mark.parametrize(("name", "impl_spec"), PAIRS, ids=[f"{a}-{b}" for a, b in PAIRS])
def test_dpor_finds_what_dfs_finds(name: str, impl_spec: str) -> None:
    scenario = load(str(EXAMPLES / f"{name}.yaml"))
    impl = resolve(None if impl_spec == "reference" else impl_spec)
    dfs_runs, dfs_found, dfs_done = _search(DFSStrategy(), scenario, impl)
    dpor_runs, dpor_found, dpor_done = _search(DPORStrategy(), scenario, impl)
    if dfs_found is not None:
        assert dpor_found is not None, f"dfs found {dfs_found} in {dfs_runs} runs; dpor found nothing in {dpor_runs}"
    if impl_spec == "reference":
        assert dfs_found is None and dpor_found is None
        assert dfs_done and dpor_done  # both trees are small enough to exhaust here
