"""Hostile implementations end ``loopkit conformance`` in a clear per-rule verdict, in bounded
time: exit 1 with a complete table and JSON (2 for a setup error, one line), never exit 0 for a
broken loop, never a hang. CI-sized: one rule (one test) each, ``--timeout 1``; the whole suite
per adapter is ``bench/hostile.py``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
RULE = ["--rule", "LOOP-2", "--schedules", "0"]  # its tests; test_burst_is_one_turn[fifo] is judged
# Where each test costs a worker's death or a full wall-clock limit: a rule with two tests, both
# sending (the hostile adapters misbehave in send()); the judged one is IDLE_TEST.
SUPERVISED = ["--rule", "IDLE-3", "--schedules", "0"]
IDLE_TEST = "test_work_queued_by_idle_listener_is_after[fifo]"


def _conformance(tmp_path: Path, impl: str, *args: str, timeout: float = 90) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "cli", "conformance", "--impl", f"hostile_adapters:{impl}", *args],
        cwd=HERE, capture_output=True, text=True, timeout=timeout,
        env={**os.environ, "PYTHONPATH": str(HERE.parent.parent), "COLUMNS": "200"},
    )
    return proc, time.monotonic() - started


# (adapter, workers, what its one failure must say) for the command end to end. Spinning,
# blocking and killing the process need the worker supervision; one escape shows the command's
# process (--workers 0) reports it the same way. The other escapes fail at the call whatever runs
# the test, so they are checked through the runner in this process (below): a subprocess each
# only repeated the command's start-up.
FAILING = [
    ("hang", "1", "exceeded the wall-clock limit (1s, --timeout) in call"),
    ("kill_self", "2", "the worker process running this test died"),  # both tests die: each worker is replaced
    ("exits", "0", "sys.exit() called inside a simulation"),
    ("raise_in_close", "0", "close failed on purpose"),  # a broken close() is a finding, not a setup error
]
ESCAPES = [
    ("os_exit", "os._exit() called inside a simulation"),
    ("signal_self", "os.kill() called inside a simulation: the program tried to signal its own process"),
    ("masks_alarm", "signal.signal() called inside a simulation"),
    ("sockets", "socket.connect() blocks the event loop inside a simulation"),
    ("sleeps", "time.sleep() blocks the event loop inside a simulation"),
    ("threads", "threading.Thread.start() called inside a simulation"),
]


@pytest.mark.parametrize(("impl", "workers", "says"), FAILING, ids=[name for name, _, _ in FAILING])
def test_hostile_adapter_fails_its_rule_with_a_complete_report(tmp_path: Path, impl: str, workers: str,
                                                                says: str) -> None:
    report = tmp_path / "r.json"
    proc, seconds = _conformance(tmp_path, impl, *SUPERVISED, "--timeout", "1", "--max-hangs", "10", "--workers",
                                 workers, "--json", str(report))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    data = json.loads(report.read_text())
    assert data["complete"] is True and data["interrupted"] is False
    (rule,) = data["rules"]
    assert rule["id"] == "IDLE-3" and rule["status"] == "failed" and len(rule["failed_tests"]) == 2
    (failed,) = [t for t in rule["failed_tests"] if t["test"].endswith(IDLE_TEST)]
    assert says in failed["message"], failed["message"]
    assert failed["schedule"] == "fifo"
    assert failed["reproduce"] == (
        f"pytest --pyargs 'conformance.tests.test_status::{IDLE_TEST}' "
        f"--loopkit-impl hostile_adapters:{impl} -p no:cacheprovider -vv")
    assert "IDLE-3" in proc.stdout and "reproduce:" in proc.stdout
    assert seconds < 60


@pytest.mark.parametrize(("impl", "says"), ESCAPES, ids=[name for name, _ in ESCAPES])
def test_an_escape_fails_its_test_at_the_call(monkeypatch: pytest.MonkeyPatch, impl: str, says: str) -> None:
    monkeypatch.syspath_prepend(str(HERE))
    import hostile_adapters

    from conformance.runner import run_suite

    run = run_suite(getattr(hostile_adapters, impl), rules=["LOOP-2"], schedule_count=0)
    (result,) = [r for r in run.results if r.id.endswith("test_burst_is_one_turn[fifo]")]
    assert result.outcome == "failed" and says in result.message, result.message


@pytest.mark.parametrize("command", ["run", "replay"])
def test_exit_time_code_the_implementation_left_cannot_change_the_exit(command: str) -> None:
    # An atexit handler (and a weakref.finalize) calling os._exit(0) turned a failing check into
    # exit 0; one printing wrote after the verdict; one spinning hung the process after it. The
    # kit now ends its process itself once the command is done (cli.run).
    root = HERE.parent.parent
    target = (str(root / "conformance" / "scenario" / "examples" / "window1.yaml") if command == "run"
              else str(root / "cassettes" / "races" / "window1.yaml"))
    proc, seconds = _cli(command, target, "--impl", "hostile_adapters:exits_zero_at_exit", "--timeout", "2")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "QUEUED" in proc.stdout and "printed at exit" not in proc.stdout + proc.stderr
    assert seconds < 60


def test_a_tracer_the_run_left_set_is_gone_before_the_kit_reports() -> None:
    # sys.settrace() in send(): the tracer stayed set after the run and spun in the kit's own
    # report code, where no wall-clock limit is armed; `loopkit run` hung. A run now puts the
    # tracer, the profiler and the recursion limit back as it ends.
    proc, seconds = _cli("run", str(HERE.parent.parent / "conformance" / "scenario" / "examples" / "window1.yaml"),
                         "--impl", "hostile_adapters:traces_into_the_kit", "--timeout", "2")
    assert proc.returncode in (0, 1) and "Traceback" not in proc.stderr, proc.stdout + proc.stderr
    assert seconds < 60


def test_signals_blocked_at_import_do_not_turn_the_wall_clock_limit_off(tmp_path: Path) -> None:
    # The module blocked SIGALRM, SIGTERM and SIGINT at import, then send() spun: --timeout never
    # fired, and only SIGKILL ended `loopkit run`. The limit unblocks SIGALRM as it arms.
    (tmp_path / "masks_at_import.py").write_text(
        "import signal\n"
        "from hostile_adapters import Hostile, _spin\n"
        "signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM, signal.SIGTERM, signal.SIGINT})\n"
        "implementation = Hostile('masks-at-import', on_send=_spin)\n")
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "cli", "run",
                           str(HERE.parent.parent / "conformance" / "scenario" / "examples" / "window1.yaml"),
                           "--impl", "masks_at_import:implementation", "--timeout", "1"],
                          cwd=HERE, capture_output=True, text=True, timeout=90,
                          env={**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{HERE}{os.pathsep}{HERE.parent.parent}"})
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "wall-clock" in proc.stdout and time.monotonic() - started < 60


def test_an_error_whose_text_spins_ends_at_the_wall_clock_limit() -> None:
    # send() raised an error whose __str__ spins: the task's unretrieved error was read after the
    # run, outside the wall-clock limit, and `loopkit run` hung for ever there.
    proc, seconds = _cli("run", str(HERE.parent.parent / "conformance" / "scenario" / "examples" / "window1.yaml"),
                         "--impl", "hostile_adapters:spinning_text", "--timeout", "1")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "spinning in" in proc.stdout and "Traceback" not in proc.stderr
    assert seconds < 60


def test_a_spin_behind_its_own_alarm_handler_still_ends_at_the_wall_clock_limit(tmp_path: Path) -> None:
    # The implementation set SIGALRM to SIG_IGN, then spun: the wall-clock limit never fired and
    # `loopkit run` hung for ever. signal.signal() is a tripwire inside a run now; the spin ends.
    proc, seconds = _cli("run", str(HERE.parent.parent / "conformance" / "scenario" / "examples" / "window1.yaml"),
                         "--impl", "hostile_adapters:masks_alarm_then_spins", "--timeout", "1")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "wall-clock" in proc.stdout + proc.stderr and "Traceback" not in proc.stderr
    assert seconds < 60


@pytest.mark.parametrize(("impl", "says"), [
    ("spin_in_create", "did not finish within 1s of wall time"),
    ("spin_in_close", "did not finish within 1s of wall time"),
    ("exit_in_create", "os._exit() called inside a simulation"),
])
def test_hostile_setup_is_a_one_line_setup_error(tmp_path: Path, impl: str, says: str) -> None:
    proc, seconds = _conformance(tmp_path, impl, *RULE, "--timeout", "1", "--workers", "0")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: setup failed: ") and says in lines[0], proc.stderr
    assert seconds < 30


def test_print_flood_is_bounded_and_judged(tmp_path: Path) -> None:
    # 5 MB per send, kept to a few kilobytes per test: the run's memory stays flat and the
    # verdict is the reference's (printing breaks no rule).
    proc, _ = _conformance(tmp_path, "print_flood", "--rule", "LOOP-2", "--rule", "ASM-1", "--schedules", "0",
                           "--workers", "0")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert len(proc.stdout) + len(proc.stderr) < 100_000


def test_the_run_stops_after_max_hangs_and_never_passes(tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    proc, seconds = _conformance(tmp_path, "spin", "--rule", "LOOP-2", "--rule", "ASM-1", "--rule", "ASM-2",
                                 "--schedules", "0", "--timeout", "1", "--max-hangs", "1", "--workers", "1",
                                 "--json", str(report))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    data = json.loads(report.read_text())
    assert data["complete"] is False and "--max-hangs 1" in data["stopped"]
    assert {r["status"] for r in data["rules"]} == {"failed"}
    assert any("not checked" in f for r in data["rules"] for f in r["failures"])
    spun = [t["message"] for r in data["rules"] for t in r["failed_tests"]]
    assert spun and "exceeded the wall-clock limit (1s, --timeout) in call, spinning in _spin() at " \
        "hostile_adapters.py" in spun[0]
    assert "incomplete:" in proc.stdout
    assert seconds < 60


def test_a_dead_driver_task_is_named_when_a_wait_times_out(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(HERE))
    import hostile_adapters

    from conformance.runner import run_suite

    run = run_suite(hostile_adapters.dies, rules=["LOOP-2"], schedule_count=0)
    (result,) = [r for r in run.results if r.id.endswith("test_burst_is_one_turn[fifo]")]
    assert result.outcome == "failed"
    assert "did not resolve (status running); a: its driver task died of RuntimeError: driver exploded " \
           "(raised at hostile_adapters.py:" in result.message


# ----------------------------------------------------------------- run, explore, replay, hunt
# Outside the rule suite every run has its own wall-clock limit (--timeout): a spinning
# implementation is a failed run that says where it spins, never a command that hangs.

WINDOW1 = str(HERE.parent.parent / "conformance" / "scenario" / "examples" / "window1.yaml")


def _cli(*args: str, timeout: float = 90) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "cli", *args], cwd=HERE, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "PYTHONPATH": str(HERE.parent.parent), "COLUMNS": "200"})
    return proc, time.monotonic() - started


@pytest.mark.parametrize("impl", ["spin", "hang"])
def test_a_spinning_run_fails_naming_where_it_spins(impl: str) -> None:
    proc, seconds = _cli("run", WINDOW1, "--impl", f"hostile_adapters:{impl}", "--timeout", "0.3")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    verdict = [line for line in proc.stdout.splitlines() if line.startswith("FAILED")]
    where = "_spin (hostile_adapters.py:" if impl == "spin" else "spinning in wait (threading.py:"
    assert verdict and "exceeded the wall-clock limit (0.3s)" in verdict[0] and where in verdict[0], proc.stdout
    assert seconds < 30


def test_explore_of_a_spinning_implementation_writes_its_cassette_unshrunk(tmp_path: Path) -> None:
    # --workers 2: the failure a worker found is replayed in the parent, under the limit too.
    out = tmp_path / "race.yaml"
    proc, seconds = _cli("explore", WINDOW1, "--impl", "hostile_adapters:spin", "--timeout", "0.3", "--budget", "50",
                         "--workers", "2", "--out", str(out))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "outcome budget-exceeded: WallClockExceeded: exceeded the wall-clock limit (0.3s) spinning in _spin" \
        in proc.stdout, proc.stdout
    assert out.exists() and "0 runs" in proc.stdout  # shrinking a spin would spin each try
    assert seconds < 30
    replayed, _ = _cli("replay", str(out), "--impl", "hostile_adapters:spin", "--timeout", "0.3")
    assert replayed.returncode == 1 and "exceeded the wall-clock limit" in replayed.stdout


def test_a_hunt_of_a_spinning_implementation_stops_with_a_finding(tmp_path: Path) -> None:
    # Only windows that steer spin: the hunt stops at the first ones, reports them, exits 1.
    proc, seconds = _cli("hunt", "--impl", "hostile_adapters:spin_on_steer", "--workloads", "reply", "--timeout", "0.5",
                         "--workers", "2", "--out", str(tmp_path))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    rep = json.loads((tmp_path / "report.json").read_text())
    assert rep["stopped"] == "wall-clock limit" and rep["complete"] is False
    assert [f["checks"] for f in rep["findings"]] == [["wall-clock"]]
    assert "steer" in rep["findings"][0]["first"] and "_spin (hostile_adapters.py:" in rep["findings"][0]["message"]
    assert seconds < 60
    # Spinning in the workload itself (every send spins): one line, exit 1, no window run.
    proc, seconds = _cli("hunt", "--impl", "hostile_adapters:spin", "--workloads", "reply", "--timeout", "0.3",
                         "--out", str(tmp_path / "b"))
    assert proc.returncode == 1 and proc.stdout.startswith("FAILED: workload 'reply': its own run"), proc.stdout
    assert seconds < 30


def test_a_program_that_swallows_every_alarm_ends_the_process_with_a_verdict() -> None:
    proc, seconds = _cli("run", WINDOW1, "--impl", "hostile_adapters:spin_swallowing", "--timeout", "0.2")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert lines[-1].startswith("FAILED: the program under test did not stop after 4 wall-clock alarms (spinning in "
                                "_spin_swallowing (hostile_adapters.py:"), proc.stderr
    assert seconds < 30


def test_a_window_slow_once_is_not_a_spin(tmp_path: Path) -> None:
    # The first steering window of each worker outlasts the limit once (as on a loaded machine);
    # its replay does not: the hunt reports nothing and exits 0.
    proc, seconds = _cli("hunt", "--impl", "hostile_adapters:stalls_once", "--workloads", "reply", "--verbs", "steer",
                         "--depth", "1", "--timeout", "0.3", "--workers", "1", "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rep = json.loads((tmp_path / "report.json").read_text())
    assert rep["stopped"] is None and rep["findings"] == []
    assert seconds < 60


@pytest.mark.parametrize(("impl", "call"), [("exits", "sys.exit()"), ("os_exit", "os._exit()"), ("signal_self", "os.kill()"),
                                            ("threads", "threading.Thread.start()"),
                                            ("sockets", "socket.connect()"), ("sleeps", "time.sleep()")])
def test_a_hunt_of_an_implementation_that_escapes_finds_it(tmp_path: Path, impl: str, call: str) -> None:
    # The tripwire raises at the call and the world records the send as refused (QUEUED leaves a
    # call a tripwire raised in to ESCAPE). The escape itself is the finding (PY-3), never an exit 0.
    proc, _ = _cli("hunt", "--impl", f"hostile_adapters:{impl}", "--workloads", "reply", "--verbs", "send", "--depth", "1",
                   "--nth", "1", "--workers", "2", "--out", str(tmp_path))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    rep = json.loads((tmp_path / "report.json").read_text())
    assert rep["findings"][0]["checks"] == ["ESCAPE"] and rep["findings"][0]["rules"] == ["PY-3"]
    assert f"the implementation tried to leave the simulation: {call}" in rep["findings"][0]["message"]


@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_hunt_of_an_implementation_that_kills_its_process_is_one_line_exit_2(tmp_path: Path, workers: str) -> None:
    # Every run, the workload's probe included, is on a forked worker: SIGKILL ends a worker,
    # and the hunt says so in one line (until session 38 the probe ran in the hunt's own
    # process, which died with exit 137 and no output at all).
    proc, _ = _cli("hunt", "--impl", "hostile_adapters:kill_self", "--workloads", "reply", "--workers", workers,
                   "--out", str(tmp_path))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert lines[-1] == "error: a worker died (exit code -9) while running the probe run of workload 'reply' (killed by SIGKILL)"


def test_what_an_implementation_prints_never_corrupts_the_hunts_json(tmp_path: Path) -> None:
    # 5 MB on stdout at every send: the runs are on workers whose stdout goes nowhere, so the
    # report on stdout stays one JSON document
    proc, _ = _cli("hunt", "--impl", "hostile_adapters:print_flood", "--workloads", "reply", "--verbs", "send", "--depth", "1",
                   "--nth", "1", "--workers", "2", "--json", "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout)["totals"]["windows"] > 0 and "xxxx" not in proc.stdout
    # nor the terminal: the runs' prints go nowhere (stderr took them once, megabytes per window)
    assert "xxxx" not in proc.stderr, len(proc.stderr)


def test_a_hunt_of_a_program_that_swallows_every_alarm_is_a_spin_finding(tmp_path: Path) -> None:
    # The worker ends with its own FAILED line (where it spins) and a code of its own: the hunt
    # says it spins, exit 1, as `run` does, not "a worker died" (exit 2).
    proc, seconds = _cli("hunt", "--impl", "hostile_adapters:spin_swallowing", "--workloads", "reply", "--verbs", "send",
                         "--depth", "1", "--nth", "1", "--workers", "2", "--timeout", "0.3", "--out", str(tmp_path))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stdout.startswith("FAILED: the program under test swallowed every wall-clock alarm while running the "
                                  "probe run of workload 'reply'"), proc.stdout
    assert "spinning in _spin_swallowing (hostile_adapters.py:" in proc.stderr
    assert seconds < 60


def test_conformance_with_a_hunt_whose_worker_is_killed_reports_it_as_a_failure(tmp_path: Path) -> None:
    # two rule tests, each a worker's death the pool restarts from (LOOP-1's 65 cost a minute)
    proc, _ = _cli("conformance", "--impl", "hostile_adapters:kill_self", *SUPERVISED, "--hunt",
                   "--hunt-workloads", "reply", "--hunt-out", str(tmp_path))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    assert ("FAILED hunt (no rule id): hunt::probe: the hunt could not run: a worker died (exit code -9) while running "
            "the probe run of workload 'reply' (killed by SIGKILL)") in proc.stdout


def test_an_error_message_utf8_cannot_encode_is_reported_not_a_broken_worker(tmp_path: Path) -> None:
    # A lone surrogate in an implementation's error message: the xdist worker could not send its
    # report (the pool broke and the failure was blamed on a dead worker), and the JUnit write
    # ended in a traceback. Now the rule fails with the message escaped, both reports written.
    report, junit = tmp_path / "r.json", tmp_path / "j.xml"
    proc, _ = _conformance(tmp_path, "unencodable", *RULE, "--workers", "1", "--json", str(report),
                           "--junit", str(junit))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    data = json.loads(report.read_text())
    (rule,) = data["rules"]
    assert rule["status"] == "failed" and "lone surrogate \\udcff" in rule["failed_tests"][0]["message"]
    import xml.etree.ElementTree as ET

    assert ET.parse(junit).getroot().tag == "testsuites"


@pytest.mark.parametrize("workers", ["0", "1"])
def test_a_keyboard_interrupt_the_implementation_raises_fails_its_test_not_the_run(tmp_path: Path, workers: str) -> None:
    # pytest took it for the user's Ctrl-C: the run stopped at the first test, "no result came
    # back", and the report was incomplete
    report = tmp_path / "r.json"
    proc, _ = _conformance(tmp_path, "interrupts", *RULE, "--workers", workers, "--json", str(report))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    data = json.loads(report.read_text())
    assert data["complete"] is True and data["interrupted"] is False
    (rule,) = data["rules"]
    assert rule["status"] == "failed"
    assert "the implementation raised KeyboardInterrupt itself" in rule["failed_tests"][0]["message"]

