"""Window ranges by vectorised binary search: the one piece every backend shares.

A column is a time-sorted array of timestamps. For many partial sequences at once, the host finds
the index range ``[lo_i, hi_i)`` of the column entries whose timestamp lies inside each sequence's
window, with one ``np.searchsorted`` per edge (the chapter's CDP does this on the CPU even for its
GPU version: it is a sequential binary search per column).

Edges follow docs/language.md: ``each|last|first X within D from Y`` admits
``ts(Y) - D <= ts(X) < ts(Y)`` (far edge inclusive, near edge exclusive).
"""

from __future__ import annotations

import numpy as np

#: The smallest timestamp (a window with no lower bound).
MIN_TS = np.iinfo(np.int64).min


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


def lower_window_bound(anchor_ts: np.ndarray, window: int | None) -> np.ndarray:
    """``anchor_ts - window`` without overflow (``MIN_TS`` when there is no window)."""
    anchor_ts = np.asarray(anchor_ts, np.int64)
    if window is None:
        return np.full(anchor_ts.shape, MIN_TS, np.int64)
    floor = MIN_TS + int(window)
    return np.where(anchor_ts < floor, MIN_TS, anchor_ts - np.int64(window))


def keyed_ranges(
    uniq: np.ndarray,
    composite: np.ndarray,
    keys: np.ndarray,
    found: np.ndarray,
    lo_pos: np.ndarray,
    hi_pos: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Ranges in a parameter index for queries ``(key, [lo_pos, hi_pos))``.

    The index orders a column's entries by ``(key, time position)`` and stores the sorted
    composite numbers ``rank(key) * (n + 1) + position`` (``n`` = column length), so one binary
    search finds the entries with a given key inside a time-position range. ``keys`` are the
    query keys already mapped to ranks in ``uniq`` (see :func:`key_ranks`); ``found`` is False
    where the key does not occur (the range is then empty). ``lo_pos``/``hi_pos`` are the time
    window as positions in the time-sorted column (from :func:`window_ranges`).
    """
    width = np.int64(len(composite) + 1) if len(uniq) else np.int64(1)
    base = np.where(found, keys, 0).astype(np.int64) * width
    lo = np.searchsorted(composite, base + lo_pos, side="left").astype(np.int64)
    hi = np.searchsorted(composite, base + hi_pos, side="left").astype(np.int64)
    hi = np.where(found, np.maximum(hi, lo), lo)
    return lo, hi


def key_ranks(uniq: np.ndarray, values: np.ndarray, valid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Ranks of ``values`` in the sorted unique keys ``uniq`` and whether each occurs at all.

    Null values (``valid`` False) and NaN never occur (an equality with them is false).
    """
    values = np.asarray(values)
    if len(uniq) == 0 or len(values) == 0:
        return np.zeros(len(values), np.int64), np.zeros(len(values), bool)
    if uniq.dtype.kind == "i" and values.dtype.kind == "f":
        # an integer key equals a float only when the float is integral and in range
        with np.errstate(invalid="ignore"):
            integral = np.isfinite(values) & (np.floor(values) == values) & (np.abs(values) < 2.0**62)
        valid = valid & integral
        values = np.where(integral, values, 0).astype(np.int64)
    elif uniq.dtype.kind == "f":
        values = values.astype(np.float64)
        valid = valid & ~np.isnan(values)
    else:
        values = values.astype(np.int64)
    pos = np.searchsorted(uniq, values)
    clipped = np.minimum(pos, len(uniq) - 1)
    found = valid & (pos < len(uniq)) & (uniq[clipped] == values)
    return clipped.astype(np.int64), found
