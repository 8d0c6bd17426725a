"""An implementation that prints at import and while it runs, replaces ``sys.stdout`` or closes
it, leaves a command's own stdout whole (``conformance.output.guarded``): the timeline and
verdict of ``loopkit run`` and ``replay``, the JSON of ``loopkit hunt --json``. What it prints
goes to stderr. Before, the JSON began with its print, a replaced stdout swallowed the
verdict, and a closed one ended the command in a traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli import app

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = str(ROOT / "conformance" / "scenario" / "examples" / "window1.yaml")
CASSETTE = str(ROOT / "cassettes" / "races" / "window1.yaml")

NOISY = '''
import io
import sys
from conformance.reference_adapter import ReferenceImplementation
print("NOISE at import")

class Noisy(ReferenceImplementation):
    def create_service(self, **kw):
        print("NOISE in create_service")
        sys.stdout.write("NOISE written\\n")
        sys.stdout.close()
        sys.stdout = io.StringIO()  # swallows whatever is printed next
        return super().create_service(**kw)

implementation = Noisy()
'''


@pytest.fixture
def noisy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    # a module name of its own per test: an imported module would not print at import again
    name = f"noisy_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text(NOISY)
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


@pytest.mark.parametrize(("args", "verdict"), [
    (["run", SCENARIO], "ok: scenario 'window1' (fifo, seed 0): every check holds"),
    (["replay", CASSETTE], "ok: every check holds"),
])
def test_run_and_replay_print_their_verdict_whatever_the_implementation_did_to_stdout(
        noisy: str, args: list[str], verdict: str) -> None:
    result = CliRunner().invoke(app, [*args, "--impl", f"{noisy}:implementation"])
    assert result.exit_code == 0, result.output
    assert result.stdout.strip().splitlines()[-1] == verdict
    assert "NOISE" not in result.stdout
    assert "NOISE at import" in result.stderr and "NOISE in create_service" in result.stderr


def test_hunt_json_is_only_json(tmp_path: Path) -> None:
    # a process of its own: the hunt's workers write to the command's real stdout
    import os
    import subprocess
    import sys

    (tmp_path / "noisy.py").write_text(NOISY)
    done = subprocess.run(
        [sys.executable, "-m", "cli", "hunt", "--impl", "noisy:implementation", "--workloads", "reply", "--depth", "1",
         "--nth", "1", "--verbs", "send", "--workers", "1", "--out", str(tmp_path / "h"), "--json"],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])})
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout)["totals"]["findings"] == 0
    assert "NOISE at import" in done.stderr


INTERRUPTING = '''
from conformance.reference_adapter import ReferenceImplementation


class Agent:
    def __init__(self, agent):
        self._agent = agent

    def __getattr__(self, name):
        return getattr(self._agent, name)

    def send(self, *args):
        raise KeyboardInterrupt


class Service:
    def __init__(self, service):
        self._service = service

    def __getattr__(self, name):
        return getattr(self._service, name)

    def create(self, *args):
        return Agent(self._service.create(*args))


class Interrupting(ReferenceImplementation):
    def create_service(self, **kw):
        return Service(super().create_service(**kw))


implementation = Interrupting()
'''


@pytest.mark.parametrize("args", [["run", SCENARIO], ["replay", CASSETTE],
                                  ["explore", SCENARIO, "--strategy", "dfs", "--budget", "3"]],
                         ids=["run", "replay", "explore"])
def test_a_keyboard_interrupt_the_implementation_raises_is_not_the_users(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str]) -> None:
    # typer ended the command with exit 130 and no word, as after a Ctrl-C (explore: its search
    # took it for the user's interrupt)
    name = f"interrupting_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text(INTERRUPTING)
    monkeypatch.syspath_prepend(str(tmp_path))
    if args[0] == "explore":
        args = [*args, "--out", str(tmp_path / "race.yaml")]
    result = CliRunner().invoke(app, [*args, "--impl", f"{name}:implementation"])
    assert result.exit_code == 2, result.output
    assert result.output.strip() == ("error: the implementation raised KeyboardInterrupt itself (no interrupt came "
                                     "from the terminal): a loop must not raise it into the caller")


def test_a_reader_that_leaves_early_is_no_error() -> None:
    # `loopkit run ... | head -1`: the broken pipe was reported as bad input ("error: [Errno 32]
    # Broken pipe", exit 2)
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-m", "cli", "run", SCENARIO], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the reader is gone before the timeline is printed
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) != 2, err
    assert "error" not in err.lower() and "Traceback" not in err, err
