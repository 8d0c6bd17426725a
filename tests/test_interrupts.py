"""Interrupts: SIGINT stops ``conformance``, ``selfcheck`` and ``explore`` promptly with what
they found (exit 130, reports marked incomplete, unchecked rules not called failed); SIGTERM
likewise (143); SIGINT, SIGTERM or SIGKILL leave no worker process behind and no half-written
file. Also the building blocks: ``Interrupts`` and an interrupted ``simulator.explore``."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import simulator
from conformance.interrupts import Interrupted, Interrupts, exit_code

ROOT = Path(__file__).resolve().parent.parent
WINDOW1 = ROOT / "conformance" / "scenario" / "examples" / "window1.yaml"


def _start(*args: str, cwd: Path) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "cli", *args], cwd=cwd, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"})


def _children(pid: int) -> set[int]:
    """The descendants of ``pid`` (from /proc), so a test can check none outlives it."""
    found: set[int] = set()
    todo = [pid]
    while todo:
        parent = todo.pop()
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    stat = (entry / "stat").read_text()
                except OSError:
                    continue
                if int(stat.rsplit(")", 1)[1].split()[1]) == parent and int(entry.name) not in found:
                    found.add(int(entry.name))
                    todo.append(int(entry.name))
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"  # a zombie has exited: only its exit status is left to collect


def _wait_for_workers(proc: subprocess.Popen[str], count: int, limit: float = 60) -> set[int]:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        kids = {k for k in _children(proc.pid) if _alive(k)}
        if len(kids) >= count:
            return kids
        time.sleep(0.2)
    with contextlib.suppress(ProcessLookupError):  # leave nothing behind (it runs in a session of its own)
        os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate()
    raise AssertionError(f"no {count} workers under {proc.pid}")


def _gone(pids: set[int], limit: float = 10) -> bool:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if not any(_alive(p) for p in pids):
            return True
        time.sleep(0.1)
    return False


pytestmark = pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads /proc for the process tree")


@pytest.mark.parametrize(("signum", "code", "group"), [(signal.SIGINT, 130, False), (signal.SIGTERM, 143, False),
                                                      (signal.SIGTERM, 143, True)])
def test_conformance_interrupted_reports_what_it_checked(tmp_path: Path, signum: int, code: int, group: bool) -> None:
    # ``group``: as timeout(1) sends it, the workers hear it too: a stop, never a test failed
    report, junit = tmp_path / "r.json", tmp_path / "j.xml"
    proc = _start("conformance", "--impl", "mutant:asm-close-order", "--schedules", "10", "--workers", "2",
                  "--json", str(report), "--junit", str(junit), cwd=tmp_path)
    workers = _wait_for_workers(proc, 2)
    time.sleep(1)  # the workers are busy (the suite takes several seconds more)
    sent = time.monotonic()
    (os.killpg if group else os.kill)(proc.pid, signum)
    out, err = proc.communicate(timeout=60)
    took = time.monotonic() - sent
    assert proc.returncode == code, out[-3000:] + err[-3000:]
    assert "interrupted after " in out and f"({signal.Signals(signum).name})" in out
    assert took < 15, took
    data = json.loads(report.read_text())
    assert data["complete"] is False and data["interrupted"] is True
    assert data["summary"]["not_checked"] > 0
    assert not any(f.startswith("not checked") for r in data["rules"] for f in r["failures"])
    assert not any("died" in t["message"] for r in data["rules"] for t in r.get("failed_tests", ())), data
    assert "<testsuites>" in junit.read_text()
    assert _gone(workers), "a worker outlived the interrupted run"
    assert not list(tmp_path.glob(".*.tmp")), "a temporary report file was left behind"


def test_conformance_sigkill_leaves_no_worker_behind(tmp_path: Path) -> None:
    proc = _start("conformance", "--impl", "mutant:asm-close-order", "--schedules", "60", "--workers", "2",
                  "--json", str(tmp_path / "r.json"), cwd=tmp_path)
    workers = _wait_for_workers(proc, 2)
    proc.kill()
    proc.communicate(timeout=30)
    assert _gone(workers), "a worker outlived its SIGKILLed parent"
    assert not (tmp_path / "r.json").exists()


@pytest.mark.parametrize("workers", ["1", "2"])
def test_explore_interrupted_prints_the_count_and_exits_130(tmp_path: Path, workers: str) -> None:
    proc = _start("explore", str(WINDOW1), "--budget", "10000000", "--workers", workers, cwd=tmp_path)
    if workers == "2":
        _wait_for_workers(proc, 2)  # the command is past its start-up: a second is hundreds of runs
        time.sleep(1)
    else:
        time.sleep(2.5)  # start-up (~1 s) and then some runs
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, out + err
    assert time.monotonic() - sent < 5
    assert "interrupted after " in out and "no failing schedule so far" in out
    explored = int(out.split(" schedules explored")[0].split()[-1])
    assert explored > 0


def test_explore_sigkill_leaves_no_worker_behind(tmp_path: Path) -> None:
    proc = _start("explore", str(WINDOW1), "--budget", "10000000", "--workers", "2", cwd=tmp_path)
    workers = _wait_for_workers(proc, 2)
    proc.kill()
    proc.communicate(timeout=30)
    assert _gone(workers), "an explore worker outlived its SIGKILLed parent"


@pytest.mark.parametrize(("signum", "group"), [(signal.SIGINT, False), (signal.SIGTERM, True)])
def test_hunt_interrupted_writes_an_incomplete_report_and_leaves_no_worker(
        tmp_path: Path, signum: signal.Signals, group: bool) -> None:
    # ``group``: the signal goes to the whole process group, workers included, as timeout(1)
    # and a terminal's Ctrl-C send it: the workers leave the decision to the parent.
    proc = _start("hunt", "--workers", "2", "--out", str(tmp_path / "h"), cwd=tmp_path)
    workers = _wait_for_workers(proc, 2)
    # past the workers' start-up (each plans the workloads, ~1 s alone) into its first runs: a
    # second was too little with the suite's other worker on the second core of a slow machine
    time.sleep(3)
    sent = time.monotonic()
    if group:
        os.killpg(proc.pid, signum)
    else:
        proc.send_signal(signum)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 128 + signum, out[-3000:] + err[-3000:]
    assert time.monotonic() - sent < 5
    assert "interrupted after " in out and f" windows ({signum.name})" in out and "Traceback" not in err
    data = json.loads((tmp_path / "h" / "report.json").read_text())
    assert data["stopped"] == "interrupted" and data["complete"] is False
    assert 0 < data["totals"]["run"] < data["totals"]["windows"]
    assert _gone(workers), "a hunt worker outlived the interrupted hunt"


def test_explore_signalled_as_a_group_still_reports(tmp_path: Path) -> None:
    # timeout(1) sends SIGTERM to the whole process group: the workers leave it to the parent,
    # which asks them for their counts and reports
    proc = _start("explore", str(WINDOW1), "--budget", "10000000", "--workers", "2", cwd=tmp_path)
    workers = _wait_for_workers(proc, 2)
    time.sleep(1)
    os.killpg(proc.pid, signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 143, out + err
    assert "interrupted after " in out and "(SIGTERM)" in out and "Traceback" not in err
    assert _gone(workers)


def test_hunt_sigkill_leaves_no_worker_behind(tmp_path: Path) -> None:
    proc = _start("hunt", "--workers", "2", "--out", str(tmp_path / "h"), cwd=tmp_path)
    workers = _wait_for_workers(proc, 2)
    proc.kill()
    proc.communicate(timeout=30)
    assert _gone(workers), "a hunt worker outlived its SIGKILLed parent"
    assert not (tmp_path / "h" / "report.json").exists()


def test_selfcheck_interrupted_reports_the_mutants_checked(tmp_path: Path) -> None:
    report = tmp_path / "s.json"
    proc = _start("selfcheck", "--schedules", "2", "--json", str(report), cwd=tmp_path)
    time.sleep(3)  # within the reference's suite, or just past it on a fast machine
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, out[-3000:] + err[-3000:]
    assert time.monotonic() - sent < 10
    assert "interrupted after " in out and " mutants (SIGINT)" in out
    # A reference cut short failed nothing: it is "not fully checked", never "FAILS".
    assert "FAILS" not in out and ("reference not fully checked" in out or "reference passes" in out), out[-2000:]
    data = json.loads(report.read_text())
    assert data["complete"] is False


def test_interrupts_first_signal_is_a_flag_the_second_raises() -> None:
    with Interrupts() as stop:
        assert not stop.requested
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.01)
        assert stop.requested and stop() and stop.exit_code == 130
        assert stop.message(3, "tests") == "interrupted after 3 tests (SIGINT)"
        with pytest.raises(Interrupted):
            stop.check()
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.01)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert exit_code(signal.SIGTERM) == 143


@pytest.mark.parametrize("workers", [1, 2])
def test_an_interrupted_explore_returns_what_it_found(workers: int) -> None:
    import asyncio

    async def main() -> None:
        await asyncio.sleep(0)

    calls = {"n": 0}

    def stop() -> bool:
        calls["n"] += 1
        return calls["n"] > 20

    found = simulator.explore(main, strategy="random", budget=10_000_000, workers=workers, should_stop=stop)
    assert found.interrupted and not found.found
    assert 0 < found.runs < 10_000_000
