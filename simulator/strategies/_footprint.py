"""What a traced run observes beyond the loop itself: the asyncio primitives, and the shared
state a program declares.

The loop traces futures and tasks it creates, its timers and its ready queue
(``simulator._runtime``, "Dependency tracing"). The synchronisation primitives (``Lock``,
``Event``, ``Condition``, ``Semaphore``, ``BoundedSemaphore``, ``Barrier``, ``Queue`` and its
subclasses), ``TaskGroup``, ``Timeout`` and ``gather``'s future are pure-Python classes: for the
length of a traced run their public methods are wrapped so that each call records an access to
the object (its ``id``), then restored. An async method records the access when called and
again in the step where it returns, which is the step that woke up inside it.

Declared shared state (:func:`shared`, :func:`access`) is recorded the same way, in every
traced run; outside a traced run the declarations cost one global read.
"""

from __future__ import annotations

import asyncio
import inspect
from asyncio import tasks as _tasks
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from simulator import _runtime

R, W = 0, 1

_MISSING = object()
T = TypeVar("T")


_record = _runtime.touch_object


def _wrap_init(orig: Callable[..., Any]) -> Callable[..., Any]:
    """``__init__`` that also gives the new object its stable name (see
    ``simulator._runtime.name_object``)."""

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        orig(self, *args, **kwargs)
        _runtime.name_object(self)

    __init__.__wrapped__ = orig  # type: ignore[attr-defined]
    return __init__


def _wrap(orig: Callable[..., Any], write: int) -> Callable[..., Any]:
    if inspect.iscoroutinefunction(orig):

        async def amethod(self: Any, *args: Any, **kwargs: Any) -> Any:
            _record(self, write)
            try:
                return await orig(self, *args, **kwargs)
            finally:
                _record(self, write)  # the step the method returns in (after a wake-up)

        wrapped: Callable[..., Any] = amethod
    else:

        def method(self: Any, *args: Any, **kwargs: Any) -> Any:
            _record(self, write)
            return orig(self, *args, **kwargs)

        wrapped = method
    wrapped.__name__ = getattr(orig, "__name__", "method")
    wrapped.__qualname__ = getattr(orig, "__qualname__", wrapped.__name__)
    wrapped.__wrapped__ = orig  # type: ignore[attr-defined]
    return wrapped


def _table() -> list[tuple[type, dict[str, int]]]:
    future_methods = {"done": R, "cancelled": R, "result": R, "exception": R, "__await__": R,
                      "__iter__": R, "set_result": W, "set_exception": W, "cancel": W,
                      "add_done_callback": -1, "remove_done_callback": W}
    table: list[tuple[type, dict[str, int]]] = [
        (asyncio.Lock, {"acquire": W, "release": W, "locked": R}),
        (asyncio.Event, {"set": W, "clear": W, "is_set": R, "wait": W}),
        (asyncio.Condition, {"wait": W, "wait_for": W, "notify": W, "notify_all": W}),
        (asyncio.Semaphore, {"acquire": W, "release": W, "locked": R}),
        (asyncio.BoundedSemaphore, {"release": W}),
        (asyncio.Queue, {"put": W, "get": W, "put_nowait": W, "get_nowait": W, "qsize": R,
                         "empty": R, "full": R, "task_done": W, "join": W, "shutdown": W}),
        (_tasks._GatheringFuture, future_methods),  # type: ignore[attr-defined]
    ]
    for name, methods in (
        ("Barrier", {"wait": W, "reset": W, "abort": W}),
        ("TaskGroup", {"create_task": W, "__aenter__": W, "__aexit__": W}),
        ("Timeout", {"reschedule": W, "expired": R, "when": R, "__aenter__": W, "__aexit__": W}),
    ):
        cls = getattr(asyncio, name, None)
        if isinstance(cls, type):
            table.append((cls, methods))
    return table


_TABLE = _table()
#: (class, method name, what the class's own __dict__ held) while installed
_SAVED: list[tuple[type, str, Any]] = []


def install() -> None:
    """Wrap the primitives' methods (idempotent; undone by :func:`uninstall`)."""
    if _SAVED:
        return
    for cls, methods in _TABLE:
        _SAVED.append((cls, "__init__", cls.__dict__.get("__init__", _MISSING)))
        cls.__init__ = _wrap_init(cls.__dict__.get("__init__") or cls.__init__)  # type: ignore[misc]
        for name, write in methods.items():
            orig = getattr(cls, name, None)
            if orig is None:
                continue  # not in this Python (e.g. Queue.shutdown before 3.13)
            _SAVED.append((cls, name, cls.__dict__.get(name, _MISSING)))
            if write < 0:  # add_done_callback: see simulator._runtime.traced_add_done_callback
                setattr(cls, name, _runtime.traced_add_done_callback(orig))
            else:
                setattr(cls, name, _wrap(orig, write))


def uninstall() -> None:
    """Restore the primitives' own methods."""
    while _SAVED:
        cls, name, own = _SAVED.pop()
        if own is _MISSING:
            delattr(cls, name)
        else:
            setattr(cls, name, own)


# --------------------------------------------------------------------------------------------
# Declared shared state


def access(obj: Any, *, write: bool = True) -> None:
    """Declare that the running step reads (``write=False``) or writes ``obj``, by identity.
    For ``DPORStrategy(shared="declared")``: state that two tasks both touch, at least one of
    them writing, must be declared (here or with :func:`shared`). The object must be the same
    in every run (created before the run), or created in the run and passed to
    :func:`shared` when created (which names it after its creation, the same in every run).
    No-op outside a traced run."""
    _record(obj, W if write else R)


def _tracked(cls: type, name: str, reads: Iterable[str], writes: Iterable[str]) -> type:
    ns: dict[str, Any] = {"__module__": __name__, "__slots__": (),
                          "__doc__": f"A {cls.__name__} whose reads and writes are declared "
                                     "shared (see simulator.shared).",
                          "__init__": _wrap_init(cls.__dict__["__init__"])}
    for meth in reads:
        ns[meth] = _wrap(getattr(cls, meth), R)
    for meth in writes:
        ns[meth] = _wrap(getattr(cls, meth), W)
    return type(name, (cls,), ns)


_LIST_READS = ("__getitem__", "__len__", "__iter__", "__contains__", "__reversed__", "index",
               "count", "copy", "__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__",
               "__add__", "__mul__", "__repr__")
_LIST_WRITES = ("__setitem__", "__delitem__", "__iadd__", "__imul__", "append", "extend",
                "insert", "pop", "remove", "clear", "sort", "reverse")
_DICT_READS = ("__getitem__", "__len__", "__iter__", "__contains__", "get", "keys", "values",
               "items", "copy", "__eq__", "__ne__", "__or__", "__repr__", "__reversed__")
_DICT_WRITES = ("__setitem__", "__delitem__", "__ior__", "pop", "popitem", "setdefault",
                "update", "clear")
_SET_READS = ("__len__", "__iter__", "__contains__", "copy", "issubset", "issuperset",
              "isdisjoint", "union", "intersection", "difference", "symmetric_difference",
              "__eq__", "__ne__", "__le__", "__lt__", "__ge__", "__gt__", "__or__", "__and__",
              "__sub__", "__xor__", "__repr__")
_SET_WRITES = ("add", "discard", "remove", "pop", "clear", "update", "intersection_update",
               "difference_update", "symmetric_difference_update", "__ior__", "__iand__",
               "__isub__", "__ixor__")

SharedList = _tracked(list, "SharedList", _LIST_READS, _LIST_WRITES)
SharedDict = _tracked(dict, "SharedDict", _DICT_READS, _DICT_WRITES)
SharedSet = _tracked(set, "SharedSet", _SET_READS, _SET_WRITES)


def shared(value: T) -> T:
    """Declare shared state. A list, dict or set comes back as a copy whose every read and
    write is recorded: ``counter = simulator.shared([0])`` (use it in place of the original;
    it is a subclass and behaves the same). Any other object comes back as is, named for
    :func:`access`, which its readers and writers then call."""
    if isinstance(value, list):
        return SharedList(value)
    if isinstance(value, dict):
        return SharedDict(value)
    if isinstance(value, set):
        return SharedSet(value)
    _runtime.name_object(value)
    return value
