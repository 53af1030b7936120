"""Numba CPU kernels of the CDP combination step (each / last / first), plus span helpers.

The kernels are generic over the rule: they take the rule's generated ``valid`` function (see
:mod:`cep_gpu.codegen.numba_src`) as a first-class argument, and Numba specialises (and inlines)
them per function. Negation and aggregate checks live inside ``valid`` / ``aggs_all`` and use
:func:`lower_bound` / :func:`upper_bound` on the span's column.

Each kernel exists twice: serial (for medium inputs) and ``parallel=True`` (``prange`` over partial
sequences, for batch). Output order never depends on threads: ``each`` counts per sequence, takes
an exclusive prefix sum, then fills. Small steps (up to :data:`PAIR_WORK` candidates, e.g. streaming
calls) list their (sequence, candidate) pairs on the host and check them with one small loop, which
compiles several times faster than the fused kernels; the result is the same.

Arguments shared by the combination kernels:
``seqs`` (n, P) int64 partial sequences (-1 = unbound); ``lo``/``hi`` (n,) the candidate range of
each sequence in ``cand`` (table rows); ``excl`` bool per table row and ``use_excl`` (consumed rows
are skipped); ``env`` the rule's argument tuple.
"""

from __future__ import annotations

import numba
import numpy as np
from numba import prange


@numba.njit(cache=False, inline="always")
def lower_bound(a, x):
    """First index of sorted ``a`` with ``a[i] >= x``."""
    lo, hi = 0, a.shape[0]
    while lo < hi:
        mid = (lo + hi) >> 1
        if a[mid] < x:
            lo = mid + 1
        else:
            hi = mid
    return lo


@numba.njit(cache=False, inline="always")
def upper_bound(a, x):
    """First index of sorted ``a`` with ``a[i] > x``."""
    lo, hi = 0, a.shape[0]
    while lo < hi:
        mid = (lo + hi) >> 1
        if a[mid] <= x:
            lo = mid + 1
        else:
            hi = mid
    return lo


@numba.njit(cache=False)
def always_valid(seqs, i, r, env):
    """The ``valid`` of a step with nothing to check."""
    return True


def _each_count(valid, seqs, lo, hi, cand, excl, use_excl, env, counts):
    for i in prange(seqs.shape[0]):
        c = 0
        for j in range(lo[i], hi[i]):
            r = cand[j]
            if use_excl and excl[r]:
                continue
            if valid(seqs, i, r, env):
                c += 1
        counts[i] = c


def _each_fill(valid, seqs, lo, hi, cand, excl, use_excl, env, check, offsets, pred, out):
    # check=False: every candidate in range is valid (nothing to check, nothing consumed)
    width = seqs.shape[1]
    for i in prange(seqs.shape[0]):
        k = offsets[i]
        for j in range(lo[i], hi[i]):
            r = cand[j]
            if check:
                if use_excl and excl[r]:
                    continue
                if not valid(seqs, i, r, env):
                    continue
            for c in range(width):
                out[k, c] = seqs[i, c]
            out[k, pred] = r
            k += 1


def _select(valid, seqs, lo, hi, cand, excl, use_excl, env, last, chosen):
    for i in prange(seqs.shape[0]):
        res = -1
        n = hi[i] - lo[i]
        for t in range(n):
            j = hi[i] - 1 - t if last else lo[i] + t
            r = cand[j]
            if use_excl and excl[r]:
                continue
            if valid(seqs, i, r, env):
                res = r
                break
        chosen[i] = res


def _pair_mask(valid, seqs, pair_seq, pair_row, env, mask):
    for k in range(pair_seq.shape[0]):
        mask[k] = valid(seqs, pair_seq[k], pair_row[k], env)


_pair_mask_nb = numba.njit(cache=False)(_pair_mask)


def _aggregates(aggs_all, seqs, env, out):
    for i in prange(seqs.shape[0]):
        aggs_all(seqs, i, env, out)


_SERIAL = {f.__name__: numba.njit(cache=False)(f) for f in (_each_count, _each_fill, _select, _aggregates)}
_PARALLEL = {
    f.__name__: numba.njit(cache=False, parallel=True)(f)
    for f in (_each_count, _each_fill, _select, _aggregates)
}

#: Work (candidates to look at) above which the parallel kernels pay for their start-up.
PARALLEL_WORK = 200_000
#: Work up to which a step runs as "pairs": the host lists every (sequence, candidate) pair and one
#: small generated loop checks them; the choice is then made with NumPy. Compiles in a fraction of
#: the time of the fused kernels (what streaming calls and tests mostly need), same result.
PAIR_WORK = 50_000


def _pairs(seqs, lo, hi, cand, excl, use_excl, valid, env, trivial):
    """Every (sequence, candidate) pair in range, in (sequence, candidate) order, and validity."""
    sizes = hi - lo
    total = int(sizes.sum())
    pair_seq = np.repeat(np.arange(len(seqs), dtype=np.int64), sizes)
    starts = np.cumsum(sizes) - sizes
    pos = np.arange(total, dtype=np.int64) - np.repeat(starts - lo, sizes)
    rows = cand[pos] if total else np.empty(0, np.int64)
    mask = np.ones(total, np.bool_)
    if use_excl and total:
        mask &= ~excl[rows]
    if not trivial and total:
        sel = np.flatnonzero(mask)
        sub = np.empty(len(sel), np.bool_)
        launch("_pair_mask", 0, valid, seqs, pair_seq[sel], rows[sel], env, sub)
        mask[sel] = sub
    return pair_seq, rows, mask


#: id(valid) -> (valid, {(kernel name, parallel): a compiled wrapper without the valid argument}),
#: registered by the on-disk kernel cache (cep_gpu.codegen.cache): the same kernels, specialised
#: to one rule function in a file, which Numba can cache across processes
_SPECIALISED: dict[int, tuple[object, dict]] = {}


def specialise(valid, table: dict) -> None:
    """Route calls of the generic kernels with ``valid`` to ``table[(name, parallel)]``."""
    if len(_SPECIALISED) >= 16384:  # bounded, like the codegen cache that feeds it
        _SPECIALISED.clear()
    _SPECIALISED[id(valid)] = (valid, table)


def launch(name: str, work: int, valid, *args) -> None:
    """Run generic kernel ``name`` (serial or parallel by ``work``) with ``valid``."""
    parallel = work >= PARALLEL_WORK and name != "_pair_mask"
    own = _SPECIALISED.get(id(valid))
    if own is not None and own[0] is valid:
        own[1][(name, parallel)](*args)
    elif name == "_pair_mask":
        _pair_mask_nb(valid, *args)
    else:
        (_PARALLEL if parallel else _SERIAL)[name](valid, *args)


def _valid_counts(valid, seqs, lo, hi, cand, excl, use_excl, env, trivial: bool, work: int) -> np.ndarray:
    """Valid candidates per sequence (the range sizes when nothing is checked or consumed)."""
    if trivial and not use_excl:
        return hi - lo
    counts = np.empty(len(seqs), np.int64)
    launch("_each_count", work, valid, seqs, lo, hi, cand, excl, use_excl, env, counts)
    return counts


def combine_each(valid, seqs, lo, hi, cand, pred, excl, use_excl, env, trivial: bool) -> np.ndarray:
    """``each``: every valid candidate of every sequence; (n_out, P) new partial sequences.

    ``trivial``: every candidate in range is valid (no checks, no consumed rows), so the counts
    are the range lengths and the fill is a plain gather.
    """
    work = int((hi - lo).sum())
    if work <= PAIR_WORK:
        pair_seq, rows, mask = _pairs(seqs, lo, hi, cand, excl, use_excl, valid, env, trivial)
        out = seqs[pair_seq[mask]]
        out[:, pred] = rows[mask]
        return out
    counts = _valid_counts(valid, seqs, lo, hi, cand, excl, use_excl, env, trivial, work)
    offsets = np.zeros(len(seqs), np.int64)
    np.cumsum(counts[:-1], out=offsets[1:])
    out = np.empty((int(counts.sum()), seqs.shape[1]), np.int64)
    if len(out):
        check = not (trivial and not use_excl)
        launch("_each_fill", work, valid, seqs, lo, hi, cand, excl, use_excl, env, check, offsets, pred, out)
    return out


def count_each(valid, seqs, lo, hi, cand, excl, use_excl, env, trivial: bool) -> int:
    """``len(combine_each(...))`` without building the sequences (``output="count"``)."""
    work = int((hi - lo).sum())
    if trivial and not use_excl:
        return work  # every candidate in range is valid
    if work <= PAIR_WORK:
        return int(_pairs(seqs, lo, hi, cand, excl, use_excl, valid, env, trivial)[2].sum())
    return int(_valid_counts(valid, seqs, lo, hi, cand, excl, use_excl, env, trivial, work).sum())


def combine_select(valid, seqs, lo, hi, cand, excl, use_excl, env, last: bool) -> np.ndarray:
    """``last`` / ``first``: the latest / earliest valid candidate row per sequence (-1 = none)."""
    chosen = np.empty(len(seqs), np.int64)
    if len(seqs):
        work = int((hi - lo).sum())
        if work <= PAIR_WORK:
            pair_seq, rows, mask = _pairs(seqs, lo, hi, cand, excl, use_excl, valid, env, False)
            chosen[:] = -1
            s, r = pair_seq[mask], rows[mask]
            if len(s):
                # pairs are grouped by sequence in candidate (row) order: take each group's edge
                edge = np.r_[s[1:] != s[:-1], True] if last else np.r_[True, s[1:] != s[:-1]]
                chosen[s[edge]] = r[edge]
            return chosen
        launch("_select", work, valid, seqs, lo, hi, cand, excl, use_excl, env, last, chosen)
    return chosen


def compute_aggregates(aggs_all, seqs, env, n_aggregates: int) -> np.ndarray:
    """(n, n_aggregates) float64 aggregate values of complete sequences (NaN = null)."""
    out = np.full((len(seqs), n_aggregates), np.nan)
    if len(seqs) and n_aggregates:
        launch("_aggregates", len(seqs) * 64, aggs_all, seqs, env, out)
    return out
