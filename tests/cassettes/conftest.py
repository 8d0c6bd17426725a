"""Shared paths and helpers for the cassette tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from cassettes.pytest_plugin import llm_cassette, loopkit_vcr  # noqa: F401  (the fixtures)

REPO = Path(__file__).resolve().parents[2]
SHIPPED = REPO / "cassettes" / "llm"
EXTERNAL = REPO.parent / "shared" / "cassettes-external"


def external_files() -> list[Path]:
    """Every external cassette, or an empty list when ``../shared`` is absent."""
    return sorted(EXTERNAL.glob("*/*.yaml")) if EXTERNAL.is_dir() else []


def shipped_files() -> list[Path]:
    return sorted(SHIPPED.glob("*/*.yaml"))


@pytest.fixture
def tmp_cassette(tmp_path: Path):  # type: ignore[no-untyped-def]
    """Write text to a cassette file and return its path."""

    def write(text: str, name: str = "c.yaml") -> Path:
        path = tmp_path / name
        path.write_text(text, encoding="utf-8")
        return path

    return write
