"""Fixtures of the wire tests: the kit's JavaScript loop over the wire (they need ``node``)."""

from __future__ import annotations

import shlex
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BRIDGE = ROOT / "examples" / "js_loop" / "bridge.mjs"
FAULTY = Path(__file__).resolve().parent / "faulty.mjs"
NODE = shutil.which("node")

requires_node = pytest.mark.skipif(
    NODE is None, reason="node is not on PATH: the JavaScript loop cannot be checked over the wire here")

sys.path.insert(0, str(Path(__file__).resolve().parent))


def command(script: Path, *args: str) -> str:
    """The COMMAND of ``--impl wire:COMMAND`` running ``script`` with node."""
    return shlex.join(["node", str(script), *args])


JS_LOOP = command(BRIDGE)
W2_SETTLE_EARLY = command(BRIDGE, "--variant", "w2-settle-early")
MARKER_NOT_RESET = command(BRIDGE, "--variant", "marker-not-reset")
