"""The layering contract, beyond what ``lint-imports`` (run by CI) checks: ``cli.py`` is on top,
so no package imports it, not even lazily inside a function."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("simulator", "reference_loop", "cassettes", "conformance")
ORDER = {name: i for i, name in enumerate(PACKAGES)}


def _imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append(node.module)
    return out


def test_no_package_imports_the_cli() -> None:
    offenders = [f"{p.relative_to(ROOT)} imports {name}" for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")
                 for name in _imports(p) if name.split(".")[0] == "cli"]
    assert offenders == []


def test_no_import_climbs_a_layer() -> None:
    # The same rule as the import-linter contract, so a plain `pytest` run catches it too.
    offenders = []
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            for name in _imports(path):
                top = name.split(".")[0]
                if top in ORDER and ORDER[top] > ORDER[pkg]:
                    offenders.append(f"{path.relative_to(ROOT)} imports {name}")
    assert offenders == []


def test_the_command_line_starts_without_the_heavy_libraries() -> None:
    # Every command pays for what ``import cli`` loads: pytest is for ``conformance`` alone,
    # httpx, vcrpy and botocore for the cassette commands and cassette models.
    import subprocess
    import sys

    code = ("import sys, cli; print(' '.join(m for m in ('pytest', 'httpx', 'vcr', 'botocore', 'hypothesis') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.split() == []
