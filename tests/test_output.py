"""cep_gpu/output.py: the output schema of several rules and the one output layout."""

from __future__ import annotations

import pandas as pd

import cep_gpu
from cep_gpu.output import OutputSchema


def test_schema_unifies_attributes_first_seen_first():
    rules = cep_gpu.parse_rules(
        "define R1(a: int, b: string) pattern SEQ(A x, B y) within 5 s return a := x.k, b := 'u';\n"
        "define R2(a: float, c: bool) pattern SEQ(B x, A y) within 5 s return a := x.v, c := true"
    )
    schema = OutputSchema.of(rules)
    assert schema.attributes == (("a", "float"), ("b", "string"), ("c", "bool"))
    assert schema.inferred == frozenset()


def test_layout_sorted_by_ts_rule_ids_with_nulls_for_other_rules():
    ev = pd.DataFrame({"type": ["A", "B", "A", "B"], "ts": [1, 2, 3, 4], "k": [1, 2, 3, 4], "v": [0.5] * 4})
    out = cep_gpu.detect(ev, (
        "define R1(a: int) pattern SEQ(A x, B y) within 5 s return a := x.k;\n"
        "define R2(c: bool) pattern SEQ(B x, A y) within 5 s return c := true"
    ), backend="reference")
    assert list(out.columns) == ["rule", "ts", "ids", "a", "c"]
    keys = list(zip(out["ts"], out["rule"], [tuple(i) for i in out["ids"]]))
    assert keys == sorted(keys)
    r1 = out[out["rule"] == "R1"]
    assert r1["c"].isna().all() and r1["a"].notna().all()
    assert str(out["ids"].dtype) == "list<item: int64>[pyarrow]"
