"""Known gaps: realistic mutants the conformance suite does not kill yet.

They are addressable as ``--impl mutant:NAME`` like the catalogue, but ``loopkit selfcheck``
leaves them out (it must pass): each entry's ``notes`` says which test the suite lacks. When the
suite gains that test, the mutant moves to its section module. The property search
(``conformance.scenario.fuzz``) and the hunt find some of them on their own.
"""

from __future__ import annotations

from ._build import Mutant

# Empty since the suite gained the missing tests: cancel-gate-ignored (CANCEL-CONT, now in
# ``cancellation``), inject-open-from-status (INJ-1, ``lifecycle``) and late-failure-announced-
# twice (ERR-9, ``errors``). Keep the list: a realistic mutant found alive goes here first.
GAPS: list[Mutant] = []
