"""The mutant catalogue: well-formed, covering the spec, every patch applying, addressable."""

from __future__ import annotations

import dataclasses

import pytest

from conformance import catalogue, mutants
from conformance.impl import ImplError, resolve
from conformance.mutants import GAPS, MUTANTS, Mutant, MutantError, Patch, build
from conformance.mutants._build import patched_source

SECTIONS = {"1", "1b", "2", "3", "4", "5", "6", "7", "8", "9", "10", "11", "12"}

# The bugs issue 4 names explicitly, by catalogue name.
REQUIRED = {
    "w2-settle-unconditionally",  # the seed's pre-fix window 2
    "w1-release-with-replacement",
    "marker-kept-in-window2",  # marker not reset after a dropped turn
    "cancel-idle-arms-marker",
    "marker-reset-on-idle-only",
    "maxtok-overwrites-abort",
    "maxtok-reset-by-clean-step",
    "maxtok-leaks",
    "maxtok-dispatches-tools",
    "steering-requeued-after-cancel",
    "late-steering-dropped",
    "throwing-listener-ends-loop",
    "no-step-end-on-error",
    "waiters-after-status",
    "turn-per-send",
    "tool-result-listener-id",
}

ALL: list[Mutant] = [*MUTANTS.values(), *GAPS.values()]


def test_catalogue_size_and_required_bugs() -> None:
    assert len(MUTANTS) >= 20
    assert REQUIRED <= set(MUTANTS), f"missing: {sorted(REQUIRED - set(MUTANTS))}"
    assert not set(MUTANTS) & set(GAPS)


def test_every_spec_section_has_a_killed_mutant() -> None:
    covered = {m.section for m in MUTANTS.values()}
    assert covered == SECTIONS, f"sections without a mutant: {sorted(SECTIONS - covered)}"


@pytest.mark.parametrize("mutant", ALL, ids=lambda m: m.name)
def test_mutant_is_well_formed(mutant: Mutant) -> None:
    assert mutant.name == mutant.name.lower() and " " not in mutant.name
    assert mutant.description and "\n" not in mutant.description
    assert mutant.rules and not catalogue.unknown_ids(list(mutant.rules))
    assert mutant.section in SECTIONS
    assert mutant.patches and all(p.old != p.new for p in mutant.patches)


@pytest.mark.parametrize("mutant", ALL, ids=lambda m: m.name)
def test_mutant_builds_and_differs_from_the_reference(mutant: Mutant) -> None:
    from reference_loop import ReactLoopAgent

    service = build(mutant)
    # A patched copy of the service module when a module below it is patched, else a subclass.
    assert service.__name__ == f"MutantService_{mutant.name.replace('-', '_')}"
    assert callable(service.create) and callable(service.create_agent)
    assert service.agent_class is not ReactLoopAgent
    assert service.agent_class.__name__ == "ReactLoopAgent"
    for file in mutant.files:
        # The patched source really differs (the anchor was found exactly once).
        patches = [p for p in mutant.patches if p.file == file]
        assert patched_source(file, patches) != patched_source(file, [])


@pytest.mark.parametrize("name", ["maxtok-leaks", "turn-per-send", "log-notify-before-push"])
def test_resolvable_as_impl(name: str) -> None:
    impl = resolve(f"mutant:{name}")
    assert impl.name == f"mutant:{name}"
    assert mutants.get(name) is impl  # built once per process


def test_gaps_resolvable_too(monkeypatch: pytest.MonkeyPatch) -> None:
    # The known-gap list is empty today (every realistic mutant found so far is killed), so a
    # probe entry stands in for one: a gap must stay addressable as ``mutant:NAME``.
    probe = dataclasses.replace(MUTANTS["maxtok-leaks"], name="gap-probe")
    monkeypatch.setitem(GAPS, probe.name, probe)
    assert resolve("mutant:gap-probe").name == "mutant:gap-probe"
    assert "gap-probe" not in mutants.names(), "the self-check leaves gaps out"


# The former known gaps, killed since the suite gained their tests, by the rule that kills each.
FORMER_GAPS = {
    "cancel-gate-ignored": ("8", "CANCEL-CONT"),
    "inject-open-from-status": ("10", "INJ-1"),
    "late-failure-announced-twice": ("7", "ERR-9"),
}


@pytest.mark.parametrize("name", sorted(FORMER_GAPS))
def test_former_gaps_are_catalogued(name: str) -> None:
    section, rule = FORMER_GAPS[name]
    assert name in MUTANTS and name not in GAPS
    assert MUTANTS[name].section == section and rule in MUTANTS[name].rules


def test_unknown_mutant_is_an_impl_error() -> None:
    with pytest.raises(ImplError, match="unknown mutant 'nope'"):
        resolve("mutant:nope")


def test_a_stale_patch_is_reported() -> None:
    broken = Mutant("stale", "a patch whose anchor is gone", ("LOOP-1",), "3", (Patch("agent", "no such text\n", "x"),))
    with pytest.raises(MutantError, match=r"stale: patch anchor not found in reference_loop/agent\.py"):
        build(broken)


def test_an_ambiguous_patch_is_reported() -> None:
    ambiguous = Mutant("dup", "an anchor found twice", ("LOOP-1",), "3", (Patch("agent", "self", "this"),))
    with pytest.raises(MutantError, match=r"found \d+ times"):
        build(ambiguous)


def test_mutants_do_not_touch_the_reference() -> None:
    import reference_loop.agent as agent

    build(MUTANTS["maxtok-leaks"])
    assert "_hit_max_tokens" not in agent.ReactLoopAgent.__init__.__code__.co_names


def test_docs_list_every_mutant() -> None:
    from pathlib import Path

    docs = (Path(__file__).resolve().parents[2] / "docs" / "mutants.md").read_text(encoding="utf-8")
    missing = [m.name for m in ALL if f"{m.name}" not in docs]
    assert not missing, f"docs/mutants.md does not mention: {missing}"
