"""ColumnStore: static filters per predicate, lookback slicing, excluded rows, parameter index."""

from __future__ import annotations

import numpy as np
import pandas as pd

import cep_gpu
from cep_gpu.codegen import lower
from cep_gpu.columns import Column, ColumnStore, build_key_index
from cep_gpu.events import EventTable

RULE = """define R
from B(v > 1.0 and k=$k) and each A(k=$k and v < 5.0) within 10 s from B
and not C(k=$k) within 3 s from B"""


def table() -> EventTable:
    return EventTable.from_pandas(pd.DataFrame({
        "type": ["A", "A", "C", "A", "B", "B", "A"],
        "ts": [1, 2, 2, 3, 4, 5, 6],
        "k": [1, 2, 1, None, 1, 2, 2],
        "v": [1.0, 9.0, 0.0, 2.0, 2.0, 0.5, 3.0],
    }))


def store(rule, t, start=0, stop=None, excluded=None) -> ColumnStore:
    spec = lower(rule)
    stop = len(t) if stop is None else stop
    return ColumnStore(
        rule, t,
        tuple(tuple(rule.conditions[i] for i in f) for f in spec.filters),
        tuple(tuple(n.conditions[i] for i in f) for n, f in zip(rule.negations, spec.neg_filters)),
        tuple(tuple(a.conditions[i] for i in f) for a, f in zip(rule.aggregates, spec.agg_filters)),
        start, stop, stop, excluded,
    )


def test_columns_hold_rows_passing_static_filters_in_time_order():
    rule, t = cep_gpu.parse_rule(RULE), table()
    s = store(rule, t)
    assert s.predicates[0].rows.tolist() == [4]  # B with v > 1.0
    assert s.predicates[1].rows.tolist() == [0, 3, 6]  # A with v < 5.0 (k null kept: k=$k is not static)
    assert s.predicates[1].ts.tolist() == t.ts[[0, 3, 6]].tolist()
    assert s.negations[0].rows.tolist() == [2]


def test_start_stop_and_excluded_rows():
    rule, t = cep_gpu.parse_rule(RULE), table()
    excluded = np.zeros(len(t), bool)
    excluded[[3, 2]] = True
    s = store(rule, t, start=1, stop=6, excluded=excluded)
    assert s.predicates[1].rows.tolist() == []  # row 0 before start, 3 excluded, 6 past stop
    assert s.negations[0].rows.tolist() == [2]  # negations still see excluded (consumed) events


def test_key_index_groups_by_value_in_time_order_and_drops_nulls():
    t = table()
    rows = np.array([0, 1, 3, 6], np.int64)
    idx = build_key_index(Column(rows, t.ts[rows]), t, "k")
    assert idx.uniq.tolist() == [1, 2]
    assert idx.seg.tolist() == [0, 1, 3]
    assert idx.rows.tolist() == [0, 1, 6]  # row 3 has k null
    assert idx.ts.tolist() == t.ts[[0, 1, 6]].tolist()


def test_key_index_of_missing_attribute_is_empty():
    t = table()
    rows = np.array([0, 1], np.int64)
    idx = build_key_index(Column(rows, t.ts[rows]), t, "nope")
    assert len(idx.uniq) == 0 and idx.seg.tolist() == [0]
