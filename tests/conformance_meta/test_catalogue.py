"""The catalogue against the spec's id list and the suite's rule marks."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from conformance import catalogue

SPEC = Path(__file__).resolve().parents[2].parent / "shared" / "spec" / "agent-loop-spec.md"


def spec_ids() -> list[str]:
    if not SPEC.is_file():
        pytest.skip(f"spec not present at {SPEC}")
    return re.findall(r"^- \*\*([A-Z0-9]+-[A-Z0-9]+)\*\*", SPEC.read_text(encoding="utf-8"), flags=re.M)


def test_catalogue_matches_spec_ids() -> None:
    ids = spec_ids()
    assert len(ids) == len(set(ids)), "the spec repeats an id"
    missing = sorted(set(ids) - set(catalogue.RULES_BY_ID))
    extra = sorted(set(catalogue.RULES_BY_ID) - set(ids))
    assert not missing and not extra, f"catalogue differs from the spec: missing {missing}, extra {extra}"
    assert [r.id for r in catalogue.RULES] == ids, "the catalogue keeps the spec's order"


def test_tags_match_spec() -> None:
    text = SPEC.read_text(encoding="utf-8") if SPEC.is_file() else pytest.skip("no spec")
    for rule in catalogue.RULES:
        match = re.search(rf"^- \*\*{re.escape(rule.id)}\*\* (\[(\w+)\])?", text, flags=re.M)
        assert match, rule.id
        assert (match.group(2) or "py") == rule.tag, rule.id


def test_every_rule_has_a_test() -> None:
    index = catalogue.test_index()
    untested = [rid for rid in catalogue.RULES_BY_ID if not index.get(rid)]
    assert untested == []


def test_no_rule_rests_on_a_single_scenario() -> None:
    # Issue 11: every rule is checked by at least two distinct test functions (different
    # scenarios or observation paths), so one broken test cannot hide or fake a rule.
    index = catalogue.test_index()
    single = {rid: tests for rid, tests in index.items() if rid in catalogue.RULES_BY_ID and len(set(tests)) < 2}
    assert single == {}, f"rules with fewer than two tests: {single}"


def test_marks_name_known_rules() -> None:
    assert catalogue.unknown_ids(catalogue.test_index()) == []


def test_optional_rules_are_the_optional_features() -> None:
    optional = {r.id: r.feature for r in catalogue.RULES if not r.required}
    assert optional == {
        "INJ-1": "injection", "INJ-2": "injection", "INJ-3": "injection", "INJ-4": "injection",
        "SVC-3": "persistence", "SVC-4": "configuration",
    }


def test_race_rules() -> None:
    race = {r.id for r in catalogue.RULES if r.race}
    assert {"CANCEL-W1", "CANCEL-W2", "IDLE-2", "MARKER-1", "LOOP-2", "LOOP-8", "STEER-3"} <= race
    assert "LOOP-1" not in race and "ABORT-1" not in race


def test_python_rules_apply_to_python_implementations_only() -> None:
    assert {r.id for r in catalogue.RULES if r.runtime is not None} == {"PY-1", "PY-2", "PY-3"}

    class InProcess:
        features = frozenset({"injection"})

    class Elsewhere(InProcess):
        runtime = "node"

    py1, inj1, loop1 = (catalogue.rule(i) for i in ("PY-1", "INJ-1", "LOOP-1"))
    assert catalogue.not_applicable(py1, InProcess()) is None, "in-process (no runtime attribute) is Python"
    assert catalogue.not_applicable(py1, Elsewhere()) == "a python rule; the implementation runs in node"
    assert catalogue.not_applicable(inj1, Elsewhere()) is None and catalogue.not_applicable(loop1, Elsewhere()) is None
    assert catalogue.not_applicable(catalogue.rule("SVC-3"), Elsewhere()) == "feature persistence not supported"


def test_a_rule_selection_collects_exactly_the_tests_the_whole_suite_marks_with_it() -> None:
    # `--rule` hands pytest only the rule's test functions (runner._targets, from the catalogue's
    # index): what runs must be what filtering the whole suite by the marks selects, no more, no
    # less, in the same order (the reports list tests in the order they ran)
    import pytest as _pytest

    from conformance.runner import _targets

    class Ids:
        def __init__(self) -> None:
            self.ids: list[str] = []

        def pytest_collection_finish(self, session: _pytest.Session) -> None:
            self.ids = [item.nodeid.split("conformance/tests/")[-1] for item in session.items]

    rules = ["IDLE-3", "MAXTOK-2", "TOOL-1", "LOOP-2"]
    common = ["--collect-only", "-q", "-p", "no:cacheprovider", "-c", os.devnull, "--rootdir",
              str(Path(__file__).resolve().parents[2]), "--loopkit-schedules", "1",
              *(arg for rid in rules for arg in ("--loopkit-rule", rid))]
    narrow, whole = Ids(), Ids()
    assert _pytest.main(["--pyargs", *_targets(rules), *common], plugins=[narrow]) == 0
    assert _pytest.main(["--pyargs", "conformance.tests", *common], plugins=[whole]) == 0
    assert narrow.ids == whole.ids and len(whole.ids) > 6, (narrow.ids, whole.ids)
    assert _targets([]) == ["conformance.tests"]
