"""One hunt, end to end: plan the windows, run the three phases of :mod:`.search` on the worker
pool, write the race cassettes, and assemble the report (:mod:`.report`).

``hunt()`` is what ``loopkit hunt`` and ``loopkit conformance --hunt`` call; its result is a
pure function of the implementation, the configuration and the shard.
"""

from __future__ import annotations

import gc
import logging
import re
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conformance.adapter import Implementation
from conformance.files import atomic_write
from simulator.errors import SimulationError

from . import pool, report, search, shards
from . import windows as win
from .workloads import Workload, by_name

Progress = Callable[[str, int, int], None]
"""``progress(phase, done, total)``: called as units finish."""

CHUNK = 4
"""Explored windows per unit of phase 2."""


@dataclass
class _Context:
    plans: list[search.WorkloadPlan]
    impl: Implementation
    against: Implementation | None
    config: search.Config
    impl_spec: str


_CTX: _Context | None = None


_PLANNING: tuple[Implementation, search.Config] | None = None


def _plan_unit(workload: Workload) -> tuple[list[Any], list[tuple[int, int]], str | None, dict[int, int]] | str:
    """One workload's windows, probed on a worker: an implementation that kills its process
    in its first run takes a worker with it, not the hunt and its report. A workload whose own
    run spins comes back as the :class:`~.windows.SpinError`'s message (raised by the parent)."""
    assert _PLANNING is not None
    try:
        wp = search.plan_workload(workload, *_PLANNING)
    except win.SpinError as exc:
        return str(exc)
    return wp.windows, wp.groups, wp.setup_error, wp.twins


def _plain_unit(unit: tuple[int, int, int]) -> list[search.Plain | None]:
    assert _CTX is not None
    p, start, end = unit
    # --against compares each window's runs on both implementations: twins are run too
    return search.plain(_CTX.plans[p], start, end, _CTX.impl, _CTX.against, skip_twins=_CTX.against is None)


def _explore_unit(unit: tuple[int, tuple[int, ...], tuple[tuple[int, ...] | None, ...]]
                  ) -> list[tuple[int, dict[str, Any] | None]]:
    assert _CTX is not None
    p, indices, widths = unit
    out = []
    for i, w in zip(indices, widths, strict=True):
        out.append(search.explore(_CTX.plans[p], i, _CTX.impl, _CTX.config, w))
        if search.hung(out[-1][1]):
            break  # the hunt stops: the unit's other windows may spin as long
    return out


def _cassette_unit(unit: tuple[int, int, dict[str, Any]]) -> tuple[str, str]:
    """``("yaml", text)``: the race cassette; ``("unreplayable", why)`` when the failing run does
    not replay on its own schedule (the implementation is not deterministic under it: an order
    that depends on object addresses, say): the finding stands, with no cassette."""
    assert _CTX is not None
    p, index, failure = unit
    try:
        return "yaml", search.cassette(_CTX.plans[p], index, failure, _CTX.impl, _CTX.impl_spec).to_yaml()
    except SimulationError as exc:
        return "unreplayable", (f"its failing run did not replay on its own schedule ({exc}): the implementation "
                                "is not deterministic there (an order that depends on object addresses or the "
                                "hash seed, say), so no race cassette")


@dataclass
class HuntResult:
    """A hunt's report (canonical, see :mod:`.report`) and what was written."""

    report: dict[str, Any]
    cassettes: list[Path] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.report["findings"]


def _describe(plans: list[search.WorkloadPlan]) -> Callable[[Any], str]:
    def describe(unit: Any) -> str:
        wp = plans[unit[0]]
        if isinstance(unit[1], int) and len(unit) == 3 and isinstance(unit[2], int):
            return f"windows {unit[1]}..{unit[2] - 1} of workload {wp.workload.name} ({wp.windows[unit[1]].group})"
        indices = unit[1] if isinstance(unit[1], tuple) else (unit[1],)
        return f"window {wp.windows[indices[0]].name!r}"
    return describe


def _widths(result: search.Plain | None) -> tuple[int, ...] | None:
    return None if result is None else result.widths


def _slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def _plain_units(plans: list[search.WorkloadPlan]) -> list[tuple[int, int, int]]:
    """Phase 1's units: runs of windows of one group, one mode and one number of actions, the
    single actions of every workload first (the order in which units run changes how soon a
    finding shows, never the result)."""
    units: list[tuple[int, tuple[int, int, int]]] = []
    for p, wp in enumerate(plans):
        for a, b in wp.groups:
            start = a
            for i in range(a + 1, b + 1):
                if i == b or (len(wp.windows[i].actions), wp.windows[i].mode) != (
                        len(wp.windows[start].actions), wp.windows[start].mode):
                    units.append((len(wp.windows[start].actions), (p, start, i)))
                    start = i
    return [u for _, u in sorted(units, key=lambda x: x[0])]


def hunt(impl: Implementation, impl_spec: str, config: search.Config, *, against: Implementation | None = None,
         workers: int = 1, shard: tuple[int, int] | None = None, out: Path | None = None,
         progress: Progress | None = None, should_stop: Callable[[], bool] | None = None,
         first: bool = False) -> HuntResult:
    """Hunt ``impl`` (see the module docstring); cassettes go under ``out`` when given. With
    ``first`` the hunt stops at its first finding (the report then says ``stopped``)."""
    tick = progress or (lambda phase, done, total: None)
    found = [False]
    spun = [False]  # a window ran past the wall-clock limit: every other may spin as long

    def stop() -> bool:
        return (first and found[0]) or spun[0] or bool(should_stop and should_stop())

    # Contained failures are logged as warnings (ERR-12) tens of thousands of times: with no
    # handler anywhere, logging's last resort would print every one on stderr.
    quiet = logging.NullHandler()
    logging.getLogger().addHandler(quiet)
    gc.freeze()  # the long-lived setup is no garbage: keep full collections cheap
    try:
        with warnings.catch_warnings():
            # A window that cancels a driver mid-way, and every run's teardown, leave coroutines
            # the implementation made (a listener's, a gather's child) that nothing will await:
            # Python warns as each is collected, on stderr, thousands of times, none a finding.
            warnings.filterwarnings("ignore", message=r"coroutine .* was never awaited", category=RuntimeWarning)
            try:
                return _hunt(impl, impl_spec, config, against, workers, shard, out, tick, stop, found, should_stop,
                             spun)
            finally:
                gc.collect()  # while the filter holds: the runs' leftovers are collected here, not after
    finally:
        gc.unfreeze()
        logging.getLogger().removeHandler(quiet)


def _hunt(impl: Implementation, impl_spec: str, config: search.Config, against: Implementation | None,
          workers: int, shard: tuple[int, int] | None, out: Path | None, tick: Progress,
          stop: Callable[[], bool], found: list[bool], should_stop: Callable[[], bool] | None,
          spun: list[bool]) -> HuntResult:
    global _CTX, _PLANNING
    workloads = search.plannable(by_name(list(config.workloads)), impl, config)
    _PLANNING = (impl, config)
    try:
        got0 = pool.run(_plan_unit, workloads, workers=workers, isolate=True,
                        describe=lambda w: f"the probe run of workload {w.name!r}")
    finally:
        _PLANNING = None
    for parts in got0:
        if isinstance(parts, str):
            raise win.SpinError(parts)
    every = search.checked([search.WorkloadPlan(w, *parts) for w, parts in zip(workloads, got0, strict=True)
                            if parts is not None and not isinstance(parts, str)])
    planned = [wp.workload.name for wp in every]
    order = {name: i for i, name in enumerate(planned)}
    if shard is not None:
        owner = shards.assign([len(wp.windows) for wp in every], shard[1])
        plans = [wp for wp, s in zip(every, owner, strict=True) if s == shard[0]]
    else:
        plans = every
    _CTX = _Context(plans, impl, against, config, impl_spec)
    describe = _describe(plans)
    stopped = False
    found[0] = any(wp.setup_error for wp in plans)  # a workload the implementation failed to set up
    try:
        # Phase 1: every window once, in plain order (none when a stop is due already: --first
        # and a workload the implementation could not set up).
        skipped = stop()
        units1 = [] if skipped else _plain_units(plans)
        total1 = sum(len(wp.windows) for wp in plans)
        done1 = [0]

        def tick1(i: int, results: list[search.Plain | None]) -> None:
            done1[0] += units1[i][2] - units1[i][1]
            found[0] = found[0] or any(r is not None and r.failure is not None for r in results)
            spun[0] = spun[0] or any(r is not None and search.hung(r.failure) for r in results)
            tick("plain", done1[0], total1)

        tick("plain", 0, total1)
        got1 = pool.run(_plain_unit, units1, workers=workers, isolate=True, done=tick1, should_stop=stop, describe=describe)
        stopped = skipped or spun[0] or any(r is None for r in got1)
        plain: list[list[search.Plain | None]] = [[None] * len(wp.windows) for wp in plans]
        for (p, a, _b), results in zip(units1, got1, strict=True):
            for k, r in enumerate(results or []):
                plain[p][a + k] = r
        for p, wp in enumerate(plans):
            search.with_twins(wp, plain[p])
        # Phase 2: the schedules of the first window of each distinct trace (or of every one).
        explored: list[dict[int, tuple[int, dict[str, Any] | None]]] = [{} for _ in plans]
        if not stopped:
            picks = [search.distinct(results, config.explore_all) for results in plain]
            units2 = [(p, tuple(ix[k:k + CHUNK]), tuple(_widths(plain[p][i]) for i in ix[k:k + CHUNK]))
                      for p, ix in enumerate(picks) for k in range(0, len(ix), CHUNK)]
            total2 = sum(len(ix) for ix in picks)
            done2 = [0]

            def tick2(i: int, results: list[tuple[int, dict[str, Any] | None]]) -> None:
                done2[0] += len(units2[i][1])
                found[0] = found[0] or any(f is not None for _, f in results)
                spun[0] = spun[0] or any(search.hung(f) for _, f in results)
                tick("explore", done2[0], total2)

            tick("explore", 0, total2)
            got2 = pool.run(_explore_unit, units2, workers=workers, isolate=True, done=tick2, should_stop=stop,
                            describe=describe)
            stopped = spun[0] or any(r is None for r in got2)
            for (p, indices, _w), outcomes in zip(units2, got2, strict=True):
                for i, outcome in zip(indices, outcomes or [], strict=False):
                    explored[p][i] = outcome
        sections = [_section(wp, plain[p], explored[p], order[wp.workload.name], against is not None)
                    for p, wp in enumerate(plans)]
        # Phase 3: race cassettes of the first windows of each failure signature of a workload.
        written: list[Path] = []
        if out is not None:
            units3 = []
            for p, s in enumerate(sections):
                per: dict[str, int] = {}
                for f in s["findings"]:
                    if "_failure" not in f:
                        continue  # a workload's failed setup: no window, no schedule to replay
                    if per.get(f["signature"], 0) < config.cassettes:
                        per[f["signature"]] = per.get(f["signature"], 0) + 1
                        f["cassette"] = f"cassettes/{_slug(plans[p].workload.name)}-{f['index']:05d}.yaml"
                        units3.append((p, f["index"], f["_failure"]))
            tick("cassettes", 0, len(units3))
            got3 = pool.run(_cassette_unit, units3, workers=workers, isolate=True, describe=describe,
                            done=lambda i, _r: tick("cassettes", i + 1, len(units3)))
            for (p, index, _f), made in zip(units3, got3, strict=True):
                f = next(f for f in sections[p]["findings"] if f["index"] == index)
                if made is None:  # never made (the hunt was stopped)
                    f.pop("cassette", None)
                    continue
                kind, text = made
                if kind != "yaml":
                    f.pop("cassette", None)
                    f["unreplayable"] = text
                    continue
                path = out / f["cassette"]
                path.parent.mkdir(parents=True, exist_ok=True)
                atomic_write(str(path), text)
                written.append(path)
        for s in sections:
            for f in s["findings"]:
                f.pop("_failure", None)
    finally:
        _CTX = None
    why = None
    if stopped:
        if should_stop is not None and should_stop():
            why = "interrupted"
        else:
            why = "wall-clock limit" if spun[0] else "first finding"
    rep = report.assemble(impl=impl_spec, config=config.to_dict(), sections=sections,
                          shard=f"{shard[0]}/{shard[1]}" if shard else None, planned=planned, stopped=why)
    return HuntResult(rep, written)


def _section(wp: search.WorkloadPlan, plain: list[search.Plain | None],
             explored: dict[int, tuple[int, dict[str, Any] | None]], order: int, differential: bool) -> dict[str, Any]:
    coverage: dict[str, dict[str, Any]] = {}
    sigs: dict[str, set[str]] = {}
    findings: list[dict[str, Any]] = []
    differences: list[dict[str, Any]] = []
    schedules = 0
    twins = 0
    for index, r in enumerate(plain):
        window = wp.windows[index]
        kind = window.point.kind
        row = coverage.setdefault(kind, {"enumerated": 0, "run": 0, "distinct": 0})
        row["enumerated"] += 1
        if r is None:  # never run (the hunt stopped early)
            continue
        if r.twin is None:
            schedules += 1
        else:
            twins += 1
        if r.reached:
            row["run"] += 1
            sigs.setdefault(kind, set()).add(r.signature)
        failure, phase = r.failure, "plain"
        if index in explored:
            runs, failure = explored[index]
            schedules += runs
            phase = "explore"
        if failure is not None:
            findings.append({
                "index": index, "window": window.name, "kind": kind, "phase": phase,
                "signature": search.signature_of(failure), "checks": failure["checks"], "rules": failure["rules"],
                "message": failure["message"], "strategy": failure["strategy"], "seed": failure["seed"],
                "_failure": failure,
            })
        if r.difference is not None:
            d = r.difference
            differences.append({"index": index, "window": window.name, "kind": kind, "at": d["at"],
                                "reference": d["reference"], "impl": d["impl"],
                                "signature": f"reference {d['reference']} / impl {d['impl']}"})
    for kind, row in coverage.items():
        row["distinct"] = len(sigs.get(kind, ()))
    if wp.setup_error is not None:
        # Its own run, with no window, failed while the world set it up: a finding of the
        # workload (it names no rule: what failed says which use broke; no cassette to replay).
        findings.append({"index": -1, "window": f"{wp.workload.name}: its own run, with no window (set-up)",
                         "kind": "workload", "phase": "setup", "signature": "setup []", "checks": ["setup"],
                         "rules": [], "message": wp.setup_error, "strategy": "fifo", "seed": 0})
    section: dict[str, Any] = {
        "name": wp.workload.name,
        "order": order,
        "windows": len(wp.windows),
        "run": sum(1 for r in plain if r is not None and r.reached),
        "distinct": search.signatures([r for r in plain if r is not None]),
        "explored": len(explored),
        "schedules": schedules,
        "twins": twins,
        "coverage": {k: coverage[k] for k in report.KINDS if k in coverage},
        "findings": findings,
        "differences": differences,
    }
    if not differential:
        section.pop("differences")
        section["differences"] = []
    return section


__all__ = ["HuntResult", "Progress", "hunt"]
