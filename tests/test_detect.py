"""Batch detect (cep_gpu.detect): output layout, dtypes, sort order, output kinds, schema errors."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from conftest import id_tuples

import cep_gpu
from cep_gpu import EventError, RuleError

AB = "define AB(v: float, n: int) from B(x = $k) as b and each A(x = $k) as a within 5 s from b where v = a.y, n = b.x"
C1 = "define One(label: string) from C() as c where label = c.s"

EVENTS = pd.DataFrame({
    "type": ["A", "A", "B", "C", "A", "B"],
    "ts": [0.0, 1.0, 2.0, 2.0, 2.5, 3.0],
    "x": [1, 2, 1, None, 1, 1],
    "y": [0.5, 1.5, None, None, 2.5, None],
    "s": [None, None, None, "hi", None, None],
})


def test_output_columns_dtypes_and_order():
    out = cep_gpu.detect(EVENTS, [cep_gpu.parse_rule(AB), cep_gpu.parse_rule(C1)], backend="reference")
    assert list(out.columns) == ["rule", "ts", "ids", "v", "n", "label"]
    assert out["rule"].tolist() == ["AB", "One", "AB", "AB"]  # by ts, then rule, then ids
    assert out["ts"].tolist() == [2.0, 2.0, 3.0, 3.0]
    assert out["ts"].dtype == np.float64
    assert isinstance(out["ids"].dtype, pd.ArrowDtype)
    assert out["ids"].dtype.pyarrow_dtype == pa.list_(pa.int64())
    assert id_tuples(out) == [(2, 0), (3,), (5, 0), (5, 4)]
    assert tuple(out["ids"].iloc[0]) == (2, 0)
    v = out["v"].tolist()
    assert v[0] == 0.5 and np.isnan(v[1]) and v[2:] == [0.5, 2.5]
    assert out["n"].dtype == pd.Int64Dtype()
    assert out["n"].iloc[0] == 1 and pd.isna(out["n"].iloc[1])
    assert out["label"].tolist()[1] == "hi" and out["label"].isna().tolist() == [True, False, True, True]


def test_attribute_values_and_nulls():
    out = cep_gpu.detect(EVENTS, AB + ";\n" + C1, backend="reference")
    ab = out[out["rule"] == "AB"]
    assert ab["v"].tolist() == [0.5, 0.5, 2.5]
    assert ab["n"].tolist() == [1, 1, 1]
    assert out[out["rule"] == "One"]["v"].isna().all()


def test_sort_order_by_ts_rule_then_ids():
    ev = pd.DataFrame({"type": ["A", "A", "A", "B", "B"], "ts": [0, 0, 1, 2, 2], "x": [1, 1, 1, 1, 1]})
    rules = "define Z from B() as b and each A() as a within 5 s from b;\n" \
            "define Y from B() as b and last A() as a within 5 s from b"
    out = cep_gpu.detect(ev, rules, backend="reference")
    assert list(zip(out["rule"], id_tuples(out))) == [
        ("Y", (3, 2)), ("Y", (4, 2)),
        ("Z", (3, 0)), ("Z", (3, 1)), ("Z", (3, 2)), ("Z", (4, 0)), ("Z", (4, 1)), ("Z", (4, 2)),
    ]
    assert out["ts"].tolist() == [2] * 8 and out["ts"].dtype == np.int64


def test_datetime_ts_round_trip():
    t0 = pd.Timestamp("2024-03-01 08:00:00")
    ev = EVENTS.assign(ts=t0 + pd.to_timedelta(EVENTS["ts"], unit="s"))
    out = cep_gpu.detect(ev, AB, backend="reference")
    assert out["ts"].dtype == "datetime64[ns]"
    assert out["ts"].tolist() == [t0 + pd.Timedelta(seconds=s) for s in (2, 3, 3)]


def test_timezone_round_trip():
    t0 = pd.Timestamp("2024-03-01 08:00:00", tz="America/New_York")
    ev = EVENTS.assign(ts=t0 + pd.to_timedelta(EVENTS["ts"], unit="s"))
    out = cep_gpu.detect(ev, AB, backend="reference")
    assert str(out["ts"].dt.tz) == "America/New_York"
    assert out["ts"].iloc[0] == t0 + pd.Timedelta(seconds=2)


def test_numeric_time_units():
    ev = EVENTS.assign(ts=(EVENTS["ts"] * 1000).astype(np.int64))
    out = cep_gpu.detect(ev, AB, backend="reference", time_unit="ms")
    # window 5 s = 5000 ms: same matches, ts back in ms as int64
    assert id_tuples(out) == [(2, 0), (5, 0), (5, 4)]
    assert out["ts"].tolist() == [2000, 3000, 3000] and out["ts"].dtype == np.int64
    # in minutes the events are too far apart for the 5 s window
    assert len(cep_gpu.detect(EVENTS, AB, backend="reference", time_unit="min")) == 0


def test_explicit_ids_in_output():
    ev = EVENTS.assign(id=[100, 101, 102, 103, 104, 105])
    out = cep_gpu.detect(ev, AB, backend="reference")
    assert id_tuples(out) == [(102, 100), (105, 100), (105, 104)]


def test_empty_output_keeps_the_layout():
    out = cep_gpu.detect(EVENTS.iloc[:2], AB, backend="reference")
    assert list(out.columns) == ["rule", "ts", "ids", "v", "n"] and len(out) == 0
    arrow = cep_gpu.detect(EVENTS.iloc[:2], AB, backend="reference", output="arrow")
    assert arrow.num_rows == 0 and arrow.schema.field("ids").type == pa.list_(pa.int64())


def test_arrow_output():
    table = cep_gpu.detect(EVENTS, AB + ";\n" + C1, backend="reference", output="arrow")
    assert isinstance(table, pa.Table)
    assert table.column_names == ["rule", "ts", "ids", "v", "n", "label"]
    assert table.schema.field("ids").type == pa.list_(pa.int64())
    assert table.schema.field("n").type == pa.int64()
    assert table.schema.field("label").type == pa.string()
    assert table.column("ids").to_pylist() == [[2, 0], [3], [5, 0], [5, 4]]


def test_count_output():
    counts = cep_gpu.detect(EVENTS, AB + ";\n" + C1, backend="reference", output="count")
    assert counts == {"AB": 3, "One": 1}


def test_arrow_input():
    out = cep_gpu.detect(pa.Table.from_pandas(EVENTS), AB, backend="reference")
    assert id_tuples(out) == [(2, 0), (5, 0), (5, 4)]


def test_undeclared_attribute_types_follow_the_values():
    rule = "define U from C() as c where label = c.s, twice = c.x"
    ev = pd.DataFrame({"type": ["C", "C"], "ts": [0, 1], "s": ["p", None], "x": [3, 4]})
    out = cep_gpu.detect(ev, rule, backend="reference")
    assert out["label"].tolist()[0] == "p" and pd.isna(out["label"].iloc[1])
    assert out["twice"].tolist() == [3, 4]


def test_composite_ids_are_negative_and_stable():
    from cep_gpu.detect import composite_ids

    rules = AB + ";\ndefine Twice from B() as b and each AB() as p within 5 s from b"
    out = cep_gpu.detect(EVENTS, rules, backend="reference")
    twice = id_tuples(out, "Twice")
    assert twice == [(5, int(composite_ids("AB", np.array([[2, 0]]))[0]))]
    assert twice[0][1] < 0


# -- errors -----------------------------------------------------------------------------------------


def test_unknown_attribute_is_a_rule_error():
    with pytest.raises(RuleError, match="reads attribute 'colour'"):
        cep_gpu.detect(EVENTS, "define R from A(colour = 'red') as a", backend="reference")


def test_string_ordering_is_a_rule_error():
    with pytest.raises(RuleError, match="strings can only be compared with = and !="):
        cep_gpu.detect(EVENTS, "define R from C(s > 'a') as c", backend="reference")


def test_string_against_number_is_a_rule_error():
    with pytest.raises(RuleError, match="compares a string with a num"):
        cep_gpu.detect(EVENTS, "define R from C(s = 3) as c", backend="reference")


def test_aggregate_of_strings_is_a_rule_error():
    with pytest.raises(RuleError, match="Avg needs a numeric attribute"):
        cep_gpu.detect(EVENTS, "define R from B() as b and m=Avg(C() within 5 s from b).s > 1", backend="reference")


def test_attribute_produced_by_a_rule_is_known():
    rules = "define P(level: float) from A() as a where level = a.y;\n" \
            "define Q from B() as b and each P(level > 1.0) as p within 5 s from b"
    out = cep_gpu.detect(EVENTS, rules, backend="reference")
    assert sorted(id_tuples(out, "Q")) == sorted([(2, _cid("P", 1)), (5, _cid("P", 1)), (5, _cid("P", 4))])


def _cid(rule: str, *ids: int) -> int:
    from cep_gpu.detect import composite_ids

    return int(composite_ids(rule, np.array([ids]))[0])


def test_bad_output_backend_and_events():
    with pytest.raises(ValueError, match="output must be"):
        cep_gpu.detect(EVENTS, AB, backend="reference", output="json")
    with pytest.raises(ValueError, match="unknown backend 'quantum'"):
        cep_gpu.detect(EVENTS, AB, backend="quantum")
    with pytest.raises(EventError, match="pandas DataFrame or a pyarrow Table"):
        cep_gpu.detect([{"type": "A", "ts": 1}], AB, backend="reference")
    with pytest.raises(EventError, match="no 'ts' column"):
        cep_gpu.detect(EVENTS.drop(columns=["ts"]), AB, backend="reference")


@pytest.mark.parametrize(
    "kwargs, words",
    [
        ({"backend": None}, "backend must be a backend name (a str), got None"),
        ({"backend": 3}, "backend must be a backend name (a str), got 3"),
        ({"output": "numpy"}, "output must be 'pandas', 'arrow' or 'count', not 'numpy'"),
        ({"output": None}, "output must be 'pandas', 'arrow' or 'count', not None"),
        ({"rules": None}, "rules must be a Rule, rule text (a str) or a list of them, got NoneType None"),
        ({"rules": 7}, "got int 7"),
        ({"rules": AB.encode()}, "got bytes b'define AB"),
        ({"rules": [AB, None]}, "item 1 of the list is NoneType None"),
        ({"rules": {"AB": AB}}, "got dict"),
    ],
)
def test_bad_arguments_are_argument_errors_naming_them(kwargs, words):
    """They leaked an AttributeError (backend=None), a plain ValueError (output) and TypeErrors
    whose message misled (bytes: "got int")."""
    args = {"rules": AB, "backend": "reference"} | kwargs
    with pytest.raises(cep_gpu.ArgumentError) as err:
        cep_gpu.detect(EVENTS, **args)
    assert words in str(err.value)


def test_rules_may_be_a_list_of_rule_texts_and_rules():
    ab = cep_gpu.detect(EVENTS, AB, backend="reference")
    both = cep_gpu.detect(EVENTS, [AB, cep_gpu.parse_rule(C1)], backend="reference")
    assert both.equals(cep_gpu.detect(EVENTS, AB + ";" + C1, backend="reference"))
    assert both[both["rule"] == "AB"]["ids"].tolist() == ab["ids"].tolist()
    two_in_one = cep_gpu.detect(EVENTS, (AB + "\n\n" + C1,), backend="reference")
    assert two_in_one.equals(both)
    engine = cep_gpu.Engine([AB, C1], backend="reference")
    assert [r.name for r in engine.rules] == ["AB", "One"]
    with pytest.raises(cep_gpu.ArgumentError, match="rules must be"):
        cep_gpu.Engine(None, backend="reference")


def test_cycle_in_hierarchy_is_a_rule_error():
    rules = "define P from Q() as q;\ndefine Q from P() as p"
    with pytest.raises(RuleError, match="cycle"):
        cep_gpu.detect(EVENTS, rules, backend="reference")


def test_output_sorted_by_ts_then_ids_when_ids_run_against_time():
    # ids that do not follow time: CDP's natural order (terminator, then candidates in time) is
    # not (ts, ids) order, so the output must be re-sorted; the fast "already sorted" check must
    # see that, for every backend
    ev = pd.DataFrame({"type": ["A", "A", "A", "B", "B"], "ts": [0, 1, 1, 2, 2], "id": [9, 7, 8, 5, 4]})
    rule = "define Z from B() as b and each A() as a within 5 s from b"
    for backend in ("reference", "cpu"):
        out = cep_gpu.detect(ev, rule, backend=backend)
        assert id_tuples(out) == [(4, 7), (4, 8), (4, 9), (5, 7), (5, 8), (5, 9)], backend


def test_sorted_check_is_lexicographic():
    from cep_gpu.detect import sorted_by_ts_ids

    ids = np.array([[1, 2], [1, 3], [2, 0]], np.int64)
    assert sorted_by_ts_ids(np.array([5, 5, 5], np.int64), ids)
    assert not sorted_by_ts_ids(np.array([5, 5, 5], np.int64), ids[::-1].copy())
    assert sorted_by_ts_ids(np.array([1, 2, 3], np.int64), ids[::-1].copy())  # ts decides first
    assert not sorted_by_ts_ids(np.array([2, 1, 3], np.int64), ids)


def test_a_declared_int_from_a_column_with_nulls_casts_without_a_warning():
    """pandas reads a column of ints with a null as float (NaN): casting NaN to int64 warned
    'invalid value encountered in cast' to every user; the nulls stay nulls."""
    import warnings

    ev = pd.DataFrame({"type": ["A", "B", "A", "B"], "ts": [1.0, 2.0, 3.0, 4.0], "x": [None, None, 2, 3]})
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        out = cep_gpu.detect(ev, "define R(v: int) pattern SEQ(A a, B b) within 5 s return v := a.x",
                             backend="cpu")
    assert out["v"].tolist()[:2] == [pd.NA, pd.NA] and out["v"].tolist()[2] == 2


def test_duplicate_rule_names_across_rule_objects_are_a_rule_error():
    """One text rejects a second `define Q`; Rule objects (one given twice, or two parse_rules
    calls) were not checked, and every Q match came out twice with one composite id."""
    ev = pd.DataFrame({"type": ["A", "B", "C"], "ts": [1.0, 2.0, 3.0]})
    q = cep_gpu.parse_rules("define Q pattern SEQ(A a, B b) within 5 s")
    d = cep_gpu.parse_rules("define D pattern SEQ(Q q, C c) within 5 s")
    for rules in (q + q + d, q + d + cep_gpu.parse_rules("\n  define   Q from C()"),
                  ["define Q pattern SEQ(A a, B b) within 5 s", "define Q from C()"]):
        with pytest.raises(RuleError, match=r"rule 'Q' is defined twice \(rules \d and \d of the \d given\)") as err:
            cep_gpu.detect(ev, rules, backend="reference")
        assert err.value.line is not None and err.value.column is not None
        with pytest.raises(RuleError, match="defined twice"):
            cep_gpu.Engine(rules, backend="reference")
    with pytest.raises(RuleError) as err:
        cep_gpu.detect(ev, q + d + cep_gpu.parse_rules("\n  define   Q from C()"), backend="reference")
    assert (err.value.line, err.value.column) == (2, 12)
    assert len(cep_gpu.detect(ev, q + d, backend="reference")) == 2
