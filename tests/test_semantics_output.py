"""Semantics, hand-worked: output: several rules, ordering, layout, timestamps.

How the cases are written (worked out by hand first, every backend): tests/semantics_cases.py.
"""

from __future__ import annotations

import pandas as pd
import pyarrow as pa
import pytest
from conftest import id_tuples
from semantics_cases import E, rows

import cep_gpu

# =================================================================================================
# Output: several rules, ordering, layout, timestamps
# =================================================================================================

def test_several_rules_sorted_by_ts_rule_ids(backend):
    # Zed and Alpha produce at the same ts: Alpha first (rule), then ids; ts dominates.
    zed = "define Zed from T() and each X() within 5 s from T"
    alpha = "define Alpha from T() and each X() within 5 s from T"
    ev = E(("X", 1), ("X", 2), ("T", 3), ("T", 4))
    out = cep_gpu.detect(ev, [cep_gpu.parse_rule(zed), cep_gpu.parse_rule(alpha)], backend=backend)
    assert rows(out) == [
        ("Alpha", 3.0, (2, 0)), ("Alpha", 3.0, (2, 1)), ("Zed", 3.0, (2, 0)), ("Zed", 3.0, (2, 1)),
        ("Alpha", 4.0, (3, 0)), ("Alpha", 4.0, (3, 1)), ("Zed", 4.0, (3, 0)), ("Zed", 4.0, (3, 1)),
    ]


def test_output_layout_union_of_attributes(backend):
    # columns: rule, ts, ids (Arrow list<int64>), then every rule's attributes, first seen first;
    # null where a rule does not define one.
    r1 = "define R1(k: int) from T(k=$k) and each X(k=$k) within 5 s from T where k = $k"
    r2 = "define R2(w: string, k: int) from T(k=$k) where w = 'hi', k = T.k * 10"
    ev = E(("X", 1, {"k": 1}), ("T", 2, {"k": 1}))
    out = cep_gpu.detect(ev, r1 + "\n\n" + r2, backend=backend)
    assert list(out.columns) == ["rule", "ts", "ids", "k", "w"]
    assert out["ids"].dtype == pd.ArrowDtype(pa.list_(pa.int64()))
    assert rows(out, "k", "w") == [("R1", 2.0, (1, 0), 1, None), ("R2", 2.0, (1,), 10, "hi")]
    assert [tuple(r) for r in out["ids"]] == [(1, 0), (1,)]

    tab = cep_gpu.detect(ev, r1 + "\n\n" + r2, backend=backend, output="arrow")
    assert isinstance(tab, pa.Table)
    assert tab.schema.names == ["rule", "ts", "ids", "k", "w"]
    assert tab.schema.field("ids").type == pa.list_(pa.int64())
    assert tab.schema.field("rule").type == pa.string()
    assert tab.column("ids").to_pylist() == [[1, 0], [1]]
    assert tab.column("w").to_pylist() == [None, "hi"]

    assert cep_gpu.detect(ev, r1 + "\n\n" + r2, backend=backend, output="count") == {"R1": 1, "R2": 1}


def test_empty_output_keeps_the_layout(backend):
    r1 = "define R1(k: int) from T(k=$k) and each X(k=$k) within 5 s from T where k = $k"
    out = cep_gpu.detect(E(("T", 2, {"k": 1})), r1, backend=backend)
    assert len(out) == 0
    assert list(out.columns) == ["rule", "ts", "ids", "k"]


@pytest.mark.parametrize("ts,unit,within", [
    # integer milliseconds stay integer milliseconds
    ([1000, 2000, 4500], "ms", "1 s"),
    # float minutes stay float minutes
    ([1.0, 2.0, 4.5], "min", "1 min"),
    # datetimes stay datetimes (naive and tz-aware)
    (pd.to_datetime(["2024-01-01 00:00:01.000", "2024-01-01 00:00:02.000", "2024-01-01 00:00:04.500"]), "s", "1 s"),
    (pd.to_datetime(["2024-01-01 00:00:01.000", "2024-01-01 00:00:02.000", "2024-01-01 00:00:04.500"], utc=True),
     "s", "1 s"),
])
def test_output_ts_keeps_the_input_dtype(backend, ts, unit, within):
    # A@t0, B@t1 exactly one unit later (inclusive window) -> match at t1; B@t2 is 3.5 units after.
    rule = f"define AB pattern SEQ(A a, B b) within {within}"
    ev = pd.DataFrame({"type": ["A", "B", "B"], "ts": ts})
    out = cep_gpu.detect(ev, rule, backend=backend, time_unit=unit)
    assert id_tuples(out) == [(0, 1)]
    assert out["ts"].dtype == ev["ts"].dtype
    assert out["ts"].tolist() == [ev["ts"].iloc[1]]


def test_timestamp_reference_is_in_the_input_unit(backend):
    # Y.ts / alias.ts is in the input's time unit (seconds here, the default time_unit), see
    # docs/language.md; tests/test_time_units.py covers the other units and datetime input.
    rule = "define Ts pattern SEQ(A a, B b) where b.ts - a.ts >= 2 within 10 s return d := b.ts - a.ts"
    ev = E(("A", 1), ("B", 2), ("B", 3.5))
    out = cep_gpu.detect(ev, rule, backend=backend)
    assert rows(out, "d") == [("Ts", 3.5, (0, 2), 2.5)]


# =================================================================================================
# Declared attribute types (docs/language.md, "Types")
# =================================================================================================

def test_float_values_of_an_int_attribute_keep_whole_numbers_and_null_the_rest(backend):
    # an int column with a null reaches the rule as floats: its whole numbers keep their value;
    # a fraction, an infinity or a value beyond int64 cannot be an int: null, with a warning
    ev = pd.DataFrame({"type": ["C"] * 5, "ts": [1.0, 2.0, 3.0, 4.0, 5.0],
                       "f": [3.0, None, -1.7, 1e30, float("inf")]})
    with pytest.warns(cep_gpu.CepWarning, match=r"'z' is declared int but 3 of its values .*e\.g\. -1\.7"):
        out = cep_gpu.detect(ev, "define Q(z: int) from C() where z = C.f", backend=backend)
    assert out["z"].tolist()[0] == 3 and out["z"].isna().tolist() == [False, True, True, True, True]
    assert str(out["z"].dtype) == "Int64"


def test_a_declared_type_the_value_cannot_fill_is_refused_before_matching(backend):
    # known from the input's kinds: refused even where no value is built (output="count")
    rules = ("define Good(v: float) from B() and each A() within 5 s from B where v = A.y\n"
             "define Bad(w: bool) from B() and each A() within 5 s from B where w = A.y")
    ev = pd.DataFrame({"type": ["A", "B"], "ts": [1.0, 2.0], "y": [0.5, 0.25]})
    with pytest.raises(cep_gpu.RuleError, match=r"rule 'Bad': attribute 'w' is declared bool but its value is float"):
        cep_gpu.detect(ev, rules, backend=backend, output="count")


def test_two_rules_declaring_one_attribute_with_clashing_types_is_a_rule_error():
    ev = pd.DataFrame({"type": ["A", "B", "C"], "ts": [1.0, 2.0, 3.0], "x": [1, 2, 3]})
    for other in ("string", "bool"):
        rules = (f"define P(v: int) from B() and last A() within 5 s from B where v = A.x\n"
                 f"define Q(v: {other}) from C() where v = {'true' if other == 'bool' else chr(39) + 'hi' + chr(39)}")
        with pytest.raises(cep_gpu.RuleError, match=rf"rule 'Q' declares attribute 'v' as {other}, but rule 'P' declares it as int"):
            cep_gpu.detect(ev, rules, backend="reference")
    # int and float join as float
    rules = ("define P(v: int) from B() and last A() within 5 s from B where v = A.x\n"
             "define Q(v: float) from C() where v = C.x * 0.5")
    out = cep_gpu.detect(ev, rules, backend="reference")
    assert out["v"].tolist() == [1.0, 1.5]


def test_two_rules_giving_one_undeclared_attribute_different_kinds_is_a_rule_error(backend):
    # known from the input's kinds, before any match (was a raw TypeError once the output was built)
    ev = pd.DataFrame({"type": ["A", "B", "C"], "ts": [1.0, 2.0, 3.0], "x": [1, 2, 3], "s": ["a", "b", "c"]})
    rules = ("define P from B() and last A() within 5 s from B where v = A.s\n"
             "define Q from C() and last A() within 5 s from C where v = A.x")
    with pytest.raises(cep_gpu.RuleError, match="rule 'Q' gives attribute 'v' numeric values, but rule 'P' gives it string"):
        cep_gpu.detect(ev, rules, backend=backend)
    engine = cep_gpu.Engine(rules, backend=backend if backend != "gpu-host" else "cpu")
    with pytest.raises(cep_gpu.RuleError, match="gives attribute 'v' numeric values"):
        engine.publish(ev)
    assert engine.stats()["events"] == 0
