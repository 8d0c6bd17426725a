"""Set-up shared by the whole of the project's own test suite."""

from __future__ import annotations

import os
import sys
import tempfile

# The suite starts the kit in a process of its own a few hundred times (the command, the
# conformance workers, the wire children's proxies). With PYTHONDONTWRITEBYTECODE set, each start
# compiled the kit from source anew: about 30 s of the suite on two cores. Honour the setting's
# point (nothing written next to the sources) and still share the caches, in a directory of the
# temp dir: the xdist workers and every subprocess inherit it from here.
if os.environ.get("PYTHONDONTWRITEBYTECODE"):
    _PREFIX = os.path.join(tempfile.gettempdir(), f"loopkit-pycache-{getattr(os, 'getuid', lambda: 0)()}")
    del os.environ["PYTHONDONTWRITEBYTECODE"]
    os.environ["PYTHONPYCACHEPREFIX"] = _PREFIX
    sys.pycache_prefix = _PREFIX
    sys.dont_write_bytecode = False
