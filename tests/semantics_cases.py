"""Helpers of the hand-worked semantic cases (tests/test_semantics_*.py): events from tuples, and
the ids and rows of an output.

Every expected result in those files was worked out by hand from docs/language.md
("Semantics", "Names and references") *before* running the code; the comment of each case says
why. The cases go through the public API (rule text -> ``cep_gpu.detect``) on every backend of
``tests/conftest.py``. To keep the Numba compile cost of the ``cpu`` backend down, many cases share
one rule text (kernels are cached per rule) and vary only the events.

Conventions: event ids are the row positions of the input frame (``id`` column only where a case
says so); rows are written in timestamp order so that ids follow time. Times are seconds unless a
case says otherwise. Expected ids are tuples in declaration order (TESLA: terminator first; SEQ:
pattern order), listed in output order (ts, rule, ids).
"""

from __future__ import annotations

import pandas as pd
from conftest import id_tuples

import cep_gpu


def E(*rows) -> pd.DataFrame:
    """Events from ``(type, ts)`` or ``(type, ts, attrs)`` tuples; ids are the row positions."""
    data = []
    for row in rows:
        t, ts = row[0], row[1]
        attrs = row[2] if len(row) > 2 else {}
        data.append({"type": t, "ts": ts, **attrs})
    return pd.DataFrame(data)


def ids(events, rules, backend, **kw) -> list[tuple[int, ...]]:
    return id_tuples(cep_gpu.detect(events, rules, backend=backend, **kw))


def rows(out: pd.DataFrame, *cols) -> list[tuple]:
    """(rule, ts, ids, *cols) of each output row, nulls as None."""
    res = []
    for _, r in out.iterrows():
        extra = tuple(None if isnull(r[c]) else r[c] for c in cols)
        res.append((r["rule"], r["ts"], tuple(int(i) for i in r["ids"]), *extra))
    return res


def isnull(v) -> bool:
    try:
        return bool(pd.isna(v))
    except (TypeError, ValueError):
        return False


#: shared by several files
SEQ_AB = "define AB pattern SEQ(A a, B b) within 10 s"

# V@0 k1 v10 (outside [1,6)), V@1 k1 v2 (edge), V@3 k1 v=null, V@4 k2 v100 (other k), V@5 k1 v6,
# V@6 k1 v50 (same ts as T@6: not before), T@6 k1, T@20 k1 (empty span [15, 20))
TESLA_AGG_EVENTS = E(
    ("V", 0, {"k": 1, "v": 10.0}), ("V", 1, {"k": 1, "v": 2.0}), ("V", 3, {"k": 1, "v": None}),
    ("V", 4, {"k": 2, "v": 100.0}), ("V", 5, {"k": 1, "v": 6.0}), ("V", 6, {"k": 1, "v": 50.0}),
    ("T", 6, {"k": 1}), ("T", 20, {"k": 1}),
)
