"""Subprocess side of ``check_determinism``: read a JSON request on stdin, print one trace."""

from __future__ import annotations

import json
import sys

from simulator.explore import _one_trace, resolve_target
from simulator.schedule import Schedule


def main() -> None:
    req = json.loads(sys.stdin.read())
    target = resolve_target(req["target"])
    sched = Schedule.from_dict(req["schedule"]) if req.get("schedule") else None
    sys.stdout.write(_one_trace(target, sched, req.get("strategy", "fifo"), int(req.get("seed", 0)),
                                req.get("run_kwargs") or {}))
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
