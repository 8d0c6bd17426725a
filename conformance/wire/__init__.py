"""Checking an agent loop written in any language: the driver side of the wire protocol.

``--impl wire:COMMAND`` starts ``COMMAND`` as a child process speaking the protocol of
``docs/wire-protocol.md`` (JSON lines on two dedicated pipes) and checks it like any
implementation: ``adapter.py`` is the ``Implementation``, ``handles.py`` its proxies (services,
agents, sessions, promises), ``connection.py`` the conversation with the child, ``child.py`` the
process and its watchdog, ``protocol.py`` the vocabulary and the value encoding. The Node bridge library
and a JavaScript loop of the kit's own live in ``examples/js_loop/``.
"""

from __future__ import annotations

import os

from .adapter import WireAgent, WireImplementation, WirePromise, WireService
from .protocol import PROTOCOL, ProtocolError, RemoteError, WireError

__all__ = [
    "PROTOCOL",
    "ProtocolError",
    "RemoteError",
    "WireAgent",
    "WireError",
    "WireImplementation",
    "WirePromise",
    "WireService",
    "implementation",
]

_IMPLEMENTATIONS: dict[tuple[str, str], WireImplementation] = {}


def implementation(command: str) -> WireImplementation:
    """The wire implementation running ``command`` (one per command and working directory in a
    process: every ``--impl`` resolution of the same spec shares the child)."""
    key = (command.strip(), os.getcwd())
    found = _IMPLEMENTATIONS.get(key)
    if found is None:
        found = _IMPLEMENTATIONS[key] = WireImplementation(command.strip())
    return found
