"""The provider adapters' names, in ``cassettes.providers.ADAPTERS`` order.

Kept apart from the adapters (which load httpx and botocore) so the command line can list them
in its help without importing either; ``tests/cassettes`` checks the two agree."""

from __future__ import annotations

ADAPTER_NAMES = ("openai-chat", "anthropic", "openai-responses", "gemini", "bedrock", "gemini-interactions")
