"""``loopkit hunt`` and ``loopkit hunt merge`` on the command line: exit codes, the report and
its cassettes, one-line errors, and shards merged into exactly the one-machine bytes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli import app

SMALL = ["--workloads", "reply,two-prompts", "--depth", "1", "--nth", "1", "--verbs", "send,cancel,when_idle",
         "--dfs", "0", "--random", "0", "--pct", "0", "--workers", "1"]


def _hunt(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, ["hunt", *args])
    return result.exit_code, result.stdout, result.stderr


def test_a_finding_exits_1_with_its_cassette_and_the_reference_exits_0(tmp_path: Path) -> None:
    code, out, _ = _hunt("--impl", "mutant:waiters-after-status", *SMALL, "--out", str(tmp_path / "m"))
    assert code == 1, out
    assert "FOUND IDLE-2" in out and "window kind" in out and "replay: loopkit replay " in out
    report = json.loads((tmp_path / "m" / "report.json").read_text())
    cassettes = [ex["cassette"] for f in report["findings"] for ex in f["examples"] if ex.get("cassette")]
    assert cassettes and all((tmp_path / "m" / c).exists() for c in cassettes)
    code, out, err = _hunt(*SMALL, "--out", str(tmp_path / "r"))
    assert code == 0 and "ok: no oracle failed" in out
    # stderr is no terminal here (a CI log): plain progress lines instead of a bar
    assert "hunt: windows (plain order): 0/" in err, err


def test_shards_merged_on_the_command_line_print_the_one_machine_bytes(tmp_path: Path) -> None:
    code, whole, _ = _hunt(*SMALL, "--out", str(tmp_path / "w"), "--json")
    assert code == 0
    for i in (1, 2):
        assert _hunt(*SMALL, "--shard", f"{i}/2", "--out", str(tmp_path / f"s{i}"))[0] == 0
    result = CliRunner().invoke(app, ["hunt", "merge", str(tmp_path / "s1" / "report.json"),
                                      str(tmp_path / "s2" / "report.json"), "--out", str(tmp_path / "m"), "--json"])
    assert result.exit_code == 0, result.stdout
    assert result.stdout == whole == (tmp_path / "m" / "report.json").read_text()
    # a merge written over one of its own inputs replaced shard 1's report (session 58's probe)
    shard = (tmp_path / "s1" / "report.json").read_text()
    over = CliRunner().invoke(app, ["hunt", "merge", str(tmp_path / "s1" / "report.json"),
                                    str(tmp_path / "s2" / "report.json"), "--out", str(tmp_path / "s1")])
    assert over.exit_code == 2 and "is shard report" in over.stderr and "would replace it" in over.stderr, over.stderr
    assert (tmp_path / "s1" / "report.json").read_text() == shard
    # a missing shard: the exit is 2, and stderr says why
    half = CliRunner().invoke(app, ["hunt", "merge", str(tmp_path / "s1" / "report.json"), "--out", str(tmp_path / "h")])
    assert half.exit_code == 2 and half.stderr.startswith("error: incomplete: no report covers workload(s) "), half.stderr


@pytest.mark.parametrize(("args", "says"), [
    (["--workloads", "bogus"], "error: unknown workload 'bogus' (choose from reply, "),
    (["--shard", "3/2"], "error: --shard '3/2': I must be between 1 and N"),
    (["--depth", "0"], "error: --depth, --nth and --cassettes must be at least 1"),
    (["--depth", "4"], "error: --depth 4 with 17 actions makes more action sequences at every point than a hunt takes (at most 5,000)"),
    (["--depth", "100000000000"], "error: --depth 100000000000 with 17 actions makes more action sequences"),
    (["--depth", "100000000000", "--verbs", "send"], "error: --depth 100000000000 with 1 action makes 100,000,000,000 "),
    (["--depth", "3", "--verbs", "send,cancel,steer,abort,dispose,when_idle,inject,raise,close,create,stall,answer,stop,reload,reconfigure,cancel_driver,bad_inject"],
     "error: --depth 3 with 17 actions makes 5,219 action sequences at every point, more than a hunt takes"),
    (["--workers", "100000"], "error: --workers 100000 is more processes than this machine can use"),
    (["--verbs", ","], "error: --verbs ',' names nothing"),
    (["--workloads", " , "], "error: --workloads ' , ' names nothing"),
    (["--baseline", "b.json"], "error: --baseline needs --against"),
    # a hunt whose options open no window checks nothing: not a pass
    (["--workloads", "reply", "--verbs", "answer"], "error: no window to run: answer opens no window in reply "),
    (["--workloads", "hand-off", "--verbs", "raise,answer", "--depth", "1"],
     "error: no window to run: raise, answer open no window in hand-off "),
    (["--out", "/dev/null/report"], "error: --out /dev/null/report: cannot create the directory (Not a directory)"),
    (["--verbs", "jump"], "error: unknown action 'jump'"),
    (["--impl", "nope:x"], "error: cannot import 'nope'"),
    (["--impl", "examples.tiny_loop.adapter:implementation", "--workloads", "resume,inject"],
     "error: --workloads: no workload to run: resume (needs persistence), inject (needs injection)"),
])
def test_bad_input_is_one_line_and_exit_2(args: list[str], says: str) -> None:
    code, _out, err = _hunt(*args)
    assert code == 2
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(says), err


def test_a_named_workload_the_implementation_cannot_run_is_noted_not_silently_dropped(tmp_path: Path) -> None:
    args = [a if a != "reply,two-prompts" else "reply,resume" for a in SMALL]
    code, out, err = _hunt("--impl", "examples.tiny_loop.adapter:implementation", *args, "--out", str(tmp_path / "t"))
    assert "note: skipped resume (needs persistence)" in err
    assert code == 1 and "(reply)" in out and "resume" not in out  # tiny_loop's own findings, on reply only


@pytest.mark.parametrize(("content", "says"), [
    (b"\xff\xfe", "not a hunt baseline (not UTF-8 text)"),
    (b"[" * 100_000, "not a hunt baseline (nested too deeply, or a number too long)"),
    (b'{"format": "loopkit-hunt-baseline/1", "differences": [[1]]}', "'differences' list of signatures"),
], ids=["binary", "deep", "not-signatures"])
def test_a_bad_baseline_is_one_line_naming_it(tmp_path: Path, content: bytes, says: str) -> None:
    bad = tmp_path / "b.json"
    bad.write_bytes(content)
    code, _out, err = _hunt("--workloads", "reply", "--depth", "1", "--against", "reference", "--baseline", str(bad),
                            "--out", str(tmp_path / "h"))
    assert code == 2
    assert err.strip().startswith(f"error: {bad}: ") and says in err and len(err.strip().splitlines()) == 1, err


def test_merge_of_something_else_is_one_line_and_exit_2(tmp_path: Path) -> None:
    bogus = tmp_path / "x.json"
    bogus.write_text('{"format": "other"}\n')
    result = CliRunner().invoke(app, ["hunt", "merge", str(bogus), "--out", str(tmp_path / "m")])
    assert result.exit_code == 2
    assert len(result.stderr.strip().splitlines()) == 1 and str(bogus) in result.stderr


def test_a_finding_message_with_control_characters_and_markup_prints_as_text() -> None:
    """An implementation's text inside a finding (an error's message) is shown, not acted on: no
    raw escape sequence reaches the terminal, and ``[/x]`` is no markup error after the hunt."""
    import contextlib
    import io

    from conformance.hunt.console import print_report

    rep = {"impl": "pkg:impl [1]", "shard": None, "coverage": {"log": {"enumerated": 1, "run": 1, "distinct": 1}},
           "totals": {"windows": 1, "run": 1, "distinct": 1, "workloads": 1, "explored": 0, "schedules": 1},
           "findings": [{"signature": "ERRORS [ERR-2]", "windows": 1, "workloads": ["reply"],
                         "message": "error event 'boom \x1b[2J [/x]\r'", "examples": [{"window": "reply: w"}]}],
           "differences": [], "stopped": None, "config": {"against": None}}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        print_report(rep, None, "pkg:impl", [])
    text = out.getvalue()
    assert "\x1b" not in text and "\r" not in text
    assert "error event 'boom \\x1b[2J [/x]\\x0d'" in text and "hunt of pkg:impl [1]" in text
