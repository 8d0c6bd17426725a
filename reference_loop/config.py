"""Agents from configuration (spec SVC-4): ``agents: [{id, model?, system_prompt?}]``.

The whole configuration is validated before any agent is created; every error is a one-line
``ConfigError`` naming the file (when there is one) and the field, e.g.
``loopkit.yml: agents[1].model: must be a string, got 3``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

AGENT_FIELDS = ("id", "model", "system_prompt")


class ConfigError(ValueError):
    """A bad configuration; the message names the field."""


@dataclass(frozen=True)
class AgentConfig:
    """One configured agent."""

    id: str
    model: str | None = None
    system_prompt: str | None = None

    def options(self) -> dict[str, str]:
        """The agent options this entry sets."""
        opts: dict[str, str] = {}
        if self.model is not None:
            opts["model"] = self.model
        if self.system_prompt is not None:
            opts["system_prompt"] = self.system_prompt
        return opts


def read_config(source: str | os.PathLike[str] | Mapping[str, Any]) -> list[AgentConfig]:
    """Parse and validate a YAML file (a path) or an already-parsed mapping."""
    if isinstance(source, Mapping):
        return parse_config(source, where="config")
    path = Path(source)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read configuration: {exc.strerror or exc}") from None
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f":{mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"{path}{at}: invalid YAML: {problem}") from None
    return parse_config(document, where=str(path))


def parse_config(document: Any, where: str = "config") -> list[AgentConfig]:
    """Validate a parsed configuration document."""
    if not isinstance(document, Mapping):
        raise ConfigError(
            f"{where}: must be a mapping with an 'agents' list, got {_kind(document)}"
        )
    unknown = sorted(str(key) for key in document if key != "agents")
    if unknown:
        raise ConfigError(f"{where}: {unknown[0]}: unknown field (expected 'agents')")
    if "agents" not in document:
        raise ConfigError(f"{where}: agents: required")
    agents = document["agents"]
    if agents is None:
        return []
    if not isinstance(agents, list):
        raise ConfigError(f"{where}: agents: must be a list, got {_kind(agents)}")
    result: list[AgentConfig] = []
    seen: set[str] = set()
    for index, entry in enumerate(agents):
        at = f"{where}: agents[{index}]"
        if not isinstance(entry, Mapping):
            raise ConfigError(f"{at}: must be a mapping, got {_kind(entry)}")
        for key in entry:
            if key not in AGENT_FIELDS:
                raise ConfigError(
                    f"{at}.{key}: unknown field (expected one of {', '.join(AGENT_FIELDS)})"
                )
        if "id" not in entry:
            raise ConfigError(f"{at}.id: required")
        agent_id = entry["id"]
        if not isinstance(agent_id, str) or not agent_id.strip():
            raise ConfigError(f"{at}.id: must be a non-empty string, got {agent_id!r}")
        if agent_id in seen:
            raise ConfigError(f"{at}.id: duplicate agent id {agent_id!r}")
        seen.add(agent_id)
        for key in ("model", "system_prompt"):
            value = entry.get(key)
            if value is not None and not isinstance(value, str):
                raise ConfigError(f"{at}.{key}: must be a string, got {value!r}")
        result.append(AgentConfig(agent_id, entry.get("model"), entry.get("system_prompt")))
    return result


def _kind(value: Any) -> str:
    return "nothing" if value is None else type(value).__name__
