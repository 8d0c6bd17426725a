"""The whole conformance suite against each hostile adapter of ``tests/hostile/``.

Each must end in a clear per-rule verdict in bounded time: exit 1 (2 for a setup error) with a
complete table and JSON report, in under 2 minutes of wall time, never exit 0 (the print flood
excepted: printing breaks no rule, and what matters there is that memory stays flat). Prints one
row per adapter: exit code, wall seconds, peak RSS of the command and its workers' largest,
whether the JSON report is there and complete, and the first failure.

    python bench/hostile.py                  # every adapter, the default options
    python bench/hostile.py spin sockets     # some of them
"""

from __future__ import annotations

import os
import sys

# bench/ holds a conformance.py of its own: make sure the package is the one imported.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.getcwd()) != _HERE]
sys.path.insert(0, os.path.dirname(_HERE))

import json  # noqa: E402
import resource  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
HOSTILE = ROOT / "tests" / "hostile"
LIMIT = 120.0


def main(names: list[str]) -> int:
    sys.path.insert(0, str(HOSTILE))
    import hostile_adapters

    chosen = names or list(hostile_adapters.ALL)
    print(f"{'adapter':<16} {'exit':>4} {'wall s':>7} {'peak MB':>8}  report      first failure")
    worst = 0
    for name in chosen:
        with tempfile.TemporaryDirectory() as tmp:
            report = Path(tmp) / "r.json"
            started = time.monotonic()
            before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
            proc = subprocess.run(
                [sys.executable, "-m", "cli", "conformance", "--impl", f"hostile_adapters:{name}",
                 "--json", str(report)],
                cwd=HOSTILE, capture_output=True, text=True, timeout=LIMIT * 3,
                env={**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"},
            )
            seconds = time.monotonic() - started
            peak = max(before, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss) / 1024
            state, first = "none", ""
            if report.exists():
                data = json.loads(report.read_text())
                state = "complete" if data["complete"] else f"incomplete ({data['stopped']})"[:40]
                failed = [t for r in data["rules"] for t in r["failed_tests"]]
                first = failed[0]["message"].splitlines()[0] if failed else ""
            elif proc.returncode == 2:
                state, first = "setup error", proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else ""
            print(f"{name:<16} {proc.returncode:>4} {seconds:>7.1f} {peak:>8.0f}  {state:<11} {first[:110]}")
            bad = (proc.returncode == 0 and name != "print_flood") or seconds > LIMIT
            worst = max(worst, 1 if bad else 0)
    return worst


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
