"""A failing property example as a race cassette that ``loopkit replay`` reproduces.

The property world (``world.World`` on ``conformance.harness.Kit`` and ``conformance.fakes``) and
the scenario world (``conformance.scenarios``, on ``simulator.fake_llm``) do not offer the same
choice points, so the property run's schedule cannot be replayed by the scenario engine as it is.
Instead the example is translated to a YAML scenario (``translate``), the scenario engine explores
its interleavings on the same implementation (FIFO, then seeded ``random`` and ``pct`` schedules),
shrinks the first failing schedule, and the cassette is written with ``cassettes.races``: the
scenario inline, the shrunk tape, the failure, the trace.

The scenario's checks are the engine's always-on invariants plus, where the property violation
has a counterpart among the scenario check kinds, that violation stated as a check
(``violation_checks``). Those are checks of *this* example: a cassette is only kept if its replay
on the reference passes (else the extra checks are dropped and the search is done again).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import re
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..adapter import Implementation
from .model import PropScenario
from .translate import Untranslatable, to_yaml

BUDGET = 200
"""Schedules per strategy the scenario engine tries (``random``, then ``pct``)."""

CASSETTE_DIR_ENV = "LOOPKIT_PROPERTY_CASSETTES"
"""Where failing property examples' race cassettes go (default: a ``loopkit-races`` directory
under the system's temporary directory, so a failing test never writes into the repository:
copy a cassette into ``cassettes/races/`` to keep it as a regression test)."""


@dataclass
class RaceResult:
    """A race cassette written for a failing example (``path``), or why there is none."""

    path: Path | None
    command: str | None = None
    checks: list[str] | None = None
    """The failed scenario checks of the cassette's run."""
    note: str = ""

    def describe(self) -> str:
        """Lines for a failing example's message."""
        if self.path is None:
            return f"# no race cassette: {self.note}"
        lines = [f"# race cassette: {self.path}", f"#   replay: {self.command}"]
        if self.checks:
            lines.append(f"#   failing scenario checks: {', '.join(self.checks)}")
        if self.note:
            lines.append(f"#   note: {self.note}")
        return "\n".join(lines)


def cassette_dir() -> Path:
    """The directory failing examples' cassettes are written to (see ``CASSETTE_DIR_ENV``)."""
    configured = os.environ.get(CASSETTE_DIR_ENV)
    return Path(configured) if configured else Path(tempfile.gettempdir()) / "loopkit-races"


def example_name(scenario: PropScenario) -> str:
    """A stable name for the example (the cassette's name and file stem)."""
    return "property-" + hashlib.sha1(repr(scenario).encode()).hexdigest()[:10]


# A property violation -> a scenario check (YAML form) of the same fact, where one exists.
_LOST = re.compile(r"^MARKER-1: prompt (\S+) \(")
_RAN_AFTER_CANCEL = re.compile(r"^CANCEL-2: prompt (\S+) \(")
_NOT_BATCHED = re.compile(r"^LOOP-2: turn \d+ did not take prompt (\S+), queued before it started \(it took (\S+?)[,)]")
_TURN_END = re.compile(r"^(MARKER-1|MAXTOK-[234]|TOOL-5): .*turn (\d+)")
_WRONG_END = {
    "MARKER-1": "aborted",  # "turn N ends aborted but no cancel() or abort() came during it"
    "MAXTOK-2": "completed",  # "had a max-tokens step but ends completed"
    "MAXTOK-4": "max-tokens",  # "ends max-tokens without a max-tokens step"
}


def violation_checks(violations: list[str]) -> list[dict[str, Any]]:
    """The violations that have a counterpart among the scenario check kinds, as YAML checks:
    a lost prompt (MARKER-1) as ``ran``, a prompt run after its cancel (CANCEL-2) as
    ``not_ran``, a wrong turn-end reason (MARKER-1, MAXTOK-2/4) as ``no_event`` on
    ``agent/turn-end``, a prompt a turn did not batch (LOOP-2 "turn N did not take prompt P ...
    (it took X, ...)") as ``same_turn: [X, P]``. The rest (IDLE-2, LOOP-2 repeats, STEER-2,
    CONT-2, TOOL-1/3/5, MAXTOK-3/5, ERR-7) is left to the always-on invariants."""
    out: list[dict[str, Any]] = []
    for violation in violations:
        if m := _LOST.match(violation):
            out.append({"ran": m.group(1)})
        elif (m := _NOT_BATCHED.match(violation)) and m.group(2) != "none":
            out.append({"same_turn": [m.group(2), m.group(1)]})
        elif m := _RAN_AFTER_CANCEL.match(violation):
            out.append({"not_ran": m.group(1)})
        elif (m := _TURN_END.match(violation)) and m.group(1) in _WRONG_END:
            where = {"turn": int(m.group(2)), "reason": _WRONG_END[m.group(1)]}
            out.append({"no_event": {"kind": "agent/turn-end", "where": where}})
    unique: list[dict[str, Any]] = []
    for check in out:
        if check not in unique:
            unique.append(check)
    return unique


def race_cassette(
    scenario: PropScenario,
    impl: Implementation,
    impl_spec: str,
    violations: Sequence[str] = (),
    *,
    out_dir: Path | None = None,
    budget: int = BUDGET,
) -> RaceResult:
    """Translate ``scenario``, find a failing schedule for it on ``impl`` with the scenario
    engine, shrink it and write the race cassette (``out_dir``, default ``cassette_dir()``).

    ``impl_spec`` is how ``--impl`` names ``impl`` (``reference``, ``mutant:NAME``,
    ``module:attr``); it is recorded in the cassette and used in the replay command."""
    from cassettes import races
    from conformance.impl import resolve
    from conformance.scenarios.model import ScenarioError
    from conformance.scenarios.yaml_format import load_text

    name = example_name(scenario)
    extra = violation_checks(list(violations))
    reference = resolve(None)
    note = ""
    with _quiet(impl), _quiet(reference):
        for checks in ([extra, []] if extra else [[]]):
            try:
                text = to_yaml(scenario, name, checks)
                loop_scenario = load_text(text, origin=name)
            except (Untranslatable, ScenarioError) as exc:
                return RaceResult(None, note=f"the example has no YAML form ({exc})")
            loop_scenario.source = {"yaml": text}
            record = _search(loop_scenario, impl, impl_spec, reference, budget)
            if record is None:
                note = (f"the scenario engine found no failing schedule for the translated example on "
                        f"{impl_spec} that passes on the reference (fifo, {budget} random, {budget} pct)")
                continue
            target = (out_dir or cassette_dir()) / f"{name}.yaml"
            races.save(record, target)
            failed = sorted({f["check"] for f in record.failure["checks"]})
            command = f"loopkit replay {target}" + (f" --impl {impl_spec}" if impl_spec != "reference" else "")
            if extra and checks != extra:
                note = "the violation stated as scenario checks failed on the reference too: left out"
            return RaceResult(target, command, failed, note)
    return RaceResult(None, note=note)


@contextlib.contextmanager
def _quiet(impl: Implementation) -> Iterator[None]:
    """The searched runs contain failures on purpose: keep their contained-failure warnings off
    the console (as ``play.run_one`` does)."""
    logger = logging.getLogger(getattr(impl, "logger_name", "") or "reference_loop")
    before = logger.disabled
    logger.disabled = True
    try:
        yield
    finally:
        logger.disabled = before


def _search(
    loop_scenario: Any, impl: Implementation, impl_spec: str, reference: Implementation, budget: int
) -> Any:
    """The cassette of the first failing schedule on ``impl`` (FIFO, then seeded random, then
    pct) whose shrunk tape passes on the reference; ``None`` when the budget runs out.

    A failure the reference shares is no race of ``impl`` (the translation's approximations or a
    false positive of a scenario check): the search goes on past its seed."""
    import simulator
    from conformance.scenarios import cassette, engine

    def keep(found: Any) -> Any:
        shrunk = engine.shrink(loop_scenario, impl, found.failure)
        record = cassette.build(loop_scenario, impl_spec, found, shrunk)
        if impl is reference or impl_spec == "reference":
            return record
        try:
            passes = cassette.replay(record, reference).ok
        except simulator.Divergence:
            passes = False
        return record if passes else None

    fifo = engine.run_one(loop_scenario, impl)
    if not fifo.ok:
        record = keep(engine.Exploration("fifo", 1, 0, 1, runs=1, failing_seed=0, found_at=1, failure=fifo))
        if record is not None:
            return record
    for strategy in ("random", "pct"):
        seed = 0
        while seed < budget:
            found = engine.explore(loop_scenario, impl, strategy=strategy, budget=budget - seed, seed=seed)
            if found.failure is None or found.failing_seed is None:
                break
            record = keep(found)
            if record is not None:
                return record
            seed = found.failing_seed + 1
    return None
