"""In-place edits of a value the child handed to the driver's code (docs/wire-protocol.md §9.1).

In one process a plugin that edits the request it is given, an adapter converting a request's
messages in place, a tool consuming its arguments, all edit the loop's own objects: a loop that
shares those objects with its log (or between calls) shows it. Over the wire the driver's code
edits a decoded copy, so the driver tells the child what changed, and the child makes the same
change to its objects in place.

An edit is ``{"value": V, "moves": [[new_path, old_path], ...]}``: ``V`` is the value now, and
each container (object or list) of ``V`` that was a container of the value handed over names
its path then and now (paths of keys and indexes, as on the wire), so the child keeps its own
objects where the driver's code kept them, and only those: a list the code spliced keeps the
elements it kept, untouched.
"""

from __future__ import annotations

from typing import Any

Path = tuple[Any, ...]


class Held:
    """A value handed to the driver's code, indexed so :meth:`edit` tells what that code did to
    it in place since (or since the last edit it reported). A value holding one object at two
    places (a cycle, say) cannot be told apart that way: ``ValueError``."""

    __slots__ = ("_copy", "_keep", "_paths", "value")

    def __init__(self, value: Any) -> None:
        self.value = value
        self._paths: dict[int, Path] = {}
        self._keep: list[Any] = []  # every container, so no id is reused while the value is held
        self._copy: Any = None
        self._rebase(strict=True)

    def _rebase(self, *, strict: bool = False) -> None:
        self._paths.clear()
        self._keep.clear()
        self._copy = self._index(self.value, (), strict)

    def _index(self, value: Any, path: Path, strict: bool) -> Any:
        if isinstance(value, (dict, list)):
            if id(value) in self._paths:  # met twice: a cycle, or one object at two places
                if strict:
                    raise ValueError(f"the value holds one object at {list(self._paths[id(value)])} and {list(path)}")
                return None  # the driver's code put one object at two places: its first is what later edits are relative to
            self._paths[id(value)] = path
            self._keep.append(value)
            if isinstance(value, dict):
                return {k: self._index(v, (*path, k), strict) for k, v in value.items()}
            return [self._index(v, (*path, i), strict) for i, v in enumerate(value)]
        return value

    def edit(self) -> dict[str, Any] | None:
        """The edit made in place since the value was handed over (or since the last one this
        returned), or ``None`` when there was none."""
        if not isinstance(self.value, (dict, list)):
            return None
        moves: list[list[list[Any]]] = []
        self._moves(self.value, (), moves)
        unmoved = len(moves) == len(self._paths) and all(new == old for new, old in moves)
        if unmoved and self.value == self._copy:
            return None
        edit = {"value": self.value, "moves": moves}
        self._rebase()  # the child's objects match the value now: later edits are relative to it
        return edit

    def _moves(self, value: Any, path: Path, out: list[list[list[Any]]]) -> None:
        if isinstance(value, dict):
            items: Any = value.items()
        elif isinstance(value, list):
            items = enumerate(value)
        else:
            return
        old = self._paths.get(id(value))
        if old is not None:
            out.append([list(path), list(old)])
        for key, item in items:
            self._moves(item, (*path, key), out)


__all__ = ["Held"]
