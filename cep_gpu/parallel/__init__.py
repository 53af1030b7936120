"""HYPERSONIC: hybrid state- and data-parallel streaming detection of ``SEQ`` patterns.

After the HYPERSONIC paper (SIGMOD '22); see docs/parallel.md::

    from cep_gpu.parallel import HybridEngine
    eng = HybridEngine("define Q pattern SEQ(A a, B b) where a.x < b.x within 10 s", units=2)
    out = eng.publish(events)      # the composite events cep_gpu.detect finds, as it builds them
    print(eng.explain())           # the cost model (paper Eqs. 1-6) and the allocation
    eng.close()
"""

from __future__ import annotations

from .compile import UnsupportedPatternError
from .costmodel import Allocation, ChainStats, agent_loads, allocate, match_rates
from .engine import HybridEngine

__all__ = [
    "Allocation",
    "ChainStats",
    "HybridEngine",
    "UnsupportedPatternError",
    "agent_loads",
    "allocate",
    "match_rates",
]
