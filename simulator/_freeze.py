"""Wall-clock pinning with freezegun, cheap enough to do per run.

``freezegun.freeze_time().start()`` scans ``sys.modules`` to patch every imported reference to
``time.time``/``datetime``/...; that costs milliseconds, far too much per schedule. We do the
scan once per process (and again only over modules imported since), keeping the list of
``(object, attribute, fake, real)`` it found. Each run then:

* pushes onto freezegun's stacks (``freeze_factories``, ``ignore_lists``, ``tz_offsets``,
  ``tick_flags``) a factory reading the virtual clock (``_EPOCH`` + ``loop.time()``) and an
  empty ignore list (so the fakes never inspect the call stack), and
* sets every recorded attribute to freezegun's fake (a few dozen ``setattr``),

and undoes both when it ends. Outside a run every patched name is the real function again, so
asyncio event loops and timing code elsewhere in the process pay nothing.

Modules in freezegun's default ignore list (``threading``, ``queue``, ``_pytest``, ...) are not
patched. ``time.time()`` etc. called through the ``time`` module itself always are.
"""

from __future__ import annotations

import datetime as _dt
import sys
import time as _time
import warnings
from collections.abc import Callable
from typing import Any

from freezegun import api as _api
from freezegun import config as _config

_EPOCH = _dt.datetime(2001, 9, 9, 1, 46, 40)
"""The pinned wall clock at virtual time 0: epoch second 1,000,000,000. Not the seeded sources'
``EPOCH_MS`` (2026-01-01), on purpose: a run stays reproducible either way, and code that reads
the real clock directly rather than through the sources it was given stamps times from another
era, which a checker can tell from the seeded clock's."""
_ZERO = _dt.timedelta(0)

#: (object, attribute, fake, real)
_patches: list[tuple[Any, str, Any, Any]] = []
_fakes: dict[int, tuple[Any, Any]] = {}  # id(real) -> (fake, real)
_scanned: set[str] = set()
_scanned_len = -1
_ignore: tuple[str, ...] = ()


def _init() -> None:
    global _ignore
    pairs = [
        ("time", _api.real_time, _api.fake_time),
        ("monotonic", _api.real_monotonic, _api.fake_monotonic),
        ("perf_counter", _api.real_perf_counter, _api.fake_perf_counter),
        ("localtime", _api.real_localtime, _api.fake_localtime),
        ("gmtime", _api.real_gmtime, _api.fake_gmtime),
        ("strftime", _api.real_strftime, _api.fake_strftime),
    ]
    for name in ("time_ns", "monotonic_ns", "perf_counter_ns"):
        real = getattr(_api, "real_" + name, None)
        fake = getattr(_api, "fake_" + name, None)
        if real is not None and fake is not None:
            pairs.append((name, real, fake))
    for name, real, fake in pairs:
        _patches.append((_time, name, fake, real))
        _fakes[id(real)] = (fake, real)
    _patches.append((_dt, "datetime", _api.FakeDatetime, _api.real_datetime))
    _patches.append((_dt, "date", _api.FakeDate, _api.real_date))
    _fakes[id(_api.real_datetime)] = (_api.FakeDatetime, _api.real_datetime)
    _fakes[id(_api.real_date)] = (_api.FakeDate, _api.real_date)
    _ignore = tuple(_config.settings.default_ignore_list)


def _scan() -> None:
    """Record every module attribute bound to a real clock function (new modules only)."""
    global _scanned_len
    if not _fakes:
        _init()
    modules = sys.modules
    if len(modules) == _scanned_len:
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, module in list(modules.items()):
            if name in _scanned:
                continue
            _scanned.add(name)
            if module is None or name in ("time", "datetime", "_datetime") or name.startswith(_ignore):
                continue
            if name.startswith("freezegun") or name.endswith(".six.moves"):
                continue
            try:
                attrs = list(vars(module).items())
            except TypeError:
                continue
            for attr, value in attrs:
                hit = _fakes.get(id(value))
                if hit is not None and hit[1] is value:
                    _patches.append((module, attr, hit[0], hit[1]))
    _scanned_len = len(modules)


def install() -> None:
    """Prepare the patch list (scans modules imported since the last call)."""
    _scan()


def push(now: Callable[[], float]) -> None:
    """Pin wall-clock reads to ``EPOCH + now()`` seconds until :func:`pop`."""
    if len(sys.modules) != _scanned_len:
        _scan()
    td = _dt.timedelta
    epoch = _EPOCH

    def factory() -> _dt.datetime:
        return epoch + td(seconds=now())

    _api.freeze_factories.append(factory)  # type: ignore[arg-type]
    _api.ignore_lists.append(())
    _api.tz_offsets.append(_ZERO)
    _api.tick_flags.append(False)
    for obj, attr, fake, _real in _patches:
        setattr(obj, attr, fake)


def pop() -> None:
    for obj, attr, _fake, real in _patches:
        setattr(obj, attr, real)
    _api.freeze_factories.pop()
    _api.ignore_lists.pop()
    _api.tz_offsets.pop()
    _api.tick_flags.pop()
