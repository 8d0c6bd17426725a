"""The Node bridge library's own unit tests (schemas, tags, the polyfill, the tripwire)."""

from __future__ import annotations

import subprocess

from _wire import NODE, ROOT, requires_node


@requires_node
def test_the_bridge_library_unit_tests_pass() -> None:
    assert NODE is not None
    done = subprocess.run([NODE, "--test", "examples/js_loop/bridge/test/"], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "# fail 0" in done.stdout
