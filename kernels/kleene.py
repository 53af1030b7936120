"""Numba kernels of the CDP combination step for a Kleene position (docs/language.md, "Kleene
closure"), used by :mod:`cep_gpu.cdp` on the CPU.

For each partial sequence ``i`` the host gives the candidate range ``[lo[i], hi[i])`` of the
position's column (window, before the next position, after the previous one). Then:

1. :func:`elements`: the candidates that pass the generated per-element check ``elem`` (CSR:
   ``e_off``/``e_rows``), counted then filled (two passes, no Python per candidate);
2. :func:`enumerate_sets`: the sets: for ``each`` every subset of the elements (in row order) of
   an allowed size whose consecutive elements pass the generated ``pair`` check (depth-first over
   chains, so a failing pair prunes every set that contains it); for ``greedy`` the whole element
   list, when its size is allowed and every consecutive pair passes. Counted, then filled;
3. :func:`set_aggregates`: count/sum/avg/min/max of an attribute over each set.

Output order never depends on anything but the input: sequences in order, sets of one sequence in
depth-first (lexicographic) order.
"""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(cache=False)
def always_pair(seqs, i, r, q, env):
    """The ``pair`` check of a Kleene position without consecutive conditions."""
    return True


@numba.njit(cache=False)
def _elements_count(elem, seqs, lo, hi, cand, env, counts):
    for i in range(seqs.shape[0]):
        c = 0
        for j in range(lo[i], hi[i]):
            if elem(seqs, i, cand[j], env):
                c += 1
        counts[i] = c


@numba.njit(cache=False)
def _elements_fill(elem, seqs, lo, hi, cand, env, offsets, out):
    for i in range(seqs.shape[0]):
        k = offsets[i]
        for j in range(lo[i], hi[i]):
            r = cand[j]
            if elem(seqs, i, r, env):
                out[k] = r
                k += 1


def elements(elem, seqs, lo, hi, cand, env) -> tuple[np.ndarray, np.ndarray]:
    """(offsets (n+1,), rows): each sequence's candidates that pass ``elem``, in row order."""
    counts = np.empty(len(seqs), np.int64)
    _elements_count(elem, seqs, lo, hi, cand, env, counts)
    offsets = np.zeros(len(seqs) + 1, np.int64)
    np.cumsum(counts, out=offsets[1:])
    out = np.empty(int(offsets[-1]), np.int64)
    if len(out):
        _elements_fill(elem, seqs, lo, hi, cand, env, offsets, out)
    return offsets, out


@numba.njit(cache=False)
def _enumerate(pair, seqs, e_off, e_rows, env, min_s, max_s, greedy, fill,
               n_sets, n_elems, set_base, elem_base, set_seq, set_start, set_len, flat):
    # fill=False: count each sequence's sets and their elements; fill=True: write them at the
    # offsets the count pass gave (set_base / elem_base per sequence)
    width = 1
    for i in range(seqs.shape[0]):
        width = max(width, e_off[i + 1] - e_off[i])
    stack = np.empty(width + 1, np.int64)
    for i in range(seqs.shape[0]):
        base = e_off[i]
        n = e_off[i + 1] - base
        s_count = 0
        e_count = 0
        s_at = set_base[i] if fill else 0
        e_at = elem_base[i] if fill else 0
        if greedy:
            ok = n >= min_s and n <= max_s
            if ok:
                for t in range(n - 1):
                    if not pair(seqs, i, e_rows[base + t], e_rows[base + t + 1], env):
                        ok = False
                        break
            if ok:
                if fill:
                    set_seq[s_at] = i
                    set_start[s_at] = e_at
                    set_len[s_at] = n
                    for t in range(n):
                        flat[e_at + t] = e_rows[base + t]
                s_count = 1
                e_count = n
        elif n > 0:
            d = 0
            stack[0] = -1
            while d >= 0:
                stack[d] += 1
                # too few elements left to reach min_s from here (nor from a later sibling, which
                # has fewer): back up. Without this, a high lower bound visits every smaller prefix
                # first (about 2^n of them) however few sets there are
                if stack[d] >= n or d + n - stack[d] < min_s:
                    d -= 1
                    continue
                if d > 0 and not pair(seqs, i, e_rows[base + stack[d - 1]], e_rows[base + stack[d]], env):
                    continue
                size = d + 1
                if size >= min_s:
                    if fill:
                        set_seq[s_at + s_count] = i
                        set_start[s_at + s_count] = e_at + e_count
                        set_len[s_at + s_count] = size
                        for t in range(size):
                            flat[e_at + e_count + t] = e_rows[base + stack[t]]
                    s_count += 1
                    e_count += size
                if size < max_s and stack[d] + 1 < n:
                    d += 1
                    stack[d] = stack[d - 1]
        n_sets[i] = s_count
        n_elems[i] = e_count


def enumerate_sets(pair, seqs, e_off, e_rows, env, min_s: int, max_s: int | None, greedy: bool):
    """The sets of every sequence: (set_seq, set_start, set_len, flat) with set ``s`` of sequence
    ``set_seq[s]`` at ``flat[set_start[s]:set_start[s] + set_len[s]]``."""
    n = len(seqs)
    max_s = np.iinfo(np.int64).max if max_s is None else max_s
    n_sets = np.zeros(n, np.int64)
    n_elems = np.zeros(n, np.int64)
    e64 = np.empty(0, np.int64)
    zeros = np.zeros(n, np.int64)
    _enumerate(pair, seqs, e_off, e_rows, env, min_s, max_s, greedy, False,
               n_sets, n_elems, zeros, zeros, e64, e64, e64, e64)
    set_base = np.cumsum(n_sets) - n_sets
    elem_base = np.cumsum(n_elems) - n_elems
    set_seq = np.empty(int(n_sets.sum()), np.int64)
    set_start = np.empty(len(set_seq), np.int64)
    set_len = np.empty(len(set_seq), np.int64)
    flat = np.empty(int(n_elems.sum()), np.int64)
    if len(set_seq):
        _enumerate(pair, seqs, e_off, e_rows, env, min_s, max_s, greedy, True,
                   n_sets, n_elems, set_base, elem_base, set_seq, set_start, set_len, flat)
    return set_seq, set_start, set_len, flat


#: function codes of :func:`set_aggregates`
AGG_CODES = {"count": 0, "sum": 1, "avg": 2, "min": 3, "max": 4}


@numba.njit(cache=False)
def _set_aggregates(code, values, valid, flat, start, length, out):
    for s in range(start.shape[0]):
        cnt = 0
        nv = 0
        tot = 0.0
        mn = np.inf
        mx = -np.inf
        for t in range(start[s], start[s] + length[s]):
            r = flat[t]
            cnt += 1
            if valid[r]:
                x = values[r]
                if not np.isnan(x):
                    nv += 1
                    tot += x
                    mn = min(mn, x)
                    mx = max(mx, x)
        if code == 0:
            out[s] = cnt
        elif code == 1:
            out[s] = tot
        elif nv == 0:
            out[s] = np.nan
        elif code == 2:
            out[s] = tot / nv
        elif code == 3:
            out[s] = mn
        else:
            out[s] = mx


def set_aggregates(function: str, values, valid, flat, start, length) -> np.ndarray:
    """``function`` over each set's elements (skipping missing values; NaN = null)."""
    out = np.empty(len(start), np.float64)
    if len(start):
        _set_aggregates(AGG_CODES[function], values, valid, flat, start, length, out)
    return out


def subset_estimate(n: np.ndarray, min_s: int, max_s: int | None, greedy: bool) -> float:
    """The number of sets ``enumerate_sets`` may produce for element counts ``n`` (an upper bound:
    before consecutive and set conditions). One loop per distinct count, not per candidate."""
    return float(subsets_per_span(n, min_s, max_s, greedy).sum())


def subsets_per_span(n: np.ndarray, min_s: int, max_s: int | None, greedy: bool) -> np.ndarray:
    """Per entry of ``n`` (element counts of spans, rounded down if fractional), the sets of an
    allowed size: ``greedy``: 1 when some element is there (the set's size is checked later);
    ``each``: ``sum(C(n, s))`` over the allowed sizes ``s`` (``2^n - 1`` without bounds); float64,
    ``inf`` past 2^1023. The Kleene match estimate and the planner's cost model use it."""
    n = np.asarray(n)
    if greedy:
        return (n >= 1).astype(np.float64)
    values, inverse = np.unique(np.floor(n).astype(np.int64), return_inverse=True)
    per_value = np.zeros(len(values), np.float64)
    for v, m in enumerate(values.tolist()):
        hi = m if max_s is None else min(max_s, m)
        if hi < min_s:
            continue
        if max_s is None or hi == m:
            # 2^m minus the sizes below min_s
            below, c = 0.0, 1.0
            for s in range(min_s):
                below += c
                c = c * (m - s) / (s + 1)
            per = 2.0 ** m - below if m < 1024 else float("inf")
        else:
            per, c = 0.0, 1.0
            for s in range(hi + 1):
                if s >= min_s:
                    per += c
                c = c * (m - s) / (s + 1)
        per_value[v] = per
    return per_value[inverse].reshape(n.shape)


#: The largest number of sets one call may number on the GPU (int64 thread indices and offsets).
MAX_INDEXED_SETS = 2**62


def subset_table(n_max: int, min_s: int, max_s: int | None) -> np.ndarray:
    """The unranking table of the GPU Kleene kernel (``cep_kleene_unrank`` in cuda/cdp.cuh).

    ``table[m, d]`` (d in ``0..h + 1``, ``h = min(max_s, n_max)``): the sets of an allowed size in
    the depth-first subtree of a prefix of ``d`` chosen elements followed by ``m`` more elements,
    the prefix itself included when its size is allowed. ``F(m, d) = [min_s <= d <= h] +
    sum_{m' < m} F(m', d + 1)``, ``F(., h + 1) = 0``. Exact (Python ints), saturated at int64's
    maximum (entries that large are never read for a sequence whose count fits)."""
    h = n_max if max_s is None else min(max_s, n_max)
    width = h + 2
    f = np.zeros((n_max + 1, width), dtype=object)
    f[:, :] = 0
    for d in range(h, 0, -1):
        shifted = np.zeros(n_max + 1, dtype=object)
        shifted[:] = 0
        if n_max:
            shifted[1:] = np.cumsum(f[:-1, d + 1])
        f[:, d] = shifted + (1 if d >= min_s else 0)
    cap = np.iinfo(np.int64).max
    return np.array([[min(int(x), cap) for x in row] for row in f], dtype=np.int64).reshape(n_max + 1, width)


def subset_counts(n: np.ndarray, min_s: int, max_s: int | None, greedy: bool) -> np.ndarray:
    """Per sequence, the sets the GPU kernel numbers for its ``n`` elements (before consecutive
    and set conditions): ``greedy``: 1 when ``n`` is an allowed size; else every subset of an
    allowed size (:func:`subset_estimate` per sequence, exact). int64; the caller has checked
    that the total fits (:data:`MAX_INDEXED_SETS`)."""
    n = np.asarray(n, np.int64)
    if greedy:
        ok = (n >= min_s) & (n >= 1) & ((n <= max_s) if max_s is not None else True)
        return ok.astype(np.int64)
    n_max = int(n.max()) if len(n) else 0
    table = subset_table(n_max, min_s, max_s)
    roots = np.zeros(n_max + 1, np.int64)
    if n_max:
        # the root's subtree: its children are the first elements 0..n-1 (size-1 prefixes)
        roots[1:] = np.minimum(np.cumsum(table[:-1, 1].astype(object)), np.iinfo(np.int64).max).astype(np.int64)
    return roots[n]
