"""The wire protocol's vocabulary on the driver's side: versions, errors, and values.

Normative text: ``docs/wire-protocol.md``. Messages are JSON objects, one per line. Values that
are not plain JSON travel as one-key *tagged* objects::

    {"$agent": "a1"}      an agent handle (the child announced it with an ``agent`` event)
    {"$session": "a1"}    that agent's session
    {"$signal": "g3"}     an abort signal (the child reports it firing with an ``abort`` event)
    {"$error": {"name", "message", "code"?, "origin"?}}   a thrown error
    {"$opaque": "Type"}   a value the sender cannot express as JSON (a Python ``object()``)

A plain object whose only key starts with ``$`` is sent with one more ``$`` in front of that key
(``{"$agent": 1}`` as data travels as ``{"$$agent": 1}``), so the receiver can tell it from a tag
while decoding bottom up (as a ``json.loads`` object hook does).

``encode`` turns a Python value into wire JSON (asking a :class:`Refs` for handle ids) and
``Decoder`` turns parsed JSON back, as a ``json.loads`` object hook.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from conformance.adapter import ThrownValue

PROTOCOL = 1
"""The protocol version this driver speaks (the child's ``hello`` must name the same)."""

TAGS = frozenset({"$agent", "$session", "$signal", "$error", "$opaque"})


class WireError(Exception):
    """The wire failed: the child crashed, hung, broke the protocol or tripped the tripwire.
    The first line of the message says what happened; the rest is the tail of the child's
    output."""


class ProtocolError(WireError):
    """The child sent something the protocol does not allow."""


class RemoteError(Exception):
    """An error thrown on the other side of the wire (``str()`` is its message)."""

    def __init__(self, message: str, name: str = "Error", code: str | None = None) -> None:
        super().__init__(message)
        self.name = name
        if code is not None:
            self.code = code

    def __repr__(self) -> str:
        return f"RemoteError({self.name}: {self})"


class Opaque:
    """A value the child could not send as JSON (a function, a symbol, ...)."""

    __slots__ = ("type",)

    def __init__(self, type: str) -> None:
        self.type = type

    def __repr__(self) -> str:
        return f"<opaque {self.type}>"


class Refs(Protocol):
    """What encoding and decoding need from the connection: handle ids and live objects."""

    def ref_of(self, value: Any) -> dict[str, Any] | None:
        """The tag of a live object the connection knows (an agent, a session, a signal), else None."""
        ...

    def error_origin(self, error: BaseException) -> int:
        """An id under which ``error`` is kept, so it comes back as the same object."""
        ...

    def agent(self, handle: str) -> Any: ...

    def session(self, handle: str) -> Any: ...

    def signal(self, handle: str) -> Any: ...

    def error(self, info: Mapping[str, Any]) -> BaseException: ...


def error_info(error: BaseException, origin: int | None = None) -> dict[str, Any]:
    """``{"name", "message", "code"?, "origin"?, "thrown"?}`` of an exception."""
    info: dict[str, Any] = {"name": type(error).__name__, "message": str(error)}
    if isinstance(error, ThrownValue):
        info["thrown"] = True  # the child throws the message itself, not an error object (6.3)
    code = getattr(error, "code", None)
    if isinstance(code, str):
        info["code"] = code
    if origin is not None:
        info["origin"] = origin
    return info


MAX_DEPTH = 200
"""Containers nested deeper than this travel as ``{"$opaque": "deep"}``: a container inside
itself (a cycle, which JSON cannot hold) ends there instead of exhausting the stack."""


def encode(value: Any, refs: Refs, _depth: int = 0) -> Any:
    """A Python value as wire JSON (see the module docstring)."""
    kind = type(value)
    if kind is str or kind is int or kind is bool or value is None:
        return value
    if kind is float:
        return value if math.isfinite(value) else {"$opaque": "float"}
    if kind is dict or kind is list or kind is tuple:
        return _encode_container(value, refs, _depth)
    tag = refs.ref_of(value)
    if tag is not None:
        return tag
    if isinstance(value, BaseException):
        return {"$error": error_info(value, refs.error_origin(value))}
    if isinstance(value, bool):  # subclasses (enums) travel as their plain value
        return bool(value)
    if isinstance(value, int | str):
        return int(value) if isinstance(value, int) else str(value)
    if isinstance(value, float):
        return encode(float(value), refs)
    if isinstance(value, Mapping | list | tuple):
        return _encode_container(value, refs, _depth)
    return {"$opaque": kind.__name__}


def _encode_container(value: Mapping[Any, Any] | list[Any] | tuple[Any, ...], refs: Refs, depth: int) -> Any:
    if depth >= MAX_DEPTH:
        return {"$opaque": "deep"}
    if isinstance(value, Mapping):
        return _encode_mapping(value, refs, depth + 1)
    return [encode(item, refs, depth + 1) for item in value]


def _encode_mapping(value: Mapping[Any, Any], refs: Refs, _depth: int = 0) -> Any:
    out: dict[str, Any] = {}
    for key, item in value.items():
        if type(key) is not str:
            if not isinstance(key, str | int | float | bool) and key is not None:
                return {"$opaque": type(value).__name__}
            key = json.dumps(key) if not isinstance(key, str) else str(key)
        out[key] = encode(item, refs, _depth)
    if len(out) == 1:
        (only,) = out
        if only.startswith("$"):
            return {"$" + only: out[only]}  # escaped: data, not a tag
    return out


class Decoder:
    """A ``json.loads`` object hook turning tags into live objects (agent proxies, signals,
    exceptions); every other object stays a dict."""

    def __init__(self, refs: Refs) -> None:
        self.refs = refs

    def __call__(self, obj: dict[str, Any]) -> Any:
        if len(obj) != 1:
            return obj
        (key,) = obj
        if key.startswith("$$"):
            return {key[1:]: obj[key]}  # an escaped key
        if key not in TAGS:
            return obj
        value = obj[key]
        if key == "$agent":
            return self.refs.agent(str(value))
        if key == "$session":
            return self.refs.session(str(value))
        if key == "$signal":
            return self.refs.signal(str(value))
        if key == "$error":
            return self.refs.error(value if isinstance(value, Mapping) else {"message": str(value)})
        return Opaque(str(value))


def dumps(message: Mapping[str, Any]) -> str:
    """One message as its line (without the newline): compact, key order as built."""
    return json.dumps(message, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def loads(line: bytes | str, hook: Callable[[dict[str, Any]], Any] | None = None) -> Any:
    """One line as a message (``ProtocolError`` when it is not a JSON object)."""
    try:
        message = json.loads(line, object_hook=hook)
    except (ValueError, UnicodeDecodeError) as exc:
        text = line.decode("utf-8", "replace") if isinstance(line, bytes) else line
        raise ProtocolError(f"the child sent a line that is not JSON ({exc}): {text[:120]!r}") from None
    if not isinstance(message, dict) or not isinstance(message.get("type"), str):
        raise ProtocolError(f"the child sent a message without a type: {str(message)[:120]!r}")
    return message
