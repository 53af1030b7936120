"""Kleene closure on the GPU kernels (cuda/cdp.cuh ``cdp_kleene_elements`` / ``cdp_kleene_sets``),
run through the host build (``gpu-host``, ``gpu-host-threads``) and through ``CupyRuntime`` on the
fake asynchronous CuPy (tests/fake_cupy.py): differential tests against the reference matcher on
generated Kleene rules and streams, the CPU kernel's output order, the overflow relaunch, the
grid-stride loops, and the errors."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
import pytest
from cep_gpu.kernels.host import host_backend
from cep_gpu.kernels.kleene import subset_counts, subset_estimate, subset_table
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_gpu_cupy_fake import cupy, fake_gpu_backend  # noqa: F401  (the fake CuPy fixture)
from test_kleene import KLEENE_STREAMS, kleene_rules, records, stream

import cep_gpu
from cep_gpu.backends import get_backend, register
from cep_gpu.errors import MatchLimitError
from cep_gpu.events import EventTable

SETTINGS = settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))
_NAMES = itertools.count()


def _register(factory) -> str:
    name = f"gpu-kleene-test-{next(_NAMES)}"
    backend = factory()
    register(name, lambda: backend)
    return name


#: the host build with one-slot output buffers (every Kleene step overflows and relaunches) and
#: tiny grids (the grid-stride loops take many rounds)
TIGHT = _register(lambda: host_backend(initial_capacity=1, block=4, max_blocks=3))


@SETTINGS
@given(kleene_rules(), KLEENE_STREAMS, st.sampled_from(["gpu-host", "gpu-host-threads", TIGHT]))
def test_host_build_equals_reference(text, events, backend):
    assert records(events, text, backend) == records(events, text, "reference")


@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
@given(kleene_rules(), KLEENE_STREAMS)
def test_streaming_engine_on_the_host_build_equals_reference(text, events):
    from cep_gpu.engine import composite_records

    expected = records(events, text, "reference")
    eng = cep_gpu.Engine(text, backend="gpu-host")
    got = []
    for i in range(0, len(events), 3):
        got += composite_records(eng.publish(events.iloc[i:i + 3]))
    got += composite_records(eng.flush())
    key = lambda r: (r["ts"], r["ids"])  # noqa: E731
    assert sorted(got, key=key) == sorted(expected, key=key)


def _many_bs(n: int = 9) -> pd.DataFrame:
    rng = np.random.default_rng(3)
    rows = [("A", 0, {"x": 1, "y": 0.5})]
    rows += [("B", 1 + i // 2, {"x": int(rng.integers(0, 3)), "y": float(rng.integers(0, 4))}) for i in range(n)]
    rows += [("C", 1 + n, {"x": 1, "y": 2.0}), ("C", 2 + n, {"x": 2, "y": 1.0})]
    return stream(*rows)


@pytest.mark.parametrize("text", [
    "define K pattern SEQ(A a, KL(B b), C c) within 20 s",
    "define K pattern SEQ(A a, KL(B b)[2..4], C c) where b[i].y <= b[i+1].y within 20 s",
    "define K pattern SEQ(A a, KL(B b)[3..], C c) where b.x != 2 and sum(b.x) >= c.x within 20 s "
    "return s := sum(b.x), m := max(b.y)",
    "define K pattern SEQ(A a, KL(B b), C c) where b.x != 0 within 20 s select greedy return n := count(b)",
])
def test_matches_in_the_cpu_kernels_order(text):
    """Sets come back sorted by their thread index: the depth-first order of the CPU kernel."""
    rule = cep_gpu.parse_rule(text)
    table = EventTable.from_pandas(_many_bs(), time_unit="s")
    got = host_backend(initial_capacity=1, block=3, max_blocks=2).match(rule, table)
    want = get_backend("cpu").match(rule, table)
    assert len(got) == len(want) > 0
    assert np.array_equal(got.rows, want.rows)
    assert np.array_equal(got.aggs, want.aggs, equal_nan=True)
    for k in rule.kleene_positions:
        assert all(np.array_equal(a, b) for a, b in zip(got.sets[k], want.sets[k]))


def test_overflow_relaunch_and_grid_stride():
    rule = cep_gpu.parse_rule("define K pattern SEQ(A a, KL(B b)[1..3], C c) within 20 s")
    table = EventTable.from_pandas(_many_bs(), time_unit="s")
    backend = host_backend(initial_capacity=2, block=4, max_blocks=2)
    got = backend.match(rule, table)
    per_c = sum(math.comb(9, j) for j in (1, 2, 3))
    assert len(got) == 2 * per_c  # every subset of size 1..3 of the 9 Bs, for each C
    stats = backend.combiner.stats
    assert stats.relaunches >= 1
    grids = next(iter(backend.combiner.runtime._modules.values())).grids
    sets = [(g, b) for name, g, b in grids if name == "cdp_kleene_sets"]
    assert sets and all(g * b <= 8 for g, b in sets)  # 2 * per_c threads' work on 8 threads


def test_more_sets_than_the_kernels_can_number_is_a_clear_error():
    ev = stream(("A", 0, {}), *[("B", 1 + i * 0.01, {}) for i in range(63)], ("C", 2, {}))
    text = "define Huge pattern SEQ(A a, KL(B b), C c) within 10 s"
    with pytest.raises(MatchLimitError, match=r"Huge.*2\^62"):
        cep_gpu.detect(ev, text, backend="gpu-host", max_matches=2**70)


@pytest.mark.parametrize("bounds", [(1, None), (2, None), (1, 1), (2, 3), (3, 3), (4, 9)])
def test_subset_counts_are_the_binomial_sums(bounds):
    lo, hi = bounds
    n = np.arange(0, 11)
    got = subset_counts(n, lo, hi, False)
    want = [sum(math.comb(m, j) for j in range(lo, (m if hi is None else min(hi, m)) + 1)) for m in n]
    assert got.tolist() == want
    assert subset_estimate(n, lo, hi, False) == sum(want)
    assert subset_counts(n, lo, hi, True).tolist() == [int(lo <= m and (hi is None or m <= hi)) for m in n]
    # the table saturates instead of wrapping
    assert subset_table(80, 1, None).max() == np.iinfo(np.int64).max


# -- the CuPy launch path, on the fake asynchronous CuPy --------------------------------------------


@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
@given(text=kleene_rules(), events=KLEENE_STREAMS)
def test_cupy_runtime_on_async_streams_equals_reference(cupy, text, events):  # noqa: F811
    name = fake_gpu_backend(initial_capacity=1)  # every Kleene step overflows and relaunches
    assert records(events, text, name) == records(events, text, "reference")


# -- the planner's cost model learns the Kleene subset counts ---------------------------------------


def _spans(n_b: int, terms: int = 3) -> pd.DataFrame:
    """Each C terminator sees exactly ``n_b`` Bs in its 10 s window (and one A before them)."""
    rows = []
    for t in range(terms):
        base = 100 * t
        rows.append(("A", base, {"x": 1}))
        rows += [("B", base + 1 + i * 0.1, {"x": i}) for i in range(n_b)]
        rows.append(("C", base + 5, {"x": 1}))
    return stream(*rows)


@pytest.mark.parametrize(("bounds", "select", "per_span"), [
    ("", "select greedy", lambda n: 1),
    ("[1..2]", "", lambda n: n + math.comb(n, 2)),
    ("[2..3]", "", lambda n: math.comb(n, 2) + math.comb(n, 3)),
    ("", "", lambda n: 2**n - 1),
])
def test_work_estimate_counts_the_sets_per_span(bounds, select, per_span):
    from cep_gpu.planner.profile import FEATURES
    from cep_gpu.planner.work import estimate_work

    n = 6
    rule = cep_gpu.parse_rule(f"define K pattern SEQ(A a, KL(B b){bounds}, C c) within 10 s {select}")
    table = EventTable.from_pandas(_spans(n), time_unit="s")
    work = estimate_work(rule, table)
    k = rule.kleene_positions[0]
    (step,) = [s for s in work.steps if s.pred == k]
    assert step.events_per_window == n
    assert step.sets_per_span == per_span(n)
    # per terminator: the a step (one A) gives one partial sequence; the Kleene step's work is one
    # thread per candidate and one per set, and every set is an expected output
    f = dict(zip(FEATURES, work.per_terminator[0].tolist()))
    a_step = [s for s in work.steps if s.pred == 0][0]
    assert f["outputs"] == pytest.approx(a_step.partials_out * per_span(n))
    assert f["pairs"] == pytest.approx(a_step.pairs + a_step.partials_out * (n + per_span(n)))
    # and the match count the planner expects is the exact one here (no conditions)
    exact = len(cep_gpu.detect(_spans(n), rule, backend="reference"))
    assert exact == 3 * per_span(n) == pytest.approx(work.per_terminator[:, FEATURES.index("outputs")].sum())


def test_conditions_scale_the_expected_sets():
    from cep_gpu.planner.work import estimate_work

    table = EventTable.from_pandas(_spans(8), time_unit="s")
    plain = cep_gpu.parse_rule("define K pattern SEQ(A a, KL(B b)[1..2], C c) within 10 s")
    cond = cep_gpu.parse_rule("define K pattern SEQ(A a, KL(B b)[1..2], C c) where b.x > a.x "
                              "and b[i].x < b[i+1].x within 10 s")
    s_plain = [s for s in estimate_work(plain, table).steps if s.pred == 1][0]
    s_cond = [s for s in estimate_work(cond, table).steps if s.pred == 1][0]
    assert s_plain.sets_per_span == 8 + 28
    assert s_cond.sets_per_span == 4 + 6  # half the elements pass the per-element condition
    assert s_cond.partials_out == pytest.approx(s_cond.partials_in * 10 * 0.5)  # consecutive: 0.5


def test_explain_shows_the_sets_per_span():
    from cep_gpu.planner import explain_plan

    rule = cep_gpu.parse_rule("define K pattern SEQ(A a, KL(B b)[1..2], C c) within 10 s")
    text = explain_plan(rule, EventTable.from_pandas(_spans(5), time_unit="s"), gpu_available=False)
    assert "15 Kleene set(s) per span" in text
    assert "Kleene set(s) per span" in explain_plan(rule, {"A": 1.0, "B": 2.0, "C": 1.0}, gpu_available=False)


def test_auto_sends_kleene_rules_to_the_gpu_when_the_model_says_so():
    import cep_gpu.planner as pl
    from cep_gpu.planner import AutoBackend

    zero = dict.fromkeys(pl.FEATURES, 0.0)
    cheap_gpu = pl.Profile({**zero, "pairs": 1e-6}, {**zero, "pairs": 1e-9}, "test")
    gpu = host_backend()
    auto = AutoBackend(profile=cheap_gpu, cpu=get_backend("cpu"), gpu=gpu, gpu_available=True)
    rule = cep_gpu.parse_rule("define K pattern SEQ(A a, KL(B b)[1..2], C c) where b.x != 3 within 10 s "
                              "return s := sum(b.x)")
    table = EventTable.from_pandas(_spans(6), time_unit="s")
    got = auto.match(rule, table)
    want = get_backend("reference").match(rule, table)
    assert [d.device for d in auto.last_decisions["K"]] == ["gpu"]
    assert gpu.combiner.stats.launches > 0
    assert sorted(map(tuple, got.rows)) == sorted(map(tuple, want.rows))
    # a GPU that costs more per set: the CPU
    dear_gpu = pl.Profile({**zero, "pairs": 1e-9}, {**zero, "pairs": 1e-6}, "test")
    auto = AutoBackend(profile=dear_gpu, cpu=get_backend("cpu"), gpu=gpu, gpu_available=True)
    auto.match(rule, table)
    assert [d.device for d in auto.last_decisions["K"]] == ["cpu"]


def test_device_out_of_memory_splits_the_kleene_step():
    rule = cep_gpu.parse_rule("define K pattern SEQ(A a, KL(B b)[1..3], C c) where b.x != 7 within 20 s")
    table = EventTable.from_pandas(_many_bs(), time_unit="s")
    whole = host_backend(initial_capacity=1)
    want = whole.match(rule, table)
    peak = whole.combiner.runtime.peak_bytes
    tight = host_backend(initial_capacity=1, memory_limit=peak * 3 // 4)
    got = tight.match(rule, table)
    assert tight.combiner.stats.splits >= 1
    assert np.array_equal(got.rows, want.rows)
    assert all(np.array_equal(a, b) for a, b in zip(got.sets[1], want.sets[1]))
    from cep_gpu.kernels.gpu import DeviceMemoryError

    with pytest.raises(DeviceMemoryError, match="Kleene sets of position 'b'"):
        host_backend(initial_capacity=1, memory_limit=peak // 6).match(rule, table)


def test_set_aggregates_come_from_the_kernel(monkeypatch):
    """Aggregates over sets (in where and in return) are the kernel's: the host's Numba
    aggregate kernel is never called on the GPU path."""
    from cep_gpu.kernels import kleene as kk

    def refuse(*args, **kw):
        raise AssertionError("host set aggregates called on the GPU path")

    text = ("define K pattern SEQ(A a, KL(B b)[1..3], C c, KL(B d)[1..2], C e) where sum(b.x) >= 1 and "
            "count(d) <= count(b) within 20 s return s := sum(b.x), lo := min(d.y), m := avg(b.y)")
    ev = stream(("A", 0, {"x": 1}), *[("B", 1 + i, {"x": i % 3, "y": float(i)}) for i in range(4)],
                ("C", 6, {}), *[("B", 7 + i, {"x": 1, "y": 2.0 - i}) for i in range(3)], ("C", 11, {}))
    want = records(ev, text, "cpu")
    monkeypatch.setattr(kk, "set_aggregates", refuse)
    assert records(ev, text, TIGHT) == want and len(want) > 10
