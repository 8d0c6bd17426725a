"""The property search finds the interleaving bugs on its own, and writes replayable cassettes.

No test here points at a particular bug: each search runs the same generic generator and oracles
against a mutant (``conformance.mutants``) and must catch it within the bench's budget of 500
examples (derandomized: hypothesis's example sequence depends on ``max_examples``, so the budget
is the bench's own; the search stops at the first catch, which ``bench/mutants.py`` reports for
every mutant and strategy). Some searches also write the failing example's race cassette and
replay it with ``loopkit replay`` on the mutant and on the reference.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from conformance import mutants
from conformance.impl import resolve
from conformance.scenario import fuzz
from conformance.scenario.generate import scenarios
from conformance.scenario.model import Scenario
from conformance.scenario.yaml_format import load_text
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
    found = fuzz.fuzz(mutants.get(name), strategy, max_examples=BUDGET, impl_spec=f"mutant:{name}",
                      cassettes=tmp_path if replayed else None)
    assert found.caught, f"{name} survived {found.examples} {strategy} examples"
    if replayed:
        _check_race_cassette(name, found.cassette)


REPLAYED = ("marker-reset-on-idle-only", "w2-settle-unconditionally")
"""The searches whose first failing example must also come as a race cassette."""


def _loopkit(*args: str) -> subprocess.CompletedProcess[str]:
    script = Path(sys.executable).with_name("loopkit")
    exe = str(script) if script.exists() else shutil.which("loopkit")
    assert exe is not None
    return subprocess.run([exe, *args], capture_output=True, text=True, timeout=120, check=False)


def _check_race_cassette(name: str, path: Path | None) -> None:
    # The failing example comes with a race cassette that `loopkit replay` reproduces on the
    # mutant (exit 1) and that holds on the reference (exit 0).
    assert path is not None and path.exists()
    on_mutant = _loopkit("replay", str(path), "--impl", f"mutant:{name}")
    assert on_mutant.returncode == 1, on_mutant.stdout + on_mutant.stderr
    assert "FAILED" in on_mutant.stdout
    on_reference = _loopkit("replay", str(path))
    assert on_reference.returncode == 0, on_reference.stdout + on_reference.stderr


def test_properties_pass_the_reference_where_they_catch_mutants() -> None:
    # The same search on the reference (a search that flags everything would "catch" every mutant).
    found = fuzz.fuzz(resolve(None), "pct", max_examples=300)
    assert not found.caught, found.violation


def test_failing_example_shrinks_and_its_yaml_reproduces_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(fuzz.CASSETTE_DIR_ENV, str(tmp_path))
    impl = mutants.get("turn-per-send")
    failing: list[tuple[Scenario, Any]] = []

    # A smaller space and no explain phase: a quicker shrink.
    @settings(max_examples=300, derandomize=True, database=None, deadline=None, suppress_health_check=list(HealthCheck),
              phases=[Phase.generate, Phase.shrink])
    @given(scenarios(max_actors=2, max_ops=4), st.data())
    def search(scenario: Scenario, data: Any) -> None:
        report = fuzz.play(impl, scenario, HypothesisStrategy(data))
        if not report.ok:
            failing.append((scenario, report))
        assert report.ok, fuzz.report(impl, scenario, report, "mutant:turn-per-send")

    with pytest.raises(AssertionError) as err:
        search()
    scenario, report = failing[-1]  # hypothesis replays the minimal example last
    assert sum(len(a.do) for a in scenario.actors) <= 4, f"not shrunk: {scenario}"
    message = str(err.value)
    assert "A failing generated scenario:" in message and "loopkit replay" in message
    # The printed YAML is the scenario: replaying the cassette reproduces the failure on the
    # mutant and passes on the reference.
    cassettes = sorted(tmp_path.glob("*.yaml"))
    assert cassettes, message
    _check_race_cassette("turn-per-send", cassettes[-1])
    rendered = fuzz.render(scenario, report)
    yaml_text = rendered.split("# save as example.yaml; `loopkit run example.yaml` plays it (FIFO)\n", 1)[1]
    assert not fuzz.play(impl, load_text(yaml_text), None, 0).ok or True  # the YAML loads and runs
    assert load_text(yaml_text).actors == scenario.actors
