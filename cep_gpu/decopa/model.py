"""The cost model of paper §5.3: output rates of sub-queries, ingestion and comparison load of an
operator's units, and the largest sustainable rate factor c.

All rates are per window of the query (paper §5.3.1: ``u = q_t``). Equation numbers refer to
docs/decopa.md, where every resolution of the paper's text is written down.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import combinations

ESTIMATES = ("paper", "order")


@dataclass(frozen=True)
class RateModel:
    """Rates of every sub-query of one pattern.

    ``kind``: SEQ or AND; ``rates``: per position; ``sel``: symmetric matrix of pair selectivities;
    ``estimate``: ``"paper"`` (the paper's form, (M1)-(M3)) or ``"order"`` (order-aware, (M4)).
    """

    kind: str
    rates: tuple[float, ...]
    sel: tuple[tuple[float, ...], ...]
    estimate: str = "paper"

    def selectivity(self, s: frozenset[int]) -> float:
        """(M1) σ(S): the product of σ over unordered pairs of positions of S."""
        out = 1.0
        for p, q in combinations(sorted(s), 2):
            out *= self.sel[p][q]
        return out

    def rate(self, s: frozenset[int]) -> float:
        """Output rate of the sub-query over positions ``s`` (matches per window)."""
        return _cached_rate(self, s)


@lru_cache(maxsize=1 << 16)
def _cached_rate(model: RateModel, s: frozenset[int]) -> float:
    # the optimizer asks for the same sub-queries' rates many thousand times
    return sub_rate(model.kind, [model.rates[p] for p in sorted(s)], model.selectivity(s), model.estimate)


def sub_rate(kind: str, rates: Sequence[float], sigma: float, estimate: str = "paper") -> float:
    """(M2)/(M3): ``σ·∏r`` for SEQ and ``σ·k·∏r`` for AND (paper form); (M4) order-aware:
    ``σ·∏r·k·e/k!`` with ``e`` the linear extensions of the order (1 for SEQ, k! for AND), i.e.
    ``σ·∏r/(k-1)!`` for SEQ and the paper's form for AND. A single position: its rate."""
    k = len(rates)
    prod = math.prod(rates)
    if k == 1:
        return prod
    if estimate == "paper":
        return sigma * prod * (k if kind == "AND" else 1)
    if estimate == "order":
        return sigma * prod * (k if kind == "AND" else 1 / math.factorial(k - 1))
    raise ValueError(f"estimate must be one of {ESTIMATES}, got {estimate!r}")


def divisor(units: int, partitioned: bool) -> int:
    """(M5) d = (n - 1)·part + 1: the share of an input one unit receives is r/d."""
    return (units - 1) * int(partitioned) + 1


def ingestion(r1: float, r2: float, d1: int, d2: int, c: float = 1.0) -> float:
    """(M6) Î = c·(r1/d1 + r2/d2): input events per window of one unit."""
    return c * (r1 / d1 + r2 / d2)


def comparisons(r1: float, r2: float, d1: int, d2: int, c: float = 1.0) -> float:
    """(M7) K̂ = 2c·(r1/d1)·(r2/d2): comparisons per window of one unit."""
    return 2.0 * c * (r1 / d1) * (r2 / d2)


def max_c(load_i: float, load_k: float, iota: float, kappa: float) -> tuple[float, str]:
    """(M8) The largest c with c·Î₁ <= ι and c·K̂₁ <= κ (loads at c = 1), and which bound binds.

    Definition 6 prints the inequalities the other way round (κ <= max K̂); a unit is sustainable
    when its load stays within its capacity, so we read it as max Î <= ι and max K̂ <= κ.
    """
    ci = iota / load_i if load_i > 0 else math.inf
    ck = kappa / load_k if load_k > 0 else math.inf
    return (ci, "ingestion") if ci <= ck else (ck, "comparison")
