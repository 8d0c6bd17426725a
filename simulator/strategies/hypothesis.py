"""A strategy driven by hypothesis: every choice is ``data.draw(integers(0, n - 1))``.

Hypothesis then generates schedules and shrinks failing ones itself (towards 0, i.e. FIFO)::

    from hypothesis import given, strategies as st
    from simulator.strategies.hypothesis import HypothesisStrategy

    @given(st.data())
    def test_no_lost_update(data):
        result = simulator.run(main, strategy=HypothesisStrategy(data))
        assert result.ok, result.report()
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from simulator.strategies.base import Strategy

_INTS: dict[int, Any] = {}


class HypothesisStrategy(Strategy):
    name = "hypothesis"

    def __init__(self, data: Any) -> None:
        self.data = data

    def choose(self, n: int) -> int:
        s = _INTS.get(n)
        if s is None:
            s = _INTS[n] = st.integers(0, n - 1)
        return int(self.data.draw(s))
