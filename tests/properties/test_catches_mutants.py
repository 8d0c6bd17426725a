"""The property tests find the interleaving bugs on their own, and print ready-to-run scenarios.

No test here points at a particular bug: each hunt runs the same generic generator and invariant
checker against a mutant (``conformance.mutants``) and must catch it within the bench's budget of
500 examples (derandomized: hypothesis's example sequence depends on ``max_examples``, so the
budget is the bench's own; the search stops at the first catch, which the bench reports for every
mutant and strategy in ``bench/mutants.py``). Three hunts also ask for the failing example's race
cassette and replay it with ``loopkit replay`` on the mutant and on the reference.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conformance import mutants
from conformance.impl import resolve
from conformance.properties import PropScenario, hunt, render, run_one, scenarios
from simulator.strategies.hypothesis import HypothesisStrategy

BUDGET = 500


@pytest.fixture(autouse=True)
def _quiet_unawaited() -> Iterator[None]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        yield


@pytest.mark.parametrize(
    ("name", "strategy"),
    [
        ("w2-settle-unconditionally", "pct"),
        ("w1-release-with-replacement", "fifo"),
        ("w1-drops-replacement", "fifo"),
        ("marker-kept-in-window2", "fifo"),
        ("marker-reset-on-idle-only", "random"),
        ("idle-ignores-queue", "hypothesis"),
        ("late-steering-dropped", "random"),
        ("inject-open-from-status", "random"),  # found here before the suite had a test for it
    ],
)
def test_properties_catch_interleaving_mutant(name: str, strategy: str, tmp_path: Path) -> None:
    replayed = name in REPLAYED
    found = hunt(mutants.get(name), strategy, max_examples=BUDGET, impl_spec=f"mutant:{name}",
                 cassettes=tmp_path if replayed else None)
    assert found.caught, f"{name} survived {found.examples} {strategy} examples"
    if replayed:
        _check_race_cassette(name, found)


REPLAYED = ("marker-reset-on-idle-only", "w2-settle-unconditionally")
"""The hunts whose first failing example must also come as a race cassette (a cassette search
costs about a second, so not every hunt asks for one)."""


def _check_race_cassette(name: str, found: Any) -> None:
    # The failing example comes with a race cassette that `loopkit replay` reproduces on the
    # mutant (exit 1) and that holds on the reference (exit 0).
    race = found.race
    assert race is not None and found.example is not None
    assert race.path is not None and race.command is not None, race.note
    assert f"race cassette: {race.path}" in found.example
    assert f"replay: {race.command}" in found.example
    assert race.command.endswith(f"--impl mutant:{name}")
    on_mutant = _loopkit(race.command)
    assert on_mutant.returncode == 1, on_mutant.stdout + on_mutant.stderr
    assert "FAILED" in on_mutant.stdout
    on_reference = _loopkit(race.command.removesuffix(f" --impl mutant:{name}"))
    assert on_reference.returncode == 0, on_reference.stdout + on_reference.stderr


def test_a_batching_violation_comes_as_a_race_cassette(tmp_path: Path) -> None:
    # LOOP-2 ("turn N did not take prompt P") becomes the scenario check same_turn, so the
    # mutant caught by batching alone gets a cassette too.
    found = hunt(mutants.get("turn-per-send"), "fifo", max_examples=BUDGET, impl_spec="mutant:turn-per-send",
                 cassettes=tmp_path)
    assert found.caught and found.race is not None
    assert found.race.checks and all(c.startswith("same_turn(") for c in found.race.checks), found.race
    _check_race_cassette("turn-per-send", found)


def _loopkit(command: str, *extra: str) -> subprocess.CompletedProcess[str]:
    """Run a printed ``loopkit ...`` command line with the console script of this environment."""
    args = shlex.split(command)
    script = Path(sys.executable).with_name("loopkit")
    exe = str(script) if script.exists() else shutil.which("loopkit")
    assert args[0] == "loopkit" and exe is not None, command
    return subprocess.run([exe, *args[1:], *extra], capture_output=True, text=True, timeout=120, check=False)


def test_properties_pass_the_reference_where_they_catch_mutants() -> None:
    # The same hunt on the reference (a hunt that flags everything would "catch" every mutant).
    found = hunt(resolve(None), "pct", max_examples=300)
    assert not found.caught, found.example


def test_failing_example_shrinks_and_replays() -> None:
    impl = mutants.get("turn-per-send")
    messages: list[str] = []

    @settings(max_examples=300, derandomize=True, database=None, deadline=None, suppress_health_check=list(HealthCheck))
    @given(scenarios(max_actors=2, max_ops=4), st.data())  # a smaller space: a quicker shrink
    def search(scenario: PropScenario, data: Any) -> None:
        outcome = run_one(impl, scenario, HypothesisStrategy(data))
        if not outcome.ok:
            messages.append(render(scenario, outcome, "mutant:turn-per-send"))
        assert outcome.ok

    with pytest.raises(AssertionError):
        search()
    shrunk = messages[-1]  # hypothesis replays the minimal example last
    assert "SCENARIO = PropScenario(" in shrunk and "SCHEDULE = " in shrunk
    namespace: dict[str, Any] = {}
    exec(compile(shrunk, "<rendered scenario>", "exec"), namespace)  # the printed scenario runs as is
    assert namespace["outcome"].violations, "the rendered scenario reproduces the violation"
    scenario = namespace["SCENARIO"]
    assert sum(len(actor) for actor in scenario.actors) <= 4, f"not shrunk: {scenario}"
