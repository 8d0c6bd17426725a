"""Expected-failures baselines: adopt the suite before an implementation passes every rule.

A baseline is a text file with one entry per line: a rule id (``CANCEL-W2``) or a test id
(``test_cancel.py::test_window2_cancel_settles_idle``, optionally with its parametrization
``[pct-1]``). Blank lines and ``#`` comments are ignored.

* A failure covered by an entry does not fail the run.
* An entry that now passes is *stale* and fails the run, so the baseline shrinks as the
  implementation improves.
* An entry naming no known rule or test is an error (exit 2).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from cassettes import inputs

from . import catalogue


class BaselineError(Exception):
    """A baseline file that cannot be used (one-line message)."""


@dataclass
class Baseline:
    """The entries of a baseline file."""

    rules: set[str] = field(default_factory=set)
    tests: set[str] = field(default_factory=set)
    path: str = ""

    def excuses(self, test_id: str, rule_id: str) -> bool:
        """Whether a failure of ``test_id`` (checking ``rule_id``) is expected."""
        return rule_id in self.rules or test_id in self.tests or test_id.split("[", 1)[0] in self.tests


def parse(text: str, *, path: str = "<baseline>") -> Baseline:
    """Parse baseline text; raise ``BaselineError`` naming the first bad line."""
    known_tests = {name for names in catalogue.test_index().values() for name in names}
    baseline = Baseline(path=path)
    for number, raw in enumerate(text.splitlines(), start=1):
        entry = raw.split("#", 1)[0].strip()
        if not entry:
            continue
        if entry in catalogue.RULES_BY_ID:
            baseline.rules.add(entry)
        elif "::" in entry and entry.split("[", 1)[0] in known_tests:
            baseline.tests.add(entry)
        else:
            raise BaselineError(f"{path}:{number}: {entry!r} is neither a rule id nor a test id of the suite")
    return baseline


def load(path: str | Path) -> Baseline:
    """Read a baseline file; raise ``BaselineError`` (missing, unreadable, bad entry)."""
    try:
        text = inputs.read_text(path)
    except OSError as exc:
        raise BaselineError(f"cannot read baseline {str(path)!r}: {exc}") from None
    return parse(text, path=str(path))
