"""pytest fixtures for users' own tests: ``llm_cassette`` (virtual-time replay) and ``loopkit_vcr``.

Installed as the ``loopkit-cassettes`` pytest plugin; or enable with
``pytest_plugins = ["cassettes.pytest_plugin"]`` in a root ``conftest.py``.

Record your own provider client once, replay it forever (vcrpy does the HTTP part)::

    def test_weather(loopkit_vcr):
        with loopkit_vcr.use_cassette("cassettes/llm/openai-chat/weather.yaml", strict=True):
            my_agent.run(OpenAI())       # LOOPKIT_RECORD_MODE=once records; the default replays

Replay the same file through loopkit's adapter, event by event in (virtual) time::

    def test_loop(llm_cassette):
        model = llm_cassette("cassettes/llm/openai-chat/weather.yaml", strict=True)
        service.register_model("gpt", model)   # wherever the fake LLM would go
        ...

With ``strict=True`` the test fails if any recorded interaction was never requested (at the end of
the ``with`` block for ``loopkit_vcr``, at teardown for ``llm_cassette``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from .loopkit_vcr import LoopkitVCR
    from .model import CassetteModel

# vcrpy and the adapters load when a fixture is used, not when pytest starts: this plugin is
# loaded in every pytest session of an environment loopkit is installed in (vcrpy alone took a
# third of a second of every start).


@pytest.fixture
def llm_cassette() -> Iterator[Callable[..., CassetteModel]]:
    """A factory ``llm_cassette(path, *, strict=False, **options) -> CassetteModel``."""
    from .model import CassetteModel

    strict_models: list[CassetteModel] = []

    def make(path: str | Path, *, strict: bool = False, **options: Any) -> CassetteModel:
        model = CassetteModel(path, strict=strict, **options)
        if strict:
            strict_models.append(model)
        return model

    yield make
    for model in strict_models:
        model.assert_all_played()


@pytest.fixture
def loopkit_vcr() -> LoopkitVCR:
    """A ``LoopkitVCR`` (a configured ``vcr.VCR``): record mode from ``$LOOPKIT_RECORD_MODE``
    (default ``none``), every sensitive header scrubbed, per-event arrival offsets recorded."""
    from .loopkit_vcr import make_vcr

    return make_vcr()
