"""Window ranges by binary search: edges, equal timestamps, and the Numba fast paths vs NumPy."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from cep_gpu import ranges
from cep_gpu.ranges import (
    MAX_TS,
    MIN_TS,
    as_keys,
    keyed_ranges_numpy,
    lower_window_bound,
    shifted_ts,
    step_keyed_ranges,
    step_ranges,
    window_ranges,
)

COL = np.array([1, 3, 3, 3, 5, 8], np.int64)


def brute(col, lo, hi, lo_incl=True, hi_incl=False):
    idx = [j for j, t in enumerate(col) if (lo <= t if lo_incl else lo < t) and (t <= hi if hi_incl else t < hi)]
    return (idx[0], idx[-1] + 1) if idx else None


def test_window_far_edge_inclusive_near_edge_exclusive():
    lo, hi = window_ranges(COL, np.array([3]), np.array([5]))
    assert (lo[0], hi[0]) == (1, 4)  # the three 3s in, the 5 out


def test_equal_timestamps_never_precede():
    lo, hi = window_ranges(COL, np.array([0]), np.array([3]))
    assert (lo[0], hi[0]) == (0, 1)  # only ts 1: the 3s are not before 3


def test_inclusive_flags():
    lo, hi = window_ranges(COL, np.array([3]), np.array([5]), lo_inclusive=False, hi_inclusive=True)
    assert (lo[0], hi[0]) == (4, 5)


def test_empty_window_and_inverted_bounds():
    lo, hi = window_ranges(COL, np.array([6, 9]), np.array([6, 2]))
    assert list(hi - lo) == [0, 0]


def test_lower_window_bound_saturates():
    assert lower_window_bound(np.array([MIN_TS + 5]), 10)[0] == MIN_TS
    assert lower_window_bound(np.array([100]), 10)[0] == 90
    assert lower_window_bound(np.array([100]), None)[0] == MIN_TS


def test_shifted_ts_saturates_at_both_ends():
    ts = np.array([MIN_TS, MIN_TS + 5, 0, MAX_TS - 5, MAX_TS], np.int64)
    assert shifted_ts(ts, -10).tolist() == [MIN_TS, MIN_TS, -10, MAX_TS - 15, MAX_TS - 10]
    assert shifted_ts(ts, 10).tolist() == [MIN_TS + 10, MIN_TS + 15, 10, MAX_TS, MAX_TS]
    assert shifted_ts(ts, MAX_TS).tolist() == [-1, 4, MAX_TS, MAX_TS, MAX_TS]
    assert shifted_ts(ts, 0).tolist() == ts.tolist()


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(0, 20), max_size=30),
    st.lists(st.tuples(st.integers(-2, 22), st.integers(-2, 22)), min_size=1, max_size=10),
    st.booleans(), st.booleans(),
)
def test_window_ranges_equal_brute_force(col, queries, lo_incl, hi_incl):
    col = np.array(sorted(col), np.int64)
    lo_ts = np.array([q[0] for q in queries], np.int64)
    hi_ts = np.array([q[1] for q in queries], np.int64)
    lo, hi = window_ranges(col, lo_ts, hi_ts, lo_incl, hi_incl)
    for i, (a, b) in enumerate(queries):
        want = brute(col, a, b, lo_incl, hi_incl)
        assert (None if hi[i] == lo[i] else (lo[i], hi[i])) == want


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 20), st.integers(0, 3)), max_size=40),
    st.lists(st.tuples(st.integers(0, 25), st.integers(0, 25), st.integers(-1, 4)), min_size=1, max_size=12),
    st.sampled_from([None, 0, 3, 7]),
    st.booleans(),
)
def test_step_ranges_and_keyed_ranges_equal_numpy(entries, queries, window, parallel):
    """The Numba step kernels (serial and parallel) against the NumPy definitions."""
    old = ranges.PARALLEL_SEQS
    ranges.PARALLEL_SEQS = 0 if parallel else 10**9
    try:
        entries = sorted(entries)
        col_ts = np.array([e[0] for e in entries], np.int64)
        col_key = np.array([e[1] for e in entries], np.int64)
        # table: row 0.. are query anchors/befores: row 2i = anchor, row 2i + 1 = before
        table_ts = np.array([t for q in queries for t in (q[0], q[1])], np.int64)
        seqs = np.array([[2 * i, 2 * i + 1] for i in range(len(queries))], np.int64)
        lo, hi = step_ranges(table_ts, seqs, 0, 1, window, col_ts)
        lo_ts = lower_window_bound(table_ts[seqs[:, 0]], window)
        wlo, whi = window_ranges(col_ts, lo_ts, table_ts[seqs[:, 1]])
        norm = lambda a, b: [(x, y) if y > x else None for x, y in zip(a, b)]  # noqa: E731
        assert norm(lo, hi) == norm(wlo, whi)
        # index: entries grouped by key, time order inside
        order = np.argsort(col_key, kind="stable")
        k_sorted, t_sorted = col_key[order], col_ts[order]
        uniq = np.unique(k_sorted)
        seg = np.searchsorted(k_sorted, np.append(uniq, np.iinfo(np.int64).max)).astype(np.int64)
        seg[-1] = len(k_sorted)
        keys = np.array([q[2] for q in queries], np.int64)
        valid = keys >= 0
        dense = np.full(6, -1, np.int64)
        dense[uniq] = np.arange(len(uniq))
        klo, khi = step_keyed_ranges(table_ts, seqs, 0, 1, window, uniq, seg, t_sorted, keys, valid)
        dlo, dhi = step_keyed_ranges(table_ts, seqs, 0, 1, window, uniq, seg, t_sorted, keys, valid, dense, 0)
        assert norm(dlo, dhi) == norm(klo, khi)
        nlo, nhi = keyed_ranges_numpy(uniq, seg, t_sorted, keys, valid, lo_ts, table_ts[seqs[:, 1]])
        assert norm(klo, khi) == norm(nlo, nhi)
        for i in range(len(queries)):
            got = sorted(order[klo[i]:khi[i]].tolist())
            want = [j for j in range(wlo[i], whi[i]) if valid[i] and col_key[j] == keys[i]]
            assert got == want
    finally:
        ranges.PARALLEL_SEQS = old


def test_as_keys_null_nan_and_float_to_int():
    uniq_i = np.array([1, 2], np.int64)
    k, ok = as_keys(uniq_i, np.array([1.0, 1.5, np.nan, 2.0]), np.array([True, True, True, False]))
    assert list(ok) == [True, False, False, False] and k[0] == 1
    uniq_f = np.array([1.0, 2.5])
    k, ok = as_keys(uniq_f, np.array([1, 2], np.int64), np.array([True, True]))
    assert k.dtype == np.float64 and list(ok) == [True, True]
