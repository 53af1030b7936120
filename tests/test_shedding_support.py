"""The optional ``support`` utility of the load shedder (docs/shedding.md, resolution 23)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import cep_gpu
from cep_gpu.shedding import CostModel, Shedder, SheddingEngine, bench
from cep_gpu.shedding.support import AGE_BINS, chain_roles, support

RULE = "define Q pattern SEQ(A a, B b, C c) where a.v < b.v within 10 s"


def _frame(rows) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["type", "ts", "v"])


def test_chain_roles_of_seq_tesla_and_non_chains():
    seq = cep_gpu.parse_rule(RULE)
    assert [seq.predicates[i].alias for i in chain_roles(seq)] == ["a", "b", "c"]
    tesla = cep_gpu.parse_rule("define D from C() and each B(v > 1) within 5 s from C "
                               "and each A() within 5 s from B")
    assert [tesla.predicates[i].event_type for i in chain_roles(tesla)] == ["A", "B", "C"]
    # two events both bound before the terminator: not a chain
    fan = cep_gpu.parse_rule("define D from C() and each A() within 5 s from C "
                             "and each B() within 5 s from C")
    assert chain_roles(fan) is None


def test_support_hand_worked():
    """A(1)@0, A(5)@1, B(3)@2, B(0)@3, C@4; b.v > a.v; W = 10 s, 16 age bins of 0.625 s."""
    rule = cep_gpu.parse_rule(RULE)
    ev = _frame([("A", 0, 1.0), ("A", 1, 5.0), ("B", 2, 3.0), ("B", 3, 0.0), ("C", 4, 0.0)])
    ts = (ev["ts"].to_numpy() * 1e9).astype(np.int64)
    s = support(rule, chain_roles(rule), ev, ts, ev["type"].to_numpy())
    a, b, c = chain_roles(rule)
    left = lambda age_bin: (AGE_BINS - age_bin - 0.5) / AGE_BINS  # noqa: E731
    # a partial match of one A, two roles still to come
    np.testing.assert_allclose(s[a][:2], [left(0) ** 2] * 2)
    # B(3)@2 ends one partial match (with A(1); A(5) fails b.v > a.v), 2 s old: bin 3
    assert s[b][2] == pytest.approx(left(3))
    # B(0)@3 ends none: support 0, the event can be in no match
    assert s[b][3] == 0.0
    # C@4 completes one match, 2 + 2 s old (bins 3 + 3), no role left: weight 1
    assert s[c][4] == pytest.approx(1.0)
    assert s[a][2:].sum() == 0 and s[b][[0, 1, 4]].sum() == 0


def test_support_window_and_order():
    rule = cep_gpu.parse_rule(RULE)
    # the A is 10.5 s before the B (outside the window); the second B shares the A's timestamp
    ev = _frame([("A", 0, 1.0), ("B", 0, 9.0), ("B", 10.5, 9.0), ("C", 11, 0.0)])
    ts = (ev["ts"].to_numpy() * 1e9).astype(np.int64)
    s = support(rule, chain_roles(rule), ev, ts, ev["type"].to_numpy())
    _, b, c = chain_roles(rule)
    assert s[b][1] == 0.0  # not strictly after the A (SEQ)
    assert s[b][2] == 0.0  # too far after it
    assert s[c][3] == 0.0


def _model(rule: str, sample: pd.DataFrame):
    return Shedder(1.0, utility="support").fit(rule, sample, costs=CostModel()).utility


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 10_000), st.integers(20, 120))
def test_zero_support_means_in_no_match(seed, n):
    """An event whose support utility is 0 is in no composite event of ``detect``."""
    rule = "define Q pattern SEQ(A a, B b, C c) where a.v < b.v and b.v < c.v * 2 within 2 s"
    rng = np.random.default_rng(seed)
    # whole seconds against a 2 s window: ties, and predecessors exactly on the window's edge
    ts = np.sort(rng.integers(0, 20, n)) if seed % 2 else np.sort(rng.uniform(0, 20, n)).round(2)
    ev = pd.DataFrame({"type": rng.choice(list("ABCX"), n), "ts": ts, "v": rng.normal(10, 4, n).round(1)})
    u = _model(rule, ev).compute(ev)
    assert np.all((u >= 0) & (u <= 1))
    found = cep_gpu.detect(ev, rule, backend="reference")
    order = np.argsort(ev["ts"].to_numpy(), kind="stable")  # detect's ids index the sorted events
    in_match = np.zeros(n, bool)
    for ids in found["ids"]:
        in_match[order[list(ids)]] = True
    assert not np.any(in_match & (u == 0))


def test_context_gives_the_utilities_of_the_whole_stream():
    rng = np.random.default_rng(1)
    n = 400
    ev = pd.DataFrame({"type": rng.choice(list("ABC"), n), "ts": np.arange(n) * 0.1,
                       "v": rng.normal(10, 4, n).round(1)})
    model = _model(RULE, ev)
    whole = model.compute(ev)
    k = 250
    np.testing.assert_allclose(model.compute(ev.iloc[k:], context=ev.iloc[:k]), whole[k:])
    # without the context the first B and C of the batch lose their earlier events
    alone = model.compute(ev.iloc[k:].reset_index(drop=True))
    assert (alone == 0).sum() > (whole[k:] == 0).sum()


def test_engine_gate_keeps_the_context_between_publishes():
    """Events published one at a time (the gate's fast path: no utility computed) are the
    earlier arrivals of a later batch's support: the same zero pattern as one whole batch."""
    rng = np.random.default_rng(2)
    n, k = 120, 100
    ev = pd.DataFrame({"type": rng.choice(list("ABC"), n), "ts": np.arange(n) * 0.5,
                       "v": rng.normal(10, 4, n).round(1)})
    sh = Shedder(1.0, utility="support").fit(RULE, ev, costs=CostModel())
    seen = []
    compute = sh.utility.compute

    def record(events, context=None):
        u = compute(events, context)
        seen.append(u)
        return u

    sh.utility.compute = record
    eng = cep_gpu.Engine(RULE, backend="cpu", shedding=sh)
    for rec in ev.iloc[:k].to_dict("records"):
        eng.publish(rec)
    assert seen == []  # one event behind an idle engine fits: no utility computed
    eng.publish(ev.iloc[k:])
    (batch,) = seen
    whole = compute(ev)
    np.testing.assert_array_equal(batch == 0, whole[k:] == 0)
    assert (whole[k:] > 0).any()
    s = eng.stats()["shedding"]
    assert s["published"] == n and s["dropped"] == 0 and s["estimated_recall"] == 1.0


def test_support_run_beats_random_and_keeps_the_bound():
    """The benchmark's faithful stock workload (Q1^A), virtual time, length 5: a deterministic
    run; the support utility keeps 0 violations and more matches than random input shedding."""
    rule, ev = bench.nasdaq(2000 + 4000, 5, 0, factor_c=1.5)
    warm, main = ev.iloc[:2000], ev.iloc[2000:].reset_index(drop=True)
    probe = SheddingEngine(rule, Shedder(1.0, policy="none"), mode="virtual", cost_model=bench.VIRTUAL_COSTS)
    probe.warm_up(warm)
    zbar = probe.shedder.z_mean
    bound = round(max(0.3 * len(main) * zbar * 0.25, 20 * zbar), 4)
    arr = bench.load_profile(len(main), 0.5 / zbar, 1000)
    recall = {}
    for name, policy, utility in [("random", "random", "eq11"), ("support", "darling", "support"),
                                  ("again", "darling", "support")]:
        eng = SheddingEngine(rule, Shedder(bound, policy=policy, utility=utility), mode="virtual",
                             cost_model=bench.VIRTUAL_COSTS)
        eng.warm_up(warm)
        eng.run(main, arr)
        s = eng.stats()
        assert s["violations"] == 0
        assert s["dropped"] > 0
        recall[name] = s["recall"]
    assert recall["support"] == recall["again"]  # deterministic
    assert recall["support"] > recall["random"]


def test_shed_batch_counts_the_context_as_earlier_arrivals():
    """A Spark key's micro-batch: its B events whose A is in the buffered context outrank those
    that no A can precede (support 0), which are dropped first."""
    rng = np.random.default_rng(0)
    n = 300
    sample = pd.DataFrame({"type": rng.choice(list("ABC"), n), "ts": np.arange(n) * 0.1,
                           "v": rng.normal(10, 4, n).round(1)})
    sh = Shedder(0.0105, utility="support").fit(RULE, sample, costs=CostModel(default=1e-3))
    ctx = pd.DataFrame({"type": ["A", "A"], "ts": [100.0, 100.5], "v": [5.0, 6.0]})
    batch = pd.DataFrame({"type": ["B"] * 20, "ts": 101 + np.arange(20) * 0.01,
                          "v": [9.0 if i % 4 == 0 else 1.0 for i in range(20)]})
    keep = sh.shed_batch(batch, context=ctx)
    assert 0 < keep.sum() < len(batch)
    assert keep[::4].all()  # the five B events that some A precedes


def test_window_edges_in_integer_nanoseconds():
    """An A exactly one window before its B (the inclusive edge) at nanosecond timestamps near
    1.7e18, where float64 rounds by 256 ns: the B still has support (it is in a match)."""
    rule = cep_gpu.parse_rule("define Q pattern SEQ(A a, B b) within 1 s")
    t = 1_700_000_000_000_000_001 + 133
    ev = pd.DataFrame({"type": ["A", "B"], "ts": np.array([t, t + 10**9], np.int64)})
    assert len(cep_gpu.detect(ev, rule, time_unit="ns", backend="reference")) == 1
    s = support(rule, chain_roles(rule), ev, ev["ts"].to_numpy(), ev["type"].to_numpy())
    assert s[chain_roles(rule)[1]][1] > 0


_PAIR_RULES = [
    "define Q pattern SEQ(A a, B b, C c) where a.v < b.v and b.v < c.v * 2 within 2 s",
    "define Q pattern SEQ(A a, B b, C c) where b.v >= a.v - 1 and c.w != b.w within 3 s",
    "define Q pattern SEQ(A a, B b) where a.w = b.w and 2 * b.v > a.v / 4 within 2 s",
    # not separable (a sum of both roles; strings): the pairwise NumPy path only
    "define Q pattern SEQ(A a, B b, C c) where a.v + b.v > 10 and b.s = c.s within 2 s",
]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 10_000), st.integers(5, 150), st.sampled_from(_PAIR_RULES))
def test_fused_pass_equals_the_pairwise_path(seed, n, rule_text):
    """The compiled pass for separable conditions (support._link_fused) gives the support of the
    pairwise NumPy path exactly, NaN and integer attributes included."""
    import cep_gpu.shedding.support as sup

    rule = cep_gpu.parse_rule(rule_text)
    rng = np.random.default_rng(seed)
    v = rng.normal(10, 4, n).round(1)
    v[rng.random(n) < 0.1] = np.nan
    ev = pd.DataFrame({"type": rng.choice(list("ABCX"), n),
                       "ts": np.sort(rng.integers(0, 30, n)) * 0.25,
                       "v": v, "w": rng.integers(0, 3, n), "s": rng.choice(["x", "y"], n)})
    ts = (ev["ts"].to_numpy() * 1e9).astype(np.int64)
    roles = chain_roles(rule)
    fused = support(rule, roles, ev, ts, ev["type"].to_numpy())
    real = sup._separable
    try:
        sup._separable = lambda *a: None
        pairwise = support(rule, roles, ev, ts, ev["type"].to_numpy())
    finally:
        sup._separable = real
    for r in roles:
        np.testing.assert_array_equal(fused[r], pairwise[r])
    if "a.v + b.v" not in rule_text:  # the fused pass did run
        b = roles[1]
        rows = np.flatnonzero(ev["type"].to_numpy() == "B")
        assert sup._separable(sup.pair_conditions(rule, roles[0], b), roles[0], b, ev,
                              np.flatnonzero(ev["type"].to_numpy() == "A"), rows) is not None
