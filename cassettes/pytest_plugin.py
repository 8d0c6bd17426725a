"""The ``llm_cassette`` pytest fixture: a cassette-backed model for a user's own tests.

Enable with ``pytest_plugins = ["cassettes.pytest_plugin"]`` in a root ``conftest.py``::

    def test_weather(llm_cassette):
        model = llm_cassette("cassettes/llm/openai-chat/tool_calls.yaml", strict=True)
        service.register_model("gpt", model)   # wherever the fake LLM would go
        ...

With ``strict=True`` the test fails at teardown if any recorded interaction was never requested.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from .model import CassetteModel


@pytest.fixture
def llm_cassette() -> Iterator[Callable[..., CassetteModel]]:
    """A factory ``llm_cassette(path, *, strict=False, **options) -> CassetteModel``."""
    strict_models: list[CassetteModel] = []

    def make(path: str | Path, *, strict: bool = False, **options: Any) -> CassetteModel:
        model = CassetteModel(path, strict=strict, **options)
        if strict:
            strict_models.append(model)
        return model

    yield make
    for model in strict_models:
        model.assert_all_played()
