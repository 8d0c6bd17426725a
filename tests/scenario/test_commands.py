"""``loopkit rules | run | explore | replay``: output, exit codes, one-line errors."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from _cli import invoke

EXAMPLES = Path(__file__).parents[2] / "conformance" / "scenario" / "examples"
SHIPPED = Path(__file__).parents[2] / "cassettes" / "races"
W1, W2 = str(EXAMPLES / "window1.yaml"), str(EXAMPLES / "window2.yaml")


def _one_line_error(result: object, code: int = 2) -> str:
    assert result.exit_code == code, (result.exit_code, result.output)  # type: ignore[attr-defined]
    err = result.stderr.strip()  # type: ignore[attr-defined]
    assert err.startswith("error: ") and "\n" not in err and "Traceback" not in result.output, err  # type: ignore[attr-defined]
    return err


def test_rules() -> None:
    result = invoke("rules", "--json")
    assert result.exit_code == 0
    rules = json.loads(result.stdout)["rules"]
    ids = [r["id"] for r in rules]
    assert "CANCEL-W1" in ids and "CANCEL-W2" in ids and all(r["statement"] for r in rules)
    result = invoke("rules", "CANCEL-W2")
    assert result.exit_code == 0 and "CANCEL-W2" in result.stdout and "LOG-1" not in result.stdout
    assert "unknown rule id 'NOPE-1'" in _one_line_error(invoke("rules", "NOPE-1"))


def test_run_exit_codes_timeline_and_trace(tmp_path: Path) -> None:
    ok = invoke("run", W2, "--trace", str(tmp_path / "t.json"))
    assert ok.exit_code == 0, ok.output
    assert 'canceller: cancel("w2")' in ok.stdout and "when_idle() w resolved" in ok.stdout
    assert json.loads((tmp_path / "t.json").read_text())["outcome"] == "completed"
    bad = invoke("run", W2, "--impl", "mutant:w2-settle-unconditionally")
    assert bad.exit_code == 1 and "check released_after_turn(w, B)" in bad.stdout


def test_explore_writes_a_cassette_then_replay(tmp_path: Path) -> None:
    out = tmp_path / "w1.yaml"
    found = invoke("explore", W1, "--impl", "mutant:w1-release-with-replacement", "--budget", "300", "--out", str(out))
    assert found.exit_code == 1, found.output
    assert "FOUND after" in found.stdout and out.exists()
    elsewhere = invoke("replay", str(out))  # on the reference: it holds, and the note says where it was found
    assert elsewhere.exit_code == 0 and "ok: every check holds" in elsewhere.stdout
    assert ("note: this cassette was recorded on mutant:w1-release-with-replacement; it ran on reference "
            "(--impl mutant:w1-release-with-replacement replays it where it was found)") in elsewhere.stderr
    again = invoke("replay", str(out), "--impl", "mutant:w1-release-with-replacement", "--diagram", str(tmp_path / "d.html"))
    assert again.exit_code == 1 and "FAILED" in again.stdout and "note:" not in again.stderr
    assert (tmp_path / "d.html").read_text().startswith("<!DOCTYPE html>")


def test_explore_clean_budget_and_pct_guarantee() -> None:
    result = invoke("explore", W2, "--strategy", "pct", "--budget", "30")
    assert result.exit_code == 0, result.output
    assert "30 schedules explored" in result.stdout and "pct guarantee" in result.stdout


def test_bad_input_is_one_line_and_exit_2(tmp_path: Path) -> None:
    assert "no such scenario file" in _one_line_error(invoke("run", str(tmp_path / "missing.yaml")))
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nactors:\n  - at: soon\n    do: [{send: A}]\n")
    assert "bad.yaml:3: actors[0].at: expected a number" in _one_line_error(invoke("run", str(bad)))
    assert "bad --impl" in _one_line_error(invoke("run", W2, "--impl", "nocolon"))
    assert "it names no implementation" in _one_line_error(invoke("run", W2, "--impl", ""))
    assert "cannot import" in _one_line_error(invoke("explore", W2, "--impl", "no_such_mod:x"))
    assert "unknown mutant" in _one_line_error(invoke("replay", str(SHIPPED / "window2.yaml"), "--impl", "mutant:nope"))
    assert "unknown strategy" in _one_line_error(invoke("explore", W2, "--strategy", "bogus"))
    assert "no such race cassette" in _one_line_error(invoke("replay", str(tmp_path / "none.yaml")))
    assert "--workers 100000 is more processes" in _one_line_error(invoke("explore", W2, "--workers", "100000"))
    diverging = tmp_path / "div.yaml"
    diverging.write_text((SHIPPED / "window1.yaml").read_text().replace("'actor:racer:", "'actor:other:", 1))
    assert "diverges" in _one_line_error(invoke("replay", str(diverging)))


def test_a_path_that_is_not_a_regular_file_is_refused_before_reading(tmp_path: Path) -> None:
    # A FIFO with no writer blocked run, replay and explore for ever (explore deaf to SIGTERM and
    # SIGINT); /dev/zero filled the memory (session 58's hostile probe).
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    zero = tmp_path / "zero.yaml"
    zero.symlink_to("/dev/zero")
    for command in ("run", "explore", "replay"):
        for path in (fifo, zero):
            assert "not a regular file" in _one_line_error(invoke(command, str(path), *(["--budget", "1"] if command == "explore" else [])))
    assert "is a directory" in _one_line_error(invoke("replay", str(tmp_path)))


def test_an_output_over_another_or_over_the_input_is_refused_before_the_run(tmp_path: Path) -> None:
    # explore --out over its own scenario replaced it with the race cassette; run --trace F
    # --diagram F kept one of the two; run --trace - wrote a file named '-' (session 58's probe)
    scenario = tmp_path / "w1.yaml"
    scenario.write_text(Path(W1).read_text())
    same = str(tmp_path / "same.json")
    assert "are the same file: each needs its own" in _one_line_error(invoke("run", W2, "--trace", same, "--diagram", same))
    assert "is the scenario: writing there would replace it" in _one_line_error(
        invoke("explore", str(scenario), "--budget", "1", "--out", str(scenario)))
    assert "is the scenario" in _one_line_error(invoke("run", str(scenario), "--trace", str(scenario)))
    assert scenario.read_text() == Path(W1).read_text()
    assert "is the race cassette" in _one_line_error(
        invoke("replay", str(SHIPPED / "window1.yaml"), "--diagram", str(SHIPPED / "window1.yaml")))
    assert "writes a file, not standard output" in _one_line_error(invoke("run", W2, "--trace", "-"))


@pytest.mark.parametrize(("value", "problem"), [
    ("!foo x", "unsupported YAML tag '!foo'"),
    ("!!python/name:os.system x", "unsupported YAML tag"),
    ("9" * 5000, "unreadable value"),
    ("!!binary aGVsbG8=", "bytes (YAML tag 'tag:yaml.org,2002:binary') is not a value a scenario takes"),
])
def test_a_scalar_json_cannot_hold_is_a_one_line_error_naming_its_line(tmp_path: Path, value: str,
                                                                     problem: str) -> None:
    # An application tag, a number past Python's digit limit and !!binary bytes ended in tracebacks
    # (the tool call's arguments reached json.dumps as bytes).
    bad = tmp_path / "bad.yaml"
    bad.write_text(f"name: x\nmodel:\n  - blocks:\n      - tool_call: {{name: echo, args: {{q: {value}}}}}\n"
                   "actors:\n  - at: 0\n    do: [{send: A}]\n")
    err = _one_line_error(invoke("run", str(bad)))
    assert "bad.yaml:4: model[0].blocks[0].tool_call.args.q: " in err and problem in err, err


def test_a_run_over_the_scenarios_own_step_budget_says_so(tmp_path: Path) -> None:
    # "outcome budget-exceeded" alone read as a loop that never ends (session 58's probe)
    tight = tmp_path / "tight.yaml"
    tight.write_text(Path(W1).read_text() + "limits: {max_steps: 20}\n")
    result = invoke("run", str(tight))
    assert result.exit_code == 1
    assert "outcome budget-exceeded (the scenario's limits.max_steps: 20 scheduler steps ran out)" in result.stdout


def test_a_date_is_read_as_the_text_it_is_written_as(tmp_path: Path) -> None:
    # YAML 1.1 makes 2026-12-07 a date, which no JSON field holds: it is the text it reads as
    ok = tmp_path / "ok.yaml"
    ok.write_text("name: x\nmodel:\n  - {text: 2026-12-07}\nactors:\n  - at: 0\n    do: [{send: A}, {when_idle: w}, {wait_idle: w}]\n")
    result = invoke("run", str(ok), "--trace", str(tmp_path / "t.json"))
    assert result.exit_code == 0 and '"2026-12-07"' in (tmp_path / "t.json").read_text(), result.output


class _Broken:
    """An implementation whose service cannot be built."""

    name = "broken"
    features: frozenset[str] = frozenset()
    logger_name = "broken"

    def create_service(self, *, persistence: object | None = None) -> object:
        raise RuntimeError("no service today")

    def new_persistence(self) -> object:
        raise NotImplementedError


broken = _Broken()


def test_setup_errors_and_bad_numbers_exit_2() -> None:
    for args in (("run", W2), ("explore", W1), ("explore", W1, "--workers", "2")):
        err = _one_line_error(invoke(*args, "--impl", "test_commands:broken"))
        assert "create_service() raised RuntimeError: no service today" in err
    assert "at least 1" in _one_line_error(invoke("explore", W1, "--budget", "0"))


def test_an_output_that_cannot_be_written_is_refused_before_the_run(tmp_path: Path) -> None:
    # checked up front: a search must not run to its end only to fail on a typo in a path
    missing = str(tmp_path / "no" / "such" / "dir" / "t.json")
    blocker = tmp_path / "file"
    blocker.write_text("")
    cases = [
        (("run", W1, "--trace", missing), "(--trace): no such directory"),
        (("run", W1, "--diagram", str(tmp_path)), "(--diagram): it is a directory"),
        (("explore", W1, "--budget", "3", "--out", str(blocker / "r.yaml")), "(--out): cannot create directory"),
        (("replay", str(SHIPPED / "window1.yaml"), "--diagram", missing), "(--diagram): no such directory"),
    ]
    for args, says in cases:
        assert says in _one_line_error(invoke(*args)), args
    made = tmp_path / "new" / "r.yaml"  # explore makes its cassette's directory, as before
    assert invoke("explore", W1, "--budget", "3", "--out", str(made)).exit_code == 0 and made.parent.is_dir()
