"""ColumnStore: the CDP columns of one rule over one event table.

One :class:`Column` per positive predicate holds the table rows of its event type that pass its
static filters (the conditions that read only that predicate, :func:`cep_gpu.model.static_conditions`),
in time (row) order; one per negation and per aggregate holds the rows of their type that pass
their own event-only conditions. Static filters are evaluated once per column with vectorised
NumPy (:mod:`cep_gpu.evaluate`); whatever depends on other predicates is checked in the kernels.

A column can also carry a **parameter index** on one attribute (:class:`KeyIndex`): its entries
ordered by ``(value, time)``, so that the candidates with ``attr == v`` inside a window are one
binary search away instead of a scan of the whole window (the ``k=$k`` of the seq3 workload).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .evaluate import condition_mask
from .events import EventTable
from .model import Expr, Rule


@dataclass
class KeyIndex:
    """A column's entries with a non-null ``attr``, grouped by value, time-sorted in each group.

    ``uniq``: the sorted distinct values (int64 for int/bool/string codes, float64 for floats);
    entries of ``uniq[g]`` are ``rows[seg[g]:seg[g + 1]]`` (table rows) with timestamps
    ``ts[seg[g]:seg[g + 1]]``. See :func:`cep_gpu.ranges.step_keyed_ranges`.
    """

    uniq: np.ndarray
    seg: np.ndarray
    rows: np.ndarray
    ts: np.ndarray
    #: for integer keys of a small range: ``dense[v - dense_min]`` is the group of value ``v``
    #: (-1 = absent), saving the binary search in ``uniq``; empty otherwise
    dense: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    dense_min: int = 0


@dataclass
class Column:
    """Table rows (time order) that pass a predicate's static filters, and their timestamps."""

    rows: np.ndarray
    ts: np.ndarray
    _indexes: dict[str, KeyIndex] = field(default_factory=dict, repr=False)

    def __len__(self) -> int:
        return len(self.rows)

    def key_index(self, table: EventTable, attr: str) -> KeyIndex:
        """The parameter index of this column on ``attr`` (built on first use)."""
        idx = self._indexes.get(attr)
        if idx is None:
            idx = self._indexes[attr] = build_key_index(self, table, attr)
        return idx


def key_values(table: EventTable, attr: str, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Values of ``attr`` at ``rows`` as index keys (int64 or float64) and their validity."""
    col = table.columns.get(attr)
    if col is None:
        return np.zeros(len(rows), np.int64), np.zeros(len(rows), bool)
    values = col.values[rows]
    valid = col.valid[rows]
    if col.kind == "float":
        values = values.astype(np.float64, copy=False)
        valid = valid & ~np.isnan(values)
    else:
        values = values.astype(np.int64)
    return values, valid


def build_key_index(column: Column, table: EventTable, attr: str) -> KeyIndex:
    """Group the entries of ``column`` with a non-null ``attr`` by value, keeping time order."""
    values, valid = key_values(table, attr, column.rows)
    pos = np.flatnonzero(valid)
    keys = values[pos]
    order = _stable_order(keys)  # stable: time order inside each value
    keys = keys[order]
    starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]]) if len(keys) else np.empty(0, np.int64)
    seg = np.append(starts, len(keys)).astype(np.int64)
    rows = np.ascontiguousarray(column.rows[pos[order]])
    uniq = np.ascontiguousarray(keys[starts])
    index = KeyIndex(uniq, seg, rows, np.ascontiguousarray(column.ts[pos[order]]))
    if uniq.dtype.kind == "i" and len(uniq) and int(uniq[-1]) - int(uniq[0]) < 1 << 16:
        index.dense_min = int(uniq[0])
        index.dense = np.full(int(uniq[-1]) - index.dense_min + 1, -1, np.int64)
        index.dense[uniq - index.dense_min] = np.arange(len(uniq))
    return index


def _stable_order(keys: np.ndarray) -> np.ndarray:
    """Stable argsort; integer keys of a small range go through NumPy's O(n) radix sort."""
    if keys.dtype.kind == "i" and len(keys):
        lo, hi = int(keys.min()), int(keys.max())
        if hi - lo < 1 << 16:
            small = (keys - lo).astype(np.uint8 if hi - lo < 1 << 8 else np.uint16)
            return np.argsort(small, kind="stable")
    return np.argsort(keys, kind="stable")


def filter_rows(
    table: EventTable,
    rows: np.ndarray,
    conditions: tuple[Expr, ...],
    pred: int | None,
    n_predicates: int,
) -> np.ndarray:
    """The ``rows`` for which every condition holds, read as predicate ``pred`` (None = SELF)."""
    for cond in conditions:
        if len(rows) == 0:
            break
        if pred is None:
            mask = condition_mask(cond, table, np.empty((len(rows), 0), np.int64), self_rows=rows)
        else:
            bound = np.broadcast_to(rows[:, None], (len(rows), n_predicates))
            mask = condition_mask(cond, table, bound)
        rows = rows[mask]
    return rows


def type_rows(table: EventTable, event_type: str, start: int, stop: int) -> np.ndarray:
    """Rows in ``[start, stop)`` of ``event_type``, in row order."""
    code = table.type_code(event_type)
    if code < 0 or stop <= start:
        return np.empty(0, np.int64)
    return np.flatnonzero(table.types[start:stop] == code).astype(np.int64) + start


class ColumnStore:
    """The columns of one rule over rows ``[start, stop)`` of a table (``stop_ext`` for spans).

    ``filters[p]``: the static filter expressions of predicate ``p``; ``neg_filters[k]`` /
    ``agg_filters[k]``: the event-only conditions of negation / aggregate ``k``. ``excluded`` rows
    (consumed ones) are left out of the positive columns only: negations and aggregates still see
    consumed events (docs/language.md, Consumption).
    """

    def __init__(
        self,
        rule: Rule,
        table: EventTable,
        filters: tuple[tuple[Expr, ...], ...],
        neg_filters: tuple[tuple[Expr, ...], ...],
        agg_filters: tuple[tuple[Expr, ...], ...],
        start: int,
        stop: int,
        stop_ext: int,
        excluded: np.ndarray | None = None,
    ) -> None:
        self.table = table
        n_pred = rule.n_predicates
        self.predicates: list[Column] = []
        by_type: dict[tuple[str, tuple[Expr, ...]], Column] = {}
        for p, pred in enumerate(rule.predicates):
            key = (pred.event_type, filters[p])
            col = by_type.get(key)
            if col is None:
                rows = type_rows(table, pred.event_type, start, stop)
                if excluded is not None and len(rows):
                    rows = rows[~excluded[rows]]
                rows = filter_rows(table, rows, filters[p], p, n_pred)
                col = by_type[key] = self._column(rows)
            self.predicates.append(col)
        self.negations = [
            self._column(filter_rows(table, type_rows(table, n.event_type, start, stop_ext), f, None, n_pred))
            for n, f in zip(rule.negations, neg_filters)
        ]
        self.aggregates = [
            self._column(filter_rows(table, type_rows(table, a.event_type, start, stop_ext), f, None, n_pred))
            for a, f in zip(rule.aggregates, agg_filters)
        ]

    def _column(self, rows: np.ndarray) -> Column:
        rows = np.ascontiguousarray(rows, dtype=np.int64)
        return Column(rows, np.ascontiguousarray(self.table.ts[rows]))
