"""The suite gives an implementation's services the persistence backend its ``new_persistence()``
made (an implementation may check that it is its own), holding its loads in place."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from conformance.harness import Body, run_scenario
from conformance.tests import test_service

from .broken_adapters import OwnBackendsOnly

HELD = [
    test_service.test_create_while_a_resume_of_the_id_loads,
    test_service.test_two_resumes_of_one_id_at_once,
    test_service.test_a_resume_loading_while_the_service_closes_leaves_no_live_agent,
]


@pytest.mark.parametrize("test", HELD, ids=lambda t: t.__name__)
def test_loads_held_at_a_gate_on_the_implementations_own_backend(test: Callable[..., None]) -> None:
    impl = OwnBackendsOnly()

    def run(body: Body) -> None:
        run_scenario(impl, body, "fifo")

    test(run, impl)
    assert impl.made, "the test made a backend"
