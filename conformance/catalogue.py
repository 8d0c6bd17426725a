"""The rule catalogue: every rule id of the agent-loop contract, in one place.

Each rule has the spec's tag (``seed``, ``ref``, ``fix`` or ``py`` for the Python specifics), a
one-line statement in the kit's own words, and whether it is required or belongs to an optional
feature (``persistence``, ``configuration``, ``injection``). An implementation declares the
optional features it supports; rules of the others report ``not-applicable``. The Python
specifics (PY-*) are about a loop running in-process in Python: they are ``not-applicable`` to an
implementation whose ``runtime`` is another one (a loop checked over the wire, ``--impl wire:``).

The tests checking a rule are not listed by hand: they are found from the ``@pytest.mark.rule``
marks of ``conformance/tests`` (``tests_for``), so the catalogue and the suite cannot drift apart
silently (a meta test checks that every rule has at least one test).
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from typing import Literal

Feature = Literal["persistence", "configuration", "injection"]
FEATURES: tuple[Feature, ...] = ("persistence", "configuration", "injection")
PYTHON = "python"
"""The runtime of an in-process implementation (one without a ``runtime`` attribute)."""

# The rules whose outcome depends on the interleaving: their tests also run under seeded
# random and pct schedules (issue 3).
RACE_PREFIXES: tuple[str, ...] = ("CANCEL-", "IDLE-", "STEER-")
RACE_IDS: frozenset[str] = frozenset({"MARKER-1", "LOOP-2", "LOOP-8"})


@dataclass(frozen=True)
class Rule:
    """One rule of the contract."""

    id: str
    tag: str
    section: str
    statement: str
    feature: Feature | None = None
    runtime: str | None = None
    """Only implementations running in this runtime are checked against the rule."""

    @property
    def required(self) -> bool:
        """Required rules must pass; optional ones only when the feature is supported."""
        return self.feature is None

    @property
    def race(self) -> bool:
        """Whether the rule is checked under several schedules."""
        return self.id in RACE_IDS or self.id.startswith(RACE_PREFIXES)


def _r(id: str, tag: str, section: str, statement: str, feature: Feature | None = None,
       runtime: str | None = None) -> Rule:
    return Rule(id, tag, section, statement, feature, runtime)


RULES: tuple[Rule, ...] = (
    # 1. Session log
    _r("LOG-1", "ref", "log", "append rejects non-JSON data up front and stores a snapshot, not the caller's object."),
    _r("LOG-2", "ref", "log", "append pushes before notifying session/event; a throwing listener leaves the event logged."),
    _r("LOG-3", "ref", "log", "seq is contiguous from 0 and assistant/chunk events are never filtered out."),
    _r("LOG-4", "ref", "log", "Turns pair and nest: one turn/end per turn/start before the next; nothing outside a turn."),
    _r("LOG-5", "ref", "log", "Steps pair and nest inside their turn; every assistant/chunk is inside an open step."),
    _r("LOG-6", "ref", "log", "Every tool/result follows a tool/call with the same call id."),
    _r("LOG-7", "ref", "log", "derive_messages maps the log to history (steering/context wrapped in tags), deterministically."),
    # 1b. Assembly
    _r("ASM-1", "ref", "assembly", "block-end carries the authoritative block; deltas after it are ignored."),
    _r("ASM-2", "ref", "assembly", "Unclosed blocks are kept as built from their deltas; tool calls can come from deltas alone."),
    _r("ASM-3", "ref", "assembly", "The message keeps the blocks in index order whatever order they close in."),
    _r("ASM-4", "ref", "assembly", "No finish chunk means stop; the last usage chunk is the step's usage."),
    # 2. Status and quiescence
    _r("STATUS-1", "ref", "status", "Only idle<->running and ->disposed transitions; repeats emit nothing; disposed is final."),
    _r("STATUS-2", "ref", "status", "A throwing agent/status listener is contained; the transition still happens."),
    _r("IDLE-1", "ref", "status", "when_idle() resolves at once when the agent is idle with nothing queued."),
    _r("IDLE-2", "ref", "status", "when_idle() resolves only at quiescence, on this agent's own transition to idle."),
    _r("IDLE-3", "ref", "status", "Waiters are released before agent/status is emitted, so a throwing listener cannot strand them."),
    _r("IDLE-4", "ref", "status", "On disposal when_idle() waits for the driver to have exited, not just the status flip."),
    # 3. Inbox and driver loop
    _r("INBOX-1", "seed", "loop", "Two FIFOs per agent: queued prompts for the next turn, steering for the running one."),
    _r("LOOP-1", "seed", "loop", "One driver per agent for its lifetime: wait idle, run a turn, repeat."),
    _r("LOOP-2", "ref", "loop", "A turn drains all queued prompts: a burst becomes one turn, one user/message per send."),
    _r("LOOP-3", "ref", "loop", "Turn numbers continue from the log's last turn/start and strictly increase."),
    _r("LOOP-4", "seed", "loop", "Turn shape: turn/start, user/messages, agent/turn-start, steps, turn/end, agent/turn-end, flush."),
    _r("LOOP-5", "seed", "loop", "Step shape: steering, step/start, request waterfall, stream, step-result, tools, step/end, continuation."),
    _r("LOOP-6", "ref", "loop", "The log records and tools dispatch the message that agent/step-result returned."),
    _r("LOOP-7", "ref", "loop", "A request with no model fails the step with an error naming the agent and the fix."),
    _r("LOOP-10", "ref", "loop", "The model adapter gets exactly the request the agent/request waterfall returned."),
    _r("LOOP-8", "seed", "loop", "Late steering is re-queued as a prompt; the next queued turn runs without going idle."),
    _r("LOOP-9", "ref", "loop", "send/steer emit agent/queued with the resolved source and the steering flag."),
    # 4. Continuation and steering
    _r("CONT-1", "seed", "steering", "Default continuation: tool calls or drained steering; the waterfall may force either way."),
    _r("CONT-2", "ref", "steering", "Steering added at step-end or continuation overrides a stop and reaches the next request."),
    _r("STEER-1", "ref", "steering", "steer() on an agent that is not running behaves exactly like send()."),
    _r("STEER-2", "ref", "steering", "Steering added during a step joins the next request of the same turn."),
    _r("STEER-3", "ref", "steering", "Steering added during a step that aborts becomes a queued prompt of a new turn."),
    # 5. Tools
    _r("TOOL-1", "ref", "tools", "A step's tool calls run one after another in the model's order."),
    _r("TOOL-2", "ref", "tools", "Arguments parse as JSON; '' becomes {}; non-JSON passes through raw; nothing crashes."),
    _r("TOOL-3", "ref", "tools", "Tool failures become is_error results 'Error: <message>' with error{name, code}; the turn goes on."),
    _r("TOOL-4", "ref", "tools", "tool/result.call_id is the model's call id whatever a tools/execute listener returns."),
    _r("TOOL-5", "ref", "tools", "An abort during a tool stops the step's remaining tools and the turn ends aborted."),
    # 6. Turn-end reasons
    _r("MAXTOK-1", "seed", "turn-end", "A max-tokens step ends the turn max-tokens, not completed."),
    _r("MAXTOK-2", "seed", "turn-end", "Any max-tokens step in the turn wins over later clean steps."),
    _r("MAXTOK-3", "seed", "turn-end", "disposed, aborted and error take precedence over max-tokens."),
    _r("MAXTOK-4", "ref", "turn-end", "max-tokens never leaks into the next turn."),
    _r("MAXTOK-5", "ref", "turn-end", "A max-tokens step dispatches no tool calls; its other blocks are kept."),
    _r("FINISH-1", "ref", "turn-end", "finish{error} ends the turn error; finish{aborted} is an ABORTED error unless the step was aborted."),
    _r("FINISH-2", "ref", "turn-end", "An adapter raising from stream() ends the turn error with its message and code."),
    # 7. Error containment
    _r("ERR-1", "seed", "errors", "A throwing plugin ends the turn, never the loop."),
    _r("ERR-2", "ref", "errors", "A throwing boundary/waterfall listener ends the turn error with one error event and one turn/end."),
    _r("ERR-3", "ref", "errors", "A throwing agent/step-end listener makes the turn end error and stops further steps."),
    _r("ERR-4", "ref", "errors", "A throwing session/event listener on boundaries keeps the turn balanced and the loop alive."),
    _r("ERR-5", "ref", "errors", "A throwing agent/error listener is contained."),
    _r("ERR-6", "ref", "errors", "A failing session/flush listener is reported via agent/error, appends nothing, stops nothing."),
    _r("ERR-7", "ref", "errors", "An error's string code is carried; without one there is no code key at all."),
    _r("ERR-8", "ref", "errors", "A failure before turn/start is reported with step 0 and the loop goes on."),
    _r("ERR-9", "ref", "errors", "Each failed turn is announced once via agent/error; the first failure wins."),
    _r("ERR-10", "ref", "errors", "A throwing agent/turn-end listener keeps the logged reason and is announced, not logged."),
    _r("ERR-11", "ref", "errors", "A throwing session/event listener on turn/start ends that turn error and consumes its prompt."),
    _r("ERR-12", "ref", "errors", "Every contained failure is logged as a warning naming the agent and the turn."),
    # 8. Cancellation
    _r("ABORT-1", "seed", "cancellation", "abort() aborts only the in-flight step; with no step in flight it does nothing."),
    _r("CANCEL-1", "seed", "cancellation", "cancel() clears both FIFOs, aborts the step, and the turn ends aborted{reason}."),
    _r("CANCEL-2", "seed", "cancellation", "A queued, unstarted prompt never runs and is never batched into the cancelled turn."),
    _r("CANCEL-3", "ref", "cancellation", "cancel() with nothing to cancel arms nothing: the next prompt runs."),
    _r("CANCEL-4", "ref", "cancellation", "Steering pending at cancel is dropped; steering added after it is re-queued."),
    _r("CANCEL-W1", "seed", "cancellation", "Window 1 (woken, not yet running): drop the turn silently, release waiters, run later work."),
    _r("CANCEL-W2", "seed", "cancellation", "Window 2 (running listener cancels): drop the turn; settle idle only if nothing is queued."),
    _r("CANCEL-W0", "fix", "cancellation", "Window 0 (before parking): queued-then-cancelled work is dropped and waiters released."),
    _r("CANCEL-STEP", "seed", "cancellation", "A cancel before a step's abort handle exists drops the step as an empty step."),
    _r("CANCEL-CONT", "seed", "cancellation", "A cancel during the continuation waterfall ends the turn aborted even if it voted continue."),
    _r("CANCEL-MID", "ref", "cancellation", "A cancel during a model stream or tool aborts the step and ends the turn aborted."),
    _r("MARKER-1", "seed", "cancellation", "The cancel marker is reset once per iteration: it never drops a later prompt."),
    # 9. Disposal
    _r("DISP-1", "seed", "disposal", "Disposing mid-turn emits status disposed and ends the turn disposed, balanced."),
    _r("DISP-2", "ref", "disposal", "Disposal is idempotent, unbreakable by listeners, releases waiters, ends the driver."),
    _r("DISP-3", "ref", "disposal", "send/steer/inject on a disposed agent raise a clear error."),
    _r("DISP-4", "ref", "disposal", "A throwing turn/end listener during disposal leaves the reason disposed."),
    _r("DISP-5", "ref", "disposal", "Disposal logs no error event and goes running -> disposed directly."),
    # 10. Injection
    _r("INJ-1", "ref", "injection", "inject() into an open turn appends context/message without running the model.", "injection"),
    _r("INJ-2", "ref", "injection", "inject() with no open turn writes a balanced one-shot injection turn and flushes it.", "injection"),
    _r("INJ-3", "ref", "injection", "The next request sees injected context at its position in the log.", "injection"),
    _r("INJ-4", "ref", "injection", "Bad input to an idle inject() raises after closing the turn, or writes nothing.", "injection"),
    # 11. Service
    _r("SVC-1", "seed", "service", "create(id) uses a fresh session id '{id}-session-{uuid}' per run."),
    _r("SVC-2", "seed", "service", "A programmatic create keeps the caller's session id; duplicate live ids are rejected."),
    _r("SVC-3", "seed", "service", "resume() continues a persisted session's turns and history; without persistence it fails clearly.", "persistence"),
    _r("SVC-4", "seed", "service", "Configured agents are created at start-up; bad configuration names the field.", "configuration"),
    _r("SVC-5", "ref", "service", "System prompt = sections then the agent's own prompt, blank-line joined; tool schemas sent."),
    _r("SVC-6", "ref", "service", "Live agents are looked up by id; disposal removes them even if a listener throws."),
    _r("SVC-7", "ref", "service", "Closing the service disposes its agents and releases pending waiters."),
    # 12. Python specifics
    _r("PY-1", "py", "python", "CancelledError and friends are never swallowed; cancelling the driver disposes, balanced.", runtime=PYTHON),
    _r("PY-2", "py", "python", "Listeners may be sync or async where awaited; emit runs listeners synchronously, in order.", runtime=PYTHON),
    _r("PY-3", "py", "python", "Time and ids come from injectable sources: the same seed gives the same bytes.", runtime=PYTHON),
)

RULES_BY_ID: dict[str, Rule] = {rule.id: rule for rule in RULES}


def rule(rule_id: str) -> Rule:
    """The rule with this id (``KeyError`` for an unknown id)."""
    return RULES_BY_ID[rule_id]


def runtime_of(impl: object) -> str:
    """The runtime ``impl`` runs in: its ``runtime`` attribute, else ``python`` (in-process)."""
    return str(getattr(impl, "runtime", None) or PYTHON)


def not_applicable(rule: Rule, impl: object) -> str | None:
    """Why ``rule`` does not apply to ``impl`` (an optional feature it does not declare, or a
    rule about another runtime), or ``None`` when it applies."""
    if rule.feature is not None and rule.feature not in set(getattr(impl, "features", ())):
        return f"feature {rule.feature} not supported"
    if rule.runtime is not None and runtime_of(impl) != rule.runtime:
        return f"a {rule.runtime} rule; the implementation runs in {runtime_of(impl)}"
    return None


def unknown_ids(ids: Iterable[str]) -> list[str]:
    """The ids of ``ids`` that are not in the catalogue, in the given order."""
    return [i for i in ids if i not in RULES_BY_ID]


def unknown_ids_problem(ids: Iterable[str]) -> str | None:
    """The one-line usage error for ``--rule`` ids not in the catalogue (``None``: all known)."""
    unknown = unknown_ids(ids)
    return f"unknown rule id(s): {', '.join(map(repr, unknown))} (see `loopkit rules`)" if unknown else None


@cache
def test_index() -> dict[str, tuple[str, ...]]:
    """Rule id -> the names (``module::function``) of the suite's tests marked with it.

    Read from the ``rule`` marks of the test functions, without running pytest.
    """
    from conformance import tests as tests_pkg

    index: dict[str, list[str]] = {r.id: [] for r in RULES}
    for info in sorted(pkgutil.iter_modules(tests_pkg.__path__), key=lambda m: m.name):
        if not info.name.startswith("test_"):
            continue
        module = importlib.import_module(f"conformance.tests.{info.name}")
        for name, fn in sorted(vars(module).items()):
            if not name.startswith("test_") or not callable(fn):
                continue
            for mark in getattr(fn, "pytestmark", []):
                if mark.name == "rule":
                    for rid in mark.args:
                        index.setdefault(rid, []).append(f"{info.name}.py::{name}")
    return {rid: tuple(names) for rid, names in index.items()}


def tests_for(rule_id: str) -> tuple[str, ...]:
    """The suite's tests that check ``rule_id``."""
    return test_index().get(rule_id, ())
