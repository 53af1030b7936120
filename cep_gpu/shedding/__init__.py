"""DARLING: data-aware input load shedding that keeps a latency bound (docs/shedding.md).

After Chapnik, Kolchinsky and Schuster, "DARLING: Data-Aware Load Shedding in Complex Event
Processing Systems" (PVLDB 15(3), 2022)::

    from cep_gpu.shedding import CostModel, Shedder, SheddingEngine
    sh = Shedder(latency_bound=1.5, beta=0.8, buckets=100, policy="darling")
    eng = SheddingEngine(rules, shedding=sh, mode="virtual", cost_model=CostModel(default=1e-3))
    eng.warm_up(warmup_events)
    found = eng.run(events, arrival=arrival_seconds)
    eng.stats()["recall"], eng.stats()["violations"]

or, live, in the streaming engine itself (a fitted shedder; docs/shedding.md)::

    live = cep_gpu.Engine(rules, shedding=sh)
    live.publish(batch); live.stats()["shedding"]
"""

from __future__ import annotations

from .engine import MODES, SheddingEngine
from .shedder import POLICIES, Shedder, SheddingError
from .stats import CostModel, Empirical, Normal, Statistics, gather
from .utility import UtilityModel

__all__ = [
    "MODES",
    "POLICIES",
    "CostModel",
    "Empirical",
    "Normal",
    "Shedder",
    "SheddingEngine",
    "SheddingError",
    "Statistics",
    "UtilityModel",
    "gather",
]
