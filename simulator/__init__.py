"""A deterministic asyncio runtime: virtual time, explorable schedules, exact replay.

Entry points::

    result = simulator.run(main, strategy=None, seed=0)      # one run (None = FIFO)
    simulator.observe("kind", key=value)                      # record an observable event
    simulator.on_observe(callback)                            # be told of each event (this run)
    simulator.timeline_length(), simulator.current_timeline() # the timeline so far
    simulator.sources.current_sources()                       # seeded sources inside a run
    simulator.explore(main, strategy=..., budget=N)           # search schedules for a failure
    simulator.replay(main, schedule, strict=True)             # re-run a recorded schedule
    simulator.shrink(main, schedule, is_failure=...)          # minimise a failing schedule
    simulator.check_determinism(target, ...)                  # run twice, diff the timelines
    simulator.shared([0]); simulator.access(obj, write=True)  # declare shared state (dpor)
    with simulator.allow_blocking(): ...                      # deliberate blocking I/O in a run
    await simulator.wait_quiescent()                          # until nothing else is ready

See docs/simulator.md.
"""

from __future__ import annotations

from simulator._runtime import (
    ESCAPE,
    SimLoop,
    allow_blocking,
    current_loop,
    current_timeline,
    observe,
    observe_fields,
    on_observe,
    ready_position,
    run,
    timeline_length,
    wait_quiescent,
)
from simulator.errors import Divergence, ScheduleError, SimulationError
from simulator.explore import (
    DeterminismReport,
    ExploreResult,
    ShrinkResult,
    check_determinism,
    explore,
    replay,
    shrink,
)
from simulator.result import RunResult
from simulator.schedule import Choice, Schedule, load_schedule, save_schedule
from simulator.strategies.dpor import access, shared
from simulator.supervise import WallClockExceeded

__all__ = [
    "ESCAPE",
    "Choice",
    "DeterminismReport",
    "Divergence",
    "ExploreResult",
    "RunResult",
    "Schedule",
    "ScheduleError",
    "ShrinkResult",
    "SimLoop",
    "SimulationError",
    "WallClockExceeded",
    "access",
    "allow_blocking",
    "check_determinism",
    "current_loop",
    "current_timeline",
    "explore",
    "load_schedule",
    "observe",
    "observe_fields",
    "on_observe",
    "ready_position",
    "replay",
    "run",
    "save_schedule",
    "shared",
    "shrink",
    "timeline_length",
    "wait_quiescent",
]
