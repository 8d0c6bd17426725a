"""System-prompt sections (spec SVC-5): named texts joined by a blank line, in registration order."""

from __future__ import annotations

from collections.abc import Callable


class SystemPromptSections:
    """The service's registered system-prompt sections."""

    def __init__(self) -> None:
        self._sections: list[tuple[object, str, str]] = []

    def add(self, name: str, text: str) -> Callable[[], None]:
        """Add a section; the returned disposer removes it."""
        if not isinstance(name, str) or not name:
            raise TypeError(f"system prompt section name must be a non-empty string, got {name!r}")
        if not isinstance(text, str):
            raise TypeError(f"system prompt section {name!r}: text must be a string, got {text!r}")
        token = object()
        self._sections.append((token, name, text))

        def dispose() -> None:
            self._sections[:] = [entry for entry in self._sections if entry[0] is not token]

        return dispose

    def sections(self) -> list[dict[str, str]]:
        """``[{"name", "text"}]`` in registration order."""
        return [{"name": name, "text": text} for _, name, text in self._sections]


def join_prompt(*parts: str | None) -> str:
    """Non-empty parts joined by a blank line (SVC-5)."""
    return "\n\n".join(part for part in parts if part)
