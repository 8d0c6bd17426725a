"""Scheduling strategies, one module each: ``fifo``, ``random``, ``pct``, ``dfs``, ``dpor``,
``anchored`` (single deviations after a known moment), ``replay``, ``hypothesis`` (driven by
``data.draw``)."""

from __future__ import annotations

from simulator.strategies.anchored import AnchoredProbe, AnchoredStrategy, reaching_runs
from simulator.strategies.base import Strategy
from simulator.strategies.dfs import DFSStrategy
from simulator.strategies.dpor import DPORStrategy
from simulator.strategies.fifo import FifoStrategy
from simulator.strategies.pct import PCTStrategy
from simulator.strategies.random import RandomStrategy
from simulator.strategies.replay import ReplayStrategy

__all__ = [
    "AnchoredProbe",
    "AnchoredStrategy",
    "DFSStrategy",
    "DPORStrategy",
    "FifoStrategy",
    "PCTStrategy",
    "RandomStrategy",
    "ReplayStrategy",
    "Strategy",
    "reaching_runs",
]
