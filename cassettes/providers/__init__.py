"""Provider adapters: the providers' real HTTP wire formats (over httpx) to the kit's stream chunks.

``ADAPTERS`` maps each adapter's name to its class; ``adapter_for_url`` picks the one whose
endpoint a URL names (used to replay a cassette through the matching adapter), and
``replay_settings`` says how to build it so that it sends what was recorded.
"""

from __future__ import annotations

from typing import Any

from .anthropic import AnthropicMessagesAdapter
from .base import FINISH_VOCABULARY, ProviderAdapter
from .bedrock import BedrockConverseAdapter
from .gemini import GeminiAdapter
from .gemini_interactions import GeminiInteractionsAdapter
from .openai_chat import OpenAIChatAdapter
from .openai_responses import OpenAIResponsesAdapter

ADAPTERS: dict[str, type[ProviderAdapter]] = {
    OpenAIChatAdapter.name: OpenAIChatAdapter,
    AnthropicMessagesAdapter.name: AnthropicMessagesAdapter,
    OpenAIResponsesAdapter.name: OpenAIResponsesAdapter,
    GeminiAdapter.name: GeminiAdapter,
    BedrockConverseAdapter.name: BedrockConverseAdapter,
    GeminiInteractionsAdapter.name: GeminiInteractionsAdapter,
}


def adapter_for_url(url: str, request_json: Any = None) -> type[ProviderAdapter] | None:
    """The adapter class whose endpoint the URL names (or, where the URL alone cannot tell, the
    recorded request body with it: ``ProviderAdapter.matches_request``), or ``None``."""
    body = request_json if isinstance(request_json, dict) else None
    for cls in ADAPTERS.values():
        if cls.matches(url) or (body is not None and cls.matches_request(url, body)):
            return cls
    return None


def base_url_of(url: str, cls: type[ProviderAdapter]) -> str:
    """The base URL an adapter of ``cls`` needs to call ``url`` (its endpoint path stripped)."""
    return str(cls.replay_settings(url, None, False)["base_url"])


def replay_settings(url: str, cls: type[ProviderAdapter], request_json: Any, is_stream: bool) -> dict[str, Any]:
    """``{"base_url", "stream", "model"}`` for an adapter of ``cls`` replaying ``url``."""
    return cls.replay_settings(url, request_json if isinstance(request_json, dict) else None, is_stream)


__all__ = [
    "ADAPTERS",
    "FINISH_VOCABULARY",
    "AnthropicMessagesAdapter",
    "BedrockConverseAdapter",
    "GeminiAdapter",
    "GeminiInteractionsAdapter",
    "OpenAIChatAdapter",
    "OpenAIResponsesAdapter",
    "ProviderAdapter",
    "adapter_for_url",
    "base_url_of",
    "replay_settings",
]
