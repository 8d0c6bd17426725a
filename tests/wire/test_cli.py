"""``--impl wire:COMMAND`` through the command line: conformance (with its JSON report), run,
explore and replay, and the one-line errors of a bad command."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
import yaml
from _wire import JS_LOOP, MARKER_NOT_RESET, ROOT, requires_node
from typer.testing import CliRunner

from cli import app

pytestmark = requires_node

CANCEL_AND_REPLACE = str(ROOT / "examples" / "js_loop" / "scenarios" / "cancel_and_replace.yaml")


def _loopkit(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.output


@pytest.mark.parametrize("spec", ["wire:", "wire:false"])
def test_a_bad_wire_command_is_one_line_and_exit_2(spec: str) -> None:
    for command in (["conformance", "--impl", spec, "--rule", "LOOP-2"], ["run", CANCEL_AND_REPLACE, "--impl", spec]):
        code, output = _loopkit(*command)
        lines = [line for line in output.splitlines() if line.strip()]
        assert code == 2 and len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in output, output


def test_conformance_writes_the_wire_implementation_into_its_report(tmp_path: Path) -> None:
    target = tmp_path / "report.json"
    code, output = _loopkit("conformance", "--impl", f"wire:{JS_LOOP}", "--rule", "CANCEL-W2", "--rule", "PY-2",
                            "--schedules", "1", "--json", str(target))
    assert code == 0, output
    report = json.loads(target.read_text())
    assert report["implementation"] == f"wire:{JS_LOOP}"
    assert report["implementation_info"]["kind"] == "wire"
    assert {r["id"]: r["status"] for r in report["rules"]} == {"CANCEL-W2": "passed", "PY-2": "not-applicable"}


def test_run_explore_and_replay_over_the_wire(tmp_path: Path) -> None:
    variant, fixed = f"wire:{MARKER_NOT_RESET}", f"wire:{JS_LOOP}"
    assert _loopkit("run", CANCEL_AND_REPLACE, "--impl", variant)[0] == 0, "plain order misses the race"
    cassette = tmp_path / "race.yaml"
    code, output = _loopkit("explore", CANCEL_AND_REPLACE, "--impl", variant, "--out", str(cassette))
    assert code == 1 and "FOUND after" in output, output
    assert f"--impl {shlex.quote(variant)}" in output, "the replay hint can be pasted into a shell"
    assert _loopkit("replay", str(cassette), "--impl", variant)[0] == 1
    assert _loopkit("replay", str(cassette), "--impl", fixed)[0] == 0
    doc = yaml.safe_load(cassette.read_text())
    doc["impl_info"]["runtime_version"] = "0.0.1"
    cassette.write_text(yaml.safe_dump(doc, sort_keys=False))
    code, output = _loopkit("replay", str(cassette), "--impl", variant)
    assert code == 1 and "recorded on node 0.0.1, this implementation runs on node" in output


DEAF_PROXY = '''\
import os, subprocess, sys, threading, time
open(sys.argv[1], "a").write(f"{os.getpid()}\\n")
drv_in, drv_out = (int(x) for x in os.environ["LOOPKIT_WIRE_FDS"].split(","))
c_in_r, c_in_w = os.pipe()
c_out_r, c_out_w = os.pipe()
node = subprocess.Popen(sys.argv[2:], env=dict(os.environ, LOOPKIT_WIRE_FDS=f"{c_in_r},{c_out_w}"),
                        pass_fds=(c_in_r, c_out_w), stdin=subprocess.DEVNULL)
os.close(c_in_r); os.close(c_out_w)
def down():
    while True:
        data = os.read(drv_in, 1 << 16)
        if not data:
            while True:  # deaf to the end of its input: it never leaves by itself
                time.sleep(1)
        os.write(c_in_w, data)
threading.Thread(target=down, daemon=True).start()
while True:
    data = os.read(c_out_r, 1 << 16)
    if not data:
        break
    os.write(drv_out, data)
while True:
    time.sleep(1)
'''


@pytest.mark.parametrize("command", ["run", "hunt", "conformance"])
def test_a_wire_child_deaf_to_the_end_of_its_input_does_not_outlive_the_command(tmp_path: Path, command: str) -> None:
    # A child that does not exit when its input ends: the preflight's child and the hunt's workers
    # end by os._exit, which runs no atexit hook, and the suite's workers by SIGKILL: all left
    # theirs running after the kit was done.
    import os
    import signal
    import subprocess
    import sys
    import time

    proxy, pids = tmp_path / "deaf.py", tmp_path / "pids"
    proxy.write_text(DEAF_PROXY)
    spec = f"wire:{shlex.join([sys.executable, str(proxy), str(pids)])} {JS_LOOP}"
    args = {"run": ["run", CANCEL_AND_REPLACE],
            "hunt": ["hunt", "--workloads", "reply", "--verbs", "send", "--depth", "1", "--nth", "1", "--workers", "1",
                     "--out", str(tmp_path / "hunt")],
            "conformance": ["conformance", "--rule", "IDLE-3", "--schedules", "0", "--workers", "1"]}[command]
    try:
        proc = subprocess.run([sys.executable, "-m", "cli", *args, "--impl", spec], cwd=ROOT, capture_output=True,
                              text=True, timeout=120)
        assert proc.returncode in (0, 1), proc.stdout + proc.stderr
        time.sleep(0.5)
        started = [int(p) for p in pids.read_text().split()]
        assert len(started) >= 2, started  # the preflight's, and the command's own
        alive = [p for p in started if os.path.exists(f"/proc/{p}") and "Z" not in open(f"/proc/{p}/stat").read().split()[2]]
        assert alive == [], f"wire children left running after the command ended: {alive}"
    finally:
        for p in (pids.read_text().split() if pids.exists() else []):
            try:
                os.killpg(int(p), signal.SIGKILL)
            except OSError:
                pass
