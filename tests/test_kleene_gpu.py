"""Kleene closure on the GPU kernels (cuda/cdp.cuh ``cdp_kleene_elements`` / ``cdp_kleene_sets``),
run through the host build (``gpu-host``, ``gpu-host-threads``) and through ``CupyRuntime`` on the
fake asynchronous CuPy (tests/fake_cupy.py): differential tests against the reference matcher on
generated Kleene rules and streams, the CPU kernel's output order, the overflow relaunch, the
grid-stride loops, and the errors."""

from __future__ import annotations

import itertools
import math

import fake_cupy
import numpy as np
import pandas as pd
import pytest
from cep_gpu.kernels.gpu import CupyRuntime, GpuCombiner, GpuDevicesBackend, current_device
from cep_gpu.kernels.host import host_backend
from cep_gpu.kernels.kleene import subset_counts, subset_estimate, subset_table
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
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


@pytest.fixture
def cupy(monkeypatch):
    return fake_cupy.install(monkeypatch)


def _fake_gpu(**combiner) -> str:
    name = f"gpu-kleene-fake-{next(_NAMES)}"
    backend = GpuDevicesBackend(lambda d: GpuCombiner(CupyRuntime(d), "gpu", **combiner), current_device, name)
    register(name, lambda: backend)
    return name


@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
@given(text=kleene_rules(), events=KLEENE_STREAMS)
def test_cupy_runtime_on_async_streams_equals_reference(cupy, text, events):
    name = _fake_gpu(initial_capacity=1)  # every Kleene step overflows and relaunches
    assert records(events, text, name) == records(events, text, "reference")
