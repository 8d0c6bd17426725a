"""What the wire tests share: the kit's JavaScript loop and its variants as wire commands."""

from __future__ import annotations

import shlex
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BRIDGE = ROOT / "examples" / "js_loop" / "bridge.mjs"
FAULTY = Path(__file__).resolve().parent / "faulty.mjs"
NODE = shutil.which("node")

requires_node = pytest.mark.skipif(
    NODE is None, reason="node is not on PATH: the JavaScript loop cannot be checked over the wire here")


def command(script: Path, *args: str) -> str:
    """The COMMAND of ``--impl wire:COMMAND`` running ``script`` with node."""
    return shlex.join(["node", str(script), *args])


JS_LOOP = command(BRIDGE)
W2_SETTLE_EARLY = command(BRIDGE, "--variant", "w2-settle-early")
MARKER_NOT_RESET = command(BRIDGE, "--variant", "marker-not-reset")
THROWN_UNNORMALISED = command(BRIDGE, "--variant", "thrown-unnormalised")
LOG_KEEPS_CALLERS_CONTENT = command(BRIDGE, "--variant", "log-keeps-callers-content")
LOG_KEEPS_TOOL_RESULT = command(BRIDGE, "--variant", "log-keeps-tool-result")
LOG_KEEPS_STEP_RESULT = command(BRIDGE, "--variant", "log-keeps-step-result")
RESULT_RETRIED_ON_TYPE_ERROR = command(BRIDGE, "--variant", "result-retried-on-type-error")
