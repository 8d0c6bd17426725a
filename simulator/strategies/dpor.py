"""Dynamic partial-order reduction: one schedule per class of equivalent interleavings.

Source-DPOR with sleep sets (Flanagan and Godefroid, POPL 2005; Abdulla, Aronis, Jonsson and
Sagonas, "Optimal dynamic partial order reduction", POPL 2014), over the runtime's unit of
choice: the ready callbacks grouped by origin (``docs/simulator.md``, "What a strategy may
reorder"). Two schedules are equivalent when one is obtained from the other by swapping
adjacent independent events; every class is explored at least once, and, thanks to the sleep
sets, a run that would only repeat an explored class is cut short (``redundant_runs``).

One strategy object drives a whole search, one run per schedule (stateless model checking):

* every run is traced (``SimLoop._use_tracing``): each callback run is an *event* with a
  stable name and a *footprint* (what it read and wrote);
* at a choice point the run follows the current path of the search tree, then takes the first
  option that is not asleep;
* after the run, every *race* (two dependent events of different origins, not ordered by
  happens-before except through their own conflict) is reversed where it can be: at the state
  before the earlier event, an option that starts the later one's causal past is added to that
  node's backtrack set (unless one already is, or sleeps);
* ``end()`` backtracks to the deepest node with an unexplored backtrack option.

The dependency relation (two events are dependent when their footprints share a key that one
of them writes) is described in ``docs/simulator.md`` ("DPOR"). ``shared`` chooses what is
assumed about plain Python state:

* ``"all"`` (the default, conservative): any callback running user code (a task step, a user
  callback) may read and write any plain Python state, so such events are all dependent on
  one another; asyncio's own callbacks and timers are dependent through the asyncio objects
  they touch (observed). Sound without declarations; reduces the orderings of asyncio's
  internal callbacks and timers, not of user steps.
* ``"declared"``: the program declares every piece of plain Python state that two tasks share
  (:func:`simulator.shared`, :func:`simulator.access`); user steps are then dependent only
  through asyncio objects and declared state. This is where the reduction pays.

``max_deviations`` bounds the non-FIFO choices per schedule, as for dfs (a bounded DPOR search
is a heuristic: a race whose reversal needs more deviations is not reversed).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from simulator._runtime import Tracer
from simulator.errors import SimulationError
from simulator.strategies import _footprint
from simulator.strategies.base import Strategy

if TYPE_CHECKING:
    from simulator._runtime import SimLoop

SHARED = ("all", "declared")
_Event = tuple[int, int, int, dict[int, int], int]
_Sleep = dict[int, tuple[int, dict[int, int]]]


def dependent(a: dict[int, int], b: dict[int, int]) -> bool:
    """Two footprints conflict: they share a key and at least one of them writes it."""
    if len(a) > len(b):
        a, b = b, a
    for key, w in a.items():
        w2 = b.get(key)
        if w2 is not None and (w or w2):
            return True
    return False


@dataclass
class _Node:
    """A choice point on the current path of the search."""

    labels: list[str]
    sids: list[int]  # stable name of each option's origin
    sleep: _Sleep  # asleep on entry: origin name -> (event name, footprint)
    dev_before: int
    done: list[int] = field(default_factory=list)  # options explored, the current one last
    backtrack: list[int] = field(default_factory=list)  # options still to explore
    explored: dict[int, tuple[int, dict[int, int]]] = field(default_factory=dict)


class DPORStrategy(Strategy):
    """Systematic search with dynamic partial-order reduction (see the module docstring).

    ``exhausted`` is true once every class has been explored; ``classes`` counts the runs
    that explored a new class (``runs - redundant_runs``)."""

    name = "dpor"
    systematic = True

    def __init__(self, *, shared: str = "all", max_deviations: int | None = None) -> None:
        if shared not in SHARED:
            raise ValueError(f"shared must be one of {SHARED}, not {shared!r}")
        self.shared = shared
        self.max_deviations = max_deviations
        self.tracer = Tracer(user=shared == "all")
        self._stack: list[_Node] = []
        self.exhausted = False
        self.runs = 0
        self.redundant_runs = 0
        self.races = 0
        self._depth = 0
        self._dev = 0
        self._sleep: _Sleep = {}
        self._seen = 0  # events already folded into the sleep set
        self._blocked = -1  # trace position where the run became redundant (-1: it did not)

    @property
    def classes(self) -> int:
        """Equivalence classes explored so far (one per non-redundant run)."""
        return self.runs - self.redundant_runs

    def begin(self, loop: SimLoop, seed: int) -> None:
        if self.exhausted:
            raise SimulationError("dpor: the search is exhausted")
        self.loop = loop
        loop._use_tracing(self.tracer)
        _footprint.install()
        self._depth = 0
        self._dev = 0
        self._sleep = {}
        self._seen = 0
        self._blocked = -1

    def choose_fn(self) -> Callable[[int], int] | None:
        return self.choose

    # -- during a run ------------------------------------------------------------------

    def _advance_sleep(self) -> bool:
        """Fold the events run since the last call into the sleep set; False once the run
        has run an asleep event (it only repeats an explored class: redundant)."""
        events = self.tracer.events
        sleep = self._sleep
        for pos in range(self._seen, len(events)):
            esid, psid, _dep, fp, _node = events[pos]
            entry = sleep.get(psid)
            if entry is not None and entry[0] == esid:
                self._blocked = pos
                self._seen = len(events)
                return False
            if sleep:
                for key in [k for k, (_e, sfp) in sleep.items() if dependent(sfp, fp)]:
                    del sleep[key]
        self._seen = len(events)
        return True

    def choose(self, n: int) -> int:
        loop = self.loop
        assert loop is not None
        if self._blocked >= 0 or not self._advance_sleep():
            return 0
        j = self._depth
        self._depth = j + 1
        labels = loop.option_labels()
        if j < len(self._stack):
            node = self._stack[j]
            if node.labels != labels:
                raise SimulationError(
                    f"dpor: the program is not deterministic: choice {j} offered {labels}, "
                    f"earlier {node.labels} (run simulator.check_determinism)"
                )
            i = node.done[-1]
            sleep = dict(node.sleep)
            for q in node.done[:-1]:
                ev = node.explored.get(q)
                if ev is not None:
                    sleep[node.sids[q]] = ev
        else:
            sids = loop.option_sids()
            sleep = self._sleep
            bound_hit = self.max_deviations is not None and self._dev >= self.max_deviations
            awake = [k for k in range(n) if sids[k] not in sleep and not (bound_hit and k)]
            if not awake:
                self._depth = j
                self._blocked = len(self.tracer.events)
                return 0
            i = awake[0]
            node = _Node(labels, sids, dict(sleep), self._dev, done=[i])
            self._stack.append(node)
            sleep = dict(sleep)
        if i >= n:
            raise SimulationError(f"dpor: choice {j}: option {i} of {n} (program not deterministic)")
        self._sleep = sleep
        if i:
            self._dev += 1
        return i

    # -- after a run -------------------------------------------------------------------

    def end(self, outcome: str) -> None:
        self.loop = None
        _footprint.uninstall()
        self.runs += 1
        if self._blocked < 0:
            self._advance_sleep()
        events = self.tracer.events
        upto = self._blocked if self._blocked >= 0 else len(events)
        if self._blocked >= 0:
            self.redundant_runs += 1
        stack = self._stack
        depth = self._depth
        if depth < len(stack) and self._blocked < 0:
            raise SimulationError(
                f"dpor: the program is not deterministic: the run ended after {depth} choice "
                f"points, earlier runs reached {len(stack)} (run simulator.check_determinism)"
            )
        for pos in range(upto):
            esid, _psid, _dep, fp, node = events[pos]
            if node >= 0:
                nd = stack[node]
                nd.explored[nd.done[-1]] = (esid, fp)
        self._analyse(events, upto)
        self.tracer.events = []
        while stack:
            nd = stack[-1]
            if nd.backtrack:
                nd.done.append(nd.backtrack.pop(0))
                break
            stack.pop()
        if not stack:
            self.exhausted = True

    def _analyse(self, events: list[_Event], upto: int) -> None:
        """Find the races of the run's first ``upto`` events and plan their reversals."""
        hb: list[int] = [0] * upto  # happens-before predecessors of each event, as a bitset
        last_write: dict[int, int] = {}
        readers: dict[int, list[int]] = {}
        for j in range(upto):
            _esid, psid, dep, fp, _node = events[j]
            preds: set[int] = set()
            for key, w in fp.items():
                lw = last_write.get(key)
                if lw is not None:
                    preds.add(lw)
                if w:
                    preds.update(readers.get(key, ()))
            for key, w in fp.items():
                if w:
                    last_write[key] = j
                    readers[key] = []
                else:
                    readers.setdefault(key, []).append(j)
            base = (hb[dep] | 1 << dep) if dep >= 0 else 0
            closure = {p: hb[p] | 1 << p for p in preds}
            clock = base
            for c in closure.values():
                clock |= c
            hb[j] = clock
            for p in preds:
                if events[p][1] == psid or events[p][4] < 0:
                    continue  # same origin (program order), or no choice there to reverse
                others = base
                for q, c in closure.items():
                    if q != p:
                        others |= c
                if others >> p & 1:
                    continue  # ordered anyway, through another event
                self.races += 1
                self._reverse(events, hb, p, j)

    def _reverse(self, events: list[_Event], hb: list[int], p: int, j: int) -> None:
        """Race ``p < j``: make the node before ``p`` also start what leads to ``j``."""
        node = self._stack[events[p][4]]
        planned = set(node.done) | set(node.backtrack)
        sids = node.sids
        bound = self.max_deviations
        capped = bound is not None and node.dev_before >= bound

        def open_(i: int) -> bool:
            return i not in planned and sids[i] not in node.sleep and not (capped and i)

        if not any(open_(i) for i in range(len(sids))):
            return  # nothing left to add at that node
        # v: the events after p that do not happen after it, then j; its initials are those
        # with no predecessor in v (each is the head of its origin at the node).
        v = [k for k in range(p + 1, j) if not hb[k] >> p & 1]
        v.append(j)
        vmask = 0
        for k in v:
            vmask |= 1 << k
        initials: list[int] = []
        for k in v:
            if hb[k] & vmask:
                continue
            try:
                opt = sids.index(events[k][1])
            except ValueError:
                continue
            if opt not in initials:
                initials.append(opt)
        if not initials:
            # What leads to j cannot start at that node (e.g. a timer not yet in the window):
            # fall back to every option there (Flanagan-Godefroid).
            node.backtrack.extend(i for i in range(len(sids)) if open_(i))
            return
        if any(i in planned or sids[i] in node.sleep for i in initials):
            return  # already planned, or covered by an explored sibling (asleep)
        for i in sorted(initials):
            if open_(i):
                node.backtrack.append(i)
                return

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "shared": self.shared, "max_deviations": self.max_deviations}


#: Declared shared state (see docs/simulator.md, "DPOR": declaring shared state).
shared = _footprint.shared
access = _footprint.access
