"""An implementation module that spins, exits or raises at import, or while a service and an
agent are built, ends ``loopkit run``, ``replay`` and ``hunt`` with one line and exit 2, in
bounded time: they import it in a forked child first (``conformance.preflight``), as
``conformance`` does. Before, a spin at import hung all three and an ``os._exit(0)`` there
ended them silently with exit 0."""

from __future__ import annotations

import contextlib
import signal
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli import app
from conformance import preflight

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = str(ROOT / "conformance" / "scenario" / "examples" / "window1.yaml")
CASSETTE = str(ROOT / "cassettes" / "races" / "window1.yaml")

MODULES = {
    "spins_at_import": "while True:\n    pass\n",
    "exits_at_import": "import os\nos._exit(0)\n",
    "interrupts_at_import": "raise KeyboardInterrupt\n",
    "spins_in_setup": (
        "from conformance.reference_adapter import ReferenceImplementation\n"
        "class Spinning(ReferenceImplementation):\n"
        "    def create_service(self, **kw):\n"
        "        while True:\n"
        "            pass\n"
        "implementation = Spinning()\n"
    ),
}
SAYS = {
    "spins_at_import": "error: setup failed: importing the implementation 'spins_at_import:implementation' did not finish within 1s of "
                       "wall time (--timeout): the implementation spins or blocks at import",
    "exits_at_import": "error: setup failed: the implementation ended the process (exit code 0) while importing "
                       "'exits_at_import:implementation'",
    "interrupts_at_import": "error: setup failed: importing 'interrupts_at_import:implementation' raised "
                            "KeyboardInterrupt: KeyboardInterrupt",
    "spins_in_setup": "error: setup failed: building a service and an agent did not finish within 1s of wall time "
                      "(--timeout): the implementation spins or blocks (in create_service, create, or a listener "
                      "during close()?)",
}
COMMANDS = {
    "run": ["run", SCENARIO],
    "replay": ["replay", CASSETTE],
    "hunt": ["hunt", "--workloads", "reply", "--depth", "1"],
}


@pytest.fixture
def modules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name, text in MODULES.items():
        (tmp_path / f"{name}.py").write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(preflight, "IMPORT_SECONDS", 1.0)  # CI-sized: the least limit is 10 s
    return tmp_path


@pytest.mark.parametrize("module", sorted(MODULES))
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_module_failing_at_import_or_setup_is_one_line_and_exit_2(modules: Path, module: str, command: str) -> None:
    args = [*COMMANDS[command], "--impl", f"{module}:implementation", "--timeout", "1"]
    if command == "hunt":
        args += ["--out", str(modules / "hunt")]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    assert result.output.strip() == SAYS[module], result.output


def test_the_kits_own_implementations_are_not_forked(monkeypatch: pytest.MonkeyPatch) -> None:
    def forbidden(*args: object) -> None:
        raise AssertionError("forked")

    monkeypatch.setattr(preflight, "isolated", forbidden)
    assert preflight.resolve_checked("reference", 5.0).name == "reference"
    assert preflight.resolve_checked("mutant:maxtok-leaks", 5.0) is not None


def test_outputs_go_where_asked_when_the_implementation_changes_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # `--trace logs/x.json` was opened after the run, from wherever the implementation had moved.
    (tmp_path / "wanders.py").write_text(
        "import os\n"
        "from conformance.reference_adapter import ReferenceImplementation\n"
        "class Wanders(ReferenceImplementation):\n"
        "    def create_service(self, **kw):\n"
        f"        os.chdir({str(tmp_path / 'elsewhere')!r})\n"
        "        return super().create_service(**kw)\n"
        "implementation = Wanders()\n")
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "logs").mkdir()
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["run", SCENARIO, "--impl", "wanders:implementation", "--trace", "logs/x.json"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "logs" / "x.json").is_file()
    monkeypatch.chdir(tmp_path)  # the run moved this process too
    result = CliRunner().invoke(app, ["hunt", "--impl", "wanders:implementation", "--workloads", "reply", "--depth",
                                      "1", "--nth", "1", "--verbs", "send", "--workers", "1", "--out", "hunted"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "hunted" / "report.json").is_file() and "report: hunted/report.json" in result.output


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_an_error_message_with_control_characters_is_shown_not_acted_on(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: str) -> None:
    # The implementation's own words (here its import error) carried a clear-screen sequence and
    # a carriage return: the one-line error printed them raw, to the user's terminal.
    (tmp_path / "shouts.py").write_text('raise RuntimeError("\\x1b[2J\\x1b[31mgone\\rX")\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    args = [*COMMANDS[command], "--impl", "shouts:implementation"]
    if command == "hunt":
        args += ["--out", str(tmp_path / "hunt")]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    assert "\x1b" not in result.output and "\r" not in result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "RuntimeError: \\x1b[2J\\x1b[31mgone" in lines[0], result.output


def test_a_process_forked_at_import_neither_holds_up_nor_garbles_the_preflight(tmp_path: Path) -> None:
    # A module forking a daemon at import (it holds the preflight's pipe open for 20 s): the
    # preflight waited for the end of the pipe and blamed a spin after its limit. A factory that
    # forks: two processes wrote the preflight's report ("error: \x00okok"). The child's exit ends
    # the preflight now, and only the child itself reports.
    import os
    import subprocess
    import sys
    import time

    (tmp_path / "forks_a_daemon.py").write_text(
        "import os, time\n"
        "from conformance.reference_adapter import ReferenceImplementation\n"
        "implementation = ReferenceImplementation(name='forks-a-daemon')\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        f"    open({str(tmp_path / 'daemon.pid')!r}, 'a').write(f'{{os.getpid()}}\\n')\n"
        "    time.sleep(20)\n"
        "    os._exit(0)\n")
    (tmp_path / "forking_factory.py").write_text(
        "import os\n"
        "from conformance.reference_adapter import ReferenceImplementation\n"
        "def factory():\n"
        "    if os.fork() == 0:\n"
        "        ReferenceImplementation(name='a-twin')\n"
        "    return ReferenceImplementation(name='forking-factory')\n")
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}"}
    try:
        for impl in ("forks_a_daemon:implementation", "forking_factory:factory"):
            out, err = tmp_path / f"{impl}.out", tmp_path / f"{impl}.err"
            started = time.monotonic()
            with open(out, "w") as o, open(err, "w") as e:  # files: the daemon holds what it inherited
                proc = subprocess.Popen([sys.executable, "-m", "cli", "run", SCENARIO, "--impl", impl, "--timeout", "5"],
                                        cwd=ROOT, stdout=o, stderr=e, env=env)
                code = proc.wait(timeout=60)
            assert code == 0, (impl, out.read_text(), err.read_text())
            assert time.monotonic() - started < 15, impl
            assert "every check holds" in out.read_text() and "\x00" not in err.read_text()
    finally:
        pid_file = tmp_path / "daemon.pid"
        for pid in (pid_file.read_text().split() if pid_file.exists() else []):
            with contextlib.suppress(OSError):
                os.kill(int(pid), signal.SIGKILL)
