"""Mutation adequacy of the conformance suite, measured by a real tool (mutmut 3).

mutmut rewrites every function of ``reference_loop/`` into its mutants (operators swapped,
constants changed, arguments dropped, branches forced, ...) and, for each mutant, runs the
tests that reach the mutated function: the conformance rule tests on the reference
(``conformance/tests``, race rules under ``--schedules`` random and pct schedules each) and the
hunt (the property search of ``tests/scenario/test_properties.py``, ``--hunt-examples``
generated scenarios per strategy). A mutant some test fails on is killed. The score is::

    killed / (mutants - equivalent)

leaving out the mutants listed, each with its one-line reason, in two tables of
``docs/mutants.md``: "Outside the contract" (code no conformance run reaches through the adapter,
or the kit's own test input) and "Equivalent mutants" (survivors that change nothing the contract
can observe). Timeouts count as killed (the mutant made the loop spin); mutants no test reaches
count as survivors unless listed.

    python bench/mutation.py                       # run (incremental) and report
    python bench/mutation.py --report [--json]     # report the last run only
    python bench/mutation.py --rerun-survivors [PATTERN ...]  # re-test the survivors in scope
                                                   # (after adding tests; only those matching)
    python bench/mutation.py --show NAME           # the diff of one mutant

mutmut works in a copy: the repository's sources are synced into ``--workdir`` (default
``.mutation/``, git-ignored) with a ``setup.cfg`` holding the mutmut configuration, and mutmut
keeps its mutants and results there (``mutants/``), so a second run only tests what changed.
The whole first run takes about an hour on 2 cores.
"""

from __future__ import annotations

import argparse
import filecmp
import fnmatch
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "mutants.md"

# What the copy needs: the mutated package, everything the tests import, the tests, the config.
SYNCED = ("reference_loop", "conformance", "simulator", "cassettes", "examples", "cli.py", "pyproject.toml")
HUNT = (
    "tests/scenario/conftest.py",
    "tests/scenario/test_properties.py",
)
HUNT_TESTS = (
    "tests/scenario/test_properties.py::test_reference_under_hypothesis_schedules",
    "tests/scenario/test_properties.py::test_reference_under_pct",
    "tests/scenario/test_properties.py::test_reference_under_random",
)

# mutmut's exit-code classes (mutmut.stats.status_by_exit_code), folded into three outcomes.
KILLED = {"killed", "timeout", "segfault"}
NOT_RUN = {"not checked", "skipped", "check was interrupted by user"}


def config_text(schedules: int) -> str:
    """The ``[mutmut]`` section of the copy's ``setup.cfg``. Tests run in mutmut's own process:
    ``-n 0`` rather than ``-p no:xdist``, which would make the project's ``--dist`` addopt an
    unknown argument."""
    selection = "\n    ".join(("conformance/tests", *HUNT_TESTS))
    return f"""[mutmut]
source_paths = reference_loop/
also_copy =
    conformance/
    simulator/
    cassettes/
    examples/
    cli.py
pytest_add_cli_args_test_selection =
    {selection}
pytest_add_cli_args =
    --loopkit-schedules={schedules}
    -n 0
use_git_change_detection = false
"""


def sync(workdir: Path, schedules: int) -> None:
    """Copy the sources into ``workdir``, touching only files whose content changed (mutmut
    decides from modification times which files to mutate again)."""
    workdir.mkdir(parents=True, exist_ok=True)
    for name in (*SYNCED, *HUNT):
        src = ROOT / name
        if src.is_dir():
            for path in src.rglob("*"):
                if "__pycache__" in path.parts or not path.is_file():
                    continue
                _copy_if_changed(path, workdir / path.relative_to(ROOT))
        else:
            _copy_if_changed(src, workdir / name)
    cfg = workdir / "setup.cfg"
    text = config_text(schedules)
    if not cfg.exists() or cfg.read_text() != text:
        cfg.write_text(text)


def _copy_if_changed(src: Path, dst: Path) -> None:
    if dst.exists() and filecmp.cmp(src, dst, shallow=False):
        return
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(src, dst)


def mutmut(workdir: Path, *args: str, hunt_examples: int) -> int:
    """Run ``mutmut ARGS`` in the copy (the hunt's example count through its environment)."""
    env = {**os.environ, "LOOPKIT_PROPERTY_EXAMPLES": str(hunt_examples), "PYTHONDONTWRITEBYTECODE": "1"}
    exe = shutil.which("mutmut") or "mutmut"
    return subprocess.call([exe, *args], cwd=workdir, env=env)


# ---------------------------------------------------------------------------------- results


@dataclass
class Score:
    """The outcome of a run: every mutant's status, what is excluded and why, the score.

    ``outside``: patterns of mutants outside the contract's reach (code no conformance run can
    reach through the adapter, or the kit's own test input), excluded whatever their status.
    ``equivalent``: patterns of mutants that change nothing the contract can observe; they
    explain survivors only (a killed mutant is never equivalent).
    """

    statuses: dict[str, str]
    outside: dict[str, str]
    equivalent: dict[str, str]

    def _match(self, name: str, patterns: dict[str, str]) -> str | None:
        for pattern in patterns:
            if fnmatch.fnmatchcase(name, pattern):
                return pattern
        return None

    @property
    def in_scope(self) -> dict[str, str]:
        """The statuses of the mutants run, inside the contract's reach."""
        return {
            k: s for k, s in self.statuses.items()
            if s not in NOT_RUN and self._match(k, self.outside) is None
        }

    @property
    def equivalent_found(self) -> list[str]:
        return sorted(
            k for k, s in self.in_scope.items()
            if s not in KILLED and self._match(k, self.equivalent) is not None
        )

    @property
    def counted(self) -> dict[str, str]:
        """The statuses that count: in scope and not equivalent."""
        equivalent = set(self.equivalent_found)
        return {k: s for k, s in self.in_scope.items() if k not in equivalent}

    @property
    def killed(self) -> list[str]:
        return sorted(k for k, s in self.counted.items() if s in KILLED)

    @property
    def survivors(self) -> list[str]:
        """Every mutant not killed, in scope or not."""
        return sorted(k for k, s in self.statuses.items() if s not in KILLED)

    @property
    def to_retest(self) -> list[str]:
        """What --rerun-survivors re-tests: the survivors inside the contract's reach, the ones
        listed as equivalent included (a new test that kills one shows the listing was wrong)."""
        return sorted(k for k, s in self.statuses.items() if s not in KILLED and self._match(k, self.outside) is None)

    @property
    def counted_survivors(self) -> list[str]:
        return sorted(k for k, s in self.counted.items() if s not in KILLED)

    @property
    def not_run(self) -> list[str]:
        return sorted(k for k, s in self.statuses.items() if s in NOT_RUN)

    @property
    def unused_patterns(self) -> list[str]:
        """Listed patterns that match no mutant (stale after a change of the reference)."""
        names = list(self.statuses)
        return [p for p in (*self.outside, *self.equivalent) if not any(fnmatch.fnmatchcase(n, p) for n in names)]

    @property
    def value(self) -> float:
        counted = len(self.counted)
        return len(self.killed) / counted if counted else 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "tool": "mutmut",
            "mutants": len(self.statuses),
            "outside_contract": len(self.statuses) - len(self.not_run) - len(self.in_scope),
            "equivalent": len(self.equivalent_found),
            "counted": len(self.counted),
            "killed": len(self.killed),
            "survived": len(self.counted_survivors),
            "not_run": len(self.not_run),
            "score": round(self.value, 4),
            "survivors": {k: self.statuses[k] for k in self.counted_survivors},
            "unused_patterns": self.unused_patterns,
        }


def statuses(workdir: Path) -> dict[str, str]:
    """Every mutant of the last run and its status, read from mutmut's ``.meta`` files."""
    from mutmut.stats import status_by_exit_code

    out: dict[str, str] = {}
    for meta in sorted((workdir / "mutants").rglob("*.py.meta")):
        data = json.loads(meta.read_text())
        for key, code in data["exit_code_by_key"].items():
            out[key] = status_by_exit_code[code]
    return out


_ROW = re.compile(r"^\|\s*((?:`[^`]+`[\s,]*)+)\|\s*(.+?)\s*\|\s*$")
_CODE = re.compile(r"`([^`]+)`")
_BRACES = re.compile(r"\{([^{}]*)\}")


def expand(pattern: str) -> list[str]:
    """``a_{1,2}`` -> ``a_1``, ``a_2`` (brace lists, so one row can name a group of mutants by
    number without a glob that would also swallow the function's future survivors)."""
    match = _BRACES.search(pattern)
    if match is None:
        return [pattern]
    head, tail = pattern[: match.start()], pattern[match.end():]
    return [x for item in match.group(1).split(",") for x in expand(head + item.strip() + tail)]
OUTSIDE_HEADING = "### Outside the contract"
EQUIVALENT_HEADING = "### Equivalent mutants"


def listed(doc: Path = DOC) -> tuple[dict[str, str], dict[str, str]]:
    """(outside, equivalent): pattern -> reason, from the two tables of ``docs/mutants.md``
    (rows ``| `pattern` | reason |`` under the headings above; a pattern is a mutant name or an
    fnmatch glob over names, with ``{a,b}`` brace lists; a row's first cell may hold several)."""
    tables: dict[str, dict[str, str]] = {OUTSIDE_HEADING: {}, EQUIVALENT_HEADING: {}}
    current: dict[str, str] | None = None
    for line in doc.read_text(encoding="utf-8").splitlines():
        if line.startswith("#"):
            current = tables.get(line.strip())
            continue
        match = _ROW.match(line)
        if current is None or not match:
            continue
        for cell in _CODE.findall(match.group(1)):
            for pattern in expand(cell):
                if "mutmut" in pattern:
                    current[pattern] = match.group(2)
    return tables[OUTSIDE_HEADING], tables[EQUIVALENT_HEADING]


def score(workdir: Path) -> Score:
    """The score of the last run in ``workdir``."""
    outside, equivalent = listed()
    return Score(statuses(workdir), outside, equivalent)


def print_report(result: Score) -> None:
    data = result.to_json()
    print(
        f"mutmut over reference_loop/: {data['mutants']} mutants, {data['outside_contract']} outside the "
        f"contract, {data['equivalent']} equivalent; {data['killed']}/{data['counted']} killed = "
        f"{100 * data['score']:.1f}%" + (f" ({data['not_run']} not run yet)" if data["not_run"] else "")
    )
    for name, status in data["survivors"].items():
        print(f"  {status:9} {name}")
    for pattern in data["unused_patterns"]:
        print(f"  listed in docs/mutants.md but matching no mutant (stale?): {pattern}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", type=Path, default=ROOT / ".mutation", help="where mutmut works (default .mutation/)")
    parser.add_argument("--max-children", type=int, default=os.cpu_count() or 2, help="parallel mutants (default: the CPUs)")
    parser.add_argument("--schedules", type=int, default=2, help="random and pct schedules per race test (default 2)")
    parser.add_argument("--hunt-examples", type=int, default=40, help="generated scenarios per hunt strategy (default 40)")
    parser.add_argument("--report", action="store_true", help="only report the last run")
    parser.add_argument("--rerun-survivors", action="store_true", help="re-test the survivors of the last run")
    parser.add_argument("--show", metavar="NAME", help="print the diff of one mutant")
    parser.add_argument("patterns", nargs="*", help="with --rerun-survivors: only the survivors matching these fnmatch patterns")
    parser.add_argument("--json", action="store_true", help="print the report as one JSON object")
    parser.add_argument("--min-score", type=float, default=None, help="exit 1 when the score is below this (0..1)")
    args = parser.parse_args(argv)
    workdir: Path = args.workdir.resolve()
    if args.show:
        return mutmut(workdir, "show", args.show, hunt_examples=args.hunt_examples)
    if not args.report:
        sync(workdir, args.schedules)
        run = ("run", "--max-children", str(args.max_children))
        if args.rerun_survivors:
            # mutmut maps tests to functions once and re-traces only tests with new names, so a
            # test that gained a second scenario would keep its old reach: trace everything again.
            (workdir / "mutants" / "mutmut-stats.json").unlink(missing_ok=True)
        # The incremental run first: it tests the mutants of changed files, which have no result.
        code = mutmut(workdir, *run, hunt_examples=args.hunt_examples)
        if code == 0 and args.rerun_survivors:
            names = score(workdir).to_retest
            if args.patterns:
                names = [n for n in names if any(fnmatch.fnmatchcase(n, p) for p in args.patterns)]
            if names:
                code = mutmut(workdir, *run, *names, hunt_examples=args.hunt_examples)
            else:
                print("no survivors to re-test")
        if code != 0:
            print(f"mutmut exited {code}", file=sys.stderr)
            return 2
    result = score(workdir)
    if args.json:
        json.dump(result.to_json(), sys.stdout, indent=2, sort_keys=True)
        sys.stdout.write("\n")
    else:
        print_report(result)
    if args.min_score is not None and result.value < args.min_score:
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
