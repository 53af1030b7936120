"""The shedder's compiled core (cep_gpu/shedding/_core.py): its account of the queued work."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cep_gpu.shedding import _core


def _queued_work(core: _core.Core, kappa: float) -> float:
    """The queued work recomputed from scratch: each queued event's estimate on arrival, a
    terminator's with its window as it is now (the events of it still in the columns)."""
    in_cols = ((core.status == 1) | (core.status == 2)) & core.relevant & np.isinf(core.evicted)
    total = 0.0
    for i in np.flatnonzero(core.status == 1):
        t = core.typ[i]
        if core.is_term[t]:
            total += core.z_est[t] + kappa * int(in_cols[core.lo[i]:i].sum())
        else:
            total += core.est[i]
    return total


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2**31 - 1), st.integers(5, 120), st.sampled_from(["darling", "random", "state"]),
       st.floats(0.05, 3.0))
def test_queued_work_follows_the_terminators_windows(seed, n, policy, bound):
    """After every arrival, service start and deadline drop, the core's queued work equals the
    sum of the queued events' estimates with every terminator's window as it is now: drops and
    evictions of events inside a queued terminator's window take their share off at once
    (docs/shedding.md, resolution 24), and nothing is taken off twice."""
    rng = np.random.default_rng(seed)
    typ = rng.integers(0, 3, n)  # type 2 is the terminator
    ts = np.sort(rng.integers(0, 40, n))
    lo = np.searchsorted(ts, ts - 6, "left")
    kappa = 0.01
    core = _core.Core(typ, rng.integers(0, 12, n), lo, typ != 1, np.array([0.05, 0.08, 0.1]),
                      np.array([0.05, 0.08, 0.1]), np.array([False, False, True]),
                      np.array([2.0, 3.0, 2.0]), np.array([1.0, 2.0, 1.0]),
                      latency_bound=bound, beta=0.8, kappa_est=kappa, kappa_act=kappa,
                      policy=_core.POLICY_CODES[policy], buckets=10, seed=seed)
    now = 0.0
    for i in range(n):
        now += float(rng.exponential(0.02))
        core.F[_core.F_TFREE] = max(core.F[_core.F_TFREE], now)
        core.arrive(i, now)
        assert abs(core.F[_core.F_WQ] - _queued_work(core, kappa)) < 1e-9
        op = rng.integers(0, 3)
        p = core.next_queued()
        if op == 1 and p >= 0:
            core.begin(p)
        elif op == 2 and p >= 0 and policy != "state":
            core.expire(p)
        assert abs(core.F[_core.F_WQ] - _queued_work(core, kappa)) < 1e-9
    while (p := core.next_queued()) >= 0:
        core.begin(p)
    assert abs(core.F[_core.F_WQ]) < 1e-9
