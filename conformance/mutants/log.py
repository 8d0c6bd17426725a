"""Mutants of spec sections 1 and 1b: the session log, derived history, chunk assembly."""

from __future__ import annotations

from ._build import Mutant, Patch

MUTANTS = [
    Mutant(
        "log-notify-before-push",
        "append notifies session/event listeners before pushing the event, so a throwing listener "
        "loses the event",
        ("LOG-2",),
        "1",
        (
            Patch(
                "session",
                '        self._events.append(event)\n        self._bus.emit("session/event", self, event)\n',
                '        self._bus.emit("session/event", self, event)\n        self._events.append(event)\n',
            ),
        ),
    ),
    Mutant(
        "derive-context-as-steering",
        "derived history wraps injected context in <steering> tags like steering messages",
        ("LOG-7",),
        "1",
        (
            Patch(
                "session",
                '            tag = "steering" if kind == "steering/message" else "context"\n',
                '            tag = "steering" if kind.endswith("/message") else "context"\n',
            ),
        ),
    ),
    Mutant(
        "asm-close-order",
        "the assembled message lists closed blocks in the order they closed, not by stream index",
        ("ASM-3",),
        "1b",
        (
            Patch(
                "assembler",
                "        for index in sorted(set(self._closed) | set(self._open)):\n",
                "        for index in [*self._closed, *sorted(set(self._open) - set(self._closed))]:\n",
            ),
        ),
    ),
    Mutant(
        "asm-delta-after-end",
        "deltas arriving after a block's block-end are folded into a fresh partial block that "
        "replaces the authoritative one",
        ("ASM-1",),
        "1b",
        (
            Patch(
                "assembler",
                "        if not isinstance(index, int) or index in self._closed:\n",
                "        if not isinstance(index, int):\n",
            ),
            Patch(
                "assembler",
                "            if index in self._closed:\n                blocks.append(self._closed[index])\n",
                "            if index in self._closed and index not in self._open:\n"
                "                blocks.append(self._closed[index])\n",
            ),
        ),
    ),
    Mutant(
        "usage-chunk-unlogged",
        "usage chunks are folded into the assembler but not appended as assistant/chunk (nor emitted as "
        "agent/stream-chunk), since the step's usage gets its own usage event anyway",
        ("LOG-3",), "1",
        (Patch("agent",
               "                if signal.aborted:\n"
               "                    break\n"
               "                event = self._session.append(\n",
               "                if signal.aborted:\n"
               "                    break\n"
               "                if isinstance(chunk, dict) and chunk.get(\"type\") == \"usage\":\n"
               "                    assembler.add(chunk)  # logged once, as the step's usage event\n"
               "                    continue\n"
               "                event = self._session.append(\n"),),
    ),
]
