"""Splitting the window space across machines: ``--shard I/N``.

A shard takes whole workloads (the dedup of explored windows spans a workload, see
:mod:`.search`), assigned by size: the largest first, each to the shard with the fewest windows
so far (ties to the lower shard). The assignment depends only on the plan, so every machine
computes the same one, and ``loopkit hunt merge`` rebuilds the one-machine report exactly.
"""

from __future__ import annotations

import re

_SPEC = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*$")


class ShardError(ValueError):
    """A malformed ``--shard`` (one-line message)."""


MAX_SHARDS = 1000
"""Shards a hunt may be split into: a shard takes whole workloads, and there are a few dozen."""


def parse(spec: str) -> tuple[int, int]:
    """``"I/N"`` as ``(I, N)`` with ``1 <= I <= N``."""
    m = _SPEC.match(spec)
    if not m:
        raise ShardError(f"--shard {spec!r}: expected I/N, for example 1/4")
    i, n = int(m.group(1)), int(m.group(2))
    if n > MAX_SHARDS:
        raise ShardError(f"--shard {spec!r}: N must be at most {MAX_SHARDS} (a shard takes whole workloads, and a hunt has a few dozen)")
    if n < 1 or not 1 <= i <= n:
        raise ShardError(f"--shard {spec!r}: I must be between 1 and N (N >= 1)")
    return i, n


def assign(sizes: list[int], shards: int) -> list[int]:
    """The shard (1-based) of each workload, given the workloads' window counts."""
    load = [0] * shards
    out = [0] * len(sizes)
    for w in sorted(range(len(sizes)), key=lambda w: (-sizes[w], w)):
        s = min(range(shards), key=lambda k: (load[k], k))
        out[w] = s + 1
        load[s] += sizes[w]
    return out


__all__ = ["ShardError", "assign", "parse"]
