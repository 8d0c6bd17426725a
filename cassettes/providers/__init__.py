"""Provider adapters: the providers' real HTTP wire formats (over httpx) to the kit's stream chunks.

``ADAPTERS`` maps each adapter's name to its class; ``adapter_for_url`` picks the one whose
endpoint a URL names (used to replay a cassette through the matching adapter).
"""

from __future__ import annotations

from urllib.parse import urlsplit

from .anthropic import AnthropicMessagesAdapter
from .base import ProviderAdapter
from .openai_chat import OpenAIChatAdapter
from .openai_responses import OpenAIResponsesAdapter

ADAPTERS: dict[str, type[ProviderAdapter]] = {
    OpenAIChatAdapter.name: OpenAIChatAdapter,
    AnthropicMessagesAdapter.name: AnthropicMessagesAdapter,
    OpenAIResponsesAdapter.name: OpenAIResponsesAdapter,
}


def adapter_for_url(url: str) -> type[ProviderAdapter] | None:
    """The adapter class whose endpoint path ends the URL's path, or ``None``."""
    path = urlsplit(url).path.rstrip("/")
    for cls in ADAPTERS.values():
        if path.endswith(cls.path):
            return cls
    return None


def base_url_of(url: str, cls: type[ProviderAdapter]) -> str:
    """The base URL an adapter of ``cls`` needs to call ``url`` (its endpoint path stripped)."""
    parts = urlsplit(url)
    path = parts.path.rstrip("/")
    return f"{parts.scheme}://{parts.netloc}{path[: len(path) - len(cls.path)]}"


__all__ = [
    "ADAPTERS",
    "AnthropicMessagesAdapter",
    "OpenAIChatAdapter",
    "OpenAIResponsesAdapter",
    "ProviderAdapter",
    "adapter_for_url",
    "base_url_of",
]
