""""Needs hook" failures: a rule the suite could not observe, not a rule the implementation broke.

A rule test observes its rule through the adapter: the session log, the agent's verbs, and the
bus. Some rules name the notification or waterfall they are about (LOOP-9 is about
``agent/queued``, CANCEL-W2 about a synchronous ``agent/status('running')`` listener); a test of
such a rule fails normally when that hook misbehaves or never fires: that is a violation.

Other tests need a hook their rule does not name, to drive the scenario (a steer from an
``agent/turn-end`` listener, for CANCEL-4) or to observe it (tool order through ``tools/execute``,
for TOOL-1). On an implementation that never emits that hook, twenty such tests would fail with
twenty unrelated-looking messages although one notification is missing. So a test declares the
hooks it relies on (``Kit.on(..., needs=REASON)``, ``Kit.record(..., needs=REASON)`` or
``Kit.require(hook, REASON)``), and when the implementation never called it during the test,
the test fails with :class:`NeedsHook`, whose message starts with ``needs hook <name>: ``: the
reports group those failures by hook ("needs hook agent/queued: 3 tests").

A hook counts as present when any listener the test registered on it was called at least once,
whatever the arguments. A test whose hook did fire but whose rule then failed is an ordinary
failure.
"""

from __future__ import annotations

import re
from typing import Protocol

PREFIX = "needs hook "
"""Every :class:`NeedsHook` message starts with this (then the hook name, a colon, the reason)."""

_HOOK = re.compile(r"needs hook (\S+?): ")


class NeedsHook(AssertionError):
    """The test could not observe its rule: the implementation never emitted ``hook``, which the
    test relies on although its rule does not name it."""

    def __init__(self, hook: str, reason: str) -> None:
        self.hook = hook
        self.reason = reason
        super().__init__(f"{PREFIX}{hook}: {reason}")


def hook_of(message: str) -> str | None:
    """The hook a failure message says is missing (``None`` when it is not a needs-hook failure).

    Accepts the bare message and pytest's one-line form (``conformance.hooks.NeedsHook: needs
    hook agent/queued: ...``).
    """
    found = _HOOK.search(message)
    return found.group(1) if found else None


class _Counting(Protocol):
    def calls(self, hook: str) -> int: ...


def require_notification(kit: _Counting, hook: str, reason: str) -> None:
    """Raise :class:`NeedsHook` unless a listener the test registered on ``hook`` was called.

    ``reason`` says what the test observes through the hook (it ends the message).
    """
    if kit.calls(hook) == 0:
        raise NeedsHook(hook, reason)
