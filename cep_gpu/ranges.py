"""Window ranges by vectorised binary search: the one piece every backend shares.

A column is a time-sorted array of timestamps. For many partial sequences at once, the host finds
the index range ``[lo_i, hi_i)`` of the column entries whose timestamp lies inside each sequence's
window, with one ``np.searchsorted`` per edge (the chapter's CDP does this on the CPU even for its
GPU version: it is a sequential binary search per column).

Edges follow docs/language.md: ``each|last|first X within D from Y`` admits
``ts(Y) - D <= ts(X) < ts(Y)`` (far edge inclusive, near edge exclusive).
"""

from __future__ import annotations

import numba
import numpy as np

from .jit import cached_njit

#: The smallest timestamp (a window with no lower bound).
MIN_TS = np.iinfo(np.int64).min
#: The largest timestamp.
MAX_TS = np.iinfo(np.int64).max


def edge_index(col_ts: np.ndarray, bound: np.ndarray, inclusive: bool, upper: bool) -> np.ndarray:
    """Index into ``col_ts`` of a range edge at ``bound``.

    For a lower edge (``upper=False``) the first index whose timestamp is ``>= bound``
    (inclusive) or ``> bound`` (exclusive); for an upper edge the first index past the entries
    that are ``<= bound`` (inclusive) or ``< bound`` (exclusive).
    """
    side = "left" if inclusive != upper else "right"
    return np.searchsorted(col_ts, bound, side=side).astype(np.int64, copy=False)


def window_ranges(
    col_ts: np.ndarray,
    lo_ts: np.ndarray,
    hi_ts: np.ndarray,
    lo_inclusive: bool = True,
    hi_inclusive: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """Per query ``i``, the range ``[lo_i, hi_i)`` of ``col_ts`` inside ``(lo_ts[i], hi_ts[i])``.

    Inclusive flags pick ``<=`` or ``<`` at each edge; the default is the window
    ``lo_ts <= t < hi_ts``. ``hi_i >= lo_i`` always holds (empty ranges have ``hi_i == lo_i``).
    """
    lo = edge_index(col_ts, np.asarray(lo_ts, np.int64), lo_inclusive, upper=False)
    hi = edge_index(col_ts, np.asarray(hi_ts, np.int64), hi_inclusive, upper=True)
    return lo, np.maximum(hi, lo)


def shift_limit(offset: int) -> int:
    """The timestamp at which ``ts + offset`` reaches an end of the int64 range.

    A span or window edge ``ts + offset`` is computed saturated, as ``max(ts, limit) + offset`` for
    a negative offset and ``min(ts, limit) + offset`` for a positive one (``MIN_TS``/``MAX_TS``
    instead of a wrapped-around value: an edge past the range keeps every timestamp on its side).
    Every backend computes its edges this way (the generated kernels with this limit as a literal).
    """
    offset = int(offset)
    return int(MIN_TS) - offset if offset < 0 else int(MAX_TS) - offset


def shifted_ts(ts: np.ndarray, offset: int) -> np.ndarray:
    """``ts + offset`` saturated at the ends of the int64 range (see :func:`shift_limit`)."""
    ts = np.asarray(ts, np.int64)
    offset = int(offset)
    if offset < 0:
        return np.maximum(ts, np.int64(shift_limit(offset))) + np.int64(offset)
    if offset > 0:
        return np.minimum(ts, np.int64(shift_limit(offset))) + np.int64(offset)
    return ts


def lower_window_bound(anchor_ts: np.ndarray, window: int | None) -> np.ndarray:
    """``anchor_ts - window`` without overflow (``MIN_TS`` when there is no window)."""
    anchor_ts = np.asarray(anchor_ts, np.int64)
    if window is None:
        return np.full(anchor_ts.shape, MIN_TS, np.int64)
    return shifted_ts(anchor_ts, -int(window))


def as_keys(uniq: np.ndarray, values: np.ndarray, valid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Query values cast to the dtype of an index's keys ``uniq``, and where they can match at all.

    Null values (``valid`` False) and NaN never match (an equality with them is false). An integer
    key equals a float only when the float is integral.
    """
    values = np.asarray(values)
    valid = np.asarray(valid, bool)
    if uniq.dtype.kind == "f":
        values = values.astype(np.float64)
        return values, valid & ~np.isnan(values)
    if values.dtype.kind == "f":
        with np.errstate(invalid="ignore"):
            integral = np.isfinite(values) & (np.floor(values) == values) & (np.abs(values) < 2.0**62)
        return np.where(integral, values, 0).astype(np.int64), valid & integral
    return values.astype(np.int64), valid


def keyed_ranges_numpy(
    uniq: np.ndarray,
    seg: np.ndarray,
    index_ts: np.ndarray,
    keys: np.ndarray,
    valid: np.ndarray,
    lo_ts: np.ndarray,
    hi_ts: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Ranges ``[lo_i, hi_i)`` in a parameter index (entries grouped by key, time-sorted inside a
    group) of the entries with key ``keys[i]`` and ``lo_ts[i] <= ts < hi_ts[i]``.

    The plain NumPy definition; :func:`step_keyed_ranges` is the fast path used by the engine.
    """
    n = len(keys)
    lo = np.zeros(n, np.int64)
    hi = np.zeros(n, np.int64)
    if len(uniq) == 0:
        return lo, hi
    g = np.searchsorted(uniq, keys)
    gc = np.minimum(g, len(uniq) - 1)
    found = valid & (g < len(uniq)) & (uniq[gc] == keys)
    for i in np.flatnonzero(found):
        s0, s1 = seg[gc[i]], seg[gc[i] + 1]
        part = index_ts[s0:s1]
        lo[i] = s0 + np.searchsorted(part, lo_ts[i], "left")
        hi[i] = max(s0 + np.searchsorted(part, hi_ts[i], "left"), lo[i])
    return lo, hi


# -- fast paths (Numba): one pass over the partial sequences, reading the bound timestamps -----------


@numba.njit(cache=False, inline="always")
def _lower_bound(a, x, lo, hi):
    while lo < hi:
        mid = (lo + hi) >> 1
        if a[mid] < x:
            lo = mid + 1
        else:
            hi = mid
    return lo


@numba.njit(cache=False, inline="always")
def _lower_bound_near(a, x, lo, hi, g):
    """``_lower_bound(a, x, lo, hi)`` by galloping from a guess ``g``: O(log distance)."""
    g = min(max(g, lo), hi)
    if g < hi and a[g] < x:  # the answer lies in (g, hi]
        left = g + 1
        step = 1
        right = left
        while right < hi and a[right] < x:
            left = right + 1
            right = left + step
            step *= 2
        return _lower_bound(a, x, left, min(right, hi))
    right = g  # a[g] >= x (or g == hi): the answer lies in [lo, g]
    step = 1
    left = right - 1
    while left >= lo and a[left] >= x:
        right = left
        left = right - step
        step *= 2
    return _lower_bound(a, x, max(left + 1, lo), right)


@numba.njit(cache=False, inline="always")
def _window(a, lo_ts, hi_ts, s0, s1, guess_lo, guess_hi):
    """``[lo, hi)`` of the entries of sorted ``a[s0:s1]`` with ``lo_ts <= t < hi_ts``.

    Both edges are found by galloping from guesses (the previous answer for the same group, since
    consecutive sequences have nearby windows; else an interpolation, timestamps being roughly
    uniform in time): O(log of the distance), touching only entries near the time frontier.
    """
    if s1 <= s0:
        return s0, s0
    t0 = a[s0]
    t1 = a[s1 - 1]
    if hi_ts <= t0:
        return s0, s0
    if hi_ts > t1:
        b = s1
    else:
        g = guess_hi
        if g < s0 or g > s1:
            g = s0 + int((hi_ts - t0) / (t1 - t0 + 1.0) * (s1 - s0))
        b = _lower_bound_near(a, hi_ts, s0, s1, g)
    g = guess_lo
    if g < s0 or g > b:
        g = b
    return _lower_bound_near(a, lo_ts, s0, b, g), b


@numba.njit(cache=False, inline="always")
def _bounds(table_ts, seqs, i, anchor, before, window, has_window):
    hi_ts = table_ts[seqs[i, before]]
    lo_ts = MIN_TS
    if has_window:
        a = table_ts[seqs[i, anchor]]
        if a >= MIN_TS + window:
            lo_ts = a - window
    return lo_ts, hi_ts


def _step_ranges(
    table_ts, seqs, anchor, before, window, has_window, col_ts, n_chunks, lo, hi, ties, col_rows
):
    n = seqs.shape[0]
    for c in numba.prange(n_chunks):
        a, b = -1, -1
        for i in range(c * n // n_chunks, (c + 1) * n // n_chunks):
            lo_ts, hi_ts = _bounds(table_ts, seqs, i, anchor, before, window, has_window)
            a, b = _window(col_ts, lo_ts, hi_ts, 0, col_ts.shape[0], a, b)
            lo[i] = a
            hi[i] = max(a, b)
            if ties:  # also the entries at ts(before) in earlier rows (rows are (ts, id)-sorted)
                hi[i] = _lower_bound(col_rows, seqs[i, before], hi[i], col_rows.shape[0])


def _step_keyed_ranges(
    table_ts, seqs, anchor, before, window, has_window, uniq, seg, its, keys, valid, dense, dense_min,
    n_chunks, lo, hi, ties, index_rows,
):
    n_keys = uniq.shape[0]
    n_dense = dense.shape[0]
    n = seqs.shape[0]
    # per chunk and key group: the previous answer, the next query's starting guess
    last_lo = np.full((n_chunks, n_keys), -1, np.int64)
    last_hi = np.full((n_chunks, n_keys), -1, np.int64)
    for c in numba.prange(n_chunks):
        for i in range(c * n // n_chunks, (c + 1) * n // n_chunks):
            lo[i] = 0
            hi[i] = 0
            if not valid[i]:
                continue
            if n_dense:
                d = np.int64(keys[i]) - dense_min  # (float keys never have a dense table)
                if d < 0 or d >= n_dense or dense[d] < 0:
                    continue
                g = dense[d]
            else:
                g = _lower_bound(uniq, keys[i], 0, n_keys)
                if g >= n_keys or uniq[g] != keys[i]:
                    continue
            lo_ts, hi_ts = _bounds(table_ts, seqs, i, anchor, before, window, has_window)
            a, b = _window(its, lo_ts, hi_ts, seg[g], seg[g + 1], last_lo[c, g], last_hi[c, g])
            last_lo[c, g] = a
            last_hi[c, g] = b
            lo[i] = a
            hi[i] = max(a, b)
            if ties:  # a group's entries are in row order: extend to the rows before `before`
                hi[i] = _lower_bound(index_rows, seqs[i, before], hi[i], seg[g + 1])


_KERNELS = {
    par: (
        cached_njit(_step_ranges, "parallel" if par else "serial", parallel=par),
        cached_njit(_step_keyed_ranges, "parallel" if par else "serial", parallel=par),
    )
    for par in (False, True)
}
_NO_DENSE = np.empty(0, np.int64)


def _chunks(n: int, parallel: bool) -> int:
    """Contiguous chunks of sequences (each keeps its own search guesses): a few per thread."""
    return max(1, min(4 * numba.get_num_threads(), n // 4096)) if parallel else 1
#: Partial sequences above which the range kernels run in parallel.
PARALLEL_SEQS = 50_000


def step_ranges(
    table_ts: np.ndarray,
    seqs: np.ndarray,
    anchor: int,
    before: int,
    window: int | None,
    col_ts: np.ndarray,
    col_rows: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Window ranges in a time-sorted column for a batch of partial sequences.

    Sequence ``i``'s window is ``ts(seqs[i, anchor]) - window <= t < ts(seqs[i, before])``
    (no lower bound when ``window`` is None). Same result as :func:`window_ranges`.
    With ``col_rows`` (the column's table rows, :attr:`Predicate.ties`), the upper bound is
    row order instead: entries at ``ts(before)`` in rows before ``seqs[i, before]`` are included.
    """
    n = seqs.shape[0]
    lo, hi = np.empty(n, np.int64), np.empty(n, np.int64)
    par = n >= PARALLEL_SEQS
    kernel = _KERNELS[par][0]
    kernel(
        table_ts, seqs, anchor, before, int(window or 0), window is not None, col_ts,
        _chunks(n, par), lo, hi, col_rows is not None,
        _NO_DENSE if col_rows is None else np.ascontiguousarray(col_rows, np.int64),
    )
    return lo, hi


def step_keyed_ranges(
    table_ts: np.ndarray,
    seqs: np.ndarray,
    anchor: int,
    before: int,
    window: int | None,
    uniq: np.ndarray,
    seg: np.ndarray,
    index_ts: np.ndarray,
    keys: np.ndarray,
    valid: np.ndarray,
    dense: np.ndarray | None = None,
    dense_min: int = 0,
    index_rows: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Like :func:`step_ranges` through a parameter index, for query keys ``keys`` (already cast by
    :func:`as_keys`): only entries whose key equals the sequence's key. Same result as
    :func:`keyed_ranges_numpy`. ``dense``/``dense_min``: optional direct group table of integer
    keys (``dense[key - dense_min]``, -1 = absent). ``index_rows``: as ``col_rows`` of
    :func:`step_ranges` (the index's table rows), for :attr:`Predicate.ties`."""
    n = seqs.shape[0]
    lo, hi = np.empty(n, np.int64), np.empty(n, np.int64)
    if len(uniq) == 0:
        lo[:] = 0
        hi[:] = 0
        return lo, hi
    par = n >= PARALLEL_SEQS
    kernel = _KERNELS[par][1]
    kernel(
        table_ts, seqs, anchor, before, int(window or 0), window is not None,
        uniq, seg, index_ts, np.ascontiguousarray(keys), np.ascontiguousarray(valid, np.bool_),
        _NO_DENSE if dense is None or uniq.dtype.kind != "i" else dense, int(dense_min),
        _chunks(n, par), lo, hi, index_rows is not None,
        _NO_DENSE if index_rows is None else np.ascontiguousarray(index_rows, np.int64),
    )
    return lo, hi
