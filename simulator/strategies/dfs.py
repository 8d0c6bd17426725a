"""Systematic depth-first enumeration of schedules, with reduction.

One strategy object drives a whole search: each run follows the current path of the search
tree (by label) and then takes the first unexplored option; ``end()`` backtracks to the deepest
choice point with an untried option. ``exhausted`` becomes true when the tree is done.

Reduction (so the search counts distinct task interleavings, not orderings):

* asyncio-internal callbacks ("glue": resolving a sleep's future, gather's bookkeeping, the
  loop's own done-callbacks) run no user code and stay ready until run, so when one is ready
  it alone is explored at that choice point (a persistent set of size one);
* sleep sets over task steps: after exploring option ``a`` at a node, ``a`` sleeps in the
  sibling subtrees until an option dependent with it runs. Task steps and user callbacks are
  all considered dependent with one another (we do not track memory accesses); firing a timer
  early and glue are independent of everything. A run in which every ready option sleeps is
  redundant; it is finished FIFO and not counted as a new interleaving.
* ``max_deviations`` bounds the number of non-FIFO choices per schedule (delay bounding).

The reduction treats virtual time as observable only through the interleaving it causes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from simulator.errors import SimulationError
from simulator.strategies.base import Strategy

if TYPE_CHECKING:
    from simulator._runtime import SimLoop

_INDEPENDENT = frozenset(("timer", "glue"))


@dataclass
class _Node:
    labels: list[str]
    kinds: list[str]
    sleep: dict[str, str]
    todo: list[str]
    dev_before: int
    done: list[str] = field(default_factory=list)
    chosen: str = ""


class DFSStrategy(Strategy):
    """Systematic depth-first search (see the module docstring); ``classes`` counts the runs
    that were not cut short as redundant."""

    name = "dfs"
    systematic = True

    def __init__(self, *, max_deviations: int | None = None, reduction: bool = True) -> None:
        self.max_deviations = max_deviations
        self.reduction = reduction
        self._stack: list[_Node] = []
        self.exhausted = False
        self.runs = 0
        self.redundant_runs = 0
        self._depth = 0
        self._dev = 0
        self._sleep: dict[str, str] = {}
        self._redundant = False

    @property
    def classes(self) -> int:
        """Interleavings explored (runs not cut short by the sleep sets)."""
        return self.runs - self.redundant_runs

    def begin(self, loop: SimLoop, seed: int) -> None:
        if self.exhausted:
            raise SimulationError("dfs: the search is exhausted")
        self.loop = loop
        self._depth = 0
        self._dev = 0
        self._sleep = {}
        self._redundant = False

    def choose_fn(self) -> Callable[[int], int] | None:
        return self.choose

    def _todo(self, labels: list[str], kinds: list[str], sleep: dict[str, str], dev: int) -> list[str]:
        if self.reduction:
            for lbl, kind in zip(labels, kinds, strict=True):
                if kind == "glue":
                    return [] if lbl in sleep else [lbl]
        bound_hit = self.max_deviations is not None and dev >= self.max_deviations
        todo: list[str] = []
        seen: set[str] = set()
        for i, lbl in enumerate(labels):
            if lbl in seen or (self.reduction and lbl in sleep):
                continue
            if bound_hit and i > 0:
                break
            seen.add(lbl)
            todo.append(lbl)
        return todo

    def choose(self, n: int) -> int:
        loop = self.loop
        assert loop is not None
        if self._redundant:
            return 0
        j = self._depth
        self._depth = j + 1
        labels = loop.option_labels()
        if j < len(self._stack):
            node = self._stack[j]
            if node.labels != labels:
                raise SimulationError(
                    f"dfs: the program is not deterministic: choice {j} offered {labels}, "
                    f"earlier {node.labels} (run simulator.check_determinism)"
                )
        else:
            kinds = loop.option_kinds()
            todo = self._todo(labels, kinds, self._sleep, self._dev)
            node = _Node(labels, kinds, dict(self._sleep), todo, self._dev)
            if not todo:
                self._redundant = True
                return 0
            node.chosen = todo[0]
            node.done.append(todo[0])
            self._stack.append(node)
        i = labels.index(node.chosen)
        if i:
            self._dev += 1
        if self.reduction:
            ck = node.kinds[i]
            nxt: dict[str, str] = {}
            for lbl, kind in node.sleep.items():
                if lbl != node.chosen and (kind in _INDEPENDENT or ck in _INDEPENDENT):
                    nxt[lbl] = kind
            for lbl in node.done[:-1]:
                kind = node.kinds[node.labels.index(lbl)]
                if lbl != node.chosen and (kind in _INDEPENDENT or ck in _INDEPENDENT):
                    nxt[lbl] = kind
            self._sleep = nxt
        return i

    def end(self, outcome: str) -> None:
        self.runs += 1
        if self._redundant:
            self.redundant_runs += 1
        del self._stack[self._depth:]
        stack = self._stack
        while stack:
            node = stack[-1]
            rest = [lbl for lbl in node.todo if lbl not in node.done]
            if rest:
                node.chosen = rest[0]
                node.done.append(rest[0])
                break
            stack.pop()
        if not stack:
            self.exhausted = True
        self.loop = None

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "max_deviations": self.max_deviations,
                "reduction": self.reduction}
