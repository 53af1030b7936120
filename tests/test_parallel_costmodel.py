"""The HYPERSONIC cost model (paper Eqs. 1-6) and Algorithm 2 against hand-computed values."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cep_gpu.errors import ArgumentError
from cep_gpu.parallel import ChainStats, agent_loads, allocate, match_rates
from cep_gpu.parallel.costmodel import equal_allocation, integer_allocation, proportional

# positions 1..3: e = 2, 3, 4 /s; s_2 = 0.5, s_3 = 0.25; W = 2 s
# c_2 = 1 us, c_3 = 2 us; b = 0.1 us; q = 0.01 us
STATS = ChainStats(rates=(2.0, 3.0, 4.0), selectivity=(0.0, 0.5, 0.25), comp_cost=(0.0, 1e-6, 2e-6),
                   lock_cost=(0.0, 1e-7, 1e-7), queue_cost=(0.0, 1e-8, 1e-8), window=2.0)


def test_match_rates_eq1():
    m = match_rates(STATS)
    assert m[2] == 2.0  # m_2 = e_1
    assert m[3] == pytest.approx(2 * 2.0 * 3.0 * 0.5 * 2.0)  # = 12
    assert m[4] == pytest.approx(2 * 12.0 * 4.0 * 0.25 * 2.0)  # = 48: composite events per second


def test_loads_eqs_2_to_5_by_hand():
    a2, a3 = agent_loads(STATS, units=4)
    # comp_i = 2 c_i e_i m_i W
    assert a2.comp == pytest.approx(2 * 1e-6 * 3 * 2 * 2)  # 2.4e-5
    assert a3.comp == pytest.approx(2 * 2e-6 * 4 * 12 * 2)  # 3.84e-4
    # acc_i = (e_i + m_i) n / 2m with n = 4 units, m = 2 agents
    assert a2.acc == pytest.approx(5.0)
    assert a3.acc == pytest.approx(16.0)
    # sync_i = acc_i b_i + q_i m_{i+1}
    assert a2.sync == pytest.approx(5 * 1e-7 + 1e-8 * 12)  # 6.2e-7
    assert a3.sync == pytest.approx(16 * 1e-7 + 1e-8 * 48)  # 2.08e-6
    assert a2.load == pytest.approx(2.462e-5)
    assert a3.load == pytest.approx(3.8608e-4)


def test_allocation_eq6_by_hand():
    shares = proportional([2.462e-5, 3.8608e-4], 16)
    assert shares[0] == pytest.approx(2.462e-5 / 4.107e-4 * 16)  # 0.959...
    assert sum(shares) == pytest.approx(16)
    al = allocate(STATS, 16, fusion=False)
    assert al.units == [1, 15]  # at least one unit each; the rest in proportion
    assert al.groups == [(2,), (3,)]
    al = allocate(STATS, 16, method="equal", fusion=False)
    assert al.units == [8, 8]


def test_integer_allocation_min_max():
    assert integer_allocation([1.0, 1.0, 2.0], 8) == [2, 2, 4]
    assert integer_allocation([1.0, 0.0, 0.0], 5) == [3, 1, 1]
    assert sum(integer_allocation([0.3, 0.3, 0.4], 7)) == 7
    # largest remainder gave [1, 5, 18]: the first agent then had 1.25 units' load on one unit
    assert integer_allocation([1.25, 5.0, 17.75], 24) == [2, 5, 17]
    assert equal_allocation(3, 8) == [3, 3, 2]
    with pytest.raises(ArgumentError, match="units"):
        integer_allocation([1.0, 1.0, 1.0], 2)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0.0, 10.0), min_size=1, max_size=4), st.integers(0, 6))
def test_integer_allocation_is_the_best_whole_allocation(shares, extra):
    """No allocation of whole units (at least one each) has a smaller largest load per unit."""
    import itertools

    units = len(shares) + extra
    got = integer_allocation(shares, units)
    assert sum(got) == units and min(got) >= 1
    worst = max(x / u for x, u in zip(shares, got))
    for alt in itertools.product(range(1, units + 1), repeat=len(shares)):
        if sum(alt) == units:
            assert worst <= max(x / u for x, u in zip(shares, alt)) + 1e-12


def test_fusion_algorithm_2():
    # A2's share (0.96 of 16) is below 2: fused with its only neighbour A3
    al = allocate(STATS, 16, fusion=True)
    assert al.groups == [(2, 3)] and al.units == [16]
    assert al.fusions and "A2" in al.fusions[0]
    # a fused agent's load drops the internal queue hand-over q_2 m_3
    (fused,) = agent_loads(STATS, 16, [(2, 3)])
    parts = agent_loads(STATS, 16)
    assert fused.load == pytest.approx(sum(p.load for p in parts) - 1e-8 * 12)


def test_fusion_picks_the_lighter_neighbour():
    # four positions -> agents A2, A3, A4; A3 is tiny, A2 lighter than A4: A3 fuses with A2
    stats = ChainStats(rates=(10.0, 10.0, 0.001, 2000.0), selectivity=(0, 0.5, 0.5, 0.5),
                       comp_cost=(0, 1e-6, 1e-6, 1e-6), lock_cost=(0, 0, 0, 0), queue_cost=(0, 0, 0, 0),
                       window=1.0)
    loads = [a.load for a in agent_loads(stats, 20)]
    assert loads[1] < loads[0] < loads[2]
    al = allocate(stats, 20, fusion=True)
    # by hand: comp_2 = 2e-4, comp_3 = 2e-7, comp_4 = 2 * 1e-6 * 2000 * 0.1 = 4e-4
    assert loads == pytest.approx([2e-4, 2e-7, 4e-4])
    assert al.groups == [(2, 3), (4,)]
    assert al.units == [7, 13]


def test_one_unit_fuses_everything():
    al = allocate(STATS, 1, fusion=True)
    assert al.groups == [(2, 3)] and al.units == [1]
    al = allocate(STATS, 1, fusion=False)
    assert al.units == [0, 0]  # fewer units than agents: units serve several agents


def test_bad_arguments():
    with pytest.raises(ArgumentError, match="units"):
        allocate(STATS, 0)
    with pytest.raises(ArgumentError, match="allocation"):
        allocate(STATS, 4, method="greedy")
    with pytest.raises(ArgumentError, match=">= 0"):
        ChainStats((1.0, -1.0), (0, 0), (0, 0), (0, 0), (0, 0), 1.0)
