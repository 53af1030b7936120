"""cep_gpu/evaluate.py: vectorised expression values with the null rules of docs/language.md."""

from __future__ import annotations

import numpy as np
import pandas as pd

from cep_gpu.evaluate import condition_mask, evaluate
from cep_gpu.events import EventTable
from cep_gpu.model import Arith, Attr, Compare, Const, Timestamp


def _table():
    return EventTable.from_pandas(pd.DataFrame({
        "type": ["A", "B", "A"], "ts": [1.0, 2.0, 3.0], "x": [4, None, 6], "y": [2.0, 0.0, 0.5],
    }))


def test_arithmetic_nulls_and_division_by_zero():
    t = _table()
    rows = np.array([[0, 1], [2, 1], [1, 0]], np.int64)  # (a, b) row pairs
    v = evaluate(Arith("/", Attr(0, "x"), Attr(1, "y")), t, rows)
    # 4 / 0 and 6 / 0 are null; x of row 1 is null
    assert not v.valid.any()
    w = evaluate(Arith("*", Attr(0, "x"), Attr(0, "y")), t, rows)
    assert w.valid.tolist() == [True, True, False] and w.values[:2].tolist() == [8.0, 3.0]
    assert evaluate(Timestamp(0), t, rows).values.tolist() == [1_000_000_000, 3_000_000_000, 2_000_000_000]


def test_a_null_condition_is_false():
    t = _table()
    rows = np.array([[0], [1], [2]], np.int64)
    assert condition_mask(Compare(">", Attr(0, "x"), Const(4)), t, rows).tolist() == [False, False, True]
    assert condition_mask(Compare("<=", Attr(0, "x"), Const(4)), t, rows).tolist() == [True, False, False]
