"""Known gaps: realistic mutants the conformance suite does not kill yet.

They are addressable as ``--impl mutant:NAME`` like the catalogue, but ``loopkit selfcheck``
leaves them out (it must pass): each entry's ``notes`` says which test the suite lacks. When the
suite gains that test, the mutant moves to its section module. The property tests
(``conformance.properties``) find some of them on their own.
"""

from __future__ import annotations

from ._build import Mutant, Patch

GAPS = [
    Mutant(
        "cancel-gate-ignored",
        "the continuation gate does not check the marker: a cancel during the continuation "
        "waterfall lets a further (empty) step open before the next step's gate drops it",
        ("CANCEL-CONT",),
        "8",
        (
            Patch(
                "agent",
                """\
            # CANCEL-CONT: a cancel during the continuation waterfall wins over "continue".
            if self._marker is not None:
                turn.aborted = self._marker
                return
""",
                "",
            ),
        ),
        notes="test_cancel_at_continuation_gate should assert a single step/start (no further step)",
    ),
    Mutant(
        "inject-open-from-status",
        "inject() decides whether a turn is open from the status instead of the log, so an "
        "inject while the turn flushes (still running, turn closed) writes context outside a turn",
        ("INJ-1", "LOG-4"),
        "10",
        (
            Patch(
                "agent",
                "        if self._session.open_turn() is not None:\n",
                '        if self._status == "running":\n',
            ),
        ),
        interleaving=True,
        notes="INJ-1 needs a test injecting from a session/flush listener (running, no open turn)",
    ),
    Mutant(
        "late-failure-announced-twice",
        "a failure after turn/end (a failing flush) is announced even when the turn already failed, "
        "so a failed turn is announced twice",
        ("ERR-9", "ERR-6"),
        "7",
        (
            Patch(
                "agent",
                "        if self._disposed or turn.failure is not None:\n            return\n        turn.failure = exc\n",
                "        if self._disposed:\n            return\n        turn.failure = exc\n",
            ),
        ),
        notes="ERR-9 needs a turn with two failures (e.g. a failed step then a failing flush)",
    ),
]
