"""Wall-clock pinning with freezegun, started once per process.

``freezegun.freeze_time().start()`` scans ``sys.modules`` to patch every imported reference to
``time.time``/``datetime``; that costs milliseconds, far too much per schedule. We start it once
(the first time a simulation runs), then pop its factory and ignore list so that, between runs,
freezegun's fakes answer with the real clock (``_should_use_real_time()`` is true when
``ignore_lists`` is empty and ``FakeDatetime.now`` falls back to the real clock when
``freeze_factories`` is empty). Each run pushes a factory reading the virtual clock and an empty
ignore list (no stack inspection), and pops them when it ends: two list operations per run.
If someone else's ``freeze_time`` stopped and undid the patch, the next run re-installs it.
"""

from __future__ import annotations

import datetime as _dt
import time as _time
from collections.abc import Callable

from freezegun import api as _api

_EPOCH = _dt.datetime(2026, 1, 1, 0, 0, 0)
_installed = False


def _patched() -> bool:
    return _time.time is _api.fake_time and _dt.datetime is _api.FakeDatetime


def install() -> None:
    """Patch the process once (idempotent; re-patches if an outside ``stop()`` undid it)."""
    global _installed
    if _installed and _patched():
        return
    freezer = _api.freeze_time(_EPOCH, ignore=[])
    freezer.start()
    # Keep tz_offsets/tick_flags (read unconditionally by the fakes); drop the factory and the
    # ignore list so that the fakes report real time until a run pushes its own.
    _api.freeze_factories.pop()
    _api.ignore_lists.pop()
    _installed = True


def push(now: Callable[[], float]) -> None:
    """Pin wall-clock reads to ``_EPOCH + now()`` seconds until :func:`pop`."""
    td = _dt.timedelta
    epoch = _EPOCH

    def factory() -> _dt.datetime:
        return epoch + td(seconds=now())

    _api.freeze_factories.append(factory)  # type: ignore[arg-type]
    _api.ignore_lists.append(())


def pop() -> None:
    _api.freeze_factories.pop()
    _api.ignore_lists.pop()
