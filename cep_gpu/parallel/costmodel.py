"""The HYPERSONIC cost model (paper Section 3.3.1, Appendix A) and unit allocation (Algorithm 2).

Numbering follows the paper: positions ``1..n`` of the ``SEQ``; agent ``A_i`` (``i = 2..n``)
joins events of ``E_i`` with partial matches of ``E_1..E_{i-1}``. With rates per second and the
window ``W`` in seconds (docs/parallel.md has the equations with their numbers):

* (1) ``m_2 = e_1``;  ``m_i = 2 m_{i-1} e_{i-1} s_{i-1} W`` for ``i > 2``
* (2) ``comp_i = 2 c_i e_i m_i W``
* (3) ``acc_i = (e_i + m_i) n / (2m)``  (``n`` units, ``m`` agents: the equal-split estimate)
* (4) ``sync_i = acc_i b_i + q_i m_{i+1}``  (``m_{n+1}``: the rate of composite events)
* (5) ``load_i = comp_i + sync_i``
* (6) ``|U_i| = load_i / sum_j load_j * |U|``

``s_i`` is measured as extended matches per *compared* pair. Each pair within ``W`` of each other
is compared once in one of the two orders, so pairs compared per second are ``2 e_i m_i W`` and
(1) is exact with that reading of ``s_i`` (the factor 2 counts both arrival orders; the ``SEQ``
order condition is part of the selectivity).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

from ..errors import ArgumentError


@dataclass(frozen=True)
class ChainStats:
    """Measured statistics of one rule's chain (paper Table 1), positions 1..n as list index 0..n-1.

    ``rates[k]``: ``e_{k+1}`` events/s passing position k+1's filters. ``selectivity[k]``,
    ``comp_cost[k]`` (``c``), ``lock_cost[k]`` (``b``), ``queue_cost[k]`` (``q``): of agent
    ``A_{k+1}``, i.e. used for ``k >= 1`` (index 0 is ignored). ``window`` in seconds.
    """

    rates: tuple[float, ...]
    selectivity: tuple[float, ...]
    comp_cost: tuple[float, ...]
    lock_cost: tuple[float, ...]
    queue_cost: tuple[float, ...]
    window: float

    def __post_init__(self) -> None:
        n = len(self.rates)
        for name in ("selectivity", "comp_cost", "lock_cost", "queue_cost"):
            if len(getattr(self, name)) != n:
                raise ArgumentError(f"ChainStats.{name} needs {n} values (one per position), "
                                    f"got {len(getattr(self, name))}")
        if n < 2:
            raise ArgumentError("ChainStats: a chain needs at least 2 positions")
        if self.window < 0 or any(x < 0 for x in self.rates):
            raise ArgumentError("ChainStats: rates and window must be >= 0")


@dataclass(frozen=True)
class AgentLoad:
    """The cost model's numbers for one agent (one stage, or fused stages)."""

    stages: tuple[int, ...]  # paper agent indices i (2..n)
    e: float
    m: float
    m_next: float
    comp: float
    acc: float
    sync: float

    @property
    def load(self) -> float:
        return self.comp + self.sync


def match_rates(stats: ChainStats) -> list[float]:
    """Eq. (1): ``m[i]`` for ``i = 2..n+1`` as a list indexed by ``i`` (0 and 1 unused, 0.0)."""
    e, s, W = stats.rates, stats.selectivity, stats.window
    n = len(e)
    m = [0.0] * (n + 2)
    m[2] = e[0]
    for i in range(3, n + 2):
        m[i] = 2.0 * m[i - 1] * e[i - 2] * s[i - 2] * W
    return m


def agent_loads(stats: ChainStats, units: int, groups: list[tuple[int, ...]] | None = None) -> list[AgentLoad]:
    """Eqs. (2)-(5) per agent. ``groups``: fused agents as tuples of paper indices (default: one each).

    A fused agent's load is the sum of its stages' loads minus the queue cost of the internal
    hand-over (its matches no longer cross a queue, Section 4.2).
    """
    e, W = stats.rates, stats.window
    n = len(e)
    m = match_rates(stats)
    agents = n - 1
    if groups is None:
        groups = [(i,) for i in range(2, n + 1)]
    per: dict[int, AgentLoad] = {}
    for i in range(2, n + 1):
        ei = e[i - 1]
        comp = 2.0 * stats.comp_cost[i - 1] * ei * m[i] * W
        acc = (ei + m[i]) * units / (2.0 * agents)
        sync = acc * stats.lock_cost[i - 1] + stats.queue_cost[i - 1] * m[i + 1]
        per[i] = AgentLoad((i,), ei, m[i], m[i + 1], comp, acc, sync)
    out = []
    for g in groups:
        parts = [per[i] for i in g]
        internal = sum(stats.queue_cost[i - 1] * m[i + 1] for i in g[:-1])
        out.append(AgentLoad(
            tuple(g), sum(p.e for p in parts), parts[0].m, parts[-1].m_next,
            sum(p.comp for p in parts), sum(p.acc for p in parts),
            sum(p.sync for p in parts) - internal,
        ))
    return out


def proportional(loads: list[float], units: int) -> list[float]:
    """Eq. (6): real-valued units per agent."""
    total = sum(loads)
    if total <= 0:
        return [units / len(loads)] * len(loads)
    return [x / total * units for x in loads]


def integer_allocation(shares: list[float], units: int) -> list[int]:
    """Round Eq. (6) to whole units: at least one per agent, then each further unit to the agent
    with the most load per unit (``share / units`` largest; the earlier agent on a tie).

    Eq. (6) equalises the load per unit; with whole units this greedy rounding minimises the
    largest load per unit (the slowest agent), which largest-remainder rounding does not: it
    can leave a small agent one unit short (shares 1.25, 5, 17.75 of 24 gave 1, 5, 18, whose
    first agent then carries 1.25 units' load on one). Needs ``units >= len(shares)``.
    """
    k = len(shares)
    if units < k:
        raise ArgumentError(f"{units} units cannot give each of {k} agents one")
    whole = [1] * k
    heap = [(-float(x), j) for j, x in enumerate(shares)]
    heapq.heapify(heap)
    for _ in range(units - k):
        _, j = heapq.heappop(heap)
        whole[j] += 1
        heapq.heappush(heap, (-float(shares[j]) / whole[j], j))
    return whole


def equal_allocation(n_agents: int, units: int) -> list[int]:
    """``units`` split as evenly as possible (the paper's "trivial allocation", Figure 10)."""
    return [units // n_agents + (1 if j < units % n_agents else 0) for j in range(n_agents)]


@dataclass
class Allocation:
    """Agents (tuples of paper indices 2..n) and whole units per agent, with the model's numbers."""

    groups: list[tuple[int, ...]]
    units: list[int]
    loads: list[AgentLoad] = field(default_factory=list)
    shares: list[float] = field(default_factory=list)
    fusions: list[str] = field(default_factory=list)


def allocate(stats: ChainStats, units: int, method: str = "cost-model", fusion: bool = True) -> Allocation:
    """Units per agent: by the cost model (Eq. 6) or equally; with fusion, Algorithm 2.

    Algorithm 2, as resolved in docs/parallel.md: while some agent's share of Eq. (6) is below 2
    units and more than one agent is left, fuse it with the neighbour of smaller share (the only
    neighbour at either end; the earlier one on a tie) and allocate again. With ``units`` below
    the number of agents and no fusion, units serve several agents (see the engine).
    """
    if units < 1:
        raise ArgumentError(f"units must be >= 1, got {units}")
    if method not in ("cost-model", "equal"):
        raise ArgumentError(f"allocation must be 'cost-model' or 'equal', got {method!r}")
    n = len(stats.rates)
    groups: list[tuple[int, ...]] = [(i,) for i in range(2, n + 1)]
    fusions: list[str] = []
    while True:
        loads = agent_loads(stats, units, groups)
        shares = (proportional([a.load for a in loads], units) if method == "cost-model"
                  else [units / len(groups)] * len(groups))
        if not fusion or len(groups) == 1:
            break
        low = [j for j, x in enumerate(shares) if x < 2.0]
        if not low:
            break
        j = min(low, key=lambda t: (shares[t], t))
        if j == 0:
            other = 1
        elif j == len(groups) - 1:
            other = j - 1
        else:
            other = j - 1 if shares[j - 1] <= shares[j + 1] else j + 1
        a, b = sorted((j, other))
        fused = groups[a] + groups[b]
        fusions.append(f"fuse A{'-'.join(map(str, groups[a]))} + A{'-'.join(map(str, groups[b]))} "
                       f"(share {shares[j]:.2f} < 2)")
        groups = groups[:a] + [fused] + groups[b + 1:]
    if units >= len(groups):
        whole = integer_allocation(shares, units) if method == "cost-model" else equal_allocation(len(groups), units)
    else:
        whole = [0] * len(groups)
    return Allocation(groups, whole, loads, shares, fusions)
