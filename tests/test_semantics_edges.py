"""Semantics, hand-worked: readings docs/language.md states where DESIGN.md is silent, pinned on
every backend (how the cases are written: tests/semantics_cases.py)."""

from __future__ import annotations

import pandas as pd
import pytest
from semantics_cases import E, ids

BIG = 2**53


@pytest.mark.parametrize(
    "rule,expected",
    [
        # an int with a float compares as float64 (docs/language.md, "Comparing an int with a
        # float"): T's k = 2^53 + 1 becomes 2.0^53, so it equals X@1's f and is not above it
        ("define P from T(k=$k) and each X(f=$k) within 5 s from T", [(2, 0)]),
        ("define P from T() and each X(f < T.k) within 5 s from T", [(2, 1)]),
        # two ints compare exactly, as int64
        ("define P from T(k=$k) and each X(n=$k) within 5 s from T", [(2, 1)]),
        ("define P from T() and each X(n < T.k) within 5 s from T", [(2, 0)]),
    ],
)
def test_int_and_float_compare_as_float64(backend, rule, expected):
    ev = E(("X", 1, {"f": float(BIG)}), ("X", 2, {"f": 1.5}), ("T", 4))
    # (nullable int columns: a plain int column with nulls would reach the engine as floats)
    ev["n"] = pd.array([BIG, BIG + 1, None], dtype="Int64")
    ev["k"] = pd.array([None, None, BIG + 1], dtype="Int64")
    assert ids(ev, rule, backend) == expected
